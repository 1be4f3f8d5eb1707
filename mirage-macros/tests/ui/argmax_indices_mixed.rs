use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 16, 64>, bias: Tensor<f16, 16, 1>) -> Tensor<f16, 16, 1> {
    x.argmax(1) + bias
}

fn main() {}
