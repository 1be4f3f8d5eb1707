//! The description of a device tensor: shape, strides and element type.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::shape::{num_elements, row_major_strides};

/// Shape, element strides and element type of a device tensor: a kernel graph's inputs and
/// outputs, the tensors of a launch plan, what a launcher checks its arguments against.
///
/// Serialized as `{"shape": [..], "strides": [..], "dtype": "f16"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorDesc {
    /// Extent of each dim (rank 1..=4).
    pub shape: Vec<usize>,
    /// Element stride of each dim.
    pub strides: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

impl TensorDesc {
    /// A row-major tensor.
    pub fn new(shape: &[usize], dtype: DType) -> Self {
        TensorDesc { shape: shape.to_vec(), strides: row_major_strides(shape), dtype }
    }

    /// The rank (number of dims).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements (product of the shape).
    pub fn num_elements(&self) -> usize {
        num_elements(&self.shape)
    }

    /// Whether the strides are the row-major ones of the shape.
    pub fn is_row_major(&self) -> bool {
        self.strides == row_major_strides(&self.shape)
    }
}

impl fmt::Display for TensorDesc {
    /// `f16 [8, 4096] strides [4096, 1]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} strides {:?}", self.dtype, self.shape, self.strides)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_description_and_its_json() {
        let d = TensorDesc::new(&[8, 16], DType::F16);
        assert_eq!(d.strides, vec![16, 1]);
        assert!(d.is_row_major());
        assert_eq!((d.rank(), d.num_elements()), (2, 128));
        assert_eq!(d.to_string(), "f16 [8, 16] strides [16, 1]");
        let json = serde_json::to_string(&d).expect("serializes");
        assert_eq!(json, r#"{"shape":[8,16],"strides":[16,1],"dtype":"f16"}"#);
        let t = TensorDesc { shape: vec![64, 32], strides: vec![1, 64], dtype: DType::Bf16 };
        assert!(!t.is_row_major());
        assert_eq!(serde_json::from_str::<TensorDesc>(&serde_json::to_string(&t).expect("ser")).ok(), Some(t));
    }
}
