//! Greedy decoding of a Llama-family model with the persistent megakernel: one resident kernel
//! per decode step (embedding, every layer, the LM head and argmax; the next token fed back on
//! the device), with the KV cache in device memory.
//!
//! ```text
//! MIRAGE_DECODE=1 cargo run --release --example decode -- --random llama-3.2-1b --tokens 64 --pos 512
//! ```
//!
//! - `--random NAME`: a model of `mirage::model::ModelConfig::PRESETS` with random weights at
//!   its real shapes (`mirage::model::random_weights`: normal · 1/√fan_in for projections, normal
//!   for the embedding, norms 1.0, deterministic in `--seed`);
//! - `--model DIR`: a Hugging Face checkpoint directory (`config.json` + `*.safetensors`, read by
//!   `mirage::model::Checkpoint`); its shapes must be those of a model (or a layer variant) the
//!   build script built a megakernel for;
//! - `--layers L`: the variant with `L` layers at the model's widths (the build script builds
//!   two-layer variants of Llama-3.2-1B and Qwen3-0.6B always, the whole models only with
//!   `MIRAGE_DECODE=1`);
//! - `--tokens N` (default 32) tokens from position `--pos P` (default 0; the cache holds
//!   positions up to the build's capacity, 4160; the cache before `P` holds zeros);
//! - `--token T` (default 1): the first token id; `--check K` (default 0): compare the first
//!   `K` steps with the CPU reference (`mirage::mpk::exec::reference_step`; slow at full size);
//! - `--profile`: after the timed run, a table per operator kind of a layer (and the head):
//!   tasks, mean task body and wait, mean operator span and share of the workers' time
//!   (`mirage::mpk::decoder::profile`, from the device timestamps).
//!
//! Prints the tokens, ms/token (median of one launch per token, and all tokens in one launch),
//! the share of the copy bandwidth (bytes of weights and of the KV prefix per token / time /
//! bandwidth: the measured device-to-device copy bandwidth and the H200's nominal 4.24 TB/s) and
//! where the workers' time goes (a timed run's busy/waiting/idle fractions).

use std::error::Error;
use std::io::Write;
use std::time::{Duration, Instant};

use half::bf16;
use mirage::ir::DType;
use mirage::model::{Checkpoint, ModelConfig, Weight, WeightData, fuse_qkv, qkv_slot, random_weights};
use mirage::mpk::decoder::{decoder_step, layer_timeline, profile, step_name};
use mirage::mpk::exec::HostTensors;
use mirage::mpk::testmode::compare_step;
use mirage::mpk::{Megakernel, MpkPlan, ParamValues, Session, TensorId, TensorKind};
use mirage_runtime::{Gpu, TimingEvent};

include!(concat!(env!("OUT_DIR"), "/mpk/decode_index.rs"));

/// The H200's nominal HBM bandwidth (bytes/s), the floor the issue's targets are stated in.
const NOMINAL_BANDWIDTH: f64 = 4.24e12;
/// Least time the steps run before anything is timed.
const WARMUP_MIN: Duration = Duration::from_secs(1);

/// Command-line options.
struct Args {
    preset: String,
    model_dir: Option<std::path::PathBuf>,
    layers: Option<usize>,
    tokens: usize,
    pos: usize,
    token: u32,
    check: usize,
    seed: u64,
    profile: bool,
    prefetch_ahead: Option<u32>,
    prefetch_sweep: Vec<u32>,
}

