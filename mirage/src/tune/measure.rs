//! Measuring candidates on a GPU: each candidate runs once on deterministic random inputs with
//! its outputs poisoned with NaN and is compared with the CPU reference interpreter; the correct
//! ones are timed in rounds (CUDA events, L2 flushed before each launch, median per round,
//! rounds alternately forwards and backwards over the candidates).
//!
//! Progress is reported as [`Event`]s, so that a measuring process can report them one JSON line
//! at a time and a parent can tell which candidate was running when a kernel brought the process
//! down ([`super::bundle::measure_bundle`]); [`measure_in_process`] collects them directly.

use std::time::Instant;

use mirage_runtime::{AnyTensor, Gpu, L2Flush, Program, Stream, TensorArg, TensorDesc, time_median_with};
use serde::{Deserialize, Serialize};

use super::record::CandidateTiming;
use super::{CompiledCandidates, TuneConfig, TuneError};
use crate::codegen::plan::LaunchPlan;
use crate::ir::{DType, KernelGraph};
use crate::reference::{HostTensor, run};

/// One step of a measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The CPU reference was computed in `seconds`.
    Reference {
        /// Seconds it took.
        seconds: f64,
    },
    /// Candidate `index` starts its correctness check (`timing: false`) or a timing round.
    Start {
        /// The candidate.
        index: usize,
        /// Whether this is a timing round rather than the check.
        timing: bool,
    },
    /// Candidate `index` was checked against the reference.
    Checked {
        /// The candidate.
        index: usize,
        /// Its worst relative L2 error, when it ran.
        rel_l2: Option<f64>,
        /// Why it is unusable, if it is.
        error: Option<String>,
    },
    /// One timing round of candidate `index`.
    Timed {
        /// The candidate.
        index: usize,
        /// The round's median, µs.
        median_us: f64,
        /// The round's fastest launch, µs.
        min_us: f64,
    },
    /// Every candidate was measured.
    Done,
}

/// Applies `event` to the timings of its candidate.
pub fn apply(timings: &mut [CandidateTiming], event: &Event) {
    match *event {
        Event::Checked { index, rel_l2, ref error } => {
            if let Some(t) = timings.get_mut(index) {
                t.rel_l2 = rel_l2;
                t.error = error.clone();
            }
        }
        Event::Timed { index, median_us, min_us } => {
            if let Some(t) = timings.get_mut(index) {
                t.rounds_us.push(median_us);
                t.min_us = Some(t.min_us.map_or(min_us, |m| m.min(min_us)));
                t.summarize();
            }
        }
        Event::Reference { .. } | Event::Start { .. } | Event::Done => {}
    }
}

/// The largest relative L2 error a correct output of `dtype` may have against the f32 reference.
pub fn tolerance(dtype: mirage_runtime::DType) -> f64 {
    match dtype {
        mirage_runtime::DType::F32 => 1e-4,
        mirage_runtime::DType::F16 => 1e-2,
        mirage_runtime::DType::Bf16 => 3e-2,
        // Indices (argmax) must be exact.
        mirage_runtime::DType::I32 => 0.0,
    }
}

/// `‖got − want‖ / ‖want‖`; infinite when `got` has a non-finite element (an element no kernel
/// wrote stays NaN).
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        if !g.is_finite() {
            return f64::INFINITY;
        }
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// The largest |value| any f16 tensor of a program may reach on the tuner's inputs: a quarter of
/// f16's largest finite value (65504), so that no rounding or reordering on the GPU overflows.
const F16_HEADROOM: f32 = 65504.0 / 4.0;

/// How many times [`inputs`] may halve the float inputs' range looking for one that keeps every
/// tensor of the program finite (down to ±2⁻⁹).
const MAX_HALVINGS: i32 = 8;

