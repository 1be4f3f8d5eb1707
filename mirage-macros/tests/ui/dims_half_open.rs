use mirage_macros::mugraph;

#[mugraph(dims(B = 1..64))]
fn f(x: Tensor<f16, B, 64>) -> Tensor<f16, B, 64> {
    exp(x)
}

fn main() {}
