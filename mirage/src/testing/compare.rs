//! The comparison of a computed tensor (a GPU kernel's output, read back as `f32`) with the
//! reference interpreter's: the one check every GPU test, example and benchmark of this
//! workspace applies.
//!
//! # The error model
//!
//! The reference (`mirage::reference::run`) computes in `f32` from the same inputs the GPU gets
//! (already rounded to their element types, so inputs contribute no error). The kernels compute
//! in `f32` too, but round every output, and may round intermediates they stage in memory, to
//! the output's element type `T`, whose unit roundoff is `u_T` (2⁻¹¹ for f16, 2⁻⁸ for bf16, 2⁻²⁴
//! for f32); they also sum in another order than the reference. For an output of `N` elements
//! whose longest reduction has `K` terms, with `s` the root mean square of the reference output
//! (its scale) and `u = 2⁻²⁴` the unit roundoff of `f32` arithmetic:
//!
//! - Each element's error is modelled as independent, with standard deviation at most
//!   `σ = (2·u_T + √K·u)·s`: two roundings to `T` of values at the output's scale (the output
//!   itself and one intermediate staged in `T`; a sum over staged terms carries their relative
//!   errors as a random walk, which for terms without a common sign stays at the output's scale),
//!   plus the `f32` sums in another order (a random walk of `K` roundings of size `u`).
//! - Element-wise, `|got − want| ≤ atol + rtol·|want|` with `atol = λ_N·σ`, where
//!   `λ_N = √(2·ln(N / p))` and `p = 10⁻⁶` ([`FALSE_ALARM`]): the largest of `N` such errors
//!   exceeds `λ_N·σ` with probability below `p` (Gaussian tail and union bound); and
//!   `rtol = 4·u_T + 32·u` for errors that scale with the element itself (its own rounding,
//!   intermediates in `T` that multiply it such as a stored normaliser, and `f32` math functions:
//!   `__expf` is accurate to 2 + 1.2·|x| ulp).
//! - Over the whole tensor, the relative L2 error `‖got − want‖ / ‖want‖` is at most `2·σ/s`: a
//!   systematic error spread over every element (a scale off by a few roundings) that no single
//!   element shows is caught here.
//!
//! A non-finite element of `got` (a NaN-poisoned element no kernel wrote) fails; a non-finite
//! reference fails too (the test's inputs overflow the program, which tests nothing).
//!
//! The model holds for programs that do not amplify relative errors by more than a small factor
//! on the inputs used; inputs are chosen per program so that this holds
//! ([`crate::testing::inputs`]): e.g. `pow(exp(a), exp(b))` multiplies the relative error of its
//! base by the exponent.
//!
//! # Programs that amplify roundings
//!
//! Generated programs do not choose their inputs: a layer norm over a row of three nearly equal
//! elements divides their rounding errors by `√(var + eps)` (≈ 3·10⁻³), a mean of terms of both
//! signs turns their roundings into a large relative error of a small result, and a result that
//! is zero in exact arithmetic has no scale at all (its `s` is the reference's own noise).
//! [`compare_with_spread`] takes, per element, the standard deviation `σ_i` of the rounding
//! error that reaches it, measured by Monte Carlo arithmetic on the chosen µGraph
//! ([`crate::testing::rounding::rounding_spread`]: every `f32` operation and every stored f16/bf16
//! element perturbed by a random error of its rounding's size), and allows
//!
//! - element-wise, `λ_N·σ_i` more (the same tail factor: the propagated error is a sum of many
//!   small independent roundings, Gaussian to first order);
//! - over the tensor, `λ_1·‖σ‖ / ‖want‖` more relative L2 error, with `λ_1 = √(2·ln(1/p))` ≈ 5.3:
//!   the propagated errors may all come from one rounding (a mean that scales every element) and
//!   then do not average out.
//!
//! The extra tolerance follows the roundings of the values that were actually cancelled, not
//! the size of the result: where nothing cancels, `σ_i` is about `u_T·|want_i|` and the check is
//! as tight as before; a kernel that computes something else is off by far more than its
//! rounding's propagation (a code-generation bug moves elements by the size of the values).

