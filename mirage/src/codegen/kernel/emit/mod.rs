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

pub(super) use skeleton::{emit_dependent_kernel, emit_kernel, emit_task_body};

use crate::ir::{AccKind, BlockGraph, BlockOp, TensorRef};

use super::planner::{KernelPlan, Tile};
use super::{DimSize, KernelSizes};

/// The C names of the block's index along x, y and z in the kernel body.
const BLOCK_INDEX: [&str; 3] = ["bx", "by", "bz"];

/// The most trips of a thread-strided loop [`Emitter::open_strided`] unrolls fully.
const UNROLL_TRIPS: usize = 8;

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

/// Where a tile dim meets a runtime size: the tile's element `j` along the dim is valid (not
/// padding) iff `offset + j < bound` (C expressions; the offset may name the loop's `it`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bound {
    /// The coordinate of the tile's first element along the dim in its device tensor.
    pub offset: String,
    /// The number of valid elements of the device tensor along the dim.
    pub bound: String,
    /// The offset in the loop's first iteration (the offset itself when the loop does not walk
    /// the dim): an accumulator over the iterations holds an element wherever some iteration had
    /// one, so its tile's bound starts there.
    pub first: String,
}

/// The text writer of one kernel and the plan it writes.
struct Emitter<'a> {
    plan: &'a KernelPlan<'a>,
    sizes: &'a KernelSizes,
    /// The plan's bulk-copied tiles ([`KernelPlan::bulk_tiles`]) when this function may use the
    /// bulk-copy engine (a `__global__` kernel of static sizes); empty otherwise.
    bulk: Vec<usize>,
    /// Per node, per port, per dim: where the tile meets a runtime size ([`tile_bounds`]).
    bounds: Vec<Vec<Vec<Option<Bound>>>>,
    out: String,
}

impl<'a> Emitter<'a> {
    fn new(plan: &'a KernelPlan<'a>, sizes: &'a KernelSizes) -> Self {
        let bounds = tile_bounds(plan, sizes);
        Emitter { plan, sizes, bulk: Vec::new(), bounds, out: String::new() }
    }

