//! The block graph: one CUDA kernel described as a grid of blocks that each read tiles through
//! input iterators, run a for-loop body, accumulate, run an epilogue and save outputs.

use serde::{Deserialize, Serialize};

use super::IrError;
use super::ops::{
    BinaryOp, RopeLayout, UnaryOp, argmax_shape, broadcast_shape, check_dim, check_floats, concat_shape, gather_shape,
    matmul_shape, reduce_shape, rope_shape,
};
use super::types::{DType, Scalar, TensorDesc, TensorRef, check_shape, fmt_shape};

/// For each grid axis (x, y, z): the tensor dim it splits (inputs) or concatenates along
/// (outputs), or `None` (replicated). Entries of axes with grid size 1 are always `None`.
pub type GridMap = [Option<usize>; 3];

/// Whether a tile lives inside the for-loop (recomputed every iteration) or after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Produced by input iterators and the loop body.
    InLoop,
    /// Produced by accumulators and the epilogue.
    AfterLoop,
}

/// How an accumulator folds the in-loop values of the F iterations into one after-loop value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccKind {
    /// `Σ_i x_i`, same shape.
    Sum,
    /// `Σ_i Σ_last x_i`: the last dim reduced to 1.
    SumLast,
    /// `sqrt(Σ_i Σ_last x_i² / (F · last))`: the last dim reduced to 1.
    RmsLast,
    /// `Σ_i` then the last dim reduced to `width` with strided grouping
    /// (output `j` sums `j, j + width, j + 2·width, …`).
    SumTo {
        /// The width of the reduced last dim.
        width: usize,
    },
    /// `max_i x_i`, element-wise.
    Max,
    /// Online-softmax rescaling, two operands `x, r`: `acc_1 = x_1`, `acc_i = acc_{i-1} · r_i + x_i`
    /// (`r` broadcast to `x`).
    Rescale,
    /// As [`AccKind::Rescale`] on `Σ_last x_i` (the last dim reduced to 1).
    SumLastRescale,
}

impl AccKind {
    /// The accumulator's name in messages and generated code.
    pub fn name(&self) -> String {
        match self {
            AccKind::Sum => "acc_sum".into(),
            AccKind::SumLast => "acc_sum_last".into(),
            AccKind::RmsLast => "acc_rms_last".into(),
            AccKind::SumTo { width } => format!("acc_sum_to({width})"),
            AccKind::Max => "acc_max".into(),
            AccKind::Rescale => "acc_rescale".into(),
            AccKind::SumLastRescale => "acc_sum_last_rescale".into(),
        }
    }
}

