//! Snapshot tests of generated CUDA for a few small graphs: a change to code generation shows up
//! as a reviewable diff of the kernel source (`mirage/tests/snapshots/`).
#![cfg(feature = "build")]

use mirage::codegen::{KernelOptions, generate};
use mirage::ir::DType;
use mirage::testing::programs::coverage_cases;

fn kernels(case: &str, dtype: DType) -> String {
    let (name, graph) = coverage_cases(dtype)
        .expect("coverage graphs build")
        .into_iter()
        .find(|(n, _)| n == case)
        .unwrap_or_else(|| panic!("no coverage case {case}"));
    let g = generate(&graph, &name, &KernelOptions::default()).expect("generates");
    format!("{}\n// plan\n{}", g.kernels_source, serde_json::to_string_pretty(&g.plan).expect("plan serializes"))
}

#[test]
fn snapshot_matmul_odd_shapes_f16() {
    insta::assert_snapshot!(kernels("matmul_5x24x13", DType::F16));
}

#[test]
fn snapshot_accumulator_rms_last_bf16() {
    insta::assert_snapshot!(kernels("accumulator_acc_rms_last", DType::Bf16));
}

#[test]
fn snapshot_iterator_matrix_f32() {
    insta::assert_snapshot!(kernels("iterator_imap01r_f1_r4", DType::F32));
}

/// Split-KV of a bf16 program: the first kernel stores its parts as `float` (`from_f32<float>`),
/// the combine loads `float` tiles (4-byte copies) and stores `__nv_bfloat16`; the plan's buffers
/// are f32.
#[test]
fn snapshot_split_kv_f32_parts_bf16() {
    insta::assert_snapshot!(kernels("online_softmax_split_kv", DType::Bf16));
}

#[test]
fn snapshot_online_softmax_f16() {
    insta::assert_snapshot!(kernels("online_softmax_rescale_pair", DType::F16));
}

/// qknorm-style attention block: `rms_norm(Q)` is loop-invariant (hoisted, its A fragments
/// preloaded), `exp(Q·K)` stays in mma fragments (row sums by shuffles, the second matmul's A
/// from registers), the normalized V tile is stored as f16 for ldmatrix, `Σ exp(Q·K)·V` accumulates
/// in registers (`codegen::fusion`).
#[test]
fn snapshot_attention_register_chain_f16() {
    use mirage::ir::{AccKind, BlockGraph, BlockOp, KernelGraph, Scalar, TensorDesc, UnaryOp};
    let d = DType::F16;
    let q = TensorDesc::new(&[64, 64], d);
    let k = TensorDesc::new(&[64, 256], d);
    let v = TensorDesc::new(&[256, 64], d);
    let mut bg = BlockGraph::new(vec![q, k, v], [1, 1, 1], 128, 4).expect("block graph");
    let none = [None, None, None];
    let tq = bg.input(0, none, None).expect("q");
    let tk = bg.input(1, none, Some(1)).expect("k");
    let tv = bg.input(2, none, Some(0)).expect("v");
    let nq = bg.op(BlockOp::RmsNorm { eps: Scalar(1e-6) }, &[tq]).expect("norm q");
    let nv = bg.op(BlockOp::RmsNorm { eps: Scalar(1e-6) }, &[tv]).expect("norm v");
    let s = bg.matmul(nq, tk).expect("q·k");
    let p = bg.unary(UnaryOp::Exp, s).expect("exp");
    let l = bg.accum(AccKind::SumLast, &[p]).expect("row sums");
    let pv = bg.matmul(p, nv).expect("p·v");
    let o = bg.accum(AccKind::Sum, &[pv]).expect("acc");
    bg.output(o, none).expect("out o");
    bg.output(l, none).expect("out l");
    let mut g = KernelGraph::new();
    let xq = g.input(&[64, 64], d).expect("xq");
    let xk = g.input(&[64, 256], d).expect("xk");
    let xv = g.input(&[256, 64], d).expect("xv");
    let outs = g.custom(&[xq, xk, xv], bg).expect("custom");
    g.output(outs[0], None).expect("o");
    g.output(outs[1], None).expect("l");
    let out = generate(&g, "attention_register_chain", &KernelOptions::default()).expect("generates");
    for expected in [
        "A preloaded in registers, result in registers",
        "exp on register fragments",
        "row sums of register fragments",
        "A from registers, accumulated in registers, B by ldmatrix.trans",
        "loop-invariant operators, once",
    ] {
        assert!(out.kernels_source.contains(expected), "missing `{expected}` in\n{}", out.kernels_source);
    }
    insta::assert_snapshot!(format!(
        "{}\n// plan\n{}",
        out.kernels_source,
        serde_json::to_string_pretty(&out.plan).expect("plan serializes")
    ));
}
