//! Finite-field fingerprints: the probabilistic equivalence check of a candidate
//! µGraph against the program, done soundly.
//!
//! Program and candidate are evaluated by the one evaluator ([`crate::eval`]) over
//! `Z_p × Z_q` on the same random inputs, in several independent trials, and their outputs are
//! compared.
//!
//! # The field
//!
//! `q = 2^31 − 105 = 2 147 483 543` and `p = 2q + 1 = 2^32 − 209 = 4 294 967 087` are both prime,
//! so `q | p − 1` and both are above 2^30 (the larger the field, the smaller the error bound
//! below). They were chosen as the largest
//! `q < 2^31` for which `q` and `2q + 1` are prime (Miller–Rabin with the deterministic bases
//! 2..37; the unit tests check primality and divisibility again). Keeping `p < 2^32` makes every
//! residue a `u32` and every product plus an accumulator fit a `u64`
//! (`(p−1)² + (p−1) < 2^64`), so the matmul step `acc + a·b` is one multiply and one reduction by
//! a constant modulus — no `u128`. The price is the size of `q`: the error bound of the
//! exponential identity test (Li & Wu, Theorem 2 in the OSDI'25 paper) is governed by `q`, not `p`,
//! and at `q ≈ 2^31` one trial's false-positive probability for a graph of degree `d` with `k`
//! exponentials is `≤ 8dk⁴/q + q^(−1/k²)`; independent trials multiply.
//!
//! # Values and operations
//!
//! A value is a pair `(x_p, x_q)` ([`Fp`]). `+ − ×` act componentwise, `÷` multiplies by the
//! modular inverse (Fermat; the inverse of 0 is defined as 0, consistently in both graphs).
//! `exp(x) = (ω^(x_q) mod p, h(ω^(x_q)) mod q)` with `ω` a random element of order exactly `q` in
//! `Z_p^*` (a random square other than 1), drawn per trial: the exponent lives in `Z_q`, the
//! result in `Z_p`, so `exp(a + b) = exp(a) · exp(b)` holds in the `p` component. The `q`
//! component of an exponential has no algebraic meaning (Li & Wu allow no exponential of an
//! exponential); it is a keyed random function of the result so that a later `exp` of it is still
//! a well-defined function of the value.
//!
//! A float value's identity is its `p` component: the keyed random functions below hash `x_p`,
//! and float outputs are compared on `x_p` (the `q` component is the exponent shadow that `exp`
//! consumes; `exp(a)·exp(b)` and `exp(a+b)` agree in `p` but not in `q`). Indices are the
//! exception (see below).
//!
//! `count(n) = n`, and `constant(c)` is the exact dyadic rational `c = m · 2^e` of the `f32`
//! (so `0.5 · x == x / 2`). Unary operators follow their law in the operator table
//! ([`crate::ir::Law`]): `exp`, `square`, `neg`, `recip`, `mul_scalar` and `add_scalar` are the
//! field operations above; every other one (`sqrt, silu, gelu, gelu_tanh, relu, tanh, sigmoid`,
//! `clamp` keyed by its bounds), `pow` and non-finite constants are random functions keyed per
//! trial: a
//! SplitMix64-style mix of (trial key, operator name and parameters, argument) — the same argument
//! gives the same result in both graphs, different arguments almost surely differ; never
//! surrogates that ignore their arguments. So the verifier decides equivalence up to the algebra
//! of `+ − × ÷ exp` and the `rms_norm` rule (a norm without epsilon of a normalized row, below): two
//! graphs that agree only through an identity of an uninterpreted operator (`tanh(x) =
//! 2·sigmoid(2x) − 1`, `silu(x) = x·sigmoid(x)`) are reported different, never the reverse; the
//! f32 reference checks the chosen µGraph's numerics.
//! `max` is the maximum under a keyed random total order of the values (so it is commutative,
//! associative and idempotent, as a maximum must be, and returns one of its arguments), and the
//! `−∞` sentinel is a random value placed at the bottom of that order. `x + c` (`add_scalar`) is
//! the field addition of the constant.
//!
//! # What is checked of a maximum, and what is not
//!
//! A maximum is a function of its arguments here, so every *use* of its value is checked
//! exactly: a candidate whose scale factors do not cancel computes another field value and is
//! rejected — an online softmax whose rescale swaps the running maxima (`exp(m_new − m_old)`),
//! or that subtracts the running maximum from the scores but never rescales the accumulators; a
//! split-KV combine that adds the partial results without weighing each by `exp(m_part −
//! m_total)`. What the field cannot see is *why* a
//! maximum is subtracted: `exp(x − m) / Σ exp(x − m) = exp(x) / Σ exp(x)` for every `m` (the
//! factor `exp(−m)` cancels exactly), so the safe softmax and the unshifted one are the same
//! function of the inputs and pass this check against each other, as does a split-KV combine that
//! rescales by `exp(m_part)` without subtracting the overall maximum. That difference is
//! numerical (the unshifted `exp` overflows), and the search's float check decides it: for a
//! program that takes a maximum it runs program and candidate in f32 on wide inputs and rejects a
//! candidate that overflows where the program does not (`crate::search::wide_range_check`).
//!
//! # Indices (`i32` tensors)
//!
//! An `i32` value holds its index in the `p` component (`gather` reads row `x_p`; an id outside
//! the table gives zeros in both graphs). `argmax` returns the position of the maximum under the
//! same random order as `max` (ties to the lowest position), and in the `q` component a keyed
//! hash of the whole searched row: the row it came from. `rope` is exact (products and sums of
//! the rotated pairs). What follows for the verdict:
//!
//! - an `i32` *output* is compared on both components: a candidate that returns the right
//!   position of the wrong row (a partial sum, another dim) is caught like any wrong value, with
//!   probability `1 − 2^-31` per element;
//! - the *rows `gather` reads at a computed index* (an `argmax` result used inside the program)
//!   depend on the index alone, and a position has only `n` possible values: a candidate whose
//!   row differs from the program's picks the same row with probability about `1/n` per element
//!   and trial (assuming its positions fall like random ones). Such programs get more trials:
//!   enough that `n^-trials ≤ 2^-40` for the smallest table `n` read that way
//!   ([`trials_for`]). The f32 float check of the chosen µGraph runs the real
//!   arithmetic on top;
//! - inputs of type `i32` are drawn as ids in `0..=rows` of the smallest table they index (the
//!   value `rows` itself is out of range: the zero rows are exercised too).
//!
//! # `rms_norm` without epsilon is idempotent: the rule beyond the field
//!
//! `sqrt` is uninterpreted, so the field alone cannot see that `rms_norm(rms_norm(x)) =
//! rms_norm(x)` when there is no epsilon (the normalized row's mean square is exactly 1, and
//! `sqrt(1) = 1`). Before evaluating, program and candidate are rewritten by one structural rule
//! ([`fold_repeated_norms`]): an `rms_norm` with epsilon 0 whose operand *is* the result of an
//! unweighted `rms_norm` with epsilon 0 normalizes nothing, and is evaluated as the identity
//! (times its weight, when it has one). The rule recognises the producer of the operand — a
//! kernel `rms_norm` read by a kernel `rms_norm`, or a block `rms_norm` read by a block `rms_norm`
//! of the same block graph — so the two normalize the same elements. In the same way a loop's sum
//! of one unchanging tile (`F·v`) read only by block norms without epsilon is evaluated as the
//! tile (`rms_norm(F·v) = rms_norm(v)`). Everything else is left to the field, which reports it
//! different. See [`fold_repeated_norms`] for why it is sound and what
//! it must not (and does not) accept. The field's `sqrt` stays a keyed random function: a true
//! modular square root would make `sqrt(a²) = ±a` one value for `a` and `−a` (`sqrt(−1)` would
//! equal `sqrt(1)` up to a sign no real computation has), which is unsound.
//!
//! # Use
//!
//! [`verify`] answers one question; [`FingerprintContext`] evaluates the program once per trial
//! and then checks any number of candidates ([`FingerprintContext::check`]), as the search does.

