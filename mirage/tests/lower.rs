//! `mirage::lower`: every DSL construct lowers to the graph built by hand with the IR builders,
//! lowered programs compute the expected numbers in the reference interpreter, the benchmark
//! programs written in the DSL match `mirage::testing::programs`, errors carry positions, and no input
//! makes the parser panic.
#![cfg(feature = "build")]

use mirage::ir::{BinaryOp, DType, Dsl, IrError, KernelGraph, KernelOp, TensorDesc, UnaryOp};
use mirage::lower::{LowerError, Program, lower, lower_source};
use mirage::reference::{HostTensor, run};
use mirage::testing::programs;
use proptest::prelude::*;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Lowers a source holding exactly one `#[mugraph]` function.
fn lower1(src: &str) -> Result<Program> {
    let mut programs = lower_source(src)?;
    if programs.len() != 1 {
        return Err(format!("expected one program, found {}", programs.len()).into());
    }
    Ok(programs.remove(0))
}

/// The body of a function `f` with the given signature, wrapped as a source file.
fn src(sig: &str, body: &str) -> String {
    format!("#[mugraph]\nfn f({sig}) {{\n{body}\n}}\n")
}

/// Asserts the lowered graph is the hand-built one (same canonical hash) and returns it.
fn assert_lowers_to(source: &str, expected: &KernelGraph) -> Result<Program> {
    let p = lower1(source)?;
    assert_eq!(
        p.graph.canonical_hash(),
        expected.canonical_hash(),
        "lowered graph differs:\n{:#?}\nexpected:\n{:#?}",
        p.graph.nodes(),
        expected.nodes()
    );
    Ok(p)
}

fn lower_err(source: &str) -> LowerError {
    match lower_source(source) {
        Ok(p) => panic!("expected an error, lowered {} programs", p.len()),
        Err(e) => e,
    }
}

/// A graph with inputs of the given shapes (all f32, row-major) built by `body`, whose result is
/// the single output.
fn graph(
    inputs: &[&[usize]],
    body: impl FnOnce(&mut KernelGraph, &[mirage::ir::TensorRef]) -> std::result::Result<mirage::ir::TensorRef, IrError>,
) -> Result<KernelGraph> {
    let mut g = KernelGraph::new();
    let refs = inputs.iter().map(|s| g.input(s, DType::F32)).collect::<std::result::Result<Vec<_>, _>>()?;
    let out = body(&mut g, &refs)?;
    g.output(out, None)?;
    Ok(g)
}

#[test]
fn unary_functions_and_methods() -> Result<()> {
    // Every operator of the table the language calls by name.
    let cases: Vec<(&str, UnaryOp)> =
        UnaryOp::ALL.into_iter().filter(|op| op.spec().dsl == Dsl::Function).map(|op| (op.name(), op)).collect();
    assert!(cases.contains(&("tanh", UnaryOp::Tanh)) && cases.contains(&("sigmoid", UnaryOp::Sigmoid)));
    for (name, op) in cases {
        let expected = graph(&[&[4, 8]], |g, x| g.unary(op, x[0]))?;
        let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
        assert_lowers_to(&src(sig, &format!("{name}(x)")), &expected)?;
        assert_lowers_to(&src(sig, &format!("x.{name}()")), &expected)?;
    }
    Ok(())
}

