//! The analytic cost model: ranks µGraphs without a GPU.
//!
//! Every kernel of a µGraph is a block graph (kernel-level operators are costed through their
//! default block graphs, [`crate::codegen::default_blocks`]). Per kernel the model counts
//!
//! - **bytes from device memory**: every input tensor read once (the union of the tiles the blocks
//!   read), plus the replicated re-reads (tiles read by several blocks) — those hit L2 when the
//!   tensor fits in half of it, and come from DRAM otherwise; every output written once; a tile
//!   narrower than its tensor's rows reads separate row segments, each costing
//!   [`Arch::segment_bytes`] more;
//! - **matrix work** on tensor cores (f16/bf16 tiles, padded to the `m16n8k16` instruction shape)
//!   and **element-wise work** on the FMA pipes;
//! - **waves** of blocks over the SMs, with the blocks per SM limited by shared memory (from
//!   [`crate::codegen::plan_kernel`]'s plan), threads and the hardware limit; a partial wave
//!   runs on fewer SMs and so pulls less bandwidth;
//! - a **latency** per wave (the first tile's load is not hidden), a small **per-iteration**
//!   overhead of the for-loop (barrier, pipeline bookkeeping), the **copy instructions** each
//!   thread issues (from the code generator's plan: a tile copied in 8-byte vectors takes twice
//!   the copies of one in 16-byte vectors), and the **launch** overhead.
//!
//! A wave takes `latency + max(memory, compute) + iterations · overhead + copies · copy_us`
//! (memory and compute overlap through the `cp.async` pipeline; without one — a single stage, or
//! a tile copied synchronously at the start of every iteration — they do not, and add, and every
//! iteration waits for its tiles: the latency is exposed once per iteration). The model is
//! deliberately simple and symmetric in the grid axes; its purpose is ranking. Its constants and
//! the measurements they were fitted to are in docs/DECISIONS.md; [`crate::tune::calibration`]
//! measures how well it ranks recorded candidates.

use std::fmt;

use crate::codegen::default_blocks::{default_block_graph, lower_to_blocks};
use crate::codegen::{CodegenError, KernelOptions, plan_kernel};
use crate::dims::{DimPlan, Dims};
use crate::ir::{AccKind, BlockGraph, BlockOp, DType, IrError, KernelGraph, KernelOp, Phase, TensorDesc, num_elements};

/// Constants of a GPU architecture.
#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    /// The target name used in cache keys and `MIRAGE_CUDA_ARCH` (`sm_90`, `sm_80`).
    pub name: &'static str,
    /// The GPU the constants were taken from.
    pub gpu: &'static str,
    /// Streaming multiprocessors.
    pub num_sms: usize,
    /// Device-memory bandwidth (measured copy), bytes per µs.
    pub dram_bytes_per_us: f64,
    /// Most device-memory bandwidth one SM can pull, bytes per µs.
    pub sm_dram_bytes_per_us: f64,
    /// Resident warps per SM needed to pull that bandwidth; fewer pull proportionally less (they
    /// issue the copies and run the compute between them).
    pub bandwidth_warps: usize,
    /// L2 cache size in bytes.
    pub l2_bytes: usize,
    /// L2 bandwidth, bytes per µs.
    pub l2_bytes_per_us: f64,
    /// Dense f16 tensor-core throughput, FLOP per µs.
    pub tensor_flops_per_us: f64,
    /// f32 FMA-pipe throughput (non-tensor work), FLOP per µs.
    pub fma_flops_per_us: f64,
    /// Shared memory one block may use (opt-in maximum), bytes.
    pub smem_per_block: usize,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: usize,
    /// Resident threads per SM.
    pub max_threads_per_sm: usize,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: usize,
    /// Overhead of one kernel launch, µs.
    pub launch_us: f64,
    /// Latency of a wave's first global-memory tile, µs.
    pub latency_us: f64,
    /// Overhead of one for-loop iteration (barrier, pipeline bookkeeping), µs.
    pub iteration_us: f64,
    /// Extra cost of every wave after the first (pipeline refill and tail), µs.
    pub wave_refill_us: f64,
    /// One dependent m16n8k16 tensor-core step of a warp (mma latency with its fragment loads),
    /// µs: a warp's chain of dependent mma steps cannot run faster than this.
    pub mma_step_us: f64,
    /// DRAM cost of one row segment of a tile narrower than its tensor's contiguous dim, in bytes
    /// of transfer: a segment of `s` bytes costs `s + segment_bytes` ([`Arch::segment_factor`];
    /// short segments waste DRAM bursts).
    pub segment_bytes: f64,
    /// Issue time of one copy instruction of a thread (a `cp.async` vector or an element), µs:
    /// a block's threads issue their copies of an iteration one after another.
    pub copy_us: f64,
}

