//! The launch plan: which kernels run in which order on which buffers.
//!
//! The plan types live in `mirage-runtime` ([`mirage_runtime::plan`]) so that a program's plan
//! is read at run time without the compiler; its tensors are the IR's [`crate::ir::TensorDesc`]
//! (both come from `mirage-core`). This module re-exports them.

pub use mirage_runtime::plan::{ArgRef, Buffer, GridDim, KernelLaunch, LaunchPlan, PLAN_VERSION, PlanDim};
