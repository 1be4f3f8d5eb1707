//! The shape, type and phase rules of every µGraph operator, at both levels: valid
//! applications give the expected shapes, invalid ones give an `IrError` whose message names the
//! operator and the rule, and nothing panics.
#![cfg(feature = "build")]

use mirage::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, GridMap, IrError, KernelGraph, KernelOp, Phase, Scalar, TensorDesc,
    TensorRef, UnaryOp,
};
use proptest::prelude::*;

const F32: DType = DType::F32;
const F16: DType = DType::F16;

/// Asserts `r` is an error whose message contains every one of `parts`; returns the message.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: Result<T, IrError>, parts: &[&str]) -> String {
    let e = match r {
        Ok(v) => panic!("expected an error mentioning {parts:?}, got Ok({v:?})"),
        Err(e) => e,
    };
    assert!(matches!(e, IrError::Rule { .. }), "expected IrError::Rule, got {e:?}");
    let msg = e.to_string();
    for p in parts {
        assert!(msg.contains(p), "error message {msg:?} does not contain {p:?}");
    }
    msg
}

#[track_caller]
fn ok<T>(r: Result<T, IrError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn shape(g: &KernelGraph, t: TensorRef) -> Vec<usize> {
    ok(g.desc(t)).shape.clone()
}

fn input(g: &mut KernelGraph, s: &[usize]) -> TensorRef {
    ok(g.input(s, F32))
}

fn unaries() -> Vec<UnaryOp> {
    UnaryOp::ALL.to_vec()
}

const BINARIES: [BinaryOp; BinaryOp::ALL.len()] = BinaryOp::ALL;

// ---------------------------------------------------------------------------------------------
// Kernel level
// ---------------------------------------------------------------------------------------------

#[test]
fn input_rank_must_be_1_to_4() {
    let mut g = KernelGraph::new();
    expect_err(g.input(&[], F32), &["input", "rank must be 1..=4, found 0"]);
    expect_err(g.input(&[1, 2, 3, 4, 5], F32), &["input", "[1, 2, 3, 4, 5]", "rank must be 1..=4, found 5"]);
    expect_err(g.input_strided(&[], &[], F32), &["input", "rank must be 1..=4"]);
    for rank in 1..=4 {
        let t = ok(g.input(&vec![2; rank], F32));
        assert_eq!(shape(&g, t), vec![2; rank]);
    }
    assert_eq!(g.inputs().len(), 4, "failed inputs add no node");
}

#[test]
fn input_dims_must_be_nonzero() {
    let mut g = KernelGraph::new();
    expect_err(g.input(&[4, 0], F32), &["input", "[4, 0]", "every dimension must be at least 1"]);
    expect_err(g.input_strided(&[0], &[1], F32), &["input", "every dimension must be at least 1"]);
}

#[test]
fn input_strides_must_not_alias() {
    let mut g = KernelGraph::new();
    expect_err(g.input_strided(&[2, 3], &[1, 1], F32), &["input", "strides [1, 1]", "strides alias"]);
    expect_err(g.input_strided(&[2, 3], &[2, 1], F32), &["input", "strides alias"]);
    expect_err(g.input_strided(&[4], &[0], F32), &["input", "strides alias"]);
    expect_err(g.input_strided(&[2, 3], &[3], F32), &["input", "strides must have one entry per dim (2), found 1"]);
    // Size-1 dims may have any stride: they address one element.
    ok(g.input_strided(&[1, 3], &[0, 1], F32));
}

#[test]
fn input_accepts_column_major_and_padded_layouts() {
    let mut g = KernelGraph::new();
    let c = ok(g.input_strided(&[2, 3], &[1, 2], F16));
    let d = ok(g.desc(c)).clone();
    assert_eq!(d, TensorDesc { shape: vec![2, 3], strides: vec![1, 2], dtype: F16 });
    assert!(!d.is_row_major());
    let p = ok(g.input_strided(&[2, 3], &[8, 1], F32));
    assert_eq!(ok(g.desc(p)).strides, vec![8, 1]);
    let r = ok(g.input(&[2, 3, 4], F32));
    assert_eq!(ok(g.desc(r)).strides, vec![12, 4, 1]);
    assert!(ok(g.desc(r)).is_row_major());
}

#[test]
fn output_strides_are_checked() {
    let mut g = KernelGraph::new();
    let x = input(&mut g, &[2, 3]);
    expect_err(g.output(x, Some(vec![1, 1])), &["output", "strides alias"]);
    expect_err(g.output(x, Some(vec![1])), &["output", "strides must have one entry per dim (2), found 1"]);
    ok(g.output(x, Some(vec![1, 2])));
    ok(g.output(x, None));
    assert_eq!(g.outputs(), vec![(x, vec![1, 2]), (x, vec![3, 1])]);
}

#[test]
fn operands_must_exist() {
    let mut g = KernelGraph::new();
    let x = input(&mut g, &[2]);
    ok(g.output(x, None));
    expect_err(g.exp(TensorRef::new(7)), &["operand", "%7", "no such tensor"]);
    // An output node produces no tensor.
    expect_err(g.exp(TensorRef::new(1)), &["operand", "%1", "no such tensor"]);
    expect_err(g.exp(TensorRef { node: 0, port: 1 }), &["operand", "%0.1", "no such tensor"]);
    expect_err(g.push(KernelOp::Matmul, &[x]), &["matmul", "1 operands", "expects 2 operands"]);
    expect_err(g.push(KernelOp::RmsNorm { eps: Scalar(0.0) }, &[x, x, x]), &["rms_norm", "3 operands"]);
}

#[test]
fn matmul_rules() {
    let mut g = KernelGraph::new();
    let a = input(&mut g, &[2, 3]);
    let b = input(&mut g, &[3, 4]);
    let b3 = input(&mut g, &[1, 3, 4]);
    let c = input(&mut g, &[4, 5]);
    let v = input(&mut g, &[3]);
    let t = ok(g.matmul(a, b));
    assert_eq!(shape(&g, t), vec![2, 4]);
    expect_err(g.matmul(a, b3), &["matmul", "[2, 3] x [1, 3, 4]", "operands must have the same rank"]);
    expect_err(g.matmul(v, v), &["matmul", "rank at least 2"]);
    expect_err(
        g.matmul(a, c),
        &["matmul", "[2, 3] x [4, 5]", "inner dims differ: a is [.., m, k] with k = 3, b is [.., k, n] with k = 4"],
    );
    let x = input(&mut g, &[2, 5, 2, 3]);
    let y = input(&mut g, &[2, 5, 3, 4]);
    let z = input(&mut g, &[2, 4, 3, 4]);
    let w = input(&mut g, &[1, 5, 3, 4]);
    let t = ok(g.matmul(x, y));
    assert_eq!(shape(&g, t), vec![2, 5, 2, 4]);
    expect_err(g.matmul(x, z), &["matmul", "batch dims differ"]);
    // Batch dims do not broadcast.
    expect_err(g.matmul(x, w), &["matmul", "batch dims differ"]);
}

#[test]
fn every_unary_keeps_shape_and_dtype() {
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let mut g = KernelGraph::new();
        let x = ok(g.input_strided(&[3, 1, 5], &[1, 7, 3], dtype));
        for op in unaries() {
            let y = ok(g.unary(op, x));
            let d = ok(g.desc(y));
            // Results are row-major whatever the operand's layout.
            assert_eq!(*d, TensorDesc::new(&[3, 1, 5], dtype), "{op}");
            assert_eq!(g.nodes()[y.node].op, KernelOp::Unary { op });
        }
    }
}

