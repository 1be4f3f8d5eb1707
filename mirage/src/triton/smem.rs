//! How much shared memory Triton will give a generated kernel, and the `num_stages` that keeps it
//! under the device's limit.
//!
//! Triton refuses to load a compiled kernel whose shared memory (`metadata.shared`, the size of
//! its allocation analysis) exceeds the device's opt-in limit per block
//! (`CompiledKernel._init_handles` in `python/triton/compiler/compiler.py` raises
//! `OutOfResources(shared, max_shared_mem, "shared memory")`), so a kernel that does not fit is
//! only found on the GPU. The estimate here follows Triton's software pipeliner
//! (`lib/Dialect/TritonGPU/Transforms/Pipeliner/`):
//!
//! - `AssignLatencies.cpp`: in a loop with a `tl.dot`, every load of the loop body that reaches a
//!   dot operand through any chain of operations of that body (`loadOpsToIndirectionLevel`) gets
//!   latency `num_stages − 1`; loads that feed no dot are not pipelined (the loop carries no
//!   `num_stages` attribute of its own).
//! - `LowerLoops.cpp` (`lowerLoads`, `createAlloc`): each pipelined load becomes an asynchronous
//!   copy into a ring of `num_stages − 1` buffers of the load's tile in its element type, one more
//!   when the load feeds a Hopper `warp_group_dot` directly (`loadRequiresAdditionalBuffer`).
//!   These buffers live for the whole loop.
//! - The dot's operands are staged in shared memory (`local_alloc` of the MMA operand layout)
//!   unless the pipelined buffer already is that operand.
//!
//! The estimate counts, per kernel: `num_stages − 1` buffers of every in-loop load that feeds a
//! matmul (padded to powers of two, in the input's element type); one staged copy of a matmul's
//! `B` operand (`K × N`, each at least 16, in the dot's element type) unless that operand is the
//! loaded tile itself (`direct_operand`: no mask on `K`, no padding of `N` up to 16), while `A`
//! reaches the MMA from registers; and the largest reduction scratch (warps combining partial
//! results: the reduced tile times the warps, in f32, when the tile has fewer elements than the
//! block has threads). This is the rule that reproduces the H200 run of every golden, benchmark
//! and coverage µGraph with `num_stages=3`: the 7 modules Triton refused are exactly those it
//! puts above 232,448 bytes, at the sizes Triton reported (270,336 + 32 bytes of reduction
//! scratch for `rmsnorm_linear_bs1`, 409,600 for two qwen2.5 µGraphs), and every module that ran
//! stays below (the tests pin this).
//!
//! Limits (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability":
//! maximum shared memory per thread block, opt-in): 227 KiB on compute capability 9.0
//! ([`SM90_SHARED_MEMORY`]), 163 KiB on 8.0 ([`SM80_SHARED_MEMORY`]).

use crate::ir::{AccKind, BlockGraph, BlockOp, DType, num_elements};

use super::TritonError;

/// The opt-in shared memory per block of compute capability 9.0 (H100, H200): 227 KiB.
pub const SM90_SHARED_MEMORY: usize = 232_448;

/// The opt-in shared memory per block of compute capability 8.0 (A100): 163 KiB.
pub const SM80_SHARED_MEMORY: usize = 166_912;

/// Triton's default `num_stages` on NVIDIA GPUs (`CUDAOptions.num_stages`).
pub const DEFAULT_NUM_STAGES: usize = 3;

/// Smallest dim `tl.dot` accepts (the generator pads smaller operands up to it).
const DOT_MIN: usize = 16;

/// The shared memory a kernel is estimated to need with a given `num_stages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmemEstimate {
    /// The `num_stages` of the launch.
    pub num_stages: usize,
    /// Bytes of the pipelined loads' buffers.
    pub pipelined: usize,
    /// Bytes of the dot operands staged in shared memory.
    pub operands: usize,
    /// Bytes of the largest reduction scratch.
    pub scratch: usize,
}

impl SmemEstimate {
    /// All of it, in bytes.
    pub fn total(&self) -> usize {
        self.pipelined + self.operands + self.scratch
    }
}

/// The padded (power-of-two) element count of a tile.
fn padded_elems(shape: &[usize]) -> usize {
    num_elements(&shape.iter().map(|d| d.next_power_of_two()).collect::<Vec<_>>())
}

/// Bytes of one element of a tile as loaded (i32 ids and floats keep their size).
fn elem_bytes(dtype: DType) -> usize {
    dtype.size_bytes()
}

/// The warps a kernel launches with (as [`super::kernel`] chooses them).
pub fn num_warps(bg: &BlockGraph) -> usize {
    let warps = (bg.threads() / 32).max(1);
    if warps.is_power_of_two() { warps } else { warps.next_power_of_two() / 2 }
}

/// Which nodes of `bg` are computed inside the for-loop (the loop body Triton pipelines): input
/// iterators with a for-loop dim and everything computed in the loop from them.
fn in_loop(bg: &BlockGraph) -> Vec<bool> {
    let nodes = bg.nodes();
    let mut inside = vec![false; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        inside[i] = match &n.op {
            BlockOp::Input { forloop_dim, .. } => forloop_dim.is_some(),
            BlockOp::Output { .. } => false,
            BlockOp::Accum { .. } | BlockOp::RunningMax { .. } => true,
            _ => n.inputs.iter().any(|t| inside[t.node]),
        };
    }
    inside
}