/// The inputs of a measurement: deterministic from `seed`, uniform in `[-s, s)` with `s = 0.5`
/// halved until every tensor of the program, computed by the CPU reference, stays finite and (for
/// f16 tensors) below a quarter of f16's largest finite value; rounded to each input's element type (so the reference
/// computes on exactly what the GPU reads). `i32` inputs (gather ids) are never scaled.
///
/// Programs such as the benchmark's `attention(rms_norm(Q), K, rms_norm(V))` take `exp` of
/// unshifted logits: at ±0.5 their row sums pass f16's largest value, and every candidate of a
/// correct kernel would otherwise be rejected (the first tuning run's `qknorm_gqa`).
pub fn inputs(program: &KernelGraph, seed: u64) -> Result<Vec<HostTensor>, TuneError> {
    let base = crate::search::float_inputs(program, seed)?;
    let index = crate::fingerprint::index_bounds(program);
    let every = crate::reference::with_every_tensor_out(program)
        .map_err(|e| TuneError::Format { what: "the tuner's inputs".into(), reason: e.to_string() })?;
    let nodes = every.nodes();
    let dtypes: Vec<DType> = every.outputs().iter().map(|(t, _)| nodes[t.node].outputs[t.port].dtype).collect();
    let mut worst = String::new();
    for halvings in 0..=MAX_HALVINGS {
        let scale = 0.5f32.powi(halvings);
        let mut host = base.clone();
        for ((t, d), ids) in host.iter_mut().zip(program.inputs()).zip(&index) {
            let s = if ids.is_some() { 1.0 } else { scale };
            t.data.iter_mut().for_each(|v| *v = d.dtype.round(*v * s));
        }
        match out_of_range(&run(&every, &host)?, &dtypes) {
            None => return Ok(host),
            Some(why) => worst = why,
        }
    }
    Err(TuneError::Format {
        what: "the tuner's inputs".into(),
        reason: format!(
            "no input range down to ±{} keeps every tensor of the program finite ({worst})",
            0.5f32.powi(MAX_HALVINGS + 1)
        ),
    })
}

/// Why `values` (tensors of element types `dtypes`) are out of range, or `None`.
fn out_of_range(values: &[HostTensor], dtypes: &[DType]) -> Option<String> {
    values.iter().zip(dtypes).enumerate().find_map(|(k, (t, d))| {
        let limit = if *d == DType::F16 { F16_HEADROOM } else { f32::MAX };
        let max = t.data.iter().fold(0.0f32, |m, v| if v.is_finite() { m.max(v.abs()) } else { f32::INFINITY });
        (max > limit).then(|| format!("tensor {k} reaches {max:e}"))
    })
}

/// One candidate loaded for launching, with its outputs and intermediate buffers.
struct Loaded {
    program: &'static Program,
    outputs: Vec<AnyTensor>,
    buffers: Vec<AnyTensor>,
}

impl Loaded {
    /// Loads the candidate of `plan` from `cubin` (the program lives as long as the process, like
    /// every `Program`: one per candidate measured).
    fn new(stream: &Stream, name: &str, cubin: &'static [u8], plan: &LaunchPlan) -> Result<Loaded, String> {
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        let program = Program::with_plan(name, cubin, plan.clone()).map_err(|e| e.to_string())?;
        let program: &'static Program = Box::leak(Box::new(program));
        let nan = |s: &TensorDesc| AnyTensor::upload_f32(stream, s, &vec![f32::NAN; s.num_elements()]);
        let outputs = plan.outputs.iter().map(nan).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
        let buffers = plan.buffers.iter().map(|b| nan(&b.desc)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
        Ok(Loaded { program, outputs, buffers })
    }

    fn launch(&mut self, stream: &Stream, inputs: &[AnyTensor]) -> Result<(), mirage_runtime::RuntimeError> {
        let args: Vec<TensorArg<'_>> = inputs.iter().map(AnyTensor::as_arg).collect();
        self.program.launch(stream, &args, &mut self.outputs, &mut self.buffers)
    }

    /// Runs once and compares every output with `want`: the worst relative L2 error, or why the
    /// candidate is unusable.
    fn check(
        &mut self,
        stream: &Stream,
        inputs: &[AnyTensor],
        want: &[HostTensor],
    ) -> Result<f64, (Option<f64>, String)> {
        let fail = |e: mirage_runtime::RuntimeError| (None, e.to_string());
        self.launch(stream, inputs).map_err(fail)?;
        stream.synchronize().map_err(fail)?;
        if self.outputs.len() != want.len() {
            return Err((None, format!("{} outputs, the reference has {}", self.outputs.len(), want.len())));
        }
        let mut worst = 0.0f64;
        for (k, (o, w)) in self.outputs.iter().zip(want).enumerate() {
            let got = o.to_host_f32().map_err(fail)?;
            if got.len() != w.data.len() {
                return Err((None, format!("output {k}: {} elements, the reference has {}", got.len(), w.data.len())));
            }
            let e = rel_l2(&got, &w.data);
            worst = worst.max(e);
            let tol = tolerance(o.dtype());
            if e.is_nan() || e > tol {
                return Err((Some(worst), format!("output {k}: relative L2 error {e:.2e} exceeds {tol:.0e}")));
            }
        }
        Ok(worst)
    }
}

/// The compiled candidates of one program, ready to load.
#[derive(Clone, Copy, Debug)]
pub struct Unit<'a> {
    /// The program's name (kernel modules are named after it).
    pub name: &'a str,
    /// The program.
    pub program: &'a KernelGraph,
    /// The cubin holding every candidate's kernels.
    pub cubin: &'static [u8],
    /// One launch plan per candidate.
    pub plans: &'a [LaunchPlan],
}

