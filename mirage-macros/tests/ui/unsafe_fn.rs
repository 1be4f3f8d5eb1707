use mirage_macros::mugraph;

#[mugraph]
unsafe fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    exp(x)
}

fn main() {}