fn usage() -> String {
    format!(
        "usage: decode (--random NAME | --model DIR) [--layers L] [--tokens N] [--pos P] [--token T] [--check K] [--seed S] [--profile] [--prefetch-ahead A] [--prefetch-sweep A,B,..]\n  NAME: one of {}\n  --prefetch-ahead: tasks each worker streams into L2 ahead of the one it runs (default {}; only in megakernels built with the prefetch, MIRAGE_DECODE_PREFETCH_KIB=n)\n  --prefetch-sweep: after the timed runs, one launch per token again at each of these (same tokens required)",
        ModelConfig::PRESETS.join(", "),
        mirage_runtime::mpk::DEFAULT_PREFETCH_AHEAD
    )
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        preset: String::new(),
        model_dir: None,
        layers: None,
        tokens: 32,
        pos: 0,
        token: 1,
        check: 0,
        seed: 0,
        profile: false,
        prefetch_ahead: None,
        prefetch_sweep: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    let num = |flag: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        v.parse().map_err(|e| format!("{flag} `{v}`: {e}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--random" => args.preset = it.next().ok_or_else(|| format!("--random needs a name\n{}", usage()))?,
            "--model" => {
                args.model_dir =
                    Some(it.next().ok_or_else(|| format!("--model needs a directory\n{}", usage()))?.into())
            }
            "--layers" => args.layers = Some(num("--layers", it.next())?),
            "--tokens" => args.tokens = num("--tokens", it.next())?,
            "--pos" => args.pos = num("--pos", it.next())?,
            "--token" => args.token = num("--token", it.next())? as u32,
            "--check" => args.check = num("--check", it.next())?,
            "--seed" => args.seed = num("--seed", it.next())? as u64,
            "--profile" => args.profile = true,
            "--prefetch-ahead" => args.prefetch_ahead = Some(num("--prefetch-ahead", it.next())? as u32),
            "--prefetch-sweep" => {
                let v = it.next().ok_or_else(|| format!("--prefetch-sweep needs a list\n{}", usage()))?;
                args.prefetch_sweep = v
                    .split(',')
                    .map(|x| x.trim().parse::<u32>().map_err(|e| format!("--prefetch-sweep `{v}`: `{x}`: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown argument `{other}`\n{}", usage())),
        }
    }
    if args.preset.is_empty() == args.model_dir.is_none() {
        return Err(format!("give exactly one of --random NAME and --model DIR\n{}", usage()));
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let checkpoint = match &args.model_dir {
        Some(dir) => Some(Checkpoint::open(dir)?),
        None => None,
    };
    // The preset whose megakernel serves the model, and the model itself.
    let (preset, model) = match &checkpoint {
        Some(c) => {
            if args.layers.is_some() {
                return Err("--layers applies to --random only (a checkpoint has its own layer count)".into());
            }
            (matching_preset(c.config())?, c.config().clone())
        }
        None => {
            let mut m = ModelConfig::preset(&args.preset).ok_or_else(|| {
                format!("unknown model `{}`: expected one of {}", args.preset, ModelConfig::PRESETS.join(", "))
            })?;
            let full = m.clone();
            m.layers = args.layers.unwrap_or(m.layers);
            (full, m)
        }
    };
    let layers = Some(model.layers).filter(|&l| l != preset.layers);
    let name = step_name(&preset.name, layers);
    let mk: &'static Megakernel = DECODE_MEGAKERNELS.iter().find(|m| m.name() == name).ok_or_else(|| {
        format!(
            "the megakernel `{name}` was not built: the root build script builds the whole models only with \
             MIRAGE_DECODE=1 (minutes of CPU time), e.g. `MIRAGE_DECODE=1 cargo run --release --example decode -- \
             --random {}`; built here: [{}]",
            preset.name,
            DECODE_MEGAKERNELS.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        )
    })?;
    let plan = mk.plan()?;
    let cfg = built_decoder_config(&model);
    if args.tokens == 0 || args.pos + args.tokens > DECODE_CAPACITY {
        return Err(format!(
            "--pos {} --tokens {}: expected at least one token and pos + tokens <= {DECODE_CAPACITY} (the KV cache's capacity)",
            args.pos, args.tokens
        )
        .into());
    }
    if args.token as usize >= cfg.vocab {
        return Err(format!("--token {}: expected an id below the vocabulary {}", args.token, cfg.vocab).into());
    }
    // Bytes of weights a step reads: every input once, of the embedding table one row.
    let weight_bytes: usize = plan
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Input)
        .map(|t| {
            let rows = if t.name == "embed" { 1 } else { t.spec.shape[0] };
            t.spec.num_elements() / t.spec.shape[0] * rows * t.spec.dtype.size_bytes()
        })
        .sum();
    println!(
        "megakernel `{}`: {} layers, {} operators, {} tasks per step on {} workers, {} counters, {} B shared memory; {:.3} GB of weights read per step",
        plan.name,
        cfg.layers,
        plan.ops.len(),
        plan.tasks.len(),
        plan.workers,
        plan.counters,
        plan.smem_bytes,
        weight_bytes as f64 / 1e9
    );
    if DECODE_CONTIGUOUS_BELOW != 0 {
        println!(
            "weights of tasks narrower than {DECODE_CONTIGUOUS_BELOW} columns stored tile by tile (MIRAGE_DECODE_CONTIGUOUS_BELOW)"
        );
    }
    if DECODE_BULK {
        println!("weight tiles stored tile by tile copied by one bulk copy each (MIRAGE_DECODE_BULK=1)");
    }
    if cfg.grouped_output {
        println!(
            "output projections by KV head group, merging the attention's partials (MIRAGE_DECODE_GROUPED_OUTPUT=1 \
             or the model's default, decoder::default_grouped_output)"
        );
    }
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no CUDA GPU here ({e}): built, not run");
            return Ok(());
        }
    };
    println!("{}", gpu.info());

    let started = Instant::now();
    let mut s = mk.session(gpu.stream())?;
    if let Some(a) = args.prefetch_ahead {
        s.set_prefetch_ahead(a);
    }
    if DECODE_PREFETCH_BYTES == 0 && (args.prefetch_ahead.is_some() || !args.prefetch_sweep.is_empty()) {
        println!(
            "note: these megakernels were built without the L2 prefetch (the default; MIRAGE_DECODE_PREFETCH_KIB=n builds it in): --prefetch-ahead and --prefetch-sweep change nothing"
        );
    }
    // The step graph (for the CPU reference) only when checking: at full size it takes seconds.
    let graph = if args.check > 0 { Some(decoder_step(&name, &cfg)?) } else { None };
    let weights: Box<dyn Iterator<Item = Result<Weight, mirage::model::ModelError>>> = match &checkpoint {
        Some(c) => Box::new(c.weights(DType::Bf16)),
        None => Box::new(random_weights(&model, args.seed, DType::Bf16)),
    };
    let mut cpu = upload_weights(&mut s, plan, &model, fuse_qkv(weights), graph.as_ref())?;
    if let (Some(g), Some(host)) = (&graph, cpu.as_mut()) {
        host.set(g.tensor_named("token").ok_or("no token tensor")?, &[args.token as f32])?;
    }
    let init_states = |s: &mut Session| -> Result<(), Box<dyn Error>> {
        for t in plan.tensors.iter().filter(|t| t.kind == TensorKind::State) {
            let mut v = vec![0.0f32; t.spec.num_elements()];
            if t.name == "token" {
                v[0] = args.token as f32;
            }
            s.upload_f32(&t.name, &v)?;
        }
        Ok(())
    };
    init_states(&mut s)?;
    eprintln!(
        "weights {} and uploaded in {:.1} s",
        if checkpoint.is_some() { "read" } else { "generated" },
        started.elapsed().as_secs_f64()
    );

    let pos = s.param("pos")?;
    let steps: Vec<ParamValues> = (0..args.tokens)
        .map(|i| {
            let mut p = s.param_values();
            p.set(pos, (args.pos + i) as i32).map(|p| p.clone())
        })
        .collect::<Result<_, _>>()?;

    // Warm-up: all steps in one launch, repeated for at least WARMUP_MIN, then the states back
    // to their initial values, so that no cold start is timed (DECISIONS change 55: on the H200
    // it made no measurable difference; the spread between processes is larger).
    let warm = Instant::now();
    while warm.elapsed() < WARMUP_MIN {
        s.launch_async(&steps)?;
        s.finish()?;
        s.reset()?;
    }
    init_states(&mut s)?;

    // One launch per token (each step's device time between two events), the first `check`
    // steps against the CPU reference.
    let mut tokens = Vec::new();
    let mut per_step_us = Vec::new();
    let (start, end) = (TimingEvent::new(gpu.stream())?, TimingEvent::new(gpu.stream())?);
    let mut last_progress = Instant::now();
    for (i, p) in steps.iter().enumerate() {
        let (us, token) = launch_one(&gpu, &mut s, p, [&start, &end])?;
        per_step_us.push(us);
        tokens.push(token);
        if let (Some(g), Some(before)) = (&graph, cpu.as_mut())
            && i < args.check
        {
            let after = device_tensors(&s, g, before)?;
            compare_step(g, before, &after, p.values(), 2e-2).map_err(|e| format!("step {i}: {e}"))?;
            println!("step {i}: token {} matches the CPU reference", tokens[i]);
            *before = after;
        }
        if last_progress.elapsed() > Duration::from_secs(1) {
            eprint!("\rstep {}/{}", i + 1, steps.len());
            std::io::stderr().flush().ok();
            last_progress = Instant::now();
        }
    }
    eprintln!("\r{} steps decoded", steps.len());
    println!("tokens: {tokens:?}");
    let per_launch = median(&per_step_us) / 1e3;

    // All tokens in one launch, from the same start.
    s.reset()?;
    init_states(&mut s)?;
    start.record(gpu.stream())?;
    s.launch_async(&steps)?;
    end.record(gpu.stream())?;
    s.finish()?;
    let one_launch = start.elapsed_us(&end)? / 1e3 / steps.len() as f64;
    let last = s.download_f32("token")?[0] as u32;
    if Some(&last) != tokens.last() {
        return Err(format!("one launch decoded {last} last, one launch per token {tokens:?}").into());
    }

    // Bytes a step must read: every weight once and the KV cache up to its position.
    let kv_row = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * cfg.dtype.size_bytes();
    let mean_keys = args.pos as f64 + (args.tokens as f64 + 1.0) / 2.0;
    let bytes = weight_bytes as f64 + kv_row as f64 * mean_keys;
    let measured = copy_bandwidth(&gpu)?;
    let share = |ms: f64| {
        format!(
            "{:.1}% of the measured copy bandwidth ({:.2} TB/s), {:.1}% of the nominal {:.2} TB/s",
            100.0 * bytes / (ms / 1e3) / measured,
            measured / 1e12,
            100.0 * bytes / (ms / 1e3) / NOMINAL_BANDWIDTH,
            NOMINAL_BANDWIDTH / 1e12
        )
    };
    println!("{:.3} MB read per token (weights + KV prefix at mean position {mean_keys:.0})", bytes / 1e6);
    println!("one launch per token: {per_launch:.3} ms/token (median of {}): {}", steps.len(), share(per_launch));
    println!("{} tokens in one launch: {one_launch:.3} ms/token (mean): {}", steps.len(), share(one_launch));

    // Where the workers' time goes (device timestamps; a few steps).
    s.reset()?;
    init_states(&mut s)?;
    let timed = &steps[..steps.len().min(8)];
    let timeline = s.run_timed(timed)?;
    let stats = timeline.stats();
    println!(
        "timed run ({} steps, {:.3} ms/token with timestamps):\n{stats}",
        timed.len(),
        stats.span_ns as f64 / 1e6 / timed.len() as f64
    );
    if args.profile {
        print_profile(plan, &timeline);
    }

    // The same tokens again, one launch per token, at each prefetch window of the sweep.
    for &a in &args.prefetch_sweep {
        s.reset()?;
        init_states(&mut s)?;
        s.set_prefetch_ahead(a);
        let mut us = Vec::new();
        for (i, p) in steps.iter().enumerate() {
            let (step_us, t) = launch_one(&gpu, &mut s, p, [&start, &end])?;
            us.push(step_us);
            if t != tokens[i] {
                return Err(format!("prefetch ahead {a}: step {i} decoded {t}, the timed run {}", tokens[i]).into());
            }
        }
        let ms = median(&us) / 1e3;
        println!("prefetch ahead {a}: one launch per token {ms:.3} ms/token (median of {}): {}", us.len(), share(ms));
    }
    Ok(())
}

