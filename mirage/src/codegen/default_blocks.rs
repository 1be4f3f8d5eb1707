//! Default block graphs for kernel-level operators.
//!
//! Code generation has one path: block graph → one CUDA `__global__`. Every kernel-level operator
//! that is not already [`KernelOp::Custom`] is therefore rewritten by [`lower_to_blocks`] into a
//! `Custom` node holding an equivalent block graph ([`default_block_graph`]) chosen for an
//! H100/H200 (132 SMs). Every block graph built here reads `input iterators → in-loop operators →
//! accumulator → (epilogue) → output savers`; a kernel without a real loop has
//! `forloop_range == 1` and uses `acc_sum` as the identity accumulator.
//!
//! Grid and tile policy:
//! - **Element-wise** (unary, binary, concat, rms_norm): the output's dims (except a dim that must
//!   stay whole: the concat dim, the normalized last dim) are split by exact divisors across up to
//!   three grid axes (innermost split dim on `x`), aiming for tiles of about
//!   `clamp(N / 132, 1024, 4096)` elements — so about 132 blocks or more once the tensor is big
//!   enough — while keeping contiguous runs of at least 64 elements in every operand's layout.
//!   Broadcast operands (size-1 dims) are replicated along the axes that split those dims.
//! - **reduce_sum / reduce_max** over `d`: `d` stays whole in the block's slab, the other dims are
//!   split as above (the tile target counts the reduced extent); when a block's slab is longer
//!   than 8192 elements, `d` is tiled by the for-loop and folded with `acc_sum` / `acc_max`.
//! - **matmul** `[.., m, k] x [.., k, n]`: batch dims get one grid axis each (whole), `n` and `m`
//!   are split into `tn × tm` output tiles (multiples of 16 up to 256, at most 128×128 = 16384
//!   accumulators) chosen by a simple roofline model counting 132-SM waves; `k` is tiled by the
//!   for-loop (`tk` ∈ {128, 64, 32} when it divides and fits the shared-memory budget) and
//!   summed by `acc_sum`.
//! - **rms_norm**: whole rows per block (the block `rms_norm` needs the whole last dim), the
//!   weight replicated across the grid and multiplied in inside the loop body.
//! - **rope**: whole rows per block (every head of a row), `cos`/`sin` split with the leading
//!   dims they share with `x`.
//! - **gather**: the output split like an element-wise result; the ids are loaded by an input
//!   iterator, the table rows read from device memory by the block `gather`.
//! - **argmax** over `d`: `d` whole in every block (no loop: the position is counted within the
//!   tile), the other dims split.
//!
//! Threads: 128, or 256 for tiles over 2048 elements (matmul: 256 for tiles of 128×64 and up).

use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, GridMap, IrError, KernelGraph, KernelOp, TensorDesc, TensorRef,
    check_shape, check_strides, infer_kernel_op,
};

/// Streaming multiprocessors of the target GPU (H100 SXM / H200).
const NUM_SMS: usize = 132;
/// Largest factor one grid axis may split a dim by (keeps `grid.y`/`grid.z` ≤ 65535).
const MAX_AXIS_SPLIT: usize = 1 << 15;
/// Element-wise tiles aim for this many elements at most ...
const MAX_TILE_TARGET: f64 = 4096.0;
/// ... and at least this many (below it, blocks are too small to be worth launching).
const MIN_TILE_TARGET: f64 = 1024.0;
/// A reduction slab longer than this is tiled by the for-loop.
const MAX_REDUCE_TILE: usize = 8192;
/// A reduction slab may stay whole (no loop) up to this size when its extent has no good divisor.
const MAX_WHOLE_REDUCE_TILE: usize = 1 << 16;
/// The contiguous run (in elements) a tile should keep in every operand's layout.
const GOOD_RUN: usize = 64;
/// Shared-memory budget (bytes) of a matmul's double-buffered operand tiles.
const MATMUL_SMEM_BUDGET: usize = 96 * 1024;
/// Largest matmul output tile (f32 accumulators in registers).
const MAX_MATMUL_TILE: usize = 128 * 128;
/// Per-SM tensor-core throughput over per-SM memory bandwidth, in MACs per element loaded.
const MACS_PER_LOAD: f64 = 256.0;

