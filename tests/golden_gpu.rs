//! GPU golden test: the kernels generated for every golden µGraph (the program itself and every
//! candidate Mirage found, built by the root build.rs into one cubin per file) run on the GPU and
//! match the CPU reference interpreter on fresh random inputs; so do the coverage programs
//! (`mirage::testing::programs::coverage_cases`: every operator, accumulator,
//! imap/omap/forloop combination, strided inputs, odd tile shapes) in f16, bf16 and f32.
//!
//! Every output is checked element by element with `mirage::testing::compare` (tolerance from
//! the output type's rounding and the reduction length, the relative L2 error as a second
//! figure); outputs and intermediate buffers are NaN-poisoned before each launch, so an element
//! no kernel writes fails. Inputs come from `mirage::testing::inputs` at each program's ranges
//! (the coverage clamp is active on both sides, `exp` and the reductions see realistic
//! magnitudes); the seed is printed and `MIRAGE_TEST_SEED` replays it. Each test ends with the
//! worst element error per element type.
//!
//! `#[ignore = "needs a CUDA GPU"]`: run on the GPU machine with `--ignored`.

use std::collections::BTreeMap;
use std::ops::Range;

use mirage::codegen::plan::LaunchPlan;
use mirage::ir::{DType, KernelGraph, TensorDesc};
use mirage::reference::{HostTensor, run};
use mirage::testing::compare::{Comparison, ErrorModel, compare, reduction_len};
use mirage::testing::inputs::{coverage_input_range, golden_input_range, random_inputs, seed};
use mirage::testing::programs::{coverage_cases, golden_cases};
use mirage_runtime::{AnyTensor, Gpu, Program, TensorArg};

include!(concat!(env!("OUT_DIR"), "/golden/index.rs"));

/// Coverage programs per element type (`coverage_cases`): every one must have run.
const COVERAGE_PROGRAMS: usize = 57;

/// A tensor of `spec`'s shape and type filled with NaN.
fn poisoned(gpu: &Gpu, spec: &TensorDesc) -> AnyTensor {
    AnyTensor::upload_f32(gpu.stream(), spec, &vec![f32::NAN; spec.num_elements()])
        .unwrap_or_else(|e| panic!("allocating: {e}"))
}

/// Runs a launch plan with the runtime's executor (`mirage_runtime::Program`) into NaN-poisoned
/// outputs and intermediate buffers.
fn run_plan(gpu: &Gpu, program: &'static Program, inputs: &[AnyTensor]) -> Vec<Vec<f32>> {
    let plan = program.plan().unwrap_or_else(|e| panic!("{e}"));
    let mut outputs: Vec<AnyTensor> = plan.outputs.iter().map(|s| poisoned(gpu, s)).collect();
    let mut buffers: Vec<AnyTensor> = plan.buffers.iter().map(|b| poisoned(gpu, &b.desc)).collect();
    let args: Vec<TensorArg<'_>> = inputs.iter().map(AnyTensor::as_arg).collect();
    program.launch(gpu.stream(), &args, &mut outputs, &mut buffers).unwrap_or_else(|e| panic!("{}: {e}", plan.name));
    gpu.synchronize().unwrap_or_else(|e| panic!("{}: {e}", plan.name));
    outputs.iter().map(|o| o.to_host_f32().unwrap_or_else(|e| panic!("download: {e}"))).collect()
}

/// The worst comparison seen per output element type, and every failure.
#[derive(Default)]
struct Tally {
    worst: BTreeMap<&'static str, (f64, String)>,
    failures: Vec<String>,
    outputs: usize,
}

impl Tally {
    fn record(&mut self, what: String, c: &Comparison) {
        self.outputs += 1;
        let ratio = c.worst.as_ref().map_or(0.0, |w| w.ratio());
        let entry = self.worst.entry(c.model.dtype.name()).or_insert((-1.0, String::new()));
        if ratio > entry.0 {
            *entry = (ratio, format!("{what}: {c}"));
        }
        if !c.passed() {
            self.failures.push(format!("{what}: {c}"));
        }
    }

