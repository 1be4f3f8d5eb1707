//! `#[mugraph]`: the attribute that turns a Rust tensor function into a call of a superoptimized,
//! verified CUDA kernel.
//!
//! This crate will hold the macro entry point: parsing with the DSL syntax module shared with
//! `mirage::build`, spanned errors, and the typed wrapper that embeds the build artifacts
//! (DESIGN.md §3, §5, §11). It holds no macro yet: the pipeline behind it is being built.
