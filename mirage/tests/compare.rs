//! The comparison every GPU check uses (`mirage::testing::compare`) catches what one relative L2
//! error over the whole tensor let through: one column of the [8, 4096] gated MLP output off by
//! 50%, one element of a qwen [1, 2048] output zeroed, an identity kernel in place of the
//! coverage clamp, an element no kernel wrote (NaN-poisoned). It still passes what correct
//! kernels return: the reference computed with the intermediates a kernel stages in f16/bf16
//! rounded to that type, or with its f32 sums in another order.
//!
//! No GPU is needed: the "kernel outputs" are reference outputs with exactly the rounding or the
//! fault described.

use mirage::DType;
use mirage::ir::{DType as IrDType, KernelGraph};
use mirage::reference::{HostTensor, run, with_every_tensor_out};
use mirage::testing::compare::{
    Comparison, ErrorModel, F32_UNIT_ROUNDOFF, compare, compare_with_spread, reduction_len, worst_elements,
};
use mirage::testing::inputs::{coverage_input_range, golden_input_range, graph_inputs, round_to};
use mirage::testing::programs;
use mirage::testing::rounding::rounding_spread;

/// The check the GPU tests used before: ‖got − want‖ / ‖want‖ only.
fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| f64::from(g - w).powi(2)).sum();
    let den: f64 = want.iter().map(|&w| f64::from(w).powi(2)).sum();
    (num / den).sqrt()
}

fn shapes(g: &KernelGraph) -> Vec<Vec<usize>> {
    g.inputs().iter().map(|d| d.shape.clone()).collect()
}

fn model_for(g: &KernelGraph, dtype: DType) -> ErrorModel {
    let shapes = shapes(g);
    ErrorModel::new(dtype, reduction_len(shapes.iter().map(Vec::as_slice)))
}

fn rounded(dtype: DType, values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| round_to(dtype, v)).collect()
}

fn cmp(got: &[f32], want: &HostTensor, model: ErrorModel) -> Comparison {
    compare(got, &want.data, &want.shape, model).unwrap_or_else(|e| panic!("{e}"))
}

/// `silu(A) * B` for `A, B [m, n]`: the epilogue of a gated MLP whose matmuls were staged.
fn gated_epilogue(m: usize, n: usize) -> KernelGraph {
    let mut g = KernelGraph::new();
    let a = g.input(&[m, n], IrDType::F16).expect("input");
    let b = g.input(&[m, n], IrDType::F16).expect("input");
    let s = g.silu(a).expect("silu");
    let o = g.mul(s, b).expect("mul");
    g.output(o, None).expect("output");
    g
}

/// `X @ W1`, `X @ W2`: the matmuls of a gated MLP as a kernel that stores them.
fn gated_matmuls(m: usize, k: usize, n: usize) -> KernelGraph {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], IrDType::F16).expect("input");
    let w1 = g.input(&[k, n], IrDType::F16).expect("input");
    let w2 = g.input(&[k, n], IrDType::F16).expect("input");
    let a = g.matmul(x, w1).expect("matmul");
    let b = g.matmul(x, w2).expect("matmul");
    g.output(a, None).expect("output");
    g.output(b, None).expect("output");
    g
}

