//! The benchmark programs (DESIGN §14) as kernel graphs, and the golden µGraphs Mirage found for
//! them (`mirage/goldens/`), paired with their programs.

use crate::import::{import_mirage_json_with, ImportError, ImportOptions};
use crate::ir::{DType, IrError, KernelGraph};

/// `silu(X @ W1) * (X @ W2)` with `X[m, k]`, `W1, W2 [k, n]`.
pub fn gated_mlp(m: usize, k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], dtype)?;
    let w1 = g.input(&[k, n], dtype)?;
    let w2 = g.input(&[k, n], dtype)?;
    let a = g.matmul(x, w1)?;
    let a = g.silu(a)?;
    let b = g.matmul(x, w2)?;
    let o = g.mul(a, b)?;
    g.output(o, None)?;
    Ok(g)
}

/// `rms_norm(X) @ W` (no epsilon, no weight) with `X[m, k]`, `W[k, n]`.
pub fn rmsnorm_linear(m: usize, k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], dtype)?;
    let w = g.input(&[k, n], dtype)?;
    let y = g.rms_norm(x, 0.0, None)?;
    let o = g.matmul(y, w)?;
    g.output(o, None)?;
    Ok(g)
}

/// `X @ W + (X @ A) @ B` with `X[m, k]`, `W[k, n]`, `A[k, r]`, `B[r, n]`.
pub fn lora(m: usize, k: usize, n: usize, r: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], dtype)?;
    let w = g.input(&[k, n], dtype)?;
    let a = g.input(&[k, r], dtype)?;
    let b = g.input(&[r, n], dtype)?;
    let xw = g.matmul(x, w)?;
    let xa = g.matmul(x, a)?;
    let xab = g.matmul(xa, b)?;
    let o = g.add(xw, xab)?;
    g.output(o, None)?;
    Ok(g)
}

/// Attention without the max subtraction, as Mirage writes it: `E = exp(Q @ K)`,
/// `(E / sum(E, 2)) @ V` with `Q[h, q, d]`, `K[h, d, s]`, `V[h, s, d]`.
pub fn gqa(h: usize, q: usize, s: usize, d: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let qt = g.input(&[h, q, d], dtype)?;
    let k = g.input(&[h, d, s], dtype)?;
    let v = g.input(&[h, s, d], dtype)?;
    let qk = g.matmul(qt, k)?;
    let e = g.exp(qk)?;
    let sum = g.reduce_sum(e, 2)?;
    let p = g.div(e, sum)?;
    let o = g.matmul(p, v)?;
    g.output(o, None)?;
    Ok(g)
}

/// nTrans block: `rms_norm(X + alpha * (rms_norm(H) + X))` with `H, X, alpha [m, n]`.
pub fn ntrans(m: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let h = g.input(&[m, n], dtype)?;
    let x = g.input(&[m, n], dtype)?;
    let alpha = g.input(&[m, n], dtype)?;
    let hn = g.rms_norm(h, 0.0, None)?;
    let s = g.add(hn, x)?;
    let t = g.mul(alpha, s)?;
    let u = g.add(x, t)?;
    let o = g.rms_norm(u, 0.0, None)?;
    g.output(o, None)?;
    Ok(g)
}

/// Qwen2.5 QKV pre-norm: `(rms_norm(X) * G) @ W` with `X, G [1, k]` and a column-major `W[k, n]`.
pub fn qwen_rmsnorm_gain_linear(k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[1, k], dtype)?;
    let gain = g.input(&[1, k], dtype)?;
    let w = g.input_strided(&[k, n], &[1, k], dtype)?;
    let y = g.rms_norm(x, 0.0, None)?;
    let y = g.mul(y, gain)?;
    let o = g.matmul(y, w)?;
    g.output(o, None)?;
    Ok(g)
}

/// Qwen2.5 MLP down projection with its gate: `(silu(X) * Y) @ W` with `X, Y [1, k]` and a
/// column-major `W[k, n]`.
pub fn qwen_silu_gate_linear(k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[1, k], dtype)?;
    let y = g.input(&[1, k], dtype)?;
    let w = g.input_strided(&[k, n], &[1, k], dtype)?;
    let s = g.silu(x)?;
    let s = g.mul(s, y)?;
    let o = g.matmul(s, w)?;
    g.output(o, None)?;
    Ok(g)
}

/// A file of µGraphs Mirage found, with the program it was searched for.
#[derive(Clone, Copy)]
pub struct GoldenCase {
    /// The file's name without `.json`.
    pub name: &'static str,
    /// The file's text.
    pub json: &'static str,
    /// The element type of the program (the file's 16-bit code is read as this).
    pub dtype: DType,
    /// Builds the program.
    pub program: fn() -> Result<KernelGraph, IrError>,
}

impl GoldenCase {
    /// Imports every candidate of the file.
    pub fn candidates(&self) -> Result<Vec<KernelGraph>, ImportError> {
        import_mirage_json_with(self.json, ImportOptions { half_dtype: self.dtype })
    }
}

const F16: DType = DType::F16;
const BF16: DType = DType::Bf16;

/// Every golden file with its program (the table of `mirage/goldens/README.md`'s source).
pub fn golden_cases() -> Vec<GoldenCase> {
    vec![
        GoldenCase { name: "gated_mlp", json: include_str!("../goldens/gated_mlp.json"), dtype: F16, program: || gated_mlp(8, 4096, 4096, F16) },
        GoldenCase { name: "rmsnorm_bs1", json: include_str!("../goldens/rmsnorm_bs1.json"), dtype: F16, program: || rmsnorm_linear(2, 4096, 6144, F16) },
        GoldenCase { name: "rmsnorm_bs8", json: include_str!("../goldens/rmsnorm_bs8.json"), dtype: F16, program: || rmsnorm_linear(16, 4096, 6144, F16) },
        GoldenCase { name: "lora", json: include_str!("../goldens/lora.json"), dtype: F16, program: || lora(16, 256, 4096, 16, F16) },
        GoldenCase { name: "gqa_bs1", json: include_str!("../goldens/gqa_bs1.json"), dtype: F16, program: || gqa(2, 256, 4096, 64, F16) },
        GoldenCase { name: "ntrans_bs1", json: include_str!("../goldens/ntrans_bs1.json"), dtype: F16, program: || ntrans(8, 4096, F16) },
        GoldenCase { name: "qwen2.5_659704256b064506", json: include_str!("../goldens/qwen2.5_659704256b064506.json"), dtype: BF16, program: || qwen_rmsnorm_gain_linear(3584, 4608, BF16) },
        GoldenCase { name: "qwen2.5_64644b2e7bbffb94", json: include_str!("../goldens/qwen2.5_64644b2e7bbffb94.json"), dtype: BF16, program: || qwen_silu_gate_linear(18944, 3584, BF16) },
        GoldenCase { name: "qwen2.5_6508b4ab6af4f866", json: include_str!("../goldens/qwen2.5_6508b4ab6af4f866.json"), dtype: BF16, program: || qwen_silu_gate_linear(11008, 2048, BF16) },
    ]
}
