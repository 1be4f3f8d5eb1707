//! Runs of element-wise operators over one tile shape, computed in one pass.

use crate::ir::{AccKind, BlockGraph, BlockOp};

use super::fusion::RegisterPlan;
use super::schedule::Schedule;
use super::tiles::Tile;

/// Elements per thread and step of an element-wise pass over `shape` run by `threads` threads
/// whose shared-memory tiles (the operands it reads and the members it stores) are `tiles`: the
/// widest of 8, 4 and 2 that divides the last dim, leaves every thread at least one whole vector
/// (a pass of fewer elements keeps one per thread: fewer threads with longer chains were slower,
/// DECISIONS change 44), and for which every tile varying along the last dim holds it contiguous
/// with its rows, its start and its stage buffers aligned to one vector of at most 16 bytes
/// (one vector load or store per tile per step; a tile of extent 1 along the last dim is read
/// element by element, the same element for the whole vector); 1 when none does. A step's
/// elements lie in one row, so the row index is computed once per step instead of per element.
pub fn pass_vector(shape: &[usize], tiles: &[&Tile], threads: usize) -> usize {
    let Some(&last) = shape.last() else { return 1 };
    let numel: usize = shape.iter().product();
    [8, 4, 2]
        .into_iter()
        .find(|&v| {
            last.is_multiple_of(v) && numel >= threads * v && tiles.iter().all(|t| vector_aligned(t, v, shape.len()))
        })
        .unwrap_or(1)
}

/// Whether tile `t` (rank `rank`) is read or written `v` elements at a time along its last dim.
fn vector_aligned(t: &Tile, v: usize, rank: usize) -> bool {
    let r = t.shape.len();
    if r != rank || r == 0 {
        return false;
    }
    t.shape[r - 1] == 1 || t.runs_aligned(r - 1, v)
}

/// Most terms of a sum over a leading dim that heads an element-wise run (each element adds them
/// in one thread).
pub const MAX_INLINE_REDUCE: usize = 32;

/// Whether a tile of `shape` holds one element (a scalar of any rank).
fn one_element(shape: &[usize]) -> bool {
    shape.iter().product::<usize>() == 1
}

