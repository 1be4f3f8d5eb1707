//! The gated MLP `silu(X @ W1) * (X @ W2)` of the benchmark set at batch 1 and 8 (X[b, 4096],
//! W1, W2 [4096, 4096], f16): prints the chosen µGraph, and with a GPU checks the launcher against
//! the CPU reference and times it.
//!
//! `cargo run --release --example gated_mlp`

mod common;
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for("gated_mlp", &common::cases_of("gated_mlp"))
}
