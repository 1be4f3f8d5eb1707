//! Finite-field fingerprints: field arithmetic, the verifier on hand-built graphs,
//! every golden candidate verified against its program at the real shapes, and mutants of the
//! golden candidates rejected. Run with `--nocapture` to see the counts and times.
#![cfg(feature = "build")]

use std::time::Instant;

use mirage::eval::{Domain, Tensor};
use mirage::fingerprint::*;
use mirage::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, IrError, KernelGraph, KernelOp, Law, Scalar, TensorRef, UnaryOp,
};
use mirage::reference::{HostTensor, max_scaled_error, run};
use mirage::testing::inputs::graph_inputs;
use mirage::testing::mutants::other_maps;
use mirage::testing::programs::golden_cases;
use mirage::testing::rounding::run_f64;

fn values(key: u64, n: usize) -> Vec<Fp> {
    FieldDomain::random_inputs(key, &[vec![n]]).remove(0).data
}

#[test]
fn division_inverts_multiplication() {
    let d = FieldDomain::new(1);
    let one = d.count(1);
    for (a, b) in values(1, 200).into_iter().zip(values(2, 200)) {
        if b.p == 0 || b.q == 0 {
            continue;
        }
        assert_eq!(d.div(d.mul(a, b), b), a);
        assert_eq!(d.mul(b, d.div(one, b)), one);
        assert_eq!(d.unary(&UnaryOp::Recip, b), d.div(one, b));
        assert_eq!(d.add(d.sub(a, b), b), a);
        assert_eq!(d.add(a, d.unary(&UnaryOp::Neg, a)), d.zero());
    }
    assert_eq!(inv_mod(0, P), 0, "0⁻¹ is defined as 0");
}

#[test]
fn omega_has_order_exactly_q() {
    for key in 0..20 {
        let d = FieldDomain::new(key);
        let w = d.omega() as u64;
        assert!(has_order_q(d.omega()), "key {key}: ω = {w}");
        assert_eq!(pow_mod(w, Q, P), 1);
        // q is prime: ω ≠ 1 and ω^q = 1 means the order is exactly q.
        assert_ne!(w, 1);
        assert_ne!(pow_mod(w, 2, P), 1, "ω is not ±1");
    }
    // Fresh ω per key.
    assert_ne!(FieldDomain::new(1).omega(), FieldDomain::new(2).omega());
}

#[test]
fn exp_is_a_homomorphism_in_p() {
    let d = FieldDomain::new(7);
    for (a, b) in values(3, 300).into_iter().zip(values(4, 300)) {
        let lhs = d.exp(d.add(a, b));
        let rhs = d.mul(d.exp(a), d.exp(b));
        assert_eq!(lhs.p, rhs.p);
        // exp(a − b) = exp(a) / exp(b)
        assert_eq!(d.exp(d.sub(a, b)).p, d.div(d.exp(a), d.exp(b)).p);
        // ω^(x_q) by the table equals the square-and-multiply power.
        assert_eq!(d.exp(a).p as u64, pow_mod(d.omega() as u64, a.q as u64, P));
    }
    assert_eq!(d.exp(d.zero()).p, 1);
    // Different exponents give different exponentials (ω has order q).
    assert_ne!(d.exp(d.count(1)).p, d.exp(d.count(2)).p);
}

#[test]
fn constants_are_exact_dyadic_rationals() {
    let d = FieldDomain::new(9);
    let x = values(5, 1)[0];
    assert_eq!(d.mul(d.constant(0.5), x), d.div(x, d.count(2)));
    assert_eq!(d.constant(3.0), d.count(3));
    assert_eq!(d.constant(1.0), d.count(1));
    assert_eq!(d.mul(d.constant(-0.25), d.count(4)), d.sub(d.zero(), d.count(1)));
    assert_eq!(d.mul(d.constant(1.5), d.count(2)), d.count(3));
    assert_eq!(d.constant(0.0), d.zero());
    assert_eq!(d.constant(-0.0), d.zero());
    assert_ne!(d.mul(d.constant(0.1), d.count(10)), d.count(1), "0.1f32 is not exactly 1/10");
    let tiny = f32::from_bits(1); // 2^-149, subnormal
    assert_eq!(d.mul(d.constant(tiny), d.mul(d.constant(2f32.powi(100)), d.constant(2f32.powi(49)))), d.count(1));
    assert_eq!(d.mul(d.constant(f32::MAX), d.zero()), d.zero());
    assert_eq!(d.unary(&UnaryOp::MulScalar { c: mirage::ir::Scalar(0.5) }, x), d.div(x, d.count(2)));
    // Non-finite constants are keyed values, distinct from each other.
    assert_ne!(d.constant(f32::INFINITY), d.constant(f32::NEG_INFINITY));
}

#[test]
fn keyed_functions_are_consistent_and_keyed() {
    let d1 = FieldDomain::new(11);
    let d2 = FieldDomain::new(12);
    let xs = values(6, 64);
    let clamp = |lo: f32, hi: f32| UnaryOp::Clamp { lo: mirage::ir::Scalar(lo), hi: mirage::ir::Scalar(hi) };
    // Every operator without a law in the table, and clamps differing only in a bound.
    let mut ops: Vec<UnaryOp> = UnaryOp::ALL.into_iter().filter(|op| op.spec().law == Law::Uninterpreted).collect();
    ops.extend([clamp(0.0, 1.0), clamp(0.0, 2.0)]);
    assert!(ops.contains(&UnaryOp::Tanh) && ops.contains(&UnaryOp::Sigmoid));
    for op in &ops {
        let a: Vec<Fp> = xs.iter().map(|&x| d1.unary(op, x)).collect();
        let again: Vec<Fp> = xs.iter().map(|&x| d1.unary(op, x)).collect();
        assert_eq!(a, again, "{op}: same value, same result");
        let mut distinct = a.iter().map(|v| v.p).collect::<Vec<_>>();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), xs.len(), "{op}: different values give different results");
        let other: Vec<Fp> = xs.iter().map(|&x| d2.unary(op, x)).collect();
        assert!(a.iter().zip(&other).all(|(u, v)| u != v), "{op}: another trial key gives another function");
        for op2 in ops.iter().filter(|o| *o != op) {
            assert!(xs.iter().all(|&x| d1.unary(op, x) != d1.unary(op2, x)), "{op} and {op2} differ");
        }
    }
    // pow depends on both arguments.
    assert_ne!(d1.pow(xs[0], xs[1]), d1.pow(xs[0], xs[2]));
    assert_ne!(d1.pow(xs[0], xs[1]), d1.pow(xs[3], xs[1]));
    assert_eq!(d1.pow(xs[0], xs[1]), d1.pow(xs[0], xs[1]));
}

