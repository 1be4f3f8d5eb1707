//! Runtime-sized dimensions on the CPU: µGraphs searched at the compile size (the upper bound of
//! `B`) run at other sizes by the padded-tile rule and agree with the program there; a µGraph
//! whose padding pollutes a result is shown to differ at a size that is not a multiple of its
//! tile; the symbolic analysis rejects what cannot run at other sizes.
#![cfg(feature = "build")]

use std::time::Duration;

use mirage::dims::{DimPlan, DimVar, Dims};
use mirage::eval::evaluate_at;
use mirage::ir::{AccKind, BlockGraph, BlockOp, DType, IrError, KernelGraph};

type TestResult = Result<(), Box<dyn std::error::Error>>;
use mirage::codegen::{CodegenError, KernelOptions, generate_sized, sized_support};
use mirage::reference::{F32, HostTensor, max_scaled_error};
use mirage::search::ranges::RangeCheck;
use mirage::search::{SearchConfig, superoptimize};

/// `B = 1..=64`, sizing dim 0 of input 0 (the other inputs fixed).
fn over_b(inputs: usize, rank0: usize) -> Dims {
    let mut marks = vec![vec![None, None]; inputs];
    marks[0] = vec![None; rank0];
    marks[0][0] = Some(0);
    Dims { vars: vec![DimVar { name: "B".into(), lo: 1, hi: 64 }], inputs: marks }
}

/// Deterministic inputs in [-1, 1) of the given shapes.
fn inputs(shapes: &[Vec<usize>], seed: u64) -> Vec<HostTensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: usize = s.iter().product();
            let data = (0..n)
                .map(|i| {
                    let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        ^ (seed + k as u64).wrapping_mul(0xBF58_476D);
                    ((h >> 40) % 2048) as f32 / 1024.0 - 1.0
                })
                .collect();
            HostTensor::new(s.clone(), data).expect("data fits the shape")
        })
        .collect()
}

/// Runs `graph` at `sizes` by the padded-tile rule.
fn run_at(graph: &KernelGraph, dims: &Dims, sizes: &[usize], x: &[HostTensor]) -> Vec<HostTensor> {
    let plan = DimPlan::analyze(graph, dims).expect("the graph follows the dims");
    let run = plan.run_shapes(graph, sizes).expect("sizes in range");
    evaluate_at(graph, &F32, x, &run).expect("evaluates")
}

/// Checks that `candidate` agrees with `program` at each of `sizes` of `B` in f32.
fn agrees_at(program: &KernelGraph, candidate: &KernelGraph, dims: &Dims, sizes: &[usize]) -> Result<(), String> {
    let plan = DimPlan::analyze(program, dims).map_err(|e| e.to_string())?;
    for &n in sizes {
        let run = plan.run_shapes(program, &[n]).map_err(|e| e.to_string())?;
        let x = inputs(&run.inputs, n as u64);
        let want = evaluate_at(program, &F32, &x, &run).map_err(|e| e.to_string())?;
        let got = run_at(candidate, dims, &[n], &x);
        for (k, (w, g)) in want.iter().zip(&got).enumerate() {
            match max_scaled_error(g, w, 1e-4, 1e-4) {
                Some(e) if e <= 1.0 => {}
                e => return Err(format!("B = {n}: output {k} differs (scaled error {e:?})")),
            }
        }
    }
    Ok(())
}

const SIZES: [usize; 5] = [1, 3, 17, 63, 64];

fn search(program: &KernelGraph) -> Vec<KernelGraph> {
    let cfg = SearchConfig { budget: Duration::from_secs(24 * 3600), max_states: 5_000_000, ..SearchConfig::default() };
    let r = superoptimize(program, &cfg, None).expect("a µGraph is found at the compile size");
    assert_eq!(r.best.verified, Some(true));
    let mut found = vec![r.best.graph.clone()];
    found.extend(r.top.iter().filter(|c| c.verified == Some(true)).map(|c| c.graph.clone()));
    found
}

