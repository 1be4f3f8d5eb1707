//! The GPU benchmark (docs/ARCHITECTURE.md §12): every benchmark program through the real `#[mugraph]` path
//! (the typed launchers of `examples/kernels/mod.rs`, built by this package's build.rs with
//! `mirage::build::compile`), then the generality set when the package was built with
//! `MIRAGE_GENERALITY=1` (`benches/kernels/generality.rs`: decode projections of three models at
//! 1 and 16 rows in bf16 and f16, an f32 gated MLP, run through their programs' executors), then
//! the corpus when it was built with `MIRAGE_CORPUS=1` (`benches/kernels/corpus.rs`: layer pieces
//! with norms and residuals as people write them, three models at 1 and 16 rows in bf16), then the
//! decode-attention group when it was built with `MIRAGE_ATTENTION=1` (`benches/kernels/attention.rs`:
//! one decode step with the safe softmax, 32 heads × 4096 keys in bf16 and f16, and grouped-query),
//! each checked against the CPU reference interpreter first (element by element with
//! `mirage::testing::compare`, outputs NaN-poisoned; the seed is printed and `MIRAGE_TEST_SEED`
//! replays it), then timed with CUDA events (L2 flushed before each launch, median of many launches, random
//! inputs at the scales of the PyTorch baselines, `benches/py/torch_baselines.py`).
//!
//! ```text
//! cargo bench --bench gpu -- [--torch torch.json] [--out DIR] [--commit SHA] [--date YYYY-MM-DD] [--iters N] [CASE ...]
//! ```
//!
//! With `--torch` (the JSON of `torch_baselines.py` from the same run on the same machine) the
//! table puts each case next to the best PyTorch variant, the hand-fused Triton kernel (when
//! `triton_fused.py --json` added it to that file), the memory floor (bytes read and
//! written once at the measured copy bandwidth) and one launch; `--out` writes the table
//! (`gpu-bench.md`) and the JSON (`gpu-bench.json`) there. Exits with an error when a case
//! mismatches the reference; without a GPU it says so and exits 0.

#[cfg(mirage_attention)]
#[path = "kernels/attention.rs"]
mod attention;
#[path = "../examples/common/mod.rs"]
mod common;
#[cfg(mirage_corpus)]
#[path = "kernels/corpus.rs"]
mod corpus;
#[cfg(mirage_dims_bench)]
#[path = "kernels/dims.rs"]
mod dims;
#[cfg(mirage_generality)]
#[path = "kernels/generality.rs"]
mod generality;
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

/// A case of one of the bench's optional groups (`generality::name`, `corpus::name`,
/// `attention::name`): its program run through the executor (any element types), its inputs drawn
/// in `[-scale, scale)` per input.
#[allow(unused_macros)] // every group that uses it is behind its build switch
macro_rules! executor_case {
    ($group:ident :: $name:ident, [$($scale:expr),+]) => {
        common::Case {
            name: stringify!($name),
            program: &$group::$name::PROGRAM,
            launch: |gpu, inputs| {
                let args: Vec<mirage::TensorArg<'_>> = inputs.iter().map(mirage::AnyTensor::as_arg).collect();
                $group::$name::PROGRAM.run(gpu.stream(), &args)
            },
            scales: &[$($scale),+],
        }
    };
}

/// Declares the generality cases of one model: QKV, gate/up and down at 1 and 16 rows in bf16
/// and f16 (activations in [-1, 1), weights in [-0.02, 0.02), as torch_baselines.py scales
/// them).
#[cfg(mirage_generality)]
macro_rules! model_cases {
    ($out:ident; $($qkv:ident, $gateup:ident, $down:ident);+ $(;)?) => {
        $(
            $out.push(executor_case!(generality::$qkv, [1.0, 0.02]));
            $out.push(executor_case!(generality::$gateup, [1.0, 0.02, 0.02]));
            $out.push(executor_case!(generality::$down, [1.0, 1.0, 0.02]));
        )+
    };
}