/// Checks and times the candidates of `unit` (all but `skip`), reporting each step to `emit`: the
/// reference first, then every candidate's check, then `cfg.rounds` timing rounds over the correct
/// ones.
pub fn run_candidates(
    gpu: &Gpu,
    unit: Unit<'_>,
    cfg: &TuneConfig,
    skip: &[usize],
    emit: &mut dyn FnMut(&Event),
) -> Result<(), TuneError> {
    let Unit { name, program, cubin, plans } = unit;
    let stream = gpu.stream();
    let host = inputs(program, cfg.seed)?;
    let started = Instant::now();
    let want = run(program, &host)?;
    emit(&Event::Reference { seconds: started.elapsed().as_secs_f64() });
    let device: Vec<AnyTensor> = host
        .iter()
        .zip(program.inputs())
        .map(|(h, d)| AnyTensor::upload_f32(stream, d, &h.data))
        .collect::<Result<_, _>>()?;
    let mut ok: Vec<(usize, Loaded)> = Vec::new();
    for (i, plan) in plans.iter().enumerate().filter(|(i, _)| !skip.contains(i)) {
        emit(&Event::Start { index: i, timing: false });
        let checked = Loaded::new(stream, &format!("{name}_c{i}"), cubin, plan)
            .map_err(|e| (None, e))
            .and_then(|mut l| l.check(stream, &device, &want).map(|e| (e, l)));
        match checked {
            Ok((e, loaded)) => {
                emit(&Event::Checked { index: i, rel_l2: Some(e), error: None });
                ok.push((i, loaded));
            }
            Err((e, why)) => emit(&Event::Checked { index: i, rel_l2: e, error: Some(why) }),
        }
    }
    let mut flush = L2Flush::new(stream)?;
    for round in 0..cfg.rounds.max(1) {
        let order: Vec<usize> = if round % 2 == 0 { (0..ok.len()).collect() } else { (0..ok.len()).rev().collect() };
        for k in order {
            let (i, loaded) = &mut ok[k];
            emit(&Event::Start { index: *i, timing: true });
            let stats = time_median_with(stream, cfg.warmup, cfg.iters.max(1), Some(&mut flush), || {
                loaded.launch(stream, &device)
            });
            match stats {
                Ok(s) => emit(&Event::Timed { index: *i, median_us: s.median_us, min_us: s.min_us }),
                Err(e) => emit(&Event::Checked { index: *i, rel_l2: None, error: Some(format!("timing: {e}")) }),
            }
        }
    }
    emit(&Event::Done);
    Ok(())
}

/// Measures `compiled` in this process (what `MIRAGE_TUNE` at build time does): one timing per
/// candidate, in order; `meta` gives each candidate's hash, kernels and estimate.
pub fn measure_in_process(
    gpu: &Gpu,
    name: &str,
    program: &KernelGraph,
    compiled: &CompiledCandidates,
    cfg: &TuneConfig,
    meta: (&[String], &[usize], &[f64]),
) -> Result<Vec<CandidateTiming>, TuneError> {
    let (hashes, kernels, predicted) = meta;
    let mut timings: Vec<CandidateTiming> =
        (0..compiled.plans.len()).map(|i| CandidateTiming::new(hashes[i].clone(), kernels[i], predicted[i])).collect();
    // One cubin per tuned program, alive for the rest of the process like every loaded module.
    let cubin: &'static [u8] = Box::leak(compiled.cubin.clone().into_boxed_slice());
    let unit = Unit { name, program, cubin, plans: &compiled.plans };
    run_candidates(gpu, unit, cfg, &[], &mut |e| apply(&mut timings, e))?;
    Ok(timings)
}

