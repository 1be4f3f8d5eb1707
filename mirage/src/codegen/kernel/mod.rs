//! One block graph → one CUDA `__global__` function.
//!
//! The generated kernel follows the block graph's structure literally: input iterators copy
//! tiles from device memory into shared memory (16-byte `cp.async` copies, pipelined over the
//! for-loop iterations when the tile layout allows it), in-loop operators run on shared-memory
//! tiles or register fragments (tensor-core `mma.sync` for matmuls of f16/bf16 tiles),
//! accumulators fold iterations, the epilogue runs after the loop and output savers write each
//! block's slab.
//!
//! Generation is two steps: the [`planner`] decides everything about the kernel and returns a
//! [`KernelPlan`] (pure data: what the cost model reads), and the emitters write its CUDA text.
//! [`plan_kernel`] picks the most pipeline stages whose shared memory fits.

mod emit;
pub mod planner;

pub use planner::{KernelPlan, ctype};

use crate::ir::BlockGraph;

use super::CodegenError;

/// The generated source of one kernel and how to launch it.
#[derive(Clone, Debug)]
pub struct KernelSource {
    /// The `extern "C"` function name.
    pub name: String,
    /// CUDA C++ source of the function.
    pub code: String,
    /// Blocks along x, y, z.
    pub grid: [usize; 3],
    /// Threads per block.
    pub threads: usize,
    /// Dynamic shared memory in bytes.
    pub smem_bytes: usize,
    /// Static shared memory in bytes (block-reduction scratch); dynamic plus static must fit the
    /// per-block limit.
    pub static_smem_bytes: usize,
    /// Pipeline stages of the tiles walked by the for-loop (1: each iteration's loads are waited
    /// for before its compute, no overlap).
    pub stages: usize,
    /// Per pointer parameter (inputs, then outputs), the alignment in bytes its device pointer
    /// needs ([`planner::align::param_align`]).
    pub param_align: Vec<usize>,
}

/// Options of kernel generation.
#[derive(Clone, Debug)]
pub struct KernelOptions {
    /// Dynamic shared memory available to one block (bytes).
    pub max_smem_bytes: usize,
    /// Most pipeline stages for tiles walked by the for-loop.
    pub max_stages: usize,
    /// The runtime sizes the kernel takes (none: a static kernel).
    pub sizes: KernelSizes,
    /// Copy the pipelined tiles whose rows qualify with the bulk-copy engine on sm_90
    /// (`cp.async.bulk` per row, an mbarrier per stage; [`KernelPlan::bulk_tiles`]). Off by
    /// default: on the H200 it made the weight-bound benchmark kernels 1.3–1.8× slower than the
    /// threads' 16-byte `cp.async` (rows of 64–256 bytes; docs/DECISIONS.md, change 21).
    pub bulk_copies: bool,
    /// Copy the pipelined tiles that are one contiguous run in device and in shared memory (a
    /// weight stored tile by tile: `mpk::decoder::WeightStorage::Tiles`) with one `cp.async.bulk`
    /// each on sm_90, in `__global__` kernels and megakernel task bodies alike (an mbarrier per
    /// stage, initialized and invalidated by every call of a task body). Off by default (an
    /// experiment: DECISIONS change 67). With [`bulk_copies`](Self::bulk_copies) too, that
    /// option decides and task bodies keep `cp.async`.
    pub bulk_runs: bool,
    /// The kernel runs after another kernel of its program and may be launched before that one
    /// has finished (programmatic dependent launch, sm_90): it begins with `griddepcontrol.wait`,
    /// which returns once the kernel before it has completed and its writes are visible
    /// ([`mirage_runtime::plan::KernelLaunch::waits_for_previous`]). Set by program generation for
    /// every kernel but the first.
    pub waits_for_previous_kernel: bool,
}

impl KernelOptions {
    /// Which tiles the plan copies with the bulk-copy engine.
    pub fn bulk(&self) -> planner::BulkCopies {
        match (self.bulk_copies, self.bulk_runs) {
            (true, _) => planner::BulkCopies::Rows,
            (false, true) => planner::BulkCopies::Runs,
            (false, false) => planner::BulkCopies::Off,
        }
    }
}

impl Default for KernelOptions {
    fn default() -> Self {
        // H100/H200: 227 KB of shared memory per block with opt-in.
        KernelOptions {
            max_smem_bytes: 227 * 1024,
            max_stages: 4,
            sizes: KernelSizes::default(),
            bulk_copies: false,
            bulk_runs: false,
            waits_for_previous_kernel: false,
        }
    }
}

