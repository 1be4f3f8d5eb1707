//! Abstract expressions and the subexpression oracle: the search's pruning test.
//!
//! Every tensor of a kernel graph, and every tile of its block graphs, gets an abstract
//! expression ([`Expr`]): a term over uninterpreted `add, mul, div, pow, exp, neg`, one
//! uninterpreted function per unary operator without a law in the operator table
//! ([`crate::ir::Law::Uninterpreted`]: `sqrt, silu, gelu, gelu_tanh, relu, tanh, sigmoid, clamp`, the last
//! with its bounds as an argument) and `sum(n, ·)`, that forgets which elements meet but keeps
//! reduction sizes (the abstract expressions of the OSDI'25 paper, extended to our operators):
//!
//! | operator | expression |
//! |---|---|
//! | input `i`, input iterator, output saver | `v_i`, pass-through |
//! | `matmul(a, b)` with inner size `k` | `sum(k, mul(a, b))` |
//! | `reduce_sum(dim)` of size `n`; `reduce_sum_to(dim, w)` | `sum(n, x)`; `sum(n / w, x)` |
//! | `acc_sum` over `F` iterations | `sum(F, x)` |
//! | `acc_sum_last` of a tile with last dim `l`; `acc_sum_to(w)` | `sum(F·l, x)`; `sum(F·l / w, x)` |
//! | `acc_rms_last`; `rms` of `rms_norm` over `n` | `sqrt(mul(sum(F·l, mul(x, x)), 1/(F·l)))`; the same with `n` |
//! | `rms_norm(x, eps, w)` | `mul(div(x, rms), w)`, `eps ≠ 0` adds `add(·, eps)` under the sqrt |
//! | `square`, `recip`, `mul_scalar(c)`, `add_scalar(c)`, `sub(a, b)` | `mul(x, x)`, `div(1, x)`, `mul(c, x)`, `add(x, c)`, `add(a, neg(b))` |
//! | `reduce_max`, `running_max`, `acc_max`, rescaling accumulators, `concat`, `rope`, `gather`, `argmax` | opaque |
//!
//! `sum(1, x)` is `x` and `sum(a, sum(b, x))` is `sum(a·b, x)`, applied when terms are built.
//! Opaque tensors (max and online-softmax rescaling, whose algebra the axioms do not describe;
//! concatenation and rotary embeddings, which mix elements; gathers and argmax, which index) make every expression that contains them opaque, and an
//! opaque expression is always kept: pruning is conservative — it may keep a useless prefix, it
//! must never drop one that could lead to the program.
//!
//! The oracle ([`SubexprOracle`]) asks z3 whether a candidate's expression is a subexpression of
//! the program's output expression under the equivalence axioms (commutativity and associativity
//! of `add` and `mul`, distributivity, the div rules, the sum rules, `exp(x)·exp(y) = exp(x+y)`)
//! and the subexpression axioms (`x ⊑ f(…x…)`, reflexive, transitive, and `sum(i, x) ⊑ sum(j, x)`
//! when `i` divides `j`), as in the OSDI'25 paper: input variables are distinct and none is a
//! subexpression of another. The question is `¬subexpr(candidate, target)`: `unsat` means keep;
//! `sat`, `unknown` or running out of the resource limit (`rlimit`, deterministic, unlike wall
//! time) means prune. Only sorts, uninterpreted functions, quantifiers, `Int`/`Bool` and `Solver`
//! are used (the Debian libz3 4.8.12 lacks much of the newer API). A syntactic subterm is kept
//! without asking z3. Answers are memoized by expression. z3 objects are not `Send`: each thread
//! builds its own declarations and axioms once (thread-local) and a fresh solver per query.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use z3::ast::{self, Ast, Bool, Dynamic, Int};
use z3::{FuncDecl, Params, Pattern, SatResult, Solver, Sort, Symbol};

use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, KernelGraph, KernelOp, Law, TensorRef, UnaryOp};

/// A shared, immutable abstract expression.
pub type E = Arc<Expr>;