impl Arch {
    /// H100 SXM / H200 (sm_90): 132 SMs, ~4.3 TB/s measured copy, ~790 TFLOP/s dense f16,
    /// 227 KB shared memory per block, ~4 µs per launch.
    pub fn sm90() -> Self {
        Arch {
            name: "sm_90",
            gpu: "H100/H200",
            num_sms: 132,
            dram_bytes_per_us: 4.3e6,
            // H200 (docs/DECISIONS.md, change 14, fitted on 35 programs' tuning records): one SM
            // pulls up to twice its share of the bandwidth: grids of 64-96 blocks are among the
            // fastest weight streams (runs 2-3 had read 1x from one rmsnorm_linear kernel).
            sm_dram_bytes_per_us: 2.0 * 4.3e6 / 132.0,
            // H200, ncu (docs/DECISIONS.md, runs 10-11): weight-streaming kernels of
            // one block per SM reached 36% of peak DRAM throughput with 4 warps, 64% with 8.
            bandwidth_warps: 8,
            l2_bytes: 50 << 20,
            l2_bytes_per_us: 10.0e6,
            tensor_flops_per_us: 790.0e6,
            fma_flops_per_us: 60.0e6,
            smem_per_block: 227 * 1024,
            smem_per_sm: 228 * 1024,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            launch_us: 4.0,
            latency_us: 0.8,
            iteration_us: 0.03,
            wave_refill_us: 3.0,
            mma_step_us: 0.02,
            // Runs 4-5 (docs/DECISIONS.md); change 14 found no better value.
            segment_bytes: 16.0,
            // Change 14 (35 programs' tuning records, held-out checked): a copy costs ~50 cycles
            // of its thread (the issue of these loops is latency-bound).
            copy_us: 0.025,
        }
    }

    /// A100 (sm_80): 108 SMs, ~1.6 TB/s, 312 TFLOP/s dense f16, 163 KB shared memory per block.
    pub fn sm80() -> Self {
        Arch {
            name: "sm_80",
            gpu: "A100",
            num_sms: 108,
            dram_bytes_per_us: 1.6e6,
            // The sm_90 calibration's ratio, not measured on an A100.
            sm_dram_bytes_per_us: 2.0 * 1.6e6 / 108.0,
            bandwidth_warps: 8,
            l2_bytes: 40 << 20,
            l2_bytes_per_us: 4.5e6,
            tensor_flops_per_us: 312.0e6,
            fma_flops_per_us: 19.5e6,
            smem_per_block: 163 * 1024,
            smem_per_sm: 164 * 1024,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            launch_us: 4.0,
            latency_us: 1.0,
            iteration_us: 0.04,
            wave_refill_us: 3.0,
            mma_step_us: 0.025,
            segment_bytes: 16.0,
            // The sm_90 value at an A100's lower clock, not measured.
            copy_us: 0.035,
        }
    }

    /// The architecture named `sm_90`/`sm_90a` or `sm_80`/`sm_86`… (`None` for others).
    pub fn from_name(name: &str) -> Option<Self> {
        let n = name.trim().trim_start_matches("compute_");
        if n.starts_with("sm_9") || n.starts_with("sm_10") {
            Some(Arch::sm90())
        } else if n.starts_with("sm_8") {
            Some(Arch::sm80())
        } else {
            None
        }
    }
}