use rayon::prelude::*;

use std::borrow::Cow;

use crate::eval::{Domain, EvalError, RunShapes, Tensor, evaluate, evaluate_at};
use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, KernelGraph, KernelOp, Law, Scalar, TensorRef, UnaryOp,
};

/// The larger prime: values live in `Z_p`. `p = 2q + 1 = 2^32 − 209`.
pub const P: u64 = 4_294_967_087;
/// The smaller prime: exponents live in `Z_q`. `q = 2^31 − 105`, `q | p − 1`.
pub const Q: u64 = 2_147_483_543;

// Both primes above 2^30, q | p − 1, and residues in u32 so that `acc + a·b < p² ≤ 2^64`.
const _: () = assert!(P > 1 << 30 && Q > 1 << 30 && (P - 1).is_multiple_of(Q) && P < 1 << 32);

/// One fingerprint value: a residue modulo [`P`] and one modulo [`Q`] (`repr(C)`: the SIMD
/// matmul reads it as one little-endian `u64`, `q << 32 | p`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct Fp {
    /// The residue modulo `p`: the value's identity.
    pub p: u32,
    /// The residue modulo `q`: the value as an exponent.
    pub q: u32,
}

impl Fp {
    /// The value `n` (reduced in both fields).
    pub fn from_u64(n: u64) -> Self {
        Fp { p: (n % P) as u32, q: (n % Q) as u32 }
    }
}

impl std::fmt::Display for Fp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({} mod p, {} mod q)", self.p, self.q)
    }
}

/// `a + b mod m` for residues `a, b < m < 2^32`.
#[inline(always)]
fn add_mod(a: u32, b: u32, m: u64) -> u32 {
    let s = a as u64 + b as u64;
    (if s >= m { s - m } else { s }) as u32
}

/// `a − b mod m`.
#[inline(always)]
fn sub_mod(a: u32, b: u32, m: u64) -> u32 {
    let s = a as u64 + m - b as u64;
    (if s >= m { s - m } else { s }) as u32
}

/// `(acc + w·b) mod m` by Shoup's method, with `w_shoup = ⌊w·2^32 / m⌋` precomputed: for
/// `w, b < m < 2^32` the quotient estimate `⌊w_shoup·b / 2^32⌋` is off by at most one, so the
/// remainder lies in `[0, 2m)` and the sum with `acc < m` below `3m`.
#[inline(always)]
fn shoup_mul_add(acc: u32, w: u64, w_shoup: u64, b: u32, m: u64) -> u32 {
    // Wrapping operations: no overflow is possible, and overflow checks would stop vectorization.
    let qh = w_shoup.wrapping_mul(b as u64) >> 32;
    let r = w.wrapping_mul(b as u64).wrapping_sub(qh.wrapping_mul(m));
    let mut s = r.wrapping_add(acc as u64) as i64;
    let mi = m as i64;
    if s >= mi {
        s = s.wrapping_sub(mi);
    }
    if s >= mi {
        s = s.wrapping_sub(mi);
    }
    s as u32
}

/// `out[j] += a · b[j]` in both fields: the matmul row step.
#[inline(always)]
fn mul_add_row_portable(out: &mut [Fp], a: Fp, b: &[Fp]) {
    let (wp, wq) = (a.p as u64, a.q as u64);
    let (sp, sq) = ((wp << 32) / P, (wq << 32) / Q);
    for (o, &bv) in out.iter_mut().zip(b) {
        o.p = shoup_mul_add(o.p, wp, sp, bv.p, P);
        o.q = shoup_mul_add(o.q, wq, sq, bv.q, Q);
    }
}