/// An abstract expression: a term over uninterpreted functions that keeps reduction sizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Expr {
    /// Program input `i`.
    Var(usize),
    /// A float constant, by its bit pattern.
    Const(u32),
    /// `a + b`.
    Add(E, E),
    /// `a · b`.
    Mul(E, E),
    /// `a / b`.
    Div(E, E),
    /// `a ^ b`.
    Pow(E, E),
    /// `e^a`.
    Exp(E),
    /// `-a`.
    Neg(E),
    /// An uninterpreted unary operator: its name, its parameters' bits ([`crate::ir::Params::bits`])
    /// and its argument.
    Fn(&'static str, u64, E),
    /// A sum of `n` terms shaped like `a`, over dimension class `class` (`sum(class, n, a)`):
    /// sums over one class merge and complete one another; the kernel graphs' expressions
    /// ([`graph_exprs`]) use class 0, the search's pruner the enumerator's dimension classes.
    Sum(u64, u64, E),
    /// A value the algebra does not describe (max, rescaling, concatenation): always kept.
    Opaque,
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Var(i) => write!(f, "v{i}"),
            Expr::Const(b) => write!(f, "{:?}", f32::from_bits(*b)),
            Expr::Add(a, b) => write!(f, "add({a}, {b})"),
            Expr::Mul(a, b) => write!(f, "mul({a}, {b})"),
            Expr::Div(a, b) => write!(f, "div({a}, {b})"),
            Expr::Pow(a, b) => write!(f, "pow({a}, {b})"),
            Expr::Exp(a) => write!(f, "exp({a})"),
            Expr::Neg(a) => write!(f, "neg({a})"),
            Expr::Fn(name, 0, a) => write!(f, "{name}({a})"),
            Expr::Fn(name, params, a) => write!(f, "{name}[{params:#x}]({a})"),
            Expr::Sum(0, n, a) => write!(f, "sum({n}, {a})"),
            Expr::Sum(class, n, a) => write!(f, "sum[{class}]({n}, {a})"),
            Expr::Opaque => write!(f, "opaque"),
        }
    }
}

/// Builders that apply the size rules of sums (`sum(1, x) = x`, `sum(a, sum(b, x)) = sum(a·b, x)`).
pub mod build {
    use super::{E, Expr};
    use crate::ir::{Law, UnaryOp};
    use std::sync::Arc;

    /// Program input `i`.
    pub fn var(i: usize) -> E {
        Arc::new(Expr::Var(i))
    }
    /// A float constant.
    pub fn constant(c: f32) -> E {
        Arc::new(Expr::Const(if c == 0.0 { 0 } else { c.to_bits() }))
    }
    /// `a + b`.
    pub fn add(a: &E, b: &E) -> E {
        Arc::new(Expr::Add(a.clone(), b.clone()))
    }
    /// `a · b`.
    pub fn mul(a: &E, b: &E) -> E {
        Arc::new(Expr::Mul(a.clone(), b.clone()))
    }
    /// `a / b`.
    pub fn div(a: &E, b: &E) -> E {
        Arc::new(Expr::Div(a.clone(), b.clone()))
    }
    /// `exp(a)`.
    pub fn exp(a: &E) -> E {
        Arc::new(Expr::Exp(a.clone()))
    }
    /// `sum(n, a)` over class 0 with the size rules.
    pub fn sum(n: u64, a: &E) -> E {
        sum_in(0, n, a)
    }
    /// `sum(n, a)` over dimension class `class` with the size rules (a sum of a sum over the
    /// same class merges).
    pub fn sum_in(class: u64, n: u64, a: &E) -> E {
        match &**a {
            _ if n == 1 => a.clone(),
            Expr::Sum(c, m, inner) if *c == class => Arc::new(Expr::Sum(class, n.saturating_mul(*m), inner.clone())),
            _ => Arc::new(Expr::Sum(class, n, a.clone())),
        }
    }
    /// A unary operator, by its law in the operator table.
    pub fn unary(op: &UnaryOp, x: &E) -> E {
        let spec = op.spec();
        match spec.law {
            Law::Exp => exp(x),
            Law::Square => mul(x, x),
            Law::Neg => Arc::new(Expr::Neg(x.clone())),
            Law::Recip => div(&constant(1.0), x),
            Law::Scale(c) => mul(&constant(c.0), x),
            Law::Offset(c) => add(x, &constant(c.0)),
            Law::Uninterpreted => Arc::new(Expr::Fn(spec.name, spec.params.bits(), x.clone())),
        }
    }
    /// `sqrt(mean(x²) [+ eps])` over `n` elements.
    pub fn rms(x: &E, n: u64, eps: f32) -> E {
        rms_in(0, x, n, eps)
    }
    /// `sqrt(mean(x²) [+ eps])` over `n` elements of dimension class `class`.
    pub fn rms_in(class: u64, x: &E, n: u64, eps: f32) -> E {
        let mean = mul(&sum_in(class, n, &mul(x, x)), &constant(1.0 / n as f32));
        let mean = if eps == 0.0 { mean } else { add(&mean, &constant(eps)) };
        unary(&UnaryOp::Sqrt, &mean)
    }
    /// An opaque value.
    pub fn opaque() -> E {
        Arc::new(Expr::Opaque)
    }
}

