//! Element types.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The element type of a tensor. Arithmetic always accumulates in f32.
///
/// Written `f16`, `bf16` and `f32` everywhere: in `#[mugraph]` signatures, JSON (µGraphs, launch
/// plans, the search cache) and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE 754 half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    Bf16,
    /// IEEE 754 single precision.
    F32,
}

impl DType {
    /// Every element type.
    pub const ALL: [DType; 3] = [DType::F16, DType::Bf16, DType::F32];

    /// The name: `f16`, `bf16`, `f32`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
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
            DType::F32 => 4,
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
}
