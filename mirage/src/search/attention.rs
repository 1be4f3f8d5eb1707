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
//! - **Split-KV** (two kernels, few query rows): the first kernel runs the online softmax of one
//!   query row (`grid.z`, absent for one row) over one of `S` key ranges per block (`grid.y`)
//!   and saves the unnormalized `acc_o`, `acc_l` and the range's maximum `m` (parts `[h.., S,
//!   rows·dv]`, `[h.., S, rows]`: range `j` of row `r` at `[j, r·dv..]`); the second kernel, one
//!   block per head and row, combines the `S` parts of its row,
//!   `Σ_j exp(m_j − M)·acc_o_j / Σ_j exp(m_j − M)·acc_l_j` with `M = max_j m_j`. The rows of a
//!   head (the query heads of a GQA group) read the same K and V tiles, in separate blocks: the
//!   cost model charges the repeated reads (from L2 when K and V fit).
//!
//! The parts are always stored in f32 (savers with a stored type, `BlockOp::Output::store`),
//! whatever the program's element type; the combine kernel reads them as f32 and stores its
//! result in the program's type. Stored in f16/bf16 they would be wrong: the combine's weights
//! `exp(m_j − M)` amplify the rounding of a stored maximum (a bf16 `m_j` near 30 is off by up to
//! 1/16, a weight by 6 %). The float check cannot see that (the f32 reference computes every
//! tensor in f32); `testing::rounding::run_stored`, which rounds each kernel output to its stored
//! type, does (`mirage/tests/softmax.rs` compares both storages).
//!
//! - **Grouped split-KV** (two kernels, several query rows per head, [`split_kv_grouped`]): the
//!   first kernel runs all query rows of a head (a GQA group) in one block per key range, so each
//!   K and V tile is read once per head, not once per row; its parts are `[h.., rows, S·dv]` and
//!   `[h.., rows, S]` (range `j` of row `r` at `[r, j·dv..]`), and the combine kernel, one block
//!   per head and row, walks the `S` ranges in its loop with the online softmax's rescaling.
//!
//! Split-KV is offered for at most [`SPLIT_KV_MAX_ROWS`] query rows: one block per row re-reads
//! K and V for each, which only pays when the rows are few and the heads do not fill the device.

use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, IrError, KernelGraph, KernelOp, TensorRef, UnaryOp};

use super::SearchConfig;
use super::pattern::{graph_over_inputs, input_position, producer};

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

/// The narrowest key tile a loop over the keys walks, in bytes of one row of K (`k [h.., d, n]` is
/// row-major, so a key tile reads a segment of each of K's `d` rows): 128, one full L2 line per
/// row. Narrower tiles read partial lines; measured on the H200 (DECISIONS change 60), split-KV
/// with tiles of 16 bf16 keys (32 bytes) ran 1.38× a fixed build with tiles of 128 at 32768 keys,
/// while the cost model put it within 1.10×. A block without a loop (one tile for its whole key
/// range) is not limited.
pub const MIN_KEY_TILE_BYTES: usize = 128;

/// The most query rows per head split-KV is offered for (module docs).
pub const SPLIT_KV_MAX_ROWS: usize = 16;

/// A grid map: axis x on the heads (dim 0) for rank 3, axis y on dim `y`.
fn map(a: &Attention, y: Option<usize>) -> [Option<usize>; 3] {
    map_z(a, y, None)
}

/// A grid map: axis x on the heads (dim 0) for rank 3, axes y and z on dims `y` and `z`.
fn map_z(a: &Attention, y: Option<usize>, z: Option<usize>) -> [Option<usize>; 3] {
    [(a.rank == 3).then_some(0), y, z]
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

/// How the first (or only) kernel's grid.y divides the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// Over the query rows (the one-kernel online softmax).
    Rows,
    /// Over the key range, one block per query row (grid.z).
    KeysPerRow,
    /// Over the key range, every query row of a head in one block (the rows share the block's
    /// K and V tiles).
    KeysGrouped,
}

