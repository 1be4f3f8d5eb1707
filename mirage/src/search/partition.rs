//! Partitions that bring a program within the enumerator's reach.
//!
//! [`split_reads`]: a program input read in two roles — `x` of a residual `x + f(x) @ w` is the
//! matmul's inner dim in `f(x)` and the output's dim in the sum — ties two dimension classes
//! together that no block graph can treat alike (the loop must walk the inner dim, the grid must
//! split the output's). The search then runs on a program in which each role reads its own
//! copy of the input, so one block graph may read `x` under two maps (a whole row for a norm, a
//! tile for the residual add), and [`ReadSplit::merge`] turns every candidate back into a µGraph
//! over the program's own inputs (the copies become the same kernel tensor).
//!
//! `search_parts`: a program no single search solves (a chain of three matmuls with a norm and
//! a residual, or one too large for the budget) is cut at matmul boundaries, each part searched
//! as a program of its own (grown greedily operator by operator where a part is not solved
//! whole), and the parts' µGraphs composed into one µGraph over the program's inputs, which the
//! caller verifies against the whole program. Every search draws from what is left of the one
//! budget of the whole search ([`super::budget`]). Only an operator no search expresses even
//! alone, or that the budget does not reach, stays its own library kernel, and the search's notes
//! name it with the reason.

use std::collections::HashMap;
use std::time::Instant;

use crate::ir::{KernelGraph, KernelOp, TensorRef};

use super::budget::Budget;
use super::enumerate::analyze;
use super::{Pruner, SearchConfig, SearchStats, UnfusedOperator};

/// A program with some inputs read through copies, and how to undo it.
#[derive(Clone, Debug)]
pub struct ReadSplit {
    /// The program whose extra inputs (after the original ones) are copies.
    pub program: KernelGraph,
    /// For each input of `program`, the original input it copies (the identity for the first
    /// `n` inputs of a program with `n` inputs).
    pub source: Vec<usize>,
}

/// The class conflicts of `g` (classes both reduced and kept by an output); `None` when the
/// search cannot analyze it.
fn conflicts(g: &KernelGraph) -> Option<usize> {
    analyze(g).ok().map(|info| info.conflicts())
}

/// `program` with the reads (operand positions) of input `input` grouped: every group after the
/// first reads a new input appended after the program's inputs, a copy of `input`. `Err` when
/// the graph cannot be rebuilt (it came from a valid program, so this does not happen).
fn with_groups(program: &KernelGraph, input: usize, groups: &[Vec<(usize, usize)>]) -> Option<KernelGraph> {
    let nodes = program.nodes();
    let is_input = |i: usize| matches!(nodes[i].op, KernelOp::Input { .. });
    let source_node = (0..nodes.len()).filter(|&i| is_input(i)).nth(input)?;
    let KernelOp::Input { desc } = &nodes[source_node].op else { return None };
    let mut g = KernelGraph::new();
    let mut map: Vec<Vec<TensorRef>> = vec![Vec::new(); nodes.len()];
    // The inputs first, in order, then the copies, then the operators in order.
    for i in (0..nodes.len()).filter(|&i| is_input(i)) {
        map[i] = g.push(nodes[i].op.clone(), &[]).ok()?;
    }
    let copies: Vec<TensorRef> = (1..groups.len())
        .map(|_| g.push(KernelOp::Input { desc: desc.clone() }, &[]).ok().map(|r| r[0]))
        .collect::<Option<_>>()?;
    for (i, n) in nodes.iter().enumerate().filter(|&(i, _)| !is_input(i)) {
        let ins: Vec<TensorRef> = n
            .inputs
            .iter()
            .enumerate()
            .map(|(pos, t)| match groups.iter().position(|grp| grp.contains(&(i, pos))) {
                Some(k) if k > 0 && t.node == source_node => copies[k - 1],
                _ => map[t.node][t.port],
            })
            .collect();
        map[i] = g.push(n.op.clone(), &ins).ok()?;
    }
    Some(g)
}

