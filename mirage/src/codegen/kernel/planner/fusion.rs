//! Which values of a kernel stay out of shared memory (DESIGN §10).
//!
//! Three decisions, all made on the block graph before any code is emitted:
//! - **register accumulation**: an in-loop matmul whose only user is `acc_sum` accumulates its
//!   mma fragments in registers across the for-loop iterations;
//! - **hoisting**: an in-loop operator whose operands do not change from one iteration to the
//!   next (they derive only from tiles loaded once, before the loop) runs once, before the loop;
//! - **register chains**: `x = f_k(…f_1(A·B))` (a matmul followed by element-wise unary
//!   functions) whose users are matmuls taking `x` as their A operand, row sums
//!   (`acc_sum_last`) and sums over the iterations (`acc_sum`) stays in mma accumulator
//!   fragments. The warps then own whole 16-row bands
//!   of the matmuls (`row_owned`): the accumulator fragment layout of two adjacent 16×8 tiles is
//!   the A fragment layout of one 16×16 k-step, so the second matmul reads `x` from registers,
//!   and a row sum is four lanes' partial sums meeting by two shuffles. No shared-memory round
//!   trip, no barrier between the operators of the chain (the attention pattern
//!   `exp(Q·K)·V`, `Σ exp(Q·K)`).

use crate::ir::{AccKind, BlockGraph, BlockOp, DType, Phase, TensorRef};

/// Most f32 registers per thread one register-resident value (or accumulator) may take.
const MAX_FRAGMENT_FLOATS: usize = 128;
/// Most 32-bit registers per thread for a matmul's preloaded, loop-invariant A fragments.
const MAX_PRELOAD_REGS: usize = 32;

/// The register and scheduling decisions of one block graph (indexed by node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterPlan {
    /// Matmul → the `acc_sum` node it accumulates into, in registers.
    pub fused: Vec<Option<usize>>,
    /// Runs once, before the for-loop.
    pub hoisted: Vec<bool>,
    /// Output held in registers as row-owned mma accumulator fragments (no shared-memory tile).
    pub reg: Vec<bool>,
    /// Matmul computed with whole 16-row bands per warp.
    pub row_owned: Vec<bool>,
    /// `acc_sum_last` of a register value: quad shuffles, one lane per row adds to the tile.
    pub reg_sum: Vec<bool>,
    /// `acc_sum` of a register value: accumulated in registers in the same fragment layout,
    /// stored to its tile after the loop.
    pub reg_acc: Vec<bool>,
    /// Row-owned matmul whose A operand is loop-invariant: its fragments are loaded into
    /// registers once, before the loop.
    pub preload_a: Vec<bool>,
}

/// Geometry of a row-owned matmul `[m, k] x [k, n]` over `warps` warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowBands {
    /// 16-row bands.
    pub mt: usize,
    /// Bands per warp (warp `w` owns bands `w, w + warps, …`).
    pub per_warp: usize,
    /// 8-column tiles of the result.
    pub nt: usize,
    /// 16-deep k-steps.
    pub kt: usize,
}

impl RowBands {
    /// The bands of matmul node `i` of `bg` (its operands' last two dims).
    pub fn of(bg: &BlockGraph, i: usize) -> Option<RowBands> {
        let nd = &bg.nodes()[i];
        let a = bg.tile(*nd.inputs.first()?).ok()?;
        let b = bg.tile(*nd.inputs.get(1)?).ok()?;
        let r = a.shape.len();
        if r < 2 || b.shape.len() != r {
            return None;
        }
        let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
        let warps = (bg.threads() / 32).max(1);
        let mt = m.div_ceil(16);
        Some(RowBands { mt, per_warp: mt.div_ceil(warps), nt: n.div_ceil(8), kt: k.div_ceil(16) })
    }