impl Expr {
    /// Whether the expression contains an opaque part (then it is always kept).
    pub fn is_opaque(&self) -> bool {
        match self {
            Expr::Opaque => true,
            Expr::Var(_) | Expr::Const(_) => false,
            Expr::Add(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) | Expr::Pow(a, b) => a.is_opaque() || b.is_opaque(),
            Expr::Exp(a) | Expr::Neg(a) | Expr::Fn(_, _, a) | Expr::Sum(_, _, a) => a.is_opaque(),
        }
    }

    fn children(&self) -> Vec<&E> {
        match self {
            Expr::Opaque | Expr::Var(_) | Expr::Const(_) => vec![],
            Expr::Add(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) | Expr::Pow(a, b) => vec![a, b],
            Expr::Exp(a) | Expr::Neg(a) | Expr::Fn(_, _, a) | Expr::Sum(_, _, a) => vec![a],
        }
    }

    /// Whether `self` occurs literally in `other` (then it is a subexpression by reflexivity and
    /// the subterm axioms, without asking z3).
    pub fn is_subterm_of(&self, other: &Expr) -> bool {
        self == other || other.children().into_iter().any(|c| self.is_subterm_of(c))
    }
}

/// Why expressions could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AbsExprError {
    /// A node refers to a tensor that no earlier node produced.
    #[error("node {node}: operand {operand} is not produced by an earlier node")]
    Dangling {
        /// The node.
        node: usize,
        /// The operand.
        operand: TensorRef,
    },
}

/// Where a tensor lives in a kernel graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// Output `port` of kernel node `node`.
    Kernel {
        /// The kernel node.
        node: usize,
        /// Which of its outputs.
        port: usize,
    },
    /// Output `port` of block node `block_node` inside the block graph of kernel node `node`.
    Block {
        /// The custom kernel node.
        node: usize,
        /// The block-graph node.
        block_node: usize,
        /// Which of its outputs.
        port: usize,
    },
}

/// The abstract expressions of every tensor of a kernel graph.
#[derive(Clone, Debug, Default)]
pub struct GraphExprs {
    /// Kernel tensors: `kernel[node][port]`.
    pub kernel: Vec<Vec<E>>,
    /// Block tiles, for custom kernel nodes: `block[node][block_node][port]` (empty for other nodes).
    pub block: Vec<Vec<Vec<E>>>,
    /// The expressions of the graph's outputs, in order.
    pub outputs: Vec<E>,
}

impl GraphExprs {
    /// Every tensor produced in the graph (kernel level and inside block graphs), with its
    /// expression, in node order; inputs and outputs excluded.
    pub fn produced(&self, g: &KernelGraph) -> Vec<(Location, E)> {
        let mut out = Vec::new();
        for (ni, node) in g.nodes().iter().enumerate() {
            if matches!(node.op, KernelOp::Input { .. } | KernelOp::Output { .. }) {
                continue;
            }
            if let Some(block) = self.block.get(ni) {
                for (bi, ports) in block.iter().enumerate() {
                    for (port, e) in ports.iter().enumerate() {
                        out.push((Location::Block { node: ni, block_node: bi, port }, e.clone()));
                    }
                }
            }
            for (port, e) in self.kernel[ni].iter().enumerate() {
                out.push((Location::Kernel { node: ni, port }, e.clone()));
            }
        }
        out
    }
}

fn operand(values: &[Vec<E>], node: usize, t: TensorRef) -> Result<&E, AbsExprError> {
    values.get(t.node).and_then(|v| v.get(t.port)).ok_or(AbsExprError::Dangling { node, operand: t })
}

fn binary(op: BinaryOp, a: &E, b: &E) -> E {
    use build::*;
    match op {
        BinaryOp::Add => add(a, b),
        BinaryOp::Sub => add(a, &Arc::new(Expr::Neg(b.clone()))),
        BinaryOp::Mul => mul(a, b),
        BinaryOp::Div => div(a, b),
        BinaryOp::Pow => Arc::new(Expr::Pow(a.clone(), b.clone())),
    }
}

