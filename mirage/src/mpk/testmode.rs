//! Test mode: sub-graphs of a decoder step (one operator, one layer — also with Qwen3's q/k
//! norm —, the whole toy model) with
//! their data, runtime parameters per step and the comparison of a device step with the CPU
//! reference; and the empty-task graphs that measure the megakernel's own overheads.
//!
//! A device run is checked step by step: step `s` on the CPU starts from the device's tensors
//! after step `s − 1` (so rounding differences do not accumulate), runs [`reference_step`] and
//! is compared with the device's tensors after step `s` ([`compare_step`]).

use crate::ir::{DType, KernelGraph, Scalar};

use super::builtin::Builtin;
use super::decoder::{DecoderConfig, decoder_step, gated_mlp, norm_projections};
use super::exec::{ExecError, HostTensors, SplitMix, reference_step};
use super::graph::{GraphError, OpKind, ParamExpr, StepGraph, TensorId, TensorKind};

/// A step graph with the data and runtime parameters of a test.
#[derive(Clone, Debug)]
pub struct TestCase {
    /// The graph (its name is the case's name).
    pub graph: StepGraph,
    /// Steps to run.
    pub steps: usize,
    /// The position of step 0 (the `pos` parameter, when the graph has one, is `pos0 + step`).
    pub pos0: i32,
}

impl TestCase {
    /// The runtime parameter values of step `step` (`pos` = `pos0 + step`; any other
    /// parameter 0).
    pub fn params(&self, step: usize) -> Vec<i32> {
        self.graph.params().iter().map(|p| if p == "pos" { self.pos0 + step as i32 } else { 0 }).collect()
    }