    /// The bands of register value `x` of `bg`: those of the matmul at the head of its chain
    /// (unary functions keep the fragment layout); `None` when the chain does not start at one.
    pub fn of_register_value(bg: &BlockGraph, x: usize) -> Option<RowBands> {
        let nodes = bg.nodes();
        let mut cur = x;
        while !matches!(nodes.get(cur)?.op, BlockOp::Matmul) {
            cur = nodes[cur].inputs.first()?.node;
        }
        RowBands::of(bg, cur)
    }
}

/// The mma element type of a matmul (that of its first non-f32 operand), `None` for an f32
/// matmul (FMA fallback).
pub fn mma_dtype(bg: &BlockGraph, i: usize) -> Option<DType> {
    let nd = &bg.nodes()[i];
    let a = bg.tile(*nd.inputs.first()?).ok()?.dtype;
    let b = bg.tile(*nd.inputs.get(1)?).ok()?.dtype;
    let d = if a != DType::F32 { a } else { b };
    (d != DType::F32).then_some(d)
}

/// Whether matmul `i` has exact mma tile multiples (m, k multiples of 16, n of 8) and only unit
/// leading dims.
fn mma_exact(bg: &BlockGraph, i: usize) -> bool {
    let nd = &bg.nodes()[i];
    let (Ok(a), Ok(b)) = (bg.tile(nd.inputs[0]), bg.tile(nd.inputs[1])) else {
        return false;
    };
    let r = a.shape.len();
    r >= 2
        && a.shape[..r - 2].iter().all(|&d| d == 1)
        && b.shape[..r - 2].iter().all(|&d| d == 1)
        && a.shape[r - 2] % 16 == 0
        && a.shape[r - 1] % 16 == 0
        && b.shape[r - 1] % 8 == 0
}

/// What the decisions read about a block graph besides its nodes.
struct Facts<'g> {
    bg: &'g BlockGraph,
    /// The for-loop's iterations.
    frange: usize,
    /// `(user, operand slot)` of every node's first output; a user of a second output counts as
    /// `usize::MAX` (only single-output values take part in the decisions: a second output pins
    /// its producer to shared memory).
    users: Vec<Vec<(usize, usize)>>,
    /// In-loop operators (not inputs, accumulators or savers).
    in_loop: Vec<bool>,
}

impl<'g> Facts<'g> {
    fn new(bg: &'g BlockGraph) -> Facts<'g> {
        let nodes = bg.nodes();
        let mut users: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
        for (i, nd) in nodes.iter().enumerate() {
            for (slot, t) in nd.inputs.iter().enumerate() {
                users[t.node].push((if t.port == 0 { i } else { usize::MAX }, slot));
            }
        }
        let in_loop = nodes
            .iter()
            .map(|nd| match nd.op {
                BlockOp::Accum { .. } | BlockOp::Output { .. } | BlockOp::Input { .. } => false,
                _ => nd.outputs.first().is_some_and(|t| t.phase == Phase::InLoop),
            })
            .collect();
        Facts { bg, frange: bg.forloop_range(), users, in_loop }
    }
}

/// A register chain `x = f_k(…f_1(m1))` read by matmuls `consumers` (as their A operand), row
/// sums `sums` and sums over the iterations `accs`.
struct Chain {
    /// `x` back to the first unary function (the matmul `m1` last).
    values: Vec<usize>,
    m1: usize,
    bands: RowBands,
    consumers: Vec<usize>,
    sums: Vec<usize>,
    accs: Vec<usize>,
}

impl RegisterPlan {
    /// Decides everything for `bg`.
    pub fn new(bg: &BlockGraph) -> RegisterPlan {
        let n = bg.nodes().len();
        let facts = Facts::new(bg);
        let mut plan = RegisterPlan {
            fused: vec![None; n],
            hoisted: vec![false; n],
            reg: vec![false; n],
            row_owned: vec![false; n],
            reg_sum: vec![false; n],
            reg_acc: vec![false; n],
            preload_a: vec![false; n],
        };
        plan.accumulate_in_registers(&facts);
        let invariant = plan.hoist(&facts);
        // Register chains, found from their consuming matmuls.
        for m2 in 0..n {
            if let Some(chain) = plan.register_chain(&facts, m2) {
                plan.adopt(bg, chain, &invariant);
            }
        }
        plan
    }

