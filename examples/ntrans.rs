//! The nTrans block `rms_norm(X + alpha * (rms_norm(H) + X))` of the benchmark set at batch 1
//! and 8 (H, X, alpha [8b, 4096], f16): prints the chosen µGraph, and with a GPU checks the
//! launcher against the CPU reference and times it.
//!
//! `cargo run --release --example ntrans`

mod common;
mod kernels;

use common::Case;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::main_for(
        "ntrans",
        &[
            Case {
                name: "ntrans_bs1",
                program: &kernels::ntrans_bs1::PROGRAM,
                launch: |gpu, i| Ok(vec![kernels::ntrans_bs1(gpu, i[0].as_f16()?, i[1].as_f16()?, i[2].as_f16()?)?.into()]),
            },
            Case {
                name: "ntrans_bs8",
                program: &kernels::ntrans_bs8::PROGRAM,
                launch: |gpu, i| Ok(vec![kernels::ntrans_bs8(gpu, i[0].as_f16()?, i[1].as_f16()?, i[2].as_f16()?)?.into()]),
            },
        ],
    )
}
