//! Element types, shapes, strides and tensor references shared by both levels of the IR.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::IrError;

/// The largest tensor rank the IR accepts (DESIGN §4).
pub const MAX_RANK: usize = 4;

/// Element type of a device tensor. Arithmetic always accumulates in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE 754 half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE 754 single precision.
    F32,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 => 4,
        }
    }

    /// The name used in Rust signatures and error messages (`f16`, `bf16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A float constant stored in the IR (scalars, clamp bounds, epsilons).
///
/// Compared and hashed by bit pattern so that graphs holding constants can be `Eq` and hashed.
/// Serialized as a JSON number when finite; JSON has no infinities or NaNs, so those are the
/// strings `"inf"`, `"-inf"`, `"nan"` (the canonical NaN) or `"nan:0x7fc00001"` (its bits).
#[derive(Clone, Copy, Debug)]
pub struct Scalar(pub f32);

impl Serialize for Scalar {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() {
            s.serialize_f32(v)
        } else if v == f32::INFINITY {
            s.serialize_str("inf")
        } else if v == f32::NEG_INFINITY {
            s.serialize_str("-inf")
        } else if v.to_bits() == f32::NAN.to_bits() {
            s.serialize_str("nan")
        } else {
            s.serialize_str(&format!("nan:{:#010x}", v.to_bits()))
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Number(f32),
            Text(String),
        }
        match Repr::deserialize(d)? {
            Repr::Number(v) => Ok(Scalar(v)),
            Repr::Text(t) => match t.as_str() {
                "inf" => Ok(Scalar(f32::INFINITY)),
                "-inf" => Ok(Scalar(f32::NEG_INFINITY)),
                "nan" => Ok(Scalar(f32::NAN)),
                other => other
                    .strip_prefix("nan:0x")
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .map(f32::from_bits)
                    .filter(|v| v.is_nan())
                    .map(Scalar)
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "expected a number, \"inf\", \"-inf\", \"nan\" or \"nan:0x<bits>\", found \"{other}\""
                        ))
                    }),
            },
        }
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for Scalar {}
impl std::hash::Hash for Scalar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state)
    }
}
impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Row-major strides (in elements) of a shape.
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Number of elements of a shape.
pub fn num_elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Formats a shape as `[2, 4096]` for error messages.
pub fn fmt_shape(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// The most elements a tensor or tile may have (2^48): far beyond any device, and small enough
/// that no shape rule, stride or offset computation can overflow.
pub const MAX_ELEMENTS: usize = 1 << 48;

/// Checks rank 1..=4, non-zero extents and at most [`MAX_ELEMENTS`] elements.
pub fn check_shape(op: &str, shape: &[usize]) -> Result<(), IrError> {
    if shape.is_empty() || shape.len() > MAX_RANK {
        return Err(IrError::rule(op, fmt_shape(shape), format!("rank must be 1..={MAX_RANK}, found {}", shape.len())));
    }
    if shape.contains(&0) {
        return Err(IrError::rule(op, fmt_shape(shape), "every dimension must be at least 1"));
    }
    if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none_or(|n| n > MAX_ELEMENTS) {
        return Err(IrError::rule(op, fmt_shape(shape), "a tensor may have at most 2^48 elements"));
    }
    Ok(())
}

/// Checks that strides have the shape's rank and address distinct elements (no two index
/// tuples alias): sorted by stride, each stride must be at least the span of the smaller ones.
pub fn check_strides(op: &str, shape: &[usize], strides: &[usize]) -> Result<(), IrError> {
    if strides.len() != shape.len() {
        return Err(IrError::rule(
            op,
            format!("shape {} strides {:?}", fmt_shape(shape), strides),
            format!("strides must have one entry per dim ({}), found {}", shape.len(), strides.len()),
        ));
    }
    let mut dims: Vec<(usize, usize)> =
        strides.iter().copied().zip(shape.iter().copied()).filter(|&(_, n)| n > 1).collect();
    dims.sort();
    let mut span = 1usize;
    for (stride, extent) in dims {
        if stride < span {
            return Err(IrError::rule(
                op,
                format!("shape {} strides {:?}", fmt_shape(shape), strides),
                "strides alias: two different indices would address the same element",
            ));
        }
        span = stride.saturating_mul(extent);
    }
    let largest_offset =
        shape.iter().zip(strides).try_fold(0usize, |o, (&n, &s)| n.saturating_sub(1).checked_mul(s)?.checked_add(o));
    if largest_offset.is_none_or(|o| o >= MAX_ELEMENTS) {
        return Err(IrError::rule(
            op,
            format!("shape {} strides {:?}", fmt_shape(shape), strides),
            "the layout may span at most 2^48 elements",
        ));
    }
    Ok(())
}

/// Number of elements an allocation with these strides must hold (largest offset + 1).
pub fn storage_len(shape: &[usize], strides: &[usize]) -> usize {
    1 + shape.iter().zip(strides).map(|(&n, &s)| (n - 1) * s).sum::<usize>()
}

/// Shape, element type and device layout of a kernel-level (device) tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorDesc {
    /// Extent of each dimension (rank 1..=4).
    pub shape: Vec<usize>,
    /// Element strides of the device layout (row-major unless given).
    pub strides: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

impl TensorDesc {
    /// A row-major tensor.
    pub fn new(shape: &[usize], dtype: DType) -> Self {
        TensorDesc { shape: shape.to_vec(), strides: row_major_strides(shape), dtype }
    }

    /// Rank of the tensor.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Whether the strides are the row-major ones.
    pub fn is_row_major(&self) -> bool {
        self.strides == row_major_strides(&self.shape)
    }
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