    /// Prints the worst element per element type and fails with every mismatch.
    fn finish(self, test: &str) {
        println!("{test}: worst element error per element type (error / tolerance, ≤ 1 passes):");
        for (dtype, (ratio, what)) in &self.worst {
            println!("  {dtype}: {ratio:.3} — {what}");
        }
        assert!(self.failures.is_empty(), "{} outputs mismatch:\n{}", self.failures.len(), self.failures.join("\n"));
    }
}

/// Runs every plan of a unit against the reference of its graph (`graphs[i]` for `plans[i]`);
/// input `j` of graph `i` is drawn from `range(i, j)`. Returns the number of graphs run.
fn check_unit(
    gpu: &Gpu,
    unit: &str,
    graphs: &[(String, KernelGraph)],
    range: impl Fn(usize, usize) -> Range<f32>,
    seed: u64,
    tally: &mut Tally,
) -> usize {
    let (_, cubin, plans_json) = GOLDEN_UNITS.iter().find(|u| u.0 == unit).unwrap_or_else(|| panic!("no unit {unit}"));
    let plans: Vec<LaunchPlan> = serde_json::from_str(plans_json).unwrap_or_else(|e| panic!("{unit}: plans: {e}"));
    assert_eq!(plans.len(), graphs.len(), "{unit}: one plan per graph");
    let unit_name: &'static str = Box::leak(unit.to_string().into_boxed_str());
    type Prepared = (Vec<TensorDesc>, Vec<Range<f32>>, Vec<AnyTensor>, Vec<HostTensor>);
    let mut cache: Option<Prepared> = None;
    let mut ran = 0;
    for (i, (plan, (graph_name, graph))) in plans.into_iter().zip(graphs).enumerate() {
        let name = plan.name.clone();
        let output_types: Vec<_> = plan.outputs.iter().map(|s| s.dtype).collect();
        // One program per plan, all sharing the unit's cubin; programs live in statics normally.
        let program: &'static Program =
            Box::leak(Box::new(Program::with_plan(unit_name, cubin, plan).unwrap_or_else(|e| panic!("{name}: {e}"))));
        // Graphs with the same inputs and ranges (a program and its candidates) share inputs and
        // the reference.
        let descs: Vec<TensorDesc> = graph.inputs().into_iter().cloned().collect();
        let ranges: Vec<Range<f32>> = (0..descs.len()).map(|j| range(i, j)).collect();
        if cache.as_ref().is_none_or(|c| c.0 != descs || c.1 != ranges) {
            let specs: Vec<TensorDesc> = descs.clone();
            let host = random_inputs(&specs, seed, |j| ranges[j].clone());
            let dev = specs
                .iter()
                .zip(&host)
                .map(|(s, h)| AnyTensor::upload_f32(gpu.stream(), s, &h.data).unwrap_or_else(|e| panic!("upload: {e}")))
                .collect();
            cache = Some((descs.clone(), ranges, dev, host));
        }
        let (_, _, dev_inputs, host_inputs) = cache.as_ref().expect("inputs prepared");
        let expected = run(graph, host_inputs).unwrap_or_else(|e| panic!("{name}: reference: {e}"));
        let got = run_plan(gpu, program, dev_inputs);
        assert_eq!(got.len(), expected.len(), "{name}: output count");
        let k_len = reduction_len(descs.iter().map(|d| d.shape.as_slice()));
        for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
            let model = ErrorModel::new(output_types[k], k_len);
            let c = compare(g, &w.data, &w.shape, model).unwrap_or_else(|e| panic!("{name} output {k}: {e}"));
            tally.record(format!("{unit} {graph_name} output {k}"), &c);
        }
        ran += 1;
    }
    let worst = tally.worst.values().map(|w| w.0).fold(0.0, f64::max);
    println!("{unit}: {ran} µGraphs run against the reference (worst element so far {worst:.3} of the tolerance)");
    ran
}