/// The text search version 6 hashed for [`Arch::sm90`] (its `Debug` form then).
const SM90_SEARCH_IDENTITY: &str = r#"Arch { name: "sm_90", gpu: "H100/H200", num_sms: 132, dram_bytes_per_us: 4300000.0, sm_dram_bytes_per_us: 32575.757575757576, bandwidth_warps: 8, l2_bytes: 52428800, l2_bytes_per_us: 10000000.0, tensor_flops_per_us: 790000000.0, fma_flops_per_us: 60000000.0, smem_per_block: 232448, smem_per_sm: 233472, max_threads_per_sm: 2048, max_blocks_per_sm: 32, launch_us: 4.0, latency_us: 0.8, iteration_us: 0.03, wave_refill_us: 3.0, mma_step_us: 0.02 }"#;
/// The text search version 6 hashed for [`Arch::sm80`].
const SM80_SEARCH_IDENTITY: &str = r#"Arch { name: "sm_80", gpu: "A100", num_sms: 108, dram_bytes_per_us: 1600000.0, sm_dram_bytes_per_us: 14814.814814814816, bandwidth_warps: 8, l2_bytes: 41943040, l2_bytes_per_us: 4500000.0, tensor_flops_per_us: 312000000.0, fma_flops_per_us: 19500000.0, smem_per_block: 166912, smem_per_sm: 167936, max_threads_per_sm: 2048, max_blocks_per_sm: 32, launch_us: 4.0, latency_us: 1.0, iteration_us: 0.04, wave_refill_us: 3.0, mma_step_us: 0.025 }"#;

impl Arch {
    /// The text that identifies the architecture in the search version
    /// ([`crate::search::SearchConfig::version`], part of every cache key): for the built-in
    /// architectures the text search version 6 hashed, whatever their constants are now, so that
    /// re-calibrating the cost model keeps the cache's keys (a cached µGraph is re-verified on a
    /// hit, never re-ranked); for any other `Arch` its `Debug` form.
    pub fn search_identity(&self) -> String {
        if *self == Arch::sm90() {
            SM90_SEARCH_IDENTITY.to_string()
        } else if *self == Arch::sm80() {
            SM80_SEARCH_IDENTITY.to_string()
        } else {
            format!("{self:?}")
        }
    }

    /// DRAM cost per useful byte of reading tiles of `tile` shape from a tensor: rows of the
    /// contiguous dim shorter than the whole dim are separate segments, and each costs
    /// [`Arch::segment_bytes`] more: `1 + segment_bytes / segment bytes`.
    /// First calibrated on the H200 (docs/DECISIONS.md, run 4): 256-block weight-bound kernels
    /// reading 32- and 48-byte rows ran 1.2–1.3× slower than 128-block ones reading 64 and 96.
    pub fn segment_factor(&self, desc: &TensorDesc, tile: &[usize]) -> f64 {
        let Some(c) = (0..desc.shape.len()).find(|&d| desc.strides[d] == 1 && desc.shape[d] > 1) else { return 1.0 };
        if tile.get(c).copied().unwrap_or(1) >= desc.shape[c] {
            return 1.0; // whole rows: the segments of consecutive rows are adjacent
        }
        let seg = tile[c] * desc.dtype.size_bytes();
        1.0 + self.segment_bytes / seg.max(2) as f64
    }
}

impl Default for Arch {
    fn default() -> Self {
        Arch::sm90()
    }
}

/// The estimate of one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCost {
    /// Bytes from device memory (reads that miss L2, and writes).
    pub bytes: f64,
    /// Bytes re-read from L2 (replicated tiles of tensors that fit in it).
    pub l2_bytes: f64,
    /// Tensor-core FLOPs (padded to the instruction shape).
    pub flops: f64,
    /// Non-tensor FLOPs (element-wise, reductions, FMA matmuls).
    pub fma_flops: f64,
    /// Waves of blocks over the SMs.
    pub waves: usize,
    /// Shared memory per block, bytes.
    pub smem: usize,
    /// Resident blocks per SM.
    pub blocks_per_sm: usize,
    /// Estimated time including the launch, µs (infinite when the kernel cannot run).
    pub us: f64,
    /// How the estimate came about, in words.
    pub why: String,
}

/// The estimate of a µGraph.
#[derive(Clone, Debug, PartialEq)]
pub struct CostReport {
    /// Sum over kernels, µs.
    pub total_us: f64,
    /// One entry per kernel, in launch order.
    pub kernels: Vec<KernelCost>,
}

impl CostReport {
    /// Whether every kernel can run on the architecture (shared memory fits).
    pub fn feasible(&self) -> bool {
        self.total_us.is_finite()
    }
}

