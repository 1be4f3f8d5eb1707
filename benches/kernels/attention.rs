//! The decode-attention group of the GPU benchmark (issue 15): one step of decoding with the
//! safe softmax (the DSL's `softmax` subtracts the row maximum) as people write it,
//! `softmax(q·k / √d, last)·v`, with K laid out `[heads, d, keys]` (`q.matmul(k)` needs it so):
//!
//! - `attn_decode_h32_n4096_d128_*`: 32 heads of one query row, 4096 keys, head dim 128, in bf16
//!   and f16 (split-KV: `search::attention`, f32 partial results);
//! - `attn_gqa_kv8_g4_n4096_d128_bf16`: grouped-query attention, 8 KV heads of 4 query heads
//!   each (the group's query rows share their head's K and V: `q` is `[kv heads, group, d]`),
//!   4096 keys, head dim 128;
//! - the rest of the family: 8 and 16 query rows per KV head, the GQA case in f16, at 512 and
//!   32768 keys, and head dim 64 (one row per head and GQA).
//!
//! `benches/py/torch_baselines.py --set attention` times the same cases in PyTorch (eager, CUDA
//! graph, torch.compile, and `scaled_dot_product_attention` on its own layout). Built by the root
//! build.rs with `mirage::build::compile` when `MIRAGE_ATTENTION=1`.
// The bench uses the programs through their `PROGRAM` statics.
#![allow(dead_code)]

use mirage::prelude::*;

/// Decode attention, 32 heads × 1 query row, 4096 keys, head dim 128, bf16:
/// `softmax(q·k / √128, last)·v`.
#[mugraph]
pub fn attn_decode_h32_n4096_d128_bf16(
    q: Tensor<bf16, 32, 1, 128>,
    k: Tensor<bf16, 32, 128, 4096>,
    v: Tensor<bf16, 32, 4096, 128>,
) -> Tensor<bf16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention, 32 heads × 1 query row, 4096 keys, head dim 128, f16:
/// `softmax(q·k / √128, last)·v`.
#[mugraph]
pub fn attn_decode_h32_n4096_d128_f16(
    q: Tensor<f16, 32, 1, 128>,
    k: Tensor<f16, 32, 128, 4096>,
    v: Tensor<f16, 32, 4096, 128>,
) -> Tensor<f16, 32, 1, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Grouped-query decode attention, 8 KV heads × 4 query heads (one row each), 4096 keys, head
/// dim 128, bf16: `softmax(q·k / √128, last)·v` with the group's rows in `q`'s dim 1.
#[mugraph]
pub fn attn_gqa_kv8_g4_n4096_d128_bf16(
    q: Tensor<bf16, 8, 4, 128>,
    k: Tensor<bf16, 8, 128, 4096>,
    v: Tensor<bf16, 8, 4096, 128>,
) -> Tensor<bf16, 8, 4, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Grouped-query decode attention, 8 KV heads × 8 query heads (one row each), 4096 keys, head
/// dim 128, bf16.
#[mugraph]
pub fn attn_gqa_kv8_g8_n4096_d128_bf16(
    q: Tensor<bf16, 8, 8, 128>,
    k: Tensor<bf16, 8, 128, 4096>,
    v: Tensor<bf16, 8, 4096, 128>,
) -> Tensor<bf16, 8, 8, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Sixteen query rows per KV head (a group of 4 query heads decoding 4 tokens each, or
/// speculative decoding), 8 KV heads, 4096 keys, head dim 128, bf16.
#[mugraph]
pub fn attn_gqa_kv8_g16_n4096_d128_bf16(
    q: Tensor<bf16, 8, 16, 128>,
    k: Tensor<bf16, 8, 128, 4096>,
    v: Tensor<bf16, 8, 4096, 128>,
) -> Tensor<bf16, 8, 16, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Grouped-query decode attention as [`attn_gqa_kv8_g4_n4096_d128_bf16`], f16.
#[mugraph]
pub fn attn_gqa_kv8_g4_n4096_d128_f16(
    q: Tensor<f16, 8, 4, 128>,
    k: Tensor<f16, 8, 128, 4096>,
    v: Tensor<f16, 8, 4096, 128>,
) -> Tensor<f16, 8, 4, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Grouped-query decode attention over a short cache: 8 KV heads × 4, 512 keys, head dim 128,
/// bf16.
#[mugraph]
pub fn attn_gqa_kv8_g4_n512_d128_bf16(
    q: Tensor<bf16, 8, 4, 128>,
    k: Tensor<bf16, 8, 128, 512>,
    v: Tensor<bf16, 8, 512, 128>,
) -> Tensor<bf16, 8, 4, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Grouped-query decode attention over a long cache: 8 KV heads × 4, 32768 keys, head dim 128,
/// bf16.
#[mugraph]
pub fn attn_gqa_kv8_g4_n32768_d128_bf16(
    q: Tensor<bf16, 8, 4, 128>,
    k: Tensor<bf16, 8, 128, 32768>,
    v: Tensor<bf16, 8, 32768, 128>,
) -> Tensor<bf16, 8, 4, 128> {
    softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
}

/// Decode attention with head dim 64 (32 heads × 1 row, 4096 keys, bf16): `softmax(q·k / √64,
/// last)·v`.
#[mugraph]
pub fn attn_decode_h32_n4096_d64_bf16(
    q: Tensor<bf16, 32, 1, 64>,
    k: Tensor<bf16, 32, 64, 4096>,
    v: Tensor<bf16, 32, 4096, 64>,
) -> Tensor<bf16, 32, 1, 64> {
    softmax(q.matmul(k) * 0.125, 2).matmul(v)
}

/// Grouped-query decode attention with head dim 64: 8 KV heads × 4, 4096 keys, bf16.
#[mugraph]
pub fn attn_gqa_kv8_g4_n4096_d64_bf16(
    q: Tensor<bf16, 8, 4, 64>,
    k: Tensor<bf16, 8, 64, 4096>,
    v: Tensor<bf16, 8, 4096, 64>,
) -> Tensor<bf16, 8, 4, 64> {
    softmax(q.matmul(k) * 0.125, 2).matmul(v)
}