/// The matmul with explicit SIMD (x86-64 AVX2): [`Fp`] is `repr(C)`, so one `u64` lane holds
/// `q << 32 | p`; the `p` and `q` halves are multiplied with `mul_epu32` (32×32→64 bits on the low
/// half of each lane) after a 32-bit shift for `q`. Identical values to [`mul_add_row_portable`].
#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{Fp, P, Q, mul_add_row_portable};
    use std::arch::x86_64::*;

    /// Which path this CPU runs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Level {
        /// No vector path: the portable loop.
        Portable,
        /// AVX2: 4 values per vector.
        Avx2,
    }

    /// Detects the best path for this CPU.
    pub fn detect() -> Level {
        if is_x86_feature_detected!("avx2") { Level::Avx2 } else { Level::Portable }
    }

    /// `s < m ? s : s − m` on 64-bit lanes holding values below 2^62 (the signed compare is exact).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn reduce_once(s: __m256i, m: __m256i) -> __m256i {
        let lt = _mm256_cmpgt_epi64(m, s);
        _mm256_blendv_epi8(_mm256_sub_epi64(s, m), s, lt)
    }

    /// One Shoup step on 4 values, `acc + w·b` in both fields: per 64-bit lane, `p` on the low
    /// half and `q` on the high half; the remainder `w·b − ⌊w'·b / 2^32⌋·m` lies in `[0, 2m)`, plus
    /// `acc` below `3m`, reduced by two conditional subtractions. `c` = `[w_p, w_q, w'_p, w'_q]`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn step(acc: __m256i, vb: __m256i, c: &[__m256i; 4], moduli: &[__m256i; 3]) -> __m256i {
        let [v_wp, v_wq, v_sp, v_sq] = *c;
        let [v_p, v_q, low] = *moduli;
        let bq = _mm256_srli_epi64::<32>(vb);
        let qh = _mm256_srli_epi64::<32>(_mm256_mul_epu32(vb, v_sp));
        let r = _mm256_sub_epi64(_mm256_mul_epu32(vb, v_wp), _mm256_mul_epu32(qh, v_p));
        let rp = reduce_once(reduce_once(_mm256_add_epi64(r, _mm256_and_si256(acc, low)), v_p), v_p);
        let qh = _mm256_srli_epi64::<32>(_mm256_mul_epu32(bq, v_sq));
        let r = _mm256_sub_epi64(_mm256_mul_epu32(bq, v_wq), _mm256_mul_epu32(qh, v_q));
        let rq = reduce_once(reduce_once(_mm256_add_epi64(r, _mm256_srli_epi64::<32>(acc)), v_q), v_q);
        _mm256_or_si256(rp, _mm256_slli_epi64::<32>(rq))
    }

    /// A whole matmul output row: the row is kept in registers, 32 columns at a time, while `k`
    /// advances in blocks of 64 (so the block of `b` being walked stays in cache).
    #[target_feature(enable = "avx2")]
    pub fn matmul_row_avx2(out: &mut [Fp], a: &[Fp], b: &[Fp]) {
        const KB: usize = 64;
        const GROUP: usize = 8; // vectors of 4 values: 32 columns
        let n = out.len();
        let k = a.len().min(b.len().checked_div(n).unwrap_or(0));
        let body = n - n % 4;
        let moduli = [_mm256_set1_epi64x(P as i64), _mm256_set1_epi64x(Q as i64), _mm256_set1_epi64x(0xffff_ffff)];
        let mut consts = [[_mm256_setzero_si256(); 4]; KB];
        let mut k0 = 0;
        while k0 < k {
            let kb = (k - k0).min(KB);
            for (c, x) in consts.iter_mut().zip(&a[k0..k0 + kb]) {
                let (wp, wq) = (x.p as u64, x.q as u64);
                *c = [
                    _mm256_set1_epi64x(wp as i64),
                    _mm256_set1_epi64x(wq as i64),
                    _mm256_set1_epi64x(((wp << 32) / P) as i64),
                    _mm256_set1_epi64x(((wq << 32) / Q) as i64),
                ];
            }
            let mut j = 0;
            while j + 4 * GROUP <= body {
                // SAFETY: columns `j..j + 32 <= body <= n` of `out` and, for `t < kb`, of row
                // `k0 + t < k` of `b` (`(k0 + t)·n + j + 32 <= k·n <= b.len()`) are in bounds;
                // `Fp` is `repr(C)` of two `u32`; the loads and stores are unaligned ones.
                unsafe {
                    let o = out.as_mut_ptr().add(j) as *mut __m256i;
                    let mut acc = [_mm256_setzero_si256(); GROUP];
                    for (u, a_u) in acc.iter_mut().enumerate() {
                        *a_u = _mm256_loadu_si256(o.add(u));
                    }
                    for (t, c) in consts.iter().enumerate().take(kb) {
                        let row = b.as_ptr().add((k0 + t) * n + j) as *const __m256i;
                        for (u, a_u) in acc.iter_mut().enumerate() {
                            *a_u = step(*a_u, _mm256_loadu_si256(row.add(u)), c, &moduli);
                        }
                    }
                    for (u, a_u) in acc.iter().enumerate() {
                        _mm256_storeu_si256(o.add(u), *a_u);
                    }
                }
                j += 4 * GROUP;
            }
            while j < body {
                // SAFETY: as above, for the 4 columns `j..j + 4 <= body`.
                unsafe {
                    let o = out.as_mut_ptr().add(j) as *mut __m256i;
                    let mut acc = _mm256_loadu_si256(o);
                    for (t, c) in consts.iter().enumerate().take(kb) {
                        acc = step(
                            acc,
                            _mm256_loadu_si256(b.as_ptr().add((k0 + t) * n + j) as *const __m256i),
                            c,
                            &moduli,
                        );
                    }
                    _mm256_storeu_si256(o, acc);
                }
                j += 4;
            }
            if body < n {
                for (t, &x) in a[k0..k0 + kb].iter().enumerate() {
                    let r = (k0 + t) * n;
                    mul_add_row_portable(&mut out[body..n], x, &b[r + body..r + n]);
                }
            }
            k0 += kb;
        }
    }
}

/// `base^e mod m`.
pub fn pow_mod(base: u64, mut e: u64, m: u64) -> u64 {
    let mut r = 1u64 % m;
    let mut b = base % m;
    while e > 0 {
        if e & 1 == 1 {
            r = r * b % m;
        }
        b = b * b % m;
        e >>= 1;
    }
    r
}

/// The inverse of `a` modulo the prime `m` (Fermat), with `0⁻¹ := 0`.
pub fn inv_mod(a: u64, m: u64) -> u64 {
    pow_mod(a, m - 2, m)
}

/// SplitMix64's finalizer: a fast bijective mix of 64 bits.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// `mix64` of a sequence of words, keyed.
#[inline(always)]
fn hash_words(key: u64, words: &[u64]) -> u64 {
    let mut h = key;
    for &w in words {
        h = mix64(h.wrapping_add(GOLDEN) ^ w);
    }
    h
}

/// The salt of an uninterpreted unary operator's random function: its name and parameters (the
/// operator table's identity of it).
fn unary_key(name: &str, params: u64) -> u64 {
    let name_hash = name.bytes().fold(tag::UNARY, |h, b| mix64(h.wrapping_add(GOLDEN) ^ u64::from(b)));
    hash_words(name_hash, &[params])
}

/// Tags of the keyed random functions.
mod tag {
    /// Uninterpreted unary operators (salted by [`super::unary_key`]).
    pub const UNARY: u64 = 1;
    pub const POW: u64 = 6;
    pub const MAX_RANK: u64 = 7;
    pub const EXP_Q: u64 = 8;
    pub const NON_FINITE: u64 = 9;
    pub const NEG_INFINITY: u64 = 10;
    pub const OMEGA: u64 = 11;
    pub const INPUT: u64 = 12;
    pub const TRIAL: u64 = 13;
    pub const ARGMAX_ROW: u64 = 14;
    pub const IDS: u64 = 15;
}

/// Smallest and largest binary exponent of an `f32` value `m · 2^e` with an integer `m`.
const MIN_EXP2: i32 = -149;
const MAX_EXP2: i32 = 104;

/// The `Z_p × Z_q` value domain of one trial: the order-`q` element `ω` and the key of the random
/// functions. Immutable after construction, so one domain is shared by all evaluator threads.
#[derive(Clone, Debug)]
pub struct FieldDomain {
    key: u64,
    omega: u32,
    /// `ω^(j · 256^i) mod p` for `i` in 0..4, `j` in 0..256: an exponential is four products.
    omega_table: Vec<u32>,
    /// `2^e` in both fields for `e` in `MIN_EXP2..=MAX_EXP2`.
    pow2: Vec<Fp>,
    neg_infinity: Fp,
    /// Which vector path the matmul row step uses (detected once).
    #[cfg(target_arch = "x86_64")]
    simd: simd::Level,
}

impl FieldDomain {
    /// A domain with random functions keyed by `key` and `ω` derived from it.
    pub fn new(key: u64) -> Self {
        // ω = g² for a random g ∉ {0, 1, p−1}: the squares form the subgroup of order q = (p−1)/2,
        // and g² = 1 only for g = ±1.
        let mut ctr = 0u64;
        let omega = loop {
            let g = hash_words(key, &[tag::OMEGA, ctr]) % P;
            ctr += 1;
            if g > 1 && g < P - 1 {
                break (g * g % P) as u32;
            }
        };
        Self::with_omega(key, omega)
    }