/// `f(x) · a + f(x) · b` and `f(x) · (a + b)` with `x, a, b: [4, 16]`.
fn distributed(f: UnaryOp, factored: bool) -> KernelGraph {
    let mut g = KernelGraph::new();
    let x = g.input(&[4, 16], DType::F16).expect("input");
    let a = g.input(&[4, 16], DType::F16).expect("input");
    let b = g.input(&[4, 16], DType::F16).expect("input");
    let s = g.unary(f, x).expect("unary");
    let o = if factored {
        let ab = g.add(a, b).expect("add");
        g.mul(s, ab).expect("mul")
    } else {
        let sa = g.mul(s, a).expect("mul");
        let sb = g.mul(s, b).expect("mul");
        g.add(sa, sb).expect("add")
    };
    g.output(o, None).expect("output");
    g
}

#[test]
fn uninterpreted_operators_take_part_in_the_field_algebra() {
    let cfg = VerifyConfig::default();
    for f in [UnaryOp::Sigmoid, UnaryOp::Tanh] {
        let verdict = verify(&distributed(f, false), &distributed(f, true), &cfg).expect("runs");
        assert_eq!(verdict, Verdict::Equivalent, "{f}");
    }
    // tanh in place of sigmoid is another function.
    let verdict = verify(&distributed(UnaryOp::Sigmoid, false), &distributed(UnaryOp::Tanh, true), &cfg);
    assert!(!verdict.expect("runs").is_equivalent());
}

/// The fingerprint assumes no identity of an operator without a law: `silu(x)` and
/// `x · sigmoid(x)` are equal reals but different µGraphs to the verifier (it may miss an
/// equivalence, never accept a wrong one); the f32 reference sees them agree.
#[test]
fn identities_of_uninterpreted_operators_are_not_assumed() {
    let build = |as_product: bool| {
        let mut g = KernelGraph::new();
        let x = g.input(&[4, 16], DType::F32).expect("input");
        let y = if as_product {
            let s = g.unary(UnaryOp::Sigmoid, x).expect("sigmoid");
            g.mul(x, s).expect("mul")
        } else {
            g.silu(x).expect("silu")
        };
        g.output(y, None).expect("output");
        g
    };
    let (silu, product) = (build(false), build(true));
    assert!(!verify(&silu, &product, &VerifyConfig::default()).expect("runs").is_equivalent());
    let x = HostTensor::new(vec![4, 16], (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect()).expect("tensor");
    let (a, b) = (run(&silu, std::slice::from_ref(&x)).expect("runs"), run(&product, &[x]).expect("runs"));
    assert!(max_scaled_error(&a[0], &b[0], 1e-6, 1e-5).is_some_and(|e| e <= 1.0));
}

#[test]
fn max_is_a_random_total_order() {
    let d = FieldDomain::new(13);
    let xs = values(7, 40);
    let ninf = d.neg_infinity();
    for &a in &xs {
        assert_eq!(d.max(a, a), a);
        assert_eq!(d.max(a, ninf), a);
        assert_eq!(d.max(ninf, a), a);
        for &b in &xs {
            assert_eq!(d.max(a, b), d.max(b, a));
            assert!(d.max(a, b) == a || d.max(a, b) == b);
            for &c in xs.iter().take(10) {
                assert_eq!(d.max(d.max(a, b), c), d.max(a, d.max(b, c)));
            }
        }
    }
    // Not the order of the residues: keyed.
    let wins = xs.windows(2).filter(|w| (d.max(w[0], w[1]) == w[0]) == (w[0].p > w[1].p)).count();
    assert!(wins < xs.len() - 1);
}

#[test]
fn simd_matmul_rows_equal_the_scalar_steps() {
    let scalar = FieldDomain::new(1);
    let levels = [FieldDomain::new(1), FieldDomain::new(1).portable()];
    for (n, k) in [(1, 1), (7, 3), (8, 64), (9, 65), (32, 64), (33, 130), (40, 7), (64, 200), (3, 0)] {
        let a = values(n as u64, k);
        let b = values(1000 + k as u64, k * n);
        let init = values(2000 + n as u64, n);
        let mut expected = init.clone();
        for kk in 0..k {
            for j in 0..n {
                expected[j] = scalar.mul_add(expected[j], a[kk], b[kk * n + j]);
            }
        }
        for d in &levels {
            let mut out = init.clone();
            d.matmul_row(&mut out, &a, &b);
            assert_eq!(out, expected, "row of {n}, k = {k}");
        }
    }
    // Extremes: p − 1 and q − 1 everywhere.
    let top = Fp { p: (P - 1) as u32, q: (Q - 1) as u32 };
    for d in &levels {
        let mut out = vec![top; 19];
        d.matmul_row(&mut out, &[top; 3], &[top; 57]);
        let once = scalar.mul_add(top, top, top);
        let twice = scalar.mul_add(once, top, top);
        assert_eq!(out, vec![scalar.mul_add(twice, top, top); 19]);
    }
}

fn gated(m: usize, k: usize, n: usize) -> KernelGraph {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], DType::F16).expect("input");
    let w1 = g.input(&[k, n], DType::F16).expect("input");
    let w2 = g.input(&[k, n], DType::F16).expect("input");
    let a = g.matmul(x, w1).expect("matmul");
    let a = g.silu(a).expect("silu");
    let b = g.matmul(x, w2).expect("matmul");
    let o = g.mul(a, b).expect("mul");
    g.output(o, None).expect("output");
    g
}

/// `x @ (a + b)`, `x @ a + x @ b`, and the same with exps; two outputs.
fn two_outputs(distribute: bool, swap_outputs: bool, exp_split: bool) -> KernelGraph {
    let mut g = KernelGraph::new();
    let x = g.input(&[4, 8], DType::F32).expect("input");
    let a = g.input(&[8, 6], DType::F32).expect("input");
    let b = g.input(&[8, 6], DType::F32).expect("input");
    let lin = if distribute {
        let xa = g.matmul(x, a).expect("mm");
        let xb = g.matmul(x, b).expect("mm");
        g.add(xa, xb).expect("add")
    } else {
        let s = g.add(a, b).expect("add");
        g.matmul(x, s).expect("mm")
    };
    let e = if exp_split {
        let ea = g.exp(a).expect("exp");
        let eb = g.exp(b).expect("exp");
        g.mul(ea, eb).expect("mul")
    } else {
        let s = g.add(a, b).expect("add");
        g.exp(s).expect("exp")
    };
    if swap_outputs {
        g.output(e, None).expect("out");
        g.output(lin, None).expect("out");
    } else {
        g.output(lin, None).expect("out");
        g.output(e, None).expect("out");
    }
    g
}

