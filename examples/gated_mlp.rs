//! The gated MLP `silu(X @ W1) * (X @ W2)` of the benchmark set at batch 1 and 8 (X[b, 4096],
//! W1, W2 [4096, 4096], f16): prints the chosen µGraph, and with a GPU checks the launcher against
//! the CPU reference and times it.
//!
//! `cargo run --release --example gated_mlp`

mod common;
mod kernels;

use common::Case;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for(
        "gated_mlp",
        &[
            Case {
                name: "gated_mlp_bs1",
                program: &kernels::gated_mlp_bs1::PROGRAM,
                launch: |gpu, i| Ok(vec![kernels::gated_mlp_bs1(gpu, i[0].as_f16()?, i[1].as_f16()?, i[2].as_f16()?)?.into()]),
            },
            Case {
                name: "gated_mlp_bs8",
                program: &kernels::gated_mlp_bs8::PROGRAM,
                launch: |gpu, i| Ok(vec![kernels::gated_mlp_bs8(gpu, i[0].as_f16()?, i[1].as_f16()?, i[2].as_f16()?)?.into()]),
            },
        ],
    )
}
