//! What every benchmark example does with one built `#[mugraph]` program: print the chosen
//! µGraph; with a GPU, run it on random inputs (seed printed, `MIRAGE_TEST_SEED` replays it) into
//! NaN-poisoned outputs and through the typed launcher, compare every output element by element
//! with the CPU reference interpreter (`mirage::testing::compare` against `mirage::reference::run`
//! of the lowered program) and time it (CUDA events, L2 flushed, median); without one, say so.
// Shared by the examples and the GPU bench, each of which uses part of it.
#![allow(dead_code)]

use std::error::Error;
use std::time::Instant;

use mirage::ir::{BlockOp, KernelGraph, KernelOp};
use mirage::lower::Program as Lowered;
use mirage::testing::compare::{Comparison, ErrorModel, compare, reduction_len};
use mirage::testing::inputs::{random_inputs, seed};
use mirage::{AnyTensor, Gpu, Program, RuntimeError, TensorArg, TensorDesc};

/// The typed launcher of a program, called with uploaded inputs (in parameter order).
pub type Launcher = fn(&Gpu, &[AnyTensor]) -> Result<Vec<AnyTensor>, RuntimeError>;

/// One program of an example: its name in the kernels file, its built program, its launcher and
/// the scale of each random input.
pub struct Case {
    /// The `#[mugraph]` function's name.
    pub name: &'static str,
    /// Its compiled program (`kernels::<name>::PROGRAM`).
    pub program: &'static Program,
    /// Calls `kernels::<name>(&gpu, ...)`.
    pub launch: Launcher,
    /// Inputs are uniform in `[-scale, scale)`, one scale per parameter: the factors of the
    /// PyTorch baselines (`torch_baselines.py`) for the weights (× 0.02 or 0.05); attention's Q
    /// and K × 0.6 (qknorm's K × 0.2, its Q is normalised) so that the logits `Q·K` have a
    /// standard deviation of about 1: `exp` then works over a realistic range while `exp(Q·K)`,
    /// which these programs do not shift by the row maximum, and its row sums stay finite in f16.
    pub scales: &'static [f32],
}

macro_rules! case {
    ($name:ident, [$($scale:expr),+]) => {
        Case {
            name: stringify!($name),
            program: &crate::kernels::$name::PROGRAM,
            launch: |gpu, i| {
                let mut k = 0;
                Ok(vec![crate::kernels::$name(gpu, $({
                    let _ = $scale;
                    k += 1;
                    input(stringify!($name), i, k - 1)?.as_f16()?
                }),+)?.into()])
            },
            scales: &[$($scale),+],
        }
    };
}

/// A case launched through its program's executor (`PROGRAM.run`) rather than the typed launcher:
/// for programs with results other than f16 or several results (the executor takes and
/// returns tensors of any element type).
macro_rules! run_case {
    ($name:ident, [$($scale:expr),+]) => {
        Case {
            name: stringify!($name),
            program: &crate::kernels::$name::PROGRAM,
            launch: |gpu, inputs| {
                let args: Vec<TensorArg<'_>> = inputs.iter().map(AnyTensor::as_arg).collect();
                crate::kernels::$name::PROGRAM.run(gpu.stream(), &args)
            },
            scales: &[$($scale),+],
        }
    };
}

/// Input `k` of a launcher's inputs, or an error naming the program.
fn input<'a>(program: &str, inputs: &'a [AnyTensor], k: usize) -> Result<&'a AnyTensor, RuntimeError> {
    inputs.get(k).ok_or_else(|| RuntimeError::Plan {
        program: program.to_string(),
        reason: format!("expected an input {k}, found {} inputs", inputs.len()),
    })
}

