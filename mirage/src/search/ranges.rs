//! Verification over the declared ranges of runtime-sized dims.
//!
//! A program with dimension variables ([`SearchConfig::dims`]) is searched at the compile size
//! (every variable at its upper bound), where its candidates are verified as any program's. A
//! candidate must also compute the program at every other size by the padded-tile rule
//! ([`crate::eval::RunShapes`]): [`RangeCheck::check`] runs the fingerprint check (and, when asked,
//! the f32 float check) at several sizes of each range — both ends, 1, 3, 17, `hi - 1`, a
//! prime, and one past a multiple of each tile the candidate splits the variable with
//! ([`Dims::verification_sizes`]). By the masked-reduction rule ([`crate::eval::Valid`]) padding
//! never reaches a result, so what these sizes catch is a candidate whose geometry does not
//! follow the sizes (a tail tile, a trip count, a part of a split that a program's value depends
//! on). A candidate that computes the program everywhere must also be one code generation can
//! write ([`sized_support`]): code masks maxima and sums over padding, but not an RMS mean over a
//! padded dim nor a padded tile kept in registers, which it refuses for now.

use std::collections::HashMap;

use super::{Candidate, SearchConfig, SearchError, float_check_at};
use crate::codegen::default_blocks::lower_to_blocks;
use crate::codegen::{KernelOptions, sized_support};
use crate::cost::{Arch, estimate_sizes};
use crate::dims::{DimPlan, Dims, Extent};
use crate::fingerprint::{FingerprintContext, Verdict};
use crate::ir::{KernelGraph, KernelOp};

/// The size vectors (one size per variable) a candidate of `plan` is verified at besides the
/// compile size: each variable through its [`Dims::verification_sizes`] with the others at their
/// upper bound, and, with several variables, all at their lower bound and all at 17 (clamped to
/// the range).
pub fn range_sizes(dims: &Dims, plan: &DimPlan) -> Vec<Vec<usize>> {
    let hi = dims.compile_sizes();
    let mut out = Vec::new();
    for v in 0..dims.vars.len() {
        for n in dims.verification_sizes(v, plan) {
            let mut s = hi.clone();
            s[v] = n;
            out.push(s);
        }
    }
    if dims.vars.len() > 1 {
        out.push(dims.vars.iter().map(|v| v.lo).collect());
        out.push(dims.vars.iter().map(|v| 17usize.clamp(v.lo, v.hi)).collect());
    }
    out.retain(|s| *s != hi);
    out.sort();
    out.dedup();
    out
}

/// Sizes as in messages: `B = 17, S = 3`.
pub fn fmt_sizes(dims: &Dims, sizes: &[usize]) -> String {
    dims.vars.iter().zip(sizes).map(|(v, n)| format!("{} = {n}", v.name)).collect::<Vec<_>>().join(", ")
}

/// Checks candidates of one program over its declared ranges, keeping the program's
/// fingerprints at each size it has been evaluated at.
pub struct RangeCheck<'a> {
    program: &'a KernelGraph,
    cfg: &'a SearchConfig,
    /// The program's plan (`None` for a static program: nothing to check).
    plan: Option<DimPlan>,
    contexts: HashMap<Vec<usize>, FingerprintContext>,
    /// The first reason of each kind a candidate was rejected for, with the count.
    rejected: Vec<(Rejection, usize, String)>,
}

/// Why a candidate does not serve the declared ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rejection {
    /// Its tiles cannot follow the variables (a grid axis splitting a variable in one tensor and a
    /// fixed dim in another, ...).
    Geometry,
    /// Code generation cannot write it at runtime sizes ([`sized_support`]).
    Codegen,
    /// It computes something else at another size.
    Values,
}

impl Rejection {
    fn describe(self) -> &'static str {
        match self {
            Rejection::Geometry => "cannot follow the runtime-sized dims through their tiles",
            Rejection::Codegen => "have no code at runtime sizes",
            Rejection::Values => "compute the program at the compile size but not at other sizes",
        }
    }
}

impl<'a> RangeCheck<'a> {
    /// For `program` under `cfg.dims`; an error when the dims do not fit the program.
    pub fn new(program: &'a KernelGraph, cfg: &'a SearchConfig) -> Result<Self, SearchError> {
        let plan = if cfg.dims.is_static() {
            None
        } else {
            Some(DimPlan::analyze(program, &cfg.dims).map_err(|e| SearchError::Program(e.to_string()))?)
        };
        Ok(RangeCheck { program, cfg, plan, contexts: HashMap::new(), rejected: Vec::new() })
    }

