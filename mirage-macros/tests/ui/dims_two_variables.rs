use mirage_macros::mugraph;

// Two variables of the same range are still two sizes.
#[mugraph(dims(B = 1..=64, C = 1..=64))]
fn f(x: Tensor<f16, B, 64>, y: Tensor<f16, C, 64>) -> Tensor<f16, B, 64> {
    x + y
}

fn main() {}