/// The program with inputs read in conflicting roles split into copies, or `None` when no
/// split removes a class conflict. Reads are grouped greedily: a read joins the first group it
/// can share an input with without adding a conflict, so reads in one role share one copy.
pub fn split_reads(program: &KernelGraph) -> Option<ReadSplit> {
    let mut current = program.clone();
    let n_inputs = program.inputs().len();
    let mut source: Vec<usize> = (0..n_inputs).collect();
    let mut base = conflicts(&current)?;
    for input in 0..n_inputs {
        if base == 0 {
            break;
        }
        let nodes = current.nodes();
        let Some(node) = (0..nodes.len()).filter(|&i| matches!(nodes[i].op, KernelOp::Input { .. })).nth(input) else {
            continue;
        };
        let reads: Vec<(usize, usize)> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !matches!(n.op, KernelOp::Output { .. }))
            .flat_map(|(i, n)| {
                n.inputs.iter().enumerate().filter(move |(_, t)| t.node == node).map(move |(pos, _)| (i, pos))
            })
            .collect();
        if reads.len() < 2 {
            continue;
        }
        let apart: Vec<Vec<(usize, usize)>> = reads.iter().map(|&r| vec![r]).collect();
        let Some(best) = with_groups(&current, input, &apart).and_then(|g| conflicts(&g)) else { continue };
        if best >= base {
            continue;
        }
        let mut groups: Vec<Vec<(usize, usize)>> = Vec::new();
        for &r in &reads {
            let joined = (0..groups.len()).find(|&k| {
                let mut trial = groups.clone();
                trial[k].push(r);
                let rest: Vec<Vec<(usize, usize)>> =
                    reads.iter().filter(|x| !trial.iter().flatten().any(|y| y == *x)).map(|&x| vec![x]).collect();
                trial.extend(rest);
                with_groups(&current, input, &trial).and_then(|g| conflicts(&g)).is_some_and(|c| c <= best)
            });
            match joined {
                Some(k) => groups[k].push(r),
                None => groups.push(vec![r]),
            }
        }
        let Some(next) = with_groups(&current, input, &groups) else { continue };
        source.extend(std::iter::repeat_n(source[input], groups.len() - 1));
        base = conflicts(&next)?;
        current = next;
    }
    (source.len() > n_inputs).then_some(ReadSplit { program: current, source })
}

impl ReadSplit {
    /// A µGraph over [`ReadSplit::program`]'s inputs as one over the original program's: every
    /// read of a copy reads the input it copies. `None` if the graph does not have the split
    /// program's inputs.
    pub fn merge(&self, g: &KernelGraph) -> Option<KernelGraph> {
        let n = self.source.iter().copied().max().map_or(0, |m| m + 1);
        let mut out = KernelGraph::new();
        let mut map: Vec<Vec<TensorRef>> = Vec::with_capacity(g.nodes().len());
        let mut inputs: Vec<TensorRef> = Vec::new();
        let mut k = 0usize;
        for n_ in g.nodes() {
            if let KernelOp::Input { .. } = n_.op {
                let src = *self.source.get(k)?;
                k += 1;
                if src < inputs.len() && k > n {
                    map.push(vec![inputs[src]]);
                    continue;
                }
                let r = out.push(n_.op.clone(), &[]).ok()?;
                inputs.push(r[0]);
                map.push(r);
                continue;
            }
            let ins: Vec<TensorRef> = n_.inputs.iter().map(|t| map[t.node][t.port]).collect();
            map.push(out.push(n_.op.clone(), &ins).ok()?);
        }
        (k == self.source.len()).then_some(out)
    }
}

/// How a partitioned search went: the composed µGraph and, per part, what was done.
pub(crate) struct Parts {
    /// The composed µGraph over the program's inputs and outputs.
    pub graph: KernelGraph,
    /// What the searches of the parts did, summed.
    pub stats: SearchStats,
    /// One line per part, and one per operator kept as its own library kernel.
    pub notes: Vec<String>,
    /// The operators kept as library kernels, each with why: no search expressed it, or the
    /// budget ran out before it was searched.
    pub unfused: Vec<UnfusedOperator>,
    /// The fused parts composed (runs of operators searched as one program).
    pub fused: usize,
}

