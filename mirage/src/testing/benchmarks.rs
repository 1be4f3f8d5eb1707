//! The benchmark set at the shapes of the PyTorch baselines (`torch_baselines.py`), with the
//! golden Mirage µGraphs where the reference data has them.

use super::programs::{self, GoldenCase, golden_cases};
use crate::ir::{DType, IrError, KernelGraph};

/// `attention(rms_norm(Q), K, rms_norm(V))` (no epsilon, no weight; the norms over the head
/// dim) with `Q[h, q, d]`, `K[h, d, s]`, `V[h, s, d]`, softmax written as exp / sum.
pub fn qknorm_gqa(h: usize, q: usize, s: usize, d: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let qt = g.input(&[h, q, d], dtype)?;
    let k = g.input(&[h, d, s], dtype)?;
    let v = g.input(&[h, s, d], dtype)?;
    let qn = g.rms_norm(qt, 0.0, None)?;
    let vn = g.rms_norm(v, 0.0, None)?;
    let qk = g.matmul(qn, k)?;
    let e = g.exp(qk)?;
    let sum = g.reduce_sum(e, 2)?;
    let p = g.div(e, sum)?;
    let o = g.matmul(p, vn)?;
    g.output(o, None)?;
    Ok(g)
}

/// One benchmark program.
#[derive(Clone)]
pub struct Benchmark {
    /// The case's name in `torch_baselines.py` (`gated_mlp_bs8`, …).
    pub name: &'static str,
    /// The program.
    pub program: KernelGraph,
    /// Mirage's µGraphs for it, when the reference data has them.
    pub golden: Option<GoldenCase>,
}

/// Every program of the benchmark set, in the order of docs/ARCHITECTURE.md §12.
pub fn benchmark_set() -> Result<Vec<Benchmark>, IrError> {
    benchmark_set_shrunk(1)
}

/// The benchmark set with its model sizes (the dims of 256 and more: hidden sizes, sequence
/// lengths, query blocks) divided by `shrink`, batches, head dims and ranks kept: the same graphs
/// at smaller sizes, for tests that run each in the reference many times (the mutant corpus's
/// CI sample). Mirage's µGraphs are attached at `shrink` 1 only (they are for the real sizes).
pub fn benchmark_set_shrunk(shrink: usize) -> Result<Vec<Benchmark>, IrError> {
    const F16: DType = DType::F16;
    let shrink = shrink.max(1);
    let d = |n: usize| if n >= 256 { (n / shrink).max(1) } else { n };
    let golden = |name: &str| if shrink == 1 { golden_cases().into_iter().find(|c| c.name == name) } else { None };
    let mut out = Vec::new();
    let mut push = |name: &'static str, program: KernelGraph, g: Option<&str>| {
        out.push(Benchmark { name, program, golden: g.and_then(golden) })
    };
    push("gated_mlp_bs1", programs::gated_mlp(1, d(4096), d(4096), F16)?, None);
    push("gated_mlp_bs8", programs::gated_mlp(8, d(4096), d(4096), F16)?, Some("gated_mlp"));
    push("rmsnorm_linear_bs1", programs::rmsnorm_linear(2, d(4096), d(6144), F16)?, Some("rmsnorm_bs1"));
    push("rmsnorm_linear_bs8", programs::rmsnorm_linear(16, d(4096), d(6144), F16)?, Some("rmsnorm_bs8"));
    push("gqa_bs1", programs::gqa(2, d(256), d(4096), 64, F16)?, Some("gqa_bs1"));
    push("gqa_bs8", programs::gqa(16, d(256), d(4096), 64, F16)?, None);
    push("qknorm_gqa_bs1", qknorm_gqa(2, d(256), d(4096), 64, F16)?, None);
    push("qknorm_gqa_bs8", qknorm_gqa(16, d(256), d(4096), 64, F16)?, None);
    push("ntrans_bs1", programs::ntrans(8, d(4096), F16)?, Some("ntrans_bs1"));
    push("ntrans_bs8", programs::ntrans(64, d(4096), F16)?, None);
    push("lora", programs::lora(16, d(256), d(4096), 16, F16)?, Some("lora"));
    Ok(out)
}
