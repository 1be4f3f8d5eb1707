use mirage_macros::mugraph;

// A bound outside the dim's range.
#[mugraph(dims(B = 1..=64, C = 1..=8), buckets(C = [4, 16]))]
fn f(x: Tensor<f16, B, 64>, y: Tensor<f16, C, 64>) -> Tensor<f16, B, 64> {
    x + exp(y).reduce_sum(0)
}

fn main() {}
