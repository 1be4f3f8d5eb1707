#![cfg(feature = "build")]
//! Default block graphs: lowering every kernel-level operator to a `custom` node keeps the
//! program's meaning (checked by the reference interpreter on random inputs), leaves only
//! input/output/custom nodes, and picks GPU-sized grids and tiles.

use mirage::codegen::default_blocks::{default_block_graph, lower_to_blocks};
use mirage::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, Domain, KernelGraph, KernelOp, Scalar, TensorDesc, TensorRef,
    UnaryOp,
};
use mirage::reference::{HostTensor, max_scaled_error, run};
use mirage::testing::inputs::graph_inputs;
use mirage::testing::programs;
use proptest::prelude::*;

const F32: DType = DType::F32;
const F16: DType = DType::F16;

fn random_inputs(g: &KernelGraph, seed: u64, lo: f32, hi: f32) -> Vec<HostTensor> {
    graph_inputs(g, seed, |_| lo..hi)
}

/// Largest scaled error of `candidate` against `reference` (≤ 1: within f32 tolerance).
fn error(reference: &[HostTensor], candidate: &[HostTensor]) -> f32 {
    assert_eq!(reference.len(), candidate.len(), "output count");
    reference
        .iter()
        .zip(candidate)
        .map(|(r, c)| {
            let scale = r.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            max_scaled_error(c, r, (1e-4 * scale).max(1e-6), 1e-3).unwrap_or(f32::INFINITY)
        })
        .fold(0.0, f32::max)
}

/// Asserts that `lowered` has only input, output and custom nodes, all valid.
fn assert_only_custom(lowered: &KernelGraph, what: &str) {
    lowered.validate().unwrap_or_else(|e| panic!("{what}: the lowered graph breaks a rule: {e}"));
    for (i, node) in lowered.nodes().iter().enumerate() {
        match &node.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } => {}
            KernelOp::Custom { block } => {
                assert!(
                    block.threads() == 128 || block.threads() == 256,
                    "{what}: node {i}: {} threads",
                    block.threads()
                );
            }
            other => panic!("{what}: node {i} is still a kernel-level {}", other.name()),
        }
    }
}

/// Lowers `g`, checks its structure and that it matches `g` on random inputs in `[lo, hi)`.
fn check_in(g: &KernelGraph, what: &str, lo: f32, hi: f32) -> KernelGraph {
    let lowered = lower_to_blocks(g).unwrap_or_else(|e| panic!("{what}: lowering failed: {e}"));
    assert_only_custom(&lowered, what);
    assert_eq!(lowered.inputs(), g.inputs(), "{what}: inputs changed");
    assert_eq!(lowered.outputs(), g.outputs(), "{what}: outputs changed");
    assert_eq!(lowered.nodes().len(), g.nodes().len(), "{what}: node count changed");
    let inputs = random_inputs(g, 7, lo, hi);
    let expected = run(g, &inputs).expect("program runs");
    let got = run(&lowered, &inputs).expect("lowered graph runs");
    let e = error(&expected, &got);
    assert!(e <= 1.0, "{what}: scaled error {e} exceeds the f32 tolerance");
    lowered
}

fn check(g: &KernelGraph, what: &str) -> KernelGraph {
    check_in(g, what, -1.0, 1.0)
}

/// The single block graph of a lowered one-operator graph.
fn only_block(lowered: &KernelGraph) -> BlockGraph {
    let blocks: Vec<&BlockGraph> = lowered
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            KernelOp::Custom { block } => Some(&**block),
            _ => None,
        })
        .collect();
    assert_eq!(blocks.len(), 1, "one kernel");
    blocks[0].clone()
}

/// The tile shape of every input iterator of `b`, in order.
fn input_tiles(b: &BlockGraph) -> Vec<Vec<usize>> {
    b.nodes().iter().filter(|n| matches!(n.op, BlockOp::Input { .. })).map(|n| n.outputs[0].shape.clone()).collect()
}

fn accumulators(b: &BlockGraph) -> Vec<AccKind> {
    b.nodes()
        .iter()
        .filter_map(|n| match n.op {
            BlockOp::Accum { acc } => Some(acc),
            _ => None,
        })
        .collect()
}