#[test]
fn a_column_off_by_half_is_caught_in_the_gated_mlp() {
    let (m, k, n) = (8, 4096, 4096);
    let program = programs::gated_mlp(m, k, n, IrDType::F16).expect("program");
    let inputs = graph_inputs(&program, 25, |i| golden_input_range("gated_mlp", i));
    let want = run(&program, &inputs).expect("reference").remove(0);
    let model = model_for(&program, DType::F16);

    // A correct two-kernel µGraph: X@W1 and X@W2 stored in f16, then silu(A) * B rounded to f16.
    let staged: Vec<HostTensor> = run(&gated_matmuls(m, k, n), &inputs)
        .expect("matmuls")
        .into_iter()
        .map(|t| HostTensor { data: rounded(DType::F16, &t.data), shape: t.shape })
        .collect();
    let correct = rounded(DType::F16, &run(&gated_epilogue(m, n), &staged).expect("epilogue")[0].data);
    let c = cmp(&correct, &want, model);
    println!("correct staged kernels: {c}");
    assert!(c.passed(), "{c}");

    // One column of typical norm (the median one) 50% too large: the old check (relative L2
    // error ≤ 1e-2) passes it.
    let norm = |c: usize| (0..m).map(|r| f64::from(want.data[r * n + c]).powi(2)).sum::<f64>();
    let mut by_norm: Vec<usize> = (0..n).collect();
    by_norm.sort_by(|&a, &b| norm(a).total_cmp(&norm(b)));
    let column = by_norm[n / 2];
    let mut wrong = correct.clone();
    for row in 0..m {
        wrong[row * n + column] *= 1.5;
    }
    let old = rel_l2(&wrong, &want.data);
    assert!(old < 1e-2, "relative L2 error {old:.2e}");
    let c = cmp(&wrong, &want, model);
    println!("column {column} × 1.5 (relative L2 error {old:.2e}): {c}");
    assert!(!c.passed());
    let worst = c.worst.as_ref().expect("a worst element");
    assert_eq!(worst.index[1], column, "{c}");
    assert!(c.check("gated_mlp").is_err_and(|e| e.contains("MISMATCH") && e.contains("elements outside")));

    // Whichever column it is, unless all its values lie below the noise floor of the output
    // (silu(a)·b is near zero wherever a ≪ 0: a column has all eight rows there about once in
    // 2^8): there half a value is within the tolerance of rounding.
    let mut caught = 0;
    for column in 0..n {
        let mut wrong = correct.clone();
        for row in 0..m {
            wrong[row * n + column] *= 1.5;
        }
        let c = cmp(&wrong, &want, model);
        let visible = (0..m).any(|row| {
            let w = f64::from(want.data[row * n + column].abs());
            0.5 * w
                > 1.01 * (c.atol + c.rtol * w)
                    + f64::from(correct[row * n + column] - want.data[row * n + column]).abs()
        });
        if visible {
            assert!(!c.passed() && c.worst.as_ref().is_some_and(|w| w.index[1] == column), "column {column}: {c}");
        }
        caught += usize::from(!c.passed());
    }
    println!("a column × 1.5 is caught at {caught} of {n} positions");
    assert!(caught * 100 >= n * 99, "{caught} of {n}");
}

/// `silu(X) * Y` for `X, Y [1, k]`: the part of qwen's gated down projection a kernel stages
/// before the matmul.
fn qwen_gate(k: usize) -> KernelGraph {
    let mut g = KernelGraph::new();
    let x = g.input(&[1, k], IrDType::Bf16).expect("input");
    let y = g.input(&[1, k], IrDType::Bf16).expect("input");
    let s = g.silu(x).expect("silu");
    let o = g.mul(s, y).expect("mul");
    g.output(o, None).expect("output");
    g
}

/// `S @ W` for `S [1, k]`, `W [k, n]`.
fn matmul(k: usize, n: usize) -> KernelGraph {
    let mut g = KernelGraph::new();
    let s = g.input(&[1, k], IrDType::Bf16).expect("input");
    let w = g.input(&[k, n], IrDType::Bf16).expect("input");
    let o = g.matmul(s, w).expect("matmul");
    g.output(o, None).expect("output");
    g
}