    /// A domain with an explicit `ω` (it must have order `q` in `Z_p^*`; see [`has_order_q`]).
    pub fn with_omega(key: u64, omega: u32) -> Self {
        let mut omega_table = Vec::with_capacity(4 * 256);
        let mut base = omega as u64;
        for _ in 0..4 {
            let mut acc = 1u64;
            for _ in 0..256 {
                omega_table.push(acc as u32);
                acc = acc * base % P;
            }
            // base^256
            base = acc;
        }
        let inv2 = Fp { p: inv_mod(2, P) as u32, q: inv_mod(2, Q) as u32 };
        let two = Fp::from_u64(2);
        let mut pow2 = Vec::with_capacity((MAX_EXP2 - MIN_EXP2 + 1) as usize);
        for e in MIN_EXP2..=MAX_EXP2 {
            let (b, n) = if e < 0 { (inv2, (-e) as u64) } else { (two, e as u64) };
            pow2.push(Fp { p: pow_mod(b.p as u64, n, P) as u32, q: pow_mod(b.q as u64, n, Q) as u32 });
        }
        let h = hash_words(key, &[tag::NEG_INFINITY]);
        let neg_infinity = Fp { p: (h % P) as u32, q: (mix64(h) % Q) as u32 };
        FieldDomain {
            key,
            omega,
            omega_table,
            pow2,
            neg_infinity,
            #[cfg(target_arch = "x86_64")]
            simd: simd::detect(),
        }
    }

    /// The trial's `ω`, of order `q` in `Z_p^*`.
    pub fn omega(&self) -> u32 {
        self.omega
    }

    /// The key of the trial's random functions.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The same domain with the vector paths of the matmul switched off (for tests and benchmarks).
    pub fn portable(mut self) -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            self.simd = simd::Level::Portable;
        }
        self
    }

    /// `ω^e mod p` for an exponent `e < q`.
    #[inline]
    fn omega_pow(&self, e: u32) -> u32 {
        let t = &self.omega_table;
        let mut r = t[(e & 0xff) as usize] as u64;
        r = r * t[256 + ((e >> 8) & 0xff) as usize] as u64 % P;
        r = r * t[512 + ((e >> 16) & 0xff) as usize] as u64 % P;
        r = r * t[768 + (e >> 24) as usize] as u64 % P;
        r as u32
    }

    /// A keyed random function of a value (its `p` component) under operator tag `tag`.
    #[inline]
    fn keyed(&self, tag: u64, salt: u64, a: Fp) -> Fp {
        let h = hash_words(self.key, &[tag, salt, a.p as u64]);
        Fp { p: (h % P) as u32, q: (mix64(h ^ GOLDEN) % Q) as u32 }
    }

    /// The rank of a value in the random total order that defines `max` (`−∞` is the bottom).
    #[inline]
    fn rank(&self, a: Fp) -> u64 {
        if a.p == self.neg_infinity.p {
            0
        } else {
            // Distinct p components get distinct ranks: the low 32 bits break hash ties.
            (hash_words(self.key, &[tag::MAX_RANK, a.p as u64]) | (1 << 63)) & !0xffff_ffff | a.p as u64
        }
    }

    /// `e^a`.
    #[inline]
    pub fn exp(&self, a: Fp) -> Fp {
        let p = self.omega_pow(a.q);
        let h = hash_words(self.key, &[tag::EXP_Q, p as u64]);
        Fp { p, q: (h % Q) as u32 }
    }

    /// The exact value of the dyadic rational `c` (0.0 and −0.0 are zero); non-finite constants
    /// are keyed random values.
    pub fn dyadic(&self, c: f32) -> Fp {
        if c == 0.0 {
            return Fp::default();
        }
        if !c.is_finite() {
            return self.keyed(tag::NON_FINITE, 0, Fp { p: c.to_bits(), q: 0 });
        }
        let bits = c.to_bits();
        let negative = bits >> 31 == 1;
        let biased = ((bits >> 23) & 0xff) as i32;
        let frac = bits & 0x7f_ffff;
        let (m, e) = if biased == 0 { (frac, MIN_EXP2) } else { (frac | 0x80_0000, biased - 127 - 23) };
        let scale = self.pow2[(e - MIN_EXP2) as usize];
        let v = Fp { p: ((m as u64 % P) * scale.p as u64 % P) as u32, q: ((m as u64 % Q) * scale.q as u64 % Q) as u32 };
        if negative { self.sub(Fp::default(), v) } else { v }
    }

    /// Random inputs for a graph with these parameter shapes: independent uniform elements of
    /// `Z_p × Z_q` for every input, derived from `key` (reproducible, generated in parallel).
    pub fn random_inputs(key: u64, shapes: &[Vec<usize>]) -> Vec<Tensor<Fp>> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let n: usize = shape.iter().product();
                let k = hash_words(key, &[tag::INPUT, i as u64]);
                let data: Vec<Fp> = (0..n as u64)
                    .into_par_iter()
                    .map(|j| {
                        let h = mix64(k ^ j.wrapping_mul(GOLDEN));
                        let g = mix64(h ^ GOLDEN);
                        // Multiply-shift maps 64 uniform bits to [0, m) with bias below 2^-32.
                        Fp { p: (((h as u128) * P as u128) >> 64) as u32, q: (((g as u128) * Q as u128) >> 64) as u32 }
                    })
                    .collect();
                Tensor { shape: shape.clone(), data }
            })
            .collect()
    }
}

impl FieldDomain {
    /// Random ids for an `i32` input of shape `shape` that indexes tables of at least `rows`
    /// rows: uniform in `0..=rows` (`rows` itself addresses nothing), derived from `key` and the
    /// input's position `i`.
    pub fn random_ids(key: u64, i: usize, shape: &[usize], rows: usize) -> Tensor<Fp> {
        let n: usize = shape.iter().product();
        let k = hash_words(key, &[tag::IDS, i as u64]);
        let data = (0..n as u64)
            .map(|j| {
                let h = mix64(k ^ j.wrapping_mul(GOLDEN));
                Fp::from_u64((((h as u128) * (rows as u128 + 1)) >> 64) as u64)
            })
            .collect();
        Tensor { shape: shape.to_vec(), data }
    }
}

impl Domain for FieldDomain {
    type V = Fp;

    fn zero(&self) -> Fp {
        Fp::default()
    }

    fn neg_infinity(&self) -> Fp {
        self.neg_infinity
    }

    fn count(&self, n: usize) -> Fp {
        Fp::from_u64(n as u64)
    }

    fn constant(&self, c: f32) -> Fp {
        self.dyadic(c)
    }

    #[inline(always)]
    fn add(&self, a: Fp, b: Fp) -> Fp {
        Fp { p: add_mod(a.p, b.p, P), q: add_mod(a.q, b.q, Q) }
    }