/// A graph applying `f` to fresh inputs `descs` and outputting its result.
fn one_op(descs: &[TensorDesc], f: impl FnOnce(&mut KernelGraph, &[TensorRef]) -> TensorRef) -> KernelGraph {
    let mut g = KernelGraph::new();
    let ins: Vec<TensorRef> =
        descs.iter().map(|d| g.input_strided(&d.shape, &d.strides, d.dtype).expect("input")).collect();
    let o = f(&mut g, &ins);
    g.output(o, None).expect("output");
    g
}

fn rm(shape: &[usize]) -> TensorDesc {
    TensorDesc::new(shape, F32)
}

/// Column-major (first dim innermost) layout.
fn col_major(shape: &[usize]) -> TensorDesc {
    let mut strides = vec![1; shape.len()];
    for d in 1..shape.len() {
        strides[d] = strides[d - 1] * shape[d - 1];
    }
    TensorDesc { shape: shape.to_vec(), strides, dtype: F32 }
}

const SHAPES: &[&[usize]] =
    &[&[7], &[13], &[1, 1], &[13, 5], &[16, 33], &[3, 64, 33], &[2, 3, 16, 17], &[4, 1, 7, 13], &[96, 200], &[6000]];

fn unary_ops() -> Vec<UnaryOp> {
    UnaryOp::ALL.to_vec()
}

/// Inputs for which `op` is finite.
fn range_for_unary(op: UnaryOp) -> (f32, f32) {
    match op.spec().domain {
        Domain::Positive => (0.25, 1.25),
        Domain::Real => (-1.0, 1.0),
    }
}

#[test]
fn unary_ops_match() {
    for op in unary_ops() {
        let (lo, hi) = range_for_unary(op);
        for shape in SHAPES {
            let g = one_op(&[rm(shape)], |g, t| g.unary(op, t[0]).expect("unary"));
            check_in(&g, &format!("{op} on {shape:?}"), lo, hi);
        }
    }
}

#[test]
fn binary_ops_with_broadcasting_match() {
    let pairs: &[(&[usize], &[usize])] = &[
        (&[7], &[7]),
        (&[7], &[1]),
        (&[1], &[13]),
        (&[13, 7], &[13, 7]),
        (&[13, 7], &[1, 7]),
        (&[13, 1], &[1, 7]),
        (&[64, 96], &[64, 1]),
        (&[3, 5, 17], &[3, 1, 17]),
        (&[4, 1, 16, 33], &[1, 5, 16, 1]),
        (&[2, 3, 16, 17], &[2, 3, 16, 17]),
        (&[1, 1, 1, 1], &[2, 3, 5, 7]),
        (&[256, 512], &[1, 512]),
    ];
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow] {
        let (lo, hi) = if matches!(op, BinaryOp::Div | BinaryOp::Pow) { (0.25, 1.25) } else { (-1.0, 1.0) };
        for (a, b) in pairs {
            let g = one_op(&[rm(a), rm(b)], |g, t| g.binary(op, t[0], t[1]).expect("binary"));
            let lowered = check_in(&g, &format!("{op} on {a:?}, {b:?}"), lo, hi);
            // A broadcast operand is replicated along the axes that split its size-1 dims.
            let block = only_block(&lowered);
            for node in block.nodes() {
                if let BlockOp::Input { input, imap, .. } = node.op {
                    let shape = &block.inputs()[input].shape;
                    for d in imap.iter().flatten() {
                        assert!(shape[*d] > 1, "{op} on {a:?}, {b:?}: a size-1 dim is split");
                    }
                }
            }
        }
    }
    // The same tensor on both sides.
    let g = one_op(&[rm(&[33, 17])], |g, t| g.mul(t[0], t[0]).expect("mul"));
    check(&g, "x * x");
}

