//! Split-K for normalized projections: `rms_norm(x) · g @ w` in two kernels, the weight read by
//! every SM.
//!
//! A decode step's projections after an RMSNorm (QKV, an LM head) have a few rows `x [m, k]` and
//! a weight `w [k, n]` of many megabytes. The enumerator fuses them into one kernel that walks
//! `k` in its loop and divides by the row's RMS (accumulated beside the product) after it; its
//! grid splits only `n`, so a QKV of 4608 columns in tiles of 64 runs 72 blocks and leaves 60 of
//! 132 SMs idle (DECISIONS, profile of session 35). Splitting `k` across the grid would fill the
//! device, but then no block sees a whole row of `x` for its RMS, and the enumerator's classes
//! cannot give the combining kernel a loop that walks both the partial products and `x` (they are
//! different classes), so it would need a third kernel. This module writes the two-kernel form
//! directly ([`split_k`]), for every tiling the configuration allows ([`candidates`]); like the
//! attention templates (`search::attention`) the graphs join the enumerated candidates and are
//! costed and verified like them (fingerprints, then the float check), so nothing here is trusted
//! unverified.
//!
//! - **Products** (`S` ranges of `k`, grid `[n / t, S]`): block `(i, j)` walks range `j` of `k`
//!   in `F` tiles, applies the gain (`x · g`, when the program has one) and accumulates the tile
//!   products of its `t` columns; it stores the sum unnormalized as rows `j·m .. (j+1)·m` of the
//!   parts `P [S·m, n]`.
//! - **Combine** (grid `[n / t]`, a loop of `S` iterations): iteration `j` reads the parts of
//!   range `j` for the block's columns and the `j`-th `k / S` columns of `x`; the loop sums the
//!   parts and the squares of `x` (`acc_rms_last`, which divides by the whole count `k`), and the
//!   epilogue divides: `Σ_j P_j / rms(x)`. The normalization commutes with the product (`rms` is
//!   one scale per row), which is what lets the products skip it.
//!
//! The parts are stored in the program's type, as the enumerator's split-K stores its partial
//! sums: the combine's division needs its operands in one type, and `x` is read in the program's.
//! That rules out f16, whose unnormalized parts can overflow where the normalized result does
//! not (a row of large activations times a column of weights): only bf16 (f32's range) and f32
//! programs are recognized. Only `eps = 0` is covered (the loop's `acc_rms_last` has no
//! epsilon; the DSL's `rms_norm(x)` has none), and the verifier must see the mean's count exactly:
//! an epilogue dividing a sum of squares by a constant `k` would carry the f32 rounding of `1/k`
//! for any `k` that is not a power of two, which fingerprints reject.

use crate::ir::{AccKind, BinaryOp, BlockGraph, DType, IrError, KernelGraph, KernelOp, TensorDesc, TensorRef};

use super::SearchConfig;
use super::pattern::{graph_over_inputs, input_position, producer};

/// A recognized normalized projection: `out = rms_norm(x) · g @ w` (the gain optional) with `x
/// [m, k]`, `g [1, k]`, `w [k, n]` row-major program inputs, all bf16 or all f32, and `eps = 0`.
#[derive(Clone, Debug, PartialEq)]
pub struct NormProjection {
    /// Program input positions of `x` and `w`.
    pub inputs: [usize; 2],
    /// Program input position of the gain `g`, when the program applies one.
    pub gain: Option<usize>,
    /// Rows of `x`.
    pub rows: usize,
    /// The reduced dim (columns of `x`, rows of `w`).
    pub k: usize,
    /// Columns of `w` and of the output.
    pub n: usize,
}

impl NormProjection {
    /// The program input positions the products kernel reads, in its operand order: `x`, `w`,
    /// then `g` when there is one.
    fn product_operands(&self) -> Vec<usize> {
        self.inputs.iter().copied().chain(self.gain).collect()
    }
}

