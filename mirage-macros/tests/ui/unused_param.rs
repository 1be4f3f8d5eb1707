use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>, bias: Tensor<f16, 1, 64>) -> Tensor<f16, 8, 64> {
    exp(x)
}

fn main() {}