#[test]
fn every_binary_broadcasts_size_1_dims() {
    for op in BINARIES {
        let mut g = KernelGraph::new();
        let a = input(&mut g, &[2, 1, 4]);
        let b = input(&mut g, &[1, 3, 4]);
        let c = input(&mut g, &[2, 3, 1]);
        let d = input(&mut g, &[2, 3, 4]);
        let e = input(&mut g, &[3, 3, 4]);
        let f = input(&mut g, &[3, 4]);
        for (x, y) in [(a, b), (b, a), (a, c), (c, d), (d, d), (d, a)] {
            let t = ok(g.binary(op, x, y));
            assert_eq!(shape(&g, t), vec![2, 3, 4], "{op}");
        }
        let msg = expect_err(
            g.binary(op, d, e),
            &[op.name(), "[2, 3, 4] and [3, 3, 4]", "dim 0 has sizes 2 and 3; each dim must be equal or 1 on one side"],
        );
        assert!(msg.starts_with(op.name()), "{msg}");
        expect_err(g.binary(op, e, c), &[op.name(), "dim 0 has sizes 3 and 2"]);
        expect_err(g.binary(op, d, f), &[op.name(), "same rank (only size-1 dims broadcast)"]);
    }
}

#[test]
fn reductions_keep_the_dim_and_check_its_range() {
    let mut g = KernelGraph::new();
    let x = input(&mut g, &[2, 3, 4]);
    for dim in 0..3 {
        let s = ok(g.reduce_sum(x, dim));
        let m = ok(g.reduce_max(x, dim));
        let mut expected = vec![2, 3, 4];
        expected[dim] = 1;
        assert_eq!(shape(&g, s), expected);
        assert_eq!(shape(&g, m), expected);
    }
    expect_err(g.reduce_sum(x, 3), &["reduce_sum(3)", "[2, 3, 4]", "dim 3 is out of range for rank 3"]);
    expect_err(g.reduce_max(x, 7), &["reduce_max(7)", "dim 7 is out of range for rank 3"]);
}

#[test]
fn rms_norm_with_and_without_weight() {
    let mut g = KernelGraph::new();
    let x = input(&mut g, &[2, 3, 8]);
    let t = ok(g.rms_norm(x, 1e-6, None));
    assert_eq!(shape(&g, t), vec![2, 3, 8]);
    let w = input(&mut g, &[1, 1, 8]);
    let t = ok(g.rms_norm(x, 1e-6, Some(w)));
    assert_eq!(shape(&g, t), vec![2, 3, 8]);
    for bad in [vec![8], vec![1, 8], vec![1, 3, 8], vec![1, 1, 4], vec![2, 3, 8]] {
        let wb = input(&mut g, &bad);
        expect_err(
            g.rms_norm(x, 1e-6, Some(wb)),
            &["rms_norm", "weight", "the weight must have x's rank, leading dims 1 and x's last dim"],
        );
    }
    let w16 = ok(g.input(&[1, 1, 8], F16));
    expect_err(g.rms_norm(x, 1e-6, Some(w16)), &["rms_norm", "one element type, found f32 and f16"]);
}

#[test]
fn concat_rules() {
    let mut g = KernelGraph::new();
    let a = input(&mut g, &[2, 3]);
    let b = input(&mut g, &[2, 5]);
    let c = input(&mut g, &[4, 3]);
    let d = input(&mut g, &[2, 3, 1]);
    let t = ok(g.concat(a, b, 1));
    assert_eq!(shape(&g, t), vec![2, 8]);
    let t = ok(g.concat(a, c, 0));
    assert_eq!(shape(&g, t), vec![6, 3]);
    expect_err(
        g.concat(a, b, 0),
        &["concat", "[2, 3] and [2, 5]", "dim 1 differs (3 vs 5); only the concat dim may differ"],
    );
    expect_err(g.concat(a, c, 1), &["concat", "dim 0 differs (2 vs 4)"]);
    expect_err(g.concat(a, a, 2), &["concat(2)", "dim 2 is out of range for rank 2"]);
    expect_err(g.concat(a, d, 0), &["concat", "operands must have the same rank"]);
}

#[test]
fn dtypes_must_not_mix() {
    let mut g = KernelGraph::new();
    let a = ok(g.input(&[4, 4], F16));
    let b = ok(g.input(&[4, 4], DType::Bf16));
    let msg = expect_err(g.matmul(a, b), &["matmul", "one element type, found f16 and bf16"]);
    assert!(msg.contains("f16") && msg.contains("bf16"), "{msg}");
    for op in BINARIES {
        expect_err(g.binary(op, a, b), &[op.name(), "one element type"]);
    }
    expect_err(g.concat(a, b, 0), &["concat(0)", "one element type"]);
    let same = ok(g.add(a, a));
    assert_eq!(ok(g.desc(same)).dtype, F16);
}

