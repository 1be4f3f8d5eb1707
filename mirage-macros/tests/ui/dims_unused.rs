use mirage_macros::mugraph;

#[mugraph(dims(B = 1..=8, S = 1..=128))]
fn f(x: Tensor<f16, B, 64>) -> Tensor<f16, B, 64> {
    exp(x)
}

fn main() {}
