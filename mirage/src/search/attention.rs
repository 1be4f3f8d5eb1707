//! Attention µGraphs the enumerator does not reach: an online softmax in one kernel and split-KV
//! (flash-decoding) in two, for the safe-softmax attention `softmax(scale · Q·K, last)·V`.
//!
//! The enumerator builds block graphs operator by operator under a structural pruner that treats
//! a running maximum and the rescaling accumulators as opaque, and at decode shapes it does not
//! reach a complete candidate for the max-subtracted attention within its budget. This module
//! recognizes that program ([`recognize`]) and writes its two standard fused forms directly, for
//! every tiling the configuration allows ([`candidates`]); they join the enumerated candidates and
//! are costed and verified like them (fingerprints, then the float check with its wide-range
//! pass), so a tiling the IR or the cost model rejects is dropped and nothing here is trusted
//! unverified.
//!
//! - **Online softmax** (one kernel): the grid splits the heads (and the query rows when they are
//!   many); the loop walks the key tiles with a running maximum `m_i`, probabilities `exp(s − m_i)`
//!   and two rescaling accumulators, `acc_o = acc_o · exp(m_{i−1} − m_i) + P·V` and the same for
//!   `Σ P`; the epilogue divides.
//! - **Split-KV** (two kernels, one query row): the first kernel runs the online softmax over one
//!   of `S` key ranges per block (`grid.y`) and saves the unnormalized `acc_o`, `acc_l` and the
//!   range's maximum `m`; the second kernel combines the `S` parts of each head,
//!   `Σ_j exp(m_j − M)·acc_o_j / Σ_j exp(m_j − M)·acc_l_j` with `M = max_j m_j`.
//!
//! Split-KV is offered for f32 programs only. The parts are kernel outputs, stored in the
//! program's element type, and the combine's weights `exp(m_j − M)` amplify the rounding of a
//! stored maximum: a bf16 `m_j` near 30 is off by up to 1/16, a weight by 6 %. The f32 reference
//! cannot see that rounding (it computes every tensor in f32), so the float check would pass such
//! a µGraph; keeping the parts in f32 needs a kernel output type other than its inputs', which the
//! IR does not have yet.

use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, IrError, KernelGraph, KernelOp, TensorRef, UnaryOp};

use super::SearchConfig;

/// A recognized safe-softmax attention program: `out = softmax(scale · q·k, last)·v` with `q
/// [h.., r, d]`, `k [h.., d, n]`, `v [h.., n, dv]` program inputs (`h` present when the rank is 3).
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// Program input positions of `q`, `k`, `v`.
    pub inputs: [usize; 3],
    /// The scale of the scores (`None`: unscaled).
    pub scale: Option<f32>,
    /// Heads (1 for rank 2).
    pub heads: usize,
    /// Query rows per head.
    pub rows: usize,
    /// Keys.
    pub keys: usize,
    /// Rank of the tensors (2 or 3).
    pub rank: usize,
}

/// The operator producing `t` and its operands.
fn producer(g: &KernelGraph, t: TensorRef) -> (&KernelOp, &[TensorRef]) {
    let n = &g.nodes()[t.node];
    (&n.op, &n.inputs)
}

/// The position of `t` among the program inputs, when it is one.
fn input_position(g: &KernelGraph, t: TensorRef) -> Option<usize> {
    if !matches!(g.nodes()[t.node].op, KernelOp::Input { .. }) {
        return None;
    }
    Some(g.nodes()[..t.node].iter().filter(|n| matches!(n.op, KernelOp::Input { .. })).count())
}

/// Recognizes `softmax(scale · q·k, last)·v` as lowered from the DSL (`reduce_max`, `sub`, `exp`,
/// `reduce_sum`, `div`, the scale as `mul_scalar`), with one output and row-major inputs of one
/// float type; `None` for anything else.
pub fn recognize(g: &KernelGraph) -> Option<Attention> {
    let outs = g.outputs();
    let [(out, _)] = outs.as_slice() else { return None };
    let (KernelOp::Matmul, [p, v]) = producer(g, *out) else { return None };
    let (KernelOp::Binary { op: BinaryOp::Div }, [e, l]) = producer(g, *p) else { return None };
    let (KernelOp::ReduceSum { dim: sum_dim }, [e2]) = producer(g, *l) else { return None };
    let (KernelOp::Unary { op: UnaryOp::Exp }, [shifted]) = producer(g, *e) else { return None };
    let (KernelOp::Binary { op: BinaryOp::Sub }, [s, m]) = producer(g, *shifted) else { return None };
    let (KernelOp::ReduceMax { dim: max_dim }, [s2]) = producer(g, *m) else { return None };
    if e2 != e || s2 != s {
        return None;
    }
    let (scale, scores) = match producer(g, *s) {
        (KernelOp::Unary { op: UnaryOp::MulScalar { c } }, [x]) if c.0 > 0.0 => (Some(c.0), *x),
        _ => (None, *s),
    };
    let (KernelOp::Matmul, [q, k]) = producer(g, scores) else { return None };
    let inputs = [input_position(g, *q)?, input_position(g, *k)?, input_position(g, *v)?];
    let descs = g.inputs();
    let [dq, dk, dv] = inputs.map(|i| descs[i]);
    let rank = dq.shape.len();
    let float = dq.dtype.is_float() && dq.dtype == dk.dtype && dq.dtype == dv.dtype;
    let row_major = [dq, dk, dv].iter().all(|d| d.strides == crate::ir::row_major_strides(&d.shape));
    if !(rank == 2 || rank == 3) || *sum_dim != rank - 1 || *max_dim != rank - 1 || !float || !row_major {
        return None;
    }
    let heads = if rank == 3 { dq.shape[0] } else { 1 };
    Some(Attention { inputs, scale, heads, rows: dq.shape[rank - 2], keys: dk.shape[rank - 1], rank })
}