#[test]
fn matmuls_match() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[7, 13], &[13, 5]),
        (&[13, 7], &[7, 13]),
        (&[16, 32], &[32, 16]),
        (&[33, 65], &[65, 17]),
        (&[64, 128], &[128, 96]),
        (&[8, 1024], &[1024, 384]),
        (&[5, 1009], &[1009, 3]),
        (&[256, 512], &[512, 384]),
        (&[3, 17, 33], &[3, 33, 19]),
        (&[2, 256, 64], &[2, 64, 128]),
        (&[1, 48, 64], &[1, 64, 80]),
        (&[2, 3, 16, 40], &[2, 3, 40, 24]),
        (&[1, 2, 8, 8], &[1, 2, 8, 8]),
        (&[2, 1, 32, 64], &[2, 1, 64, 32]),
        (&[1, 1, 7, 13], &[1, 1, 13, 11]),
    ];
    for (a, b) in cases {
        let g = one_op(&[rm(a), rm(b)], |g, t| g.matmul(t[0], t[1]).expect("matmul"));
        let lowered = check(&g, &format!("matmul {a:?} x {b:?}"));
        let block = only_block(&lowered);
        let r = a.len();
        let k = a[r - 1];
        let tiles = input_tiles(&block);
        assert_eq!(tiles[0][r - 1] * block.forloop_range(), k, "matmul {a:?} x {b:?}: k is tiled by the loop");
        assert!(tiles[0][..r - 2].iter().all(|&d| d == 1), "matmul {a:?} x {b:?}: batch dims are split whole");
        assert_eq!(accumulators(&block), vec![AccKind::Sum]);
    }
}

#[test]
fn matmuls_with_strided_operands_match() {
    // Column-major weights (as the Qwen programs have) and column-major activations.
    let cases = [
        (rm(&[8, 96]), col_major(&[96, 40])),
        (col_major(&[13, 7]), rm(&[7, 5])),
        (col_major(&[33, 64]), col_major(&[64, 17])),
        (rm(&[2, 16, 48]), TensorDesc { shape: vec![2, 48, 32], strides: vec![48 * 32, 1, 48], dtype: F32 }),
    ];
    for (a, b) in cases {
        let g = one_op(&[a.clone(), b.clone()], |g, t| g.matmul(t[0], t[1]).expect("matmul"));
        let lowered = check(&g, &format!("matmul {:?}{:?} x {:?}{:?}", a.shape, a.strides, b.shape, b.strides));
        assert_eq!(only_block(&lowered).inputs(), &[a, b], "the kernel reads the operands with their layouts");
    }
}

#[test]
fn reductions_match_over_every_dim() {
    let long: &[&[usize]] = &[&[2, 20000], &[3, 16411], &[8, 32768], &[40000], &[2, 65537], &[8192, 3]];
    for shape in SHAPES.iter().chain(long) {
        for dim in 0..shape.len() {
            for max in [false, true] {
                let g = one_op(&[rm(shape)], |g, t| {
                    if max { g.reduce_max(t[0], dim) } else { g.reduce_sum(t[0], dim) }.expect("reduce")
                });
                let what = format!("reduce_{}({dim}) on {shape:?}", if max { "max" } else { "sum" });
                let lowered = check(&g, &what);
                let block = only_block(&lowered);
                let tile = &input_tiles(&block)[0];
                assert_eq!(
                    tile[dim] * block.forloop_range(),
                    shape[dim],
                    "{what}: the reduced dim is never split across blocks"
                );
                let expected_acc = if max && block.forloop_range() > 1 { AccKind::Max } else { AccKind::Sum };
                assert_eq!(accumulators(&block), vec![expected_acc], "{what}");
            }
        }
    }
}

#[test]
fn long_reductions_loop() {
    let g = one_op(&[rm(&[8, 32768])], |g, t| g.reduce_sum(t[0], 1).expect("reduce"));
    let block = only_block(&lower_to_blocks(&g).expect("lowers"));
    assert!(block.forloop_range() > 1, "a 32768-long row is tiled by the loop");
    assert!(input_tiles(&block)[0].iter().product::<usize>() <= 8192);
    let g = one_op(&[rm(&[8, 32768])], |g, t| g.reduce_max(t[0], 1).expect("reduce"));
    let block = only_block(&lower_to_blocks(&g).expect("lowers"));
    assert!(block.forloop_range() > 1);
    assert_eq!(accumulators(&block), vec![AccKind::Max]);
}

