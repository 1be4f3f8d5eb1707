//! The corpus of programs people write: the pieces of a pre-norm transformer layer at decode, as
//! a new user would write them, for three models (Llama-3.2-1B, Qwen2.5-0.5B, Mistral-7B) at 1
//! and 16 rows in bf16:
//!
//! - `*_norm_qkv_*`: the layer's RMSNorm with its gain, then the fused Q, K and V projection;
//! - `*_o_resid_*`: the attention output projection with its residual (`x + o @ W_o`);
//! - `*_norm_gated_*`: RMSNorm with its gain, then gate and up projections as a gated MLP;
//! - `*_down_resid_*`: the down projection of the SiLU-gated product with its residual;
//! - `*_mlp_block_*`: the whole MLP block, norm, gate, up, down and residual;
//! - `*_norm_lm_head_*`: the final RMSNorm with its gain and the LM head.
//!
//! Weights are `[in, out]` row-major (`x @ W`). `mirage/tests/corpus.rs` searches every program
//! (superoptimized or not, kernels, search time, states).
// The programs are used through their `PROGRAM` statics.
#![allow(dead_code)]

use mirage::prelude::*;

/// Llama-3.2-1B RMSNorm and QKV projection, 1 row(s): `(rms_norm(x) * g) @ W_qkv` (2048 → 3072).
#[mugraph]
pub fn llama1b_norm_qkv_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    g: Tensor<bf16, 1, 2048>,
    w: Tensor<bf16, 2048, 3072>,
) -> Tensor<bf16, 1, 3072> {
    (rms_norm(x) * g).matmul(w)
}

/// Llama-3.2-1B attention output projection with its residual, 1 row(s): `x + o @ W_o` (2048 → 2048).
#[mugraph]
pub fn llama1b_o_resid_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    o: Tensor<bf16, 1, 2048>,
    w: Tensor<bf16, 2048, 2048>,
) -> Tensor<bf16, 1, 2048> {
    x + o.matmul(w)
}

/// Llama-3.2-1B RMSNorm and gated MLP, 1 row(s): `silu(xn @ W_gate) * (xn @ W_up)`, `xn = rms_norm(x) * g` (2048 → 8192).
#[mugraph]
pub fn llama1b_norm_gated_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    g: Tensor<bf16, 1, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
) -> Tensor<bf16, 1, 8192> {
    let xn = rms_norm(x) * g;
    silu(xn.matmul(wg)) * xn.matmul(wu)
}

/// Llama-3.2-1B down projection with its residual, 1 row(s): `x + (silu(a) * b) @ W_down` (8192 → 2048).
#[mugraph]
pub fn llama1b_down_resid_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    a: Tensor<bf16, 1, 8192>,
    b: Tensor<bf16, 1, 8192>,
    w: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 1, 2048> {
    x + (silu(a) * b).matmul(w)
}

/// Llama-3.2-1B MLP block with its norm and residual, 1 row(s) (2048 → 8192 → 2048).
#[mugraph]
pub fn llama1b_mlp_block_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    g: Tensor<bf16, 1, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
    wd: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 1, 2048> {
    let xn = rms_norm(x) * g;
    x + (silu(xn.matmul(wg)) * xn.matmul(wu)).matmul(wd)
}

/// Llama-3.2-1B final RMSNorm and LM head, 1 row(s): `(rms_norm(x) * g) @ W_lm` (2048 → 128256).
#[mugraph]
pub fn llama1b_norm_lm_head_r1_bf16(
    x: Tensor<bf16, 1, 2048>,
    g: Tensor<bf16, 1, 2048>,
    w: Tensor<bf16, 2048, 128256>,
) -> Tensor<bf16, 1, 128256> {
    (rms_norm(x) * g).matmul(w)
}