#[test]
fn one_zeroed_element_is_caught_in_a_qwen_output() {
    let (k, n) = (11008, 2048);
    let case = "qwen2.5_6508b4ab6af4f866";
    let program = programs::qwen_silu_gate_linear(k, n, IrDType::Bf16).expect("program");
    let inputs = graph_inputs(&program, 13, |i| golden_input_range(case, i));
    let want = run(&program, &inputs).expect("reference").remove(0);
    assert_eq!(want.shape, vec![1, n]);
    let model = model_for(&program, DType::Bf16);

    // A correct kernel: silu(X) * Y staged in bf16 (the tensor cores' operand), the matmul
    // accumulated in f32, the output rounded to bf16.
    let gate = run(&qwen_gate(k), &inputs[..2]).expect("gate").remove(0);
    let gate = HostTensor { data: rounded(DType::Bf16, &gate.data), shape: gate.shape };
    let out = run(&matmul(k, n), &[gate, inputs[2].clone()]).expect("matmul").remove(0);
    let correct = rounded(DType::Bf16, &out.data);
    let c = cmp(&correct, &want, model);
    println!("correct staged kernel: {c}");
    assert!(c.passed(), "{c}");

    // One element of typical magnitude (the median |want|) zeroed: the old check (relative L2
    // error ≤ 3e-2) passes it.
    let mut by_magnitude: Vec<usize> = (0..n).collect();
    by_magnitude.sort_by(|&a, &b| want.data[a].abs().total_cmp(&want.data[b].abs()));
    let j = by_magnitude[n / 2];
    let mut wrong = correct.clone();
    wrong[j] = 0.0;
    let old = rel_l2(&wrong, &want.data);
    assert!(old < 3e-2, "relative L2 error {old:.2e}");
    let c = cmp(&wrong, &want, model);
    println!("element {j} zeroed (relative L2 error {old:.2e}): {c}");
    assert!(!c.passed() && c.failed == 1, "{c}");
    assert_eq!(c.worst.as_ref().map(|w| w.index.clone()), Some(vec![0, j]), "{c}");

    // Whichever element it is, unless its true value is itself within the tolerance of zero.
    let mut caught = 0;
    for j in 0..n {
        let mut wrong = correct.clone();
        wrong[j] = 0.0;
        let c = cmp(&wrong, &want, model);
        let allowed = c.atol + c.rtol * f64::from(want.data[j].abs());
        if f64::from(want.data[j].abs()) > 2.0 * allowed {
            assert!(!c.passed(), "element {j} (want {}): {c}", want.data[j]);
        }
        caught += usize::from(!c.passed());
    }
    println!("a single zeroed element is caught at {caught} of {n} positions");
    assert!(caught * 10 >= n * 9, "{caught} of {n}");
}

#[test]
fn an_identity_kernel_fails_the_coverage_clamp() {
    let (name, program) = programs::coverage_cases(IrDType::F16)
        .expect("coverage programs")
        .into_iter()
        .find(|(name, _)| name == "unary_clamp")
        .expect("the clamp program");
    let inputs = graph_inputs(&program, 5, |i| coverage_input_range(&name, i));
    // The clamp to [-0.25, 0.5] is active on both sides of these inputs.
    let below = inputs[0].data.iter().filter(|&&v| v < -0.25).count();
    let above = inputs[0].data.iter().filter(|&&v| v > 0.5).count();
    assert!(below > 0 && above > 0, "{below} inputs below the clamp, {above} above");
    let want = run(&program, &inputs).expect("reference").remove(0);
    let model = model_for(&program, DType::F16);
    assert!(cmp(&rounded(DType::F16, &want.data), &want, model).passed());
    let identity = inputs[0].data.clone();
    let c = cmp(&identity, &want, model);
    println!("identity for clamp: {c}");
    // Every clamped element but those within rounding of the bounds.
    assert!(!c.passed() && c.failed <= below + above && c.failed * 10 >= (below + above) * 9, "{c}");
}

#[test]
fn an_unwritten_element_fails() {
    let program = programs::rmsnorm_linear(2, 256, 384, IrDType::F16).expect("program");
    let inputs = graph_inputs(&program, 3, |_| -1.0..1.0);
    let want = run(&program, &inputs).expect("reference").remove(0);
    let model = model_for(&program, DType::F16);
    let mut got = rounded(DType::F16, &want.data);
    assert!(cmp(&got, &want, model).passed());
    got[384 + 17] = f32::NAN; // the poison a kernel left in place
    let c = cmp(&got, &want, model);
    assert!(!c.passed() && c.failed == 1 && c.rel_l2.is_infinite(), "{c}");
    assert_eq!(c.worst.as_ref().map(|w| w.index.clone()), Some(vec![1, 17]), "{c}");
}