/// The generality set (`benches/kernels/generality.rs`): layer projections of three models at
/// decode, and an f32 gated MLP; built when the package was built with `MIRAGE_GENERALITY=1`.
#[cfg(mirage_generality)]
fn generality_cases() -> Vec<common::Case> {
    let mut v = Vec::new();
    model_cases!(v;
        llama1b_qkv_r1_bf16, llama1b_gateup_r1_bf16, llama1b_down_r1_bf16;
        llama1b_qkv_r16_bf16, llama1b_gateup_r16_bf16, llama1b_down_r16_bf16;
        llama1b_qkv_r1_f16, llama1b_gateup_r1_f16, llama1b_down_r1_f16;
        llama1b_qkv_r16_f16, llama1b_gateup_r16_f16, llama1b_down_r16_f16;
        qwen06b_qkv_r1_bf16, qwen06b_gateup_r1_bf16, qwen06b_down_r1_bf16;
        qwen06b_qkv_r16_bf16, qwen06b_gateup_r16_bf16, qwen06b_down_r16_bf16;
        qwen06b_qkv_r1_f16, qwen06b_gateup_r1_f16, qwen06b_down_r1_f16;
        qwen06b_qkv_r16_f16, qwen06b_gateup_r16_f16, qwen06b_down_r16_f16;
        qwen7b_qkv_r1_bf16, qwen7b_gateup_r1_bf16, qwen7b_down_r1_bf16;
        qwen7b_qkv_r16_bf16, qwen7b_gateup_r16_bf16, qwen7b_down_r16_bf16;
        qwen7b_qkv_r1_f16, qwen7b_gateup_r1_f16, qwen7b_down_r1_f16;
        qwen7b_qkv_r16_f16, qwen7b_gateup_r16_f16, qwen7b_down_r16_f16;
    );
    v.push(executor_case!(generality::llama1b_gateup_r8_f32, [1.0, 0.02, 0.02]));
    v
}

/// Without `MIRAGE_GENERALITY=1` at build time the generality set is not built: no cases.
#[cfg(not(mirage_generality))]
fn generality_cases() -> Vec<common::Case> {
    Vec::new()
}

/// Declares the corpus cases of one model at one row count: norm + QKV, attention output +
/// residual, norm + gated MLP, down + residual, MLP block, final norm + LM head (activations and
/// gains in [-1, 1), weights in [-0.02, 0.02), as torch_baselines.py scales them).
#[cfg(mirage_corpus)]
macro_rules! corpus_model {
    ($out:ident; $($qkv:ident, $o:ident, $gated:ident, $down:ident, $block:ident, $lm:ident);+ $(;)?) => {
        $(
            $out.push(executor_case!(corpus::$qkv, [1.0, 1.0, 0.02]));
            $out.push(executor_case!(corpus::$o, [1.0, 1.0, 0.02]));
            $out.push(executor_case!(corpus::$gated, [1.0, 1.0, 0.02, 0.02]));
            $out.push(executor_case!(corpus::$down, [1.0, 1.0, 1.0, 0.02]));
            $out.push(executor_case!(corpus::$block, [1.0, 1.0, 0.02, 0.02, 0.02]));
            $out.push(executor_case!(corpus::$lm, [1.0, 1.0, 0.02]));
        )+
    };
}

/// The corpus (`benches/kernels/corpus.rs`): decode-time pieces of a pre-norm layer as written,
/// three models at 1 and 16 rows in bf16; built when the package was built with
/// `MIRAGE_CORPUS=1`.
#[cfg(mirage_corpus)]
fn corpus_cases() -> Vec<common::Case> {
    let mut v = Vec::new();
    corpus_model!(v;
        llama1b_norm_qkv_r1_bf16, llama1b_o_resid_r1_bf16, llama1b_norm_gated_r1_bf16,
        llama1b_down_resid_r1_bf16, llama1b_mlp_block_r1_bf16, llama1b_norm_lm_head_r1_bf16;
        llama1b_norm_qkv_r16_bf16, llama1b_o_resid_r16_bf16, llama1b_norm_gated_r16_bf16,
        llama1b_down_resid_r16_bf16, llama1b_mlp_block_r16_bf16, llama1b_norm_lm_head_r16_bf16;
        qwen05b_norm_qkv_r1_bf16, qwen05b_o_resid_r1_bf16, qwen05b_norm_gated_r1_bf16,
        qwen05b_down_resid_r1_bf16, qwen05b_mlp_block_r1_bf16, qwen05b_norm_lm_head_r1_bf16;
        qwen05b_norm_qkv_r16_bf16, qwen05b_o_resid_r16_bf16, qwen05b_norm_gated_r16_bf16,
        qwen05b_down_resid_r16_bf16, qwen05b_mlp_block_r16_bf16, qwen05b_norm_lm_head_r16_bf16;
        mistral7b_norm_qkv_r1_bf16, mistral7b_o_resid_r1_bf16, mistral7b_norm_gated_r1_bf16,
        mistral7b_down_resid_r1_bf16, mistral7b_mlp_block_r1_bf16, mistral7b_norm_lm_head_r1_bf16;
        mistral7b_norm_qkv_r16_bf16, mistral7b_o_resid_r16_bf16, mistral7b_norm_gated_r16_bf16,
        mistral7b_down_resid_r16_bf16, mistral7b_mlp_block_r16_bf16, mistral7b_norm_lm_head_r16_bf16;
    );
    v
}