/// Llama-3.2-1B RMSNorm and QKV projection, 16 row(s): `(rms_norm(x) * g) @ W_qkv` (2048 → 3072).
#[mugraph]
pub fn llama1b_norm_qkv_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    g: Tensor<bf16, 1, 2048>,
    w: Tensor<bf16, 2048, 3072>,
) -> Tensor<bf16, 16, 3072> {
    (rms_norm(x) * g).matmul(w)
}

/// Llama-3.2-1B attention output projection with its residual, 16 row(s): `x + o @ W_o` (2048 → 2048).
#[mugraph]
pub fn llama1b_o_resid_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    o: Tensor<bf16, 16, 2048>,
    w: Tensor<bf16, 2048, 2048>,
) -> Tensor<bf16, 16, 2048> {
    x + o.matmul(w)
}

/// Llama-3.2-1B RMSNorm and gated MLP, 16 row(s): `silu(xn @ W_gate) * (xn @ W_up)`, `xn = rms_norm(x) * g` (2048 → 8192).
#[mugraph]
pub fn llama1b_norm_gated_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    g: Tensor<bf16, 1, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
) -> Tensor<bf16, 16, 8192> {
    let xn = rms_norm(x) * g;
    silu(xn.matmul(wg)) * xn.matmul(wu)
}

/// Llama-3.2-1B down projection with its residual, 16 row(s): `x + (silu(a) * b) @ W_down` (8192 → 2048).
#[mugraph]
pub fn llama1b_down_resid_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    a: Tensor<bf16, 16, 8192>,
    b: Tensor<bf16, 16, 8192>,
    w: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 16, 2048> {
    x + (silu(a) * b).matmul(w)
}

/// Llama-3.2-1B MLP block with its norm and residual, 16 row(s) (2048 → 8192 → 2048).
#[mugraph]
pub fn llama1b_mlp_block_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    g: Tensor<bf16, 1, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
    wd: Tensor<bf16, 8192, 2048>,
) -> Tensor<bf16, 16, 2048> {
    let xn = rms_norm(x) * g;
    x + (silu(xn.matmul(wg)) * xn.matmul(wu)).matmul(wd)
}

/// Llama-3.2-1B final RMSNorm and LM head, 16 row(s): `(rms_norm(x) * g) @ W_lm` (2048 → 128256).
#[mugraph]
pub fn llama1b_norm_lm_head_r16_bf16(
    x: Tensor<bf16, 16, 2048>,
    g: Tensor<bf16, 1, 2048>,
    w: Tensor<bf16, 2048, 128256>,
) -> Tensor<bf16, 16, 128256> {
    (rms_norm(x) * g).matmul(w)
}

/// Qwen2.5-0.5B RMSNorm and QKV projection, 1 row(s): `(rms_norm(x) * g) @ W_qkv` (896 → 1152).
#[mugraph]
pub fn qwen05b_norm_qkv_r1_bf16(
    x: Tensor<bf16, 1, 896>,
    g: Tensor<bf16, 1, 896>,
    w: Tensor<bf16, 896, 1152>,
) -> Tensor<bf16, 1, 1152> {
    (rms_norm(x) * g).matmul(w)
}

/// Qwen2.5-0.5B attention output projection with its residual, 1 row(s): `x + o @ W_o` (896 → 896).
#[mugraph]
pub fn qwen05b_o_resid_r1_bf16(
    x: Tensor<bf16, 1, 896>,
    o: Tensor<bf16, 1, 896>,
    w: Tensor<bf16, 896, 896>,
) -> Tensor<bf16, 1, 896> {
    x + o.matmul(w)
}

/// Qwen2.5-0.5B RMSNorm and gated MLP, 1 row(s): `silu(xn @ W_gate) * (xn @ W_up)`, `xn = rms_norm(x) * g` (896 → 4864).
#[mugraph]
pub fn qwen05b_norm_gated_r1_bf16(
    x: Tensor<bf16, 1, 896>,
    g: Tensor<bf16, 1, 896>,
    wg: Tensor<bf16, 896, 4864>,
    wu: Tensor<bf16, 896, 4864>,
) -> Tensor<bf16, 1, 4864> {
    let xn = rms_norm(x) * g;
    silu(xn.matmul(wg)) * xn.matmul(wu)
}

