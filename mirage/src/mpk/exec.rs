//! CPU execution of step graphs: the whole-graph reference ([`reference_step`]: operators in
//! dataflow order, each tile in order) and the executor of a compiled schedule
//! ([`execute_step`]: the workers' task lists interleaved as the counters allow, in a seeded
//! random order), both through the reference interpreter (block graphs, one block at a time)
//! and the built-in tasks' CPU references. Values are `f32`, rounded to each tensor's element
//! type when written, as the device stores them.
//!
//! The executor also checks that no task reads an element of a buffer that has not been
//! written in the current step: with the dependencies right, the two agree exactly.

use crate::eval::{Tensor, evaluate_block_tile};
use crate::ir::DType;
use crate::reference::F32;

use super::Compiled;
use super::builtin::{IndexError, IndexSource};
use super::graph::{OpKind, StepGraph, TensorId, TensorKind};
use super::region::Region;
use super::tasks::tiles;

/// Why a CPU step failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// A task read a runtime index out of range (the device's `ERR_INDEX`).
    #[error("task `{task}`: {error}")]
    Index {
        /// The task.
        task: String,
        /// What was out of range.
        error: IndexError,
    },
    /// A task read buffer elements no task had written in this step: a missing dependency.
    #[error("task `{task}` read elements of buffer `{tensor}` not yet written in this step ({lo:?}..{hi:?})")]
    Unwritten {
        /// The task.
        task: String,
        /// The buffer.
        tensor: String,
        /// The box read.
        lo: Vec<usize>,
        /// Its end.
        hi: Vec<usize>,
    },
    /// Values of the wrong length for a tensor.
    #[error("tensor `{tensor}`: expected {expected} values, found {found}")]
    Values {
        /// The tensor.
        tensor: String,
        /// Its element count.
        expected: usize,
        /// Given.
        found: usize,
    },
    /// The step graph is invalid.
    #[error(transparent)]
    Graph(#[from] super::graph::GraphError),
    /// The workers stopped with tasks left (a schedule that deadlocks).
    #[error("the workers stopped after {done} of {total} tasks")]
    Stuck {
        /// Tasks run.
        done: usize,
        /// Tasks in all.
        total: usize,
    },
}

/// Rounds `v` to what an element of `dtype` stores.
pub fn round_to(dtype: DType, v: f32) -> f32 {
    dtype.round(v)
}

/// The host values of every tensor of a step graph (row-major f32, rounded to each tensor's
/// element type), all zero at first.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensors {
    values: Vec<Tensor<f32>>,
    names: Vec<String>,
    dtypes: Vec<DType>,
    kinds: Vec<TensorKind>,
}

impl HostTensors {
    /// Zeros for every tensor of `g`.
    pub fn zeros(g: &StepGraph) -> HostTensors {
        HostTensors {
            values: g.tensors().iter().map(|t| Tensor::full(&t.desc.shape, 0.0)).collect(),
            names: g.tensors().iter().map(|t| t.name.clone()).collect(),
            dtypes: g.tensors().iter().map(|t| t.desc.dtype).collect(),
            kinds: g.tensors().iter().map(|t| t.kind).collect(),
        }
    }

    /// Sets a tensor's values (row-major), rounded to its element type.
    pub fn set(&mut self, t: TensorId, values: &[f32]) -> Result<(), ExecError> {
        let dst = &mut self.values[t.0];
        if values.len() != dst.data.len() {
            return Err(ExecError::Values {
                tensor: self.names[t.0].clone(),
                expected: dst.data.len(),
                found: values.len(),
            });
        }
        let dtype = self.dtypes[t.0];
        dst.data.iter_mut().zip(values).for_each(|(d, &v)| *d = round_to(dtype, v));
        Ok(())
    }

    /// A tensor's values.
    pub fn get(&self, t: TensorId) -> &[f32] {
        &self.values[t.0].data
    }

    /// A tensor's values as a shaped tensor.
    pub fn tensor(&self, t: TensorId) -> &Tensor<f32> {
        &self.values[t.0]
    }

    fn round_region(&mut self, r: &Region) {
        let dtype = self.dtypes[r.tensor.0];
        if dtype == DType::F32 {
            return;
        }
        let t = &mut self.values[r.tensor.0];
        for_each_offset(&t.shape, r, |o| t.data[o] = round_to(dtype, t.data[o]));
    }
}

/// Calls `f` with the row-major offset of every element of box `r` in a tensor of `shape`.
fn for_each_offset(shape: &[usize], r: &Region, mut f: impl FnMut(usize)) {
    let strides = crate::ir::row_major_strides(shape);
    if r.volume() == 0 {
        return;
    }
    let mut idx = r.lo.clone();
    loop {
        f(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        let mut d = idx.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < r.hi[d] {
                break;
            }
            idx[d] = r.lo[d];
        }
    }
}