/// A grid map: axis x on the heads (dim 0) for rank 3, axis y on dim `y`.
fn map(a: &Attention, y: Option<usize>) -> [Option<usize>; 3] {
    [(a.rank == 3).then_some(0), y, None]
}

/// The in-loop part shared by both forms: scores of the key tile, the running maximum and the
/// two rescaling accumulators. Returns `(acc_o, acc_l, m)` with `m` the running maximum (in
/// the loop).
fn online_body(
    a: &Attention,
    bg: &mut BlockGraph,
    q: TensorRef,
    k: TensorRef,
    v: TensorRef,
) -> Result<(TensorRef, TensorRef, TensorRef), IrError> {
    let last = a.rank - 1;
    let mut s = bg.matmul(q, k)?;
    if let Some(c) = a.scale {
        s = bg.unary(UnaryOp::MulScalar { c: crate::ir::Scalar(c) }, s)?;
    }
    let rm = bg.push(BlockOp::RunningMax { dim: last }, &[s])?;
    let shifted = bg.binary(BinaryOp::Sub, s, rm[0])?;
    let p = bg.unary(UnaryOp::Exp, shifted)?;
    let r = bg.unary(UnaryOp::Exp, rm[1])?;
    let pv = bg.matmul(p, v)?;
    let acc_o = bg.accum(AccKind::Rescale, &[pv, r])?;
    let acc_l = bg.accum(AccKind::SumLastRescale, &[p, r])?;
    Ok((acc_o, acc_l, rm[0]))
}

/// The first (or only) kernel's block graph up to its accumulators: `grid_y` blocks over the
/// query rows, or with `split_keys` over the key range, and `frange` key tiles in the loop.
/// Returns the block graph and `(acc_o, acc_l, m)` of [`online_body`].
fn online_kernel(
    program: &KernelGraph,
    a: &Attention,
    grid_y: usize,
    split_keys: bool,
    frange: usize,
    threads: usize,
) -> Result<(BlockGraph, [TensorRef; 3]), IrError> {
    let descs = program.inputs();
    let (rows_dim, last) = (a.rank - 2, a.rank - 1);
    let operands = a.inputs.iter().map(|&i| descs[i].clone()).collect();
    let mut bg = BlockGraph::new(operands, [a.heads, grid_y, 1], threads, frange)?;
    // The dim grid.y splits in q, k and v: the query rows, or the keys.
    let (q_y, k_y, v_y) = if split_keys { (None, Some(last), Some(rows_dim)) } else { (Some(rows_dim), None, None) };
    let q = bg.input(0, map(a, q_y), None)?;
    let k = bg.input(1, map(a, k_y), Some(last))?;
    let v = bg.input(2, map(a, v_y), Some(rows_dim))?;
    let (acc_o, acc_l, m) = online_body(a, &mut bg, q, k, v)?;
    Ok((bg, [acc_o, acc_l, m]))
}

/// A graph with the program's inputs (in order) and `bg` launched on `q, k, v`: the graph and
/// the kernel's outputs.
fn launch(program: &KernelGraph, a: &Attention, bg: BlockGraph) -> Result<(KernelGraph, Vec<TensorRef>), IrError> {
    let mut g = KernelGraph::new();
    let ins = program
        .inputs()
        .iter()
        .map(|d| g.input_strided(&d.shape, &d.strides, d.dtype))
        .collect::<Result<Vec<_>, _>>()?;
    let outs = g.custom(&a.inputs.map(|i| ins[i]), bg)?;
    Ok((g, outs))
}

