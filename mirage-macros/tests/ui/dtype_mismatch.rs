use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>, w: Tensor<bf16, 64, 64>) -> Tensor<f16, 8, 64> {
    matmul(x, w)
}

fn main() {}
