//! The runtime-sized-dims rows of the GPU bench (`benches/gpu.rs`, group `dims`): the benchmark's
//! gated MLP (f16, 4096 × 4096 weights) for any batch `B` in 1..=64 built once (at 64), built as
//! the default size buckets (1, 2..=8, 9..=16, 17..=32, 33..=64, each at its upper bound), and
//! fixed-shape builds of it at 17 and 64 rows (the examples' `gated_mlp_bs1` and `gated_mlp_bs8` are the
//! fixed builds at 1 and 8); and decode attention at issue 16's shape (32 query heads of one row,
//! head dim 128, bf16, safe softmax, scale 1/√128, K as `[heads, dim, S]`, V as `[heads, S, dim]`)
//! for any key length `S` in 1..=32768 built once (at 32768) and as three size buckets (512, 4096,
//! 32768), beside fixed-shape builds of the same
//! program at S = 512, 4096 and 32768 (same layouts). Built by the root build.rs with
//! `MIRAGE_DIMS_BENCH=1`: verifying these µGraphs over their ranges at these shapes takes minutes
//! of CPU time.
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

/// Decode attention for any key length `S` in 1..=32768 (one build, at 32768, sized at launch):
/// 32 heads of one query row, head dim 128, bf16, `softmax(q·k / √128, last)·v`.
#[mugraph(dims(S = 1..=32768), buckets(S = [32768]))]
pub fn attn_decode_over_s(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, S>,
    v: Tensor<bf16, 32, S, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention for any key length `S` in 1..=32768 built as three size buckets (1..=512,
/// 513..=4096, 4097..=32768, each searched at its upper bound): a call runs the bucket holding
/// its `S`.
#[mugraph(dims(S = 1..=32768), buckets(S = [512, 4096, 32768]))]
pub fn attn_decode_over_s_buckets(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, S>,
    v: Tensor<bf16, 32, S, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 512 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s512(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 512>,
    v: Tensor<bf16, 32, 512, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 4096 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s4096(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 4096>,
    v: Tensor<bf16, 32, 4096, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 32768 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s32768(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 32768>,
    v: Tensor<bf16, 32, 32768, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}
