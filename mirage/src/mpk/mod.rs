//! The persistent megakernel, compiler side: a whole model step — every operator, as tile tasks
//! — compiled into one resident kernel whose blocks (workers, one per SM) walk static task
//! lists and wait on dependency counters instead of kernel boundaries.
//!
//! The pipeline, each step a module:
//! 1. [`graph`]: the step graph — operators (block graphs from µGraphs, or [`builtin`] decode
//!    tasks) wired by named tensors (inputs, persistent states, once-per-step buffers) and
//!    runtime parameters; checked and ordered by its dataflow.
//! 2. [`tasks`]: one task per tile, with the element boxes ([`region`]) it reads, prefetches
//!    and writes.
//! 3. [`deps`]: tile-granular dependencies from box overlaps, carried by monotonic counters
//!    (aggregate counters for all-tiles dependencies, implied waits dropped).
//! 4. [`schedule`]: per-worker task lists in one global topological order, checked by a
//!    two-step simulation (deadlock, trigger counts, every dependency ordered).
//! 5. [`emit`]: the resident kernel's CUDA; block-graph task bodies come from the code
//!    generator, parameterized by the tile index.
//! 6. [`build()`]: nvcc, and the artifacts the runtime embeds (cubin and [`MpkPlan`]).
//!    [`emit::generate`] is the source alone.
//!
//! [`exec`] runs compiled graphs on the CPU: the whole-graph reference and an executor of the
//! schedule, both through the reference interpreter.
//!
//! The runtime half ([`Megakernel`], [`Session`], [`Timeline`]) is `mirage_runtime::mpk`,
//! re-exported here.
//!
//! ```
//! use mirage::ir::DType;
//! use mirage::mpk::{Builtin, MpkOptions, StepGraph, compile};
//!
//! // Two chained empty tasks per tile: y = 1 + x, z = 1 + max(y).
//! let mut g = StepGraph::new("chain").unwrap();
//! let x = g.input("x", &[4], DType::F32).unwrap();
//! let y = g.builtin("a", Builtin::Nop { all: false }, &[x]).unwrap()[0];
//! g.builtin("b", Builtin::Nop { all: true }, &[y]).unwrap();
//! let c = compile(&g, &MpkOptions { workers: 2, ..MpkOptions::default() }).unwrap();
//! assert_eq!(c.tasks.len(), 8);
//! // every tile of `b` waits on `a`'s aggregate counter (4 triggers per step)
//! assert!(c.sync.waits[4..].iter().all(|w| w.len() == 1));
//! ```

pub mod builtin;
pub mod decoder;
pub mod deps;
pub mod emit;
pub mod exec;
pub mod graph;
pub mod region;
pub mod schedule;
pub mod tasks;
pub mod testmode;

use std::path::{Path, PathBuf};

pub use builtin::Builtin;
pub use emit::{BodyGenerator, ResidentKernel, kernel_name};
pub use graph::{GraphError, OpId, OpKind, Operator, ParamExpr, ParamId, StepGraph, StepTensor, TensorId};
pub use mirage_runtime::mpk::*;
pub use schedule::{Schedule, ScheduleError};

use crate::codegen::{CodegenError, KernelOptions};
use crate::ir::{BlockGraph, IrError};
use crate::nvcc::{self, NvccError};

/// Capacities of the resident kernel's tables; a graph over them is a build error naming what
/// overflowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableLimits {
    /// Tasks per step.
    pub max_tasks: usize,
    /// Counters a task may wait on.
    pub max_waits_per_task: usize,
    /// Counters in all.
    pub max_counters: usize,
}

impl Default for TableLimits {
    fn default() -> Self {
        TableLimits { max_tasks: 1 << 20, max_waits_per_task: 4096, max_counters: 1 << 24 }
    }
}

/// How a step graph is compiled.
#[derive(Clone, Debug)]
pub struct MpkOptions {
    /// Worker blocks (all resident at once): one per SM by default (132 on an H100/H200).
    pub workers: usize,
    /// Threads per worker; every task runs with them (block graphs are re-planned for them).
    pub threads: usize,
    /// Code generation options of the task bodies (shared memory per worker, stages).
    pub kernel: KernelOptions,
    /// Whether tasks stream their weights into L2 before waiting for their dependencies (off by
    /// default: on the H200 it made every decode model slower — its prefetches are issued by
    /// the worker's warps before the task may start, which delayed every task past its
    /// dependencies for bodies no faster; DECISIONS change 58).
    pub prefetch: bool,
    /// At most this many bytes prefetched per task when [`prefetch`](Self::prefetch) is on
    /// (keeps all workers' prefetches inside L2).
    pub prefetch_limit_bytes: usize,
    /// Table capacities.
    pub limits: TableLimits,
}

