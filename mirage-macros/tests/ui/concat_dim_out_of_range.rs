use mirage_macros::mugraph;

#[mugraph]
fn f(a: Tensor<f16, 8, 64>, b: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 128> {
    concat(a, b, 3)
}

fn main() {}
