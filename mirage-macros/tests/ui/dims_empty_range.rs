use mirage_macros::mugraph;

#[mugraph(dims(B = 9..=8))]
fn f(x: Tensor<f16, B, 64>) -> Tensor<f16, B, 64> {
    exp(x)
}

fn main() {}