#[test]
fn rms_norms_match() {
    let shapes: &[&[usize]] = &[&[7], &[13, 33], &[16, 64], &[3, 5, 64], &[2, 3, 4, 17], &[16, 4096], &[130, 1]];
    for shape in shapes {
        for eps in [0.0, 1e-5] {
            let g = one_op(&[rm(shape)], |g, t| g.rms_norm(t[0], eps, None).expect("rms_norm"));
            let lowered = check(&g, &format!("rms_norm({eps}) on {shape:?}"));
            let block = only_block(&lowered);
            let last = shape.len() - 1;
            assert_eq!(input_tiles(&block)[0][last], shape[last], "rms_norm on {shape:?}: whole rows per block");
            let mut wshape = vec![1; shape.len()];
            wshape[last] = shape[last];
            let g = one_op(&[rm(shape), rm(&wshape)], |g, t| g.rms_norm(t[0], eps, Some(t[1])).expect("rms_norm"));
            let lowered = check(&g, &format!("rms_norm({eps}) with weight on {shape:?}"));
            let block = only_block(&lowered);
            let weight_imap = block
                .nodes()
                .iter()
                .find_map(|n| match n.op {
                    BlockOp::Input { input: 1, imap, .. } => Some(imap),
                    _ => None,
                })
                .expect("the weight is read");
            assert_eq!(weight_imap, [None; 3], "rms_norm on {shape:?}: the weight is replicated");
        }
    }
}

#[test]
fn concats_match_along_every_dim() {
    let cases: &[(&[usize], &[usize], usize)] = &[
        (&[7], &[13], 0),
        (&[1], &[1], 0),
        (&[13, 5], &[2, 5], 0),
        (&[13, 5], &[13, 7], 1),
        (&[64, 32], &[64, 96], 1),
        (&[3, 5, 7], &[3, 2, 7], 1),
        (&[3, 5, 7], &[3, 5, 1], 2),
        (&[2, 3, 16, 17], &[5, 3, 16, 17], 0),
        (&[2, 3, 16, 17], &[2, 3, 16, 13], 3),
        (&[2, 3, 16, 17], &[2, 1, 16, 17], 1),
        (&[128, 256], &[128, 256], 0),
    ];
    for (a, b, dim) in cases {
        let g = one_op(&[rm(a), rm(b)], |g, t| g.concat(t[0], t[1], *dim).expect("concat"));
        let what = format!("concat({dim}) of {a:?}, {b:?}");
        let lowered = check(&g, &what);
        let block = only_block(&lowered);
        let tiles = input_tiles(&block);
        assert_eq!((tiles[0][*dim], tiles[1][*dim]), (a[*dim], b[*dim]), "{what}: the concat dim stays whole");
    }
}

#[test]
fn strided_inputs_match() {
    let shapes: &[&[usize]] = &[&[13, 7], &[64, 33], &[3, 5, 17], &[2, 3, 16, 5]];
    for shape in shapes {
        let x = col_major(shape);
        let what = format!("{shape:?} column-major");
        check(&one_op(std::slice::from_ref(&x), |g, t| g.exp(t[0]).expect("exp")), &format!("exp {what}"));
        check(&one_op(&[x.clone(), rm(shape)], |g, t| g.add(t[0], t[1]).expect("add")), &format!("add {what}"));
        for dim in 0..shape.len() {
            check(
                &one_op(std::slice::from_ref(&x), |g, t| g.reduce_sum(t[0], dim).expect("sum")),
                &format!("reduce_sum({dim}) {what}"),
            );
        }
        check(
            &one_op(std::slice::from_ref(&x), |g, t| g.rms_norm(t[0], 1e-6, None).expect("rms")),
            &format!("rms_norm {what}"),
        );
        check(
            &one_op(&[x.clone(), x.clone()], |g, t| g.concat(t[0], t[1], 0).expect("concat")),
            &format!("concat {what}"),
        );
    }
}

