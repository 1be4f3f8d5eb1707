//! The enumerator: kernel graphs extended kernel by kernel, each custom kernel a
//! block graph extended operator by operator, guided by abstract expressions.
//!
//! # Dimension classes
//!
//! The program's tensor dims are grouped into *classes* (union-find over the shape rules: a
//! matmul ties `a`'s `k` to `b`'s `k` and the output's `m`/`n` to the operands', element-wise
//! operators tie equal positions, …). A block graph's configuration is chosen per class, not per
//! tensor: each grid axis splits one class (every input holding a dim of that class is split along
//! it — the imap — and the others are replicated), the for-loop walks one class (the forloop dims),
//! and output savers concatenate along the dim holding the axis's class (the omap). This is
//! Mirage's space of imaps, forloop dims and omaps restricted to the consistent assignments, which
//! is what makes enumerating grids (1-, 2- and 3-D), thread counts, loop ranges and operators cheap
//! enough to be exhaustive. Outputs of custom kernels whose dims no longer hold a whole class
//! (partial results concatenated by a split reduction) get fresh classes, so a following kernel can
//! loop over them (the combine kernel of split-KV attention).
//!
//! In a *final* kernel (one that produces program outputs) grid axes split only classes of the
//! program's outputs and the loop walks a class that is not one; an *intermediate* kernel may
//! split one more class across the grid (split-K / split-KV partial results).
//!
//! # Operators
//!
//! Inside a block graph every operator kind of the program is tried on every tile (or pair of
//! tiles): its in-loop and epilogue forms, matmuls, the accumulators (`acc_sum`, `acc_sum_last`,
//! `acc_rms_last` when the program normalizes, `acc_sum_to(w)` for the widths of the program's
//! outputs, `acc_max` when it takes maxima) and, for programs with `rms_norm`, the division that
//! moves the normalization after a matmul (and the product that applies a norm's weight);
//! concatenations of two tiles; rotary embeddings (also of partial matmul products,
//! which the accumulator then sums: the rotation is linear) and, after the loop, `argmax`.
//! `gather` is a kernel-level operator only (its table is read at data-dependent rows, which no
//! input iterator describes). A new tile is kept only if the IR's shape and phase
//! rules accept it, no tile of the same phase already holds the same abstract expression, and the
//! [`Pruner`] keeps its expression. States reached again through another order of independent
//! operators are recognized by an order-independent key and skipped.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use rayon::prelude::*;

use super::SearchConfig;
use super::expr::{self, E, Pruner};
use crate::codegen::default_blocks::default_block_graph;
use crate::cost::{KernelCost, SmemMode, estimate_block_with, lower_bound_us};
use crate::fingerprint::mix64;
use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, CanonicalHash, GridMap, KernelGraph, KernelOp, Phase, RopeLayout, Scalar,
    TensorDesc, TensorRef, TileDesc, UnaryOp, infer_kernel_op,
};

/// A dimension class id.
pub(crate) type Class = u32;

/// What the program computes, as the enumerator needs it.
pub(crate) struct ProgramInfo {
    /// Input descriptions, in order.
    pub inputs: Vec<TensorDesc>,
    /// The classes of each input's dims.
    pub input_classes: Vec<Vec<Option<Class>>>,
    /// Output expressions, descriptions and strides (None = row-major).
    pub outputs: Vec<(E, TensorDesc, Option<Vec<usize>>)>,
    /// Classes of the program outputs' dims.
    pub output_classes: HashSet<Class>,
    /// Classes some operator reduces: a matmul's inner dim, a `reduce_sum` or `reduce_max` dim.
    /// One that is also an output class ([`ProgramInfo::conflicts`]) can be neither looped over
    /// nor split by a final kernel.
    pub contracted: HashSet<Class>,
    /// Size of each class.
    pub class_sizes: Vec<usize>,
    /// Operator kinds of the program.
    pub ops: OpSet,
    /// The program's operators (not its inputs and outputs), in its order.
    pub steps: Vec<Step>,
}

/// One operator of the program, for saying where a search that found nothing stopped.
pub(crate) struct Step {
    /// `name (%node)`.
    pub label: String,
    /// Its result's expression.
    pub expr: E,
    /// The steps its operands come from (operands that are program inputs are not listed).
    pub operands: Vec<usize>,
}

/// The operator kinds the enumerator tries.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpSet {
    pub unary: Vec<UnaryOp>,
    pub binary: Vec<BinaryOp>,
    pub matmul: bool,
    pub rms_eps: Vec<Scalar>,
    pub reduce_sum: bool,
    pub reduce_max: bool,
    pub concat_dims: Vec<usize>,
    pub sum_to_widths: Vec<usize>,
    pub rope: Vec<RopeLayout>,
    pub gather: bool,
    pub argmax_dims: Vec<usize>,
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.0[hi] = lo;
        }
    }
}

/// The reduction tag of a class: reductions over equal tags merge (`sum(t, a, sum(t, b, x)) =
/// sum(t, a·b, x)`), different tags stay apart, so summing the wrong dim is not mistaken for
/// summing the right one with the same count.
pub(crate) type Tag = u64;
/// The tag of a reduction over a dim without a class (extent 1: a no-op).
pub(crate) const TAG_NONE: Tag = u64::MAX - 1;
/// The tag of a reduction that mixes classes (it matches nothing in the program).
pub(crate) const TAG_MIXED: Tag = u64::MAX;

