use mirage_macros::mugraph;

#[mugraph(dims(V = 1..=1024))]
fn f(table: Tensor<f16, V, 64>, ids: Tensor<i32, 8>) -> Tensor<f16, 8, 64> {
    gather(table, ids)
}

fn main() {}
