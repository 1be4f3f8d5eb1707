//! GPU test of the random programs (`mirage::testing::random`): the kernels built on the
//! development machine by `mirage/tests/random_programs.rs`' pack test (at least 300 programs,
//! cubins for sm_90a) run on the GPU and match the f32 reference of their programs on fresh
//! random inputs.
//!
//! The pack is a directory (`$MIRAGE_RANDOM_PACK`, by default `.gpu/random`, which
//! `scripts/gpu-run-all.sh` unpacks from `.gpu/random.tar.xz`) holding `kernels.rs` (the
//! programs' source, lowered here for the reference) and per function `<name>.cubin`,
//! `<name>.plan.json` and `<name>.mugraph.json` (the chosen µGraph). Outputs and intermediate
//! buffers are NaN-poisoned before each launch (an element no kernel writes fails); every output
//! is compared with `mirage::testing::compare::compare_with_spread`: the tolerance of the output
//! type's rounding and the reduction length, plus the rounding error this program's
//! conditioning propagates at these inputs (Monte Carlo arithmetic on the chosen µGraph,
//! `mirage::testing::rounding`). A mismatch prints the program, its input seed, the worst
//! elements with their indices, values and tolerances, and what the device's storage rounding
//! alone gives there (`run_stored`), and fails the test. Inputs come from
//! `mirage::testing::inputs::finite_reference`: where the reference is not finite on the first
//! draw, later draws (narrower ranges) are taken; a program with no finite reference on any draw
//! is printed and counted apart, and more than `MAX_WITHOUT_FINITE_REFERENCE` of them fail the
//! test. The seed is printed and
//! `MIRAGE_TEST_SEED` replays it; `MIRAGE_RANDOM_LIMIT=N` runs the first `N` programs only (the
//! sanitizer stage of the run script).
//!
//! `#[ignore = "needs a CUDA GPU"]`: run on the GPU machine with `--ignored`.

use std::path::PathBuf;

use mirage::codegen::plan::LaunchPlan;
use mirage::ir::{KernelGraph, TensorDesc};
use mirage::lower::lower_source;
use mirage::testing::compare::{ErrorModel, compare_with_spread, reduction_len, worst_elements};
use mirage::testing::inputs::{finite_reference, seed};
use mirage::testing::random::{INPUT_RANGE, MAX_WITHOUT_FINITE_REFERENCE};
use mirage::testing::rounding::{rounding_spread, run_stored};
use mirage_runtime::{AnyTensor, Gpu, Program, TensorArg};

/// The fewest programs a full pack holds (the issue asks for 300 on the GPU).
const MIN_PROGRAMS: usize = 300;

fn pack_dir() -> PathBuf {
    std::env::var_os("MIRAGE_RANDOM_PACK").map_or_else(|| PathBuf::from(".gpu/random"), PathBuf::from)
}

fn read(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/gpu-pack.sh packs the random programs)", path.display()))
}

/// The text of function `name` in the kernels file `source` (for a mismatch's report).
fn function_source<'a>(source: &'a str, name: &str) -> &'a str {
    let Some(start) = source.find(&format!("pub fn {name}(")) else { return "(not found in kernels.rs)" };
    let start = source[..start].rfind("#[mugraph]").unwrap_or(start);
    let end = source[start..].find("\n}\n").map_or(source.len(), |e| start + e + 3);
    &source[start..end]
}