/// Analyzes the program: expressions, classes and operator kinds. `Err` names what the search
/// cannot handle.
pub(crate) fn analyze(program: &KernelGraph) -> Result<ProgramInfo, String> {
    let nodes = program.nodes();
    // Dim slots: (node, port, dim) → index.
    let mut base = Vec::with_capacity(nodes.len());
    let mut total = 0usize;
    for n in nodes {
        base.push(total);
        total += n.outputs.iter().map(|d| d.rank()).sum::<usize>();
    }
    let slot = |t: TensorRef, d: usize| -> usize {
        let prior: usize = nodes[t.node].outputs[..t.port].iter().map(|x| x.rank()).sum();
        base[t.node] + prior + d
    };
    let desc = |t: TensorRef| &nodes[t.node].outputs[t.port];
    // Pass 1: union-find of the dims, operator kinds.
    let mut uf = UnionFind((0..total).collect());
    let mut ops = OpSet::default();
    // Slots of reduced dims, with their extents.
    let mut contracted_slots: Vec<(usize, usize)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let out = TensorRef::new(i);
        let tie_same = |uf: &mut UnionFind, a: TensorRef, skip: Option<usize>| {
            let rank = nodes[i].outputs[0].rank();
            for d in 0..rank {
                if Some(d) != skip
                    && desc(a).shape[d] == nodes[i].outputs[0].shape[d]
                    && nodes[i].outputs[0].shape[d] > 1
                {
                    uf.union(slot(a, d), slot(out, d));
                }
            }
        };
        match &n.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } => {}
            KernelOp::Matmul => {
                ops.matmul = true;
                let r = desc(n.inputs[0]).rank();
                for d in 0..r - 2 {
                    uf.union(slot(n.inputs[0], d), slot(out, d));
                    uf.union(slot(n.inputs[1], d), slot(out, d));
                }
                uf.union(slot(n.inputs[0], r - 2), slot(out, r - 2));
                uf.union(slot(n.inputs[1], r - 1), slot(out, r - 1));
                uf.union(slot(n.inputs[0], r - 1), slot(n.inputs[1], r - 2));
                contracted_slots.push((slot(n.inputs[0], r - 1), desc(n.inputs[0]).shape[r - 1]));
            }
            KernelOp::Unary { op } => {
                if !ops.unary.contains(op) {
                    ops.unary.push(*op);
                }
                tie_same(&mut uf, n.inputs[0], None);
            }
            KernelOp::Binary { op } => {
                if !ops.binary.contains(op) {
                    ops.binary.push(*op);
                }
                tie_same(&mut uf, n.inputs[0], None);
                tie_same(&mut uf, n.inputs[1], None);
            }
            KernelOp::ReduceSum { dim } => {
                ops.reduce_sum = true;
                tie_same(&mut uf, n.inputs[0], Some(*dim));
                contracted_slots.push((slot(n.inputs[0], *dim), desc(n.inputs[0]).shape[*dim]));
            }
            KernelOp::ReduceMax { dim } => {
                ops.reduce_max = true;
                tie_same(&mut uf, n.inputs[0], Some(*dim));
                contracted_slots.push((slot(n.inputs[0], *dim), desc(n.inputs[0]).shape[*dim]));
            }
            KernelOp::RmsNorm { eps } => {
                if !ops.rms_eps.contains(eps) {
                    ops.rms_eps.push(*eps);
                }
                // A weighted norm multiplies by its weight after normalizing.
                if n.inputs.len() > 1 && !ops.binary.contains(&BinaryOp::Mul) {
                    ops.binary.push(BinaryOp::Mul);
                }
                for &t in &n.inputs {
                    tie_same(&mut uf, t, None);
                }
            }
            KernelOp::Concat { dim } => {
                if !ops.concat_dims.contains(dim) {
                    ops.concat_dims.push(*dim);
                }
                tie_same(&mut uf, n.inputs[0], Some(*dim));
                tie_same(&mut uf, n.inputs[1], Some(*dim));
            }
            KernelOp::Rope { layout } => {
                if !ops.rope.contains(layout) {
                    ops.rope.push(*layout);
                }
                // x's dims are the output's; cos and sin share the leading dims they do not
                // broadcast, and their halves of a head.
                for &t in &n.inputs {
                    tie_same(&mut uf, t, None);
                }
                let last = desc(n.inputs[1]).rank() - 1;
                if desc(n.inputs[1]).shape[last] > 1 {
                    uf.union(slot(n.inputs[1], last), slot(n.inputs[2], last));
                }
            }
            KernelOp::Gather => {
                ops.gather = true;
                // The ids' dims lead the output, the table's width ends it.
                let (table, ids) = (n.inputs[0], n.inputs[1]);
                let r = desc(ids).rank();
                for d in (0..r).filter(|&d| desc(ids).shape[d] > 1) {
                    uf.union(slot(ids, d), slot(out, d));
                }
                if desc(table).shape[1] > 1 {
                    uf.union(slot(table, 1), slot(out, r));
                }
            }
            KernelOp::Argmax { dim } => {
                if !ops.argmax_dims.contains(dim) {
                    ops.argmax_dims.push(*dim);
                }
                tie_same(&mut uf, n.inputs[0], Some(*dim));
            }
            KernelOp::Custom { .. } => {
                return Err(
                    "the program already contains custom kernels; search programs of kernel-level operators".into()
                );
            }
        }
    }
    // Compact class ids, in order of first appearance over inputs, outputs, then the rest.
    let mut ids: HashMap<usize, Class> = HashMap::new();
    let mut class_sizes = Vec::new();
    let mut class_of = |uf: &mut UnionFind, s: usize, size: usize| -> Option<Class> {
        if size <= 1 {
            return None;
        }
        let root = uf.find(s);
        Some(*ids.entry(root).or_insert_with(|| {
            class_sizes.push(size);
            (class_sizes.len() - 1) as Class
        }))
    };
    let mut inputs = Vec::new();
    let mut input_classes = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if let KernelOp::Input { desc } = &n.op {
            inputs.push(desc.clone());
            input_classes
                .push((0..desc.rank()).map(|d| class_of(&mut uf, slot(TensorRef::new(i), d), desc.shape[d])).collect());
        }
    }
    let mut output_classes = HashSet::new();
    for n in nodes.iter() {
        if let KernelOp::Output { .. } = n.op {
            let t = n.inputs[0];
            for k in 0..desc(t).rank() {
                if let Some(c) = class_of(&mut uf, slot(t, k), desc(t).shape[k]) {
                    output_classes.insert(c);
                }
            }
        }
    }
    // Pass 2: expressions, reductions tagged by the class they reduce.
    let mut exprs: Vec<Vec<E>> = Vec::with_capacity(nodes.len());
    let mut input_index = 0;
    let mut outputs = Vec::new();
    let mut steps = Vec::new();
    let mut step_of: HashMap<usize, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let ie: Vec<E> = n.inputs.iter().map(|t| exprs[t.node][t.port].clone()).collect();
        let mut tag =
            |t: TensorRef, d: usize| class_of(&mut uf, slot(t, d), desc(t).shape[d]).map_or(TAG_NONE, |c| c as Tag);
        let e = match &n.op {
            KernelOp::Input { .. } => {
                input_index += 1;
                expr::var(input_index - 1)
            }
            KernelOp::Output { strides } => {
                outputs.push((ie[0].clone(), desc(n.inputs[0]).clone(), strides.clone()));
                exprs.push(vec![]);
                continue;
            }
            KernelOp::Matmul => {
                let a = n.inputs[0];
                let r = desc(a).rank();
                expr::matmul(tag(a, r - 1), desc(a).shape[r - 1] as u64, &ie[0], &ie[1])
            }
            KernelOp::Unary { op } => expr::unary(op, &ie[0]),
            KernelOp::Binary { op } => expr::binary(*op, &ie[0], &ie[1]),
            KernelOp::ReduceSum { dim } => {
                expr::sum(tag(n.inputs[0], *dim), desc(n.inputs[0]).shape[*dim] as u64, &ie[0])
            }
            KernelOp::ReduceMax { dim } => {
                expr::max(tag(n.inputs[0], *dim), desc(n.inputs[0]).shape[*dim] as u64, &ie[0])
            }
            KernelOp::RmsNorm { eps } => {
                let x = n.inputs[0];
                let last = desc(x).rank() - 1;
                let r = expr::rms_eps(tag(x, last), desc(x).shape[last] as u64, eps.0, &ie[0]);
                match ie.get(1) {
                    Some(w) => expr::div(&expr::mul(&ie[0], w), &r),
                    None => expr::div(&ie[0], &r),
                }
            }
            KernelOp::Concat { .. } => expr::concat(&ie[0], &ie[1]),
            KernelOp::Rope { layout } => expr::rope(*layout, &ie[0], &ie[1], &ie[2]),
            KernelOp::Gather => expr::op("gather", 0, &[&ie[0], &ie[1]]),
            KernelOp::Argmax { dim } => {
                expr::argmax(tag(n.inputs[0], *dim), desc(n.inputs[0]).shape[*dim] as u64, &ie[0])
            }
            KernelOp::Custom { .. } => return Err("the program already contains custom kernels".into()),
        };
        if !matches!(n.op, KernelOp::Input { .. }) {
            step_of.insert(i, steps.len());
            steps.push(Step {
                label: format!("`{}` (%{i})", n.op.name()),
                expr: e.clone(),
                operands: n.inputs.iter().filter_map(|t| step_of.get(&t.node).copied()).collect(),
            });
        }
        exprs.push(vec![e]);
    }
    if outputs.is_empty() {
        return Err("the program has no outputs".into());
    }
    let contracted: HashSet<Class> =
        contracted_slots.iter().filter_map(|&(s, size)| class_of(&mut uf, s, size)).collect();
    if !ops.rms_eps.is_empty() && !ops.binary.contains(&BinaryOp::Div) {
        ops.binary.push(BinaryOp::Div); // the normalization moved after a matmul
    }
    for (_, d, _) in &outputs {
        if let Some(&w) = d.shape.last()
            && w > 1
            && !ops.sum_to_widths.contains(&w)
        {
            ops.sum_to_widths.push(w);
        }
    }
    Ok(ProgramInfo { inputs, input_classes, outputs, output_classes, contracted, class_sizes, ops, steps })
}

impl ProgramInfo {
    /// How many classes are both reduced and kept by an output: a final kernel can neither loop
    /// over such a class (it is an output's) nor split it (blocks would hold partial sums). A
    /// residual `x + f(x) @ w` ties `w`'s inner dim to the output's through `x`; reading `x` as
    /// two inputs ([`super::partition::split_reads`]) removes the conflict.
    pub fn conflicts(&self) -> usize {
        self.contracted.intersection(&self.output_classes).count()
    }
}

/// Shared state of one search run.
pub(crate) struct Run<'a> {
    pub info: &'a ProgramInfo,
    pub cfg: &'a SearchConfig,
    pub pruner: &'a dyn Pruner,
    pub deadline: Instant,
    /// Where the run gives up if it has not found a complete µGraph by then (a time and a number
    /// of states; `None`: never before the deadline). The whole-program search of a partitioned
    /// search stops there when it is fruitless, leaving the rest of the budget to the parts, and
    /// goes on to the deadline when it has found something ([`super::budget`]).
    pub give_up: Option<(Instant, u64)>,
    pub states: AtomicU64,
    pub pruned: AtomicU64,
    pub timed_out: AtomicBool,
    /// The cheapest complete µGraph so far (f64 bits of its estimate, µs).
    pub best_us: AtomicU64,
    /// Configurations skipped because their cost bound exceeded the best so far.
    pub bounded: AtomicU64,
    /// Per step of the program ([`ProgramInfo::steps`]): whether some tile or kernel tensor
    /// computed its result.
    pub reached: Vec<AtomicBool>,
}

/// Configurations tried from each end of a pattern's list to find a representative.
const REPRESENTATIVE_TRIES: usize = 2;

/// A configuration is skipped when its lower bound exceeds this multiple of the best µGraph so
/// far (the slack keeps the final, planned-shared-memory ranking and ties independent of the
/// order in which threads found things).
const BOUND_SLACK: f64 = 1.5;