/// Qwen2.5-0.5B down projection with its residual, 1 row(s): `x + (silu(a) * b) @ W_down` (4864 → 896).
#[mugraph]
pub fn qwen05b_down_resid_r1_bf16(
    x: Tensor<bf16, 1, 896>,
    a: Tensor<bf16, 1, 4864>,
    b: Tensor<bf16, 1, 4864>,
    w: Tensor<bf16, 4864, 896>,
) -> Tensor<bf16, 1, 896> {
    x + (silu(a) * b).matmul(w)
}

/// Qwen2.5-0.5B MLP block with its norm and residual, 1 row(s) (896 → 4864 → 896).
#[mugraph]
pub fn qwen05b_mlp_block_r1_bf16(
    x: Tensor<bf16, 1, 896>,
    g: Tensor<bf16, 1, 896>,
    wg: Tensor<bf16, 896, 4864>,
    wu: Tensor<bf16, 896, 4864>,
    wd: Tensor<bf16, 4864, 896>,
) -> Tensor<bf16, 1, 896> {
    let xn = rms_norm(x) * g;
    x + (silu(xn.matmul(wg)) * xn.matmul(wu)).matmul(wd)
}

/// Qwen2.5-0.5B final RMSNorm and LM head, 1 row(s): `(rms_norm(x) * g) @ W_lm` (896 → 151936).
#[mugraph]
pub fn qwen05b_norm_lm_head_r1_bf16(
    x: Tensor<bf16, 1, 896>,
    g: Tensor<bf16, 1, 896>,
    w: Tensor<bf16, 896, 151936>,
) -> Tensor<bf16, 1, 151936> {
    (rms_norm(x) * g).matmul(w)
}

/// Qwen2.5-0.5B RMSNorm and QKV projection, 16 row(s): `(rms_norm(x) * g) @ W_qkv` (896 → 1152).
#[mugraph]
pub fn qwen05b_norm_qkv_r16_bf16(
    x: Tensor<bf16, 16, 896>,
    g: Tensor<bf16, 1, 896>,
    w: Tensor<bf16, 896, 1152>,
) -> Tensor<bf16, 16, 1152> {
    (rms_norm(x) * g).matmul(w)
}

/// Qwen2.5-0.5B attention output projection with its residual, 16 row(s): `x + o @ W_o` (896 → 896).
#[mugraph]
pub fn qwen05b_o_resid_r16_bf16(
    x: Tensor<bf16, 16, 896>,
    o: Tensor<bf16, 16, 896>,
    w: Tensor<bf16, 896, 896>,
) -> Tensor<bf16, 16, 896> {
    x + o.matmul(w)
}

/// Qwen2.5-0.5B RMSNorm and gated MLP, 16 row(s): `silu(xn @ W_gate) * (xn @ W_up)`, `xn = rms_norm(x) * g` (896 → 4864).
#[mugraph]
pub fn qwen05b_norm_gated_r16_bf16(
    x: Tensor<bf16, 16, 896>,
    g: Tensor<bf16, 1, 896>,
    wg: Tensor<bf16, 896, 4864>,
    wu: Tensor<bf16, 896, 4864>,
) -> Tensor<bf16, 16, 4864> {
    let xn = rms_norm(x) * g;
    silu(xn.matmul(wg)) * xn.matmul(wu)
}

/// Qwen2.5-0.5B down projection with its residual, 16 row(s): `x + (silu(a) * b) @ W_down` (4864 → 896).
#[mugraph]
pub fn qwen05b_down_resid_r16_bf16(
    x: Tensor<bf16, 16, 896>,
    a: Tensor<bf16, 16, 4864>,
    b: Tensor<bf16, 16, 4864>,
    w: Tensor<bf16, 4864, 896>,
) -> Tensor<bf16, 16, 896> {
    x + (silu(a) * b).matmul(w)
}