/// The program's operators (node indices) in parts at matmul boundaries: an operator's part is
/// the number of matmuls on the longest path from the inputs to it, itself included, but at
/// least 1 (what comes before the first matmul — a norm — joins its projection).
fn matmul_parts(program: &KernelGraph) -> Vec<Vec<usize>> {
    let nodes = program.nodes();
    let mut level = vec![0usize; nodes.len()];
    let mut parts: Vec<Vec<usize>> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if matches!(n.op, KernelOp::Input { .. } | KernelOp::Output { .. }) {
            continue;
        }
        let own = usize::from(matches!(n.op, KernelOp::Matmul));
        level[i] = n.inputs.iter().map(|t| level[t.node]).max().unwrap_or(0) + own;
        let part = level[i].max(1) - 1;
        if parts.len() <= part {
            parts.resize(part + 1, Vec::new());
        }
        parts[part].push(i);
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// The sub-program of operators `ops` (node indices of `program`, in order): its inputs are the
/// tensors the operators read from outside (in order of first use), its outputs the tensors
/// they produce that something outside reads (in node order).
fn sub_program(program: &KernelGraph, ops: &[usize]) -> Option<(KernelGraph, Vec<TensorRef>, Vec<TensorRef>)> {
    let nodes = program.nodes();
    let inside = |node: usize| ops.contains(&node);
    let mut external: Vec<TensorRef> = Vec::new();
    for &i in ops {
        for t in &nodes[i].inputs {
            if !inside(t.node) && !external.contains(t) {
                external.push(*t);
            }
        }
    }
    let mut outputs: Vec<TensorRef> = Vec::new();
    for &i in ops {
        for port in 0..nodes[i].outputs.len() {
            let t = TensorRef { node: i, port };
            let read_outside = nodes.iter().enumerate().any(|(j, n)| !inside(j) && n.inputs.contains(&t));
            if read_outside {
                outputs.push(t);
            }
        }
    }
    let mut g = KernelGraph::new();
    let mut map: HashMap<TensorRef, TensorRef> = HashMap::new();
    for t in &external {
        let desc = nodes[t.node].outputs.get(t.port)?.clone();
        map.insert(*t, g.push(KernelOp::Input { desc }, &[]).ok()?[0]);
    }
    for &i in ops {
        let ins: Vec<TensorRef> = nodes[i].inputs.iter().map(|t| map.get(t).copied()).collect::<Option<_>>()?;
        for (port, r) in g.push(nodes[i].op.clone(), &ins).ok()?.into_iter().enumerate() {
            map.insert(TensorRef { node: i, port }, r);
        }
    }
    for t in &outputs {
        g.output(*map.get(t)?, None).ok()?;
    }
    Some((g, external, outputs))
}

/// Appends µGraph `part` (inputs: `external`, outputs: `outputs`, tensors of the program) to
/// `g`; `val` maps the program's tensors to `g`'s.
fn inline(
    g: &mut KernelGraph,
    val: &mut HashMap<TensorRef, TensorRef>,
    part: &KernelGraph,
    external: &[TensorRef],
    outputs: &[TensorRef],
) -> Option<()> {
    let mut map: Vec<Vec<TensorRef>> = Vec::with_capacity(part.nodes().len());
    let (mut k_in, mut k_out) = (0, 0);
    for n in part.nodes() {
        match &n.op {
            KernelOp::Input { .. } => {
                map.push(vec![*val.get(external.get(k_in)?)?]);
                k_in += 1;
            }
            KernelOp::Output { .. } => {
                val.insert(*outputs.get(k_out)?, map[n.inputs[0].node][n.inputs[0].port]);
                k_out += 1;
                map.push(Vec::new());
            }
            op => {
                let ins: Vec<TensorRef> = n.inputs.iter().map(|t| map[t.node][t.port]).collect();
                map.push(g.push(op.clone(), &ins).ok()?);
            }
        }
    }
    (k_in == external.len() && k_out == outputs.len()).then_some(())
}

/// `name (%node)` of operators `ops`.
fn labels(program: &KernelGraph, ops: &[usize]) -> String {
    ops.iter().map(|&i| format!("`{}` (%{i})", program.nodes()[i].op.name())).collect::<Vec<_>>().join(", ")
}

/// Why a part's search gave no µGraph.
enum Miss {
    /// The search ran and found nothing (its error).
    NotFound(String),
    /// Its share of the budget was empty: not searched.
    OutOfBudget,
}

/// The searches of a partitioned search: what they draw from and what they did.
struct Searches<'a> {
    program: &'a KernelGraph,
    cfg: &'a SearchConfig,
    pruner: Option<&'a dyn Pruner>,
    /// What is left of the whole search's budget.
    budget: Budget,
    stats: SearchStats,
    notes: Vec<String>,
    unfused: Vec<UnfusedOperator>,
    /// Runs of operators, in program order, with their µGraphs (fused, or one library kernel).
    solved: Vec<(Vec<usize>, KernelGraph)>,
    fused: usize,
}

