//! A Llama-family decoder step as a step graph: token embedding, then per layer RMSNorm, the
//! q/k/v projections, rotary embeddings, the KV-cache append, grouped-query attention over the
//! cache up to the runtime position, the output projection with its residual add, RMSNorm, the
//! gated MLP (silu(x·Wg) · (x·Wu)) · Wd with its residual add; then the final norm, the LM head
//! and argmax, which writes the next token back into the `token` state the next step embeds.
//!
//! Norms are default block graphs; the projections are streamed block graphs built here (64
//! weight columns per task, the residual add and `silu(gate) · up` in their epilogues);
//! embedding, RoPE (with Qwen3's per-head q/k norm), the cache append, attention and argmax are
//! built-in tasks.
//! Batch 1: one token per step at position `pos` (a runtime parameter), attending to keys
//! `0..=pos`.
//!
//! Tensor names: `embed [vocab, hidden]`, `token [1]` (state, f32 id), `inv_freq [head_dim/2]`
//! (f32), per layer `l{i}.attn_norm [1, hidden]`, `l{i}.wq [hidden, heads·head_dim]`,
//! `l{i}.wk`/`l{i}.wv [hidden, kv_heads·head_dim]`, `l{i}.wo [heads·head_dim, hidden]`,
//! `l{i}.mlp_norm [1, hidden]`, `l{i}.wg`/`l{i}.wu [hidden, intermediate]`,
//! `l{i}.wd [intermediate, hidden]`, with `qk_norm` `l{i}.q_norm`/`l{i}.k_norm [1, head_dim]`,
//! `l{i}.k_cache`/`l{i}.v_cache [kv_heads, capacity,
//! head_dim]` (states); `final_norm [1, hidden]`, `lm_head [hidden, vocab]`. The logits are the
//! buffer `logits.out [1, vocab]`. Weights are `[in, out]` (x · W).

use crate::ir::{AccKind, BinaryOp, BlockGraph, DType, KernelGraph, Scalar, TensorDesc, UnaryOp};

use super::builtin::{Builtin, split_kv_attention};
use super::graph::{GraphError, ParamExpr, StepGraph, TensorId};

/// The shape of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (dividing `heads`).
    pub kv_heads: usize,
    /// Head dimension (even).
    pub head_dim: usize,
    /// MLP intermediate size.
    pub intermediate: usize,
    /// Positions the KV cache holds.
    pub capacity: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3; inputs `l{i}.q_norm`/`l{i}.k_norm
    /// [1, head_dim]`, fused into the [`Builtin::Rope`] tasks).
    pub qk_norm: bool,
    /// Element type of weights and activations.
    pub dtype: DType,
}

impl DecoderConfig {
    /// A tiny two-layer decoder for tests (vocabulary 512, hidden 256, 4 heads of 64 over 2 KV
    /// heads, MLP 512, 128 positions, bf16).
    pub fn toy() -> DecoderConfig {
        DecoderConfig {
            vocab: 512,
            hidden: 256,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            intermediate: 512,
            capacity: 128,
            eps: 1e-5,
            qk_norm: false,
            dtype: DType::Bf16,
        }
    }

    /// The RoPE inverse frequencies `theta^(-2i/head_dim)` (the `inv_freq` input without
    /// scaling).
    pub fn inv_freq(&self, theta: f64) -> Vec<f32> {
        (0..self.head_dim / 2).map(|i| theta.powf(-2.0 * i as f64 / self.head_dim as f64) as f32).collect()
    }
}

/// Chunk of the vocabulary per argmax tile, and of the hidden size per embedding tile: the
/// largest divisor not above `target`.
fn chunk(n: usize, target: usize) -> usize {
    (1..=target.min(n)).rev().find(|&c| n.is_multiple_of(c)).unwrap_or(1)
}

fn ir(graph: &str, op: &str) -> impl Fn(crate::ir::IrError) -> GraphError {
    let (graph, op) = (graph.to_owned(), op.to_owned());
    move |e| GraphError::Operand { graph: graph.clone(), op: op.clone(), reason: e.to_string() }
}