/// The block graph of one kernel-level operator applied to operands `inputs`.
///
/// Errors when the operator's shape rule fails on `inputs`, for `input`/`output` (which are not
/// kernels), or when no block graph can express the operator on these shapes (for example a
/// batched matmul whose batch exceeds the grid); the error always names the operator. A
/// `custom` operator returns its own block graph.
pub fn default_block_graph(op: &KernelOp, inputs: &[TensorDesc]) -> Result<BlockGraph, IrError> {
    let name = op.name();
    for d in inputs {
        check_shape(&name, &d.shape)
            .and_then(|()| check_strides(&name, &d.shape, &d.strides))
            .map_err(|e| rename(&name, inputs, e))?;
    }
    let refs: Vec<&TensorDesc> = inputs.iter().collect();
    let outputs = infer_kernel_op(op, &refs).map_err(|e| rename(&name, inputs, e))?;
    let built = match op {
        KernelOp::Input { .. } | KernelOp::Output { .. } => {
            return Err(IrError::rule(
                &name,
                fmt_inputs(inputs),
                "program inputs and outputs are not kernels: they have no block graph",
            ));
        }
        KernelOp::Custom { block } => return Ok((**block).clone()),
        KernelOp::Unary { op } => elementwise(inputs, &outputs[0], |b, t| b.unary(*op, t[0])),
        KernelOp::Binary { op } => elementwise(inputs, &outputs[0], |b, t| b.binary(*op, t[0], t[1])),
        KernelOp::Concat { dim } => {
            let mut whole = vec![false; outputs[0].rank()];
            whole[*dim] = true;
            elementwise_keep(inputs, &outputs[0], &whole, |b, t| b.op(BlockOp::Concat { dim: *dim }, &[t[0], t[1]]))
        }
        KernelOp::RmsNorm { eps } => {
            let mut whole = vec![false; outputs[0].rank()];
            whole[outputs[0].rank() - 1] = true;
            elementwise_keep(inputs, &outputs[0], &whole, |b, t| {
                let y = b.op(BlockOp::RmsNorm { eps: *eps }, &[t[0]])?;
                match t.get(1) {
                    Some(&w) => b.binary(BinaryOp::Mul, y, w),
                    None => Ok(y),
                }
            })
        }
        KernelOp::Rope { layout } => {
            // Whole rows of x per block (every head of a row together); cos and sin follow the
            // split of the leading dims they do not broadcast.
            let mut whole = vec![false; outputs[0].rank()];
            whole[outputs[0].rank() - 1] = true;
            elementwise_keep(inputs, &outputs[0], &whole, |b, t| {
                b.op(BlockOp::Rope { layout: *layout }, &[t[0], t[1], t[2]])
            })
        }
        KernelOp::Gather => gather(&inputs[0], &inputs[1], &outputs[0]),
        KernelOp::Argmax { dim } => argmax(&inputs[0], *dim),
        KernelOp::ReduceSum { dim } => reduction(&inputs[0], *dim, false),
        KernelOp::ReduceMax { dim } => reduction(&inputs[0], *dim, true),
        KernelOp::Matmul => matmul(&inputs[0], &inputs[1]),
    };
    let block = built.map_err(|e| rename(&name, inputs, e))?;
    if block.output_descs() != outputs {
        return Err(IrError::rule(
            &name,
            fmt_inputs(inputs),
            format!("internal: the default block graph writes {:?}, the operator {:?}", block.output_descs(), outputs),
        ));
    }
    Ok(block)
}

/// The same graph with every compute node that is not `custom` replaced by a `custom` node holding
/// its [`default_block_graph`]. Inputs, outputs and existing custom nodes are kept as they are;
/// node numbering (and so the wiring and the order of outputs) is unchanged.
pub fn lower_to_blocks(g: &KernelGraph) -> Result<KernelGraph, IrError> {
    let mut out = KernelGraph::new();
    for node in g.nodes() {
        let op = match &node.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } | KernelOp::Custom { .. } => node.op.clone(),
            op => {
                let descs = node.inputs.iter().map(|&t| g.desc(t).cloned()).collect::<Result<Vec<_>, _>>()?;
                KernelOp::Custom { block: Box::new(default_block_graph(op, &descs)?) }
            }
        };
        out.push(op, &node.inputs)?;
    }
    Ok(out)
}

