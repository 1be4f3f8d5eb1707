//! The benchmark programs as `#[mugraph]` functions, at the shapes of the PyTorch baselines
//! (`torch_baselines.py`: batch 1 and batch 8 of each, lora and lm_head_argmax once). Compiled
//! by the root package's build.rs with `mirage::build::compile`; each example runs one program.
// Each example uses some of the programs.
#![allow(dead_code)]

use mirage::prelude::*;

/// `silu(X @ W1) * (X @ W2)`, batch 1.
#[mugraph]
pub fn gated_mlp_bs1(
    x: Tensor<f16, 1, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 1, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `silu(X @ W1) * (X @ W2)`, batch 8.
#[mugraph]
pub fn gated_mlp_bs8(
    x: Tensor<f16, 8, 4096>,
    w1: Tensor<f16, 4096, 4096>,
    w2: Tensor<f16, 4096, 4096>,
) -> Tensor<f16, 8, 4096> {
    silu(x.matmul(w1)) * x.matmul(w2)
}

/// `rms_norm(X) @ W` (no epsilon, no weight), batch 1.
#[mugraph]
pub fn rmsnorm_linear_bs1(x: Tensor<f16, 2, 4096>, w: Tensor<f16, 4096, 6144>) -> Tensor<f16, 2, 6144> {
    rms_norm(x).matmul(w)
}

/// `rms_norm(X) @ W` (no epsilon, no weight), batch 8.
#[mugraph]
pub fn rmsnorm_linear_bs8(x: Tensor<f16, 16, 4096>, w: Tensor<f16, 4096, 6144>) -> Tensor<f16, 16, 6144> {
    rms_norm(x).matmul(w)
}

/// Attention as Mirage writes it (softmax as exp / sum, no max subtraction), batch 1.
#[mugraph]
pub fn gqa_bs1(
    q: Tensor<f16, 2, 256, 64>,
    k: Tensor<f16, 2, 64, 4096>,
    v: Tensor<f16, 2, 4096, 64>,
) -> Tensor<f16, 2, 256, 64> {
    let e = exp(q.matmul(k));
    (e / e.sum(2)).matmul(v)
}

/// Attention as Mirage writes it (softmax as exp / sum, no max subtraction), batch 8.
#[mugraph]
pub fn gqa_bs8(
    q: Tensor<f16, 16, 256, 64>,
    k: Tensor<f16, 16, 64, 4096>,
    v: Tensor<f16, 16, 4096, 64>,
) -> Tensor<f16, 16, 256, 64> {
    let e = exp(q.matmul(k));
    (e / e.sum(2)).matmul(v)
}

/// Attention of the rms-normed queries and values, batch 1.
#[mugraph]
pub fn qknorm_gqa_bs1(
    q: Tensor<f16, 2, 256, 64>,
    k: Tensor<f16, 2, 64, 4096>,
    v: Tensor<f16, 2, 4096, 64>,
) -> Tensor<f16, 2, 256, 64> {
    let e = exp(rms_norm(q).matmul(k));
    (e / e.sum(2)).matmul(rms_norm(v))
}

/// Attention of the rms-normed queries and values, batch 8.
#[mugraph]
pub fn qknorm_gqa_bs8(
    q: Tensor<f16, 16, 256, 64>,
    k: Tensor<f16, 16, 64, 4096>,
    v: Tensor<f16, 16, 4096, 64>,
) -> Tensor<f16, 16, 256, 64> {
    let e = exp(rms_norm(q).matmul(k));
    (e / e.sum(2)).matmul(rms_norm(v))
}

/// The nTrans block `rms_norm(X + alpha * (rms_norm(H) + X))`, batch 1.
#[mugraph]
pub fn ntrans_bs1(
    h: Tensor<f16, 8, 4096>,
    x: Tensor<f16, 8, 4096>,
    alpha: Tensor<f16, 8, 4096>,
) -> Tensor<f16, 8, 4096> {
    rms_norm(x + alpha * (rms_norm(h) + x))
}

/// The nTrans block `rms_norm(X + alpha * (rms_norm(H) + X))`, batch 8.
#[mugraph]
pub fn ntrans_bs8(
    h: Tensor<f16, 64, 4096>,
    x: Tensor<f16, 64, 4096>,
    alpha: Tensor<f16, 64, 4096>,
) -> Tensor<f16, 64, 4096> {
    rms_norm(x + alpha * (rms_norm(h) + x))
}

/// LoRA: `X @ W + (X @ A) @ B`.
#[mugraph]
pub fn lora(
    x: Tensor<f16, 16, 256>,
    w: Tensor<f16, 256, 4096>,
    a: Tensor<f16, 256, 16>,
    b: Tensor<f16, 16, 4096>,
) -> Tensor<f16, 16, 4096> {
    x.matmul(w) + x.matmul(a).matmul(b)
}

/// The decode-time q and k projections of Llama-3.2-1B with their rotary embedding fused
/// (hidden 2048; q: 32 heads of 64 and k: 8 heads of 64 side by side in `Wqk`; half-split RoPE
/// with the row's `cos`/`sin` of its position as inputs), one row. [`qkv_rope_bs1`] adds v's
/// projection as a second result.
#[mugraph]
pub fn qk_rope_bs1(
    x: Tensor<f16, 1, 2048>,
    wqk: Tensor<f16, 2048, 2560>,
    cos: Tensor<f16, 1, 32>,
    sin: Tensor<f16, 1, 32>,
) -> Tensor<f16, 1, 2560> {
    rope(x.matmul(wqk), cos, sin)
}

/// [`qk_rope_bs1`] for 8 rows (8 sequences decoding, each at its own position).
#[mugraph]
pub fn qk_rope_bs8(
    x: Tensor<f16, 8, 2048>,
    wqk: Tensor<f16, 2048, 2560>,
    cos: Tensor<f16, 8, 32>,
    sin: Tensor<f16, 8, 32>,
) -> Tensor<f16, 8, 2560> {
    rope(x.matmul(wqk), cos, sin)
}

/// Greedy decoding's last step: the LM head (hidden 2048, a vocabulary of 32768) and the index of
/// the largest logit (ties to the lowest index), one row.
#[mugraph]
pub fn lm_head_argmax(h: Tensor<f16, 1, 2048>, w: Tensor<f16, 2048, 32768>) -> Tensor<i32, 1, 1> {
    argmax(h.matmul(w), 1)
}

/// [`qk_rope_bs1`] with v's projection (8 heads of 64) as a second, unrotated result: q and k
/// rotated and v plain from one input, one row.
#[mugraph]
pub fn qkv_rope_bs1(
    x: Tensor<f16, 1, 2048>,
    wqk: Tensor<f16, 2048, 2560>,
    wv: Tensor<f16, 2048, 512>,
    cos: Tensor<f16, 1, 32>,
    sin: Tensor<f16, 1, 32>,
) -> (Tensor<f16, 1, 2560>, Tensor<f16, 1, 512>) {
    (rope(x.matmul(wqk), cos, sin), x.matmul(wv))
}

/// [`qkv_rope_bs1`] for 8 rows.
#[mugraph]
pub fn qkv_rope_bs8(
    x: Tensor<f16, 8, 2048>,
    wqk: Tensor<f16, 2048, 2560>,
    wv: Tensor<f16, 2048, 512>,
    cos: Tensor<f16, 8, 32>,
    sin: Tensor<f16, 8, 32>,
) -> (Tensor<f16, 8, 2560>, Tensor<f16, 8, 512>) {
    (rope(x.matmul(wqk), cos, sin), x.matmul(wv))
}

/// GPT-2's LayerNorm (weight and bias, eps 1e-5) and the QKV projection after it (hidden 768,
/// 3 × 768 outputs), one row.
#[mugraph]
pub fn layernorm_linear_bs1(
    x: Tensor<f16, 1, 768>,
    g: Tensor<f16, 1, 768>,
    b: Tensor<f16, 1, 768>,
    w: Tensor<f16, 768, 2304>,
) -> Tensor<f16, 1, 2304> {
    layer_norm_weighted(x, g, b, 1e-5).matmul(w)
}

/// [`layernorm_linear_bs1`] for 8 rows.
#[mugraph]
pub fn layernorm_linear_bs8(
    x: Tensor<f16, 8, 768>,
    g: Tensor<f16, 1, 768>,
    b: Tensor<f16, 1, 768>,
    w: Tensor<f16, 768, 2304>,
) -> Tensor<f16, 8, 2304> {
    layer_norm_weighted(x, g, b, 1e-5).matmul(w)
}
