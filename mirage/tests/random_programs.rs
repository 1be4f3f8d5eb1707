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
//!   checked the same way, their cubins and launch plans and the kernels file copied to `dir`
//!   for `tests/random_gpu.rs`, which runs them on the GPU.
//!
//! A program the search cannot superoptimize within the budget is built from its own kernel
//! graph (the build's fallback): it is still generated, compiled and checked, and the summary
//! counts such programs.

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use mirage::build::{BuildReport, Builder};
use mirage::cost::Arch;
use mirage::ir::DType;
use mirage::lower::lower_source;
use mirage::reference::run;
use mirage::search::SearchConfig;
use mirage::testing::compare::{ErrorModel, compare, reduction_len};
use mirage::testing::inputs::graph_inputs;
use mirage::testing::random::{INPUT_RANGE, random_program, random_programs_file};

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
        let inputs = graph_inputs(&program.graph, seeds.start + i as u64, |_| INPUT_RANGE);
        let want =
            run(&program.graph, &inputs).unwrap_or_else(|e| panic!("{}: reference of the program: {e}", built.name));
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
/// reference) and per function `<name>.cubin` and `<name>.plan.json`.
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
    }
    println!("packed {} random programs into {}", report.programs.len(), dest.display());
    let _ = std::fs::remove_dir_all(&dir);
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
