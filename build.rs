//! Build script of the workspace's own package: compiles the CUDA sources of the integration
//! tests (`tests/cuda/*.cu`) to `$OUT_DIR/cuda/<name>.cubin` with `mirage::nvcc`, the way a
//! user's build script would, so tests can `include_bytes!` them; and generates and compiles the
//! kernels of every golden µGraph (`mirage/goldens/`) for the GPU golden test (`tests/golden_gpu.rs`);
//! and builds the `#[mugraph]` functions of the examples (`examples/kernels/mod.rs`), of the
//! tests (`tests/kernels/mod.rs`) and, with `MIRAGE_GENERALITY=1`, of the bench's generality set
//! (`benches/kernels/generality.rs`; likewise `MIRAGE_CORPUS=1`, `MIRAGE_ATTENTION=1` and
//! `MIRAGE_DIMS_BENCH=1` for its corpus, decode-attention and runtime-sized-dims groups) with
//! `mirage::build::compile`, exactly as a user's build.rs
//! does; and builds the megakernels of the test-mode graphs and overhead measurements
//! (`mirage::mpk::testmode`) for `tests/mpk_gpu.rs` and `examples/mpk_toy.rs`, and the decode
//! megakernels at real model widths (two layers always, for `tests/mpk_gpu.rs`; the whole
//! benchmark models with `MIRAGE_DECODE=1`, for `examples/decode.rs`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    match compile_test_kernels()
        .and_then(|()| golden_artifacts())
        .and_then(|()| mugraph_kernels())
        .and_then(|()| megakernels())
        .and_then(|()| decode_megakernels())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The bench's optional program groups: (environment variable, kernels file, cfg it sets for
/// `benches/gpu.rs`, what it is). Each is built only when its variable is `1`: verifying (or
/// searching) these programs at real shapes takes minutes of CPU time per build, so CI builds
/// without them and the GPU bench's pack sets the ones it runs.
const BENCH_GROUPS: [(&str, &str, &str, &str); 4] = [
    // 37 programs with weights of up to 136 M elements.
    ("MIRAGE_GENERALITY", "benches/kernels/generality.rs", "mirage_generality", "the generality set"),
    // 36 programs people write: decode-time layer pieces with norms and residuals.
    ("MIRAGE_CORPUS", "benches/kernels/corpus.rs", "mirage_corpus", "the corpus"),
    // Decode attention: 10 cases, 1–16 query rows per KV head, 512–32768 keys, head dims 64 and 128.
    ("MIRAGE_ATTENTION", "benches/kernels/attention.rs", "mirage_attention", "the decode-attention group"),
    // The gated MLP over B = 1..=64 and fixed builds beside it (4096², the bench's shape).
    ("MIRAGE_DIMS_BENCH", "benches/kernels/dims.rs", "mirage_dims_bench", "the runtime-sized dims group"),
];

/// The `#[mugraph]` functions of the examples and tests (and of the bench groups switched on in
/// [`BENCH_GROUPS`], each announced to the bench by its cfg): `mirage::build::compile`, the
/// user's path.
fn mugraph_kernels() -> Result<(), String> {
    let mut files = vec!["examples/kernels/mod.rs", "tests/kernels/mod.rs"];
    for (env, file, cfg, what) in BENCH_GROUPS {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo:rerun-if-env-changed={env}");
        match std::env::var(env).as_deref().map(str::trim) {
            Ok("1") => {
                files.push(file);
                println!("cargo:rustc-cfg={cfg}");
            }
            Ok("" | "0") | Err(_) => {}
            Ok(other) => return Err(format!("{env}={other:?}: expected 1 (build {what}) or 0")),
        }
    }
    mirage::build::compile(files).map(|_| ()).map_err(|e| e.to_string())
}

