//! Tasks: one per tile of each operator, with the regions it reads, prefetches and writes.

use crate::ir::BlockGraph;

use super::graph::{GraphError, OpId, OpKind, StepGraph, TensorKind};
use super::region::{Region, block_reads, block_writes};

/// One tile of one operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// Its operator.
    pub op: OpId,
    /// Its tile index (x, y, z).
    pub tile: [usize; 3],
    /// The regions it reads (over all its loop iterations).
    pub reads: Vec<Region>,
    /// The reads that depend on no task of the step (inputs: weights and host-written data):
    /// streamed into L2 before the task waits for its dependencies.
    pub prefetch: Vec<Region>,
    /// The regions it writes.
    pub writes: Vec<Region>,
}

/// The tiles of a grid in task order (x fastest, then y, then z).
pub fn tiles(grid: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..grid[2]).flat_map(move |z| (0..grid[1]).flat_map(move |y| (0..grid[0]).map(move |x| [x, y, z])))
}

/// The tasks of the operators in `order`, operator by operator, tiles in [`tiles`] order.
/// Checks that every operator's tiles write disjoint regions and that every buffer is written
/// whole by its writer.
pub fn expand(g: &StepGraph, order: &[OpId]) -> Result<Vec<Task>, GraphError> {
    let mut tasks = Vec::new();
    for &id in order {
        let op = &g.ops()[id.0];
        let first = tasks.len();
        for tile in tiles(op.grid) {
            let (reads, prefetch, writes) = match &op.kind {
                OpKind::Block(bg) => block_regions(g, bg, &op.inputs, &op.outputs, tile),
                OpKind::Builtin(b) => {
                    let ins: Vec<_> = op.inputs.iter().map(|&t| (t, &g.tensor(t).desc)).collect();
                    let outs: Vec<_> = op.outputs.iter().map(|&t| (t, &g.tensor(t).desc)).collect();
                    let (reads, writes) = b.regions(tile, &ins, &outs);
                    let prefetch = reads
                        .iter()
                        .filter(|(r, p)| *p && g.tensor(r.tensor).kind == TensorKind::Input)
                        .map(|(r, _)| r.clone())
                        .collect();
                    (reads.into_iter().map(|(r, _)| r).collect(), prefetch, writes)
                }
            };
            tasks.push(Task { op: id, tile, reads, prefetch, writes });
        }
        let shared = matches!(&op.kind, OpKind::Builtin(b) if b.overlapping_writes());
        check_writes(g, &op.name, &tasks[first..], shared)?;
    }
    Ok(tasks)
}

fn block_regions(
    g: &StepGraph,
    bg: &BlockGraph,
    inputs: &[super::graph::TensorId],
    outputs: &[super::graph::TensorId],
    tile: [usize; 3],
) -> (Vec<Region>, Vec<Region>, Vec<Region>) {
    let reads = block_reads(bg, inputs, tile);
    let prefetch = reads.iter().filter(|r| g.tensor(r.tensor).kind == TensorKind::Input).cloned().collect();
    (reads, prefetch, block_writes(bg, outputs, tile))
}

/// Tiles of one operator must not write the same element (they run concurrently), and a
/// buffer's writer must write all of it (a buffer holds nothing from earlier steps). With
/// `shared` (a kind whose tiles declare the same writes, one of them writing at run time:
/// [`super::builtin::Builtin::overlapping_writes`]) tiles may declare identical boxes, never
/// boxes that merely overlap.
fn check_writes(g: &StepGraph, op: &str, tasks: &[Task], shared: bool) -> Result<(), GraphError> {
    let mut by_tensor: std::collections::BTreeMap<usize, Vec<&Region>> = Default::default();
    for t in tasks {
        for w in &t.writes {
            let list = by_tensor.entry(w.tensor.0).or_default();
            if !(shared && list.contains(&w)) {
                list.push(w);
            }
        }
    }
    for (tensor, regions) in by_tensor {
        for (i, a) in regions.iter().enumerate() {
            if let Some(b) = regions[i + 1..].iter().find(|b| a.overlaps(b)) {
                return Err(GraphError::Operand {
                    graph: g.name().into(),
                    op: op.into(),
                    reason: format!(
                        "two tiles write the same elements of `{}` ({:?}..{:?} and {:?}..{:?})",
                        g.tensors()[tensor].name,
                        a.lo,
                        a.hi,
                        b.lo,
                        b.hi
                    ),
                });
            }
        }
        let t = &g.tensors()[tensor];
        let written: usize = regions.iter().map(|r| r.volume()).sum();
        let total: usize = t.desc.shape.iter().product();
        if t.kind == TensorKind::Buffer && written != total {
            return Err(GraphError::Dataflow {
                graph: g.name().into(),
                tensor: t.name.clone(),
                reason: format!(
                    "`{op}` writes {written} of its {total} elements: a buffer must be written whole every step"
                ),
            });
        }
    }
    Ok(())
}