impl fmt::Display for CostReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:.2} µs in {} kernel(s)", self.total_us, self.kernels.len())?;
        for (i, k) in self.kernels.iter().enumerate() {
            writeln!(f, "  k{i}: {}", k.why)?;
        }
        Ok(())
    }
}

/// Why a graph could not be costed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CostError {
    /// A kernel-level operator has no block graph (or the graph breaks a rule).
    #[error("cannot cost the µGraph: {0}")]
    Ir(#[from] IrError),
}

/// Estimates the run time of `graph` on `arch`.
pub fn estimate(graph: &KernelGraph, arch: &Arch) -> Result<CostReport, CostError> {
    let mut kernels = Vec::new();
    for node in graph.nodes() {
        let block = match &node.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } => continue,
            KernelOp::Custom { block } => (**block).clone(),
            op => {
                let descs = node.inputs.iter().map(|&t| graph.desc(t).cloned()).collect::<Result<Vec<_>, _>>()?;
                default_block_graph(op, &descs)?
            }
        };
        let mut k = estimate_block(&block, arch);
        if !matches!(node.op, KernelOp::Custom { .. }) {
            k.why = format!("{} (default block graph): {}", node.op.name(), k.why);
        }
        kernels.push(k);
    }
    let total_us = kernels.iter().map(|k| k.us).sum();
    Ok(CostReport { total_us, kernels })
}

/// Estimates `graph` — a µGraph built at the compile size of `dims` (every variable at its upper
/// bound) — at each size vector of `sizes` (one size per variable): every kernel with the grid,
/// for-loop iterations and tensor bytes it has at that size ([`DimPlan::run_shapes`]: axes that
/// split a runtime-sized dim launch `ceil(n / slab)` blocks, a loop over one runs
/// `ceil(min(n, slab) / tile)` iterations), and what its code generator plans at the compile
/// size (shared memory, pipeline stages, copies per iteration). The search ranks the candidates
/// of a runtime-sized program at representative sizes of its ranges with it
/// ([`crate::search::ranges::rank_sizes`]).
pub fn estimate_sizes(
    graph: &KernelGraph,
    dims: &Dims,
    sizes: &[Vec<usize>],
    arch: &Arch,
) -> Result<Vec<CostReport>, CostError> {
    let lowered = lower_to_blocks(graph)?;
    let plan = DimPlan::analyze(&lowered, dims)?;
    let runs = sizes.iter().map(|s| plan.run_shapes(&lowered, s)).collect::<Result<Vec<_>, _>>()?;
    let mut reports: Vec<CostReport> =
        sizes.iter().map(|_| CostReport { total_us: 0.0, kernels: Vec::new() }).collect();
    for (i, node) in lowered.nodes().iter().enumerate() {
        let KernelOp::Custom { block } = &node.op else { continue };
        let facts = plan_facts(block, arch, SmemMode::Planned);
        let in_types: Vec<DType> = block.inputs().iter().map(|d| d.dtype).collect();
        let out_types: Vec<DType> = block.output_descs().iter().map(|d| d.dtype).collect();
        for ((report, run), s) in reports.iter_mut().zip(&runs).zip(sizes) {
            let Some(b) = run.blocks.get(i).and_then(Option::as_ref) else { continue };
            let launch = Launch {
                grid: b.grid,
                blocks: b.grid.iter().product::<usize>().max(1),
                frange: b.forloop_range.max(1),
                input_bytes: node
                    .inputs
                    .iter()
                    .zip(&in_types)
                    .map(|(&t, &ty)| shape_bytes(&plan.shape_at(t, s), ty))
                    .collect(),
                written: b.outputs.iter().zip(&out_types).map(|(shape, &ty)| shape_bytes(shape, ty)).sum(),
            };
            let k = estimate_launch(block, arch, &facts, &launch);
            report.total_us += k.us;
            report.kernels.push(k);
        }
    }
    Ok(reports)
}

/// How a kernel is launched: its blocks, for-loop iterations and the bytes of the tensors it
/// reads and writes — its block graph's own at the compile size ([`Launch::compiled`]), or those
/// of a runtime size ([`estimate_sizes`]).
struct Launch {
    /// Blocks along x, y, z.
    grid: [usize; 3],
    /// Their product.
    blocks: usize,
    /// For-loop iterations.
    frange: usize,
    /// Bytes of each input tensor, in the block graph's input order.
    input_bytes: Vec<f64>,
    /// Bytes of the outputs the kernel writes.
    written: f64,
}