#[test]
fn clamp_and_scalars() -> Result<()> {
    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
    let clamp = UnaryOp::Clamp { lo: mirage::ir::Scalar(-1.0), hi: mirage::ir::Scalar(2.5) };
    let expected = graph(&[&[4, 8]], |g, x| g.unary(clamp, x[0]))?;
    assert_lowers_to(&src(sig, "clamp(x, -1.0, 2.5)"), &expected)?;
    assert_lowers_to(&src(sig, "x.clamp(-(0.5 * 2.0), 2.5)"), &expected)?;

    let mul = |c: f32| UnaryOp::MulScalar { c: mirage::ir::Scalar(c) };
    let expected = graph(&[&[4, 8]], |g, x| g.unary(mul(0.5), x[0]))?;
    assert_lowers_to(&src(sig, "x * 0.5"), &expected)?;
    assert_lowers_to(&src(sig, "0.5 * x"), &expected)?;
    assert_lowers_to(&src(sig, "x / 2.0"), &expected)?;
    assert_lowers_to(&src(sig, "(x) * (1.0 / 2.0)"), &expected)?;

    let expected = graph(&[&[4, 8]], |g, x| g.unary(UnaryOp::Recip, x[0]))?;
    assert_lowers_to(&src(sig, "1.0 / x"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| {
        let r = g.unary(UnaryOp::Recip, x[0])?;
        g.unary(mul(3.0), r)
    })?;
    assert_lowers_to(&src(sig, "3.0 / x"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| g.unary(UnaryOp::Neg, x[0]))?;
    assert_lowers_to(&src(sig, "-x"), &expected)?;
    Ok(())
}

#[test]
fn binary_operators_broadcast() -> Result<()> {
    for (sym, op) in [("+", BinaryOp::Add), ("-", BinaryOp::Sub), ("*", BinaryOp::Mul), ("/", BinaryOp::Div)] {
        let expected = graph(&[&[4, 8], &[1, 8]], |g, x| g.binary(op, x[0], x[1]))?;
        let sig = "a: Tensor<f32, 4, 8>, b: Tensor<f32, 1, 8>) -> (Tensor<f32, 4, 8>";
        assert_lowers_to(&src(sig, &format!("a {sym} b")), &expected)?;
    }
    // Both sides broadcast: [4, 1] op [1, 8] -> [4, 8].
    let expected = graph(&[&[4, 1], &[1, 8]], |g, x| g.mul(x[0], x[1]))?;
    assert_lowers_to(&src("a: Tensor<f32, 4, 1>, b: Tensor<f32, 1, 8>) -> (Tensor<f32, 4, 8>", "a * b"), &expected)?;
    // pow between tensors, and literal exponents.
    let expected = graph(&[&[4, 8], &[4, 8]], |g, x| g.binary(BinaryOp::Pow, x[0], x[1]))?;
    let sig = "a: Tensor<f32, 4, 8>, b: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
    assert_lowers_to(&src(sig, "pow(a, b)"), &expected)?;
    assert_lowers_to(&src(sig, "a.pow(b)"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| g.unary(UnaryOp::Square, x[0]))?;
    assert_lowers_to(&src("a: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>", "pow(a, 2.0)"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| g.unary(UnaryOp::Sqrt, x[0]))?;
    assert_lowers_to(&src("a: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>", "a.pow(0.5)"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| g.unary(UnaryOp::Recip, x[0]))?;
    assert_lowers_to(&src("a: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>", "pow(a, -1.0)"), &expected)?;
    let e = lower_err(&src("a: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>", "pow(a, 3.0)"));
    assert!(e.message.contains("exponent 3"), "{e}");
    Ok(())
}

#[test]
fn matmul_reductions_norms_concat() -> Result<()> {
    let expected = graph(&[&[2, 4, 8], &[2, 8, 16]], |g, x| g.matmul(x[0], x[1]))?;
    let sig = "a: Tensor<f32, 2, 4, 8>, b: Tensor<f32, 2, 8, 16>) -> (Tensor<f32, 2, 4, 16>";
    assert_lowers_to(&src(sig, "a.matmul(b)"), &expected)?;
    assert_lowers_to(&src(sig, "matmul(a, b)"), &expected)?;

    let expected = graph(&[&[4, 8]], |g, x| g.reduce_sum(x[0], 1))?;
    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 1>";
    for body in ["x.sum(1)", "sum(x, 1)", "reduce_sum(x, 1)", "x.reduce_sum(1)"] {
        assert_lowers_to(&src(sig, body), &expected)?;
    }
    let expected = graph(&[&[4, 8]], |g, x| g.reduce_max(x[0], 0))?;
    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 1, 8>";
    for body in ["x.max(0)", "max(x, 0)", "reduce_max(x, 0)"] {
        assert_lowers_to(&src(sig, body), &expected)?;
    }

    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
    let expected = graph(&[&[4, 8]], |g, x| g.rms_norm(x[0], 0.0, None))?;
    assert_lowers_to(&src(sig, "rms_norm(x)"), &expected)?;
    assert_lowers_to(&src(sig, "x.rms_norm()"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| g.rms_norm(x[0], 1e-6, None))?;
    assert_lowers_to(&src(sig, "rms_norm(x, 1e-6)"), &expected)?;
    let expected = graph(&[&[4, 8], &[1, 8]], |g, x| g.rms_norm(x[0], 1e-5, Some(x[1])))?;
    let sig = "x: Tensor<f32, 4, 8>, w: Tensor<f32, 1, 8>) -> (Tensor<f32, 4, 8>";
    assert_lowers_to(&src(sig, "rms_norm_weighted(x, w, 1e-5)"), &expected)?;
    assert_lowers_to(&src(sig, "x.rms_norm_weighted(w, 1e-5)"), &expected)?;

    let expected = graph(&[&[4, 8], &[4, 3]], |g, x| g.concat(x[0], x[1], 1))?;
    let sig = "a: Tensor<f32, 4, 8>, b: Tensor<f32, 4, 3>) -> (Tensor<f32, 4, 11>";
    assert_lowers_to(&src(sig, "concat(a, b, 1)"), &expected)?;
    assert_lowers_to(&src(sig, "a.concat(b, 1)"), &expected)?;
    Ok(())
}

#[test]
fn softmax_subtracts_the_row_maximum_with_a_shared_exp() -> Result<()> {
    let expected = graph(&[&[4, 8]], |g, x| {
        let m = g.reduce_max(x[0], 1)?;
        let shifted = g.binary(BinaryOp::Sub, x[0], m)?;
        let e = g.exp(shifted)?;
        let s = g.reduce_sum(e, 1)?;
        g.div(e, s)
    })?;
    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
    let p = assert_lowers_to(&src(sig, "softmax(x, 1)"), &expected)?;
    assert_lowers_to(&src(sig, "let e = exp(x - x.max(1));\ne / e.sum(1)"), &expected)?;
    assert_eq!(p.graph.nodes().len(), 7, "input, reduce_max, sub, exp, reduce_sum, div, output");
    Ok(())
}

#[test]
fn the_unshifted_softmax_stays_writable_and_differs_from_softmax() -> Result<()> {
    let unshifted = graph(&[&[4, 8]], |g, x| {
        let e = g.exp(x[0])?;
        let s = g.reduce_sum(e, 1)?;
        g.div(e, s)
    })?;
    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
    assert_lowers_to(&src(sig, "let e = exp(x);\ne / e.sum(1)"), &unshifted)?;
    let safe = lower1(&src(sig, "softmax(x, 1)"))?;
    assert_ne!(safe.graph.canonical_hash(), unshifted.canonical_hash(), "two programs, two cache keys");
    Ok(())
}

#[test]
fn lets_shadowing_tuples_and_annotations() -> Result<()> {
    let mut expected = KernelGraph::new();
    let x = expected.input(&[4, 8], DType::F16)?;
    let e = expected.exp(x)?;
    let s = expected.reduce_sum(e, 1)?;
    expected.output(e, None)?;
    expected.output(s, None)?;
    let source = "#[mugraph]\npub fn two(x: Tensor<f16, 4, 8>) -> (Tensor<f16, 4, 8>, Tensor<f16, 4, 1>) {\n\
                  let x: Tensor<f16, 4, 8> = x.exp();\nlet s = x.sum(1);\n(x, s)\n}";
    let p = assert_lowers_to(source, &expected)?;
    assert!(p.tuple_result);
    assert_eq!(p.outputs, vec![TensorDesc::new(&[4, 8], DType::F16), TensorDesc::new(&[4, 1], DType::F16)]);
    assert_eq!(p.params.len(), 1);
    assert_eq!(p.params[0].name, "x");
    Ok(())
}

#[test]
fn strides_become_input_strides() -> Result<()> {
    let p = lower1(&src("#[strides(1, 4)] w: Tensor<bf16, 4, 6>) -> (Tensor<bf16, 4, 6>", "w * 2.0"))?;
    assert_eq!(p.params[0].desc, TensorDesc { shape: vec![4, 6], strides: vec![1, 4], dtype: DType::Bf16 });
    match &p.graph.nodes()[0].op {
        KernelOp::Input { desc } => assert_eq!(desc.strides, vec![1, 4]),
        other => panic!("expected an input, found {other:?}"),
    }
    Ok(())
}

#[test]
fn finds_programs_in_nested_modules_with_their_paths() -> Result<()> {
    let source = r#"
        use mirage::prelude::*;
        #[mugraph]
        fn top(x: Tensor<f32, 2, 2>) -> Tensor<f32, 2, 2> { exp(x) }
        fn not_a_program() {}
        mod a {
            pub mod b {
                #[mirage::mugraph]
                pub(crate) fn deep(x: Tensor<f32, 2, 2>) -> Tensor<f32, 2, 2> { relu(x) }
            }
            #[mugraph]
            fn middle(x: Tensor<f32, 2, 2>) -> Tensor<f32, 2, 2> { silu(x) }
        }
        mod outline;
    "#;
    let programs = lower_source(source)?;
    let found: Vec<(String, Vec<String>)> = programs.iter().map(|p| (p.name.clone(), p.module_path.clone())).collect();
    assert_eq!(
        found,
        vec![
            ("top".to_string(), vec![]),
            ("deep".to_string(), vec!["a".to_string(), "b".to_string()]),
            ("middle".to_string(), vec!["a".to_string()]),
        ]
    );
    Ok(())
}

#[test]
fn lower_of_an_item_fn() -> Result<()> {
    let item: syn::ItemFn = syn::parse_str("fn g(x: Tensor<f16, 8, 8>) -> Tensor<f16, 8, 8> { x.matmul(x) }")?;
    let p = lower(&item)?;
    assert_eq!(p.name, "g");
    assert_eq!(p.graph.num_kernels(), 1);
    Ok(())
}

#[test]
fn fingerprint_ignores_formatting_and_let_names_but_not_the_program() -> Result<()> {
    let a = lower1("#[mugraph] fn f(x: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> { let t = exp(x); t * 2.0 }")?;
    let b = lower1(
        "#[mugraph]\nfn f(\n  x: Tensor<f16, 4, 8>,\n) -> Tensor<f16, 4, 8> {\n  // c\n  let other = x.exp();\n  (other) * 2.0\n}",
    )?;
    let c = lower1("#[mugraph] fn f(x: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> { let t = exp(x); t * 3.0 }")?;
    let d = lower1("#[mugraph] fn g(x: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> { let t = exp(x); t * 2.0 }")?;
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(a.fingerprint_hash, b.fingerprint_hash);
    assert_ne!(a.fingerprint, c.fingerprint);
    assert_ne!(a.fingerprint, d.fingerprint);
    assert_eq!(a.fingerprint_hash.len(), 16);
    assert_eq!(
        a.fingerprint,
        "mugraph-dsl v1\nfn f\nparam x: f16 [4, 8] strides [8, 1]\n%0 = param(0)(): f16 [4, 8]\n\
         %1 = exp(%0): f16 [4, 8]\n%2 = mul_scalar(2.0)(%1): f16 [4, 8]\nreturn %2\n"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Numbers: lowered programs in the reference interpreter.

fn t(shape: &[usize], data: &[f32]) -> Result<HostTensor> {
    Ok(HostTensor::new(shape.to_vec(), data.to_vec())?)
}

fn run1(source: &str, inputs: &[HostTensor]) -> Result<HostTensor> {
    let p = lower1(source)?;
    let mut out = run(&p.graph, inputs)?;
    Ok(out.remove(0))
}

fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!(x == y || (x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{a:?} != {b:?}");
    }
}

#[test]
fn numbers_of_small_programs() -> Result<()> {
    let x = t(&[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 4.0])?;
    let y = run1(&src("x: Tensor<f32, 2, 3>) -> (Tensor<f32, 2, 3>", "2.0 / x * 0.5 - -x"), std::slice::from_ref(&x))?;
    // (2/x)*0.5 - (-x) = 1/x + x
    assert_close(&y.data, &[2.0, 2.5, 3.0 + 1.0 / 3.0, -2.0, f32::INFINITY, 4.25]);

    let y = run1(&src("x: Tensor<f32, 2, 3>) -> (Tensor<f32, 2, 1>", "x.max(1) + x.sum(1)"), std::slice::from_ref(&x))?;
    assert_close(&y.data, &[3.0 + 6.0, 4.0 + 3.0]);

    let y = run1(&src("x: Tensor<f32, 2, 3>) -> (Tensor<f32, 2, 3>", "softmax(x, 1)"), std::slice::from_ref(&x))?;
    let row = |r: &[f32]| {
        let s: f32 = r.iter().map(|v| v.exp()).sum();
        r.iter().map(|v| v.exp() / s).collect::<Vec<_>>()
    };
    let expected: Vec<f32> = row(&x.data[..3]).into_iter().chain(row(&x.data[3..])).collect();
    assert_close(&y.data, &expected);

    // Logits far beyond f32's exp range: the safe softmax is exact, the unshifted form overflows.
    let big = t(&[1, 3], &[1000.0, 999.0, -1000.0])?;
    let safe = run1(&src("x: Tensor<f32, 1, 3>) -> (Tensor<f32, 1, 3>", "softmax(x, 1)"), std::slice::from_ref(&big))?;
    let (a, b) = (1.0 / (1.0 + (-1.0f32).exp()), (-1.0f32).exp() / (1.0 + (-1.0f32).exp()));
    assert_close(&safe.data, &[a, b, 0.0]);
    let unshifted = run1(
        &src("x: Tensor<f32, 1, 3>) -> (Tensor<f32, 1, 3>", "let e = exp(x);\ne / e.sum(1)"),
        std::slice::from_ref(&big),
    )?;
    assert!(unshifted.data[0].is_nan(), "inf / inf: {:?}", unshifted.data);

    let y = run1(&src("x: Tensor<f32, 2, 3>) -> (Tensor<f32, 2, 3>", "clamp(x, 0.0, 2.5)"), std::slice::from_ref(&x))?;
    assert_close(&y.data, &[1.0, 2.0, 2.5, 0.0, 0.0, 2.5]);

    let w = t(&[1, 3], &[1.0, 2.0, 0.5])?;
    let y = run1(
        &src("x: Tensor<f32, 2, 3>, w: Tensor<f32, 1, 3>) -> (Tensor<f32, 2, 3>", "rms_norm_weighted(x, w, 0.0)"),
        &[x.clone(), w],
    )?;
    let rms0 = ((1.0f32 + 4.0 + 9.0) / 3.0).sqrt();
    let rms1 = ((1.0f32 + 0.0 + 16.0) / 3.0).sqrt();
    assert_close(&y.data, &[1.0 / rms0, 4.0 / rms0, 1.5 / rms0, -1.0 / rms1, 0.0, 2.0 / rms1]);

    let b = t(&[2, 1], &[7.0, 8.0])?;
    let y = run1(
        &src("a: Tensor<f32, 2, 3>, b: Tensor<f32, 2, 1>) -> (Tensor<f32, 2, 4>", "concat(a, b * 2.0, 1)"),
        &[x.clone(), b],
    )?;
    assert_close(&y.data, &[1.0, 2.0, 3.0, 14.0, -1.0, 0.0, 4.0, 16.0]);

    let m = t(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0])?;
    let y =
        run1(&src("a: Tensor<f32, 2, 3>, m: Tensor<f32, 3, 2>) -> (Tensor<f32, 2, 2>", "relu(a.matmul(m))"), &[x, m])?;
    assert_close(&y.data, &[4.0, 5.0, 3.0, 4.0]);
    Ok(())
}

#[test]
fn scalar_add_and_subtract() -> Result<()> {
    let sig = "x: Tensor<f32, 4, 8>) -> (Tensor<f32, 4, 8>";
    let add = |c: f32| UnaryOp::AddScalar { c: mirage::ir::Scalar(c) };
    let expected = graph(&[&[4, 8]], |g, x| g.unary(add(1e-5), x[0]))?;
    assert_lowers_to(&src(sig, "x + 1e-5"), &expected)?;
    assert_lowers_to(&src(sig, "1e-5 + x"), &expected)?;
    assert_lowers_to(&src(sig, "x - -1e-5"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| g.unary(add(-0.25), x[0]))?;
    assert_lowers_to(&src(sig, "x - 0.25"), &expected)?;
    let expected = graph(&[&[4, 8]], |g, x| {
        let n = g.unary(UnaryOp::Neg, x[0])?;
        g.unary(add(1.0), n)
    })?;
    assert_lowers_to(&src(sig, "1.0 - x"), &expected)?;
    let x = t(&[4, 8], &(0..32).map(|v| v as f32 * 0.25).collect::<Vec<_>>())?;
    let y = run1(&src(sig, "(1.0 - x) * 2.0 + 0.5"), std::slice::from_ref(&x))?;
    assert_close(&y.data, &x.data.iter().map(|v| (1.0 - v) * 2.0 + 0.5).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn layer_norm_is_rms_norm_of_the_centered_input() -> Result<()> {
    let sig = "x: Tensor<f32, 2, 4>, w: Tensor<f32, 1, 4>, b: Tensor<f32, 1, 4>) -> (Tensor<f32, 2, 4>";
    let expected = graph(&[&[2, 4], &[1, 4], &[1, 4]], |g, x| {
        let s = g.reduce_sum(x[0], 1)?;
        let m = g.unary(UnaryOp::MulScalar { c: mirage::ir::Scalar(0.25) }, s)?;
        let c = g.binary(BinaryOp::Sub, x[0], m)?;
        let y = g.rms_norm(c, 1e-5, Some(x[1]))?;
        g.add(y, x[2])
    })?;
    assert_lowers_to(&src(sig, "layer_norm_weighted(x, w, b, 1e-5)"), &expected)?;
    assert_lowers_to(&src(sig, "x.layer_norm_weighted(w, b, 1e-5)"), &expected)?;
    // Numbers: (x - mean) / sqrt(var + eps) · w + b.
    let x = t(&[2, 4], &[1.0, 2.0, 3.0, 6.0, -1.0, 0.0, 1.0, 0.0])?;
    let w = t(&[1, 4], &[1.0, 2.0, 0.5, 1.0])?;
    let b = t(&[1, 4], &[0.0, 1.0, 0.0, -1.0])?;
    let y = run1(&src(sig, "layer_norm_weighted(x, w, b, 1e-5)"), &[x.clone(), w.clone(), b.clone()])?;
    let mut want = Vec::new();
    for row in x.data.chunks(4) {
        let mean = row.iter().sum::<f32>() / 4.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 4.0;
        for (k, v) in row.iter().enumerate() {
            want.push((v - mean) / (var + 1e-5).sqrt() * w.data[k] + b.data[k]);
        }
    }
    assert_close(&y.data, &want);
    let plain = run1(&src("x: Tensor<f32, 2, 4>) -> (Tensor<f32, 2, 4>", "layer_norm(x)"), std::slice::from_ref(&x))?;
    assert!((plain.data.iter().take(4).sum::<f32>()).abs() < 1e-5, "centered: {:?}", plain.data);
    Ok(())
}

#[test]
fn rope_gather_and_argmax() -> Result<()> {
    use mirage::ir::RopeLayout;
    for (name, layout) in [("rope", RopeLayout::HalfSplit), ("rope_interleaved", RopeLayout::Interleaved)] {
        let sig = "x: Tensor<f32, 3, 16>, c: Tensor<f32, 3, 4>, s: Tensor<f32, 3, 4>) -> (Tensor<f32, 3, 16>";
        let expected = graph(&[&[3, 16], &[3, 4], &[3, 4]], |g, x| g.rope(layout, x[0], x[1], x[2]))?;
        assert_lowers_to(&src(sig, &format!("{name}(x, c, s)")), &expected)?;
        assert_lowers_to(&src(sig, &format!("x.{name}(c, s)")), &expected)?;
    }
    let p = lower1(&src(
        "emb: Tensor<f16, 100, 64>, ids: Tensor<i32, 2, 8>) -> (Tensor<f16, 2, 8, 64>",
        "gather(emb, ids)",
    ))?;
    assert_eq!(p.params[1].desc.dtype, DType::I32);
    assert!(matches!(p.graph.nodes()[2].op, KernelOp::Gather));
    let p = lower1(&src("x: Tensor<f32, 2, 10>) -> (Tensor<i32, 2, 1>", "x.argmax(1)"))?;
    assert_eq!(p.outputs[0], TensorDesc::new(&[2, 1], DType::I32));
    // Greedy decoding: the next token's embedding.
    let sig = "h: Tensor<f32, 1, 4>, w: Tensor<f32, 4, 3>, emb: Tensor<f32, 3, 2>) -> (Tensor<f32, 1, 1, 2>";
    let h = t(&[1, 4], &[1.0, 0.0, 2.0, 0.0])?;
    let w = t(&[4, 3], &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0])?;
    let emb = t(&[3, 2], &[10.0, 11.0, 20.0, 21.0, 30.0, 31.0])?;
    let y = run1(&src(sig, "gather(emb, argmax(h.matmul(w), 1))"), &[h, w, emb])?;
    // logits [0, 3, 4]: token 2.
    assert_close(&y.data, &[30.0, 31.0]);
    Ok(())
}

#[test]
fn index_tensors_only_feed_gather_and_results() {
    let e = lower_err(&src("ids: Tensor<i32, 8>) -> (Tensor<i32, 8>", "ids * 2.0"));
    assert!(e.message.contains("computes on floats") && e.message.contains("Tensor<i32, 8>"), "{e}");
    let e = lower_err(&src("t: Tensor<f32, 10, 4>, ids: Tensor<f32, 8>) -> (Tensor<f32, 8, 4>", "gather(t, ids)"));
    assert!(e.message.contains("the ids of `gather` must be `Tensor<i32"), "{e}");
    let e = lower_err(&src("t: Tensor<f32, 10, 4, 2>, ids: Tensor<i32, 8>) -> (Tensor<f32, 8, 4>", "gather(t, ids)"));
    assert!(e.message.contains("rank 2"), "{e}");
    let e = lower_err(&src(
        "x: Tensor<f32, 3, 12>, c: Tensor<f32, 3, 4>, s: Tensor<f32, 3, 4>) -> (Tensor<f32, 3, 12>",
        "rope(x, c, s)",
    ));
    assert!(e.message.contains("twice it must divide"), "{e}");
    let e = lower_err(&src("x: Tensor<f32, 2, 10>) -> (Tensor<f32, 2, 1>", "argmax(x, 1)"));
    assert!(e.message.contains("Tensor<i32, 2, 1>"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The benchmark programs in the DSL.

#[test]
fn gated_mlp_matches_its_builder() -> Result<()> {
    let source = r#"
        #[mugraph]
        pub fn gated_mlp(x: Tensor<f16, 8, 4096>, w1: Tensor<f16, 4096, 4096>, w2: Tensor<f16, 4096, 4096>)
            -> Tensor<f16, 8, 4096>
        {
            silu(x.matmul(w1)) * x.matmul(w2)
        }
    "#;
    assert_lowers_to(source, &programs::gated_mlp(8, 4096, 4096, DType::F16)?)?;
    Ok(())
}

#[test]
fn rmsnorm_linear_matches_its_builder() -> Result<()> {
    for m in [2, 16] {
        let source = format!(
            "#[mugraph] fn rmsnorm_linear(x: Tensor<f16, {m}, 4096>, w: Tensor<f16, 4096, 6144>) -> Tensor<f16, {m}, 6144> {{ rms_norm(x).matmul(w) }}"
        );
        assert_lowers_to(&source, &programs::rmsnorm_linear(m, 4096, 6144, DType::F16)?)?;
    }
    Ok(())
}

#[test]
fn lora_matches_its_builder() -> Result<()> {
    let source = r#"
        #[mugraph]
        fn lora(x: Tensor<f16, 16, 256>, w: Tensor<f16, 256, 4096>, a: Tensor<f16, 256, 16>, b: Tensor<f16, 16, 4096>)
            -> Tensor<f16, 16, 4096>
        {
            x.matmul(w) + x.matmul(a).matmul(b)
        }
    "#;
    assert_lowers_to(source, &programs::lora(16, 256, 4096, 16, DType::F16)?)?;
    Ok(())
}

#[test]
fn gqa_matches_its_builder() -> Result<()> {
    for h in [2, 16] {
        let source = format!(
            "#[mugraph]
            fn gqa(q: Tensor<f16, {h}, 256, 64>, k: Tensor<f16, {h}, 64, 4096>, v: Tensor<f16, {h}, 4096, 64>)
                -> Tensor<f16, {h}, 256, 64>
            {{
                let e = exp(q.matmul(k));
                (e / e.sum(2)).matmul(v)
            }}"
        );
        assert_lowers_to(&source, &programs::gqa(h, 256, 4096, 64, DType::F16)?)?;
    }
    Ok(())
}

#[test]
fn qknorm_gqa_matches_the_hand_built_graph() -> Result<()> {
    let source = r#"
        #[mugraph]
        fn qknorm_gqa(q: Tensor<f16, 2, 256, 64>, k: Tensor<f16, 2, 64, 4096>, v: Tensor<f16, 2, 4096, 64>)
            -> Tensor<f16, 2, 256, 64>
        {
            let scores = rms_norm(q).matmul(k);
            softmax(scores, 2).matmul(rms_norm(v))
        }
    "#;
    let mut g = KernelGraph::new();
    let q = g.input(&[2, 256, 64], DType::F16)?;
    let k = g.input(&[2, 64, 4096], DType::F16)?;
    let v = g.input(&[2, 4096, 64], DType::F16)?;
    let qn = g.rms_norm(q, 0.0, None)?;
    let s = g.matmul(qn, k)?;
    let m = g.reduce_max(s, 2)?;
    let s = g.binary(BinaryOp::Sub, s, m)?;
    let e = g.exp(s)?;
    let sum = g.reduce_sum(e, 2)?;
    let p = g.div(e, sum)?;
    let vn = g.rms_norm(v, 0.0, None)?;
    let o = g.matmul(p, vn)?;
    g.output(o, None)?;
    assert_lowers_to(source, &g)?;
    Ok(())
}

#[test]
fn ntrans_matches_its_builder() -> Result<()> {
    for m in [8, 64] {
        let source = format!(
            "#[mugraph]
            fn ntrans(h: Tensor<f16, {m}, 4096>, x: Tensor<f16, {m}, 4096>, alpha: Tensor<f16, {m}, 4096>)
                -> Tensor<f16, {m}, 4096>
            {{
                rms_norm(x + alpha * (rms_norm(h) + x))
            }}"
        );
        assert_lowers_to(&source, &programs::ntrans(m, 4096, DType::F16)?)?;
    }
    Ok(())
}

#[test]
fn qwen_programs_with_strides_match_their_builders() -> Result<()> {
    let source = r#"
        #[mugraph]
        fn qwen_qkv(x: Tensor<bf16, 1, 3584>, gain: Tensor<bf16, 1, 3584>, #[strides(1, 3584)] w: Tensor<bf16, 3584, 4608>)
            -> Tensor<bf16, 1, 4608>
        {
            (rms_norm(x) * gain).matmul(w)
        }
    "#;
    assert_lowers_to(source, &programs::qwen_rmsnorm_gain_linear(3584, 4608, DType::Bf16)?)?;
    for (k, n) in [(18944, 3584), (11008, 2048)] {
        let source = format!(
            "#[mugraph]
            fn qwen_down(x: Tensor<bf16, 1, {k}>, y: Tensor<bf16, 1, {k}>, #[strides(1, {k})] w: Tensor<bf16, {k}, {n}>)
                -> Tensor<bf16, 1, {n}>
            {{
                (silu(x) * y).matmul(w)
            }}"
        );
        assert_lowers_to(&source, &programs::qwen_silu_gate_linear(k, n, DType::Bf16)?)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Errors.

#[test]
fn errors_carry_line_column_and_message() {
    let e = lower_err("// header\n#[mugraph]\nfn f(x: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> {\n    y + x\n}\n");
    assert_eq!((e.file.as_str(), e.line, e.column), ("<source>", 4, 5), "{e}");
    assert!(e.message.contains("unknown name `y`"), "{e}");
    assert!(e.to_string().starts_with("<source>:4:5: "), "{e}");

    let e = lower_err("#[mugraph]\nfn f(x: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> {\n  x.transpose()\n}\n");
    assert_eq!((e.line, e.column), (3, 5), "{e}");
    assert!(e.message.contains("unknown method `transpose`") && e.message.contains("matmul"), "{e}");

    let e = lower_err(
        "mod m {\n#[mugraph]\nfn f(x: Tensor<f16, 4, 8>, w: Tensor<f16, 4, 8>) -> Tensor<f16, 4, 8> {\n  x.matmul(w)\n}\n}",
    );
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("[4, 8]") || e.message.contains("4, 8"), "{e}");
    assert!(e.message.contains("inner dims"), "{e}");

    let e = lower_err("fn broken( {");
    assert_eq!(e.line, 1, "{e}");

    let e = lower_err("#[mugraph(fast)]\nfn f(x: Tensor<f16, 4>) -> Tensor<f16, 4> { x }");
    assert!(e.message.contains("unknown #[mugraph] argument `fast`"), "{e}");
}

#[test]
fn lower_file_names_the_file() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("mirage-lower-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("kernels.rs");
    std::fs::write(&path, "#[mugraph]\nfn f(x: Tensor<f16, 4>) -> Tensor<f16, 8> {\n    exp(x)\n}\n")?;
    let e = mirage::lower::lower_file(&path).err().ok_or("expected an error")?;
    assert_eq!(e.file, path.display().to_string());
    assert_eq!(e.line, 3);
    assert!(e.message.contains("Tensor<f16, 4>") && e.message.contains("Tensor<f16, 8>"), "{e}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// No input makes the parser, checker or lowering panic.

const SEEDS: &[&str] = &[
    "#[mugraph] fn f(x: Tensor<f16, 8, 64>, #[strides(1, 64)] w: Tensor<f16, 64, 32>) -> (Tensor<f16, 8, 32>, Tensor<f16, 8, 1>) { let y = silu(x.matmul(w)) * 0.5; (y, y.sum(1)) }",
    "#[mugraph] fn g(q: Tensor<f32, 2, 4, 8>, k: Tensor<f32, 2, 8, 16>) -> Tensor<f32, 2, 4, 16> { let s = softmax(q.matmul(k), 2); clamp(-s / 2.0, -1.0, 1.0) }",
    "#[mugraph] fn h(a: Tensor<bf16, 4, 8>, b: Tensor<bf16, 1, 8>) -> Tensor<bf16, 4, 16> { concat(rms_norm_weighted(a, b, 1e-6), pow(a, 2.0) - a.max(1), 1) }",
];

const VOCAB: &[&str] = &[
    "(",
    ")",
    ",",
    "<",
    ">",
    "{",
    "}",
    "[",
    "]",
    "#",
    ";",
    ":",
    ".",
    "-",
    "+",
    "*",
    "/",
    "=",
    "->",
    "0",
    "1",
    "5",
    "0.0",
    "2.0",
    "-1.0",
    "1e40",
    "99999999999999999999999",
    "x",
    "w",
    "a",
    "Tensor",
    "f16",
    "f64",
    "let",
    "mut",
    "fn",
    "self",
    "matmul",
    "sum",
    "softmax",
    "concat",
    "rms_norm",
    "strides",
    "mugraph",
    "async",
    "unsafe",
    "const",
    "<T>",
    "_",
    "&",
    "'a",
];

/// Splits a seed into rough tokens (punctuation and words) so mutations produce near-misses.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in s.chars() {
        if c.is_alphanumeric() || c == '_' || c == '.' {
            word.push(c);
        } else {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn mangled_sources_never_panic(
        seed in 0..SEEDS.len(),
        edits in proptest::collection::vec((0usize..4, any::<prop::sample::Index>(), 0..VOCAB.len()), 1..6),
    ) {
        let mut toks = tokens(SEEDS[seed]);
        for (kind, at, v) in edits {
            let i = at.index(toks.len() + 1);
            match kind {
                0 if i < toks.len() => { toks.remove(i); }
                1 => toks.insert(i, VOCAB[v].to_string()),
                2 if i < toks.len() => toks[i] = VOCAB[v].to_string(),
                _ if i < toks.len() => { let t = toks[i].clone(); toks.insert(i, t); }
                _ => {}
            }
        }
        let text = toks.join(" ");
        // Either outcome is fine; a panic fails the test.
        if let Err(e) = lower_source(&text) {
            prop_assert!(!e.message.is_empty());
            prop_assert!(e.line >= 1);
        }
    }

    /// Word-for-word replacements keep the program parseable and exercise the checker's rules.
    #[test]
    fn mangled_words_never_panic(
        seed in 0..SEEDS.len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..WORDS.len()), 1..4),
    ) {
        let mut toks = tokens(SEEDS[seed]);
        let words: Vec<usize> = (0..toks.len()).filter(|&i| toks[i].chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.')).collect();
        for (at, w) in edits {
            let i = words[at.index(words.len())];
            toks[i] = WORDS[w].to_string();
        }
        let text = toks.join(" ");
        if let Err(e) = lower_source(&text) {
            prop_assert!(!e.message.is_empty());
        }
    }
}

const WORDS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "7",
    "64",
    "0.0",
    "1.0",
    "2.0",
    "0.5",
    "1e-6",
    "1e39",
    "18446744073709551615",
    "x",
    "w",
    "y",
    "q",
    "f16",
    "bf16",
    "f32",
    "f64",
    "exp",
    "silu",
    "sum",
    "max",
    "matmul",
    "concat",
    "clamp",
    "pow",
    "softmax",
    "rms_norm",
    "rms_norm_weighted",
    "recip",
    "Tensor",
    "strides",
];
