//! Greedy decoding of a Llama-family model with the persistent megakernel: one resident kernel
//! per decode step (embedding, every layer, the LM head and argmax; the next token fed back on
//! the device), with the KV cache in device memory.
//!
//! ```text
//! MIRAGE_DECODE=1 cargo run --release --example decode -- --random llama-3.2-1b --tokens 64 --pos 512
//! ```
//!
//! - `--random NAME`: a model of `mirage::model::ModelConfig::PRESETS` with random weights at
//!   its real shapes (normal · 1/√fan_in for projections, normal for the embedding, norms 1.0,
//!   deterministic in `--seed`);
//! - `--model DIR`: a Hugging Face checkpoint directory (not wired yet: an error says so);
//! - `--layers L`: the variant with `L` layers at the model's widths (the build script builds
//!   two-layer variants of Llama-3.2-1B and Qwen3-0.6B always, the whole models only with
//!   `MIRAGE_DECODE=1`);
//! - `--tokens N` (default 32) tokens from position `--pos P` (default 0; the cache holds
//!   positions up to the build's capacity, 4160; the cache before `P` holds zeros);
//! - `--token T` (default 1): the first token id; `--check K` (default 0): compare the first
//!   `K` steps with the CPU reference (`mirage::mpk::exec::reference_step`; slow at full size).
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
use mirage::model::{ModelConfig, RopeScaling};
use mirage::mpk::decoder::{decoder_step, step_name};
use mirage::mpk::exec::HostTensors;
use mirage::mpk::testmode::compare_step;
use mirage::mpk::{Megakernel, MpkPlan, ParamValues, Session, TensorId, TensorKind};
use mirage_runtime::{Gpu, TimingEvent};

include!(concat!(env!("OUT_DIR"), "/mpk/decode_index.rs"));

/// The H200's nominal HBM bandwidth (bytes/s), the floor the issue's targets are stated in.
const NOMINAL_BANDWIDTH: f64 = 4.24e12;

/// Command-line options.
struct Args {
    preset: String,
    layers: Option<usize>,
    tokens: usize,
    pos: usize,
    token: u32,
    check: usize,
    seed: u64,
}

fn usage() -> String {
    format!(
        "usage: decode (--random NAME | --model DIR) [--layers L] [--tokens N] [--pos P] [--token T] [--check K] [--seed S]\n  NAME: one of {}",
        ModelConfig::PRESETS.join(", ")
    )
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { preset: String::new(), layers: None, tokens: 32, pos: 0, token: 1, check: 0, seed: 0 };
    let mut it = std::env::args().skip(1);
    let num = |flag: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        v.parse().map_err(|e| format!("{flag} `{v}`: {e}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--random" => args.preset = it.next().ok_or_else(|| format!("--random needs a name\n{}", usage()))?,
            "--model" => {
                return Err(
                    "--model DIR: loading Hugging Face checkpoints is not wired into this example yet; use --random NAME"
                        .into(),
                );
            }
            "--layers" => args.layers = Some(num("--layers", it.next())?),
            "--tokens" => args.tokens = num("--tokens", it.next())?,
            "--pos" => args.pos = num("--pos", it.next())?,
            "--token" => args.token = num("--token", it.next())? as u32,
            "--check" => args.check = num("--check", it.next())?,
            "--seed" => args.seed = num("--seed", it.next())? as u64,
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown argument `{other}`\n{}", usage())),
        }
    }
    if args.preset.is_empty() {
        return Err(usage());
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let model = ModelConfig::preset(&args.preset).ok_or_else(|| {
        format!("unknown model `{}`: expected one of {}", args.preset, ModelConfig::PRESETS.join(", "))
    })?;
    let layers = args.layers.filter(|&l| l != model.layers);
    let name = step_name(&model.name, layers);
    let mk: &'static Megakernel = DECODE_MEGAKERNELS.iter().find(|m| m.name() == name).ok_or_else(|| {
        format!(
            "the megakernel `{name}` was not built: the root build script builds the whole models only with \
             MIRAGE_DECODE=1 (minutes of CPU time), e.g. `MIRAGE_DECODE=1 cargo run --release --example decode -- \
             --random {}`; built here: [{}]",
            model.name,
            DECODE_MEGAKERNELS.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        )
    })?;
    let plan = mk.plan()?;
    let cfg = {
        let mut c = model.decoder_config(DECODE_CAPACITY, DType::Bf16);
        c.layers = layers.unwrap_or(model.layers);
        c
    };
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
    // The step graph (for the CPU reference) only when checking: at full size it takes seconds.
    let graph = if args.check > 0 { Some(decoder_step(&name, &cfg)?) } else { None };
    let mut cpu = upload_random(&mut s, plan, &model, args.seed, graph.as_ref())?;
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
    eprintln!("weights generated and uploaded in {:.1} s", started.elapsed().as_secs_f64());

    let pos = s.param("pos")?;
    let steps: Vec<ParamValues> = (0..args.tokens)
        .map(|i| {
            let mut p = s.param_values();
            p.set(pos, (args.pos + i) as i32).map(|p| p.clone())
        })
        .collect::<Result<_, _>>()?;

    // One launch per token (each step's device time between two events), the first `check`
    // steps against the CPU reference.
    let mut tokens = Vec::new();
    let mut per_step_us = Vec::new();
    let (start, end) = (TimingEvent::new(gpu.stream())?, TimingEvent::new(gpu.stream())?);
    let mut last_progress = Instant::now();
    for (i, p) in steps.iter().enumerate() {
        start.record(gpu.stream())?;
        s.launch_async(std::slice::from_ref(p))?;
        end.record(gpu.stream())?;
        s.finish()?;
        per_step_us.push(start.elapsed_us(&end)?);
        tokens.push(s.download_f32("token")?[0] as u32);
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
    let stats = s.run_timed(timed)?.stats();
    println!(
        "timed run ({} steps, {:.3} ms/token with timestamps):\n{stats}",
        timed.len(),
        stats.span_ns as f64 / 1e6 / timed.len() as f64
    );
    Ok(())
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

/// Uploads random weights at the plan's shapes: `[in, out]` projections normal · 1/√in, the
/// embedding normal, norm gains 1.0, `inv_freq` the model's RoPE frequencies. With the step
/// graph `g`, returns its host tensors holding them (the bf16 values the device holds; states
/// zero) for the CPU reference.
fn upload_random(
    s: &mut Session,
    plan: &MpkPlan,
    model: &ModelConfig,
    seed: u64,
    g: Option<&mirage::mpk::StepGraph>,
) -> Result<Option<HostTensors>, Box<dyn Error>> {
    let mut host = g.map(HostTensors::zeros);
    for (i, t) in plan.tensors.iter().enumerate().filter(|(_, t)| t.kind == TensorKind::Input) {
        let n = t.spec.num_elements();
        let base = t.name.rsplit('.').next().unwrap_or(&t.name);
        let values: Vec<f32> = if t.name == "inv_freq" {
            let inv = inv_freq(model);
            s.upload_f32(&t.name, &inv)?;
            inv
        } else {
            if t.spec.dtype != DType::Bf16 {
                return Err(format!("tensor `{}`: expected bf16 weights, found {}", t.name, t.spec.dtype).into());
            }
            let values: Vec<bf16> = if base.ends_with("norm") {
                vec![bf16::ONE; n]
            } else {
                let scale = if t.name == "embed" { 1.0 } else { 1.0 / (t.spec.shape[0] as f32).sqrt() };
                normal_bf16(n, seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), scale)
            };
            let h = s.tensor::<bf16>(&t.name)?;
            s.upload(h, &values)?;
            if host.is_none() {
                continue;
            }
            values.iter().map(|v| v.to_f32()).collect()
        };
        if let Some(host) = host.as_mut() {
            // The plan lists the graph's tensors in its order.
            host.set(TensorId(i), &values)?;
        }
    }
    Ok(host)
}

