//! Abstract expressions in a normal form, and the pruning hook of the search.
//!
//! An abstract expression forgets which elements a tensor holds but keeps what was computed from
//! which inputs and how many terms each sum has: a matmul of `a, b` with inner size `k` is
//! `sum(k, a·b)`, an accumulator over `F` iterations is `sum(F, ·)`, `acc_rms_last` is `rms(F·L, ·)`.
//! The smart constructors keep every expression in a normal form, so that equal computations
//! written differently get equal terms:
//!
//! - every reduction is tagged with the dimension class it reduces (see the enumerator): sums
//!   over one class merge, `sum(1, x) = x`, `sum(c, a, sum(c, b, x)) = sum(c, a·b, x)` (and the
//!   same for `max`), sums over different classes nest in tag order;
//! - `sum(n, x / y) = sum(n, x) / y` (the sum/div axiom of Mirage's pruner, unconditional — an
//!   abstract expression has no indices to check it with; pruning may keep too much, never decide
//!   equivalence);
//! - `+` and `·` are flattened and sorted (associativity, commutativity); `a · (b / c) = (a·b) / c`,
//!   `(a / b) / c = a / (b·c)`, `a / (b / c) = (a·c) / b`; `x² = x·x`; `c·x` is a product with
//!   the constant `c`;
//! - `rms_norm(x)` over `n` elements is `x / rms(n, x)`;
//! - rotary embeddings, gathers and argmax are opaque operators of their operands
//!   ([`Expr::Op`]); a rotary embedding is linear in `x`, so `sum(n, rope(x, c, s)) =
//!   rope(sum(n, x), c, s)` (applying it to each partial product of a matmul and summing is the
//!   same as applying it to the product).
//!
//! [`Pruner`] is the search's hook: given the expression of a tensor a prefix has just produced,
//! it says whether the prefix may still contribute to the program's outputs. [`StructuralPruner`]
//! is the default: the expression must match a subterm of a program output's expression, where a
//! partial sum `sum(m, x)` matches `sum(n, x)` when `m` divides `n` (an accumulator or a later
//! kernel completes it) and a sub-multiset of a `+` or `·` matches the whole (associativity).
//! [`super::oracle::Z3Pruner`] puts the z3 subexpression oracle (`absexpr`) behind it, for what
//! the normal form rejects ([`super::SearchConfig::z3`]).

use std::sync::Arc;

use crate::ir::{BinaryOp, Law, RopeLayout, UnaryOp};