/// A block graph that copies its one `[4, 8]` operand: grid 2 on dim 0, acc_sum, saved on dim 0.
#[test]
fn rope_gather_argmax_rules() {
    use mirage::ir::RopeLayout;
    let mut g = KernelGraph::new();
    let x = input(&mut g, &[4, 7, 256]);
    let c = input(&mut g, &[1, 7, 64]);
    let s = input(&mut g, &[1, 7, 64]);
    let y = ok(g.rope(RopeLayout::Interleaved, x, c, s));
    assert_eq!(shape(&g, y), vec![4, 7, 256]);
    let c3 = input(&mut g, &[1, 7, 48]);
    expect_err(g.rope(RopeLayout::HalfSplit, x, c3, c3), &["rope", "twice it must divide"]);
    expect_err(g.rope(RopeLayout::HalfSplit, x, c, c3), &["rope", "cos and sin must have one shape"]);
    let half = ok(g.input(&[1, 7, 64], F16));
    expect_err(g.rope(RopeLayout::HalfSplit, x, half, half), &["rope", "one element type"]);

    let table = input(&mut g, &[100, 16]);
    let ids = ok(g.input(&[3, 5], DType::I32));
    let rows = ok(g.gather(table, ids));
    assert_eq!((shape(&g, rows), ok(g.desc(rows)).dtype), (vec![3, 5, 16], F32));
    expect_err(g.gather(table, table), &["gather", "the ids (operand 1) must be i32, found f32"]);
    expect_err(g.gather(ids, ids), &["gather", "computes on floats"]);
    let big = ok(g.input(&[2, 3, 4], DType::I32));
    let ok_rank = ok(g.gather(table, big));
    assert_eq!(shape(&g, ok_rank), vec![2, 3, 4, 16]);
    let huge = ok(g.input(&[1, 2, 3, 4], DType::I32));
    expect_err(g.gather(table, huge), &["gather", "rank 5"]);

    let m = ok(g.argmax(x, 2));
    assert_eq!((shape(&g, m), ok(g.desc(m)).dtype), (vec![4, 7, 1], DType::I32));
    expect_err(g.argmax(x, 3), &["argmax(3)", "dim 3 is out of range"]);
    // Indices take part in no arithmetic.
    expect_err(g.unary(UnaryOp::Exp, m), &["exp", "computes on floats", "i32"]);
    expect_err(g.argmax(m, 0), &["argmax(0)", "computes on floats"]);
    expect_err(g.reduce_sum(ids, 0), &["reduce_sum(0)", "computes on floats"]);
    // But they may be outputs.
    ok(g.output(m, None));
}

#[test]
fn block_gather_and_argmax_rules() {
    let descs = vec![TensorDesc::new(&[64, 32], F32), TensorDesc::new(&[8, 4], DType::I32)];
    let mut b = ok(BlockGraph::new(descs, [2, 4, 1], 128, 1));
    let ids = ok(b.input(1, [Some(0), None, None], None));
    let rows = ok(b.op(BlockOp::Gather { table: 0, imap: [None, Some(1), None] }, &[ids]));
    assert_eq!(ok(b.tile(rows)).shape, vec![4, 4, 8]);
    expect_err(b.op(BlockOp::Gather { table: 1, imap: [None; 3] }, &[ids]), &["gather", "computes on floats"]);
    expect_err(b.op(BlockOp::Gather { table: 2, imap: [None; 3] }, &[ids]), &["gather", "the kernel has 2 operands"]);
    expect_err(b.op(BlockOp::Gather { table: 0, imap: [None; 3] }, &[rows]), &["gather", "the ids tile must be i32"]);
    // Accumulators, like all arithmetic, take floats only.
    expect_err(b.accum(AccKind::Sum, &[ids]), &["acc_sum", "computes on floats"]);
    let acc = ok(b.accum(AccKind::Sum, &[rows]));
    let m = ok(b.op(BlockOp::Argmax { dim: 2 }, &[acc]));
    assert_eq!(
        (ok(b.tile(m)).shape.clone(), ok(b.tile(m)).dtype, ok(b.tile(m)).phase),
        (vec![4, 4, 1], DType::I32, Phase::AfterLoop)
    );
    // Each block's positions within its slab of the width, side by side.
    ok(b.output(m, [Some(0), Some(2), None]));
    assert_eq!(b.output_descs()[0], TensorDesc::new(&[8, 4, 4], DType::I32));
    ok(b.validate());
}

fn copy_block(desc: TensorDesc) -> BlockGraph {
    let mut bg = ok(BlockGraph::new(vec![desc], [2, 1, 1], 128, 1));
    let x = ok(bg.input(0, [Some(0), None, None], None));
    let a = ok(bg.accum(AccKind::Sum, &[x]));
    ok(bg.output(a, [Some(0), None, None]));
    bg
}

#[test]
fn custom_operands_must_match_the_block_graphs_inputs() {
    let mut g = KernelGraph::new();
    let x = input(&mut g, &[4, 8]);
    let y = input(&mut g, &[8, 4]);
    let h = ok(g.input(&[4, 8], F16));
    let cm = ok(g.input_strided(&[4, 8], &[1, 4], F32));
    let block = copy_block(TensorDesc::new(&[4, 8], F32));
    let outs = ok(g.custom(&[x], block.clone()));
    assert_eq!(outs.len(), 1);
    assert_eq!(*ok(g.desc(outs[0])), TensorDesc::new(&[4, 8], F32));
    expect_err(g.custom(&[y], block.clone()), &["custom", "operand 0: [8, 4]", "the block graph was built for [4, 8]"]);
    expect_err(
        g.custom(&[h], block.clone()),
        &["custom", "f16", "the block graph was built for [4, 8] strides [8, 1] f32"],
    );
    expect_err(g.custom(&[cm], block.clone()), &["custom", "strides [1, 4]", "built for [4, 8] strides [8, 1]"]);
    expect_err(g.custom(&[x, x], block.clone()), &["custom", "2 operands", "expects 1 operands"]);
    expect_err(g.custom(&[], block), &["custom", "0 operands", "expects 1 operands"]);
    // A custom kernel whose block graph saves nothing is rejected.
    let empty = ok(BlockGraph::new(vec![TensorDesc::new(&[4, 8], F32)], [1, 1, 1], 32, 1));
    expect_err(g.custom(&[x], empty), &["block graph", "must save at least one output"]);
}