/// `n` values `scale · N(0, 1)` in bf16, deterministic in `seed`, generated on every core.
fn normal_bf16(n: usize, seed: u64, scale: f32) -> Vec<bf16> {
    let mut out = vec![bf16::ZERO; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).next_multiple_of(2).max(2);
    std::thread::scope(|scope| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            scope.spawn(move || {
                let first = (c * chunk) as u64;
                for (j, pair) in part.chunks_mut(2).enumerate() {
                    // Box–Muller over two uniforms from a counter-based hash of the index.
                    let k = first / 2 + j as u64;
                    let u1 = ((mix(seed, 2 * k) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                    let u2 = (mix(seed, 2 * k + 1) >> 11) as f64 / (1u64 << 53) as f64;
                    let r = (-2.0 * u1.ln()).sqrt();
                    let (s, co) = (std::f64::consts::TAU * u2).sin_cos();
                    pair[0] = bf16::from_f32(scale * (r * co) as f32);
                    if let Some(b) = pair.get_mut(1) {
                        *b = bf16::from_f32(scale * (r * s) as f32);
                    }
                }
            });
        }
    });
    out
}

/// A 64-bit hash of `(seed, i)` (SplitMix64's finalizer).
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The model's RoPE inverse frequencies, with Llama 3's frequency scaling when it has one
/// (wavelengths above `original_max_positions / low_freq_factor` divided by `factor`, below
/// `original_max_positions / high_freq_factor` kept, interpolated between).
fn inv_freq(model: &ModelConfig) -> Vec<f32> {
    let d = model.head_dim;
    (0..d / 2)
        .map(|i| {
            let f = model.rope_theta.powf(-2.0 * i as f64 / d as f64);
            let Some(RopeScaling { factor, low_freq_factor, high_freq_factor, original_max_positions }) =
                model.rope_scaling.clone()
            else {
                return f as f32;
            };
            let old = original_max_positions as f64;
            let wavelen = std::f64::consts::TAU / f;
            let scaled = if wavelen < old / high_freq_factor {
                f
            } else if wavelen > old / low_freq_factor {
                f / factor
            } else {
                let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * f / factor + smooth * f
            };
            scaled as f32
        })
        .collect()
}
