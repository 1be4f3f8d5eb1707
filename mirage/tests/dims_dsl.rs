//! Runtime-sized dims through the DSL and the build: `#[mugraph(dims(B = 1..=64))]` lowers to the
//! program at the compile size with its `Dims`; `mirage::build` searches over the ranges, writes
//! sized kernels and a plan that takes the sizes at launch, and says in the report which sizes it
//! verified; a program whose dims no µGraph serves is a build error naming the function and the
//! reason (never a build at a fixed size). The launcher's checks run on the written plan without
//! a GPU. A program of several size buckets (`buckets(...)` or the default ladder) lowers, keys
//! its cache entries, builds and dispatches per bucket.
#![cfg(feature = "build")]

mod support;

use std::path::PathBuf;

use mirage::build::{BuildError, Builder};
use mirage::dims::{DimPlan, DimVar, Dims};
use mirage::eval::evaluate_at;
use mirage::ir::{DType, KernelGraph, TensorDesc};
use mirage::lower::lower_source;
use mirage::reference::{F32, max_scaled_error};
use mirage::search::SearchConfig;
use mirage_runtime::{Bucket, LaunchPlan, Program, ProgramArtifacts, RuntimeError, check_tensors_sized};

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

/// The tests that search and compile take this lock: run together on a loaded machine, their
/// searches' wall-clock budgets would starve one another.
static BUILDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `GATED_MLP` built once for its whole range (one bucket).
fn one_build(source: &str) -> String {
    source.replace("(dims(B = 1..=64))", "(dims(B = 1..=64), buckets(B = [64]))")
}

