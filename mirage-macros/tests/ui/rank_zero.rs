use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16>) -> Tensor<f16> {
    exp(x)
}

fn main() {}
