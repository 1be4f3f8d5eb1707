//! The µGraph IR (DESIGN §4): element types and shapes, the kernel graph, block graphs, their
//! shape rules, versioned JSON and canonical hashes. Element types, tensor descriptions, the
//! shape rules and the operator table are `mirage-core`'s, re-exported here.
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

pub use block::{
    AccKind, BlockGraph, BlockNode, BlockOp, GridMap, Phase, TileDesc, input_tile_shape, normalize_map, output_shape,
};
pub use error::IrError;
pub use hash::CanonicalHash;
pub use json::{FORMAT, VERSION};
pub use kernel::{KernelGraph, KernelNode, KernelOp, infer_kernel_op};
pub use ops::{
    BinaryDsl, BinaryOp, BinarySpec, Domain, Dsl, Law, Params, UnaryOp, UnarySpec, broadcast_shape, concat_shape,
    matmul_shape, reduce_shape,
};
pub use types::{
    DType, MAX_ELEMENTS, MAX_RANK, Scalar, TensorDesc, TensorRef, check_shape, check_strides, num_elements,
    row_major_strides, storage_len,
};