/// A block-graph operator.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum BlockOp {
    /// Input iterator over operand `input` of the kernel.
    Input {
        /// Index into the kernel's operands.
        input: usize,
        /// Grid axis → split dim.
        imap: GridMap,
        /// The dim tiled over the for-loop iterations, or `None` (loaded once, before the loop).
        forloop_dim: Option<usize>,
    },
    /// Output saver: writes its after-loop operand as the kernel's next output.
    Output {
        /// Grid axis → the output dim along which block results are concatenated.
        omap: GridMap,
        /// The element type the output is stored in, when it differs from the tile's (both
        /// floats): e.g. f32 partial results of an f16/bf16 kernel read by a later kernel, or an
        /// f32 tile stored as the program's f16/bf16 output. `None`: the tile's type.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        store: Option<DType>,
    },
    /// Tile matrix product (no batch dims).
    Matmul,
    /// Element-wise unary function.
    Unary {
        /// Which function.
        op: UnaryOp,
    },
    /// Element-wise binary function with broadcasting; both operands in the same phase.
    Binary {
        /// Which function.
        op: BinaryOp,
    },
    /// Sum of `dim` down to 1.
    ReduceSum {
        /// The reduced dim.
        dim: usize,
    },
    /// Sum of `dim` down to `width` with strided grouping.
    ReduceSumTo {
        /// The reduced dim.
        dim: usize,
        /// Its new size; must divide the old one.
        width: usize,
    },
    /// Max of `dim` down to 1.
    ReduceMax {
        /// The reduced dim.
        dim: usize,
    },
    /// `x / sqrt(mean(x², last dim) + eps)` on a tile.
    RmsNorm {
        /// Added to the mean square.
        eps: Scalar,
    },
    /// Concatenation along `dim`.
    Concat {
        /// The concatenation dim.
        dim: usize,
    },
    /// Rotary position embedding of tiles `x, cos, sin` (one phase, one element type), with the
    /// rule of the kernel operator applied to the tiles: each head of `2·cos.last` elements of
    /// the tile's last dim is rotated as a whole, so a tile must hold whole heads.
    Rope {
        /// Which elements of a head form a pair.
        layout: RopeLayout,
    },
    /// Rows of kernel operand `table` (a `[rows, width]` float tensor, read from device memory
    /// at the ids: no input iterator loads it) at the ids of its one operand, an `i32` tile: a
    /// tile of the ids' shape followed by the block's slab of `width`, in the ids' phase. The
    /// grid may split the width (`imap` entries `Some(1)`), never the rows. An id outside
    /// `0..rows` gives zeros.
    Gather {
        /// Index into the kernel's operands.
        table: usize,
        /// Grid axis → split dim of the table (only its width, dim 1).
        imap: GridMap,
    },
    /// The position (`i32`) of the maximum along `dim` within the tile, kept with size 1; ties
    /// to the lowest position, NaN above every number.
    Argmax {
        /// The searched dim.
        dim: usize,
    },
    /// In-loop running maximum for online softmax: with `m_i = max(m_{i-1}, max_dim x_i)` and
    /// `m_0 = -∞`, output 0 is `m_i` and output 1 is `m_{i-1} - m_i` (both in the loop, `dim` of
    /// size 1).
    RunningMax {
        /// The reduced dim.
        dim: usize,
    },
    /// An accumulator: ends the loop.
    Accum {
        /// How iterations are folded.
        acc: AccKind,
    },
}

impl BlockOp {
    /// The operator's name in messages.
    pub fn name(&self) -> String {
        match self {
            BlockOp::Input { .. } => "input iterator".into(),
            BlockOp::Output { .. } => "output saver".into(),
            BlockOp::Matmul => "matmul".into(),
            BlockOp::Unary { op } => op.to_string(),
            BlockOp::Binary { op } => op.to_string(),
            BlockOp::ReduceSum { dim } => format!("reduce_sum({dim})"),
            BlockOp::ReduceSumTo { dim, width } => format!("reduce_sum_to({dim}, {width})"),
            BlockOp::ReduceMax { dim } => format!("reduce_max({dim})"),
            BlockOp::RmsNorm { .. } => "rms_norm".into(),
            BlockOp::Concat { dim } => format!("concat({dim})"),
            BlockOp::RunningMax { dim } => format!("running_max({dim})"),
            BlockOp::Rope { layout } => layout.name().into(),
            BlockOp::Gather { .. } => "gather".into(),
            BlockOp::Argmax { dim } => format!("argmax({dim})"),
            BlockOp::Accum { acc } => acc.name(),
        }
    }
}

/// A tile: shape, element type and phase.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileDesc {
    /// Extent of each dim.
    pub shape: Vec<usize>,
    /// Element type (that of the input it derives from).
    pub dtype: DType,
    /// In the loop or after it.
    pub phase: Phase,
}

/// One block-graph operator with its operands and produced tiles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockNode {
    /// The operator.
    pub op: BlockOp,
    /// Operands, produced by earlier nodes of the same block graph.
    pub inputs: Vec<TensorRef>,
    /// Produced tiles (none for output savers).
    pub outputs: Vec<TileDesc>,
}

/// A block graph: one CUDA kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct BlockGraph {
    grid: [usize; 3],
    threads: usize,
    forloop_range: usize,
    inputs: Vec<TensorDesc>,
    nodes: Vec<BlockNode>,
}

const MAX_GRID: [usize; 3] = [(1 << 31) - 1, 65535, 65535];
const AXES: [&str; 3] = ["x", "y", "z"];

