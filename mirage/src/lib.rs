//! mirage: a Rust-native tensor superoptimizer.
//!
//! A function marked [`mugraph`] is a fused GPU operator written as ordinary tensor code. At
//! build time (`mirage::build::compile(["src/kernels.rs"])` in the package's build.rs, with this
//! crate's feature `build`) it is lowered to a kernel graph, superoptimized into a µGraph proven
//! equivalent to it, turned into CUDA and compiled with nvcc; at run time the attribute's
//! expansion launches the cubin through the runtime.
//!
//! Without features this crate is what a user's program needs at run time: the `#[mugraph]`
//! attribute ([`mugraph`]) and the runtime (`mirage-runtime`, re-exported here: [`Gpu`],
//! [`DeviceTensor`], [`Program`], ...). [`prelude`] holds the names a kernels file and its callers
//! use.
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
//!
//! With feature `build` it is the compiler, one module per stage, in pipeline order:
//!
//! | stage | modules |
//! |---|---|
//! | frontend | [`lower`]: `#[mugraph]` source → kernel graph |
//! | IR | [`ir`]: kernel and block graphs; [`eval`]: their one evaluator; [`reference`](mod@reference): its f32 instance, the ground truth; [`import`]: Mirage's µGraph JSON |
//! | search | [`search`]: enumeration and the structural pruner; [`absexpr`]: the z3 subexpression oracle; [`fingerprint`]: verification; [`cost`]: the cost model; [`tune`]: measured selection |
//! | codegen | [`codegen`]: µGraph → CUDA and a launch plan |
//! | nvcc | [`nvcc`]: CUDA → cubin |
//! | build | [`build`]: the build-script API |
//! | cache | [`cache`]: the committed search cache `.mirage/` |
//! | megakernel | [`mpk`]: decode steps as tile tasks of one resident kernel |
//! | tools | [`dot`]: pictures; [`triton`]: a second backend |
//!
//! The design behind them is in the repository's `docs/ARCHITECTURE.md`.
#![cfg_attr(
    feature = "build",
    doc = r#"
A program through the stages by hand, on the CPU: `relu(x @ w)` built as a kernel graph, run by
the reference interpreter, costed, and turned into CUDA.

```
use mirage::codegen::{KernelOptions, generate};
use mirage::cost::{Arch, estimate};
use mirage::ir::{DType, KernelGraph, UnaryOp};
use mirage::reference::{HostTensor, run};

let mut g = KernelGraph::new();
let x = g.input(&[16, 64], DType::F32)?;
let w = g.input(&[64, 32], DType::F32)?;
let y = g.matmul(x, w)?;
let y = g.unary(UnaryOp::Relu, y)?;
g.output(y, None)?;

// The meaning of the graph: with x all ones and w's first column -1, the others 0.5, every row
// of x @ w is [-64, 32, 32, ...], and relu clears the first element.
let x = HostTensor::new(vec![16, 64], vec![1.0; 16 * 64])?;
let w: Vec<f32> = (0..64 * 32).map(|i| if i % 32 == 0 { -1.0 } else { 0.5 }).collect();
let out = run(&g, &[x, HostTensor::new(vec![64, 32], w)?])?;
assert_eq!((out[0].data[0], out[0].data[1], out[0].data[32]), (0.0, 32.0, 0.0));

// What the search ranks candidates by, and what the build compiles with nvcc.
let cost = estimate(&g, &Arch::sm90())?;
assert!(cost.feasible() && cost.total_us > 0.0);
let generated = generate(&g, "linear_relu", &KernelOptions::default())?;
assert!(generated.source.contains("__global__"));
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]

pub use mirage_macros::mugraph;
pub use mirage_runtime::*;

/// The names a `#[mugraph]` kernels file and its callers use.
pub mod prelude {
    pub use crate::mugraph;
    pub use mirage_runtime::half::{bf16, f16};
    pub use mirage_runtime::{
        AnyTensor, DeviceTensor, Gpu, Program, RuntimeError, Stream, TensorArg, TensorView, TensorViewMut, Workspace,
    };
}

// The compiler, in pipeline order.

// Frontend: `#[mugraph]` functions lowered to kernel graphs.
#[cfg(feature = "build")]
pub mod lower;

// The µGraph IR: kernel graphs, block graphs, shape rules, JSON, canonical hashes.
#[cfg(feature = "build")]
pub mod ir;
// The one evaluator of the IR, generic over a value domain.
#[cfg(feature = "build")]
pub mod eval;

// Runtime-sized dimensions: dimension variables, their ranges and the padded-tile geometry.
#[cfg(feature = "build")]
pub mod dims;
// The CPU reference interpreter: the evaluator over `f32`.
#[cfg(feature = "build")]
pub mod reference;
// Import of the original Mirage's µGraph JSON.
#[cfg(feature = "build")]
pub mod import;

// The superoptimizer: enumeration, the structural pruner, selection.
#[cfg(feature = "build")]
pub mod search;
// Abstract expressions and the z3 subexpression oracle.
#[cfg(feature = "build")]
pub mod absexpr;
// Verification by finite-field fingerprints.
#[cfg(feature = "build")]
pub mod fingerprint;
// The analytic cost model.
#[cfg(feature = "build")]
pub mod cost;
// Measured selection: timing the top candidates on a GPU, offline tuning bundles.
#[cfg(feature = "build")]
pub mod tune;

// CUDA code generation and launch plans.
#[cfg(feature = "build")]
pub mod codegen;
// The nvcc driver: CUDA source to cubin.
#[cfg(feature = "build")]
pub mod nvcc;
// The build-script API: `mirage::build::compile`.
#[cfg(feature = "build")]
pub mod build;
// The persistent search cache `.mirage/`.
#[cfg(feature = "build")]
pub mod cache;
// The persistent megakernel: step graphs of µGraph tiles, run by one resident kernel.
#[cfg(feature = "build")]
pub mod mpk;

#[cfg(feature = "build")]
pub mod model;

// Tools.

// Pictures of µGraphs (Graphviz DOT and SVG).
#[cfg(feature = "build")]
pub mod dot;
// The Triton backend.
#[cfg(feature = "build")]
pub mod triton;
// Test data and test tools (benchmark programs, golden cases, coverage programs, the GPU
// comparison, random inputs): for mirage's own tests, examples and benchmarks, not a user API.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