#[test]
fn outputs_with_strides_and_chains_match() {
    // A chain of operators whose outputs feed each other, two program outputs, one strided.
    let mut g = KernelGraph::new();
    let x = g.input(&[16, 24], F32).expect("x");
    let w = g.input(&[24, 40], F32).expect("w");
    let y = g.matmul(x, w).expect("matmul");
    let s = g.silu(y).expect("silu");
    let m = g.reduce_max(s, 1).expect("max");
    let d = g.binary(BinaryOp::Sub, s, m).expect("sub");
    let e = g.exp(d).expect("exp");
    g.output(e, Some(vec![1, 16])).expect("output");
    g.output(m, None).expect("output");
    check(&g, "softmax-like chain");
}

/// The benchmark programs at test-friendly shapes.
fn small_programs() -> Vec<(&'static str, KernelGraph)> {
    let bf16 = DType::Bf16;
    vec![
        ("gated_mlp", programs::gated_mlp(8, 256, 384, F16)),
        ("gated_mlp odd", programs::gated_mlp(7, 33, 13, F32)),
        ("rmsnorm_linear", programs::rmsnorm_linear(16, 512, 640, F16)),
        ("rmsnorm_linear odd", programs::rmsnorm_linear(3, 13, 7, F32)),
        ("lora", programs::lora(16, 256, 512, 16, F16)),
        ("gqa", programs::gqa(2, 64, 256, 64, F16)),
        ("gqa odd", programs::gqa(3, 7, 13, 5, F32)),
        ("ntrans", programs::ntrans(8, 1024, F16)),
        ("qwen_rmsnorm_gain_linear", programs::qwen_rmsnorm_gain_linear(896, 512, bf16)),
        ("qwen_silu_gate_linear", programs::qwen_silu_gate_linear(1024, 384, bf16)),
        ("qwen_silu_gate_linear odd", programs::qwen_silu_gate_linear(97, 13, bf16)),
    ]
    .into_iter()
    .map(|(name, g)| (name, g.unwrap_or_else(|e| panic!("{name}: {e}"))))
    .collect()
}

#[test]
fn benchmark_programs_match_after_lowering() {
    for (name, g) in small_programs() {
        let lowered = check(&g, name);
        assert_eq!(lowered.num_kernels(), g.num_kernels(), "{name}: one kernel per operator");
    }
}

#[test]
fn benchmark_programs_lower_at_full_size() {
    let mut big_matmuls = Vec::new();
    for case in programs::golden_cases() {
        let g = (case.program)().expect("program");
        let lowered = lower_to_blocks(&g).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_only_custom(&lowered, case.name);
        for node in lowered.nodes() {
            if let KernelOp::Custom { block } = &node.op {
                let out = &block.output_descs()[0];
                let elems: usize = out.shape.iter().product();
                // Outputs big enough to fill the GPU get enough blocks (whole rows of rms_norm
                // and reductions with few rows cannot).
                let is_matmul = block.nodes().iter().any(|n| n.op == BlockOp::Matmul);
                if is_matmul && elems >= 132 * 64 * 8 {
                    assert!(
                        block.num_blocks() >= 64,
                        "{}: matmul writing {:?} uses {} blocks",
                        case.name,
                        out.shape,
                        block.num_blocks()
                    );
                    big_matmuls.push(format!("{} {:?}", case.name, out.shape));
                }
            }
        }
    }
    // The rule above applied where it should: rmsnorm_bs8's [16, 6144] output and attention's
    // [2, 256, 4096] logits (the others write fewer than 132·64·8 elements per matmul).
    assert_eq!(big_matmuls, ["rmsnorm_bs8 [16, 6144]", "gqa_bs1 [2, 256, 4096]"], "matmuls checked for grid size");
}

