//! The safe softmax through the whole pipeline: the DSL's `softmax` subtracts the row maximum,
//! the search never trades it for the unshifted form (which fingerprints cannot tell apart from
//! it: the wide-range float check does), and max-subtracted attention gets fused online-softmax
//! and split-KV µGraphs that pass both checks, while their broken variants (a wrong rescale, a
//! dropped maximum, a combine that forgets the maximum) are rejected.
#![cfg(feature = "build")]

use mirage::cache::{Cache, CacheEntry};
use mirage::fingerprint::{VerifyConfig, verify};
use mirage::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, KernelGraph, Scalar, TensorRef, UnaryOp};
use mirage::lower::lower_source;
use mirage::search::{SearchConfig, attention, describe, float_check, superoptimize, takes_a_maximum};

fn lower(src: &str) -> KernelGraph {
    lower_source(src).unwrap_or_else(|e| panic!("{e}")).remove(0).graph
}

/// `softmax(x, 1)` over `[rows, cols]` f16.
fn softmax_program(rows: usize, cols: usize) -> KernelGraph {
    lower(&format!(
        "#[mugraph] fn sm(x: Tensor<f16, {rows}, {cols}>) -> Tensor<f16, {rows}, {cols}> {{ softmax(x, 1) }}"
    ))
}

/// The unshifted softmax `exp(x) / Σ exp(x)` over `[rows, cols]` f16.
fn unshifted_program(rows: usize, cols: usize) -> KernelGraph {
    lower(&format!(
        "#[mugraph] fn sm(x: Tensor<f16, {rows}, {cols}>) -> Tensor<f16, {rows}, {cols}> {{ let e = exp(x); e / e.sum(1) }}"
    ))
}

/// Decode attention with the safe softmax: `heads` heads of one query row, `keys` keys.
fn attention_program(dtype: &str, heads: usize, keys: usize, dim: usize) -> KernelGraph {
    let scale = 1.0 / (dim as f32).sqrt();
    lower(&format!(
        "#[mugraph]
         fn attn(q: Tensor<{dtype}, {heads}, 1, {dim}>, k: Tensor<{dtype}, {heads}, {dim}, {keys}>, v: Tensor<{dtype}, {heads}, {keys}, {dim}>)
             -> Tensor<{dtype}, {heads}, 1, {dim}>
         {{
             let s = q.matmul(k) * {scale:?};
             softmax(s, 2).matmul(v)
         }}"
    ))
}

fn equivalent(program: &KernelGraph, candidate: &KernelGraph) -> bool {
    verify(program, candidate, &VerifyConfig::default()).expect("verification runs").is_equivalent()
}

fn float_ok(program: &KernelGraph, candidate: &KernelGraph) -> Result<(), String> {
    float_check(program, candidate).expect("the float check runs")
}

#[test]
fn fingerprints_cannot_tell_the_shift_and_the_float_check_can() {
    let (safe, unshifted) = (softmax_program(4, 32), unshifted_program(4, 32));
    assert!(equivalent(&safe, &unshifted), "exp(x - m) / Σ exp(x - m) is exp(x) / Σ exp(x) in the field");
    let err = float_ok(&safe, &unshifted).expect_err("the unshifted form overflows on wide inputs");
    assert!(err.contains("maximum"), "{err}");
    assert_eq!(float_ok(&safe, &safe), Ok(()));
    // The unshifted program takes no maximum: the safe form is a fine candidate for it.
    assert_eq!(float_ok(&unshifted, &safe), Ok(()));
}

#[test]
fn the_chosen_softmax_kernel_subtracts_the_maximum() {
    let program = softmax_program(16, 64);
    let r = superoptimize(&program, &SearchConfig::single_kernel(), None).unwrap_or_else(|e| panic!("{e}"));
    println!("{r}");
    assert_eq!(r.best.verified, Some(true));
    assert!(takes_a_maximum(&r.best.graph), "{}", describe(&r.best.graph));
    assert_eq!(float_ok(&program, &r.best.graph), Ok(()));
}

