use mirage_macros::mugraph;

#[mugraph(dims(x = 1..=8))]
fn f(x: Tensor<f16, x, 64>) -> Tensor<f16, x, 64> {
    exp(x)
}

fn main() {}