/// The abstract expressions of every tensor of `g` (kernel level and inside block graphs).
pub fn graph_exprs(g: &KernelGraph) -> Result<GraphExprs, AbsExprError> {
    use build::*;
    let mut kernel: Vec<Vec<E>> = Vec::with_capacity(g.nodes().len());
    let mut block: Vec<Vec<Vec<E>>> = Vec::with_capacity(g.nodes().len());
    let mut outputs = Vec::new();
    let mut next_input = 0;
    for (ni, node) in g.nodes().iter().enumerate() {
        let args = node.inputs.iter().map(|&t| operand(&kernel, ni, t).cloned()).collect::<Result<Vec<E>, _>>()?;
        let shape = |i: usize| g.desc(node.inputs[i]).map(|d| d.shape.clone()).unwrap_or_default();
        let mut tiles = Vec::new();
        let produced = match &node.op {
            KernelOp::Input { .. } => {
                next_input += 1;
                vec![var(next_input - 1)]
            }
            KernelOp::Output { .. } => {
                outputs.push(args[0].clone());
                vec![]
            }
            KernelOp::Matmul => {
                let k = shape(0).last().copied().unwrap_or(1) as u64;
                vec![sum(k, &mul(&args[0], &args[1]))]
            }
            KernelOp::Unary { op } => vec![unary(op, &args[0])],
            KernelOp::Binary { op } => vec![binary(*op, &args[0], &args[1])],
            KernelOp::ReduceSum { dim } => vec![sum(shape(0).get(*dim).copied().unwrap_or(1) as u64, &args[0])],
            KernelOp::ReduceMax { .. }
            | KernelOp::Concat { .. }
            | KernelOp::Rope { .. }
            | KernelOp::Gather
            | KernelOp::Argmax { .. } => vec![opaque()],
            KernelOp::RmsNorm { eps } => {
                let n = shape(0).last().copied().unwrap_or(1) as u64;
                let y = div(&args[0], &rms(&args[0], n, eps.0));
                vec![match args.get(1) {
                    Some(w) => mul(&y, w),
                    None => y,
                }]
            }
            KernelOp::Custom { block: bg } => {
                let (t, outs) = block_exprs(bg, &args, ni)?;
                tiles = t;
                outs
            }
        };
        kernel.push(produced);
        block.push(tiles);
    }
    Ok(GraphExprs { kernel, block, outputs })
}

/// The expressions of every tile of a block graph whose kernel operands have expressions
/// `inputs`; returns the tiles' expressions and those of the saved outputs.
fn block_exprs(bg: &BlockGraph, inputs: &[E], kernel_node: usize) -> Result<(Vec<Vec<E>>, Vec<E>), AbsExprError> {
    use build::*;
    let f = bg.forloop_range() as u64;
    let mut tiles: Vec<Vec<E>> = Vec::with_capacity(bg.nodes().len());
    let mut outs = Vec::new();
    for node in bg.nodes() {
        let args =
            node.inputs.iter().map(|&t| operand(&tiles, kernel_node, t).cloned()).collect::<Result<Vec<E>, _>>()?;
        let shape = |i: usize| bg.tile(node.inputs[i]).map(|t| t.shape.clone()).unwrap_or_default();
        let last = |i: usize| shape(i).last().copied().unwrap_or(1) as u64;
        let produced = match &node.op {
            BlockOp::Input { input, .. } => vec![inputs.get(*input).cloned().unwrap_or_else(opaque)],
            BlockOp::Output { .. } => {
                outs.push(args[0].clone());
                vec![]
            }
            BlockOp::Matmul => vec![sum(last(0), &mul(&args[0], &args[1]))],
            BlockOp::Unary { op } => vec![unary(op, &args[0])],
            BlockOp::Binary { op } => vec![binary(*op, &args[0], &args[1])],
            BlockOp::ReduceSum { dim } => vec![sum(shape(0).get(*dim).copied().unwrap_or(1) as u64, &args[0])],
            BlockOp::ReduceSumTo { dim, width } => {
                vec![sum((shape(0).get(*dim).copied().unwrap_or(1) / (*width).max(1)) as u64, &args[0])]
            }
            BlockOp::RmsNorm { eps } => vec![div(&args[0], &rms(&args[0], last(0), eps.0))],
            BlockOp::ReduceMax { .. }
            | BlockOp::Concat { .. }
            | BlockOp::Rope { .. }
            | BlockOp::Gather { .. }
            | BlockOp::Argmax { .. } => vec![opaque()],
            BlockOp::RunningMax { .. } => vec![opaque(), opaque()],
            BlockOp::Accum { acc } => vec![match acc {
                AccKind::Sum => sum(f, &args[0]),
                AccKind::SumLast => sum(f * last(0), &args[0]),
                AccKind::SumTo { width } => sum(f * last(0) / (*width as u64).max(1), &args[0]),
                AccKind::RmsLast => rms(&args[0], f * last(0), 0.0),
                AccKind::Max | AccKind::Rescale | AccKind::SumLastRescale => opaque(),
            }],
        };
        tiles.push(produced);
    }
    Ok((tiles, outs))
}