/// Every benchmark program at the shapes and input scales of
/// the PyTorch baselines (`torch_baselines.py`).
pub fn all_cases() -> Vec<Case> {
    vec![
        case!(gated_mlp_bs1, [1.0, 0.02, 0.02]),
        case!(gated_mlp_bs8, [1.0, 0.02, 0.02]),
        case!(rmsnorm_linear_bs1, [1.0, 0.02]),
        case!(rmsnorm_linear_bs8, [1.0, 0.02]),
        case!(gqa_bs1, [0.6, 0.6, 1.0]),
        case!(gqa_bs8, [0.6, 0.6, 1.0]),
        case!(qknorm_gqa_bs1, [1.0, 0.2, 1.0]),
        case!(qknorm_gqa_bs8, [1.0, 0.2, 1.0]),
        case!(ntrans_bs1, [1.0, 1.0, 1.0]),
        case!(ntrans_bs8, [1.0, 1.0, 1.0]),
        case!(lora, [1.0, 0.05, 0.05, 0.05]),
        // cos and sin in [-1, 1) like those of any angle.
        case!(qk_rope_bs1, [1.0, 0.02, 1.0, 1.0]),
        case!(qk_rope_bs8, [1.0, 0.02, 1.0, 1.0]),
        run_case!(lm_head_argmax, [1.0, 0.02]),
        run_case!(qkv_rope_bs1, [1.0, 0.02, 0.02, 1.0, 1.0]),
        run_case!(qkv_rope_bs8, [1.0, 0.02, 0.02, 1.0, 1.0]),
        // The norm's weight and bias in [-1, 1), the projection's like the other weights.
        case!(layernorm_linear_bs1, [1.0, 1.0, 1.0, 0.02]),
        case!(layernorm_linear_bs8, [1.0, 1.0, 1.0, 0.02]),
    ]
}

/// The cases of one example: `program` itself or its `_bs1`/`_bs8` variants.
pub fn cases_of(program: &str) -> Vec<Case> {
    all_cases()
        .into_iter()
        .filter(|c| c.name == program || c.name.strip_prefix(program).is_some_and(|rest| rest.starts_with("_bs")))
        .collect()
}

const KERNELS_SOURCE: &str = include_str!("../kernels/mod.rs");

/// A one-line-per-kernel description of a µGraph.
pub fn describe(g: &KernelGraph) -> String {
    let mut lines = Vec::new();
    for node in g.nodes() {
        match &node.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } => {}
            KernelOp::Custom { block } => {
                let ops: Vec<String> = block
                    .nodes()
                    .iter()
                    .filter(|n| !matches!(n.op, BlockOp::Input { .. } | BlockOp::Output { .. }))
                    .map(|n| n.op.name())
                    .collect();
                lines.push(format!(
                    "    kernel {}: grid {:?}, {} threads, forloop {}: {}",
                    lines.len(),
                    block.grid(),
                    block.threads(),
                    block.forloop_range(),
                    ops.join(" ")
                ));
            }
            other => lines.push(format!("    {}", other.name())),
        }
    }
    lines.join("\n")
}

/// Runs the example's cases; returns an error when a program fails or mismatches the reference.
pub fn main_for(example: &str, cases: &[Case]) -> Result<(), Box<dyn Error>> {
    let programs = mirage::lower::lower_source(KERNELS_SOURCE)?;
    let gpu = match Gpu::new(0) {
        Ok(gpu) => {
            println!("{example}: GPU found: {}", gpu.info());
            Some(gpu)
        }
        Err(e) => {
            println!("{example}: no GPU found ({e})");
            println!(
                "{example}: the programs below were built and compiled to cubins by build.rs; they are shown, not run"
            );
            None
        }
    };
    for case in cases {
        let lowered = programs
            .iter()
            .find(|p| p.name == case.name)
            .ok_or_else(|| format!("no #[mugraph] fn {} in examples/kernels/mod.rs", case.name))?;
        show(case, lowered)?;
        if let Some(gpu) = &gpu {
            run_on_gpu(gpu, case, lowered)?;
        }
    }
    if gpu.is_none() {
        println!("{example}: no GPU found: nothing was run (exit 0)");
    }
    Ok(())
}