    /// Records a rejection of kind `kind`; returns `why`.
    fn reject(&mut self, kind: Rejection, why: String) -> String {
        match self.rejected.iter_mut().find(|r| r.0 == kind) {
            Some(r) => r.1 += 1,
            None => self.rejected.push((kind, 1, why.clone())),
        }
        why
    }

    /// Why the candidates [`RangeCheck::check`] rejected were rejected, for the search's error
    /// when none is left (empty when it rejected none): the count of each kind of reason with
    /// its first example, and, when the program reduces over a runtime-sized dim, which masked
    /// reductions code generation does not write.
    pub fn rejections(&self) -> String {
        if self.rejected.is_empty() {
            return String::new();
        }
        let kinds: Vec<String> = self
            .rejected
            .iter()
            .map(|(kind, n, first)| format!("{n} {} (e.g. one {first})", kind.describe()))
            .collect();
        let mut out = format!("; over the declared ranges ({}): {}", fmt_vars(&self.cfg.dims), kinds.join("; "));
        if let Some(plan) = &self.plan
            && let Some(r) = reduction_over_a_variable(self.program, plan)
        {
            out.push_str(&format!(
                "; the program reduces over a runtime-sized dim ({r}): code generation masks maxima and sums over padding, but not an RMS mean over a padded dim nor a padded tile kept in registers"
            ));
        }
        out
    }

    /// Whether `candidate` computes the program at every size of [`range_sizes`] (fingerprints,
    /// and with `float` the f32 float check) and code generation can write it for runtime sizes
    /// ([`sized_support`]). The inner error says why not (the sizes and the
    /// difference, or why the candidate cannot run at other sizes at all).
    pub fn check(&mut self, candidate: &KernelGraph, float: bool) -> Result<Result<(), String>, SearchError> {
        let Some(plan) = &self.plan else { return Ok(Ok(())) };
        let dims = &self.cfg.dims;
        // What code generation runs: kernel-level operators as their default block graphs.
        let lowered = match lower_to_blocks(candidate) {
            Ok(g) => g,
            Err(e) => return Ok(Err(format!("has no block graph for every operator: {e}"))),
        };
        let candidate = &lowered;
        let cplan = match DimPlan::analyze(candidate, dims) {
            Ok(p) => p,
            Err(e) => return Ok(Err(self.reject(Rejection::Geometry, format!("cannot run at other sizes: {e}")))),
        };
        for sizes in range_sizes(dims, &cplan) {
            let at = || fmt_sizes(dims, &sizes);
            let prun = plan.run_shapes(self.program, &sizes).map_err(|e| SearchError::Program(e.to_string()))?;
            let crun = cplan.run_shapes(candidate, &sizes).map_err(|e| SearchError::Program(e.to_string()))?;
            let ctx = match self.contexts.entry(sizes.clone()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(FingerprintContext::new_at(self.program, &self.cfg.verify, &prun)?)
                }
            };
            if let Verdict::NotEquivalent { witness } = ctx.check_at(candidate, &crun)? {
                let why = format!("differs at {}: {witness}", at());
                return Ok(Err(self.reject(Rejection::Values, why)));
            }
            if float && let Err(msg) = float_check_at(self.program, candidate, Some((&prun, &crun)))? {
                let why = format!("fails the float check at {}: {msg}", at());
                return Ok(Err(self.reject(Rejection::Values, why)));
            }
        }
        // What code generation refuses at runtime sizes is no candidate either: the same check
        // `generate_sized` makes, so the two cannot disagree (after the values, so that a wrong
        // candidate is reported as wrong).
        if let Err(e) = sized_support(candidate, dims, &KernelOptions::default()) {
            return Ok(Err(self.reject(Rejection::Codegen, format!("has no code at runtime sizes: {e}"))));
        }
        Ok(Ok(()))
    }
}

