use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 2, 2, 2, 2, 2>) -> Tensor<f16, 2, 2, 2, 2, 2> {
    exp(x)
}

fn main() {}
