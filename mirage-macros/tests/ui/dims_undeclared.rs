use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, B, 64>) -> Tensor<f16, B, 64> {
    exp(x)
}

fn main() {}
