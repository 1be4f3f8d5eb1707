use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>, b: Tensor<f16, 64>) -> Tensor<f16, 8, 64> {
    x + b
}

fn main() {}
