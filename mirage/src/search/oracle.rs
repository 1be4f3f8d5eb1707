//! The structural pruner with the z3 subexpression oracle behind it ([`Z3Pruner`]).
//!
//! The structural check ([`StructuralPruner`]) is fast but a normal form: a prefix whose
//! expression equals a subterm of the program only under an axiom the normal form does not apply
//! (distributivity, `Σ(a + b) = Σa + Σb`, `exp(a)·exp(b) = exp(a + b)`, …) is rejected, and the
//! µGraphs that would grow from it are never found. [`Z3Pruner`] keeps the structural answer when
//! it keeps a prefix; when it rejects one, it translates the expression into the oracle's terms
//! ([`crate::absexpr`], sums keeping their dimension class) and asks z3 whether it is a
//! subexpression of a program output under the paper's axioms, within the oracle's resource
//! limit. A proof keeps the prefix (a *rescue*); answers are memoized by expression.
//!
//! **Timeouts.** z3's `unknown` (the resource limit ran out) and `sat` both leave the structural
//! rejection standing. That is the choice that keeps the search complete with respect to the
//! structural pruner: whatever z3 answers, the combination keeps a superset of the prefixes the
//! structural check keeps, so it never loses a µGraph the structural search finds; it only adds
//! those z3 proves. Keeping on `unknown` would not lose more, but it would keep nearly every
//! prefix the structural check rejects (with quantified axioms, z3 rarely refutes within its
//! limit), which turns pruning off. Neither choice can produce a wrong µGraph: pruning only
//! decides what is enumerated, and every candidate is still verified.
//!
//! Expressions with a part the oracle's algebra does not describe (maxima, concatenations,
//! rotary embeddings, gathers, argmax: [`crate::absexpr::Expr::Opaque`]) are not asked about: the
//! structural answer stands.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::expr::{E, Expr, Pruner, StructuralPruner};
use crate::absexpr::{self, OracleConfig, Outcome, SubexprOracle, build};
use crate::ir::{Law, UnaryOp};

/// What a [`Z3Pruner`] did during one search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Z3Counts {
    /// Prefixes the structural check rejected (each then looked up or asked).
    pub structural_rejects: u64,
    /// Questions answered from the memo.
    pub cache_hits: u64,
    /// Rejected expressions not asked because they have a part z3's algebra does not describe.
    pub opaque: u64,
    /// z3 queries run.
    pub queries: u64,
    /// Queries z3 proved (the prefix is kept: a rescue), or literal subterms of a target in the
    /// oracle's terms (kept without a query).
    pub rescues: u64,
    /// Queries that ran out of the resource limit (`unknown`; the rejection stands).
    pub unknown: u64,
    /// Time spent in z3.
    pub z3_time: Duration,
}

/// The structural pruner as the fast path, the z3 oracle for what it rejects (module docs).
pub struct Z3Pruner {
    structural: StructuralPruner,
    oracle: SubexprOracle,
    targets: Vec<absexpr::E>,
    memo: Mutex<HashMap<Expr, bool>>,
    structural_rejects: AtomicU64,
    cache_hits: AtomicU64,
    opaque: AtomicU64,
    queries: AtomicU64,
    rescues: AtomicU64,
    unknown: AtomicU64,
    z3_nanos: AtomicU64,
}

impl Z3Pruner {
    /// A pruner for a program with `num_inputs` inputs whose outputs have the search
    /// expressions `targets`.
    pub fn new(targets: &[E], num_inputs: usize, cfg: OracleConfig) -> Self {
        let translated: Vec<absexpr::E> = targets.iter().map(to_oracle).collect();
        Z3Pruner {
            structural: StructuralPruner::new(targets),
            oracle: SubexprOracle::from_targets(translated.clone(), num_inputs, cfg),
            targets: translated,
            memo: Mutex::new(HashMap::new()),
            structural_rejects: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            opaque: AtomicU64::new(0),
            queries: AtomicU64::new(0),
            rescues: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
            z3_nanos: AtomicU64::new(0),
        }
    }