impl Launch {
    /// The launch a block graph describes (its compile-size geometry).
    fn compiled(bg: &BlockGraph) -> Self {
        Launch {
            grid: bg.grid(),
            blocks: bg.num_blocks(),
            frange: bg.forloop_range(),
            input_bytes: bg.inputs().iter().map(tensor_bytes).collect(),
            written: bg.output_descs().iter().map(tensor_bytes).sum(),
        }
    }
}

/// How shared memory per block is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmemMode {
    /// The code generator's plan ([`plan_kernel`]): exact, no CUDA written.
    Planned,
    /// A sum of tile sizes (inputs in their element type, pipelined over up to 4 stages while
    /// that fits; other tiles in f32); for ranking many candidates quickly.
    Estimated,
}

/// The tile-size estimate of a block graph's shared memory (`None`: it cannot fit).
fn smem_estimate(bg: &BlockGraph, arch: &Arch) -> Option<usize> {
    let looped = bg.forloop_range() > 1;
    let (mut fixed, mut per_stage) = (0usize, 0usize);
    for n in bg.nodes() {
        for t in &n.outputs {
            match n.op {
                BlockOp::Input { forloop_dim: Some(_), .. } if looped => {
                    per_stage += num_elements(&t.shape) * t.dtype.size_bytes()
                }
                BlockOp::Input { .. } => fixed += num_elements(&t.shape) * t.dtype.size_bytes(),
                _ => fixed += num_elements(&t.shape) * 4,
            }
        }
    }
    let max_stages = if looped { bg.forloop_range().min(4) } else { 1 };
    (1..=max_stages).rev().map(|s| fixed + s * per_stage).find(|&b| b <= arch.smem_per_block)
}

/// What the model reads of a kernel's plan.
struct PlanFacts {
    /// Shared memory per block (`None`: it does not fit).
    smem: Option<usize>,
    /// How it was obtained.
    how: &'static str,
    /// Pipeline stages of the loop's tiles.
    stages: usize,
    /// Whether some tile walked by the loop is copied at the start of every iteration, waited
    /// for before the iteration's compute (not pipelined).
    per_iteration_loads: bool,
    /// Copy instructions per thread: of one iteration (the tiles the loop walks) and once before
    /// the loop (the others).
    copies: (f64, f64),
}

/// Copy instructions per thread of the tile-size estimate: 16-byte vectors (whole tiles of the
/// loop per iteration, the others once).
fn copies_estimate(bg: &BlockGraph) -> (f64, f64) {
    let threads = bg.threads().max(1) as f64;
    let (mut walked, mut once) = (0f64, 0f64);
    for n in bg.nodes() {
        if let (BlockOp::Input { forloop_dim, .. }, Some(t)) = (&n.op, n.outputs.first()) {
            let units = (num_elements(&t.shape) * t.dtype.size_bytes()).div_ceil(16) as f64;
            let slot = if forloop_dim.is_some() && bg.forloop_range() > 1 { &mut walked } else { &mut once };
            *slot += (units / threads).ceil();
        }
    }
    (walked, once)
}

/// Shared memory of a block graph's kernel, how it was obtained, its pipeline stages and copies:
/// the code generator's plan, or (when it cannot plan the kernel for another reason, or when
/// asked to) the tile-size estimate with as many stages as the loop allows and 16-byte copies.
fn plan_facts(bg: &BlockGraph, arch: &Arch, mode: SmemMode) -> PlanFacts {
    let default_stages = KernelOptions::default().max_stages.clamp(1, bg.forloop_range().max(1));
    let estimated = || PlanFacts {
        smem: smem_estimate(bg, arch),
        how: "estimated",
        stages: default_stages,
        per_iteration_loads: false,
        copies: copies_estimate(bg),
    };
    if mode == SmemMode::Estimated {
        return estimated();
    }
    let opts = KernelOptions { max_smem_bytes: arch.smem_per_block, ..KernelOptions::default() };
    match plan_kernel(bg, "cost_probe", &opts) {
        Ok(plan) => {
            let threads = plan.threads.max(1);
            let per_thread = |nodes: &[usize]| -> f64 {
                nodes
                    .iter()
                    .filter_map(|&i| plan.copies[i].as_ref())
                    .fold(0.0, |n, c| n + c.total.div_ceil(threads) as f64)
            };
            let walked: Vec<usize> = plan.loads.pipelined.iter().chain(&plan.loads.per_iteration).copied().collect();
            let once: Vec<usize> = plan.loads.once.iter().filter(|i| !walked.contains(i)).copied().collect();
            PlanFacts {
                smem: Some(plan.smem_bytes),
                how: "planned",
                stages: plan.stages,
                per_iteration_loads: !plan.loads.per_iteration.is_empty(),
                copies: (per_thread(&walked), per_thread(&once)),
            }
        }
        Err(CodegenError::SharedMemory { .. }) => PlanFacts { smem: None, how: "planned", stages: 1, ..estimated() },
        Err(_) => estimated(),
    }
}

