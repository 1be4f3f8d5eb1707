//! The persistent megakernel on a two-layer toy decoder (vocabulary 512, hidden 256, 4 heads of
//! 64 over 2 KV heads, bf16, random weights): the whole decode step — embedding, per layer norm,
//! q/k/v projections, RoPE, KV-cache append, attention over the cache, output projection,
//! gated MLP, then the LM head and argmax — is one resident kernel, built by the root build.rs
//! (`mirage::mpk::build`). Prints the plan's shape; with a GPU, decodes 64 tokens greedily (each
//! step's token fed back on the device), checks the first steps against the CPU reference, times
//! one launch per token and the same tokens in one launch (which must decode the same tokens),
//! and writes a Chrome/Perfetto trace.
//!
//! `cargo run --release --example mpk_toy [-- [trace.json [steps]]]`: `steps` (default 64, at most
//! the KV cache's 128) tokens. Under compute-sanitizer set `MIRAGE_MPK_WATCHDOG_MS` (e.g. 600000)
//! and fewer steps: the tools slow the kernel down a hundredfold and more, and the default
//! watchdog bound is 10 s per wait.

use mirage::mpk::exec::{HostTensors, reference_step};
use mirage::mpk::testmode::cases;
use mirage::mpk::{Megakernel, ParamValues, Session, TensorId};
use mirage_runtime::{Gpu, TimingEvent};
use std::time::Duration;

include!(concat!(env!("OUT_DIR"), "/mpk/index.rs"));

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let toy: &'static Megakernel =
        MEGAKERNELS.iter().find(|m| m.name() == "toy").ok_or("the build script built no `toy` megakernel")?;
    let plan = toy.plan()?;
    let per_worker: Vec<usize> = plan.worker_tasks.iter().map(Vec::len).collect();
    println!(
        "megakernel `{}`: {} operators, {} tasks per step on {} workers ({}..{} each), {} counters, {} threads, {} B shared memory",
        plan.name,
        plan.ops.len(),
        plan.tasks.len(),
        plan.workers,
        per_worker.iter().min().unwrap_or(&0),
        per_worker.iter().max().unwrap_or(&0),
        plan.counters,
        plan.threads,
        plan.smem_bytes
    );
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU ({e}): nothing to run");
            return Ok(());
        }
    };
    println!("{}", gpu.info());
    let case = cases()?.into_iter().find(|c| c.graph.name() == "toy").ok_or("no toy test case")?;
    let g = &case.graph;
    let init = case.init(42);
    let args: Vec<String> = std::env::args().collect();
    let count = match args.get(2) {
        Some(a) => a.parse::<usize>().map_err(|e| format!("steps `{a}`: {e}"))?,
        None => case.steps,
    };
    let capacity = g.tensor_named("l0.k_cache").ok_or("no l0.k_cache tensor")?;
    let capacity = g.tensor(capacity).desc.shape[1];
    if count == 0 || count > capacity {
        return Err(format!("steps: {count} is not in 1..={capacity} (the KV cache's capacity)").into());
    }
    let watchdog = match std::env::var("MIRAGE_MPK_WATCHDOG_MS") {
        Ok(ms) => Some(Duration::from_millis(ms.parse().map_err(|e| format!("MIRAGE_MPK_WATCHDOG_MS `{ms}`: {e}"))?)),
        Err(_) => None,
    };
    let mut s = toy.session(gpu.stream())?;
    if let Some(w) = watchdog {
        s.set_watchdog(w);
    }
    for (i, t) in g.tensors().iter().enumerate() {
        s.upload_f32(&t.name, init.get(TensorId(i)))?;
    }
    let pos = s.param("pos")?;
    let steps: Vec<ParamValues> = (0..count as i32)
        .map(|i| {
            let mut p = s.param_values();
            p.set(pos, i).map(|p| p.clone())
        })
        .collect::<Result<_, _>>()?;

    // Greedy decoding, one launch per token; the first 4 steps against the CPU reference.
    let token = g.tensor_named("token").ok_or("no token tensor")?;
    let mut cpu = init.clone();
    let mut tokens = Vec::new();
    let start = TimingEvent::new(gpu.stream())?;
    let end = TimingEvent::new(gpu.stream())?;
    start.record(gpu.stream())?;
    for (i, p) in steps.iter().enumerate() {
        s.run(std::slice::from_ref(p))?;
        let t = s.download_f32("token")?[0];
        tokens.push(t as u32);
        if i < 4 {
            reference_step(g, &mut cpu, p.values())?;
            let want = cpu.get(token)[0];
            println!(
                "step {i}: device token {t}, CPU token {want}{}",
                if t == want { "" } else { " (differ: a near-tie in bf16)" }
            );
            cpu = with_state_of(&s, g, cpu)?;
        }
    }
    end.record(gpu.stream())?;
    let per_token = start.elapsed_us(&end)? / steps.len() as f64;
    println!("tokens: {tokens:?}");
    println!("one launch per token: {per_token:.1} µs/token (with a token download and status check per step)");

    // All tokens in one launch, timed with device timestamps.
    let mut again = toy.session(gpu.stream())?;
    if let Some(w) = watchdog {
        again.set_watchdog(w);
    }
    for (i, t) in g.tensors().iter().enumerate() {
        again.upload_f32(&t.name, init.get(TensorId(i)))?;
    }
    let timeline = again.run_timed(&steps)?;
    let stats = timeline.stats();
    println!(
        "{} tokens in one launch: {:.1} µs/token (device timestamps)\n{stats}",
        steps.len(),
        stats.span_ns as f64 / 1e3 / steps.len() as f64
    );
    let last = again.download_f32("token")?[0] as u32;
    let per_launch = tokens.last().copied().ok_or("no tokens")?;
    println!("last token {last} (one launch per token: {per_launch})");
    if last != per_launch {
        return Err(format!("one launch decoded {last} last, one launch per token {per_launch}").into());
    }
    let path = args.get(1).cloned().unwrap_or_else(|| "mpk_toy_trace.json".into());
    std::fs::write(&path, timeline.chrome_trace())?;
    println!("trace written to {path} (open it in https://ui.perfetto.dev)");
    Ok(())
}

/// The CPU state continued from the device's states (caches, token), so the comparison of the
/// next step does not accumulate rounding differences.
fn with_state_of(
    s: &Session,
    g: &mirage::mpk::StepGraph,
    mut cpu: HostTensors,
) -> Result<HostTensors, Box<dyn std::error::Error>> {
    for (i, t) in g.tensors().iter().enumerate() {
        if t.kind == mirage::mpk::TensorKind::State {
            cpu.set(TensorId(i), &s.download_f32(&t.name)?)?;
        }
    }
    Ok(cpu)
}