    /// The work done so far.
    pub fn counts(&self) -> Z3Counts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Z3Counts {
            structural_rejects: get(&self.structural_rejects),
            cache_hits: get(&self.cache_hits),
            opaque: get(&self.opaque),
            queries: get(&self.queries),
            rescues: get(&self.rescues),
            unknown: get(&self.unknown),
            z3_time: Duration::from_nanos(get(&self.z3_nanos)),
        }
    }

    /// The oracle's verdict on an expression the structural check rejected (not memoized).
    fn rescue(&self, expr: &Expr) -> bool {
        let e = to_oracle(&Arc::new(expr.clone()));
        if e.is_opaque() {
            self.opaque.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if self.targets.iter().any(|t| e.is_subterm_of(t)) {
            self.rescues.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let start = Instant::now();
        let outcome = self.oracle.outcome(&e);
        self.z3_nanos.fetch_add(start.elapsed().as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        self.queries.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::Proved => {
                self.rescues.fetch_add(1, Ordering::Relaxed);
                true
            }
            Outcome::Unknown => {
                self.unknown.fetch_add(1, Ordering::Relaxed);
                false
            }
            Outcome::Refuted => false,
        }
    }
}

impl Pruner for Z3Pruner {
    fn keep(&self, expr: &Expr) -> bool {
        if self.structural.keep(expr) {
            return true;
        }
        self.structural_rejects.fetch_add(1, Ordering::Relaxed);
        if let Some(kept) = self.memo.lock().ok().and_then(|m| m.get(expr).copied()) {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return kept;
        }
        let kept = self.rescue(expr);
        if let Ok(mut m) = self.memo.lock() {
            m.insert(expr.clone(), kept);
        }
        kept
    }

    fn name(&self) -> &str {
        "structural+z3"
    }

    fn z3_counts(&self) -> Option<Z3Counts> {
        Some(self.counts())
    }
}

/// A search expression in the oracle's terms: `+` and `·` as left-nested binary terms, sums and
/// `rms` keeping their dimension class, `exp`, `neg` and `recip` by their laws, maxima,
/// concatenations and opaque operators as [`absexpr::Expr::Opaque`].
pub fn to_oracle(e: &E) -> absexpr::E {
    let fold = |xs: &[E], f: fn(&absexpr::E, &absexpr::E) -> absexpr::E| {
        let mut it = xs.iter().map(to_oracle);
        let first = it.next().unwrap_or_else(build::opaque);
        it.fold(first, |acc, x| f(&acc, &x))
    };
    match &**e {
        Expr::Var(i) => build::var(*i),
        Expr::Const(bits) => build::constant(f32::from_bits(*bits)),
        Expr::Add(xs) => fold(xs, build::add),
        Expr::Mul(xs) => fold(xs, build::mul),
        Expr::Div(a, b) => build::div(&to_oracle(a), &to_oracle(b)),
        Expr::Sub(a, b) => build::add(&to_oracle(a), &Arc::new(absexpr::Expr::Neg(to_oracle(b)))),
        Expr::Pow(a, b) => Arc::new(absexpr::Expr::Pow(to_oracle(a), to_oracle(b))),
        Expr::Fn(name, params, x) => {
            let x = to_oracle(x);
            match UnaryOp::ALL.iter().map(UnaryOp::spec).find(|s| s.name == *name).map(|s| s.law) {
                Some(Law::Exp) => build::exp(&x),
                Some(Law::Neg) => Arc::new(absexpr::Expr::Neg(x)),
                Some(Law::Recip) => build::div(&build::constant(1.0), &x),
                _ => Arc::new(absexpr::Expr::Fn(name, *params, x)),
            }
        }
        Expr::Sum(tag, n, x) => build::sum_in(*tag, *n, &to_oracle(x)),
        Expr::Rms(tag, n, eps, x) => build::rms_in(*tag, &to_oracle(x), *n, f32::from_bits(*eps)),
        Expr::Max(..) | Expr::Concat(..) | Expr::Op(..) => build::opaque(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::expr::{add, constant, div, matmul, mul, sum, unary, var};

    fn pruner(target: &E, inputs: usize) -> Z3Pruner {
        Z3Pruner::new(std::slice::from_ref(target), inputs, OracleConfig::default())
    }

    #[test]
    fn z3_rescues_a_distributed_sum_the_normal_form_rejects() {
        // Program: Σ_k (x + y)·w; a prefix computing Σ_k x·w (one half of the distributed sum).
        let (x, y, w) = (var(0), var(1), var(2));
        let target = matmul(1, 64, &add(&x, &y), &w);
        let half = matmul(1, 64, &x, &w);
        assert!(!StructuralPruner::new(std::slice::from_ref(&target)).keep(&half), "the normal form rejects it");
        let p = pruner(&target, 3);
        assert!(p.keep(&half), "z3 proves it a subexpression");
        assert!(p.keep(&half), "and the memo answers again");
        let c = p.counts();
        assert_eq!((c.structural_rejects, c.queries, c.rescues, c.cache_hits), (2, 1, 1, 1), "{c:?}");
        assert!(c.z3_time > Duration::ZERO);
    }

    #[test]
    fn what_z3_cannot_prove_stays_rejected_and_classes_stay_apart() {
        let (x, w) = (var(0), var(1));
        let target = matmul(1, 64, &x, &w);
        let p = pruner(&target, 2);
        assert!(p.keep(&matmul(1, 8, &x, &w)), "structural fast path");
        assert!(!p.keep(&unary(&UnaryOp::Exp, &x)), "no exp in the program");
        assert!(!p.keep(&matmul(2, 8, &x, &w)), "a sum over another dimension class");
        assert!(!p.keep(&matmul(1, 3, &x, &w)), "3 does not divide 64");
        assert_eq!(p.counts().rescues, 0);
        assert_eq!(p.counts().structural_rejects, 3);
    }

    #[test]
    fn opaque_expressions_are_not_asked() {
        let (x, w) = (var(0), var(1));
        let p = pruner(&matmul(1, 64, &x, &w), 2);
        assert!(!p.keep(&crate::search::expr::max(1, 8, &x)));
        let c = p.counts();
        assert_eq!((c.opaque, c.queries), (1, 0));
    }

    #[test]
    fn translation_keeps_laws_and_classes() {
        let (x, y) = (var(0), var(1));
        let e = div(&sum(3, 8, &mul(&x, &y)), &add(&constant(2.0), &x));
        assert_eq!(to_oracle(&e).to_string(), "div(sum[3](8, mul(v0, v1)), add(v0, 2.0))");
        let r = unary(&UnaryOp::Recip, &x);
        assert_eq!(to_oracle(&r).to_string(), "div(1.0, v0)");
    }
}