fn show(case: &Case, lowered: &Lowered) -> Result<(), Box<dyn Error>> {
    let plan = case.program.plan()?;
    let mugraph = KernelGraph::from_json(case.program.mugraph_json())?;
    let params: Vec<String> =
        lowered.params.iter().map(|p| format!("{}: {} {:?}", p.name, p.desc.dtype, p.desc.shape)).collect();
    println!();
    println!(
        "{}({}) -> {:?}",
        case.name,
        params.join(", "),
        lowered.outputs.iter().map(|o| &o.shape).collect::<Vec<_>>()
    );
    println!("  µGraph ({} kernels):", plan.kernels.len());
    println!("{}", describe(&mugraph));
    match &plan.search_report {
        Some(report) => {
            println!("  how it was chosen:");
            for line in report.lines() {
                println!("    {line}");
            }
        }
        None => println!("  (the plan records no search report)"),
    }
    println!(
        "  artifacts: {}/mirage/{}-{}.{{cubin,plan.json,mugraph.json,cu}}",
        env!("OUT_DIR"),
        case.name,
        case.program.artifacts().fingerprint
    );
    Ok(())
}

/// The outcome of running a case once against the CPU reference.
pub struct Checked {
    /// One comparison per output (`mirage::testing::compare`).
    pub outputs: Vec<Comparison>,
    /// Whether the typed launcher gave the same bits as the run into NaN-poisoned outputs.
    pub launcher_agrees: bool,
    /// The uploaded inputs (kept for timing).
    pub inputs: Vec<AnyTensor>,
    /// Seconds the CPU reference took.
    pub reference_s: f64,
}

impl Checked {
    /// Whether every output is within tolerance and the launcher agrees with the poisoned run.
    pub fn passed(&self) -> bool {
        self.launcher_agrees && self.outputs.iter().all(Comparison::passed)
    }

    /// The largest relative L2 error over the outputs.
    pub fn worst_rel_l2(&self) -> f64 {
        self.outputs.iter().map(|c| c.rel_l2).fold(0.0, f64::max)
    }

    /// The largest element error over the outputs, as a fraction of its tolerance.
    pub fn worst_element(&self) -> f64 {
        self.outputs.iter().filter_map(|c| c.worst.as_ref()).map(|w| w.ratio()).fold(0.0, f64::max)
    }

    /// What failed, if anything.
    pub fn failure(&self, name: &str) -> Option<String> {
        let mut problems: Vec<String> =
            self.outputs.iter().enumerate().filter_map(|(k, c)| c.check(&format!("output {k}")).err()).collect();
        if !self.launcher_agrees {
            problems.push("the typed launcher gave other bits than the run into NaN-poisoned outputs".into());
        }
        (!problems.is_empty()).then(|| format!("{name}: {}", problems.join("; ")))
    }
}

/// NaN-filled tensors of the given specs.
fn poisoned(stream: &mirage::Stream, specs: &[TensorDesc]) -> Result<Vec<AnyTensor>, RuntimeError> {
    specs.iter().map(|s| AnyTensor::upload_f32(stream, s, &vec![f32::NAN; s.num_elements()])).collect()
}

