//! Mutants of µGraphs for the verifier's corpus: every single edit of a graph by every
//! mutation kind ([`Kind`]), each rebuilt through the IR's builders (whose shape and block rules
//! reject the invalid ones), and the f32 reference's verdict on each ([`classify`]).
//!
//! A mutant is compared with the *program* the µGraph was found for, not with the µGraph: the
//! question the verifier answers is "does this graph compute the program?". Some edits keep the
//! meaning (swapping the operands of `+`, re-tiling with another for-loop range, an accumulator
//! over one iteration); the reference decides (in `f32`, and in `f64` where `f32` finds no
//! difference: [`classify`]), and the verifier must accept exactly those.

use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use crate::eval::{EvalError, Tensor};
use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, GridMap, KernelGraph, KernelOp, Scalar, TensorRef, UnaryOp};
use crate::reference::{HostTensor, max_scaled_error, run};
use crate::testing::rounding::run_f64;

/// A mutation kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The two operands of a binary operator or a matmul swapped.
    SwappedOperands,
    /// One grid-map entry of an input iterator changed.
    InputMap,
    /// One grid-map entry of an output saver changed.
    OutputMap,
    /// The for-loop dimension of an input iterator changed.
    ForloopDim,
    /// The for-loop range of a block graph changed.
    ForloopRange,
    /// An accumulator's kind changed, or the width of a partial reduction.
    Accumulator,
    /// A constant changed: a scalar operand (`mul_scalar`, `add_scalar`, `clamp`'s bounds) or an
    /// `rms_norm` epsilon.
    Constant,
    /// An operator replaced by another of its arity (`exp` by `silu`, `+` by `-`, …).
    OperatorChanged,
    /// An operator dropped: its users read one of its operands instead.
    OperatorDropped,
    /// An operator duplicated: applied again to its own result (with the same other operand).
    OperatorDuplicated,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 10] = [
        Kind::SwappedOperands,
        Kind::InputMap,
        Kind::OutputMap,
        Kind::ForloopDim,
        Kind::ForloopRange,
        Kind::Accumulator,
        Kind::Constant,
        Kind::OperatorChanged,
        Kind::OperatorDropped,
        Kind::OperatorDuplicated,
    ];
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::SwappedOperands => "swapped operands",
            Kind::InputMap => "input map",
            Kind::OutputMap => "output map",
            Kind::ForloopDim => "forloop dim",
            Kind::ForloopRange => "forloop range",
            Kind::Accumulator => "accumulator",
            Kind::Constant => "constant",
            Kind::OperatorChanged => "operator changed",
            Kind::OperatorDropped => "operator dropped",
            Kind::OperatorDuplicated => "operator duplicated",
        })
    }
}

/// Where an edit applies: a kernel node, or a node of a custom kernel's block graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// Kernel node `.0`.
    Kernel(usize),
    /// Block node `.1` of kernel node `.0`.
    Block(usize, usize),
}

/// One structural edit of a kernel graph.
#[derive(Clone, Debug)]
pub enum Edit {
    /// Replace the kernel operator at a kernel node.
    KernelOp(usize, KernelOp),
    /// Replace the block operator at a block node.
    BlockOp((usize, usize), BlockOp),
    /// Replace a node's operands.
    Inputs(At, Vec<TensorRef>),
    /// Change the for-loop range of kernel node `.0`'s block graph.
    Forloop(usize, usize),
    /// Remove a node; its users read its operand `operand` instead.
    Drop(At, usize),
    /// Apply a node's operator again to its own result (its other operands unchanged).
    Duplicate(At),
}

/// One mutant: its kind, a description of the edit, and the rebuilt graph or the IR checker's
/// reason for rejecting it.
#[derive(Clone, Debug)]
pub struct Mutant {
    /// The mutation kind.
    pub kind: Kind,
    /// The edit.
    pub edit: Edit,
    /// The mutated graph, or why the IR's builders reject it.
    pub graph: Result<KernelGraph, String>,
}

/// A node list: operators with their operands.
type Nodes<O> = Vec<(O, Vec<TensorRef>)>;

