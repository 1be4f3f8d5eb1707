//! Runs of element-wise operators over one tile shape, computed in one pass.

use crate::ir::{BlockGraph, BlockOp};

use super::fusion::RegisterPlan;
use super::schedule::Schedule;

/// Runs of element-wise operators over the same tile shape, emitted as one pass.
///
/// Within one emission section (loop-invariant operators, the loop body, the epilogue), a run
/// of consecutive `Unary`/`Binary` operators whose outputs have one shape — optionally headed by
/// an `RmsNorm` (its row reduction runs first, its scaling joins the pass) and, in the epilogue,
/// followed by output savers of group members — reads each operand element once and computes
/// every member per element in registers. A member read only inside its group gets no
/// shared-memory tile; one read elsewhere is also stored. One loop and one barrier instead of one
/// per operator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElementwiseGroups {
    /// Members of each group, in emission order (at least two operators, or one and a saver).
    pub groups: Vec<Vec<usize>>,
    /// The group of each node.
    pub group_of: Vec<Option<usize>>,
    /// The member's value lives only in a register of the pass.
    pub in_register: Vec<bool>,
    /// The common output shape of each group.
    pub shapes: Vec<Vec<usize>>,
}

impl ElementwiseGroups {
    /// Finds the groups of every section of `schedule`.
    pub fn new(bg: &BlockGraph, schedule: &Schedule, rp: &RegisterPlan) -> ElementwiseGroups {
        let n = bg.nodes().len();
        let mut ew = ElementwiseGroups {
            groups: Vec::new(),
            group_of: vec![None; n],
            in_register: vec![false; n],
            shapes: Vec::new(),
        };
        for section in schedule.sections() {
            ew.group_section(bg, section, rp);
        }
        let nodes = bg.nodes();
        for (gid, members) in ew.groups.iter().enumerate() {
            for &i in members {
                if matches!(nodes[i].op, BlockOp::Output { .. }) {
                    continue;
                }
                let users = schedule.users[i].first().map(Vec::as_slice).unwrap_or_default();
                ew.in_register[i] = !users.is_empty() && users.iter().all(|&u| ew.group_of[u] == Some(gid));
            }
        }
        ew
    }

    /// The head of `i`'s group (where the whole group runs), or `i` itself.
    pub fn head(&self, i: usize) -> usize {
        self.group_of[i].map_or(i, |gid| self.groups[gid][0])
    }

    /// Groups the consecutive runs of one section.
    fn group_section(&mut self, bg: &BlockGraph, section: &[usize], rp: &RegisterPlan) {
        let nodes = bg.nodes();
        let shape_of = |i: usize| nodes[i].outputs.first().map(|t| t.shape.clone());
        let pointwise = |i: usize| {
            matches!(nodes[i].op, BlockOp::Unary { .. } | BlockOp::Binary { .. })
                && !rp.reg[i]
                && nodes[i].outputs.len() == 1
        };
        let mut cur: Vec<usize> = Vec::new();
        let mut shape: Vec<usize> = Vec::new();
        for &i in section {
            let joins = match nodes[i].op {
                BlockOp::Unary { .. } | BlockOp::Binary { .. } if pointwise(i) => {
                    !cur.is_empty() && shape_of(i).as_ref() == Some(&shape)
                }
                BlockOp::Output { .. } => {
                    let t = nodes[i].inputs[0];
                    !cur.is_empty()
                        && t.port == 0
                        && cur.contains(&t.node)
                        && !matches!(nodes[t.node].op, BlockOp::Output { .. })
                }
                _ => false,
            };
            if joins {
                cur.push(i);
                continue;
            }
            self.flush(bg, &mut cur, &shape);
            let head = pointwise(i) || matches!(nodes[i].op, BlockOp::RmsNorm { .. });
            if head {
                cur.push(i);
                shape = shape_of(i).unwrap_or_default();
            }
        }
        self.flush(bg, &mut cur, &shape);
    }

    /// Makes the run `cur` a group when it has at least two members, one of them an operator.
    fn flush(&mut self, bg: &BlockGraph, cur: &mut Vec<usize>, shape: &[usize]) {
        let nodes = bg.nodes();
        let ops = cur.iter().filter(|&&i| !matches!(nodes[i].op, BlockOp::Output { .. })).count();
        if cur.len() >= 2 && ops >= 1 {
            let gid = self.groups.len();
            for &i in cur.iter() {
                self.group_of[i] = Some(gid);
            }
            self.groups.push(std::mem::take(cur));
            self.shapes.push(shape.to_vec());
        }
        cur.clear();
    }
}