    /// How the dims of block-graph operand `j` follow the sizes (empty: fixed).
    fn input_dims(&self, j: usize) -> &'a [DimSize] {
        let sizes: &'a KernelSizes = self.sizes;
        sizes.inputs.get(j).map(Vec::as_slice).unwrap_or(&[])
    }

    /// How the dims of block-graph output `k` follow the sizes (empty: fixed).
    fn output_dims(&self, k: usize) -> &'a [DimSize] {
        let sizes: &'a KernelSizes = self.sizes;
        sizes.outputs.get(k).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The for-loop's trip count: `iters` (defined by the skeleton from the size) when the loop
    /// walks a runtime-sized dim, the literal range otherwise.
    fn trip(&self) -> String {
        if self.sizes.forloop.is_some() { "iters".to_string() } else { self.bg().forloop_range().to_string() }
    }

    /// The condition that element `r` (a C expression) along `dim` of tile `t` is not padding,
    /// when that dim meets a runtime size.
    fn valid_along(&self, t: TensorRef, dim: usize, r: &str) -> Option<String> {
        let b = self.bounds.get(t.node)?.get(t.port)?.get(dim)?.as_ref()?;
        Some(format!("({} + {r}) < {}", b.offset, b.bound))
    }

    /// The condition that the element at multi-index `idx` of tile `t` is not padding (none when
    /// no dim of the tile meets a runtime size).
    fn valid_at(&self, t: TensorRef, idx: &[String]) -> Option<String> {
        let conds: Vec<String> = (0..idx.len()).filter_map(|d| self.valid_along(t, d, &idx[d])).collect();
        if conds.is_empty() { None } else { Some(conds.join(" && ")) }
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

    /// `body(e)` for `e = tid, tid + THREADS, …` below `n` (see [`Emitter::open_strided`]).
    fn elementwise(&mut self, indent: usize, n: usize, body: &str) {
        let close = self.open_strided(indent, "e", "tid", n, self.plan.threads);
        for l in body.lines() {
            self.line(indent + close, l);
        }
        self.close(indent, close);
    }

    /// Opens the loop of a strided index `var = start, start + step, …` below `n`, where
    /// `start` is a thread's (or warp's) place in its stride, in `0..step`: every thread then
    /// runs the same ⌈n / step⌉ trips, all but the last full. So the loop has a compile-time
    /// trip count (unrolled up to [`UNROLL_TRIPS`] trips), becomes one `if` when `n ≤ step`, and
    /// guards only its last trip when `step` does not divide `n` — straight code where a loop
    /// whose trip count depends on the thread left the compiler a remainder loop and its
    /// branches (the megakernel's task bodies stalled on instruction fetch at them: DECISIONS,
    /// change 45). Declares `const int var`; returns the braces [`Emitter::close`] shuts.
    fn open_strided(&mut self, indent: usize, var: &str, start: &str, n: usize, step: usize) -> usize {
        let (full, trips) = (n / step, n.div_ceil(step));
        if trips <= 1 {
            let open = if n == step { "{".to_string() } else { format!("if ({start} < {n}) {{") };
            self.line(indent, &format!("{open} const int {var} = {start};"));
            return 1;
        }
        let q = format!("q_{var}");
        if trips <= UNROLL_TRIPS {
            self.line(indent, "#pragma unroll");
        }
        self.line(indent, &format!("for (int {q} = 0; {q} < {trips}; ++{q}) {{"));
        self.line(indent + 1, &format!("const int {var} = {start} + {q} * {step};"));
        if full == trips {
            return 1;
        }
        self.line(indent + 1, &format!("if ({q} < {full} || {var} < {n}) {{"));
        2
    }

    /// Shuts `braces` nested blocks opened at `indent`.
    fn close(&mut self, indent: usize, braces: usize) {
        for b in (0..braces).rev() {
            self.line(indent + b, "}");
        }
    }

    /// A block-wide barrier.
    fn sync(&mut self, indent: usize) {
        self.line(indent, "__syncthreads();");
    }
}

/// The number of valid elements along a dim sized as `s` (none for a fixed dim).
pub(super) fn size_bound(sizes: &KernelSizes, s: DimSize) -> Option<String> {
    match s {
        DimSize::Fixed => None,
        DimSize::Var(p) => Some(sizes.params[p].clone()),
        DimSize::Blocks { param, slab, tile } => {
            Some(format!("((({} + {}) / {slab}) * {tile})", sizes.params[param], slab - 1))
        }
        DimSize::Stacked { param, .. } => Some(sizes.params[param].clone()),
    }
}

/// The coordinate compared with [`size_bound`] for a device coordinate `coord` along a dim sized
/// as `s`: the coordinate itself, or for stacked copies its position inside its copy.
pub(super) fn bound_coord(s: DimSize, coord: &str) -> String {
    match s {
        DimSize::Stacked { whole, .. } => format!("(({coord}) % {whole})"),
        _ => coord.to_string(),
    }
}

/// The row-major strides (C expressions) of a device tensor of compile-size `shape` whose dims
/// follow the sizes as `dims` says: a runtime-sized dim ([`DimSize::Var`]) at its size, the
/// others (fixed dims, per-block parts laid out at the upper bound) at their compile extent.
pub(super) fn layout_strides(sizes: &KernelSizes, shape: &[usize], dims: &[DimSize]) -> Vec<String> {
    (0..shape.len())
        .map(|d| {
            let mut fixed = 1usize;
            let mut vars = Vec::new();
            for (e, &extent) in shape.iter().enumerate().skip(d + 1) {
                match dims.get(e) {
                    Some(DimSize::Var(p)) => vars.push(sizes.params[*p].clone()),
                    _ => fixed *= extent,
                }
            }
            if vars.is_empty() {
                fixed.to_string()
            } else if fixed == 1 {
                vars.join("*")
            } else {
                format!("{fixed}*{}", vars.join("*"))
            }
        })
        .collect()
}

