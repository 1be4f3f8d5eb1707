//! Runtime-sized dims through the DSL and the build: `#[mugraph(dims(B = 1..=64))]` lowers to the
//! program at the compile size with its `Dims`; `mirage::build` searches over the ranges, writes
//! sized kernels and a plan that takes the sizes at launch, and says in the report which sizes it
//! verified; a program whose dims no µGraph serves is a build error naming the function and the
//! reason (never a build at a fixed size). The launcher's checks run on the written plan without
//! a GPU.
#![cfg(feature = "build")]

use std::path::PathBuf;

use mirage::build::{BuildError, Builder};
use mirage::dims::{DimVar, Dims};
use mirage::ir::{DType, KernelGraph, TensorDesc};
use mirage::lower::lower_source;
use mirage_runtime::{LaunchPlan, RuntimeError, check_tensors_sized};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const GATED_MLP: &str = r#"
use mirage::prelude::*;

#[mugraph(dims(B = 1..=64))]
fn gated_mlp(x: Tensor<f16, B, 64>, w1: Tensor<f16, 64, 32>, w2: Tensor<f16, 64, 32>) -> Tensor<f16, B, 32> {
    silu(x.matmul(w1)) * x.matmul(w2)
}
"#;

#[test]
fn a_dims_program_lowers_at_its_upper_bounds_with_its_dims() -> TestResult {
    let [p] = <[_; 1]>::try_from(lower_source(GATED_MLP)?).map_err(|v| format!("{} programs", v.len()))?;
    assert_eq!(
        p.dims,
        Dims {
            vars: vec![DimVar { name: "B".into(), lo: 1, hi: 64 }],
            inputs: vec![vec![Some(0), None], vec![None, None], vec![None, None]],
        }
    );
    // The graph is the program at B = 64, the same as the one written with the literal 64 ...
    let fixed = lower_source(
        &GATED_MLP.replace("(dims(B = 1..=64))", "").replace(", B,", ", 64,").replace("<f16, B,", "<f16, 64,"),
    )?;
    assert_eq!(p.graph.canonical_hash(), fixed[0].graph.canonical_hash());
    assert_eq!(p.params[0].desc, TensorDesc::new(&[64, 64], DType::F16));
    // ... but not the same program: the fingerprint names the dims and their ranges.
    assert_ne!(p.fingerprint_hash, fixed[0].fingerprint_hash);
    assert!(
        p.fingerprint.contains("dim B = 1..=64") && p.fingerprint.contains("param x: f16 [B, 64]"),
        "{}",
        p.fingerprint
    );
    let narrower = lower_source(&GATED_MLP.replace("1..=64", "8..=64"))?;
    assert_ne!(p.fingerprint_hash, narrower[0].fingerprint_hash);
    assert!(fixed[0].dims.is_static());
    Ok(())
}

