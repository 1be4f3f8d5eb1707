//! The nTrans block `rms_norm(X + alpha * (rms_norm(H) + X))` of the benchmark set at batch 1
//! and 8 (H, X, alpha [8b, 4096], f16): prints the chosen µGraph, and with a GPU checks the
//! launcher against the CPU reference and times it.
//!
//! `cargo run --release --example ntrans`

mod common;
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for("ntrans", &common::cases_of("ntrans"))
}
