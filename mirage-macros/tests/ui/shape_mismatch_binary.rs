use mirage_macros::mugraph;

#[mugraph]
fn f(a: Tensor<f16, 8, 64>, b: Tensor<f16, 8, 32>) -> Tensor<f16, 8, 64> {
    let y = silu(a);
    y * b
}

fn main() {}
