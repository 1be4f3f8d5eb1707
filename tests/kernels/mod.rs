//! One `#[mugraph]` function per operator of the language (and per signature feature: strided
//! parameters, tuple results, bf16, f32, mixed element types, `i32` ids in and indices out), built by the root build.rs with
//! `mirage::build::compile` like a user's kernels. That this module compiles is the "pass" test
//! of the macro for every operator (the expansion needs the real artifacts, so these are compiled
//! here rather than by trybuild, whose fixture crates have no build script); `tests/mugraph.rs`
//! checks the launchers' signatures and shape errors without a GPU and runs every program against
//! the CPU reference on one.
//!
//! Inputs of the GPU test are uniform in [-1, 1): operators undefined there (sqrt, recip, pow of
//! a negative base) take `exp` or `square` of their operand.
// Each test uses some of the programs.
#![allow(dead_code)]

use mirage::prelude::*;

/// `x @ w`.
#[mugraph]
pub fn op_matmul(x: Tensor<f16, 16, 64>, w: Tensor<f16, 64, 32>) -> Tensor<f16, 16, 32> {
    x.matmul(w)
}

/// Batched `a @ b`.
#[mugraph]
pub fn op_matmul_batched(a: Tensor<f16, 2, 16, 64>, b: Tensor<f16, 2, 64, 32>) -> Tensor<f16, 2, 16, 32> {
    matmul(a, b)
}

/// `x @ w` with a column-major `w`.
#[mugraph]
pub fn op_matmul_strided(x: Tensor<f16, 16, 64>, #[strides(1, 64)] w: Tensor<f16, 64, 32>) -> Tensor<f16, 16, 32> {
    x.matmul(w)
}

/// `exp(x)`.
#[mugraph]
pub fn op_exp(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    exp(x)
}

/// `square(x)`.
#[mugraph]
pub fn op_square(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    x.square()
}

/// `sqrt(x²)`.
#[mugraph]
pub fn op_sqrt(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    sqrt(square(x))
}

/// `silu(x)`.
#[mugraph]
pub fn op_silu(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    silu(x)
}

/// `gelu(x)`.
#[mugraph]
pub fn op_gelu(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    gelu(x)
}

/// `relu(x)`.
#[mugraph]
pub fn op_relu(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    relu(x)
}

/// `-x` and `neg(x)`.
#[mugraph]
pub fn op_neg(x: Tensor<f16, 16, 64>) -> (Tensor<f16, 16, 64>, Tensor<f16, 16, 64>) {
    (-x, neg(x))
}

/// `recip(exp(x))`.
#[mugraph]
pub fn op_recip(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    recip(exp(x))
}

/// `clamp(x, -0.5, 0.5)`.
#[mugraph]
pub fn op_clamp(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    clamp(x, -0.5, 0.5)
}

/// Scalars: `2 * x / 4`.
#[mugraph]
pub fn op_scalar(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    2.0 * x / 4.0
}

/// `a + b`.
#[mugraph]
pub fn op_add(a: Tensor<f16, 16, 64>, b: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    a + b
}

/// `a - b`.
#[mugraph]
pub fn op_sub(a: Tensor<f16, 16, 64>, b: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    a - b
}

/// `a * b`.
#[mugraph]
pub fn op_mul(a: Tensor<f16, 16, 64>, b: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    a * b
}

/// `a / exp(b)`.
#[mugraph]
pub fn op_div(a: Tensor<f16, 16, 64>, b: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    a / exp(b)
}

/// `pow(exp(a), b)`.
#[mugraph]
pub fn op_pow(a: Tensor<f16, 16, 64>, b: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    pow(exp(a), b)
}

/// Size-1 broadcasting: `x + row * col`.
#[mugraph]
pub fn op_broadcast(x: Tensor<f16, 16, 64>, row: Tensor<f16, 1, 64>, col: Tensor<f16, 16, 1>) -> Tensor<f16, 16, 64> {
    x + row * col
}

/// `x.sum(1)` and `reduce_sum(x, 0)`.
#[mugraph]
pub fn op_sum(x: Tensor<f16, 16, 64>) -> (Tensor<f16, 16, 1>, Tensor<f16, 1, 64>) {
    (x.sum(1), reduce_sum(x, 0))
}