#[test]
fn lowering_reports_dims_mistakes_at_their_tokens() {
    let e = lower_source(&GATED_MLP.replace("B = 1..=64", "B = 1..=64, B = 1..=8")).expect_err("declared twice");
    assert!(e.message.contains("declared twice") && e.line == 4, "{e}");
    let e = lower_source(&GATED_MLP.replace("w1: Tensor<f16, 64, 32>", "w1: Tensor<f16, B, 32>")).expect_err("B vs 64");
    assert!(e.message.contains("meets only itself"), "{e}");
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mirage-dims-dsl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A builder of `source` in a fresh directory (outputs and search cache there).
fn builder(tag: &str, source: &str) -> (PathBuf, Builder) {
    let dir = temp_dir(tag);
    let file = dir.join("kernels.rs");
    std::fs::write(&file, source).expect("write");
    let b =
        Builder::new().file(&file).out_dir(&dir).cache_dir(dir.join(".mirage")).arch("sm_90a").cargo_directives(false);
    (dir, b)
}

/// Needs nvcc (`bash scripts/setup.sh` installs it).
#[test]
fn the_build_searches_over_the_range_and_writes_a_plan_sized_at_launch() -> TestResult {
    mirage::nvcc::find_nvcc()?;
    let (dir, b) = builder("build", GATED_MLP);
    let report = b.compile()?;
    let [built] = report.programs.as_slice() else { return Err("one program".into()) };
    assert!(built.searched, "{}", built.search_report);
    assert!(
        built.search_report.contains("runtime-sized dims B = 1..=64")
            && built.search_report.contains("B = 1; ")
            && built.search_report.contains("B = 17"),
        "{}",
        built.search_report
    );
    let plan = LaunchPlan::from_json(&std::fs::read_to_string(&built.paths.plan)?)?;
    assert_eq!(plan.dims.len(), 1);
    assert_eq!(plan.input_dims, vec![vec![Some(0), None], vec![None, None], vec![None, None]]);
    assert!(plan.kernels.iter().all(|k| k.size_args == vec![0]), "{:?}", plan.kernels);
    // The launcher's checks, on the plan as written: any B in range, the output follows it ...
    let at = |b: usize| {
        [
            TensorDesc::new(&[b, 64], DType::F16),
            TensorDesc::new(&[64, 32], DType::F16),
            TensorDesc::new(&[64, 32], DType::F16),
        ]
    };
    for b in [1, 3, 17, 63, 64] {
        let sizes = check_tensors_sized(&plan, &at(b))?;
        assert_eq!(sizes, vec![b]);
        assert_eq!(plan.outputs_at(&sizes), vec![TensorDesc::new(&[b, 32], DType::F16)]);
    }
    // ... and a size out of range is an error naming the dim, the parameter and the size.
    let e = check_tensors_sized(&plan, &at(65)).expect_err("B = 65");
    assert!(matches!(e, RuntimeError::Argument { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("parameter `x`") && msg.contains("B in 1..=64") && msg.contains("B = 65"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Every use of a dim must have the same size: `x[B, 32] + r[B, 32]` given 5 and 6 rows.
#[test]
fn two_uses_of_a_dim_must_agree() -> TestResult {
    let mut g = KernelGraph::new();
    let x = g.input(&[64, 32], DType::F16)?;
    let r = g.input(&[64, 32], DType::F16)?;
    let y = g.add(x, r)?;
    g.output(y, None)?;
    let dims = Dims {
        vars: vec![DimVar { name: "B".into(), lo: 1, hi: 64 }],
        inputs: vec![vec![Some(0), None], vec![Some(0), None]],
    };
    let mut plan = mirage::codegen::generate_sized(&g, &dims, "residual", &Default::default())?.plan;
    plan.input_names = vec!["x".into(), "r".into()];
    let plan = LaunchPlan::from_json(&plan.to_json())?;
    let found = [TensorDesc::new(&[5, 32], DType::F16), TensorDesc::new(&[6, 32], DType::F16)];
    let msg = check_tensors_sized(&plan, &found).expect_err("5 and 6").to_string();
    assert!(msg.contains("parameter `r`") && msg.contains("B = 5") && msg.contains("B = 6"), "{msg}");
    Ok(())
}

#[test]
fn a_program_no_micrograph_serves_over_its_range_is_a_build_error_with_the_reason() {
    // Σ_B exp(x): padded rows add exp(0) = 1 at sizes that are not multiples of a tile.
    let src = r#"
use mirage::prelude::*;

#[mugraph(dims(B = 1..=64))]
fn exp_sum(x: Tensor<f32, B, 32>) -> Tensor<f32, 1, 32> {
    exp(x).sum(0)
}
"#;
    let (dir, b) = builder("exp-sum", src);
    let e = b.compile().expect_err("no µGraph serves B");
    assert!(matches!(e, BuildError::Dims { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("`exp_sum`") && msg.contains("B = 1..=64"), "{msg}");
    assert!(msg.contains("masked reductions over a runtime-sized dim are not implemented"), "{msg}");
    assert!(msg.contains("not built at a fixed size"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_runtime_sized_dim_code_generation_cannot_serve_is_a_build_error() {
    // S sizes dim 1: strides would follow the size, which code generation does not do yet.
    let src = r#"
use mirage::prelude::*;

#[mugraph(dims(S = 1..=64))]
fn cols(x: Tensor<f32, 8, S>) -> Tensor<f32, 8, S> {
    exp(x)
}
"#;
    let (dir, b) = builder("cols", src);
    let e = b.compile().expect_err("S at dim 1");
    let msg = e.to_string();
    assert!(matches!(e, BuildError::Dims { .. }), "{msg}");
    assert!(msg.contains("`cols`") && msg.contains("other than dim 0"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}
