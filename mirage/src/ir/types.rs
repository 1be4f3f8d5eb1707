//! Element types, shapes, strides and tensor references shared by both levels of the IR.
//!
//! Element types, tensor descriptions, constants and the shape rules are `mirage-core`'s (the
//! macro and the runtime use the same ones); this module adds the IR's error for a broken shape
//! rule and [`TensorRef`].

use serde::{Deserialize, Serialize};
use std::fmt;

pub use mirage_core::shape::{MAX_ELEMENTS, MAX_RANK, fmt_shape, num_elements, row_major_strides, storage_len};
pub use mirage_core::{DType, Scalar, TensorDesc};

use super::IrError;

/// Checks rank 1..=4, non-zero extents and at most [`MAX_ELEMENTS`] elements.
pub fn check_shape(op: &str, shape: &[usize]) -> Result<(), IrError> {
    mirage_core::shape::check_shape(shape).map_err(|e| IrError::rule(op, fmt_shape(shape), e.to_string()))
}

/// Checks that strides have the shape's rank and address distinct elements (no two index
/// tuples alias): sorted by stride, each stride must be at least the span of the smaller ones.
pub fn check_strides(op: &str, shape: &[usize], strides: &[usize]) -> Result<(), IrError> {
    mirage_core::shape::check_strides(shape, strides)
        .map_err(|e| IrError::rule(op, format!("shape {} strides {:?}", fmt_shape(shape), strides), e.to_string()))
}

/// A reference to an output of a node: `node` is the node's index in its graph, `port` which of
/// its outputs (most operators have exactly one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TensorRef {
    /// Index of the producing node.
    pub node: usize,
    /// Which output of that node.
    pub port: usize,
}

impl TensorRef {
    /// The first (usually only) output of `node`.
    pub fn new(node: usize) -> Self {
        TensorRef { node, port: 0 }
    }
}

impl fmt::Display for TensorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port == 0 { write!(f, "%{}", self.node) } else { write!(f, "%{}.{}", self.node, self.port) }
    }
}
