//! Stacked copies of a runtime-sized dim (`mirage::dims::Extent::Stacked`): split-K over a batch
//! `B` chosen at launch. A first kernel's blocks each cover `B` whole and one range of the
//! contraction, and stack their partial sums along the batch dim (laid out at the upper bound,
//! each copy valid on its first `B` rows); a second kernel reads one copy per iteration, its rows
//! past `B` as padding (zeros), and sums them. On the CPU: the plan follows the copies, the
//! µGraph computes the program at every size (f32 and the fingerprint check, also where the
//! first kernel leaves non-zero values in the rows past `B`), what cannot read copies is refused
//! with a reason, the kernels predicate loads and stores on the row inside its copy and compile
//! with nvcc, and the search over a batch range takes split-K µGraphs as candidates. On a GPU
//! (ignored without one): both split-K variants at nine batch sizes against the f32 reference.
//!
//! Run on a GPU: `cargo test --release -p mirage-rs --features build --test dims_stacked --
//! --ignored --nocapture`.
#![cfg(feature = "build")]

mod support;
use support::inputs;

use std::time::Duration;

use mirage::codegen::{KernelOptions, generate_sized, sized_support};
use mirage::cost::{Arch, estimate_sizes};
use mirage::dims::{DimPlan, DimVar, Dims, Extent};
use mirage::eval::evaluate_at;
use mirage::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, IrError, KernelGraph, TensorDesc, UnaryOp};
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage::reference::{F32, max_scaled_error};
use mirage::search::ranges::RangeCheck;
use mirage::search::{SearchConfig, candidates};
use mirage_runtime::half::f16;
use mirage_runtime::{Gpu, Program, TensorArg};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The batch's upper bound, the contraction and the output width.
const HI: usize = 48;
const K: usize = 256;
const N: usize = 128;
/// Ranges of the contraction (the copies).
const SPLITS: usize = 4;

/// `B = 1..=48` sizing dim 0 of input 0.
fn over_b() -> Dims {
    Dims {
        vars: vec![DimVar { name: "B".into(), lo: 1, hi: HI }],
        inputs: vec![vec![Some(0), None], vec![None, None], vec![None, None]],
    }
}

/// The gated MLP `silu(f(x) @ w1) * (f(x) @ w2)` with `f` = `exp` or the identity, x `[B, 256]`
/// (B = 1..=48), w1 and w2 `[256, 128]`, f16, with its maximum over the rows when `rows_max`.
fn program(exp: bool, rows_max: bool) -> Result<KernelGraph, IrError> {
    let mut p = KernelGraph::new();
    let x = p.input(&[HI, K], DType::F16)?;
    let w1 = p.input(&[K, N], DType::F16)?;
    let w2 = p.input(&[K, N], DType::F16)?;
    let fx = if exp { p.unary(UnaryOp::Exp, x)? } else { x };
    let a = p.matmul(fx, w1)?;
    let b = p.matmul(fx, w2)?;
    let s = p.silu(a)?;
    let mut y = p.mul(s, b)?;
    if rows_max {
        y = p.reduce_max(y, 0)?;
    }
    p.output(y, None)?;
    Ok(p)
}