/// Qwen2.5-0.5B MLP block with its norm and residual, 16 row(s) (896 → 4864 → 896).
#[mugraph]
pub fn qwen05b_mlp_block_r16_bf16(
    x: Tensor<bf16, 16, 896>,
    g: Tensor<bf16, 1, 896>,
    wg: Tensor<bf16, 896, 4864>,
    wu: Tensor<bf16, 896, 4864>,
    wd: Tensor<bf16, 4864, 896>,
) -> Tensor<bf16, 16, 896> {
    let xn = rms_norm(x) * g;
    x + (silu(xn.matmul(wg)) * xn.matmul(wu)).matmul(wd)
}

/// Qwen2.5-0.5B final RMSNorm and LM head, 16 row(s): `(rms_norm(x) * g) @ W_lm` (896 → 151936).
#[mugraph]
pub fn qwen05b_norm_lm_head_r16_bf16(
    x: Tensor<bf16, 16, 896>,
    g: Tensor<bf16, 1, 896>,
    w: Tensor<bf16, 896, 151936>,
) -> Tensor<bf16, 16, 151936> {
    (rms_norm(x) * g).matmul(w)
}

/// Mistral-7B RMSNorm and QKV projection, 1 row(s): `(rms_norm(x) * g) @ W_qkv` (4096 → 6144).
#[mugraph]
pub fn mistral7b_norm_qkv_r1_bf16(
    x: Tensor<bf16, 1, 4096>,
    g: Tensor<bf16, 1, 4096>,
    w: Tensor<bf16, 4096, 6144>,
) -> Tensor<bf16, 1, 6144> {
    (rms_norm(x) * g).matmul(w)
}

/// Mistral-7B attention output projection with its residual, 1 row(s): `x + o @ W_o` (4096 → 4096).
#[mugraph]
pub fn mistral7b_o_resid_r1_bf16(
    x: Tensor<bf16, 1, 4096>,
    o: Tensor<bf16, 1, 4096>,
    w: Tensor<bf16, 4096, 4096>,
) -> Tensor<bf16, 1, 4096> {
    x + o.matmul(w)
}

/// Mistral-7B RMSNorm and gated MLP, 1 row(s): `silu(xn @ W_gate) * (xn @ W_up)`, `xn = rms_norm(x) * g` (4096 → 14336).
#[mugraph]
pub fn mistral7b_norm_gated_r1_bf16(
    x: Tensor<bf16, 1, 4096>,
    g: Tensor<bf16, 1, 4096>,
    wg: Tensor<bf16, 4096, 14336>,
    wu: Tensor<bf16, 4096, 14336>,
) -> Tensor<bf16, 1, 14336> {
    let xn = rms_norm(x) * g;
    silu(xn.matmul(wg)) * xn.matmul(wu)
}

/// Mistral-7B down projection with its residual, 1 row(s): `x + (silu(a) * b) @ W_down` (14336 → 4096).
#[mugraph]
pub fn mistral7b_down_resid_r1_bf16(
    x: Tensor<bf16, 1, 4096>,
    a: Tensor<bf16, 1, 14336>,
    b: Tensor<bf16, 1, 14336>,
    w: Tensor<bf16, 14336, 4096>,
) -> Tensor<bf16, 1, 4096> {
    x + (silu(a) * b).matmul(w)
}

/// Mistral-7B MLP block with its norm and residual, 1 row(s) (4096 → 14336 → 4096).
#[mugraph]
pub fn mistral7b_mlp_block_r1_bf16(
    x: Tensor<bf16, 1, 4096>,
    g: Tensor<bf16, 1, 4096>,
    wg: Tensor<bf16, 4096, 14336>,
    wu: Tensor<bf16, 4096, 14336>,
    wd: Tensor<bf16, 14336, 4096>,
) -> Tensor<bf16, 1, 4096> {
    let xn = rms_norm(x) * g;
    x + (silu(xn.matmul(wg)) * xn.matmul(wu)).matmul(wd)
}