#[test]
fn equivalent_rewrites_verify() {
    let cfg = VerifyConfig::default();
    let p = two_outputs(false, false, false);
    for variant in [two_outputs(true, false, false), two_outputs(false, true, false), two_outputs(true, true, true)] {
        assert_eq!(verify(&p, &variant, &cfg).expect("verifies"), Verdict::Equivalent);
    }
    // Block-graph form of gated_mlp at a small shape against the kernel-level program.
    let (m, k, n) = (8, 64, 32);
    let prog = gated(m, k, n);
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], DType::F16).expect("input");
    let w1 = g.input(&[k, n], DType::F16).expect("input");
    let w2 = g.input(&[k, n], DType::F16).expect("input");
    let descs: Vec<_> = [x, w1, w2].iter().map(|&t| g.desc(t).expect("desc").clone()).collect();
    let mut b = BlockGraph::new(descs, [4, 1, 1], 128, 4).expect("block");
    let bx = b.input(0, [None, None, None], Some(1)).expect("in");
    let b1 = b.input(1, [Some(1), None, None], Some(0)).expect("in");
    let b2 = b.input(2, [Some(1), None, None], Some(0)).expect("in");
    let m1 = b.matmul(bx, b1).expect("mm");
    let m2 = b.matmul(bx, b2).expect("mm");
    let a1 = b.accum(AccKind::Sum, &[m1]).expect("acc");
    let a2 = b.accum(AccKind::Sum, &[m2]).expect("acc");
    let s = b.unary(UnaryOp::Silu, a1).expect("silu");
    let o = b.binary(BinaryOp::Mul, a2, s).expect("mul");
    b.output(o, [Some(1), None, None]).expect("out");
    let outs = g.custom(&[x, w1, w2], b).expect("custom");
    g.output(outs[0], None).expect("out");
    assert_eq!(verify(&prog, &g, &cfg).expect("verifies"), Verdict::Equivalent);
}

#[test]
fn inequivalent_graphs_are_rejected_with_a_witness() {
    let cfg = VerifyConfig::default();
    let p = gated(4, 16, 8);
    // silu → gelu
    let mut q = KernelGraph::new();
    let x = q.input(&[4, 16], DType::F16).expect("input");
    let w1 = q.input(&[16, 8], DType::F16).expect("input");
    let w2 = q.input(&[16, 8], DType::F16).expect("input");
    let a = q.matmul(x, w1).expect("mm");
    let a = q.unary(UnaryOp::Gelu, a).expect("gelu");
    let b = q.matmul(x, w2).expect("mm");
    let o = q.mul(a, b).expect("mul");
    q.output(o, None).expect("out");
    match verify(&p, &q, &cfg).expect("runs") {
        Verdict::NotEquivalent {
            witness: Witness::Value { trial, output, candidate_output, index, program, candidate },
        } => {
            assert_eq!((trial, output, candidate_output), (0, 0, Some(0)));
            assert_eq!(index.len(), 2);
            assert_ne!(program.p, candidate.p);
        }
        other => panic!("expected a value witness, got {other:?}"),
    }
    // The weights swapped: silu(X@W2) * (X@W1).
    let mut q = KernelGraph::new();
    let x = q.input(&[4, 16], DType::F16).expect("input");
    let w1 = q.input(&[16, 8], DType::F16).expect("input");
    let w2 = q.input(&[16, 8], DType::F16).expect("input");
    let a = q.matmul(x, w2).expect("mm");
    let a = q.silu(a).expect("silu");
    let b = q.matmul(x, w1).expect("mm");
    let o = q.mul(a, b).expect("mul");
    q.output(o, None).expect("out");
    assert!(!verify(&p, &q, &cfg).expect("runs").is_equivalent());
    // Same inputs read twice must not be confused with two different inputs (independent
    // randomness per input).
    let mut q = KernelGraph::new();
    let x = q.input(&[4, 16], DType::F16).expect("input");
    let w1 = q.input(&[16, 8], DType::F16).expect("input");
    let _w2 = q.input(&[16, 8], DType::F16).expect("input");
    let a = q.matmul(x, w1).expect("mm");
    let a = q.silu(a).expect("silu");
    let b = q.matmul(x, w1).expect("mm");
    let o = q.mul(a, b).expect("mul");
    q.output(o, None).expect("out");
    assert!(!verify(&p, &q, &cfg).expect("runs").is_equivalent());
    // Signatures.
    let other_shape = gated(4, 16, 16);
    match verify(&p, &other_shape, &cfg).expect("runs") {
        Verdict::NotEquivalent { witness: Witness::Signature { reason } } => {
            assert!(reason.contains("inputs"), "{reason}")
        }
        v => panic!("{v:?}"),
    }
    let mut fewer = KernelGraph::new();
    let x = fewer.input(&[4, 16], DType::F16).expect("input");
    fewer.output(x, None).expect("out");
    assert!(matches!(verify(&p, &fewer, &cfg), Ok(Verdict::NotEquivalent { witness: Witness::Signature { .. } })));
    // Output set matching: both outputs equal to the same program output is not a match.
    let p2 = two_outputs(false, false, false);
    let mut dup = KernelGraph::new();
    let x = dup.input(&[4, 8], DType::F32).expect("input");
    let a = dup.input(&[8, 6], DType::F32).expect("input");
    let b = dup.input(&[8, 6], DType::F32).expect("input");
    let s = dup.add(a, b).expect("add");
    let lin = dup.matmul(x, s).expect("mm");
    dup.output(lin, None).expect("out");
    dup.output(s, None).expect("out");
    assert!(!verify(&p2, &dup, &cfg).expect("runs").is_equivalent());
}

#[test]
fn trials_are_independent_and_reproducible() {
    let p = gated(2, 8, 4);
    let cfg = VerifyConfig { trials: 3, seed: 42 };
    let a = FingerprintContext::new(&p, &cfg).expect("ctx");
    let b = FingerprintContext::new(&p, &cfg).expect("ctx");
    assert_eq!(a.trials(), 3);
    assert_eq!(a.program_outputs(0), b.program_outputs(0));
    assert_ne!(a.program_outputs(0), a.program_outputs(1));
    let one = FingerprintContext::new(&p, &VerifyConfig { trials: 1, seed: 42 }).expect("ctx");
    assert_eq!(one.trials(), 2, "at least two trials are always run");
    let other = FingerprintContext::new(&p, &VerifyConfig { trials: 2, seed: 43 }).expect("ctx");
    assert_ne!(a.program_outputs(0), other.program_outputs(0));
}

/// Verifies every `stride`-th candidate (from the first) of every golden program at the real
/// shapes; returns how many were checked.
fn verify_golden_candidates(stride: usize) -> usize {
    let start = Instant::now();
    let mut total = 0;
    for case in golden_cases() {
        let program = (case.program)().expect("program builds");
        let candidates = case.candidates().expect("imports");
        let t = Instant::now();
        let ctx = FingerprintContext::new(&program, &VerifyConfig::default()).expect("program evaluates");
        let t_ctx = t.elapsed();
        let t = Instant::now();
        let mut checked = 0;
        for (j, c) in candidates.iter().enumerate().step_by(stride) {
            let v = ctx.check(c).expect("candidate evaluates");
            assert_eq!(v, Verdict::Equivalent, "{} candidate {j}", case.name);
            checked += 1;
        }
        assert!(checked > 0, "{} has no candidates", case.name);
        total += checked;
        println!(
            "{}: program fingerprinted in {:.2?} ({} trials), {checked} of {} candidates equivalent, {:.2?} per candidate",
            case.name,
            t_ctx,
            ctx.trials(),
            candidates.len(),
            t.elapsed() / checked as u32
        );
    }
    println!("{total} golden candidates verified in {:.1?}", start.elapsed());
    total
}