/// The declared ranges as in messages: `B = 1..=64, S = 1..=32768`.
pub fn fmt_vars(dims: &Dims) -> String {
    dims.vars.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The first operator of `program` that reduces over a runtime-sized dim (a sum, maximum, argmax
/// or RMS norm along it, or a matmul contracting it), described as `reduce_sum (%3) over B`.
pub fn reduction_over_a_variable(program: &KernelGraph, plan: &DimPlan) -> Option<String> {
    let var = |e: Extent| e.var().and_then(|v| plan.dims().vars.get(v)).map(|d| d.name.clone());
    program.nodes().iter().enumerate().find_map(|(i, node)| {
        let arg = |k: usize| node.inputs.get(k).map(|&t| plan.extents(t)).unwrap_or(&[]);
        let over = match &node.op {
            KernelOp::ReduceSum { dim } | KernelOp::ReduceMax { dim } | KernelOp::Argmax { dim } => {
                arg(0).get(*dim).copied().and_then(var)
            }
            KernelOp::RmsNorm { .. } => arg(0).last().copied().and_then(var),
            KernelOp::Matmul => arg(0).last().copied().and_then(var),
            _ => None,
        }?;
        Some(format!("{} (%{i}) over {over}", node.op.name()))
    })
}

/// The size vectors the search ranks the candidates of a runtime-sized program at (one size per
/// variable): every variable at its lower bound, at the geometric mean of its bounds (rounded),
/// and at its upper bound — the compile size — without repeats (a variable of one size gives
/// one vector).
pub fn rank_sizes(dims: &Dims) -> Vec<Vec<usize>> {
    let at = |f: fn(usize, usize) -> usize| dims.vars.iter().map(|v| f(v.lo, v.hi)).collect::<Vec<_>>();
    let mid = |lo: usize, hi: usize| ((lo as f64 * hi as f64).sqrt().round() as usize).clamp(lo, hi);
    let mut out = vec![at(|lo, _| lo), at(mid), at(|_, hi| hi)];
    out.dedup();
    out
}

/// Orders the candidates of a runtime-sized program, found and costed at the compile size (every
/// variable at its upper bound; `cands` cheapest first there), for the whole of its ranges: by
/// the worst over [`rank_sizes`] of a candidate's estimate at a size
/// ([`crate::cost::estimate_sizes`]) divided by the cheapest candidate's estimate at that size —
/// the slowdown it risks against the best of the candidates at any of those sizes — then by the
/// compile-size estimate and the hash. A candidate whose geometry cannot follow the sizes goes
/// last (verification over the ranges rejects it anyway). Returns a note for the build report
/// naming the sizes and, when the ranking changes the first candidate, what it changed. A
/// static program, or a range of one size, keeps its order and gets no note.
pub fn rank(cands: &mut Vec<Candidate>, dims: &Dims, arch: &Arch) -> Option<String> {
    use rayon::prelude::*;
    let sizes = rank_sizes(dims);
    if dims.is_static() || sizes.len() < 2 || cands.len() < 2 {
        return None;
    }
    let costs: Vec<Option<Vec<f64>>> = cands
        .par_iter()
        .map(|c| estimate_sizes(&c.graph, dims, &sizes, arch).ok().map(|r| r.iter().map(|k| k.total_us).collect()))
        .collect();
    let best: Vec<f64> =
        (0..sizes.len()).map(|i| costs.iter().flatten().map(|c| c[i]).fold(f64::INFINITY, f64::min)).collect();
    let worst = |c: &Option<Vec<f64>>| -> (f64, usize) {
        c.as_ref().map_or((f64::INFINITY, 0), |c| {
            c.iter()
                .zip(&best)
                .map(|(x, b)| x / b)
                .enumerate()
                .fold((0.0, 0), |w, (i, r)| if r > w.0 { (r, i) } else { w })
        })
    };
    let worsts: Vec<(f64, usize)> = costs.iter().map(worst).collect();
    let (first_hash, (first_worst, first_at)) = (cands[0].hash, worsts[0]);
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        worsts[a]
            .0
            .total_cmp(&worsts[b].0)
            .then_with(|| cands[a].cost.total_us.total_cmp(&cands[b].cost.total_us))
            .then_with(|| cands[a].hash.cmp(&cands[b].hash))
    });
    let top = order[0];
    let (top_worst, top_at) = worsts[top];
    let mut old: Vec<Option<Candidate>> = std::mem::take(cands).into_iter().map(Some).collect();
    *cands = order.iter().filter_map(|&i| old[i].take()).collect();
    let at = sizes.iter().map(|s| fmt_sizes(dims, s)).collect::<Vec<_>>().join("; ");
    let mut note = format!(
        "ranked over the declared ranges at {at} (the worst ratio of a candidate's estimate to the cheapest estimate at each size): the first is within {top_worst:.2}× everywhere (worst at {})",
        fmt_sizes(dims, &sizes[top_at])
    );
    if cands[0].hash != first_hash {
        let us = |c: &Option<Vec<f64>>| c.as_ref().map_or(f64::NAN, |c| c[first_at]);
        note.push_str(&format!(
            "; the cheapest at the compile size would be {first_worst:.2}× at {} (estimated {:.2} µs there, the first {:.2} µs)",
            fmt_sizes(dims, &sizes[first_at]),
            us(&costs[0]),
            us(&costs[top]),
        ));
    }
    Some(note)
}
