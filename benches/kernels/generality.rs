//! The generality set of the GPU benchmark: the decode-time layer projections of three models
//! nobody tuned for (Llama-3.2-1B, Qwen3-0.6B, Qwen2.5-7B), each as a `#[mugraph]` program at 1
//! and 16 rows in bf16 and f16, plus one f32 gated MLP:
//!
//! - `*_qkv_*`: the fused Q, K and V projection after the layer's RMSNorm, with the norm's gain
//!   folded into the weight (`rms_norm(x) @ W_qkv`, as in the benchmark's `rmsnorm_linear`);
//! - `*_gateup_*`: gate and up projections as one gated MLP (`silu(x @ W_gate) * (x @ W_up)`);
//! - `*_down_*`: the down projection with its SiLU gate (`(silu(g) * u) @ W_down`).
//!
//! Weights are `[in, out]` row-major (`x @ W`), as in `benches/py/torch_baselines.py`, which
//! times the same cases in PyTorch. Built by the root build.rs with `mirage::build::compile`.
// The bench uses the programs through their `PROGRAM` statics.
#![allow(dead_code)]

use mirage::prelude::*;

/// Llama-3.2-1B QKV projection, 1 row(s), bf16: `rms_norm(x) @ W_qkv` (2048 → 3072).
#[mugraph]
pub fn llama1b_qkv_r1_bf16(x: Tensor<bf16, 1, 2048>, w: Tensor<bf16, 2048, 3072>) -> Tensor<bf16, 1, 3072> {
    rms_norm(x).matmul(w)
}

