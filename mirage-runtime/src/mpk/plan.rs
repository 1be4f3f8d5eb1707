//! The megakernel plan: what the compiler (`mirage::mpk`) writes next to the resident kernel's
//! cubin and the runtime reads back without the compiler, and the device ABI both sides share
//! (the kernel parameter block, the status words, the error codes, the timestamp layout).

use serde::{Deserialize, Serialize};

use super::MpkError;
use mirage_core::TensorDesc;

/// Version of the plan format; [`MpkPlan::from_json`] rejects other versions.
pub const MPK_PLAN_VERSION: u32 = 1;

/// The device ABI of the resident kernel. The compiler emits these numbers into the generated
/// CUDA source, so the two sides cannot disagree.
pub mod abi {
    /// Status word: the error code (0 = none).
    pub const STATUS_CODE: usize = 0;
    /// Status word: the task that reported the error.
    pub const STATUS_TASK: usize = 1;
    /// Status word: the global step (1-based) of that task.
    pub const STATUS_STEP: usize = 2;
    /// Status words 3..6: three numbers describing the error (see the codes).
    pub const STATUS_INFO: usize = 3;
    /// Status word: non-zero once a worker gave up; every waiting worker then stops.
    pub const STATUS_ABORT: usize = 6;
    /// Number of status words.
    pub const STATUS_WORDS: usize = 8;

    /// No error.
    pub const ERR_NONE: u32 = 0;
    /// A dependency wait exceeded the watchdog bound. Info: counter, count needed, count found.
    pub const ERR_WATCHDOG: u32 = 1;
    /// The kernel was launched with another grid or block size than the plan's. Info: grid,
    /// block, expected workers.
    pub const ERR_LAUNCH: u32 = 2;
    /// A task read a runtime index outside its range (a token id, a position, a key length).
    /// Info: the value (as an i32 bit pattern), the exclusive upper bound, the tensor or
    /// parameter slot it came from.
    pub const ERR_INDEX: u32 = 3;

    /// Timestamps per task and step: start (before the prefetch and the wait), ready (its
    /// dependencies met), end (after its signals), each `%globaltimer` nanoseconds.
    pub const TIMESTAMPS_PER_TASK: usize = 3;

    /// The resident kernel's only parameter (72 bytes, mirrored by `MpkParams` in the generated
    /// source with a size assertion).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct MpkParams {
        /// Device array of one pointer per tensor of the plan, in plan order.
        pub buffers: u64,
        /// Device array of `nsteps × params` runtime parameter values (`i32`).
        pub params: u64,
        /// Device array of the dependency counters (`u32`, monotonic; the last one is the step
        /// barrier).
        pub counters: u64,
        /// Device array of [`STATUS_WORDS`] status words (`u32`).
        pub status: u64,
        /// Device array of `nsteps × tasks × 3` timestamps (`u64`), or 0 to record none.
        pub timestamps: u64,
        /// Device array of one `u32` per worker: the SM it ran on.
        pub worker_sm: u64,
        /// Steps completed on these counters before this launch.
        pub step_base: u32,
        /// Steps this launch runs.
        pub nsteps: u32,
        /// The watchdog bound of one dependency wait, in nanoseconds.
        pub watchdog_ns: u64,
        /// How many of its later tasks a worker prefetches into L2 ahead of the current one
        /// (0: each task its own weights, just before its wait).
        pub prefetch_ahead: u32,
        /// Zero (keeps the size a multiple of 8).
        pub reserved: u32,
    }

    /// Size of [`MpkParams`] in bytes.
    pub const MPK_PARAMS_BYTES: usize = 72;
    const _: () = assert!(std::mem::size_of::<MpkParams>() == MPK_PARAMS_BYTES);

    // SAFETY: `MpkParams` is `repr(C)` plain data (integers only) with the layout of the
    // generated CUDA struct (same field order and types, size asserted on both sides).
    unsafe impl cudarc::driver::DeviceRepr for MpkParams {}
}

/// How a tensor of a step graph lives across steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// Written by the host only (weights, per-step inputs); never written inside a step.
    Input,
    /// Persistent state: set by the host, read and written inside steps (a KV cache, the
    /// next token).
    State,
    /// Written exactly once per step (every element, by one operator) before it is read; the
    /// host may read it after a run.
    Buffer,
}

impl TensorKind {
    /// The kind's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::State => "state",
            TensorKind::Buffer => "buffer",
        }
    }
}

/// A tensor of the step graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpkTensor {
    /// Its unique name.
    pub name: String,
    /// Shape, strides, element type.
    pub spec: TensorDesc,
    /// How it lives across steps.
    pub kind: TensorKind,
}

/// An operator of the step graph: a grid of tile tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpkOp {
    /// Its name (unique in the graph).
    pub name: String,
    /// What kind of task body it runs (`block graph`, `rope`, ...).
    pub kind: String,
    /// Its tiles along x, y, z.
    pub grid: [u32; 3],
}

/// One task: a tile of an operator, placed on a worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpkTask {
    /// Index of its operator in [`MpkPlan::ops`].
    pub op: u32,
    /// Its tile index.
    pub tile: [u32; 3],
    /// The worker (block of the resident kernel) that runs it.
    pub worker: u32,
    /// How many counters it waits on.
    pub waits: u32,
}

