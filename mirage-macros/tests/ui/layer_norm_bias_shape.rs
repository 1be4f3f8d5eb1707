use mirage_macros::mugraph;

#[mugraph]
fn f(x: Tensor<f16, 8, 64>, w: Tensor<f16, 1, 64>, b: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    layer_norm_weighted(x, w, b, 1e-5)
}

fn main() {}