/// `nodes` with node `at` removed (its users read its operand `operand`) or duplicated (the
/// copy reads its result as operand 0, and the users read the copy). `None` when a user reads
/// a port other than 0 of the node, or the operand does not exist.
fn splice<O: Clone>(nodes: &Nodes<O>, at: usize, drop: Option<usize>) -> Option<Nodes<O>> {
    let mut out: Nodes<O> = Vec::with_capacity(nodes.len() + 1);
    let replacement = match drop {
        Some(operand) => Some(*nodes.get(at)?.1.get(operand)?),
        None => None,
    };
    for (i, (op, inputs)) in nodes.iter().enumerate() {
        if i == at && drop.is_some() {
            continue;
        }
        let mut ins = Vec::with_capacity(inputs.len());
        for &r in inputs {
            let r = match (r.node.cmp(&at), replacement) {
                (std::cmp::Ordering::Less, _) => r,
                // A reader of the node itself (not the copy inserted right after it).
                (std::cmp::Ordering::Equal, _) if r.port != 0 => return None,
                (std::cmp::Ordering::Equal, Some(rep)) => rep,
                (std::cmp::Ordering::Equal, None) => TensorRef { node: at + 1, port: 0 },
                (std::cmp::Ordering::Greater, Some(_)) => TensorRef { node: r.node - 1, port: r.port },
                (std::cmp::Ordering::Greater, None) => TensorRef { node: r.node + 1, port: r.port },
            };
            ins.push(r);
        }
        out.push((op.clone(), ins));
        if i == at && drop.is_none() {
            let mut copy = inputs.clone();
            *copy.first_mut()? = TensorRef { node: at, port: 0 };
            out.push((op.clone(), copy));
        }
    }
    Some(out)
}

/// Applies `edit` to a node list (of the level the edit is at).
fn edit_nodes<O: Clone>(nodes: Nodes<O>, at: usize, edit: &Edit, replace: Option<O>) -> Result<Nodes<O>, String> {
    let mut nodes = nodes;
    match edit {
        Edit::Drop(_, operand) => splice(&nodes, at, Some(*operand)).ok_or("the node's result is read by port".into()),
        Edit::Duplicate(_) => splice(&nodes, at, None).ok_or("the node's result is read by port".into()),
        Edit::Inputs(_, ins) => {
            nodes[at].1 = ins.clone();
            Ok(nodes)
        }
        Edit::KernelOp(..) | Edit::BlockOp(..) => {
            if let Some(op) = replace {
                nodes[at].0 = op;
            }
            Ok(nodes)
        }
        Edit::Forloop(..) => Ok(nodes),
    }
}

fn block_at(edit: &Edit) -> Option<(usize, usize)> {
    match edit {
        Edit::BlockOp(at, _) => Some(*at),
        Edit::Inputs(At::Block(n, b), _) | Edit::Drop(At::Block(n, b), _) | Edit::Duplicate(At::Block(n, b)) => {
            Some((*n, *b))
        }
        _ => None,
    }
}

fn kernel_at(edit: &Edit) -> Option<usize> {
    match edit {
        Edit::KernelOp(n, _) | Edit::Inputs(At::Kernel(n), _) | Edit::Drop(At::Kernel(n), _) => Some(*n),
        Edit::Duplicate(At::Kernel(n)) => Some(*n),
        _ => None,
    }
}

fn rebuild_block(block: &BlockGraph, frange: usize, edit: Option<(usize, &Edit)>) -> Result<BlockGraph, String> {
    let nodes: Nodes<BlockOp> = block.nodes().iter().map(|n| (n.op.clone(), n.inputs.clone())).collect();
    let nodes = match edit {
        Some((at, e)) => {
            let replace = match e {
                Edit::BlockOp(_, op) => Some(op.clone()),
                _ => None,
            };
            edit_nodes(nodes, at, e, replace)?
        }
        None => nodes,
    };
    let mut b =
        BlockGraph::new(block.inputs().to_vec(), block.grid(), block.threads(), frange).map_err(|e| e.to_string())?;
    for (op, ins) in nodes {
        b.push(op, &ins).map_err(|e| e.to_string())?;
    }
    b.validate().map_err(|e| e.to_string())?;
    Ok(b)
}