/// The program as split-K: kernel 0 (grid `[4, 2]`) multiplies one range of 64 of the
/// contraction by 64 columns per block and stacks the partial sums of both products along the
/// batch dim (`[4 · 48, 128]`); kernel 1 (grid `[2]`, 4 iterations) sums the four copies of its
/// 64 columns, gates them, and (with `rows_max`) takes the maximum over the rows. `copy_rows` is
/// the rows kernel 1 reads per iteration (48: one copy; 96: two copies at once, which the plan
/// refuses).
fn split_k(exp: bool, rows_max: bool, copy_rows: usize) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[HI, K], DType::F16)?;
    let w1 = g.input(&[K, N], DType::F16)?;
    let w2 = g.input(&[K, N], DType::F16)?;
    let descs = vec![
        TensorDesc::new(&[HI, K], DType::F16),
        TensorDesc::new(&[K, N], DType::F16),
        TensorDesc::new(&[K, N], DType::F16),
    ];
    let mut k0 = BlockGraph::new(descs, [SPLITS, 2, 1], 128, 1)?;
    let tx = k0.input(0, [Some(1), None, None], None)?;
    let t1 = k0.input(1, [Some(0), Some(1), None], None)?;
    let t2 = k0.input(2, [Some(0), Some(1), None], None)?;
    let fx = if exp { k0.unary(UnaryOp::Exp, tx)? } else { tx };
    let a = k0.matmul(fx, t1)?;
    let b = k0.matmul(fx, t2)?;
    let (a, b) = (k0.accum(AccKind::Sum, &[a])?, k0.accum(AccKind::Sum, &[b])?);
    k0.output(a, [Some(0), Some(1), None])?;
    k0.output(b, [Some(0), Some(1), None])?;
    let parts = g.custom(&[x, w1, w2], k0)?;
    let stacked = TensorDesc::new(&[SPLITS * HI, N], DType::F16);
    let iters = SPLITS * HI / copy_rows;
    let mut k1 = BlockGraph::new(vec![stacked.clone(), stacked], [2, 1, 1], 128, iters)?;
    let pa = k1.input(0, [Some(1), None, None], Some(0))?;
    let pb = k1.input(1, [Some(1), None, None], Some(0))?;
    let sa = k1.accum(AccKind::Sum, &[pa])?;
    let sb = k1.accum(AccKind::Sum, &[pb])?;
    let s = k1.unary(UnaryOp::Silu, sa)?;
    let mut y = k1.binary(BinaryOp::Mul, s, sb)?;
    if rows_max {
        y = k1.op(BlockOp::ReduceMax { dim: 0 }, &[y])?;
    }
    k1.output(y, [Some(1), None, None])?;
    let out = g.custom(&[parts[0], parts[1]], k1)?[0];
    g.output(out, None)?;
    Ok(g)
}

/// `candidate` agrees with `program` at each batch size of `sizes` (f32, padded-tile rule).
fn agrees_at(program: &KernelGraph, candidate: &KernelGraph, sizes: &[usize]) -> Result<(), String> {
    let dims = over_b();
    let pplan = DimPlan::analyze(program, &dims).map_err(|e| e.to_string())?;
    let cplan = DimPlan::analyze(candidate, &dims).map_err(|e| e.to_string())?;
    for &n in sizes {
        let prun = pplan.run_shapes(program, &[n]).map_err(|e| e.to_string())?;
        // Small inputs: exp stays near 1 and the f16 inputs are exact in f32.
        let x: Vec<_> = inputs(&prun.inputs, n as u64)
            .into_iter()
            .map(|t| mirage::reference::HostTensor::new(t.shape.clone(), t.data.iter().map(|v| v / 8.0).collect()))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let want = evaluate_at(program, &F32, &x, &prun).map_err(|e| e.to_string())?;
        let crun = cplan.run_shapes(candidate, &[n]).map_err(|e| e.to_string())?;
        let got = evaluate_at(candidate, &F32, &x, &crun).map_err(|e| e.to_string())?;
        match max_scaled_error(&got[0], &want[0], 1e-4, 1e-4) {
            Some(e) if e <= 1.0 => {}
            e => return Err(format!("B = {n}: differs (scaled error {e:?})")),
        }
    }
    Ok(())
}

/// The fingerprint check and the f32 float check at the verification sizes of the range.
fn range_check(program: &KernelGraph, candidate: &KernelGraph) -> Result<(), String> {
    let cfg = SearchConfig { dims: over_b(), offline: Some(false), ..SearchConfig::default() };
    let mut check = RangeCheck::new(program, &cfg).map_err(|e| e.to_string())?;
    check.check(candidate, true).map_err(|e| e.to_string())?
}

const SIZES: [usize; 7] = [1, 2, 3, 17, 31, 47, 48];