/// Llama-3.2-1B gate and up projections, 1 row(s), bf16: `silu(x @ W_gate) * (x @ W_up)` (2048 → 8192).
#[mugraph]
pub fn llama1b_gateup_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
) -> Tensor<bf16, 1, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Llama-3.2-1B down projection with its SiLU gate, 1 row(s), bf16: `(silu(g) * u) @ W_down` (8192 → 2048).
#[mugraph]
pub fn llama1b_down_r1_bf16(
    g: Tensor<bf16, 1, 8192>,
    u: Tensor<bf16, 1, 8192>,
    w: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 1, 2048> {
    (silu(g) * u).matmul(w)
}

/// Llama-3.2-1B QKV projection, 16 row(s), bf16: `rms_norm(x) @ W_qkv` (2048 → 3072).
#[mugraph]
pub fn llama1b_qkv_r16_bf16(x: Tensor<bf16, 16, 2048>, w: Tensor<bf16, 2048, 3072>) -> Tensor<bf16, 16, 3072> {
    rms_norm(x).matmul(w)
}

/// Llama-3.2-1B gate and up projections, 16 row(s), bf16: `silu(x @ W_gate) * (x @ W_up)` (2048 → 8192).
#[mugraph]
pub fn llama1b_gateup_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
) -> Tensor<bf16, 16, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Llama-3.2-1B down projection with its SiLU gate, 16 row(s), bf16: `(silu(g) * u) @ W_down` (8192 → 2048).
#[mugraph]
pub fn llama1b_down_r16_bf16(
    g: Tensor<bf16, 16, 8192>,
    u: Tensor<bf16, 16, 8192>,
    w: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 16, 2048> {
    (silu(g) * u).matmul(w)
}

/// Llama-3.2-1B QKV projection, 1 row(s), f16: `rms_norm(x) @ W_qkv` (2048 → 3072).
#[mugraph]
pub fn llama1b_qkv_r1_f16(x: Tensor<f16, 1, 2048>, w: Tensor<f16, 2048, 3072>) -> Tensor<f16, 1, 3072> {
    rms_norm(x).matmul(w)
}

/// Llama-3.2-1B gate and up projections, 1 row(s), f16: `silu(x @ W_gate) * (x @ W_up)` (2048 → 8192).
#[mugraph]
pub fn llama1b_gateup_r1_f16(
    x: Tensor<f16, 1, 2048>,
    wg: Tensor<f16, 2048, 8192>,
    wu: Tensor<f16, 2048, 8192>,
) -> Tensor<f16, 1, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Llama-3.2-1B down projection with its SiLU gate, 1 row(s), f16: `(silu(g) * u) @ W_down` (8192 → 2048).
#[mugraph]
pub fn llama1b_down_r1_f16(
    g: Tensor<f16, 1, 8192>,
    u: Tensor<f16, 1, 8192>,
    w: Tensor<f16, 8192, 2048>,
) -> Tensor<f16, 1, 2048> {
    (silu(g) * u).matmul(w)
}

/// Llama-3.2-1B QKV projection, 16 row(s), f16: `rms_norm(x) @ W_qkv` (2048 → 3072).
#[mugraph]
pub fn llama1b_qkv_r16_f16(x: Tensor<f16, 16, 2048>, w: Tensor<f16, 2048, 3072>) -> Tensor<f16, 16, 3072> {
    rms_norm(x).matmul(w)
}

/// Llama-3.2-1B gate and up projections, 16 row(s), f16: `silu(x @ W_gate) * (x @ W_up)` (2048 → 8192).
#[mugraph]
pub fn llama1b_gateup_r16_f16(
    x: Tensor<f16, 16, 2048>,
    wg: Tensor<f16, 2048, 8192>,
    wu: Tensor<f16, 2048, 8192>,
) -> Tensor<f16, 16, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Llama-3.2-1B down projection with its SiLU gate, 16 row(s), f16: `(silu(g) * u) @ W_down` (8192 → 2048).
#[mugraph]
pub fn llama1b_down_r16_f16(
    g: Tensor<f16, 16, 8192>,
    u: Tensor<f16, 16, 8192>,
    w: Tensor<f16, 8192, 2048>,
) -> Tensor<f16, 16, 2048> {
    (silu(g) * u).matmul(w)
}

/// Qwen3-0.6B QKV projection, 1 row(s), bf16: `rms_norm(x) @ W_qkv` (1024 → 4096).
#[mugraph]
pub fn qwen06b_qkv_r1_bf16(x: Tensor<bf16, 1, 1024>, w: Tensor<bf16, 1024, 4096>) -> Tensor<bf16, 1, 4096> {
    rms_norm(x).matmul(w)
}

/// Qwen3-0.6B gate and up projections, 1 row(s), bf16: `silu(x @ W_gate) * (x @ W_up)` (1024 → 3072).
#[mugraph]
pub fn qwen06b_gateup_r1_bf16(
    x: Tensor<bf16, 1, 1024>,
    wg: Tensor<bf16, 1024, 3072>,
    wu: Tensor<bf16, 1024, 3072>,
) -> Tensor<bf16, 1, 3072> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen3-0.6B down projection with its SiLU gate, 1 row(s), bf16: `(silu(g) * u) @ W_down` (3072 → 1024).
#[mugraph]
pub fn qwen06b_down_r1_bf16(
    g: Tensor<bf16, 1, 3072>,
    u: Tensor<bf16, 1, 3072>,
    w: Tensor<bf16, 3072, 1024>,
) -> Tensor<bf16, 1, 1024> {
    (silu(g) * u).matmul(w)
}

/// Qwen3-0.6B QKV projection, 16 row(s), bf16: `rms_norm(x) @ W_qkv` (1024 → 4096).
#[mugraph]
pub fn qwen06b_qkv_r16_bf16(x: Tensor<bf16, 16, 1024>, w: Tensor<bf16, 1024, 4096>) -> Tensor<bf16, 16, 4096> {
    rms_norm(x).matmul(w)
}

/// Qwen3-0.6B gate and up projections, 16 row(s), bf16: `silu(x @ W_gate) * (x @ W_up)` (1024 → 3072).
#[mugraph]
pub fn qwen06b_gateup_r16_bf16(
    x: Tensor<bf16, 16, 1024>,
    wg: Tensor<bf16, 1024, 3072>,
    wu: Tensor<bf16, 1024, 3072>,
) -> Tensor<bf16, 16, 3072> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen3-0.6B down projection with its SiLU gate, 16 row(s), bf16: `(silu(g) * u) @ W_down` (3072 → 1024).
#[mugraph]
pub fn qwen06b_down_r16_bf16(
    g: Tensor<bf16, 16, 3072>,
    u: Tensor<bf16, 16, 3072>,
    w: Tensor<bf16, 3072, 1024>,
) -> Tensor<bf16, 16, 1024> {
    (silu(g) * u).matmul(w)
}

/// Qwen3-0.6B QKV projection, 1 row(s), f16: `rms_norm(x) @ W_qkv` (1024 → 4096).
#[mugraph]
pub fn qwen06b_qkv_r1_f16(x: Tensor<f16, 1, 1024>, w: Tensor<f16, 1024, 4096>) -> Tensor<f16, 1, 4096> {
    rms_norm(x).matmul(w)
}

/// Qwen3-0.6B gate and up projections, 1 row(s), f16: `silu(x @ W_gate) * (x @ W_up)` (1024 → 3072).
#[mugraph]
pub fn qwen06b_gateup_r1_f16(
    x: Tensor<f16, 1, 1024>,
    wg: Tensor<f16, 1024, 3072>,
    wu: Tensor<f16, 1024, 3072>,
) -> Tensor<f16, 1, 3072> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen3-0.6B down projection with its SiLU gate, 1 row(s), f16: `(silu(g) * u) @ W_down` (3072 → 1024).
#[mugraph]
pub fn qwen06b_down_r1_f16(
    g: Tensor<f16, 1, 3072>,
    u: Tensor<f16, 1, 3072>,
    w: Tensor<f16, 3072, 1024>,
) -> Tensor<f16, 1, 1024> {
    (silu(g) * u).matmul(w)
}

/// Qwen3-0.6B QKV projection, 16 row(s), f16: `rms_norm(x) @ W_qkv` (1024 → 4096).
#[mugraph]
pub fn qwen06b_qkv_r16_f16(x: Tensor<f16, 16, 1024>, w: Tensor<f16, 1024, 4096>) -> Tensor<f16, 16, 4096> {
    rms_norm(x).matmul(w)
}

/// Qwen3-0.6B gate and up projections, 16 row(s), f16: `silu(x @ W_gate) * (x @ W_up)` (1024 → 3072).
#[mugraph]
pub fn qwen06b_gateup_r16_f16(
    x: Tensor<f16, 16, 1024>,
    wg: Tensor<f16, 1024, 3072>,
    wu: Tensor<f16, 1024, 3072>,
) -> Tensor<f16, 16, 3072> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen3-0.6B down projection with its SiLU gate, 16 row(s), f16: `(silu(g) * u) @ W_down` (3072 → 1024).
#[mugraph]
pub fn qwen06b_down_r16_f16(
    g: Tensor<f16, 16, 3072>,
    u: Tensor<f16, 16, 3072>,
    w: Tensor<f16, 3072, 1024>,
) -> Tensor<f16, 16, 1024> {
    (silu(g) * u).matmul(w)
}

/// Qwen2.5-7B QKV projection, 1 row(s), bf16: `rms_norm(x) @ W_qkv` (3584 → 4608).
#[mugraph]
pub fn qwen7b_qkv_r1_bf16(x: Tensor<bf16, 1, 3584>, w: Tensor<bf16, 3584, 4608>) -> Tensor<bf16, 1, 4608> {
    rms_norm(x).matmul(w)
}

/// Qwen2.5-7B gate and up projections, 1 row(s), bf16: `silu(x @ W_gate) * (x @ W_up)` (3584 → 18944).
#[mugraph]
pub fn qwen7b_gateup_r1_bf16(
    x: Tensor<bf16, 1, 3584>,
    wg: Tensor<bf16, 3584, 18944>,
    wu: Tensor<bf16, 3584, 18944>,
) -> Tensor<bf16, 1, 18944> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen2.5-7B down projection with its SiLU gate, 1 row(s), bf16: `(silu(g) * u) @ W_down` (18944 → 3584).
#[mugraph]
pub fn qwen7b_down_r1_bf16(
    g: Tensor<bf16, 1, 18944>,
    u: Tensor<bf16, 1, 18944>,
    w: Tensor<bf16, 18944, 3584>,
) -> Tensor<bf16, 1, 3584> {
    (silu(g) * u).matmul(w)
}

/// Qwen2.5-7B QKV projection, 16 row(s), bf16: `rms_norm(x) @ W_qkv` (3584 → 4608).
#[mugraph]
pub fn qwen7b_qkv_r16_bf16(x: Tensor<bf16, 16, 3584>, w: Tensor<bf16, 3584, 4608>) -> Tensor<bf16, 16, 4608> {
    rms_norm(x).matmul(w)
}

/// Qwen2.5-7B gate and up projections, 16 row(s), bf16: `silu(x @ W_gate) * (x @ W_up)` (3584 → 18944).
#[mugraph]
pub fn qwen7b_gateup_r16_bf16(
    x: Tensor<bf16, 16, 3584>,
    wg: Tensor<bf16, 3584, 18944>,
    wu: Tensor<bf16, 3584, 18944>,
) -> Tensor<bf16, 16, 18944> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen2.5-7B down projection with its SiLU gate, 16 row(s), bf16: `(silu(g) * u) @ W_down` (18944 → 3584).
#[mugraph]
pub fn qwen7b_down_r16_bf16(
    g: Tensor<bf16, 16, 18944>,
    u: Tensor<bf16, 16, 18944>,
    w: Tensor<bf16, 18944, 3584>,
) -> Tensor<bf16, 16, 3584> {
    (silu(g) * u).matmul(w)
}

/// Qwen2.5-7B QKV projection, 1 row(s), f16: `rms_norm(x) @ W_qkv` (3584 → 4608).
#[mugraph]
pub fn qwen7b_qkv_r1_f16(x: Tensor<f16, 1, 3584>, w: Tensor<f16, 3584, 4608>) -> Tensor<f16, 1, 4608> {
    rms_norm(x).matmul(w)
}

/// Qwen2.5-7B gate and up projections, 1 row(s), f16: `silu(x @ W_gate) * (x @ W_up)` (3584 → 18944).
#[mugraph]
pub fn qwen7b_gateup_r1_f16(
    x: Tensor<f16, 1, 3584>,
    wg: Tensor<f16, 3584, 18944>,
    wu: Tensor<f16, 3584, 18944>,
) -> Tensor<f16, 1, 18944> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen2.5-7B down projection with its SiLU gate, 1 row(s), f16: `(silu(g) * u) @ W_down` (18944 → 3584).
#[mugraph]
pub fn qwen7b_down_r1_f16(
    g: Tensor<f16, 1, 18944>,
    u: Tensor<f16, 1, 18944>,
    w: Tensor<f16, 18944, 3584>,
) -> Tensor<f16, 1, 3584> {
    (silu(g) * u).matmul(w)
}

/// Qwen2.5-7B QKV projection, 16 row(s), f16: `rms_norm(x) @ W_qkv` (3584 → 4608).
#[mugraph]
pub fn qwen7b_qkv_r16_f16(x: Tensor<f16, 16, 3584>, w: Tensor<f16, 3584, 4608>) -> Tensor<f16, 16, 4608> {
    rms_norm(x).matmul(w)
}

/// Qwen2.5-7B gate and up projections, 16 row(s), f16: `silu(x @ W_gate) * (x @ W_up)` (3584 → 18944).
#[mugraph]
pub fn qwen7b_gateup_r16_f16(
    x: Tensor<f16, 16, 3584>,
    wg: Tensor<f16, 3584, 18944>,
    wu: Tensor<f16, 3584, 18944>,
) -> Tensor<f16, 16, 18944> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// Qwen2.5-7B down projection with its SiLU gate, 16 row(s), f16: `(silu(g) * u) @ W_down` (18944 → 3584).
#[mugraph]
pub fn qwen7b_down_r16_f16(
    g: Tensor<f16, 16, 18944>,
    u: Tensor<f16, 16, 18944>,
    w: Tensor<f16, 18944, 3584>,
) -> Tensor<f16, 16, 3584> {
    (silu(g) * u).matmul(w)
}

/// An f32 gated MLP: Llama-3.2-1B's gate and up projections at 8 rows in f32 (2048 → 8192).
#[mugraph]
pub fn llama1b_gateup_r8_f32(
    x: Tensor<f32, 8, 2048>,
    wg: Tensor<f32, 2048, 8192>,
    wu: Tensor<f32, 2048, 8192>,
) -> Tensor<f32, 8, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}
