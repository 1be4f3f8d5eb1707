use mirage_macros::mugraph;

// B's upper bound is 64, but B is not the literal 64: at B = 17 the shapes would not match.
#[mugraph(dims(B = 1..=64))]
fn f(x: Tensor<f16, 8, B>, w: Tensor<f16, 64, 32>) -> Tensor<f16, 8, 32> {
    x.matmul(w)
}

fn main() {}