/// Uploads random inputs at the case's scales (seeded by `MIRAGE_TEST_SEED` when set, printed),
/// runs the program once into NaN-poisoned outputs and intermediate buffers and once through the
/// typed launcher, and compares every output with the CPU reference interpreter element by
/// element (`mirage::testing::compare`).
pub fn check(gpu: &Gpu, case: &Case, lowered: &Lowered) -> Result<Checked, Box<dyn Error>> {
    let plan = case.program.plan()?;
    let stream = gpu.stream();
    if case.scales.len() != plan.inputs.len() {
        return Err(
            format!("{}: {} input scales for {} inputs", case.name, case.scales.len(), plan.inputs.len()).into()
        );
    }
    let seed = seed(case.name)?;
    let host = random_inputs(&plan.inputs, seed, |i| -case.scales[i]..case.scales[i]);
    let device: Vec<AnyTensor> = plan
        .inputs
        .iter()
        .zip(&host)
        .map(|(s, h)| AnyTensor::upload_f32(stream, s, &h.data))
        .collect::<Result<_, _>>()?;
    let args: Vec<TensorArg<'_>> = device.iter().map(AnyTensor::as_arg).collect();
    let mut outputs = poisoned(stream, &plan.outputs)?;
    let buffer_specs: Vec<TensorDesc> = plan.buffers.iter().map(|b| b.desc.clone()).collect();
    let mut buffers = poisoned(stream, &buffer_specs)?;
    case.program.launch(stream, &args, &mut outputs, &mut buffers)?;
    let got: Vec<Vec<f32>> = outputs.iter().map(AnyTensor::to_host_f32).collect::<Result<_, _>>()?;
    let launched = (case.launch)(gpu, &device)?;
    let again: Vec<Vec<f32>> = launched.iter().map(AnyTensor::to_host_f32).collect::<Result<_, _>>()?;
    let launcher_agrees = got.len() == again.len()
        && got.iter().zip(&again).all(|(a, b)| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
    let t = Instant::now();
    let want = mirage::reference::run(&lowered.graph, &host)?;
    let reference_s = t.elapsed().as_secs_f64();
    if got.len() != want.len() {
        return Err(format!("{}: {} outputs, the reference has {}", case.name, got.len(), want.len()).into());
    }
    let k_len = reduction_len(plan.inputs.iter().map(|s| s.shape.as_slice()));
    let outputs = got
        .iter()
        .zip(&want)
        .zip(&plan.outputs)
        .map(|((g, w), spec)| compare(g, &w.data, &w.shape, ErrorModel::new(spec.dtype, k_len)))
        .collect::<Result<_, _>>()?;
    Ok(Checked { outputs, launcher_agrees, inputs: device, reference_s })
}

/// Times the case's program on `inputs` with CUDA events: `warmup` untimed launches, then the
/// median of `iters` launches, the L2 cache flushed before each (not timed).
pub fn time(
    gpu: &Gpu,
    case: &Case,
    inputs: &[AnyTensor],
    warmup: usize,
    iters: usize,
) -> Result<mirage::TimingStats, RuntimeError> {
    let stream = gpu.stream();
    let args: Vec<TensorArg<'_>> = inputs.iter().map(AnyTensor::as_arg).collect();
    let mut outs = case.program.alloc_outputs(stream)?;
    let mut bufs = case.program.alloc_buffers(stream)?;
    mirage::time_median(stream, warmup, iters, true, || case.program.launch(stream, &args, &mut outs, &mut bufs))
}

fn run_on_gpu(gpu: &Gpu, case: &Case, lowered: &Lowered) -> Result<(), Box<dyn Error>> {
    let checked = check(gpu, case, lowered)?;
    for (k, c) in checked.outputs.iter().enumerate() {
        println!("  output {k}: {c}");
    }
    println!(
        "  reference on the CPU: {:.1} s; typed launcher {} the poisoned run",
        checked.reference_s,
        if checked.launcher_agrees { "bit-identical to" } else { "DIFFERS from" }
    );
    // `MIRAGE_EXAMPLE_TIMING=0` (the compute-sanitizer stage of scripts/gpu-run-all.sh) checks
    // without timing: 110 launches with an L2 flush each take minutes under racecheck.
    if std::env::var("MIRAGE_EXAMPLE_TIMING").as_deref() == Ok("0") {
        println!("  time: not measured (MIRAGE_EXAMPLE_TIMING=0)");
    } else {
        let stats = time(gpu, case, &checked.inputs, 10, 100)?;
        println!(
            "  time: median {:.1} µs (min {:.1}, max {:.1}; {} runs, L2 flushed)",
            stats.median_us, stats.min_us, stats.max_us, stats.samples
        );
    }
    match checked.failure(case.name) {
        Some(failure) => Err(failure.into()),
        None => Ok(()),
    }
}
