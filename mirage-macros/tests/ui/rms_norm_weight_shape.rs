use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>, g: Tensor<f16, 64>) -> Tensor<f16, 8, 64> {
    rms_norm_weighted(x, g, 1e-6)
}

fn main() {}
