//! When each operator of a block graph runs: the emission sections, schedule positions (for
//! tile lifetimes), accumulators that are the identity, and the users of every tile.

use crate::ir::{AccKind, BlockGraph, BlockOp, Phase, TensorRef};

use super::fusion::RegisterPlan;

/// The schedule of one block graph's kernel. Vectors are indexed by node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The nodes reading each output port (node → port → users); an aliased accumulator's users
    /// count as users of the tile it aliases, which must stay alive for them.
    pub users: Vec<Vec<Vec<usize>>>,
    /// With one iteration, `acc_sum`, `acc_max` and `acc_rescale` are the identity: such an
    /// accumulator has no tile and no code, and reads as the tile it aliases.
    pub alias: Vec<Option<TensorRef>>,
    /// Runs inside the for-loop (an in-loop operator; accumulators and savers do not).
    pub in_loop: Vec<bool>,
    /// Position in the kernel's schedule: in-loop operators and accumulators at `1 + i`, after-loop
    /// operators and savers at `1 + nodes + i` (0 is before the loop).
    pub positions: Vec<usize>,
    /// Loop-invariant operators run once before the loop, in emission order.
    pub hoisted: Vec<usize>,
    /// The loop body in emission order: in-loop operators that are not hoisted, and the
    /// accumulators that are neither folded into a register matmul nor aliased away.
    pub body: Vec<usize>,
    /// After the loop, in emission order: after-loop operators and output savers.
    pub epilogue: Vec<usize>,
    /// The output index of every saver.
    pub saver_of: Vec<Option<usize>>,
}

impl Schedule {
    /// Schedules `bg` given its register plan (hoisted operators and register accumulation).
    pub fn new(bg: &BlockGraph, rp: &RegisterPlan) -> Schedule {
        let nodes = bg.nodes();
        let n = nodes.len();
        let mut users: Vec<Vec<Vec<usize>>> = nodes.iter().map(|nd| vec![Vec::new(); nd.outputs.len()]).collect();
        for (i, nd) in nodes.iter().enumerate() {
            for t in &nd.inputs {
                users[t.node][t.port].push(i);
            }
        }
        let alias = identity_accumulators(bg, &mut users);
        let is_accum = |i: usize| matches!(nodes[i].op, BlockOp::Accum { .. });
        let in_loop: Vec<bool> = (0..n)
            .map(|i| match nodes[i].op {
                BlockOp::Accum { .. } | BlockOp::Output { .. } => false,
                _ => nodes[i].outputs.first().is_some_and(|t| t.phase == Phase::InLoop),
            })
            .collect();
        let positions = (0..n).map(|i| if in_loop[i] || is_accum(i) { 1 + i } else { 1 + n + i }).collect();
        let in_body = |j: usize| {
            !(matches!(nodes[j].op, BlockOp::Input { .. })
                || rp.hoisted[j]
                || (is_accum(j) && (rp.fused.contains(&Some(j)) || alias[j].is_some()))
                || (!in_loop[j] && !is_accum(j)))
        };
        let in_epilogue = |i: usize| matches!(nodes[i].op, BlockOp::Output { .. }) || (!in_loop[i] && !is_accum(i));
        let mut saver_of = vec![None; n];
        for (k, i) in (0..n).filter(|&i| matches!(nodes[i].op, BlockOp::Output { .. })).enumerate() {
            saver_of[i] = Some(k);
        }
        Schedule {
            hoisted: (0..n).filter(|&i| rp.hoisted[i]).collect(),
            body: (0..n).filter(|&i| in_body(i)).collect(),
            epilogue: (0..n).filter(|&i| in_epilogue(i)).collect(),
            users,
            alias,
            in_loop,
            positions,
            saver_of,
        }
    }

    /// The three emission sections in order: hoisted, loop body, epilogue.
    pub fn sections(&self) -> [&[usize]; 3] {
        [&self.hoisted, &self.body, &self.epilogue]
    }
}

/// The accumulators that are the identity (one iteration) and the tile each aliases; their users
/// are added to the users of that tile.
fn identity_accumulators(bg: &BlockGraph, users: &mut [Vec<Vec<usize>>]) -> Vec<Option<TensorRef>> {
    let nodes = bg.nodes();
    let n = nodes.len();
    let mut alias: Vec<Option<TensorRef>> = vec![None; n];
    if bg.forloop_range() != 1 {
        return alias;
    }
    for (i, nd) in nodes.iter().enumerate() {
        if matches!(nd.op, BlockOp::Accum { acc: AccKind::Sum | AccKind::Max | AccKind::Rescale }) {
            let src = nd.inputs[0];
            alias[i] = Some(alias[src.node].filter(|_| src.port == 0).unwrap_or(src));
        }
    }
    // The operand must stay alive for the alias's users.
    for i in (0..n).rev() {
        if let Some(src) = alias[i] {
            let extra = users[i][0].clone();
            users[src.node][src.port].extend(extra);
        }
    }
    alias
}
