//! Weight tiles through the bulk-copy engine (docs/DECISIONS.md, change 21), an option of code
//! generation (`KernelOptions::bulk_copies`, off by default: slower on the H200 at the
//! benchmark's row widths): on sm_90 a `__global__` kernel of static sizes copies each pipelined
//! tile whose rows are 16-byte vectors of at least 64 bytes with `cp.async.bulk` (one
//! instruction per row, an mbarrier per stage), and keeps `cp.async` for everything else and for
//! sm_80. Checked on a weight-bound program the benchmark does not contain, searched from scratch.
#![cfg(feature = "build")]

use std::time::Duration;

use mirage::codegen::{KernelOptions, generate, generate_task_body, plan_kernel};
use mirage::ir::{BlockGraph, KernelGraph, KernelOp};
use mirage::lower::lower_source;
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage::search::{SearchConfig, float_check, superoptimize};

/// A Llama-2-7B-like gated MLP slice at one row, bf16, 2048 → 2816: not a benchmark shape.
const PROGRAM: &str = r#"
use mirage::prelude::*;
#[mugraph]
pub fn gated_r1(x: Tensor<bf16, 1, 2048>, wg: Tensor<bf16, 2048, 2816>, wu: Tensor<bf16, 2048, 2816>) -> Tensor<bf16, 1, 2816> {
    silu(x.matmul(wg)) * x.matmul(wu)
}
"#;

fn program() -> KernelGraph {
    let programs = lower_source(PROGRAM).expect("the program lowers");
    programs.into_iter().next().expect("one program").graph
}

fn blocks(g: &KernelGraph) -> Vec<BlockGraph> {
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            KernelOp::Custom { block } => Some((**block).clone()),
            _ => None,
        })
        .collect()
}

/// The part of `source` between `#if MIRAGE_BULK` and its `#else` (the sm_90 path), and between
/// `#else` and `#endif` (every other architecture), over every such region.
fn paths(source: &str) -> (String, String) {
    let (mut bulk, mut other) = (String::new(), String::new());
    let mut state = 0; // 0 outside, 1 in the bulk branch, 2 in the other branch
    for line in source.lines() {
        match line.trim() {
            "#if MIRAGE_BULK" => state = 1,
            "#else" if state == 1 => state = 2,
            "#endif" if state > 0 => state = 0,
            _ if state == 1 => bulk.push_str(line),
            _ if state == 2 => other.push_str(line),
            _ => {}
        }
    }
    (bulk, other)
}

#[test]
fn an_untuned_weight_bound_shape_streams_its_weights_by_bulk_copies() {
    let program = program();
    let cfg = SearchConfig { budget: Duration::from_secs(24 * 3600), max_states: 5_000_000, ..SearchConfig::default() };
    let r = superoptimize(&program, &cfg, None).expect("the search finds a µGraph");
    assert_eq!(r.best.verified, Some(true));
    // The chosen µGraph computes the program (f32 reference interpreter, both graphs).
    assert_eq!(float_check(&program, &r.best.graph).expect("float check runs"), Ok(()));
    let kernels = blocks(&r.best.graph);
    assert_eq!(kernels.len(), 1, "one fused kernel: {}", r.best.cost);
    let bg = &kernels[0];
    // By default nothing is bulk-copied and no mbarrier is declared.
    let default_plan = plan_kernel(bg, "k", &KernelOptions::default()).expect("plans");
    assert!(default_plan.bulk_tiles().is_empty());
    assert_eq!(default_plan.barrier_bytes(), 0);
    let default_out = generate(&r.best.graph, "gated_r1", &KernelOptions::default()).expect("generates");
    assert!(!default_out.kernels_source.contains("MIRAGE_BULK"), "{}", default_out.kernels_source);

    let opts = KernelOptions { bulk_copies: true, ..KernelOptions::default() };
    let plan = plan_kernel(bg, "k", &opts).expect("plans");
    // Both weights (inputs 1 and 2 of the program, read along the loop) are bulk-copied, in rows
    // of at least 64 bytes, and the stage's mbarrier expects exactly their bytes.
    let bulk = plan.bulk_tiles();
    let bulk_inputs: Vec<usize> = bulk.iter().map(|&i| plan.copies[i].as_ref().expect("copy").input).collect();
    let weight_inputs: Vec<usize> =
        bg.inputs().iter().enumerate().filter(|(_, d)| d.shape == [2048, 2816]).map(|(j, _)| j).collect();
    assert_eq!(weight_inputs.len(), 2, "{bg:?}");
    for j in &weight_inputs {
        assert!(bulk_inputs.contains(j), "weight input {j} is bulk-copied: {bulk_inputs:?}");
    }
    let mut expected = 0;
    for &i in &bulk {
        let copy = plan.copies[i].as_ref().expect("copy");
        let b = copy.bulk.expect("bulk rows");
        assert!(b.row_bytes >= 64 && b.row_bytes.is_multiple_of(16), "{b:?}");
        assert_eq!(b.rows * b.row_bytes, plan.out_tile(i).numel() * 2, "the rows cover the bf16 tile");
        expected += b.rows * b.row_bytes;
    }
    assert_eq!(plan.bulk_stage_bytes(), expected);
    assert_eq!(plan.barrier_bytes(), 8 * plan.stages);
    assert!(plan.stages >= 2, "pipelined");

    let out = generate(&r.best.graph, "gated_r1", &opts).expect("generates");
    let (bulk_path, other_path) = paths(&out.kernels_source);
    assert!(bulk_path.contains("mirage::bulk_copy("), "{}", out.kernels_source);
    assert!(bulk_path.contains(&format!("mirage::mbar_expect_tx(&mbar[0], {expected})")), "{}", out.kernels_source);
    assert!(bulk_path.contains("mirage::mbar_wait(&mbar[it %"), "{}", out.kernels_source);
    assert!(!bulk_path.contains("cp_async16(") || bulk.len() < plan.loads.pipelined.len());
    assert!(other_path.contains("mirage::cp_async16("), "sm_80 keeps cp.async: {}", out.kernels_source);
    assert!(!other_path.contains("bulk_copy"));

    // A megakernel task body of the same block graph keeps cp.async (no mbarriers there).
    let body = generate_task_body(bg, "task", &opts).expect("task body");
    assert!(!body.code.contains("MIRAGE_BULK") && !body.code.contains("bulk_copy"), "{}", body.code);

    // Both paths compile (ptxas checks the bulk-copy and mbarrier PTX for sm_90a).
    for arch in ["sm_90a", "sm_80"] {
        let opts = CompileOptions { arch: Some(arch.to_string()), ..Default::default() };
        let cubin = compile_cubin(&out.source, &format!("gated_r1_{}", arch.replace('_', "")), &opts)
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(cubin.bytes.starts_with(b"\x7fELF"), "{arch}: an ELF cubin");
    }
}
