use mirage_macros::mugraph;

#[mugraph]
fn f(q: Tensor<f16, 8, 96>, cos: Tensor<f16, 8, 64>, sin: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 96> {
    rope(q, cos, sin)
}

fn main() {}