/// Runs of element-wise operators over the same tile shape, emitted as one pass.
///
/// Within one emission section (loop-invariant operators, the loop body, the epilogue), a run
/// of consecutive `Unary`/`Binary` operators whose outputs have one shape — optionally headed by
/// an `RmsNorm` (its row reduction runs first, its scaling joins the pass) and, in the epilogue,
/// followed by output savers of group members — reads each operand element once and computes
/// every member per element in registers. A member read only inside its group gets no
/// shared-memory tile; one read elsewhere is also stored. One loop and one barrier instead of one
/// per operator.
///
/// In the loop body, a run may also be headed by a short sum over a leading dim
/// (`reduce_sum(d)` of a tile, `d` not the last dim, at most 32 terms, `MAX_INLINE_REDUCE`): each
/// element of the pass adds its terms itself, in order, where the sum had a pass, a tile and a
/// barrier of its own (the decoder's gate/up adding the output projection's partial sums to the
/// residual: `x + Σ_p P[p]`, DECISIONS change 102). A body accumulator of one element
/// (`acc_sum_last`, `acc_rms_last`) of a run's member does not end the run: it runs after the
/// pass (the barrier after the head), reading the member's stored tile, and no later member may
/// read it.
///
/// Operators of one element (a scalar: a running maximum's rescale, a row's weight in a
/// combine) join a run of any shape, and a run of scalars takes the shape of the first wider
/// operator after it: every thread computes the scalars itself for each element it handles (a
/// few instructions, where a pass of their own cost a barrier), and a stored scalar is written
/// by the pass's first element only ([`ElementwiseGroups::scalar`]).
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
    /// The member's output is one element in a group of a wider shape (computed per element of
    /// the pass, stored once).
    pub scalar: Vec<bool>,
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
            scalar: vec![false; n],
        };
        for (k, section) in schedule.sections().into_iter().enumerate() {
            ew.group_section(bg, section, rp, k == 1);
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

    /// Groups the consecutive runs of one section (`body`: the loop body's).
    fn group_section(&mut self, bg: &BlockGraph, section: &[usize], rp: &RegisterPlan, body: bool) {
        let nodes = bg.nodes();
        let shape_of = |i: usize| nodes[i].outputs.first().map(|t| t.shape.clone());
        let pointwise = |i: usize| {
            matches!(nodes[i].op, BlockOp::Unary { .. } | BlockOp::Binary { .. })
                && !rp.reg[i]
                && nodes[i].outputs.len() == 1
        };
        // A short sum over a leading dim of a shared-memory tile, in the loop body.
        let sum_head = |i: usize| {
            let BlockOp::ReduceSum { dim } = nodes[i].op else { return false };
            let x = nodes[i].inputs[0];
            let Ok(xs) = bg.tile(x).map(|t| &t.shape) else { return false };
            body && !rp.reg[i]
                && !rp.reg[x.node]
                && nodes[i].outputs.len() == 1
                && dim + 1 < xs.len()
                && xs[dim] <= MAX_INLINE_REDUCE
        };
        // A body accumulator of one element whose input is a member of the run `cur`, a run
        // headed by a sum.
        let after_pass = |i: usize, cur: &[usize]| {
            body && cur.first().is_some_and(|&h| matches!(nodes[h].op, BlockOp::ReduceSum { .. }))
                && matches!(nodes[i].op, BlockOp::Accum { acc: AccKind::SumLast | AccKind::RmsLast })
                && shape_of(i).is_some_and(|s| one_element(&s))
                && nodes[i].inputs.first().is_some_and(|x| x.port == 0 && cur.contains(&x.node))
        };
        let mut cur: Vec<usize> = Vec::new();
        let mut shape: Vec<usize> = Vec::new();
        // Accumulators passed over by the run (they run after it; no member may read them).
        let mut passed: Vec<usize> = Vec::new();
        for &i in section {
            let own = shape_of(i).unwrap_or_default();
            if after_pass(i, &cur) {
                passed.push(i);
                continue;
            }
            let joins = match nodes[i].op {
                BlockOp::Unary { .. } | BlockOp::Binary { .. } if pointwise(i) => {
                    // A run of plain operators (no `rms_norm` or sum head, no saver) takes scalars
                    // of its rank, and a run of scalars takes the first wider operator's shape.
                    let plain = cur.iter().all(|&m| {
                        !matches!(
                            nodes[m].op,
                            BlockOp::RmsNorm { .. } | BlockOp::Output { .. } | BlockOp::ReduceSum { .. }
                        )
                    });
                    let scalar_joins = one_element(&own) || one_element(&shape);
                    let reads_passed = nodes[i].inputs.iter().any(|t| passed.contains(&t.node));
                    !cur.is_empty()
                        && !reads_passed
                        && (own == shape || (plain && own.len() == shape.len() && scalar_joins))
                }
                BlockOp::Output { .. } => {
                    let t = nodes[i].inputs[0];
                    !cur.is_empty()
                        && t.port == 0
                        && cur.contains(&t.node)
                        && !matches!(nodes[t.node].op, BlockOp::Output { .. })
                        && shape_of(t.node).as_ref() == Some(&shape)
                }
                _ => false,
            };
            if joins {
                if one_element(&shape) && !one_element(&own) {
                    shape = own;
                }
                cur.push(i);
                continue;
            }
            self.flush(bg, &mut cur, &shape);
            passed.clear();
            let head = pointwise(i) || matches!(nodes[i].op, BlockOp::RmsNorm { .. }) || sum_head(i);
            if head {
                cur.push(i);
                shape = own;
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
            let wide = !one_element(shape);
            for &i in cur.iter() {
                self.group_of[i] = Some(gid);
                let scalar = nodes[i].outputs.first().is_none_or(|t| one_element(&t.shape));
                self.scalar[i] = wide && scalar && !matches!(nodes[i].op, BlockOp::Output { .. });
            }
            self.groups.push(std::mem::take(cur));
            self.shapes.push(shape.to_vec());
        }
        cur.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn tile(dtype: DType, shape: &[usize], strides: &[usize], offset: usize) -> Tile {
        Tile::for_test(dtype, shape, strides, offset, false)
    }

    #[test]
    fn a_pass_over_contiguous_aligned_rows_takes_16_byte_vectors() {
        let bf = DType::Bf16;
        // Qwen2.5-7B's down projection at 16 rows: silu(g) * u over [16, 296] bf16 tiles.
        let (g, u, p) = (
            tile(bf, &[16, 296], &[296, 1], 0),
            tile(bf, &[16, 296], &[296, 1], 9472),
            tile(bf, &[16, 296], &[296, 1], 18944),
        );
        assert_eq!(pass_vector(&[16, 296], &[&g, &u, &p], 1), 8);
        // An f32 tile caps the vector at 4 elements (16 bytes).
        let f = tile(DType::F32, &[16, 296], &[296, 1], 0);
        assert_eq!(pass_vector(&[16, 296], &[&g, &f], 1), 4);
        // A broadcast column ([16, 1]) is read per element and does not limit the vector.
        let col = tile(DType::F32, &[16, 1], &[1, 1], 4);
        assert_eq!(pass_vector(&[16, 296], &[&g, &col], 1), 8);
        // No tiles (members in registers, savers only): the last dim alone decides.
        assert_eq!(pass_vector(&[1, 64], &[], 1), 8);
        // 256 threads: [16, 296] leaves each of them two vectors of 8; Mistral-7B's [16, 28]
        // (448 elements) not one vector of 2, so it stays element by element, as does a [1, 96]
        // epilogue.
        assert_eq!(pass_vector(&[16, 296], &[&g, &u, &p], 256), 8);
        let m = tile(bf, &[16, 28], &[28, 1], 0);
        assert_eq!(pass_vector(&[16, 28], &[&m], 256), 1);
        assert_eq!(pass_vector(&[1, 96], &[], 256), 1);
        assert_eq!(pass_vector(&[1, 1024], &[], 256), 4);
    }

    #[test]
    fn misaligned_or_strided_tiles_narrow_the_vector_or_refuse_it() {
        let bf = DType::Bf16;
        // Rows of 300 elements: 4 divides them, 8 does not.
        assert_eq!(pass_vector(&[2, 300], &[&tile(bf, &[2, 300], &[300, 1], 0)], 1), 4);
        // A row stride of 298 elements: 2-element vectors only.
        assert_eq!(pass_vector(&[2, 296], &[&tile(bf, &[2, 296], &[298, 1], 0)], 1), 2);
        // A start 4 bytes past a 16-byte boundary: 2 bf16 (4 bytes) at a time.
        assert_eq!(pass_vector(&[2, 296], &[&tile(bf, &[2, 296], &[296, 1], 4)], 1), 2);
        // The last dim strided (a transposed tile), an odd last dim, a rank mismatch: scalar.
        assert_eq!(pass_vector(&[64, 8], &[&tile(bf, &[64, 8], &[1, 64], 0)], 1), 1);
        assert_eq!(pass_vector(&[4, 7], &[&tile(bf, &[4, 7], &[7, 1], 0)], 1), 1);
        assert_eq!(pass_vector(&[4, 8], &[&tile(bf, &[32], &[1], 0)], 1), 1);
        // A pipelined tile whose stage buffers are 8 bytes apart.
        let mut t = tile(bf, &[1, 4], &[4, 1], 0);
        t.pipelined = true;
        assert_eq!(pass_vector(&[1, 4], &[&t], 1), 4);
        t.bytes = 12;
        assert_eq!(pass_vector(&[1, 4], &[&t], 1), 2);
    }
}
