//! The run-time half of the persistent megakernel (`mirage::mpk` builds it): a whole step graph
//! — every operator of a model step, as tile tasks — runs as one resident kernel whose blocks walk
//! per-worker task lists and wait on dependency counters instead of kernel boundaries.
//!
//! - [`Megakernel`] holds the build artifacts (cubin and [`MpkPlan`], `&'static` data from
//!   `include_bytes!`/`include_str!`), loaded on first use.
//! - [`Session`] owns the device memory of one instance: every tensor of the plan, the pointer
//!   table, the counters, the status words. Tensors are reached through typed handles
//!   ([`TensorHandle`], checked once against the plan), runtime parameters through
//!   [`ParamHandle`]; [`Session::run`] runs steps with their parameter values in one launch.
//! - The launch is **cooperative** (`cuLaunchCooperativeKernel`): the driver refuses it unless
//!   every worker block is resident at once, which is what makes waiting on other blocks
//!   deadlock-free. Before it, the occupancy API is asked how many blocks fit, and a plan with
//!   more workers than fit is an error naming both numbers.
//! - A hung wait ends at the watchdog bound and comes back as [`MpkError::Device`] with the task
//!   and counter; so does a runtime index out of range (a token id, a position).
//! - [`Session::run_timed`] records `%globaltimer` timestamps per task and returns a
//!   [`Timeline`]: waiting and busy fractions, and a Chrome/Perfetto trace (one track per SM, one
//!   slice per task).

mod plan;
mod session;
mod timeline;

pub use plan::{MPK_PLAN_VERSION, MpkOp, MpkPlan, MpkTask, MpkTensor, TensorKind, abi};
pub use session::{
    DEFAULT_PREFETCH_AHEAD, MAX_PREFETCH_AHEAD, Megakernel, MegakernelArtifacts, ParamHandle, ParamValues, Session,
    TensorElement, TensorHandle,
};
pub use timeline::{OpTimes, TaskTimes, Timeline, TimelineStats};

use crate::error::RuntimeError;

/// Everything that can go wrong with a megakernel. Messages say what was expected and found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MpkError {
    /// A CUDA or runtime failure (loading, allocating, launching, copying).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// The plan is unreadable or inconsistent (a stale or damaged artifact).
    #[error("megakernel `{name}`: plan: {reason}")]
    Plan {
        /// The megakernel.
        name: String,
        /// What is wrong.
        reason: String,
    },

    /// No tensor or parameter of that name.
    #[error("megakernel `{megakernel}` has no {what} `{name}` (it has: {})", known.join(", "))]
    UnknownName {
        /// The megakernel.
        megakernel: String,
        /// "tensor" or "runtime parameter".
        what: &'static str,
        /// The name asked for.
        name: String,
        /// The names it has.
        known: Vec<String>,
    },

    /// A tensor used with the wrong element type or length.
    #[error("megakernel `{megakernel}`: tensor `{tensor}`: expected {expected}, found {found}")]
    Tensor {
        /// The megakernel.
        megakernel: String,
        /// The tensor.
        tensor: String,
        /// What it needs.
        expected: String,
        /// What was given.
        found: String,
    },

    /// Not every worker block fits on the device at once.
    #[error(
        "megakernel `{megakernel}` needs {workers} co-resident worker blocks ({threads} threads, \
         {smem_bytes} bytes of shared memory each): expected at most the {fit} that fit \
         ({per_sm} per SM × {sms} SMs); rebuild it with fewer workers"
    )]
    Occupancy {
        /// The megakernel.
        megakernel: String,
        /// Workers of the plan.
        workers: u32,
        /// Threads per worker.
        threads: u32,
        /// Dynamic shared memory per worker.
        smem_bytes: u32,
        /// Blocks that fit per SM.
        per_sm: u32,
        /// SMs of the device.
        sms: u32,
        /// Blocks that fit in all.
        fit: u32,
    },

    /// A run request that cannot be launched (no steps, wrong parameter count).
    #[error("megakernel `{megakernel}`: {reason}")]
    Request {
        /// The megakernel.
        megakernel: String,
        /// What is wrong.
        reason: String,
    },

    /// The kernel reported an error (the session must be [`Session::reset`] before the next run).
    #[error("megakernel `{megakernel}`: step {step}, task {task} (`{task_name}`): {message}")]
    Device {
        /// The megakernel.
        megakernel: String,
        /// The error code ([`abi`]).
        code: u32,
        /// The task that reported it.
        task: u32,
        /// Its name.
        task_name: String,
        /// The global step (1-based).
        step: u32,
        /// What happened.
        message: String,
    },

    /// An earlier run failed; the counters are in an unknown state.
    #[error("megakernel `{megakernel}`: an earlier run failed ({reason}); call Session::reset before running again")]
    Poisoned {
        /// The megakernel.
        megakernel: String,
        /// The earlier error.
        reason: String,
    },
}