#[test]
fn golden_candidates_keep_their_custom_nodes() {
    for case in programs::golden_cases() {
        let candidates = case.candidates().expect("imports");
        for cand in candidates.iter().take(3) {
            let lowered = lower_to_blocks(cand).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_only_custom(&lowered, case.name);
            for (before, after) in cand.nodes().iter().zip(lowered.nodes()) {
                if matches!(before.op, KernelOp::Custom { .. } | KernelOp::Input { .. } | KernelOp::Output { .. }) {
                    assert_eq!(before, after, "{}: an existing node changed", case.name);
                }
            }
        }
        if ["rmsnorm_bs1", "ntrans_bs1", "lora"].contains(&case.name) {
            let program = (case.program)().expect("program");
            let inputs = random_inputs(&program, 11, -1.0, 1.0);
            let expected = run(&program, &inputs).expect("program runs");
            let lowered = lower_to_blocks(&candidates[0]).expect("lowers");
            let e = error(&expected, &run(&lowered, &inputs).expect("runs"));
            assert!(e <= 1.0, "{}: lowered candidate 0 has scaled error {e}", case.name);
        }
    }
}

#[test]
fn grids_fit_an_h100() {
    // Big element-wise: at least one wave of blocks, tiles of a few thousand elements.
    let g = one_op(&[TensorDesc::new(&[4096, 4096], F16)], |g, t| g.silu(t[0]).expect("silu"));
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    let tile: usize = input_tiles(&b)[0].iter().product();
    assert!(b.num_blocks() >= 132, "{} blocks", b.num_blocks());
    assert!((1024..=8192).contains(&tile), "tile of {tile} elements");
    assert!(input_tiles(&b)[0][1] >= 64, "rows stay contiguous: {:?}", input_tiles(&b)[0]);
    assert_eq!(b.forloop_range(), 1);

    // Tiny element-wise: one block.
    let g = one_op(&[rm(&[7])], |g, t| g.exp(t[0]).expect("exp"));
    assert_eq!(only_block(&lower_to_blocks(&g).expect("lowers")).num_blocks(), 1);

    // Awkward (prime) sizes still split exactly.
    let g = one_op(&[rm(&[1021, 4099])], |g, t| g.exp(t[0]).expect("exp"));
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    assert!(b.num_blocks() > 1);

    // Square GEMM: 128x128 output tiles, k tiled by 32..=128.
    let g = one_op(&[TensorDesc::new(&[4096, 4096], F16), TensorDesc::new(&[4096, 4096], F16)], |g, t| {
        g.matmul(t[0], t[1]).expect("mm")
    });
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    let tiles = input_tiles(&b);
    assert_eq!((tiles[0][0], tiles[1][1]), (128, 128), "output tile");
    assert!((32..=128).contains(&tiles[0][1]), "tile k {}", tiles[0][1]);
    assert_eq!(b.num_blocks(), 32 * 32);
    assert_eq!(b.threads(), 256);

    // Decode GEMM (m = 8): m whole, n split finely enough to occupy the SMs.
    let g = one_op(&[TensorDesc::new(&[8, 4096], F16), TensorDesc::new(&[4096, 4096], F16)], |g, t| {
        g.matmul(t[0], t[1]).expect("mm")
    });
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    let tiles = input_tiles(&b);
    assert_eq!(tiles[0][0], 8);
    assert!((16..=128).contains(&tiles[1][1]), "tile n {}", tiles[1][1]);
    assert!(b.num_blocks() >= 64, "{} blocks", b.num_blocks());

    // Batched GEMM: the batch on its own axis.
    let g = one_op(&[TensorDesc::new(&[2, 256, 64], F16), TensorDesc::new(&[2, 64, 4096], F16)], |g, t| {
        g.matmul(t[0], t[1]).expect("mm")
    });
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    assert_eq!(b.num_blocks() % 2, 0);
    assert!(b.num_blocks() >= 128, "{} blocks", b.num_blocks());

    // Row reductions: rows across blocks.
    let g = one_op(&[TensorDesc::new(&[4096, 4096], F16)], |g, t| g.reduce_sum(t[0], 1).expect("sum"));
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    assert!(b.num_blocks() >= 132);

    // rms_norm: whole rows, rows across blocks.
    let g = one_op(&[TensorDesc::new(&[256, 4096], F16)], |g, t| g.rms_norm(t[0], 1e-6, None).expect("rms"));
    let b = only_block(&lower_to_blocks(&g).expect("lowers"));
    assert_eq!(input_tiles(&b)[0], vec![1, 4096]);
    assert_eq!(b.num_blocks(), 256);
}