#[test]
fn f32_sums_in_another_order_pass() {
    // An f32 matmul summed in another order (the reduction dimension permuted on both sides)
    // differs from the reference by rounding only.
    let (m, k, n) = (16, 4096, 64);
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], IrDType::F32).expect("input");
    let w = g.input(&[k, n], IrDType::F32).expect("input");
    let o = g.matmul(x, w).expect("matmul");
    g.output(o, None).expect("output");
    let inputs = graph_inputs(&g, 8, |_| -1.0..1.0);
    let want = run(&g, &inputs).expect("reference").remove(0);
    let perm: Vec<usize> = (0..k).map(|i| (i * 1237) % k).collect(); // 1237 is prime to 4096
    let xp =
        HostTensor { shape: vec![m, k], data: (0..m * k).map(|e| inputs[0].data[e / k * k + perm[e % k]]).collect() };
    let wp =
        HostTensor { shape: vec![k, n], data: (0..k * n).map(|e| inputs[1].data[perm[e / n] * n + e % n]).collect() };
    let got = run(&g, &[xp, wp]).expect("permuted").remove(0);
    assert_ne!(got.data, want.data, "a different summation order rounds differently");
    let c = cmp(&got.data, &want, model_for(&g, DType::F32));
    println!("f32 sums in another order: {c}");
    assert!(c.passed(), "{c}");
    // An error of a thousand f32 roundings in one element is not.
    let mut wrong = got.data.clone();
    wrong[5] += (1000.0 * c.scale * f64::from(f32::EPSILON)) as f32;
    assert!(!cmp(&wrong, &want, model_for(&g, DType::F32)).passed());
}

/// The largest |value| of an f16 or bf16 tensor the GPU may stage: well below f16's largest
/// finite value (65504), so that no rounding on the way overflows.
const F16_HEADROOM: f32 = 65504.0 / 4.0;

#[test]
fn the_benchmark_programs_stay_finite_at_their_golden_input_ranges() {
    // The Triton check and the tuner's record name benchmark programs by case name and take
    // their inputs from `golden_input_range`: every tensor must stay far from f16's limit (the
    // first Triton run gave inf on qknorm_gqa at [-1, 1)). The `_bs8` variants have the same
    // rows (head dim, key length) as `_bs1`, only more heads, so `_bs1` decides for both and the
    // reference stays quick.
    let mut checked = 0;
    for b in mirage::testing::benchmarks::benchmark_set().expect("benchmark programs") {
        if b.name.ends_with("_bs8") {
            continue;
        }
        let all = with_every_tensor_out(&b.program).expect("every tensor out");
        let inputs = graph_inputs(&b.program, 1, |i| golden_input_range(b.name, i));
        let values = run(&all, &inputs).unwrap_or_else(|e| panic!("{}: {e}", b.name));
        for (k, t) in values.iter().enumerate() {
            let max = t.data.iter().fold(0.0f32, |m, v| if v.is_finite() { m.max(v.abs()) } else { f32::INFINITY });
            assert!(max <= F16_HEADROOM, "{}: tensor {k} reaches {max:e}", b.name);
        }
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} benchmark programs checked");
}

