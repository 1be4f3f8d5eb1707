//! Tiles in shared memory: element type, layout (dimension order, row padding) and place in the
//! kernel's dynamic shared-memory arena.
//!
//! Input tiles keep their element type and the dimension order of their device layout.
//! Intermediate tiles are stored as f32, except element-wise results read only as tensor-core
//! operands of their own type.

use crate::ir::{BlockGraph, BlockOp, DType, TensorDesc, TensorRef, TileDesc};

use super::super::DimSize;
use super::copies::{VectorCopy, vector_copy_sized};
use super::fusion::{RegisterPlan, mma_dtype};
use super::groups::ElementwiseGroups;
use super::schedule::Schedule;
use super::smem::{ALIGN, Interval, SmemPlanner};

/// The C type of an element type.
pub fn ctype(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "__half",
        DType::Bf16 => "__nv_bfloat16",
        DType::F32 => "float",
        DType::I32 => "int",
    }
}

/// Where a tile lives and how to address it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tile {
    /// C variable name of the tile pointer.
    pub var: String,
    /// Element C type in shared memory.
    pub ctype: &'static str,
    /// Element type for tensor-core operands (f16/bf16) or f32.
    pub dtype: DType,
    /// Logical shape.
    pub shape: Vec<usize>,
    /// Element strides in shared memory.
    pub strides: Vec<usize>,
    /// Byte offset in dynamic shared memory (of stage 0 for pipelined tiles).
    pub offset: usize,
    /// Bytes of one stage.
    pub bytes: usize,
    /// Pipelined over the for-loop (stage buffer chosen by iteration).
    pub pipelined: bool,
}

impl Tile {
    /// Elements of the logical shape.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether every run of `v` elements along `dim` that starts at a multiple of `v` lies
    /// contiguous and aligned to its own size (at most 16 bytes), so that one vector load or
    /// store moves it: `dim` contiguous, every other stride of an extent above 1, the tile's
    /// offset and its stage size multiples of a run.
    pub fn runs_aligned(&self, dim: usize, v: usize) -> bool {
        let Some(bytes) = element_bytes(self.ctype).map(|b| b * v) else { return false };
        bytes <= 16
            && self.strides[dim] == 1
            && (0..self.shape.len()).all(|d| d == dim || self.shape[d] == 1 || self.strides[d].is_multiple_of(v))
            && self.offset.is_multiple_of(bytes)
            && (!self.pipelined || self.bytes.is_multiple_of(bytes))
    }
}

/// Bytes of one element of a shared-memory tile of C type `ctype` (none for a type no vector
/// path loads).
pub fn element_bytes(ctype: &str) -> Option<usize> {
    match ctype {
        "float" | "int" => Some(4),
        "__half" | "__nv_bfloat16" => Some(2),
        _ => None,
    }
}

#[cfg(test)]
impl Tile {
    /// A tile `t` for the planner's unit tests: `shape` of `dtype` at element `strides` from byte
    /// `offset`, one stage the bytes of its elements.
    pub(super) fn for_test(dtype: DType, shape: &[usize], strides: &[usize], offset: usize, pipelined: bool) -> Tile {
        Tile {
            var: "t".into(),
            ctype: ctype(dtype),
            dtype,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
            bytes: shape.iter().product::<usize>() * dtype.size_bytes(),
            pipelined,
        }
    }
}

/// A live range that never ends: tiles alive for the whole kernel.
const FOREVER: usize = usize::MAX / 2;

/// The placed tiles of a kernel.
pub(super) struct Placement {
    /// The tile of every output port (`None`: in registers).
    pub tiles: Vec<Vec<Option<Tile>>>,
    /// The row-sum scratch of every `rms_norm`.
    pub scratch: Vec<Option<Tile>>,
    /// The vector layout of every input tile's copy.
    pub vectors: Vec<Option<VectorCopy>>,
    /// Dynamic shared memory, bytes.
    pub bytes: usize,
}

