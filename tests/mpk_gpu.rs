//! The persistent megakernel on the GPU: every test-mode graph (each decode operator alone, one
//! decoder layer, the two-layer toy model over 64 steps) and two-layer decoders at the widths of
//! Llama-3.2-1B and Qwen3-0.6B (8 steps) through the resident kernel, compared step by step with
//! the CPU reference; several steps in one launch equal one launch per step;
//! device-side errors (a token id out of range, a wait that never completes) come back as errors;
//! a timed run exports a Chrome/Perfetto trace; and the overhead measurements (dispatch cost per
//! task, latency per dependency hop, waiting fraction) are printed.
//!
//! The megakernels are built by the root build.rs for 132 workers (an H200).
//! `#[ignore = "needs a CUDA GPU"]`: run on the GPU machine with `--ignored`. Under
//! compute-sanitizer set `MIRAGE_MPK_WATCHDOG_MS` (e.g. 600000): the tools slow kernels down a
//! hundredfold and the default watchdog bound is 10 s per wait.

use std::time::Duration;

use mirage::mpk::exec::HostTensors;
use mirage::mpk::testmode::{TestCase, cases, compare_step};
use mirage::mpk::{Megakernel, MpkError, ParamValues, Session, StepGraph, TensorId, TensorKind, abi};
use mirage_runtime::Gpu;

include!(concat!(env!("OUT_DIR"), "/mpk/index.rs"));
include!(concat!(env!("OUT_DIR"), "/mpk/decode_index.rs"));

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn megakernel(name: &str) -> &'static Megakernel {
    MEGAKERNELS
        .iter()
        .chain(&DECODE_MEGAKERNELS)
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no megakernel `{name}`"))
}

fn gpu() -> Gpu {
    Gpu::new(0).unwrap_or_else(|e| panic!("no GPU: {e}"))
}

fn session(gpu: &Gpu, name: &str) -> Session {
    let mut s = megakernel(name).session(gpu.stream()).unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Some(ms) = std::env::var("MIRAGE_MPK_WATCHDOG_MS").ok().and_then(|v| v.parse().ok()) {
        s.set_watchdog(Duration::from_millis(ms));
    }
    s
}

