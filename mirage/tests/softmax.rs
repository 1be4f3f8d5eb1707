//! The safe softmax through the whole pipeline: the DSL's `softmax` subtracts the row maximum,
//! the search never trades it for the unshifted form (which fingerprints cannot tell apart from
//! it: the wide-range float check does), and max-subtracted attention gets fused online-softmax
//! and split-KV µGraphs that pass both checks, while their broken variants (a wrong rescale, a
//! dropped maximum, a combine that forgets the maximum) are rejected.
#![cfg(feature = "build")]

use mirage::cache::{Cache, CacheEntry};
use mirage::fingerprint::{VerifyConfig, verify};
use mirage::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, KernelGraph, KernelOp, Scalar, TensorRef, UnaryOp};
use mirage::lower::lower_source;
use mirage::reference::{self, HostTensor};
use mirage::search::{SearchConfig, attention, describe, float_check, superoptimize, takes_a_maximum};
use mirage::testing::rounding::run_stored;

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
    gqa_program(dtype, heads, 1, keys, dim)
}

/// Decode attention with the safe softmax: `heads` KV heads of `rows` query rows each (a GQA
/// group), `keys` keys.
fn gqa_program(dtype: &str, heads: usize, rows: usize, keys: usize, dim: usize) -> KernelGraph {
    let scale = 1.0 / (dim as f32).sqrt();
    lower(&format!(
        "#[mugraph]
         fn attn(q: Tensor<{dtype}, {heads}, {rows}, {dim}>, k: Tensor<{dtype}, {heads}, {dim}, {keys}>, v: Tensor<{dtype}, {heads}, {keys}, {dim}>)
             -> Tensor<{dtype}, {heads}, {rows}, {dim}>
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

/// The element types each kernel of `g` stores its outputs in, kernel by kernel.
fn stored_types(g: &KernelGraph) -> Vec<Vec<DType>> {
    g.nodes()
        .iter()
        .filter(|n| matches!(n.op, KernelOp::Custom { .. }))
        .map(|n| n.outputs.iter().map(|d| d.dtype).collect())
        .collect()
}

#[test]
fn every_attention_candidate_passes_both_checks() {
    // One query row per head, and GQA groups of 4 rows (split-KV with one block per row).
    let cases = [("f32", DType::F32, 1), ("bf16", DType::Bf16, 1), ("f16", DType::F16, 1), ("bf16", DType::Bf16, 4)];
    for (name, dtype, rows) in cases {
        let program = gqa_program(name, 4, rows, 256, 32);
        let cfg = SearchConfig { forloop_ranges: vec![4, 8], threads: vec![128], ..SearchConfig::default() };
        let cands = attention::candidates(&program, &cfg);
        let splits = cands.iter().filter(|g| g.num_kernels() == 2).count();
        println!("{name}, {rows} row(s): {} candidates, {splits} split-KV", cands.len());
        assert!(cands.len() >= 3, "{name}: {} candidates", cands.len());
        assert!(splits > 0, "{name}: no split-KV candidate");
        for g in &cands {
            assert!(equivalent(&program, g), "{name}: fingerprints reject\n{}", describe(g));
            assert_eq!(float_ok(&program, g), Ok(()), "{name}:\n{}", describe(g));
            // Split-KV keeps its parts (acc_o, acc_l, m) in f32; the result is the program's type.
            let want = if g.num_kernels() == 2 { vec![vec![DType::F32; 3], vec![dtype]] } else { vec![vec![dtype]] };
            assert_eq!(stored_types(g), want, "{name}:\n{}", describe(g));
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
            KernelOp::Custom { block } => block.nodes().iter().any(|b| matches!(b.op, BlockOp::RunningMax { .. })),
            _ => false,
        });
        assert!(running_max, "{dtype}: not an online softmax\n{}", describe(&r.best.graph));
        assert_eq!(float_ok(&program, &r.best.graph), Ok(()));
    }
}

/// The grids of the kernels of the µGraph the search chooses for bf16 `program`, after checking
/// that it is verified split-KV with f32 parts that passes the float check.
fn chosen_split_kv_grids(program: &KernelGraph) -> Vec<[usize; 3]> {
    let cfg = SearchConfig { max_states: 20_000, ..SearchConfig::default() };
    let r = superoptimize(program, &cfg, None).unwrap_or_else(|e| panic!("{e}"));
    println!("{r}");
    assert_eq!(r.best.verified, Some(true));
    let g = &r.best.graph;
    assert!(g.num_kernels() == 2 && takes_a_maximum(g), "{}", describe(g));
    assert_eq!(stored_types(g), vec![vec![DType::F32; 3], vec![DType::Bf16]], "{}", describe(g));
    assert_eq!(float_ok(program, g), Ok(()));
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            KernelOp::Custom { block } => Some(block.grid()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_issue_shape_gets_split_kv_with_f32_parts() {
    // Issue 15's decode step: 32 heads, 1 query row, 4096 keys, head dim 128, bf16. One block per
    // head would leave 100 of the H200's 132 SMs idle: the cost model picks split-KV.
    let grids = chosen_split_kv_grids(&attention_program("bf16", 32, 4096, 128));
    assert!(grids[0].iter().product::<usize>() >= 4 * 32, "{grids:?}");
}

#[test]
fn a_gqa_decode_step_gets_split_kv_with_a_groups_rows_in_one_block() {
    // The bench's GQA case: 8 KV heads of 4 query rows, 4096 keys, head dim 128, bf16. One block
    // per KV head and row block would use at most 32 SMs; one block per row of a split would read
    // each key tile 4 times. The model picks split-KV with the group's rows in one block.
    let grids = chosen_split_kv_grids(&gqa_program("bf16", 8, 4, 4096, 128));
    assert_eq!((grids[0][0], grids[0][2]), (8, 1), "heads × splits × 1: {grids:?}");
    assert!(grids[0][1] >= 4, "split over the keys: {grids:?}");
    assert_eq!(grids[1], [8, 4, 1], "the combine: one block per head and row");
}

#[test]
fn the_bench_attention_programs_are_recognized() {
    // The GPU bench's decode-attention group (built with MIRAGE_ATTENTION=1) lowers, and each
    // program is the safe-softmax attention this module fuses, scaled by 1/√d.
    let programs = lower_source(include_str!("../../benches/kernels/attention.rs")).unwrap_or_else(|e| panic!("{e}"));
    let found: Vec<(String, usize, usize, usize, usize)> = programs
        .iter()
        .map(|p| {
            let a = attention::recognize(&p.graph).unwrap_or_else(|| panic!("{} not recognized", p.name));
            let scale = a.scale.unwrap_or_else(|| panic!("{}: no scale", p.name));
            let d = *p.graph.inputs()[a.inputs[0]].shape.last().expect("q has dims");
            assert!((f64::from(scale) - (d as f64).sqrt().recip()).abs() < 1e-8, "{}: scale {scale}", p.name);
            (p.name.clone(), a.heads, a.rows, a.keys, d)
        })
        .collect();
    let want = [
        ("attn_decode_h32_n4096_d128_bf16", 32, 1, 4096, 128),
        ("attn_decode_h32_n4096_d128_f16", 32, 1, 4096, 128),
        ("attn_gqa_kv8_g4_n4096_d128_bf16", 8, 4, 4096, 128),
        ("attn_gqa_kv8_g8_n4096_d128_bf16", 8, 8, 4096, 128),
        ("attn_gqa_kv8_g16_n4096_d128_bf16", 8, 16, 4096, 128),
        ("attn_gqa_kv8_g4_n4096_d128_f16", 8, 4, 4096, 128),
        ("attn_gqa_kv8_g4_n512_d128_bf16", 8, 4, 512, 128),
        ("attn_gqa_kv8_g4_n32768_d128_bf16", 8, 4, 32768, 128),
        ("attn_decode_h32_n4096_d64_bf16", 32, 1, 4096, 64),
        ("attn_gqa_kv8_g4_n4096_d64_bf16", 8, 4, 4096, 64),
    ];
    assert_eq!(found, want.map(|(n, h, r, k, d)| (n.to_string(), h, r, k, d)).to_vec());
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

/// Online softmax of [`attention_program`]`(_, H, N, D)`, `frange` key tiles, one block per
/// head; with `splits > 1` the per-split parts `(acc_o, acc_l, m)` are returned instead of the
/// output, stored as `parts`.
fn online(
    g: &mut KernelGraph,
    ins: &[TensorRef],
    splits: usize,
    frange: usize,
    how: Online,
    parts: DType,
) -> Vec<TensorRef> {
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
            bg.output_as(t, [Some(0), Some(1), None], parts).expect("out");
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

/// The combine kernel over `parts`, its result stored as `dtype`.
fn combine(g: &mut KernelGraph, parts: &[TensorRef], how: Combine, dtype: DType) -> TensorRef {
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
    bg.output_as(out, [Some(0), None, None], dtype).expect("out");
    g.custom(parts, bg).expect("custom")[0]
}

/// A complete µGraph over `dtype` inputs: the online softmax (`splits == 1`) or split-KV with
/// `how_combine` and its parts stored as `parts`.
fn fused_stored(dtype: DType, splits: usize, how: Online, how_combine: Combine, parts: DType) -> KernelGraph {
    let mut g = KernelGraph::new();
    let ins: Vec<TensorRef> =
        [vec![H, 1, D], vec![H, D, N], vec![H, N, D]].iter().map(|s| g.input(s, dtype).expect("input")).collect();
    let out = if splits == 1 {
        online(&mut g, &ins, 1, 8, how, parts)[0]
    } else {
        let parts = online(&mut g, &ins, splits, 4, how, parts);
        combine(&mut g, &parts, how_combine, dtype)
    };
    g.output(out, None).expect("output");
    g
}

/// [`fused_stored`] with f32 parts (as `search::attention` writes them).
fn fused(dtype: DType, splits: usize, how: Online, how_combine: Combine) -> KernelGraph {
    fused_stored(dtype, splits, how, how_combine, DType::F32)
}

/// The element types of the mutant tests, with their names in the DSL.
const TYPES: [(&str, DType); 3] = [("f32", DType::F32), ("bf16", DType::Bf16), ("f16", DType::F16)];

#[test]
fn the_correct_fused_forms_pass() {
    for (name, dtype) in TYPES {
        let program = attention_program(name, H, N, D);
        for g in
            [fused(dtype, 1, Online::Correct, Combine::Correct), fused(dtype, 4, Online::Correct, Combine::Correct)]
        {
            assert!(equivalent(&program, &g), "{name}:\n{}", describe(&g));
            assert_eq!(float_ok(&program, &g), Ok(()), "{name}");
        }
    }
}

#[test]
fn a_wrong_rescale_is_rejected_by_fingerprints() {
    for (name, dtype) in TYPES {
        let program = attention_program(name, H, N, D);
        for how in [Online::SwappedRescale, Online::NoRescale] {
            for splits in [1, 4] {
                let g = fused(dtype, splits, how, Combine::Correct);
                assert!(!equivalent(&program, &g), "{name}: {how:?}, {splits} split(s) passed fingerprints");
                assert!(float_ok(&program, &g).is_err(), "{name}: {how:?}, {splits} split(s) passed the float check");
            }
        }
    }
}

#[test]
fn a_dropped_maximum_passes_fingerprints_and_fails_the_float_check() {
    for (name, dtype) in TYPES {
        let program = attention_program(name, H, N, D);
        // Fused in one kernel, and split with parts added unweighted (nothing to rescale by).
        for (splits, how_combine) in [(1, Combine::Correct), (4, Combine::NoWeights)] {
            let g = fused(dtype, splits, Online::DroppedMax, how_combine);
            assert!(equivalent(&program, &g), "{name}: the field cannot see the shift ({splits} split(s))");
            let err = float_ok(&program, &g).expect_err("overflows on wide inputs");
            assert!(err.contains("maximum"), "{name}: {err}");
        }
    }
}

#[test]
fn a_combine_that_forgets_the_maximum_is_rejected() {
    for (name, dtype) in TYPES {
        let program = attention_program(name, H, N, D);
        let g = fused(dtype, 4, Online::Correct, Combine::NoWeights);
        assert!(!equivalent(&program, &g), "{name}: parts added without their weights passed fingerprints");
        let g = fused(dtype, 4, Online::Correct, Combine::ForgetsTheMax);
        assert!(equivalent(&program, &g), "{name}: exp(m_j) weights are exact in the field");
        let err = float_ok(&program, &g).expect_err("exp(m_j) overflows on wide inputs");
        assert!(err.contains("maximum"), "{name}: {err}");
    }
}

/// Inputs of [`attention_program`]`("bf16", H, 256, D)` whose four key ranges of 64 keys (the
/// parts of a 4-way split) have logits `√D · c_j` with `c_j = 5.25 + j/32` (bf16 numbers): maxima
/// 29.70, 29.87, 30.05, 30.23, between the bf16 numbers near 30 (spacing 1/8), and values `v = j`
/// on range `j`, so the output is the average of `j` weighted by `exp(m_j)`.
fn split_sensitive_inputs() -> Vec<HostTensor> {
    let c = |n: usize| 5.25 + (n / 64) as f32 / 32.0;
    let q = HostTensor { shape: vec![H, 1, D], data: vec![1.0; H * D] };
    let k = HostTensor { shape: vec![H, D, N], data: (0..H * D * N).map(|i| c(i % N)).collect() };
    let v = HostTensor { shape: vec![H, N, D], data: (0..H * N * D).map(|i| ((i / D) % N / 64) as f32).collect() };
    vec![q, k, v]
}

#[test]
fn split_kv_parts_stored_in_f32_keep_the_combine_exact() {
    // The stored types are what the device writes: `run_stored` rounds each kernel output to its
    // stored type. With the parts in bf16, the maxima near 30 lose up to 1/16 and the weights
    // exp(m_j − M) up to 6 %; in f32 the only rounding left is the output's own.
    let program = attention_program("bf16", H, N, D);
    let inputs = split_sensitive_inputs();
    let want = &reference::run(&program, &inputs).expect("reference")[0];
    let error = |parts: DType| {
        let g = fused_stored(DType::Bf16, 4, Online::Correct, Combine::Correct, parts);
        let got = &run_stored(&g, &inputs).expect("runs")[0];
        got.data.iter().zip(&want.data).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max)
    };
    let (f32_parts, bf16_parts) = (error(DType::F32), error(DType::Bf16));
    println!("largest error: f32 parts {f32_parts:.5}, bf16 parts {bf16_parts:.5} (outputs near {:.3})", want.data[0]);
    // Outputs lie in [0, 3]: one bf16 rounding is at most 2^-7.
    assert!(f32_parts <= 1.0 / 128.0, "f32 parts: {f32_parts}");
    assert!(bf16_parts > 4.0 * f32_parts.max(1.0 / 512.0), "bf16 parts: {bf16_parts}, f32 parts: {f32_parts}");
}

// ---------------------------------------------------------------------------------------------
// Split-KV with a head's query rows in one block (`attention::split_kv_grouped`): parts
// `[h, rows, S·dv]` and `[h, rows, S]`, combined by a kernel that walks the ranges in its loop.

#[derive(Clone, Copy, PartialEq, Debug)]
enum Ranges {
    Correct,
    /// The accumulators summed without the running rescale `exp(M_old − M)`.
    NoRescale,
    /// Weights `exp(m_j)`: the running maximum never subtracted.
    ForgetsTheMax,
}

/// The first kernel of `attention::split_kv_grouped(program, .., splits, ..)` followed by a
/// combine over the ranges written here, broken as `how` says.
fn grouped_with(program: &KernelGraph, splits: usize, how: Ranges) -> KernelGraph {
    let a = attention::recognize(program).expect("attention");
    let built = attention::split_kv_grouped(program, &a, splits, 2, 128).expect("builds");
    let first = built
        .nodes()
        .iter()
        .find_map(|n| match &n.op {
            KernelOp::Custom { block } => Some(block.clone()),
            _ => None,
        })
        .expect("a first kernel");
    let mut g = KernelGraph::new();
    let ins: Vec<TensorRef> = program.inputs().iter().map(|d| g.input(&d.shape, d.dtype).expect("input")).collect();
    let parts = g.custom(&ins, *first).expect("first kernel");
    let descs: Vec<_> = parts.iter().map(|&t| g.desc(t).expect("part").clone()).collect();
    let mut bg = BlockGraph::new(descs, [a.heads, a.rows, 1], 128, splits).expect("grid");
    let o = bg.input(0, [Some(0), Some(1), None], Some(2)).expect("o");
    let l = bg.input(1, [Some(0), Some(1), None], Some(2)).expect("l");
    let m = bg.input(2, [Some(0), Some(1), None], Some(2)).expect("m");
    let rm = bg.push(BlockOp::RunningMax { dim: 2 }, &[m]).expect("running max");
    let arg = if how == Ranges::ForgetsTheMax { m } else { bg.binary(BinaryOp::Sub, m, rm[0]).expect("sub") };
    let w = bg.unary(UnaryOp::Exp, arg).expect("exp");
    let r = bg.unary(UnaryOp::Exp, rm[1]).expect("exp");
    let wo = bg.binary(BinaryOp::Mul, o, w).expect("mul");
    let wl = bg.binary(BinaryOp::Mul, l, w).expect("mul");
    let (acc_o, acc_l) = if how == Ranges::NoRescale {
        (bg.accum(AccKind::Sum, &[wo]).expect("acc"), bg.accum(AccKind::Sum, &[wl]).expect("acc"))
    } else {
        (bg.accum(AccKind::Rescale, &[wo, r]).expect("acc"), bg.accum(AccKind::Rescale, &[wl, r]).expect("acc"))
    };
    let out = bg.binary(BinaryOp::Div, acc_o, acc_l).expect("div");
    let dtype = program.inputs()[0].dtype;
    bg.output_as(out, [Some(0), Some(1), None], dtype).expect("out");
    let out = g.custom(&parts, bg).expect("combine")[0];
    g.output(out, None).expect("output");
    g
}

#[test]
fn grouped_split_kv_reads_each_key_tile_once_per_head_and_passes_both_checks() {
    for (name, dtype) in TYPES {
        let program = gqa_program(name, 4, 4, 256, 32);
        let a = attention::recognize(&program).expect("attention");
        let g = attention::split_kv_grouped(&program, &a, 4, 2, 128).expect("builds");
        let grids: Vec<[usize; 3]> = g
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                KernelOp::Custom { block } => Some(block.grid()),
                _ => None,
            })
            .collect();
        // 4 heads × 4 key ranges, every row of a head in its block; the combine per head and row.
        assert_eq!(grids, vec![[4, 4, 1], [4, 4, 1]], "{name}");
        assert!(equivalent(&program, &g), "{name}: fingerprints reject\n{}", describe(&g));
        assert_eq!(float_ok(&program, &g), Ok(()), "{name}");
        assert_eq!(stored_types(&g), vec![vec![DType::F32; 3], vec![dtype]], "{name}");
        // The combine written out here, correct, is the module's.
        let mine = grouped_with(&program, 4, Ranges::Correct);
        assert_eq!(mine.canonical_hash(), g.canonical_hash(), "{name}");
    }
    // The search offers it for a GQA group.
    let program = gqa_program("bf16", 4, 4, 256, 32);
    let cfg = SearchConfig { forloop_ranges: vec![4, 8], threads: vec![128], ..SearchConfig::default() };
    let grouped = attention::candidates(&program, &cfg)
        .into_iter()
        .filter(|g| {
            g.num_kernels() == 2
                && g.nodes().iter().any(|n| matches!(&n.op, KernelOp::Custom { block } if block.grid()[2] == 1 && block.forloop_range() > 1 && block.grid()[1] == 4))
        })
        .count();
    assert!(grouped > 0, "no grouped split-KV candidate");
}

#[test]
fn a_ranged_combine_without_its_rescale_or_its_maximum_is_rejected() {
    for (name, _) in TYPES {
        let program = gqa_program(name, 4, 4, 256, 32);
        let g = grouped_with(&program, 4, Ranges::NoRescale);
        assert!(!equivalent(&program, &g), "{name}: a combine without its rescale passed fingerprints");
        let g = grouped_with(&program, 4, Ranges::ForgetsTheMax);
        // exp(m_j)·acc_j with a rescale by exp(M_old − M): the weights are off by exp(M) from
        // the second range on.
        let verdict = equivalent(&program, &g);
        let float = float_ok(&program, &g);
        assert!(!verdict || float.is_err(), "{name}: a combine forgetting its maximum passed both checks");
    }
}
