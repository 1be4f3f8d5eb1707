//! Writes the Triton check folder that `scripts/triton_check.py` runs on a GPU machine: one Triton
//! module per µGraph (the chosen µGraph of every benchmark program, every golden program with
//! every µGraph Mirage found for it, and the coverage programs in f16, bf16 and f32), the CPU
//! reference's outputs on seeded inputs, and `manifest.json` tying them together.
//!
//! ```text
//! cargo run --release -p mirage-rs-cli --example triton_pack -- OUT_DIR [--groups bench,golden,coverage]
//! ```
//!
//! Inputs are not stored: the manifest records a seed and a range per input (the ranges of
//! `mirage::testing::inputs`), and both sides compute the values with the same integer hash
//! ([`hash_values`]), then round them to the element type (`i32` ids: down). The manifest also
//! records each input's checksum, so a generator mismatch is caught before any comparison.
//! Expected outputs are raw little-endian f32, each with the tolerances of
//! `mirage::testing::compare` (element-wise `atol + rtol·|want|`, the relative L2 bound).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mirage::cache::Cache;
use mirage::ir::{DType, KernelGraph};
use mirage::reference::{HostTensor, run};
use mirage::search::{SearchConfig, superoptimize};
use mirage::testing::compare::{ErrorModel, reduction_len};
use mirage::testing::inputs::{coverage_input_range, golden_input_range, round_to};
use serde_json::{Value, json};

/// Base of every input seed.
const SEED: u64 = 0x2026_1201;

/// The f32 values of a tensor of `n` elements from `seed`, uniform in `range`: `x = hash(i,
/// seed)` (a 32-bit integer hash), `h = (x >> 8) / 2^24` (exact in f32) and `lo + h · (hi − lo)`
/// in f32 arithmetic. `scripts/triton_check.py` computes the same values.
fn hash_values(n: usize, seed: u64, range: &Range<f32>) -> Vec<f32> {
    const M32: u64 = 0xFFFF_FFFF;
    let width = range.end - range.start;
    (0..n as u64)
        .map(|i| {
            let mut x = (i.wrapping_mul(0x9E37_79B1).wrapping_add(seed)) & M32;
            x = ((x ^ (x >> 16)) * 0x045D_9F3B) & M32;
            x = ((x ^ (x >> 16)) * 0x045D_9F3B) & M32;
            x ^= x >> 16;
            let h = (x >> 8) as f32 * (1.0 / 16_777_216.0);
            range.start + h * width
        })
        .collect()
}

/// The input ranges of `mirage::testing::inputs`, as the GPU tests of the CUDA backend use them.
fn input_range(group: &str, name: &str, input: usize) -> Range<f32> {
    match group {
        // Coverage case names carry the element type: `coverage_f16_unary_exp`.
        "coverage" => coverage_input_range(name.splitn(3, '_').nth(2).unwrap_or(name), input),
        _ => golden_input_range(name.trim_start_matches("golden_"), input),
    }
}

/// The tolerances of `mirage::testing::compare` for an output of `dtype` whose reference is
/// `want`, fed by reductions of at most `reduction_len` terms.
fn tolerances(dtype: DType, reduction_len: usize, want: &[f32]) -> Value {
    let model = ErrorModel::new(dtype, reduction_len);
    let sum_sq: f64 = want.iter().filter(|w| w.is_finite()).map(|&w| f64::from(w) * f64::from(w)).sum();
    let scale = if want.is_empty() { 0.0 } else { (sum_sq / want.len() as f64).sqrt() };
    json!({
        "atol": model.atol(scale, want.len()), "rtol": model.rtol(), "rel_l2_bound": model.rel_l2_bound(),
        "reduction_len": reduction_len,
    })
}

/// A program of the check: its reference graph and the µGraphs to run as Triton modules.
struct Case {
    name: String,
    group: &'static str,
    program: KernelGraph,
    modules: Vec<(String, KernelGraph)>,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn cases(groups: &[String]) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    let want = |g: &str| groups.iter().any(|x| x == g);
    // The chosen µGraph of every benchmark program, from the committed search cache (re-verified).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache = Cache::at_workspace(&root);
    let cfg = SearchConfig { offline: Some(true), ..SearchConfig::default() };
    let benchmarks =
        if want("bench") { mirage::testing::benchmarks::benchmark_set().map_err(|e| e.to_string())? } else { vec![] };
    for b in benchmarks {
        eprintln!("benchmark {}: reading the chosen µGraph from {}", b.name, cache.dir().display());
        let chosen = superoptimize(&b.program, &cfg, Some(&cache)).map_err(|e| format!("{}: {e}", b.name))?;
        out.push(Case {
            name: b.name.to_string(),
            group: "bench",
            modules: vec![(b.name.to_string(), chosen.best.graph)],
            program: b.program,
        });
    }
    for case in mirage::testing::programs::golden_cases().into_iter().filter(|_| want("golden")) {
        let graphs: Vec<(String, KernelGraph)> =
            case.named_graphs()?.into_iter().map(|(n, g)| (format!("golden_{n}"), g)).collect();
        let program = graphs[0].1.clone();
        out.push(Case { name: format!("golden_{}", case.ident()), group: "golden", program, modules: graphs });
    }
    if want("coverage") {
        for dtype in [DType::F16, DType::Bf16, DType::F32] {
            for (name, g) in mirage::testing::programs::coverage_cases(dtype).map_err(|e| e.to_string())? {
                let name = format!("coverage_{}_{name}", dtype.name());
                out.push(Case { name: name.clone(), group: "coverage", program: g.clone(), modules: vec![(name, g)] });
            }
        }
    }
    Ok(out)
}

