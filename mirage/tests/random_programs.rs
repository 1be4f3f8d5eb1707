//! Random programs through the whole compiler (`mirage::testing::random`): a kernels file of
//! generated `#[mugraph]` functions built by `mirage::build::Builder` exactly as a user's build
//! script builds it (lower → search with a small budget → fingerprint verification → code
//! generation → nvcc for sm_80 and sm_90a), then the chosen µGraph of every function evaluated by
//! the f32 reference against the program on random inputs.
//!
//! - [`random_programs_build_and_match_the_reference`] (CI): [`CI_PROGRAMS`] programs, seeds
//!   `0..CI_PROGRAMS`; `MIRAGE_RANDOM_SEEDS=a..b` builds another range.
//! - [`pack_random_programs_for_the_gpu`] (ignored; `scripts/gpu-pack.sh` runs it with
//!   `MIRAGE_RANDOM_PACK=dir` and `MIRAGE_CUDA_ARCHS=sm_90a`): [`GPU_PROGRAMS`] programs built and
//!   checked the same way, their cubins, launch plans and µGraphs and the kernels file copied to `dir`
//!   for `tests/random_gpu.rs`, which runs them on the GPU.
//!
//! Inputs come from `mirage::testing::inputs::finite_reference`: a program whose reference is not
//! finite on the first draw is compared on a later one (narrower ranges), and one with no finite
//! reference on any draw is printed and counted apart (more than
//! `MAX_WITHOUT_FINITE_REFERENCE` fail the test).
//!
//! A program the search cannot superoptimize within the budget is built from its own kernel
//! graph (the build's fallback): it is still generated, compiled and checked, and the summary
//! counts such programs.

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use mirage::build::{BuildReport, Builder};
use mirage::cost::Arch;
use mirage::ir::{DType, KernelGraph};
use mirage::lower::lower_source;
use mirage::reference::{HostTensor, run};
use mirage::search::SearchConfig;
use mirage::testing::compare::{Comparison, ErrorModel, compare, compare_with_spread, reduction_len};
use mirage::testing::inputs::{FiniteReference, finite_reference, graph_inputs};
use mirage::testing::mutants::{Class, classify, mutants};
use mirage::testing::random::{INPUT_RANGE, MAX_WITHOUT_FINITE_REFERENCE, random_program, random_programs_file};
use mirage::testing::rounding::{perturbed_run, rounding_spread, run_stored};

/// Programs built in CI.
const CI_PROGRAMS: u64 = 24;
/// Programs packed for the GPU run (the issue asks for at least 300).
const GPU_PROGRAMS: u64 = 320;
/// The seeds of the GPU pack: disjoint from CI's.
const GPU_SEEDS: Range<u64> = 1000..1000 + GPU_PROGRAMS;

/// The search of a random program: a small budget (the build's fallback takes over when it runs
/// out without a verified µGraph).
fn search_config() -> SearchConfig {
    SearchConfig {
        budget: Duration::from_secs(2),
        max_states: 20_000,
        top_k: 1,
        offline: Some(false),
        ..SearchConfig::for_arch(Arch::sm90())
    }
}

/// `MIRAGE_RANDOM_SEEDS=a..b`, or `default`.
fn seeds(default: Range<u64>) -> Range<u64> {
    let Ok(text) = std::env::var("MIRAGE_RANDOM_SEEDS") else { return default };
    let parsed = text.split_once("..").and_then(|(a, b)| Some(a.trim().parse().ok()?..b.trim().parse().ok()?));
    parsed.unwrap_or_else(|| panic!("MIRAGE_RANDOM_SEEDS={text:?}: expected a range of seeds, e.g. 0..24"))
}

/// The seed of a random program's name (`random_<seed>`).
fn program_seed(name: &str) -> u64 {
    name.trim_start_matches("random_").parse().unwrap_or_else(|e| panic!("{name}: not random_<seed> ({e})"))
}