#[test]
fn errors_name_the_operator() {
    let x = rm(&[4, 8]);
    let input = KernelOp::Input { desc: x.clone() };
    let e = default_block_graph(&input, &[]).expect_err("inputs are not kernels").to_string();
    assert!(e.contains("input"), "{e}");
    let e = default_block_graph(&KernelOp::Output { strides: None }, std::slice::from_ref(&x))
        .expect_err("outputs are not kernels")
        .to_string();
    assert!(e.contains("output"), "{e}");
    let e = default_block_graph(&KernelOp::Matmul, &[x.clone(), x.clone()]).expect_err("k mismatch").to_string();
    assert!(e.contains("matmul"), "{e}");
    let e = default_block_graph(&KernelOp::Unary { op: UnaryOp::Exp }, &[]).expect_err("arity").to_string();
    assert!(e.contains("exp"), "{e}");
    let bad = TensorDesc { shape: vec![], strides: vec![], dtype: F32 };
    let e = default_block_graph(&KernelOp::RmsNorm { eps: Scalar(0.0) }, &[bad.clone(), bad])
        .expect_err("rank 0")
        .to_string();
    assert!(e.contains("rms_norm"), "{e}");
    let aliasing = TensorDesc { shape: vec![4, 8], strides: vec![1, 1], dtype: F32 };
    let e =
        default_block_graph(&KernelOp::ReduceSum { dim: 0 }, &[aliasing]).expect_err("aliasing strides").to_string();
    assert!(e.contains("reduce_sum(0)"), "{e}");
    let e = default_block_graph(&KernelOp::ReduceMax { dim: 2 }, std::slice::from_ref(&x))
        .expect_err("dim out of range")
        .to_string();
    assert!(e.contains("reduce_max(2)"), "{e}");
    // Too many batch blocks for the grid.
    let a = rm(&[70000, 70000, 1, 1]);
    let e = default_block_graph(&KernelOp::Matmul, &[a.clone(), a]).expect_err("grid too big").to_string();
    assert!(e.contains("matmul"), "{e}");
    // A custom operator is its own block graph.
    let g = one_op(std::slice::from_ref(&x), |g, t| g.exp(t[0]).expect("exp"));
    let block = only_block(&lower_to_blocks(&g).expect("lowers"));
    let op = KernelOp::Custom { block: Box::new(block.clone()) };
    assert_eq!(default_block_graph(&op, &[x]).expect("custom"), block);
}

