// `$OUT_DIR/mirage/` holds no artifact of `not_listed` at all: its file is not listed in
// mirage::build::compile.
use mirage_macros::mugraph;

#[mugraph]
fn not_listed(x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
    x * 2.0
}

fn main() {}