#[test]
fn the_node_list_only_grows_on_success() {
    let mut g = KernelGraph::new();
    let a = input(&mut g, &[2, 3]);
    let n = g.nodes().len();
    let _ = g.matmul(a, a);
    let _ = g.reduce_sum(a, 5);
    let _ = g.concat(a, a, 9);
    assert_eq!(g.nodes().len(), n);
    assert!(g.validate().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Block level
// ---------------------------------------------------------------------------------------------

fn f32s(shapes: &[&[usize]]) -> Vec<TensorDesc> {
    shapes.iter().map(|s| TensorDesc::new(s, F32)).collect()
}

fn bg(shapes: &[&[usize]], grid: [usize; 3], frange: usize) -> BlockGraph {
    ok(BlockGraph::new(f32s(shapes), grid, 128, frange))
}

fn tile(b: &BlockGraph, t: TensorRef) -> (Vec<usize>, Phase) {
    let d = ok(b.tile(t));
    (d.shape.clone(), d.phase)
}

#[test]
fn block_graph_launch_parameters() {
    let ins = || f32s(&[&[4, 8]]);
    expect_err(BlockGraph::new(ins(), [0, 1, 1], 128, 1), &["block graph", "grid [0, 1, 1]", "grid.x must be in 1..="]);
    expect_err(BlockGraph::new(ins(), [1, 0, 1], 128, 1), &["block graph", "grid.y must be in 1..=65535"]);
    expect_err(BlockGraph::new(ins(), [1, 1, 65536], 128, 1), &["block graph", "grid.z must be in 1..=65535"]);
    for threads in [0, 16, 48, 1000, 1056, 2048] {
        expect_err(
            BlockGraph::new(ins(), [1, 1, 1], threads, 1),
            &["block graph", &format!("{threads} threads"), "threads per block must be a multiple of 32 in 32..=1024"],
        );
    }
    for threads in [32, 64, 96, 1024] {
        ok(BlockGraph::new(ins(), [1, 1, 1], threads, 1));
    }
    expect_err(
        BlockGraph::new(ins(), [1, 1, 1], 128, 0),
        &["block graph", "forloop_range 0", "forloop_range must be at least 1"],
    );
    expect_err(
        BlockGraph::new(f32s(&[&[4, 0]]), [1, 1, 1], 128, 1),
        &["block graph input", "every dimension must be at least 1"],
    );
    expect_err(
        BlockGraph::new(f32s(&[&[1, 1, 1, 1, 1]]), [1, 1, 1], 128, 1),
        &["block graph input", "rank must be 1..=4"],
    );
    let b = ok(BlockGraph::new(ins(), [2, 3, 4], 256, 5));
    assert_eq!((b.grid(), b.threads(), b.forloop_range(), b.num_blocks()), ([2, 3, 4], 256, 5, 24));
}

#[test]
fn input_iterator_tiles() {
    // [8, 16]: grid.x splits dim 1, grid.y splits dim 0, the loop walks dim 1.
    let mut b = bg(&[&[8, 16]], [2, 4, 1], 2);
    let t = ok(b.input(0, [Some(1), Some(0), None], Some(1)));
    assert_eq!(tile(&b, t), (vec![2, 4], Phase::InLoop));
    // Replicated along x, loaded once.
    let t = ok(b.input(0, [None, Some(0), None], None));
    assert_eq!(tile(&b, t).0, vec![2, 16]);
    // The loop over dim 0 after the grid split it: 8 / 4 / 2.
    let t = ok(b.input(0, [None, Some(0), None], Some(0)));
    assert_eq!(tile(&b, t).0, vec![1, 16]);
}

#[test]
fn input_iterator_rules() {
    let mut b = bg(&[&[6, 8]], [4, 1, 1], 1);
    expect_err(
        b.input(0, [Some(0), None, None], None),
        &["input iterator", "[6, 8] with grid [4, 1, 1]", "grid.x = 4 does not divide dim 0 (size 6)"],
    );
    ok(b.input(0, [Some(1), None, None], None));

    let mut b = bg(&[&[6, 8]], [1, 1, 1], 3);
    expect_err(
        b.input(0, [None; 3], Some(1)),
        &["input iterator", "forloop_range 3 does not divide the block's slab of dim 1 (size 8)"],
    );
    ok(b.input(0, [None; 3], Some(0)));

    // The slab, not the whole dim, must be divisible by the loop range.
    let mut b = bg(&[&[6, 8]], [2, 1, 1], 8);
    expect_err(
        b.input(0, [Some(1), None, None], Some(1)),
        &["input iterator", "forloop_range 8 does not divide the block's slab of dim 1 (size 4)"],
    );

    let mut b = bg(&[&[6, 8]], [2, 2, 1], 1);
    expect_err(
        b.input(0, [Some(2), Some(0), None], None),
        &["input iterator", "imap.x = 2 is not a dim of a rank-2 tensor"],
    );
    expect_err(
        b.input(0, [Some(1), Some(9), None], None),
        &["input iterator", "imap.y = 9 is not a dim of a rank-2 tensor"],
    );
    expect_err(
        b.input(0, [Some(1), Some(0), None], Some(2)),
        &["input iterator", "forloop_dim 2 is not a dim of a rank-2 tensor"],
    );
    expect_err(b.input(0, [Some(0), Some(0), None], None), &["input iterator", "two grid axes split dim 0"]);
    expect_err(b.input(1, [None; 3], None), &["input iterator", "kernel operand 1", "the kernel has 1 operands"]);
    assert!(b.nodes().is_empty(), "failed pushes add no node");
}

#[test]
fn grid_map_entries_of_size_1_axes_are_dropped() {
    let mut b = bg(&[&[4, 8]], [2, 1, 1], 1);
    // y and z have size 1: their entries (even out-of-range ones) mean nothing and are dropped.
    let t = ok(b.input(0, [Some(0), Some(1), Some(7)], None));
    assert_eq!(tile(&b, t).0, vec![2, 8]);
    assert_eq!(b.nodes()[t.node].op, BlockOp::Input { input: 0, imap: [Some(0), None, None], forloop_dim: None });
    let a = ok(b.accum(AccKind::Sum, &[t]));
    ok(b.output(a, [Some(0), Some(1), Some(9)]));
    assert_eq!(
        b.nodes().last().map(|n| n.op.clone()),
        Some(BlockOp::Output { omap: [Some(0), None, None], store: None })
    );
    // Two axes "splitting" one dim is fine when one of them has size 1.
    let t2 = ok(b.input(0, [Some(0), Some(0), None], None));
    assert_eq!(tile(&b, t2).0, vec![2, 8]);
    assert!(b.validate().is_ok());
    assert_eq!(b.output_descs(), vec![TensorDesc::new(&[4, 8], F32)]);
}

#[test]
fn tile_matmul_has_no_batch_dims() {
    let mut b = bg(&[&[2, 4, 8], &[2, 8, 4], &[1, 4, 8], &[1, 8, 4]], [1, 1, 1], 1);
    let x = ok(b.input(0, [None; 3], None));
    let y = ok(b.input(1, [None; 3], None));
    expect_err(
        b.matmul(x, y),
        &["matmul", "[2, 4, 8] x [2, 8, 4]", "a tile matmul has no batch dims: leading dims must be 1"],
    );
    let x1 = ok(b.input(2, [None; 3], None));
    let y1 = ok(b.input(3, [None; 3], None));
    let t = ok(b.matmul(x1, y1));
    assert_eq!(tile(&b, t), (vec![1, 4, 4], Phase::InLoop));
    expect_err(b.matmul(x1, x1), &["matmul", "inner dims differ"]);
    // A batched kernel tensor becomes a batch-free tile when the grid splits its batch dim.
    let mut b = bg(&[&[2, 4, 8], &[2, 8, 4]], [2, 1, 1], 1);
    let x = ok(b.input(0, [Some(0), None, None], None));
    let y = ok(b.input(1, [Some(0), None, None], None));
    let t = ok(b.matmul(x, y));
    assert_eq!(tile(&b, t).0, vec![1, 4, 4]);
}

#[test]
fn binary_ops_do_not_mix_phases() {
    let mut b = bg(&[&[4, 8]], [1, 1, 1], 2);
    let x = ok(b.input(0, [None; 3], Some(1)));
    let a = ok(b.accum(AccKind::Sum, &[x]));
    assert_eq!(tile(&b, x), (vec![4, 4], Phase::InLoop));
    assert_eq!(tile(&b, a), (vec![4, 4], Phase::AfterLoop));
    for op in BINARIES {
        expect_err(b.binary(op, a, x), &[op.name(), "mixing in-loop and after-loop operands"]);
        expect_err(b.binary(op, x, a), &[op.name(), "mixing in-loop and after-loop operands"]);
    }
    expect_err(b.matmul(a, x), &["matmul", "mixing in-loop and after-loop operands"]);
    expect_err(b.op(BlockOp::Concat { dim: 0 }, &[x, a]), &["concat(0)", "mixing"]);
    // Same phase: fine; the phase carries over.
    let s = ok(b.binary(BinaryOp::Add, x, x));
    assert_eq!(tile(&b, s).1, Phase::InLoop);
    let e = ok(b.binary(BinaryOp::Mul, a, a));
    assert_eq!(tile(&b, e).1, Phase::AfterLoop);
    let u = ok(b.unary(UnaryOp::Exp, a));
    assert_eq!(tile(&b, u).1, Phase::AfterLoop);
}

#[test]
fn block_dtypes_must_not_mix() {
    let mut b =
        ok(BlockGraph::new(vec![TensorDesc::new(&[4, 4], F16), TensorDesc::new(&[4, 4], F32)], [1, 1, 1], 128, 1));
    let x = ok(b.input(0, [None; 3], None));
    let y = ok(b.input(1, [None; 3], None));
    expect_err(b.binary(BinaryOp::Add, x, y), &["add", "one element type, found f16 and f32"]);
    expect_err(b.matmul(x, y), &["matmul", "one element type"]);
}

#[test]
fn accumulators_take_in_loop_operands() {
    let mut b = bg(&[&[4, 8]], [1, 1, 1], 2);
    let x = ok(b.input(0, [None; 3], Some(1)));
    let a = ok(b.accum(AccKind::Sum, &[x]));
    for acc in [AccKind::Sum, AccKind::SumLast, AccKind::RmsLast, AccKind::SumTo { width: 2 }, AccKind::Max] {
        expect_err(b.accum(acc, &[a]), &[&acc.name(), "its operand is already after the loop"]);
    }
    let r = ok(b.input(0, [None; 3], Some(1)));
    let r1 = ok(b.op(BlockOp::ReduceMax { dim: 1 }, &[r]));
    let ra = ok(b.accum(AccKind::Max, &[r1]));
    expect_err(b.accum(AccKind::Rescale, &[a, ra]), &["acc_rescale", "its operand is already after the loop"]);
    expect_err(b.accum(AccKind::Rescale, &[x, ra]), &["acc_rescale", "mixing in-loop and after-loop"]);
    expect_err(b.accum(AccKind::Rescale, &[x]), &["acc_rescale", "1 operands", "expects 2 operands"]);
    expect_err(b.accum(AccKind::Sum, &[x, x]), &["acc_sum", "expects 1 operands"]);
}

#[test]
fn accumulator_shapes() {
    let mut b = bg(&[&[4, 12], &[4, 3]], [1, 1, 1], 3);
    let x = ok(b.input(0, [None; 3], Some(1))); // [4, 4]
    let r = ok(b.input(1, [None; 3], Some(1))); // [4, 1]
    let cases: Vec<(AccKind, Vec<TensorRef>, Vec<usize>)> = vec![
        (AccKind::Sum, vec![x], vec![4, 4]),
        (AccKind::SumLast, vec![x], vec![4, 1]),
        (AccKind::RmsLast, vec![x], vec![4, 1]),
        (AccKind::SumTo { width: 2 }, vec![x], vec![4, 2]),
        (AccKind::SumTo { width: 4 }, vec![x], vec![4, 4]),
        (AccKind::Max, vec![x], vec![4, 4]),
        (AccKind::Rescale, vec![x, r], vec![4, 4]),
        (AccKind::Rescale, vec![x, x], vec![4, 4]),
        (AccKind::SumLastRescale, vec![x, r], vec![4, 1]),
    ];
    for (acc, ins, expected) in cases {
        let t = ok(b.accum(acc, &ins));
        assert_eq!(tile(&b, t), (expected, Phase::AfterLoop), "{}", acc.name());
    }
}

#[test]
fn acc_sum_to_width_must_divide_the_last_dim() {
    let mut b = bg(&[&[4, 6]], [1, 1, 1], 1);
    let x = ok(b.input(0, [None; 3], None));
    expect_err(
        b.accum(AccKind::SumTo { width: 4 }, &[x]),
        &["acc_sum_to(4)", "[4, 6]", "reduction width 4 must divide dim 1 (size 6)"],
    );
    expect_err(b.accum(AccKind::SumTo { width: 0 }, &[x]), &["acc_sum_to(0)", "reduction width 0 must divide"]);
    let t = ok(b.accum(AccKind::SumTo { width: 3 }, &[x]));
    assert_eq!(tile(&b, t).0, vec![4, 3]);
}

#[test]
fn rescale_factor_must_broadcast_to_the_accumulator() {
    let mut b = bg(&[&[4, 8], &[8, 8], &[4, 16], &[1, 8], &[4, 1]], [1, 1, 1], 1);
    let x = ok(b.input(0, [None; 3], None));
    let r88 = ok(b.input(1, [None; 3], None));
    let r416 = ok(b.input(2, [None; 3], None));
    let r18 = ok(b.input(3, [None; 3], None));
    let r41 = ok(b.input(4, [None; 3], None));
    expect_err(
        b.accum(AccKind::Rescale, &[x, r88]),
        &["acc_rescale", "dim 0 has sizes 4 and 8; each dim must be equal or 1 on one side"],
    );
    expect_err(b.accum(AccKind::Rescale, &[x, r416]), &["acc_rescale", "dim 1 has sizes 8 and 16"]);
    let t = ok(b.accum(AccKind::Rescale, &[x, r18]));
    assert_eq!(tile(&b, t).0, vec![4, 8]);
    // The factor of acc_sum_last_rescale multiplies a [4, 1] accumulator: a [4, 8] or [1, 8]
    // factor would widen it.
    expect_err(
        b.accum(AccKind::SumLastRescale, &[x, x]),
        &["acc_sum_last_rescale", "the rescale factor must broadcast to the accumulator's shape [4, 1]"],
    );
    expect_err(
        b.accum(AccKind::SumLastRescale, &[x, r18]),
        &["acc_sum_last_rescale", "must broadcast to the accumulator's shape [4, 1]"],
    );
    let t = ok(b.accum(AccKind::SumLastRescale, &[x, r41]));
    assert_eq!(tile(&b, t).0, vec![4, 1]);
}

#[test]
fn running_max_outputs() {
    let mut b = bg(&[&[4, 8]], [1, 1, 1], 2);
    let x = ok(b.input(0, [None; 3], Some(1)));
    let outs = ok(b.push(BlockOp::RunningMax { dim: 1 }, &[x]));
    assert_eq!(outs, vec![TensorRef { node: 1, port: 0 }, TensorRef { node: 1, port: 1 }]);
    for t in outs {
        assert_eq!(tile(&b, t), (vec![4, 1], Phase::InLoop));
    }
    let outs0 = ok(b.push(BlockOp::RunningMax { dim: 0 }, &[x]));
    assert_eq!(tile(&b, outs0[1]).0, vec![1, 4]);
    expect_err(b.push(BlockOp::RunningMax { dim: 2 }, &[x]), &["running_max(2)", "dim 2 is out of range for rank 2"]);
    let a = ok(b.accum(AccKind::Sum, &[x]));
    expect_err(b.push(BlockOp::RunningMax { dim: 1 }, &[a]), &["running_max(1)", "its operand must be in the loop"]);
}

#[test]
fn output_saver_rules() {
    let mut b = bg(&[&[4, 8]], [2, 2, 1], 1);
    let x = ok(b.input(0, [Some(0), Some(1), None], None)); // [2, 4]
    expect_err(
        b.output(x, [Some(0), Some(1), None]),
        &["output saver", "the path from the inputs skips the accumulator"],
    );
    let a = ok(b.accum(AccKind::Sum, &[x]));
    expect_err(b.output(a, [Some(0), None, None]), &["output saver", "grid.y = 2 > 1 needs an omap entry"]);
    expect_err(b.output(a, [None, None, None]), &["output saver", "grid.x = 2 > 1 needs an omap entry"]);
    expect_err(b.output(a, [Some(0), Some(0), None]), &["output saver", "two grid axes concatenate along dim 0"]);
    expect_err(b.output(a, [Some(0), Some(2), None]), &["output saver", "omap.y = 2 is not a dim of a rank-2 tile"]);
    let e = ok(b.unary(UnaryOp::Exp, x));
    expect_err(b.output(e, [Some(0), Some(1), None]), &["output saver", "skips the accumulator"]);
    ok(b.output(a, [Some(1), Some(0), None]));
    ok(b.output(a, [Some(0), Some(1), None]));
    // A [2, 4] tile on a 2x2 grid: both savers write [4, 8], concatenating along other dims.
    assert_eq!(b.output_descs(), vec![TensorDesc::new(&[4, 8], F32); 2]);
    let mut b = bg(&[&[4, 8]], [2, 1, 1], 1);
    let x = ok(b.input(0, [Some(0), None, None], None)); // [2, 8]
    let a = ok(b.accum(AccKind::Sum, &[x]));
    ok(b.output(a, [Some(1), None, None]));
    assert_eq!(b.output_descs(), vec![TensorDesc::new(&[2, 16], F32)]);
    assert!(b.validate().is_ok());
}

#[test]
fn block_reductions_and_reduce_sum_to() {
    let mut b = bg(&[&[4, 6], &[4, 2]], [1, 1, 1], 1);
    let x = ok(b.input(0, [None; 3], None));
    let y = ok(b.input(1, [None; 3], None));
    expect_err(
        b.op(BlockOp::ReduceSumTo { dim: 1, width: 4 }, &[x]),
        &["reduce_sum_to(1, 4)", "[4, 6]", "reduction width 4 must divide dim 1 (size 6)"],
    );
    expect_err(b.op(BlockOp::ReduceSumTo { dim: 1, width: 0 }, &[x]), &["reduce_sum_to(1, 0)", "reduction width 0"]);
    expect_err(
        b.op(BlockOp::ReduceSumTo { dim: 2, width: 1 }, &[x]),
        &["reduce_sum_to(2, 1)", "dim 2 is out of range"],
    );
    expect_err(b.op(BlockOp::ReduceSum { dim: 2 }, &[x]), &["reduce_sum(2)", "dim 2 is out of range"]);
    expect_err(b.op(BlockOp::ReduceMax { dim: 5 }, &[x]), &["reduce_max(5)", "dim 5 is out of range"]);
    for (op, expected) in [
        (BlockOp::ReduceSumTo { dim: 1, width: 3 }, vec![4, 3]),
        (BlockOp::ReduceSumTo { dim: 1, width: 2 }, vec![4, 2]),
        (BlockOp::ReduceSumTo { dim: 0, width: 2 }, vec![2, 6]),
        (BlockOp::ReduceSum { dim: 0 }, vec![1, 6]),
        (BlockOp::ReduceMax { dim: 1 }, vec![4, 1]),
        (BlockOp::RmsNorm { eps: Scalar(1e-5) }, vec![4, 6]),
    ] {
        let t = ok(b.op(op.clone(), &[x]));
        assert_eq!(tile(&b, t), (expected, Phase::InLoop), "{}", op.name());
    }
    let c = ok(b.op(BlockOp::Concat { dim: 1 }, &[x, y]));
    assert_eq!(tile(&b, c).0, vec![4, 8]);
    expect_err(b.op(BlockOp::Concat { dim: 0 }, &[x, y]), &["concat", "dim 1 differs (6 vs 2)"]);
    expect_err(b.op(BlockOp::Concat { dim: 2 }, &[x, y]), &["concat(2)", "dim 2 is out of range"]);
    expect_err(b.unary(UnaryOp::Exp, TensorRef::new(40)), &["operand", "%40", "no such tile"]);
}

#[test]
fn validate_requires_an_output_saver() {
    let mut b = bg(&[&[4, 8]], [1, 1, 1], 1);
    expect_err(b.validate(), &["block graph", "0 nodes", "a block graph must save at least one output"]);
    let x = ok(b.input(0, [None; 3], None));
    let a = ok(b.accum(AccKind::Sum, &[x]));
    expect_err(b.validate(), &["block graph", "2 nodes", "must save at least one output"]);
    ok(b.output(a, [None; 3]));
    assert!(b.validate().is_ok());
}

#[test]
fn huge_shapes_are_errors_not_panics() {
    // Element counts, strides and offsets that would overflow are rejected by the rules (at most
    // 2^48 elements), not left to overflow in arithmetic.
    let big = 1usize << 40;
    let mut g = KernelGraph::new();
    expect_err(g.input(&[big, big, big], F32), &["input", "at most 2^48 elements"]);
    expect_err(g.input(&[usize::MAX, usize::MAX], F32), &["input", "at most 2^48 elements"]);
    expect_err(
        g.input_strided(&[2, 2], &[usize::MAX, 1], F32),
        &["input", "the layout may span at most 2^48 elements"],
    );
    expect_err(
        g.input_strided(&[1 << 20, 2], &[1, 1 << 48], F32),
        &["input", "the layout may span at most 2^48 elements"],
    );
    let a = ok(g.input(&[big, 1], F32));
    let b = ok(g.input(&[1, big], F32));
    expect_err(g.matmul(a, b), &["matmul", "[1099511627776, 1099511627776]", "at most 2^48 elements"]);
    expect_err(g.add(a, b), &["add", "at most 2^48 elements"]);
    let h = ok(g.input(&[1 << 47], F32));
    let c = ok(g.concat(h, h, 0));
    expect_err(g.concat(c, h, 0), &["concat(0)", "at most 2^48 elements"]);
    expect_err(g.output(a, Some(vec![usize::MAX, 1])), &["output", "the layout may span at most 2^48 elements"]);
    ok(g.output(a, Some(vec![1, usize::MAX])));

    let mut bgr =
        ok(BlockGraph::new(f32s(&[&[1 << 24, 1], &[1, 1 << 24], &[big, 1], &[1, big]]), [1 << 30, 1, 1], 128, 1));
    let x = ok(bgr.input(0, [None; 3], None));
    let y = ok(bgr.input(1, [None; 3], None));
    let m = ok(bgr.matmul(x, y));
    let acc = ok(bgr.accum(AccKind::Sum, &[m]));
    expect_err(bgr.output(acc, [Some(0), None, None]), &["output saver", "at most 2^48 elements"]);
    let xb = ok(bgr.input(2, [None; 3], None));
    let yb = ok(bgr.input(3, [None; 3], None));
    expect_err(bgr.matmul(xb, yb), &["matmul", "at most 2^48 elements"]);
    // m is [2^24, 2^24], exactly 2^48 elements: doubling it along either dim is one too many.
    expect_err(bgr.op(BlockOp::Concat { dim: 0 }, &[m, m]), &["concat(0)", "at most 2^48 elements"]);
    expect_err(bgr.op(BlockOp::Concat { dim: 1 }, &[m, m]), &["concat(1)", "at most 2^48 elements"]);
    // The refused output saver left no output behind.
    assert!(bgr.output_descs().is_empty(), "{:?}", bgr.output_descs());
}

// ---------------------------------------------------------------------------------------------
// No input panics
// ---------------------------------------------------------------------------------------------

fn arb_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![4 => 1usize..=8, 1 => Just(0usize), 1 => Just(16usize)], 0..=5)
}

