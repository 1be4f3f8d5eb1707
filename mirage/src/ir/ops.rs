//! The shape rules of the operators shared by both IR levels, as IR errors naming the
//! operator. The operators themselves ([`UnaryOp`], [`BinaryOp`]) and the rules are
//! `mirage-core`'s.

pub use mirage_core::ops::{BinaryDsl, BinaryOp, BinarySpec, Domain, Dsl, Law, Params, UnaryOp, UnarySpec};

use super::IrError;
use super::types::fmt_shape;
use mirage_core::shape;

/// `[..., m, k] x [..., k, n] -> [..., m, n]`: same rank (at least 2), equal batch dims.
/// With `allow_batch == false` (in block graphs) every batch dim must be 1.
pub fn matmul_shape(a: &[usize], b: &[usize], allow_batch: bool) -> Result<Vec<usize>, IrError> {
    let shapes = || format!("{} x {}", fmt_shape(a), fmt_shape(b));
    let out = shape::matmul_shape(a, b).map_err(|e| IrError::rule("matmul", shapes(), e.to_string()))?;
    if !allow_batch && a[..a.len() - 2].iter().any(|&d| d != 1) {
        return Err(IrError::rule("matmul", shapes(), "a tile matmul has no batch dims: leading dims must be 1"));
    }
    Ok(out)
}

/// Size-1 broadcasting of equal-rank shapes: each dim equal or one side 1.
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>, IrError> {
    shape::broadcast_shape(a, b)
        .map_err(|e| IrError::rule(op, format!("{} and {}", fmt_shape(a), fmt_shape(b)), e.to_string()))
}

/// Checks `dim < rank`.
pub fn check_dim(op: &str, shape: &[usize], dim: usize) -> Result<(), IrError> {
    shape::check_dim(shape, dim).map_err(|e| IrError::rule(op, fmt_shape(shape), e.to_string()))
}

/// Reduction of `dim` to `width` (1 for a full reduction) with strided grouping.
pub fn reduce_shape(op: &str, shape: &[usize], dim: usize, width: usize) -> Result<Vec<usize>, IrError> {
    shape::reduce_shape(shape, dim, width).map_err(|e| IrError::rule(op, fmt_shape(shape), e.to_string()))
}

/// `concat(a, b, dim)`: equal rank, equal sizes except along `dim`.
pub fn concat_shape(a: &[usize], b: &[usize], dim: usize) -> Result<Vec<usize>, IrError> {
    shape::concat_shape(a, b, dim)
        .map_err(|e| IrError::rule("concat", format!("{} and {}", fmt_shape(a), fmt_shape(b)), e.to_string()))
}

/// The weight of an RMS norm of `x`: `x`'s rank, leading dims 1 and `x`'s last dim.
pub fn check_rms_norm_weight(op: &str, x: &[usize], weight: &[usize]) -> Result<(), IrError> {
    shape::check_rms_norm_weight(x, weight)
        .map_err(|e| IrError::rule(op, format!("x {} weight {}", fmt_shape(x), fmt_shape(weight)), e.to_string()))
}