/// Places every tile of `bg` in one arena, in node and port order: input tiles alive for the
/// whole kernel (pipelined ones with `stages` buffers), intermediate tiles alive from their
/// writer's position to their last reader's, `rms_norm` scratch only while its operator runs.
/// Values in registers get no tile; an aliased accumulator shares its operand's.
pub(super) fn place(
    bg: &BlockGraph,
    s: &Schedule,
    rp: &RegisterPlan,
    ew: &ElementwiseGroups,
    stages: usize,
    sizes: &[Vec<DimSize>],
) -> Placement {
    let nodes = bg.nodes();
    let n = nodes.len();
    let mut arena = SmemPlanner::default();
    let mut p = Placement { tiles: vec![Vec::new(); n], scratch: vec![None; n], vectors: vec![None; n], bytes: 0 };
    for (i, nd) in nodes.iter().enumerate() {
        let mut tiles = Vec::new();
        for (port, desc) in nd.outputs.iter().enumerate() {
            if rp.fused[i].is_some() || rp.reg[i] || ew.in_register[i] {
                tiles.push(None);
                continue;
            }
            if let Some(src) = s.alias[i] {
                tiles.push(p.tiles[src.node][src.port].clone());
                continue;
            }
            let var = if nd.outputs.len() == 1 { format!("t{i}") } else { format!("t{i}_{port}") };
            let tile = match &nd.op {
                BlockOp::Input { input, forloop_dim, .. } => {
                    let walks = forloop_dim.is_some() && bg.forloop_range() > 1;
                    let sz = sizes.get(*input).map(Vec::as_slice).unwrap_or(&[]);
                    let (tile, vector) = input_tile(&bg.inputs()[*input], desc, var, walks, stages, sz, &mut arena);
                    p.vectors[i] = Some(vector);
                    tile
                }
                _ => {
                    let live = live_range(bg, s, rp, ew, TensorRef { node: i, port });
                    intermediate_tile(bg, s, TensorRef { node: i, port }, desc, var, live, &mut arena)
                }
            };
            tiles.push(Some(tile));
        }
        if let BlockOp::RmsNorm { .. } = nd.op {
            let at = if rp.hoisted[i] { 0 } else { s.positions[i] };
            p.scratch[i] = Some(rms_scratch(i, &nd.outputs[0].shape, at, &mut arena));
        }
        p.tiles[i] = tiles;
    }
    p.bytes = arena.total();
    p
}

/// The tile of an input iterator over `kdesc`: in the device element type and dimension order
/// (see [`input_tile_strides`]), alive for the whole kernel; a tile walked by the loop and copied
/// in 16-byte vectors gets `stages` buffers (pipelined).
fn input_tile(
    kdesc: &TensorDesc,
    desc: &TileDesc,
    var: String,
    walks: bool,
    stages: usize,
    sizes: &[DimSize],
    arena: &mut SmemPlanner,
) -> (Tile, VectorCopy) {
    let vector = vector_copy_sized(kdesc, &desc.shape, sizes);
    let pipelined = walks && vector.vec > 1;
    let (strides, elements) = input_tile_strides(kdesc, &desc.shape, vector.vec > 1);
    let bytes = elements * kdesc.dtype.size_bytes();
    let stage_bytes = bytes.div_ceil(ALIGN) * ALIGN;
    let buffers = if pipelined { stages } else { 1 };
    let offset = arena.alloc(stage_bytes * buffers, Interval { start: 0, end: FOREVER });
    let tile = Tile {
        var,
        ctype: ctype(kdesc.dtype),
        dtype: kdesc.dtype,
        shape: desc.shape.clone(),
        strides,
        offset,
        bytes: stage_bytes,
        pipelined,
    };
    (tile, vector)
}

/// When tile `t` of an operator is alive: a hoisted operator's from before the loop, until the
/// loop starts unless the loop reads it; an accumulator's (and a running maximum's) for the whole
/// kernel; any other from its group's position to its last reader's group position.
fn live_range(bg: &BlockGraph, s: &Schedule, rp: &RegisterPlan, ew: &ElementwiseGroups, t: TensorRef) -> Interval {
    let nd = &bg.nodes()[t.node];
    let persistent =
        matches!(nd.op, BlockOp::Accum { .. }) || (matches!(nd.op, BlockOp::RunningMax { .. }) && t.port == 0);
    // A group runs at its head's position: every member's tile is written there, and operands
    // of later members are read there.
    let gpos = |i: usize| s.positions[ew.head(i)];
    if rp.hoisted[t.node] {
        // Written before the loop; free once it starts unless read in it.
        let end = if rp.dead_in_loop(bg, t) { 0 } else { FOREVER };
        Interval { start: 0, end }
    } else if persistent {
        Interval { start: 0, end: FOREVER }
    } else {
        let last = s.users[t.node][t.port].iter().map(|&u| gpos(u)).max().unwrap_or(gpos(t.node));
        Interval { start: gpos(t.node), end: last }
    }
}

/// The tile of an operator's output `t`, alive during `live`. Tiles written by matmul fragments
/// or element-wise operators and read as mma operands get their rows padded (see
/// [`padded_f32_strides`]). An element-wise result read only as a tensor-core operand of its own
/// type is stored in that type: the matmul would round it to it when packing the fragment
/// anyway, so the values are identical, the tile is half the size and the operand loads are
/// 32-bit pairs or `ldmatrix`.
fn intermediate_tile(
    bg: &BlockGraph,
    s: &Schedule,
    t: TensorRef,
    desc: &TileDesc,
    var: String,
    live: Interval,
    arena: &mut SmemPlanner,
) -> Tile {
    let nodes = bg.nodes();
    let op = &nodes[t.node].op;
    let padded =
        matches!(op, BlockOp::Matmul | BlockOp::Unary { .. } | BlockOp::Binary { .. } | BlockOp::RmsNorm { .. });
    let users = &s.users[t.node][t.port];
    let mma_typed = matches!(op, BlockOp::Unary { .. } | BlockOp::Binary { .. } | BlockOp::RmsNorm { .. })
        && desc.dtype != DType::F32
        && !users.is_empty()
        && users.iter().all(|&u| matches!(nodes[u].op, BlockOp::Matmul) && mma_dtype(bg, u) == Some(desc.dtype));
    if mma_typed {
        let (strides, elements) = padded_mma_strides(&desc.shape, desc.dtype.size_bytes());
        let bytes = elements * desc.dtype.size_bytes();
        let offset = arena.alloc(bytes, live);
        return Tile {
            var,
            ctype: ctype(desc.dtype),
            dtype: desc.dtype,
            shape: desc.shape.clone(),
            strides,
            offset,
            bytes: bytes.div_ceil(16) * 16,
            pipelined: false,
        };
    }
    let numel: usize = desc.shape.iter().product();
    let (strides, elements) = if padded { padded_f32_strides(&desc.shape) } else { (row_major(&desc.shape), numel) };
    let offset = arena.alloc(elements * 4, live);
    Tile {
        var,
        ctype: "float",
        dtype: desc.dtype,
        shape: desc.shape.clone(),
        strides,
        offset,
        bytes: elements * 4,
        pipelined: false,
    }
}