/// Mistral-7B final RMSNorm and LM head, 1 row(s): `(rms_norm(x) * g) @ W_lm` (4096 → 32000).
#[mugraph]
pub fn mistral7b_norm_lm_head_r1_bf16(
    x: Tensor<bf16, 1, 4096>,
    g: Tensor<bf16, 1, 4096>,
    w: Tensor<bf16, 4096, 32000>,
) -> Tensor<bf16, 1, 32000> {
    (rms_norm(x) * g).matmul(w)
}

/// Mistral-7B RMSNorm and QKV projection, 16 row(s): `(rms_norm(x) * g) @ W_qkv` (4096 → 6144).
#[mugraph]
pub fn mistral7b_norm_qkv_r16_bf16(
    x: Tensor<bf16, 16, 4096>,
    g: Tensor<bf16, 1, 4096>,
    w: Tensor<bf16, 4096, 6144>,
) -> Tensor<bf16, 16, 6144> {
    (rms_norm(x) * g).matmul(w)
}

/// Mistral-7B attention output projection with its residual, 16 row(s): `x + o @ W_o` (4096 → 4096).
#[mugraph]
pub fn mistral7b_o_resid_r16_bf16(
    x: Tensor<bf16, 16, 4096>,
    o: Tensor<bf16, 16, 4096>,
    w: Tensor<bf16, 4096, 4096>,
) -> Tensor<bf16, 16, 4096> {
    x + o.matmul(w)
}

/// Mistral-7B RMSNorm and gated MLP, 16 row(s): `silu(xn @ W_gate) * (xn @ W_up)`, `xn = rms_norm(x) * g` (4096 → 14336).
#[mugraph]
pub fn mistral7b_norm_gated_r16_bf16(
    x: Tensor<bf16, 16, 4096>,
    g: Tensor<bf16, 1, 4096>,
    wg: Tensor<bf16, 4096, 14336>,
    wu: Tensor<bf16, 4096, 14336>,
) -> Tensor<bf16, 16, 14336> {
    let xn = rms_norm(x) * g;
    silu(xn.matmul(wg)) * xn.matmul(wu)
}

/// Mistral-7B down projection with its residual, 16 row(s): `x + (silu(a) * b) @ W_down` (14336 → 4096).
#[mugraph]
pub fn mistral7b_down_resid_r16_bf16(
    x: Tensor<bf16, 16, 4096>,
    a: Tensor<bf16, 16, 14336>,
    b: Tensor<bf16, 16, 14336>,
    w: Tensor<bf16, 14336, 4096>,
) -> Tensor<bf16, 16, 4096> {
    x + (silu(a) * b).matmul(w)
}

/// Mistral-7B MLP block with its norm and residual, 16 row(s) (4096 → 14336 → 4096).
#[mugraph]
pub fn mistral7b_mlp_block_r16_bf16(
    x: Tensor<bf16, 16, 4096>,
    g: Tensor<bf16, 1, 4096>,
    wg: Tensor<bf16, 4096, 14336>,
    wu: Tensor<bf16, 4096, 14336>,
    wd: Tensor<bf16, 14336, 4096>,
) -> Tensor<bf16, 16, 4096> {
    let xn = rms_norm(x) * g;
    x + (silu(xn.matmul(wg)) * xn.matmul(wu)).matmul(wd)
}

/// Mistral-7B final RMSNorm and LM head, 16 row(s): `(rms_norm(x) * g) @ W_lm` (4096 → 32000).
#[mugraph]
pub fn mistral7b_norm_lm_head_r16_bf16(
    x: Tensor<bf16, 16, 4096>,
    g: Tensor<bf16, 1, 4096>,
    w: Tensor<bf16, 4096, 32000>,
) -> Tensor<bf16, 16, 32000> {
    (rms_norm(x) * g).matmul(w)
}