    #[inline(always)]
    fn sub(&self, a: Fp, b: Fp) -> Fp {
        Fp { p: sub_mod(a.p, b.p, P), q: sub_mod(a.q, b.q, Q) }
    }

    #[inline(always)]
    fn mul(&self, a: Fp, b: Fp) -> Fp {
        Fp { p: (a.p as u64 * b.p as u64 % P) as u32, q: (a.q as u64 * b.q as u64 % Q) as u32 }
    }

    fn div(&self, a: Fp, b: Fp) -> Fp {
        let inv = Fp { p: inv_mod(b.p as u64, P) as u32, q: inv_mod(b.q as u64, Q) as u32 };
        self.mul(a, inv)
    }

    fn pow(&self, a: Fp, b: Fp) -> Fp {
        self.keyed(tag::POW, b.p as u64, a)
    }

    #[inline]
    fn max(&self, a: Fp, b: Fp) -> Fp {
        if self.rank(a) >= self.rank(b) { a } else { b }
    }

    fn unary(&self, op: &UnaryOp, a: Fp) -> Fp {
        let spec = op.spec();
        match spec.law {
            Law::Exp => self.exp(a),
            Law::Square => self.mul(a, a),
            Law::Neg => self.sub(Fp::default(), a),
            Law::Recip => self.div(Fp::from_u64(1), a),
            Law::Scale(c) => self.mul(self.dyadic(c.0), a),
            Law::Offset(c) => self.add(self.dyadic(c.0), a),
            Law::Uninterpreted => self.keyed(tag::UNARY, unary_key(spec.name, spec.params.bits()), a),
        }
    }

    fn index(&self, v: Fp) -> Option<usize> {
        Some(v.p as usize)
    }

    fn greater(&self, a: Fp, b: Fp) -> bool {
        self.rank(a) > self.rank(b)
    }

    /// Position `i` in `p`, and in `q` a keyed hash of the searched row (which row the position
    /// is of).
    fn position(&self, i: usize, row: &[Fp]) -> Fp {
        let h = row
            .iter()
            .fold(hash_words(self.key, &[tag::ARGMAX_ROW]), |h, v| mix64(h.wrapping_add(GOLDEN) ^ v.p as u64));
        Fp { p: i as u32, q: (h % Q) as u32 }
    }

    #[inline(always)]
    fn mul_add(&self, acc: Fp, a: Fp, b: Fp) -> Fp {
        // (p−1)² + (p−1) < 2^64: one reduction per component.
        Fp {
            p: ((acc.p as u64 + a.p as u64 * b.p as u64) % P) as u32,
            q: ((acc.q as u64 + a.q as u64 * b.q as u64) % Q) as u32,
        }
    }

    fn matmul_row(&self, out: &mut [Fp], a: &[Fp], b: &[Fp]) {
        #[cfg(target_arch = "x86_64")]
        if self.simd == simd::Level::Avx2 {
            // SAFETY: `simd` is `Avx2` only if `simd::detect` found AVX2 on this CPU.
            return unsafe { simd::matmul_row_avx2(out, a, b) };
        }
        let n = out.len();
        for (kk, &av) in a.iter().enumerate() {
            mul_add_row_portable(out, av, &b[kk * n..(kk + 1) * n]);
        }
    }
}

/// Whether `omega` has order exactly `q` in `Z_p^*` (`q` is prime, so: `ω ≠ 1` and `ω^q = 1`).
pub fn has_order_q(omega: u32) -> bool {
    omega != 1 && omega != 0 && pow_mod(omega as u64, Q, P) == 1
}

/// How a verification is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyConfig {
    /// Independent trials (fresh inputs, `ω` and keys each); at least 2 are always run, more for
    /// programs that gather at computed indices ([`trials_for`]).
    pub trials: usize,
    /// Seed of all randomness: the same seed gives the same trials.
    pub seed: u64,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig { trials: 2, seed: 0x6d69_7261_6765 }
    }
}

/// Why a verification could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The evaluator refused a graph.
    #[error("evaluating the {which}: {source}")]
    Eval {
        /// `program` or `candidate`.
        which: &'static str,
        /// The evaluator's error.
        source: EvalError,
    },
}

/// The evidence that a candidate is not equivalent to the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Witness {
    /// The signatures differ (input count, shapes or element types; output count, shapes or
    /// element types), so no evaluation was needed.
    Signature {
        /// What differs, with what was expected and found.
        reason: String,
    },
    /// A program output has no equal candidate output.
    Value {
        /// The trial (0-based) in which it was found.
        trial: usize,
        /// The program output that no distinct candidate output matches.
        output: usize,
        /// The candidate output of the same shape it was compared with, if any.
        candidate_output: Option<usize>,
        /// The first index where the two differ.
        index: Vec<usize>,
        /// The program's value there.
        program: Fp,
        /// The candidate's value there.
        candidate: Fp,
    },
}

impl std::fmt::Display for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Witness::Signature { reason } => write!(f, "signatures differ: {reason}"),
            Witness::Value { trial, output, candidate_output: Some(c), index, program, candidate } => write!(
                f,
                "trial {trial}: program output {output} has no equal candidate output; at index {index:?} it is {program}, candidate output {c} has {candidate}"
            ),
            Witness::Value { trial, output, candidate_output: None, .. } => {
                write!(f, "trial {trial}: program output {output} has no candidate output of its shape left to match")
            }
        }
    }
}

