//! The launch plan: which kernels run in which order on which buffers.

use serde::{Deserialize, Serialize};

use crate::ir::TensorDesc;

/// Version of the plan format.
pub const PLAN_VERSION: u32 = 1;

/// An argument of a kernel launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgRef {
    /// The program's input `i`.
    Input(usize),
    /// The program's output `i`.
    Output(usize),
    /// Intermediate buffer `i`.
    Buffer(usize),
}

/// An intermediate device buffer between kernels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// Shape, row-major strides and element type.
    pub desc: TensorDesc,
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelLaunch {
    /// `extern "C"` name in the cubin.
    pub name: String,
    /// Blocks along x, y, z.
    pub grid: [usize; 3],
    /// Threads per block.
    pub threads: usize,
    /// Dynamic shared memory (bytes).
    pub smem_bytes: usize,
    /// Arguments in parameter order: the kernel's operands, then its outputs.
    pub args: Vec<ArgRef>,
}

/// Everything needed to run a generated µGraph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchPlan {
    /// [`PLAN_VERSION`].
    pub version: u32,
    /// The program's name.
    pub name: String,
    /// The program's inputs, in parameter order.
    pub inputs: Vec<TensorDesc>,
    /// The program's outputs, in order (row-major).
    pub outputs: Vec<TensorDesc>,
    /// Intermediate buffers.
    pub buffers: Vec<Buffer>,
    /// The launches, in order.
    pub kernels: Vec<KernelLaunch>,
}
