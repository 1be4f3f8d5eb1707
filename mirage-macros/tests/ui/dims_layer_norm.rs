use mirage_macros::mugraph;

#[mugraph(dims(S = 1..=4096))]
fn f(x: Tensor<f32, 8, S>) -> Tensor<f32, 8, S> {
    layer_norm(x, 1e-5)
}

fn main() {}