/// The megakernels of every test-mode graph, of the overhead measurements and of one graph whose
/// counter can never complete (for the watchdog test), for 132 workers (an H200), built with
/// `mirage::mpk::build` into `$OUT_DIR/mpk/`, listed in `$OUT_DIR/mpk/index.rs` as
/// `MEGAKERNELS: [Megakernel; N]`.
fn megakernels() -> Result<(), String> {
    use mirage::mpk::testmode::{cases, overhead_graphs};
    use mirage::mpk::{MpkOptions, StepGraph};
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let dest = out_dir.join("mpk");
    let mut opts = MpkOptions::default();
    opts.kernel.bulk_runs = bulk_runs()?;
    let nvcc = mirage::nvcc::CompileOptions { arch: Some("sm_90a".into()), ..Default::default() };
    let mut graphs: Vec<StepGraph> = cases().map_err(|e| e.to_string())?.into_iter().map(|c| c.graph).collect();
    graphs.extend(overhead_graphs(opts.workers, 256).map_err(|e| e.to_string())?);
    let mut names = Vec::new();
    for g in &graphs {
        mirage::mpk::build(g, &opts, &nvcc, &dest).map_err(|e| e.to_string())?;
        names.push(g.name().to_owned());
    }
    // The watchdog's test: a chain whose second task waits for one signal more than it gets.
    let chain = graphs.iter().find(|g| g.name() == "overhead_hop").ok_or("no overhead_hop graph")?;
    let mut hung = mirage::mpk::compile(chain, &opts).map_err(|e| e.to_string())?;
    hung.graph = rename(chain, "watchdog")?;
    let k = hung.sync.waits.iter().flatten().next().copied().ok_or("overhead_hop has no waits")?;
    hung.sync.counters[k].triggers += 1;
    let kernel = mirage::mpk::emit::generate(&hung).map_err(|e| e.to_string())?;
    let cubin = mirage::nvcc::compile_cubin(&kernel.source, &kernel.kernel, &nvcc).map_err(|e| e.to_string())?;
    write_if_changed(&dest.join("watchdog.cubin"), &cubin.bytes)?;
    write_if_changed(&dest.join("watchdog.mpk.json"), hung.plan(&kernel).to_json().as_bytes())?;
    names.push("watchdog".into());

    let mut index = format!(
        "/// The megakernels of `mirage::mpk::testmode` (and `watchdog`), by name.\npub static MEGAKERNELS: [mirage::mpk::Megakernel; {}] = [\n",
        names.len()
    );
    for n in &names {
        index.push_str(&format!(
            "    mirage::mpk::Megakernel::new(mirage::mpk::MegakernelArtifacts {{ name: \"{n}\", cubin: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/mpk/{n}.cubin\")), plan_json: include_str!(concat!(env!(\"OUT_DIR\"), \"/mpk/{n}.mpk.json\")) }}),\n"
        ));
    }
    index.push_str("];\n");
    write_if_changed(&dest.join("index.rs"), index.as_bytes())
}

/// The number an experiment's knob `name` holds, if set (the build reruns when it changes):
/// an error naming the variable, its value and `expected` when it is not a number in `range`.
fn env_number(name: &str, range: std::ops::RangeInclusive<usize>, expected: &str) -> Result<Option<usize>, String> {
    println!("cargo:rerun-if-env-changed={name}");
    let Ok(v) = std::env::var(name) else { return Ok(None) };
    let n = v.trim().parse::<usize>().ok().filter(|n| range.contains(n));
    n.map(Some).ok_or_else(|| format!("{name}={v:?}: expected {expected}"))
}

/// `MIRAGE_DECODE_BULK=1`: the task bodies of every megakernel copy the weight tiles that are one
/// contiguous run (weights stored tile by tile) with one `cp.async.bulk` each
/// (`KernelOptions::bulk_runs`; an experiment's knob, off by default: DECISIONS change 67).
fn bulk_runs() -> Result<bool, String> {
    Ok(env_number("MIRAGE_DECODE_BULK", 0..=1, "0 (the threads' cp.async) or 1 (bulk copies of contiguous tiles)")?
        == Some(1))
}

/// Positions the decode megakernels' KV caches hold: position 4096 and 64 tokens after it.
const DECODE_CAPACITY: usize = 4096 + 64;