/// A random operator on random (possibly invalid) operands.
fn arb_case() -> impl Strategy<Value = (KernelOp, Vec<TensorDesc>)> {
    let dim = prop::sample::select(vec![1usize, 1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 32, 33, 64]);
    let shape = prop::collection::vec(dim.clone(), 1..=4);
    let op = prop_oneof![
        prop::sample::select(unary_ops()).prop_map(|op| KernelOp::Unary { op }),
        prop::sample::select(vec![BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow])
            .prop_map(|op| KernelOp::Binary { op }),
        Just(KernelOp::Matmul),
        (0usize..4).prop_map(|dim| KernelOp::ReduceSum { dim }),
        (0usize..4).prop_map(|dim| KernelOp::ReduceMax { dim }),
        Just(KernelOp::RmsNorm { eps: Scalar(1e-5) }),
        (0usize..4).prop_map(|dim| KernelOp::Concat { dim }),
    ];
    // Second operand: usually derived from the first so that most cases are valid.
    (op, shape, prop::collection::vec(dim, 1..=4), 0u8..6, any::<bool>(), any::<bool>()).prop_map(
        |(op, a, other, how, col_a, two)| {
            let r = a.len();
            let b: Vec<usize> = match (&op, how) {
                (_, 0) => other,
                (KernelOp::Matmul, _) if r >= 2 => {
                    let mut b = a.clone();
                    b[r - 2] = a[r - 1];
                    b[r - 1] = other[0];
                    b
                }
                (KernelOp::Binary { .. }, 1 | 2) => a
                    .iter()
                    .zip(other.iter().chain(std::iter::repeat(&1)))
                    .map(|(&x, &y)| if y % 2 == 0 { 1 } else { x })
                    .collect(),
                (KernelOp::RmsNorm { .. }, _) => (0..r).map(|d| if d + 1 == r { a[d] } else { 1 }).collect(),
                (KernelOp::Concat { dim }, _) => {
                    a.iter().enumerate().map(|(d, &x)| if d == *dim { other[0] } else { x }).collect()
                }
                _ => a.clone(),
            };
            let da = if col_a { col_major(&a) } else { rm(&a) };
            let db = rm(&b);
            let inputs = match &op {
                KernelOp::Unary { .. } | KernelOp::ReduceSum { .. } | KernelOp::ReduceMax { .. } => vec![da],
                KernelOp::RmsNorm { .. } if !two => vec![da],
                _ => vec![da, db],
            };
            (op, inputs)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Lowering never panics: it either succeeds and matches the operator, or names it in an error.
    #[test]
    fn lowering_matches_or_names_the_operator((op, inputs) in arb_case()) {
        match default_block_graph(&op, &inputs) {
            Ok(block) => {
                prop_assert!(block.validate().is_ok());
                let mut g = KernelGraph::new();
                let ins: Vec<TensorRef> = inputs.iter().map(|d| g.input_strided(&d.shape, &d.strides, d.dtype).expect("input")).collect();
                let out = g.push(op.clone(), &ins).expect("the operator's rule holds when lowering succeeds");
                g.output(out[0], None).expect("output");
                let (lo, hi) = match &op {
                    KernelOp::Unary { op } => range_for_unary(*op),
                    KernelOp::Binary { op: BinaryOp::Div | BinaryOp::Pow } => (0.25, 1.25),
                    _ => (-1.0, 1.0),
                };
                let lowered = check_in(&g, &format!("{} on {:?}", op.name(), inputs.iter().map(|d| &d.shape).collect::<Vec<_>>()), lo, hi);
                match &lowered.nodes()[ins.len()].op {
                    KernelOp::Custom { block: b } => prop_assert_eq!(&**b, &block),
                    other => prop_assert!(false, "not custom: {}", other.name()),
                }
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains(&op.name()), "error does not name {}: {}", op.name(), msg);
                // The operator's own rule rejects these operands too.
                let refs: Vec<&TensorDesc> = inputs.iter().collect();
                prop_assert!(mirage::ir::infer_kernel_op(&op, &refs).is_err(), "valid operands were refused: {}", msg);
            }
        }
    }
}

#[test]
fn huge_and_awkward_shapes_do_not_panic() {
    let huge = 1usize << 40;
    let descs = |shapes: &[&[usize]]| shapes.iter().map(|s| rm(s)).collect::<Vec<_>>();
    let cases: Vec<(KernelOp, Vec<TensorDesc>)> = vec![
        (KernelOp::Unary { op: UnaryOp::Exp }, descs(&[&[huge, huge]])),
        (KernelOp::Unary { op: UnaryOp::Exp }, descs(&[&[1_000_003, 999_983, 3, 7]])),
        (KernelOp::Binary { op: BinaryOp::Add }, descs(&[&[huge, 1], &[1, huge]])),
        (KernelOp::Matmul, descs(&[&[huge, huge], &[huge, huge]])),
        (KernelOp::Matmul, descs(&[&[1_000_003, 999_983], &[999_983, 1_000_033]])),
        (KernelOp::ReduceSum { dim: 1 }, descs(&[&[huge, huge]])),
        (KernelOp::ReduceMax { dim: 0 }, descs(&[&[1_000_003, 3]])),
        (KernelOp::RmsNorm { eps: Scalar(0.0) }, descs(&[&[huge, huge], &[1, huge]])),
        (KernelOp::Concat { dim: 0 }, descs(&[&[huge, 8], &[huge, 8]])),
    ];
    for (op, inputs) in cases {
        match default_block_graph(&op, &inputs) {
            Ok(b) => b.validate().unwrap_or_else(|e| panic!("{}: invalid block graph: {e}", op.name())),
            Err(e) => assert!(e.to_string().contains(&op.name()), "{}: {e}", op.name()),
        }
    }
}
