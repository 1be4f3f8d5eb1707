use mirage_macros::mugraph;

// The product of the bucket lists over the cap.
#[mugraph(dims(B = 1..=64, C = 1..=8), buckets(B = [1, 2, 4, 8, 16, 32, 64], C = [1, 2, 4, 8]))]
fn f(x: Tensor<f16, B, 64>, y: Tensor<f16, C, 64>) -> Tensor<f16, B, 64> {
    x + exp(y).reduce_sum(0)
}

fn main() {}