/// The decode megakernels at the widths of the benchmark models (`mirage::model::ModelConfig::
/// PRESETS`), named `decode_<preset>` (`.` and `-` as `_`): two-layer variants of Llama-3.2-1B
/// and Qwen3-0.6B always (`tests/mpk_gpu.rs` checks them against the CPU), and with
/// `MIRAGE_DECODE=1` a two-layer Llama-3.1-8B and the three whole models (`examples/decode.rs`;
/// minutes of CPU time and nvcc, so CI builds without them). Listed in `$OUT_DIR/mpk/decode_index.rs` as
/// `DECODE_MEGAKERNELS` with `DECODE_CAPACITY`.
fn decode_megakernels() -> Result<(), String> {
    use mirage::model::ModelConfig;
    println!("cargo:rerun-if-env-changed=MIRAGE_DECODE");
    let whole = match std::env::var("MIRAGE_DECODE").as_deref().map(str::trim) {
        Ok("1") => true,
        Ok("" | "0") | Err(_) => false,
        Ok(other) => return Err(format!("MIRAGE_DECODE={other:?}: expected 1 (build the decode models) or 0")),
    };
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let dest = out_dir.join("mpk");
    let mut opts = mirage::mpk::MpkOptions::default();
    opts.kernel.bulk_runs = bulk_runs()?;
    // MIRAGE_DECODE_STAGES=n: the task bodies' most pipeline stages (an experiment's knob; the
    // default is MpkOptions's).
    if let Some(n) = env_number("MIRAGE_DECODE_STAGES", 1..=16, "a number of stages from 1 to 16")? {
        opts.kernel.max_stages = n;
    }
    // MIRAGE_DECODE_PREFETCH_KIB=n: each task's L2 prefetch at most n KiB, 0 = none (an
    // experiment's knob; the default is MpkOptions's).
    let prefetch_kib = "a number of KiB from 0 (no prefetch) to 16384";
    if let Some(kib) = env_number("MIRAGE_DECODE_PREFETCH_KIB", 0..=16 * 1024, prefetch_kib)? {
        opts.prefetch = kib > 0;
        opts.prefetch_limit_bytes = kib * 1024;
    }
    // MIRAGE_DECODE_CONTIGUOUS_BELOW=c: projections of tasks narrower than c columns store their
    // weights tile by tile (`DecoderConfig::contiguous_below`; an experiment's knob, default the
    // models' `DEFAULT_CONTIGUOUS_BELOW`, 0: every weight row-major).
    let columns = "a number of weight columns from 0 (every weight row-major) to 129";
    let contiguous_below = env_number("MIRAGE_DECODE_CONTIGUOUS_BELOW", 0..=129, columns)?
        .unwrap_or(mirage::mpk::decoder::DEFAULT_CONTIGUOUS_BELOW);
    // MIRAGE_DECODE_GROUPED_OUTPUT=0|1: the output projection by KV head group for every model
    // (`DecoderConfig::grouped_output`; an experiment's knob; unset, each model's
    // `decoder::default_grouped_output`).
    let grouped_output = env_number("MIRAGE_DECODE_GROUPED_OUTPUT", 0..=1, "0 or 1")?.map(|v| v == 1);
    let nvcc = mirage::nvcc::CompileOptions { arch: Some("sm_90a".into()), ..Default::default() };
    let mut builds: Vec<(String, usize)> = vec![("llama-3.2-1b".into(), 2), ("qwen3-0.6b".into(), 2)];
    if whole {
        // The 8B's shapes (its gate/up's 112-column tiles) checkable against the CPU reference.
        builds.push(("llama-3.1-8b".into(), 2));
        for preset in ModelConfig::PRESETS {
            let layers = ModelConfig::preset(preset).ok_or("a preset without a configuration")?.layers;
            builds.push((preset.into(), layers));
        }
    }
    let mut names = Vec::new();
    for (preset, layers) in &builds {
        let model = ModelConfig::preset(preset).ok_or("a preset without a configuration")?;
        let mut cfg = model.decoder_config(DECODE_CAPACITY, mirage::ir::DType::Bf16);
        cfg.layers = *layers;
        cfg.contiguous_below = contiguous_below;
        if let Some(g) = grouped_output {
            cfg.grouped_output = g;
        }
        let name = mirage::mpk::decoder::step_name(preset, (*layers != model.layers).then_some(*layers));
        let g = mirage::mpk::decoder::decoder_step(&name, &cfg).map_err(|e| e.to_string())?;
        let started = std::time::Instant::now();
        mirage::mpk::build(&g, &opts, &nvcc, &dest).map_err(|e| e.to_string())?;
        if whole {
            println!("cargo:warning=decode megakernel `{name}` built in {:.1} s", started.elapsed().as_secs_f64());
        }
        names.push(name);
    }
    let prefetch_bytes = if opts.prefetch { opts.prefetch_limit_bytes } else { 0 };
    let bulk = opts.kernel.bulk_runs;
    let mut index = format!(
        "/// Positions the KV caches of the decode megakernels hold.\npub const DECODE_CAPACITY: usize = {DECODE_CAPACITY};\n/// The most bytes a task of the decode megakernels prefetches into L2 (0: built without the prefetch; not every includer reads it).\n#[allow(dead_code)]\npub const DECODE_PREFETCH_BYTES: usize = {prefetch_bytes};\n/// The decoders' `contiguous_below` (0: every weight row-major).\n#[allow(dead_code)]\npub const DECODE_CONTIGUOUS_BELOW: usize = {contiguous_below};\n/// Whether the task bodies copy contiguous weight tiles with one bulk copy each (MIRAGE_DECODE_BULK).\n#[allow(dead_code)]\npub const DECODE_BULK: bool = {bulk};\n/// Whether every decoder's output projections are by KV head group (MIRAGE_DECODE_GROUPED_OUTPUT=1) or none's (=0); `None`: each model's default (`decoder::default_grouped_output`).\n#[allow(dead_code)]\npub const DECODE_GROUPED_OUTPUT: Option<bool> = {grouped_output:?};\n/// The decode megakernels at real model widths, by name (`decode_<preset>`, `decode_<preset>_<n>l` for `n` layers).\npub static DECODE_MEGAKERNELS: [mirage::mpk::Megakernel; {}] = [\n",
        names.len()
    );
    for n in &names {
        index.push_str(&format!(
            "    mirage::mpk::Megakernel::new(mirage::mpk::MegakernelArtifacts {{ name: \"{n}\", cubin: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/mpk/{n}.cubin\")), plan_json: include_str!(concat!(env!(\"OUT_DIR\"), \"/mpk/{n}.mpk.json\")) }}),\n"
        ));
    }
    index.push_str("];\n");
    // What build.rs did to each model's decoder configuration above, for the includers.
    index.push_str(
        "/// `model`'s decoder configuration as this build script built its megakernels: its\n/// `decoder_config` with the build's `contiguous_below` and, when forced, `grouped_output`.\n#[allow(dead_code)]\npub fn built_decoder_config(model: &mirage::model::ModelConfig) -> mirage::mpk::decoder::DecoderConfig {\n    let mut cfg = model.decoder_config(DECODE_CAPACITY, mirage::ir::DType::Bf16);\n    cfg.contiguous_below = DECODE_CONTIGUOUS_BELOW;\n    if let Some(g) = DECODE_GROUPED_OUTPUT {\n        cfg.grouped_output = g;\n    }\n    cfg\n}\n",
    );
    write_if_changed(&dest.join("decode_index.rs"), index.as_bytes())
}

