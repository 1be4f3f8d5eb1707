//! mirage: a Rust-native tensor superoptimizer.
#[cfg(feature = "build")]
pub mod ir;
#[cfg(feature = "build")]
pub mod nvcc;