/// The runtime sizes of one kernel (`mirage::dims`): `int` parameters after the tensor pointers,
/// each the size of a runtime-sized dim, and how every dim of the operands and outputs follows
/// them. The block graph is the one built at the upper bounds; by the padded-tile rule the kernel
/// loads zeros for elements of an operand at or past its size along a runtime-sized dim, stores
/// no element of an output past its size, walks a runtime-sized dim in `ceil(valid / tile)`
/// iterations, and every reduction over a padded dim skips the padding (a mask: the reduction's
/// identity). Strides of a tensor whose runtime-sized dim is not dim 0 are computed in the kernel
/// from the parameters (row-major, contiguous at the run size). What the kernels cannot do is
/// rejected with [`CodegenError::Unsupported`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSizes {
    /// The C names of the `int` parameters, in order.
    pub params: Vec<String>,
    /// Per block-graph operand, per dim: how its extent follows the parameters (empty: fixed).
    pub inputs: Vec<Vec<DimSize>>,
    /// Per block-graph output, per dim: how its extent follows the parameters (empty: fixed).
    pub outputs: Vec<Vec<DimSize>>,
    /// The for-loop's trip count, when the loop walks a runtime-sized dim.
    pub forloop: Option<LoopSize>,
}

/// How one dim of a kernel's tensor follows the kernel's size parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DimSize {
    /// The compile-size extent.
    #[default]
    Fixed,
    /// The size parameter (index into [`KernelSizes::params`]); the tensor is laid out row-major at
    /// that size.
    Var(usize),
    /// `ceil(n / slab) · tile` valid elements of parameter `param` (`mirage::dims::Extent::Blocks`:
    /// split-KV's per-range parts); the tensor keeps its compile-size layout (the buffer is
    /// allocated at the upper bound) and the parts past the valid ones are never written.
    Blocks {
        /// The size parameter.
        param: usize,
        /// The part of the variable each producing block covered.
        slab: usize,
        /// The width each producing block wrote.
        tile: usize,
    },
    /// Stacked copies of parameter `param`'s dim (`mirage::dims::Extent::Stacked`: split-K's
    /// partial sums over a runtime-sized batch), each `whole` long at the compile-size layout and
    /// valid on its first `n` positions: a tile holds one copy, so a position is valid where its
    /// coordinate modulo `whole` is below `n` (stores past it are skipped, loads read zeros).
    Stacked {
        /// The size parameter.
        param: usize,
        /// The compile-size extent of one copy.
        whole: usize,
    },
}

/// A for-loop walking a runtime-sized dim: `min(forloop_range, ceil(valid / part))` iterations,
/// `valid = n − axis_index · whole` (the block's part of the size) when grid axis `axis` splits
/// the same dim, `n` otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopSize {
    /// The size parameter (index into [`KernelSizes::params`]).
    pub param: usize,
    /// The extent one iteration covers.
    pub part: usize,
    /// The extent the loop walks in one block at the compile size.
    pub whole: usize,
    /// The grid axis splitting the same dim in slabs of `whole`, if any.
    pub axis: Option<usize>,
}

impl KernelSizes {
    /// Whether the kernel takes no size.
    pub fn is_static(&self) -> bool {
        self.params.is_empty()
    }
}

/// Bytes of pipelined tiles a block keeps in flight when its stages are small: a loop whose stage
/// is smaller than `DEEP_PIPELINE_BYTES / max_stages` gets more stages, up to this many bytes
/// ([`pipeline_depth`]).
pub const DEEP_PIPELINE_BYTES: usize = 8 * 1024;

/// The most pipeline stages [`pipeline_depth`] gives a loop of small stages.
pub const DEEP_PIPELINE_MAX_STAGES: usize = 32;

/// The pipeline stages for a loop whose stage (its pipelined tiles of one iteration) takes
/// `stage_bytes` of shared memory: `max_stages`, or for small stages as many as keep
/// [`DEEP_PIPELINE_BYTES`] in flight (at most [`DEEP_PIPELINE_MAX_STAGES`]), never more than the
/// loop's `iterations`. A loop over tiny tiles — a split-K combine summing 32 partial rows of 128
/// bytes — waits one copy latency per `stages - 1` iterations: at 4 stages that latency, not its
/// bytes, set its time (DECISIONS change 76).
pub fn pipeline_depth(stage_bytes: usize, max_stages: usize, iterations: usize) -> usize {
    let deep = DEEP_PIPELINE_BYTES.checked_div(stage_bytes).map_or(max_stages, |n| n.min(DEEP_PIPELINE_MAX_STAGES));
    deep.max(max_stages).clamp(1, iterations.max(1))
}

