//! The checked DSL program: parameters, a DAG of typed values, outputs, and its fingerprint.

use std::fmt::{self, Write as _};

use mirage_core::shape::fmt_shape;
use mirage_core::{BinaryOp, RopeLayout, UnaryOp};
use proc_macro2::{Ident, Span};

use super::ty::{DimDecl, TensorType};

/// Index of a [`Value`] in [`Program::values`].
pub type ValueId = usize;

/// A parameter of the `#[mugraph]` function: one program input, in signature order.
#[derive(Clone, Debug)]
pub struct Param {
    /// The parameter's name.
    pub name: Ident,
    /// Its element type and shape.
    pub ty: TensorType,
    /// Its element strides: from `#[strides(...)]`, or row-major.
    pub strides: Vec<usize>,
    /// Whether the strides were given with `#[strides(...)]`.
    pub explicit_strides: bool,
}

/// What a value computes; its operands are [`Value::args`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// The parameter with this index (no operands).
    Param(usize),
    /// `a @ b` (operands `a, b`).
    Matmul,
    /// An element-wise unary operator (operand `x`).
    Unary(UnaryOp),
    /// An element-wise binary operator with size-1 broadcasting (operands `a, b`).
    Binary(BinaryOp),
    /// Sum over `dim`, kept with size 1 (operand `x`).
    ReduceSum {
        /// The reduced dim.
        dim: usize,
    },
    /// Maximum over `dim`, kept with size 1 (operand `x`).
    ReduceMax {
        /// The reduced dim.
        dim: usize,
    },
    /// `x / sqrt(mean(x², last dim) + eps)`, times the weight when there is a second operand.
    RmsNorm {
        /// Added to the mean square.
        eps: f32,
    },
    /// Concatenation along `dim` (operands `a, b`).
    Concat {
        /// The concatenation dim.
        dim: usize,
    },
    /// Rotary position embedding (operands `x, cos, sin`).
    Rope {
        /// Which elements of a head form a pair.
        layout: RopeLayout,
    },
    /// Rows of a table at `i32` ids (operands `table, ids`).
    Gather,
    /// The `i32` position of the maximum along `dim`, kept with size 1 (operand `x`).
    Argmax {
        /// The searched dim.
        dim: usize,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Param(i) => write!(f, "param({i})"),
            Op::Matmul => f.write_str("matmul"),
            Op::Unary(u) => write!(f, "{u}"),
            Op::Binary(b) => write!(f, "{b}"),
            Op::ReduceSum { dim } => write!(f, "reduce_sum({dim})"),
            Op::ReduceMax { dim } => write!(f, "reduce_max({dim})"),
            Op::RmsNorm { eps } => write!(f, "rms_norm({eps:?})"),
            Op::Concat { dim } => write!(f, "concat({dim})"),
            Op::Rope { layout } => f.write_str(layout.name()),
            Op::Gather => f.write_str("gather"),
            Op::Argmax { dim } => write!(f, "argmax({dim})"),
        }
    }
}

/// One tensor of the program: an operator applied to earlier values, with its computed type.
#[derive(Clone, Debug)]
pub struct Value {
    /// The operator.
    pub op: Op,
    /// Operands: indices of earlier values.
    pub args: Vec<ValueId>,
    /// The computed element type and shape.
    pub ty: TensorType,
    /// The source tokens it was written as (for errors found later, e.g. by the IR's rules).
    pub span: Span,
}

/// A checked `#[mugraph]` function.
#[derive(Clone, Debug)]
pub struct Program {
    /// The function's name.
    pub name: Ident,
    /// The function's visibility, as written.
    pub vis: syn::Visibility,
    /// The parameters, in signature order (the program's inputs).
    pub params: Vec<Param>,
    /// Every tensor in evaluation order: first one `Op::Param` per parameter, then the body's
    /// operators. Only values that reach an output are kept.
    pub values: Vec<Value>,
    /// The results, in order (several when the function returns a tuple).
    pub outputs: Vec<ValueId>,
    /// Whether the return type is a tuple (even of one tensor).
    pub tuple_result: bool,
    /// The runtime-sized dims of `#[mugraph(dims(...))]`, in declaration order (the types'
    /// [`super::DimRef`]s index them); empty for a program of fixed shapes.
    pub dims: Vec<DimDecl>,
}

/// The version of the fingerprint's text format; bumped when the rendering changes.
pub const FINGERPRINT_VERSION: u32 = 1;

impl Program {
    /// The types of the results, in order.
    pub fn output_types(&self) -> Vec<&TensorType> {
        self.outputs.iter().filter_map(|&v| self.values.get(v).map(|v| &v.ty)).collect()
    }

    /// A canonical text rendering of the checked program: the function's name, the declared
    /// runtime-sized dims with their ranges and size buckets, the parameters (names, types, strides) and every value in evaluation order with its operands and type.
    /// It does not depend on spans, formatting, comments or the names of `let` bindings, so the
    /// macro and the build script agree on "this exact program".
    pub fn fingerprint(&self) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(s, "mugraph-dsl v{FINGERPRINT_VERSION}");
        let _ = writeln!(s, "fn {}", self.name);
        // A program of fixed shapes renders as before runtime-sized dims existed (its artifacts
        // keep their names); one with them names the dims and their ranges.
        for d in &self.dims {
            let _ = writeln!(s, "dim {} = {}..={}", d.name, d.lo, d.hi);
            // One bucket (one build for the range) renders as before buckets existed.
            if d.buckets.len() > 1 {
                let _ = writeln!(s, "buckets {} = {:?}", d.name, d.buckets);
            }
        }
        let shape = |t: &TensorType| if t.is_sized() { t.fmt_dims() } else { fmt_shape(&t.shape) };
        for p in &self.params {
            let _ = writeln!(s, "param {}: {} {} strides {:?}", p.name, p.ty.dtype, shape(&p.ty), p.strides);
        }
        for (i, v) in self.values.iter().enumerate() {
            let args = v.args.iter().map(|a| format!("%{a}")).collect::<Vec<_>>().join(", ");
            let _ = writeln!(s, "%{i} = {}({args}): {} {}", v.op, v.ty.dtype, shape(&v.ty));
        }
        let outs = self.outputs.iter().map(|o| format!("%{o}")).collect::<Vec<_>>().join(", ");
        if self.tuple_result {
            let _ = writeln!(s, "return ({outs})");
        } else {
            let _ = writeln!(s, "return {outs}");
        }
        s
    }

    /// A short stable hash of [`Program::fingerprint`]: 16 lower-case hex digits (FNV-1a, 64
    /// bits), the same on every platform and compiler version.
    pub fn fingerprint_hash(&self) -> String {
        format!("{:016x}", fnv1a64(self.fingerprint().as_bytes()))
    }
}

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