/// Builds the programs of `seeds` in `dir` and checks every chosen µGraph against its program
/// in the f32 reference; prints a summary and fails with every mismatch.
fn build_and_check(seeds: Range<u64>, dir: &Path) -> BuildReport {
    let started = Instant::now();
    let file = dir.join("kernels.rs");
    let text = random_programs_file(seeds.clone());
    std::fs::write(&file, &text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let report = Builder::new()
        .file(&file)
        .out_dir(dir.join("out"))
        .cache_dir(dir.join("cache"))
        .cargo_directives(false)
        .search_config(search_config())
        .compile()
        .unwrap_or_else(|e| panic!("building the random programs of seeds {seeds:?} ({}):\n{e}", file.display()));
    let built_in = started.elapsed();
    let programs = lower_source(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.programs.len(), programs.len(), "one built program per function");
    let (mut failures, mut searched, mut kernels, mut outputs) = (Vec::new(), 0, 0, 0);
    let mut worst = (0.0f64, String::new());
    let mut fallbacks = std::collections::BTreeMap::new();
    // Programs whose reference needed other inputs to be finite, and those with none.
    let (mut redrawn, mut no_finite) = (Vec::new(), Vec::new());
    for (i, (built, program)) in report.programs.iter().zip(&programs).enumerate() {
        assert_eq!(built.name, program.name);
        searched += usize::from(built.searched);
        if !built.searched {
            // Why the build fell back to the program's own graph (the search's error, shortened).
            let why = built.search_report.lines().next().unwrap_or("").chars().take(90).collect::<String>();
            *fallbacks.entry(why).or_insert(0usize) += 1;
        }
        kernels += built.plan.kernels.len();
        let cubin =
            std::fs::read(&built.paths.cubin).unwrap_or_else(|e| panic!("{}: {e}", built.paths.cubin.display()));
        // A single-architecture cubin does not tell sm_90a from sm_90 (its ELF header has no room).
        let plain = |a: &str| a.trim_end_matches('a').to_string();
        let archs: Vec<String> =
            mirage::image_archs(&cubin).unwrap_or_default().iter().map(|a| plain(&a.to_string())).collect();
        let want_archs: Vec<String> = archs_built(&report).iter().map(|a| plain(a)).collect();
        if archs != want_archs {
            failures.push(format!("{}: the cubin holds code for {archs:?}, expected {want_archs:?}", built.name));
        }
        let reference = finite_reference(&program.graph, seeds.start + i as u64, |_| INPUT_RANGE)
            .unwrap_or_else(|e| panic!("{}: reference of the program: {e}", built.name));
        let FiniteReference { inputs, outputs: want, attempt, scale } = match reference {
            Ok(r) => r,
            Err(why) => {
                println!(
                    "NO FINITE REFERENCE {}: {why}\n{}",
                    built.name,
                    random_program(program_seed(&built.name)).source
                );
                no_finite.push(format!("{}: {why}", built.name));
                continue;
            }
        };
        if attempt > 0 {
            redrawn.push(format!("{} (draw {attempt}, ranges ×{scale})", built.name));
        }
        let got = match run(&built.mugraph, &inputs) {
            Ok(got) => got,
            Err(e) => {
                failures.push(format!("{}: the chosen µGraph does not run in the reference: {e}", built.name));
                continue;
            }
        };
        let k = reduction_len(program.params.iter().map(|p| p.desc.shape.as_slice()));
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            outputs += 1;
            let c = compare(&g.data, &w.data, &w.shape, ErrorModel::new(DType::F32, k))
                .unwrap_or_else(|e| panic!("{} output {o}: {e}", built.name));
            let ratio = c.worst.as_ref().map_or(0.0, |w| w.ratio());
            if ratio > worst.0 {
                worst = (ratio, format!("{} output {o}", built.name));
            }
            if !c.passed() {
                failures.push(format!("{} output {o}: {c}\n{}", built.name, built.search_report));
            }
        }
    }
    println!(
        "random programs {seeds:?}: {} built in {:.1} s ({searched} superoptimized, {} from their own graph; {kernels} kernels), \
         compiled by nvcc for {:?}; {outputs} outputs of the chosen µGraphs checked against the programs in the f32 \
         reference (worst element {:.3} of the tolerance, {}), {} mismatched",
        report.programs.len(),
        built_in.as_secs_f64(),
        report.programs.len() - searched,
        archs_built(&report),
        worst.0,
        worst.1,
        failures.len()
    );
    for (why, n) in &fallbacks {
        println!("  {n} built from their own graph: {why}");
    }
    println!(
        "  {} compared on redrawn inputs (the reference was not finite on the first draw){}; {} without a finite reference on any draw (at most {MAX_WITHOUT_FINITE_REFERENCE} allowed){}",
        redrawn.len(),
        if redrawn.is_empty() { String::new() } else { format!(": {}", redrawn.join(", ")) },
        no_finite.len(),
        if no_finite.is_empty() { String::new() } else { format!(": {}", no_finite.join("; ")) }
    );
    assert!(
        no_finite.len() <= MAX_WITHOUT_FINITE_REFERENCE,
        "{} programs have no finite reference on any draw of inputs:\n{}",
        no_finite.len(),
        no_finite.join("\n")
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    report
}

/// The architectures the build compiled for (`MIRAGE_CUDA_ARCHS`, sm_80 and sm_90a by default).
fn archs_built(report: &BuildReport) -> Vec<String> {
    let env = std::env::var(mirage::nvcc::ARCHS_ENV).ok();
    mirage::nvcc::resolve_archs(&report.arch, env.as_deref()).unwrap_or_else(|e| panic!("{e}"))
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mirage-random-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

#[test]
fn random_programs_build_and_match_the_reference() {
    let dir = scratch("ci");
    let seeds = seeds(0..CI_PROGRAMS);
    let report = build_and_check(seeds.clone(), &dir);
    assert_eq!(report.programs.len() as u64, seeds.end - seeds.start);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Builds [`GPU_PROGRAMS`] programs and writes them for `tests/random_gpu.rs` into
/// `$MIRAGE_RANDOM_PACK`: `kernels.rs` (the programs' source, lowered again there for the
/// reference) and per function `<name>.cubin`, `<name>.plan.json` and `<name>.mugraph.json`
/// (the chosen µGraph, whose rounding spread the GPU test's tolerance includes).
#[test]
#[ignore = "builds the GPU pack (scripts/gpu-pack.sh)"]
fn pack_random_programs_for_the_gpu() {
    let dest = std::env::var_os("MIRAGE_RANDOM_PACK").expect("MIRAGE_RANDOM_PACK: the directory to pack into");
    let dest = Path::new(&dest);
    let _ = std::fs::remove_dir_all(dest);
    std::fs::create_dir_all(dest).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
    let dir = scratch("pack");
    let seeds = seeds(GPU_SEEDS);
    let report = build_and_check(seeds.clone(), &dir);
    std::fs::copy(dir.join("kernels.rs"), dest.join("kernels.rs")).unwrap_or_else(|e| panic!("{e}"));
    for p in &report.programs {
        std::fs::copy(&p.paths.cubin, dest.join(format!("{}.cubin", p.name))).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dest.join(format!("{}.plan.json", p.name)), p.plan.to_json()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dest.join(format!("{}.mugraph.json", p.name)), p.mugraph.to_json())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    println!("packed {} random programs into {}", report.programs.len(), dest.display());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The outputs the H200 run of the GPU pack (seeds 1000..1320, generator of 7a09e3a) found
/// outside the tolerance of `compare` (375 of 380 matched): the program's text as packed, the
/// output, and what the GPU showed. None is a code-generation bug: each is a program that
/// amplifies the device's roundings on its inputs (the figures of
/// [`gpu_mismatches_are_the_programs_rounding_sensitivity`]).
const GPU_MISMATCHES: &[(&str, usize, &str)] = &[
    (
        // 4 of 1584 elements at 5.6× the tolerance (got −0.0333, want −0.0696): a layer norm over
        // rows of three nearly equal values of `p4 − p5`, stored in f16 before it is normalised.
        r"#[mugraph]
pub fn random_1255(p0: Tensor<f16, 16, 33, 2>, p1: Tensor<f16, 16, 33, 1>, p2: Tensor<f16, 1, 1, 3>, p3: Tensor<f16, 1, 1, 3>, p4: Tensor<f16, 16, 33, 3>, p5: Tensor<f16, 16, 33, 3>) -> (Tensor<f16, 16, 33, 3>, Tensor<f16, 16, 33, 3>) {
    let t0: Tensor<f16, 16, 33, 3> = concat(p0, p1, 2);
    let t1: Tensor<f16, 16, 33, 3> = (t0 * (t0.sum(1) * 0.030303030303030304));
    let t2 = rms_norm_weighted(p2, p3, 0.000001);
    let t3: Tensor<f16, 16, 33, 3> = (t1 / (square((t2 / (square(layer_norm(t0, 0.00001)) + 1.0))) + 1.0));
    let t4 = (p4 - p5);
    (t3, layer_norm(t4, 0.00001))
}",
        1,
        "f16 [16, 33, 3]: 4 elements at 5.6× the tolerance",
    ),
    (
        // Zero in exact arithmetic (a softmax over one element minus its mean over 65 rows): the
        // old tolerance scaled with the reference's 4e-9 noise.
        r"#[mugraph]
pub fn random_1163(p0: Tensor<f32, 24, 65, 1, 1>) -> Tensor<f32, 24, 65, 1, 1> {
    let t0 = softmax(tanh(softmax(tanh(p0), 2)), 0);
    (t0 - t0.sum(1) * 0.015384615384615385)
}",
        0,
        "f32 [24, 65, 1, 1]: the result is zero, compared under a tolerance of its noise",
    ),
    (
        // Relative L2 2.4e-2 > 1.6e-2, every element within tolerance: means over 64 rows of
        // bf16 values of both signs scale whole columns.
        r"#[mugraph]
pub fn random_1152(p0: Tensor<bf16, 64, 2>, p1: Tensor<bf16, 64, 2>, p2: Tensor<bf16, 64, 2>, p3: Tensor<bf16, 1, 2>) -> Tensor<bf16, 64, 2> {
    let t0 = (p0 - p1.sum(0) * 0.015625);
    ((t0 * (t0.sum(0) * 0.015625)) - layer_norm(rms_norm_weighted(p2, p3, 0.000001), 0.00001).sum(0) * 0.015625)
}",
        0,
        "bf16 [64, 2]: relative L2 2.4e-2 above its bound 1.6e-2",
    ),
    (
        // Relative L2 3.6e-3 > 2.0e-3, every element within tolerance: one mean over 48 f16
        // matmul results of both signs scales every element.
        r"#[mugraph]
pub fn random_1223(p0: Tensor<f16, 5, 3, 48>, p1: Tensor<f16, 48, 1, 16>, p2: Tensor<f16, 48, 16, 1>) -> Tensor<f16, 5, 3, 48> {
    let t0: Tensor<f16, 48, 1, 1> = p1.matmul(p2);
    let t1 = ((silu(p0) + 0.25) * (sum(t0, 0) * 0.020833333333333332));
    t1
}",
        0,
        "f16 [5, 3, 48]: relative L2 3.6e-3 above its bound 2.0e-3",
    ),
    (
        // One element at 1.13×: a layer norm over three nearly equal softmax values.
        r"#[mugraph]
pub fn random_1162(p0: Tensor<f32, 3, 8, 8>, p1: Tensor<f32, 12, 32, 3>) -> (Tensor<f32, 3, 8, 8>, Tensor<f32, 12, 32, 3>) {
    ((0.5 - rms_norm(p0)), layer_norm(softmax(tanh(p1), 1), 0.00001))
}",
        1,
        "f32 [12, 32, 3]: one element at 1.13× the tolerance",
    ),
];

/// Input sets per program in the tests of [`GPU_MISMATCHES`].
const MISMATCH_INPUTS: u64 = 24;

/// What the emulated device gives for `graph` on `inputs`: every stored f16/bf16 tensor rounded
/// to its type (`run_stored`), or for an f32 program every operation off by up to its rounding
/// (a Monte Carlo trial of the numbers the spread's trials do not use).
fn emulated_device(graph: &KernelGraph, inputs: &[HostTensor], dtype: DType, trial: u64) -> Vec<HostTensor> {
    if dtype != DType::F32 {
        return run_stored(graph, inputs).unwrap_or_else(|e| panic!("emulated device: {e}"));
    }
    let wide = perturbed_run(graph, inputs, 1_000 + trial).unwrap_or_else(|e| panic!("emulated device: {e}"));
    wide.into_iter()
        .map(|t| HostTensor { shape: t.shape, data: t.data.into_iter().map(|v| v as f32).collect() })
        .collect()
}

/// Regression for the five GPU mismatches of [`GPU_MISMATCHES`]: on the CPU, the device's
/// roundings (emulated: stored intermediates rounded to the program's type, or `f32` operations
/// perturbed) reproduce each failure of the old tolerance on some of [`MISMATCH_INPUTS`] input
/// sets, and the tolerance with the propagated rounding spread (`compare_with_spread`) accepts
/// every one. The µGraph is the program's own kernel graph, which stores every operator's result
/// (the most rounding any chosen µGraph does, and what the pack built for all five: the search
/// found no verified µGraph within its budget). The GPU pack (`scripts/gpu-pack.sh`) still holds
/// all five programs, so the H200 run checks them again with the new tolerance.
#[test]
fn gpu_mismatches_are_the_programs_rounding_sensitivity() {
    for &(source, output, gpu) in GPU_MISMATCHES {
        let program = &lower_source(source).unwrap_or_else(|e| panic!("{e}\n{source}"))[0];
        // The GPU pack runs them again on the H200 (with the new tolerance) as long as their
        // seeds generate them.
        let seed = program_seed(&program.name);
        assert!(GPU_SEEDS.contains(&seed), "{}", program.name);
        assert_eq!(
            random_program(seed).source.trim(),
            source.trim(),
            "seed {seed} generates another program now: the GPU pack no longer runs this regression"
        );
        let dtype = program.outputs[output].dtype;
        let k = reduction_len(program.params.iter().map(|p| p.desc.shape.as_slice()));
        let model = ErrorModel::new(dtype, k);
        let (mut old_failed, mut old_worst, mut new_worst) = (0, 0.0f64, 0.0f64);
        let mut figures = String::new();
        for trial in 0..MISMATCH_INPUTS {
            let inputs = graph_inputs(&program.graph, trial, |_| INPUT_RANGE);
            let want = run(&program.graph, &inputs).unwrap_or_else(|e| panic!("{}: {e}", program.name));
            let got = &emulated_device(&program.graph, &inputs, dtype, trial)[output];
            let w = &want[output];
            let spread = rounding_spread(&program.graph, &inputs, &want).unwrap_or_else(|e| panic!("{e}"));
            let old = compare(&got.data, &w.data, &w.shape, model).unwrap_or_else(|e| panic!("{e}"));
            let new = compare_with_spread(&got.data, &w.data, &w.shape, model, &spread[output])
                .unwrap_or_else(|e| panic!("{e}"));
            let ratio = |c: &Comparison| c.worst.as_ref().map_or(0.0, |e| e.ratio()).max(c.rel_l2 / c.rel_l2_bound);
            if !old.passed() {
                old_failed += 1;
                if ratio(&old) > old_worst {
                    figures = format!("inputs {trial}: {old}");
                }
            }
            old_worst = old_worst.max(ratio(&old));
            new_worst = new_worst.max(ratio(&new));
            assert!(
                new.passed(),
                "{} output {output} (GPU: {gpu}), inputs {trial}: the emulated device fails the tolerance with the rounding spread: {new}",
                program.name
            );
        }
        println!(
            "{} output {output} (GPU: {gpu}): the emulated device fails the old tolerance on {old_failed} of \
             {MISMATCH_INPUTS} input sets (worst {old_worst:.2}× of element or L2 bound; {figures}), passes with the \
             rounding spread on all (worst {new_worst:.2}×)",
            program.name
        );
        assert!(
            old_failed > 0,
            "{}: the emulated device never fails the old tolerance: the GPU's mismatch ({gpu}) is not reproduced",
            program.name
        );
    }
}

/// The rounding spread does not hide a wrong kernel: for each program of [`GPU_MISMATCHES`], a
/// "kernel" that computes a clearly inequivalent single-edit mutant of the program
/// (`mirage::testing::mutants`) is compared with the program's reference, with the spread of the
/// right graph. Where the old tolerance accepts the emulated device on these inputs (its model
/// holds there), the spread gives nothing away: every mutant the old tolerance rejects is
/// rejected. Where it does not (random_1163, whose result is zero, and random_1152, whose bf16
/// layer norm over two elements cannot tell its epsilon from the rounding of its operands), the
/// misses are printed: mutants at the reference's noise level or within the blur the program's
/// own bf16 storage gives.
#[test]
fn the_rounding_spread_does_not_hide_an_inequivalent_kernel() {
    let (mut checked, mut caught, mut where_sound) = (0, 0, 0);
    let mut missed = Vec::new();
    for &(source, output, _) in GPU_MISMATCHES {
        let program = &lower_source(source).unwrap_or_else(|e| panic!("{e}\n{source}"))[0];
        let k = reduction_len(program.params.iter().map(|p| p.desc.shape.as_slice()));
        let inputs = graph_inputs(&program.graph, 7, |_| INPUT_RANGE);
        let want = run(&program.graph, &inputs).unwrap_or_else(|e| panic!("{e}"));
        let spread = rounding_spread(&program.graph, &inputs, &want).unwrap_or_else(|e| panic!("{e}"));
        let model = |o: usize| ErrorModel::new(program.outputs[o].dtype, k);
        // Whether any output of `got` fails the comparison (another count or shape fails too).
        let fails = |got: &[HostTensor], spread: Option<&Vec<Vec<f64>>>| {
            got.len() != want.len()
                || got.iter().zip(&want).enumerate().any(|(o, (g, w))| {
                    let s = spread.map_or(&[][..], |s| s[o].as_slice());
                    g.data.len() != w.data.len()
                        || compare_with_spread(&g.data, &w.data, &w.shape, model(o), s).is_ok_and(|c| !c.passed())
                })
        };
        let device = emulated_device(&program.graph, &inputs, program.outputs[output].dtype, 7);
        let sound = !fails(&device, None);
        for m in mutants(&program.graph) {
            if !matches!(classify(&program.graph, &m.graph, &inputs, &want), Class::NotEquivalent) {
                continue;
            }
            let Ok(g) = &m.graph else { continue };
            let got = run(g, &inputs).unwrap_or_else(|e| panic!("{e}"));
            checked += 1;
            if fails(&got, Some(&spread)) {
                caught += 1;
                continue;
            }
            let what = format!("{}: {} mutant {:?}", program.name, m.kind, m.edit);
            if sound && fails(&got, None) {
                where_sound += 1;
                missed.push(what);
            } else {
                println!("not caught (the old tolerance rejects the emulated device here too): {what}");
            }
        }
    }
    println!("inequivalent mutants of the mismatch programs caught with the rounding spread: {caught} of {checked}");
    assert!(checked >= 100, "too few inequivalent mutants: {checked}");
    assert!(
        missed.is_empty(),
        "{where_sound} inequivalent mutants that the old tolerance rejects pass with the spread:\n{}",
        missed.join("\n")
    );
}

/// Seeds whose programs once failed (each one a regression test).
const REGRESSION_SEEDS: &[u64] = &[1163];

/// Regression (found by the GPU pack, seeds 1000..1320): seed 1163 generated
/// `rms_norm(layer_norm(p0, 1e-5))` over a last dim of one element, NaN for every input. Every
/// program of these seeds has a finite reference on its test inputs.
#[test]
fn programs_of_the_regression_seeds_have_finite_references() {
    for &seed in REGRESSION_SEEDS {
        let text = random_programs_file([seed]);
        let programs = lower_source(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        for program in &programs {
            let inputs = graph_inputs(&program.graph, seed, |_| INPUT_RANGE);
            let outputs = run(&program.graph, &inputs).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            for (o, out) in outputs.iter().enumerate() {
                let bad = out.data.iter().filter(|v| !v.is_finite()).count();
                assert_eq!(bad, 0, "seed {seed} output {o}: {bad} elements not finite\n{text}");
            }
        }
    }
}

/// Regression (the H200 run of the GPU pack with `MIRAGE_TEST_SEED=2442804611977152337`):
/// `random_1305` (bf16 [24, 8, 7], program 305 of the pack, so inputs of seed
/// `2442804611977152337 ^ 305`) has an f32 reference with elements that are not finite on those
/// inputs, which the run counted as a mismatch. The harness now draws other inputs until the
/// reference is finite: here a later draw gives a finite reference, which is what the GPU test
/// compares with.
#[test]
fn random_1305_is_compared_on_inputs_where_its_reference_is_finite() {
    let seed: u64 = 2_442_804_611_977_152_337 ^ 305;
    assert_eq!(seed, 2_442_804_611_977_152_096);
    let text = random_programs_file([1305]);
    let program = &lower_source(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))[0];
    let first = graph_inputs(&program.graph, seed, |_| INPUT_RANGE);
    let want = run(&program.graph, &first).unwrap_or_else(|e| panic!("{e}"));
    let bad: usize = want.iter().map(|t| t.data.iter().filter(|v| !v.is_finite()).count()).sum();
    println!("{text}first draw: {bad} reference elements not finite");
    assert!(bad > 0, "the first draw's reference is finite now: the regression no longer reproduces\n{text}");
    let r = finite_reference(&program.graph, seed, |_| INPUT_RANGE)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|why| panic!("random_1305: {why}"));
    println!("finite on draw {} (ranges ×{})", r.attempt, r.scale);
    assert!(r.attempt > 0);
    assert!(r.outputs.iter().all(|t| t.data.iter().all(|v| v.is_finite())));
    assert_eq!(r.outputs, run(&program.graph, &r.inputs).unwrap_or_else(|e| panic!("{e}")));
}

#[test]
fn random_programs_are_reproducible_and_lower() {
    for seed in 0..300 {
        let p = random_program(seed);
        assert_eq!(p, random_program(seed));
        let lowered = lower_source(&p.source).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", p.source));
        assert_eq!(lowered.len(), 1);
        assert_eq!(lowered[0].name, p.name);
    }
}

#[test]
fn random_programs_cover_every_rank_element_type_and_operator() {
    let sources: Vec<String> = (0..300).map(|s| random_program(s).source).collect();
    for dtype in ["f16", "bf16", "f32"] {
        assert!(sources.iter().any(|s| s.contains(&format!("Tensor<{dtype},"))), "{dtype}");
    }
    for needle in [
        "matmul",
        "rms_norm(",
        "rms_norm_weighted",
        "layer_norm",
        "softmax",
        "concat",
        "sum(",
        "max(",
        "#[strides",
        "let ",
    ] {
        assert!(sources.iter().any(|s| s.contains(needle)), "no program uses {needle}");
    }
    let programs: Vec<_> = sources.iter().map(|s| lower_source(s).unwrap_or_else(|e| panic!("{e}"))).collect();
    for rank in 1..=4 {
        assert!(programs.iter().any(|p| p[0].outputs[0].shape.len() == rank), "no result of rank {rank}");
    }
    assert!(programs.iter().any(|p| p[0].outputs.len() == 2), "no program with two results");
    let odd = programs.iter().filter(|p| p[0].params.iter().any(|q| q.desc.shape.iter().any(|d| d % 2 == 1 && *d > 1)));
    assert!(odd.count() > 100, "odd sizes are common");
}
