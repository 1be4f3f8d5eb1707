use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>) -> Tensor<f16, 64, 8> {
    x.transpose()
}

fn main() {}
