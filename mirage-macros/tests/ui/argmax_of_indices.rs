use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 16, 64>) -> Tensor<i32, 1, 1> {
    argmax(x.argmax(1), 0)
}

fn main() {}