fn arb_map() -> impl Strategy<Value = GridMap> {
    [prop::option::of(0usize..5), prop::option::of(0usize..5), prop::option::of(0usize..5)]
}

#[derive(Clone, Debug)]
enum KStep {
    Input(Vec<usize>, Option<Vec<usize>>, u8),
    Output(usize, Option<Vec<usize>>),
    Op(u8, usize, usize, usize),
    Custom(Vec<usize>, [usize; 3], usize, usize, Vec<BStep>),
}

#[derive(Clone, Debug)]
enum BStep {
    Input(usize, GridMap, Option<usize>),
    Output(usize, GridMap),
    Op(u8, usize, usize, usize),
}

fn arb_bstep() -> impl Strategy<Value = BStep> {
    prop_oneof![
        (0usize..3, arb_map(), prop::option::of(0usize..5)).prop_map(|(i, m, f)| BStep::Input(i, m, f)),
        (0usize..12, arb_map()).prop_map(|(t, m)| BStep::Output(t, m)),
        (any::<u8>(), 0usize..12, 0usize..12, 0usize..6).prop_map(|(o, a, b, d)| BStep::Op(o, a, b, d)),
    ]
}

fn arb_kstep() -> impl Strategy<Value = KStep> {
    prop_oneof![
        (arb_shape(), prop::option::of(prop::collection::vec(0usize..40, 0..=5)), any::<u8>()).prop_map(|(s, st, d)| KStep::Input(s, st, d)),
        (0usize..12, prop::option::of(prop::collection::vec(0usize..40, 0..=5))).prop_map(|(t, s)| KStep::Output(t, s)),
        (any::<u8>(), 0usize..12, 0usize..12, 0usize..6).prop_map(|(o, a, b, d)| KStep::Op(o, a, b, d)),
        (
            prop::collection::vec(0usize..12, 0..3),
            [0usize..5, 0usize..4, 0usize..3],
            prop_oneof![1 => Just(0usize), 3 => Just(32usize), 6 => Just(128usize), 1 => Just(100usize), 1 => Just(2048usize)],
            0usize..5,
            prop::collection::vec(arb_bstep(), 0..12)
        )
            .prop_map(|(ins, g, t, f, steps)| KStep::Custom(ins, g, t, f, steps)),
    ]
}

