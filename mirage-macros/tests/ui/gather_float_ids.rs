use mirage_macros::mugraph;

#[mugraph]
fn f(emb: Tensor<f16, 1000, 64>, ids: Tensor<f32, 8>) -> Tensor<f16, 8, 64> {
    gather(emb, ids)
}

fn main() {}
