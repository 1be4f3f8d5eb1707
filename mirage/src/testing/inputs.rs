//! Random inputs for mirage's tests, examples and benchmarks: the one generator (uniform values,
//! rounded to each input's element type so that the reference interpreter sees exactly what the
//! GPU sees), the seed of a randomized run, and the input ranges of the golden and coverage
//! programs.
//!
//! A test that compares with the f32 reference draws its inputs through [`finite_reference`]: a
//! program whose reference is not finite on the inputs drawn (an overflow, a division by a sum
//! that cancels) gets new ones, in a narrower range, a bounded number of times.
//!
//! A randomized run takes its seed from [`seed`]: `MIRAGE_TEST_SEED` when it is set (to replay a
//! run), a fresh one otherwise; the seed is printed either way.

use std::ops::Range;

use mirage_runtime::{DType, TensorDesc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::eval::EvalError;
use crate::fingerprint::mix64;
use crate::ir::KernelGraph;
use crate::reference::{HostTensor, run};

/// The environment variable that replays a randomized run with a given seed.
pub const SEED_VAR: &str = "MIRAGE_TEST_SEED";

/// Reads a seed as [`seed`] does: `None` (no value) means a fresh one.
pub fn parse_seed(value: Option<&str>) -> Result<Option<u64>, String> {
    match value {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|e| format!("{SEED_VAR}={v:?}: expected an unsigned 64-bit integer ({e})")),
    }
}

/// The seed of a randomized run named `what`: `MIRAGE_TEST_SEED` when set, a fresh random seed
/// otherwise. Prints `what: seed N (replay with MIRAGE_TEST_SEED=N)` either way.
pub fn seed(what: &str) -> Result<u64, String> {
    let value = match std::env::var(SEED_VAR) {
        Ok(v) => Some(v),
        Err(std::env::VarError::NotPresent) => None,
        Err(e) => return Err(format!("{SEED_VAR}: {e}")),
    };
    let seed = parse_seed(value.as_deref())?.unwrap_or_else(rand::random);
    println!("{what}: seed {seed} (replay with {SEED_VAR}={seed})");
    Ok(seed)
}

/// `v` rounded to `dtype` (round to nearest even, as the GPU's conversions do).
pub fn round_to(dtype: DType, v: f32) -> f32 {
    dtype.round(v)
}

/// `n` values uniform in `range`, rounded to `dtype`.
///
/// # Panics
/// When `range` is empty.
pub fn random_values(rng: &mut StdRng, n: usize, dtype: DType, range: Range<f32>) -> Vec<f32> {
    (0..n).map(|_| round_to(dtype, rng.random_range(range.clone()))).collect()
}

/// A tensor of `shape` with `f32` values uniform in `range` (not rounded: for tests of the
/// reference semantics itself).
///
/// # Panics
/// When `range` is empty.
pub fn random_tensor(rng: &mut StdRng, shape: &[usize], range: Range<f32>) -> HostTensor {
    let n = shape.iter().product();
    let values = random_values(rng, n, DType::F32, range);
    HostTensor { shape: shape.to_vec(), data: values }
}

/// One host tensor per spec (logical values, row-major whatever the spec's strides), input `i`
/// uniform in `range(i)` and rounded to its element type; all drawn from one generator seeded
/// with `seed`.
///
/// # Panics
/// When a range is empty.
pub fn random_inputs(specs: &[TensorDesc], seed: u64, range: impl Fn(usize) -> Range<f32>) -> Vec<HostTensor> {
    let mut rng = StdRng::seed_from_u64(seed);
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| HostTensor {
            shape: s.shape.clone(),
            data: random_values(&mut rng, s.num_elements(), s.dtype, range(i)),
        })
        .collect()
}