#[test]
fn the_unshifted_kernel_is_refused_by_the_search_and_from_the_cache() {
    // The fused kernel the search picks for the unshifted form: fingerprints call it equal to the
    // safe softmax, the float check does not.
    let (safe, unshifted) = (softmax_program(16, 64), unshifted_program(16, 64));
    let cfg = SearchConfig::single_kernel();
    let u = superoptimize(&unshifted, &cfg, None).unwrap_or_else(|e| panic!("{e}")).best.graph;
    assert!(!takes_a_maximum(&u), "{}", describe(&u));
    assert!(equivalent(&safe, &u));
    assert!(float_ok(&safe, &u).is_err());

    // Stored as the safe program's cache entry, it is refused and the program searched again.
    let dir = std::env::temp_dir().join(format!("mirage-softmax-cache-{}", std::process::id()));
    let cache = Cache::new(&dir);
    let key = cfg.cache_key(&safe);
    let entry = CacheEntry::new(&key, &u, 1.0, Vec::new()).expect("entry");
    cache.store(&key, &entry).expect("stored");
    let r = superoptimize(&safe, &cfg, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!r.from_cache, "the unshifted entry was used");
    assert!(r.notes.iter().any(|n| n.contains("does not keep the program's maximum")), "{:?}", r.notes);
    assert!(takes_a_maximum(&r.best.graph), "{}", describe(&r.best.graph));
}

#[test]
fn attention_is_recognized_with_its_scale() {
    let a = attention::recognize(&attention_program("f32", 4, 256, 32)).expect("recognized");
    assert_eq!((a.heads, a.rows, a.keys, a.rank, a.inputs), (4, 1, 256, 3, [0, 1, 2]));
    assert_eq!(a.scale, Some(1.0 / 32f32.sqrt()));
    assert_eq!(attention::recognize(&softmax_program(4, 32)), None, "no matmuls");
    let unshifted = lower(
        "#[mugraph] fn a(q: Tensor<f32, 2, 1, 8>, k: Tensor<f32, 2, 8, 16>, v: Tensor<f32, 2, 16, 8>) -> Tensor<f32, 2, 1, 8> {
             let e = exp(q.matmul(k)); (e / e.sum(2)).matmul(v)
         }",
    );
    assert_eq!(attention::recognize(&unshifted), None, "no maximum");
}

#[test]
fn every_attention_candidate_passes_both_checks() {
    for dtype in ["f32", "bf16"] {
        let program = attention_program(dtype, 4, 256, 32);
        let cfg = SearchConfig { forloop_ranges: vec![4, 8], threads: vec![128], ..SearchConfig::default() };
        let cands = attention::candidates(&program, &cfg);
        let splits = cands.iter().filter(|g| g.num_kernels() == 2).count();
        println!("{dtype}: {} candidates, {splits} split-KV", cands.len());
        assert!(cands.len() >= 3, "{dtype}: {} candidates", cands.len());
        assert_eq!(splits > 0, dtype == "f32", "split-KV for f32 only");
        for g in &cands {
            assert!(equivalent(&program, g), "{dtype}: fingerprints reject\n{}", describe(g));
            assert_eq!(float_ok(&program, g), Ok(()), "{dtype}:\n{}", describe(g));
        }
    }
}

#[test]
fn the_search_fuses_decode_attention() {
    for dtype in ["f32", "bf16"] {
        let program = attention_program(dtype, 4, 256, 32);
        let cfg = SearchConfig { max_states: 20_000, ..SearchConfig::default() };
        let r = superoptimize(&program, &cfg, None).unwrap_or_else(|e| panic!("{dtype}: {e}"));
        println!("{dtype}: {r}");
        let running_max = r.best.graph.nodes().iter().any(|n| match &n.op {
            mirage::ir::KernelOp::Custom { block } => {
                block.nodes().iter().any(|b| matches!(b.op, BlockOp::RunningMax { .. }))
            }
            _ => false,
        });
        assert!(running_max, "{dtype}: not an online softmax\n{}", describe(&r.best.graph));
        assert_eq!(float_ok(&program, &r.best.graph), Ok(()));
    }
}

#[test]
fn the_issue_shape_gets_a_fused_online_softmax() {
    // Issue 15's decode step: 32 heads, 1 query row, 4096 keys, head dim 128, bf16.
    let program = attention_program("bf16", 32, 4096, 128);
    let cfg = SearchConfig { max_states: 20_000, ..SearchConfig::default() };
    let r = superoptimize(&program, &cfg, None).unwrap_or_else(|e| panic!("{e}"));
    println!("{r}");
    assert_eq!(r.best.verified, Some(true));
    assert!(r.best.graph.num_kernels() == 1 && takes_a_maximum(&r.best.graph), "{}", describe(&r.best.graph));
    assert_eq!(float_ok(&program, &r.best.graph), Ok(()));
}