/// The timed run per operator kind (`mirage::mpk::decoder::profile`), largest share first.
fn print_profile(plan: &MpkPlan, timeline: &mirage_runtime::mpk::Timeline) {
    let names: Vec<String> = plan.ops.iter().map(|o| o.name.clone()).collect();
    let task_op: Vec<usize> = plan.tasks.iter().map(|t| t.op as usize).collect();
    let mut kinds = profile(&names, &task_op, &timeline.tasks(), plan.workers as usize);
    kinds.sort_by(|a, b| b.share.total_cmp(&a.share));
    println!(
        "profile per operator kind (each kind's operators of every layer together; qkv.k0: the q, k and v \
         projections (one operator), attention: RoPE, the cache append, split-KV attention and the merge, o_proj.k0, mlp.k0: gate/up, mlp.k1: down, logits.k0: the LM head):"
    );
    println!(
        "  {:<20} {:>4} {:>6} {:>10} {:>10} {:>10} {:>7}",
        "kind", "ops", "tasks", "body µs", "wait µs", "span µs", "share"
    );
    for k in &kinds {
        println!(
            "  {:<20} {:>4} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>6.1}%",
            k.kind,
            k.ops,
            k.tasks,
            k.body_ns / 1e3,
            k.wait_ns / 1e3,
            k.span_ns / 1e3,
            100.0 * k.share
        );
    }
    let shares: f64 = kinds.iter().map(|k| k.share).sum();
    println!("  {:<20} {:>52.1}%", "between tasks", 100.0 * (1.0 - shares).max(0.0));
    let layers = names.iter().filter(|n| n.starts_with('l') && n.ends_with(".mlp.k1")).count();
    if layers > 0 {
        let layer = layers / 2;
        println!("layer {layer}'s operators (µs from the layer's first task ready, mean over the steps):");
        for w in layer_timeline(&names, &task_op, &timeline.tasks(), layer) {
            println!("  {:<24} {:>8.2} .. {:>8.2}", w.name, w.first_ready_ns / 1e3, w.last_end_ns / 1e3);
        }
    }
}

