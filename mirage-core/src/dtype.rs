//! Element types.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The element type of a tensor. Arithmetic always accumulates in f32.
///
/// Written `f16`, `bf16`, `f32` and `i32` everywhere: in `#[mugraph]` signatures, JSON (µGraphs,
/// launch plans, the search cache) and messages.
///
/// The float types hold values; `i32` holds indices only: the row ids `gather` reads and the
/// positions `argmax` returns. No arithmetic takes an `i32` operand. Inside a kernel an index
/// travels as an f32 register value, exact below 2^24, which is why the shape rules bound the
/// extents that indices address to [`DType::MAX_INDEX_EXTENT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE 754 half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    Bf16,
    /// IEEE 754 single precision.
    F32,
    /// 32-bit signed integers: indices.
    I32,
}

impl DType {
    /// Every element type.
    pub const ALL: [DType; 4] = [DType::F16, DType::Bf16, DType::F32, DType::I32];

    /// The float element types: those arithmetic operates on.
    pub const FLOATS: [DType; 3] = [DType::F16, DType::Bf16, DType::F32];

    /// `v` as an element of this type stores it, back in f32: rounded to nearest even for f16
    /// and bf16 (as the GPU's conversions do), unchanged for f32, the integer at or below `v`
    /// for i32 indices.
    ///
    /// ```
    /// use mirage_core::DType;
    /// assert_eq!(DType::F16.round(1.0 + 1.0 / 4096.0), 1.0);
    /// assert_eq!(DType::F32.round(0.1), 0.1);
    /// assert_eq!(DType::I32.round(2.7), 2.0);
    /// ```
    pub fn round(self, v: f32) -> f32 {
        match self {
            DType::F16 => half::f16::from_f32(v).to_f32(),
            DType::Bf16 => half::bf16::from_f32(v).to_f32(),
            DType::F32 => v,
            DType::I32 => v.floor(),
        }
    }

    /// The largest extent an index may address (the rows of a `gather` table, the reduced dim of
    /// an `argmax`): 2^24, below which every integer is exact as an f32.
    pub const MAX_INDEX_EXTENT: usize = 1 << 24;

    /// The name: `f16`, `bf16`, `f32`, `i32`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::I32 => "i32",
        }
    }

    /// Reads a name written by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 => 4,
        }
    }

    /// Whether the type holds float values (arithmetic operates on them).
    pub const fn is_float(self) -> bool {
        match self {
            DType::F16 | DType::Bf16 | DType::F32 => true,
            DType::I32 => false,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_text_and_json() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            let json = serde_json::to_string(&d).expect("serializes");
            assert_eq!(json, format!("\"{}\"", d.name()));
            assert_eq!(serde_json::from_str::<DType>(&json).expect("deserializes"), d);
        }
        assert_eq!(DType::from_name("f64"), None);
        assert!(serde_json::from_str::<DType>("\"f64\"").is_err());
    }

    #[test]
    fn floats_are_the_types_arithmetic_takes() {
        let floats: Vec<DType> = DType::ALL.into_iter().filter(|d| d.is_float()).collect();
        assert_eq!(floats, DType::FLOATS.to_vec());
        assert_eq!(DType::I32.size_bytes(), 4);
        // Every index below the bound is exact as an f32.
        let top = (DType::MAX_INDEX_EXTENT - 1) as f32;
        assert_eq!(top as usize, DType::MAX_INDEX_EXTENT - 1);
    }
}