    /// Register accumulation: an in-loop f16/bf16 matmul whose only user is `acc_sum`.
    fn accumulate_in_registers(&mut self, f: &Facts) {
        let nodes = f.bg.nodes();
        for (i, nd) in nodes.iter().enumerate() {
            if f.frange > 1 && matches!(nd.op, BlockOp::Matmul) && f.in_loop[i] && f.users[i].len() == 1 {
                let u = f.users[i][0].0;
                let operand_dtype = f.bg.tile(nd.inputs[0]).map(|t| t.dtype).unwrap_or(DType::F32);
                if u != usize::MAX
                    && nodes[u].op == (BlockOp::Accum { acc: AccKind::Sum })
                    && operand_dtype != DType::F32
                {
                    self.fused[i] = Some(u);
                }
            }
        }
    }

    /// Hoisting: stateless operators whose operands are all loop-invariant. Returns which nodes
    /// are loop-invariant (inputs not walked by the loop included).
    fn hoist(&mut self, f: &Facts) -> Vec<bool> {
        let nodes = f.bg.nodes();
        let looped = f.frange > 1;
        let mut invariant = vec![false; nodes.len()];
        for (i, nd) in nodes.iter().enumerate() {
            let operands_invariant = nd.inputs.iter().all(|t| invariant[t.node]);
            invariant[i] = match nd.op {
                BlockOp::Input { forloop_dim, .. } => looped && forloop_dim.is_none(),
                BlockOp::Unary { .. }
                | BlockOp::Binary { .. }
                | BlockOp::ReduceSum { .. }
                | BlockOp::ReduceSumTo { .. }
                | BlockOp::ReduceMax { .. }
                | BlockOp::RmsNorm { .. }
                | BlockOp::Concat { .. } => looped && f.in_loop[i] && operands_invariant,
                BlockOp::Matmul => looped && f.in_loop[i] && self.fused[i].is_none() && operands_invariant,
                _ => false,
            };
            self.hoisted[i] = invariant[i] && !matches!(nd.op, BlockOp::Input { .. });
        }
        invariant
    }

    /// The register chain whose value `x` matmul `m2` reads as its A operand, when the chain,
    /// every user of `x` and the geometry of its matmuls admit one.
    fn register_chain(&self, f: &Facts, m2: usize) -> Option<Chain> {
        let nodes = f.bg.nodes();
        let fresh_in_loop = |i: usize| f.in_loop[i] && !self.hoisted[i];
        if !matches!(nodes[m2].op, BlockOp::Matmul) || !fresh_in_loop(m2) || self.row_owned[m2] {
            return None;
        }
        let x = nodes[m2].inputs[0];
        if x.port != 0 {
            return None;
        }
        // Walk back through single-use unary functions to the producing matmul.
        let mut values = vec![x.node];
        let mut cur = x.node;
        while let BlockOp::Unary { .. } = nodes[cur].op {
            let src = nodes[cur].inputs[0];
            if src.port != 0 || !fresh_in_loop(cur) || f.users[src.node].len() != 1 {
                break;
            }
            cur = src.node;
            values.push(cur);
        }
        let m1 = cur;
        if !matches!(nodes[m1].op, BlockOp::Matmul) || !fresh_in_loop(m1) || self.fused[m1].is_some() {
            return None;
        }
        if values[..values.len() - 1].iter().any(|&c| !fresh_in_loop(c)) {
            return None;
        }
        // Every user of x: a matmul taking it as A only, a row sum, or a sum over the iterations.
        let (mut consumers, mut sums, mut accs) = (Vec::new(), Vec::new(), Vec::new());
        if f.users[x.node].is_empty() {
            return None;
        }
        for &(u, slot) in &f.users[x.node] {
            match nodes.get(u)?.op {
                BlockOp::Matmul if slot == 0 && nodes[u].inputs[1] != x => consumers.push(u),
                BlockOp::Accum { acc: AccKind::SumLast } => sums.push(u),
                // (with one iteration acc_sum is an alias of its operand, which has no tile)
                BlockOp::Accum { acc: AccKind::Sum } if f.frange > 1 => accs.push(u),
                _ => return None,
            }
        }
        if consumers.is_empty() {
            return None;
        }
        let bands = RowBands::of(f.bg, m1)?;
        let chain = Chain { values, m1, bands, consumers, sums, accs };
        self.geometry_admits(f, &chain).then_some(chain)
    }

