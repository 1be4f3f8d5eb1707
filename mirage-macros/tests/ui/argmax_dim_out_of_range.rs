use mirage_macros::mugraph;

#[mugraph]
fn f(logits: Tensor<f32, 1, 32000>) -> Tensor<i32, 1, 1> {
    argmax(logits, 2)
}

fn main() {}
