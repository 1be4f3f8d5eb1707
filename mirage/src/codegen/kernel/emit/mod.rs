//! The emitters: CUDA text for a [`KernelPlan`], one module per part of the kernel.
//!
//! Nothing here decides anything the plan holds (tiles, copies, sections, groups, register
//! chains, stages, matmul and reduction strategies); the emitters only choose the text.
//!
//! The kernel body names the block it works on only through [`BLOCK_INDEX`] (defined once, from
//! `blockIdx`, by the skeleton), so the same body can later be emitted as a device function
//! parameterized by a tile index.

mod accum;
mod copy;
mod expr;
mod gather;
mod groups;
mod mma;
mod ops;
mod reduce;
mod rope;
mod save;
mod skeleton;

pub(super) use skeleton::{emit_kernel, emit_task_body};

use crate::ir::{BlockGraph, TensorRef};

use super::KernelSizes;
use super::planner::{KernelPlan, Tile};

/// The C names of the block's index along x, y and z in the kernel body.
const BLOCK_INDEX: [&str; 3] = ["bx", "by", "bz"];

/// The kernel parameter of block-graph input `j`.
fn input_param(j: usize) -> String {
    format!("in{j}")
}

/// The kernel parameter of block-graph output `k`.
fn output_param(k: usize) -> String {
    format!("out{k}")
}

/// The register value (mma accumulator fragments `[band][tile][4]`) of node `i`.
fn register_value(i: usize) -> String {
    format!("r{i}")
}

/// The register accumulator (`[fragment][4]`) of node `i`.
fn register_accumulator(i: usize) -> String {
    format!("racc{i}")
}

/// The preloaded A fragments (`[band][k-step][4]`) of row-owned matmul `i`.
fn preloaded_a(i: usize) -> String {
    format!("pa{i}")
}

/// The text writer of one kernel and the plan it writes.
struct Emitter<'a> {
    plan: &'a KernelPlan<'a>,
    sizes: &'a KernelSizes,
    /// The plan's bulk-copied tiles ([`KernelPlan::bulk_tiles`]) when this function may use the
    /// bulk-copy engine (a `__global__` kernel of static sizes); empty otherwise.
    bulk: Vec<usize>,
    out: String,
}

impl<'a> Emitter<'a> {
    fn new(plan: &'a KernelPlan<'a>, sizes: &'a KernelSizes) -> Self {
        Emitter { plan, sizes, bulk: Vec::new(), out: String::new() }
    }

    /// The size parameter bounding dim 0 of block-graph operand `j`, if it is runtime-sized.
    fn input_size(&self, j: usize) -> Option<&'a str> {
        let sizes: &'a KernelSizes = self.sizes;
        sizes.inputs.get(j).copied().flatten().and_then(|p| sizes.params.get(p)).map(String::as_str)
    }

    /// The size parameter bounding dim 0 of block-graph output `k`, if it is runtime-sized.
    fn output_size(&self, k: usize) -> Option<&'a str> {
        let sizes: &'a KernelSizes = self.sizes;
        sizes.outputs.get(k).copied().flatten().and_then(|p| sizes.params.get(p)).map(String::as_str)
    }

    fn bg(&self) -> &'a BlockGraph {
        self.plan.bg
    }

    /// The tile of operand `t`.
    fn tile(&self, t: TensorRef) -> &'a Tile {
        self.plan.tile(t)
    }

    /// One line at `indent` (two spaces per level).
    fn line(&mut self, indent: usize, s: &str) {
        for _ in 0..indent {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// `for (int e = tid; e < n; e += THREADS) { body(e) }`.
    fn elementwise(&mut self, indent: usize, n: usize, body: &str) {
        self.line(indent, &format!("for (int e = tid; e < {n}; e += {}) {{", self.plan.threads));
        for l in body.lines() {
            self.line(indent + 1, l);
        }
        self.line(indent, "}");
    }

    /// A block-wide barrier.
    fn sync(&mut self, indent: usize) {
        self.line(indent, "__syncthreads();");
    }
}
