//! LoRA `X @ W + (X @ A) @ B` of the benchmark set (X[16, 256], W[256, 4096], A[256, 16],
//! B[16, 4096], f16): prints the chosen µGraph, and with a GPU checks the launcher against the
//! CPU reference and times it.
//!
//! `cargo run --release --example lora`

mod common;
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for("lora", &common::cases_of("lora"))
}