fn fmt_inputs(inputs: &[TensorDesc]) -> String {
    inputs.iter().map(|d| format!("{:?}:{}", d.shape, d.dtype)).collect::<Vec<_>>().join(", ")
}

/// Makes an error name the kernel operator `name` (keeping the inner message).
fn rename(name: &str, inputs: &[TensorDesc], e: IrError) -> IrError {
    match e {
        IrError::Rule { ref op, .. } if op == name => e,
        other => IrError::rule(name, fmt_inputs(inputs), format!("no default block graph: {other}")),
    }
}

/// How a kernel's grid splits its planning shape: grid size per axis, and the dim each axis
/// splits.
#[derive(Clone, Copy, Debug)]
struct Split {
    grid: [usize; 3],
    dims: GridMap,
}

impl Split {
    fn one() -> Self {
        Split { grid: [1; 3], dims: [None; 3] }
    }

    /// The tile of `shape` (the planning shape) one block owns.
    fn tile(&self, shape: &[usize]) -> Vec<usize> {
        let mut t = shape.to_vec();
        for a in 0..3 {
            if let Some(d) = self.dims[a] {
                t[d] /= self.grid[a];
            }
        }
        t
    }

    /// The imap of an operand of shape `operand` (same rank as the planning shape `full`):
    /// axes splitting a dim the operand broadcasts (size 1) replicate it.
    fn imap(&self, operand: &[usize], full: &[usize]) -> GridMap {
        self.dims.map(|d| d.filter(|&d| operand.get(d) == full.get(d)))
    }
}

/// Candidate split factors of an extent: for each power of two up to [`MAX_AXIS_SPLIT`], the
/// largest divisor not above it.
fn split_factors(n: usize) -> Vec<usize> {
    let divisors: Vec<usize> = (1..=n.min(MAX_AXIS_SPLIT)).filter(|&f| n.is_multiple_of(f)).collect();
    let mut out: Vec<usize> =
        (0..=15).filter_map(|p| divisors.iter().copied().filter(|&f| f <= 1 << p).max()).collect();
    out.dedup();
    out
}

/// The contiguous run (elements) of a `tile` of a tensor with `shape` and `strides`.
fn contiguous_run(shape: &[usize], strides: &[usize], tile: &[usize]) -> usize {
    let mut dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] > 1).collect();
    dims.sort_by_key(|&d| strides[d]);
    let mut run = 1usize;
    for d in dims {
        if strides[d] != run {
            break;
        }
        run = run.saturating_mul(tile[d]);
        if tile[d] != shape[d] {
            break;
        }
    }
    run
}

/// Chooses how to split `shape` across the grid: dims marked `whole` are never split; tiles aim
/// at `clamp(N / 132, 1024, 4096)` elements (N = elements of `shape`) while keeping contiguous
/// runs in every layout of `layouts` (strides of tensors with this shape).
fn plan_split(shape: &[usize], whole: &[bool], layouts: &[&[usize]]) -> Split {
    let total: f64 = shape.iter().map(|&n| n as f64).product();
    let target = (total / NUM_SMS as f64).clamp(MIN_TILE_TARGET, MAX_TILE_TARGET);
    let options: Vec<Vec<usize>> = (0..shape.len())
        .map(|d| if whole.get(d).copied().unwrap_or(true) { vec![1] } else { split_factors(shape[d]) })
        .collect();
    let best_runs: Vec<usize> = layouts.iter().map(|s| contiguous_run(shape, s, shape).min(GOOD_RUN)).collect();
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut factors = vec![1usize; shape.len()];
    let mut visit = |factors: &[usize]| {
        let axes = factors.iter().filter(|&&f| f > 1).count();
        if axes > 3 {
            return;
        }
        let blocks: f64 = factors.iter().map(|&f| f as f64).product();
        let tile: Vec<usize> = shape.iter().zip(factors).map(|(&n, &f)| n / f).collect();
        let mut cost = (total / blocks / target).ln().abs() + 0.05 * axes as f64;
        for (s, &good) in layouts.iter().zip(&best_runs) {
            let run = contiguous_run(shape, s, &tile);
            if run < good {
                cost += 0.5 * (good as f64 / run as f64).ln() / layouts.len() as f64;
            }
            // Among equally sized tiles, prefer longer contiguous runs (fewer, wider rows).
            cost -= 0.03 * (run.min(4096) as f64).ln() / layouts.len() as f64;
        }
        if best.as_ref().is_none_or(|(c, _)| cost < *c - 1e-9) {
            best = Some((cost, factors.to_vec()));
        }
    };
    enumerate(&options, 0, &mut factors, &mut visit);
    let Some((_, factors)) = best else { return Split::one() };
    // Innermost split dim on x (neighbouring blocks read neighbouring memory).
    let mut split = Split::one();
    for (a, d) in (0..shape.len()).rev().filter(|&d| factors[d] > 1).enumerate() {
        split.grid[a] = factors[d];
        split.dims[a] = Some(d);
    }
    split
}

