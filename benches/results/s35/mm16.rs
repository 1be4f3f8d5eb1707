use mirage::prelude::*;
#[mugraph]
pub fn mm16(x: Tensor<bf16, 16, 3584>, w: Tensor<bf16, 3584, 4608>) -> Tensor<bf16, 16, 4608> {
    x.matmul(w)
}
#[mugraph]
pub fn nmm16(x: Tensor<bf16, 16, 3584>, w: Tensor<bf16, 3584, 4608>) -> Tensor<bf16, 16, 4608> {
    rms_norm(x).matmul(w)
}