/// Without `MIRAGE_CORPUS=1` at build time the corpus is not built: no cases.
#[cfg(not(mirage_corpus))]
fn corpus_cases() -> Vec<common::Case> {
    Vec::new()
}

/// The decode-attention group (`benches/kernels/attention.rs`): one decode step with the safe
/// softmax, 32 heads × 1 row in bf16 and f16, and grouped-query (8 KV heads × 4, 8 and 16 rows),
/// 512 to 32768 keys, head dims 64 and 128; built when the package was built with
/// `MIRAGE_ATTENTION=1`.
#[cfg(mirage_attention)]
fn attention_cases() -> Vec<common::Case> {
    // Q and K uniform in [-1.7, 1.7) (variance ≈ 1, as torch_baselines.py's randn): the scaled
    // logits have a standard deviation of about 1; V in [-1, 1).
    vec![
        executor_case!(attention::attn_decode_h32_n4096_d128_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_decode_h32_n4096_d128_f16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g4_n4096_d128_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g8_n4096_d128_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g16_n4096_d128_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g4_n4096_d128_f16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g4_n512_d128_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g4_n32768_d128_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_decode_h32_n4096_d64_bf16, [1.7, 1.7, 1.0]),
        executor_case!(attention::attn_gqa_kv8_g4_n4096_d64_bf16, [1.7, 1.7, 1.0]),
    ]
}