fn pack(dir: &Path, groups: &[String]) -> Result<(), String> {
    for sub in ["modules", "expected"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(|e| format!("creating {}: {e}", dir.join(sub).display()))?;
    }
    let mut programs = Vec::new();
    let mut bytes = 0usize;
    let mut n_modules = 0usize;
    for case in cases(groups)? {
        let mut inputs = Vec::new();
        let mut host = Vec::new();
        for (k, d) in case.program.inputs().into_iter().enumerate() {
            let n: usize = d.shape.iter().product();
            let seed = (SEED ^ (k as u64 * 0x632B_E5AB)) & 0xFFFF_FFFF;
            let range = input_range(case.group, &case.name, k);
            let values = hash_values(n, seed, &range);
            let checksum: f64 = values.iter().map(|&v| v as f64).sum();
            let first: Vec<f32> = values.iter().take(4).copied().collect();
            inputs.push(json!({
                "name": format!("x{k}"), "shape": d.shape, "strides": d.strides, "dtype": d.dtype.name(),
                "seed": seed, "range": [range.start, range.end], "checksum": checksum, "first": first,
            }));
            let rounded = values.into_iter().map(|v| round_to(d.dtype, v)).collect();
            host.push(HostTensor::new(d.shape.clone(), rounded).map_err(|e| e.to_string())?);
        }
        let shapes: Vec<Vec<usize>> = case.program.inputs().iter().map(|d| d.shape.clone()).collect();
        let reduction = reduction_len(shapes.iter().map(Vec::as_slice));
        eprintln!("{}: reference outputs", case.name);
        let expected = run(&case.program, &host).map_err(|e| format!("{}: reference: {e}", case.name))?;
        let mut outputs = Vec::new();
        for (k, (t, o)) in expected.iter().zip(case.program.outputs()).enumerate() {
            let file = format!("expected/{}.out{k}.f32", case.name);
            let raw: Vec<u8> = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            bytes += raw.len();
            write(&dir.join(&file), &raw)?;
            let dtype = case.program.desc(o.0).map_err(|e| e.to_string())?.dtype;
            outputs.push(json!({
                "shape": t.shape, "dtype": dtype.name(), "file": file,
                "tolerance": tolerances(dtype, reduction, &t.data),
            }));
        }
        let mut modules = Vec::new();
        for (name, g) in &case.modules {
            let source = mirage::triton::generate(g, name, None).map_err(|e| format!("{name}: {e}"))?;
            let file = format!("modules/{name}.py");
            bytes += source.len();
            write(&dir.join(&file), source.as_bytes())?;
            let kernels = mirage::codegen::default_blocks::lower_to_blocks(g).map_err(|e| e.to_string())?.num_kernels();
            modules.push(json!({ "name": name, "file": file, "kernels": kernels }));
            n_modules += 1;
        }
        programs.push(json!({
            "name": case.name, "group": case.group, "inputs": inputs, "outputs": outputs, "modules": modules,
        }));
    }
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let manifest: Value = json!({
        "format": "mirage-triton-check", "version": 2, "commit": commit, "programs": programs,
    });
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    bytes += text.len();
    write(&dir.join("manifest.json"), text.as_bytes())?;
    println!(
        "wrote {n_modules} Triton modules of {} programs to {} ({:.1} MiB)",
        programs.len(),
        dir.display(),
        bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!("usage: triton_pack OUT_DIR [--groups bench,golden,coverage]");
        ExitCode::from(2)
    };
    let (mut dir, mut groups) = (None, vec!["bench".to_string(), "golden".into(), "coverage".into()]);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--groups" => match it.next() {
                Some(g) => groups = g.split(',').map(str::to_string).collect(),
                None => return usage(),
            },
            flag if flag.starts_with("--") => return usage(),
            path => dir = Some(PathBuf::from(path)),
        }
    }
    let Some(dir) = dir else { return usage() };
    if let Some(bad) = groups.iter().find(|g| !["bench", "golden", "coverage"].contains(&g.as_str())) {
        eprintln!("unknown group `{bad}`: the groups are bench, golden and coverage");
        return usage();
    }
    match pack(&dir, &groups) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