/// The oracle's answer about one candidate expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Kept: it occurs literally in a target (no z3 query).
    Subterm,
    /// Kept: it contains an opaque part (no z3 query).
    Opaque,
    /// Kept: z3 proved it a subexpression (`unsat`).
    Proved,
    /// Pruned: z3 found no proof within the budget (`sat`, `unknown` or the `rlimit`).
    Pruned,
}

impl Answer {
    /// Whether the prefix is kept.
    pub fn keep(self) -> bool {
        !matches!(self, Answer::Pruned)
    }
}

/// What z3 answered to one question "is the candidate a subexpression of a target?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `unsat` of the negation: a proof.
    Proved,
    /// `sat`: a model of the axioms where it is not a subexpression.
    Refuted,
    /// `unknown`: no answer within the resource limit.
    Unknown,
}

/// How the oracle queries z3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleConfig {
    /// z3's resource limit per query (deterministic, unlike a timeout).
    pub rlimit: u32,
}

impl Default for OracleConfig {
    /// `rlimit` 150 000: the proofs of every prefix of the golden µGraphs take at most 69 093
    /// (ntrans: a distributivity step), most about 10 000; Mirage's 80 000 left a margin of 15%.
    fn default() -> Self {
        OracleConfig { rlimit: 150_000 }
    }
}

/// Counters of the oracle's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OracleStats {
    /// Queries answered from the memo.
    pub memo_hits: u64,
    /// Answers without z3 (subterm or opaque).
    pub syntactic: u64,
    /// z3 queries that proved a subexpression.
    pub proved: u64,
    /// z3 queries that did not (pruned).
    pub pruned: u64,
    /// Total z3 time of proofs.
    pub proved_time: Duration,
    /// Total z3 time of pruned queries.
    pub pruned_time: Duration,
}

/// The subexpression oracle for one program: is a candidate's expression a subexpression of
/// (one of) the program's output expressions? `Sync`: the memo is shared, z3 state is per thread.
pub struct SubexprOracle {
    targets: Vec<E>,
    num_vars: usize,
    cfg: OracleConfig,
    memo: Mutex<HashMap<E, Answer>>,
    stats: Mutex<OracleStats>,
}

impl SubexprOracle {
    /// An oracle for `program`'s outputs.
    pub fn new(program: &KernelGraph, cfg: OracleConfig) -> Result<Self, AbsExprError> {
        let exprs = graph_exprs(program)?;
        Ok(Self::from_targets(exprs.outputs, program.inputs().len(), cfg))
    }

    /// An oracle for explicit target expressions over `num_vars` inputs.
    pub fn from_targets(targets: Vec<E>, num_vars: usize, cfg: OracleConfig) -> Self {
        SubexprOracle {
            targets,
            num_vars,
            cfg,
            memo: Mutex::new(HashMap::new()),
            stats: Mutex::new(OracleStats::default()),
        }
    }

    /// The target expressions (the program's outputs).
    pub fn targets(&self) -> &[E] {
        &self.targets
    }

    /// The work done so far.
    pub fn stats(&self) -> OracleStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// Whether a prefix whose new tensor has expression `e` is kept (memoized).
    pub fn keep(&self, e: &E) -> bool {
        self.check(e).keep()
    }

    /// The oracle's answer for `e` (memoized).
    pub fn check(&self, e: &E) -> Answer {
        if let Some(a) = self.memo.lock().ok().and_then(|m| m.get(e).copied()) {
            if let Ok(mut s) = self.stats.lock() {
                s.memo_hits += 1;
            }
            return a;
        }
        let answer = if e.is_opaque() || self.targets.iter().any(|t| t.is_opaque()) {
            Answer::Opaque
        } else if self.targets.iter().any(|t| e.is_subterm_of(t)) {
            Answer::Subterm
        } else {
            let start = Instant::now();
            let proved = self.query(e);
            let dt = start.elapsed();
            if let Ok(mut s) = self.stats.lock() {
                if proved {
                    s.proved += 1;
                    s.proved_time += dt;
                } else {
                    s.pruned += 1;
                    s.pruned_time += dt;
                }
            }
            if proved { Answer::Proved } else { Answer::Pruned }
        };
        if matches!(answer, Answer::Subterm | Answer::Opaque)
            && let Ok(mut s) = self.stats.lock()
        {
            s.syntactic += 1;
        }
        if let Ok(mut m) = self.memo.lock() {
            m.insert(e.clone(), answer);
        }
        answer
    }

