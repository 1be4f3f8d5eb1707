//! Attention `(exp(Q @ K) / sum) @ V` (softmax as Mirage writes it) of the benchmark set at batch 1
//! and 8 (Q[2b, 256, 64], K[2b, 64, 4096], V[2b, 4096, 64], f16): prints the chosen µGraph, and
//! with a GPU checks the launcher against the CPU reference and times it.
//!
//! `cargo run --release --example gqa`

mod common;
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for("gqa", &common::cases_of("gqa"))
}