/// The device-to-device copy bandwidth (bytes read plus written per µs), from the median of 20
/// copies of 1 GiB.
pub fn copy_bandwidth(gpu: &Gpu) -> Result<f64, TuneError> {
    let stream = gpu.stream();
    let n = 256 << 20; // f32 elements: 1 GiB
    let src = stream.zeros::<f32>(&[n])?;
    let mut dst = stream.zeros::<f32>(&[n])?;
    let stats = time_median_with(stream, 3, 20, None, || stream.copy(&src, &mut dst))?;
    Ok(2.0 * (n * 4) as f64 / stats.median_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    #[test]
    fn events_fill_the_timings() {
        let mut t = vec![CandidateTiming::new("a".into(), 1, 10.0), CandidateTiming::new("b".into(), 2, 12.0)];
        for e in [
            Event::Reference { seconds: 0.1 },
            Event::Checked { index: 0, rel_l2: Some(1e-3), error: None },
            Event::Checked { index: 1, rel_l2: Some(0.4), error: Some("mismatch".into()) },
            Event::Timed { index: 0, median_us: 20.0, min_us: 19.0 },
            Event::Timed { index: 0, median_us: 22.0, min_us: 18.5 },
            Event::Timed { index: 0, median_us: 21.0, min_us: 19.5 },
            Event::Done,
        ] {
            apply(&mut t, &e);
        }
        assert_eq!(t[0].measured_us, Some(21.0));
        assert_eq!(t[0].min_us, Some(18.5));
        assert!(t[0].usable() && !t[1].usable());
        let line = serde_json::to_string(&Event::Start { index: 3, timing: true }).expect("serializes");
        assert_eq!(line, r#"{"event":"start","index":3,"timing":true}"#);
        assert_eq!(serde_json::from_str::<Event>(&line).ok(), Some(Event::Start { index: 3, timing: true }));
    }

    #[test]
    fn unwritten_outputs_fail_the_comparison() {
        assert_eq!(rel_l2(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!(rel_l2(&[1.0, f32::NAN], &[1.0, 2.0]).is_infinite());
        assert!((rel_l2(&[1.1, 2.0], &[1.0, 2.0]) - 0.1 / 5f64.sqrt()).abs() < 1e-6);
    }

    #[test]
    fn inputs_shrink_until_every_f16_tensor_stays_in_range() -> Result<(), Box<dyn std::error::Error>> {
        // exp(x @ w) over 4096 terms: at ±0.5 the logits reach about ±13 and exp passes f16's
        // headroom, so the tuner must halve the range (as for the benchmark's qknorm_gqa).
        let mut g = KernelGraph::new();
        let x = g.input(&[4, 4096], DType::F16)?;
        let w = g.input(&[4096, 8], DType::F16)?;
        let y = g.matmul(x, w)?;
        let e = g.exp(y)?;
        g.output(e, None)?;
        let a = inputs(&g, 3)?;
        let largest = a[0].data.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(largest <= 0.25 && largest > 0.0, "the range was not halved: {largest}");
        let out = run(&g, &a)?;
        assert!(out[0].data.iter().all(|v| v.is_finite() && v.abs() <= F16_HEADROOM));
        Ok(())
    }

    #[test]
    fn inputs_say_why_when_no_range_is_finite() -> Result<(), Box<dyn std::error::Error>> {
        let mut g = KernelGraph::new();
        let x = g.input(&[2, 8], DType::F16)?;
        let zero = g.binary(crate::ir::BinaryOp::Sub, x, x)?;
        let y = g.div(x, zero)?;
        g.output(y, None)?;
        let err = inputs(&g, 3).expect_err("x / 0 is never finite").to_string();
        assert!(err.contains("keeps every tensor of the program finite"), "{err}");
        Ok(())
    }

    #[test]
    fn inputs_are_deterministic_and_rounded_to_their_type() -> Result<(), Box<dyn std::error::Error>> {
        let mut g = KernelGraph::new();
        let x = g.input(&[2, 64], DType::Bf16)?;
        let w = g.input(&[64, 32], DType::Bf16)?;
        let y = g.matmul(x, w)?;
        g.output(y, None)?;
        let a = inputs(&g, 7)?;
        assert_eq!(a, inputs(&g, 7)?);
        assert_ne!(a, inputs(&g, 8)?);
        for t in &a {
            assert!(t.data.iter().all(|&v| half::bf16::from_f32(v).to_f32() == v && v.abs() <= 0.5));
            assert!(t.data.iter().any(|&v| v != 0.0));
        }
        Ok(())
    }
}