#[test]
fn the_test_inputs_keep_every_intermediate_finite_in_f16() {
    // The ranges of `golden_input_range` and `coverage_input_range`: every tensor of every golden
    // and coverage program stays finite, and far from f16's limit, so a kernel staging it in f16
    // cannot overflow; the outputs are not all zero (a comparison at scale 0 tests nothing).
    let mut programs_checked = 0;
    let mut largest = (0.0f32, String::new());
    let mut check = |what: &str, g: &KernelGraph, inputs: &[HostTensor]| {
        let all = with_every_tensor_out(g).unwrap_or_else(|e| panic!("{what}: {e}"));
        let values = run(&all, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        for (k, t) in values.iter().enumerate() {
            let max = t.data.iter().fold(0.0f32, |m, v| if v.is_finite() { m.max(v.abs()) } else { f32::INFINITY });
            assert!(max <= F16_HEADROOM, "{what}: tensor {k} reaches {max:e}");
            if max > largest.0 {
                largest = (max, format!("{what} tensor {k}"));
            }
        }
        for (k, t) in values.iter().take(g.outputs().len()).enumerate() {
            assert!(t.data.iter().any(|&v| v != 0.0), "{what}: output {k} is all zero");
        }
        programs_checked += 1;
    };
    for case in programs::golden_cases() {
        let g = (case.program)().expect("program");
        let inputs = graph_inputs(&g, 1, |i| golden_input_range(case.name, i));
        check(case.name, &g, &inputs);
    }
    let mut expected = programs::golden_cases().len();
    for dtype in [IrDType::F16, IrDType::Bf16] {
        let cases = programs::coverage_cases(dtype).expect("coverage programs");
        assert!(cases.len() >= 40, "{dtype:?}: only {} coverage programs", cases.len());
        expected += cases.len();
        for (name, g) in cases {
            let inputs = graph_inputs(&g, 1, |i| coverage_input_range(&name, i));
            check(&name, &g, &inputs);
        }
    }
    assert_eq!(programs_checked, expected);
    println!("largest |value| of any tensor: {:e} ({})", largest.0, largest.1);
}

/// `x − x·1`: zero in exact arithmetic and in the reference, so the output has no scale; its
/// error on a device is the rounding of the values that cancelled, which the rounding spread
/// (`mirage::testing::rounding`) measures: an error of one rounding of `x` passes with it, an
/// error of 10⁻⁴ does not, and without the spread any error fails.
#[test]
fn a_zero_result_is_compared_at_the_rounding_of_what_cancelled() {
    let mut g = KernelGraph::new();
    let x = g.input(&[256], IrDType::F32).expect("input");
    let one = g.unary(mirage::ir::UnaryOp::MulScalar { c: mirage::ir::Scalar(1.0) }, x).expect("mul_scalar");
    let y = g.binary(mirage::ir::BinaryOp::Sub, x, one).expect("sub");
    g.output(y, None).expect("output");
    let inputs = graph_inputs(&g, 3, |_| -1.0..1.0);
    let want = run(&g, &inputs).expect("reference");
    assert!(want[0].data.iter().all(|&v| v == 0.0));
    let spread = rounding_spread(&g, &inputs, &want).expect("spread");
    let x = &inputs[0].data;
    // Every element's spread is about the rounding of |x|, none zero.
    for (s, &v) in spread[0].iter().zip(x) {
        assert!(*s > 0.0 && *s <= 2.0 * F32_UNIT_ROUNDOFF * f64::from(v.abs()), "spread {s:e} at |x| = {v}");
    }
    let model = ErrorModel::new(DType::F32, 1);
    let one_rounding: Vec<f32> = x.iter().map(|&v| (f64::from(v) * F32_UNIT_ROUNDOFF) as f32).collect();
    let c = compare_with_spread(&one_rounding, &want[0].data, &[256], model, &spread[0]).expect("lengths");
    assert!(c.passed(), "{c}");
    assert!(!cmp(&one_rounding, &want[0], model).passed(), "without the spread a zero result has no tolerance");
    let wrong: Vec<f32> = vec![1e-4; 256];
    let c = compare_with_spread(&wrong, &want[0].data, &[256], model, &spread[0]).expect("lengths");
    assert!(!c.passed() && c.failed == 256, "{c}");
    assert!(c.to_string().contains("propagated rounding spread up to"), "{c}");
}

/// The worst elements of a comparison come worst first with their indices, and a spread of
/// the wrong length is an error.
#[test]
fn worst_elements_are_listed_worst_first_and_the_spread_must_fit() {
    let want = vec![1.0f32; 6];
    let mut got = want.clone();
    got[4] = 1.5;
    got[1] = 1.1;
    let model = ErrorModel::new(DType::F16, 1);
    let c = compare(&got, &want, &[2, 3], model).expect("lengths");
    let worst = worst_elements(&got, &want, &[2, 3], &c, &[], 2);
    assert_eq!(worst.iter().map(|e| e.index.clone()).collect::<Vec<_>>(), vec![vec![1, 1], vec![0, 1]]);
    assert!(worst[0].ratio() > worst[1].ratio() && worst[1].ratio() > 1.0);
    assert_eq!(worst[0].got, 1.5);
    let e = compare_with_spread(&got, &want, &[2, 3], model, &[0.0; 5]).expect_err("5 spreads for 6 elements");
    assert_eq!(e.to_string(), "expected a rounding spread of 6 elements, found 5");
}