#[test]
fn split_k_over_b_stacks_copies_and_computes_the_program_at_every_size() -> TestResult {
    let (p, g) = (program(false, false)?, split_k(false, false, HI)?);
    let plan = DimPlan::analyze(&g, &over_b())?;
    // Kernel 0's outputs: four copies of B side by side, laid out at the upper bound.
    let parts = mirage::ir::TensorRef { node: 3, port: 0 };
    assert_eq!(plan.extents(parts), &[Extent::Stacked { var: 0, copies: SPLITS, whole: HI }, Extent::Fixed(N)]);
    assert_eq!(plan.shape_at(parts, &[17]), vec![SPLITS * HI, N]);
    // Kernel 1 reads one copy per iteration (a fixed trip count) and its output follows B.
    let k1 = plan.kernel(4).ok_or("kernel 1")?;
    assert_eq!(k1.stacked, vec![(0, 0, 0), (1, 0, 0)]);
    assert_eq!((k1.forloop, k1.vars.as_slice()), (None, &[0usize][..]));
    assert_eq!(plan.shape_at(g.outputs()[0].0, &[17]), vec![17, N]);
    let run = plan.run_shapes(&g, &[17])?;
    assert_eq!(
        run.blocks[4].as_ref().map(|b| (b.forloop_range, b.stacked.clone())),
        Some((4, vec![(0, 0, 17), (1, 0, 17)]))
    );
    agrees_at(&p, &g, &SIZES)?;
    range_check(&p, &g)?;
    Ok(())
}

#[test]
fn rows_past_the_size_in_a_copy_are_padding_to_a_maximum_over_the_rows() -> TestResult {
    // The second kernel takes the maximum over the rows of its copies: it must skip a copy's
    // rows past B (zeros would win over negative maxima), as code does with a mask on the row
    // inside its copy. exp(x) makes the first kernel's padded rows exp(0) = 1 before its
    // accumulators.
    let (p, g) = (program(true, true)?, split_k(true, true, HI)?);
    agrees_at(&p, &g, &SIZES)?;
    range_check(&p, &g)?;
    range_check(&program(false, true)?, &split_k(false, true, HI)?)?;
    // A wrong candidate is still caught over the range: exp dropped.
    let why = range_check(&p, &split_k(false, true, HI)?).expect_err("another function");
    assert!(why.contains("differs at") || why.contains("float check"), "{why}");
    Ok(())
}

#[test]
fn what_cannot_read_stacked_copies_is_refused_with_a_reason() -> TestResult {
    let dims = over_b();
    // A tile of two copies at once: a block or iteration reads one copy whole.
    let e = DimPlan::analyze(&split_k(false, false, 2 * HI)?, &dims).expect_err("two copies per tile");
    assert!(e.to_string().contains("one copy whole"), "{e}");
    // A library operator on the copies, and the copies as a program output.
    let mut g = split_k(false, false, HI)?;
    let parts = mirage::ir::TensorRef { node: 3, port: 0 };
    let s = g.reduce_sum(parts, 0)?;
    g.output(s, None)?;
    let e = DimPlan::analyze(&g, &dims).expect_err("a library reduction over the copies");
    assert!(e.to_string().contains("stacked copies"), "{e}");
    let mut g = split_k(false, false, HI)?;
    g.output(parts, None)?;
    let e = DimPlan::analyze(&g, &dims).expect_err("the copies as an output");
    assert!(e.to_string().contains("stacked copies"), "{e}");
    Ok(())
}

#[test]
fn the_kernels_predicate_on_the_row_inside_its_copy_and_compile() -> TestResult {
    let g = split_k(true, true, HI)?;
    sized_support(&g, &over_b(), &KernelOptions::default())?;
    let k = generate_sized(&g, &over_b(), "splitk_b", &KernelOptions::default())?;
    let src = &k.kernels_source;
    // Kernel 0 stores a copy's rows below n0 only; kernel 1 loads a copy's rows below n0 and
    // zero-fills the rest.
    assert!(src.contains("% 48)) < n0"), "{src}");
    assert!(src.matches("% 48)").count() >= 3, "{src}");
    // Both kernels take the size: kernel 0 for x's rows and its stores, kernel 1 for its loads.
    assert_eq!(k.plan.kernels.iter().map(|k| k.size_args.clone()).collect::<Vec<_>>(), vec![vec![0], vec![0]]);
    let opts = CompileOptions { arch: Some("sm_90a".to_string()), ..Default::default() };
    let cubin = compile_cubin(&k.source, "splitk_b", &opts)?;
    assert!(cubin.bytes.starts_with(b"\x7fELF"), "an ELF cubin");
    Ok(())
}