impl Searches<'_> {
    /// One search of operators `ops` under `share` (a portion of `part`, itself a portion of the
    /// budget); its states are charged to both.
    fn attempt(&mut self, ops: &[usize], share: Budget, part: &mut Budget) -> Result<KernelGraph, Miss> {
        if share.spent() {
            self.stats.timed_out = true;
            return Err(Miss::OutOfBudget);
        }
        let Some((sub, _, _)) = sub_program(self.program, ops) else {
            return Err(Miss::NotFound("its operators do not form a program".into()));
        };
        let part_cfg = SearchConfig { partition: false, ..share.limit(self.cfg) };
        let mut visited = 0;
        let started = Instant::now();
        let r = super::search(&sub, &part_cfg, self.pruner, &mut visited);
        let took = started.elapsed();
        part.charge(visited);
        self.budget.charge(visited);
        self.stats.states += visited;
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.stats.search_time += took;
                return Err(Miss::NotFound(e.to_string()));
            }
        };
        let s = &mut self.stats;
        s.pruned += r.stats.pruned;
        s.bounded += r.stats.bounded;
        s.candidates += r.stats.candidates;
        s.verified += r.stats.verified;
        s.rejected += r.stats.rejected;
        s.search_time += took.saturating_sub(r.stats.verify_time);
        s.verify_time += r.stats.verify_time;
        s.timed_out |= r.stats.timed_out;
        Ok(r.best.graph)
    }

    /// Records the fused run `ops` and its µGraph.
    fn fused(&mut self, ops: Vec<usize>, g: KernelGraph) {
        self.fused += 1;
        let n = self.solved.len() + 1;
        self.notes.push(format!("part {n}: {} kernel(s) for {}", g.num_kernels(), labels(self.program, &ops)));
        self.solved.push((ops, g));
    }

    /// Keeps operator `op` as its own library kernel.
    fn unfused(&mut self, op: usize, miss: Miss) -> Option<()> {
        let (sub, _, _) = sub_program(self.program, &[op])?;
        let operator = labels(self.program, &[op]);
        let why = match miss {
            Miss::NotFound(e) => format!("the search expresses no µGraph of it alone ({e})"),
            Miss::OutOfBudget => {
                format!("not searched: the search {} ran out before its turn", self.stats.budget_text())
            }
        };
        let n = self.solved.len() + 1;
        self.notes.push(format!("part {n}: {operator} kept as its own library kernel (not fused): {why}"));
        self.unfused.push(UnfusedOperator { operator, why });
        self.solved.push((vec![op], sub));
        Some(())
    }

    /// Searches `part` (operators in program order) whole (unless `searched`: the part is the
    /// whole program, whose search found nothing), then grown operator by operator, with
    /// `part_budget`.
    fn part(&mut self, part: &[usize], mut part_budget: Budget, searched: bool) -> Option<()> {
        let whole = if part.len() > 1 { part_budget.portion(1, 3) } else { part_budget };
        match if searched { Err(Miss::NotFound(String::new())) } else { self.attempt(part, whole, &mut part_budget) } {
            Ok(g) => {
                self.fused(part.to_vec(), g);
                return Some(());
            }
            // A part of one operator was just searched alone.
            Err(miss) if part.len() == 1 && !searched => return self.unfused(part[0], miss),
            Err(_) => {}
        }
        let mut run: Vec<usize> = Vec::new();
        let mut best: Option<KernelGraph> = None;
        for (k, &op) in part.iter().enumerate() {
            let left = (part.len() - k) as u64;
            if !run.is_empty() {
                let mut longer = run.clone();
                longer.push(op);
                if let Ok(g) = self.attempt(&longer, part_budget.portion(1, left + 1), &mut part_budget) {
                    run = longer;
                    best = Some(g);
                    continue;
                }
                if let Some(g) = best.take() {
                    self.fused(std::mem::take(&mut run), g);
                }
            }
            match self.attempt(&[op], part_budget.portion(1, left), &mut part_budget) {
                Ok(g) => {
                    run = vec![op];
                    best = Some(g);
                }
                Err(miss) => self.unfused(op, miss)?,
            }
        }
        if let Some(g) = best {
            self.fused(run, g);
        }
        Some(())
    }
}