fn dtype_of(d: u8) -> DType {
    [DType::F16, DType::Bf16, DType::F32][d as usize % 3]
}

fn unary_of(o: u8) -> UnaryOp {
    let u = unaries();
    u[o as usize % u.len()]
}

/// All references a graph of `n` nodes might be asked about, valid or not.
fn tref(i: usize) -> TensorRef {
    TensorRef { node: i / 2, port: i % 2 }
}

fn block_step(b: &mut BlockGraph, s: &BStep) -> Result<(), IrError> {
    match s {
        BStep::Input(i, m, f) => b.input(*i, *m, *f).map(|_| ()),
        BStep::Output(t, m) => b.output(tref(*t), *m),
        BStep::Op(o, x, y, d) => {
            let (x, y) = (tref(*x), tref(*y));
            let d = *d;
            let op = match o % 14 {
                0 => BlockOp::Matmul,
                1 => BlockOp::Unary { op: unary_of(o / 14) },
                2 => BlockOp::Binary { op: BINARIES[(o / 14) as usize % 5] },
                3 => BlockOp::ReduceSum { dim: d },
                4 => BlockOp::ReduceSumTo { dim: d % 3, width: d },
                5 => BlockOp::ReduceMax { dim: d },
                6 => BlockOp::RmsNorm { eps: Scalar(1e-6) },
                7 => BlockOp::Concat { dim: d },
                8 => BlockOp::RunningMax { dim: d },
                9 => BlockOp::Accum { acc: AccKind::Sum },
                10 => BlockOp::Accum { acc: [AccKind::SumLast, AccKind::RmsLast, AccKind::Max][d % 3] },
                11 => BlockOp::Accum { acc: AccKind::SumTo { width: d } },
                12 => BlockOp::Accum { acc: AccKind::Rescale },
                _ => BlockOp::Accum { acc: AccKind::SumLastRescale },
            };
            let arity = [2, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 2][(o % 14) as usize];
            let ins = if (o / 7) % 5 == 0 { vec![x, y, x][..3].to_vec() } else { vec![x, y][..arity].to_vec() };
            b.push(op, &ins).map(|_| ())
        }
    }
}