/// Step `p` in a launch of its own: the device time between `events` recorded around it (µs) and
/// the token it decoded.
fn launch_one(
    gpu: &Gpu,
    s: &mut Session,
    p: &ParamValues,
    [start, end]: [&TimingEvent; 2],
) -> Result<(f64, u32), Box<dyn Error>> {
    start.record(gpu.stream())?;
    s.launch_async(std::slice::from_ref(p))?;
    end.record(gpu.stream())?;
    s.finish()?;
    Ok((start.elapsed_us(end)?, s.download_f32("token")?[0] as u32))
}

/// The median of `v`.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The device-to-device copy bandwidth (bytes read and written per second) over 1 GiB buffers.
fn copy_bandwidth(gpu: &Gpu) -> Result<f64, Box<dyn Error>> {
    let n = 1 << 28;
    let src = gpu.stream().zeros::<f32>(&[n])?;
    let mut dst = gpu.stream().zeros::<f32>(&[n])?;
    gpu.stream().copy(&src, &mut dst)?;
    let (start, end) = (TimingEvent::new(gpu.stream())?, TimingEvent::new(gpu.stream())?);
    let reps = 10;
    start.record(gpu.stream())?;
    for _ in 0..reps {
        gpu.stream().copy(&src, &mut dst)?;
    }
    end.record(gpu.stream())?;
    gpu.stream().synchronize()?;
    Ok(2.0 * (n * 4 * reps) as f64 / (start.elapsed_us(&end)? / 1e6))
}