fn upload_all(s: &mut Session, g: &StepGraph, host: &HostTensors) {
    for (i, t) in g.tensors().iter().enumerate() {
        s.upload_f32(&t.name, host.get(TensorId(i))).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn download_all(s: &Session, g: &StepGraph) -> HostTensors {
    let mut host = HostTensors::zeros(g);
    for (i, t) in g.tensors().iter().enumerate() {
        let v = s.download_f32(&t.name).unwrap_or_else(|e| panic!("{e}"));
        host.set(TensorId(i), &v).unwrap_or_else(|e| panic!("{e}"));
    }
    host
}

/// Poisons every buffer (NaN) so an element no task writes shows up.
fn poison_buffers(s: &mut Session, g: &StepGraph) {
    for t in g.tensors().iter().filter(|t| t.kind == TensorKind::Buffer) {
        let n: usize = t.desc.shape.iter().product();
        s.upload_f32(&t.name, &vec![f32::NAN; n]).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The test case called `name`.
fn case(name: &str) -> R<TestCase> {
    Ok(cases()?.into_iter().find(|c| c.graph.name() == name).ok_or_else(|| format!("no test case `{name}`"))?)
}

/// A session of test case `name`'s megakernel with the case's data drawn from `seed`.
fn loaded(gpu: &Gpu, name: &str, seed: u64) -> R<(TestCase, Session)> {
    let case = case(name)?;
    let mut s = session(gpu, name);
    upload_all(&mut s, &case.graph, &case.init(seed));
    Ok((case, s))
}

fn step_params(s: &Session, case: &TestCase, step: usize) -> ParamValues {
    let mut p = s.param_values();
    for (name, v) in case.graph.params().iter().zip(case.params(step)) {
        let h = s.param(name).unwrap_or_else(|e| panic!("{e}"));
        p.set(h, v).unwrap_or_else(|e| panic!("{e}"));
    }
    p
}

/// Relative tolerance of a device step against the CPU (bf16 storage: 2^-8 ≈ 0.4% per rounding).
const TOLERANCE: f32 = 2e-2;

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_test_graph_matches_the_cpu_step_by_step() -> R {
    let gpu = gpu();
    for case in cases()? {
        let g = &case.graph;
        let mut s = session(&gpu, g.name());
        upload_all(&mut s, g, &case.init(11));
        for step in 0..case.steps {
            poison_buffers(&mut s, g);
            let before = download_all(&s, g);
            let p = step_params(&s, &case, step);
            s.run(std::slice::from_ref(&p)).unwrap_or_else(|e| panic!("{} step {step}: {e}", g.name()));
            let after = download_all(&s, g);
            compare_step(g, &before, &after, p.values(), TOLERANCE)
                .unwrap_or_else(|e| panic!("{} step {step}: {e}", g.name()));
        }
        println!("{}: {} step(s) match the CPU reference", g.name(), case.steps);
    }
    Ok(())
}

/// The non-input tensors of the device (inputs as in `base`, which the step does not change).
fn download_changed(s: &Session, g: &StepGraph, base: &HostTensors) -> HostTensors {
    let mut host = base.clone();
    for (i, t) in g.tensors().iter().enumerate().filter(|(_, t)| t.kind != TensorKind::Input) {
        let v = s.download_f32(&t.name).unwrap_or_else(|e| panic!("{e}"));
        host.set(TensorId(i), &v).unwrap_or_else(|e| panic!("{e}"));
    }
    host
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_layers_at_real_model_widths_match_the_cpu() -> R {
    use mirage::model::ModelConfig;
    use mirage::mpk::decoder::{decoder_step, step_name};
    let gpu = gpu();
    // Llama-3.2-1B's widths (vocabulary 128256, hidden 2048, 32 heads of 64 over 8) and
    // Qwen3-0.6B's (q/k norm, 16 heads of 128 over hidden 1024), two layers each.
    for preset in ["llama-3.2-1b", "qwen3-0.6b"] {
        let mut cfg = built_decoder_config(&ModelConfig::preset(preset).ok_or("a preset")?);
        cfg.layers = 2;
        let graph = decoder_step(&step_name(preset, Some(2)), &cfg)?;
        // 8 steps at positions 509..517 over caches of random keys and values, then 3 at
        // 4154..4157 near the capacity (split-KV chunks of 260 keys: more than one key tile of
        // the worker's 256 threads, the new key in the second tile).
        for (pos0, steps) in [(509, 8), (4154, 3)] {
            let case = TestCase { graph: graph.clone(), steps, pos0 };
            let g = &case.graph;
            let init = case.init(5);
            let mut s = session(&gpu, g.name());
            upload_all(&mut s, g, &init);
            let mut before = init;
            for step in 0..case.steps {
                poison_buffers(&mut s, g);
                before = download_changed(&s, g, &before);
                let p = step_params(&s, &case, step);
                s.run(std::slice::from_ref(&p)).unwrap_or_else(|e| panic!("{} step {step}: {e}", g.name()));
                let after = download_changed(&s, g, &before);
                compare_step(g, &before, &after, p.values(), TOLERANCE)
                    .unwrap_or_else(|e| panic!("{} pos {} step {step}: {e}", g.name(), pos0 as usize + step));
                println!(
                    "{} pos {}: token {} matches the CPU reference",
                    g.name(),
                    pos0 as usize + step,
                    s.download_f32("token")?[0]
                );
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn steps_in_one_launch_equal_steps_in_separate_launches() -> R {
    let gpu = gpu();
    let (case, mut one_by_one) = loaded(&gpu, "toy", 3)?;
    let g = &case.graph;
    let init = case.init(3);
    for step in 0..case.steps {
        let p = step_params(&one_by_one, &case, step);
        one_by_one.run(&[p]).unwrap_or_else(|e| panic!("step {step}: {e}"));
    }
    let expected = download_all(&one_by_one, g);
    for per_launch in [case.steps, 16] {
        let mut batched = session(&gpu, "toy");
        upload_all(&mut batched, g, &init);
        for start in (0..case.steps).step_by(per_launch) {
            let steps: Vec<ParamValues> =
                (start..(start + per_launch).min(case.steps)).map(|i| step_params(&batched, &case, i)).collect();
            batched.run(&steps).unwrap_or_else(|e| panic!("steps {start}..: {e}"));
        }
        assert_eq!(batched.steps_done() as usize, case.steps);
        let got = download_all(&batched, g);
        for (i, t) in g.tensors().iter().enumerate() {
            let same =
                got.get(TensorId(i)).iter().zip(expected.get(TensorId(i))).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{per_launch} steps per launch: `{}` differs from one launch per step", t.name);
        }
    }
    let tokens = expected.get(g.tensor_named("token").ok_or("no such tensor")?);
    println!("64 steps in 1, 4 and 64 launches agree bit for bit (last token {})", tokens[0]);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_token_out_of_range_is_a_device_error_until_reset() -> R {
    let gpu = gpu();
    let case = case("op_embedding")?;
    let g = &case.graph;
    let mut s = session(&gpu, g.name());
    let mut host = case.init(5);
    let vocab = g.tensor(g.tensor_named("embed").ok_or("no such tensor")?).desc.shape[0];
    host.set(g.tensor_named("token").ok_or("no such tensor")?, &[vocab as f32])?;
    upload_all(&mut s, g, &host);
    let p = s.param_values();
    let e = s.run(std::slice::from_ref(&p)).expect_err("an error");
    match &e {
        MpkError::Device { code, task_name, .. } => {
            assert_eq!(*code, abi::ERR_INDEX, "{e}");
            assert!(task_name.starts_with("embedding["), "{e}");
        }
        other => panic!("expected a device error, found {other}"),
    }
    assert!(e.to_string().contains(&format!("expected 0 <= index < {vocab}, found {vocab}")), "{e}");
    assert!(matches!(s.run(std::slice::from_ref(&p)), Err(MpkError::Poisoned { .. })));
    s.reset()?;
    s.upload_f32("token", &[1.0])?;
    s.run(&[p])?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_wait_that_never_completes_ends_at_the_watchdog() -> R {
    let gpu = gpu();
    let mut s = session(&gpu, "watchdog");
    s.set_watchdog(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let e = s.run(&[s.param_values()]).expect_err("an error");
    let took = started.elapsed();
    match &e {
        MpkError::Device { code, .. } => assert_eq!(*code, abi::ERR_WATCHDOG, "{e}"),
        other => panic!("expected the watchdog, found {other}"),
    }
    // `t1` waits for two signals of a counter only `t0` signals (once); `t2` on the other worker
    // waits for `t1`: whichever wait hits the bound first is reported.
    let msg = e.to_string();
    assert!(msg.contains("needed 2, found 1") || msg.contains("needed 1, found 0"), "{msg}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    println!("watchdog: {e} (after {took:?})");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_timed_step_exports_a_trace() -> R {
    let gpu = gpu();
    let (case, mut s) = loaded(&gpu, "toy", 2)?;
    let steps: Vec<ParamValues> = (0..8).map(|i| step_params(&s, &case, i)).collect();
    s.run(&steps[..4])?;
    let timeline = s.run_timed(&steps[4..])?;
    let stats = timeline.stats();
    assert_eq!(stats.tasks, 4 * s.plan().tasks.len());
    assert!(stats.busy_fraction > 0.0 && stats.wait_fraction >= 0.0);
    let trace = timeline.chrome_trace();
    let parsed: serde_json::Value = serde_json::from_str(&trace)?;
    let slices = parsed["traceEvents"]
        .as_array()
        .ok_or("the trace has no traceEvents array")?
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "wait")
        .count();
    assert_eq!(slices, stats.tasks);
    let path = std::env::temp_dir().join("mirage_mpk_toy_trace.json");
    std::fs::write(&path, trace)?;
    println!("toy, 4 steps in one launch:\n{stats}trace: {}", path.display());
    Ok(())
}

/// Median of a list of nanosecond counts.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn overhead() -> R {
    let gpu = gpu();
    for (name, what) in [
        ("overhead_dispatch", "dispatch per task (one worker, no waits)"),
        ("overhead_hop", "per dependency hop (two SMs, alternating)"),
        ("overhead_fanin", "per all-to-all level (132 tasks wait on 132)"),
    ] {
        let mut s = session(&gpu, name);
        let plan = s.plan().clone();
        let levels = plan.ops.len() as f64;
        let p = s.param_values();
        s.run(&[p.clone(), p.clone()])?;
        let mut per_level = Vec::new();
        let mut waiting = Vec::new();
        let mut launch = Vec::new();
        for _ in 0..20 {
            let t = s.run_timed(std::slice::from_ref(&p))?;
            let st = t.stats();
            per_level.push(st.span_ns as f64 / levels);
            waiting.push(st.wait_fraction);
            let start = mirage_runtime::TimingEvent::new(gpu.stream())?;
            let end = mirage_runtime::TimingEvent::new(gpu.stream())?;
            start.record(gpu.stream())?;
            s.launch_async(std::slice::from_ref(&p))?;
            end.record(gpu.stream())?;
            s.finish()?;
            launch.push(start.elapsed_us(&end)?);
        }
        println!(
            "{name}: {what}: {:.0} ns (median of 20), waiting {:.1}% of the workers' time; whole launch {:.1} µs",
            median(per_level),
            100.0 * median(waiting),
            median(launch)
        );
    }
    let (toy, mut s) = loaded(&gpu, "toy", 2)?;
    let steps: Vec<ParamValues> = (0..16).map(|i| step_params(&s, &toy, i)).collect();
    s.run(&steps[..8])?;
    let t = s.run_timed(&steps[8..])?;
    println!("toy model, 8 steps in one launch:\n{}", t.stats());
    Ok(())
}