impl Default for MpkOptions {
    fn default() -> Self {
        MpkOptions {
            workers: 132,
            threads: 256,
            kernel: KernelOptions::default(),
            prefetch: false,
            prefetch_limit_bytes: 192 * 1024,
            limits: TableLimits::default(),
        }
    }
}

/// Why a megakernel could not be built. Messages name the operator, tensor or table.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The step graph is invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The schedule failed its check.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// More than the tables or a worker hold.
    #[error("step graph `{graph}`: {reason}")]
    Limits {
        /// The graph.
        graph: String,
        /// What overflowed.
        reason: String,
    },
    /// Options that cannot work.
    #[error("megakernel options: {0}")]
    Options(String),
    /// A task body could not be generated.
    #[error("operator `{op}`: code generation failed: {source}")]
    Codegen {
        /// The operator.
        op: String,
        /// Why.
        source: CodegenError,
    },
    /// nvcc failed.
    #[error("megakernel `{graph}`: {source}")]
    Nvcc {
        /// The graph.
        graph: String,
        /// Why.
        source: NvccError,
    },
    /// Writing an artifact failed.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A compiled step graph: tasks, dependencies, counters and schedule, checked.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The graph, block graphs re-planned for the worker's threads.
    pub graph: StepGraph,
    /// The operators in execution order.
    pub order: Vec<OpId>,
    /// The tasks in the global order.
    pub tasks: Vec<Task>,
    /// Each task's dependencies (earlier tasks).
    pub deps: Vec<Vec<usize>>,
    /// Counters, waits and signals.
    pub sync: deps::Sync,
    /// The worker lists.
    pub schedule: Schedule,
    /// The options it was compiled with.
    pub options: MpkOptions,
}

pub use tasks::Task;

/// The same block graph with `threads` threads per block (the thread count is a code
/// generation choice: the graph's meaning does not depend on it).
pub fn with_threads(bg: &BlockGraph, threads: usize) -> Result<BlockGraph, IrError> {
    let mut out = BlockGraph::new(bg.inputs().to_vec(), bg.grid(), threads, bg.forloop_range())?;
    for node in bg.nodes() {
        out.push(node.op.clone(), &node.inputs)?;
    }
    Ok(out)
}

/// Compiles a step graph to tasks, dependencies, counters and a checked schedule (no CUDA).
pub fn compile(g: &StepGraph, opts: &MpkOptions) -> Result<Compiled, BuildError> {
    if opts.workers == 0 || opts.threads == 0 || !opts.threads.is_multiple_of(32) || opts.threads > 1024 {
        return Err(BuildError::Options(format!(
            "expected at least one worker and a multiple of 32 threads up to 1024, found {} workers of {} threads",
            opts.workers, opts.threads
        )));
    }
    let mut graph = g.clone();
    let limits = |reason: String| BuildError::Limits { graph: g.name().into(), reason };
    for (i, op) in g.ops().iter().enumerate() {
        if op.grid.iter().any(|&n| n > u16::MAX as usize) {
            return Err(limits(format!(
                "operator `{}` has a grid {:?}: the task table holds tiles below 65536 per axis",
                op.name, op.grid
            )));
        }
        if let OpKind::Block(bg) = &op.kind {
            let re = with_threads(bg, opts.threads).map_err(|e| GraphError::Unsupported {
                graph: g.name().into(),
                op: op.name.clone(),
                reason: format!("cannot run with {} threads: {e}", opts.threads),
            })?;
            graph.set_kind(OpId(i), OpKind::Block(Box::new(re)));
        }
    }
    if g.ops().len() > u16::MAX as usize {
        return Err(limits(format!("{} operators: the task table holds at most 65535", g.ops().len())));
    }
    let order = graph.order()?;
    let tasks = tasks::expand(&graph, &order)?;
    if tasks.len() > opts.limits.max_tasks {
        return Err(limits(format!(
            "{} tasks per step: the tables hold at most {}",
            tasks.len(),
            opts.limits.max_tasks
        )));
    }
    let deps = deps::derive(&graph, &tasks);
    let sync = deps::counters(&graph, &tasks, &deps, opts.workers);
    if sync.counters.len() > opts.limits.max_counters {
        return Err(limits(format!(
            "{} counters: the tables hold at most {}",
            sync.counters.len(),
            opts.limits.max_counters
        )));
    }
    if let Some((t, w)) = sync.waits.iter().enumerate().find(|(_, w)| w.len() > opts.limits.max_waits_per_task) {
        return Err(limits(format!(
            "task `{}` waits on {} counters: the tables hold at most {} per task",
            schedule::task_name(&graph, &tasks, t),
            w.len(),
            opts.limits.max_waits_per_task
        )));
    }
    let schedule = schedule::list_schedule(&graph, &tasks, &sync, opts.workers);
    schedule::validate(&graph, &tasks, &deps, &sync, &schedule)?;
    Ok(Compiled { graph, order, tasks, deps, sync, schedule, options: opts.clone() })
}