fn enumerate(options: &[Vec<usize>], d: usize, factors: &mut Vec<usize>, visit: &mut impl FnMut(&[usize])) {
    if d == options.len() {
        visit(factors);
        return;
    }
    for &f in &options[d] {
        factors[d] = f;
        enumerate(options, d + 1, factors, visit);
    }
    factors[d] = 1;
}

fn threads_for(tile_elems: usize) -> usize {
    if tile_elems > 2048 { 256 } else { 128 }
}

/// The output map of a split: every split axis concatenates along the dim it splits.
fn omap(split: &Split) -> GridMap {
    split.dims
}

/// An element-wise kernel: every dim may be split.
fn elementwise(
    inputs: &[TensorDesc],
    out: &TensorDesc,
    body: impl FnOnce(&mut BlockGraph, &[TensorRef]) -> Result<TensorRef, IrError>,
) -> Result<BlockGraph, IrError> {
    elementwise_keep(inputs, out, &vec![false; out.rank()], body)
}

/// An element-wise kernel over output `out` whose dims marked `whole` stay whole in each tile;
/// `body` maps the operands' tiles (one input iterator each) to the output tile, in the loop.
fn elementwise_keep(
    inputs: &[TensorDesc],
    out: &TensorDesc,
    whole: &[bool],
    body: impl FnOnce(&mut BlockGraph, &[TensorRef]) -> Result<TensorRef, IrError>,
) -> Result<BlockGraph, IrError> {
    let layouts: Vec<&[usize]> = std::iter::once(out.strides.as_slice())
        .chain(inputs.iter().filter(|d| d.shape == out.shape).map(|d| d.strides.as_slice()))
        .collect();
    let split = plan_split(&out.shape, whole, &layouts);
    let tile_elems = split.tile(&out.shape).iter().fold(1usize, |p, &n| p.saturating_mul(n));
    let mut b = BlockGraph::new(inputs.to_vec(), split.grid, threads_for(tile_elems), 1)?;
    let tiles = inputs
        .iter()
        .enumerate()
        .map(|(i, d)| b.input(i, split.imap(&d.shape, &out.shape), None))
        .collect::<Result<Vec<_>, _>>()?;
    let y = body(&mut b, &tiles)?;
    let acc = b.accum(AccKind::Sum, &[y])?;
    b.output(acc, omap(&split))?;
    Ok(b)
}

/// reduce_sum / reduce_max of `x` over `dim`.
fn reduction(x: &TensorDesc, dim: usize, max: bool) -> Result<BlockGraph, IrError> {
    let mut whole = vec![false; x.rank()];
    whole[dim] = true;
    let split = plan_split(&x.shape, &whole, &[&x.strides]);
    let slab = split.tile(&x.shape);
    let slab_elems: usize = slab.iter().fold(1usize, |p, &n| p.saturating_mul(n));
    let extent = x.shape[dim];
    let others = (slab_elems / extent).max(1);
    // Loop over `dim` in chunks of `td` when the slab is long.
    let td = if slab_elems <= MAX_REDUCE_TILE {
        extent
    } else {
        let fit = (1..=extent.min(MAX_REDUCE_TILE))
            .filter(|&t| extent.is_multiple_of(t) && t.saturating_mul(others) <= MAX_REDUCE_TILE)
            .max();
        match fit {
            Some(t) if t.saturating_mul(others) >= MIN_TILE_TARGET as usize => t,
            _ if slab_elems <= MAX_WHOLE_REDUCE_TILE => extent,
            Some(t) => t,
            None => 1,
        }
    };
    let frange = extent / td;
    let tile_elems = others.saturating_mul(td);
    let mut b = BlockGraph::new(vec![x.clone()], split.grid, threads_for(tile_elems), frange)?;
    let t = b.input(0, split.imap(&x.shape, &x.shape), (frange > 1).then_some(dim))?;
    let r = b.op(if max { BlockOp::ReduceMax { dim } } else { BlockOp::ReduceSum { dim } }, &[t])?;
    let acc = if max && frange > 1 { AccKind::Max } else { AccKind::Sum };
    let acc = b.accum(acc, &[r])?;
    b.output(acc, omap(&split))?;
    Ok(b)
}