/// An abstract expression in normal form (build it with the constructors, not the variants).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Expr {
    /// Program input `i`.
    Var(usize),
    /// A constant (its `f32` bits).
    Const(u32),
    /// A sum of two or more terms, sorted.
    Add(Vec<Arc<Expr>>),
    /// A product of two or more factors, sorted.
    Mul(Vec<Arc<Expr>>),
    /// A quotient.
    Div(Arc<Expr>, Arc<Expr>),
    /// A difference.
    Sub(Arc<Expr>, Arc<Expr>),
    /// A power.
    Pow(Arc<Expr>, Arc<Expr>),
    /// An uninterpreted element-wise function (name and parameter bits).
    Fn(&'static str, u64, Arc<Expr>),
    /// A sum of `n` terms over the dimension class `tag`.
    Sum(u64, u64, Arc<Expr>),
    /// A maximum of `n` terms over class `tag`.
    Max(u64, u64, Arc<Expr>),
    /// `sqrt(Σ x² / n + eps)` over `n` terms of class `tag` (`eps` as `f32` bits).
    Rms(u64, u64, u32, Arc<Expr>),
    /// A concatenation.
    Concat(Arc<Expr>, Arc<Expr>),
    /// An operator the normal form does not look into (rotary embeddings, gathers, argmax): its
    /// name, a parameter (the reduced class and extent of an argmax) and its operands.
    Op(&'static str, u64, Vec<Arc<Expr>>),
}

/// A shared expression.
pub type E = Arc<Expr>;

/// Program input `i`.
pub fn var(i: usize) -> E {
    Arc::new(Expr::Var(i))
}

/// A constant.
pub fn constant(c: f32) -> E {
    Arc::new(Expr::Const(c.to_bits()))
}

/// `Σ` of `n` terms of `x` over class `tag`. Sums over one class merge; nested sums over
/// different classes are ordered by tag (sums commute).
pub fn sum(tag: u64, n: u64, x: &E) -> E {
    match &**x {
        _ if n <= 1 => x.clone(),
        Expr::Sum(t, m, y) if *t == tag => sum(tag, n.saturating_mul(*m), y),
        Expr::Sum(t, m, y) if *t > tag => sum(*t, *m, &sum(tag, n, y)),
        Expr::Div(a, b) => div(&sum(tag, n, a), b),
        // A rotary embedding is linear in its first operand (cos and sin do not vary along a
        // reduction of it).
        Expr::Op(name, param, xs) if is_linear(name) => {
            let mut args = xs.clone();
            args[0] = sum(tag, n, &xs[0]);
            Arc::new(Expr::Op(name, *param, args))
        }
        _ => Arc::new(Expr::Sum(tag, n, x.clone())),
    }
}

/// `max` of `n` terms of `x` over class `tag`.
pub fn max(tag: u64, n: u64, x: &E) -> E {
    match &**x {
        _ if n <= 1 => x.clone(),
        Expr::Max(t, m, y) if *t == tag => max(tag, n.saturating_mul(*m), y),
        _ => Arc::new(Expr::Max(tag, n, x.clone())),
    }
}

/// `sqrt(Σ x² / n)` over class `tag`.
pub fn rms(tag: u64, n: u64, x: &E) -> E {
    rms_eps(tag, n, 0.0, x)
}

/// `sqrt(Σ x² / n + eps)` over class `tag`.
pub fn rms_eps(tag: u64, n: u64, eps: f32, x: &E) -> E {
    Arc::new(Expr::Rms(tag, n, eps.to_bits(), x.clone()))
}

/// `x / rms(n, x)` over class `tag`.
pub fn rms_norm(tag: u64, n: u64, x: &E) -> E {
    div(x, &rms(tag, n, x))
}

fn flatten(out: &mut Vec<E>, x: &E, is_add: bool) {
    match (&**x, is_add) {
        (Expr::Add(xs), true) | (Expr::Mul(xs), false) => out.extend(xs.iter().cloned()),
        _ => out.push(x.clone()),
    }
}

/// `a + b`.
pub fn add(a: &E, b: &E) -> E {
    let mut xs = Vec::new();
    flatten(&mut xs, a, true);
    flatten(&mut xs, b, true);
    xs.sort();
    Arc::new(Expr::Add(xs))
}

/// `a · b`.
pub fn mul(a: &E, b: &E) -> E {
    // Pull a division out: a · (p / q) = (a · p) / q.
    if let Expr::Div(p, q) = &**b {
        return div(&mul(a, p), q);
    }
    if let Expr::Div(p, q) = &**a {
        return div(&mul(p, b), q);
    }
    let mut xs = Vec::new();
    flatten(&mut xs, a, false);
    flatten(&mut xs, b, false);
    xs.sort();
    Arc::new(Expr::Mul(xs))
}

/// `a / b`.
pub fn div(a: &E, b: &E) -> E {
    if let Expr::Div(p, q) = &**a {
        return div(p, &mul(q, b));
    }
    if let Expr::Div(p, q) = &**b {
        return div(&mul(a, q), p);
    }
    Arc::new(Expr::Div(a.clone(), b.clone()))
}

/// A binary operator.
pub fn binary(op: BinaryOp, a: &E, b: &E) -> E {
    match op {
        BinaryOp::Add => add(a, b),
        BinaryOp::Mul => mul(a, b),
        BinaryOp::Div => div(a, b),
        BinaryOp::Sub => Arc::new(Expr::Sub(a.clone(), b.clone())),
        BinaryOp::Pow => Arc::new(Expr::Pow(a.clone(), b.clone())),
    }
}

/// A unary operator, by its law in the operator table: squares and scalings are products,
/// offsets sums with the constant; every other operator (`exp`, `neg` and `recip` included) is a
/// function of its name and parameters.
pub fn unary(op: &UnaryOp, x: &E) -> E {
    let spec = op.spec();
    match spec.law {
        Law::Square => mul(x, x),
        Law::Scale(c) => mul(&constant(c.0), x),
        Law::Offset(c) => add(&constant(c.0), x),
        Law::Exp | Law::Neg | Law::Recip | Law::Uninterpreted => {
            Arc::new(Expr::Fn(spec.name, spec.params.bits(), x.clone()))
        }
    }
}

/// `matmul(a, b)` with inner size `k` of class `tag`.
pub fn matmul(tag: u64, k: u64, a: &E, b: &E) -> E {
    sum(tag, k, &mul(a, b))
}

/// A concatenation.
pub fn concat(a: &E, b: &E) -> E {
    Arc::new(Expr::Concat(a.clone(), b.clone()))
}

/// Whether operator `name` of an [`Expr::Op`] is linear in its first operand: the rotary
/// embeddings.
fn is_linear(name: &str) -> bool {
    RopeLayout::ALL.iter().any(|l| l.name() == name)
}

/// `rope(x, cos, sin)` in `layout`: linear in `x` (sums move into it).
pub fn rope(layout: RopeLayout, x: &E, cos: &E, sin: &E) -> E {
    op(layout.name(), 0, &[x, cos, sin])
}

/// Operator `name` with parameter `param` of `args`, as an opaque term.
pub fn op(name: &'static str, param: u64, args: &[&E]) -> E {
    Arc::new(Expr::Op(name, param, args.iter().map(|&a| a.clone()).collect()))
}

/// The argmax of `x` over `n` elements of class `tag`.
pub fn argmax(tag: u64, n: u64, x: &E) -> E {
    op("argmax", tag.rotate_left(32) ^ n, &[x])
}

impl Expr {
    /// The direct operands.
    pub fn children(&self) -> Vec<&E> {
        match self {
            Expr::Var(_) | Expr::Const(_) => vec![],
            Expr::Add(xs) | Expr::Mul(xs) | Expr::Op(_, _, xs) => xs.iter().collect(),
            Expr::Div(a, b) | Expr::Sub(a, b) | Expr::Pow(a, b) | Expr::Concat(a, b) => vec![a, b],
            Expr::Fn(_, _, x) | Expr::Sum(_, _, x) | Expr::Max(_, _, x) | Expr::Rms(_, _, _, x) => vec![x],
        }
    }

    /// Every subterm (including the term itself), each once.
    pub fn subterms(self: &Arc<Self>) -> Vec<E> {
        let mut out: Vec<E> = Vec::new();
        let mut stack = vec![self.clone()];
        while let Some(e) = stack.pop() {
            if out.contains(&e) {
                continue;
            }
            stack.extend(e.children().into_iter().cloned());
            out.push(e);
        }
        out
    }
}

/// Whether multiset `small` (sorted) is contained in multiset `big` (sorted).
fn sub_multiset(small: &[E], big: &[E]) -> bool {
    let mut j = 0;
    for x in small {
        while j < big.len() && big[j] < *x {
            j += 1;
        }
        if j == big.len() || big[j] != *x {
            return false;
        }
        j += 1;
    }
    true
}

/// Whether candidate `c` can become target subterm `t`: equal, a partial sum (or maximum) of
/// it, a sub-multiset of its `+`/`·`, or a quotient with such a numerator and the same divisor
/// (or a factor of it).
pub fn completes_to(c: &Expr, t: &Expr) -> bool {
    if c == t {
        return true;
    }
    match (c, t) {
        (Expr::Sum(s, m, x), Expr::Sum(t, n, y)) | (Expr::Max(s, m, x), Expr::Max(t, n, y)) => {
            s == t && n % m == 0 && x == y
        }
        (Expr::Add(cs), Expr::Add(ts)) | (Expr::Mul(cs), Expr::Mul(ts)) => cs.len() < ts.len() && sub_multiset(cs, ts),
        // A linear operator of a partial sum: completed by summing its results.
        (Expr::Op(a, p, xs), Expr::Op(b, q, ys)) => {
            a == b && p == q && is_linear(a) && xs[1..] == ys[1..] && completes_to(&xs[0], &ys[0])
        }
        // A quotient whose divisor is (a factor of) the target's divisor, and whose numerator
        // completes to or occurs in the target's: the normalization of an operand before a
        // reduction (the normal form moves divisions out of sums).
        (Expr::Div(a, b), Expr::Div(p, q)) => divides_alike(b, q) && (completes_to(a, p) || p.subterms().contains(a)),
        _ => false,
    }
}

/// Whether divisor `b` is `q` or a factor of it.
fn divides_alike(b: &E, q: &E) -> bool {
    b == q || matches!(&**q, Expr::Mul(xs) if xs.contains(b))
}

/// Whether `c` is `t` or a product of some of `t`'s factors (`t` a product).
fn part_of_product(c: &Expr, t: &Expr) -> bool {
    c == t || matches!((c, t), (Expr::Mul(cs), Expr::Mul(ts)) if cs.len() < ts.len() && sub_multiset(cs, ts))
}

/// [`completes_to`], and also a normalized product before a reduction: a quotient whose numerator
/// is part of a product in the target's numerator, with the same divisor. `rms_norm(x) · g` is
/// `x·g / rms(x)`; before a matmul the normal form flattens the gain into the reduction's product,
/// `Σ x·g·w / rms(x)`, where `x·g` is no subterm ([`StructuralPruner::with_normalized_products`]).
pub fn completes_to_with_products(c: &Expr, t: &Expr) -> bool {
    completes_to(c, t)
        || matches!((c, t), (Expr::Div(a, b), Expr::Div(p, q))
            if divides_alike(b, q) && p.subterms().iter().any(|s| part_of_product(a, s)))
}

/// Whether some program output normalizes a product of three or more factors before a reduction
/// (a `Σ x·g·w / rms(x)` of `(rms_norm(x) · g) @ w`): where
/// [`StructuralPruner::with_normalized_products`] keeps more than [`StructuralPruner::new`].
pub fn has_normalized_products(targets: &[E]) -> bool {
    targets.iter().flat_map(|t| t.subterms()).any(|s| match &*s {
        Expr::Div(p, _) => p.subterms().iter().any(|m| matches!(&**m, Expr::Mul(xs) if xs.len() >= 3)),
        _ => false,
    })
}

/// The search's pruning hook: whether a prefix whose newest tensor has abstract
/// expression `expr` can still contribute to the program's outputs. Pruning is a heuristic: it
/// may lose µGraphs, never admit a wrong one (verification decides).
pub trait Pruner: Send + Sync {
    /// Keep the prefix?
    fn keep(&self, expr: &Expr) -> bool;
    /// A short name for reports.
    fn name(&self) -> &str;
    /// What the z3 oracle behind the pruner did, if it has one ([`super::oracle::Z3Pruner`]).
    fn z3_counts(&self) -> Option<super::oracle::Z3Counts> {
        None
    }
}

/// The default pruner: the expression must complete to a subterm of a program output's
/// expression ([`completes_to`]).
#[derive(Clone, Debug)]
pub struct StructuralPruner {
    subterms: Vec<E>,
    products: bool,
}

impl StructuralPruner {
    /// A pruner for a program whose outputs have expressions `targets`.
    pub fn new(targets: &[E]) -> Self {
        let mut subterms: Vec<E> = Vec::new();
        for t in targets {
            for s in t.subterms() {
                if !subterms.contains(&s) {
                    subterms.push(s);
                }
            }
        }
        StructuralPruner { subterms, products: false }
    }

    /// A pruner that also keeps normalized products before a reduction
    /// ([`completes_to_with_products`]): `rms_norm(x) · g` ahead of `@ w`. It keeps more
    /// intermediate kernels, which crowd the cheaper multi-kernel µGraphs out of the
    /// [`super::SearchConfig::max_intermediates`] kept per position, so the search uses it for
    /// an extra search of one-kernel µGraphs only.
    pub fn with_normalized_products(targets: &[E]) -> Self {
        StructuralPruner { products: true, ..StructuralPruner::new(targets) }
    }
}

impl Pruner for StructuralPruner {
    fn keep(&self, expr: &Expr) -> bool {
        if self.products {
            self.subterms.iter().any(|t| completes_to_with_products(expr, t))
        } else {
            self.subterms.iter().any(|t| completes_to(expr, t))
        }
    }
    fn name(&self) -> &str {
        if self.products { "structural with normalized products" } else { "structural" }
    }
}

/// Keeps everything (the ablation baseline: only shape rules and the final expression check).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPruning;

impl Pruner for NoPruning {
    fn keep(&self, _: &Expr) -> bool {
        true
    }
    fn name(&self) -> &str {
        "none"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_division_moves_after_the_matmul() {
        let (x, w) = (var(0), var(1));
        // Program: rms_norm(X) @ W, k = 4096.
        let program = matmul(1, 4096, &rms_norm(1, 4096, &x), &w);
        // Candidate: acc_sum(matmul(x_tile, w_tile)) / acc_rms_last(x_tile), 32 iterations of 128.
        let cand = div(&sum(1, 32, &matmul(1, 128, &x, &w)), &rms(1, 32 * 128, &x));
        assert_eq!(program, cand);
        let p = StructuralPruner::new(&[program]);
        assert!(p.keep(&matmul(1, 128, &x, &w)), "a partial sum is kept");
        assert!(!p.keep(&matmul(2, 128, &x, &w)), "a sum over another class is not");
        assert!(!p.keep(&sum(1, 32, &x)), "a sum of the raw input is not a subterm");
        assert!(!p.keep(&unary(&UnaryOp::Exp, &x)));
    }

    #[test]
    fn associativity_keeps_partial_products() {
        let (x, g, w) = (var(0), var(1), var(2));
        let t = matmul(0, 64, &mul(&rms_norm(0, 64, &x), &g), &w);
        let p = StructuralPruner::new(&[t]);
        assert!(p.keep(&mul(&x, &g)));
        assert!(p.keep(&matmul(0, 8, &mul(&x, &g), &w)));
    }

    #[test]
    fn a_normalized_row_times_its_gain_is_kept_before_the_matmul() {
        let (x, g, w, v) = (var(0), var(1), var(2), var(3));
        // Program: (rms_norm(x) · g) @ w; the normal form is Σ(x·g·w) / rms(x).
        let t = matmul(0, 64, &mul(&rms_norm(0, 64, &x), &g), &w);
        assert!(has_normalized_products(std::slice::from_ref(&t)));
        assert!(!has_normalized_products(&[matmul(0, 64, &rms_norm(0, 64, &x), &w)]), "no gain");
        assert!(!StructuralPruner::new(std::slice::from_ref(&t)).keep(&mul(&rms_norm(0, 64, &x), &g)));
        let p = StructuralPruner::with_normalized_products(std::slice::from_ref(&t));
        assert!(p.keep(&rms_norm(0, 64, &x)), "the normalized row");
        assert!(p.keep(&mul(&rms_norm(0, 64, &x), &g)), "the normalized row times its gain");
        assert_eq!(matmul(0, 64, &mul(&rms_norm(0, 64, &x), &g), &w), t);
        assert!(!p.keep(&mul(&rms_norm(0, 64, &x), &v)), "times a tensor the product does not hold");
        assert!(!p.keep(&mul(&rms_norm(0, 64, &g), &x)), "the gain normalized instead");
        assert!(!p.keep(&div(&mul(&x, &g), &rms(0, 32, &x))), "normalized over half the row");
    }
}

#[cfg(test)]
mod rope_tests {
    use super::*;

    #[test]
    fn rope_of_partial_products_completes_to_rope_of_the_product() {
        let (x, w, c, s) = (var(0), var(1), var(2), var(3));
        let target = rope(RopeLayout::HalfSplit, &matmul(1, 4096, &x, &w), &c, &s);
        let partial = rope(RopeLayout::HalfSplit, &matmul(1, 64, &x, &w), &c, &s);
        assert_eq!(sum(1, 64, &partial), target, "the accumulated rotations are the rotated product");
        let p = StructuralPruner::new(std::slice::from_ref(&target));
        assert!(p.keep(&partial));
        assert!(!p.keep(&rope(RopeLayout::Interleaved, &matmul(1, 64, &x, &w), &c, &s)), "another layout");
        assert!(!p.keep(&rope(RopeLayout::HalfSplit, &matmul(1, 64, &x, &w), &s, &c)), "cos and sin swapped");
        assert!(!p.keep(&argmax(1, 64, &x)) && p.keep(&x));
    }
}

#[cfg(test)]
mod tag_tests {
    use super::*;

    #[test]
    fn sums_over_different_classes_commute_and_do_not_merge() {
        let x = var(0);
        assert_eq!(sum(1, 4, &sum(2, 8, &x)), sum(2, 8, &sum(1, 4, &x)));
        assert_ne!(sum(1, 32, &x), sum(1, 4, &sum(2, 8, &x)));
        assert_eq!(sum(1, 32, &x), sum(1, 4, &sum(1, 8, &x)));
    }
}
