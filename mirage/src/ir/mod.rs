//! The µGraph IR (DESIGN §4): element types and shapes, the kernel graph, block graphs, their
//! shape rules, versioned JSON and canonical hashes.
//!
//! Every builder returns `Result`; a broken rule is an [`IrError`] naming the operator, the
//! shapes and the rule, never a panic.

mod block;
mod error;
mod hash;
mod json;
mod kernel;
mod ops;
mod types;

pub use block::{input_tile_shape, normalize_map, output_shape, AccKind, BlockGraph, BlockNode, BlockOp, GridMap, Phase, TileDesc};
pub use error::IrError;
pub use hash::CanonicalHash;
pub use json::{FORMAT, VERSION};
pub use kernel::{infer_kernel_op, KernelGraph, KernelNode, KernelOp};
pub use ops::{broadcast_shape, concat_shape, matmul_shape, reduce_shape, BinaryOp, UnaryOp};
pub use types::{check_shape, check_strides, num_elements, row_major_strides, storage_len, DType, Scalar, TensorDesc, TensorRef, MAX_ELEMENTS, MAX_RANK};