/// `x.max(1)`.
#[mugraph]
pub fn op_max(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 1> {
    x.max(1)
}

/// `rms_norm(x, 1e-6)`.
#[mugraph]
pub fn op_rms_norm(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    rms_norm(x, 1e-6)
}

/// `rms_norm_weighted(x, g)`.
#[mugraph]
pub fn op_rms_norm_weighted(x: Tensor<f16, 16, 64>, g: Tensor<f16, 1, 64>) -> Tensor<f16, 16, 64> {
    rms_norm_weighted(x, g)
}

/// `concat(a, b, 1)`.
#[mugraph]
pub fn op_concat(a: Tensor<f16, 16, 32>, b: Tensor<f16, 16, 32>) -> Tensor<f16, 16, 64> {
    concat(a, b, 1)
}

/// `softmax(x, 1)`: the safe softmax, `exp(x - max(x, 1)) / sum(exp(x - max(x, 1)), 1)`.
#[mugraph]
pub fn op_softmax(x: Tensor<f16, 16, 64>) -> Tensor<f16, 16, 64> {
    softmax(x, 1)
}

/// `gather(table, ids)`: the rows of an embedding table at `i32` ids.
#[mugraph]
pub fn op_gather(table: Tensor<f16, 64, 32>, ids: Tensor<i32, 8>) -> Tensor<f16, 8, 32> {
    gather(table, ids)
}

/// `argmax(x, 1)`: the `i32` index of each row's largest element.
#[mugraph]
pub fn op_argmax(x: Tensor<f16, 16, 64>) -> Tensor<i32, 16, 1> {
    argmax(x, 1)
}

/// A bf16 program.
#[mugraph]
pub fn op_bf16(x: Tensor<bf16, 16, 64>, w: Tensor<bf16, 64, 32>) -> Tensor<bf16, 16, 32> {
    silu(x.matmul(w))
}

/// An f32 program.
#[mugraph]
pub fn op_f32(x: Tensor<f32, 16, 64>, w: Tensor<f32, 64, 32>) -> Tensor<f32, 16, 32> {
    x.matmul(w) * 0.5
}

/// Parameters and results of different element types.
#[mugraph]
pub fn op_mixed(a: Tensor<bf16, 16, 64>, b: Tensor<f32, 8, 32>) -> (Tensor<bf16, 16, 1>, Tensor<f32, 8, 32>) {
    (a.sum(1), exp(b))
}

/// In an inline module (artifact names do not depend on the module path).
pub mod nested {
    use mirage::prelude::*;

    /// `x * y`.
    #[mugraph]
    pub fn op_nested(x: Tensor<f16, 4, 8>, y: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> {
        x * y
    }
}

/// A projection with its pre-norm and residual (a transformer's attention output at decode):
/// `x` is read as a whole row by the norm and as a tile by the residual add.
#[mugraph]
pub fn op_residual(
    x: Tensor<bf16, 1, 2048>,
    g: Tensor<bf16, 1, 2048>,
    w: Tensor<bf16, 2048, 2048>,
) -> Tensor<bf16, 1, 2048> {
    x + (rms_norm(x) * g).matmul(w)
}

/// The MLP's down projection of the SiLU-gated product with its residual, 1 row (the residual
/// joins a pipelined loop's epilogue).
#[mugraph]
pub fn op_down_residual_r1(
    x: Tensor<bf16, 1, 2048>,
    a: Tensor<bf16, 1, 8192>,
    b: Tensor<bf16, 1, 8192>,
    w: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 1, 2048> {
    x + (silu(a) * b).matmul(w)
}

/// The same at 16 rows.
#[mugraph]
pub fn op_down_residual_r16(
    x: Tensor<bf16, 16, 2048>,
    a: Tensor<bf16, 16, 8192>,
    b: Tensor<bf16, 16, 8192>,
    w: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 16, 2048> {
    x + (silu(a) * b).matmul(w)
}

/// The gated MLP over a batch chosen at launch: `silu(x @ w1) * (x @ w2)` for any `B` in
/// 1..=64 rows (built once, at 64; the kernels take `B` as a parameter).
#[mugraph(dims(B = 1..=64), buckets(B = [64]))]
pub fn op_gated_mlp_over_b(
    x: Tensor<f16, B, 256>,
    w1: Tensor<f16, 256, 512>,
    w2: Tensor<f16, 256, 512>,
) -> Tensor<f16, B, 512> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// Safe-softmax decode attention over a key length chosen at launch: 4 heads of one query row,
/// head dim 64, bf16, `S` in 1..=8192 keys (K as `[heads, dim, S]`, V as `[heads, S, dim]`),
/// built once at 8192 (the kernels take `S` as a parameter: masked key tiles, a runtime trip
/// count, the key ranges that hold keys).
#[mugraph(dims(S = 1..=8192), buckets(S = [8192]))]
pub fn op_attention_over_s(
    q: Tensor<bf16, 4, 1, 64>,
    k: Tensor<bf16, 4, 64, S>,
    v: Tensor<bf16, 4, S, 64>,
) -> Tensor<bf16, 4, 1, 64> {
    let s = q.matmul(k) * 0.125;
    softmax(s, 2).matmul(v)
}

/// The same over `B` in 1..=64 built as the default size buckets (1, 2..=8, 9..=16, 17..=32,
/// 33..=64, each at its upper bound): a call runs the bucket holding its `B`.
#[mugraph(dims(B = 1..=64))]
pub fn op_gated_mlp_over_b_buckets(
    x: Tensor<f16, B, 256>,
    w1: Tensor<f16, 256, 512>,
    w2: Tensor<f16, 256, 512>,
) -> Tensor<f16, B, 512> {
    silu(x.matmul(w1)) * x.matmul(w2)
}
