//! The GPU benchmark of DESIGN §14: every benchmark program through the real `#[mugraph]` path
//! (the typed launchers of `examples/kernels/mod.rs`, built by this package's build.rs with
//! `mirage::build::compile`), each checked against the CPU reference interpreter first (element
//! by element with `mirage::testing::compare`, outputs NaN-poisoned; the seed is printed and
//! `MIRAGE_TEST_SEED` replays it), then timed with CUDA events (L2 flushed before each launch, median of many launches, random
//! inputs at the scales of `bench/torch_baselines.py`).
//!
//! ```text
//! cargo bench --bench gpu -- [--torch torch.json] [--out DIR] [--commit SHA] [--date YYYY-MM-DD] [--iters N] [CASE ...]
//! ```
//!
//! With `--torch` (the JSON of `torch_baselines.py` from the same run on the same machine) the
//! table puts each case next to the best PyTorch variant, the memory floor (bytes read and
//! written once at the measured copy bandwidth) and one launch; `--out` writes the table
//! (`gpu-bench.md`) and the JSON (`gpu-bench.json`) there. Exits with an error when a case
//! mismatches the reference; without a GPU it says so and exits 0.

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/kernels/mod.rs"]
mod kernels;

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;

use mirage::{Gpu, TensorDesc};
use serde_json::{Value, json};

struct Args {
    torch: Option<String>,
    out: Option<String>,
    commit: String,
    date: String,
    iters: usize,
    cases: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        torch: None,
        out: None,
        commit: "unknown".into(),
        date: "unknown".into(),
        iters: 300,
        cases: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--torch" => a.torch = Some(value("--torch")?),
            "--out" => a.out = Some(value("--out")?),
            "--commit" => a.commit = value("--commit")?,
            "--date" => a.date = value("--date")?,
            "--iters" => a.iters = value("--iters")?.parse().map_err(|e| format!("--iters: {e}"))?,
            // cargo bench passes --bench to harness-less benches.
            "--bench" => {}
            s if s.starts_with("--") => {
                return Err(format!(
                    "unknown option {s}; expected --torch, --out, --commit, --date, --iters or case names"
                ));
            }
            s => a.cases.push(s.to_string()),
        }
    }
    if a.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    Ok(a)
}

