use mirage_macros::mugraph;

#[mugraph]
fn f(a: Tensor<i32, 8, 64>, b: Tensor<i32, 64, 16>) -> Tensor<i32, 8, 16> {
    a.matmul(b)
}

fn main() {}
