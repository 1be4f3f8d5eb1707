//! C expressions: element addresses of tiles, multi-indices, literals and the scalar functions of
//! the element-wise operators.

use crate::ir::{BinaryOp, BlockOp, UnaryOp, row_major_strides};

use super::super::planner::Tile;

impl Tile {
    /// `to_f32(var[offset])` for a multi-index given as C expressions (broadcast dims of size 1
    /// contribute nothing).
    pub(super) fn load(&self, idx: &[String]) -> String {
        self.as_f32(&format!("{}[{}]", self.var, self.offset_expr(idx)))
    }

    /// The statement storing f32 `value` at a multi-index (converted to the tile's element type).
    pub(super) fn store(&self, idx: &[String], value: &str) -> String {
        format!("{}[{}] = {};", self.var, self.offset_expr(idx), self.f32_to_element(value))
    }

    /// `element`, a C expression of this tile's element type, as an f32.
    pub(super) fn as_f32(&self, element: &str) -> String {
        if self.ctype == "float" { element.to_string() } else { format!("mirage::to_f32({element})") }
    }

    /// The f32 `value` converted to this tile's element type.
    pub(super) fn f32_to_element(&self, value: &str) -> String {
        if self.ctype == "float" { value.to_string() } else { format!("mirage::from_f32<{}>({value})", self.ctype) }
    }

    /// The element offset of a multi-index.
    pub(super) fn offset_expr(&self, idx: &[String]) -> String {
        let terms: Vec<String> = (0..self.shape.len())
            .filter(|&d| self.shape[d] > 1)
            .map(|d| {
                if self.strides[d] == 1 { format!("({})", idx[d]) } else { format!("({})*{}", idx[d], self.strides[d]) }
            })
            .collect();
        if terms.is_empty() { "0".into() } else { terms.join(" + ") }
    }
}

/// C expressions of the multi-index of flat row-major index `e` over `shape`.
pub(super) fn unflatten(e: &str, shape: &[usize]) -> Vec<String> {
    let strides = row_major_strides(shape);
    (0..shape.len())
        .map(|d| {
            if shape[d] == 1 {
                "0".to_string()
            } else if d == 0 {
                format!("({e} / {})", strides[0])
            } else if strides[d] == 1 {
                format!("({e} % {})", shape[d])
            } else {
                format!("(({e} / {}) % {})", strides[d], shape[d])
            }
        })
        .collect()
}

/// A multi-index for a rank-`r` tile whose leading dims are 1.
pub(super) fn two(row: &str, col: &str, r: usize) -> Vec<String> {
    let mut v = vec!["0".to_string(); r];
    v[r - 2] = row.to_string();
    v[r - 1] = col.to_string();
    v
}

/// An f32 literal (NaN and infinities by their bits).
pub(super) fn float_lit(v: f32) -> String {
    if v.is_nan() {
        "__int_as_float(0x7fc00000)".into()
    } else if v.is_infinite() {
        if v > 0.0 { "__int_as_float(0x7f800000)".into() } else { "__int_as_float(0xff800000)".into() }
    } else {
        format!("{v:?}f")
    }
}

/// `op(x)` as a C expression.
pub(super) fn unary_expr(op: &UnaryOp, x: &str) -> String {
    match op {
        UnaryOp::Exp => format!("__expf({x})"),
        UnaryOp::Square => format!("({x})*({x})"),
        UnaryOp::Sqrt => format!("sqrtf({x})"),
        UnaryOp::Silu => format!("mirage::silu({x})"),
        UnaryOp::Gelu => format!("mirage::gelu({x})"),
        UnaryOp::Relu => format!("mirage::relu({x})"),
        UnaryOp::Neg => format!("(-({x}))"),
        UnaryOp::Recip => format!("(1.0f/({x}))"),
        UnaryOp::Tanh => format!("tanhf({x})"),
        UnaryOp::Sigmoid => format!("(1.0f/(1.0f+__expf(-({x}))))"),
        UnaryOp::GeluTanh => format!("mirage::gelu_tanh({x})"),
        UnaryOp::Clamp { lo, hi } => format!("mirage::clampf({x}, {}, {})", float_lit(lo.0), float_lit(hi.0)),
        UnaryOp::MulScalar { c } => format!("({}*({x}))", float_lit(c.0)),
        UnaryOp::AddScalar { c } => format!("(({x})+{})", float_lit(c.0)),
    }
}

/// `a op b` as a C expression.
pub(super) fn binary_expr(op: BinaryOp, a: &str, b: &str) -> String {
    match op {
        BinaryOp::Add => format!("({a} + {b})"),
        BinaryOp::Sub => format!("({a} - {b})"),
        BinaryOp::Mul => format!("({a} * {b})"),
        BinaryOp::Div => format!("({a} / {b})"),
        BinaryOp::Pow => format!("powf({a}, {b})"),
    }
}

/// The operator name of unary function `op` (for comments).
pub(super) fn unary_name(op: &UnaryOp) -> String {
    BlockOp::Unary { op: *op }.name()
}
