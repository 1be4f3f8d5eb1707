use mirage_macros::mugraph;

// An empty bucket list.
#[mugraph(dims(B = 1..=64, C = 1..=8), buckets(B = []))]
fn f(x: Tensor<f16, B, 64>, y: Tensor<f16, C, 64>) -> Tensor<f16, B, 64> {
    x + exp(y).reduce_sum(0)
}

fn main() {}
