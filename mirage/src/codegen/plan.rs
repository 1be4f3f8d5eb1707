//! The launch plan: which kernels run in which order on which buffers.
//!
//! The plan types live in `mirage-runtime` ([`mirage_runtime::plan`]) so that a program's plan
//! is read at run time without the compiler; this module re-exports them and converts the IR's
//! tensor descriptions to the runtime's.

use crate::ir::{DType, TensorDesc};

pub use mirage_runtime::plan::{ArgRef, Buffer, KernelLaunch, LaunchPlan, PLAN_VERSION, TensorSpec};

/// The runtime's element type for an IR element type.
pub fn runtime_dtype(dtype: DType) -> mirage_runtime::DType {
    match dtype {
        DType::F16 => mirage_runtime::DType::F16,
        DType::Bf16 => mirage_runtime::DType::BF16,
        DType::F32 => mirage_runtime::DType::F32,
    }
}

/// The IR's element type for a runtime element type.
pub fn ir_dtype(dtype: mirage_runtime::DType) -> DType {
    match dtype {
        mirage_runtime::DType::F16 => DType::F16,
        mirage_runtime::DType::BF16 => DType::Bf16,
        mirage_runtime::DType::F32 => DType::F32,
    }
}

/// The plan's description of an IR tensor.
pub fn tensor_spec(desc: &TensorDesc) -> TensorSpec {
    TensorSpec { shape: desc.shape.clone(), strides: desc.strides.clone(), dtype: runtime_dtype(desc.dtype) }
}

/// The IR's description of a plan tensor.
pub fn tensor_desc(spec: &TensorSpec) -> TensorDesc {
    TensorDesc { shape: spec.shape.clone(), strides: spec.strides.clone(), dtype: ir_dtype(spec.dtype) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_and_serialize_alike() {
        for dtype in [DType::F16, DType::Bf16, DType::F32] {
            let desc = TensorDesc { shape: vec![4, 8], strides: vec![1, 4], dtype };
            let spec = tensor_spec(&desc);
            assert_eq!(tensor_desc(&spec), desc);
            // Both sides write the same JSON, so plans written before the move still parse.
            assert_eq!(serde_json::to_string(&spec).ok(), serde_json::to_string(&desc).ok());
        }
    }
}
