use mirage_macros::mugraph;

#[mugraph]
fn f(q: Tensor<f16, 8, 128>, cos: Tensor<f32, 8, 64>, sin: Tensor<f32, 8, 64>) -> Tensor<f16, 8, 128> {
    q.rope_interleaved(cos, sin)
}

fn main() {}
