//! The device's rounding, emulated on the CPU: how far correct kernels may land from the f32
//! reference on a given program and inputs.
//!
//! [`crate::reference::run`] keeps every intermediate in `f32` and sums in one order. A µGraph
//! of several kernels stores its intermediates in the program's element type (an f16 program's
//! buffers are f16), and its kernels sum in other orders and use fast math functions. Most
//! programs barely notice; a program that cancels (a difference of nearly equal values, the
//! layer norm of a nearly constant row, a mean of terms of both signs) amplifies those roundings
//! far beyond the output's own rounding, although every kernel is right.
//!
//! - [`run_stored`]: the µGraph evaluated kernel by kernel, every tensor a kernel writes rounded
//!   to its element type before the next kernel reads it (what the generated code stores;
//!   inside a kernel the evaluation stays in `f32`, as the generated code computes in `f32`
//!   registers and accumulators). For diagnosis: a GPU result close to it and far from the
//!   reference is the program's sensitivity, not a code-generation bug.
//! - [`rounding_spread`]: Monte Carlo arithmetic. The µGraph is evaluated [`SPREAD_TRIALS`] times
//!   in `f64` (so that perturbations below an `f32` ulp survive) with every arithmetic result
//!   perturbed by a pseudo-random relative error of the size `f32` arithmetic commits
//!   (`u = 2⁻²⁴` for `+ − ×`, `2u` for a division, `(2 + 1.2·|x|)·u` for a math function, the
//!   accuracy of CUDA's fast intrinsics) and every stored element of an f16/bf16 tensor by one
//!   of the size of its rounding (`u_T`). The root mean square, per
//!   element, of the trials' deviations from the reference is the first-order propagation of
//!   every rounding the device commits, through this program's conditioning at these inputs:
//!   [`crate::testing::compare::compare_with_spread`] adds it to the tolerance. Where nothing
//!   cancels it stays at the size of the output's own rounding; where values cancel it is the
//!   rounding of the cancelled values (an output that is zero in exact arithmetic gets the
//!   error of the terms that cancelled, not a tolerance scaled by the reference's noise).
//!
//! The perturbations are deterministic (a hash of the trial, the operation and its operands),
//! so a comparison is reproducible from the inputs alone.

use crate::eval::{Domain, EvalError, Tensor, evaluate};
use crate::ir::{DType, IrError, KernelGraph, KernelOp, TensorRef, UnaryOp};
use crate::reference::{F32, HostTensor, erf};
use crate::testing::compare::{F32_UNIT_ROUNDOFF, unit_roundoff};

/// Trials of [`rounding_spread`]: enough that the root mean square of the deviations is within
/// about ±25% of the propagated error's standard deviation (a χ distribution of 8 degrees of
/// freedom), which the comparison's tail factor covers.
pub const SPREAD_TRIALS: u64 = 8;

/// Why a graph could not be evaluated with the device's rounding.
#[derive(Debug, thiserror::Error)]
pub enum RoundingError {
    /// The reference interpreter refused the graph or its inputs.
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// A node could not be evaluated on its own (its operands' descriptions do not fit it).
    #[error("node {node} ({op}): {source}")]
    Node {
        /// The node's index.
        node: usize,
        /// Its operator's name.
        op: String,
        /// The rule it broke.
        source: IrError,
    },
    /// The reference tensors do not match the graph's outputs.
    #[error("{0}")]
    Reference(String),
}

/// A graph holding node `node` of `graph` alone: one input per operand (with the operand's
/// description), the operator, one output per port.
fn single_node(graph: &KernelGraph, node: usize) -> Result<KernelGraph, IrError> {
    let n = &graph.nodes()[node];
    let mut g = KernelGraph::new();
    let mut operands = Vec::with_capacity(n.inputs.len());
    for &t in &n.inputs {
        let d = graph.desc(t)?;
        operands.push(g.input_strided(&d.shape, &d.strides, d.dtype)?);
    }
    let produced = g.push(n.op.clone(), &operands)?;
    for t in produced {
        g.output(t, None)?;
    }
    Ok(g)
}

/// Evaluates `graph` kernel node by kernel node in `domain`; `store(node, dtype, tensor)` sees
/// every tensor a node produces (and may change it) before later nodes read it.
fn run_nodes<D: Domain>(
    graph: &KernelGraph,
    inputs: &[Tensor<D::V>],
    domain: &D,
    store: impl Fn(usize, DType, &mut Tensor<D::V>),
) -> Result<Vec<Tensor<D::V>>, RoundingError> {
    let params = graph.inputs();
    if params.len() != inputs.len() {
        return Err(EvalError::InputCount { expected: params.len(), found: inputs.len() }.into());
    }
    let mut values: Vec<Vec<Tensor<D::V>>> = Vec::with_capacity(graph.nodes().len());
    let mut next_input = 0;
    let mut outputs = Vec::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let arg = |t: &TensorRef| values[t.node][t.port].clone();
        let produced = match &node.op {
            KernelOp::Input { desc } => {
                let t = inputs[next_input].clone();
                next_input += 1;
                if t.shape != desc.shape {
                    let (expected, found) = (desc.shape.clone(), t.shape);
                    return Err(EvalError::InputShape { index: next_input - 1, expected, found }.into());
                }
                vec![t]
            }
            KernelOp::Output { .. } => {
                outputs.push(arg(&node.inputs[0]));
                vec![]
            }
            op => {
                let g =
                    single_node(graph, i).map_err(|source| RoundingError::Node { node: i, op: op.name(), source })?;
                let args: Vec<Tensor<D::V>> = node.inputs.iter().map(arg).collect();
                let mut outs = evaluate(&g, domain, &args)?;
                for (t, d) in outs.iter_mut().zip(&node.outputs) {
                    store(i, d.dtype, t);
                }
                outs
            }
        };
        values.push(produced);
    }
    Ok(outputs)
}

