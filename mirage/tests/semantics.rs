//! The meaning of every operator (DESIGN §4), pinned by small hand-computed examples run through
//! the reference interpreter: kernel-level operators, and block graphs with their partition,
//! loop, accumulate and concatenate rules, up to a full online softmax.
#![cfg(feature = "build")]

use mirage::eval::EvalError;
use mirage::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, GridMap, KernelGraph, Scalar, TensorDesc, TensorRef, UnaryOp,
};
use mirage::reference::{HostTensor, run};
use rand::SeedableRng;
use rand::rngs::StdRng;

const F32: DType = DType::F32;

#[track_caller]
fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn host(shape: &[usize], data: &[f32]) -> HostTensor {
    ok(HostTensor::new(shape.to_vec(), data.to_vec()))
}

/// `0, 1, 2, …` in a tensor of `shape`.
fn iota(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    host(shape, &(0..n).map(|v| v as f32).collect::<Vec<_>>())
}

fn random(shape: &[usize], rng: &mut StdRng, lo: f32, hi: f32) -> HostTensor {
    mirage::testing::inputs::random_tensor(rng, shape, lo..hi)
}

/// Asserts `got` has `shape` and is within `tol` (relative to max(1, |want|)) of `want`.
#[track_caller]
fn assert_close(got: &HostTensor, shape: &[usize], want: &[f32], tol: f32) {
    assert_eq!(got.shape, shape, "shape");
    assert_eq!(got.data.len(), want.len(), "length");
    for (i, (&g, &w)) in got.data.iter().zip(want).enumerate() {
        let same = if w.is_infinite() || w.is_nan() {
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
        } else {
            (g - w).abs() <= tol * w.abs().max(1.0)
        };
        assert!(same, "element {i}: got {g}, want {w} (all: {:?})", got.data);
    }
}

