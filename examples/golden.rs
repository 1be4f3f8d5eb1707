//! The main job of this stage of the project: every µGraph Mirage discovered for the benchmark
//! programs is imported, checked against its program by the CPU reference interpreter on random
//! inputs (seed printed, `MIRAGE_TEST_SEED` replays it), turned into CUDA by mirage's code
//! generator and compiled with nvcc for the H200 (sm_90a). Prints one line per program and the
//! best candidate's µGraph.
//!
//! `cargo run --release --example golden`

use std::time::Instant;

use mirage::codegen::{KernelOptions, generate_unit};
use mirage::ir::{BlockOp, KernelGraph, KernelOp};
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage::reference::{max_scaled_error, run};
use mirage::testing::inputs::{golden_input_range, graph_inputs, seed};
use mirage::testing::programs::golden_cases;

/// A one-line description of a µGraph: its kernels with grid, loop range and block operators.
fn describe(g: &KernelGraph) -> String {
    let mut parts = Vec::new();
    for node in g.nodes() {
        match &node.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } => {}
            KernelOp::Custom { block } => {
                let ops: Vec<String> = block
                    .nodes()
                    .iter()
                    .filter(|n| !matches!(n.op, BlockOp::Input { .. } | BlockOp::Output { .. }))
                    .map(|n| n.op.name())
                    .collect();
                parts.push(format!(
                    "custom(grid {:?}, forloop {}: {})",
                    block.grid(),
                    block.forloop_range(),
                    ops.join(" ")
                ));
            }
            other => parts.push(other.name()),
        }
    }
    parts.join("; ")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let arch = std::env::var("MIRAGE_CUDA_ARCH").unwrap_or_else(|_| "sm_90a".to_string());
    let seed = seed("golden")?;
    println!("{:<28} {:>10} {:>8} {:>8} {:>10}", "program", "candidates", "match", "kernels", "nvcc (s)");
    for (i, case) in golden_cases().into_iter().enumerate() {
        let graphs = case.named_graphs()?;
        let program = &graphs[0].1;
        let inputs = graph_inputs(program, seed.wrapping_add(i as u64), |j| golden_input_range(case.name, j));
        let expected = run(program, &inputs)?;
        let mut matching = 0;
        for (_, cand) in &graphs[1..] {
            let got = run(cand, &inputs)?;
            let ok = got.iter().zip(&expected).all(|(g, w)| {
                let scale = w.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                max_scaled_error(g, w, 1e-4 * scale, 1e-3).is_some_and(|e| e <= 1.0)
            });
            matching += usize::from(ok);
        }
        let refs: Vec<(String, &KernelGraph)> = graphs.iter().map(|(n, g)| (n.clone(), g)).collect();
        let (source, plans) = generate_unit(&refs, &KernelOptions::default())?;
        let t = Instant::now();
        compile_cubin(
            &source,
            &format!("golden_{}", case.ident()),
            &CompileOptions { arch: Some(arch.clone()), ..Default::default() },
        )?;
        let kernels: usize = plans.iter().map(|p| p.kernels.len()).sum();
        println!(
            "{:<28} {:>10} {:>8} {:>8} {:>10.1}",
            case.name,
            graphs.len() - 1,
            matching,
            kernels,
            t.elapsed().as_secs_f64()
        );
        if matching != graphs.len() - 1 {
            return Err(
                format!("{}: {} candidates do not match the program", case.name, graphs.len() - 1 - matching).into()
            );
        }
        println!("    first candidate: {}", describe(&graphs[1].1));
    }
    match mirage_runtime::Gpu::new(0) {
        Ok(gpu) => println!(
            "GPU found ({}): the GPU golden test runs these kernels (`bash .gpu/run-tests golden`)",
            gpu.info()
        ),
        Err(e) => println!("no GPU found ({e}): kernels were generated and compiled, not run"),
    }
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
