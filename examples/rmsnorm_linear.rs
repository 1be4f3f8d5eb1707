//! RMSNorm + Linear `rms_norm(X) @ W` of the benchmark set at batch 1 and 8 (X[2b, 4096],
//! W[4096, 6144], f16): prints the chosen µGraph, and with a GPU checks the launcher against the
//! CPU reference and times it.
//!
//! `cargo run --release --example rmsnorm_linear`

mod common;
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for("rmsnorm_linear", &common::cases_of("rmsnorm_linear"))
}