/// `g` with `edit` applied, rebuilt through the builders: the IR checker's error when the result
/// breaks a rule.
pub fn rebuild(g: &KernelGraph, edit: &Edit) -> Result<KernelGraph, String> {
    let nodes: Nodes<KernelOp> = g.nodes().iter().map(|n| (n.op.clone(), n.inputs.clone())).collect();
    let nodes = match kernel_at(edit) {
        Some(at) => {
            let replace = match edit {
                Edit::KernelOp(_, op) => Some(op.clone()),
                _ => None,
            };
            edit_nodes(nodes, at, edit, replace)?
        }
        None => nodes,
    };
    let block_edit = block_at(edit);
    let mut out = KernelGraph::new();
    for (ni, (op, ins)) in nodes.into_iter().enumerate() {
        let op = match op {
            KernelOp::Custom { block } => {
                let frange = match edit {
                    Edit::Forloop(at, f) if *at == ni => *f,
                    _ => block.forloop_range(),
                };
                let e = block_edit.filter(|(n, _)| *n == ni).map(|(_, b)| (b, edit));
                KernelOp::Custom { block: Box::new(rebuild_block(&block, frange, e)?) }
            }
            other => other,
        };
        out.push(op, &ins).map_err(|e| e.to_string())?;
    }
    out.validate().map_err(|e| e.to_string())?;
    Ok(out)
}

/// The other grid maps one entry away from `map` (entries of grid axes of size 1 mean nothing).
pub fn other_maps(map: GridMap, grid: [usize; 3], rank: usize, allow_none: bool) -> Vec<GridMap> {
    let mut out = Vec::new();
    for axis in (0..3).filter(|&a| grid[a] > 1) {
        let alts = (0..rank).map(Some).chain(allow_none.then_some(None));
        for alt in alts.filter(|&o| o != map[axis]) {
            let mut m = map;
            m[axis] = alt;
            out.push(m);
        }
    }
    out
}

/// Another unary operator (the next one of the table that is not `op`'s kind).
fn other_unary(op: &UnaryOp) -> UnaryOp {
    let all = UnaryOp::ALL;
    let i = all.iter().position(|o| std::mem::discriminant(o) == std::mem::discriminant(op)).unwrap_or(0);
    all[(i + 1) % all.len()]
}

/// Another binary operator.
fn other_binary(op: BinaryOp) -> BinaryOp {
    let all = BinaryOp::ALL;
    let i = all.iter().position(|&o| o == op).unwrap_or(0);
    all[(i + 1) % all.len()]
}

/// The same unary operator with its constants changed (none for operators without one).
fn other_constants(op: &UnaryOp) -> Vec<UnaryOp> {
    let moved = |c: Scalar| [Scalar(c.0 * 2.0 + 1.0), Scalar(c.0 - 0.5)];
    match *op {
        UnaryOp::MulScalar { c } => moved(c).map(|c| UnaryOp::MulScalar { c }).to_vec(),
        UnaryOp::AddScalar { c } => moved(c).map(|c| UnaryOp::AddScalar { c }).to_vec(),
        UnaryOp::Clamp { lo, hi } => {
            vec![UnaryOp::Clamp { lo: Scalar(lo.0 - 0.5), hi }, UnaryOp::Clamp { lo, hi: Scalar(hi.0 + 0.5) }]
        }
        _ => vec![],
    }
}

/// Other `rms_norm` epsilons: large enough to move the result beyond f32 rounding.
fn other_eps(eps: Scalar) -> Vec<Scalar> {
    if eps.0 == 0.0 { vec![Scalar(0.5)] } else { vec![Scalar(0.0), Scalar(eps.0 + 0.5)] }
}

