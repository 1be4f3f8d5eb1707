// A checked #[mugraph] function in a package without a build script (OUT_DIR unset): the
// expansion tells the user what to add.
use mirage_macros::mugraph;

#[mugraph]
fn scale(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    x * 2.0
}

fn main() {}
