//! RMSNorm + Linear `rms_norm(X) @ W` of the benchmark set at batch 1 and 8 (X[2b, 4096],
//! W[4096, 6144], f16): prints the chosen µGraph, and with a GPU checks the launcher against the
//! CPU reference and times it.
//!
//! `cargo run --release --example rmsnorm_linear`

mod common;
mod kernels;

use common::Case;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for(
        "rmsnorm_linear",
        &[
            Case {
                name: "rmsnorm_linear_bs1",
                program: &kernels::rmsnorm_linear_bs1::PROGRAM,
                launch: |gpu, i| Ok(vec![kernels::rmsnorm_linear_bs1(gpu, i[0].as_f16()?, i[1].as_f16()?)?.into()]),
            },
            Case {
                name: "rmsnorm_linear_bs8",
                program: &kernels::rmsnorm_linear_bs8::PROGRAM,
                launch: |gpu, i| Ok(vec![kernels::rmsnorm_linear_bs8(gpu, i[0].as_f16()?, i[1].as_f16()?)?.into()]),
            },
        ],
    )
}
