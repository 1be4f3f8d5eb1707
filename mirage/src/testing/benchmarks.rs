//! The benchmark set of DESIGN §14 at the shapes of `bench/torch_baselines.py`, with the golden
//! Mirage µGraphs where the reference data has them.

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

/// Every program of the benchmark set, in the order of DESIGN §14.
pub fn benchmark_set() -> Result<Vec<Benchmark>, IrError> {
    const F16: DType = DType::F16;
    let golden = |name: &str| golden_cases().into_iter().find(|c| c.name == name);
    let mut out = Vec::new();
    let mut push = |name: &'static str, program: KernelGraph, g: Option<&str>| {
        out.push(Benchmark { name, program, golden: g.and_then(golden) })
    };
    push("gated_mlp_bs1", programs::gated_mlp(1, 4096, 4096, F16)?, None);
    push("gated_mlp_bs8", programs::gated_mlp(8, 4096, 4096, F16)?, Some("gated_mlp"));
    push("rmsnorm_linear_bs1", programs::rmsnorm_linear(2, 4096, 6144, F16)?, Some("rmsnorm_bs1"));
    push("rmsnorm_linear_bs8", programs::rmsnorm_linear(16, 4096, 6144, F16)?, Some("rmsnorm_bs8"));
    push("gqa_bs1", programs::gqa(2, 256, 4096, 64, F16)?, Some("gqa_bs1"));
    push("gqa_bs8", programs::gqa(16, 256, 4096, 64, F16)?, None);
    push("qknorm_gqa_bs1", qknorm_gqa(2, 256, 4096, 64, F16)?, None);
    push("qknorm_gqa_bs8", qknorm_gqa(16, 256, 4096, 64, F16)?, None);
    push("ntrans_bs1", programs::ntrans(8, 4096, F16)?, Some("ntrans_bs1"));
    push("ntrans_bs8", programs::ntrans(64, 4096, F16)?, None);
    push("lora", programs::lora(16, 256, 4096, 16, F16)?, Some("lora"));
    Ok(out)
}