    /// Random data for every input and state (buffers zero): weights `[in, out]` uniform in
    /// `±1/√in`, norm weights near 1, token ids valid, `inv_freq` the RoPE frequencies of θ =
    /// 10000, everything else uniform in ±1.
    pub fn init(&self, seed: u64) -> HostTensors {
        let g = &self.graph;
        let mut rng = SplitMix(seed);
        let mut host = HostTensors::zeros(g);
        let vocab = g.tensor_named("embed").map(|t| g.tensor(t).desc.shape[0]).unwrap_or(512);
        for (i, t) in g.tensors().iter().enumerate() {
            if t.kind == TensorKind::Buffer {
                continue;
            }
            let n: usize = t.desc.shape.iter().product();
            let base = t.name.rsplit('.').next().unwrap_or(&t.name);
            let values: Vec<f32> = if base.starts_with("token") {
                (0..n).map(|_| (rng.next_u64() % vocab as u64) as f32).collect()
            } else if base == "inv_freq" {
                (0..n).map(|i| 10000f64.powf(-(i as f64) / n as f64) as f32).collect()
            } else if base.ends_with("norm") {
                (0..n).map(|_| rng.uniform(0.9, 1.1)).collect()
            } else if t.desc.shape.len() == 2 && t.desc.shape[0] > 1 && t.kind == TensorKind::Input {
                let a = 1.0 / (t.desc.shape[0] as f32).sqrt();
                (0..n).map(|_| rng.uniform(-a, a)).collect()
            } else {
                (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
            };
            // Sizes agree by construction.
            let _ = host.set(TensorId(i), &values);
        }
        host
    }
}

fn ir(graph: &str) -> impl Fn(crate::ir::IrError) -> GraphError {
    let graph = graph.to_owned();
    move |e| GraphError::Operand { graph: graph.clone(), op: "test".into(), reason: e.to_string() }
}

/// One µGraph as a step graph: inputs `names` with the graph's input shapes.
fn mugraph_case(name: &str, k: &KernelGraph, names: &[&str]) -> Result<StepGraph, GraphError> {
    let mut g = StepGraph::new(name)?;
    let inputs: Vec<TensorId> =
        k.inputs().iter().zip(names).map(|(d, n)| g.input(n, &d.shape, d.dtype)).collect::<Result<_, _>>()?;
    g.mugraph("op", k, &inputs)?;
    Ok(g)
}

/// Every operator kind a decoder step needs, alone; one decoder layer (and one with q/k norm and
/// a head dimension other than hidden / heads); the two-layer toy model.
pub fn cases() -> Result<Vec<TestCase>, GraphError> {
    let cfg = DecoderConfig::toy();
    let (h, dt, d) = (cfg.hidden, cfg.dtype, cfg.head_dim);
    let case = |graph, steps, pos0| TestCase { graph, steps, pos0 };
    let mut out = Vec::new();

    let norm = {
        let mut k = KernelGraph::new();
        let x = k.input(&[1, h], dt).map_err(ir("op_norm"))?;
        let w = k.input(&[1, h], dt).map_err(ir("op_norm"))?;
        let y = k.rms_norm(x, cfg.eps, Some(w)).map_err(ir("op_norm"))?;
        k.output(y, None).map_err(ir("op_norm"))?;
        k
    };
    out.push(case(mugraph_case("op_norm", &norm, &["x", "w_norm"])?, 2, 0));
    let proj = norm_projections(&cfg, &[cfg.intermediate]).map_err(ir("op_projection"))?;
    out.push(case(mugraph_case("op_projection", &proj, &["x", "w_norm", "w"])?, 2, 0));
    let mlp = gated_mlp(&cfg).map_err(ir("op_gated_mlp"))?;
    out.push(case(mugraph_case("op_gated_mlp", &mlp, &["x", "w_norm", "wg", "wu", "wd"])?, 2, 0));
    let add = {
        let mut k = KernelGraph::new();
        let a = k.input(&[1, h], dt).map_err(ir("op_residual_add"))?;
        let b = k.input(&[1, h], dt).map_err(ir("op_residual_add"))?;
        let y = k.add(a, b).map_err(ir("op_residual_add"))?;
        k.output(y, None).map_err(ir("op_residual_add"))?;
        k
    };
    out.push(case(mugraph_case("op_residual_add", &add, &["a", "b"])?, 2, 0));

    let mut g = StepGraph::new("op_rope")?;
    let pos = g.param("pos")?;
    let x = g.input("x", &[1, cfg.heads * d], dt)?;
    let inv = g.input("inv_freq", &[d / 2], DType::F32)?;
    g.builtin("rope", Builtin::Rope { pos: ParamExpr::of(pos), norm: None }, &[x, inv])?;
    out.push(case(g, 4, 5));

    // Qwen3's per-head q/k RMSNorm fused into RoPE
    let mut g = StepGraph::new("op_rope_norm")?;
    let pos = g.param("pos")?;
    let x = g.input("x", &[1, cfg.heads * d], dt)?;
    let inv = g.input("inv_freq", &[d / 2], DType::F32)?;
    let gain = g.input("q_norm", &[1, d], dt)?;
    g.builtin("rope", Builtin::Rope { pos: ParamExpr::of(pos), norm: Some(Scalar(1e-6)) }, &[x, inv, gain])?;
    out.push(case(g, 4, 5));

    let mut g = StepGraph::new("op_kv_append")?;
    let pos = g.param("pos")?;
    let k = g.input("k", &[1, cfg.kv_heads * d], dt)?;
    let cache = g.state("k_cache", &[cfg.kv_heads, cfg.capacity, d], dt)?;
    g.add_builtin("append", Builtin::KvAppend { pos: ParamExpr::of(pos) }, &[k], &[cache])?;
    out.push(case(g, 4, 3));

    // Split-KV attention: (name, heads, kv_heads, head dim, capacity, chunks, steps, pos0). Key
    // lengths pos0 + 1 ..= pos0 + steps: 1, 2, 3, chunks − 1, chunks, chunks + 1 (chunks of one
    // key and empty chunks); the whole cache; GQA groups 4, 1 and 8, head dims 64 and 128; chunks
    // longer than a worker's threads (keys walked in several tiles) at a large odd length.
    for (name, heads, kvh, hd, cap, chunks, steps, pos0) in [
        ("op_attention", cfg.heads * 2, cfg.kv_heads, d, cfg.capacity, 5, 8, 0),
        ("op_attention_long", cfg.heads * 2, cfg.kv_heads, d, cfg.capacity, 5, 3, cfg.capacity as i32 - 3),
        ("op_attention_g1_d128", 4, 4, 128, 64, 3, 5, 0),
        ("op_attention_g8_d128", 16, 2, 128, 1100, 3, 3, 1028),
    ] {
        let mut g = StepGraph::new(name)?;
        let pos = g.param("pos")?;
        let q = g.input("q", &[1, heads * hd], dt)?;
        let kc = g.state("k_cache", &[kvh, cap, hd], dt)?;
        let vc = g.state("v_cache", &[kvh, cap, hd], dt)?;
        let scale = Scalar(1.0 / (hd as f32).sqrt());
        let partial = Builtin::AttentionPartial { keylen: ParamExpr::of(pos).plus(1), scale, chunks };
        let p = g.builtin("attention", partial, &[q, kc, vc])?[0];
        g.builtin("attention_combine", Builtin::AttentionCombine { dtype: dt }, &[p])?;
        out.push(case(g, steps, pos0));
    }

    let mut g = StepGraph::new("op_embedding")?;
    let table = g.input("embed", &[cfg.vocab, h], dt)?;
    let token = g.state("token", &[1], DType::F32)?;
    g.builtin("embedding", Builtin::Embedding { chunk: 64 }, &[table, token])?;
    out.push(case(g, 2, 0));

    let mut g = StepGraph::new("op_argmax")?;
    let logits = g.input("logits", &[1, cfg.vocab], dt)?;
    let token = g.state("token", &[1], DType::F32)?;
    let partial = g.builtin("argmax", Builtin::ArgmaxPartial { chunk: 64, columns: cfg.vocab }, &[logits])?[0];
    g.add_builtin("next_token", Builtin::ArgmaxReduce, &[partial], &[token])?;
    out.push(case(g, 2, 0));

    out.push(case(decoder_step("layer", &DecoderConfig { layers: 1, ..cfg.clone() })?, 4, 0));
    // Qwen3's shape: q/k norm, and a head dimension that is not hidden / heads
    let qwen = DecoderConfig { layers: 1, qk_norm: true, head_dim: 128, eps: 1e-6, ..cfg.clone() };
    out.push(case(decoder_step("layer_qk_norm", &qwen)?, 4, 0));
    // Every projection's weight tile by tile (the toy's tasks take 8 columns then: `tile_unit`).
    let contiguous = DecoderConfig { layers: 1, contiguous_below: 64, ..cfg.clone() };
    out.push(case(decoder_step("layer_contiguous", &contiguous)?, 4, 0));
    // The output projection by KV head group (`grouped_output`), plain and with Qwen3's shape.
    let grouped = DecoderConfig { layers: 1, grouped_output: true, ..cfg.clone() };
    out.push(case(decoder_step("layer_grouped", &grouped)?, 4, 0));
    let grouped_qwen = DecoderConfig { grouped_output: true, ..qwen.clone() };
    out.push(case(decoder_step("layer_grouped_qk_norm", &grouped_qwen)?, 4, 0));
    // A vocabulary no tile width divides (1001 = 7 · 11 · 13): the head and logits padded to 1024
    // columns, the argmax stopping at 1001.
    let odd = DecoderConfig { layers: 1, vocab: 1001, ..cfg.clone() };
    out.push(case(decoder_step("layer_vocab_1001", &odd)?, 4, 0));
    out.push(case(decoder_step("toy", &cfg)?, 64, 0));
    Ok(out)
}

/// The empty-task graphs of the overhead measurements, for `workers` workers:
/// - `overhead_dispatch`: `n` independent one-tile tasks pinned to worker 0 (the time per task is
///   the dispatch cost: table reads, timestamps, barriers);
/// - `overhead_hop`: a chain of `n` one-tile tasks, each reading its predecessor's output,
///   alternating between workers 0 and 1 (each link is one cross-SM dependency hop);
/// - `overhead_fanin`: `workers` tiles, then `workers` tiles each reading all of them (every
///   worker waits on one aggregate counter of `workers` triggers), `n / 2` times over.
pub fn overhead_graphs(workers: usize, n: usize) -> Result<Vec<StepGraph>, GraphError> {
    let mut out = Vec::new();
    let mut g = StepGraph::new("overhead_dispatch")?;
    let x = g.input("x", &[1], DType::F32)?;
    for i in 0..n {
        g.builtin(&format!("t{i}"), Builtin::Nop { all: false }, &[x])?;
        let op = g.op_named(&format!("t{i}")).ok_or_else(|| missing("overhead_dispatch"))?;
        g.pin(op, vec![0])?;
    }
    out.push(g);

    let mut g = StepGraph::new("overhead_hop")?;
    let mut x = g.input("x", &[1], DType::F32)?;
    for i in 0..n {
        x = g.builtin(&format!("t{i}"), Builtin::Nop { all: false }, &[x])?[0];
        let op = g.op_named(&format!("t{i}")).ok_or_else(|| missing("overhead_hop"))?;
        g.pin(op, vec![i % 2])?;
    }
    out.push(g);

    let mut g = StepGraph::new("overhead_fanin")?;
    let mut x = g.input("x", &[workers], DType::F32)?;
    for i in 0..n.div_ceil(2) {
        x = g.builtin(&format!("all{i}"), Builtin::Nop { all: true }, &[x])?[0];
        let op = g.op_named(&format!("all{i}")).ok_or_else(|| missing("overhead_fanin"))?;
        g.pin(op, (0..workers).collect())?;
    }
    out.push(g);
    Ok(out)
}

fn missing(graph: &str) -> GraphError {
    GraphError::Unsupported { graph: graph.into(), op: "-".into(), reason: "an operator just added is missing".into() }
}

/// The largest finite magnitude of `values` (an empty split-KV chunk's maximum is −∞), at
/// least 1e-6: the scale a tolerance is relative to.
fn magnitude<'a>(values: impl Iterator<Item = &'a f32>) -> f32 {
    values.filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6)
}

