use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    let y = exp(x);
    y * z
}

fn main() {}