fn pad(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Estimates one block graph (one kernel launch), with the planned shared memory.
pub fn estimate_block(bg: &BlockGraph, arch: &Arch) -> KernelCost {
    estimate_block_with(bg, arch, SmemMode::Planned)
}

/// The arithmetic of one block graph, summed over its blocks and iterations.
struct Work {
    /// Tensor-core FLOPs (padded to the instruction shape).
    flops: f64,
    /// Non-tensor FLOPs (element-wise, reductions, accumulators, FMA matmuls).
    fma: f64,
    /// The longest chain of dependent mma steps one warp runs (generated code: output tiles dealt
    /// to warps round-robin, k-steps split over 4 independent accumulator chains).
    mma_chain: f64,
}

/// Counts the arithmetic of `bg` launched as `g` says.
fn work(bg: &BlockGraph, g: &Launch) -> Work {
    let (blocks, frange) = (g.blocks, g.frange);
    let mut flops = 0f64;
    let mut fma = 0f64;
    let mut mma_chain = 0f64;
    let warps = (bg.threads() / 32).max(1);
    for node in bg.nodes() {
        let execs = match node.outputs.first().map(|t| t.phase) {
            Some(Phase::InLoop) => frange as f64,
            _ => 1.0,
        };
        match &node.op {
            BlockOp::Input { .. } => {}
            BlockOp::Matmul => {
                let (Ok(a), Ok(b)) = (bg.tile(node.inputs[0]), bg.tile(node.inputs[1])) else { continue };
                let r = a.shape.len();
                let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
                if a.dtype == DType::F32 {
                    fma += 2.0 * (m * k * n) as f64 * execs * blocks as f64;
                } else {
                    flops += 2.0 * (pad(m, 16) * pad(k, 16) * pad(n, 8)) as f64 * execs * blocks as f64;
                    let per_warp = (m.div_ceil(16) * n.div_ceil(8)).div_ceil(warps);
                    mma_chain += (per_warp * k.div_ceil(16).div_ceil(4)) as f64 * execs;
                }
            }
            BlockOp::Output { .. } => {}
            BlockOp::Accum { acc } => {
                let Ok(x) = bg.tile(node.inputs[0]) else { continue };
                let per = if *acc == AccKind::RmsLast { 2.0 } else { 1.0 };
                fma += per * num_elements(&x.shape) as f64 * frange as f64 * blocks as f64;
            }
            op => {
                let weight = match op {
                    BlockOp::Unary { .. } | BlockOp::RmsNorm { .. } => 4.0,
                    _ => 1.0,
                };
                let elems: usize = node
                    .inputs
                    .iter()
                    .filter_map(|&t| bg.tile(t).ok())
                    .map(|t| num_elements(&t.shape))
                    .max()
                    .unwrap_or(0);
                fma += weight * elems as f64 * execs * blocks as f64;
            }
        }
    }
    Work { flops, fma, mma_chain }
}

/// Estimates one block graph with shared memory obtained as `mode` says.
pub fn estimate_block_with(bg: &BlockGraph, arch: &Arch, mode: SmemMode) -> KernelCost {
    estimate_launch(bg, arch, &plan_facts(bg, arch, mode), &Launch::compiled(bg))
}

/// Estimates one block graph launched as `g` says, with its code generator's facts `facts` (taken
/// at the compile size: shared memory, copies per iteration; the stages at most the iterations).
fn estimate_launch(bg: &BlockGraph, arch: &Arch, facts: &PlanFacts, g: &Launch) -> KernelCost {
    let (blocks, frange) = (g.blocks, g.frange);
    let (mut dram, l2) = input_traffic(bg, arch, true, g);
    let Work { flops, fma, mma_chain } = work(bg, g);
    let warps = (bg.threads() / 32).max(1);
    dram += g.written;

    let (smem_how, stages) = (facts.how, facts.stages.min(frange.max(1)));
    let Some(smem) = facts.smem else {
        return KernelCost {
            bytes: dram,
            l2_bytes: l2,
            flops,
            fma_flops: fma,
            waves: 0,
            smem: arch.smem_per_block + 1,
            blocks_per_sm: 0,
            us: f64::INFINITY,
            why: format!(
                "grid {:?} × {} threads, F {}: shared memory exceeds {} KB per block",
                g.grid,
                bg.threads(),
                frange,
                arch.smem_per_block / 1024
            ),
        };
    };
    let by_smem = arch.smem_per_sm.checked_div(smem).unwrap_or(arch.max_blocks_per_sm);
    let blocks_per_sm = by_smem.min(arch.max_threads_per_sm / bg.threads().max(1)).min(arch.max_blocks_per_sm).max(1);
    let capacity = arch.num_sms * blocks_per_sm;
    let waves = blocks.div_ceil(capacity).max(1);

    // Per-block shares of the work; each wave runs its blocks on min(blocks, SMs) SMs.
    let per_block = |x: f64| x / blocks as f64;
    let (dram_b, l2_b, tc_b, fma_b) = (per_block(dram), per_block(l2), per_block(flops), per_block(fma));
    let mut body = 0f64;
    let mut remaining = blocks;
    // Loads overlap compute only when the loop's tiles have two or more stages (and none is
    // copied synchronously at the start of every iteration).
    let pipelined = frange > 1 && stages > 1 && !facts.per_iteration_loads;
    let (copies_iter, copies_once) = facts.copies;
    let issue = (frange as f64 * copies_iter + copies_once) * arch.copy_us;
    let serial_mma = mma_chain * arch.mma_step_us;
    while remaining > 0 {
        let n = remaining.min(capacity);
        remaining -= n;
        let sms = n.min(arch.num_sms) as f64;
        let frac = sms / arch.num_sms as f64;
        let warps_per_sm = (blocks_per_sm.min(n.div_ceil(arch.num_sms).max(1)) * warps) as f64;
        let warp_share = (warps_per_sm / arch.bandwidth_warps.max(1) as f64).min(1.0);
        let dram_bw = arch.dram_bytes_per_us.min(sms * arch.sm_dram_bytes_per_us) * warp_share;
        let mem = dram_b * n as f64 / dram_bw + l2_b * n as f64 / (arch.l2_bytes_per_us * frac);
        let comp = (tc_b * n as f64 / (arch.tensor_flops_per_us * frac)).max(serial_mma)
            + fma_b * n as f64 / (arch.fma_flops_per_us * frac);
        let overlap = if pipelined { mem.max(comp) } else { mem + comp };
        let refill = if remaining + n < blocks { arch.wave_refill_us } else { 0.0 };
        // Without a pipeline every iteration waits for its own tiles: the first global-memory
        // latency is exposed once per iteration, not once per wave.
        let exposed = if pipelined { 1.0 } else { frange as f64 };
        body += exposed * arch.latency_us + refill + overlap + frange as f64 * arch.iteration_us + issue;
    }
    let us = body + arch.launch_us;
    let why = format!(
        "grid {:?} × {} threads, F {} ({} stage(s){}): {:.2} MB DRAM + {:.2} MB L2, {:.3} GFLOP tensor ({:.2} µs mma chain per warp) + {:.3} GFLOP FMA, {:.0} + {:.0} × F copies per thread, smem {:.1} KB ({smem_how}) → {} block(s)/SM, {} wave(s); {:.2} µs + launch {:.1} µs",
        g.grid,
        bg.threads(),
        frange,
        stages,
        if facts.per_iteration_loads { ", a tile copied every iteration" } else { "" },
        dram / 1e6,
        l2 / 1e6,
        flops / 1e9,
        serial_mma,
        fma / 1e9,
        copies_once,
        copies_iter,
        smem as f64 / 1024.0,
        blocks_per_sm,
        waves,
        body,
        arch.launch_us
    );
    KernelCost { bytes: dram, l2_bytes: l2, flops, fma_flops: fma, waves, smem, blocks_per_sm, us, why }
}

/// A lower bound of [`estimate_block`] computed from the input iterators alone (launch, one
/// wave's latency, the loop overhead, every input's unique bytes at full DRAM bandwidth and the
/// replicated bytes at full L2 bandwidth): the search skips configurations whose bound already
/// exceeds the best µGraph found.
pub fn lower_bound_us(bg: &BlockGraph, arch: &Arch) -> f64 {
    let frange = bg.forloop_range();
    let (dram, l2) = input_traffic(bg, arch, false, &Launch::compiled(bg));
    arch.launch_us
        + arch.latency_us
        + frange as f64 * arch.iteration_us
        + dram / arch.dram_bytes_per_us
        + l2 / arch.l2_bytes_per_us
}

/// Bytes the input iterators of `bg` read (per input: the tile times the iterations it is loaded,
/// times the blocks), split into device memory (each tensor once, plus replicated reads of tensors
/// too large for L2) and L2 (replicated reads of tensors that fit); with `segments`, device-memory
/// bytes are weighted by [`Arch::segment_factor`] (the estimate), without it they are not (the bound).
fn input_traffic(bg: &BlockGraph, arch: &Arch, segments: bool, g: &Launch) -> (f64, f64) {
    let blocks = g.blocks as f64;
    let frange = g.frange;
    let inputs = bg.inputs();
    let mut requested = vec![0f64; inputs.len()];
    let mut dram_factor = vec![1f64; inputs.len()];
    for node in bg.nodes() {
        if let BlockOp::Input { input, forloop_dim, .. } = &node.op {
            let t = &node.outputs[0];
            let loads = if forloop_dim.is_some() { frange as f64 } else { 1.0 };
            if let Some(r) = requested.get_mut(*input) {
                *r += num_elements(&t.shape) as f64 * t.dtype.size_bytes() as f64 * loads * blocks;
            }
            if let (true, Some(f), Some(desc)) = (segments, dram_factor.get_mut(*input), inputs.get(*input)) {
                *f = f.max(arch.segment_factor(desc, &t.shape));
            }
        }
        // A gather reads its rows of the table from device memory directly.
        if let (BlockOp::Gather { table, .. }, Some(t)) = (&node.op, node.outputs.first())
            && let Some(r) = requested.get_mut(*table)
        {
            *r += num_elements(&t.shape) as f64 * t.dtype.size_bytes() as f64 * blocks;
        }
    }
    let (mut dram, mut l2) = (0f64, 0f64);
    for ((bytes, req), factor) in g.input_bytes.iter().zip(&requested).zip(&dram_factor) {
        if *req == 0.0 {
            continue;
        }
        let unique = bytes.min(*req);
        let replicated = req - unique;
        dram += unique * factor;
        if bytes * 2.0 <= arch.l2_bytes as f64 {
            l2 += replicated;
        } else {
            dram += replicated * factor;
        }
    }
    (dram, l2)
}

fn tensor_bytes(d: &TensorDesc) -> f64 {
    shape_bytes(&d.shape, d.dtype)
}

/// Bytes of a tensor of `shape` and element type `t`.
fn shape_bytes(shape: &[usize], t: DType) -> f64 {
    num_elements(shape) as f64 * t.size_bytes() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Re-calibrating the built-in architectures keeps the text the search version hashes (the
    /// cache keys of `.mirage/`); another architecture is identified by all of its constants.
    #[test]
    fn the_built_in_architectures_keep_their_search_identity() {
        assert_eq!(Arch::sm90().search_identity(), SM90_SEARCH_IDENTITY);
        assert_eq!(Arch::sm80().search_identity(), SM80_SEARCH_IDENTITY);
        let other = Arch { num_sms: 100, ..Arch::sm90() };
        assert!(other.search_identity().contains("num_sms: 100"), "{}", other.search_identity());
        assert!(other.search_identity().contains("segment_bytes"), "{}", other.search_identity());
    }
}