/// Every golden program with one candidate in eight (its first among them) at the real shapes:
/// the CI share of [`every_golden_candidate_verifies_at_the_real_shapes`].
#[test]
fn golden_candidates_verify_at_the_real_shapes() {
    assert_eq!(verify_golden_candidates(8), 27);
}

#[test]
#[ignore = "slow: 181 candidates at the real shapes take about 160 s on a 2-core machine; scripts/gpu-run-all.sh runs it"]
fn every_golden_candidate_verifies_at_the_real_shapes() {
    assert_eq!(verify_golden_candidates(1), 181);
}

/// One structural edit of a kernel graph.
#[derive(Clone, Debug)]
enum Edit {
    /// Replace block operator `(kernel node, block node)`.
    BlockOp((usize, usize), BlockOp),
    /// Replace the operands of a block operator.
    BlockInputs((usize, usize), Vec<TensorRef>),
    /// Change the forloop range of kernel node `.0`'s block graph.
    Forloop(usize, usize),
    /// Replace the operands of kernel node `.0`.
    KernelInputs(usize, Vec<TensorRef>),
}

/// Rebuilds `g` through the builders with `edit` applied; `None` when a shape rule fails.
fn rebuild(g: &KernelGraph, edit: &Edit) -> Option<KernelGraph> {
    let mut out = KernelGraph::new();
    for (ni, node) in g.nodes().iter().enumerate() {
        let mut inputs = node.inputs.clone();
        if let Edit::KernelInputs(at, new) = edit
            && *at == ni
        {
            inputs = new.clone();
        }
        let op = match &node.op {
            KernelOp::Custom { block } => {
                let frange = match edit {
                    Edit::Forloop(at, f) if *at == ni => *f,
                    _ => block.forloop_range(),
                };
                let mut b = BlockGraph::new(block.inputs().to_vec(), block.grid(), block.threads(), frange).ok()?;
                for (bi, bn) in block.nodes().iter().enumerate() {
                    let (mut op, mut ins) = (bn.op.clone(), bn.inputs.clone());
                    match edit {
                        Edit::BlockOp(at, o) if *at == (ni, bi) => op = o.clone(),
                        Edit::BlockInputs(at, i) if *at == (ni, bi) => ins = i.clone(),
                        _ => {}
                    }
                    b.push(op, &ins).ok()?;
                }
                b.validate().ok()?;
                KernelOp::Custom { block: Box::new(b) }
            }
            other => other.clone(),
        };
        out.push(op, &inputs).ok()?;
    }
    Some(out)
}

