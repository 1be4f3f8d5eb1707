//! The kernel planner: every decision about the kernel of one block graph, as data.
//!
//! [`plan`] decides, in this order, and without writing any CUDA:
//! 1. which values stay in registers and which operators run before the loop
//!    ([`fusion::RegisterPlan`]);
//! 2. the emission sections and schedule positions, and which accumulators are the identity
//!    ([`Schedule`]);
//! 3. the runs of element-wise operators computed in one pass ([`ElementwiseGroups`]);
//! 4. every tile's element type, layout and place in shared memory, with the pipeline stages of
//!    the tiles walked by the for-loop ([`Tile`], [`smem`]);
//! 5. how each input tile is copied from device memory and when ([`TileCopy`], [`Loads`]);
//! 6. how each matmul runs on the tensor cores ([`MatmulPlan`]) and which registers accumulate;
//! 7. how each reduction spreads over the threads ([`ReduceStrategy`]), hence the static shared
//!    memory.
//!
//! From the plan follows the alignment each pointer parameter needs ([`align::param_align`]).
//!
//! The emitters (the private `codegen::kernel::emit`) turn a [`KernelPlan`] into text; the cost
//! model reads the plan.

pub mod align;
mod copies;
pub mod fusion;
mod groups;
mod mma;
mod reduce;
mod schedule;
pub mod smem;
mod tiles;
pub mod window;

pub use copies::{BULK_MIN_ROW_BYTES, BulkCopies, BulkRows, CopyMethod, Loads, TileCopy};
pub use groups::{ElementwiseGroups, pass_vector};
pub use mma::{
    ASource, FmaMatmul, K_STRIDED_MAX_TILES, MatmulPlan, RowMatmul, RowOut, TiledMatmul, VECTOR_MAX_ROWS, VectorMatmul,
    k_split, k_strided,
};
pub use reduce::{ReduceStrategy, Reduction, lanes_per_output};
pub use schedule::Schedule;
pub use tiles::{Tile, ctype, element_bytes};

use crate::ir::{BlockGraph, BlockOp, TensorRef};
pub use fusion::{RegisterPlan, RowBands};

/// Everything decided about the kernel of one block graph before any CUDA is written. Vectors
/// indexed by node have one entry per node of the block graph.
#[derive(Clone, Debug)]
pub struct KernelPlan<'g> {
    /// The block graph.
    pub bg: &'g BlockGraph,
    /// Threads per block.
    pub threads: usize,
    /// Warps per block.
    pub warps: usize,
    /// Pipeline stages of the tiles walked by the for-loop (1: each iteration's loads are waited
    /// for before its compute).
    pub stages: usize,
    /// Which tiles the bulk-copy engine may move ([`TileCopy::bulk`] holds the result per tile;
    /// megakernel task bodies take them only with [`BulkCopies::Runs`]).
    pub bulk: BulkCopies,
    /// Register accumulation, hoisting and register chains.
    pub registers: RegisterPlan,
    /// Emission sections, schedule positions, aliases and users.
    pub schedule: Schedule,
    /// Element-wise operators computed in one pass.
    pub groups: ElementwiseGroups,
    /// The shared-memory tile of every output port (`None`: the value lives in registers).
    pub tiles: Vec<Vec<Option<Tile>>>,
    /// The row-sum scratch tile of every `rms_norm`.
    pub scratch: Vec<Option<Tile>>,
    /// How every input iterator's tile is copied.
    pub copies: Vec<Option<TileCopy>>,
    /// Which input tiles are copied when.
    pub loads: Loads,
    /// How every matmul runs.
    pub matmuls: Vec<Option<MatmulPlan>>,
    /// How every reducing operator or accumulator spreads its reduction over the threads.
    pub reductions: Vec<Option<Reduction>>,
    /// Register accumulator fragments (of 4 floats) per thread, of fused matmuls and of register
    /// values summed over the iterations (named after the node).
    pub register_accumulators: Vec<Option<usize>>,
    /// Dynamic shared memory, bytes.
    pub smem_bytes: usize,
    /// Static shared memory, bytes (the per-warp scratch of block-wide reductions).
    pub static_smem_bytes: usize,
}

impl<'g> KernelPlan<'g> {
    /// The tile of `t` (an operand read from shared memory).
    pub fn tile(&self, t: TensorRef) -> &Tile {
        // Every operand read from shared memory has a tile: values without one are read only
        // from registers, by the operators the register plan chose for them.
        self.tiles[t.node][t.port].as_ref().expect("operand tile planned before use")
    }