/// Plans the kernel `name` for block graph `bg`: the most pipeline stages (up to
/// [`pipeline_depth`] of `opts.max_stages`, and the loop's iterations) whose dynamic and static
/// shared memory fit `opts.max_smem_bytes`.
pub fn plan_kernel<'g>(bg: &'g BlockGraph, name: &str, opts: &KernelOptions) -> Result<KernelPlan<'g>, CodegenError> {
    bg.validate().map_err(CodegenError::Ir)?;
    let iterations = bg.forloop_range().max(1);
    let plan_at = |stages: usize| planner::plan_sized(bg, stages, opts.bulk(), &opts.sizes.inputs);
    let mut stages = opts.max_stages.clamp(1, iterations);
    let mut plan = plan_at(stages);
    if stages < iterations {
        // The plan at the asked depth tells the stage's bytes; it is kept unless that depth grows.
        let stage_bytes: usize = plan.loads.pipelined.iter().map(|&i| plan.out_tile(i).bytes).sum();
        let deep = pipeline_depth(stage_bytes, stages, iterations);
        if deep != stages {
            stages = deep;
            plan = plan_at(stages);
        }
    }
    loop {
        if plan.total_smem_bytes() <= opts.max_smem_bytes {
            return Ok(plan);
        }
        if stages == 1 {
            return Err(CodegenError::SharedMemory {
                kernel: name.to_string(),
                needed: plan.total_smem_bytes(),
                available: opts.max_smem_bytes,
            });
        }
        stages -= 1;
        plan = plan_at(stages);
    }
}

/// Generates the kernel `name` for block graph `bg`.
pub fn generate_kernel(bg: &BlockGraph, name: &str, opts: &KernelOptions) -> Result<KernelSource, CodegenError> {
    let emit = if opts.waits_for_previous_kernel { emit::emit_dependent_kernel } else { emit::emit_kernel };
    generate_with(bg, name, opts, emit)
}

/// Generates the task body `name` of block graph `bg` for a persistent megakernel
/// (`mirage::mpk`): a `__device__` function `name(int bx, int by, int bz, inputs..., outputs...)`
/// running block `(bx, by, bz)` with the block graph's threads; `code` is the function, `grid`
/// the tiles it may be called for.
pub fn generate_task_body(bg: &BlockGraph, name: &str, opts: &KernelOptions) -> Result<KernelSource, CodegenError> {
    generate_with(bg, name, opts, emit::emit_task_body)
}

/// The checks [`generate_kernel`] makes before writing code: the kernel plans within
/// `opts.max_smem_bytes` and can run at the runtime sizes of `opts.sizes`.
pub fn check_kernel(bg: &BlockGraph, name: &str, opts: &KernelOptions) -> Result<(), CodegenError> {
    let plan = plan_kernel(bg, name, opts)?;
    check_sizes(&plan, name, &opts.sizes)
}

