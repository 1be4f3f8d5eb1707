use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f64, 8, 64>) -> Tensor<f64, 8, 64> {
    exp(x)
}

fn main() {}
