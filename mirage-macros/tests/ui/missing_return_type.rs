use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>) {
    exp(x)
}

fn main() {}