/// Needs nvcc (`bash scripts/setup.sh` installs it).
#[test]
fn the_build_searches_over_the_range_and_writes_a_plan_sized_at_launch() -> TestResult {
    mirage::nvcc::find_nvcc()?;
    let _one_at_a_time = BUILDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (dir, b) = builder("build", &one_build(GATED_MLP));
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
    // rms_norm over a runtime-sized row: its mean counts the valid elements, which code does not
    // mask, so no candidate has code at runtime sizes.
    let src = r#"
use mirage::prelude::*;

#[mugraph(dims(B = 1..=64), buckets(B = [64]))]
fn rms_b(x: Tensor<f32, 8, B>) -> Tensor<f32, 8, B> {
    rms_norm(x, 1e-6)
}
"#;
    let _one_at_a_time = BUILDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (dir, b) = builder("rms-b", src);
    let e = b.compile().expect_err("no µGraph serves B");
    assert!(matches!(e, BuildError::Dims { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("`rms_b`") && msg.contains("B = 1..=64"), "{msg}");
    assert!(msg.contains("but not an RMS mean over a padded dim"), "{msg}");
    assert!(msg.contains("not built at a fixed size"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_masked_sum_and_a_runtime_sized_dim_other_than_dim_0_build() -> TestResult {
    // Σ_B exp(x) (padded rows would add exp(0) = 1 unmasked) and exp of x[8, S] (strides follow S).
    let src = r#"
use mirage::prelude::*;

#[mugraph(dims(B = 1..=64), buckets(B = [64]))]
fn exp_sum(x: Tensor<f32, B, 32>) -> Tensor<f32, 1, 32> {
    exp(x).sum(0)
}

#[mugraph(dims(S = 1..=64), buckets(S = [64]))]
fn cols(x: Tensor<f32, 8, S>) -> Tensor<f32, 8, S> {
    exp(x)
}
"#;
    mirage::nvcc::find_nvcc()?;
    let _one_at_a_time = BUILDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (dir, b) = builder("masked", src);
    let report = b.compile()?;
    assert_eq!(report.programs.len(), 2);
    for built in &report.programs {
        let plan = LaunchPlan::from_json(&std::fs::read_to_string(&built.paths.plan)?)?;
        assert!(plan.kernels.iter().all(|k| k.size_args == vec![0]), "{:?}", plan.kernels);
        if plan.name.contains("cols") {
            assert_eq!(plan.input_dims, vec![vec![None, Some(0)]]);
            assert_eq!(plan.output_dims, vec![vec![None, Some(0)]]);
            let sizes = check_tensors_sized(&plan, &[TensorDesc::new(&[8, 17], DType::F32)])?;
            assert_eq!(plan.outputs_at(&sizes), vec![TensorDesc::new(&[8, 17], DType::F32)]);
        } else {
            assert_eq!(plan.input_dims, vec![vec![Some(0), None]]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `GATED_MLP` at the literal size `b`.
fn gated_mlp_at(b: usize) -> String {
    GATED_MLP
        .replace("(dims(B = 1..=64))", "")
        .replace(", B,", &format!(", {b},"))
        .replace("<f16, B,", &format!("<f16, {b},"))
}

#[test]
fn a_program_is_lowered_as_its_default_buckets_each_at_its_upper_bound() -> TestResult {
    let [p] = <[_; 1]>::try_from(lower_source(GATED_MLP)?).map_err(|v| format!("{} programs", v.len()))?;
    let ranges: Vec<Vec<(usize, usize)>> = p.buckets.iter().map(|b| b.ranges.clone()).collect();
    assert_eq!(ranges, vec![vec![(1, 1)], vec![(2, 8)], vec![(9, 16)], vec![(17, 32)], vec![(33, 64)]]);
    for b in &p.buckets {
        let (lo, hi) = b.ranges[0];
        // The bucket's graph is the program written at its upper bound ...
        let fixed = lower_source(&gated_mlp_at(hi))?;
        assert_eq!(b.graph.canonical_hash(), fixed[0].graph.canonical_hash(), "bucket {lo}..={hi}");
        // ... and its dims are the sub-range, sizing the same input dims.
        assert_eq!(b.dims, Dims { vars: vec![DimVar { name: "B".into(), lo, hi }], inputs: p.dims.inputs.clone() });
    }
    // The bucket list is part of the program: one build for the range is another program, and so
    // is another list; a list equal to the default is the same program.
    assert!(p.fingerprint.contains("buckets B = [1, 8, 16, 32, 64]"), "{}", p.fingerprint);
    let one = lower_source(&one_build(GATED_MLP))?;
    assert!(one[0].buckets.is_empty() && !one[0].fingerprint.contains("buckets"), "{}", one[0].fingerprint);
    let other = lower_source(&GATED_MLP.replace("(dims(B = 1..=64))", "(dims(B = 1..=64), buckets(B = [1, 16, 64]))"))?;
    assert_eq!(other[0].buckets.len(), 3);
    let explicit_default =
        lower_source(&GATED_MLP.replace("(dims(B = 1..=64))", "(dims(B = 1..=64), buckets(B = [1, 8, 16, 32, 64]))"))?;
    let hashes = [&p, &one[0], &other[0], &explicit_default[0]].map(|q| q.fingerprint_hash.clone());
    assert_eq!(hashes[0], hashes[3]);
    assert!(hashes[0] != hashes[1] && hashes[0] != hashes[2] && hashes[1] != hashes[2], "{hashes:?}");
    Ok(())
}

#[test]
fn the_default_ladder_and_the_product_of_two_dims() -> TestResult {
    use mirage::lower::syntax::{MAX_BUCKETS, default_buckets, thin_buckets};
    assert_eq!(default_buckets(1, 64), vec![1, 8, 16, 32, 64]);
    assert_eq!(thin_buckets(&[1, 8, 16, 32, 64]), vec![1, 16, 64]);
    assert_eq!(thin_buckets(&[1, 8, 16, 32]), vec![1, 16, 32]);
    assert_eq!(thin_buckets(&[8, 12]), vec![12]);
    assert_eq!(thin_buckets(&[12]), vec![12]);
    assert_eq!(default_buckets(1, 1), vec![1]);
    assert_eq!(default_buckets(4, 12), vec![8, 12]);
    assert_eq!(default_buckets(1, 1000), vec![1, 8, 16, 32, 64, 128, 256, 512, 1000]);
    assert_eq!(default_buckets(1, 32768), vec![1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 32768]);
    assert_eq!(default_buckets(100, 5000), vec![128, 256, 512, 1024, 2048, 4096, 5000]);
    assert_eq!(default_buckets(100, 200), vec![128, 200]);
    assert_eq!(default_buckets(100, 120), vec![120]);
    // Two dims: the product, the first dim outermost.
    let two = r#"
use mirage::prelude::*;

#[mugraph(dims(B = 1..=16, C = 1..=8), buckets(B = [4, 16], C = [2, 8]))]
fn f(x: Tensor<f32, B, 32>, y: Tensor<f32, C, 32>) -> Tensor<f32, B, 32> {
    x + exp(y).sum(0)
}
"#;
    let p = lower_source(two)?;
    let ranges: Vec<Vec<(usize, usize)>> = p[0].buckets.iter().map(|b| b.ranges.clone()).collect();
    assert_eq!(ranges, vec![vec![(1, 4), (1, 2)], vec![(1, 4), (3, 8)], vec![(5, 16), (1, 2)], vec![(5, 16), (3, 8)]]);
    // Default ladders whose product is over the cap are thinned, the longer first (the later dim
    // on a tie), each keeping its first and last bound: no dim loses all of its buckets.
    let his = |p: &[mirage::lower::Program], d: usize| -> Vec<usize> {
        let mut his: Vec<usize> = p[0].buckets.iter().map(|b| b.ranges[d].1).collect();
        his.sort_unstable();
        his.dedup();
        his
    };
    let p = lower_source(
        &two.replace(", buckets(B = [4, 16], C = [2, 8])", "")
            .replace("1..=16", "1..=4096")
            .replace("1..=8", "1..=4096"),
    )?;
    assert_eq!(his(&p, 0), vec![1, 64, 1024, 4096]);
    assert_eq!(his(&p, 1), vec![1, 64, 1024, 4096]);
    assert_eq!(p[0].buckets.len(), 16);
    // A batch and a key length: S keeps more buckets than B, and 1 stays a bucket of each.
    let p = lower_source(
        &two.replace(", buckets(B = [4, 16], C = [2, 8])", "")
            .replace("1..=16", "1..=64")
            .replace("1..=8", "1..=32768"),
    )?;
    assert_eq!(his(&p, 0), vec![1, 16, 64]);
    assert_eq!(his(&p, 1), vec![1, 64, 1024, 32768]);
    assert_eq!(p[0].buckets.len(), 12);
    // An explicit list is never thinned: the default one gives way.
    let p = lower_source(
        &two.replace("buckets(B = [4, 16], C = [2, 8])", "buckets(B = [1, 2, 4, 8, 16, 32, 64])")
            .replace("1..=16", "1..=64")
            .replace("1..=8", "1..=4096"),
    )?;
    assert_eq!(his(&p, 0), vec![1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(his(&p, 1), vec![1, 4096]);
    assert!(p[0].buckets.len() <= MAX_BUCKETS);
    Ok(())
}

#[test]
fn each_bucket_keys_its_own_cache_entry_on_its_sub_range() -> TestResult {
    let keys = |source: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
        let p = lower_source(source)?;
        Ok(p[0]
            .buckets
            .iter()
            .map(|b| SearchConfig { dims: b.dims.clone(), ..SearchConfig::default() }.cache_key(&b.graph).file_name())
            .collect())
    };
    let default = keys(GATED_MLP)?;
    let mut unique = default.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 5, "{default:?}");
    // The single build's entry is none of them.
    let one = lower_source(&one_build(GATED_MLP))?;
    let single =
        SearchConfig { dims: one[0].dims.clone(), ..SearchConfig::default() }.cache_key(&one[0].graph).file_name();
    assert!(!default.contains(&single));
    // Another list: a bucket of another range is another entry; a bucket of the same range (and
    // graph) is the same entry.
    let other = keys(&GATED_MLP.replace("(dims(B = 1..=64))", "(dims(B = 1..=64), buckets(B = [1, 16, 64]))"))?;
    assert_eq!(other[0], default[0], "1..=1 in both lists");
    assert!(!default.contains(&other[1]), "2..=16: {other:?} vs {default:?}");
    assert!(!default.contains(&other[2]), "17..=64: {other:?} vs {default:?}");
    Ok(())
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Needs nvcc. Builds the default buckets: one program per bucket, each plan sized over its own
/// sub-range; each bucket's µGraph agrees with the program on the CPU at sizes inside its
/// sub-range; a program assembled from the written artifacts dispatches every size of the range
/// to the bucket holding it, without a GPU.
#[test]
fn the_buckets_build_agree_on_the_cpu_and_dispatch_every_size() -> TestResult {
    mirage::nvcc::find_nvcc()?;
    let _one_at_a_time = BUILDS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (dir, b) = builder("buckets", GATED_MLP);
    let report = b.compile()?;
    let program = &lower_source(GATED_MLP)?[0];
    assert_eq!(report.programs.len(), 5);
    let mut buckets = Vec::new();
    for (i, built) in report.programs.iter().enumerate() {
        let (index, ranges) = built.bucket.clone().ok_or("a bucket")?;
        assert_eq!((index, &ranges), (i, &program.buckets[i].ranges));
        assert!(built.stem.ends_with(&format!("-b{i}")), "{}", built.stem);
        let plan = LaunchPlan::from_json(&std::fs::read_to_string(&built.paths.plan)?)?;
        let (lo, hi) = ranges[0];
        assert_eq!((plan.dims.len(), plan.dims[0].lo, plan.dims[0].hi), (1, lo, hi));
        assert_eq!(plan.inputs[0].shape, vec![hi, 64], "built at the bucket's upper bound");
        // The CPU reference: the bucket's µGraph against the program at sizes of its sub-range.
        let bucket = &program.buckets[i];
        let dplan = DimPlan::analyze(&built.mugraph, &bucket.dims)?;
        let reference = DimPlan::analyze(&bucket.graph, &bucket.dims)?;
        let mut sizes = bucket.dims.verification_sizes(0, &dplan);
        sizes.push((lo + hi) / 2);
        for n in sizes {
            let run = reference.run_shapes(&bucket.graph, &[n])?;
            let x = support::inputs(&run.inputs, n as u64);
            let want = evaluate_at(&bucket.graph, &F32, &x, &run)?;
            let got = evaluate_at(&built.mugraph, &F32, &x, &dplan.run_shapes(&built.mugraph, &[n])?)?;
            assert_eq!(got[0].shape, vec![n, 32]);
            let e = max_scaled_error(&got[0], &want[0], 1e-4, 1e-4);
            assert!(e.is_some_and(|e| e <= 1.0), "bucket {i}, B = {n}: scaled error {e:?}");
        }
        let artifacts = ProgramArtifacts {
            name: "gated_mlp",
            fingerprint: leak(program.fingerprint_hash.clone()),
            cubin: Box::leak(std::fs::read(&built.paths.cubin)?.into_boxed_slice()),
            plan_json: leak(std::fs::read_to_string(&built.paths.plan)?),
            mugraph_json: leak(std::fs::read_to_string(&built.paths.mugraph)?),
        };
        buckets.push(Bucket { ranges: Box::leak(ranges.into_boxed_slice()), program: Program::new(artifacts) });
    }
    let buckets: &'static [Bucket] = Box::leak(buckets.into_boxed_slice());
    let last = buckets.last().ok_or("buckets")?.program.artifacts();
    let whole = Program::bucketed(ProgramArtifacts { cubin: &[], ..*last }, buckets);
    // The whole program's plan has the declared range.
    let plan = whole.plan()?;
    assert_eq!((plan.dims[0].lo, plan.dims[0].hi), (1, 64));
    let at = |b: usize| {
        [
            TensorDesc::new(&[b, 64], DType::F16),
            TensorDesc::new(&[64, 32], DType::F16),
            TensorDesc::new(&[64, 32], DType::F16),
        ]
    };
    for n in 1..=64 {
        let i = whole.bucket_of(&[n])?.ok_or("bucketed")?;
        let (lo, hi) = buckets[i].ranges[0];
        assert!(lo <= n && n <= hi, "B = {n} went to bucket {i} ({lo}..={hi})");
        // The bucket's own checks accept the size; the whole program's too.
        buckets[i].program.check_inputs(&at(n))?;
        whole.check_inputs(&at(n))?;
    }
    let e = whole.bucket_of(&[65]).expect_err("B = 65").to_string();
    assert!(e.contains("B in 1..=64") && e.contains("B = 65"), "{e}");
    let e = whole.check_inputs(&at(65)).expect_err("B = 65").to_string();
    assert!(e.contains("parameter `x`") && e.contains("B in 1..=64"), "{e}");
    // A bucket alone refuses sizes outside its sub-range (no kernel runs past its upper bound).
    let e = buckets[1].program.check_inputs(&at(9)).expect_err("B = 9 in 2..=8").to_string();
    assert!(e.contains("B in 2..=8"), "{e}");
    // One workspace serves every bucket.
    let bytes = whole.workspace_layout()?.bytes;
    for b in buckets {
        assert!(b.program.workspace_layout()?.bytes <= bytes);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