use std::fmt;

use mirage_runtime::DType;

/// The unit roundoff of `f32` arithmetic, 2⁻²⁴: the kernels and the reference compute in `f32`.
pub const F32_UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0;

/// The probability per compared tensor that an error of the modelled size fails the element-wise
/// check (what the tail factor [`tail_factor`] is chosen for).
pub const FALSE_ALARM: f64 = 1e-6;

/// The unit roundoff of an element type: the largest relative error of rounding to it.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1.0 / 2048.0,
        DType::Bf16 => 1.0 / 256.0,
        DType::F32 => F32_UNIT_ROUNDOFF,
        // Indices are exact: they must match.
        DType::I32 => 0.0,
    }
}

/// `λ_N = √(2·ln(N / p))`: the largest of `N` independent Gaussian errors of standard deviation
/// `σ` exceeds `λ_N·σ` with probability below `p` ([`FALSE_ALARM`]).
pub fn tail_factor(n: usize) -> f64 {
    (2.0 * (n.max(1) as f64 / FALSE_ALARM).ln()).sqrt()
}

/// The longest reduction of a program whose inputs have these shapes, bounded by the longest
/// input dimension: every reduction of mirage's operators (matmul, `reduce_sum`, `rms_norm`) runs
/// along a dimension of some input's extent.
pub fn reduction_len<'a>(input_shapes: impl IntoIterator<Item = &'a [usize]>) -> usize {
    input_shapes.into_iter().flat_map(|s| s.iter().copied()).max().unwrap_or(1).max(1)
}

/// The error model of one output (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorModel {
    /// The output's element type.
    pub dtype: DType,
    /// The length of the longest reduction feeding it ([`reduction_len`]).
    pub reduction_len: usize,
}

impl ErrorModel {
    /// The model of an output of `dtype` fed by reductions of at most `reduction_len` terms.
    pub fn new(dtype: DType, reduction_len: usize) -> ErrorModel {
        ErrorModel { dtype, reduction_len: reduction_len.max(1) }
    }

    /// `σ / s`: the modelled standard deviation of one element's error relative to the
    /// output's scale, `2·u_T + √K·u`.
    pub fn sigma(&self) -> f64 {
        2.0 * unit_roundoff(self.dtype) + (self.reduction_len as f64).sqrt() * F32_UNIT_ROUNDOFF
    }

    /// The relative tolerance, `4·u_T + 32·u`.
    pub fn rtol(&self) -> f64 {
        4.0 * unit_roundoff(self.dtype) + 32.0 * F32_UNIT_ROUNDOFF
    }

    /// The absolute tolerance of an output of `n` elements at scale `scale`: `λ_N·σ`.
    pub fn atol(&self, scale: f64, n: usize) -> f64 {
        tail_factor(n) * self.sigma() * scale
    }

    /// The bound on the relative L2 error, `2·σ/s`.
    pub fn rel_l2_bound(&self) -> f64 {
        2.0 * self.sigma()
    }
}

/// One element of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    /// Its index in the output's shape.
    pub index: Vec<usize>,
    /// The computed value.
    pub got: f32,
    /// The reference value.
    pub want: f32,
    /// `|got − want|` (infinite when `got` is not finite).
    pub error: f64,
    /// What the tolerance allows here, `atol + rtol·|want|`.
    pub allowed: f64,
}

impl Element {
    /// `error / allowed`: at most 1 within tolerance.
    pub fn ratio(&self) -> f64 {
        if self.error == 0.0 { 0.0 } else { self.error / self.allowed }
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: got {:e}, want {:e} (error {:.3e}, allowed {:.3e}, {:.3} of the tolerance)",
            self.index,
            self.got,
            self.want,
            self.error,
            self.allowed,
            self.ratio()
        )
    }
}