/// The same graph under another name (the resident kernel is named after its graph).
fn rename(g: &mirage::mpk::StepGraph, name: &str) -> Result<mirage::mpk::StepGraph, String> {
    let mut out = g.clone();
    out.set_name(name).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Compiles every `tests/cuda/*.cu` into `$OUT_DIR/cuda/<stem>.cubin`.
fn compile_test_kernels() -> Result<(), String> {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?);
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let cuda_dir = manifest_dir.join("tests").join("cuda");
    println!("cargo:rerun-if-changed={}", cuda_dir.display());
    for var in mirage::nvcc::ENV_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let mut sources = Vec::new();
    let entries = std::fs::read_dir(&cuda_dir).map_err(|e| format!("reading {}: {e}", cuda_dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("reading {}: {e}", cuda_dir.display()))?.path();
        // Headers next to the sources are tracked too (they are part of nvcc's cache key).
        if path.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
        if path.extension().is_some_and(|ext| ext == "cu") {
            sources.push(path);
        }
    }
    sources.sort();

    let dest_dir = out_dir.join("cuda");
    std::fs::create_dir_all(&dest_dir).map_err(|e| format!("creating {}: {e}", dest_dir.display()))?;
    let opts = mirage::nvcc::CompileOptions {
        include_dirs: vec![cuda_dir.clone()],
        cache_dir: Some(mirage::nvcc::cache_dir_under(&out_dir)),
        ..Default::default()
    };
    for source_path in &sources {
        let stem = source_path
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| format!("{}: expected a UTF-8 file name", source_path.display()))?;
        let source =
            std::fs::read_to_string(source_path).map_err(|e| format!("reading {}: {e}", source_path.display()))?;
        let cubin = mirage::nvcc::compile_cubin(&source, stem, &opts)
            .map_err(|e| format!("compiling {}:\n{e}", source_path.display()))?;
        write_if_changed(&dest_dir.join(format!("{stem}.cubin")), &cubin.bytes)?;
    }
    Ok(())
}