/// Runs a one-input, one-output program `f(x)` on `x`.
fn run_unary_program(x: &HostTensor, f: impl Fn(&mut KernelGraph, TensorRef) -> TensorRef) -> HostTensor {
    let mut g = KernelGraph::new();
    let t = ok(g.input(&x.shape, F32));
    let y = f(&mut g, t);
    ok(g.output(y, None));
    let mut out = ok(run(&g, std::slice::from_ref(x)));
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn run_binary_program(
    a: &HostTensor,
    b: &HostTensor,
    f: impl Fn(&mut KernelGraph, TensorRef, TensorRef) -> TensorRef,
) -> HostTensor {
    let mut g = KernelGraph::new();
    let ta = ok(g.input(&a.shape, F32));
    let tb = ok(g.input(&b.shape, F32));
    let y = f(&mut g, ta, tb);
    ok(g.output(y, None));
    ok(run(&g, &[a.clone(), b.clone()])).remove(0)
}

// ---------------------------------------------------------------------------------------------
// Kernel-level operators
// ---------------------------------------------------------------------------------------------

#[test]
fn every_unary_function() {
    let c = |lo: f32, hi: f32| UnaryOp::Clamp { lo: Scalar(lo), hi: Scalar(hi) };
    let cases: Vec<(UnaryOp, Vec<f32>, Vec<f32>)> = vec![
        (UnaryOp::Exp, vec![0.0, 1.0, -1.0, 2.0], vec![1.0, std::f32::consts::E, 0.367_879_44, 7.389_056]),
        (UnaryOp::Square, vec![-3.0, 0.5, 0.0, 1.5], vec![9.0, 0.25, 0.0, 2.25]),
        (UnaryOp::Sqrt, vec![4.0, 2.0, 0.25, 0.0], vec![2.0, std::f32::consts::SQRT_2, 0.5, 0.0]),
        // x / (1 + e^-x)
        (UnaryOp::Silu, vec![0.0, 1.0, -1.0, 2.0], vec![0.0, 0.731_058_6, -0.268_941_43, 1.761_594_2]),
        // x · Φ(x), the exact erf form (the tanh approximation gives 0.841192 at 1 and
        // -0.0036375 at -3); |x|/√2 ≥ 2.5 at ±4 exercises erf's tail.
        (
            UnaryOp::Gelu,
            vec![0.0, 1.0, -1.0, 2.0, -3.0, 4.0, -4.0],
            vec![0.0, 0.841_344_8, -0.158_655_25, 1.954_499_7, -0.004_049_694, 3.999_873_3, -0.000_126_684_97],
        ),
        (UnaryOp::Relu, vec![-2.0, 0.0, 3.0, -0.5], vec![0.0, 0.0, 3.0, 0.0]),
        (UnaryOp::Neg, vec![-2.0, 0.0, 3.0, 0.5], vec![2.0, 0.0, -3.0, -0.5]),
        (UnaryOp::Recip, vec![2.0, -4.0, 0.5, 0.0], vec![0.5, -0.25, 2.0, f32::INFINITY]),
        (
            UnaryOp::Tanh,
            vec![0.0, 1.0, -1.0, 2.0, -3.0, 10.0],
            vec![0.0, 0.761_594_2, -0.761_594_2, 0.964_027_6, -0.995_054_8, 1.0],
        ),
        // 1 / (1 + e^-x): saturates to 0 and 1 without NaN.
        (
            UnaryOp::Sigmoid,
            vec![0.0, 1.0, -1.0, 2.0, -3.0, 10.0, -100.0, 100.0],
            vec![0.5, 0.731_058_6, 0.268_941_43, 0.880_797_1, 0.047_425_874, 0.999_954_6, 0.0, 1.0],
        ),
        (c(-1.0, 2.0), vec![-3.0, -1.0, 0.5, 5.0], vec![-1.0, -1.0, 0.5, 2.0]),
        (c(0.0, f32::INFINITY), vec![-3.0, 0.0, 0.5, 5.0], vec![0.0, 0.0, 0.5, 5.0]),
        (UnaryOp::MulScalar { c: Scalar(2.5) }, vec![1.0, -2.0, 0.0, 0.4], vec![2.5, -5.0, 0.0, 1.0]),
    ];
    // Every operator of the table has cases.
    for op in UnaryOp::ALL {
        assert!(cases.iter().any(|(c, _, _)| c.name() == op.name()), "no case for {op}");
    }
    for (op, x, want) in cases {
        let got = run_unary_program(&host(&[2, 2], &x[..4]), |g, t| ok(g.unary(op, t)));
        assert_close(&got, &[2, 2], &want[..4], 1e-6);
        if x.len() > 4 {
            let got = run_unary_program(&host(&[x.len() - 4], &x[4..]), |g, t| ok(g.unary(op, t)));
            assert_close(&got, &[x.len() - 4], &want[4..], 1e-6);
        }
    }
}

#[test]
fn every_binary_op_with_broadcasting() {
    // a: [2, 1] column, b: [1, 3] row → [2, 3].
    let a = host(&[2, 1], &[1.0, 2.0]);
    let b = host(&[1, 3], &[10.0, 20.0, 40.0]);
    let cases = [
        (BinaryOp::Add, vec![11.0, 21.0, 41.0, 12.0, 22.0, 42.0]),
        (BinaryOp::Sub, vec![-9.0, -19.0, -39.0, -8.0, -18.0, -38.0]),
        (BinaryOp::Mul, vec![10.0, 20.0, 40.0, 20.0, 40.0, 80.0]),
        (BinaryOp::Div, vec![0.1, 0.05, 0.025, 0.2, 0.1, 0.05]),
    ];
    for (op, want) in cases {
        let got = run_binary_program(&a, &b, |g, x, y| ok(g.binary(op, x, y)));
        assert_close(&got, &[2, 3], &want, 1e-6);
    }
    let p = run_binary_program(&host(&[2, 1], &[2.0, 3.0]), &host(&[1, 3], &[1.0, 2.0, 3.0]), |g, x, y| {
        ok(g.binary(BinaryOp::Pow, x, y))
    });
    assert_close(&p, &[2, 3], &[2.0, 4.0, 8.0, 3.0, 9.0, 27.0], 1e-6);
    // Operand order matters: [2, 3] - [2, 1] and [2, 1] - [2, 3].
    let m = host(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let col = host(&[2, 1], &[1.0, 10.0]);
    let got = run_binary_program(&m, &col, |g, x, y| ok(g.binary(BinaryOp::Sub, x, y)));
    assert_close(&got, &[2, 3], &[0.0, 1.0, 2.0, -6.0, -5.0, -4.0], 0.0);
    let got = run_binary_program(&col, &m, |g, x, y| ok(g.binary(BinaryOp::Div, x, y)));
    assert_close(&got, &[2, 3], &[1.0, 0.5, 1.0 / 3.0, 2.5, 2.0, 10.0 / 6.0], 1e-6);
    // Equal shapes, and a middle broadcast dim of a rank-3 tensor.
    let got = run_binary_program(&m, &m, |g, x, y| ok(g.binary(BinaryOp::Mul, x, y)));
    assert_close(&got, &[2, 3], &[1.0, 4.0, 9.0, 16.0, 25.0, 36.0], 0.0);
    let x3 = iota(&[2, 2, 2]);
    let mid = host(&[2, 1, 2], &[100.0, 200.0, 300.0, 400.0]);
    let got = run_binary_program(&x3, &mid, |g, x, y| ok(g.add(x, y)));
    assert_close(&got, &[2, 2, 2], &[100.0, 201.0, 102.0, 203.0, 304.0, 405.0, 306.0, 407.0], 0.0);
}

#[test]
fn matmul_plain_and_batched() {
    // [2, 3] x [3, 2]
    let a = host(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = host(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let got = run_binary_program(&a, &b, |g, x, y| ok(g.matmul(x, y)));
    assert_close(&got, &[2, 2], &[58.0, 64.0, 139.0, 154.0], 0.0);
    // Two batches: [[1,2],[3,4]]·[[5],[6]] = [[17],[39]]; [[1,0],[0,2]]·[[7],[8]] = [[7],[16]].
    let a = host(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 1.0, 0.0, 0.0, 2.0]);
    let b = host(&[2, 2, 1], &[5.0, 6.0, 7.0, 8.0]);
    let got = run_binary_program(&a, &b, |g, x, y| ok(g.matmul(x, y)));
    assert_close(&got, &[2, 2, 1], &[17.0, 39.0, 7.0, 16.0], 0.0);
    // Rank 4: batches [2, 1].
    let a = host(&[2, 1, 1, 2], &[1.0, 1.0, 2.0, -1.0]);
    let b = host(&[2, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
    let got = run_binary_program(&a, &b, |g, x, y| ok(g.matmul(x, y)));
    assert_close(&got, &[2, 1, 1, 2], &[4.0, 6.0, -1.0, 0.0], 0.0);
}

#[test]
fn reductions() {
    let x = host(&[2, 3], &[1.0, -2.0, 3.0, 4.0, 5.0, -6.0]);
    let got = run_unary_program(&x, |g, t| ok(g.reduce_sum(t, 0)));
    assert_close(&got, &[1, 3], &[5.0, 3.0, -3.0], 0.0);
    let got = run_unary_program(&x, |g, t| ok(g.reduce_sum(t, 1)));
    assert_close(&got, &[2, 1], &[2.0, 3.0], 0.0);
    let got = run_unary_program(&x, |g, t| ok(g.reduce_max(t, 0)));
    assert_close(&got, &[1, 3], &[4.0, 5.0, 3.0], 0.0);
    let got = run_unary_program(&x, |g, t| ok(g.reduce_max(t, 1)));
    assert_close(&got, &[2, 1], &[3.0, 5.0], 0.0);
    let neg = host(&[3], &[-5.0, -2.0, -9.0]);
    let got = run_unary_program(&neg, |g, t| ok(g.reduce_max(t, 0)));
    assert_close(&got, &[1], &[-2.0], 0.0);
    // The middle dim of a rank-3 tensor: [2, 2, 2] → [2, 1, 2].
    let got = run_unary_program(&iota(&[2, 2, 2]), |g, t| ok(g.reduce_sum(t, 1)));
    assert_close(&got, &[2, 1, 2], &[2.0, 4.0, 10.0, 12.0], 0.0);
}

#[test]
fn rms_norm_with_eps_and_weight() {
    // Row [3, 4]: mean square 12.5; row [1, 1]: mean square 1.
    let x = host(&[2, 2], &[3.0, 4.0, 1.0, 1.0]);
    let got = run_unary_program(&x, |g, t| ok(g.rms_norm(t, 0.0, None)));
    assert_close(&got, &[2, 2], &[0.848_528_1, 1.131_370_8, 1.0, 1.0], 1e-6);
    // eps = 0.5: √13 = 3.6055513, √1.5 = 1.2247449.
    let got = run_unary_program(&x, |g, t| ok(g.rms_norm(t, 0.5, None)));
    assert_close(&got, &[2, 2], &[0.832_050_3, 1.109_400_4, 0.816_496_6, 0.816_496_6], 1e-6);
    let w = host(&[1, 2], &[2.0, -1.0]);
    let got = run_binary_program(&x, &w, |g, t, w| ok(g.rms_norm(t, 0.5, Some(w))));
    assert_close(&got, &[2, 2], &[1.664_100_6, -1.109_400_4, 1.632_993_2, -0.816_496_6], 1e-6);
}

#[test]
fn concat_along_each_dim() {
    let a = host(&[2, 1], &[1.0, 2.0]);
    let b = host(&[2, 2], &[3.0, 4.0, 5.0, 6.0]);
    let got = run_binary_program(&a, &b, |g, x, y| ok(g.concat(x, y, 1)));
    assert_close(&got, &[2, 3], &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0], 0.0);
    let c = host(&[1, 2], &[7.0, 8.0]);
    let got = run_binary_program(&c, &b, |g, x, y| ok(g.concat(x, y, 0)));
    assert_close(&got, &[3, 2], &[7.0, 8.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    let got = run_binary_program(&iota(&[2, 1, 2]), &host(&[2, 1, 2], &[9.0; 4]), |g, x, y| ok(g.concat(x, y, 1)));
    assert_close(&got, &[2, 2, 2], &[0.0, 1.0, 9.0, 9.0, 2.0, 3.0, 9.0, 9.0], 0.0);
}

#[test]
fn strided_layouts_do_not_change_values() {
    // The evaluator works on logical values: a column-major input means the same as a row-major one.
    let mut g = KernelGraph::new();
    let x = ok(g.input_strided(&[2, 3], &[1, 2], F32));
    let y = ok(g.unary(UnaryOp::MulScalar { c: Scalar(2.0) }, x));
    ok(g.output(y, Some(vec![1, 2])));
    let got = ok(run(&g, &[iota(&[2, 3])])).remove(0);
    assert_close(&got, &[2, 3], &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0], 0.0);
}

// ---------------------------------------------------------------------------------------------
// Block graphs
// ---------------------------------------------------------------------------------------------

/// Runs a kernel graph made of one custom kernel over `inputs`; returns every output.
fn run_block(bg: BlockGraph, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let mut g = KernelGraph::new();
    let refs: Vec<TensorRef> = bg.inputs().iter().map(|d| ok(g.input(&d.shape, d.dtype))).collect();
    let outs = ok(g.custom(&refs, bg));
    for o in outs {
        ok(g.output(o, None));
    }
    ok(run(&g, inputs))
}

fn block(shapes: &[&[usize]], grid: [usize; 3], frange: usize) -> BlockGraph {
    ok(BlockGraph::new(shapes.iter().map(|s| TensorDesc::new(s, F32)).collect(), grid, 128, frange))
}

/// input → acc_sum → output with the same map: with F = 1 an identity for every partition.
#[test]
fn copy_through_acc_sum_is_the_identity_for_every_partition() {
    type Partition = (Vec<usize>, [usize; 3], GridMap, Option<usize>);
    let cases: Vec<Partition> = vec![
        (vec![4, 6], [1, 1, 1], [None; 3], None),
        (vec![4, 6], [1, 1, 1], [None; 3], Some(1)),
        (vec![4, 6], [2, 1, 1], [Some(0), None, None], None),
        (vec![4, 6], [3, 1, 1], [Some(1), None, None], Some(0)),
        (vec![4, 6], [1, 2, 1], [None, Some(0), None], None),
        (vec![4, 6], [1, 1, 6], [None, None, Some(1)], None),
        (vec![4, 6], [2, 3, 1], [Some(0), Some(1), None], None),
        (vec![4, 6], [3, 2, 1], [Some(1), Some(0), None], Some(1)),
        (vec![2, 4, 6], [2, 2, 3], [Some(0), Some(1), Some(2)], None),
        (vec![2, 4, 6], [3, 2, 2], [Some(2), Some(0), Some(1)], Some(2)),
        (vec![2, 2, 4, 4], [1, 2, 4], [None, Some(3), Some(2)], Some(0)),
    ];
    for (shape, grid, map, fdim) in cases {
        let mut bg = block(&[&shape], grid, 1);
        let x = ok(bg.input(0, map, fdim));
        let a = ok(bg.accum(AccKind::Sum, &[x]));
        ok(bg.output(a, map));
        let input = iota(&shape);
        let out = run_block(bg, std::slice::from_ref(&input));
        assert_eq!(out, vec![input], "shape {shape:?} grid {grid:?} map {map:?} forloop_dim {fdim:?}");
    }
}

#[test]
fn omap_concatenates_block_results() {
    // X [4, 3], grid.x = 2 splits rows; saving along dim 1 puts block 1's rows beside block 0's.
    let mut bg = block(&[&[4, 3]], [2, 1, 1], 1);
    let x = ok(bg.input(0, [Some(0), None, None], None));
    let a = ok(bg.accum(AccKind::Sum, &[x]));
    ok(bg.output(a, [Some(1), None, None]));
    let out = run_block(bg, &[iota(&[4, 3])]);
    assert_close(&out[0], &[2, 6], &[0.0, 1.0, 2.0, 6.0, 7.0, 8.0, 3.0, 4.0, 5.0, 9.0, 10.0, 11.0], 0.0);
    // A replicated input (no imap entry on an axis of size 2): every block reads all of it.
    let mut bg = block(&[&[2, 3]], [2, 1, 1], 1);
    let x = ok(bg.input(0, [None; 3], None));
    let a = ok(bg.accum(AccKind::Sum, &[x]));
    ok(bg.output(a, [Some(0), None, None]));
    let out = run_block(bg, &[iota(&[2, 3])]);
    assert_close(&out[0], &[4, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
}

#[test]
fn forloop_tiles_are_summed_by_acc_sum() {
    // X [2, 6], F = 3 over dim 1: tiles [2, 2] at columns 0, 2, 4.
    let mut bg = block(&[&[2, 6]], [1, 1, 1], 3);
    let x = ok(bg.input(0, [None; 3], Some(1)));
    let a = ok(bg.accum(AccKind::Sum, &[x]));
    ok(bg.output(a, [None; 3]));
    let out = run_block(bg, &[iota(&[2, 6])]);
    assert_close(&out[0], &[2, 2], &[6.0, 9.0, 24.0, 27.0], 0.0);
    // Grid and loop on the same dim: X [2, 8], grid.x = 2 gives each block a slab of 4 columns,
    // F = 2 walks tiles of 2 inside it: out[r][2b + c] = X[r][4b + c] + X[r][4b + 2 + c].
    let mut bg = block(&[&[2, 8]], [2, 1, 1], 2);
    let x = ok(bg.input(0, [Some(1), None, None], Some(1)));
    let a = ok(bg.accum(AccKind::Sum, &[x]));
    ok(bg.output(a, [Some(1), None, None]));
    let out = run_block(bg, &[iota(&[2, 8])]);
    assert_close(&out[0], &[2, 4], &[2.0, 4.0, 10.0, 12.0, 18.0, 20.0, 26.0, 28.0], 0.0);
    // The loop over rows, the grid over columns.
    let mut bg = block(&[&[4, 2]], [2, 1, 1], 2);
    let x = ok(bg.input(0, [Some(1), None, None], Some(0)));
    let a = ok(bg.accum(AccKind::Sum, &[x]));
    ok(bg.output(a, [Some(1), None, None]));
    let out = run_block(bg, &[iota(&[4, 2])]);
    // tiles [2, 1]: rows {0,1} + rows {2,3} of each column.
    assert_close(&out[0], &[2, 2], &[4.0, 6.0, 8.0, 10.0], 0.0);
}

#[test]
fn tiled_matmul_accumulates_over_k() {
    // A [2, 4] · B [4, 2], grid.x splits B's columns, the loop walks k in two tiles.
    let a = host(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let b = host(&[4, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, -1.0]);
    let mut bg = block(&[&[2, 4], &[4, 2]], [2, 1, 1], 2);
    let ta = ok(bg.input(0, [None; 3], Some(1)));
    let tb = ok(bg.input(1, [Some(1), None, None], Some(0)));
    let m = ok(bg.matmul(ta, tb));
    let acc = ok(bg.accum(AccKind::Sum, &[m]));
    ok(bg.output(acc, [Some(1), None, None]));
    let out = run_block(bg, &[a, b]);
    // Row 0: [1+3+8, 2+3-4] = [12, 1]; row 1: [5+7+16, 6+7-8] = [28, 5].
    assert_close(&out[0], &[2, 2], &[12.0, 1.0, 28.0, 5.0], 0.0);
}

#[test]
fn reduce_sum_to_groups_with_a_stride() {
    // Output j sums inputs j, j + w, j + 2w, …
    for (width, want) in
        [(2, vec![9.0, 12.0]), (3, vec![5.0, 7.0, 9.0]), (1, vec![21.0]), (6, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]
    {
        let mut bg = block(&[&[1, 6]], [1, 1, 1], 1);
        let x = ok(bg.input(0, [None; 3], None));
        let r = ok(bg.op(BlockOp::ReduceSumTo { dim: 1, width }, &[x]));
        let a = ok(bg.accum(AccKind::Sum, &[r]));
        ok(bg.output(a, [None; 3]));
        let out = run_block(bg, &[host(&[1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]);
        assert_close(&out[0], &[1, width], &want, 0.0);
    }
    // Along dim 0 of a [4, 2] tile, width 2: rows {0, 2} and {1, 3}.
    let mut bg = block(&[&[4, 2]], [1, 1, 1], 1);
    let x = ok(bg.input(0, [None; 3], None));
    let r = ok(bg.op(BlockOp::ReduceSumTo { dim: 0, width: 2 }, &[x]));
    let a = ok(bg.accum(AccKind::Sum, &[r]));
    ok(bg.output(a, [None; 3]));
    let out = run_block(bg, &[iota(&[4, 2])]);
    assert_close(&out[0], &[2, 2], &[4.0, 6.0, 8.0, 10.0], 0.0);
}

/// Runs `acc` over X (tiled by the loop over its last dim, F = `frange`) and, for the rescaling
/// accumulators, R (tiled the same way).
fn accumulate(acc: AccKind, x: &HostTensor, frange: usize, r: Option<&HostTensor>) -> HostTensor {
    let mut shapes: Vec<&[usize]> = vec![&x.shape];
    if let Some(r) = r {
        shapes.push(&r.shape);
    }
    let last = x.shape.len() - 1;
    let mut bg = block(&shapes, [1, 1, 1], frange);
    let mut ins = vec![ok(bg.input(0, [None; 3], Some(last)))];
    if r.is_some() {
        ins.push(ok(bg.input(1, [None; 3], Some(last))));
    }
    let a = ok(bg.accum(acc, &ins));
    ok(bg.output(a, [None; 3]));
    let mut inputs = vec![x.clone()];
    inputs.extend(r.cloned());
    run_block(bg, &inputs).remove(0)
}

#[test]
fn every_accumulator() {
    // X [2, 4], F = 2: tiles [[1,2],[5,6]] then [[3,4],[7,8]].
    let x = host(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_close(&accumulate(AccKind::Sum, &x, 2, None), &[2, 2], &[4.0, 6.0, 12.0, 14.0], 0.0);
    assert_close(&accumulate(AccKind::SumLast, &x, 2, None), &[2, 1], &[10.0, 26.0], 0.0);
    // sqrt(Σ x² / (F · last)): sqrt(30 / 4), sqrt(174 / 4).
    assert_close(&accumulate(AccKind::RmsLast, &x, 2, None), &[2, 1], &[2.738_613, 6.595_453], 1e-6);
    // The same with F = 4 (tiles of one column): the divisor is still F · last = 4.
    assert_close(&accumulate(AccKind::RmsLast, &x, 4, None), &[2, 1], &[2.738_613, 6.595_453], 1e-6);
    assert_close(&accumulate(AccKind::RmsLast, &x, 1, None), &[2, 1], &[2.738_613, 6.595_453], 1e-6);
    let m = host(&[2, 4], &[1.0, 5.0, 3.0, 2.0, -1.0, -7.0, -2.0, -8.0]);
    assert_close(&accumulate(AccKind::Max, &m, 2, None), &[2, 2], &[3.0, 5.0, -1.0, -7.0], 0.0);
    // acc_sum_to(2) over X [1, 8], F = 2: Σ over iterations [6, 8, 10, 12], then strided
    // width 2: [6 + 10, 8 + 12] (a contiguous grouping would give [14, 22]).
    let y = host(&[1, 8], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_close(&accumulate(AccKind::SumTo { width: 2 }, &y, 2, None), &[1, 2], &[16.0, 20.0], 0.0);
    assert_close(&accumulate(AccKind::SumTo { width: 1 }, &y, 2, None), &[1, 1], &[36.0], 0.0);
    assert_close(&accumulate(AccKind::SumTo { width: 4 }, &y, 2, None), &[1, 4], &[6.0, 8.0, 10.0, 12.0], 0.0);
}

#[test]
fn rescaling_accumulators() {
    // X [1, 6], F = 3: x_1 = [1, 2], x_2 = [3, 4], x_3 = [5, 6]; r = 10 (ignored), 0.5, 2.
    let x = host(&[1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = host(&[1, 3], &[10.0, 0.5, 2.0]);
    // acc_1 = [1, 2]; acc_2 = [0.5 + 3, 1 + 4]; acc_3 = [7 + 5, 10 + 6].
    assert_close(&accumulate(AccKind::Rescale, &x, 3, Some(&r)), &[1, 2], &[12.0, 16.0], 0.0);
    // On row sums 3, 7, 11: 3; 1.5 + 7 = 8.5; 17 + 11 = 28.
    assert_close(&accumulate(AccKind::SumLastRescale, &x, 3, Some(&r)), &[1, 1], &[28.0], 0.0);
    // An element-wise factor: R [1, 6] tiled like X.
    let re = host(&[1, 6], &[9.0, 9.0, 2.0, 3.0, 0.0, 1.0]);
    // acc_1 = [1, 2]; acc_2 = [2 + 3, 6 + 4] = [5, 10]; acc_3 = [0 + 5, 10 + 6].
    assert_close(&accumulate(AccKind::Rescale, &x, 3, Some(&re)), &[1, 2], &[5.0, 16.0], 0.0);
}

#[test]
fn running_max_outputs_the_max_and_its_change() {
    // X [1, 6], F = 3: tiles [1, 5], [2, 3], [7, 0] → m = 5, 5, 7 and m_prev - m = -∞, 0, -2.
    let mut bg = block(&[&[1, 6]], [1, 1, 1], 3);
    let x = ok(bg.input(0, [None; 3], Some(1)));
    let rm = ok(bg.push(BlockOp::RunningMax { dim: 1 }, &[x]));
    let (m, d) = (rm[0], rm[1]);
    let sum_m = ok(bg.accum(AccKind::Sum, &[m]));
    let max_m = ok(bg.accum(AccKind::Max, &[m]));
    let sum_d = ok(bg.accum(AccKind::Sum, &[d]));
    let max_d = ok(bg.accum(AccKind::Max, &[d]));
    let ed = ok(bg.unary(UnaryOp::Exp, d));
    let sum_ed = ok(bg.accum(AccKind::Sum, &[ed]));
    // m_F through acc_rescale with factor 0: only the last iteration survives.
    let zero = ok(bg.unary(UnaryOp::MulScalar { c: Scalar(0.0) }, m));
    let last_m = ok(bg.accum(AccKind::Rescale, &[m, zero]));
    // (d itself would poison it: -∞ · 0 is NaN.)
    let last_ed = ok(bg.accum(AccKind::Rescale, &[ed, zero]));
    for t in [sum_m, max_m, sum_d, max_d, sum_ed, last_m, last_ed] {
        ok(bg.output(t, [None; 3]));
    }
    let out = run_block(bg, &[host(&[1, 6], &[1.0, 5.0, 2.0, 3.0, 7.0, 0.0])]);
    assert_eq!(out.len(), 7);
    assert_close(&out[0], &[1, 1], &[17.0], 0.0);
    assert_close(&out[1], &[1, 1], &[7.0], 0.0);
    assert_close(&out[2], &[1, 1], &[f32::NEG_INFINITY], 0.0);
    assert_close(&out[3], &[1, 1], &[0.0], 0.0);
    // e^-∞ + e^0 + e^-2
    assert_close(&out[4], &[1, 1], &[1.135_335_3], 1e-6);
    assert_close(&out[5], &[1, 1], &[7.0], 0.0);
    assert_close(&out[6], &[1, 1], &[0.135_335_28], 1e-6);
}

/// softmax(X)·V at kernel level.
fn softmax_v_program(m: usize, n: usize, d: usize) -> KernelGraph {
    let mut g = KernelGraph::new();
    let x = ok(g.input(&[m, n], F32));
    let v = ok(g.input(&[n, d], F32));
    let mx = ok(g.reduce_max(x, 1));
    let s = ok(g.binary(BinaryOp::Sub, x, mx));
    let e = ok(g.exp(s));
    let den = ok(g.reduce_sum(e, 1));
    let p = ok(g.div(e, den));
    let o = ok(g.matmul(p, v));
    ok(g.output(o, None));
    g
}

/// The same as one block graph with an online softmax: grid.x over rows, the loop over N.
fn online_softmax_v(m: usize, n: usize, d: usize, grid_x: usize, frange: usize) -> KernelGraph {
    let mut bg = block(&[&[m, n], &[n, d]], [grid_x, 1, 1], frange);
    let x = ok(bg.input(0, [Some(0), None, None], Some(1)));
    let v = ok(bg.input(1, [None; 3], Some(0)));
    let rm = ok(bg.push(BlockOp::RunningMax { dim: 1 }, &[x]));
    let s = ok(bg.binary(BinaryOp::Sub, x, rm[0]));
    let e = ok(bg.unary(UnaryOp::Exp, s));
    let r = ok(bg.unary(UnaryOp::Exp, rm[1]));
    let pv = ok(bg.matmul(e, v));
    let acc_o = ok(bg.accum(AccKind::Rescale, &[pv, r]));
    let acc_l = ok(bg.accum(AccKind::SumLastRescale, &[e, r]));
    let o = ok(bg.binary(BinaryOp::Div, acc_o, acc_l));
    ok(bg.output(o, [Some(0), None, None]));
    let mut g = KernelGraph::new();
    let tx = ok(g.input(&[m, n], F32));
    let tv = ok(g.input(&[n, d], F32));
    let outs = ok(g.custom(&[tx, tv], bg));
    ok(g.output(outs[0], None));
    g
}

#[test]
fn online_softmax_block_graph_matches_softmax_times_v() {
    let mut rng = StdRng::seed_from_u64(7);
    for (m, n, d, grid_x, frange) in [(8, 32, 4, 2, 4), (4, 16, 8, 4, 8), (6, 12, 3, 3, 1), (2, 64, 16, 1, 16)] {
        // Logits with a spread wide enough that the running max changes between tiles.
        let x = random(&[m, n], &mut rng, -6.0, 6.0);
        let v = random(&[n, d], &mut rng, -1.0, 1.0);
        let want = ok(run(&softmax_v_program(m, n, d), &[x.clone(), v.clone()])).remove(0);
        let got = ok(run(&online_softmax_v(m, n, d, grid_x, frange), &[x, v])).remove(0);
        assert_close(&got, &[m, d], &want.data, 1e-5);
    }
}

#[test]
fn epilogue_after_accumulators() {
    // X [1, 4], F = 2: tiles [1, 2], [3, 4]: acc_sum [4, 6], acc_max [3, 4].
    let mut bg = block(&[&[1, 4]], [1, 1, 1], 2);
    let x = ok(bg.input(0, [None; 3], Some(1)));
    let s = ok(bg.accum(AccKind::Sum, &[x]));
    let m = ok(bg.accum(AccKind::Max, &[x]));
    let diff = ok(bg.binary(BinaryOp::Sub, s, m)); // [1, 2]
    let scaled = ok(bg.unary(UnaryOp::MulScalar { c: Scalar(3.0) }, diff)); // [3, 6]
    let total = ok(bg.op(BlockOp::ReduceSum { dim: 1 }, &[scaled])); // [9]
    let root = ok(bg.unary(UnaryOp::Sqrt, total)); // [3]
    let both = ok(bg.op(BlockOp::Concat { dim: 1 }, &[root, diff])); // [3, 1, 2]
    ok(bg.output(both, [None; 3]));
    let out = run_block(bg, &[host(&[1, 4], &[1.0, 2.0, 3.0, 4.0])]);
    assert_close(&out[0], &[1, 3], &[3.0, 1.0, 2.0], 0.0);
}

#[test]
fn in_loop_ops_run_every_iteration() {
    // exp inside the loop, then acc_sum: Σ e^x over all 4 elements, in tiles of 2.
    let mut bg = block(&[&[1, 4], &[1, 1]], [1, 1, 1], 2);
    let x = ok(bg.input(0, [None; 3], Some(1)));
    let c = ok(bg.input(1, [None; 3], None)); // loaded once, reused every iteration
    let e = ok(bg.unary(UnaryOp::Exp, x));
    let ec = ok(bg.binary(BinaryOp::Mul, e, c));
    let r = ok(bg.op(BlockOp::ReduceSum { dim: 1 }, &[ec]));
    let a = ok(bg.accum(AccKind::Sum, &[r]));
    ok(bg.output(a, [None; 3]));
    let out = run_block(bg, &[host(&[1, 4], &[0.0, 1.0, -1.0, 2.0]), host(&[1, 1], &[2.0])]);
    assert_close(&out[0], &[1, 1], &[2.0 * (1.0 + std::f32::consts::E + 0.367_879_44 + 7.389_056)], 1e-6);
}

#[test]
fn a_kernel_with_two_output_savers() {
    // X [4, 2], grid.x = 2 over rows, F = 2 over columns: tiles [2, 1].
    let mut bg = block(&[&[4, 2]], [2, 1, 1], 2);
    let x = ok(bg.input(0, [Some(0), None, None], Some(1)));
    let s = ok(bg.accum(AccKind::Sum, &[x]));
    let m = ok(bg.accum(AccKind::Max, &[x]));
    ok(bg.output(m, [Some(0), None, None]));
    ok(bg.output(s, [Some(1), None, None]));
    let mut g = KernelGraph::new();
    let t = ok(g.input(&[4, 2], F32));
    let outs = ok(g.custom(&[t], bg));
    assert_eq!(outs.len(), 2);
    assert_eq!(ok(g.desc(outs[0])).shape, vec![4, 1]);
    assert_eq!(ok(g.desc(outs[1])).shape, vec![2, 2]);
    // Program outputs in the other order, plus a kernel-level op on one of them.
    ok(g.output(outs[1], None));
    let neg = ok(g.unary(UnaryOp::Neg, outs[0]));
    ok(g.output(neg, None));
    let x = host(&[4, 2], &[1.0, 5.0, 7.0, 2.0, -1.0, -3.0, 4.0, 4.0]);
    let out = ok(run(&g, &[x]));
    assert_eq!(out.len(), 2);
    // Row sums 6, 9 | -4, 8 laid out [2, 2] with block b at column b.
    assert_close(&out[0], &[2, 2], &[6.0, -4.0, 9.0, 8.0], 0.0);
    assert_close(&out[1], &[4, 1], &[-5.0, -7.0, 1.0, -4.0], 0.0);
}

#[test]
fn block_rms_norm_and_acc_rms_last_agree_with_the_kernel_level() {
    // rms_norm inside a block (over the whole row) equals the kernel-level one with eps.
    let mut rng = StdRng::seed_from_u64(3);
    let x = random(&[4, 8], &mut rng, -2.0, 2.0);
    let want = run_unary_program(&x, |g, t| ok(g.rms_norm(t, 1e-3, None)));
    let mut bg = block(&[&[4, 8]], [2, 1, 1], 1);
    let t = ok(bg.input(0, [Some(0), None, None], None));
    let n = ok(bg.op(BlockOp::RmsNorm { eps: Scalar(1e-3) }, &[t]));
    let a = ok(bg.accum(AccKind::Sum, &[n]));
    ok(bg.output(a, [Some(0), None, None]));
    let got = run_block(bg, std::slice::from_ref(&x)).remove(0);
    assert_close(&got, &[4, 8], &want.data, 1e-6);
    // x / acc_rms_last(x) over a loop of 4 equals rms_norm with eps 0.
    let want = run_unary_program(&x, |g, t| ok(g.rms_norm(t, 0.0, None)));
    let mut bg = block(&[&[4, 8], &[4, 8]], [1, 1, 1], 4);
    let t = ok(bg.input(0, [None; 3], Some(1)));
    let whole = ok(bg.input(1, [None; 3], None));
    let rms = ok(bg.accum(AccKind::RmsLast, &[t]));
    let whole_acc = ok(bg.accum(AccKind::Max, &[whole]));
    let y = ok(bg.binary(BinaryOp::Div, whole_acc, rms));
    ok(bg.output(y, [None; 3]));
    let got = run_block(bg, &[x.clone(), x]).remove(0);
    assert_close(&got, &[4, 8], &want.data, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Input errors
// ---------------------------------------------------------------------------------------------

#[test]
fn evaluator_input_errors() {
    let mut g = KernelGraph::new();
    let a = ok(g.input(&[2, 3], F32));
    let b = ok(g.input(&[3], F32));
    let _ = b;
    ok(g.output(a, None));
    let good = [iota(&[2, 3]), iota(&[3])];
    assert!(run(&g, &good).is_ok());
    assert_eq!(run(&g, &good[..1]), Err(EvalError::InputCount { expected: 2, found: 1 }));
    let three = [iota(&[2, 3]), iota(&[3]), iota(&[3])];
    let e = run(&g, &three).expect_err("three inputs for two parameters");
    assert_eq!(e, EvalError::InputCount { expected: 2, found: 3 });
    assert_eq!(e.to_string(), "the graph takes 2 inputs, 3 were given");
    let e = run(&g, &[iota(&[2, 3]), iota(&[1, 3])]).expect_err("wrong shape");
    assert_eq!(e, EvalError::InputShape { index: 1, expected: vec![3], found: vec![1, 3] });
    assert!(e.to_string().contains("input 1: expected shape [3], found [1, 3]"), "{e}");
    let e = run(&g, &[iota(&[3, 2]), iota(&[3])]).expect_err("transposed shape");
    assert!(matches!(e, EvalError::InputShape { index: 0, .. }), "{e:?}");
    // A tensor whose data disagrees with its shape, built around the checked constructor.
    let short = HostTensor { shape: vec![2, 3], data: vec![0.0; 5] };
    let e = run(&g, &[short, iota(&[3])]).expect_err("short data");
    assert_eq!(e, EvalError::DataLength { shape: vec![2, 3], expected: 6, found: 5 });
    assert!(e.to_string().contains("needs 6 elements, found 5"), "{e}");
    assert_eq!(
        HostTensor::new(vec![2, 2], vec![1.0; 3]),
        Err(EvalError::DataLength { shape: vec![2, 2], expected: 4, found: 3 })
    );
}

#[test]
fn half_precision_host_data_converts_exactly() {
    let h: Vec<half::f16> = [1.5f32, -2.0, 0.25].iter().map(|&v| half::f16::from_f32(v)).collect();
    let b: Vec<half::bf16> = [1.5f32, -2.0, 0.25].iter().map(|&v| half::bf16::from_f32(v)).collect();
    let th = ok(HostTensor::from_f16(vec![3], &h));
    let tb = ok(HostTensor::from_bf16(vec![3], &b));
    assert_eq!(th.data, vec![1.5, -2.0, 0.25]);
    assert_eq!(tb.data, th.data);
    assert!(HostTensor::from_f16(vec![2], &h).is_err());
}