/// Why two tensors could not be compared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// The computed and reference tensors (or the shape) disagree in their number of elements.
    #[error("expected {expected} elements (shape {shape:?}), found {got} computed and {want} reference elements")]
    Length {
        /// The shape's element count.
        expected: usize,
        /// The shape.
        shape: Vec<usize>,
        /// Computed elements.
        got: usize,
        /// Reference elements.
        want: usize,
    },
    /// The spread of the propagated rounding error does not have one value per element.
    #[error("expected a rounding spread of {expected} elements, found {found}")]
    Spread {
        /// The shape's element count.
        expected: usize,
        /// The spread's length.
        found: usize,
    },
}

/// The outcome of comparing a computed tensor with the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The model the tolerances come from.
    pub model: ErrorModel,
    /// The output's shape.
    pub shape: Vec<usize>,
    /// The output's scale `s`: the root mean square of the reference.
    pub scale: f64,
    /// The absolute tolerance used.
    pub atol: f64,
    /// The relative tolerance used.
    pub rtol: f64,
    /// The largest per-element spread of the propagated rounding error added to the tolerance
    /// ([`compare_with_spread`]; 0 without one).
    pub spread_max: f64,
    /// Elements outside `atol + rtol·|want|` (non-finite computed elements included).
    pub failed: usize,
    /// Non-finite reference elements.
    pub nonfinite_reference: usize,
    /// The element with the largest `error / allowed` (`None` for an empty tensor).
    pub worst: Option<Element>,
    /// The largest `|got − want|`.
    pub max_abs_error: f64,
    /// `‖got − want‖ / ‖want‖` (infinite when a computed element is not finite).
    pub rel_l2: f64,
    /// The bound on `rel_l2`.
    pub rel_l2_bound: f64,
}

impl Comparison {
    /// Whether every element is within tolerance, the relative L2 error within its bound and the
    /// reference finite.
    pub fn passed(&self) -> bool {
        self.failed == 0 && self.nonfinite_reference == 0 && self.rel_l2 <= self.rel_l2_bound
    }

    /// `Ok` when [`passed`](Self::passed), else an error naming `what`, the failing elements and
    /// the worst one.
    pub fn check(&self, what: &str) -> Result<(), String> {
        if self.passed() { Ok(()) } else { Err(format!("{what}: {self}")) }
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n: usize = self.shape.iter().product();
        if self.nonfinite_reference > 0 {
            write!(
                f,
                "MISMATCH: {} reference elements are not finite (inputs overflow the program); ",
                self.nonfinite_reference
            )?;
        } else if self.failed > 0 {
            write!(f, "MISMATCH: {} of {n} elements outside the tolerance; ", self.failed)?;
        } else if self.rel_l2 > self.rel_l2_bound {
            write!(f, "MISMATCH: relative L2 error above its bound; ")?;
        }
        match &self.worst {
            Some(w) => write!(f, "worst element {w}")?,
            None => write!(f, "no elements")?,
        }
        write!(
            f,
            "; relative L2 error {:.3e} (bound {:.3e}); {} {:?}, scale {:.3e}, atol {:.3e}, rtol {:.3e}, reduction length {}",
            self.rel_l2,
            self.rel_l2_bound,
            self.model.dtype,
            self.shape,
            self.scale,
            self.atol,
            self.rtol,
            self.model.reduction_len
        )?;
        if self.spread_max > 0.0 {
            write!(f, ", propagated rounding spread up to {:.3e}", self.spread_max)?;
        }
        Ok(())
    }
}

/// The multi-index of flat (row-major) index `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &extent) in shape.iter().enumerate().rev() {
        let extent = extent.max(1);
        index[i] = flat % extent;
        flat /= extent;
    }
    index
}

/// Compares `got` with the reference `want` (both row-major over `shape`) under `model`.
pub fn compare(got: &[f32], want: &[f32], shape: &[usize], model: ErrorModel) -> Result<Comparison, CompareError> {
    compare_with_spread(got, want, shape, model, &[])
}