/// Searches a program no single search found a µGraph for, in parts: the program is cut at
/// matmul boundaries ([`matmul_parts`]); a part the search does not solve whole is grown
/// greedily, operator by operator in program order, into the longest runs it does solve; an
/// operator no search expresses even alone, or that the budget does not reach, is kept as its
/// own library kernel (and named in [`Parts::unfused`] with why). Every search draws from
/// `budget`, what is left of the whole search's budget, by the rule of [`super::budget`]. The
/// composed µGraph is returned unverified: the caller verifies it against the whole program.
/// `None` when it fuses nothing (as many kernels as the program has operators: the program as
/// written).
pub(crate) fn search_parts(
    program: &KernelGraph,
    cfg: &SearchConfig,
    pruner: Option<&dyn Pruner>,
    budget: Budget,
) -> Option<Parts> {
    let mut s = Searches {
        program,
        cfg,
        pruner,
        budget,
        stats: SearchStats { budget: cfg.budget, max_states: cfg.max_states, ..SearchStats::default() },
        notes: Vec::new(),
        unfused: Vec::new(),
        solved: Vec::new(),
        fused: 0,
    };
    let parts = matmul_parts(program);
    let sizes: Vec<u64> = parts.iter().map(|p| p.len() as u64).collect();
    for (i, part) in parts.iter().enumerate() {
        // This part's share: in proportion to its size among the parts still to search.
        let share = s.budget.portion(sizes[i], sizes[i..].iter().sum());
        // One part is the whole program, already searched.
        s.part(part, share, parts.len() == 1)?;
    }
    let Searches { stats, notes, unfused, solved, fused, .. } = s;
    // Nothing fused (every part one operator in one kernel): the program as written, which is
    // what the caller's error leads to anyway.
    let operators =
        program.nodes().iter().filter(|n| !matches!(n.op, KernelOp::Input { .. } | KernelOp::Output { .. }));
    if solved.iter().map(|(_, g)| g.num_kernels()).sum::<usize>() >= operators.count() {
        return None;
    }
    // Compose.
    let nodes = program.nodes();
    let mut g = KernelGraph::new();
    let mut val: HashMap<TensorRef, TensorRef> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let KernelOp::Input { .. } = n.op {
            val.insert(TensorRef { node: i, port: 0 }, g.push(n.op.clone(), &[]).ok()?[0]);
        }
    }
    for (ops, part) in &solved {
        let (_, external, outputs) = sub_program(program, ops)?;
        inline(&mut g, &mut val, part, &external, &outputs)?;
    }
    for n in nodes {
        if let KernelOp::Output { strides } = &n.op {
            g.output(*val.get(&n.inputs[0])?, strides.clone()).ok()?;
        }
    }
    Some(Parts { graph: g, stats, notes, unfused, fused })
}
