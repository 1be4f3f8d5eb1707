use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    gelu_tanh(x, x)
}

fn main() {}