/// The first (or only) kernel's block graph up to its accumulators: `grid_y` blocks as `split`
/// says, and `frange` key tiles in the loop. Returns the block graph and `(acc_o, acc_l, m)` of
/// [`online_body`].
fn online_kernel(
    program: &KernelGraph,
    a: &Attention,
    grid_y: usize,
    split: Split,
    frange: usize,
    threads: usize,
) -> Result<(BlockGraph, [TensorRef; 3]), IrError> {
    let descs = program.inputs();
    let (rows_dim, last) = (a.rank - 2, a.rank - 1);
    let operands = a.inputs.iter().map(|&i| descs[i].clone()).collect();
    let grid_z = if split == Split::KeysPerRow { a.rows } else { 1 };
    let mut bg = BlockGraph::new(operands, [a.heads, grid_y, grid_z], threads, frange)?;
    // The dim grid.y splits in q, k and v: the query rows, or the keys (grid.z the rows).
    let (q_y, k_y, v_y) =
        if split == Split::Rows { (Some(rows_dim), None, None) } else { (None, Some(last), Some(rows_dim)) };
    let q = bg.input(0, map_z(a, q_y, (split == Split::KeysPerRow).then_some(rows_dim)), None)?;
    let k = bg.input(1, map(a, k_y), Some(last))?;
    let v = bg.input(2, map(a, v_y), Some(rows_dim))?;
    let (acc_o, acc_l, m) = online_body(a, &mut bg, q, k, v)?;
    Ok((bg, [acc_o, acc_l, m]))
}

/// A graph with the program's inputs (in order) and `bg` launched on `q, k, v`: the graph and
/// the kernel's outputs.
fn launch(program: &KernelGraph, a: &Attention, bg: BlockGraph) -> Result<(KernelGraph, Vec<TensorRef>), IrError> {
    let (mut g, ins) = graph_over_inputs(program)?;
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
    let (mut bg, [acc_o, acc_l, _]) = online_kernel(program, a, row_blocks, Split::Rows, frange, threads)?;
    let o = bg.binary(BinaryOp::Div, acc_o, acc_l)?;
    bg.output(o, map(a, Some(a.rank - 2)))?;
    let (mut g, outs) = launch(program, a, bg)?;
    g.output(outs[0], None)?;
    Ok(g)
}

/// Split-KV: `splits` key ranges (grid.y) of `frange` tiles each for every query row (grid.z),
/// then the combine kernel.
pub fn split_kv(
    program: &KernelGraph,
    a: &Attention,
    splits: usize,
    frange: usize,
    threads: usize,
) -> Result<KernelGraph, IrError> {
    split_kv_as(program, a, splits, frange, threads, Split::KeysPerRow)
}

/// The two split-KV forms: the first kernel split over the keys as `split` says, its parts
/// `(acc_o, acc_l, m)` stored in f32, then the form's combine kernel.
fn split_kv_as(
    program: &KernelGraph,
    a: &Attention,
    splits: usize,
    frange: usize,
    threads: usize,
    split: Split,
) -> Result<KernelGraph, IrError> {
    let (rows_dim, last) = (a.rank - 2, a.rank - 1);
    let (mut bg, [acc_o, acc_l, m]) = online_kernel(program, a, splits, split, frange, threads)?;
    let m = bg.accum(AccKind::Max, &[m])?;
    // One row per block: range j of row r at [j, r·(tile width)..] (the parts of a row are a slab
    // of the last dim). A head's rows in one block: range j at [r, j·(tile width)..].
    let parts_map = if split == Split::KeysGrouped { map(a, Some(last)) } else { map_z(a, Some(rows_dim), Some(last)) };
    for t in [acc_o, acc_l, m] {
        bg.output_as(t, parts_map, DType::F32)?;
    }
    let (mut g, parts) = launch(program, a, bg)?;
    let dtype = program.inputs()[a.inputs[0]].dtype;
    let combined = if split == Split::KeysGrouped {
        combine_ranges(a, &mut g, &parts, splits, threads, dtype)?
    } else {
        combine(a, &mut g, &parts, threads, dtype)?
    };
    g.output(combined, None)?;
    Ok(g)
}

