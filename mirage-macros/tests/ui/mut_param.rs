use mirage_macros::mugraph;

#[mugraph]
fn f(mut x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    exp(x)
}

fn main() {}