/// The step graph `name` of one decode step of a decoder of shape `cfg`.
pub fn decoder_step(name: &str, cfg: &DecoderConfig) -> Result<StepGraph, GraphError> {
    let mut g = StepGraph::new(name)?;
    let (h, dt) = (cfg.hidden, cfg.dtype);
    let (qw, kvw) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
    let pos = g.param("pos")?;
    let embed = g.input("embed", &[cfg.vocab, h], dt)?;
    let token = g.state("token", &[1], DType::F32)?;
    let inv_freq = g.input("inv_freq", &[cfg.head_dim / 2], DType::F32)?;
    let mut x = g.builtin("embedding", Builtin::Embedding { chunk: chunk(h, 256) }, &[embed, token])?[0];
    for l in 0..cfg.layers {
        let p = |s: &str| format!("l{l}.{s}");
        let attn_norm = g.input(&p("attn_norm"), &[1, h], dt)?;
        let wq = g.input(&p("wq"), &[h, qw], dt)?;
        let wk = g.input(&p("wk"), &[h, kvw], dt)?;
        let wv = g.input(&p("wv"), &[h, kvw], dt)?;
        let wo = g.input(&p("wo"), &[qw, h], dt)?;
        let mlp_norm = g.input(&p("mlp_norm"), &[1, h], dt)?;
        let wg = g.input(&p("wg"), &[h, cfg.intermediate], dt)?;
        let wu = g.input(&p("wu"), &[h, cfg.intermediate], dt)?;
        let wd = g.input(&p("wd"), &[cfg.intermediate, h], dt)?;
        let k_cache = g.state(&p("k_cache"), &[cfg.kv_heads, cfg.capacity, cfg.head_dim], dt)?;
        let v_cache = g.state(&p("v_cache"), &[cfg.kv_heads, cfg.capacity, cfg.head_dim], dt)?;

        let qkv = streamed_norm_projections(cfg, &[qw, kvw, kvw]).map_err(ir(name, &p("qkv")))?;
        let out = g.mugraph(&p("qkv"), &qkv, &[x, attn_norm, wq, wk, wv])?;
        let (q, k, v) = (out[0], out[1], out[2]);
        let (q, k) = if cfg.qk_norm {
            let q_norm = g.input(&p("q_norm"), &[1, cfg.head_dim], dt)?;
            let k_norm = g.input(&p("k_norm"), &[1, cfg.head_dim], dt)?;
            let rope = Builtin::Rope { pos: ParamExpr::of(pos), norm: Some(Scalar(cfg.eps)) };
            let q = g.builtin(&p("rope_q"), rope.clone(), &[q, inv_freq, q_norm])?[0];
            (q, g.builtin(&p("rope_k"), rope, &[k, inv_freq, k_norm])?[0])
        } else {
            let rope = Builtin::Rope { pos: ParamExpr::of(pos), norm: None };
            let q = g.builtin(&p("rope_q"), rope.clone(), &[q, inv_freq])?[0];
            (q, g.builtin(&p("rope_k"), rope, &[k, inv_freq])?[0])
        };
        g.add_builtin(&p("append_k"), Builtin::KvAppend { pos: ParamExpr::of(pos) }, &[k], &[k_cache])?;
        g.add_builtin(&p("append_v"), Builtin::KvAppend { pos: ParamExpr::of(pos) }, &[v], &[v_cache])?;
        let scale = Scalar(1.0 / (cfg.head_dim as f32).sqrt());
        let (keylen, workers) = (ParamExpr::of(pos).plus(1), super::MpkOptions::default().workers);
        let a = split_kv_attention(&mut g, &p("attention"), [q, k_cache, v_cache], keylen, scale, workers)?;
        let o = streamed_projection_residual(cfg, qw).map_err(ir(name, &p("o_proj")))?;
        x = g.mugraph(&p("o_proj"), &o, &[a, wo, x])?[0];
        let mlp = streamed_gated_mlp(cfg).map_err(ir(name, &p("mlp")))?;
        x = g.mugraph(&p("mlp"), &mlp, &[x, mlp_norm, wg, wu, wd])?[0];
    }
    let final_norm = g.input("final_norm", &[1, h], dt)?;
    let lm_head = g.input("lm_head", &[h, cfg.vocab], dt)?;
    let head = streamed_norm_projections(cfg, &[cfg.vocab]).map_err(ir(name, "logits"))?;
    let logits = g.mugraph("logits", &head, &[x, final_norm, lm_head])?[0];
    let partial = g.builtin("argmax", Builtin::ArgmaxPartial { chunk: chunk(cfg.vocab, 1024) }, &[logits])?[0];
    g.add_builtin("next_token", Builtin::ArgmaxReduce, &[partial], &[token])?;
    Ok(g)
}