/// Whether matmul operand `t` (dim `k_dim` its `K`, `other` the dim that `tl.dot` needs at
/// least 16 of) reaches `tl.dot` as the loaded tile itself: an input iterator whose `K` needs no
/// masking and whose other dim no padding up to 16, in a rank-2 tile. Then the pipelined buffer
/// is the operand; otherwise the operand is staged in shared memory of its own.
fn direct_operand(bg: &BlockGraph, t: crate::ir::TensorRef, k_dim: usize, other: usize) -> bool {
    let n = &bg.nodes()[t.node];
    let shape = &n.outputs[t.port].shape;
    matches!(n.op, BlockOp::Input { .. })
        && shape.len() == 2
        && shape[k_dim].is_power_of_two()
        && shape[other].next_power_of_two() >= DOT_MIN
}

/// The estimate for `bg` launched with `num_stages` (at least 1).
pub fn estimate(bg: &BlockGraph, num_stages: usize) -> Result<SmemEstimate, TritonError> {
    let nodes = bg.nodes();
    let inside = in_loop(bg);
    // Which in-loop nodes reach an in-loop matmul's operand through in-loop nodes.
    let mut feeds_dot = vec![false; nodes.len()];
    for i in (0..nodes.len()).rev() {
        let n = &nodes[i];
        if inside[i] && (matches!(n.op, BlockOp::Matmul) || feeds_dot[i]) {
            for t in &n.inputs {
                if inside[t.node] {
                    feeds_dot[t.node] = true;
                }
            }
        }
    }
    let loop_has_dot = nodes.iter().enumerate().any(|(i, n)| inside[i] && matches!(n.op, BlockOp::Matmul));
    let pipelines = loop_has_dot && num_stages > 1;
    let mut pipelined = 0usize;
    if pipelines {
        for (i, n) in nodes.iter().enumerate() {
            let loads = matches!(n.op, BlockOp::Input { .. } | BlockOp::Gather { .. });
            if loads && inside[i] && feeds_dot[i] {
                let t = &n.outputs[0];
                pipelined += (num_stages - 1) * padded_elems(&t.shape) * elem_bytes(t.dtype);
            }
        }
    }
    let mut operands = 0usize;
    let mut scratch = 0usize;
    let warps = num_warps(bg);
    let tile = |t: crate::ir::TensorRef| bg.tile(t).map_err(TritonError::Ir);
    for n in nodes {
        let reduces = match &n.op {
            BlockOp::Accum { acc } => {
                matches!(acc, AccKind::SumLast | AccKind::RmsLast | AccKind::SumLastRescale | AccKind::SumTo { .. })
            }
            _ => false,
        };
        match &n.op {
            _ if reduces => {
                let out = padded_elems(&n.outputs[0].shape);
                if out < 32 * warps {
                    scratch = scratch.max(out * warps * 4);
                }
            }
            BlockOp::Matmul => {
                let (a, b) = (tile(n.inputs[0])?, tile(n.inputs[1])?);
                let r = a.shape.len();
                let (k, nn) = (a.shape[r - 1], b.shape[r - 1]);
                let p = |d: usize| d.next_power_of_two().max(DOT_MIN);
                let bytes = match n.outputs[0].dtype {
                    DType::F32 => 4,
                    _ => 2,
                };
                // An operand served by its pipelined buffer costs nothing more; any other B is
                // staged, and so is an A loaded as it is (a padded or computed A reaches the MMA
                // from registers).
                let served = |t: crate::ir::TensorRef, k_dim: usize, other: usize| {
                    pipelines && inside[t.node] && direct_operand(bg, t, k_dim, other)
                };
                if !served(n.inputs[1], 0, 1) {
                    operands += p(k) * p(nn) * bytes;
                }
                let m = a.shape[r - 2];
                let loaded_a = matches!(nodes[n.inputs[0].node].op, BlockOp::Input { .. }) && m >= DOT_MIN;
                if loaded_a && !served(n.inputs[0], 1, 0) {
                    operands += p(m) * p(k) * bytes;
                }
            }
            BlockOp::ReduceSum { .. }
            | BlockOp::ReduceMax { .. }
            | BlockOp::ReduceSumTo { .. }
            | BlockOp::RmsNorm { .. }
            | BlockOp::Argmax { .. }
            | BlockOp::RunningMax { .. } => {
                // Warps combine their partial results through shared memory only when the
                // reduced tile has fewer elements than the block has threads (otherwise each warp
                // owns whole rows).
                let out = padded_elems(&n.outputs[0].shape);
                if out < 32 * warps {
                    scratch = scratch.max(out * warps * 4);
                }
            }
            _ => {}
        }
    }
    Ok(SmemEstimate { num_stages, pipelined, operands, scratch })
}

/// The `num_stages` a kernel is launched with: the largest of [`DEFAULT_NUM_STAGES`], .., 1 whose
/// estimate fits in `limit` bytes, with that estimate; a [`TritonError::Unsupported`] naming the
/// kernel and the smallest estimate when none fits.
pub fn choose_stages(bg: &BlockGraph, name: &str, limit: usize) -> Result<SmemEstimate, TritonError> {
    let mut last = None;
    for stages in (1..=DEFAULT_NUM_STAGES).rev() {
        let e = estimate(bg, stages)?;
        if e.total() <= limit {
            return Ok(e);
        }
        last = Some(e);
    }
    let e = last.ok_or_else(|| TritonError::Internal("no num_stages tried".into()))?;
    Err(TritonError::Unsupported(format!(
        "kernel `{name}` needs about {} bytes of shared memory even without pipelining (dot operands {}, \
         reduction scratch {}); the limit is {limit} bytes: its tiles are too large for one Triton block",
        e.total(),
        e.operands,
        e.scratch
    )))
}