/// Runs `graph` on `inputs` in `f32`, rounding every tensor a kernel node produces to its
/// element type (see the module documentation): one tensor per program output.
pub fn run_stored(graph: &KernelGraph, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, RoundingError> {
    run_nodes(graph, inputs, &F32, |_, dtype, t| {
        if dtype != DType::F32 {
            t.data.iter_mut().for_each(|v| *v = dtype.round(*v));
        }
    })
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A pseudo-random value in `[-1, 1)` from the hash of `key`.
fn signed_unit(key: u64) -> f64 {
    (mix(key) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// `r` moved by a relative error of at most `ulps · u` (u = 2⁻²⁴), chosen by `key`.
fn perturb(r: f64, ulps: f64, key: u64) -> f64 {
    if r == 0.0 || !r.is_finite() {
        return r;
    }
    r * (1.0 + signed_unit(key) * ulps * F32_UNIT_ROUNDOFF)
}

/// The scalar meaning of a unary function in `f64` (the reference's
/// [`unary_f32`](crate::reference::unary_f32), evaluated
/// without its final rounding to `f32`, so that the perturbations of the operand propagate).
fn unary_f64(op: &UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Exp => x.exp(),
        UnaryOp::Square => x * x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Neg => -x,
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::GeluTanh => {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }
        UnaryOp::Clamp { lo, hi } => x.max(f64::from(lo.0)).min(f64::from(hi.0)),
        UnaryOp::MulScalar { c } => f64::from(c.0) * x,
        UnaryOp::AddScalar { c } => x + f64::from(c.0),
    }
}

/// The domain of one Monte Carlo trial: `f64` values (so that perturbations far below an `f32`
/// ulp survive), every arithmetic result perturbed (see the module documentation);
/// comparisons, maxima, counts and constants exact.
struct Perturbed {
    trial: u64,
    /// No perturbation at all: `f64` arithmetic ([`run_f64`]).
    exact: bool,
}

impl Perturbed {
    fn key(&self, op: u64, a: f64, b: f64) -> u64 {
        mix(self.trial.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ op) ^ mix(a.to_bits()) ^ b.to_bits().rotate_left(17)
    }

    /// `r` perturbed by up to `ulps` with the key of (`op`, `a`, `b`); `r` itself when exact.
    fn round(&self, r: f64, ulps: f64, op: u64, a: f64, b: f64) -> f64 {
        if self.exact { r } else { perturb(r, ulps, self.key(op, a, b)) }
    }
}

impl Domain for Perturbed {
    type V = f64;
    fn zero(&self) -> f64 {
        0.0
    }
    fn neg_infinity(&self) -> f64 {
        f64::NEG_INFINITY
    }
    fn count(&self, n: usize) -> f64 {
        n as f64
    }
    fn constant(&self, c: f32) -> f64 {
        f64::from(c)
    }
    fn add(&self, a: f64, b: f64) -> f64 {
        self.round(a + b, 1.0, 1, a, b)
    }
    fn sub(&self, a: f64, b: f64) -> f64 {
        self.round(a - b, 1.0, 2, a, b)
    }
    fn mul(&self, a: f64, b: f64) -> f64 {
        self.round(a * b, 1.0, 3, a, b)
    }
    fn div(&self, a: f64, b: f64) -> f64 {
        self.round(a / b, 2.0, 4, a, b)
    }
    fn pow(&self, a: f64, b: f64) -> f64 {
        let r = a.powf(b);
        self.round(r, 2.0 + 1.2 * r.ln().abs(), 5, a, b)
    }
    fn max(&self, a: f64, b: f64) -> f64 {
        a.max(b)
    }
    fn unary(&self, op: &UnaryOp, a: f64) -> f64 {
        let ulps = match op {
            UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Clamp { .. } => 0.0,
            UnaryOp::Square | UnaryOp::MulScalar { .. } | UnaryOp::AddScalar { .. } => 1.0,
            _ => 2.0 + 1.2 * a.abs(),
        };
        self.round(unary_f64(op, a), ulps, 6, a, 0.0)
    }
    fn index(&self, v: f64) -> Option<usize> {
        (v >= 0.0 && v.fract() == 0.0 && v < 2_147_483_648.0).then_some(v as usize)
    }
    fn greater(&self, a: f64, b: f64) -> bool {
        a > b || (a.is_nan() && !b.is_nan())
    }
    fn position(&self, i: usize, _row: &[f64]) -> f64 {
        i as f64
    }
    fn mul_add(&self, acc: f64, a: f64, b: f64) -> f64 {
        self.add(acc, self.mul(a, b))
    }
}

/// `graph` on `inputs` in `f64` arithmetic with nothing rounded to `f32` or to the tensors'
/// element types: the graph's values in exact arithmetic up to `f64`'s rounding (relative
/// `1e-16` per operation), for telling apart graphs whose difference is below `f32`'s resolution
/// ([`crate::testing::mutants::classify`]).
pub fn run_f64(graph: &KernelGraph, inputs: &[HostTensor]) -> Result<Vec<Tensor<f64>>, EvalError> {
    let wide: Vec<Tensor<f64>> = inputs
        .iter()
        .map(|t| Tensor { shape: t.shape.clone(), data: t.data.iter().map(|&v| f64::from(v)).collect() })
        .collect();
    evaluate(graph, &Perturbed { trial: 0, exact: true }, &wide)
}

/// One Monte Carlo trial of [`rounding_spread`]: `graph` on `inputs` in `f64` with every
/// arithmetic result and every stored f16/bf16 element perturbed by the errors of trial `trial`.
pub fn perturbed_run(
    graph: &KernelGraph,
    inputs: &[HostTensor],
    trial: u64,
) -> Result<Vec<Tensor<f64>>, RoundingError> {
    let wide: Vec<Tensor<f64>> = inputs
        .iter()
        .map(|t| Tensor { shape: t.shape.clone(), data: t.data.iter().map(|&v| f64::from(v)).collect() })
        .collect();
    run_nodes(graph, &wide, &Perturbed { trial, exact: false }, |node, dtype, t| {
        if dtype == DType::F32 {
            return;
        }
        let ulps = unit_roundoff(dtype) / F32_UNIT_ROUNDOFF;
        let base = mix(trial ^ 0x5354_4f52_4544 ^ ((node as u64) << 40));
        for (i, v) in t.data.iter_mut().enumerate() {
            *v = perturb(*v, ulps, base ^ i as u64);
        }
    })
}

/// Per output of `graph`, per element: the root mean square over [`SPREAD_TRIALS`] Monte Carlo
/// trials ([`perturbed_run`]) of the deviation from `want`, the reference outputs of the
/// program `graph` computes on `inputs` (see the module documentation).
pub fn rounding_spread(
    graph: &KernelGraph,
    inputs: &[HostTensor],
    want: &[HostTensor],
) -> Result<Vec<Vec<f64>>, RoundingError> {
    let mut sum_sq: Vec<Vec<f64>> = want.iter().map(|w| vec![0.0; w.data.len()]).collect();
    for trial in 0..SPREAD_TRIALS {
        let got = perturbed_run(graph, inputs, trial)?;
        if got.len() != want.len() {
            return Err(RoundingError::Reference(format!(
                "the graph has {} outputs, the reference {}",
                got.len(),
                want.len()
            )));
        }
        for (o, (g, w)) in got.iter().zip(want).enumerate() {
            if g.data.len() != w.data.len() {
                return Err(RoundingError::Reference(format!(
                    "output {o}: the graph gives {} elements, the reference {}",
                    g.data.len(),
                    w.data.len()
                )));
            }
            for (s, (&a, &b)) in sum_sq[o].iter_mut().zip(g.data.iter().zip(&w.data)) {
                let d = a - f64::from(b);
                *s += d * d;
            }
        }
    }
    Ok(sum_sq.into_iter().map(|o| o.into_iter().map(|s| (s / SPREAD_TRIALS as f64).sqrt()).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::unary_f32;

    #[test]
    fn the_f64_unary_functions_are_the_reference_ones() {
        // The reference computes in f32: a few roundings apart at most.
        for op in &UnaryOp::ALL {
            for i in 1..=64 {
                let x = (i as f32 - 32.5) / 8.0;
                let (wide, narrow) = (unary_f64(op, f64::from(x)), f64::from(unary_f32(op, x)));
                if narrow.is_nan() {
                    assert!(wide.is_nan(), "{op}({x})");
                    continue;
                }
                assert!(
                    (wide - narrow).abs() <= 8.0 * F32_UNIT_ROUNDOFF * narrow.abs().max(1e-30),
                    "{op}({x}): {wide} vs {narrow}"
                );
            }
        }
    }

    #[test]
    fn perturbations_stay_within_their_rounding_and_differ_between_trials() {
        let r = 0.75;
        let a = perturb(r, 1.0, 1);
        let b = perturb(r, 1.0, 2);
        assert!(a != b && (a - r).abs() <= F32_UNIT_ROUNDOFF * r && (b - r).abs() <= F32_UNIT_ROUNDOFF * r);
        assert_eq!(perturb(0.0, 1.0, 3), 0.0);
        assert!(perturb(f64::NAN, 1.0, 3).is_nan());
    }
}
