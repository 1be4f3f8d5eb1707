//! What every benchmark example does with one built `#[mugraph]` program: print the chosen
//! µGraph; with a GPU, run the typed launcher on random inputs, compare it with the CPU reference
//! interpreter (`mirage::reference::run` of the lowered program) and time it (CUDA events, L2
//! flushed, median); without one, say so.

use std::error::Error;
use std::time::Instant;

use mirage::ir::{BlockOp, KernelGraph, KernelOp};
use mirage::lower::Program as Lowered;
use mirage::{AnyTensor, Gpu, Program, RuntimeError, TensorArg};

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
    /// Inputs are uniform in `[-scale, scale)`, one scale per parameter: the factors of
    /// `bench/torch_baselines.py` (weights × 0.02 or 0.05; attention Q and K × 0.1 so that
    /// `exp(Q·K)`, which these programs do not shift by the row maximum, stays finite in f16).
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

/// Input `k` of a launcher's inputs, or an error naming the program.
fn input<'a>(program: &str, inputs: &'a [AnyTensor], k: usize) -> Result<&'a AnyTensor, RuntimeError> {
    inputs.get(k).ok_or_else(|| RuntimeError::Plan {
        program: program.to_string(),
        reason: format!("expected an input {k}, found {} inputs", inputs.len()),
    })
}

/// Every benchmark program of DESIGN §14 at the shapes and input scales of
/// `bench/torch_baselines.py`.
pub fn all_cases() -> Vec<Case> {
    vec![
        case!(gated_mlp_bs1, [1.0, 0.02, 0.02]),
        case!(gated_mlp_bs8, [1.0, 0.02, 0.02]),
        case!(rmsnorm_linear_bs1, [1.0, 0.02]),
        case!(rmsnorm_linear_bs8, [1.0, 0.02]),
        case!(gqa_bs1, [0.1, 0.1, 1.0]),
        case!(gqa_bs8, [0.1, 0.1, 1.0]),
        case!(qknorm_gqa_bs1, [1.0, 0.1, 1.0]),
        case!(qknorm_gqa_bs8, [1.0, 0.1, 1.0]),
        case!(ntrans_bs1, [1.0, 1.0, 1.0]),
        case!(ntrans_bs8, [1.0, 1.0, 1.0]),
        case!(lora, [1.0, 0.05, 0.05, 0.05]),
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

/// A small xorshift generator of values in [-1, 1) (no extra dependency).
fn random_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Rounds values to the element type of a tensor, so the reference sees what the GPU sees.
fn round_to(dtype: mirage::DType, values: &mut [f32]) {
    for v in values {
        *v = match dtype {
            mirage::DType::F16 => mirage::half::f16::from_f32(*v).to_f32(),
            mirage::DType::Bf16 => mirage::half::bf16::from_f32(*v).to_f32(),
            _ => *v,
        };
    }
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
    /// Worst relative L2 error over the outputs.
    pub worst_rel: f64,
    /// One line per output: max abs error, largest |reference|, relative L2 error.
    pub lines: Vec<String>,
    /// The uploaded inputs (kept for timing).
    pub inputs: Vec<AnyTensor>,
}

/// The tolerance on the relative L2 error against the f32 reference (f16 programs).
pub const TOLERANCE: f64 = 2e-2;

/// Uploads random inputs at the case's scales, runs the typed launcher once and compares every
/// output with the CPU reference interpreter.
pub fn check(gpu: &Gpu, case: &Case, lowered: &Lowered) -> Result<Checked, Box<dyn Error>> {
    let plan = case.program.plan()?;
    let stream = gpu.stream();
    let mut host = Vec::new();
    let mut device = Vec::new();
    for (i, spec) in plan.inputs.iter().enumerate() {
        let scale =
            case.scales.get(i).copied().ok_or_else(|| format!("{}: no input scale for input {i}", case.name))?;
        let mut values = random_values(spec.num_elements(), 17 + i as u64);
        values.iter_mut().for_each(|v| *v *= scale);
        round_to(spec.dtype, &mut values);
        device.push(AnyTensor::upload_f32(stream, spec, &values)?);
        host.push(mirage::reference::HostTensor::new(spec.shape.clone(), values)?);
    }
    let outputs = (case.launch)(gpu, &device)?;
    let got: Vec<Vec<f32>> = outputs.iter().map(AnyTensor::to_host_f32).collect::<Result<_, _>>()?;
    let t = Instant::now();
    let want = mirage::reference::run(&lowered.graph, &host)?;
    let reference_s = t.elapsed().as_secs_f64();
    let mut worst_rel = 0.0f64;
    let mut lines = Vec::new();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let (mut max_abs, mut num, mut den, mut scale) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for (&a, &b) in g.iter().zip(&w.data) {
            let d = if a.is_finite() { f64::from((a - b).abs()) } else { f64::INFINITY };
            max_abs = max_abs.max(d);
            num += d * d;
            den += f64::from(b) * f64::from(b);
            scale = scale.max(f64::from(b.abs()));
        }
        let rel = if num.is_finite() { (num / den.max(1e-30)).sqrt() } else { f64::INFINITY };
        worst_rel = worst_rel.max(rel);
        lines.push(format!(
            "output {k}: max abs error {max_abs:.3e} (largest |reference| {scale:.3e}), relative L2 error {rel:.2e} (reference on the CPU: {reference_s:.1} s)"
        ));
    }
    if got.len() != want.len() {
        return Err(format!("{}: {} outputs, the reference has {}", case.name, got.len(), want.len()).into());
    }
    Ok(Checked { worst_rel, lines, inputs: device })
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
    for line in &checked.lines {
        println!("  {line}");
    }
    let stats = time(gpu, case, &checked.inputs, 10, 100)?;
    println!(
        "  time: median {:.1} µs (min {:.1}, max {:.1}; {} runs, L2 flushed)",
        stats.median_us, stats.min_us, stats.max_us, stats.samples
    );
    if checked.worst_rel.is_nan() || checked.worst_rel > TOLERANCE {
        return Err(
            format!("{}: relative L2 error {:.2e} exceeds {TOLERANCE:.0e}", case.name, checked.worst_rel).into()
        );
    }
    Ok(())
}
