//! mirage: a Rust-native tensor superoptimizer.
//!
//! With feature `build` this crate holds the compiler: the µGraph IR ([`ir`]), the one evaluator
//! of its semantics ([`eval`]), the CPU reference interpreter ([`reference`]), the importer of
//! Mirage's µGraph JSON ([`import`]) and the nvcc driver ([`nvcc`]), and the build-script API
//! ([`build`]: `mirage::build::compile(["src/kernels.rs"])` in a user's build.rs).
//!
//! Without it, it is what a user's program needs at run time: the `#[mugraph]` attribute
//! ([`mugraph`]) and the runtime (`mirage-runtime`, re-exported here: [`Gpu`], [`DeviceTensor`],
//! [`Program`], ...). [`prelude`] holds the names a kernels file and its callers use.
//!
//! ```
//! use mirage::prelude::*;
//!
//! fn main() {
//!     // Without a GPU (or driver) this is an error, never a panic.
//!     match Gpu::new(0) {
//!         Ok(gpu) => println!("{}", gpu.info()),
//!         Err(e) => println!("no GPU: {e}"),
//!     }
//! }
//! ```

pub use mirage_macros::mugraph;
pub use mirage_runtime::*;

/// The names a `#[mugraph]` kernels file and its callers use.
pub mod prelude {
    pub use crate::mugraph;
    pub use mirage_runtime::half::{bf16, f16};
    pub use mirage_runtime::{AnyTensor, DeviceTensor, Gpu, Program, RuntimeError, Stream, TensorArg};
}

#[cfg(feature = "build")]
pub mod absexpr;
#[cfg(feature = "build")]
pub mod build;
#[cfg(feature = "build")]
pub mod cache;
#[cfg(feature = "build")]
pub mod codegen;
#[cfg(feature = "build")]
pub mod cost;
#[cfg(feature = "build")]
pub mod dot;
#[cfg(feature = "build")]
pub mod eval;
#[cfg(feature = "build")]
pub mod fingerprint;
#[cfg(feature = "build")]
pub mod import;
#[cfg(feature = "build")]
pub mod ir;
#[cfg(feature = "build")]
pub mod lower;
#[cfg(feature = "build")]
pub mod mpk;
#[cfg(feature = "build")]
pub mod nvcc;
#[cfg(feature = "build")]
pub mod reference;
#[cfg(feature = "build")]
pub mod search;
#[cfg(feature = "build")]
pub mod triton;
// Test data and test tools (benchmark programs, golden cases, coverage programs, the GPU
// comparison, random inputs): for mirage's own tests, examples and benchmarks, not a user API.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