#[test]
fn gated_mlp_over_b_agrees_at_run_sizes() -> TestResult {
    let mut p = KernelGraph::new();
    let x = p.input(&[64, 128], DType::F16)?;
    let w1 = p.input(&[128, 256], DType::F16)?;
    let w2 = p.input(&[128, 256], DType::F16)?;
    let (a, b) = (p.matmul(x, w1)?, p.matmul(x, w2)?);
    let s = p.silu(a)?;
    let y = p.mul(s, b)?;
    p.output(y, None)?;
    let dims = over_b(3, 2);
    for g in search(&p) {
        // Output [B, 256] follows B.
        let plan = DimPlan::analyze(&g, &dims).expect("the µGraph follows B");
        let out = g.outputs()[0].0;
        assert_eq!(plan.shape_at(out, &[17]), vec![17, 256]);
        // B is split in tiles of fewer rows than 64: the sizes below exercise the padding.
        assert!(plan.tiles(0).iter().all(|&t| t < 64) && !plan.tiles(0).is_empty(), "{:?}", plan.tiles(0));
        agrees_at(&p, &g, &dims, &SIZES).unwrap_or_else(|e| panic!("{e}\n{}", mirage::search::describe(&g)));
    }
    Ok(())
}

/// `rms_norm(x) @ w`, x `[B = 64, 128]`, w `[128, 256]`.
fn rms_norm_matmul() -> Result<KernelGraph, IrError> {
    let mut p = KernelGraph::new();
    let x = p.input(&[64, 128], DType::F16)?;
    let w = p.input(&[128, 256], DType::F16)?;
    let n = p.rms_norm(x, 1e-6, None)?;
    let y = p.matmul(n, w)?;
    p.output(y, None)?;
    Ok(p)
}

#[test]
fn rms_norm_matmul_over_b_agrees_at_run_sizes() -> TestResult {
    let p = rms_norm_matmul()?;
    let dims = over_b(2, 2);
    for g in search(&p) {
        agrees_at(&p, &g, &dims, &SIZES).unwrap_or_else(|e| panic!("{e}\n{}", mirage::search::describe(&g)));
    }
    Ok(())
}

/// `reduce(f(x), over B)` as one kernel whose for-loop walks `B` in 4 tiles of 16 rows, folded
/// by `acc` and reduced over the tile's rows after the loop.
fn looped_over_b(f: Option<mirage::ir::UnaryOp>, acc: AccKind, max: bool) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[64, 32], DType::F32)?;
    let desc = g.desc(x)?.clone();
    let mut bg = BlockGraph::new(vec![desc], [1, 1, 1], 128, 4)?;
    let t = bg.input(0, [None; 3], Some(0))?;
    let t = match f {
        Some(op) => bg.unary(op, t)?,
        None => t,
    };
    let a = bg.accum(acc, &[t])?;
    let r = bg.op(if max { BlockOp::ReduceMax { dim: 0 } } else { BlockOp::ReduceSum { dim: 0 } }, &[a])?;
    bg.output(r, [None; 3])?;
    let y = g.custom(&[x], bg)?[0];
    g.output(y, None)?;
    Ok(g)
}

fn reduced_over_b(f: Option<mirage::ir::UnaryOp>, max: bool) -> Result<KernelGraph, IrError> {
    let mut p = KernelGraph::new();
    let x = p.input(&[64, 32], DType::F32)?;
    let t = match f {
        Some(op) => p.unary(op, x)?,
        None => x,
    };
    let y = if max { p.reduce_max(t, 0)? } else { p.reduce_sum(t, 0)? };
    p.output(y, None)?;
    Ok(p)
}

#[test]
fn a_sum_over_padded_rows_is_exact_and_an_exp_sum_is_polluted() -> TestResult {
    let dims = over_b(1, 2);
    // Σ_B x: the padded rows add zeros.
    let (p, g) = (reduced_over_b(None, false)?, looped_over_b(None, AccKind::Sum, false)?);
    agrees_at(&p, &g, &dims, &SIZES).expect("a plain sum ignores zero padding");
    // Σ_B exp(x): each padded row adds exp(0) = 1; right at 64, wrong at 17.
    let exp = Some(mirage::ir::UnaryOp::Exp);
    let (p, g) = (reduced_over_b(exp, false)?, looped_over_b(exp, AccKind::Sum, false)?);
    agrees_at(&p, &g, &dims, &[64, 48, 32, 16]).expect("whole tiles have no padding");
    let e = agrees_at(&p, &g, &dims, &[17]).expect_err("padding pollutes the sum at 17");
    assert!(e.contains("B = 17"), "{e}");
    // The polluted value is the true sum plus the 15 padded rows' exp(0).
    let x = inputs(&[vec![17, 32]], 7);
    let (want, got) = (run_at(&p, &dims, &[17], &x), run_at(&g, &dims, &[17], &x));
    for (w, g) in want[0].data.iter().zip(&got[0].data) {
        assert!((g - w - 15.0).abs() < 1e-3, "{g} = {w} + 15");
    }
    Ok(())
}