/// The combine kernel's block graph on the split-KV parts `acc_o, acc_l, m` of `g`: one block per
/// head (grid.x) and query row (grid.y), `frange` iterations, the parts read with `part_map`
/// (and walked along `loop_dim`). Returns it and its three inputs.
fn combine_inputs(
    a: &Attention,
    g: &KernelGraph,
    parts: &[TensorRef],
    threads: usize,
    frange: usize,
    part_map: [Option<usize>; 3],
    loop_dim: Option<usize>,
) -> Result<(BlockGraph, [TensorRef; 3]), IrError> {
    let descs = parts.iter().map(|&t| g.desc(t).cloned()).collect::<Result<Vec<_>, _>>()?;
    let mut bg = BlockGraph::new(descs, [a.heads, a.rows, 1], threads, frange)?;
    let o = bg.input(0, part_map, loop_dim)?;
    let l = bg.input(1, part_map, loop_dim)?;
    let m = bg.input(2, part_map, loop_dim)?;
    Ok((bg, [o, l, m]))
}

/// The combine kernel of split-KV: f32 parts `acc_o [h.., S, rows·dv]`, `acc_l [h.., S, rows]`,
/// `m [h.., S, rows]` to `Σ_j w_j·acc_o_j / Σ_j w_j·acc_l_j` with `w_j = exp(m_j − max_j m_j)`,
/// one block per head (grid.x) and query row (grid.y), stored as `dtype` (the program's element
/// type).
fn combine(
    a: &Attention,
    g: &mut KernelGraph,
    parts: &[TensorRef],
    threads: usize,
    dtype: DType,
) -> Result<TensorRef, IrError> {
    let (rows_dim, last) = (a.rank - 2, a.rank - 1);
    let (mut bg, [o, l, m]) = combine_inputs(a, g, parts, threads, 1, map(a, Some(last)), None)?;
    let total = bg.op(BlockOp::ReduceMax { dim: rows_dim }, &[m])?;
    let diff = bg.binary(BinaryOp::Sub, m, total)?;
    let w = bg.unary(UnaryOp::Exp, diff)?;
    let wo = bg.binary(BinaryOp::Mul, o, w)?;
    let wl = bg.binary(BinaryOp::Mul, l, w)?;
    let num = bg.op(BlockOp::ReduceSum { dim: rows_dim }, &[wo])?;
    let den = bg.op(BlockOp::ReduceSum { dim: rows_dim }, &[wl])?;
    let out = bg.binary(BinaryOp::Div, num, den)?;
    let out = bg.accum(AccKind::Sum, &[out])?;
    bg.output_as(out, map(a, Some(rows_dim)), dtype)?;
    Ok(g.custom(parts, bg)?[0])
}

/// Split-KV with the query rows of a head in one block: `splits` key ranges (grid.y) of `frange`
/// tiles each, every block computing all `rows` of its head against its K and V tiles (a GQA
/// group reads its head's keys once, not once per row), then the ranged combine. The parts are
/// `acc_o [h.., rows, S·dv]`, `acc_l` and `m [h.., rows, S]`: range `j` of row `r` at `[r,
/// j·dv..]` and `[r, j]`.
pub fn split_kv_grouped(
    program: &KernelGraph,
    a: &Attention,
    splits: usize,
    frange: usize,
    threads: usize,
) -> Result<KernelGraph, IrError> {
    split_kv_as(program, a, splits, frange, threads, Split::KeysGrouped)
}

