use mirage_macros::mugraph;

#[mugraph]
fn f(ids: Tensor<i32, 8>, emb: Tensor<f16, 100, 64>) -> Tensor<f16, 8, 64> {
    gather(emb, ids) * sum(ids * 2.0, 0)
}

fn main() {}