fn bytes(specs: &[TensorDesc]) -> usize {
    specs.iter().map(|s| s.num_elements() * s.dtype.size_bytes()).sum()
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("gpu bench: no GPU found ({e}); nothing measured");
            return Ok(());
        }
    };
    let device = gpu.info().to_string();
    println!("gpu bench: {device}, commit {}, {}", args.commit, args.date);
    let torch: Option<Value> = match &args.torch {
        Some(path) => Some(
            serde_json::from_str(&std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?)
                .map_err(|e| format!("{path}: {e}"))?,
        ),
        None => None,
    };
    let copy_bw = torch.as_ref().and_then(|t| t["copy_bw"].as_f64());
    let launch_us = torch.as_ref().and_then(|t| t["launch_us"].as_f64());
    let programs = mirage::lower::lower_source(include_str!("../examples/kernels/mod.rs"))?;

    let mut rows = BTreeMap::new();
    let mut table = String::new();
    writeln!(
        table,
        "| case | ours µs | kernels | worst element / tol. | rel. L2 err | best PyTorch µs (variant) | speedup | floor µs | launch µs | ours / max(floor, launch) |"
    )?;
    writeln!(table, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    let mut failures = Vec::new();
    for case in common::all_cases().iter().filter(|c| args.cases.is_empty() || args.cases.iter().any(|n| n == c.name)) {
        let lowered =
            programs.iter().find(|p| p.name == case.name).ok_or_else(|| format!("no #[mugraph] fn {}", case.name))?;
        let plan = case.program.plan()?;
        let checked = common::check(&gpu, case, lowered)?;
        let correct = checked.passed();
        if let Some(failure) = checked.failure(case.name) {
            failures.push(failure);
        }
        let stats = common::time(&gpu, case, &checked.inputs, 25, args.iters)?;
        let io_bytes = bytes(&plan.inputs) + bytes(&plan.outputs);
        let trow = torch.as_ref().map(|t| &t["rows"][case.name]).filter(|r| r.is_object());
        let best = trow.and_then(|r| {
            ["eager", "graph", "compile", "sdpa"]
                .iter()
                .filter_map(|k| r[*k].as_f64().map(|v| (*k, v)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
        });
        let floor = copy_bw.map(|bw| io_bytes as f64 / bw * 1e6);
        let bound = match (floor, launch_us) {
            (Some(f), Some(l)) => Some(f.max(l)),
            (f, l) => f.or(l),
        };
        let fmt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        writeln!(
            table,
            "| {} | {:.1} | {} | {:.2}{} | {:.1e} | {} | {} | {} | {} | {} |",
            case.name,
            stats.median_us,
            plan.kernels.len(),
            checked.worst_element(),
            if correct { "" } else { " WRONG" },
            checked.worst_rel_l2(),
            best.map_or("-".to_string(), |(k, v)| format!("{v:.1} ({k})")),
            fmt(best.map(|(_, v)| v / stats.median_us), 2),
            fmt(floor, 1),
            fmt(launch_us, 1),
            fmt(bound.map(|b| stats.median_us / b), 2),
        )?;
        println!(
            "{:22} ours {:8.1} µs (min {:.1}, max {:.1}), {} kernel(s), worst element {:.2} of the tolerance, rel. L2 error {:.1e}{}",
            case.name,
            stats.median_us,
            stats.min_us,
            stats.max_us,
            plan.kernels.len(),
            checked.worst_element(),
            checked.worst_rel_l2(),
            if correct { "" } else { "  WRONG" }
        );
        rows.insert(
            case.name.to_string(),
            json!({
                "ours_us": stats.median_us,
                "ours_min_us": stats.min_us,
                "ours_max_us": stats.max_us,
                "samples": stats.samples,
                "kernels": plan.kernels.len(),
                "rel_l2_error": checked.worst_rel_l2(),
                "worst_element_of_tolerance": checked.worst_element(),
                "correct": correct,
                "io_bytes": io_bytes,
                "floor_us": floor,
                "launch_us": launch_us,
                "ratio_to_bound": bound.map(|b| stats.median_us / b),
                "best_torch_us": best.map(|b| b.1),
                "best_torch_variant": best.map(|b| b.0),
                "speedup_vs_best_torch": best.map(|(_, v)| v / stats.median_us),
                "torch": trow.cloned(),
                "launches": plan.kernels.iter().map(|k| json!({"name": k.name, "grid": k.grid, "threads": k.threads, "smem_bytes": k.smem_bytes})).collect::<Vec<_>>(),
            }),
        );
    }
    println!();
    println!("{table}");
    let header = format!(
        "GPU benchmark, {}, {device}, commit {}; copy bandwidth {}, one launch {} (from torch_baselines.py in the same run); medians of {} launches, L2 flushed before each.\n\n",
        args.date,
        args.commit,
        copy_bw.map_or("-".into(), |b| format!("{:.2} TB/s", b / 1e12)),
        launch_us.map_or("-".into(), |l| format!("{l:.1} µs")),
        args.iters
    );
    if let Some(out) = &args.out {
        let dir = std::path::Path::new(out);
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("gpu-bench.md"), format!("{header}{table}"))?;
        let doc = json!({ "date": args.date, "device": device, "commit": args.commit, "copy_bw": copy_bw, "launch_us": launch_us, "iters": args.iters, "rows": rows });
        std::fs::write(dir.join("gpu-bench.json"), serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {0}/gpu-bench.md and {0}/gpu-bench.json", dir.display());
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ").into()) }
}