/// The answer of a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every trial gave equal outputs (up to the order of the outputs).
    Equivalent,
    /// A difference was found.
    NotEquivalent {
        /// What differs, where.
        witness: Witness,
    },
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Equivalent`].
    pub fn is_equivalent(&self) -> bool {
        matches!(self, Verdict::Equivalent)
    }
}

/// One trial: its domain, inputs and the program's outputs.
struct Trial {
    domain: FieldDomain,
    inputs: Vec<Tensor<Fp>>,
    outputs: Vec<Tensor<Fp>>,
}

/// A program's signature: input and output shapes and element types.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Signature {
    inputs: Vec<(Vec<usize>, DType)>,
    outputs: Vec<(Vec<usize>, DType)>,
}

fn signature(g: &KernelGraph) -> Signature {
    let inputs = g.inputs().iter().map(|d| (d.shape.clone(), d.dtype)).collect();
    let outputs = g.outputs().iter().filter_map(|(t, _)| g.desc(*t).ok().map(|d| (d.shape.clone(), d.dtype))).collect();
    Signature { inputs, outputs }
}

/// The program's fingerprints, computed once per trial, against which candidates are checked.
///
/// Holds the trials' inputs and the program's outputs (memory: two values of 4 bytes per input
/// and output element, per trial). `check` only reads it, so one context can serve several
/// threads.
pub struct FingerprintContext {
    signature: Signature,
    trials: Vec<Trial>,
}

impl FingerprintContext {
    /// Evaluates `program` in `cfg.trials` (at least 2) independent trials.
    ///
    /// Programs that gather rows at computed indices get more trials ([`trials_for`]); `i32`
    /// inputs are drawn as ids of the tables they index ([`index_bounds`]).
    pub fn new(program: &KernelGraph, cfg: &VerifyConfig) -> Result<Self, VerifyError> {
        Self::new_sized(program, cfg, None)
    }

    /// [`FingerprintContext::new`] for a program with runtime-sized dims, evaluated at the run
    /// sizes `run` describes (see [`crate::dims::DimPlan::run_shapes`]); check candidates with
    /// [`FingerprintContext::check_at`].
    pub fn new_at(program: &KernelGraph, cfg: &VerifyConfig, run: &RunShapes) -> Result<Self, VerifyError> {
        Self::new_sized(program, cfg, Some(run))
    }

    fn new_sized(program: &KernelGraph, cfg: &VerifyConfig, run: Option<&RunShapes>) -> Result<Self, VerifyError> {
        let signature = signature(program);
        let shapes: Vec<Vec<usize>> = match run {
            Some(r) => r.inputs.clone(),
            None => signature.inputs.iter().map(|(s, _)| s.clone()).collect(),
        };
        let bounds = index_bounds(program);
        let folded = fold_repeated_norms(program);
        let trials = (0..trials_for(program, cfg))
            .map(|t| {
                let key = hash_words(cfg.seed, &[tag::TRIAL, t as u64]);
                let domain = FieldDomain::new(key);
                let mut inputs = FieldDomain::random_inputs(mix64(key ^ tag::INPUT), &shapes);
                for (i, bound) in bounds.iter().enumerate() {
                    if let Some(rows) = bound {
                        inputs[i] = FieldDomain::random_ids(key, i, &shapes[i], *rows);
                    }
                }
                let outputs = match run {
                    Some(r) => evaluate_at(&folded, &domain, &inputs, r),
                    None => evaluate(&folded, &domain, &inputs),
                }
                .map_err(|source| VerifyError::Eval { which: "program", source })?;
                Ok(Trial { domain, inputs, outputs })
            })
            .collect::<Result<Vec<_>, VerifyError>>()?;
        Ok(FingerprintContext { signature, trials })
    }

    /// Number of trials.
    pub fn trials(&self) -> usize {
        self.trials.len()
    }

    /// The program's outputs in trial `trial`.
    pub fn program_outputs(&self, trial: usize) -> Option<&[Tensor<Fp>]> {
        self.trials.get(trial).map(|t| t.outputs.as_slice())
    }

    /// Checks `candidate` against the program: equal signatures, then every trial (stopping at
    /// the first difference). Outputs are matched as a set: each program output must equal a
    /// distinct candidate output of the same shape and element type, in any order.
    pub fn check(&self, candidate: &KernelGraph) -> Result<Verdict, VerifyError> {
        self.check_sized(candidate, None)
    }

    /// [`FingerprintContext::check`] at run sizes: `run` is the candidate's geometry at the sizes
    /// this context was made at ([`FingerprintContext::new_at`]). Signatures are compared at the
    /// compile size.
    pub fn check_at(&self, candidate: &KernelGraph, run: &RunShapes) -> Result<Verdict, VerifyError> {
        self.check_sized(candidate, Some(run))
    }

    fn check_sized(&self, candidate: &KernelGraph, run: Option<&RunShapes>) -> Result<Verdict, VerifyError> {
        let sig = signature(candidate);
        if let Some(reason) = signature_difference(&self.signature, &sig) {
            return Ok(Verdict::NotEquivalent { witness: Witness::Signature { reason } });
        }
        let n = sig.outputs.len();
        // compatible[i][j]: program output i equals candidate output j in every trial so far.
        let mut compatible: Vec<Vec<bool>> =
            (0..n).map(|i| (0..n).map(|j| self.signature.outputs[i] == sig.outputs[j]).collect()).collect();
        let folded = fold_repeated_norms(candidate);
        for (t, trial) in self.trials.iter().enumerate() {
            let outs = match run {
                Some(r) => evaluate_at(&folded, &trial.domain, &trial.inputs, r),
                None => evaluate(&folded, &trial.domain, &trial.inputs),
            }
            .map_err(|source| VerifyError::Eval { which: "candidate", source })?;
            for (i, row) in compatible.iter_mut().enumerate() {
                for (j, ok) in row.iter_mut().enumerate() {
                    if *ok {
                        *ok = first_difference(&trial.outputs[i], &outs[j], self.signature.outputs[i].1).is_none();
                    }
                }
            }
            if let Some(unmatched) = unmatched_output(&compatible) {
                // Report against a same-shape candidate output (the first one, in order).
                let same = (0..n).find(|&j| self.signature.outputs[unmatched] == sig.outputs[j]);
                let dtype = self.signature.outputs[unmatched].1;
                let witness = match same
                    .and_then(|j| first_difference(&trial.outputs[unmatched], &outs[j], dtype).map(|d| (j, d)))
                {
                    Some((j, flat)) => Witness::Value {
                        trial: t,
                        output: unmatched,
                        candidate_output: Some(j),
                        index: unflatten(flat, &outs[j].shape),
                        program: trial.outputs[unmatched].data[flat],
                        candidate: outs[j].data[flat],
                    },
                    None => Witness::Value {
                        trial: t,
                        output: unmatched,
                        candidate_output: None,
                        index: vec![],
                        program: Fp::default(),
                        candidate: Fp::default(),
                    },
                };
                return Ok(Verdict::NotEquivalent { witness });
            }
        }
        Ok(Verdict::Equivalent)
    }
}

/// Verifies `candidate` against `program` with fingerprints.
pub fn verify(program: &KernelGraph, candidate: &KernelGraph, cfg: &VerifyConfig) -> Result<Verdict, VerifyError> {
    // A signature mismatch needs no evaluation of the program.
    if let Some(reason) = signature_difference(&signature(program), &signature(candidate)) {
        return Ok(Verdict::NotEquivalent { witness: Witness::Signature { reason } });
    }
    FingerprintContext::new(program, cfg)?.check(candidate)
}

/// `g` with every `rms_norm` that normalizes an already normalized row replaced by the identity
/// (times its weight), as the verifier evaluates it: borrowed when there is none. Node numbers
/// are kept (a replaced node becomes `mul_scalar(1)`, or `×` its weight), so run geometries
/// indexed by node ([`RunShapes`]) still apply.
///
/// The rule, at each level of the IR: an `rms_norm` with epsilon exactly 0 whose operand is port
/// 0 of a node that is
/// - at kernel level, a kernel `rms_norm` with epsilon 0 and *no weight* (or a node this rule
///   already replaced by the identity),
/// - in a block graph, a block `rms_norm` with epsilon 0 of the same block graph (or a replaced
///   one);
///
/// and, in a block graph, a sum over the loop (`Accum { Sum }`) of a loop-invariant tile `v` —
/// one that depends on no input iterator with a for-loop dim and on no loop-carried state — read
/// only by block `rms_norm`s without epsilon is evaluated as `Accum { Max }`, the tile itself:
/// the sum is `F·v` with `F ≥ 1` iterations, and `rms_norm(F·v) = F·v / sqrt(F²·m) =
/// rms_norm(v)` (with an epsilon, `F·v / sqrt(F²·m + eps)` is another function; another reader
/// of the sum sees `F·v`; a tile that changes with the iteration is no multiple: none of these is
/// rewritten).
///
/// Why it is sound: for a row `x` of `n` elements with mean square `m = Σx²/n > 0`, `y = x /
/// sqrt(m)` has mean square `Σy²/n = m/m = 1` exactly, so `rms_norm(y) = y / sqrt(1) = y` over
/// the reals; with a weight `g`, `rms_norm(y)·g = y·g`. At a row with `m = 0` (all zeros) both
/// sides are `0/0`; the field defines `0⁻¹ = 0` and gives 0 for both. Kernel `rms_norm` normalizes
/// the last dim of the whole tensor, so inner and outer normalize the same rows at any size (the
/// run sizes included). A block `rms_norm` normalizes the last dim of its tile over the tile's
/// valid elements (the masked-reduction rule), and the outer one reads the inner one's very tile
/// with the same valid box: again the same elements, and padding never reaches a result. The
/// rewritten graph computes the same real function wherever the original is defined, so
/// equal fingerprints of the rewritten graphs mean what they meant before.
///
/// What it must not accept, and does not: with epsilon `e > 0` the normalized row's mean square
/// is `m / (m + e)`, not 1 (no rewrite when either norm has an epsilon); a norm over other
/// elements (another axis after a transpose or reshape, a block norm of a tile that is only part
/// of the row a kernel norm would see) is no operand produced directly by a norm of the same
/// level; `rms_norm(rms_norm(x)·g)` is `rms_norm(x·g)`, not `rms_norm(x)·g` (an inner norm with a
/// weight, or any operator between the two, stops the rule); `rms_norm(2x) = rms_norm(x)` but
/// `2·rms_norm(x)` is not normalized. Forms the rule does not recognise (a norm written as an
/// `RmsLast` accumulator and a division, as Mirage writes it) stay uninterpreted: the verifier
/// reports them different, never the reverse.
pub fn fold_repeated_norms(g: &KernelGraph) -> Cow<'_, KernelGraph> {
    let nodes = g.nodes();
    // Per node: its result (port 0) is an unweighted `rms_norm` without epsilon of its operand.
    let mut normalized = vec![false; nodes.len()];
    let mut replaced: Vec<Option<KernelOp>> = vec![None; nodes.len()];
    let mut any = false;
    for (i, n) in nodes.iter().enumerate() {
        match &n.op {
            KernelOp::RmsNorm { eps } if eps.0 == 0.0 => {
                let weighted = n.inputs.len() > 1;
                if reads_normalized(&n.inputs, &normalized) {
                    replaced[i] =
                        Some(if weighted { KernelOp::Binary { op: BinaryOp::Mul } } else { identity_kernel() });
                    any = true;
                }
                normalized[i] = !weighted;
            }
            KernelOp::Custom { block } => {
                if let Some(b) = fold_block(block) {
                    replaced[i] = Some(KernelOp::Custom { block: Box::new(b) });
                    any = true;
                }
            }
            KernelOp::Input { .. }
            | KernelOp::Output { .. }
            | KernelOp::Matmul
            | KernelOp::Unary { .. }
            | KernelOp::Binary { .. }
            | KernelOp::ReduceSum { .. }
            | KernelOp::ReduceMax { .. }
            | KernelOp::RmsNorm { .. }
            | KernelOp::Concat { .. }
            | KernelOp::Rope { .. }
            | KernelOp::Gather
            | KernelOp::Argmax { .. } => {}
        }
    }
    if !any {
        return Cow::Borrowed(g);
    }
    let mut out = KernelGraph::new();
    for (n, op) in nodes.iter().zip(replaced) {
        // The replacements keep every shape rule (same operands, same result), so the builder
        // accepts them; should it not, the graph is evaluated as it is (no rule, no acceptance).
        if out.push(op.unwrap_or_else(|| n.op.clone()), &n.inputs).is_err() {
            return Cow::Borrowed(g);
        }
    }
    Cow::Owned(out)
}