#[test]
fn a_max_over_padded_zeros_is_polluted() -> TestResult {
    let dims = over_b(1, 2);
    // max_B x on negative inputs: at 17 the 15 padded rows' zeros win the max.
    let (p, g) = (reduced_over_b(None, true)?, looped_over_b(None, AccKind::Max, true)?);
    let x: Vec<HostTensor> = inputs(&[vec![17, 32]], 3).into_iter().map(|t| t.map(|v| -v.abs() - 0.5)).collect();
    let (want, got) = (run_at(&p, &dims, &[17], &x), run_at(&g, &dims, &[17], &x));
    assert!(want[0].data.iter().all(|&v| v < 0.0));
    assert!(got[0].data.iter().all(|&v| v == 0.0), "the padded zeros win the max: {:?}", got[0].data);
    // At whole tiles there is no padding.
    agrees_at(&p, &g, &dims, &[16, 32, 64]).expect("no padding at multiples of 16");
    Ok(())
}

#[test]
fn the_analysis_follows_b_and_rejects_a_literal_of_the_same_extent() -> TestResult {
    // x[B, 64] @ w[64, 32]: the output is [B, 32].
    let mut p = KernelGraph::new();
    let x = p.input(&[64, 64], DType::F16)?;
    let w = p.input(&[64, 32], DType::F16)?;
    let y = p.matmul(x, w)?;
    p.output(y, None)?;
    let plan = DimPlan::analyze(&p, &over_b(2, 2)).expect("B meets only itself");
    assert_eq!(plan.shape_at(y, &[5]), vec![5, 32]);
    assert_eq!(plan.run_shapes(&p, &[5])?.inputs, vec![vec![5, 64], vec![64, 32]]);
    // w[B, 64] (B as the contracted dim of w) against x's literal 64: rejected though hi = 64.
    let dims = Dims { vars: over_b(2, 2).vars, inputs: vec![vec![None, None], vec![Some(0), None]] };
    let e = DimPlan::analyze(&p, &dims).expect_err("B against a literal 64");
    assert!(e.to_string().contains("same variable"), "{e}");
    // A variable declared at a size other than the input's extent, and an empty range.
    let bad = Dims { vars: vec![DimVar { name: "B".into(), lo: 1, hi: 32 }], inputs: over_b(2, 2).inputs };
    assert!(DimPlan::analyze(&p, &bad).expect_err("rejected").to_string().contains("upper bound 32"));
    let empty = Dims { vars: vec![DimVar { name: "B".into(), lo: 9, hi: 8 }], inputs: over_b(2, 2).inputs };
    assert!(DimPlan::analyze(&p, &empty).expect_err("rejected").to_string().contains("non-empty"));
    // Sizes out of range.
    let e = plan.run_shapes(&p, &[65]).expect_err("rejected").to_string();
    assert!(e.contains("B = 65") && e.contains("1..=64"), "{e}");
    Ok(())
}

#[test]
fn verification_sizes_cover_the_ends_and_non_multiples_of_every_tile() -> TestResult {
    let dims = over_b(1, 2);
    let g = looped_over_b(None, AccKind::Sum, false)?;
    let plan = DimPlan::analyze(&g, &dims)?;
    assert_eq!(plan.tiles(0), vec![16]);
    let sizes = dims.verification_sizes(0, &plan);
    assert!(sizes.contains(&1) && sizes.contains(&64) && sizes.contains(&17) && sizes.contains(&61));
    assert!(sizes.iter().filter(|&&n| n != 64 && n != 48 && n != 32 && n != 16).count() >= 5, "{sizes:?}");
    Ok(())
}

fn over_b_config(dims: Dims) -> SearchConfig {
    SearchConfig {
        budget: Duration::from_secs(24 * 3600),
        max_states: 5_000_000,
        dims,
        offline: Some(false),
        ..SearchConfig::default()
    }
}

#[test]
fn the_search_verifies_over_the_range_and_keys_the_cache_on_it() -> TestResult {
    let p = rms_norm_matmul()?;
    let dims = over_b(2, 2);
    let cfg = over_b_config(dims.clone());
    let r = superoptimize(&p, &cfg, None)?;
    assert_eq!(r.best.verified, Some(true));
    agrees_at(&p, &r.best.graph, &dims, &[1, 2, 5, 17, 33, 63])?;
    // The ranges are part of the key; a static search keys as before.
    let static_key = over_b_config(Dims::default()).cache_key(&p);
    assert_eq!(static_key, SearchConfig::default().cache_key(&p));
    assert_ne!(cfg.cache_key(&p), static_key);
    let narrower = Dims { vars: vec![DimVar { name: "B".into(), lo: 8, hi: 64 }], ..dims };
    assert_ne!(over_b_config(narrower).cache_key(&p), cfg.cache_key(&p));
    Ok(())
}