/// The device's tensors after a step: inputs as in `base`, states and buffers downloaded.
fn device_tensors(s: &Session, g: &mirage::mpk::StepGraph, base: &HostTensors) -> Result<HostTensors, Box<dyn Error>> {
    let mut host = base.clone();
    for (i, t) in g.tensors().iter().enumerate().filter(|(_, t)| t.kind != TensorKind::Input) {
        host.set(TensorId(i), &s.download_f32(&t.name)?)?;
    }
    Ok(host)
}

/// The preset whose megakernel computes a model of `cfg`'s shapes and numerics (any layer count
/// the build script built a variant for; RoPE frequencies and tied embeddings are the host's
/// business, not the kernel's).
fn matching_preset(cfg: &ModelConfig) -> Result<ModelConfig, Box<dyn Error>> {
    let want = cfg.decoder_config(DECODE_CAPACITY, DType::Bf16);
    ModelConfig::PRESETS
        .iter()
        .filter_map(|n| ModelConfig::preset(n))
        .find(|p| {
            let mut d = p.decoder_config(DECODE_CAPACITY, DType::Bf16);
            d.layers = cfg.layers;
            d == want
        })
        .ok_or_else(|| {
            format!(
                "the checkpoint's model ({cfg:?}) has the shapes of none of the models this example builds megakernels \
                 for ({}): a megakernel is compiled for one model's shapes",
                ModelConfig::PRESETS.join(", ")
            )
            .into()
        })
}