/// The combine kernel of [`split_kv_grouped`]: one block per head (grid.x) and query row
/// (grid.y) walks the row's `splits` parts in its loop, one range per iteration, with the online
/// softmax's rescaling — `M` the running maximum of the `m_j`, `acc_o = acc_o·exp(M_old − M) +
/// exp(m_j − M)·acc_o_j` and the same for `acc_l` — and stores `acc_o / acc_l` as `dtype`.
fn combine_ranges(
    a: &Attention,
    g: &mut KernelGraph,
    parts: &[TensorRef],
    splits: usize,
    threads: usize,
    dtype: DType,
) -> Result<TensorRef, IrError> {
    let (rows_dim, last) = (a.rank - 2, a.rank - 1);
    let (mut bg, [o, l, m]) = combine_inputs(a, g, parts, threads, splits, map(a, Some(rows_dim)), Some(last))?;
    let rm = bg.push(BlockOp::RunningMax { dim: last }, &[m])?;
    let diff = bg.binary(BinaryOp::Sub, m, rm[0])?;
    let w = bg.unary(UnaryOp::Exp, diff)?;
    let r = bg.unary(UnaryOp::Exp, rm[1])?;
    let wo = bg.binary(BinaryOp::Mul, o, w)?;
    let wl = bg.binary(BinaryOp::Mul, l, w)?;
    let acc_o = bg.accum(AccKind::Rescale, &[wo, r])?;
    let acc_l = bg.accum(AccKind::Rescale, &[wl, r])?;
    let out = bg.binary(BinaryOp::Div, acc_o, acc_l)?;
    bg.output_as(out, map(a, Some(rows_dim)), dtype)?;
    Ok(g.custom(parts, bg)?[0])
}

/// Every online-softmax and split-KV µGraph of a recognized attention program within the
/// configuration's limits: loop ranges from `cfg.forloop_ranges` that divide the keys, threads
/// from `cfg.threads`, grids within `cfg.max_blocks`; split-KV only for at most
/// [`SPLIT_KV_MAX_ROWS`] query rows, with `cfg.max_kernels ≥ 2` (module docs). The enumerator's limits on block operators and outputs do
/// not apply: these graphs are written, not enumerated.
pub fn candidates(program: &KernelGraph, cfg: &SearchConfig) -> Vec<KernelGraph> {
    let Some(a) = recognize(program) else { return Vec::new() };
    let elem = program.inputs().get(a.inputs[1]).map_or(2, |d| d.dtype.size_bytes());
    // A loop walks key tiles of at least MIN_KEY_TILE_BYTES of each row of K (module docs).
    let wide_enough =
        |keys_per_block: usize, frange: usize| frange == 1 || (keys_per_block / frange) * elem >= MIN_KEY_TILE_BYTES;
    let mut out = Vec::new();
    for &threads in &cfg.threads {
        for &frange in std::iter::once(&1).chain(&cfg.forloop_ranges) {
            for row_blocks in [1, 2, 4, 8, 16, 32, 64] {
                let fits = a.rows.is_multiple_of(row_blocks) && a.heads * row_blocks <= cfg.max_blocks;
                if fits && a.keys.is_multiple_of(frange) && wide_enough(a.keys, frange) {
                    out.extend(online_softmax(program, &a, row_blocks, frange, threads).ok());
                }
            }
            if a.rows > SPLIT_KV_MAX_ROWS || cfg.max_kernels < 2 {
                continue;
            }
            for splits in [2, 4, 8, 16, 32, 64] {
                let fits = a.heads * splits * a.rows <= cfg.max_blocks
                    && splits <= cfg.max_axis_blocks
                    && a.rows <= cfg.max_axis_blocks;
                if fits && a.keys.is_multiple_of(splits * frange) && wide_enough(a.keys / splits, frange) {
                    out.extend(split_kv(program, &a, splits, frange, threads).ok());
                }
                // The rows of a head in one block: fewer blocks, each key tile read once.
                let fits = a.heads * splits <= cfg.max_blocks && splits <= cfg.max_axis_blocks;
                if a.rows > 1 && fits && a.keys.is_multiple_of(splits * frange) && wide_enough(a.keys / splits, frange)
                {
                    out.extend(split_kv_grouped(program, &a, splits, frange, threads).ok());
                }
            }
        }
    }
    out
}