    /// Asks z3, bypassing the memo and the syntactic shortcuts: `true` iff `unsat`.
    pub fn query(&self, e: &E) -> bool {
        self.outcome(e) == Outcome::Proved
    }

    /// Asks z3, bypassing the memo, the statistics and the syntactic shortcuts (an opaque part
    /// of `e` or of a target is a fresh constant there, which nothing else is a subexpression of).
    pub fn outcome(&self, e: &E) -> Outcome {
        Z3_ENV.with(|env| {
            let mut env = env.borrow_mut();
            let env = env.get_or_insert_with(Z3Env::new);
            env.proves_subexpr(e, &self.targets, self.num_vars, self.cfg.rlimit)
        })
    }
}

thread_local! {
    /// Per-thread z3 declarations and axioms (z3 0.22 uses a thread-local context; its objects
    /// are not `Send`).
    static Z3_ENV: RefCell<Option<Z3Env>> = const { RefCell::new(None) };
}

/// The uninterpreted sort, functions and axioms, built once per thread.
struct Z3Env {
    t: Sort,
    add: FuncDecl,
    mul: FuncDecl,
    div: FuncDecl,
    pow: FuncDecl,
    exp: FuncDecl,
    neg: FuncDecl,
    /// One function per uninterpreted unary operator of the table, by name: `f(x)`, or `f(params,
    /// x)` for an operator with parameters.
    fns: Vec<(&'static str, bool, FuncDecl)>,
    cst: FuncDecl,
    sum: FuncDecl,
    sub: FuncDecl,
    axioms: Vec<Bool>,
}

impl Z3Env {
    fn new() -> Self {
        let t = Sort::uninterpreted(Symbol::String("T".into()));
        let i = Sort::int();
        let b = Sort::bool();
        let f2 = |n: &str| FuncDecl::new(n, &[&t, &t], &t);
        let f1 = |n: &str| FuncDecl::new(n, &[&t], &t);
        let mut env = Z3Env {
            add: f2("add"),
            mul: f2("mul"),
            div: f2("div"),
            pow: f2("pow"),
            exp: f1("exp"),
            neg: f1("neg"),
            fns: UnaryOp::ALL
                .iter()
                .map(UnaryOp::spec)
                .filter(|spec| spec.law == Law::Uninterpreted)
                .map(|spec| match spec.params {
                    crate::ir::Params::None => (spec.name, false, f1(spec.name)),
                    crate::ir::Params::One(_) | crate::ir::Params::Two(..) => {
                        (spec.name, true, FuncDecl::new(spec.name, &[&i, &t], &t))
                    }
                })
                .collect(),
            cst: FuncDecl::new("cst", &[&i], &t),
            sum: FuncDecl::new("sum", &[&i, &i, &t], &t),
            sub: FuncDecl::new("subexpr", &[&t, &t], &b),
            axioms: Vec::new(),
            t,
        };
        env.axioms = env.build_axioms();
        env
    }

    fn app2(f: &FuncDecl, a: &Dynamic, b: &Dynamic) -> Dynamic {
        f.apply(&[a, b])
    }

    fn sub_of(&self, a: &Dynamic, b: &Dynamic) -> Bool {
        self.sub.apply(&[a, b]).as_bool().unwrap_or_else(|| Bool::from_bool(false))
    }