/// The one-kernel online softmax: `row_blocks` blocks over the query rows (grid.y), `frange`
/// key tiles in the loop.
pub fn online_softmax(
    program: &KernelGraph,
    a: &Attention,
    row_blocks: usize,
    frange: usize,
    threads: usize,
) -> Result<KernelGraph, IrError> {
    let (mut bg, [acc_o, acc_l, _]) = online_kernel(program, a, row_blocks, false, frange, threads)?;
    let o = bg.binary(BinaryOp::Div, acc_o, acc_l)?;
    bg.output(o, map(a, Some(a.rank - 2)))?;
    let (mut g, outs) = launch(program, a, bg)?;
    g.output(outs[0], None)?;
    Ok(g)
}

/// Split-KV for one query row: `splits` key ranges (grid.y) of `frange` tiles each, then the
/// combine kernel.
pub fn split_kv(
    program: &KernelGraph,
    a: &Attention,
    splits: usize,
    frange: usize,
    threads: usize,
) -> Result<KernelGraph, IrError> {
    let (mut bg, [acc_o, acc_l, m]) = online_kernel(program, a, splits, true, frange, threads)?;
    let m = bg.accum(AccKind::Max, &[m])?;
    for t in [acc_o, acc_l, m] {
        bg.output(t, map(a, Some(a.rank - 2)))?;
    }
    let (mut g, parts) = launch(program, a, bg)?;
    let combined = combine(a, &mut g, &parts, threads)?;
    g.output(combined, None)?;
    Ok(g)
}

/// The combine kernel of split-KV: parts `acc_o [h.., S, dv]`, `acc_l [h.., S, 1]`, `m [h.., S,
/// 1]` to `Σ_j w_j·acc_o_j / Σ_j w_j·acc_l_j` with `w_j = exp(m_j − max_j m_j)`, one block per
/// head.
fn combine(a: &Attention, g: &mut KernelGraph, parts: &[TensorRef], threads: usize) -> Result<TensorRef, IrError> {
    let descs = parts.iter().map(|&t| g.desc(t).cloned()).collect::<Result<Vec<_>, _>>()?;
    let rows_dim = a.rank - 2;
    let mut bg = BlockGraph::new(descs, [a.heads, 1, 1], threads, 1)?;
    let o = bg.input(0, map(a, None), None)?;
    let l = bg.input(1, map(a, None), None)?;
    let m = bg.input(2, map(a, None), None)?;
    let total = bg.op(BlockOp::ReduceMax { dim: rows_dim }, &[m])?;
    let diff = bg.binary(BinaryOp::Sub, m, total)?;
    let w = bg.unary(UnaryOp::Exp, diff)?;
    let wo = bg.binary(BinaryOp::Mul, o, w)?;
    let wl = bg.binary(BinaryOp::Mul, l, w)?;
    let num = bg.op(BlockOp::ReduceSum { dim: rows_dim }, &[wo])?;
    let den = bg.op(BlockOp::ReduceSum { dim: rows_dim }, &[wl])?;
    let out = bg.binary(BinaryOp::Div, num, den)?;
    let out = bg.accum(AccKind::Sum, &[out])?;
    bg.output(out, map(a, None))?;
    Ok(g.custom(parts, bg)?[0])
}

/// Every online-softmax and split-KV µGraph of a recognized attention program within the
/// configuration's limits: loop ranges from `cfg.forloop_ranges` that divide the keys, threads
/// from `cfg.threads`, grids within `cfg.max_blocks`; split-KV only for one query row, with
/// `cfg.max_kernels ≥ 2`, and only for f32 programs (module docs). The enumerator's limits on
/// block operators and outputs do not apply: these graphs are written, not enumerated.
pub fn candidates(program: &KernelGraph, cfg: &SearchConfig) -> Vec<KernelGraph> {
    let Some(a) = recognize(program) else { return Vec::new() };
    let dtype = program.inputs()[a.inputs[0]].dtype;
    let mut out = Vec::new();
    for &threads in &cfg.threads {
        for &frange in std::iter::once(&1).chain(&cfg.forloop_ranges) {
            for row_blocks in [1, 2, 4, 8, 16, 32, 64] {
                let fits = a.rows.is_multiple_of(row_blocks) && a.heads * row_blocks <= cfg.max_blocks;
                if fits && a.keys.is_multiple_of(frange) {
                    out.extend(online_softmax(program, &a, row_blocks, frange, threads).ok());
                }
            }
            if a.rows != 1 || cfg.max_kernels < 2 || dtype != DType::F32 {
                continue;
            }
            for splits in [2, 4, 8, 16, 32, 64] {
                let fits = a.heads * splits <= cfg.max_blocks && splits <= cfg.max_axis_blocks;
                if fits && a.keys.is_multiple_of(splits * frange) {
                    out.extend(split_kv(program, &a, splits, frange, threads).ok());
                }
            }
        }
    }
    out
}
