use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 1> {
    x.max(1.0)
}

fn main() {}