/// The tile an input iterator produces from a tensor of shape `shape`.
pub fn input_tile_shape(
    shape: &[usize],
    grid: [usize; 3],
    forloop_range: usize,
    imap: &GridMap,
    forloop_dim: Option<usize>,
) -> Result<Vec<usize>, IrError> {
    let what = || {
        format!(
            "{} with grid {:?}, imap {}, forloop_dim {:?}, forloop_range {forloop_range}",
            fmt_shape(shape),
            grid,
            fmt_map(imap),
            forloop_dim
        )
    };
    let imap = &normalize_map(imap, grid);
    let mut tile = shape.to_vec();
    for a in 0..3 {
        if let Some(d) = imap[a] {
            if d >= shape.len() {
                return Err(IrError::rule(
                    "input iterator",
                    what(),
                    format!("imap.{} = {d} is not a dim of a rank-{} tensor", AXES[a], shape.len()),
                ));
            }
            if (0..a).any(|b| imap[b] == Some(d)) {
                return Err(IrError::rule(
                    "input iterator",
                    what(),
                    format!("two grid axes split dim {d}: each dim is split by at most one axis"),
                ));
            }
            if !tile[d].is_multiple_of(grid[a]) {
                return Err(IrError::rule(
                    "input iterator",
                    what(),
                    format!("grid.{} = {} does not divide dim {d} (size {})", AXES[a], grid[a], tile[d]),
                ));
            }
            tile[d] /= grid[a];
        }
    }
    if let Some(f) = forloop_dim {
        if f >= shape.len() {
            return Err(IrError::rule(
                "input iterator",
                what(),
                format!("forloop_dim {f} is not a dim of a rank-{} tensor", shape.len()),
            ));
        }
        if !tile[f].is_multiple_of(forloop_range) {
            return Err(IrError::rule(
                "input iterator",
                what(),
                format!("forloop_range {forloop_range} does not divide the block's slab of dim {f} (size {})", tile[f]),
            ));
        }
        tile[f] /= forloop_range;
    }
    Ok(tile)
}

/// The device tensor an output saver writes from a tile of shape `tile`.
pub fn output_shape(tile: &[usize], grid: [usize; 3], omap: &GridMap) -> Result<Vec<usize>, IrError> {
    let what = || format!("tile {} with grid {:?}, omap {}", fmt_shape(tile), grid, fmt_map(omap));
    let mut out = tile.to_vec();
    for a in 0..3 {
        match omap[a] {
            Some(d) => {
                if d >= tile.len() {
                    return Err(IrError::rule(
                        "output saver",
                        what(),
                        format!("omap.{} = {d} is not a dim of a rank-{} tile", AXES[a], tile.len()),
                    ));
                }
                if (0..a).any(|b| omap[b] == Some(d)) {
                    return Err(IrError::rule(
                        "output saver",
                        what(),
                        format!("two grid axes concatenate along dim {d}: their blocks would overwrite each other"),
                    ));
                }
                out[d] = out[d].saturating_mul(grid[a]);
            }
            None if grid[a] > 1 => {
                return Err(IrError::rule(
                    "output saver",
                    what(),
                    format!(
                        "grid.{} = {} > 1 needs an omap entry, or its blocks would overwrite each other",
                        AXES[a], grid[a]
                    ),
                ));
            }
            None => {}
        }
    }
    check_shape("output saver", &out)?;
    Ok(out)
}

fn fmt_map(map: &GridMap) -> String {
    let f = |e: Option<usize>| e.map_or("-".to_string(), |d| d.to_string());
    format!("({}, {}, {})", f(map[0]), f(map[1]), f(map[2]))
}

/// Drops entries of grid axes of size 1 (they have no meaning).
pub fn normalize_map(map: &GridMap, grid: [usize; 3]) -> GridMap {
    let mut m = *map;
    for a in 0..3 {
        if grid[a] == 1 {
            m[a] = None;
        }
    }
    m
}

