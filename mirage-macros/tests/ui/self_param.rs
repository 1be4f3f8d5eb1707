use mirage_macros::mugraph;

struct Layer;

impl Layer {
    #[mugraph]
    fn f(&self, x: Tensor<f16, 8, 64>) -> Tensor<f16, 8, 64> {
        exp(x)
    }
}

fn main() {}