/// Everything the runtime needs to run a resident kernel built by `mirage::mpk`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpkPlan {
    /// [`MPK_PLAN_VERSION`].
    pub version: u32,
    /// The step graph's name.
    pub name: String,
    /// The `extern "C"` name of the resident kernel in the cubin.
    pub kernel: String,
    /// Threads per worker block.
    pub threads: u32,
    /// Worker blocks: the grid of the launch (all must be co-resident).
    pub workers: u32,
    /// Dynamic shared memory per worker, in bytes.
    pub smem_bytes: u32,
    /// Dependency counters, the step barrier (the last one) included.
    pub counters: u32,
    /// The tensors, in the order of the kernel's pointer table.
    pub tensors: Vec<MpkTensor>,
    /// The runtime parameters (`i32` each), in the order of a step's parameter values.
    pub params: Vec<String>,
    /// The operators.
    pub ops: Vec<MpkOp>,
    /// The tasks, in the global topological order of the schedule.
    pub tasks: Vec<MpkTask>,
    /// Each worker's task list, in execution order (indices into `tasks`).
    pub worker_tasks: Vec<Vec<u32>>,
}

impl MpkPlan {
    /// Parses a plan and checks it ([`MpkPlan::validate`]).
    pub fn from_json(json: &str) -> Result<MpkPlan, MpkError> {
        let plan: MpkPlan = serde_json::from_str(json)
            .map_err(|e| MpkError::Plan { name: "<unparsed>".into(), reason: format!("invalid JSON: {e}") })?;
        plan.validate()?;
        Ok(plan)
    }

    /// The plan as JSON.
    pub fn to_json(&self) -> String {
        // Plain structs of strings, integers and vectors always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Checks the plan's internal consistency: version, names, operator and worker indices, and
    /// that the worker lists hold every task exactly once, each on the worker it names.
    pub fn validate(&self) -> Result<(), MpkError> {
        let fail = |reason: String| Err(MpkError::Plan { name: self.name.clone(), reason });
        if self.version != MPK_PLAN_VERSION {
            return fail(format!("expected plan version {MPK_PLAN_VERSION}, found {}", self.version));
        }
        if self.threads == 0 || !self.threads.is_multiple_of(32) || self.threads > 1024 {
            return fail(format!("expected a multiple of 32 threads up to 1024, found {}", self.threads));
        }
        if self.workers == 0 || self.worker_tasks.len() != self.workers as usize {
            return fail(format!(
                "expected {} worker lists (one per worker, at least one), found {}",
                self.workers,
                self.worker_tasks.len()
            ));
        }
        if self.counters == 0 {
            return fail("expected at least the step barrier counter, found 0 counters".into());
        }
        let mut names = std::collections::HashSet::new();
        for t in &self.tensors {
            if !names.insert(t.name.as_str()) {
                return fail(format!("tensor name `{}` appears twice", t.name));
            }
        }
        for (i, task) in self.tasks.iter().enumerate() {
            let Some(op) = self.ops.get(task.op as usize) else {
                return fail(format!("task {i} names operator {}, the plan has {}", task.op, self.ops.len()));
            };
            if (0..3).any(|a| task.tile[a] >= op.grid[a]) {
                return fail(format!("task {i}: tile {:?} outside the grid {:?} of `{}`", task.tile, op.grid, op.name));
            }
            if task.worker >= self.workers {
                return fail(format!("task {i} is placed on worker {}, the plan has {}", task.worker, self.workers));
            }
        }
        let mut seen = vec![false; self.tasks.len()];
        for (w, list) in self.worker_tasks.iter().enumerate() {
            for &t in list {
                let Some(task) = self.tasks.get(t as usize) else {
                    return fail(format!("worker {w} lists task {t}, the plan has {}", self.tasks.len()));
                };
                if task.worker as usize != w || std::mem::replace(&mut seen[t as usize], true) {
                    return fail(format!(
                        "task {t} is listed on worker {w}: placed on {} or listed twice",
                        task.worker
                    ));
                }
            }
        }
        if let Some(t) = seen.iter().position(|s| !s) {
            return fail(format!("task {t} is on no worker's list"));
        }
        Ok(())
    }

    /// The index of the tensor called `name`.
    pub fn tensor_index(&self, name: &str) -> Result<usize, MpkError> {
        self.tensors.iter().position(|t| t.name == name).ok_or_else(|| MpkError::UnknownName {
            megakernel: self.name.clone(),
            what: "tensor",
            name: name.to_owned(),
            known: self.tensors.iter().map(|t| t.name.clone()).collect(),
        })
    }

    /// The index of the runtime parameter called `name`.
    pub fn param_index(&self, name: &str) -> Result<usize, MpkError> {
        self.params.iter().position(|p| p == name).ok_or_else(|| MpkError::UnknownName {
            megakernel: self.name.clone(),
            what: "runtime parameter",
            name: name.to_owned(),
            known: self.params.clone(),
        })
    }

    /// A task's name in traces and messages: `op[x,y,z]` (trailing zero axes of a 1-D or 2-D
    /// grid left out); task `u32::MAX` is the step barrier (the kernel's own waits).
    pub fn task_name(&self, task: usize) -> String {
        if task == u32::MAX as usize {
            return "the step barrier".into();
        }
        let Some(t) = self.tasks.get(task) else { return format!("task {task}") };
        let op = &self.ops[t.op as usize];
        let axes = if op.grid[2] > 1 {
            3
        } else if op.grid[1] > 1 {
            2
        } else {
            1
        };
        let tile: Vec<String> = t.tile[..axes].iter().map(|v| v.to_string()).collect();
        format!("{}[{}]", op.name, tile.join(","))
    }
}
