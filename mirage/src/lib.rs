//! mirage: a Rust-native tensor superoptimizer.
//!
//! With feature `build` this crate holds the compiler: the µGraph IR ([`ir`]), the one evaluator
//! of its semantics ([`eval`]), the CPU reference interpreter ([`reference`]), the importer of
//! Mirage's µGraph JSON ([`import`]) and the nvcc driver ([`nvcc`]).
#[cfg(feature = "build")]
pub mod codegen;
#[cfg(feature = "build")]
pub mod eval;
#[cfg(feature = "build")]
pub mod fingerprint;
#[cfg(feature = "build")]
pub mod import;
#[cfg(feature = "build")]
pub mod ir;
#[cfg(feature = "build")]
pub mod lower;
#[cfg(feature = "build")]
pub mod nvcc;
#[cfg(feature = "build")]
pub mod programs;
#[cfg(feature = "build")]
pub mod reference;
