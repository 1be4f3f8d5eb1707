//! Split-K for normalized projections (`search::norm_split`): every candidate passes the
//! fingerprint verifier and the float check (with and without a gain, bf16 and f32), f16 and an
//! epsilon are left to the enumerator, and broken variants (a dropped gain, a combine that
//! forgets the norm or applies it twice) are rejected.
#![cfg(feature = "build")]

use mirage::fingerprint::{VerifyConfig, verify};
use mirage::ir::{AccKind, BinaryOp, BlockGraph, DType, KernelGraph, KernelOp};
use mirage::lower::lower_source;
use mirage::search::{SearchConfig, describe, float_check, norm_split};

fn lower(src: &str) -> KernelGraph {
    lower_source(src).unwrap_or_else(|e| panic!("{e}")).remove(0).graph
}

/// `(rms_norm(x) * g) @ w` (or without the gain) over `[m, k]`, `[1, k]`, `[k, n]`.
fn program(dtype: &str, m: usize, k: usize, n: usize, gain: bool) -> KernelGraph {
    if gain {
        lower(&format!(
            "#[mugraph] fn p(x: Tensor<{dtype}, {m}, {k}>, g: Tensor<{dtype}, 1, {k}>, w: Tensor<{dtype}, {k}, {n}>) -> Tensor<{dtype}, {m}, {n}> {{ (rms_norm(x) * g).matmul(w) }}"
        ))
    } else {
        lower(&format!(
            "#[mugraph] fn p(x: Tensor<{dtype}, {m}, {k}>, w: Tensor<{dtype}, {k}, {n}>) -> Tensor<{dtype}, {m}, {n}> {{ rms_norm(x).matmul(w) }}"
        ))
    }
}

fn equivalent(program: &KernelGraph, candidate: &KernelGraph) -> bool {
    verify(program, candidate, &VerifyConfig::default()).expect("verification runs").is_equivalent()
}

#[test]
fn every_candidate_passes_both_checks() {
    let cases = [
        ("bf16", true, program("bf16", 16, 256, 256, true)),
        ("bf16 without a gain", false, program("bf16", 2, 384, 128, false)),
        ("f32", true, program("f32", 4, 192, 128, true)),
    ];
    for (name, gain, program) in cases {
        let p = norm_split::recognize(&program).unwrap_or_else(|| panic!("{name}: not recognized"));
        assert_eq!(p.gain.is_some(), gain, "{name}");
        let cfg = SearchConfig { forloop_ranges: vec![2, 4], threads: vec![128], ..SearchConfig::default() };
        let cands = norm_split::candidates(&program, &cfg);
        println!("{name}: {} candidates", cands.len());
        assert!(cands.len() >= 4, "{name}: {} candidates", cands.len());
        for g in &cands {
            assert_eq!(g.num_kernels(), 2, "{name}");
            assert!(equivalent(&program, g), "{name}: fingerprints reject\n{}", describe(g));
            assert_eq!(float_check(&program, g).expect("the float check runs"), Ok(()), "{name}:\n{}", describe(g));
        }
    }
}

#[test]
fn f16_and_an_epsilon_are_left_to_the_enumerator() {
    assert_eq!(norm_split::recognize(&program("f16", 16, 256, 256, true)), None);
    let mut p = KernelGraph::new();
    let x = p.input(&[4, 64], DType::Bf16).expect("builds");
    let w = p.input(&[64, 64], DType::Bf16).expect("builds");
    let nx = p.rms_norm(x, 1e-5, None).expect("builds");
    let o = p.matmul(nx, w).expect("builds");
    p.output(o, None).expect("builds");
    assert_eq!(norm_split::recognize(&p), None);
    assert!(norm_split::candidates(&p, &SearchConfig::default()).is_empty());
}

#[test]
fn the_grids_split_k_and_fill_the_device() {
    // Qwen2.5-7B's QKV at 16 rows: 72 column tiles of 64 alone; the ranges multiply the blocks.
    let program = program("bf16", 16, 3584, 4608, false);
    let cands = norm_split::candidates(&program, &SearchConfig::default());
    let grids: Vec<[usize; 3]> = cands
        .iter()
        .filter_map(|g| {
            g.nodes().iter().find_map(|n| match &n.op {
                KernelOp::Custom { block } => Some(block.grid()),
                _ => None,
            })
        })
        .collect();
    assert!(grids.contains(&[72, 2, 1]), "{grids:?}");
    assert!(grids.contains(&[36, 4, 1]), "{grids:?}");
    // Every column tile reads at least 128 bytes of each row of the weight.
    assert!(grids.iter().all(|g| 4608 / g[0] >= 64), "{grids:?}");
}