/// Per node, per port, per dim of `plan`'s block graph: where the tile meets a runtime size of
/// `sizes` — an input tile along a runtime-sized dim of its operand (its offset the block's and
/// the iteration's), followed through the operators as `mirage::dims` follows the padding
/// (matmuls keep their operands' outer dims, element-wise operators either operand's, a
/// reduction drops the reduced dim). Empty bounds for a static kernel.
pub(super) fn tile_bounds(plan: &KernelPlan<'_>, sizes: &KernelSizes) -> Vec<Vec<Vec<Option<Bound>>>> {
    let bg = plan.bg;
    let mut out: Vec<Vec<Vec<Option<Bound>>>> = Vec::with_capacity(bg.nodes().len());
    for (i, nd) in bg.nodes().iter().enumerate() {
        let ins: Vec<Vec<Option<Bound>>> = nd.inputs.iter().map(|t| out[t.node][t.port].clone()).collect();
        let shape_of = |t: &TensorRef| bg.nodes()[t.node].outputs[t.port].shape.clone();
        let reduced = |dim: usize| {
            let mut o = ins[0].clone();
            if let Some(x) = o.get_mut(dim) {
                *x = None;
            }
            o
        };
        let ports: Vec<Vec<Option<Bound>>> = match &nd.op {
            BlockOp::Input { input, .. } => {
                let dims = sizes.inputs.get(*input).map(Vec::as_slice).unwrap_or(&[]);
                let rank = nd.outputs[0].shape.len();
                if dims.is_empty() {
                    vec![vec![None; rank]]
                } else {
                    let boff = copy::block_offset(bg, i, "it");
                    let first = copy::block_offset(bg, i, "0");
                    vec![
                        (0..rank)
                            .map(|d| {
                                size_bound(sizes, dims[d]).map(|bound| Bound {
                                    offset: bound_coord(dims[d], &boff[d]),
                                    bound,
                                    first: bound_coord(dims[d], &first[d]),
                                })
                            })
                            .collect(),
                    ]
                }
            }
            BlockOp::Output { .. } => vec![],
            BlockOp::Matmul => {
                let mut o = ins[0].clone();
                let r = o.len();
                o[r - 1] = ins[1][r - 1].clone();
                vec![o]
            }
            BlockOp::Binary { .. } => {
                let (sa, sb) = (shape_of(&nd.inputs[0]), shape_of(&nd.inputs[1]));
                let o = (0..sa.len())
                    .map(|d| match (&ins[0][d], &ins[1][d]) {
                        (Some(a), _) if sa[d] > 1 || sb[d] == 1 => Some(a.clone()),
                        (_, Some(b)) if sb[d] > 1 || sa[d] == 1 => Some(b.clone()),
                        _ => None,
                    })
                    .collect();
                vec![o]
            }
            BlockOp::ReduceSum { dim }
            | BlockOp::ReduceSumTo { dim, .. }
            | BlockOp::ReduceMax { dim }
            | BlockOp::Argmax { dim } => vec![reduced(*dim)],
            BlockOp::RunningMax { dim } => vec![reduced(*dim), reduced(*dim)],
            BlockOp::Gather { .. } => {
                let mut o = ins[0].clone();
                o.push(None);
                vec![o]
            }
            BlockOp::Accum { acc } => {
                let mut o = match acc {
                    AccKind::Sum | AccKind::Max | AccKind::Rescale => ins[0].clone(),
                    _ => reduced(ins[0].len() - 1),
                };
                for b in o.iter_mut().flatten() {
                    b.offset = b.first.clone();
                }
                vec![o]
            }
            _ => vec![ins[0].clone(); nd.outputs.len()],
        };
        out.push(ports);
    }
    out
}
