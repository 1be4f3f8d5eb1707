//! The runtime-sized-dims rows of the GPU bench (`benches/gpu.rs`, group `dims`): the benchmark's
//! gated MLP (f16, 4096 × 4096 weights) for any batch `B` in 1..=64 built once (at 64), built as
//! seven size buckets (1, 2..=8, 9..=16, 17..=24, 25..=32, 33..=48, 49..=64, each searched for its whole
//! sub-range), and fixed-shape builds of it at every other size the bench runs (2, 3, 17, 31, 33,
//! 48, 63 and 64 rows; the examples' `gated_mlp_bs1` and `gated_mlp_bs8` are the fixed builds at 1
//! and 8); and decode attention at issue 16's shape (32 query heads of one row, head dim 128, bf16,
//! safe softmax, scale 1/√128, K as `[heads, dim, S]`, V as `[heads, S, dim]`) for any key length
//! `S` in 1..=32768 built once and as the default size buckets (twelve, 2× apart to 4096), beside
//! fixed-shape builds of the same program at every size the bench runs (S = 1, 3, 16, 17, 255,
//! 256, 512, 4096, 4097, 8191, 16384, 32767 and 32768; same layouts). Built by the root build.rs with
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

/// `silu(X @ W1) * (X @ W2)` for any batch `B` in 1..=64, built as seven size buckets (1, 2..=8,
/// 9..=16, 17..=24, 25..=32, 33..=48, 49..=64): a call runs the bucket holding its `B`. The
/// default ladder (1, 8, 16, 32, 64) with bounds added where the fixed builds' µGraph family
/// steps: at 48 (45–52 µs at 33–48 rows, 76 at 63–64; DECISIONS change 61) and at 24 (the fixed
/// B = 17 is one kernel, 45 µs on the H100, where 17..=32 chose the split-K of 31–32 rows, 53 µs
/// at 17; change 68).
#[mugraph(dims(B = 1..=64), buckets(B = [1, 8, 16, 24, 32, 48, 64]))]
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

/// Decode attention for any key length `S` in 1..=32768 built as the default size buckets (1,
/// 2..=8, 9..=16, 17..=32, 33..=64, then doubling to 2049..=4096, and 4097..=32768: twelve, each
/// ranked over its sub-range): a call runs the bucket holding its `S`. DECISIONS change 62: with
/// buckets 4× apart (16, 64, 256, 1024, 4096, 32768) it ran 1.16–1.32× the fixed builds at 17,
/// 256, 512 and 4096 keys.
#[mugraph(dims(S = 1..=32768))]
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

/// `silu(X @ W1) * (X @ W2)`, batch 2.
#[mugraph]
pub fn gated_mlp_bs2(
    x: Tensor<f16, 2, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 2, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 3.
#[mugraph]
pub fn gated_mlp_bs3(
    x: Tensor<f16, 3, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 3, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 31.
#[mugraph]
pub fn gated_mlp_bs31(
    x: Tensor<f16, 31, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 31, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 33.
#[mugraph]
pub fn gated_mlp_bs33(
    x: Tensor<f16, 33, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 33, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 48.
#[mugraph]
pub fn gated_mlp_bs48(
    x: Tensor<f16, 48, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 48, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 63.
#[mugraph]
pub fn gated_mlp_bs63(
    x: Tensor<f16, 63, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 63, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// Decode attention, 1 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s1(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 1>,
    v: Tensor<bf16, 32, 1, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 3 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s3(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 3>,
    v: Tensor<bf16, 32, 3, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 16 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s16(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 16>,
    v: Tensor<bf16, 32, 16, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 17 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s17(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 17>,
    v: Tensor<bf16, 32, 17, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 255 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s255(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 255>,
    v: Tensor<bf16, 32, 255, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 256 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s256(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 256>,
    v: Tensor<bf16, 32, 256, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 4097 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s4097(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 4097>,
    v: Tensor<bf16, 32, 4097, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 8191 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s8191(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 8191>,
    v: Tensor<bf16, 32, 8191, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 16384 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s16384(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 16384>,
    v: Tensor<bf16, 32, 16384, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 32767 keys (the fixed-shape build beside `attn_decode_over_s`).
#[mugraph]
pub fn attn_decode_s32767(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 32767>,
    v: Tensor<bf16, 32, 32767, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}
