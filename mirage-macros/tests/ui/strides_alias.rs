use mirage_macros::mugraph;

#[mugraph]
fn f(#[strides(1, 32)] w: Tensor<f16, 64, 32>) -> Tensor<f16, 64, 32> {
    exp(w)
}

fn main() {}
