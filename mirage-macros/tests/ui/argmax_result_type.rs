use mirage_macros::mugraph;

#[mugraph]
fn f(logits: Tensor<f32, 1, 32000>) -> Tensor<f32, 1, 1> {
    logits.argmax(1)
}

fn main() {}