/// `gather(table, ids)`: the output `[ids.., width]` split like an element-wise result (the
/// split of its leading dims splits the ids, that of its last dim the table's width); each block
/// loads its ids and reads its rows of the table from device memory.
fn gather(table: &TensorDesc, ids: &TensorDesc, out: &TensorDesc) -> Result<BlockGraph, IrError> {
    let r = ids.rank();
    let split = plan_split(&out.shape, &vec![false; out.rank()], &[&out.strides]);
    let tile_elems = split.tile(&out.shape).iter().fold(1usize, |p, &n| p.saturating_mul(n));
    let mut b = BlockGraph::new(vec![table.clone(), ids.clone()], split.grid, threads_for(tile_elems), 1)?;
    let ids_map: GridMap = split.dims.map(|d| d.filter(|&d| d < r));
    let table_map: GridMap = split.dims.map(|d| d.filter(|&d| d == r).map(|_| 1));
    let t = b.input(1, ids_map, None)?;
    let rows = b.op(BlockOp::Gather { table: 0, imap: table_map }, &[t])?;
    let acc = b.accum(AccKind::Sum, &[rows])?;
    b.output(acc, omap(&split))?;
    Ok(b)
}

/// `argmax(x, dim)`: `dim` whole in every block (the position is counted within the block's
/// slab), the other dims split as for a reduction; the position is taken after the (identity)
/// accumulator.
fn argmax(x: &TensorDesc, dim: usize) -> Result<BlockGraph, IrError> {
    let mut whole = vec![false; x.rank()];
    whole[dim] = true;
    let split = plan_split(&x.shape, &whole, &[&x.strides]);
    let tile_elems = split.tile(&x.shape).iter().fold(1usize, |p, &n| p.saturating_mul(n));
    let mut b = BlockGraph::new(vec![x.clone()], split.grid, threads_for(tile_elems), 1)?;
    let t = b.input(0, split.imap(&x.shape, &x.shape), None)?;
    let acc = b.accum(AccKind::Sum, &[t])?;
    let m = b.op(BlockOp::Argmax { dim }, &[acc])?;
    b.output(m, omap(&split))?;
    Ok(b)
}

/// Candidate tile extents of a matmul dim: multiples of 16 (else 8, else anything) dividing it,
/// up to 256.
fn matmul_tiles(n: usize) -> Vec<usize> {
    let divisors: Vec<usize> = (1..=n.min(256)).filter(|&t| n.is_multiple_of(t)).collect();
    for align in [16, 8] {
        let aligned: Vec<usize> = divisors.iter().copied().filter(|t| t.is_multiple_of(align)).collect();
        if !aligned.is_empty() {
            return aligned;
        }
    }
    let mut all = divisors;
    if n > 256 {
        all.push(n);
    }
    all
}

/// Assigns grid factors (in order of preference: x first) to axes; `None` when more than three
/// factors exceed 1 or a factor does not fit its axis.
fn assign_axes(factors: &[(usize, usize)]) -> Option<([usize; 3], GridMap)> {
    let used: Vec<(usize, usize)> = factors.iter().copied().filter(|&(f, _)| f > 1).collect();
    if used.len() > 3 {
        return None;
    }
    let mut order: Vec<(usize, usize)> = used;
    // grid.y and grid.z stop at 65535: the largest factor goes on x when needed.
    if order.iter().skip(1).any(|&(f, _)| f > 65535) {
        let (i, _) = order.iter().enumerate().max_by_key(|(_, (f, _))| *f)?;
        order.swap(0, i);
    }
    let mut grid = [1; 3];
    let mut dims = [None; 3];
    for (a, &(f, d)) in order.iter().enumerate() {
        let limit = if a == 0 { (1usize << 31) - 1 } else { 65535 };
        if f > limit {
            return None;
        }
        grid[a] = f;
        dims[a] = Some(d);
    }
    Some((grid, dims))
}