/// How a hand-built split-K variant is broken.
#[derive(Clone, Copy, PartialEq)]
enum Broken {
    /// Correct.
    None,
    /// The products forget the gain.
    NoGain,
    /// The combine forgets the norm (sums the parts only).
    NoNorm,
    /// The combine divides by the RMS twice.
    TwiceNorm,
}

/// Split-K with two ranges of `k`, for `(rms_norm(x) · g) @ w` with the program's inputs `(x, g,
/// w)`, broken as `how` says.
fn hand_built(program: &KernelGraph, how: Broken) -> KernelGraph {
    let descs = program.inputs();
    let (x, g, w) = (descs[0].clone(), descs[1].clone(), descs[2].clone());
    let n = w.shape[1];
    let mut bg = BlockGraph::new(vec![x.clone(), w.clone(), g.clone()], [1, 2, 1], 128, 2).expect("builds");
    let xt = bg.input(0, [None, Some(1), None], Some(1)).expect("builds");
    let wt = bg.input(1, [Some(1), Some(0), None], Some(0)).expect("builds");
    let gt = bg.input(2, [None, Some(1), None], Some(1)).expect("builds");
    let a = if how == Broken::NoGain { xt } else { bg.binary(BinaryOp::Mul, xt, gt).expect("builds") };
    let prod = bg.matmul(a, wt).expect("builds");
    let acc = bg.accum(AccKind::Sum, &[prod]).expect("builds");
    bg.output(acc, [Some(1), Some(0), None]).expect("builds");
    let mut kg = KernelGraph::new();
    let ins: Vec<_> = descs.iter().map(|d| kg.input(&d.shape, d.dtype).expect("builds")).collect();
    let parts = kg.custom(&[ins[0], ins[2], ins[1]], bg).expect("builds")[0];
    let pd = kg.desc(parts).expect("builds").clone();
    let mut cb = BlockGraph::new(vec![pd, x.clone()], [n / 64, 1, 1], 128, 2).expect("builds");
    let pj = cb.input(0, [Some(1), None, None], Some(0)).expect("builds");
    let sum = cb.accum(AccKind::Sum, &[pj]).expect("builds");
    let out = match how {
        Broken::NoNorm => sum,
        _ => {
            let xj = cb.input(1, [None, None, None], Some(1)).expect("builds");
            let rms = cb.accum(AccKind::RmsLast, &[xj]).expect("builds");
            let once = cb.binary(BinaryOp::Div, sum, rms).expect("builds");
            if how == Broken::TwiceNorm { cb.binary(BinaryOp::Div, once, rms).expect("builds") } else { once }
        }
    };
    cb.output(out, [Some(1), None, None]).expect("builds");
    let o = if how == Broken::NoNorm {
        kg.custom(&[parts], {
            let mut c2 =
                BlockGraph::new(vec![kg.desc(parts).expect("builds").clone()], [n / 64, 1, 1], 128, 2).expect("builds");
            let pj = c2.input(0, [Some(1), None, None], Some(0)).expect("builds");
            let s = c2.accum(AccKind::Sum, &[pj]).expect("builds");
            c2.output(s, [Some(1), None, None]).expect("builds");
            c2
        })
        .expect("builds")[0]
    } else {
        kg.custom(&[parts, ins[0]], cb).expect("builds")[0]
    };
    kg.output(o, None).expect("builds");
    kg
}

#[test]
fn broken_variants_are_rejected() {
    let program = program("f32", 4, 128, 64, true);
    let good = hand_built(&program, Broken::None);
    assert!(equivalent(&program, &good), "the correct variant is rejected\n{}", describe(&good));
    assert_eq!(float_check(&program, &good).expect("the float check runs"), Ok(()));
    for (name, how) in
        [("no gain", Broken::NoGain), ("no norm", Broken::NoNorm), ("twice normalized", Broken::TwiceNorm)]
    {
        let bad = hand_built(&program, how);
        assert!(!equivalent(&program, &bad), "{name}: fingerprints accept\n{}", describe(&bad));
    }
}