/// Other accumulator kinds for `acc`, each once.
fn other_accs(acc: AccKind) -> Vec<AccKind> {
    let mut alts = vec![AccKind::Sum, AccKind::SumLast, AccKind::RmsLast, AccKind::Max, AccKind::SumTo { width: 2 }];
    if let AccKind::SumTo { width } = acc {
        alts.extend([AccKind::SumTo { width: width * 2 }, AccKind::SumTo { width: (width / 2).max(1) }]);
    }
    let mut out: Vec<AccKind> = Vec::new();
    for a in alts {
        if a != acc && !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// Whether a block operator computes a value from operands (not an iterator or a saver).
fn is_block_compute(op: &BlockOp) -> bool {
    !matches!(op, BlockOp::Input { .. } | BlockOp::Output { .. })
}

/// Whether a kernel operator computes a value from operands.
fn is_kernel_compute(op: &KernelOp) -> bool {
    !matches!(op, KernelOp::Input { .. } | KernelOp::Output { .. })
}

/// Every single edit of `g` by every mutation kind.
pub fn edits(g: &KernelGraph) -> Vec<(Kind, Edit)> {
    let mut edits: Vec<(Kind, Edit)> = Vec::new();
    for (ni, node) in g.nodes().iter().enumerate() {
        let at = At::Kernel(ni);
        if node.inputs.len() == 2 {
            edits.push((Kind::SwappedOperands, Edit::Inputs(at, vec![node.inputs[1], node.inputs[0]])));
        }
        match &node.op {
            KernelOp::Unary { op } => {
                edits.push((Kind::OperatorChanged, Edit::KernelOp(ni, KernelOp::Unary { op: other_unary(op) })));
                for c in other_constants(op) {
                    edits.push((Kind::Constant, Edit::KernelOp(ni, KernelOp::Unary { op: c })));
                }
            }
            KernelOp::Binary { op } => {
                edits.push((Kind::OperatorChanged, Edit::KernelOp(ni, KernelOp::Binary { op: other_binary(*op) })));
            }
            KernelOp::RmsNorm { eps } => {
                for e in other_eps(*eps) {
                    edits.push((Kind::Constant, Edit::KernelOp(ni, KernelOp::RmsNorm { eps: e })));
                }
            }
            KernelOp::Custom { block } => block_edits(&mut edits, ni, block),
            _ => {}
        }
        if is_kernel_compute(&node.op) && !matches!(node.op, KernelOp::Custom { .. }) {
            for operand in 0..node.inputs.len() {
                edits.push((Kind::OperatorDropped, Edit::Drop(at, operand)));
            }
            edits.push((Kind::OperatorDuplicated, Edit::Duplicate(at)));
        }
    }
    edits
}

fn block_edits(edits: &mut Vec<(Kind, Edit)>, ni: usize, block: &BlockGraph) {
    let grid = block.grid();
    let f = block.forloop_range();
    for (k, nf) in [f * 2, f / 2, f + 1].into_iter().enumerate() {
        // Each range once (for f = 1, f·2 = f + 1).
        if nf >= 1 && nf != f && ![f * 2, f / 2, f + 1][..k].contains(&nf) {
            edits.push((Kind::ForloopRange, Edit::Forloop(ni, nf)));
        }
    }
    for (bi, bn) in block.nodes().iter().enumerate() {
        let at = (ni, bi);
        let op = |o: BlockOp| Edit::BlockOp(at, o);
        if bn.inputs.len() == 2 && is_block_compute(&bn.op) {
            edits.push((Kind::SwappedOperands, Edit::Inputs(At::Block(ni, bi), vec![bn.inputs[1], bn.inputs[0]])));
        }
        match &bn.op {
            BlockOp::Input { input, imap, forloop_dim } => {
                let rank = block.inputs().get(*input).map_or(0, |d| d.shape.len());
                for m in other_maps(*imap, grid, rank, true) {
                    edits.push((
                        Kind::InputMap,
                        op(BlockOp::Input { input: *input, imap: m, forloop_dim: *forloop_dim }),
                    ));
                }
                // With one iteration the forloop dim means nothing.
                for fd in (0..rank).map(Some).chain([None]).filter(|d| f > 1 && d != forloop_dim) {
                    edits.push((Kind::ForloopDim, op(BlockOp::Input { input: *input, imap: *imap, forloop_dim: fd })));
                }
            }
            BlockOp::Output { omap, store } => {
                let rank = bn.inputs.first().and_then(|&t| block.tile(t).ok()).map_or(0, |t| t.shape.len());
                for m in other_maps(*omap, grid, rank, false) {
                    edits.push((Kind::OutputMap, op(BlockOp::Output { omap: m, store: *store })));
                }
            }
            BlockOp::Unary { op: u } => {
                edits.push((Kind::OperatorChanged, op(BlockOp::Unary { op: other_unary(u) })));
                for c in other_constants(u) {
                    edits.push((Kind::Constant, op(BlockOp::Unary { op: c })));
                }
            }
            BlockOp::Binary { op: b } => {
                edits.push((Kind::OperatorChanged, op(BlockOp::Binary { op: other_binary(*b) })));
            }
            BlockOp::RmsNorm { eps } => {
                for e in other_eps(*eps) {
                    edits.push((Kind::Constant, op(BlockOp::RmsNorm { eps: e })));
                }
            }
            BlockOp::Accum { acc } => {
                for a in other_accs(*acc) {
                    edits.push((Kind::Accumulator, op(BlockOp::Accum { acc: a })));
                }
            }
            BlockOp::ReduceSumTo { dim, width } => {
                for w in [width * 2, width / 2].into_iter().filter(|&w| w >= 1) {
                    edits.push((Kind::Accumulator, op(BlockOp::ReduceSumTo { dim: *dim, width: w })));
                }
            }
            _ => {}
        }
        if is_block_compute(&bn.op) {
            for operand in 0..bn.inputs.len() {
                edits.push((Kind::OperatorDropped, Edit::Drop(At::Block(ni, bi), operand)));
            }
            edits.push((Kind::OperatorDuplicated, Edit::Duplicate(At::Block(ni, bi))));
        }
    }
}

/// Every single-edit mutant of `g`, valid or not.
pub fn mutants(g: &KernelGraph) -> Vec<Mutant> {
    edits(g).into_iter().map(|(kind, edit)| Mutant { kind, graph: rebuild(g, &edit), edit }).collect()
}

/// What the f32 reference says about a mutant.
#[derive(Clone, Debug, PartialEq)]
pub enum Class {
    /// It computes the program: every output within f32 tolerance (scaled error ≤ 1).
    Equivalent,
    /// It does not: some output is far off (scaled error above [`CLEAR_MISMATCH`], NaN, another
    /// shape or output count).
    NotEquivalent,
    /// The IR checker rejects it (the builders' or the validator's message).
    Invalid(String),
    /// The reference could not run it, or its error is between tolerance and a clear mismatch.
    Unclear(String),
}

/// A scaled error above which a mutant clearly computes something else (between 1 and this,
/// the f32 reference cannot tell a changed meaning from rounding).
pub const CLEAR_MISMATCH: f32 = 10.0;

/// The input range of the corpus: signed, so that swapped or dropped operands show.
pub fn input_range(_: usize) -> Range<f32> {
    -1.0..1.0
}

/// The largest scaled error of `got` against `want`, output by output (≤ 1: within f32
/// tolerance; infinite for a count or shape mismatch or a NaN).
pub fn scaled_error(want: &[HostTensor], got: &[HostTensor]) -> f32 {
    if want.len() != got.len() {
        return f32::INFINITY;
    }
    want.iter()
        .zip(got)
        .map(|(w, g)| {
            let scale = w.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            match max_scaled_error(g, w, 1e-4 * scale, 1e-3) {
                Some(e) if !e.is_nan() => e,
                _ => f32::INFINITY,
            }
        })
        .fold(0.0, f32::max)
}

/// Largest difference, relative to the output's largest magnitude, of two graphs' `f64` values
/// ([`run_f64`]) that is rounding; above it the graphs compute different functions. `f64`
/// rounding leaves about `1e-16` per operation, `1e-13` after long reductions; the differences
/// `f32` cannot see are far above (`rms_norm(rms_norm(x))` with eps `1e-6` and rows of mean
/// square about 1/3 differs from `rms_norm(x)` by about `1.5e-6`).
pub const EXACT_RTOL: f64 = 1e-10;

/// The largest difference of `got` from `want` relative to each output's largest magnitude
/// (infinite for another count or shape, or a NaN where `want` has none).
fn f64_difference(want: &[Tensor<f64>], got: &[Tensor<f64>]) -> f64 {
    if want.len() != got.len() {
        return f64::INFINITY;
    }
    want.iter()
        .zip(got)
        .map(|(w, g)| {
            if w.shape != g.shape {
                return f64::INFINITY;
            }
            let scale = w.data.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
            w.data
                .iter()
                .zip(&g.data)
                .map(|(&a, &b)| match (a.is_finite(), b.is_finite()) {
                    (true, true) => (a - b).abs() / scale.max(f64::MIN_POSITIVE),
                    _ if a.to_bits() == b.to_bits() => 0.0,
                    _ => f64::INFINITY,
                })
                .fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

/// A program's reference results on the corpus's inputs, computed once and shared by the
/// classification of all its mutants ([`ProgramRun::classify`]; `Sync`, so threads share it):
/// the `f32` outputs, and the `f64` ones, computed when a first mutant needs them.
pub struct ProgramRun<'a> {
    program: &'a KernelGraph,
    inputs: Vec<HostTensor>,
    want: Vec<HostTensor>,
    exact: OnceLock<Result<Vec<Tensor<f64>>, EvalError>>,
}

impl<'a> ProgramRun<'a> {
    /// Runs `program` on `inputs` in the `f32` reference (its `f64` run waits for a first need).
    pub fn new(program: &'a KernelGraph, inputs: Vec<HostTensor>) -> Result<Self, EvalError> {
        let want = run(program, &inputs)?;
        Ok(ProgramRun { program, inputs, want, exact: OnceLock::new() })
    }

    /// The inputs.
    pub fn inputs(&self) -> &[HostTensor] {
        &self.inputs
    }

    /// The program's `f32` outputs.
    pub fn want(&self) -> &[HostTensor] {
        &self.want
    }

    /// [`classify`] against this program, with its outputs computed once.
    pub fn classify(&self, mutant: &Result<KernelGraph, String>) -> Class {
        classify_with(mutant, &self.inputs, &self.want, || {
            self.exact.get_or_init(|| run_f64(self.program, &self.inputs)).clone()
        })
    }
}

/// Classifies a mutant of a µGraph of `program` by the program's outputs `want` on `inputs`.
///
/// The f32 reference decides first ([`scaled_error`] within tolerance: equivalent; above
/// [`CLEAR_MISMATCH`]: not). Its tolerance hides differences below `f32`'s resolution that are
/// real in exact arithmetic, so a mutant it finds equivalent is checked again in `f64`
/// ([`run_f64`], program and mutant): a difference above [`EXACT_RTOL`] of the output's
/// magnitude makes it not equivalent. (With eps > 0, `rms_norm(rms_norm(x))` is not
/// `rms_norm(x)`: the normalized row's mean square is `ms / (ms + eps)`, not 1. With eps = 0 it
/// is, exactly, and stays equivalent.)
pub fn classify(
    program: &KernelGraph,
    mutant: &Result<KernelGraph, String>,
    inputs: &[HostTensor],
    want: &[HostTensor],
) -> Class {
    classify_with(mutant, inputs, want, || run_f64(program, inputs))
}

/// [`classify`] with the program's `f64` outputs from `exact_program` (called only when the
/// `f32` reference finds the mutant equivalent).
fn classify_with(
    mutant: &Result<KernelGraph, String>,
    inputs: &[HostTensor],
    want: &[HostTensor],
    exact_program: impl FnOnce() -> Result<Vec<Tensor<f64>>, EvalError>,
) -> Class {
    let g = match mutant {
        Ok(g) => g,
        Err(e) => return Class::Invalid(e.clone()),
    };
    let got = match run(g, inputs) {
        Ok(got) => got,
        Err(e) => return Class::Unclear(format!("the reference cannot run it: {e}")),
    };
    match scaled_error(want, &got) {
        e if e <= 1.0 => {}
        e if e > CLEAR_MISMATCH => return Class::NotEquivalent,
        e => return Class::Unclear(format!("scaled error {e}")),
    }
    let exact = exact_program().and_then(|w| Ok((w, run_f64(g, inputs)?)));
    match exact {
        Ok((w, m)) => match f64_difference(&w, &m) {
            d if d <= EXACT_RTOL => Class::Equivalent,
            _ => Class::NotEquivalent,
        },
        Err(e) => Class::Unclear(format!("the f64 evaluation cannot run it: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_drops_and_duplicates_with_renumbered_operands() {
        let r = |node| TensorRef { node, port: 0 };
        let nodes: Nodes<&str> =
            vec![("in", vec![]), ("exp", vec![r(0)]), ("add", vec![r(1), r(0)]), ("out", vec![r(2)])];
        let dropped = splice(&nodes, 1, Some(0)).expect("drop");
        assert_eq!(dropped, vec![("in", vec![]), ("add", vec![r(0), r(0)]), ("out", vec![r(1)])]);
        let dup = splice(&nodes, 1, None).expect("duplicate");
        assert_eq!(
            dup,
            vec![
                ("in", vec![]),
                ("exp", vec![r(0)]),
                ("exp", vec![r(1)]),
                ("add", vec![r(2), r(0)]),
                ("out", vec![r(3)])
            ]
        );
        let dup_add = splice(&nodes, 2, None).expect("duplicate");
        assert_eq!(dup_add[3], ("add", vec![r(2), r(0)]));
        assert_eq!(dup_add[4], ("out", vec![r(3)]));
        assert!(splice(&nodes, 1, Some(3)).is_none(), "no such operand");
    }
}