fn open(test: &str) -> (Gpu, u64) {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed(test).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", gpu.info());
    (gpu, seed)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn golden_kernels_match_the_reference_on_the_gpu() {
    let (gpu, seed) = open("golden_kernels_match_the_reference_on_the_gpu");
    let part = golden_part(std::env::var("MIRAGE_GOLDEN_PART").ok().as_deref()).unwrap_or_else(|e| panic!("{e}"));
    let mut tally = Tally::default();
    let mut total = 0;
    let cases = golden_cases();
    let count = cases.len();
    for (i, case) in cases.into_iter().enumerate() {
        if part.is_some_and(|part| !in_part(i, count, part)) {
            continue;
        }
        let graphs = case.named_graphs().unwrap_or_else(|e| panic!("{e}"));
        let range = |_: usize, j: usize| golden_input_range(case.name, j);
        total += check_unit(&gpu, case.name, &graphs, range, seed, &mut tally);
    }
    if let Some((k, n)) = part {
        // A part (MIRAGE_GOLDEN_PART=k/n): the parts together are the whole set, which the
        // unsplit run counts.
        println!("golden part {k}/{n}: {total} µGraphs, {} outputs compared", tally.outputs);
        assert!(total > 0, "golden part {k}/{n} ran no µGraph");
    } else {
        println!("golden: {total} µGraphs (9 programs + 181 Mirage candidates), {} outputs compared", tally.outputs);
        assert_eq!(total, 181 + 9);
    }
    tally.finish("golden");
}

/// `MIRAGE_GOLDEN_PART=k/n` (1 ≤ k ≤ n ≤ 9): the k-th of n consecutive parts of the golden
/// programs, so compute-sanitizer's slower tools can check them in separate, bounded runs.
fn golden_part(value: Option<&str>) -> Result<Option<(usize, usize)>, String> {
    let Some(v) = value else { return Ok(None) };
    let bad = || format!("MIRAGE_GOLDEN_PART={v:?}: expected k/n with 1 <= k <= n <= 9");
    let (k, n) = v.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if k == 0 || k > n || n > 9 {
        return Err(bad());
    }
    Ok(Some((k, n)))
}

/// Whether program `i` of `count` falls in part `k` of `n` (`(k, n)`, 1-based `k`): consecutive
/// runs of about `count / n` programs.
fn in_part(i: usize, count: usize, (k, n): (usize, usize)) -> bool {
    i * n / count == k - 1
}

/// On the CPU: the parts of `MIRAGE_GOLDEN_PART` cover every golden program exactly once, and
/// bad values are errors.
#[test]
fn golden_parts_cover_every_program_once() {
    assert_eq!(golden_part(None), Ok(None));
    assert_eq!(golden_part(Some("2/3")), Ok(Some((2, 3))));
    for bad in ["0/3", "4/3", "1/10", "x/2", "3", ""] {
        assert!(golden_part(Some(bad)).is_err(), "{bad:?} accepted");
    }
    let count = golden_cases().len();
    for n in 1..=9 {
        let mut seen = vec![0; count];
        for k in 1..=n {
            for (i, s) in seen.iter_mut().enumerate() {
                if in_part(i, count, (k, n)) {
                    *s += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "parts of {n}: {seen:?}");
    }
}

/// On the CPU (so CI sees it): the count the GPU test expects is the count there is, for every
/// element type; a program added or dropped changes it here first.
#[test]
fn the_gpu_test_expects_every_coverage_program() {
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let graphs = coverage_cases(dtype).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(graphs.len(), COVERAGE_PROGRAMS, "{dtype:?}: update COVERAGE_PROGRAMS");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn coverage_kernels_match_the_reference_on_the_gpu() {
    let (gpu, seed) = open("coverage_kernels_match_the_reference_on_the_gpu");
    let mut tally = Tally::default();
    let mut total = 0;
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let name = format!("coverage_{}", dtype.name());
        let graphs = coverage_cases(dtype).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(graphs.len(), COVERAGE_PROGRAMS, "{name}: coverage programs");
        let range = |i: usize, j: usize| coverage_input_range(&graphs[i].0, j);
        let ran = check_unit(&gpu, &name, &graphs, range, seed, &mut tally);
        assert_eq!(ran, COVERAGE_PROGRAMS, "{name}: programs run");
        total += ran;
    }
    println!("coverage: {total} generated programs, {} outputs compared", tally.outputs);
    assert_eq!(total, 3 * COVERAGE_PROGRAMS);
    tally.finish("coverage");
}