impl Run<'_> {
    fn best(&self) -> f64 {
        f64::from_bits(self.best_us.load(Ordering::Relaxed))
    }

    fn offer(&self, us: f64) {
        let mut cur = self.best_us.load(Ordering::Relaxed);
        while us < f64::from_bits(cur) {
            match self.best_us.compare_exchange_weak(cur, us.to_bits(), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
    }

    /// Records that a tile or tensor computes `e`.
    fn mark(&self, e: &E) {
        for (step, reached) in self.info.steps.iter().zip(&self.reached) {
            if !reached.load(Ordering::Relaxed) && step.expr == *e {
                reached.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The operators no tile or tensor computed although the results of all their operands
    /// were computed: where a search that found nothing stopped.
    pub fn frontier(&self) -> Vec<String> {
        let reached = |k: usize| self.reached[k].load(Ordering::Relaxed);
        self.info
            .steps
            .iter()
            .enumerate()
            .filter(|&(k, s)| !reached(k) && s.operands.iter().all(|&o| reached(o)))
            .map(|(_, s)| s.label.clone())
            .collect()
    }

    fn out_of_time(&self) -> bool {
        if self.timed_out.load(Ordering::Relaxed) {
            return true;
        }
        let now = Instant::now();
        let states = self.states.load(Ordering::Relaxed);
        let fruitless = self.give_up.is_some_and(|(t, s)| (now >= t || states >= s) && self.best().is_infinite());
        if now >= self.deadline || states >= self.cfg.max_states || fruitless {
            self.timed_out.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// A kernel-level tensor of a partial µGraph.
#[derive(Clone, Debug)]
struct KTensor {
    r: TensorRef,
    desc: TensorDesc,
    expr: E,
    classes: Vec<Option<Class>>,
    uses: usize,
    program_input: bool,
}

/// A dimension class: its extent and the reduction tags of summing its partial groups (`part`,
/// for a dim that concatenates partial results of a split reduction: the split class) or the
/// whole dim (`full`); `group` is the extent of one partial group (the whole size for a class of
/// the program).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClassInfo {
    size: usize,
    part: Tag,
    full: Tag,
    group: usize,
}

fn full_tag(classes: &[ClassInfo], c: Option<Class>) -> Tag {
    c.and_then(|c| classes.get(c as usize)).map_or(TAG_NONE, |i| i.full)
}

fn part_tag(classes: &[ClassInfo], c: Option<Class>) -> Tag {
    c.and_then(|c| classes.get(c as usize)).map_or(TAG_NONE, |i| i.part)
}

/// A partial µGraph.
#[derive(Clone, Debug)]
struct KState {
    graph: KernelGraph,
    tensors: Vec<KTensor>,
    classes: Vec<ClassInfo>,
    kernels: usize,
    /// Estimated time of the kernels so far (fast estimates), µs.
    cost_us: f64,
}

/// A complete candidate µGraph found by the enumerator (outputs marked).
pub(crate) struct Found {
    pub graph: KernelGraph,
}

/// One way to close a block graph: the block graph, its outputs' expressions and classes.
#[derive(Clone, Debug)]
struct BlockResult {
    block: BlockGraph,
    outputs: Vec<(E, Vec<Option<Class>>)>,
    classes: Vec<ClassInfo>,
    cost: KernelCost,
    /// The block graph's canonical hash (the tie-breaker of the orders below), computed once when
    /// first needed: it serializes and hashes the whole block graph, and a sort that computed it
    /// in every comparison of tied costs spent more time there than in the enumeration.
    hash: OnceLock<CanonicalHash>,
}

impl BlockResult {
    fn hash(&self) -> &CanonicalHash {
        self.hash.get_or_init(|| self.block.canonical_hash())
    }
}

/// A block-graph configuration: grid, which class each grid axis splits, loop class and range
/// (the thread count is chosen when replaying structures).
#[derive(Clone, Debug)]
struct BlockConfig {
    grid: [usize; 3],
    axis_class: [Option<Class>; 3],
    loop_class: Option<Class>,
    frange: usize,
    /// `acc_max` of an input loaded once (no loop dim) is that input: the maximum of F equal
    /// values. Set in programs with a matmul and no maximum of their own, where it carries a
    /// residual past a pipelined loop ([`joins_epilogue`]).
    invariant_max: bool,
}

/// Enumerates µGraphs of at most `max_kernels` kernels, fewer kernels first.
pub(crate) fn enumerate(run: &Run<'_>) -> Vec<Found> {
    let info = run.info;
    let classes = info
        .class_sizes
        .iter()
        .enumerate()
        .map(|(c, &size)| ClassInfo { size, part: c as Tag, full: c as Tag, group: size })
        .collect();
    let mut init = KState { graph: KernelGraph::new(), tensors: Vec::new(), classes, kernels: 0, cost_us: 0.0 };
    for (i, d) in info.inputs.iter().enumerate() {
        let Ok(r) = init.graph.push(KernelOp::Input { desc: d.clone() }, &[]) else { return vec![] };
        init.tensors.push(KTensor {
            r: r[0],
            desc: d.clone(),
            expr: expr::var(i),
            classes: info.input_classes[i].clone(),
            uses: 0,
            program_input: true,
        });
    }
    let mut found = Vec::new();
    for n in 1..=run.cfg.max_kernels.max(1) {
        if run.out_of_time() {
            break;
        }
        kernel_step(run, &init, n, &mut found);
    }
    found
}

/// The target outputs a kernel must still produce, or `None` if the state has a leftover
/// tensor that is neither consumed nor a program output.
fn remaining_targets(run: &Run<'_>, s: &KState, consumed_now: &[usize]) -> Option<Vec<(E, TensorDesc)>> {
    let mut targets: Vec<(E, TensorDesc)> = run.info.outputs.iter().map(|(e, d, _)| (e.clone(), d.clone())).collect();
    for (i, t) in s.tensors.iter().enumerate() {
        if t.uses > 0 || consumed_now.contains(&i) {
            continue;
        }
        if t.program_input {
            return None; // every input must be read
        }
        let pos =
            targets.iter().position(|(e, d)| *e == t.expr && d.shape == t.desc.shape && d.dtype == t.desc.dtype)?;
        targets.remove(pos);
    }
    Some(targets)
}

/// Marks the program outputs on a complete state.
fn finish(run: &Run<'_>, s: &KState) -> Option<Found> {
    let targets = remaining_targets(run, s, &[])?;
    if !targets.is_empty() {
        return None;
    }
    let mut g = s.graph.clone();
    let mut taken = vec![false; s.tensors.len()];
    for (e, d, strides) in &run.info.outputs {
        let i = (0..s.tensors.len()).find(|&i| {
            let t = &s.tensors[i];
            !taken[i]
                && t.uses == 0
                && !t.program_input
                && t.expr == *e
                && t.desc.shape == d.shape
                && t.desc.dtype == d.dtype
        })?;
        taken[i] = true;
        g.output(s.tensors[i].r, strides.clone()).ok()?;
    }
    Some(Found { graph: g })
}

/// Extends `s` by kernels until it has `max` kernels; records every complete µGraph.
fn kernel_step(run: &Run<'_>, s: &KState, max: usize, found: &mut Vec<Found>) {
    if s.kernels == max {
        if let Some(f) = finish(run, s) {
            run.offer(s.cost_us);
            found.push(f);
        }
        return;
    }
    if run.out_of_time() {
        return;
    }
    let last = s.kernels + 1 == max;
    // Custom kernels over subsets of the available tensors.
    let n = s.tensors.len();
    let unconsumed_inputs: Vec<usize> =
        (0..n).filter(|&i| s.tensors[i].uses == 0 && s.tensors[i].program_input).collect();
    let mut subsets: Vec<Vec<usize>> = Vec::new();
    for mask in 1u32..(1u32 << n.min(16)) {
        let set: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) != 0).collect();
        if set.len() > run.cfg.max_block_inputs {
            continue;
        }
        if !set.iter().any(|&i| s.tensors[i].uses == 0) {
            continue; // recomputes only what is already consumed
        }
        if last && !unconsumed_inputs.iter().all(|i| set.contains(i)) {
            continue;
        }
        if last && !run.cfg.reread_inputs && set.iter().any(|&i| s.tensors[i].uses > 0) {
            continue;
        }
        subsets.push(set);
    }
    // Subsets re-reading fewer consumed tensors first, then larger ones.
    subsets.sort_by_key(|set| (set.iter().filter(|&&i| s.tensors[i].uses > 0).count(), std::cmp::Reverse(set.len())));
    for set in subsets {
        if run.out_of_time() {
            return;
        }
        let targets = if last {
            match remaining_targets(run, s, &set) {
                Some(t) if !t.is_empty() => Some(t),
                _ => continue,
            }
        } else {
            None
        };
        let results = block_search(run, s, &set, targets.as_deref());
        let chosen = if last { results } else { best_per_signature(run, results, run.cfg.max_intermediates) };
        for r in chosen {
            let mut next = s.clone();
            let inputs: Vec<TensorRef> = set.iter().map(|&i| s.tensors[i].r).collect();
            let Ok(outs) = next.graph.custom(&inputs, r.block.clone()) else { continue };
            for &i in &set {
                next.tensors[i].uses += 1;
            }
            let descs = r.block.output_descs();
            next.classes = r.classes.clone();
            for ((o, (e, cls)), d) in outs.iter().zip(&r.outputs).zip(descs) {
                next.tensors.push(KTensor {
                    r: *o,
                    desc: d,
                    expr: e.clone(),
                    classes: cls.clone(),
                    uses: 0,
                    program_input: false,
                });
            }
            next.kernels += 1;
            next.cost_us += r.cost.us;
            kernel_step(run, &next, max, found);
        }
    }
    if !run.cfg.kernel_level_ops {
        return;
    }
    // Kernel-level (library) operators, each one kernel with its default block graph.
    for (op, ins) in kernel_moves(run, s) {
        let descs: Vec<&TensorDesc> = ins.iter().map(|&i| &s.tensors[i].desc).collect();
        let Ok(out) = infer_kernel_op(&op, &descs) else { continue };
        let es: Vec<&E> = ins.iter().map(|&i| &s.tensors[i].expr).collect();
        let in_classes: Vec<&Vec<Option<Class>>> = ins.iter().map(|&i| &s.tensors[i].classes).collect();
        let Some(e) = kernel_expr(&op, &es, &descs, &in_classes, &s.classes) else { continue };
        run.states.fetch_add(1, Ordering::Relaxed);
        if !run.pruner.keep(&e) {
            run.pruned.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        run.mark(&e);
        if s.tensors.iter().any(|t| t.expr == e) {
            continue;
        }
        let mut next = s.clone();
        let refs: Vec<TensorRef> = ins.iter().map(|&i| s.tensors[i].r).collect();
        let Ok(r) = next.graph.push(op.clone(), &refs) else { continue };
        for &i in &ins {
            next.tensors[i].uses += 1;
        }
        let classes = kernel_classes(&op, &ins.iter().map(|&i| &s.tensors[i]).collect::<Vec<_>>(), &out[0]);
        next.tensors.push(KTensor { r: r[0], desc: out[0].clone(), expr: e, classes, uses: 0, program_input: false });
        next.kernels += 1;
        let owned: Vec<TensorDesc> = descs.iter().map(|d| (*d).clone()).collect();
        next.cost_us += default_block_graph(&op, &owned)
            .map_or(f64::INFINITY, |b| estimate_block_with(&b, &run.cfg.arch, SmemMode::Estimated).us);
        if next.cost_us + (max - next.kernels) as f64 * (run.cfg.arch.launch_us + run.cfg.arch.latency_us)
            > BOUND_SLACK * run.best()
        {
            continue;
        }
        kernel_step(run, &next, max, found);
    }
}

fn kernel_moves(run: &Run<'_>, s: &KState) -> Vec<(KernelOp, Vec<usize>)> {
    let ops = &run.info.ops;
    let n = s.tensors.len();
    let mut moves = Vec::new();
    for i in 0..n {
        for u in &ops.unary {
            moves.push((KernelOp::Unary { op: *u }, vec![i]));
        }
        for eps in &ops.rms_eps {
            moves.push((KernelOp::RmsNorm { eps: *eps }, vec![i]));
        }
        for &dim in &ops.argmax_dims {
            moves.push((KernelOp::Argmax { dim }, vec![i]));
        }
        for j in 0..n {
            if ops.matmul {
                moves.push((KernelOp::Matmul, vec![i, j]));
            }
            if ops.gather {
                moves.push((KernelOp::Gather, vec![i, j]));
            }
            for &layout in &ops.rope {
                for k in (0..n).filter(|&k| k != j) {
                    moves.push((KernelOp::Rope { layout }, vec![i, j, k]));
                }
            }
            for b in &ops.binary {
                if !b.is_commutative() || i <= j {
                    moves.push((KernelOp::Binary { op: *b }, vec![i, j]));
                }
            }
        }
    }
    moves
}

fn kernel_expr(
    op: &KernelOp,
    es: &[&E],
    descs: &[&TensorDesc],
    cls: &[&Vec<Option<Class>>],
    info: &[ClassInfo],
) -> Option<E> {
    let last = cls[0].len().checked_sub(1)?;
    let tag = |d: usize| full_tag(info, cls[0].get(d).copied().flatten());
    Some(match op {
        KernelOp::Matmul => expr::matmul(tag(last), *descs[0].shape.last()? as u64, es[0], es[1]),
        KernelOp::Unary { op } => expr::unary(op, es[0]),
        KernelOp::Binary { op } => expr::binary(*op, es[0], es[1]),
        KernelOp::RmsNorm { eps } => {
            expr::div(es[0], &expr::rms_eps(tag(last), *descs[0].shape.last()? as u64, eps.0, es[0]))
        }
        KernelOp::ReduceSum { dim } => expr::sum(tag(*dim), descs[0].shape[*dim] as u64, es[0]),
        KernelOp::Rope { layout } => expr::rope(*layout, es[0], es[1], es[2]),
        KernelOp::Gather => expr::op("gather", 0, &[es[0], es[1]]),
        KernelOp::Argmax { dim } => expr::argmax(tag(*dim), *descs[0].shape.get(*dim)? as u64, es[0]),
        KernelOp::Input { .. }
        | KernelOp::Output { .. }
        | KernelOp::ReduceMax { .. }
        | KernelOp::Concat { .. }
        | KernelOp::Custom { .. } => return None,
    })
}

fn kernel_classes(op: &KernelOp, ins: &[&KTensor], out: &TensorDesc) -> Vec<Option<Class>> {
    let r = out.rank();
    match op {
        KernelOp::Matmul => {
            let mut c = ins[0].classes.clone();
            c[r - 1] = ins[1].classes[r - 1];
            c
        }
        KernelOp::Gather => {
            let mut c = ins[1].classes.clone();
            c.push(ins[0].classes[1]);
            c
        }
        _ => (0..r)
            .map(|d| {
                ins.iter()
                    .find(|t| t.desc.shape.get(d) == Some(&out.shape[d]) && out.shape[d] > 1)
                    .and_then(|t| t.classes[d])
            })
            .collect(),
    }
}

/// How much of the program's output expressions the outputs `exprs` cover: the sizes of the
/// target subterms they complete to.
fn coverage(run: &Run<'_>, exprs: &[&E]) -> usize {
    let subterms: Vec<E> = run.info.outputs.iter().flat_map(|(e, _, _)| e.subterms()).collect();
    // Each output covers the largest target subterm it completes to; distinct subterms count once.
    let mut covered: Vec<&E> = Vec::new();
    for x in exprs {
        if let Some(t) = subterms.iter().filter(|t| expr::completes_to(x, t)).max_by_key(|t| t.subterms().len())
            && !covered.contains(&t)
        {
            covered.push(t);
        }
    }
    covered.iter().map(|t| t.subterms().len()).sum()
}

/// For intermediate kernels: the cheapest result per output signature; the `keep` signatures
/// with the lowest cost per covered term of the program's expressions.
fn best_per_signature(run: &Run<'_>, results: Vec<BlockResult>, keep: usize) -> Vec<BlockResult> {
    let mut best: HashMap<String, BlockResult> = HashMap::new();
    for r in results {
        let sig = format!("{:?}|{:?}", r.outputs.iter().map(|(e, _)| e).collect::<Vec<_>>(), r.block.output_descs());
        match best.get(&sig) {
            Some(b) if (b.cost.us, b.hash()) <= (r.cost.us, r.hash()) => {}
            _ => {
                best.insert(sig, r);
            }
        }
    }
    let mut v: Vec<(usize, BlockResult)> =
        best.into_values().map(|r| (coverage(run, &r.outputs.iter().map(|(e, _)| e).collect::<Vec<_>>()), r)).collect();
    let score = |c: usize, r: &BlockResult| r.cost.us / c.max(1) as f64;
    v.sort_by(|(ca, a), (cb, b)| score(*ca, a).total_cmp(&score(*cb, b)).then_with(|| a.hash().cmp(b.hash())));
    v.truncate(keep);
    v.into_iter().map(|(_, r)| r).collect()
}

/// Per-axis split sizes for a class of `n` elements: divisors `g ≥ 2` with `g` or `n / g` a
/// power of two, at most `max_axis`, then the [`wide_splits`] of `n` (beyond `max_axis`, at most
/// `max_blocks`).
fn split_sizes(n: usize, max_axis: usize, max_blocks: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = (2..=n.min(max_axis))
        .filter(|&g| n.is_multiple_of(g) && (g.is_power_of_two() || (n / g).is_power_of_two()))
        .collect();
    sizes.extend(wide_splits(n, max_axis, max_blocks));
    sizes
}

/// Smallest block extent of a [`wide_splits`] split: 64 elements, a 128-byte row of a 16-bit
/// tensor, so every block still reads whole cache lines.
pub(crate) const WIDE_SPLIT_MIN_TILE: usize = 64;

/// Splits of a class of `n` elements into more than `max_axis` blocks (at most `max_blocks`), each
/// block a power-of-two extent of at least [`WIDE_SPLIT_MIN_TILE`] elements, ascending. Only for
/// classes whose odd part exceeds `max_axis` (a vocabulary of 151936 = 2^7 · 1187 splits into 1187
/// blocks of 128 or 2374 of 64): there the splits within `max_axis` are powers of two only and
/// leave few blocks of odd widths (at most 128 of 1187 columns). A class with a smaller odd part
/// already has a split of `o · 2^j` blocks within a factor 2 of `max_axis`.
pub(crate) fn wide_splits(n: usize, max_axis: usize, max_blocks: usize) -> Vec<usize> {
    if n == 0 || n >> n.trailing_zeros() <= max_axis {
        return Vec::new();
    }
    let mut out: Vec<usize> = (WIDE_SPLIT_MIN_TILE.trailing_zeros()..usize::BITS)
        .map(|b| 1usize << b)
        .take_while(|&t| t <= n)
        .filter(|&t| n.is_multiple_of(t))
        .map(|t| n / t)
        .filter(|&g| g > max_axis && g <= max_blocks)
        .collect();
    out.sort_unstable();
    out
}

/// The configurations of one *pattern* (which classes the grid axes split, which class the loop
/// walks): they differ only in sizes, so they share operator structures.
struct Pattern {
    configs: Vec<BlockConfig>,
}

/// Every block configuration for a kernel over tensors with `classes`, grouped by pattern.
fn patterns(run: &Run<'_>, classes: &[Class], sizes: &[usize], final_kernel: bool) -> Vec<Pattern> {
    let cfg = run.cfg;
    let outc = &run.info.output_classes;
    let invariant_max = run.info.ops.matmul && !run.info.ops.reduce_max;
    let k = classes.len();
    let mut out = Vec::new();
    for mask in 0u32..(1u32 << k.min(12)) {
        let chosen: Vec<Class> = (0..k).filter(|&i| mask & (1 << i) != 0).map(|i| classes[i]).collect();
        if chosen.len() > 3 {
            continue;
        }
        let extra = chosen.iter().filter(|c| !outc.contains(c)).count();
        let wanted_extra = if final_kernel {
            0..=0
        } else if cfg.split_intermediates_only {
            1..=1
        } else {
            0..=1
        };
        if !wanted_extra.contains(&extra) {
            continue;
        }
        let options: Vec<Vec<usize>> =
            chosen.iter().map(|&c| split_sizes(sizes[c as usize], cfg.max_axis_blocks, cfg.max_blocks)).collect();
        if options.iter().any(|o| o.is_empty()) {
            continue;
        }
        // Every grid of this class choice.
        let mut grids: Vec<([usize; 3], [Option<Class>; 3])> = Vec::new();
        let mut idx = vec![0usize; chosen.len()];
        loop {
            let mut grid = [1usize; 3];
            let mut axis = [None; 3];
            for (a, (&c, o)) in chosen.iter().zip(&options).enumerate() {
                grid[a] = o[idx[a]];
                axis[a] = Some(c);
            }
            if grid.iter().product::<usize>() <= cfg.max_blocks {
                grids.push((grid, axis));
            }
            let mut a = 0;
            while a < idx.len() {
                idx[a] += 1;
                if idx[a] < options[a].len() {
                    break;
                }
                idx[a] = 0;
                a += 1;
            }
            if a == idx.len() {
                break;
            }
        }
        // Loop choices: none, or a class that is not an output class.
        let mut loop_classes: Vec<Option<Class>> = vec![None];
        loop_classes.extend(classes.iter().filter(|c| !outc.contains(c)).map(|&c| Some(c)));
        for lc in loop_classes {
            let mut configs = Vec::new();
            for &(grid, axis) in &grids {
                match lc {
                    None => {
                        configs.push(BlockConfig { grid, axis_class: axis, loop_class: None, frange: 1, invariant_max })
                    }
                    Some(c) => {
                        let split = (0..3).find(|&a| axis[a] == Some(c)).map_or(1, |a| grid[a]);
                        let slab = sizes[c as usize] / split;
                        for &f in &cfg.forloop_ranges {
                            if f > 1 && slab.is_multiple_of(f) {
                                configs.push(BlockConfig {
                                    grid,
                                    axis_class: axis,
                                    loop_class: lc,
                                    frange: f,
                                    invariant_max,
                                });
                            }
                        }
                    }
                }
            }
            if !configs.is_empty() {
                out.push(Pattern { configs });
            }
        }
    }
    out
}

/// A tile of a block graph under construction.
#[derive(Clone, Debug)]
struct BTile {
    r: TensorRef,
    expr: E,
    phase: Phase,
    classes: Vec<Option<Class>>,
    uses: u32,
    is_input: bool,
    id: u64,
}

/// An operator structure: operators applied to tiles (indices in creation order, the input
/// iterators first).
type Structure = Vec<(BlockOp, Vec<usize>)>;

#[derive(Clone, Debug)]
struct BState {
    bg: BlockGraph,
    tiles: Vec<BTile>,
    log: Structure,
    key: u64,
}

/// Enumerates block graphs over kernel tensors `set` of state `s`. With `targets`, the kernel
/// is final: its outputs must be exactly those program outputs.
///
/// Per pattern, operator structures are enumerated (depth-first, pruned) at two representative
/// configurations — the first from each end of the pattern's list (largest and smallest tiles)
/// at which a structure closes — and then replayed, with every thread count, on every
/// configuration of the pattern.
fn block_search(run: &Run<'_>, s: &KState, set: &[usize], targets: Option<&[(E, TensorDesc)]>) -> Vec<BlockResult> {
    let mut classes: Vec<Class> = set.iter().flat_map(|&i| s.tensors[i].classes.iter().flatten().copied()).collect();
    classes.sort_unstable();
    classes.dedup();
    let sizes: Vec<usize> = s.classes.iter().map(|c| c.size).collect();
    let pats = patterns(run, &classes, &sizes, targets.is_some());
    let mut results: Vec<BlockResult> = pats
        .par_iter()
        .flat_map_iter(|p| {
            if run.out_of_time() {
                return Vec::new();
            }
            // Representatives: among the configurations whose input tiles have the fewest
            // leading (batch) dims above 1 — a tile matmul needs them to be 1 — the first from
            // each end of the pattern's list (largest and smallest tiles) at which some
            // structure closes.
            let threads = run.cfg.threads.first().copied().unwrap_or(128);
            let keys: Vec<usize> = p
                .configs
                .iter()
                .map(|c| {
                    initial(s, set, c, threads).map_or(usize::MAX, |st| {
                        st.tiles
                            .iter()
                            .filter_map(|t| st.bg.tile(t.r).ok())
                            .map(|t| t.shape.iter().rev().skip(2).filter(|&&d| d > 1).count())
                            .sum()
                    })
                })
                .collect();
            let best_key = keys.iter().copied().min().unwrap_or(usize::MAX);
            let eligible: Vec<usize> =
                (0..p.configs.len()).filter(|&i| keys[i] == best_key && best_key != usize::MAX).collect();
            let mut structures: Vec<Structure> = Vec::new();
            let n = eligible.len();
            for order in [&mut (0..n) as &mut dyn Iterator<Item = usize>, &mut (0..n).rev()] {
                for i in order.take(REPRESENTATIVE_TRIES) {
                    let found = structures_at(run, s, set, &p.configs[eligible[i]], targets);
                    let any = !found.is_empty();
                    for st in found {
                        if !structures.contains(&st) {
                            structures.push(st);
                        }
                    }
                    if any {
                        break;
                    }
                }
            }
            if structures.is_empty() {
                return Vec::new();
            }
            let mut out = Vec::new();
            let after = (run.cfg.max_kernels.max(1).saturating_sub(s.kernels + 1)) as f64
                * (run.cfg.arch.launch_us + run.cfg.arch.latency_us);
            for c in &p.configs {
                if run.out_of_time() {
                    break;
                }
                if let Some(init) = initial(s, set, c, run.cfg.threads.first().copied().unwrap_or(128))
                    && s.cost_us + lower_bound_us(&init.bg, &run.cfg.arch) + after > BOUND_SLACK * run.best()
                {
                    run.bounded.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                for &threads in &run.cfg.threads {
                    for st in &structures {
                        if let Some(state) = replay(s, set, c, threads, st) {
                            close(run, s, c, targets, &state, &mut out);
                        }
                    }
                }
            }
            out
        })
        .collect();
    results.sort_by(|a, b| a.cost.us.total_cmp(&b.cost.us).then_with(|| a.hash().cmp(b.hash())));
    results
}

/// The block graph with the input iterators of configuration `c`.
fn initial(s: &KState, set: &[usize], c: &BlockConfig, threads: usize) -> Option<BState> {
    let descs: Vec<TensorDesc> = set.iter().map(|&i| s.tensors[i].desc.clone()).collect();
    let mut bg = BlockGraph::new(descs, c.grid, threads, c.frange).ok()?;
    let mut tiles = Vec::new();
    for (k, &i) in set.iter().enumerate() {
        let t = &s.tensors[i];
        let imap: GridMap = c.axis_class.map(|ac| ac.and_then(|cl| t.classes.iter().position(|&x| x == Some(cl))));
        let fdim = c.loop_class.and_then(|cl| t.classes.iter().position(|&x| x == Some(cl)));
        let r = bg.input(k, imap, fdim).ok()?;
        let id = mix64(0x1000 + k as u64);
        tiles.push(BTile {
            r,
            expr: t.expr.clone(),
            phase: Phase::InLoop,
            classes: t.classes.clone(),
            uses: 0,
            is_input: true,
            id,
        });
    }
    // Each grid axis must split some input (or all blocks would compute the same tile).
    for a in 0..3 {
        if c.grid[a] > 1
            && !bg.nodes().iter().any(|n| matches!(&n.op, BlockOp::Input { imap, .. } if imap[a].is_some()))
        {
            return None;
        }
    }
    let key = tiles.iter().fold(0u64, |k, t| k.wrapping_add(t.id));
    Some(BState { bg, tiles, log: Vec::new(), key })
}

/// Applies `op` to tiles `ins` of `st` if the IR's rules accept it; the new tile's expression is
/// not checked against the pruner.
fn apply(st: &BState, op: &BlockOp, ins: &[usize], c: &BlockConfig, info: &[ClassInfo]) -> Option<BState> {
    let refs: Vec<TensorRef> = ins.iter().map(|&i| st.tiles.get(i).map(|t| t.r)).collect::<Option<_>>()?;
    let in_tiles: Vec<&TileDesc> = refs.iter().map(|&r| st.bg.tile(r)).collect::<Result<Vec<_>, _>>().ok()?;
    let outs = st.bg.infer(op, &in_tiles).ok()?;
    let in_shapes: Vec<&Vec<usize>> = in_tiles.iter().map(|t| &t.shape).collect();
    let es: Vec<&E> = ins.iter().map(|&i| &st.tiles[i].expr).collect();
    let in_btiles: Vec<&BTile> = ins.iter().map(|&i| &st.tiles[i]).collect();
    let in_classes: Vec<&Vec<Option<Class>>> = in_btiles.iter().map(|t| &t.classes).collect();
    let e = match op {
        BlockOp::Accum { acc: AccKind::Max } if c.invariant_max && invariant_input(st, ins[0]) => es[0].clone(),
        _ => tile_expr(op, &es, &in_shapes, &in_classes, c, info)?,
    };
    let classes = tile_classes(op, &in_btiles, &in_shapes, &outs[0].shape);
    let id = ins.iter().fold(mix64(op_tag(op)), |h, &i| mix64(h ^ st.tiles[i].id.rotate_left(7)));
    let phase = outs[0].phase;
    let mut next = st.clone();
    let r = next.bg.push(op.clone(), &refs).ok()?;
    for &i in ins {
        next.tiles[i].uses += 1;
    }
    next.tiles.push(BTile { r: r[0], expr: e, phase, classes, uses: 0, is_input: false, id });
    next.log.push((op.clone(), ins.to_vec()));
    next.key = st.key.wrapping_add(id);
    Some(next)
}

/// Replays structure `st` on configuration `c` with `threads` threads.
fn replay(s: &KState, set: &[usize], c: &BlockConfig, threads: usize, structure: &Structure) -> Option<BState> {
    let mut st = initial(s, set, c, threads)?;
    for (op, ins) in structure {
        st = apply(&st, op, ins, c, &s.classes)?;
    }
    Some(st)
}

/// The operator structures that close a block graph at configuration `c`.
fn structures_at(
    run: &Run<'_>,
    s: &KState,
    set: &[usize],
    c: &BlockConfig,
    targets: Option<&[(E, TensorDesc)]>,
) -> Vec<Structure> {
    let Some(mut st) = initial(s, set, c, run.cfg.threads.first().copied().unwrap_or(128)) else { return vec![] };
    let mut visited = HashSet::new();
    let mut out = Vec::new();
    block_dfs(run, s, c, targets, &mut st, &mut visited, &mut out);
    out
}

/// One candidate operator application: the op and its operand tiles.
///
/// Without a loop (`frange == 1`) an accumulator is the identity and in-loop and epilogue
/// placements of an operator are the same computation; to enumerate each once, only binary
/// operators (combining accumulators) act after the loop, and accumulators take computed tiles
/// (or reduce inputs: `acc_rms_last`, `acc_sum_last`).
fn block_moves(run: &Run<'_>, st: &BState, frange: usize) -> Vec<(BlockOp, Vec<usize>)> {
    let ops = &run.info.ops;
    let n = st.tiles.len();
    let mut moves = Vec::new();
    let no_loop = frange == 1;
    for i in 0..n {
        let ti = &st.tiles[i];
        let Ok(tile) = st.bg.tile(ti.r) else { continue };
        let shape = &tile.shape;
        let epilogue_only_binary = no_loop && ti.phase == Phase::AfterLoop;
        if ti.phase == Phase::AfterLoop {
            // An argmax needs the finished values (an i32 tile has no accumulator).
            for &d in &ops.argmax_dims {
                if shape.get(d).is_some_and(|&len| len > 1) {
                    moves.push((BlockOp::Argmax { dim: d }, vec![i]));
                }
            }
        }
        if !epilogue_only_binary {
            for u in &ops.unary {
                moves.push((BlockOp::Unary { op: *u }, vec![i]));
            }
            for &layout in &ops.rope {
                // cos and sin: two other tiles of one shape in the same phase.
                for j in (0..n).filter(|&j| j != i && st.tiles[j].phase == ti.phase) {
                    for k in (0..n).filter(|&k| k != i && k != j && st.tiles[k].phase == ti.phase) {
                        let same = st.bg.tile(st.tiles[j].r).ok().map(|t| &t.shape)
                            == st.bg.tile(st.tiles[k].r).ok().map(|t| &t.shape);
                        if same {
                            moves.push((BlockOp::Rope { layout }, vec![i, j, k]));
                        }
                    }
                }
            }
            for eps in &ops.rms_eps {
                moves.push((BlockOp::RmsNorm { eps: *eps }, vec![i]));
            }
            if ops.reduce_sum {
                for (d, &len) in shape.iter().enumerate() {
                    if len > 1 {
                        moves.push((BlockOp::ReduceSum { dim: d }, vec![i]));
                    }
                }
            }
            // A row maximum within the tile (the safe softmax's `x − max(x)`).
            if ops.reduce_max {
                for (d, &len) in shape.iter().enumerate() {
                    if len > 1 {
                        moves.push((BlockOp::ReduceMax { dim: d }, vec![i]));
                    }
                }
            }
        }
        if ti.phase == Phase::InLoop {
            if !(no_loop && ti.is_input) || joins_epilogue(run, ti) {
                moves.push((BlockOp::Accum { acc: AccKind::Sum }, vec![i]));
            }
            if ops.reduce_sum {
                moves.push((BlockOp::Accum { acc: AccKind::SumLast }, vec![i]));
            }
            if ops.rms_eps.iter().any(|e| e.0 == 0.0) {
                moves.push((BlockOp::Accum { acc: AccKind::RmsLast }, vec![i]));
            }
            if ops.reduce_max || (!no_loop && joins_epilogue(run, ti) && invariant_input(st, i)) {
                moves.push((BlockOp::Accum { acc: AccKind::Max }, vec![i]));
            }
            for &w in &ops.sum_to_widths {
                if shape.last().is_some_and(|&l| l > w && l % w == 0) {
                    moves.push((BlockOp::Accum { acc: AccKind::SumTo { width: w } }, vec![i]));
                }
            }
        }
        for j in 0..n {
            if st.tiles[j].phase != ti.phase {
                continue;
            }
            if ops.matmul && !epilogue_only_binary {
                moves.push((BlockOp::Matmul, vec![i, j]));
            }
            for b in &ops.binary {
                if i != j && (!b.is_commutative() || i < j) {
                    moves.push((BlockOp::Binary { op: *b }, vec![i, j]));
                }
            }
            if i != j && !epilogue_only_binary {
                for &d in &ops.concat_dims {
                    moves.push((BlockOp::Concat { dim: d }, vec![i, j]));
                }
            }
        }
    }
    moves
}

/// Whether an input tile may pass the loop unchanged to join the epilogue: without a loop
/// `acc_sum` is the identity, with one `acc_max` of a tile loaded once is (the maximum of equal
/// values; [`BlockConfig::invariant_max`]), and an input all of whose classes are output classes (the
/// `x` of a residual `x + f(x) @ w`) is added to the finished matmul after it, where a norm's
/// division moved after the matmul is applied. Only programs with a matmul are offered the
/// move: without one, reductions over whole rows happen in the loop and the operator applies
/// before the accumulator (offering it there only repeats those structures: 6× the states of
/// nTrans).
fn joins_epilogue(run: &Run<'_>, t: &BTile) -> bool {
    run.info.ops.matmul && t.classes.iter().flatten().all(|c| run.info.output_classes.contains(c))
}

/// Whether tile `i` is an input loaded once, before the loop (no loop dim): the same value in
/// every iteration.
fn invariant_input(st: &BState, i: usize) -> bool {
    st.tiles.get(i).is_some_and(|t| {
        t.is_input
            && st.bg.nodes().get(t.r.node).is_some_and(|n| matches!(n.op, BlockOp::Input { forloop_dim: None, .. }))
    })
}

fn tile_classes(op: &BlockOp, ins: &[&BTile], in_shapes: &[&Vec<usize>], out: &[usize]) -> Vec<Option<Class>> {
    let r = out.len();
    match op {
        BlockOp::Matmul => {
            let mut c = ins[0].classes.clone();
            c[r - 1] = ins[1].classes[r - 1];
            c
        }
        BlockOp::Accum { acc: AccKind::SumLast | AccKind::RmsLast | AccKind::SumTo { .. } } => {
            let mut c = ins[0].classes.clone();
            c[r - 1] = None;
            c
        }
        BlockOp::ReduceSum { dim } | BlockOp::ReduceMax { dim } | BlockOp::Concat { dim } | BlockOp::Argmax { dim } => {
            let mut c = ins[0].classes.clone();
            c[*dim] = None;
            c
        }
        // Element-wise: the class of an operand of the output's extent (a tile dim of extent 1
        // split off by the grid keeps its class).
        _ => (0..r)
            .map(|d| {
                (0..ins.len())
                    .filter(|&k| in_shapes[k][d] == out[d])
                    .find_map(|k| ins[k].classes.get(d).copied().flatten())
            })
            .collect(),
    }
}

/// The expression of a block operator's result. Reductions are tagged with the class they
/// reduce: a matmul its operand's last dim, an accumulator the loop's class (and the last dim's
/// for `acc_sum_last` / `acc_rms_last` / `acc_sum_to`).
fn tile_expr(
    op: &BlockOp,
    es: &[&E],
    in_shapes: &[&Vec<usize>],
    in_classes: &[&Vec<Option<Class>>],
    c: &BlockConfig,
    info: &[ClassInfo],
) -> Option<E> {
    let last = |s: &Vec<usize>| s.last().copied().unwrap_or(1) as u64;
    let cls = |k: usize, d: usize| in_classes.get(k).and_then(|v| v.get(d)).copied().flatten();
    let r = in_shapes[0].len();
    let f = c.frange as u64;
    // A loop whose tiles are whole partial groups of a split reduction (one group per iteration)
    // sums or maximizes over the partial results: the split class's tag.
    let loop_tag = match c.loop_class.and_then(|lc| Some((lc, *info.get(lc as usize)?))) {
        Some((lc, ci))
            if ci.part != ci.full
                && in_classes[0].iter().position(|&x| x == Some(lc)).map(|d| in_shapes[0][d]) == Some(ci.group) =>
        {
            ci.part
        }
        _ => full_tag(info, c.loop_class),
    };
    let last_class = cls(0, r - 1);
    let last_tag = full_tag(info, last_class);
    let same_loop = c.frange == 1 || c.loop_class == last_class;
    Some(match op {
        BlockOp::Matmul => expr::matmul(last_tag, last(in_shapes[0]), es[0], es[1]),
        BlockOp::Unary { op } => expr::unary(op, es[0]),
        BlockOp::Binary { op } => expr::binary(*op, es[0], es[1]),
        BlockOp::ReduceSum { dim } => expr::sum(full_tag(info, cls(0, *dim)), in_shapes[0][*dim] as u64, es[0]),
        BlockOp::ReduceSumTo { dim, width } => {
            expr::sum(part_tag(info, cls(0, *dim)), (in_shapes[0][*dim] / width) as u64, es[0])
        }
        BlockOp::ReduceMax { dim } => expr::max(full_tag(info, cls(0, *dim)), in_shapes[0][*dim] as u64, es[0]),
        BlockOp::RmsNorm { eps } => expr::div(es[0], &expr::rms_eps(last_tag, last(in_shapes[0]), eps.0, es[0])),
        BlockOp::Concat { .. } => expr::concat(es[0], es[1]),
        BlockOp::Rope { layout } => expr::rope(*layout, es[0], es[1], es[2]),
        BlockOp::Argmax { dim } => expr::argmax(full_tag(info, cls(0, *dim)), in_shapes[0][*dim] as u64, es[0]),
        BlockOp::Accum { acc } => match acc {
            AccKind::Sum => expr::sum(loop_tag, f, es[0]),
            AccKind::Max => expr::max(loop_tag, f, es[0]),
            AccKind::SumLast if same_loop => expr::sum(last_tag, f * last(in_shapes[0]), es[0]),
            AccKind::SumLast => expr::sum(loop_tag, f, &expr::sum(last_tag, last(in_shapes[0]), es[0])),
            AccKind::RmsLast if same_loop => expr::rms(last_tag, f * last(in_shapes[0]), es[0]),
            AccKind::RmsLast => expr::rms(TAG_MIXED, f * last(in_shapes[0]), es[0]),
            AccKind::SumTo { width } if same_loop => {
                expr::sum(part_tag(info, last_class), f * last(in_shapes[0]) / *width as u64, es[0])
            }
            AccKind::SumTo { width } => expr::sum(
                loop_tag,
                f,
                &expr::sum(part_tag(info, last_class), last(in_shapes[0]) / *width as u64, es[0]),
            ),
            AccKind::Rescale | AccKind::SumLastRescale => return None,
        },
        BlockOp::Input { .. } | BlockOp::Output { .. } | BlockOp::RunningMax { .. } | BlockOp::Gather { .. } => {
            return None;
        }
    })
}

fn op_tag(op: &BlockOp) -> u64 {
    let s = format!("{op:?}");
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// What a move produces, memoized by the new tile's derivation id within one DFS.
type MoveMemo = HashMap<u64, Option<(E, Phase)>>;

fn block_dfs(
    run: &Run<'_>,
    s: &KState,
    c: &BlockConfig,
    targets: Option<&[(E, TensorDesc)]>,
    st: &mut BState,
    visited: &mut HashSet<u64>,
    out: &mut Vec<Structure>,
) {
    let mut memo = MoveMemo::new();
    dfs(run, s, c, targets, st, visited, &mut memo, out);
}

#[allow(clippy::too_many_arguments)]
fn dfs(
    run: &Run<'_>,
    s: &KState,
    c: &BlockConfig,
    targets: Option<&[(E, TensorDesc)]>,
    st: &BState,
    visited: &mut HashSet<u64>,
    memo: &mut MoveMemo,
    out: &mut Vec<Structure>,
) {
    let n_states = run.states.fetch_add(1, Ordering::Relaxed);
    if n_states.is_multiple_of(256) && run.out_of_time() {
        return;
    }
    if run.timed_out.load(Ordering::Relaxed) {
        return;
    }
    if closable(run, s, targets, st) {
        out.push(st.log.clone());
    }
    if st.log.len() >= run.cfg.max_block_ops {
        return;
    }
    for (op, ins) in block_moves(run, st, c.frange) {
        let id = ins.iter().fold(mix64(op_tag(&op)), |h, &i| mix64(h ^ st.tiles[i].id.rotate_left(7)));
        let key = st.key.wrapping_add(id);
        if visited.contains(&key) {
            continue;
        }
        // The new tile's value and phase depend only on its derivation: memoized.
        let produced = match memo.get(&id) {
            Some(p) => p.clone(),
            None => {
                let p = apply(st, &op, &ins, c, &s.classes).map(|n| {
                    let t = &n.tiles[n.tiles.len() - 1];
                    (t.expr.clone(), t.phase)
                });
                let p = match p {
                    Some((e, _)) if !run.pruner.keep(&e) => {
                        run.pruned.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    other => other,
                };
                if let Some((e, _)) = &p {
                    run.mark(e);
                }
                memo.insert(id, p.clone());
                p
            }
        };
        let Some((e, phase)) = produced else { continue };
        if st.tiles.iter().any(|t| t.phase == phase && t.expr == e) {
            continue;
        }
        visited.insert(key);
        let Some(next) = apply(st, &op, &ins, c, &s.classes) else { continue };
        dfs(run, s, c, targets, &next, visited, memo, out);
        if run.timed_out.load(Ordering::Relaxed) {
            return;
        }
    }
}

/// The unconsumed tiles of a closable state (all inputs read, the leaves after the loop and
/// either exactly the kernel's target expressions or, for an intermediate kernel, new values).
fn closable(run: &Run<'_>, s: &KState, targets: Option<&[(E, TensorDesc)]>, st: &BState) -> bool {
    if st.tiles.iter().any(|t| t.is_input && t.uses == 0) {
        return false;
    }
    let leaves: Vec<&BTile> = st.tiles.iter().filter(|t| !t.is_input && t.uses == 0).collect();
    if leaves.is_empty()
        || leaves.len() > run.cfg.max_block_outputs
        || leaves.iter().any(|t| t.phase != Phase::AfterLoop)
    {
        return false;
    }
    match targets {
        Some(targets) => {
            if leaves.len() != targets.len() {
                return false;
            }
            let mut left: Vec<&E> = targets.iter().map(|(e, _)| e).collect();
            for l in &leaves {
                match left.iter().position(|e| **e == l.expr) {
                    Some(p) => {
                        left.remove(p);
                    }
                    None => return false,
                }
            }
            true
        }
        None => !leaves.iter().any(|l| s.tensors.iter().any(|t| t.expr == l.expr)),
    }
}

/// Closes a replayed state: output savers for its leaves (omaps forced by the classes, free
/// dims for a split reduction of an intermediate kernel), shape checks, cost.
fn close(
    run: &Run<'_>,
    s: &KState,
    c: &BlockConfig,
    targets: Option<&[(E, TensorDesc)]>,
    st: &BState,
    out: &mut Vec<BlockResult>,
) {
    if !closable(run, s, targets, st) {
        return;
    }
    let leaves: Vec<&BTile> = st.tiles.iter().filter(|t| !t.is_input && t.uses == 0).collect();
    let mut per_leaf: Vec<Vec<GridMap>> = Vec::new();
    for l in &leaves {
        let rank = l.classes.len();
        let mut maps: Vec<GridMap> = vec![[None; 3]];
        for a in 0..3 {
            if c.grid[a] <= 1 {
                continue;
            }
            let forced = c.axis_class[a].and_then(|cl| l.classes.iter().position(|&x| x == Some(cl)));
            let mut next = Vec::new();
            for m in &maps {
                // A split reduction's partial results are concatenated along the last dim, where
                // the combining kernel's accumulators (acc_sum_last, acc_sum_to) reduce them.
                let dims: Vec<usize> = match forced {
                    Some(d) => vec![d],
                    None if targets.is_some() => vec![],
                    None => (0..rank).rev().collect(),
                };
                for d in dims {
                    if !m.contains(&Some(d)) {
                        let mut m2 = *m;
                        m2[a] = Some(d);
                        next.push(m2);
                    }
                }
            }
            maps = next;
        }
        if maps.is_empty() {
            return;
        }
        per_leaf.push(maps);
    }
    let mut idx = vec![0usize; leaves.len()];
    loop {
        let omaps: Vec<GridMap> = per_leaf.iter().zip(&idx).map(|(m, &i)| m[i]).collect();
        let mut bg = st.bg.clone();
        if leaves.iter().zip(&omaps).all(|(l, m)| bg.output(l.r, *m).is_ok()) {
            let descs = bg.output_descs();
            let shapes_ok = match targets {
                Some(targets) => leaves.iter().zip(&descs).all(|(l, d)| {
                    targets.iter().any(|(e, t)| *e == l.expr && t.shape == d.shape && t.dtype == d.dtype)
                }),
                None => true,
            };
            if shapes_ok {
                let mut classes = s.classes.clone();
                let outputs = leaves
                    .iter()
                    .zip(&descs)
                    .zip(&omaps)
                    .map(|((l, d), omap)| {
                        let cls = (0..d.rank())
                            .map(|k| {
                                let size = d.shape[k];
                                let inner = l.classes[k];
                                // The class of the grid axis that concatenates blocks along dim k.
                                let outer = (0..3)
                                    .find(|&a| omap[a] == Some(k))
                                    .and_then(|a| c.axis_class[a])
                                    .filter(|&o| Some(o) != inner);
                                match inner {
                                    Some(cl)
                                        if classes.get(cl as usize).map(|i| i.size) == Some(size)
                                            && outer.is_none() =>
                                    {
                                        Some(cl)
                                    }
                                    _ if size <= 1 => None,
                                    _ => {
                                        // A fresh class: partial results of `outer` (the split
                                        // reduction) laid out next to `inner`'s elements.
                                        let (part, full) = match (outer, inner) {
                                            (None, i) => (full_tag(&classes, i), full_tag(&classes, i)),
                                            (Some(o), None) => {
                                                (full_tag(&classes, Some(o)), full_tag(&classes, Some(o)))
                                            }
                                            (Some(o), Some(_)) => (full_tag(&classes, Some(o)), TAG_MIXED),
                                        };
                                        // One partial group per block along dim k.
                                        let blocks: usize =
                                            (0..3).filter(|&a| omap[a] == Some(k)).map(|a| c.grid[a]).product();
                                        let info = ClassInfo { size, part, full, group: size / blocks.max(1) };
                                        // Outputs of one kernel split the same way share the class,
                                        // so a later kernel walks them with one loop.
                                        let fresh = s.classes.len();
                                        match classes[fresh..].iter().position(|x| *x == info) {
                                            Some(p) => Some((fresh + p) as Class),
                                            None => {
                                                classes.push(info);
                                                Some((classes.len() - 1) as Class)
                                            }
                                        }
                                    }
                                }
                            })
                            .collect();
                        (l.expr.clone(), cls)
                    })
                    .collect::<Vec<(E, Vec<Option<Class>>)>>();
                // An intermediate kernel's outputs are partial results of the reduction it splits
                // across the grid: no output keeps that class whole.
                let split: Vec<Class> =
                    c.axis_class.iter().flatten().filter(|cl| !run.info.output_classes.contains(cl)).copied().collect();
                let partial = targets.is_some()
                    || outputs.iter().all(|(_, cls)| !cls.iter().flatten().any(|cl| split.contains(cl)));
                let cost = estimate_block_with(&bg, &run.cfg.arch, SmemMode::Estimated);
                if partial && cost.us.is_finite() {
                    out.push(BlockResult { block: bg, outputs, classes, cost, hash: OnceLock::new() });
                }
            }
        }
        let mut k = 0;
        while k < idx.len() {
            idx[k] += 1;
            if idx[k] < per_leaf[k].len() {
                break;
            }
            idx[k] = 0;
            k += 1;
        }
        if k == idx.len() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{split_sizes, wide_splits};

    #[test]
    fn split_sizes_within_the_axis_cap_are_unchanged() {
        // 4864 = 2^8 · 19: no power-of-two block of 64+ leaves more than 1024 blocks.
        let s = split_sizes(4864, 1024, 4096);
        assert_eq!(s, vec![2, 4, 8, 16, 19, 32, 38, 64, 76, 128, 152, 256, 304, 608]);
        assert!(wide_splits(4864, 1024, 4096).is_empty());
        assert!(wide_splits(14336, 1024, 4096).is_empty());
        assert!(wide_splits(32000, 1024, 4096).is_empty());
    }

    #[test]
    fn large_odd_classes_get_wide_splits() {
        // Qwen's vocabulary 151936 = 2^7 · 1187: 1187 blocks of 128 and 2374 of 64 (4748 of 32 is
        // too narrow and beyond 4096 blocks).
        assert_eq!(wide_splits(151936, 1024, 4096), vec![1187, 2374]);
        let s = split_sizes(151936, 1024, 4096);
        assert_eq!(s, vec![2, 4, 8, 16, 32, 64, 128, 1187, 2374]);
        // Llama's 128256 = 2^8 · 501 already splits into 1002 blocks of 128: no wide splits.
        assert!(wide_splits(128256, 1024, 4096).is_empty());
        assert!(wide_splits(1 << 20, 1024, 1 << 14).is_empty());
        // A raised block cap admits more, smallest first (1187 · 2^10: blocks of 1024 down to 128).
        assert_eq!(wide_splits(1187 << 10, 1024, 1 << 14), vec![1187, 2374, 4748, 9496]);
        assert_eq!(wide_splits(151936, 1024, 2000), vec![1187]);
        assert!(wide_splits(151936, 1024, 1100).is_empty());
    }
}