/// [`random_inputs`] for the inputs of a kernel graph.
///
/// # Panics
/// When a range is empty.
pub fn graph_inputs(graph: &KernelGraph, seed: u64, range: impl Fn(usize) -> Range<f32>) -> Vec<HostTensor> {
    let specs: Vec<TensorDesc> = graph.inputs().into_iter().cloned().collect();
    random_inputs(&specs, seed, range)
}

/// Draws of inputs [`finite_reference`] makes before it gives up.
pub const FINITE_ATTEMPTS: u32 = 8;

/// Inputs on which a program's f32 reference is finite, and that reference.
#[derive(Clone, Debug)]
pub struct FiniteReference {
    /// The inputs.
    pub inputs: Vec<HostTensor>,
    /// The program's outputs on them (every element finite).
    pub outputs: Vec<HostTensor>,
    /// The draw that gave them: 0 is [`graph_inputs`] with the seed and ranges given.
    pub attempt: u32,
    /// The factor the ranges were scaled by at that draw (1 at the first).
    pub scale: f32,
}

/// Inputs of `graph` (as [`graph_inputs`] draws them) on which its f32 reference is finite, with
/// the reference's outputs. The first draw is `graph_inputs(graph, seed, range)`; while some
/// output element is not finite, another is drawn ([`FINITE_ATTEMPTS`] in all), from a seed
/// mixed with the attempt and with every range scaled by `2^-⌈k/2⌉` at attempt `k` (new values
/// first, then narrower ones, as the tuner shrinks its inputs until they stay in range).
///
/// The outer `Result` is a failure to run the reference; the inner one `Err` says, when no draw
/// gave a finite reference, how many elements the last one left not finite.
///
/// # Panics
/// When a range is empty.
pub fn finite_reference(
    graph: &KernelGraph,
    seed: u64,
    range: impl Fn(usize) -> Range<f32>,
) -> Result<Result<FiniteReference, String>, EvalError> {
    let mut last = String::new();
    for attempt in 0..FINITE_ATTEMPTS {
        let scale = 0.5f32.powi(attempt.div_ceil(2) as i32);
        let draw_seed = if attempt == 0 { seed } else { mix64(seed ^ u64::from(attempt).rotate_left(40)) };
        let inputs = graph_inputs(graph, draw_seed, |i| {
            let r = range(i);
            r.start * scale..r.end * scale
        });
        let outputs = run(graph, &inputs)?;
        let bad: Vec<(usize, usize)> = outputs
            .iter()
            .enumerate()
            .map(|(o, t)| (o, t.data.iter().filter(|v| !v.is_finite()).count()))
            .filter(|&(_, n)| n > 0)
            .collect();
        if bad.is_empty() {
            return Ok(Ok(FiniteReference { inputs, outputs, attempt, scale }));
        }
        last = bad.iter().map(|(o, n)| format!("output {o}: {n} elements")).collect::<Vec<_>>().join(", ");
    }
    Ok(Err(format!(
        "the f32 reference is not finite on any of {FINITE_ATTEMPTS} draws of inputs (ranges scaled down to {}×; the last draw: {last} not finite)",
        0.5f32.powi((FINITE_ATTEMPTS - 1).div_ceil(2) as i32)
    )))
}

/// The range of input `input` of golden program `case` (a [`GoldenCase`] name).
///
/// Uniform in [-1, 1), except attention's `Q` and `K` (inputs 0 and 1 of `gqa_*`) in
/// [-0.6, 0.6): `Q·K` then has a standard deviation of about 1 (64 terms of variance 0.12²) and
/// reaches about ±6 over the 2M logits, so `exp(Q·K)`, which Mirage's attention does not shift by
/// its maximum, spans e⁻⁶..e⁶ and its row sums (4096 terms) stay far below f16's largest value
/// (65504).
///
/// [`GoldenCase`]: crate::testing::programs::GoldenCase
///
/// The benchmark's `qknorm_gqa_*` normalises `Q` (elements of magnitude about 1), so its `K`
/// (input 1) takes [-0.2, 0.2), the scale of the GPU bench: logits of standard deviation about 0.9.
/// At [-1, 1) its unshifted `exp` row sums pass f16's largest value.
pub fn golden_input_range(case: &str, input: usize) -> Range<f32> {
    if case.starts_with("gqa") && input < 2 {
        -0.6..0.6
    } else if case.starts_with("qknorm_gqa") && input == 1 {
        -0.2..0.2
    } else {
        -1.0..1.0
    }
}