    fn build_axioms(&self) -> Vec<Bool> {
        let x = Dynamic::new_const("x", &self.t);
        let y = Dynamic::new_const("y", &self.t);
        let z = Dynamic::new_const("z", &self.t);
        let i = Int::new_const("i");
        let j = Int::new_const("j");
        // The dimension class of the sums an axiom relates (one class per axiom: sums over
        // different classes neither merge nor complete one another).
        let c = Int::new_const("c");
        let (add, mul, div) = (&self.add, &self.mul, &self.div);
        let a2 = Self::app2;
        let sum = |n: &Int, e: &Dynamic| self.sum.apply(&[&c, n, e]);
        let mut ax: Vec<Bool> = Vec::new();
        // ∀ over `vars` with one multi-pattern per entry of `pats`.
        let forall = |vars: &[&dyn Ast], pats: &[&[&dyn Ast]], body: &Bool| -> Bool {
            let patterns: Vec<Pattern> = pats.iter().map(|p| Pattern::new(p)).collect();
            let refs: Vec<&Pattern> = patterns.iter().collect();
            ast::forall_const(vars, &refs, body)
        };
        // A_eq
        let e = a2(add, &x, &y);
        ax.push(forall(&[&x, &y], &[&[&e]], &e.eq(a2(add, &y, &x))));
        let e = a2(mul, &x, &y);
        ax.push(forall(&[&x, &y], &[&[&e]], &e.eq(a2(mul, &y, &x))));
        for f in [add, mul] {
            let l = a2(f, &a2(f, &x, &y), &z);
            let r = a2(f, &x, &a2(f, &y, &z));
            ax.push(forall(&[&x, &y, &z], &[&[&l], &[&r]], &l.eq(&r)));
        }
        // mul(add(x, y), z) = add(mul(x, z), mul(y, z))
        let l = a2(mul, &a2(add, &x, &y), &z);
        let r = a2(add, &a2(mul, &x, &z), &a2(mul, &y, &z));
        ax.push(forall(&[&x, &y, &z], &[&[&l], &[&r]], &l.eq(&r)));
        // add(div(x, z), div(y, z)) = div(add(x, y), z)
        let l = a2(add, &a2(div, &x, &z), &a2(div, &y, &z));
        let r = a2(div, &a2(add, &x, &y), &z);
        ax.push(forall(&[&x, &y, &z], &[&[&l], &[&r]], &l.eq(&r)));
        // mul(x, div(y, z)) = div(mul(x, y), z)
        let l = a2(mul, &x, &a2(div, &y, &z));
        let r = a2(div, &a2(mul, &x, &y), &z);
        ax.push(forall(&[&x, &y, &z], &[&[&l], &[&r]], &l.eq(&r)));
        // div(div(x, y), z) = div(x, mul(y, z))
        let l = a2(div, &a2(div, &x, &y), &z);
        let r = a2(div, &x, &a2(mul, &y, &z));
        ax.push(forall(&[&x, &y, &z], &[&[&l]], &l.eq(&r)));
        // sum(i, sum(j, x)) = sum(i·j, x)
        let l = sum(&i, &sum(&j, &x));
        ax.push(forall(&[&c, &i, &j, &x], &[&[&l]], &l.eq(sum(&Int::mul(&[&i, &j]), &x))));
        // sum(i, add(x, y)) = add(sum(i, x), sum(i, y))
        let l = sum(&i, &a2(add, &x, &y));
        let r = a2(add, &sum(&i, &x), &sum(&i, &y));
        ax.push(forall(&[&c, &i, &x, &y], &[&[&l], &[&r]], &l.eq(&r)));
        // sum(i, mul(x, y)) = mul(sum(i, x), y)
        let l = sum(&i, &a2(mul, &x, &y));
        let r = a2(mul, &sum(&i, &x), &y);
        ax.push(forall(&[&c, &i, &x, &y], &[&[&l], &[&r]], &l.eq(&r)));
        // sum(i, div(x, y)) = div(sum(i, x), y)
        let l = sum(&i, &a2(div, &x, &y));
        let r = a2(div, &sum(&i, &x), &y);
        ax.push(forall(&[&c, &i, &x, &y], &[&[&l], &[&r]], &l.eq(&r)));
        // mul(exp(x), exp(y)) = exp(add(x, y))
        let l = a2(mul, &self.exp.apply(&[&x]), &self.exp.apply(&[&y]));
        let r = self.exp.apply(&[&a2(add, &x, &y)]);
        ax.push(forall(&[&x, &y], &[&[&l], &[&r]], &l.eq(&r)));
        // A_sub: reflexive, transitive, subterms.
        let s = self.sub_of(&x, &x);
        ax.push(forall(&[&x], &[&[&s]], &s));
        let (sxy, syz) = (self.sub_of(&x, &y), self.sub_of(&y, &z));
        ax.push(forall(&[&x, &y, &z], &[&[&sxy, &syz]], &Bool::and(&[&sxy, &syz]).implies(self.sub_of(&x, &z))));
        for f in [add, mul, div, &self.pow] {
            let e = a2(f, &x, &y);
            ax.push(forall(&[&x, &y], &[&[&e]], &self.sub_of(&x, &e)));
        }
        for f in [div, &self.pow] {
            let e = a2(f, &x, &y);
            ax.push(forall(&[&x, &y], &[&[&e]], &self.sub_of(&y, &e)));
        }
        let unary = std::iter::once(&self.exp)
            .chain(self.fns.iter().filter(|(_, params, _)| !params).map(|(_, _, f)| f))
            .chain([&self.neg]);
        for f in unary {
            let e = f.apply(&[&x]);
            ax.push(forall(&[&x], &[&[&e]], &self.sub_of(&x, &e)));
        }
        for (_, _, f) in self.fns.iter().filter(|(_, params, _)| *params) {
            let e = f.apply(&[&i, &x]);
            ax.push(forall(&[&i, &x], &[&[&e]], &self.sub_of(&x, &e)));
        }
        let e = sum(&i, &x);
        ax.push(forall(&[&c, &i, &x], &[&[&e]], &self.sub_of(&x, &e)));
        // A partial sum is a subexpression of a longer one: i | j ⇒ sum(i, x) ⊑ sum(j, x).
        let (si, sj) = (sum(&i, &x), sum(&j, &x));
        let divides = Bool::and(&[&i.ge(Int::from_i64(1)), &j.modulo(&i).eq(Int::from_i64(0))]);
        ax.push(forall(&[&c, &i, &j, &x], &[&[&si, &sj]], &divides.implies(self.sub_of(&si, &sj))));
        ax
    }

