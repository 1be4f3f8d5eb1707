//! Float constants held by operators.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A float constant of an operator (scalar factors, clamp bounds, epsilons).
///
/// Compared and hashed by bit pattern so that operators and graphs holding constants can be `Eq`
/// and hashed. Serialized as a JSON number when finite; JSON has no infinities or NaNs, so those
/// are the strings `"inf"`, `"-inf"`, `"nan"` (the canonical NaN) or `"nan:0x7fc00001"` (its
/// bits). Displayed as Rust's `{:?}` of the `f32` (`0.5`, `-0.25`, `inf`).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_every_bit_pattern() {
        for v in [0.5f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0x7fc0_0001)] {
            let json = serde_json::to_string(&Scalar(v)).expect("serializes");
            assert_eq!(serde_json::from_str::<Scalar>(&json).expect("deserializes"), Scalar(v), "{json}");
        }
        assert_eq!(serde_json::to_string(&Scalar(f32::NAN)).ok().as_deref(), Some("\"nan\""));
        assert!(serde_json::from_str::<Scalar>("\"nan:0x3f800000\"").is_err());
        assert_ne!(Scalar(0.0), Scalar(-0.0));
        assert_eq!(Scalar(-0.25).to_string(), "-0.25");
    }
}
