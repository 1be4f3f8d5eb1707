//! The CPU reference interpreter: the evaluator of [`crate::eval`] instantiated with `f32`
//! values. It is the ground truth of every test and of the float check of the search.
//!
//! Tensors of every element type are held as `f32` values: f16/bf16 data is converted on the
//! way in, and `i32` tensors (gather ids, argmax positions) hold their integers exactly (indices
//! stay below 2^24).

use crate::eval::{Domain, EvalError, Tensor, evaluate};
use crate::ir::{IrError, KernelGraph, KernelOp, TensorRef, UnaryOp};

/// The `f32` value domain.
#[derive(Clone, Copy, Debug, Default)]
pub struct F32;

/// The Gauss error function in f64: its Taylor series for |x| < 2.5, the continued fraction of
/// erfc beyond; accurate to about 1e-12 (enough for an f32 reference of the exact GELU).
pub fn erf(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 2.5 {
        // erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = ax;
        let mut sum = ax;
        let x2 = ax * ax;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(x) = e^{-x²}/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
        let mut f = ax;
        for k in (1..60).rev() {
            f = ax + (k as f64 / 2.0) / f;
        }
        1.0 - (-ax * ax).exp() / std::f64::consts::PI.sqrt() / f
    };
    if x < 0.0 { -r } else { r }
}

/// The scalar meaning of every unary function, in f32.
pub fn unary_f32(op: &UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Exp => x.exp(),
        UnaryOp::Square => x * x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Gelu => (0.5 * x as f64 * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2))) as f32,
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Neg => -x,
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::GeluTanh => {
            let x = x as f64;
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            (0.5 * x * (1.0 + inner.tanh())) as f32
        }
        UnaryOp::Clamp { lo, hi } => x.max(lo.0).min(hi.0),
        UnaryOp::MulScalar { c } => c.0 * x,
        UnaryOp::AddScalar { c } => x + c.0,
    }
}

impl Domain for F32 {
    type V = f32;
    fn zero(&self) -> f32 {
        0.0
    }
    fn neg_infinity(&self) -> f32 {
        f32::NEG_INFINITY
    }
    fn count(&self, n: usize) -> f32 {
        n as f32
    }
    fn constant(&self, c: f32) -> f32 {
        c
    }
    #[inline]
    fn add(&self, a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline]
    fn sub(&self, a: f32, b: f32) -> f32 {
        a - b
    }
    #[inline]
    fn mul(&self, a: f32, b: f32) -> f32 {
        a * b
    }
    fn div(&self, a: f32, b: f32) -> f32 {
        a / b
    }
    fn pow(&self, a: f32, b: f32) -> f32 {
        a.powf(b)
    }
    fn max(&self, a: f32, b: f32) -> f32 {
        a.max(b)
    }
    fn unary(&self, op: &UnaryOp, a: f32) -> f32 {
        unary_f32(op, a)
    }
    /// An `i32` element is held exactly as an f32 (indices stay below 2^24): a non-negative
    /// integer is an index, anything else addresses nothing.
    fn index(&self, v: f32) -> Option<usize> {
        (v >= 0.0 && v.fract() == 0.0 && v < 2_147_483_648.0).then_some(v as usize)
    }
    /// The numeric order, with NaN above every number (as PyTorch's `argmax`).
    fn greater(&self, a: f32, b: f32) -> bool {
        a > b || (a.is_nan() && !b.is_nan())
    }
    fn position(&self, i: usize, _row: &[f32]) -> f32 {
        i as f32
    }
    #[inline]
    fn mul_add(&self, acc: f32, a: f32, b: f32) -> f32 {
        acc + a * b
    }
}

/// A host tensor of `f32` values (f16/bf16 data is converted on the way in).
pub type HostTensor = Tensor<f32>;

impl HostTensor {
    /// From f16 data.
    pub fn from_f16(shape: Vec<usize>, data: &[half::f16]) -> Result<Self, EvalError> {
        Tensor::new(shape, data.iter().map(|v| v.to_f32()).collect())
    }

    /// From bf16 data.
    pub fn from_bf16(shape: Vec<usize>, data: &[half::bf16]) -> Result<Self, EvalError> {
        Tensor::new(shape, data.iter().map(|v| v.to_f32()).collect())
    }
}

/// Runs `graph` on `inputs` in f32: one tensor per program output.
pub fn run(graph: &KernelGraph, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, EvalError> {
    evaluate(graph, &F32, inputs)
}

/// A copy of `graph` that returns, after its own outputs, every tensor it computes (each output
/// port of every operator node, in node order): run it to see every intermediate value.
pub fn with_every_tensor_out(graph: &KernelGraph) -> Result<KernelGraph, IrError> {
    let mut every = graph.clone();
    for (i, node) in graph.nodes().iter().enumerate() {
        if matches!(node.op, KernelOp::Input { .. } | KernelOp::Output { .. }) {
            continue;
        }
        for port in 0..node.outputs.len() {
            every.output(TensorRef { node: i, port }, None)?;
        }
    }
    Ok(every)
}

/// The largest `|a - b| / (atol + rtol·|b|)` over two equal-shape tensors (≤ 1 means within
/// tolerance); `None` when shapes differ. NaN anywhere counts as infinitely far.
pub fn max_scaled_error(a: &HostTensor, b: &HostTensor, atol: f32, rtol: f32) -> Option<f32> {
    if a.shape != b.shape {
        return None;
    }
    Some(a.data.iter().zip(&b.data).fold(0.0f32, |m, (&x, &y)| {
        let e = (x - y).abs() / (atol + rtol * y.abs());
        if e.is_nan() { f32::INFINITY } else { m.max(e) }
    }))
}
