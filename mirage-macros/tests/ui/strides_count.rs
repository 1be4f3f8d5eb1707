use mirage_macros::mugraph;

#[mugraph]
fn f(#[strides(1)] w: Tensor<f16, 64, 32>) -> Tensor<f16, 64, 32> {
    exp(w)
}

fn main() {}
