use mirage_macros::mugraph;

#[mugraph]
fn f(emb: Tensor<f16, 10, 100, 64>, ids: Tensor<i32, 8>) -> Tensor<f16, 8, 64> {
    gather(emb, ids)
}

fn main() {}