/// Writes a file only when its content changes (keeps dependents' mtimes stable).
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Generates one translation unit per golden file (its program and every Mirage candidate) and
/// one per element type of the coverage set (`mirage::testing::programs::coverage_cases`), compiles each
/// for sm_90a into `$OUT_DIR/golden/<unit>.cubin` with the launch plans beside it, and writes
/// `$OUT_DIR/golden/index.rs` listing them for `include!`.
fn golden_artifacts() -> Result<(), String> {
    use mirage::ir::{DType, KernelGraph};
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let dest = out_dir.join("golden");
    std::fs::create_dir_all(&dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
    let mut units: Vec<(String, Vec<(String, KernelGraph)>)> = Vec::new();
    for case in mirage::testing::programs::golden_cases() {
        units.push((case.name.to_string(), case.named_graphs()?));
    }
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let name = format!("coverage_{}", dtype.name());
        let graphs = mirage::testing::programs::coverage_cases(dtype).map_err(|e| format!("{name}: {e}"))?;
        units.push((name.clone(), graphs.into_iter().map(|(n, g)| (format!("{name}_{n}"), g)).collect()));
    }
    let opts = mirage::nvcc::CompileOptions { arch: Some("sm_90a".into()), ..Default::default() };
    let mut index = String::from(
        "/// (unit, cubin, launch plans as JSON), one entry per translation unit.\npub const GOLDEN_UNITS: &[(&str, &[u8], &str)] = &[\n",
    );
    for (unit, graphs) in &units {
        let refs: Vec<(String, &KernelGraph)> = graphs.iter().map(|(n, g)| (n.clone(), g)).collect();
        let (source, plans) = mirage::codegen::generate_unit(&refs, &mirage::codegen::KernelOptions::default())
            .map_err(|e| format!("generating {unit}: {e}"))?;
        let ident: String = unit.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let cubin =
            mirage::nvcc::compile_cubin(&source, &format!("golden_{ident}"), &opts).map_err(|e| format!("{e}"))?;
        let plans_json = serde_json::to_string(&plans).map_err(|e| e.to_string())?;
        write_if_changed(&dest.join(format!("{ident}.cubin")), &cubin.bytes)?;
        write_if_changed(&dest.join(format!("{ident}.plans.json")), plans_json.as_bytes())?;
        index.push_str(&format!(
            "    (\"{unit}\", include_bytes!(concat!(env!(\"OUT_DIR\"), \"/golden/{ident}.cubin\")), include_str!(concat!(env!(\"OUT_DIR\"), \"/golden/{ident}.plans.json\"))),\n"
        ));
    }
    index.push_str("];\n");
    write_if_changed(&dest.join("index.rs"), index.as_bytes())
}