#[test]
fn a_reduction_over_b_that_padding_pollutes_is_rejected_with_the_reason() -> TestResult {
    // Σ_B exp(x): every block graph tiles B, so the padded rows' exp(0) = 1 pollutes the sum at
    // sizes that are not multiples of the tile; nothing verifies over the range.
    let p = reduced_over_b(Some(mirage::ir::UnaryOp::Exp), false)?;
    let dims = over_b(1, 2);
    let range = RangeCheckCase::new(&p, &dims);
    let polluted = looped_over_b(Some(mirage::ir::UnaryOp::Exp), AccKind::Sum, false)?;
    let why = range.check(&polluted).expect_err("rejected over the range");
    assert!(why.contains("differs at B = "), "{why}");
    // A plain sum computes the program at every size, but its for-loop walks B: code generation
    // refuses it (checked after the values, so the polluted sum above is reported as wrong).
    let clean = reduced_over_b(None, false)?;
    let plain = looped_over_b(None, AccKind::Sum, false)?;
    let why = RangeCheckCase::new(&clean, &dims).check(&plain).expect_err("no code for a loop over B");
    assert!(why.starts_with("has no code at runtime sizes") && why.contains("for-loop walks"), "{why}");
    // Every candidate tiles B, so the search finds nothing, and says why.
    let e = superoptimize(&p, &over_b_config(dims), None).expect_err("nothing verifies over B").to_string();
    assert!(e.contains("over the declared ranges (B = 1..=64)") && e.contains("masked reductions"), "{e}");
    assert!(e.contains("reduce_sum(0) (%2) over B"), "{e}");
    assert!(e.contains("differs at B = "), "{e}");
    Ok(())
}

/// The search's range check on one program.
struct RangeCheckCase<'a> {
    program: &'a KernelGraph,
    cfg: SearchConfig,
}

impl<'a> RangeCheckCase<'a> {
    fn new(program: &'a KernelGraph, dims: &Dims) -> Self {
        RangeCheckCase { program, cfg: over_b_config(dims.clone()) }
    }

    fn check(&self, candidate: &KernelGraph) -> Result<(), String> {
        let mut check = RangeCheck::new(self.program, &self.cfg).map_err(|e| e.to_string())?;
        check.check(candidate, true).map_err(|e| e.to_string())?
    }
}

#[test]
fn a_candidate_code_generation_refuses_at_runtime_sizes_gives_way_to_the_next() -> TestResult {
    // Σ_B x over x[B, 4096] f32: at B = 64 the cheapest µGraph loads its [64, 32] tiles with a
    // strided copy that cannot be cut row by row at a runtime B, which code generation refuses;
    // the search over B takes another candidate, which it can write.
    let mut p = KernelGraph::new();
    let x = p.input(&[64, 4096], DType::F32)?;
    let y = p.reduce_sum(x, 0)?;
    p.output(y, None)?;
    let dims = over_b(1, 2);
    let fixed = superoptimize(&p, &over_b_config(Dims::default()), None)?;
    let refused = sized_support(&fixed.best.graph, &dims, &KernelOptions::default())
        .expect_err("the static choice has no code at runtime sizes");
    assert!(matches!(refused, CodegenError::Unsupported(_)), "{refused}");
    assert!(refused.to_string().contains("cannot be predicated by row"), "{refused}");
    let sized = superoptimize(&p, &over_b_config(dims.clone()), None)?;
    sized_support(&sized.best.graph, &dims, &KernelOptions::default())?;
    assert_ne!(sized.best.hash, fixed.best.hash);
    agrees_at(&p, &sized.best.graph, &dims, &SIZES)?;
    // generate_sized agrees: it writes the sized choice and refuses the static one.
    generate_sized(&sized.best.graph, &dims, "sum_b", &KernelOptions::default())?;
    assert!(generate_sized(&fixed.best.graph, &dims, "sum_b", &KernelOptions::default()).is_err());
    // The range check says why it passed over the static choice.
    let why = RangeCheckCase::new(&p, &dims).check(&fixed.best.graph).expect_err("refused");
    assert!(why.starts_with("has no code at runtime sizes"), "{why}");
    Ok(())
}