/// The step graph's name of the decoder of model `model` (`llama-3.2-1b`), with `layers` when
/// it is a variant with fewer layers: letters and digits kept, anything else `_`, prefixed
/// `decode_` (`decode_llama_3_2_1b`, `decode_qwen3_0_6b_2l`).
pub fn step_name(model: &str, layers: Option<usize>) -> String {
    let base: String = model.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    match layers {
        Some(l) => format!("decode_{base}_{l}l"),
        None => format!("decode_{base}"),
    }
}

/// `rms_norm(x, w) · W_j` for each output width `j`: inputs `x [1, hidden]`, `w [1, hidden]`,
/// then one weight `[hidden, width_j]` per output.
pub fn norm_projections(cfg: &DecoderConfig, widths: &[usize]) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let x = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let w = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let weights: Vec<_> = widths.iter().map(|&n| k.input(&[cfg.hidden, n], cfg.dtype)).collect::<Result<_, _>>()?;
    let n = k.rms_norm(x, cfg.eps, Some(w))?;
    for wj in weights {
        let y = k.matmul(n, wj)?;
        k.output(y, None)?;
    }
    Ok(k)
}

/// Columns of one task of a streamed projection of `n` outputs: 64 (128-byte rows of a 16-bit
/// weight) when they divide `n`, else 32, 16, or `n` whole.
pub fn projection_cols(n: usize) -> usize {
    [64, 32, 16].into_iter().find(|&c| n.is_multiple_of(c)).unwrap_or(n)
}

/// Loop step over the reduced dim `k` of a streamed projection: 128 when it divides `k`, else
/// the largest divisor up to 128.
fn projection_step(k: usize) -> usize {
    (1..=k.min(128)).rev().find(|&t| k.is_multiple_of(t)).unwrap_or(1)
}

/// The block graph of a batch-1 projection `x [1, k] · W_j [k, n]` for each `W_j` (all of the
/// same `n`), as weight streaming wants it: each block owns [`projection_cols`] columns of every
/// `W_j` (whole 128-byte row segments) and walks `k` in the for-loop. `epilogue` combines the
/// accumulators (one per weight, in f32) and the after-loop tiles of `extra` inputs into the
/// saved tile; extra inputs are `[1, n]` operands split like the output, carried through the
/// loop unchanged (an `acc_max` of the same tile, exact).
fn streamed_block(
    k: usize,
    n: usize,
    weights: usize,
    extra: usize,
    dtype: DType,
    epilogue: impl FnOnce(
        &mut BlockGraph,
        &[crate::ir::TensorRef],
        &[crate::ir::TensorRef],
    ) -> Result<crate::ir::TensorRef, crate::ir::IrError>,
) -> Result<BlockGraph, crate::ir::IrError> {
    let cols = projection_cols(n);
    let step = projection_step(k);
    let mut inputs = vec![TensorDesc::new(&[1, k], dtype)];
    inputs.extend((0..weights).map(|_| TensorDesc::new(&[k, n], dtype)));
    inputs.extend((0..extra).map(|_| TensorDesc::new(&[1, n], dtype)));
    let mut b = BlockGraph::new(inputs, [n / cols, 1, 1], 256, k / step)?;
    let split = [Some(1), None, None];
    let x = b.input(0, [None; 3], Some(1))?;
    let mut accs = Vec::new();
    for j in 0..weights {
        let w = b.input(1 + j, split, Some(0))?;
        let y = b.matmul(x, w)?;
        accs.push(b.accum(AccKind::Sum, &[y])?);
    }
    let mut carried = Vec::new();
    for j in 0..extra {
        let r = b.input(1 + weights + j, split, None)?;
        carried.push(b.accum(AccKind::Max, &[r])?);
    }
    let out = epilogue(&mut b, &accs, &carried)?;
    b.output(out, split)?;
    Ok(b)
}

/// [`norm_projections`] with the projections as streamed blocks (`streamed_block`) (one operator per weight;
/// the norm a default block graph).
pub fn streamed_norm_projections(cfg: &DecoderConfig, widths: &[usize]) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let x = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let w = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let weights: Vec<_> = widths.iter().map(|&n| k.input(&[cfg.hidden, n], cfg.dtype)).collect::<Result<_, _>>()?;
    let n = k.rms_norm(x, cfg.eps, Some(w))?;
    for (&width, wj) in widths.iter().zip(weights) {
        let block = streamed_block(cfg.hidden, width, 1, 0, cfg.dtype, |_, accs, _| Ok(accs[0]))?;
        let y = k.custom(&[n, wj], block)?[0];
        k.output(y, None)?;
    }
    Ok(k)
}