/// [`compare`] with the program's propagated rounding error: `spread` holds, per element, the
/// standard deviation of the error that the device's roundings reach there through the
/// program's conditioning ([`crate::testing::rounding::rounding_spread`]; empty: none). Each
/// element may then be off by `λ_N·spread_i` more, and the relative L2 error by
/// `λ_1·‖spread‖ / ‖want‖` more (see the module documentation).
pub fn compare_with_spread(
    got: &[f32],
    want: &[f32],
    shape: &[usize],
    model: ErrorModel,
    spread: &[f64],
) -> Result<Comparison, CompareError> {
    let n: usize = shape.iter().product();
    if got.len() != n || want.len() != n {
        return Err(CompareError::Length { expected: n, shape: shape.to_vec(), got: got.len(), want: want.len() });
    }
    if !(spread.is_empty() || spread.len() == n) {
        return Err(CompareError::Spread { expected: n, found: spread.len() });
    }
    let nonfinite_reference = want.iter().filter(|w| !w.is_finite()).count();
    let sum_sq: f64 = want.iter().filter(|w| w.is_finite()).map(|&w| f64::from(w) * f64::from(w)).sum();
    let scale = if n == 0 { 0.0 } else { (sum_sq / n as f64).sqrt() };
    let atol = model.atol(scale, n);
    let rtol = model.rtol();
    let spread_at = |i: usize| spread.get(i).copied().unwrap_or(0.0);
    let lambda = tail_factor(n);
    let (mut failed, mut max_abs_error, mut err_sq) = (0usize, 0.0f64, 0.0f64);
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let want64 = f64::from(w);
        let error = if g.is_finite() { (f64::from(g) - want64).abs() } else { f64::INFINITY };
        let allowed = atol + rtol * want64.abs() + lambda * spread_at(i);
        // NaN-safe: a non-finite reference element never counts as within tolerance.
        let within = error <= allowed;
        if !within {
            failed += 1;
        }
        max_abs_error = max_abs_error.max(error);
        err_sq += error * error;
        let ratio = if error == 0.0 { 0.0 } else { error / allowed };
        let ratio = if ratio.is_nan() { f64::INFINITY } else { ratio };
        if worst.is_none_or(|(_, r, _, _)| ratio > r) {
            worst = Some((i, ratio, error, allowed));
        }
    }
    let rel_l2 = if err_sq == 0.0 {
        0.0
    } else if sum_sq > 0.0 {
        (err_sq / sum_sq).sqrt()
    } else {
        f64::INFINITY
    };
    let worst = worst.map(|(i, _, error, allowed)| Element {
        index: unravel(i, shape),
        got: got[i],
        want: want[i],
        error,
        allowed,
    });
    let spread_norm = spread.iter().map(|s| s * s).sum::<f64>().sqrt();
    let propagated = if spread_norm == 0.0 { 0.0 } else { tail_factor(1) * spread_norm / sum_sq.sqrt() };
    Ok(Comparison {
        model,
        shape: shape.to_vec(),
        scale,
        atol,
        rtol,
        spread_max: spread.iter().copied().fold(0.0, f64::max),
        failed,
        nonfinite_reference,
        worst,
        max_abs_error,
        rel_l2,
        rel_l2_bound: model.rel_l2_bound() + propagated,
    })
}

