//! The vocabulary shared by mirage's three crates: the `#[mugraph]` macro, the compiler
//! (`mirage` with feature `build`) and the runtime. It depends on serde only (no syn, no cudarc,
//! no z3), so each of them can use it.
//!
//! - [`DType`]: element types;
//! - [`TensorDesc`]: a device tensor's shape, strides and element type;
//! - [`shape`]: strides, shape checks and the shape rules of the operators (broadcast, matmul,
//!   concat, reductions, the RMS-norm weight);
//! - [`ops`]: the operator table ([`UnaryOp`], [`BinaryOp`] and their rows) from which the DSL's
//!   functions, the importer's names, the verifier's and pruners' treatment and the tests'
//!   operator lists are derived;
//! - [`Scalar`]: float constants of operators, compared by bits;
//! - [`artifact_stem`]: the names of a function's build artifacts.
//!
//! ```
//! use mirage_core::{DType, TensorDesc, UnaryOp};
//!
//! let x = TensorDesc::new(&[8, 4096], DType::F16);
//! assert_eq!(x.strides, vec![4096, 1]);
//! assert_eq!(UnaryOp::ALL.iter().filter(|op| op.spec().dsl == mirage_core::ops::Dsl::Function).count(), 10);
//! ```

pub mod artifact;
pub mod dtype;
pub mod ops;
pub mod scalar;
pub mod shape;
pub mod tensor;

pub use artifact::{ARTIFACT_DIR, artifact_stem};
pub use dtype::DType;
pub use ops::{BinaryOp, UnaryOp};
pub use scalar::Scalar;
pub use shape::{MAX_ELEMENTS, MAX_RANK, ShapeError, row_major_strides};
pub use tensor::TensorDesc;
