//! The program mirage-candle's example and GPU tests run on candle tensors: the gate and up
//! projections of Llama-3.2-1B's MLP as one gated MLP, at 16 rows in bf16 (the generality set's
//! `llama1b_gateup_r16_bf16` of the main workspace's GPU bench).

use mirage::prelude::*;

/// Llama-3.2-1B gate and up projections, 16 rows, bf16: `silu(x @ W_gate) * (x @ W_up)`
/// (2048 → 8192; weights `[in, out]` row-major).
#[mugraph]
pub fn gated_mlp(
    x: Tensor<bf16, 16, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
) -> Tensor<bf16, 16, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}

/// The same gated MLP for any row count from 1 to 64, chosen at launch (built as size buckets:
/// 1, 2..=8, 9..=16, 17..=32, 33..=64): what an engine batching a varying number of requests
/// calls.
#[mugraph(dims(B = 1..=64))]
pub fn gated_mlp_rows(
    x: Tensor<bf16, B, 2048>,
    wg: Tensor<bf16, 2048, 8192>,
    wu: Tensor<bf16, 2048, 8192>,
) -> Tensor<bf16, B, 8192> {
    silu(x.matmul(wg)) * x.matmul(wu)
}