/// The `k` elements of `got` furthest outside (or nearest to the edge of) the tolerance of
/// `comparison`, worst first: the elements a mismatch report shows. `spread` is the one the
/// comparison was made with ([`compare_with_spread`]; empty: none); `got`, `want` and `spread`
/// have one value per element of `shape`, as [`compare_with_spread`] checked.
pub fn worst_elements(
    got: &[f32],
    want: &[f32],
    shape: &[usize],
    comparison: &Comparison,
    spread: &[f64],
    k: usize,
) -> Vec<Element> {
    let lambda = tail_factor(shape.iter().product());
    let mut all: Vec<Element> = got
        .iter()
        .zip(want)
        .enumerate()
        .map(|(i, (&g, &w))| {
            let error = if g.is_finite() { (f64::from(g) - f64::from(w)).abs() } else { f64::INFINITY };
            let allowed =
                comparison.atol + comparison.rtol * f64::from(w).abs() + lambda * spread.get(i).copied().unwrap_or(0.0);
            Element { index: unravel(i, shape), got: g, want: w, error, allowed }
        })
        .collect();
    let key = |e: &Element| if e.ratio().is_nan() { f64::INFINITY } else { e.ratio() };
    all.sort_by(|a, b| key(b).total_cmp(&key(a)));
    all.truncate(k);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(dtype: DType) -> ErrorModel {
        ErrorModel::new(dtype, 64)
    }

    #[test]
    fn exact_and_rounded_results_pass() {
        let want: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 7.0).collect();
        let c = compare(&want, &want, &[8, 8], model(DType::F16)).expect("same length");
        assert!(c.passed() && c.failed == 0 && c.rel_l2 == 0.0, "{c}");
        let rounded: Vec<f32> = want.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
        let c = compare(&rounded, &want, &[8, 8], model(DType::F16)).expect("same length");
        assert!(c.passed(), "{c}");
        assert!(c.rel_l2 > 0.0 && c.worst.as_ref().is_some_and(|w| w.ratio() < 0.5), "{c}");
    }

    #[test]
    fn a_nan_fails_and_is_the_worst_element() {
        let want = vec![1.0f32; 12];
        let mut got = want.clone();
        got[7] = f32::NAN;
        let c = compare(&got, &want, &[3, 4], model(DType::F32)).expect("same length");
        assert!(!c.passed());
        assert_eq!(c.failed, 1);
        let w = c.worst.as_ref().expect("a worst element");
        assert_eq!(w.index, vec![1, 3]);
        assert!(w.got.is_nan() && w.want == 1.0 && w.error.is_infinite(), "{w}");
        assert!(c.check("nan").is_err_and(|e| e.contains("1 of 12 elements") && e.contains("[1, 3]")));
    }

    #[test]
    fn a_non_finite_reference_fails() {
        let want = vec![1.0, f32::INFINITY, 2.0];
        let c = compare(&want, &want, &[3], model(DType::F32)).expect("same length");
        assert_eq!(c.nonfinite_reference, 1);
        assert!(!c.passed());
        assert!(c.to_string().contains("not finite"), "{c}");
    }

    #[test]
    fn a_uniform_scale_error_fails_the_l2_bound() {
        // 5·u_T too large everywhere: within the element-wise tolerance, above the L2 bound
        // (4·u_T and a little).
        let want: Vec<f32> = (0..4096).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let m = model(DType::Bf16);
        let factor = (1.0 + 5.0 * unit_roundoff(DType::Bf16)) as f32;
        let got: Vec<f32> = want.iter().map(|&v| v * factor).collect();
        let c = compare(&got, &want, &[4096], m).expect("same length");
        assert_eq!(c.failed, 0, "{c}");
        assert!(c.rel_l2 > c.rel_l2_bound && !c.passed(), "{c}");
    }

    #[test]
    fn lengths_must_agree() {
        let e = compare(&[1.0; 3], &[1.0; 4], &[4], model(DType::F16)).expect_err("3 vs 4");
        assert_eq!(e.to_string(), "expected 4 elements (shape [4]), found 3 computed and 4 reference elements");
    }

    #[test]
    fn tolerances_follow_the_model() {
        let m = ErrorModel::new(DType::F16, 4096);
        let u = 1.0 / 2048.0;
        assert!((m.sigma() - (2.0 * u + 64.0 * F32_UNIT_ROUNDOFF)).abs() < 1e-15);
        assert!((m.rtol() - (4.0 * u + 32.0 * F32_UNIT_ROUNDOFF)).abs() < 1e-15);
        assert!((m.atol(2.0, 1000) - tail_factor(1000) * m.sigma() * 2.0).abs() < 1e-15);
        // λ_N grows slowly: about 6.4 for a thousand elements, 7.7 for ten million.
        assert!((6.3..6.6).contains(&tail_factor(1000)) && (7.6..7.9).contains(&tail_factor(10_000_000)));
        assert_eq!(reduction_len([&[8usize, 4096][..], &[4096, 11008]]), 11008);
        assert_eq!(unravel(13, &[2, 3, 4]), vec![1, 0, 1]);
    }
}
