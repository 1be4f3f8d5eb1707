//! Runtime-sized dims on the GPU: the gated MLP `silu(x @ w1) * (x @ w2)` over `B = 1..=64`,
//! searched and generated once at `B = 64`, launched at 12 sizes (1, 3, 17, 63, 64 among them)
//! and compared with the f32 reference at each; wrong sizes are errors before any launch; and a
//! timing of the `B`-variable build against fixed builds at a few sizes.
//!
//! Run on a GPU: `cargo test --release -p mirage-rs --features build --test dims_gpu -- --ignored
//! --nocapture`.
#![cfg(feature = "build")]

use std::time::{Duration, Instant};

use mirage::codegen::{KernelOptions, generate_sized};
use mirage::dims::{DimPlan, DimVar, Dims};
use mirage::eval::evaluate_at;
use mirage::ir::{DType, KernelGraph};
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage::reference::{F32, HostTensor};
use mirage::search::{SearchConfig, superoptimize};
use mirage_runtime::half::f16;
use mirage_runtime::{Gpu, Program, TensorArg};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const K: usize = 256;
const N: usize = 512;

fn program(b: usize) -> Result<KernelGraph, mirage::ir::IrError> {
    let mut p = KernelGraph::new();
    let x = p.input(&[b, K], DType::F16)?;
    let w1 = p.input(&[K, N], DType::F16)?;
    let w2 = p.input(&[K, N], DType::F16)?;
    let (a, g) = (p.matmul(x, w1)?, p.matmul(x, w2)?);
    let s = p.silu(a)?;
    let y = p.mul(s, g)?;
    p.output(y, None)?;
    Ok(p)
}

fn over_b() -> Dims {
    Dims {
        vars: vec![DimVar { name: "B".into(), lo: 1, hi: 64 }],
        inputs: vec![vec![Some(0), None], vec![None; 2], vec![None; 2]],
    }
}

/// Searches, generates and compiles `program` (with `dims`, or static) into a loaded program.
fn build(
    p: &KernelGraph,
    dims: &Dims,
    name: &'static str,
) -> Result<(KernelGraph, &'static Program), Box<dyn std::error::Error>> {
    let cfg = SearchConfig { dims: dims.clone(), offline: Some(false), ..SearchConfig::default() };
    let r = superoptimize(p, &cfg, None)?;
    let g = generate_sized(&r.best.graph, dims, name, &KernelOptions::default())?;
    let cubin = compile_cubin(&g.source, name, &CompileOptions { arch: Some("sm_90a".into()), ..Default::default() })?;
    let cubin: &'static [u8] = Box::leak(cubin.bytes.into_boxed_slice());
    let program: &'static Program = Box::leak(Box::new(Program::with_plan(name, cubin, g.plan)?));
    Ok((r.best.graph, program))
}

fn values(n: usize, salt: usize) -> Vec<f16> {
    (0..n).map(|i| f16::from_f32((((i * 7 + salt * 13) % 29) as f32 - 14.0) / 64.0)).collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gated_mlp_over_b_matches_the_reference_at_twelve_sizes() -> TestResult {
    let gpu = Gpu::new(0)?;
    let p = program(64)?;
    let dims = over_b();
    let (_, prog) = build(&p, &dims, "dims_gmlp")?;
    let plan = DimPlan::analyze(&p, &dims)?;
    let (w1, w2) = (values(K * N, 1), values(K * N, 2));
    let (dw1, dw2) = (gpu.upload(&w1, &[K, N])?, gpu.upload(&w2, &[K, N])?);
    for b in [1, 2, 3, 5, 8, 16, 17, 31, 33, 48, 63, 64] {
        let x = values(b * K, b);
        let dx = gpu.upload(&x, &[b, K])?;
        let args = [TensorArg::from(&dx), TensorArg::from(&dw1), TensorArg::from(&dw2)];
        let out = prog.run(gpu.stream(), &args)?;
        let got = out[0].to_host_f32()?;
        assert_eq!(out[0].shape(), &[b, N], "B = {b}: the output follows B");
        let host = |v: &[f16], s: &[usize]| HostTensor::from_f16(s.to_vec(), v);
        let inputs = [host(&x, &[b, K])?, host(&w1, &[K, N])?, host(&w2, &[K, N])?];
        let want = evaluate_at(&p, &F32, &inputs, &plan.run_shapes(&p, &[b])?)?;
        let scale = want[0].data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = got.iter().zip(&want[0].data).map(|(g, w)| (g - w).abs()).fold(0.0f32, f32::max);
        println!("B = {b:2}: max |error| {worst:.2e} (outputs up to {scale:.2e})");
        assert!(worst <= 2e-2 * scale.max(1e-3), "B = {b}: max error {worst} at scale {scale}");
    }
    // Wrong sizes are errors before any launch.
    let dx = gpu.upload(&values(65 * K, 0), &[65, K])?;
    let e = prog.run(gpu.stream(), &[TensorArg::from(&dx), TensorArg::from(&dw1), TensorArg::from(&dw2)]);
    let e = e.err().ok_or("B = 65 must be refused")?.to_string();
    assert!(e.contains("B in 1..=64") && e.contains("B = 65"), "{e}");
    Ok(())
}

fn time(prog: &'static Program, gpu: &Gpu, args: &[TensorArg<'_>]) -> Result<Duration, Box<dyn std::error::Error>> {
    for _ in 0..10 {
        prog.run(gpu.stream(), args)?;
    }
    gpu.stream().synchronize()?;
    let start = Instant::now();
    let reps = 200;
    for _ in 0..reps {
        prog.run(gpu.stream(), args)?;
    }
    gpu.stream().synchronize()?;
    Ok(start.elapsed() / reps)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn timing_of_the_b_variable_build_against_fixed_builds() -> TestResult {
    let gpu = Gpu::new(0)?;
    let (_, variable) = build(&program(64)?, &over_b(), "dims_gmlp_var")?;
    let (w1, w2) = (gpu.upload(&values(K * N, 1), &[K, N])?, gpu.upload(&values(K * N, 2), &[K, N])?);
    println!("{:>4} {:>12} {:>12} {:>7}", "B", "variable µs", "fixed µs", "ratio");
    for (b, name) in [(1, "dims_fixed_1"), (8, "dims_fixed_8"), (17, "dims_fixed_17"), (64, "dims_fixed_64")] {
        let (_, fixed) = build(&program(b)?, &Dims::default(), name)?;
        let x = gpu.upload(&values(b * K, b), &[b, K])?;
        let args = [TensorArg::from(&x), TensorArg::from(&w1), TensorArg::from(&w2)];
        let (tv, tf) = (time(variable, &gpu, &args)?, time(fixed, &gpu, &args)?);
        let ratio = tv.as_secs_f64() / tf.as_secs_f64();
        println!("{b:>4} {:>12.2} {:>12.2} {ratio:>7.3}", tv.as_secs_f64() * 1e6, tf.as_secs_f64() * 1e6);
    }
    Ok(())
}

/// What the GPU tests build, built here (no GPU needed): the search's choice at `B = 64` has a
/// code path at runtime sizes.
#[test]
fn the_gated_mlp_over_b_builds_for_the_gpu_tests() -> TestResult {
    let (graph, prog) = build(&program(64)?, &over_b(), "dims_gmlp_cpu")?;
    let plan = prog.plan()?;
    assert_eq!(plan.dims.len(), 1);
    assert!(plan.kernels.iter().all(|k| k.size_args == vec![0]), "{}", mirage::search::describe(&graph));
    Ok(())
}
