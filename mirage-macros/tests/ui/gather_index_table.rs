use mirage_macros::mugraph;

#[mugraph]
fn f(table: Tensor<i32, 100, 4>, ids: Tensor<i32, 8>) -> Tensor<i32, 8, 4> {
    gather(table, ids)
}

fn main() {}