impl BlockGraph {
    /// An empty block graph for a kernel taking `inputs`, launched as `grid` blocks of `threads`
    /// threads, with `forloop_range` loop iterations.
    pub fn new(
        inputs: Vec<TensorDesc>,
        grid: [usize; 3],
        threads: usize,
        forloop_range: usize,
    ) -> Result<Self, IrError> {
        let what = || format!("grid {grid:?}, {threads} threads, forloop_range {forloop_range}");
        for a in 0..3 {
            if grid[a] == 0 || grid[a] > MAX_GRID[a] {
                return Err(IrError::rule(
                    "block graph",
                    what(),
                    format!("grid.{} must be in 1..={}", AXES[a], MAX_GRID[a]),
                ));
            }
        }
        if threads == 0 || threads > 1024 || !threads.is_multiple_of(32) {
            return Err(IrError::rule(
                "block graph",
                what(),
                "threads per block must be a multiple of 32 in 32..=1024",
            ));
        }
        if forloop_range == 0 {
            return Err(IrError::rule("block graph", what(), "forloop_range must be at least 1"));
        }
        for d in &inputs {
            check_shape("block graph input", &d.shape)?;
        }
        Ok(BlockGraph { grid, threads, forloop_range, inputs, nodes: Vec::new() })
    }

    /// Blocks along x, y, z.
    pub fn grid(&self) -> [usize; 3] {
        self.grid
    }

    /// Threads per block.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Number of for-loop iterations.
    pub fn forloop_range(&self) -> usize {
        self.forloop_range
    }

    /// The kernel operands this block graph reads.
    pub fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    /// The nodes in topological order.
    pub fn nodes(&self) -> &[BlockNode] {
        &self.nodes
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.grid.iter().product()
    }

    /// The tile a reference names.
    pub fn tile(&self, t: TensorRef) -> Result<&TileDesc, IrError> {
        self.nodes.get(t.node).and_then(|n| n.outputs.get(t.port)).ok_or_else(|| {
            IrError::rule(
                "operand",
                t.to_string(),
                format!("no such tile in a block graph of {} nodes", self.nodes.len()),
            )
        })
    }

