//! How each reduction of a block graph spreads over the threads of a block, and the static
//! shared memory the block-wide ones need.

use crate::ir::{AccKind, BlockGraph, BlockOp};

use super::fusion::RegisterPlan;
use super::schedule::Schedule;

/// How the threads of a block share a reduction of `outputs` values, each over `extent / width`
/// elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceStrategy {
    /// One thread per output (many outputs, or short reductions).
    PerThread,
    /// Few long reductions: every warp takes a strided share of one output, the partial results
    /// meet in the static scratch array `red` (one slot per warp).
    SplitWarps {
        /// Warps per output.
        warps_per_output: usize,
    },
    /// Many short reductions: `lanes` lanes of one warp per output (all outputs in one pass),
    /// each summing a strided share, then log2(lanes) shuffles.
    LaneGroups {
        /// Lanes per output.
        lanes: usize,
    },
    /// One warp per output, the warps striding over the outputs.
    PerWarp,
}

impl ReduceStrategy {
    /// The strategy for reducing a tile of `shape` along `dim` to `width` by `threads` threads
    /// (`warps` warps).
    pub fn choose(shape: &[usize], dim: usize, width: usize, threads: usize, warps: usize) -> ReduceStrategy {
        let mut out_shape = shape.to_vec();
        out_shape[dim] = width;
        let outputs: usize = out_shape.iter().product();
        let per_output = shape[dim] / width;
        if outputs >= threads || per_output < 32 {
            ReduceStrategy::PerThread
        } else if outputs * 2 <= warps && per_output >= 64 * (warps / outputs) {
            ReduceStrategy::SplitWarps { warps_per_output: warps / outputs }
        } else if outputs > warps && lanes_per_output(outputs, threads, per_output) > 1 {
            ReduceStrategy::LaneGroups { lanes: lanes_per_output(outputs, threads, per_output) }
        } else {
            ReduceStrategy::PerWarp
        }
    }
}

/// Lanes per output of a reduction of `outputs` values of `len` elements each by `threads`
/// threads in one pass: the largest power of two up to 32 with `outputs * lanes <= threads` and at
/// least two elements per lane (1: not applicable).
pub fn lanes_per_output(outputs: usize, threads: usize, len: usize) -> usize {
    let mut l = 1;
    while l < 32 && outputs * l * 2 <= threads && len >= l * 4 {
        l *= 2;
    }
    l
}

/// One planned reduction: the operand's `dim` reduced to `width` (strided groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reduction {
    /// The reduced dim of the operand.
    pub dim: usize,
    /// The width it is reduced to.
    pub width: usize,
    /// How the threads share it.
    pub strategy: ReduceStrategy,
}

/// The reduction of every node whose code reduces: the reducing operators and `rms_norm` (its
/// row sums of squares) wherever they run, and the reducing accumulators of the loop body whose
/// operand is in shared memory.
pub(super) fn plan_reductions(
    bg: &BlockGraph,
    rp: &RegisterPlan,
    schedule: &Schedule,
    threads: usize,
    warps: usize,
) -> Vec<Option<Reduction>> {
    let nodes = bg.nodes();
    (0..nodes.len())
        .map(|i| {
            let nd = &nodes[i];
            let x = bg.tile(*nd.inputs.first()?).ok()?;
            let last = x.shape.len().checked_sub(1)?;
            let (dim, width) = match nd.op {
                BlockOp::ReduceSum { dim } | BlockOp::ReduceMax { dim } | BlockOp::RunningMax { dim } => (dim, 1),
                BlockOp::ReduceSumTo { dim, width } => (dim, width),
                BlockOp::RmsNorm { .. } => (last, 1),
                BlockOp::Accum { acc } if schedule.body.contains(&i) && !rp.reg_sum[i] && !rp.reg_acc[i] => match acc {
                    AccKind::SumLast | AccKind::RmsLast | AccKind::SumLastRescale => (last, 1),
                    AccKind::SumTo { width } => (last, width),
                    AccKind::Sum | AccKind::Max | AccKind::Rescale => return None,
                },
                _ => return None,
            };
            Some(Reduction { dim, width, strategy: ReduceStrategy::choose(&x.shape, dim, width, threads, warps) })
        })
        .collect()
}

/// Static shared memory of the planned reductions: one float per warp when any is block-wide.
pub(super) fn static_smem_bytes(reductions: &[Option<Reduction>], warps: usize) -> usize {
    let block_wide = reductions.iter().flatten().any(|r| matches!(r.strategy, ReduceStrategy::SplitWarps { .. }));
    if block_wide { 4 * warps } else { 0 }
}
