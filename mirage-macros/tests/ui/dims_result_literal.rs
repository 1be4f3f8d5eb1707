use mirage_macros::mugraph;

#[mugraph(dims(B = 1..=64))]
fn f(x: Tensor<f16, B, 64>, w: Tensor<f16, 64, 32>) -> Tensor<f16, 64, 32> {
    x.matmul(w)
}

fn main() {}
