//! Operators shared by both IR levels and their shape rules (pure functions on shapes).

use serde::{Deserialize, Serialize};
use std::fmt;

use super::IrError;
use super::types::{Scalar, fmt_shape};

/// Element-wise unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `e^x`.
    Exp,
    /// `x²`.
    Square,
    /// `√x`.
    Sqrt,
    /// `x / (1 + e^-x)`.
    Silu,
    /// `x/2 · (1 + erf(x/√2))` (the exact form).
    Gelu,
    /// `max(x, 0)`.
    Relu,
    /// `-x`.
    Neg,
    /// `1 / x`.
    Recip,
    /// `min(max(x, lo), hi)`.
    Clamp {
        /// Lower bound.
        lo: Scalar,
        /// Upper bound.
        hi: Scalar,
    },
    /// `c · x`.
    MulScalar {
        /// The constant factor.
        c: Scalar,
    },
}

impl UnaryOp {
    /// The operator's name in error messages and generated code.
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Exp => "exp",
            UnaryOp::Square => "square",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Silu => "silu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Relu => "relu",
            UnaryOp::Neg => "neg",
            UnaryOp::Recip => "recip",
            UnaryOp::Clamp { .. } => "clamp",
            UnaryOp::MulScalar { .. } => "mul_scalar",
        }
    }
}

impl fmt::Display for UnaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnaryOp::Clamp { lo, hi } => write!(f, "clamp({lo}, {hi})"),
            UnaryOp::MulScalar { c } => write!(f, "mul_scalar({c})"),
            other => f.write_str(other.name()),
        }
    }
}

/// Element-wise binary operators with size-1 broadcasting between operands of equal rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a ^ b`.
    Pow,
}

impl BinaryOp {
    /// The operator's name in error messages and generated code.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
        }
    }

    /// Whether `a op b == b op a`.
    pub fn is_commutative(self) -> bool {
        matches!(self, BinaryOp::Add | BinaryOp::Mul)
    }
}

impl fmt::Display for BinaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `[..., m, k] x [..., k, n] -> [..., m, n]`: same rank (at least 2), equal batch dims.
/// With `allow_batch == false` (in block graphs) every batch dim must be 1.
pub fn matmul_shape(a: &[usize], b: &[usize], allow_batch: bool) -> Result<Vec<usize>, IrError> {
    let shapes = || format!("{} x {}", fmt_shape(a), fmt_shape(b));
    if a.len() != b.len() {
        return Err(IrError::rule("matmul", shapes(), "operands must have the same rank"));
    }
    let r = a.len();
    if r < 2 {
        return Err(IrError::rule("matmul", shapes(), "operands must have rank at least 2"));
    }
    if a[..r - 2] != b[..r - 2] {
        return Err(IrError::rule("matmul", shapes(), "batch dims must be equal"));
    }
    if !allow_batch && a[..r - 2].iter().any(|&d| d != 1) {
        return Err(IrError::rule("matmul", shapes(), "a tile matmul has no batch dims: leading dims must be 1"));
    }
    if a[r - 1] != b[r - 2] {
        return Err(IrError::rule(
            "matmul",
            shapes(),
            format!("inner dims must agree: a has k = {}, b has k = {}", a[r - 1], b[r - 2]),
        ));
    }
    let mut out = a.to_vec();
    out[r - 1] = b[r - 1];
    Ok(out)
}

/// Size-1 broadcasting of equal-rank shapes: each dim equal or one side 1.
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>, IrError> {
    let shapes = || format!("{} and {}", fmt_shape(a), fmt_shape(b));
    if a.len() != b.len() {
        return Err(IrError::rule(op, shapes(), "operands must have the same rank (no rank promotion)"));
    }
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(d, (&x, &y))| {
            if x == y || y == 1 {
                Ok(x)
            } else if x == 1 {
                Ok(y)
            } else {
                Err(IrError::rule(op, shapes(), format!("dim {d}: sizes {x} and {y} are neither equal nor 1")))
            }
        })
        .collect()
}

/// Checks `dim < rank`.
pub fn check_dim(op: &str, shape: &[usize], dim: usize) -> Result<(), IrError> {
    if dim >= shape.len() {
        return Err(IrError::rule(op, fmt_shape(shape), format!("dim {dim} is out of range for rank {}", shape.len())));
    }
    Ok(())
}

/// Reduction of `dim` to `width` (1 for a full reduction) with strided grouping.
pub fn reduce_shape(op: &str, shape: &[usize], dim: usize, width: usize) -> Result<Vec<usize>, IrError> {
    check_dim(op, shape, dim)?;
    if width == 0 || shape[dim] % width != 0 {
        return Err(IrError::rule(
            op,
            fmt_shape(shape),
            format!("reduction width {width} must divide dim {dim} (size {})", shape[dim]),
        ));
    }
    let mut out = shape.to_vec();
    out[dim] = width;
    Ok(out)
}

/// `concat(a, b, dim)`: equal rank, equal sizes except along `dim`.
pub fn concat_shape(a: &[usize], b: &[usize], dim: usize) -> Result<Vec<usize>, IrError> {
    let shapes = || format!("{} and {}", fmt_shape(a), fmt_shape(b));
    if a.len() != b.len() {
        return Err(IrError::rule("concat", shapes(), "operands must have the same rank"));
    }
    check_dim("concat", a, dim)?;
    for d in 0..a.len() {
        if d != dim && a[d] != b[d] {
            return Err(IrError::rule(
                "concat",
                shapes(),
                format!("dim {d} differs ({} vs {}) and is not the concat dim {dim}", a[d], b[d]),
            ));
        }
    }
    let mut out = a.to_vec();
    out[dim] += b[dim];
    Ok(out)
}