    /// Whether the chain's matmuls have exact mma tiles of a 16-bit type, the second matmuls'
    /// k-steps are the first one's column tile pairs over the same bands, and the fragments fit
    /// the register budget.
    fn geometry_admits(&self, f: &Facts, c: &Chain) -> bool {
        let b1 = c.bands;
        mma_exact(f.bg, c.m1)
            && mma_dtype(f.bg, c.m1).is_some()
            && b1.nt.is_multiple_of(2)
            && b1.per_warp * b1.nt * 4 * (1 + c.accs.len()) <= MAX_FRAGMENT_FLOATS
            && c.consumers.iter().all(|&u| {
                let Some(b2) = RowBands::of(f.bg, u) else {
                    return false;
                };
                mma_exact(f.bg, u)
                    && mma_dtype(f.bg, u).is_some()
                    && f.in_loop[u]
                    && !self.hoisted[u]
                    && b2.mt == b1.mt
                    && b2.kt * 2 == b1.nt
                    && b2.per_warp * b2.nt * 4 <= MAX_FRAGMENT_FLOATS
            })
    }

    /// Keeps `chain` in registers; its first matmul preloads its A fragments when that operand
    /// is loop-invariant and they fit.
    fn adopt(&mut self, bg: &BlockGraph, chain: Chain, invariant: &[bool]) {
        for &c in &chain.values {
            self.reg[c] = true;
        }
        self.row_owned[chain.m1] = true;
        for &u in &chain.consumers {
            self.row_owned[u] = true;
        }
        for &s in &chain.sums {
            self.reg_sum[s] = true;
        }
        for &a in &chain.accs {
            self.reg_acc[a] = true;
        }
        let a1 = bg.nodes()[chain.m1].inputs[0];
        if invariant[a1.node] && chain.bands.per_warp * chain.bands.kt * 4 <= MAX_PRELOAD_REGS {
            self.preload_a[chain.m1] = true;
        }
    }

    /// Whether node `i` writes nothing another warp reads in the same iteration (the barrier
    /// after it can be left out when the next operator is such a node too).
    pub fn warp_local(&self, i: usize) -> bool {
        self.reg[i] || self.reg_sum[i] || self.reg_acc[i] || self.fused[i].is_some()
    }