impl Compiled {
    /// The plan the runtime reads for this graph, with the resident kernel's name and shared
    /// memory.
    pub fn plan(&self, kernel: &ResidentKernel) -> MpkPlan {
        let g = &self.graph;
        let worker_of = self.schedule.worker_of(self.tasks.len());
        MpkPlan {
            version: MPK_PLAN_VERSION,
            name: g.name().into(),
            kernel: kernel.kernel.clone(),
            threads: self.options.threads as u32,
            workers: self.options.workers as u32,
            smem_bytes: kernel.smem_bytes as u32,
            counters: self.sync.counters.len() as u32,
            tensors: g
                .tensors()
                .iter()
                .map(|t| MpkTensor { name: t.name.clone(), spec: t.desc.clone(), kind: t.kind })
                .collect(),
            params: g.params().to_vec(),
            ops: g
                .ops()
                .iter()
                .map(|o| MpkOp {
                    name: o.name.clone(),
                    kind: o.kind.name(),
                    grid: [o.grid[0] as u32, o.grid[1] as u32, o.grid[2] as u32],
                })
                .collect(),
            tasks: self
                .tasks
                .iter()
                .enumerate()
                .map(|(t, task)| MpkTask {
                    op: task.op.0 as u32,
                    tile: [task.tile[0] as u32, task.tile[1] as u32, task.tile[2] as u32],
                    worker: worker_of[t] as u32,
                    waits: self.sync.waits[t].len() as u32,
                })
                .collect(),
            worker_tasks: self.schedule.workers.iter().map(|w| w.iter().map(|&t| t as u32).collect()).collect(),
        }
    }
}

/// The files [`build`] writes for a step graph.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// The cubin.
    pub cubin: PathBuf,
    /// The plan (JSON).
    pub plan: PathBuf,
    /// The CUDA source, for inspection.
    pub cuda: PathBuf,
    /// The compiled graph.
    pub compiled: Compiled,
    /// The plan.
    pub mpk_plan: MpkPlan,
}

/// [`build_with`] the code generator's task bodies ([`crate::codegen::generate_task_body`]):
/// how a build script builds a step graph.
pub fn build(
    g: &StepGraph,
    opts: &MpkOptions,
    nvcc_opts: &nvcc::CompileOptions,
    dir: &Path,
) -> Result<Artifacts, BuildError> {
    build_with(g, opts, &crate::codegen::generate_task_body, nvcc_opts, dir)
}

/// Compiles `g`, generates its resident kernel with task bodies from `bodies`, builds it with
/// nvcc (`nvcc_opts`) and writes `{name}.cubin`, `{name}.mpk.json` and `{name}.cu` into
/// `dir` (written only when their content changes).
pub fn build_with(
    g: &StepGraph,
    opts: &MpkOptions,
    bodies: BodyGenerator<'_>,
    nvcc_opts: &nvcc::CompileOptions,
    dir: &Path,
) -> Result<Artifacts, BuildError> {
    let compiled = compile(g, opts)?;
    let kernel = emit::emit(&compiled, bodies)?;
    let cubin = nvcc::compile_cubin(&kernel.source, &kernel.kernel, nvcc_opts)
        .map_err(|source| BuildError::Nvcc { graph: g.name().into(), source })?;
    let mpk_plan = compiled.plan(&kernel);
    std::fs::create_dir_all(dir).map_err(|source| BuildError::Io { path: dir.into(), source })?;
    let file = |ext: &str| dir.join(format!("{}.{ext}", g.name()));
    let write = |path: &Path, bytes: &[u8]| -> Result<(), BuildError> {
        if std::fs::read(path).is_ok_and(|old| old == bytes) {
            return Ok(());
        }
        std::fs::write(path, bytes).map_err(|source| BuildError::Io { path: path.into(), source })
    };
    let (cubin_path, plan_path, cuda_path) = (file("cubin"), file("mpk.json"), file("cu"));
    write(&cubin_path, &cubin.bytes)?;
    write(&plan_path, mpk_plan.to_json().as_bytes())?;
    write(&cuda_path, kernel.source.as_bytes())?;
    Ok(Artifacts { cubin: cubin_path, plan: plan_path, cuda: cuda_path, compiled, mpk_plan })
}