/// Uploads the decoder's weights from `weights` (a checkpoint's or random ones, by the decoder's
/// tensor names) and `inv_freq` (the model's RoPE frequencies), checking each against the plan's
/// name, shape and type and that none is missing. With the step graph `g`, returns its host
/// tensors holding them (the bf16 values the device holds; states zero) for the CPU reference.
fn upload_weights(
    s: &mut Session,
    plan: &MpkPlan,
    model: &ModelConfig,
    weights: impl Iterator<Item = Result<Weight, mirage::model::ModelError>>,
    g: Option<&mirage::mpk::StepGraph>,
) -> Result<Option<HostTensors>, Box<dyn Error>> {
    let mut host = g.map(HostTensors::zeros);
    let mut missing: std::collections::BTreeSet<&str> =
        plan.tensors.iter().filter(|t| t.kind == TensorKind::Input).map(|t| t.name.as_str()).collect();
    let index = |name: &str| plan.tensors.iter().position(|t| t.name == name);
    let inv = model.inv_freq();
    s.upload_f32("inv_freq", &inv)?;
    missing.remove("inv_freq");
    if let (Some(host), Some(i)) = (host.as_mut(), index("inv_freq")) {
        host.set(TensorId(i), &inv)?;
    }
    for w in weights {
        let w = w?;
        let i = index(&w.name).ok_or_else(|| {
            // The decoder takes a layer's q, k and v projections as one input.
            let hint = if qkv_slot(&w.name).is_some() {
                " (the decoder takes `l{i}.wqkv`: join them with mirage::model::fuse_qkv)"
            } else {
                ""
            };
            format!("weight `{}`: the megakernel has no such input{hint}", w.name)
        })?;
        let t = &plan.tensors[i];
        // Row-major, or tile by tile where the megakernel was built so (`contiguous_below`).
        let w = w.stored_as(&t.spec.shape)?;
        let WeightData::Bf16(values) = &w.data else {
            return Err(format!("weight `{}`: {} values, the megakernel takes bf16", w.name, w.data.dtype()).into());
        };
        let h = s.tensor::<bf16>(&w.name)?;
        s.upload(h, values)?;
        missing.remove(t.name.as_str());
        if let Some(host) = host.as_mut() {
            host.set(TensorId(i), &w.data.to_f32())?;
        }
    }
    if !missing.is_empty() {
        return Err(format!("weights missing for the megakernel's inputs: {missing:?}").into());
    }
    Ok(host)
}