/// [`projection_residual`] as one streamed block (`streamed_block`): `r + a · W` with the sum in f32.
pub fn streamed_projection_residual(cfg: &DecoderConfig, width: usize) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let a = k.input(&[1, width], cfg.dtype)?;
    let w = k.input(&[width, cfg.hidden], cfg.dtype)?;
    let r = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let block = streamed_block(width, cfg.hidden, 1, 1, cfg.dtype, |b, accs, carried| {
        b.binary(BinaryOp::Add, carried[0], accs[0])
    })?;
    let out = k.custom(&[a, w, r], block)?[0];
    k.output(out, None)?;
    Ok(k)
}

/// [`gated_mlp`] with streamed blocks: the norm (a default block graph), then one operator for
/// `silu(n · Wg) · (n · Wu)` (both weights' columns in one task) and one for `x + m · Wd`.
pub fn streamed_gated_mlp(cfg: &DecoderConfig) -> Result<KernelGraph, crate::ir::IrError> {
    let (h, i) = (cfg.hidden, cfg.intermediate);
    let mut k = KernelGraph::new();
    let x = k.input(&[1, h], cfg.dtype)?;
    let w = k.input(&[1, h], cfg.dtype)?;
    let wg = k.input(&[h, i], cfg.dtype)?;
    let wu = k.input(&[h, i], cfg.dtype)?;
    let wd = k.input(&[i, h], cfg.dtype)?;
    let n = k.rms_norm(x, cfg.eps, Some(w))?;
    let gate_up = streamed_block(h, i, 2, 0, cfg.dtype, |b, accs, _| {
        let s = b.unary(UnaryOp::Silu, accs[0])?;
        b.binary(BinaryOp::Mul, s, accs[1])
    })?;
    let m = k.custom(&[n, wg, wu], gate_up)?[0];
    let down = streamed_block(i, h, 1, 1, cfg.dtype, |b, accs, carried| b.binary(BinaryOp::Add, carried[0], accs[0]))?;
    let out = k.custom(&[m, wd, x], down)?[0];
    k.output(out, None)?;
    Ok(k)
}

/// `r + a · W`: inputs `a [1, width]`, `W [width, hidden]`, `r [1, hidden]`.
pub fn projection_residual(cfg: &DecoderConfig, width: usize) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let a = k.input(&[1, width], cfg.dtype)?;
    let w = k.input(&[width, cfg.hidden], cfg.dtype)?;
    let r = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let y = k.matmul(a, w)?;
    let out = k.add(r, y)?;
    k.output(out, None)?;
    Ok(k)
}

/// `x + (silu(n · Wg) · (n · Wu)) · Wd` with `n = rms_norm(x, w)`: inputs `x`, `w`, `Wg`, `Wu`,
/// `Wd`.
pub fn gated_mlp(cfg: &DecoderConfig) -> Result<KernelGraph, crate::ir::IrError> {
    let (h, i) = (cfg.hidden, cfg.intermediate);
    let mut k = KernelGraph::new();
    let x = k.input(&[1, h], cfg.dtype)?;
    let w = k.input(&[1, h], cfg.dtype)?;
    let wg = k.input(&[h, i], cfg.dtype)?;
    let wu = k.input(&[h, i], cfg.dtype)?;
    let wd = k.input(&[i, h], cfg.dtype)?;
    let n = k.rms_norm(x, cfg.eps, Some(w))?;
    let gate = k.matmul(n, wg)?;
    let up = k.matmul(n, wu)?;
    let s = k.silu(gate)?;
    let m = k.mul(s, up)?;
    let d = k.matmul(m, wd)?;
    let out = k.add(x, d)?;
    k.output(out, None)?;
    Ok(k)
}

/// The names of a decoder step's weight inputs with their shapes, in graph order (what a
/// checkpoint must provide, `token` and `inv_freq` excluded).
pub fn weight_names(g: &StepGraph) -> Vec<(String, Vec<usize>)> {
    g.tensors()
        .iter()
        .filter(|t| t.kind == super::graph::TensorKind::Input && t.name != "inv_freq")
        .map(|t| (t.name.clone(), t.desc.shape.clone()))
        .collect()
}

/// The tensor called `name`, or an error naming it.
pub fn tensor(g: &StepGraph, name: &str) -> Result<TensorId, GraphError> {
    g.tensor_named(name).ok_or_else(|| GraphError::Dataflow {
        graph: g.name().into(),
        tensor: name.into(),
        reason: "no such tensor".into(),
    })
}