/// Recognizes `matmul(rms_norm(x), w)`, `matmul(rms_norm(x, g), w)` and `matmul(rms_norm(x) · g,
/// w)` (either operand order of the product) as lowered from the DSL, with one output, rank-2
/// row-major inputs, all bf16 or all f32, a gain of shape `[1, k]` and `eps = 0`; `None` for
/// anything else.
pub fn recognize(g: &KernelGraph) -> Option<NormProjection> {
    let outs = g.outputs();
    let [(out, _)] = outs.as_slice() else { return None };
    let (KernelOp::Matmul, [a, w]) = producer(g, *out) else { return None };
    // The normalized operand, and a gain applied after the norm.
    let (normed, mut gain) =
        match producer(g, *a) {
            (KernelOp::Binary { op: BinaryOp::Mul }, [l, r]) => {
                if matches!(producer(g, *l).0, KernelOp::RmsNorm { .. }) { (*l, Some(*r)) } else { (*r, Some(*l)) }
            }
            _ => (*a, None),
        };
    let (KernelOp::RmsNorm { eps }, norm_args) = producer(g, normed) else { return None };
    if eps.0 != 0.0 {
        return None;
    }
    let x = match norm_args {
        [x] => *x,
        [x, weight] if gain.is_none() => {
            gain = Some(*weight);
            *x
        }
        _ => return None,
    };
    let inputs = [input_position(g, x)?, input_position(g, *w)?];
    let gain = match gain {
        Some(t) => Some(input_position(g, t)?),
        None => None,
    };
    let descs = g.inputs();
    let (dx, dw) = (descs.get(inputs[0])?, descs.get(inputs[1])?);
    let (rows, k, n) = match (dx.shape.as_slice(), dw.shape.as_slice()) {
        ([m, k], [k2, n]) if k == k2 => (*m, *k, *n),
        _ => return None,
    };
    let mut all = vec![dx, dw];
    if let Some(gi) = gain {
        let dg = descs.get(gi)?;
        if dg.shape != [1, k] {
            return None;
        }
        all.push(dg);
    }
    // f16 is left out: its unnormalized parts can overflow where the normalized result does not
    // (module docs).
    let float = matches!(dx.dtype, DType::Bf16 | DType::F32) && all.iter().all(|d| d.dtype == dx.dtype);
    let row_major = all.iter().all(|d| d.strides == crate::ir::row_major_strides(&d.shape));
    if !float || !row_major {
        return None;
    }
    Some(NormProjection { inputs, gain, rows, k, n })
}

/// The narrowest column tile of the products, in bytes of one row of `w`: 128, a whole L2 line
/// (narrower tiles read partial lines; the enumerator's wide splits use the same floor).
pub const MIN_TILE_BYTES: usize = 128;

/// The products kernel's block graph on `(x, w[, g])` (the order of [`split_k`]): `splits`
/// ranges of `k` (grid.y), `n / tile` column tiles (grid.x), `frange` tiles of `k` in the loop;
/// the unnormalized parts `[splits · m, n]` (range `j`'s rows at `j·m`) in the program's type.
fn products(
    program: &KernelGraph,
    p: &NormProjection,
    splits: usize,
    tile: usize,
    frange: usize,
    threads: usize,
) -> Result<BlockGraph, IrError> {
    let descs = program.inputs();
    let operands = p.product_operands().into_iter().map(|i| descs[i].clone()).collect();
    let mut bg = BlockGraph::new(operands, [p.n / tile, splits, 1], threads, frange)?;
    // x and g: range j of k (grid.y), walked by the loop; w: columns (grid.x) and range (grid.y).
    let x = bg.input(0, [None, Some(1), None], Some(1))?;
    let w = bg.input(1, [Some(1), Some(0), None], Some(0))?;
    let a = match p.gain {
        Some(_) => {
            let g = bg.input(2, [None, Some(1), None], Some(1))?;
            bg.binary(BinaryOp::Mul, x, g)?
        }
        None => x,
    };
    let prod = bg.matmul(a, w)?;
    let acc = bg.accum(AccKind::Sum, &[prod])?;
    // Range j's rows at j·m (grid.y concatenates along dim 0).
    bg.output(acc, [Some(1), Some(0), None])?;
    Ok(bg)
}

/// The combine kernel on the parts `P [splits · m, n]` and `x [m, k]`: `n / tile` blocks, a loop
/// of `splits` iterations summing range `j`'s parts of the block's columns and the squares of
/// the `j`-th `k / splits` columns of `x` (`acc_rms_last`); the epilogue divides by the RMS.
fn combine(
    parts: &TensorDesc,
    x: &TensorDesc,
    p: &NormProjection,
    splits: usize,
    tile: usize,
    threads: usize,
) -> Result<BlockGraph, IrError> {
    let mut bg = BlockGraph::new(vec![parts.clone(), x.clone()], [p.n / tile, 1, 1], threads, splits)?;
    let pj = bg.input(0, [Some(1), None, None], Some(0))?;
    let xj = bg.input(1, [None, None, None], Some(1))?;
    let sum = bg.accum(AccKind::Sum, &[pj])?;
    let rms = bg.accum(AccKind::RmsLast, &[xj])?;
    let out = bg.binary(BinaryOp::Div, sum, rms)?;
    bg.output(out, [Some(1), None, None])?;
    Ok(bg)
}

/// Split-K of a recognized normalized projection (module docs): `splits` ranges of `k`, column
/// tiles of `tile` in both kernels, `frange` tiles of `k` per range in the products' loop,
/// `threads` per block of the products, `combine_threads` per block of the combine.
pub fn split_k(
    program: &KernelGraph,
    p: &NormProjection,
    splits: usize,
    tile: usize,
    frange: usize,
    threads: usize,
    combine_threads: usize,
) -> Result<KernelGraph, IrError> {
    let bg = products(program, p, splits, tile, frange, threads)?;
    let (mut g, ins) = graph_over_inputs(program)?;
    let operands: Vec<TensorRef> = p.product_operands().into_iter().map(|i| ins[i]).collect();
    let parts = g.custom(&operands, bg)?[0];
    let parts_desc = g.desc(parts)?.clone();
    let cb = combine(&parts_desc, program.inputs()[p.inputs[0]], p, splits, tile, combine_threads)?;
    let out = g.custom(&[parts, ins[p.inputs[0]]], cb)?[0];
    g.output(out, None)?;
    Ok(g)
}