/// The range of input `input` of coverage program `case` (a name of
/// [`coverage_cases`](crate::testing::programs::coverage_cases)).
///
/// Wide enough that every operator works over its interesting range: [-4, 4) for the unary
/// operators (`clamp` to [-0.25, 0.5] is active on both sides, `exp` spans e⁻⁴..e⁴, `silu` and
/// `gelu` reach their tails), [-1, 1) for the rest (sums of 24 to 128 such terms). Two programs
/// would amplify the relative error of an intermediate staged in f16/bf16 beyond the comparison's
/// model (`crate::testing::compare`), so their ranges keep that factor near 1:
/// `pow(exp(a), exp(b))` takes [-0.5, 0.5) (the base's error is multiplied by the exponent, at
/// most e^0.5), and the online softmax takes `Q` and `K` in [-0.5, 0.5) (logits of standard
/// deviation 0.5; `exp` multiplies a staged logit's error by its magnitude). The `i32` ids of
/// the gather programs take [-2, 34): rows of their tables of 30 and 50 rows and ids outside them.
pub fn coverage_input_range(case: &str, input: usize) -> Range<f32> {
    if case.starts_with("gather") && input == 1 {
        // Row ids of tables of 30 and 50 rows: in range, and out of it on both sides.
        -2.0..34.0
    } else if case.starts_with("unary_") {
        -4.0..4.0
    } else if case.starts_with("binary_pow") || (case.starts_with("online_softmax") && input < 2) {
        -0.5..0.5
    } else {
        -1.0..1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_or_say_what_is_wrong() {
        assert_eq!(parse_seed(None), Ok(None));
        assert_eq!(parse_seed(Some(" 42\n")), Ok(Some(42)));
        let e = parse_seed(Some("0x2a")).expect_err("not decimal");
        assert!(e.contains("MIRAGE_TEST_SEED=\"0x2a\"") && e.contains("unsigned 64-bit integer"), "{e}");
    }

    #[test]
    fn inputs_are_reproducible_rounded_and_in_range() {
        let specs = [TensorDesc::new(&[3, 5], DType::F16), TensorDesc::new(&[7], DType::Bf16)];
        let a = random_inputs(&specs, 9, |i| if i == 0 { -4.0..4.0 } else { 0.5..1.5 });
        let b = random_inputs(&specs, 9, |i| if i == 0 { -4.0..4.0 } else { 0.5..1.5 });
        assert_eq!(a, b);
        assert_ne!(a, random_inputs(&specs, 10, |i| if i == 0 { -4.0..4.0 } else { 0.5..1.5 }));
        assert_eq!(a[0].shape, vec![3, 5]);
        assert!(a[0].data.iter().all(|&v| (-4.0..=4.0).contains(&v) && round_to(DType::F16, v) == v));
        assert!(a[1].data.iter().all(|&v| (0.5..=1.5).contains(&v) && round_to(DType::Bf16, v) == v));
    }

    #[test]
    fn the_coverage_clamp_is_active_on_both_sides() {
        // clamp(x, -0.25, 0.5) over the coverage range of the unary programs.
        let r = coverage_input_range("unary_clamp", 0);
        assert!(r.start < -0.25 && r.end > 0.5);
        let x = random_inputs(&[TensorDesc::new(&[6, 40], DType::F16)], 1, |_| r.clone());
        assert!(x[0].data.iter().filter(|&&v| v < -0.25).count() > 60);
        assert!(x[0].data.iter().filter(|&&v| v > 0.5).count() > 60);
    }
}