    /// Whether tile `t` is read only by hoisted operators and by matmuls that preload it (so its
    /// shared memory is free once the loop starts).
    pub fn dead_in_loop(&self, bg: &BlockGraph, t: TensorRef) -> bool {
        bg.nodes().iter().enumerate().all(|(u, nd)| {
            !nd.inputs.contains(&t) || self.hoisted[u] || (self.preload_a[u] && nd.inputs[0] == t && nd.inputs[1] != t)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, GridMap, IrError, TensorDesc, UnaryOp};

    /// `O = Σ_i exp(Q·K_i)·V_i` with `score_acc` of the scores `exp(Q·K_i)` as a second output:
    /// the attention block graph (`acc_sum_last`: row sums; `acc_sum`: the whole score tile,
    /// reduced to row sums after the loop as gqa_bs1's µGraph does; `acc_max`: a use the
    /// register chain does not admit). Nodes: 0 q, 1 k, 2 v, [rms(q)], s, e, score_acc, o, acc,
    /// [row sums of an `acc_sum`].
    fn attention(norm_q: bool, score_acc: AccKind) -> Result<BlockGraph, IrError> {
        let q = TensorDesc::new(&[128, 64], DType::F16);
        let k = TensorDesc::new(&[64, 1024], DType::F16);
        let v = TensorDesc::new(&[1024, 64], DType::F16);
        let mut bg = BlockGraph::new(vec![q, k, v], [1, 1, 1], 256, 16)?;
        let none: GridMap = [None, None, None];
        let q = bg.input(0, none, None)?;
        let k = bg.input(1, none, Some(1))?;
        let v = bg.input(2, none, Some(0))?;
        let q = if norm_q { bg.op(BlockOp::RmsNorm { eps: crate::ir::Scalar(0.0) }, &[q])? } else { q };
        let s = bg.matmul(q, k)?;
        let e = bg.unary(UnaryOp::Exp, s)?;
        let l = bg.accum(score_acc, &[e])?;
        let o = bg.matmul(e, v)?;
        let o = bg.accum(AccKind::Sum, &[o])?;
        let l = if score_acc == AccKind::Sum { bg.op(BlockOp::ReduceSum { dim: 1 }, &[l])? } else { l };
        bg.output(l, none)?;
        bg.output(o, none)?;
        Ok(bg)
    }

    #[test]
    fn attention_keeps_scores_in_registers() {
        let bg = attention(false, AccKind::SumLast).expect("attention block graph");
        let p = RegisterPlan::new(&bg);
        // nodes: 0 q, 1 k, 2 v, 3 s, 4 e, 5 l, 6 o, 7 acc
        assert_eq!(p.fused[6], Some(7));
        assert!(p.reg[3] && p.reg[4], "S and exp(S) in registers");
        assert!(p.row_owned[3] && p.row_owned[6]);
        assert!(p.reg_sum[5]);
        assert!(p.preload_a[3], "Q is loaded once: its fragments are preloaded");
        assert!(!p.hoisted.iter().any(|&h| h));
        assert!(p.dead_in_loop(&bg, TensorRef { node: 0, port: 0 }));
    }

    #[test]
    fn loop_invariant_norm_is_hoisted() {
        let bg = attention(true, AccKind::SumLast).expect("attention block graph");
        let p = RegisterPlan::new(&bg);
        // nodes: 0 q, 1 k, 2 v, 3 rms(q), 4 s, 5 e, 6 l, 7 o, 8 acc
        assert!(p.hoisted[3]);
        assert!(p.preload_a[4]);
        assert!(p.reg[4] && p.reg[5]);
        assert!(p.dead_in_loop(&bg, TensorRef { node: 3, port: 0 }));
    }

    #[test]
    fn a_second_use_of_the_scores_keeps_them_in_shared_memory() {
        let bg = attention(false, AccKind::Max).expect("attention block graph");
        let p = RegisterPlan::new(&bg);
        assert!(!p.reg.iter().any(|&r| r));
        assert!(!p.row_owned.iter().any(|&r| r));
        assert_eq!(p.fused[6], Some(7), "register accumulation is independent of the chain");
    }

    #[test]
    fn a_summed_score_tile_accumulates_in_registers() {
        let bg = attention(false, AccKind::Sum).expect("attention block graph");
        let p = RegisterPlan::new(&bg);
        // nodes: 0 q, 1 k, 2 v, 3 s, 4 e, 5 a, 6 o, 7 acc, 8 l
        assert!(p.reg[3] && p.reg[4]);
        assert!(p.reg_acc[5]);
        assert!(p.row_owned[6]);
    }

    #[test]
    fn one_iteration_hoists_nothing() -> Result<(), IrError> {
        let q = TensorDesc::new(&[64, 64], DType::F16);
        let mut bg = BlockGraph::new(vec![q], [1, 1, 1], 128, 1)?;
        let none: GridMap = [None, None, None];
        let q = bg.input(0, none, None)?;
        let e = bg.unary(UnaryOp::Exp, q)?;
        let e = bg.accum(AccKind::Sum, &[e])?;
        bg.output(e, none)?;
        let p = RegisterPlan::new(&bg);
        assert!(!p.hoisted.iter().any(|&h| h));
        Ok(())
    }
}