    /// The tile of node `i`'s first output, which the node writes.
    pub fn out_tile(&self, i: usize) -> &Tile {
        self.tiles[i].first().and_then(Option::as_ref).expect("written tile planned")
    }

    /// The row bands of register value `x`: those of the matmul at the head of its chain (unary
    /// functions keep the fragment layout).
    pub fn register_bands(&self, x: usize) -> RowBands {
        RowBands::of_register_value(self.bg, x).expect("register chains start at a matmul")
    }

    /// Dynamic plus static shared memory, bytes: what must fit the per-block limit (with the
    /// stages' mbarriers of the bulk copies, which a kernel for sm_90 declares).
    pub fn total_smem_bytes(&self) -> usize {
        self.smem_bytes + self.static_smem_bytes + self.barrier_bytes()
    }

    /// The pipelined input tiles whose rows the bulk-copy engine moves on sm_90 (in a kernel of
    /// static sizes; everywhere else they are copied like the others).
    pub fn bulk_tiles(&self) -> Vec<usize> {
        self.loads
            .pipelined
            .iter()
            .copied()
            .filter(|&i| self.copies[i].as_ref().is_some_and(|c| c.bulk.is_some()))
            .collect()
    }

    /// Bytes of one stage moved by bulk copies (what its mbarrier expects).
    pub fn bulk_stage_bytes(&self) -> usize {
        self.bulk_tiles()
            .iter()
            .filter_map(|&i| self.copies[i].as_ref().and_then(|c| c.bulk))
            .map(|b| b.rows * b.row_bytes)
            .sum()
    }

    /// Static shared memory of the stages' mbarriers (8 bytes each) when some tile is bulk-copied.
    pub fn barrier_bytes(&self) -> usize {
        if self.bulk_tiles().is_empty() { 0 } else { 8 * self.stages }
    }
}

/// Plans the kernel of `bg` with up to `max_stages` pipeline stages for the tiles walked by the
/// for-loop (`bg` must be valid), without bulk copies.
pub fn plan(bg: &BlockGraph, max_stages: usize) -> KernelPlan<'_> {
    plan_with(bg, max_stages, false)
}

/// [`plan`], marking the pipelined tiles whose rows qualify for the bulk-copy engine when
/// `bulk_copies` is set ([`TileCopy::bulk`]).
pub fn plan_with(bg: &BlockGraph, max_stages: usize, bulk_copies: bool) -> KernelPlan<'_> {
    plan_sized(bg, max_stages, if bulk_copies { BulkCopies::Rows } else { BulkCopies::Off }, &[])
}

/// [`plan_with`] for a kernel whose operands follow runtime sizes as `sizes` says (per operand,
/// per dim; [`super::KernelSizes::inputs`]): their copies keep vectors only where every size
/// aligns them, and are never strength-reduced.
pub fn plan_sized<'g>(
    bg: &'g BlockGraph,
    max_stages: usize,
    bulk: BulkCopies,
    sizes: &[Vec<super::DimSize>],
) -> KernelPlan<'g> {
    let threads = bg.threads();
    let warps = threads / 32;
    let registers = RegisterPlan::new(bg);
    let schedule = Schedule::new(bg, &registers);
    let groups = ElementwiseGroups::new(bg, &schedule, &registers);
    // The pipeline has stages when some tile walks the loop.
    let any_pipelined = bg.forloop_range() > 1
        && bg.nodes().iter().any(|nd| matches!(nd.op, BlockOp::Input { forloop_dim: Some(_), .. }));
    let stages = if any_pipelined { max_stages } else { 1 };
    let placed = tiles::place(bg, &schedule, &registers, &groups, stages, sizes);
    let copies = copies::plan_copies(bg, &placed.tiles, &placed.vectors, threads, bulk, sizes);
    let loads = Loads::new(bg, &placed.tiles);
    let matmuls = mma::plan_matmuls(bg, &registers, &placed.tiles, warps);
    let reductions = reduce::plan_reductions(bg, &registers, &schedule, threads, warps);
    let static_smem_bytes = reduce::static_smem_bytes(bg, &reductions, warps);
    let register_accumulators = mma::register_accumulators(bg, &registers, &matmuls);
    KernelPlan {
        bg,
        threads,
        warps,
        stages,
        bulk,
        registers,
        schedule,
        groups,
        tiles: placed.tiles,
        scratch: placed.scratch,
        copies,
        loads,
        matmuls,
        reductions,
        register_accumulators,
        smem_bytes: placed.bytes,
        static_smem_bytes,
    }
}