// ---------------------------------------------------------------------------------------------
// Mutants: the fused forms with one thing broken, written out here (not with the module's
// builders) so that each differs from the correct graph in exactly the named place.

const H: usize = 4;
const N: usize = 256;
const D: usize = 32;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Online {
    Correct,
    /// The rescale factor `exp(m_new − m_old)` instead of `exp(m_old − m_new)`.
    SwappedRescale,
    /// The scores shifted by the running maximum, the accumulators never rescaled.
    NoRescale,
    /// No maximum at all: `exp(s)` summed (the unshifted softmax, fused).
    DroppedMax,
}

/// Online softmax of [`attention_program`]`("f32", H, N, D)`, `frange` key tiles, one block per
/// head; with `splits > 1` the per-split parts `(acc_o, acc_l, m)` are returned instead of the
/// output.
fn online(g: &mut KernelGraph, ins: &[TensorRef], splits: usize, frange: usize, how: Online) -> Vec<TensorRef> {
    let descs: Vec<_> = ins.iter().map(|&t| g.desc(t).expect("input").clone()).collect();
    let mut bg = BlockGraph::new(descs, [H, splits, 1], 128, frange).expect("grid");
    let q = bg.input(0, [Some(0), None, None], None).expect("q");
    let k = bg.input(1, [Some(0), Some(2), None], Some(2)).expect("k");
    let v = bg.input(2, [Some(0), Some(1), None], Some(1)).expect("v");
    let s = bg.matmul(q, k).expect("qk");
    let s = bg.unary(UnaryOp::MulScalar { c: Scalar(1.0 / (D as f32).sqrt()) }, s).expect("scale");
    let (p, r, m) = if how == Online::DroppedMax {
        (bg.unary(UnaryOp::Exp, s).expect("exp"), None, None)
    } else {
        let rm = bg.push(BlockOp::RunningMax { dim: 2 }, &[s]).expect("running max");
        let shifted = bg.binary(BinaryOp::Sub, s, rm[0]).expect("sub");
        let p = bg.unary(UnaryOp::Exp, shifted).expect("exp");
        let diff = if how == Online::SwappedRescale { bg.unary(UnaryOp::Neg, rm[1]).expect("neg") } else { rm[1] };
        let r = bg.unary(UnaryOp::Exp, diff).expect("exp");
        (p, (how != Online::NoRescale).then_some(r), Some(rm[0]))
    };
    let pv = bg.matmul(p, v).expect("pv");
    let (acc_o, acc_l) = match r {
        Some(r) => (
            bg.accum(AccKind::Rescale, &[pv, r]).expect("acc"),
            bg.accum(AccKind::SumLastRescale, &[p, r]).expect("acc"),
        ),
        None => (bg.accum(AccKind::Sum, &[pv]).expect("acc"), bg.accum(AccKind::SumLast, &[p]).expect("acc")),
    };
    if splits == 1 {
        let o = bg.binary(BinaryOp::Div, acc_o, acc_l).expect("div");
        bg.output(o, [Some(0), None, None]).expect("out");
    } else {
        let m = match m {
            Some(m) => bg.accum(AccKind::Max, &[m]).expect("max"),
            None => {
                let m = bg.op(BlockOp::ReduceMax { dim: 2 }, &[s]).expect("max");
                bg.accum(AccKind::Max, &[m]).expect("max")
            }
        };
        for t in [acc_o, acc_l, m] {
            bg.output(t, [Some(0), Some(1), None]).expect("out");
        }
    }
    g.custom(ins, bg).expect("custom")
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Combine {
    Correct,
    /// The parts added without weights.
    NoWeights,
    /// Weights `exp(m_j)`: the overall maximum never subtracted.
    ForgetsTheMax,
}

fn combine(g: &mut KernelGraph, parts: &[TensorRef], how: Combine) -> TensorRef {
    let descs: Vec<_> = parts.iter().map(|&t| g.desc(t).expect("part").clone()).collect();
    let mut bg = BlockGraph::new(descs, [H, 1, 1], 128, 1).expect("grid");
    let o = bg.input(0, [Some(0), None, None], None).expect("o");
    let l = bg.input(1, [Some(0), None, None], None).expect("l");
    let m = bg.input(2, [Some(0), None, None], None).expect("m");
    let (o, l) = if how == Combine::NoWeights {
        (o, l)
    } else {
        let arg = if how == Combine::ForgetsTheMax {
            m
        } else {
            let total = bg.op(BlockOp::ReduceMax { dim: 1 }, &[m]).expect("max");
            bg.binary(BinaryOp::Sub, m, total).expect("sub")
        };
        let w = bg.unary(UnaryOp::Exp, arg).expect("exp");
        (bg.binary(BinaryOp::Mul, o, w).expect("mul"), bg.binary(BinaryOp::Mul, l, w).expect("mul"))
    };
    let num = bg.op(BlockOp::ReduceSum { dim: 1 }, &[o]).expect("sum");
    let den = bg.op(BlockOp::ReduceSum { dim: 1 }, &[l]).expect("sum");
    let out = bg.binary(BinaryOp::Div, num, den).expect("div");
    let out = bg.accum(AccKind::Sum, &[out]).expect("acc");
    bg.output(out, [Some(0), None, None]).expect("out");
    g.custom(parts, bg).expect("custom")[0]
}

/// A complete µGraph: the online softmax (`splits == 1`) or split-KV with `how_combine`.
fn fused(splits: usize, how: Online, how_combine: Combine) -> KernelGraph {
    let mut g = KernelGraph::new();
    let ins: Vec<TensorRef> =
        [vec![H, 1, D], vec![H, D, N], vec![H, N, D]].iter().map(|s| g.input(s, DType::F32).expect("input")).collect();
    let out = if splits == 1 {
        online(&mut g, &ins, 1, 8, how)[0]
    } else {
        let parts = online(&mut g, &ins, splits, 4, how);
        combine(&mut g, &parts, how_combine)
    };
    g.output(out, None).expect("output");
    g
}

#[test]
fn the_correct_fused_forms_pass() {
    let program = attention_program("f32", H, N, D);
    for g in [fused(1, Online::Correct, Combine::Correct), fused(4, Online::Correct, Combine::Correct)] {
        assert!(equivalent(&program, &g), "{}", describe(&g));
        assert_eq!(float_ok(&program, &g), Ok(()));
    }
}

#[test]
fn a_wrong_rescale_is_rejected_by_fingerprints() {
    let program = attention_program("f32", H, N, D);
    for how in [Online::SwappedRescale, Online::NoRescale] {
        for splits in [1, 4] {
            let g = fused(splits, how, Combine::Correct);
            assert!(!equivalent(&program, &g), "{how:?}, {splits} split(s) passed fingerprints");
            assert!(float_ok(&program, &g).is_err(), "{how:?}, {splits} split(s) passed the float check");
        }
    }
}

#[test]
fn a_dropped_maximum_passes_fingerprints_and_fails_the_float_check() {
    let program = attention_program("f32", H, N, D);
    // Fused in one kernel, and split with parts added unweighted (nothing to rescale by).
    for (splits, how_combine) in [(1, Combine::Correct), (4, Combine::NoWeights)] {
        let g = fused(splits, Online::DroppedMax, how_combine);
        assert!(equivalent(&program, &g), "the field cannot see the shift ({splits} split(s))");
        let err = float_ok(&program, &g).expect_err("overflows on wide inputs");
        assert!(err.contains("maximum"), "{err}");
    }
}

#[test]
fn a_combine_that_forgets_the_maximum_is_rejected() {
    let program = attention_program("f32", H, N, D);
    let g = fused(4, Online::Correct, Combine::NoWeights);
    assert!(!equivalent(&program, &g), "parts added without their weights passed fingerprints");
    let g = fused(4, Online::Correct, Combine::ForgetsTheMax);
    assert!(equivalent(&program, &g), "exp(m_j) weights are exact in the field");
    let err = float_ok(&program, &g).expect_err("exp(m_j) overflows on wide inputs");
    assert!(err.contains("maximum"), "{err}");
}
