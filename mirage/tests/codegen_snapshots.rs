//! Snapshot tests of generated CUDA for a few small graphs: a change to code generation shows up
//! as a reviewable diff of the kernel source (`mirage/tests/snapshots/`).
#![cfg(feature = "build")]

use mirage::codegen::{generate, KernelOptions};
use mirage::ir::DType;
use mirage::programs::coverage_cases;

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

#[test]
fn snapshot_online_softmax_f16() {
    insta::assert_snapshot!(kernels("online_softmax_rescale_pair", DType::F16));
}