fn kernel_step(g: &mut KernelGraph, s: &KStep) -> Result<(), IrError> {
    match s {
        KStep::Input(shape, strides, d) => match strides {
            Some(st) => g.input_strided(shape, st, dtype_of(*d)).map(|_| ()),
            None => g.input(shape, dtype_of(*d)).map(|_| ()),
        },
        KStep::Output(t, strides) => g.output(tref(*t), strides.clone()),
        KStep::Op(o, a, b, d) => {
            let (a, b, d) = (tref(*a), tref(*b), *d);
            match o % 9 {
                0 => g.matmul(a, b).map(|_| ()),
                1 => g.unary(unary_of(o / 9), a).map(|_| ()),
                2 => g.binary(BINARIES[(o / 9) as usize % 5], a, b).map(|_| ()),
                3 => g.reduce_sum(a, d).map(|_| ()),
                4 => g.reduce_max(a, d).map(|_| ()),
                5 => g.rms_norm(a, 1e-6, None).map(|_| ()),
                6 => g.rms_norm(a, 1e-6, Some(b)).map(|_| ()),
                7 => g.concat(a, b, d).map(|_| ()),
                _ => g.push(KernelOp::Matmul, &[a]).map(|_| ()),
            }
        }
        KStep::Custom(ins, grid, threads, frange, steps) => {
            let refs: Vec<TensorRef> = ins.iter().map(|&i| tref(i)).collect();
            let descs: Vec<TensorDesc> = refs.iter().filter_map(|&t| g.desc(t).ok().cloned()).collect();
            let mut b = BlockGraph::new(descs, *grid, *threads, *frange)?;
            for s in steps {
                let _ = block_step(&mut b, s);
            }
            let _ = b.validate();
            let _ = b.output_descs();
            g.custom(&refs, b).map(|_| ())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Random shapes, dims, maps, launch parameters and operand references: every builder
    /// answers `Ok` or `Err`, and whatever it accepted still validates.
    #[test]
    fn builders_never_panic(steps in prop::collection::vec(arb_kstep(), 0..24)) {
        let mut g = KernelGraph::new();
        for s in &steps {
            let before = g.nodes().len();
            if kernel_step(&mut g, s).is_err() {
                prop_assert_eq!(g.nodes().len(), before, "a failed push added a node");
            }
        }
        prop_assert!(g.validate().is_ok());
        let _ = g.inputs();
        let _ = g.outputs();
        let _ = g.canonical_hash();
        prop_assert_eq!(KernelGraph::from_json(&g.to_json()).ok(), Some(g));
    }
}

#[test]
fn a_saver_stores_its_output_in_another_float_type() {
    // An f16 kernel saving an f32 output: the kernel output's description carries the stored type.
    let mut b = ok(BlockGraph::new(vec![TensorDesc::new(&[4, 8], F16)], [2, 1, 1], 128, 1));
    let t = ok(b.input(0, [Some(0), None, None], None));
    let a = ok(b.accum(AccKind::Sum, &[t]));
    ok(b.output_as(a, [Some(0), None, None], F32));
    // The tile's own type is the plain saver (one form for one graph).
    ok(b.output_as(a, [Some(0), None, None], F16));
    let savers: Vec<BlockOp> =
        b.nodes().iter().filter(|n| matches!(n.op, BlockOp::Output { .. })).map(|n| n.op.clone()).collect();
    assert_eq!(
        savers,
        vec![
            BlockOp::Output { omap: [Some(0), None, None], store: Some(F32) },
            BlockOp::Output { omap: [Some(0), None, None], store: None },
        ]
    );
    assert_eq!(b.output_descs(), vec![TensorDesc::new(&[4, 8], F32), TensorDesc::new(&[4, 8], F16)]);
    assert!(b.validate().is_ok());

    // The kernel graph's tensors follow: a later kernel takes the f32 tensor as an f32 operand.
    let mut g = KernelGraph::new();
    let x = ok(g.input(&[4, 8], F16));
    let outs = ok(g.custom(&[x], b.clone()));
    assert_eq!(ok(g.desc(outs[0])).dtype, F32);
    assert_eq!(ok(g.desc(outs[1])).dtype, F16);

    // JSON: the stored type round-trips; a saver without one writes no `store` key, so graphs
    // written before it read (and hash) unchanged.
    let json = b.to_json();
    assert_eq!(json.matches("\"store\"").count(), 1, "{json}");
    let back = ok(BlockGraph::from_json(&json));
    assert_eq!(back, b);
    assert_eq!(back.canonical_hash(), b.canonical_hash());
    let mut plain = ok(BlockGraph::new(vec![TensorDesc::new(&[4, 8], F16)], [2, 1, 1], 128, 1));
    let t = ok(plain.input(0, [Some(0), None, None], None));
    let a = ok(plain.accum(AccKind::Sum, &[t]));
    ok(plain.output(a, [Some(0), None, None]));
    ok(plain.output(a, [Some(0), None, None]));
    assert!(!plain.to_json().contains("\"store\""));
    assert_ne!(plain.canonical_hash(), b.canonical_hash(), "the stored type is part of the hash");
}

#[test]
fn a_stored_type_is_a_float_other_than_the_tiles() {
    let mut b = ok(BlockGraph::new(vec![TensorDesc::new(&[4, 8], F16)], [1, 1, 1], 128, 1));
    let t = ok(b.input(0, [None; 3], None));
    let a = ok(b.accum(AccKind::Sum, &[t]));
    let same = BlockOp::Output { omap: [None; 3], store: Some(F16) };
    expect_err(b.push(same, &[a]), &["output saver", "the stored type f16 is the tile's"]);
    expect_err(b.output_as(a, [None; 3], DType::I32), &["output saver", "stored as i32", "float types only"]);
    let i = ok(b.op(BlockOp::Argmax { dim: 1 }, &[a]));
    expect_err(b.output_as(i, [None; 3], F32), &["output saver", "stored as f32", "float types only"]);
}