/// Without `MIRAGE_ATTENTION=1` at build time the decode-attention group is not built: no cases.
#[cfg(not(mirage_attention))]
fn attention_cases() -> Vec<common::Case> {
    Vec::new()
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
    let mut programs = mirage::lower::lower_source(include_str!("../examples/kernels/mod.rs"))?;
    if cfg!(mirage_generality) {
        programs.extend(mirage::lower::lower_source(include_str!("kernels/generality.rs"))?);
    }
    if cfg!(mirage_corpus) {
        programs.extend(mirage::lower::lower_source(include_str!("kernels/corpus.rs"))?);
    }
    if cfg!(mirage_attention) {
        programs.extend(mirage::lower::lower_source(include_str!("kernels/attention.rs"))?);
    }

    let mut rows = BTreeMap::new();
    let mut table = String::new();
    writeln!(
        table,
        "| case | ours µs | kernels | worst element / tol. | rel. L2 err | best PyTorch µs (variant) | speedup | Triton µs | floor µs | launch µs | ours / max(floor, launch) |"
    )?;
    writeln!(table, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    let mut failures = Vec::new();
    let cases: Vec<common::Case> = common::all_cases()
        .into_iter()
        .chain(generality_cases())
        .chain(corpus_cases())
        .chain(attention_cases())
        .collect();
    for case in cases.iter().filter(|c| args.cases.is_empty() || args.cases.iter().any(|n| n == c.name)) {
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
        let triton = trow.and_then(|r| r["triton"].as_f64());
        let floor = copy_bw.map(|bw| io_bytes as f64 / bw * 1e6);
        // Weight-bound: the memory floor is at least twice one launch (judged against the floor).
        let weight_bound = match (floor, launch_us) {
            (Some(f), Some(l)) => Some(f >= 2.0 * l),
            _ => None,
        };
        let bound = match (floor, launch_us) {
            (Some(f), Some(l)) => Some(f.max(l)),
            (f, l) => f.or(l),
        };
        writeln!(
            table,
            "| {} | {:.1} | {} | {:.2}{} | {:.1e} | {} | {} | {} | {} | {} | {} |",
            case.name,
            stats.median_us,
            plan.kernels.len(),
            checked.worst_element(),
            if correct { "" } else { " WRONG" },
            checked.worst_rel_l2(),
            best.map_or("-".to_string(), |(k, v)| format!("{v:.1} ({k})")),
            or_dash(best.map(|(_, v)| v / stats.median_us), 2),
            or_dash(triton, 1),
            or_dash(floor, 1),
            or_dash(launch_us, 1),
            or_dash(bound.map(|b| stats.median_us / b), 2),
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
                "weight_bound": weight_bound,
                "fraction_of_copy_bandwidth": floor.map(|f| f / stats.median_us),
                "triton_us": triton,
                "best_torch_us": best.map(|b| b.1),
                "best_torch_variant": best.map(|b| b.0),
                "speedup_vs_best_torch": best.map(|(_, v)| v / stats.median_us),
                "torch": trow.cloned(),
                "launches": plan.kernels.iter().map(|k| json!({"name": k.name, "grid": k.grid, "threads": k.threads, "smem_bytes": k.smem_bytes})).collect::<Vec<_>>(),
            }),
        );
    }
    if args.cases.is_empty() || args.cases.iter().any(|n| n == "dims") {
        dims_group(&gpu, args.iters, &mut table, &mut rows, &mut failures)?;
    }
    // The attention rows of the `dims` group, also alone as case `dims_attention`.
    if args.cases.is_empty() || args.cases.iter().any(|n| n == "dims" || n == "dims_attention") {
        dims_attention(&gpu, args.iters, torch.as_ref(), &mut table, &mut rows, &mut failures)?;
    }
    if rows.keys().any(|k| k.starts_with("gated_mlp_over_b@") || k.starts_with("attn_decode_over_s@")) {
        criterion_table(&rows, &mut table)?;
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

/// One runtime-sized program of the `dims` group (`benches/kernels/dims.rs`): built once, built as
/// size buckets, and its fixed-shape builds by size.
#[cfg_attr(not(mirage_dims_bench), allow(dead_code))]
struct SizedCase {
    variable: &'static mirage::Program,
    bucketed: &'static mirage::Program,
    fixed: Vec<(usize, &'static mirage::Program)>,
}

#[cfg_attr(not(mirage_dims_bench), allow(dead_code))]
impl SizedCase {
    /// The fixed-shape build at size `n`, if there is one.
    fn fixed_at(&self, n: usize) -> Option<&'static mirage::Program> {
        self.fixed.iter().find(|f| f.0 == n).map(|f| f.1)
    }
}

/// The programs of the `dims` group: the gated MLP over `B` (fixed builds at every size the group
/// runs: the examples' at 1 and 8, the others from `dims.rs`), and decode attention over `S`
/// (fixed builds at every size it runs).
#[cfg(mirage_dims_bench)]
fn dims_programs() -> Option<[SizedCase; 2]> {
    let gated = SizedCase {
        variable: &dims::gated_mlp_over_b::PROGRAM,
        bucketed: &dims::gated_mlp_over_b_buckets::PROGRAM,
        fixed: vec![
            (1, &kernels::gated_mlp_bs1::PROGRAM),
            (2, &dims::gated_mlp_bs2::PROGRAM),
            (3, &dims::gated_mlp_bs3::PROGRAM),
            (8, &kernels::gated_mlp_bs8::PROGRAM),
            (17, &dims::gated_mlp_bs17::PROGRAM),
            (31, &dims::gated_mlp_bs31::PROGRAM),
            (33, &dims::gated_mlp_bs33::PROGRAM),
            (48, &dims::gated_mlp_bs48::PROGRAM),
            (63, &dims::gated_mlp_bs63::PROGRAM),
            (64, &dims::gated_mlp_bs64::PROGRAM),
        ],
    };
    let attention = SizedCase {
        variable: &dims::attn_decode_over_s::PROGRAM,
        bucketed: &dims::attn_decode_over_s_buckets::PROGRAM,
        fixed: vec![
            (1, &dims::attn_decode_s1::PROGRAM),
            (3, &dims::attn_decode_s3::PROGRAM),
            (16, &dims::attn_decode_s16::PROGRAM),
            (17, &dims::attn_decode_s17::PROGRAM),
            (255, &dims::attn_decode_s255::PROGRAM),
            (256, &dims::attn_decode_s256::PROGRAM),
            (512, &dims::attn_decode_s512::PROGRAM),
            (4096, &dims::attn_decode_s4096::PROGRAM),
            (4097, &dims::attn_decode_s4097::PROGRAM),
            (8191, &dims::attn_decode_s8191::PROGRAM),
            (16384, &dims::attn_decode_s16384::PROGRAM),
            (32767, &dims::attn_decode_s32767::PROGRAM),
            (32768, &dims::attn_decode_s32768::PROGRAM),
        ],
    };
    Some([gated, attention])
}

/// Without `MIRAGE_DIMS_BENCH=1` at build time the `dims` group is not built: no rows.
#[cfg(not(mirage_dims_bench))]
fn dims_programs() -> Option<[SizedCase; 2]> {
    None
}

/// The `dims` group (case name `dims`; built with `MIRAGE_DIMS_BENCH=1`):
/// the gated MLP for `B` in 1..=64 (`benches/kernels/dims.rs`) built once and built as six size
/// buckets (the default ladder and a bound at 48), next to a fixed-shape build at each of the ten sizes it runs (1, 2, 3, 8, 17, 31,
/// 33, 48, 63, 64; the examples' `gated_mlp_bs1`/`bs8` at 1 and 8), on the same inputs, timed the
/// same way (CUDA events, L2 flushed, median of `iters` launches; the bucketed program through
/// its dispatcher); both variable builds' outputs at each B are checked against the CPU
/// reference first (ratio `-` where no fixed build exists). A second table: B, single-build µs, bucketed µs (and the bucket), fixed µs, the
/// ratios; [`criterion_table`] sums both groups up against issue 16's bar.
fn dims_group(
    gpu: &Gpu,
    iters: usize,
    table: &mut String,
    rows: &mut BTreeMap<String, Value>,
    failures: &mut Vec<String>,
) -> Result<(), Box<dyn Error>> {
    use mirage::testing::compare::ErrorModel;
    use mirage::{AnyTensor, DType, TensorArg};
    let Some([case, _]) = dims_programs() else { return Ok(()) };
    let (variable, bucketed) = (case.variable, case.bucketed);
    let lowered = mirage::lower::lower_source(include_str!("kernels/dims.rs"))?;
    let source = lowered.iter().find(|p| p.name == "gated_mlp_over_b").ok_or("no #[mugraph] fn gated_mlp_over_b")?;
    let sized = mirage::dims::DimPlan::analyze(&source.graph, &source.dims)?;
    let vplan = variable.plan()?;
    let stream = gpu.stream();
    // Issue 16's bar: ≥ 10 sizes, 1, 3, 17 and the range's ends among them, each beside a
    // fixed-shape build of its size.
    let sizes = [1, 2, 3, 8, 17, 31, 33, 48, 63, 64];
    writeln!(table)?;
    writeln!(
        table,
        "| gated MLP 4096², B | one build µs (B = 1..=64) | bucketed µs (bucket) | fixed µs | one build / fixed | bucketed / fixed | worst element / tol. |"
    )?;
    writeln!(table, "|---:|---:|---:|---:|---:|---:|---:|")?;
    for b in sizes {
        let fixed = case.fixed_at(b);
        let specs = vplan.inputs_at(&[b]);
        let scales = [1.0f32, 0.02, 0.02];
        let (inputs, want) = sized_inputs(stream, &source.graph, &sized, &specs, "gated_mlp_over_b", b, &scales)?;
        let args: Vec<TensorArg<'_>> = inputs.iter().map(AnyTensor::as_arg).collect();
        let model = ErrorModel::new(DType::F16, 4096);
        let programs = [("gated_mlp_over_b", variable), ("gated_mlp_over_b_buckets", bucketed)];
        let (worst, correct) = check_sized(stream, &args, &programs, &want[0], model, &format!("B = {b}"), failures)?;
        let worst = worst.into_iter().fold(0.0f64, f64::max);
        let time = |p, buffers_of, sizes: &[usize]| time_sized(stream, iters, &args, p, buffers_of, sizes);
        let bucket = bucket_at(bucketed, b)?;
        let (lo, hi) = bucket.ranges[0];
        let (tv, tb) = (time(variable, variable, &[b])?, time(bucketed, &bucket.program, &[b])?);
        let tf = fixed.map(|f| time(f, f, &[])).transpose()?;
        let (ratio, bratio) = (tf.map(|f| tv / f), tf.map(|f| tb / f));
        writeln!(
            table,
            "| {b} | {tv:.1} | {tb:.1} ({lo}..={hi}) | {} | {} | {} | {worst:.2} |",
            or_dash(tf, 1),
            or_dash(ratio, 3),
            or_dash(bratio, 3)
        )?;
        println!(
            "gated_mlp_over_b at B = {b:2}: one build {tv:8.1} µs, bucketed {tb:8.1} µs (bucket {lo}..={hi}), fixed {} µs, ratios {} / {}",
            or_dash(tf, 1),
            or_dash(ratio, 3),
            or_dash(bratio, 3)
        );
        rows.insert(
            format!("gated_mlp_over_b@{b}"),
            json!({ "b": b, "variable_us": tv, "bucketed_us": tb, "bucket": [lo, hi], "fixed_us": tf, "ratio": ratio, "bucketed_ratio": bratio, "worst_element_of_tolerance": worst, "correct": correct }),
        );
    }
    Ok(())
}

/// The attention rows of the `dims` group (issue 16's bar): decode attention at the issue's shape
/// (32 query heads of one row, head dim 128, bf16, safe softmax, K `[heads, dim, S]`, V
/// `[heads, S, dim]`) built once for `S` in 1..=32768 (`attn_decode_over_s`) and as the default
/// size buckets (`attn_decode_over_s_buckets`: twelve, 2× apart up to 4096), next to a fixed-shape build of the
/// same program at each of the thirteen sizes it runs, on the same inputs, timed the same way
/// (CUDA events, L2 flushed, median of `iters` launches). Every output is checked against the CPU
/// reference first. Among the sizes are some that are not multiples of 8, where the sized builds
/// copy K through aligned-down windows (`mirage::window_copy`) instead of 16-byte `cp.async`.
/// A third table: S, one-build µs, bucketed µs (and the bucket), fixed µs, the ratios, PyTorch's
/// best of the torch JSON (row `attn_decode_over_s@S`, when given: `torch_baselines.py --set
/// dims`), the memory floor (bytes of Q, K, V and the output at the JSON's copy bandwidth).
fn dims_attention(
    gpu: &Gpu,
    iters: usize,
    torch: Option<&Value>,
    table: &mut String,
    rows: &mut BTreeMap<String, Value>,
    failures: &mut Vec<String>,
) -> Result<(), Box<dyn Error>> {
    use mirage::testing::compare::{ErrorModel, reduction_len};
    use mirage::{AnyTensor, DType, Program, TensorArg};
    let Some([_, case]) = dims_programs() else { return Ok(()) };
    let (variable, bucketed) = (case.variable, case.bucketed);
    let lowered = mirage::lower::lower_source(include_str!("kernels/dims.rs"))?;
    let source =
        lowered.iter().find(|p| p.name == "attn_decode_over_s").ok_or("no #[mugraph] fn attn_decode_over_s")?;
    let sized = mirage::dims::DimPlan::analyze(&source.graph, &source.dims)?;
    let vplan = variable.plan()?;
    let stream = gpu.stream();
    let copy_bw = torch.and_then(|t| t["copy_bw"].as_f64());
    // Issue 16's bar: ≥ 10 sizes, 1, 3, 17, 255, 4097 and the range's ends among them, each
    // beside a fixed-shape build of its size. 16 and 256 beside 17 and 255: the same builds on
    // K's vector path next to its window path (not a multiple of 8).
    let sizes = [1, 3, 16, 17, 255, 256, 512, 4096, 4097, 8191, 16384, 32767, 32768];
    writeln!(table)?;
    writeln!(
        table,
        "| decode attention 32 × 128 bf16, S | one build µs (S = 1..=32768) | bucketed µs (bucket) | fixed µs | one build / fixed | bucketed / fixed | best PyTorch µs (variant) | floor µs | worst element / tol. (one build, bucketed, fixed) |"
    )?;
    writeln!(table, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for s in sizes {
        let fixed = case.fixed_at(s);
        let specs = vplan.inputs_at(&[s]);
        // Q and K uniform in [-1.7, 1.7) (the attention group's scales), V in [-1, 1).
        let scales = [1.7f32, 1.7, 1.0];
        let (inputs, want) = sized_inputs(stream, &source.graph, &sized, &specs, "attn_decode_over_s", s, &scales)?;
        let args: Vec<TensorArg<'_>> = inputs.iter().map(AnyTensor::as_arg).collect();
        let model = ErrorModel::new(DType::Bf16, reduction_len(specs.iter().map(|d| d.shape.as_slice())));
        let programs: Vec<(&str, &'static Program)> =
            [("attn_decode_over_s", variable), ("attn_decode_over_s_buckets", bucketed)]
                .into_iter()
                .chain(fixed.map(|f| ("fixed", f)))
                .collect();
        let (worst, correct) = check_sized(stream, &args, &programs, &want[0], model, &format!("S = {s}"), failures)?;
        let time = |p, buffers_of, sizes: &[usize]| time_sized(stream, iters, &args, p, buffers_of, sizes);
        let bucket = bucket_at(bucketed, s)?;
        let (lo, hi) = bucket.ranges[0];
        let tv = time(variable, variable, &[s])?;
        let tb = time(bucketed, &bucket.program, &[s])?;
        let tf = fixed.map(|f| time(f, f, &[])).transpose()?;
        let io = bytes(&specs) + bytes(&vplan.outputs_at(&[s]));
        let floor = copy_bw.map(|bw| io as f64 / bw * 1e6);
        let ratio = tf.map(|f| tv / f);
        let bratio = tf.map(|f| tb / f);
        let trow = torch.map(|t| &t["rows"][format!("attn_decode_over_s@{s}")]).filter(|r| r.is_object());
        let best = trow.and_then(|r| {
            ["eager", "graph", "compile", "sdpa"]
                .iter()
                .filter_map(|k| r[*k].as_f64().map(|v| (*k, v)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
        });
        let worst_txt = worst.iter().map(|w| format!("{w:.2}")).collect::<Vec<_>>().join(", ");
        writeln!(
            table,
            "| {s} | {tv:.1} | {tb:.1} ({lo}..={hi}) | {} | {} | {} | {} | {} | {worst_txt}{} |",
            or_dash(tf, 1),
            or_dash(ratio, 3),
            or_dash(bratio, 3),
            best.map_or("-".to_string(), |(k, v)| format!("{v:.1} ({k})")),
            or_dash(floor, 1),
            if correct { "" } else { " WRONG" }
        )?;
        println!(
            "attn_decode_over_s at S = {s:5}: one build {tv:8.1} µs, bucketed {tb:8.1} µs (bucket {lo}..={hi}), fixed {} µs, ratios {} / {}, floor {} µs ({io} bytes)",
            or_dash(tf, 1),
            or_dash(ratio, 3),
            or_dash(bratio, 3),
            or_dash(floor, 1)
        );
        rows.insert(
            format!("attn_decode_over_s@{s}"),
            json!({ "s": s, "variable_us": tv, "bucketed_us": tb, "bucket": [lo, hi], "fixed_us": tf, "ratio": ratio, "bucketed_ratio": bratio, "best_torch_us": best.map(|b| b.1), "best_torch_variant": best.map(|b| b.0), "io_bytes": io, "floor_us": floor, "worst_element_of_tolerance": worst, "correct": correct }),
        );
    }
    Ok(())
}

/// Issue 16's closing table from the `dims` rows: per program and size, whether the one build and
/// the bucketed build were correct, their ratios to a fixed-shape build of the same size (`-`
/// where none is built), and whether the better of the two is within the issue's 1.15×; then a
/// count per program of sizes checked, correct, with a fixed build and within the bar.
fn criterion_table(rows: &BTreeMap<String, Value>, table: &mut String) -> Result<(), Box<dyn Error>> {
    const BAR: f64 = 1.15;
    writeln!(table)?;
    writeln!(
        table,
        "| issue 16 | size | correct | one build / fixed | bucketed / fixed | within {BAR}× (better of the two) |"
    )?;
    writeln!(table, "|---|---:|---|---:|---:|---|")?;
    for (program, dim) in [("gated_mlp_over_b", "b"), ("attn_decode_over_s", "s")] {
        let mut of: Vec<&Value> = rows
            .iter()
            .filter(|(k, _)| k.strip_prefix(program).is_some_and(|t| t.starts_with('@')))
            .map(|(_, v)| v)
            .collect();
        of.sort_by_key(|r| r[dim].as_u64());
        let (mut correct, mut fixed, mut within) = (0, 0, 0);
        for r in &of {
            let ok = r["correct"].as_bool() == Some(true);
            let (ratio, bratio) = (r["ratio"].as_f64(), r["bucketed_ratio"].as_f64());
            let best = match (ratio, bratio) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let pass = best.map(|b| b <= BAR);
            correct += usize::from(ok);
            fixed += usize::from(best.is_some());
            within += usize::from(pass == Some(true));
            writeln!(
                table,
                "| {program} | {} = {} | {} | {} | {} | {} |",
                dim.to_uppercase(),
                r[dim],
                if ok { "yes" } else { "NO" },
                or_dash(ratio, 3),
                or_dash(bratio, 3),
                pass.map_or("- (no fixed build)", |p| if p { "yes" } else { "NO" })
            )?;
        }
        writeln!(
            table,
            "| {program} | {} sizes | {correct} correct | | | {within} of {fixed} with a fixed build |",
            of.len()
        )?;
    }
    Ok(())
}

/// A `dims` row's inputs at size `n` of the program's one runtime-sized dim: `specs` random on
/// the host (input `i` uniform in `[-scales[i], scales[i])`, seeded by `{name}_{n}`) and uploaded
/// to `stream`, with the CPU reference's outputs of `graph` on them at `n` (`sized`: its dim plan).
fn sized_inputs(
    stream: &mirage::Stream,
    graph: &mirage::ir::KernelGraph,
    sized: &mirage::dims::DimPlan,
    specs: &[TensorDesc],
    name: &str,
    n: usize,
    scales: &[f32],
) -> Result<(Vec<mirage::AnyTensor>, Vec<mirage::reference::HostTensor>), Box<dyn Error>> {
    use mirage::testing::inputs::{random_inputs, seed};
    let host = random_inputs(specs, seed(&format!("{name}_{n}"))?, |i| -scales[i]..scales[i]);
    let inputs = specs
        .iter()
        .zip(&host)
        .map(|(d, h)| mirage::AnyTensor::upload_f32(stream, d, &h.data))
        .collect::<Result<_, _>>()?;
    let run = sized.run_shapes(graph, &[n])?;
    let want = mirage::eval::evaluate_at(graph, &mirage::reference::F32, &host, &run)?;
    Ok((inputs, want))
}

/// `v` with `precision` decimals, or `-` when there is none.
fn or_dash(v: Option<f64>, precision: usize) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.precision$}"))
}

/// The `dims` rows' check: each of `programs` (a label and a program of one output) runs on `args`
/// and is compared with the reference output `want` under `model`; each comparison is printed
/// with the label and `at` (the size), a failure is pushed to `failures`. Returns the worst element
/// error (a share of the tolerance) per program and whether all passed.
fn check_sized(
    stream: &mirage::Stream,
    args: &[mirage::TensorArg<'_>],
    programs: &[(&str, &'static mirage::Program)],
    want: &mirage::reference::HostTensor,
    model: mirage::testing::compare::ErrorModel,
    at: &str,
    failures: &mut Vec<String>,
) -> Result<(Vec<f64>, bool), Box<dyn Error>> {
    let mut worst = Vec::new();
    let mut correct = true;
    for (what, p) in programs {
        let got = p.run(stream, args)?[0].to_host_f32()?;
        let c = mirage::testing::compare::compare(&got, &want.data, &want.shape, model)?;
        println!("{what} at {at}: {c}");
        worst.push(c.worst.as_ref().map_or(0.0, |e| e.ratio()));
        if let Err(e) = c.check(&format!("{what} at {at}")) {
            correct = false;
            failures.push(e);
        }
    }
    Ok((worst, correct))
}

/// The median µs of `iters` launches of `p` on `args` at `sizes` (CUDA events, L2 flushed, 25
/// untimed first), its outputs and buffers allocated once (zeros) before. `buffers_of` is the
/// program whose plan's buffers `p` runs with (a bucketed program: the bucket's).
fn time_sized(
    stream: &mirage::Stream,
    iters: usize,
    args: &[mirage::TensorArg<'_>],
    p: &'static mirage::Program,
    buffers_of: &'static mirage::Program,
    sizes: &[usize],
) -> Result<f64, Box<dyn Error>> {
    use mirage::AnyTensor;
    let zeros = |specs: Vec<TensorDesc>| -> Result<Vec<AnyTensor>, mirage::RuntimeError> {
        specs.iter().map(|d| AnyTensor::upload_f32(stream, d, &vec![0.0; d.num_elements()])).collect()
    };
    let mut outs = zeros(p.plan()?.outputs_at(sizes))?;
    let mut bufs = zeros(buffers_of.plan()?.buffers_at(sizes))?;
    let stats = mirage::time_median(stream, 25, iters, true, || p.launch(stream, args, &mut outs, &mut bufs))?;
    Ok(stats.median_us)
}

/// The bucket of the bucketed one-dim program `bucketed` that runs size `n`.
fn bucket_at(bucketed: &'static mirage::Program, n: usize) -> Result<&'static mirage::Bucket, Box<dyn Error>> {
    let bucket = bucketed.bucket_of(&[n])?.ok_or_else(|| format!("{} is not bucketed", bucketed.name()))?;
    Ok(&bucketed.buckets()[bucket])
}