/// Plans `bg` and writes its CUDA with `emit`.
fn generate_with(
    bg: &BlockGraph,
    name: &str,
    opts: &KernelOptions,
    emit: fn(&KernelPlan<'_>, &str, &KernelSizes) -> Result<String, CodegenError>,
) -> Result<KernelSource, CodegenError> {
    let plan = plan_kernel(bg, name, opts)?;
    check_sizes(&plan, name, &opts.sizes)?;
    let code = emit(&plan, name, &opts.sizes)?;
    Ok(KernelSource {
        name: name.to_string(),
        code,
        grid: bg.grid(),
        threads: plan.threads,
        smem_bytes: plan.smem_bytes,
        static_smem_bytes: plan.static_smem_bytes,
        stages: plan.stages,
        param_align: planner::align::param_align(&plan),
    })
}

/// Rejects what the generated code cannot yet do at a runtime size: copies of a runtime-sized
/// operand that cannot be predicated element by element (a strength-reduced copy, a vector
/// along a runtime-sized dim without its run-time guard `n % vec == 0`), a reduction over padding in registers (a register chain's row
/// sums) or by `rms_norm` / `acc_rms_last` (their means count the elements).
fn check_sizes(plan: &KernelPlan<'_>, name: &str, sizes: &KernelSizes) -> Result<(), CodegenError> {
    if sizes.is_static() {
        return Ok(());
    }
    let unsupported = |why: String| Err(CodegenError::Unsupported(format!("kernel `{name}`: {why}")));
    for (i, node) in plan.bg.nodes().iter().enumerate() {
        let crate::ir::BlockOp::Input { input, .. } = &node.op else { continue };
        let dims = sizes.inputs.get(*input).map(Vec::as_slice).unwrap_or(&[]);
        if dims.iter().all(|d| *d == DimSize::Fixed) {
            continue;
        }
        let Some(copy) = plan.copies[i].as_ref() else { continue };
        let vec_sized = copy.vec_dim.is_some_and(|c| dims.get(c).is_some_and(|d| *d != DimSize::Fixed));
        if matches!(copy.method, planner::CopyMethod::CpAsyncStrided { .. })
            || (vec_sized && copy.vec > 1 && copy.guard.is_none())
        {
            return unsupported(format!(
                "operand {input} has a runtime-sized dim and a copy that cannot be predicated ({:?})",
                copy.method
            ));
        }
    }
    let bounds = emit::tile_bounds(plan, sizes);
    let padded = |t: crate::ir::TensorRef, d: usize| bounds[t.node][t.port].get(d).is_some_and(Option::is_some);
    for (i, node) in plan.bg.nodes().iter().enumerate() {
        use crate::ir::{AccKind, BlockOp};
        let Some(&x) = node.inputs.first() else { continue };
        let rank = plan.bg.nodes()[x.node].outputs[x.port].shape.len();
        match &node.op {
            BlockOp::RmsNorm { .. } if padded(x, rank - 1) => {
                return unsupported(format!("rms_norm (node {i}) over a runtime-sized dim (its mean is not masked)"));
            }
            BlockOp::Accum { acc: AccKind::RmsLast } if sizes.forloop.is_some() || padded(x, rank - 1) => {
                return unsupported(format!(
                    "acc_rms_last (node {i}) over a runtime-sized dim (its mean is not masked)"
                ));
            }
            BlockOp::Accum { .. } if plan.registers.reg_sum[i] && padded(x, rank - 1) => {
                return unsupported(format!("row sums in registers (node {i}) over a runtime-sized dim (not masked)"));
            }
            _ => {}
        }
        // A register value's padding is not zeroed: harmless along its rows, but its columns are
        // contracted (the next matmul's A operand) or summed (row sums).
        let in_registers = plan.registers.reg[i] || plan.registers.fused[i].is_some();
        if in_registers && bounds[i].iter().any(|port| port.last().is_some_and(Option::is_some)) {
            return unsupported(format!(
                "{} (node {i}) keeps a tile padded along its runtime-sized last dim in registers (its padding is not zeroed)",
                node.op.name()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AccKind, BinaryOp, BlockOp, DType, GridMap, IrError, Scalar, TensorDesc};

    /// ntrans' block graph: `y = rms_norm(x1 + x2 * (rms_norm(x0) + x1))`, one row per block.
    fn ntrans_like() -> Result<BlockGraph, IrError> {
        let d = TensorDesc::new(&[8, 4096], DType::F16);
        let mut bg = BlockGraph::new(vec![d.clone(), d.clone(), d], [8, 1, 1], 128, 1)?;
        let m: GridMap = [Some(0), None, None];
        let x0 = bg.input(0, m, None)?;
        let x1 = bg.input(1, m, None)?;
        let x2 = bg.input(2, m, None)?;
        let n0 = bg.op(BlockOp::RmsNorm { eps: Scalar(0.0) }, &[x0])?;
        let a = bg.binary(BinaryOp::Add, x1, n0)?;
        let b = bg.binary(BinaryOp::Mul, x2, a)?;
        let c = bg.binary(BinaryOp::Add, x1, b)?;
        let r = bg.accum(AccKind::RmsLast, &[c])?;
        let c_out = bg.accum(AccKind::Sum, &[c])?;
        let y = bg.binary(BinaryOp::Div, c_out, r)?;
        bg.output(y, m)?;
        Ok(bg)
    }

    #[test]
    fn an_element_wise_group_runs_as_one_pass_and_its_stored_member_does_not_overlap_the_norm_scratch() {
        let bg = ntrans_like().expect("ntrans block graph");
        let plan = plan_kernel(&bg, "ntrans_like", &KernelOptions::default()).expect("plans");
        // nodes: 0..3 inputs, 3 rms_norm, 4 add, 5 mul, 6 add, 7 acc_rms_last, 8 acc_sum, 9 div,
        // 10 saver
        assert_eq!(plan.groups.groups, vec![vec![3, 4, 5, 6], vec![9, 10]]);
        // rms_norm's row sums (s3) are read during the whole pass that writes the last add (t6).
        let s3 = plan.scratch[3].as_ref().expect("rms_norm has a scratch tile");
        let t6 = plan.tiles[6][0].as_ref().expect("the last add is read after the pass: stored");
        assert!(s3.offset + s3.bytes <= t6.offset || t6.offset + t6.bytes <= s3.offset, "{s3:?} and {t6:?} overlap");
        // the intermediate members live in registers only
        for reg_only in [3, 4, 5] {
            assert_eq!(plan.tiles[reg_only], vec![None], "node {reg_only} got a shared-memory tile");
        }
        let k = generate_kernel(&bg, "ntrans_like", &KernelOptions::default()).expect("generates");
        assert!(k.code.contains("// one pass: rms_norm, add, mul, add"), "{}", k.code);
    }

    #[test]
    fn small_stages_get_a_deep_pipeline_bounded_by_bytes_stages_and_iterations() {
        // 128-byte stages: 8 KiB / 128 = 64, capped at 32 and at the loop's iterations.
        assert_eq!(pipeline_depth(128, 4, 32), 32);
        assert_eq!(pipeline_depth(128, 4, 16), 16);
        assert_eq!(pipeline_depth(128, 4, 100), DEEP_PIPELINE_MAX_STAGES);
        // 1 KiB stages: 8 in flight; 2 KiB and more keep the default.
        assert_eq!(pipeline_depth(1024, 4, 64), 8);
        assert_eq!(pipeline_depth(2048, 4, 64), 4);
        assert_eq!(pipeline_depth(64 * 1024, 4, 64), 4);
        // Never fewer than asked for, never more than the iterations, at least one.
        assert_eq!(pipeline_depth(4096, 6, 64), 6);
        assert_eq!(pipeline_depth(4096, 6, 3), 3);
        assert_eq!(pipeline_depth(0, 4, 64), 4);
        assert_eq!(pipeline_depth(128, 4, 0), 1);
    }

    #[test]
    fn a_loop_of_tiny_tiles_is_planned_and_emitted_with_a_deep_pipeline() -> Result<(), IrError> {
        // A split-K combine: 32 partial rows of 64 bf16 (128 bytes a stage) summed by the loop.
        let d = TensorDesc::new(&[32, 4096], DType::Bf16);
        let mut bg = BlockGraph::new(vec![d], [64, 1, 1], 256, 32)?;
        let x = bg.input(0, [Some(1), None, None], Some(0))?;
        let s = bg.accum(AccKind::Sum, &[x])?;
        bg.output(s, [Some(1), None, None])?;
        let k = generate_kernel(&bg, "combine", &KernelOptions::default()).expect("generates");
        assert_eq!(k.stages, 32);
        assert!(k.code.contains("for (int st = 0; st < 31; ++st) {"), "{}", k.code);
        assert!(k.code.contains("mirage::cp_async_wait<30>();"), "{}", k.code);
        // With room for only a few stages the depth drops until the tiles fit.
        let tight = KernelOptions { max_smem_bytes: 1024, ..KernelOptions::default() };
        let p = plan_kernel(&bg, "combine", &tight).expect("plans in 1 KiB");
        assert!(p.stages < 32 && p.total_smem_bytes() <= 1024, "{} stages, {} B", p.stages, p.total_smem_bytes());
        Ok(())
    }

    #[test]
    fn stages_drop_until_the_tiles_fit() -> Result<(), IrError> {
        let d = TensorDesc::new(&[64, 4096], DType::F16);
        let mut bg = BlockGraph::new(vec![d], [1, 1, 1], 128, 8)?;
        let none: GridMap = [None, None, None];
        // 64 x 512 f16 tiles: 64 KiB (plus row padding) per stage.
        let x = bg.input(0, none, Some(1))?;
        let s = bg.accum(AccKind::SumLast, &[x])?;
        bg.output(s, none)?;
        let stages = |max_smem_bytes: usize| {
            plan_kernel(&bg, "k", &KernelOptions { max_smem_bytes, max_stages: 4, ..KernelOptions::default() })
                .map(|p| (p.stages, p.smem_bytes))
        };
        let (four, bytes4) = stages(1 << 20).expect("fits with four stages");
        assert_eq!(four, 4);
        let (fewer, bytes) = stages(bytes4 - 1).expect("fits with fewer stages");
        assert!(fewer < 4 && bytes < bytes4, "{fewer} stages, {bytes} B");
        assert!(matches!(stages(1024), Err(CodegenError::SharedMemory { available: 1024, .. })));
        Ok(())
    }
}
