use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    let (a, b) = (x, x);
    a * b
}

fn main() {}