/// `mul_scalar(1)`: the identity, exactly, in every domain.
fn identity_kernel() -> KernelOp {
    KernelOp::Unary { op: UnaryOp::MulScalar { c: Scalar(1.0) } }
}

/// Whether operand 0 of `inputs` is port 0 of a node whose result is a normalized row.
fn reads_normalized(inputs: &[TensorRef], normalized: &[bool]) -> bool {
    inputs.first().is_some_and(|t| t.port == 0 && normalized.get(t.node).copied().unwrap_or(false))
}

/// [`fold_repeated_norms`] within one block graph: the rewritten graph, or `None` when no rule
/// applies. Besides a block `rms_norm` of a block `rms_norm` (the identity), the block form of the
/// norm's invariance to a positive factor: an `Accum { Sum }` of a loop-invariant tile (one that
/// depends on no input iterator with a for-loop dim and on no loop-carried state) adds the same
/// tile `v` once per iteration, `F·v` with `F ≥ 1` the number of iterations; when every reader of
/// the sum is a block `rms_norm` without epsilon, `rms_norm(F·v) = F·v / sqrt(F²·m) = rms_norm(v)`,
/// so the sum is evaluated as `Accum { Max }` (the maximum of equal tiles is the tile, exactly, in
/// every domain). With an epsilon (`F·v / sqrt(F²·m + eps)`), another reader of the sum (which
/// sees `F·v`), or a tile that changes with the iteration, nothing is rewritten.
fn fold_block(b: &BlockGraph) -> Option<BlockGraph> {
    let nodes = b.nodes();
    let mut normalized = vec![false; nodes.len()];
    // Per node: its tile is the same in every iteration of the loop.
    let mut invariant = vec![false; nodes.len()];
    let mut replaced: Vec<Option<BlockOp>> = vec![None; nodes.len()];
    let plain_norm = |op: &BlockOp| matches!(op, BlockOp::RmsNorm { eps } if eps.0 == 0.0);
    for (i, n) in nodes.iter().enumerate() {
        invariant[i] = match &n.op {
            BlockOp::Input { forloop_dim, .. } => forloop_dim.is_none(),
            BlockOp::Accum { .. } | BlockOp::RunningMax { .. } | BlockOp::Output { .. } => false,
            BlockOp::Matmul
            | BlockOp::Unary { .. }
            | BlockOp::Binary { .. }
            | BlockOp::ReduceSum { .. }
            | BlockOp::ReduceSumTo { .. }
            | BlockOp::ReduceMax { .. }
            | BlockOp::RmsNorm { .. }
            | BlockOp::Concat { .. }
            | BlockOp::Rope { .. }
            | BlockOp::Argmax { .. }
            | BlockOp::Gather { .. } => n.inputs.iter().all(|t| invariant[t.node]),
        };
        if plain_norm(&n.op) {
            if reads_normalized(&n.inputs, &normalized) {
                replaced[i] = Some(BlockOp::Unary { op: UnaryOp::MulScalar { c: Scalar(1.0) } });
            }
            normalized[i] = true;
        }
        if let BlockOp::Accum { acc: AccKind::Sum } = n.op
            && b.forloop_range() > 1
            && n.inputs.len() == 1
            && invariant[n.inputs[0].node]
        {
            let mut readers = nodes.iter().filter(|m| m.inputs.iter().any(|t| t.node == i)).peekable();
            if readers.peek().is_some() && readers.all(|m| plain_norm(&m.op) && m.inputs.len() == 1) {
                replaced[i] = Some(BlockOp::Accum { acc: AccKind::Max });
            }
        }
    }
    if replaced.iter().all(Option::is_none) {
        return None;
    }
    let mut out = BlockGraph::new(b.inputs().to_vec(), b.grid(), b.threads(), b.forloop_range()).ok()?;
    for (n, r) in nodes.iter().zip(replaced) {
        out.push(r.unwrap_or_else(|| n.op.clone()), &n.inputs).ok()?;
    }
    Some(out)
}