    fn term(&self, e: &Expr, vars: &[Dynamic]) -> Dynamic {
        let t = |a: &E| self.term(a, vars);
        let bits = |b: u32| Int::from_i64(b as i64);
        match e {
            Expr::Var(i) => vars.get(*i).cloned().unwrap_or_else(|| Dynamic::new_const(format!("v{i}"), &self.t)),
            Expr::Const(c) => self.cst.apply(&[&bits(*c)]),
            Expr::Add(a, b) => Self::app2(&self.add, &t(a), &t(b)),
            Expr::Mul(a, b) => Self::app2(&self.mul, &t(a), &t(b)),
            Expr::Div(a, b) => Self::app2(&self.div, &t(a), &t(b)),
            Expr::Pow(a, b) => Self::app2(&self.pow, &t(a), &t(b)),
            Expr::Exp(a) => self.exp.apply(&[&t(a)]),
            Expr::Neg(a) => self.neg.apply(&[&t(a)]),
            Expr::Fn(name, params, a) => match self.fns.iter().find(|(n, _, _)| n == name) {
                Some((_, false, f)) => f.apply(&[&t(a)]),
                Some((_, true, f)) => f.apply(&[&Int::from_u64(*params), &t(a)]),
                // Every uninterpreted operator of the table has a function; a fresh constant if not.
                None => Dynamic::fresh_const(name, &self.t),
            },
            Expr::Sum(class, n, a) => self.sum.apply(&[&Int::from_u64(*class), &Int::from_u64(*n), &t(a)]),
            // Opaque expressions never reach z3 (they are kept); a fresh constant if they did.
            Expr::Opaque => Dynamic::fresh_const("opaque", &self.t),
        }
    }

    fn proves_subexpr(&self, e: &E, targets: &[E], num_vars: usize, rlimit: u32) -> Outcome {
        let solver = Solver::new();
        let mut params = Params::new();
        params.set_u32("rlimit", rlimit);
        params.set_bool("mbqi", true);
        solver.set_params(&params);
        for a in &self.axioms {
            solver.assert(a);
        }
        let vars: Vec<Dynamic> = (0..num_vars).map(|i| Dynamic::new_const(format!("v{i}"), &self.t)).collect();
        if vars.len() > 1 {
            solver.assert(Dynamic::distinct(&vars));
        }
        for (a, va) in vars.iter().enumerate() {
            for (b, vb) in vars.iter().enumerate() {
                if a != b {
                    solver.assert(self.sub_of(va, vb).not());
                }
            }
        }
        let c = self.term(e, &vars);
        for target in targets {
            solver.assert(self.sub_of(&c, &self.term(target, &vars)).not());
        }
        match solver.check() {
            SatResult::Unsat => Outcome::Proved,
            SatResult::Sat => Outcome::Refuted,
            SatResult::Unknown => Outcome::Unknown,
        }
    }
}
