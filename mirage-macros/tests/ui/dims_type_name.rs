use mirage_macros::mugraph;

#[mugraph(dims(f16 = 1..=8))]
fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    exp(x)
}

fn main() {}