fn poisoned(gpu: &Gpu, spec: &TensorDesc) -> AnyTensor {
    AnyTensor::upload_f32(gpu.stream(), spec, &vec![f32::NAN; spec.num_elements()])
        .unwrap_or_else(|e| panic!("allocating: {e}"))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn random_programs_match_the_reference_on_the_gpu() {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed("random_programs_match_the_reference_on_the_gpu").unwrap_or_else(|e| panic!("{e}"));
    println!("{}", gpu.info());
    let dir = pack_dir();
    let source = String::from_utf8(read(dir.join("kernels.rs"))).unwrap_or_else(|e| panic!("kernels.rs: {e}"));
    let programs = lower_source(&source).unwrap_or_else(|e| panic!("{e}"));
    let limit = match std::env::var("MIRAGE_RANDOM_LIMIT") {
        Ok(v) => v.trim().parse::<usize>().unwrap_or_else(|e| panic!("MIRAGE_RANDOM_LIMIT={v:?}: {e}")),
        Err(_) => {
            assert!(
                programs.len() >= MIN_PROGRAMS,
                "the pack holds {} programs, expected at least {MIN_PROGRAMS}",
                programs.len()
            );
            programs.len()
        }
    };
    let (mut failures, mut outputs, mut ran) = (Vec::new(), 0, 0);
    // Programs compared on redrawn inputs (their reference was not finite on the first draw), and
    // programs without a finite reference on any draw (counted apart, not compared).
    let (mut redrawn, mut no_finite) = (Vec::new(), Vec::new());
    let mut worst: std::collections::BTreeMap<&'static str, (f64, String)> = Default::default();
    for program in programs.iter().take(limit) {
        let name = program.name.as_str();
        let plan_json =
            String::from_utf8(read(dir.join(format!("{name}.plan.json")))).unwrap_or_else(|e| panic!("{e}"));
        let plan = LaunchPlan::from_json(&plan_json).unwrap_or_else(|e| panic!("{name}: {e}"));
        let cubin: &'static [u8] = Box::leak(read(dir.join(format!("{name}.cubin"))).into_boxed_slice());
        let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
        // Programs live in statics normally (the launch borrows it for 'static).
        let exe: &'static Program = Box::leak(Box::new(
            Program::with_plan(leaked, cubin, plan.clone()).unwrap_or_else(|e| panic!("{name}: {e}")),
        ));
        let mugraph_json = String::from_utf8(read(dir.join(format!("{name}.mugraph.json"))))
            .unwrap_or_else(|e| panic!("{name}.mugraph.json: {e}"));
        let mugraph = KernelGraph::from_json(&mugraph_json).unwrap_or_else(|e| panic!("{name}.mugraph.json: {e}"));
        let input_seed = seed ^ ran as u64;
        let reference = finite_reference(&program.graph, input_seed, |_| INPUT_RANGE)
            .unwrap_or_else(|e| panic!("{name}: reference: {e}"));
        let (host, want, draw) = match reference {
            Ok(r) => {
                if r.attempt > 0 {
                    redrawn.push(format!("{name} (draw {}, ranges ×{})", r.attempt, r.scale));
                }
                (r.inputs, r.outputs, r.attempt)
            }
            Err(why) => {
                println!(
                    "NO FINITE REFERENCE {name} (inputs: seed {input_seed} = MIRAGE_TEST_SEED {seed} ^ program {ran}): {why}\n  program:\n{}",
                    function_source(&source, name)
                );
                no_finite.push(format!("{name}: {why}"));
                ran += 1;
                continue;
            }
        };
        let spread = rounding_spread(&mugraph, &host, &want).unwrap_or_else(|e| panic!("{name}: rounding spread: {e}"));
        let dev: Vec<AnyTensor> = program
            .params
            .iter()
            .zip(&host)
            .map(|(p, h)| {
                AnyTensor::upload_f32(gpu.stream(), &p.desc, &h.data).unwrap_or_else(|e| panic!("upload: {e}"))
            })
            .collect();
        let mut outs: Vec<AnyTensor> = plan.outputs.iter().map(|s| poisoned(&gpu, s)).collect();
        let mut bufs: Vec<AnyTensor> = plan.buffers.iter().map(|b| poisoned(&gpu, &b.desc)).collect();
        let args: Vec<TensorArg<'_>> = dev.iter().map(AnyTensor::as_arg).collect();
        exe.launch(gpu.stream(), &args, &mut outs, &mut bufs).unwrap_or_else(|e| panic!("{name}: {e}"));
        gpu.synchronize().unwrap_or_else(|e| panic!("{name}: {e}"));
        let k = reduction_len(program.params.iter().map(|p| p.desc.shape.as_slice()));
        for (i, (o, w)) in outs.iter().zip(&want).enumerate() {
            let got = o.to_host_f32().unwrap_or_else(|e| panic!("download: {e}"));
            let model = ErrorModel::new(plan.outputs[i].dtype, k);
            let c = compare_with_spread(&got, &w.data, &w.shape, model, &spread[i])
                .unwrap_or_else(|e| panic!("{name} output {i}: {e}"));
            let ratio = c.worst.as_ref().map_or(0.0, |w| w.ratio());
            let entry = worst.entry(model.dtype.name()).or_insert((-1.0, String::new()));
            if ratio > entry.0 {
                *entry = (ratio, format!("{name} output {i}: {c}"));
            }
            if !c.passed() {
                let stored = run_stored(&mugraph, &host).map(|mut s| s.swap_remove(i));
                let mut report = format!(
                    "MISMATCH {name} output {i} (inputs: seed {input_seed} = MIRAGE_TEST_SEED {seed} ^ program {ran}, draw {draw} of finite_reference): {c}\n  worst elements (index: got, want, |error|, allowed = atol + rtol·|want| + λ·spread, spread; storage-rounded µGraph):"
                );
                for e in worst_elements(&got, &w.data, &w.shape, &c, &spread[i], 8) {
                    let flat = e.index.iter().zip(&w.shape).fold(0, |f, (&x, &n)| f * n + x);
                    let s_at = stored.as_ref().map_or(f32::NAN, |s| s.data[flat]);
                    report += &format!(
                        "\n    {:?}: got {:e}, want {:e}, |error| {:.3e}, allowed {:.3e} ({:.2}×), spread {:.3e}; stored {:e}",
                        e.index,
                        e.got,
                        e.want,
                        e.error,
                        e.allowed,
                        e.ratio(),
                        spread[i][flat],
                        s_at
                    );
                }
                report += &format!("\n  program:\n{}", function_source(&source, name));
                println!("{report}");
                failures.push(report);
            }
            outputs += 1;
        }
        ran += 1;
    }
    println!(
        "random programs: {ran} run on the GPU, {outputs} outputs compared with the reference, {} mismatched",
        failures.len()
    );
    println!("random: worst element error per element type (error / tolerance, ≤ 1 passes):");
    for (dtype, (ratio, what)) in &worst {
        println!("  {dtype}: {ratio:.3} — {what}");
    }
    println!(
        "random: {} compared on redrawn inputs{}; {} without a finite reference on any draw (at most {MAX_WITHOUT_FINITE_REFERENCE} allowed){}",
        redrawn.len(),
        if redrawn.is_empty() { String::new() } else { format!(" ({})", redrawn.join(", ")) },
        no_finite.len(),
        if no_finite.is_empty() { String::new() } else { format!(": {}", no_finite.join("; ")) }
    );
    assert_eq!(ran, limit.min(programs.len()));
    assert!(
        no_finite.len() <= MAX_WITHOUT_FINITE_REFERENCE,
        "{} programs have no finite reference on any draw of inputs:\n{}",
        no_finite.len(),
        no_finite.join("\n")
    );
    assert!(failures.is_empty(), "{} outputs mismatch:\n{}", failures.len(), failures.join("\n"));
}
