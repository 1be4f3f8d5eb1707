//! The runtime-sized-dims rows of the GPU bench (`benches/gpu.rs`, group `dims`): the benchmark's
//! gated MLP (f16, 4096 × 4096 weights) for any batch `B` in 1..=64 built once (at 64), built as
//! the default size buckets (1, 2..=8, 9..=16, 17..=32, 33..=64, each at its upper bound), and
//! fixed-shape builds of it at 17 and 64 rows (the examples' `gated_mlp_bs1` and `gated_mlp_bs8` are the
//! fixed builds at 1 and 8). Built by the root build.rs with `MIRAGE_DIMS_BENCH=1`: verifying the
//! B-sized µGraph over its range at these shapes takes minutes of CPU time.
// The bench uses the programs through their modules.
#![allow(dead_code)]

use mirage::prelude::*;

/// `silu(X @ W1) * (X @ W2)` for any batch `B` in 1..=64 (one build, at 64, sized at launch).
#[mugraph(dims(B = 1..=64), buckets(B = [64]))]
pub fn gated_mlp_over_b(
    x: Tensor<f16, B, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, B, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)` for any batch `B` in 1..=64, built as the default size buckets
/// (1, 8, 16, 32, 64): a call runs the bucket holding its `B`.
#[mugraph(dims(B = 1..=64))]
pub fn gated_mlp_over_b_buckets(
    x: Tensor<f16, B, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, B, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 17.
#[mugraph]
pub fn gated_mlp_bs17(
    x: Tensor<f16, 17, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 17, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 64.
#[mugraph]
pub fn gated_mlp_bs64(
    x: Tensor<f16, 64, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 64, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}