/// Threads per block of the combine kernel: its sum of squares over a `[m, k / S]` slab of `x`
/// per iteration is latency-bound, and 256 threads ran every measured template candidate faster
/// than 128 (DECISIONS change 87).
pub const COMBINE_THREADS: usize = 256;

/// The ranges of `k` offered: 2 to 8, so that every range holds at least 16 columns per loop
/// tile somewhere in the configuration's loop ranges.
pub const SPLITS: [usize; 5] = [2, 3, 4, 6, 8];

/// Every split-K µGraph of a recognized normalized projection within the configuration's limits:
/// ranges from [`SPLITS`] dividing `k`, column tiles of at least [`MIN_TILE_BYTES`] per row of
/// `w` (64 to 256 columns) dividing `n`, loop ranges from `cfg.forloop_ranges` (and 1) whose
/// tiles of `k` are multiples of 16, threads from `cfg.threads`; grids within `cfg.max_blocks`
/// and `cfg.max_axis_blocks`, and only with `cfg.max_kernels ≥ 2`. The enumerator's limits on
/// block operators and outputs do not apply: these graphs are written, not enumerated.
pub fn candidates(program: &KernelGraph, cfg: &SearchConfig) -> Vec<KernelGraph> {
    let Some(p) = recognize(program) else { return Vec::new() };
    if cfg.max_kernels < 2 {
        return Vec::new();
    }
    let elem = program.inputs().get(p.inputs[1]).map_or(2, |d| d.dtype.size_bytes());
    let mut out = Vec::new();
    for tile in [64, 128, 256] {
        if tile * elem < MIN_TILE_BYTES || !p.n.is_multiple_of(tile) || p.n / tile > cfg.max_axis_blocks {
            continue;
        }
        for splits in SPLITS {
            if !p.k.is_multiple_of(splits) || (p.n / tile) * splits > cfg.max_blocks || splits > cfg.max_axis_blocks {
                continue;
            }
            let range = p.k / splits;
            for &frange in std::iter::once(&1).chain(&cfg.forloop_ranges) {
                if !range.is_multiple_of(frange) || !(range / frange).is_multiple_of(16) {
                    continue;
                }
                for &threads in &cfg.threads {
                    out.extend(split_k(program, &p, splits, tile, frange, threads, COMBINE_THREADS).ok());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    /// `rms_norm(x) · g @ w` over `[m, k]`, `[1, k]`, `[k, n]`.
    fn program(m: usize, k: usize, n: usize, gain: bool, dtype: DType) -> KernelGraph {
        let mut p = KernelGraph::new();
        let x = p.input(&[m, k], dtype).expect("builds");
        let g = p.input(&[1, k], dtype).expect("builds");
        let w = p.input(&[k, n], dtype).expect("builds");
        let nx = p.rms_norm(x, 0.0, None).expect("builds");
        let a = if gain { p.binary(BinaryOp::Mul, nx, g).expect("builds") } else { nx };
        let o = p.matmul(a, w).expect("builds");
        p.output(o, None).expect("builds");
        p
    }

    #[test]
    fn the_norm_projections_are_recognized() {
        let p = recognize(&program(16, 256, 128, true, DType::Bf16)).expect("recognized");
        assert_eq!(p, NormProjection { inputs: [0, 2], gain: Some(1), rows: 16, k: 256, n: 128 });
        let p = recognize(&program(2, 256, 128, false, DType::F32)).expect("recognized");
        assert_eq!((p.gain, p.rows), (None, 2));
        assert_eq!(recognize(&program(2, 256, 128, false, DType::F16)), None);
    }

    #[test]
    fn an_epsilon_or_a_bare_matmul_is_not_recognized() {
        let mut p = KernelGraph::new();
        let x = p.input(&[4, 64], DType::F32).expect("builds");
        let w = p.input(&[64, 64], DType::F32).expect("builds");
        let nx = p.rms_norm(x, 1e-6, None).expect("builds");
        let o = p.matmul(nx, w).expect("builds");
        p.output(o, None).expect("builds");
        assert_eq!(recognize(&p), None);
        let mut p = KernelGraph::new();
        let x = p.input(&[4, 64], DType::F32).expect("builds");
        let w = p.input(&[64, 64], DType::F32).expect("builds");
        let o = p.matmul(x, w).expect("builds");
        p.output(o, None).expect("builds");
        assert_eq!(recognize(&p), None);
    }

    #[test]
    fn candidates_respect_the_tiles_and_ranges() {
        let prog = program(16, 3584, 4608, true, DType::Bf16);
        let cfg = SearchConfig::default();
        let cands = candidates(&prog, &cfg);
        assert!(!cands.is_empty());
        for g in &cands {
            assert_eq!(g.num_kernels(), 2);
        }
        let one = SearchConfig { max_kernels: 1, ..SearchConfig::default() };
        assert!(candidates(&prog, &one).is_empty());
    }
}