/// Runs tile `tile` of operator `op`, rounding what it writes to the tensors' element types.
fn run_tile(
    g: &StepGraph,
    op: usize,
    tile: [usize; 3],
    state: &mut HostTensors,
    params: &[i32],
) -> Result<(), ExecError> {
    let o = &g.ops()[op];
    match &o.kind {
        OpKind::Block(bg) => {
            let inputs: Vec<&Tensor<f32>> = o.inputs.iter().map(|t| &state.values[t.0]).collect();
            let saved = evaluate_block_tile(bg, &F32, &inputs, tile);
            for ((offset, data), &out) in saved.into_iter().zip(&o.outputs) {
                state.values[out.0].write_region(&offset, &data);
                state.round_region(&Region::at(out, offset, &data.shape));
            }
            Ok(())
        }
        OpKind::Builtin(b) => {
            let mut out_values: Vec<Vec<f32>> =
                o.outputs.iter().map(|t| std::mem::take(&mut state.values[t.0].data)).collect();
            let result = {
                let inputs: Vec<(&[f32], &crate::ir::TensorDesc)> =
                    o.inputs.iter().map(|t| (state.values[t.0].data.as_slice(), &g.tensor(*t).desc)).collect();
                let names = |s: IndexSource| match s {
                    IndexSource::Input(i) => format!("tensor `{}`", g.tensor(o.inputs[i]).name),
                    IndexSource::Param(p) => format!("runtime parameter `{}`", g.params()[p]),
                };
                let mut outs: Vec<(&mut [f32], &crate::ir::TensorDesc)> = out_values
                    .iter_mut()
                    .zip(&o.outputs)
                    .map(|(v, t)| (v.as_mut_slice(), &g.tensor(*t).desc))
                    .collect();
                b.run_tile(tile, &inputs, &mut outs, params, &names)
            };
            for (t, v) in o.outputs.iter().zip(out_values) {
                state.values[t.0].data = v;
            }
            let ins: Vec<_> = o.inputs.iter().map(|&t| (t, &g.tensor(t).desc)).collect();
            let outs: Vec<_> = o.outputs.iter().map(|&t| (t, &g.tensor(t).desc)).collect();
            for w in b.regions(tile, &ins, &outs).1 {
                state.round_region(&w);
            }
            result.map_err(|error| ExecError::Index { task: tile_name(g, op, tile), error })
        }
    }
}

fn tile_name(g: &StepGraph, op: usize, tile: [usize; 3]) -> String {
    format!("{}[{},{},{}]", g.ops()[op].name, tile[0], tile[1], tile[2])
}

/// One step of `g` on the CPU, operator by operator in dataflow order, each operator's tiles in
/// order: the meaning of a step graph.
pub fn reference_step(g: &StepGraph, state: &mut HostTensors, params: &[i32]) -> Result<(), ExecError> {
    let order = g.order()?;
    for op in order {
        for tile in tiles(g.ops()[op.0].grid) {
            run_tile(g, op.0, tile, state, params)?;
        }
    }
    Ok(())
}

/// A small deterministic generator (splitmix64): the executor's interleavings and test data.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// One step of a compiled graph on the CPU the way the resident kernel runs it: every worker
/// walks its list; a worker whose next task's counters are complete may run it; which one runs
/// next is drawn from `seed`. Buffers are poisoned (NaN) first, and a task that reads an
/// unwritten buffer element is an error naming it.
pub fn execute_step(c: &Compiled, state: &mut HostTensors, params: &[i32], seed: u64) -> Result<(), ExecError> {
    let g = &c.graph;
    let mut written: Vec<Option<Vec<bool>>> = vec![None; g.tensors().len()];
    for (i, t) in g.tensors().iter().enumerate() {
        if t.kind == TensorKind::Buffer {
            state.values[i].data.fill(f32::NAN);
            written[i] = Some(vec![false; state.values[i].data.len()]);
        }
    }
    let sync = &c.sync;
    let mut count = vec![0u32; sync.counters.len()];
    let mut head = vec![0usize; c.schedule.workers.len()];
    let mut rng = SplitMix(seed);
    let total = c.tasks.len();
    let mut done = 0;
    while done < total {
        let runnable: Vec<usize> = (0..head.len())
            .filter(|&w| {
                c.schedule.workers[w]
                    .get(head[w])
                    .is_some_and(|&t| sync.waits[t].iter().all(|&k| count[k] >= sync.counters[k].triggers))
            })
            .collect();
        if runnable.is_empty() {
            return Err(ExecError::Stuck { done, total });
        }
        let w = runnable[(rng.next_u64() % runnable.len() as u64) as usize];
        let t = c.schedule.workers[w][head[w]];
        let task = &c.tasks[t];
        for r in &task.reads {
            if let Some(flags) = &written[r.tensor.0] {
                let shape = &state.values[r.tensor.0].shape;
                let mut missing = false;
                for_each_offset(shape, r, |o| missing |= !flags[o]);
                if missing {
                    return Err(ExecError::Unwritten {
                        task: tile_name(g, task.op.0, task.tile),
                        tensor: g.tensor(r.tensor).name.clone(),
                        lo: r.lo.clone(),
                        hi: r.hi.clone(),
                    });
                }
            }
        }
        run_tile(g, task.op.0, task.tile, state, params)?;
        for r in &task.writes {
            if let Some(flags) = &mut written[r.tensor.0] {
                let shape = state.values[r.tensor.0].shape.clone();
                for_each_offset(&shape, r, |o| flags[o] = true);
            }
        }
        for &k in &sync.signals[t] {
            count[k] += 1;
        }
        head[w] += 1;
        done += 1;
    }
    Ok(())
}