/// Checks a device step against the CPU: `before` holds the device's tensors before the step
/// (inputs and states), `after` after it. Runs [`reference_step`] from `before` and compares
/// every buffer and state with `after`: within `tolerance` of each tensor's largest magnitude
/// (with 1e-3 of it as an absolute floor), except the indices argmax chose, where the device's
/// index must name a logit within the tolerance of the CPU's largest among the candidates, by
/// the same margin the logits themselves are compared with (the tolerance times the largest
/// logit magnitude of the tensor): a near-tie may go either way when the logits differ by
/// rounding.
pub fn compare_step(
    g: &StepGraph,
    before: &HostTensors,
    after: &HostTensors,
    params: &[i32],
    tolerance: f32,
) -> Result<(), String> {
    let mut cpu = before.clone();
    reference_step(g, &mut cpu, params).map_err(|e: ExecError| e.to_string())?;
    // Tensors of argmax indices: the logits they index, how many columns each index covers (0:
    // a whole row) and the columns that count (the rest is padding past the vocabulary).
    let mut indices: Vec<Option<(TensorId, usize, usize)>> = vec![None; g.tensors().len()];
    for op in g.ops() {
        match op.kind {
            OpKind::Builtin(Builtin::ArgmaxPartial { chunk, columns }) => {
                indices[op.outputs[0].0] = Some((op.inputs[0], chunk, columns))
            }
            OpKind::Builtin(Builtin::ArgmaxReduce) => {
                let partial = op.inputs[0];
                if let Some(p) = g.ops().iter().find(|o| o.outputs.contains(&partial)) {
                    let columns = match p.kind {
                        OpKind::Builtin(Builtin::ArgmaxPartial { columns, .. }) => columns,
                        _ => usize::MAX,
                    };
                    indices[op.outputs[0].0] = Some((p.inputs[0], 0, columns));
                }
            }
            _ => {}
        }
    }
    for (i, t) in g.tensors().iter().enumerate() {
        if t.kind == TensorKind::Input {
            continue;
        }
        let (want, got) = (cpu.get(TensorId(i)), after.get(TensorId(i)));
        // the magnitude of the values (the (value, index) pairs of a partial argmax: the values)
        let is_value = |j: usize| !matches!(indices[i], Some((_, chunk, _)) if chunk > 0 && j % 2 == 1);
        let scale = magnitude(want.iter().enumerate().filter(|(j, _)| is_value(*j)).map(|(_, v)| v));
        // The logits an argmax chose among, their width, and the margin the logits' own
        // comparison grants each logit (the tolerance of the whole logits tensor's magnitude): a
        // device logit that passes it may reorder near-ties. A chunk's own magnitude was stricter
        // than that, and failed a Qwen3-width step on the H200 where the logits all passed.
        let chosen = indices[i].map(|(logits, chunk, columns)| {
            let l = cpu.get(logits);
            let width = g.tensor(logits).desc.shape[1];
            (l, width, chunk, columns.min(width), magnitude(l.iter()))
        });
        for (j, (&a, &b)) in got.iter().zip(want).enumerate() {
            if let Some((l, width, chunk, columns, lscale)) = chosen {
                // which candidates entry j chose among, if it is an index (columns past
                // `columns` are padding: never candidates)
                let range = if chunk == 0 {
                    Some((j * width, j * width + columns))
                } else if j % 2 == 1 {
                    let (row, c) = (j / 2 / (width / chunk), j / 2 % (width / chunk));
                    let (c0, c1) = ((c * chunk).min(columns), ((c + 1) * chunk).min(columns));
                    Some((row * width + c0, row * width + c1))
                } else {
                    None
                };
                if let Some((lo, hi)) = range {
                    let cand = &l[lo..hi];
                    let best = cand.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let col = (lo % width) as f32;
                    let k = a - col;
                    // a tile of padding only: its first column, as the CPU writes
                    let ok = if cand.is_empty() {
                        a == b
                    } else {
                        k >= 0.0 && (k as usize) < cand.len() && cand[k as usize] >= best - (tolerance + 1e-3) * lscale
                    };
                    if !ok {
                        return Err(format!(
                            "`{}` element {j}: the device chose index {a}, the CPU {b} (best logit {best}, the device's {:?})",
                            t.name,
                            cand.get(k.max(0.0) as usize)
                        ));
                    }
                    continue;
                }
            }
            if a == b {
                continue;
            }
            let err = (a - b).abs();
            if err.is_nan() || err > tolerance * scale + 1e-3 * scale {
                return Err(format!(
                    "`{}` element {j}: device {a}, CPU {b} (|error| {err} > {tolerance} × {scale})",
                    t.name
                ));
            }
        }
    }
    Ok(())
}