#[test]
fn the_search_over_a_batch_range_takes_split_k_with_stacked_copies() -> TestResult {
    // The bench's gated MLP (4096 × 4096 weights) over B = 33..=48: the fixed build at 48 is a
    // split-K µGraph (4 ranges of the contraction, then a combine kernel); over the range it is
    // now a candidate with an estimate at every size, verified over the range and with code.
    let src = "#[mugraph(dims(B = 33..=48))]
        fn g(x: Tensor<f16, B, 4096>, w1: Tensor<f16, 4096, 4096>, w2: Tensor<f16, 4096, 4096>) -> Tensor<f16, B, 4096> {
            silu(x.matmul(w1)) * x.matmul(w2)
        }";
    let p = mirage::lower::lower_source(src)?.remove(0);
    let cfg = SearchConfig { dims: p.dims.clone(), budget: Duration::from_secs(600), ..SearchConfig::default() };
    let (cands, _) = candidates(&p.graph, &cfg, None)?;
    let stacked = |g: &KernelGraph| -> bool {
        DimPlan::analyze(g, &p.dims).is_ok_and(|plan| {
            g.nodes().iter().enumerate().any(|(i, n)| {
                (0..n.outputs.len()).any(|port| {
                    plan.extents(mirage::ir::TensorRef { node: i, port })
                        .iter()
                        .any(|e| matches!(e, Extent::Stacked { .. }))
                })
            })
        })
    };
    let split = cands.iter().find(|c| stacked(&c.graph)).ok_or("no split-K candidate over the range")?;
    let costs = estimate_sizes(&split.graph, &p.dims, &[vec![33], vec![40], vec![48]], &Arch::sm90())?;
    assert!(costs.iter().all(|c| c.total_us.is_finite() && c.kernels.len() == 2), "{costs:?}");
    let mut check = RangeCheck::new(&p.graph, &cfg)?;
    check.check(&split.graph, false)?.map_err(|e| format!("{e}\n{}", mirage::search::describe(&split.graph)))?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn split_k_over_b_matches_the_reference_on_the_gpu() -> TestResult {
    // Kernel 1 reads kernel 0's copies from a buffer laid out at B = 48 whose rows past B of
    // each copy kernel 0 never writes: every output would show a wrong or uninitialized row.
    let gpu = Gpu::new(0)?;
    let values = |n: usize, salt: usize| -> Vec<f16> {
        (0..n).map(|i| f16::from_f32((((i * 7 + salt * 13) % 29) as f32 - 14.0) / 128.0)).collect()
    };
    let (w1, w2) = (values(K * N, 1), values(K * N, 2));
    let (dw1, dw2) = (gpu.upload(&w1, &[K, N])?, gpu.upload(&w2, &[K, N])?);
    for (exp, rows_max, name) in [(false, false, "stacked_gmlp"), (true, true, "stacked_exp_max")] {
        let (p, g) = (program(exp, rows_max)?, split_k(exp, rows_max, HI)?);
        let k = generate_sized(&g, &over_b(), name, &KernelOptions::default())?;
        let cubin =
            compile_cubin(&k.source, name, &CompileOptions { arch: Some("sm_90a".into()), ..Default::default() })?;
        let cubin: &'static [u8] = Box::leak(cubin.bytes.into_boxed_slice());
        let prog: &'static Program = Box::leak(Box::new(Program::with_plan(name, cubin, k.plan)?));
        let plan = DimPlan::analyze(&p, &over_b())?;
        for b in [1, 2, 3, 16, 17, 31, 33, 47, 48] {
            let x = values(b * K, b);
            let dx = gpu.upload(&x, &[b, K])?;
            let out = prog.run(gpu.stream(), &[TensorArg::from(&dx), TensorArg::from(&dw1), TensorArg::from(&dw2)])?;
            let got = out[0].to_host_f32()?;
            let host = |v: &[f16], s: &[usize]| mirage::reference::HostTensor::from_f16(s.to_vec(), v);
            let inputs = [host(&x, &[b, K])?, host(&w1, &[K, N])?, host(&w2, &[K, N])?];
            let want = evaluate_at(&p, &F32, &inputs, &plan.run_shapes(&p, &[b])?)?;
            assert_eq!(out[0].shape(), want[0].shape.as_slice(), "{name}, B = {b}");
            let scale = want[0].data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let worst = got.iter().zip(&want[0].data).map(|(g, w)| (g - w).abs()).fold(0.0f32, f32::max);
            println!("{name}, B = {b:2}: max |error| {worst:.2e} (outputs up to {scale:.2e})");
            assert!(worst <= 2e-2 * scale.max(1e-3), "{name}, B = {b}: max error {worst} at scale {scale}");
        }
    }
    Ok(())
}