fn fmt_sig(v: &[(Vec<usize>, DType)]) -> String {
    v.iter().map(|(s, d)| format!("{s:?}:{d}")).collect::<Vec<_>>().join(", ")
}

fn signature_difference(program: &Signature, candidate: &Signature) -> Option<String> {
    if program.inputs != candidate.inputs {
        return Some(format!(
            "the program takes inputs ({}), the candidate takes ({})",
            fmt_sig(&program.inputs),
            fmt_sig(&candidate.inputs)
        ));
    }
    let mut p = program.outputs.clone();
    let mut c = candidate.outputs.clone();
    p.sort();
    c.sort();
    if p != c {
        return Some(format!(
            "the program returns outputs ({}), the candidate returns ({})",
            fmt_sig(&program.outputs),
            fmt_sig(&candidate.outputs)
        ));
    }
    None
}

/// The first flat index where `a` and `b` differ (`Some(0)` if the shapes differ): in the `p`
/// component for floats, in both for `i32` (a position and the row it is of).
fn first_difference(a: &Tensor<Fp>, b: &Tensor<Fp>, dtype: DType) -> Option<usize> {
    if a.shape != b.shape {
        return Some(0);
    }
    if dtype.is_float() {
        a.data.par_iter().zip(&b.data).position_first(|(x, y)| x.p != y.p)
    } else {
        a.data.par_iter().zip(&b.data).position_first(|(x, y)| x != y)
    }
}

/// For each input of `program`: `None` for floats, and for `i32` inputs the rows of the smallest
/// table a `gather` reads at them ([`crate::ir::DType::MAX_INDEX_EXTENT`] when none does).
pub fn index_bounds(program: &KernelGraph) -> Vec<Option<usize>> {
    let nodes = program.nodes();
    nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.op {
            KernelOp::Input { desc } if desc.dtype == DType::I32 => {
                let rows = nodes
                    .iter()
                    .filter(|g| matches!(g.op, KernelOp::Gather) && g.inputs[1].node == i)
                    .filter_map(|g| program.desc(g.inputs[0]).ok().map(|t| t.shape[0]))
                    .min();
                Some(Some(rows.unwrap_or(DType::MAX_INDEX_EXTENT)))
            }
            KernelOp::Input { .. } => Some(None),
            _ => None,
        })
        .collect()
}

/// The trials a verification of `program` runs: `cfg.trials` (at least 2), and for a program that
/// gathers rows at computed indices (ids not read from an input) enough that `n^-trials ≤ 2^-40`
/// for the fewest rows `n` of such a gather (see the module docs).
pub fn trials_for(program: &KernelGraph, cfg: &VerifyConfig) -> usize {
    let nodes = program.nodes();
    let computed_rows = nodes
        .iter()
        .filter(|g| matches!(g.op, KernelOp::Gather))
        .filter(|g| !matches!(nodes[g.inputs[1].node].op, KernelOp::Input { .. }))
        .filter_map(|g| program.desc(g.inputs[0]).ok().map(|t| t.shape[0]))
        .min();
    let needed = computed_rows.map_or(0, |n| (40.0 / (n.max(2) as f64).log2()).ceil() as usize);
    cfg.trials.max(2).max(needed)
}

fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

/// A program output that no perfect matching of program outputs to distinct compatible candidate
/// outputs can cover, or `None` when a perfect matching exists (Kuhn's augmenting paths).
fn unmatched_output(compatible: &[Vec<bool>]) -> Option<usize> {
    let n = compatible.len();
    let mut owner: Vec<Option<usize>> = vec![None; n];
    fn augment(i: usize, compatible: &[Vec<bool>], seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
        for j in 0..compatible[i].len() {
            if compatible[i][j] && !seen[j] {
                seen[j] = true;
                if owner[j].is_none_or(|k| augment(k, compatible, seen, owner)) {
                    owner[j] = Some(i);
                    return true;
                }
            }
        }
        false
    }
    (0..n).find(|&i| {
        let mut seen = vec![false; n];
        !augment(i, compatible, &mut seen, &mut owner)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic Miller–Rabin for `n < 3.3·10^24` (bases 2..37).
    fn is_prime(n: u64) -> bool {
        if n < 2 {
            return false;
        }
        const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
        for &b in &BASES {
            if n.is_multiple_of(b) {
                return n == b;
            }
        }
        let (mut d, mut s) = (n - 1, 0);
        while d % 2 == 0 {
            d /= 2;
            s += 1;
        }
        let mulm = |a: u64, b: u64| ((a as u128 * b as u128) % n as u128) as u64;
        let powm = |mut b: u64, mut e: u64| {
            let mut r = 1u64;
            while e > 0 {
                if e & 1 == 1 {
                    r = mulm(r, b);
                }
                b = mulm(b, b);
                e >>= 1;
            }
            r
        };
        'bases: for &a in &BASES {
            let mut x = powm(a, d);
            if x == 1 || x == n - 1 {
                continue;
            }
            for _ in 1..s {
                x = mulm(x, x);
                if x == n - 1 {
                    continue 'bases;
                }
            }
            return false;
        }
        true
    }

    #[test]
    fn primes_are_prime_and_q_divides_p_minus_1() {
        assert!(is_prime(P) && is_prime(Q));
        assert_eq!((P - 1) % Q, 0);
        // Q is the largest Sophie Germain prime below 2^31 with 2Q + 1 < 2^32.
        assert!((Q + 2..(1 << 31)).step_by(2).all(|c| !(is_prime(c) && is_prime(2 * c + 1))));
    }

    #[test]
    fn matching_is_a_perfect_set_match() {
        assert_eq!(unmatched_output(&[vec![true, true], vec![true, false]]), None);
        assert_eq!(unmatched_output(&[vec![true, false], vec![true, false]]), Some(1));
        assert_eq!(unmatched_output(&[]), None);
    }

    #[test]
    fn mix_is_keyed() {
        assert_ne!(hash_words(1, &[2]), hash_words(2, &[2]));
        assert_ne!(hash_words(1, &[2]), hash_words(1, &[3]));
    }
}