/// `a [.., m, k] x b [.., k, n]`.
fn matmul(a: &TensorDesc, b: &TensorDesc) -> Result<BlockGraph, IrError> {
    let r = a.rank();
    let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
    let elem = a.dtype.size_bytes();
    let batch: Vec<(usize, usize)> = (0..r - 2).rev().map(|d| (a.shape[d], d)).collect();
    let batch_blocks: f64 = batch.iter().map(|&(f, _)| f as f64).product();
    let mut best: Option<(f64, usize, usize, [usize; 3], GridMap)> = None;
    for &tm in &matmul_tiles(m) {
        for &tn in &matmul_tiles(n) {
            if tm.saturating_mul(tn) > MAX_MATMUL_TILE && (tm, tn) != (m, n) {
                continue;
            }
            let mut factors = vec![(n / tn, r - 1), (m / tm, r - 2)];
            factors.extend(&batch);
            let Some((grid, dims)) = assign_axes(&factors) else { continue };
            // Per unit of k: tensor-core work is quantized in waves of 132 blocks; memory traffic
            // (operand tiles) flows through the SMs that have blocks.
            let blocks = batch_blocks * (m / tm) as f64 * (n / tn) as f64;
            let sms = NUM_SMS as f64;
            let (pm, pn) = ((tm as f64 / 16.0).ceil() * 16.0, (tn as f64 / 8.0).ceil() * 8.0);
            let compute = (blocks / sms).ceil() * pm * pn / MACS_PER_LOAD;
            let memory = blocks * (tm as f64 + tn as f64) / blocks.min(sms);
            let cost = compute.max(memory);
            if best.as_ref().is_none_or(|(c, ..)| cost < *c * (1.0 - 1e-9)) {
                best = Some((cost, tm, tn, grid, dims));
            }
        }
    }
    let Some((_, tm, tn, grid, dims)) = best else {
        return Err(IrError::rule(
            "matmul",
            format!("{:?} x {:?}", a.shape, b.shape),
            "no grid fits: every batch dim needs its own grid axis (at most 3) within the grid limits",
        ));
    };
    let smem = |tk: usize| tm.saturating_add(tn).saturating_mul(tk).saturating_mul(elem).saturating_mul(2);
    let preferred: &[usize] = if tm.saturating_add(tn) <= 128 { &[128, 64, 32] } else { &[64, 128, 32] };
    let tk = preferred
        .iter()
        .copied()
        .find(|&t| k.is_multiple_of(t) && smem(t) <= MATMUL_SMEM_BUDGET)
        .or_else(|| (8..=128.min(k)).rev().find(|&t| k.is_multiple_of(t) && smem(t) <= MATMUL_SMEM_BUDGET))
        .or_else(|| (smem(k) <= MATMUL_SMEM_BUDGET).then_some(k))
        .or_else(|| (1..=128.min(k)).rev().find(|&t| k.is_multiple_of(t)))
        .unwrap_or(k);
    let threads = if tm.saturating_mul(tn) >= 128 * 64 { 256 } else { 128 };
    let split = Split { grid, dims };
    let mut g = BlockGraph::new(vec![a.clone(), b.clone()], grid, threads, k / tk)?;
    let mut amap = [None; 3];
    let mut bmap = [None; 3];
    for ax in 0..3 {
        match dims[ax] {
            Some(d) if d == r - 1 => bmap[ax] = Some(d),
            Some(d) if d == r - 2 => amap[ax] = Some(d),
            Some(d) => {
                amap[ax] = Some(d);
                bmap[ax] = Some(d);
            }
            None => {}
        }
    }
    let ta = g.input(0, amap, Some(r - 1))?;
    let tb = g.input(1, bmap, Some(r - 2))?;
    let c = g.matmul(ta, tb)?;
    let acc = g.accum(AccKind::Sum, &[c])?;
    g.output(acc, omap(&split))?;
    Ok(g)
}
