use mirage_macros::mugraph;

#[mugraph(dims(B = 1..=64))]
fn f(x: Tensor<f16, B, 64>, y: Tensor<f16, 8, 64>) -> Tensor<f16, 72, 64> {
    concat(x, y, 0)
}

fn main() {}
