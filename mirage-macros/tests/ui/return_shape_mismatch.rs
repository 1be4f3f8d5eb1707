use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>, w: Tensor<f16, 64, 32>) -> Tensor<f16, 8, 64> {
    x.matmul(w)
}

fn main() {}