    /// The device tensors the output savers write, in order.
    pub fn output_descs(&self) -> Vec<TensorDesc> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                BlockOp::Output { omap, store } => {
                    let tile = &self.nodes[n.inputs[0].node].outputs[n.inputs[0].port];
                    // Validated when the saver was added.
                    let dtype = store.unwrap_or(tile.dtype);
                    output_shape(&tile.shape, self.grid, omap).ok().map(|s| TensorDesc::new(&s, dtype))
                }
                _ => None,
            })
            .collect()
    }

    /// Infers the tiles `op` produces from `inputs` (the block-level shape and phase rules).
    pub fn infer(&self, op: &BlockOp, inputs: &[&TileDesc]) -> Result<Vec<TileDesc>, IrError> {
        let name = op.name();
        let arity = match op {
            BlockOp::Input { .. } => 0,
            BlockOp::Matmul | BlockOp::Binary { .. } | BlockOp::Concat { .. } => 2,
            BlockOp::Accum { acc: AccKind::Rescale | AccKind::SumLastRescale } => 2,
            BlockOp::Rope { .. } => 3,
            BlockOp::Output { .. }
            | BlockOp::Unary { .. }
            | BlockOp::ReduceSum { .. }
            | BlockOp::ReduceSumTo { .. }
            | BlockOp::ReduceMax { .. }
            | BlockOp::RmsNorm { .. }
            | BlockOp::Gather { .. }
            | BlockOp::Argmax { .. }
            | BlockOp::RunningMax { .. }
            | BlockOp::Accum { .. } => 1,
        };
        if inputs.len() != arity {
            return Err(IrError::rule(
                &name,
                format!("{} operands", inputs.len()),
                format!("expects {arity} operands"),
            ));
        }
        let shapes =
            || inputs.iter().map(|t| format!("{}({:?})", fmt_shape(&t.shape), t.phase)).collect::<Vec<_>>().join(", ");
        if let Some(other) = inputs.iter().skip(1).find(|t| t.dtype != inputs[0].dtype || t.phase != inputs[0].phase) {
            if inputs[0].dtype != other.dtype {
                return Err(IrError::rule(
                    &name,
                    shapes(),
                    format!("operands must have one element type, found {} and {}", inputs[0].dtype, other.dtype),
                ));
            }
            if inputs[0].phase != other.phase {
                return Err(IrError::rule(
                    &name,
                    shapes(),
                    "an operand and its partner must both be in the loop or both after it (mixing in-loop and after-loop operands)",
                ));
            }
        }
        // Arithmetic takes floats; gather reads i32 ids, savers write any type.
        match op {
            BlockOp::Input { .. } | BlockOp::Output { .. } | BlockOp::Gather { .. } => {}
            BlockOp::Matmul
            | BlockOp::Unary { .. }
            | BlockOp::Binary { .. }
            | BlockOp::ReduceSum { .. }
            | BlockOp::ReduceSumTo { .. }
            | BlockOp::ReduceMax { .. }
            | BlockOp::RmsNorm { .. }
            | BlockOp::Concat { .. }
            | BlockOp::Rope { .. }
            | BlockOp::Argmax { .. }
            | BlockOp::RunningMax { .. }
            | BlockOp::Accum { .. } => {
                check_floats(&name, &inputs.iter().map(|t| (t.shape.as_slice(), t.dtype)).collect::<Vec<_>>())?
            }
        }
        let same = |shape: Vec<usize>| {
            check_shape(&name, &shape)?;
            Ok(vec![TileDesc { shape, dtype: inputs[0].dtype, phase: inputs[0].phase }])
        };
        let after = |shape: Vec<usize>| {
            check_shape(&name, &shape)?;
            Ok(vec![TileDesc { shape, dtype: inputs[0].dtype, phase: Phase::AfterLoop }])
        };
        let last_to = |shape: &[usize], w: usize| -> Result<Vec<usize>, IrError> {
            reduce_shape(&name, shape, shape.len() - 1, w)
        };
        match op {
            BlockOp::Input { input, imap, forloop_dim } => {
                let desc = self.inputs.get(*input).ok_or_else(|| {
                    IrError::rule(
                        &name,
                        format!("kernel operand {input}"),
                        format!("the kernel has {} operands", self.inputs.len()),
                    )
                })?;
                let shape = input_tile_shape(&desc.shape, self.grid, self.forloop_range, imap, *forloop_dim)?;
                Ok(vec![TileDesc { shape, dtype: desc.dtype, phase: Phase::InLoop }])
            }
            BlockOp::Output { omap, store } => {
                if inputs[0].phase != Phase::AfterLoop {
                    return Err(IrError::rule(
                        &name,
                        shapes(),
                        "outputs are written after the loop: the path from the inputs skips the accumulator",
                    ));
                }
                if let Some(d) = store {
                    if *d == inputs[0].dtype {
                        return Err(IrError::rule(
                            &name,
                            shapes(),
                            format!("the stored type {d} is the tile's: a saver without a stored type writes it"),
                        ));
                    }
                    if !d.is_float() || !inputs[0].dtype.is_float() {
                        return Err(IrError::rule(
                            &name,
                            format!("{} stored as {d}", shapes()),
                            "a saver converts between float types only",
                        ));
                    }
                }
                output_shape(&inputs[0].shape, self.grid, omap)?;
                Ok(vec![])
            }
            BlockOp::Matmul => same(matmul_shape(&inputs[0].shape, &inputs[1].shape, false)?),
            BlockOp::Unary { .. } => same(inputs[0].shape.clone()),
            BlockOp::Binary { op } => same(broadcast_shape(op.name(), &inputs[0].shape, &inputs[1].shape)?),
            BlockOp::ReduceSum { dim } | BlockOp::ReduceMax { dim } => {
                same(reduce_shape(&name, &inputs[0].shape, *dim, 1)?)
            }
            BlockOp::ReduceSumTo { dim, width } => same(reduce_shape(&name, &inputs[0].shape, *dim, *width)?),
            BlockOp::RmsNorm { .. } => same(inputs[0].shape.clone()),
            BlockOp::Concat { dim } => {
                check_dim(&name, &inputs[0].shape, *dim)?;
                same(concat_shape(&inputs[0].shape, &inputs[1].shape, *dim)?)
            }
            BlockOp::Rope { .. } => same(rope_shape(&name, &inputs[0].shape, &inputs[1].shape, &inputs[2].shape)?),
            BlockOp::Gather { table, imap } => {
                let ids = inputs[0];
                if ids.dtype != DType::I32 {
                    return Err(IrError::rule(
                        &name,
                        shapes(),
                        format!("the ids tile must be i32, found {}", ids.dtype),
                    ));
                }
                let desc = self.inputs.get(*table).ok_or_else(|| {
                    IrError::rule(
                        &name,
                        format!("kernel operand {table}"),
                        format!("the kernel has {} operands", self.inputs.len()),
                    )
                })?;
                check_floats(&name, &[(desc.shape.as_slice(), desc.dtype)])?;
                let mut out = gather_shape(&desc.shape, &ids.shape)?;
                if let Some(a) = (0..3).find(|&a| imap[a].is_some_and(|d| d != 1)) {
                    return Err(IrError::rule(
                        &name,
                        format!("table {} with grid {:?}, imap {}", fmt_shape(&desc.shape), self.grid, fmt_map(imap)),
                        format!(
                            "imap.{} splits dim {:?} of the table: a gather reads whole rows at any id, so only the width (dim 1) may be split",
                            AXES[a], imap[a]
                        ),
                    ));
                }
                let width = input_tile_shape(&desc.shape, self.grid, 1, imap, None)?[1];
                let last = out.len() - 1;
                out[last] = width;
                check_shape(&name, &out)?;
                Ok(vec![TileDesc { shape: out, dtype: desc.dtype, phase: ids.phase }])
            }
            BlockOp::Argmax { dim } => {
                let shape = argmax_shape(&name, &inputs[0].shape, *dim)?;
                Ok(vec![TileDesc { shape, dtype: DType::I32, phase: inputs[0].phase }])
            }
            BlockOp::RunningMax { dim } => {
                if inputs[0].phase != Phase::InLoop {
                    return Err(IrError::rule(
                        &name,
                        shapes(),
                        "a running max carries state across iterations: its operand must be in the loop",
                    ));
                }
                let shape = reduce_shape(&name, &inputs[0].shape, *dim, 1)?;
                let t = TileDesc { shape, dtype: inputs[0].dtype, phase: Phase::InLoop };
                Ok(vec![t.clone(), t])
            }
            BlockOp::Accum { acc } => {
                if inputs[0].phase != Phase::InLoop {
                    return Err(IrError::rule(
                        &name,
                        shapes(),
                        "an accumulator folds in-loop values: its operand is already after the loop",
                    ));
                }
                let x = &inputs[0].shape;
                match acc {
                    AccKind::Sum | AccKind::Max => after(x.clone()),
                    AccKind::SumLast | AccKind::RmsLast => after(last_to(x, 1)?),
                    AccKind::SumTo { width } => after(last_to(x, *width)?),
                    AccKind::Rescale | AccKind::SumLastRescale => {
                        let target = if *acc == AccKind::Rescale { x.clone() } else { last_to(x, 1)? };
                        let b = broadcast_shape(&name, &target, &inputs[1].shape)?;
                        if b != target {
                            return Err(IrError::rule(
                                &name,
                                shapes(),
                                format!(
                                    "the rescale factor must broadcast to the accumulator's shape {}",
                                    fmt_shape(&target)
                                ),
                            ));
                        }
                        after(target)
                    }
                }
            }
        }
    }

    /// Appends `op` applied to `inputs` after checking its rules; returns its outputs.
    /// Grid-map entries of axes of size 1 are dropped.
    pub fn push(&mut self, op: BlockOp, inputs: &[TensorRef]) -> Result<Vec<TensorRef>, IrError> {
        let op = match op {
            BlockOp::Input { input, imap, forloop_dim } => {
                BlockOp::Input { input, imap: normalize_map(&imap, self.grid), forloop_dim }
            }
            BlockOp::Output { omap, store } => BlockOp::Output { omap: normalize_map(&omap, self.grid), store },
            BlockOp::Gather { table, imap } => BlockOp::Gather { table, imap: normalize_map(&imap, self.grid) },
            other => other,
        };
        let tiles = inputs.iter().map(|&t| self.tile(t)).collect::<Result<Vec<_>, _>>()?;
        let outputs = self.infer(&op, &tiles)?;
        let node = self.nodes.len();
        let refs = (0..outputs.len()).map(|port| TensorRef { node, port }).collect();
        self.nodes.push(BlockNode { op, inputs: inputs.to_vec(), outputs });
        Ok(refs)
    }

    fn push1(&mut self, op: BlockOp, inputs: &[TensorRef]) -> Result<TensorRef, IrError> {
        Ok(self.push(op, inputs)?[0])
    }

    /// An input iterator over kernel operand `input`.
    pub fn input(&mut self, input: usize, imap: GridMap, forloop_dim: Option<usize>) -> Result<TensorRef, IrError> {
        self.push1(BlockOp::Input { input, imap, forloop_dim }, &[])
    }

    /// An output saver for after-loop tile `t`, stored in the tile's element type.
    pub fn output(&mut self, t: TensorRef, omap: GridMap) -> Result<(), IrError> {
        self.push(BlockOp::Output { omap, store: None }, &[t]).map(|_| ())
    }

    /// An output saver for after-loop tile `t` stored as `dtype` (a float type; the tile's own
    /// type gives the plain saver of [`BlockGraph::output`]: one form for one graph).
    pub fn output_as(&mut self, t: TensorRef, omap: GridMap, dtype: DType) -> Result<(), IrError> {
        let store = (self.tile(t)?.dtype != dtype).then_some(dtype);
        self.push(BlockOp::Output { omap, store }, &[t]).map(|_| ())
    }

    /// Tile matmul.
    pub fn matmul(&mut self, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.push1(BlockOp::Matmul, &[a, b])
    }

    /// Element-wise unary function.
    pub fn unary(&mut self, op: UnaryOp, a: TensorRef) -> Result<TensorRef, IrError> {
        self.push1(BlockOp::Unary { op }, &[a])
    }

    /// Element-wise binary function.
    pub fn binary(&mut self, op: BinaryOp, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.push1(BlockOp::Binary { op }, &[a, b])
    }

    /// An accumulator over operand(s) `inputs`.
    pub fn accum(&mut self, acc: AccKind, inputs: &[TensorRef]) -> Result<TensorRef, IrError> {
        self.push1(BlockOp::Accum { acc }, inputs)
    }

    /// Any other operator with one output.
    pub fn op(&mut self, op: BlockOp, inputs: &[TensorRef]) -> Result<TensorRef, IrError> {
        self.push1(op, inputs)
    }

    /// Checks every rule again, and that the graph saves at least one output.
    pub fn validate(&self) -> Result<(), IrError> {
        let mut fresh = BlockGraph::new(self.inputs.clone(), self.grid, self.threads, self.forloop_range)?;
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(bad) = node.inputs.iter().find(|t| t.node >= i) {
                return Err(IrError::rule(
                    node.op.name(),
                    format!("block node {i}"),
                    format!("operand {bad} is not produced by an earlier node"),
                ));
            }
            fresh.push(node.op.clone(), &node.inputs)?;
            if fresh.nodes[i] != *node {
                return Err(IrError::rule(
                    node.op.name(),
                    format!("block node {i}"),
                    format!(
                        "recorded outputs {:?} differ from the inferred {:?}",
                        node.outputs, fresh.nodes[i].outputs
                    ),
                ));
            }
        }
        if !self.nodes.iter().any(|n| matches!(n.op, BlockOp::Output { .. })) {
            return Err(IrError::rule(
                "block graph",
                format!("{} nodes", self.nodes.len()),
                "a block graph must save at least one output",
            ));
        }
        Ok(())
    }
}

/// The serialized form of a block graph, checked on the way in.
#[derive(Deserialize)]
struct BlockGraphData {
    grid: [usize; 3],
    threads: usize,
    forloop_range: usize,
    inputs: Vec<TensorDesc>,
    nodes: Vec<BlockNode>,
}

impl<'de> Deserialize<'de> for BlockGraph {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let data = BlockGraphData::deserialize(deserializer)?;
        let g = BlockGraph {
            grid: data.grid,
            threads: data.threads,
            forloop_range: data.forloop_range,
            inputs: data.inputs,
            nodes: data.nodes,
        };
        g.validate().map_err(serde::de::Error::custom)?;
        Ok(g)
    }
}
