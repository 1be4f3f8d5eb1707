//! The run-time half of mirage: a CUDA device handle, typed device tensors, cubin loading and
//! kernel launches, and CUDA-event timing, on top of cudarc's driver API.
//!
//! - [`Gpu`] opens a device (an `Err`, never a panic, when there is no driver or no device) and
//!   holds its context and default [`Stream`].
//! - [`DeviceTensor<T>`] is a device allocation of `half::f16`, `half::bf16` or `f32` with a
//!   [`Layout`] (shape of rank 1 to 4 and strides); shapes and lengths are checked before any
//!   CUDA call.
//! - [`Module`] and [`Kernel`] load a cubin once per process (they live in `static`s) and
//!   [`KernelArgs`] launches a kernel with a [`LaunchConfig`], raising the dynamic shared memory
//!   limit when a kernel needs more than 48 KiB.
//! - [`Program`] runs a built `#[mugraph]` program: its cubin and [`plan::LaunchPlan`] (read
//!   from JSON without the compiler), checking every input against the plan, with
//!   [`TensorArg`] and [`AnyTensor`] for tensors of any element type.
//! - [`time_median`] times GPU work with CUDA events, flushing the L2 cache ([`L2Flush`])
//!   between calls.
//!
//! ```
//! use mirage_runtime::{Gpu, RuntimeError};
//!
//! fn main() -> Result<(), RuntimeError> {
//!     let gpu = match Gpu::new(0) {
//!         Ok(gpu) => gpu,
//!         // No driver or no suitable device here: nothing to run on.
//!         Err(e) => {
//!             eprintln!("no usable GPU: {e}");
//!             return Ok(());
//!         }
//!     };
//!     println!("{}", gpu.info());
//!     let host: Vec<f32> = (0..8 * 16).map(|i| i as f32).collect();
//!     let x = gpu.upload(&host, &[8, 16])?;
//!     assert_eq!(x.shape(), &[8, 16]);
//!     assert_eq!(gpu.download(&x)?, host);
//!
//!     // A length that does not match the shape is an error, found before any CUDA call.
//!     assert!(gpu.upload(&host, &[8, 15]).is_err());
//!     Ok(())
//! }
//! ```

// Layers, bottom up: a module uses only the modules listed before it.
// Plain descriptions (compute capability, launch configuration); no crate imports.
mod desc;
// Which code of a module image a device runs.
mod arch;
// The crate's one error type.
mod error;
// The driver layer: the only module that calls cudarc's `sys` API or catches its panics.
mod driver;
// Element types, layouts and device tensors.
mod tensor;
// Borrowed device buffers (views) a launch reads and writes.
mod view;
// Streams and timing events: uploads, downloads, copies.
mod stream;
// The device handle.
mod device;
// Modules, kernels and launches.
mod kernel;
// CUDA-event timing and the L2 flush.
mod timing;
// Launch plans (read from JSON without the compiler).
pub mod plan;
// The pointer alignment a plan's kernels need, checked before a launch.
mod align;
// Scratch memory for a program's intermediate buffers.
mod workspace;
// The executor of built programs.
mod program;
// Megakernels: loading, cooperative launch, counters, error codes, timelines.
pub mod mpk;

pub use align::check_pointers;
pub use arch::{ImageArch, image_archs, select_arch};
pub use desc::{ComputeCapability, LaunchConfig};
pub use device::{DeviceInfo, Gpu, check_compute_capability, check_ordinal};
pub use driver::{device_count, driver_available};
pub use error::RuntimeError;
pub use kernel::{
    DEFAULT_DYNAMIC_SMEM_LIMIT, Kernel, KernelArgs, KernelInfo, MAX_THREADS_PER_BLOCK, Module, ModuleImage,
    check_image, check_shared_memory,
};
pub use mirage_core::{DType, TensorDesc};
pub use plan::LaunchPlan;
pub use program::{
    AnyTensor, Bucket, DEPENDENT_LAUNCH_ENV, Program, ProgramArtifacts, TensorArg, check_tensor, check_tensors,
    check_tensors_sized, dependent_launch_enabled,
};
pub use stream::{CapturedGraph, Stream, TimingEvent};
pub use tensor::{DeviceTensor, Element, Layout};
pub use timing::{L2Flush, MIN_L2_FLUSH_BYTES, TimingStats, l2_flush_bytes, time_median, time_median_with};
pub use view::{AnyView, AnyViewMut, TensorView, TensorViewMut, check_raw_pointer};
pub use workspace::{WORKSPACE_ALIGN, Workspace, WorkspaceLayout};

/// The cudarc crate this runtime is built on, for what it does not wrap.
pub use cudarc;
/// The `half` crate, for `f16` and `bf16`.
pub use half;