/// Every single-edit mutant of `g`, by kind.
fn mutants(g: &KernelGraph) -> Vec<(&'static str, KernelGraph)> {
    let mut edits: Vec<(&'static str, Edit)> = Vec::new();
    for (ni, node) in g.nodes().iter().enumerate() {
        match &node.op {
            KernelOp::Binary { op: BinaryOp::Div | BinaryOp::Sub | BinaryOp::Pow } | KernelOp::Matmul => {
                edits.push(("swapped operands", Edit::KernelInputs(ni, vec![node.inputs[1], node.inputs[0]])));
            }
            KernelOp::Custom { block } => {
                let grid = block.grid();
                let f = block.forloop_range();
                for nf in [f * 2, f / 2, f + 1] {
                    if nf >= 1 && nf != f {
                        edits.push(("forloop range", Edit::Forloop(ni, nf)));
                    }
                }
                for (bi, bn) in block.nodes().iter().enumerate() {
                    let at = (ni, bi);
                    match &bn.op {
                        BlockOp::Input { input, imap, forloop_dim } => {
                            let rank = block.inputs()[*input].shape.len();
                            for m in other_maps(*imap, grid, rank, true) {
                                edits.push((
                                    "imap",
                                    Edit::BlockOp(
                                        at,
                                        BlockOp::Input { input: *input, imap: m, forloop_dim: *forloop_dim },
                                    ),
                                ));
                            }
                            // With one iteration the forloop dim means nothing: no mutant.
                            for fd in (0..rank).map(Some).chain([None]).filter(|d| f > 1 && d != forloop_dim) {
                                edits.push((
                                    "forloop dim",
                                    Edit::BlockOp(at, BlockOp::Input { input: *input, imap: *imap, forloop_dim: fd }),
                                ));
                            }
                        }
                        BlockOp::Output { omap, store } => {
                            let rank = block.tile(bn.inputs[0]).map(|t| t.shape.len()).unwrap_or(0);
                            for m in other_maps(*omap, grid, rank, false) {
                                edits.push(("omap", Edit::BlockOp(at, BlockOp::Output { omap: m, store: *store })));
                            }
                        }
                        BlockOp::Binary { op: BinaryOp::Div | BinaryOp::Sub | BinaryOp::Pow } | BlockOp::Matmul => {
                            edits.push(("swapped operands", Edit::BlockInputs(at, vec![bn.inputs[1], bn.inputs[0]])));
                        }
                        BlockOp::Unary { op: UnaryOp::Exp } => {
                            edits.push(("exp <-> silu", Edit::BlockOp(at, BlockOp::Unary { op: UnaryOp::Silu })))
                        }
                        BlockOp::Unary { op: UnaryOp::Silu } => {
                            edits.push(("exp <-> silu", Edit::BlockOp(at, BlockOp::Unary { op: UnaryOp::Exp })))
                        }
                        BlockOp::Accum { acc } => {
                            // A dropped accumulator: only the iterations' maximum (not the sum)
                            // survives, or the reduction of the last dim is dropped or changed;
                            // a wrong reduction width.
                            let alts: Vec<(&str, AccKind)> = match acc {
                                AccKind::Sum if f > 1 => vec![("accumulator", AccKind::Max)],
                                AccKind::SumLast => vec![
                                    ("accumulator", AccKind::RmsLast),
                                    ("reduction width", AccKind::SumTo { width: 2 }),
                                ],
                                AccKind::RmsLast => vec![("accumulator", AccKind::SumLast)],
                                AccKind::SumTo { width } => vec![
                                    ("reduction width", AccKind::SumTo { width: width * 2 }),
                                    ("reduction width", AccKind::SumTo { width: (width / 2).max(1) }),
                                    ("reduction width", AccKind::SumLast),
                                ],
                                _ => vec![],
                            };
                            for (kind, a) in alts.into_iter().filter(|(_, a)| a != acc) {
                                edits.push((kind, Edit::BlockOp(at, BlockOp::Accum { acc: a })));
                            }
                        }
                        BlockOp::ReduceSumTo { dim, width } => {
                            for w in [width * 2, width / 2] {
                                if w >= 1 {
                                    edits.push((
                                        "reduction width",
                                        Edit::BlockOp(at, BlockOp::ReduceSumTo { dim: *dim, width: w }),
                                    ));
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    edits.into_iter().filter_map(|(kind, e)| rebuild(g, &e).map(|m| (kind, m))).collect()
}

fn f32_inputs(g: &KernelGraph, seed: u64) -> Vec<HostTensor> {
    let key = seed;
    g.inputs()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let n: usize = d.shape.iter().product();
            let data = (0..n as u64)
                .map(|j| {
                    let h = mix64(key ^ mix64(i as u64) ^ j.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    (h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
                })
                .collect();
            Tensor { shape: d.shape.clone(), data }
        })
        .collect()
}

#[test]
fn mutants_of_every_golden_file_are_rejected() {
    let start = Instant::now();
    let mut by_kind: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut kept: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut rejected = 0;
    for case in golden_cases() {
        let program = (case.program)().expect("program builds");
        let candidates = case.candidates().expect("imports");
        let ctx = FingerprintContext::new(&program, &VerifyConfig::default()).expect("program evaluates");
        let inputs = f32_inputs(&program, 77);
        let mut want: Option<Vec<HostTensor>> = None;
        // Mutants of the first candidate of each file; per kind at most 4 checked and 2 rejected,
        // to exercise every kind of edit on every kind of graph in a CI budget.
        let mut tried: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
        for (kind, m) in mutants(&candidates[0]) {
            let (n, r) = tried.entry(kind).or_default();
            if *n >= 4 || *r >= 2 {
                continue;
            }
            *n += 1;
            match ctx.check(&m).expect("mutant evaluates") {
                Verdict::NotEquivalent { .. } => {
                    *r += 1;
                    rejected += 1;
                    *by_kind.entry(kind).or_default() += 1;
                }
                Verdict::Equivalent => {
                    // Only acceptable if the edit did not change the meaning (e.g. another
                    // forloop range re-tiles the same computation): the f32 reference decides.
                    let want = want.get_or_insert_with(|| run(&program, &inputs).expect("program runs"));
                    let got = run(&m, &inputs).expect("mutant runs");
                    let err = want
                        .iter()
                        .zip(&got)
                        .map(|(w, g)| max_scaled_error(g, w, 1e-3, 1e-3).unwrap_or(f32::INFINITY))
                        .fold(0.0, f32::max);
                    assert!(
                        err <= 1.0,
                        "{}: a {kind} mutant passed the fingerprint check but differs in f32 (scaled error {err})",
                        case.name
                    );
                    *kept.entry(kind).or_default() += 1;
                }
            }
        }
        println!("{}: (checked, rejected) per kind {tried:?}", case.name);
    }
    println!("rejected {rejected} mutants in {:.1?}: {by_kind:?}", start.elapsed());
    println!("meaning-preserving edits accepted (confirmed in f32): {kept:?}");
    assert!(rejected >= 30, "too few mutants were built: {rejected}");
    // No single forloop-dim edit of a golden candidate passes the shape rules (the tiles of a
    // matmul or an element-wise pair stop fitting), so that kind is counted when it occurs.
    for kind in ["imap", "omap", "swapped operands", "accumulator", "exp <-> silu", "reduction width"] {
        assert!(by_kind.get(kind).copied().unwrap_or(0) > 0, "no {kind} mutant was rejected");
    }
    assert!(
        kept.get("forloop range").copied().unwrap_or(0) > 0,
        "re-tiling with another forloop range keeps the meaning"
    );
}

// ---------------------------------------------------------------------------------------------
// Scalar offsets, rotary embeddings, gathers and argmax.

/// A graph of f32 inputs (and `i32` ones where `dtypes` says so) built by `f`, with its outputs.
fn graph_of(
    inputs: &[(&[usize], DType)],
    f: impl FnOnce(&mut KernelGraph, &[TensorRef]) -> Result<Vec<TensorRef>, mirage::ir::IrError>,
) -> KernelGraph {
    let mut g = KernelGraph::new();
    let refs: Vec<TensorRef> = inputs.iter().map(|(s, d)| g.input(s, *d).expect("input")).collect();
    for o in f(&mut g, &refs).expect("builds") {
        g.output(o, None).expect("output");
    }
    g
}

fn verdict(a: &KernelGraph, b: &KernelGraph) -> Verdict {
    verify(a, b, &VerifyConfig::default()).expect("verifies")
}

#[test]
fn offsets_take_part_in_the_field_algebra() {
    use mirage::ir::Scalar;
    let x: &[usize] = &[4, 8];
    // (x + 1) · 2 = 2x + 2: the offset is the field's addition of the constant.
    let factored = graph_of(&[(x, DType::F32)], |g, t| {
        let a = g.unary(UnaryOp::AddScalar { c: Scalar(1.0) }, t[0])?;
        Ok(vec![g.unary(UnaryOp::MulScalar { c: Scalar(2.0) }, a)?])
    });
    let expanded = graph_of(&[(x, DType::F32)], |g, t| {
        let a = g.unary(UnaryOp::MulScalar { c: Scalar(2.0) }, t[0])?;
        Ok(vec![g.unary(UnaryOp::AddScalar { c: Scalar(2.0) }, a)?])
    });
    let other = graph_of(&[(x, DType::F32)], |g, t| {
        let a = g.unary(UnaryOp::MulScalar { c: Scalar(2.0) }, t[0])?;
        Ok(vec![g.unary(UnaryOp::AddScalar { c: Scalar(1.0) }, a)?])
    });
    assert!(verdict(&factored, &expanded).is_equivalent());
    assert!(!verdict(&factored, &other).is_equivalent());
    assert_eq!(UnaryOp::AddScalar { c: Scalar(1.0) }.spec().law, Law::Offset(Scalar(1.0)));
}

#[test]
fn rope_is_exact_and_linear_in_x() {
    use mirage::ir::RopeLayout;
    let (x, c): (&[usize], &[usize]) = (&[6, 32], &[6, 8]);
    let ins = [(x, DType::F32), (x, DType::F32), (c, DType::F32), (c, DType::F32)];
    let of_sum = |layout| {
        graph_of(&ins, |g, t| {
            let s = g.add(t[0], t[1])?;
            Ok(vec![g.rope(layout, s, t[2], t[3])?])
        })
    };
    let sum_of = graph_of(&ins, |g, t| {
        let a = g.rope(RopeLayout::HalfSplit, t[0], t[2], t[3])?;
        let b = g.rope(RopeLayout::HalfSplit, t[1], t[2], t[3])?;
        Ok(vec![g.add(a, b)?])
    });
    assert!(verdict(&of_sum(RopeLayout::HalfSplit), &sum_of).is_equivalent());
    assert!(!verdict(&of_sum(RopeLayout::Interleaved), &sum_of).is_equivalent());
    // cos and sin swapped.
    let swapped = graph_of(&ins, |g, t| {
        let s = g.add(t[0], t[1])?;
        Ok(vec![g.rope(RopeLayout::HalfSplit, s, t[3], t[2])?])
    });
    assert!(!verdict(&of_sum(RopeLayout::HalfSplit), &swapped).is_equivalent());
}

#[test]
fn index_outputs_are_compared_with_the_row_they_come_from() {
    let x: &[usize] = &[3, 64];
    let argmax_of = |sub: bool| {
        graph_of(&[(x, DType::F32), (x, DType::F32)], |g, t| {
            let y = if sub { g.binary(BinaryOp::Sub, t[0], t[1])? } else { g.add(t[0], t[1])? };
            Ok(vec![g.argmax(y, 1)?])
        })
    };
    assert!(verdict(&argmax_of(false), &argmax_of(false)).is_equivalent());
    // Three positions out of 64 agree by chance with probability 64^-3 per trial; the row hash
    // in q tells the rows apart whatever the positions.
    assert!(!verdict(&argmax_of(false), &argmax_of(true)).is_equivalent());
    // The argmax's position and its row's hash; ties go to the lowest position.
    let d = FieldDomain::new(3);
    let row = values(9, 16);
    let p = d.position(5, &row);
    assert_eq!((p.p, d.index(p)), (5, Some(5)));
    assert_ne!(p.q, d.position(5, &values(10, 16)).q);
    for (&a, &b) in row.iter().zip(&row[1..]) {
        assert!(!d.greater(a, a), "strict");
        assert_ne!(d.greater(a, b), d.greater(b, a), "total on distinct values");
        // The maximum is the greater one.
        assert_eq!(d.max(a, b), if d.greater(b, a) { b } else { a });
    }
}

#[test]
fn gathers_draw_ids_of_their_table_and_computed_ids_get_more_trials() {
    let cfg = VerifyConfig::default();
    // Embedding lookup: ids drawn in 0..=rows (rows itself reads zeros).
    let lookup = graph_of(&[(&[50, 16], DType::F32), (&[40], DType::I32)], |g, t| Ok(vec![g.gather(t[0], t[1])?]));
    assert_eq!(index_bounds(&lookup), vec![None, Some(50)]);
    assert_eq!(trials_for(&lookup, &cfg), 2);
    let ids = FieldDomain::random_ids(1, 1, &[400], 50);
    assert!(ids.data.iter().all(|v| v.p <= 50));
    assert!(ids.data.iter().any(|v| v.p == 50) && ids.data.iter().any(|v| v.p == 0));
    // The default block graph of the lookup is equivalent; gathering another input is not.
    let blocks = mirage::codegen::default_blocks::lower_to_blocks(&lookup).expect("lowers");
    assert!(verdict(&lookup, &blocks).is_equivalent());
    // Greedy decoding: rows gathered at an argmax over 1000 logits: 40 / log2(1000) → 5 trials.
    let decode = graph_of(&[(&[1, 8], DType::F32), (&[8, 1000], DType::F32), (&[1000, 4], DType::F32)], |g, t| {
        let logits = g.matmul(t[0], t[1])?;
        let next = g.argmax(logits, 1)?;
        Ok(vec![g.gather(t[2], next)?])
    });
    assert_eq!(trials_for(&decode, &cfg), 5);
    let wrong = graph_of(&[(&[1, 8], DType::F32), (&[8, 1000], DType::F32), (&[1000, 4], DType::F32)], |g, t| {
        let logits = g.matmul(t[0], t[1])?;
        let shifted = g.unary(UnaryOp::Exp, logits)?;
        let next = g.argmax(shifted, 1)?;
        Ok(vec![g.gather(t[2], next)?])
    });
    // exp is monotone over the reals, not under the field's random order: reported different.
    assert!(!verdict(&decode, &wrong).is_equivalent());
}

// ---------------------------------------------------------------------------------------------
// rms_norm without epsilon is idempotent (`fold_repeated_norms`): accepted exactly where it holds.

/// `x[4, 16]` (and `g[1, 16]`) of `dtype` through `f` (one output).
fn norm_graph(
    dtype: DType,
    f: impl FnOnce(&mut KernelGraph, TensorRef, TensorRef) -> Result<TensorRef, mirage::ir::IrError>,
) -> KernelGraph {
    graph_of(&[(&[4, 16], dtype), (&[1, 16], dtype)], |g, r| Ok(vec![f(g, r[0], r[1])?]))
}

/// A custom kernel over `x[4, 16]`: each block loads a tile (rows split over 2 blocks when
/// `split_rows`, else the row split in two halves) and applies the block `rms_norm`s of `eps`
/// to it one after the other (`eps[0]` first), in the loop (of one iteration) or, with
/// `after_loop`, after its accumulator; then saves it.
fn block_norms_at(
    g: &mut KernelGraph,
    x: TensorRef,
    split_rows: bool,
    after_loop: bool,
    eps: &[f32],
) -> Result<TensorRef, IrError> {
    let desc = g.desc(x)?.clone();
    let map = [Some(if split_rows { 0 } else { 1 }), None, None];
    let mut bg = BlockGraph::new(vec![desc], [2, 1, 1], 128, 1)?;
    let mut t = bg.input(0, map, None)?;
    if after_loop {
        t = bg.accum(AccKind::Sum, &[t])?;
    }
    for &e in eps {
        t = bg.op(BlockOp::RmsNorm { eps: Scalar(e) }, &[t])?;
    }
    if !after_loop {
        t = bg.accum(AccKind::Sum, &[t])?;
    }
    bg.output(t, map)?;
    Ok(g.custom(&[x], bg)?[0])
}

/// [`block_norms_at`] in the loop.
fn block_norms(g: &mut KernelGraph, x: TensorRef, split_rows: bool, eps: &[f32]) -> Result<TensorRef, IrError> {
    block_norms_at(g, x, split_rows, false, eps)
}

/// `x` times the constant `c`.
fn scaled(g: &mut KernelGraph, x: TensorRef, c: f32) -> Result<TensorRef, IrError> {
    g.unary(UnaryOp::MulScalar { c: Scalar(c) }, x)
}

/// The largest difference of `a` and `b` in the f64 reference relative to the outputs' largest
/// magnitude, on inputs in `[-1, 1)` (`1e-10` and below: the same function).
fn f64_difference(a: &KernelGraph, b: &KernelGraph) -> f64 {
    let inputs = graph_inputs(a, 99, |_| -1.0..1.0);
    let (wa, wb) = (run_f64(a, &inputs).expect("runs in f64"), run_f64(b, &inputs).expect("runs in f64"));
    wa.iter()
        .zip(&wb)
        .map(|(x, y)| {
            let scale = x.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            x.data.iter().zip(&y.data).map(|(p, q)| (p - q).abs() / scale).fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_norm_without_epsilon_applied_twice_is_the_norm() {
    for dtype in [DType::F32, DType::Bf16, DType::F16] {
        let once = norm_graph(dtype, |g, x, _| g.rms_norm(x, 0.0, None));
        let once_gained = norm_graph(dtype, |g, x, w| {
            let y = g.rms_norm(x, 0.0, None)?;
            g.mul(y, w)
        });
        let once_weighted = norm_graph(dtype, |g, x, w| g.rms_norm(x, 0.0, Some(w)));
        // (what, program, candidate, whether the verifier proves it): every pair is the same
        // function in exact arithmetic.
        let equal: Vec<(&str, KernelGraph, KernelGraph, bool)> = vec![
            (
                "kernel norm twice",
                once.clone(),
                norm_graph(dtype, |g, x, _| {
                    let y = g.rms_norm(x, 0.0, None)?;
                    g.rms_norm(y, 0.0, None)
                }),
                true,
            ),
            (
                "kernel norm three times",
                once.clone(),
                norm_graph(dtype, |g, x, _| {
                    let y = g.rms_norm(x, 0.0, None)?;
                    let y = g.rms_norm(y, 0.0, None)?;
                    g.rms_norm(y, 0.0, None)
                }),
                true,
            ),
            // The Qwen pre-norm's form: the norm, then its gain.
            (
                "kernel norm twice, then the gain",
                once_gained.clone(),
                norm_graph(dtype, |g, x, w| {
                    let y = g.rms_norm(x, 0.0, None)?;
                    let y = g.rms_norm(y, 0.0, None)?;
                    g.mul(y, w)
                }),
                true,
            ),
            (
                "the weight on the second norm",
                once_weighted.clone(),
                norm_graph(dtype, |g, x, w| {
                    let y = g.rms_norm(x, 0.0, None)?;
                    g.rms_norm(y, 0.0, Some(w))
                }),
                true,
            ),
            ("block norm once", once.clone(), norm_graph(dtype, |g, x, _| block_norms(g, x, true, &[0.0])), true),
            ("block norm twice", once.clone(), norm_graph(dtype, |g, x, _| block_norms(g, x, true, &[0.0, 0.0])), true),
            (
                "block norm three times",
                once.clone(),
                norm_graph(dtype, |g, x, _| block_norms(g, x, true, &[0.0, 0.0, 0.0])),
                true,
            ),
            (
                "block norm twice after the loop",
                once.clone(),
                norm_graph(dtype, |g, x, _| block_norms_at(g, x, true, true, &[0.0, 0.0])),
                true,
            ),
            // Equal, but outside the rule (the verifier reports them different, never the
            // reverse): a norm without epsilon of any row-wise positive multiple of `x` is
            // `rms_norm(x)`; the halves of a row, each normalized, make a normalized row; the
            // rule does not look through a custom kernel's result.
            (
                "a norm with epsilon, then one without",
                once.clone(),
                norm_graph(dtype, |g, x, _| {
                    let y = g.rms_norm(x, 1e-6, None)?;
                    g.rms_norm(y, 0.0, None)
                }),
                false,
            ),
            (
                "block norm with epsilon, then one without",
                once.clone(),
                norm_graph(dtype, |g, x, _| block_norms(g, x, true, &[1e-6, 0.0])),
                false,
            ),
            (
                "kernel norm of a block norm of the rows",
                once.clone(),
                norm_graph(dtype, |g, x, _| {
                    let y = block_norms(g, x, true, &[0.0])?;
                    g.rms_norm(y, 0.0, None)
                }),
                false,
            ),
            (
                "kernel norm of block norms of half rows",
                norm_graph(dtype, |g, x, _| block_norms(g, x, false, &[0.0])),
                norm_graph(dtype, |g, x, _| {
                    let y = block_norms(g, x, false, &[0.0])?;
                    g.rms_norm(y, 0.0, None)
                }),
                false,
            ),
        ];
        for (what, program, candidate, proved) in &equal {
            assert!(f64_difference(program, candidate) <= 1e-10, "{dtype} {what}: the reference says they differ");
            assert_eq!(verdict(program, candidate).is_equivalent(), *proved, "{dtype} {what}");
            assert_eq!(verdict(candidate, program).is_equivalent(), *proved, "{dtype} {what}, the other way");
        }
    }
}

#[test]
fn norms_that_are_not_idempotent_stay_different() {
    let dtype = DType::F32;
    let once = norm_graph(dtype, |g, x, _| g.rms_norm(x, 0.0, None));
    let once_eps = norm_graph(dtype, |g, x, _| g.rms_norm(x, 1e-6, None));
    let once_gained = norm_graph(dtype, |g, x, w| {
        let y = g.rms_norm(x, 0.0, None)?;
        g.mul(y, w)
    });
    let once_weighted = norm_graph(dtype, |g, x, w| g.rms_norm(x, 0.0, Some(w)));
    let different: Vec<(&str, KernelGraph, KernelGraph)> = vec![
        // eps > 0: the normalized row's mean square is m / (m + eps), not 1.
        (
            "kernel norm with eps twice",
            once_eps.clone(),
            norm_graph(dtype, |g, x, _| {
                let y = g.rms_norm(x, 1e-6, None)?;
                g.rms_norm(y, 1e-6, None)
            }),
        ),
        (
            "none, then eps",
            once.clone(),
            norm_graph(dtype, |g, x, _| {
                let y = g.rms_norm(x, 0.0, None)?;
                g.rms_norm(y, 1e-6, None)
            }),
        ),
        (
            "block norm with eps twice",
            once_eps.clone(),
            norm_graph(dtype, |g, x, _| block_norms(g, x, true, &[1e-6, 1e-6])),
        ),
        (
            "block norm after the loop, none then eps",
            once.clone(),
            norm_graph(dtype, |g, x, _| block_norms_at(g, x, true, true, &[0.0, 1e-6])),
        ),
        ("block norm of half rows", once.clone(), norm_graph(dtype, |g, x, _| block_norms(g, x, false, &[0.0, 0.0]))),
        // A weight or a scale between the two norms.
        (
            "rms_norm(rms_norm(x)·g) for rms_norm(x)·g",
            once_gained.clone(),
            norm_graph(dtype, |g, x, w| {
                let y = g.rms_norm(x, 0.0, None)?;
                let y = g.mul(y, w)?;
                g.rms_norm(y, 0.0, None)
            }),
        ),
        (
            "the weighted norm twice",
            once_weighted.clone(),
            norm_graph(dtype, |g, x, w| {
                let y = g.rms_norm(x, 0.0, Some(w))?;
                g.rms_norm(y, 0.0, Some(w))
            }),
        ),
        (
            "a norm of the weighted norm",
            once_weighted.clone(),
            norm_graph(dtype, |g, x, w| {
                let y = g.rms_norm(x, 0.0, Some(w))?;
                g.rms_norm(y, 0.0, None)
            }),
        ),
        (
            "rms_norm(2·rms_norm(x)) for 2·rms_norm(x)",
            norm_graph(dtype, |g, x, _| {
                let y = g.rms_norm(x, 0.0, None)?;
                scaled(g, y, 2.0)
            }),
            norm_graph(dtype, |g, x, _| {
                let y = g.rms_norm(x, 0.0, None)?;
                let y = scaled(g, y, 2.0)?;
                g.rms_norm(y, 0.0, None)
            }),
        ),
        (
            "rms_norm(2·x) for 2·rms_norm(x)",
            norm_graph(dtype, |g, x, _| {
                let y = g.rms_norm(x, 0.0, None)?;
                scaled(g, y, 2.0)
            }),
            norm_graph(dtype, |g, x, _| {
                let y = scaled(g, x, 2.0)?;
                g.rms_norm(y, 0.0, None)
            }),
        ),
        (
            "the norm twice for x",
            norm_graph(dtype, |g, x, _| scaled(g, x, 1.0)),
            norm_graph(dtype, |g, x, _| {
                let y = g.rms_norm(x, 0.0, None)?;
                g.rms_norm(y, 0.0, None)
            }),
        ),
    ];
    for (what, program, candidate) in &different {
        assert!(f64_difference(program, candidate) > 1e-10, "{what}: the reference finds no difference");
        assert!(!verdict(program, candidate).is_equivalent(), "{what}: accepted");
        assert!(!verdict(candidate, program).is_equivalent(), "{what}: accepted the other way");
    }
}

#[test]
fn the_norm_rule_rewrites_only_a_norm_of_a_normalized_row() {
    use std::borrow::Cow;
    let dtype = DType::F32;
    // Nothing to fold: the graph itself is evaluated (no rebuild per candidate in the search).
    for g in [
        norm_graph(dtype, |g, x, _| g.rms_norm(x, 0.0, None)),
        norm_graph(dtype, |g, x, _| {
            let y = g.rms_norm(x, 1e-6, None)?;
            g.rms_norm(y, 1e-6, None)
        }),
        norm_graph(dtype, |g, x, w| {
            let y = g.rms_norm(x, 0.0, Some(w))?;
            g.rms_norm(y, 0.0, None)
        }),
    ] {
        assert!(matches!(fold_repeated_norms(&g), Cow::Borrowed(_)));
    }
    // x, w, n1 = norm(x), n2 = norm(n1, w), n3 = norm(n2): n2 becomes `n1 × w`; n3 reads a
    // weighted row and stays.
    let g = norm_graph(dtype, |g, x, w| {
        let y = g.rms_norm(x, 0.0, None)?;
        let y = g.rms_norm(y, 0.0, Some(w))?;
        g.rms_norm(y, 0.0, None)
    });
    let folded = fold_repeated_norms(&g);
    let ops: Vec<&KernelOp> = folded.nodes().iter().map(|n| &n.op).collect();
    assert_eq!(ops.len(), g.nodes().len(), "node numbers are kept");
    assert_eq!(*ops[3], KernelOp::Binary { op: BinaryOp::Mul });
    assert!(matches!(ops[4], KernelOp::RmsNorm { .. }));
    // A block norm of a block norm becomes `mul_scalar(1)`; the first stays.
    let g = norm_graph(dtype, |g, x, _| block_norms(g, x, true, &[0.0, 0.0]));
    let folded = fold_repeated_norms(&g);
    let KernelOp::Custom { block } = &folded.nodes()[2].op else { panic!("a custom kernel") };
    let bops: Vec<&BlockOp> = block.nodes().iter().map(|n| &n.op).collect();
    assert!(matches!(bops[1], BlockOp::RmsNorm { .. }));
    assert_eq!(*bops[2], BlockOp::Unary { op: UnaryOp::MulScalar { c: Scalar(1.0) } });
}

/// A custom kernel over `x[4, 16]` (rows split over 2 blocks) that sums its loop-invariant tile
/// over `frange` iterations (`frange·x`) and normalizes the sum with epsilon `eps`; with
/// `also_sum`, the sum is a second output.
fn norm_of_a_sum(
    g: &mut KernelGraph,
    x: TensorRef,
    frange: usize,
    eps: f32,
    also_sum: bool,
) -> Result<Vec<TensorRef>, IrError> {
    let desc = g.desc(x)?.clone();
    let map = [Some(0), None, None];
    let mut bg = BlockGraph::new(vec![desc], [2, 1, 1], 128, frange)?;
    let t = bg.input(0, map, None)?;
    let s = bg.accum(AccKind::Sum, &[t])?;
    let n = bg.op(BlockOp::RmsNorm { eps: Scalar(eps) }, &[s])?;
    bg.output(n, map)?;
    if also_sum {
        bg.output(s, map)?;
    }
    g.custom(&[x], bg)
}

/// A graph builder's outputs.
type Outputs = Result<Vec<TensorRef>, IrError>;

#[test]
fn a_norm_without_epsilon_of_a_sum_of_equal_tiles_is_the_norm() {
    let f32_graph =
        |f: &dyn Fn(&mut KernelGraph, TensorRef) -> Outputs| graph_of(&[(&[4, 16], DType::F32)], |g, r| f(g, r[0]));
    let once = f32_graph(&|g, x| Ok(vec![g.rms_norm(x, 0.0, None)?]));
    let once_eps = f32_graph(&|g, x| Ok(vec![g.rms_norm(x, 1e-6, None)?]));
    // rms_norm(3·x) = rms_norm(x): accepted.
    let summed = f32_graph(&|g, x| norm_of_a_sum(g, x, 3, 0.0, false));
    assert!(f64_difference(&once, &summed) <= 1e-10);
    assert!(verdict(&once, &summed).is_equivalent());
    assert!(verdict(&summed, &once).is_equivalent());
    // With an epsilon it is another function: rejected.
    let summed_eps = f32_graph(&|g, x| norm_of_a_sum(g, x, 3, 1e-6, false));
    assert!(f64_difference(&once_eps, &summed_eps) > 1e-10);
    assert!(!verdict(&once_eps, &summed_eps).is_equivalent());
    // The sum read by another operator (an output) stays `3·x`: no rewrite, and `3·x` is not `x`.
    let both = f32_graph(&|g, x| norm_of_a_sum(g, x, 3, 0.0, true));
    assert!(matches!(fold_repeated_norms(&both), std::borrow::Cow::Borrowed(_)));
    let wrong = f32_graph(&|g, x| Ok(vec![g.rms_norm(x, 0.0, None)?, x]));
    assert!(f64_difference(&wrong, &both) > 1e-10);
    assert!(!verdict(&wrong, &both).is_equivalent());
    // A tile that changes with the iteration (rows walked by the loop) is not summed copies.
    let mut g = KernelGraph::new();
    let x = g.input(&[4, 16], DType::F32).expect("x");
    let mut bg = BlockGraph::new(vec![g.desc(x).expect("x").clone()], [2, 1, 1], 128, 2).expect("block");
    let t = bg.input(0, [Some(1), None, None], Some(0)).expect("tile");
    let s = bg.accum(AccKind::Sum, &[t]).expect("sum");
    let n = bg.op(BlockOp::RmsNorm { eps: Scalar(0.0) }, &[s]).expect("norm");
    bg.output(n, [Some(1), None, None]).expect("out");
    let o = g.custom(&[x], bg).expect("custom")[0];
    g.output(o, None).expect("output");
    assert!(matches!(fold_repeated_norms(&g), std::borrow::Cow::Borrowed(_)));
}