/// The f32 row sums of `rms_norm` node `i` with output `shape`, alive only at position `at`.
fn rms_scratch(i: usize, shape: &[usize], at: usize, arena: &mut SmemPlanner) -> Tile {
    let rows = shape.iter().product::<usize>() / shape.last().copied().unwrap_or(1);
    let offset = arena.alloc(rows * 4, Interval { start: at, end: at });
    let mut shape = shape.to_vec();
    if let Some(l) = shape.last_mut() {
        *l = 1;
    }
    Tile {
        var: format!("s{i}"),
        ctype: "float",
        dtype: DType::F32,
        strides: row_major(&shape),
        shape,
        offset,
        bytes: rows * 4,
        pipelined: false,
    }
}

/// Row-major strides of an f32 tile with its rows padded by 4 floats when they are a multiple of
/// 32 floats long and there are at least 8 of them (mma fragment stores and operand loads touch
/// 8 rows at once: unpadded, all 8 start in the same bank), and the size in elements.
fn padded_f32_strides(shape: &[usize]) -> (Vec<usize>, usize) {
    let r = shape.len();
    if r < 2 {
        return (row_major(shape), shape.iter().product());
    }
    let n = shape[r - 1];
    let rows: usize = shape[..r - 1].iter().product();
    if !n.is_multiple_of(32) || rows < 8 {
        return (row_major(shape), shape.iter().product());
    }
    padded_rows(shape, n + 4)
}

/// Row-major strides of an f16/bf16 tile (`es` bytes per element) with rows padded by 16 bytes
/// when they are a multiple of 32 bytes and at least 128 bytes long (as input tiles: the eight
/// rows an `ldmatrix` touches then start in different banks), and the size in elements.
fn padded_mma_strides(shape: &[usize], es: usize) -> (Vec<usize>, usize) {
    let r = shape.len();
    if r < 2 {
        return (row_major(shape), shape.iter().product());
    }
    let n = shape[r - 1];
    let rows: usize = shape[..r - 1].iter().product();
    if rows < 2 || !(n * es).is_multiple_of(32) || n * es < 128 {
        return (row_major(shape), shape.iter().product());
    }
    padded_rows(shape, n + 16 / es)
}

/// Row-major strides with rows `row` elements apart, and the size in elements.
fn padded_rows(shape: &[usize], row: usize) -> (Vec<usize>, usize) {
    let r = shape.len();
    let mut strides = vec![1; r];
    let mut s = row;
    for d in (0..r - 1).rev() {
        strides[d] = s;
        s *= shape[d];
    }
    (strides, s)
}

/// Shared-memory strides of an input tile and its size in elements: the device layout's dim
/// order, compact, except that a vector-copied tile whose rows are a multiple of 32 bytes and at
/// least 128 bytes long gets each row padded by 16 bytes. Unpadded, the rows of such a tile start
/// in the same bank, so the eight rows an `ldmatrix` or an mma fragment load touches at once
/// conflict 8-way; padded, consecutive rows start 4 banks apart. Shorter rows conflict at most
/// 4-way and pay relatively more shared memory for the padding (fewer pipeline stages): on the
/// H200 (run 5, docs/DECISIONS.md) padding 64- and 96-byte weight rows made the
/// weight-bound batch-1 kernels 10–25% slower.
fn input_tile_strides(desc: &TensorDesc, tile: &[usize], vectorized: bool) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..tile.len()).collect();
    // innermost first: ascending device stride
    order.sort_by_key(|&d| (desc.strides[d], std::cmp::Reverse(d)));
    let es = desc.dtype.size_bytes();
    let rows: usize = order.iter().skip(1).map(|&d| tile[d]).product();
    let mut strides = vec![0; tile.len()];
    let mut s = 1;
    for (k, d) in order.into_iter().enumerate() {
        strides[d] = s;
        s *= tile[d];
        if k == 0 && vectorized && rows > 1 && (s * es).is_multiple_of(32) && s * es >= 128 {
            s += 16 / es;
        }
    }
    (strides, s)
}

/// Row-major strides of `shape`.
fn row_major(shape: &[usize]) -> Vec<usize> {
    crate::ir::row_major_strides(shape)
}
