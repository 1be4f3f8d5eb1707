//! How input tiles travel from device memory to shared memory, and when.
//!
//! Each input iterator's tile is cut into copy units (16-byte vectors along the contiguous
//! dimension when the layout allows it, single elements otherwise); [`CopyMethod`] says which
//! instruction moves them. [`Loads`] says which tiles are copied once before the loop, which are
//! pipelined over the loop's iterations and which are copied at the start of every iteration.

use crate::ir::{BlockGraph, BlockOp, TensorDesc};

use super::super::DimSize;
use super::tiles::Tile;

/// How a tile's contiguous dimension is cut into vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct VectorCopy {
    /// The device dim that is contiguous (stride 1) and copied in vectors, if any.
    pub vec_dim: Option<usize>,
    /// Elements per vector: 16, 8 or 4 bytes of them, at least two (1 when copying element by
    /// element).
    pub vec: usize,
    /// When the vector dim is runtime-sized ([`DimSize::Var`]): its size parameter. The vectors
    /// then hold only when the run size is a multiple of `vec` (every row starts aligned and a
    /// vector lies wholly inside or wholly past the size); the generated code checks that at run
    /// time and copies element by element otherwise.
    pub guard: Option<usize>,
}

/// `vector_copy_sized` of a tensor of fixed dims.
#[cfg(test)]
pub(super) fn vector_copy(desc: &TensorDesc, tile: &[usize]) -> VectorCopy {
    vector_copy_sized(desc, tile, &[])
}

/// The vectors of a `tile`-shaped copy from a tensor laid out as `desc`: the widest of 16-, 8-
/// and 4-byte vectors (of at least two elements) along the contiguous dim such that the tile spans
/// a whole number of them and every row of the tile, in every block and iteration, starts
/// aligned to the vector: the strides of the other dims the tiles move along are multiples of it.
/// (A weight tile 148 bf16 columns wide — 296 bytes — is copied in 8-byte vectors; before, every
/// tile that was not a multiple of 16 bytes was copied element by element, synchronously, and
/// such kernels streamed at a tenth of the bandwidth on the H200: docs/DECISIONS.md.)
///
/// For a tensor whose dims follow runtime sizes as `sizes` says (empty: all fixed), its strides
/// are those of every size: a runtime-sized dim counts as 1 in the alignment of the others'
/// strides (the smallest size). When the contiguous dim is runtime-sized itself
/// ([`DimSize::Var`], so the last dim: the layout is row-major at the run size), every other
/// stride is a multiple of its size `n`: the widest vector the tile spans is taken, guarded by
/// `n % vec == 0` at run time (`VectorCopy::guard`; element by element otherwise, since a vector
/// would then straddle the size or start misaligned). A contiguous per-block-parts dim
/// ([`DimSize::Blocks`]) is copied element by element.
pub(super) fn vector_copy_sized(desc: &TensorDesc, tile: &[usize], sizes: &[DimSize]) -> VectorCopy {
    let es = desc.dtype.size_bytes();
    let c = (0..desc.shape.len()).find(|&d| desc.strides[d] == 1 && tile[d] > 1);
    let Some(c) = c else { return VectorCopy { vec_dim: None, vec: 1, guard: None } };
    match sizes.get(c) {
        Some(&DimSize::Var(p)) => {
            for bytes in [16, 8, 4] {
                let per = bytes / es;
                if per >= 2 && tile[c].is_multiple_of(per) {
                    return VectorCopy { vec_dim: Some(c), vec: per, guard: Some(p) };
                }
            }
            return VectorCopy { vec_dim: Some(c), vec: 1, guard: None };
        }
        Some(DimSize::Blocks { .. } | DimSize::Stacked { .. }) => {
            return VectorCopy { vec_dim: Some(c), vec: 1, guard: None };
        }
        Some(DimSize::Fixed) | None => {}
    }
    // The strides at the smallest sizes: every runtime-sized (row-major) dim at 1.
    let strides: Vec<usize> = if sizes.iter().any(|s| matches!(s, DimSize::Var(_))) {
        let shape: Vec<usize> = (0..desc.shape.len())
            .map(|d| if matches!(sizes.get(d), Some(DimSize::Var(_))) { 1 } else { desc.shape[d] })
            .collect();
        crate::ir::row_major_strides(&shape)
    } else {
        desc.strides.clone()
    };
    for bytes in [16, 8, 4] {
        let per = bytes / es;
        if per < 2 {
            break;
        }
        let rows_aligned =
            (0..desc.shape.len()).all(|d| d == c || desc.shape[d] == 1 || (strides[d] * es).is_multiple_of(bytes));
        if tile[c].is_multiple_of(per) && rows_aligned {
            return VectorCopy { vec_dim: Some(c), vec: per, guard: None };
        }
    }
    VectorCopy { vec_dim: Some(c), vec: 1, guard: None }
}

/// The instruction that moves a tile's copy units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyMethod {
    /// One element per unit: a plain load and store, complete at the next barrier.
    Elements,
    /// One `cp.async` of a vector (16, 8 or 4 bytes) per unit, the threads striding over the
    /// units.
    CpAsync,
    /// One `cp.async` of a vector per unit, strength-reduced: the first `threads` threads (a multiple
    /// of the units of one outer row) each keep a source and a destination pointer and advance
    /// them by fixed steps, since every copy of a thread has the same inner position.
    CpAsyncStrided {
        /// Threads that copy (the rest idle for this tile).
        threads: usize,
        /// Elements the source pointer advances per copy.
        src_step: usize,
        /// Elements the destination pointer advances per copy.
        dst_step: usize,
    },
}

impl CopyMethod {
    /// Whether the copy is asynchronous (`cp.async`: committed and waited for by groups).
    pub fn is_async(&self) -> bool {
        !matches!(self, CopyMethod::Elements)
    }
}

/// How one input iterator's tile is copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileCopy {
    /// The kernel input it reads.
    pub input: usize,
    /// The dim copied in vectors, if any.
    pub vec_dim: Option<usize>,
    /// Elements per copy unit.
    pub vec: usize,
    /// The tile's shape in copy units (the vector dim divided by `vec`).
    pub units: Vec<usize>,
    /// Copy units of the tile.
    pub total: usize,
    /// The instruction.
    pub method: CopyMethod,
    /// The guard of the vector copy: the size parameter whose run size must be a multiple of `vec` for
    /// the vectors; the generated code copies element by element (plain loads and stores,
    /// complete at the next barrier) when it is not.
    pub guard: Option<usize>,
    /// With [`crate::codegen::KernelOptions::bulk_copies`] or
    /// [`crate::codegen::KernelOptions::bulk_runs`], on sm_90 and later, in a kernel of static
    /// sizes: the tile copied by the bulk-copy engine instead (`cp.async.bulk`, one instruction
    /// per row or one for a tile that is a single run, completion counted in bytes on the stage's
    /// mbarrier); `None` for tiles it cannot move, and for every tile without an option.
    pub bulk: Option<BulkRows>,
}

/// A pipelined tile copied row by row with `cp.async.bulk` (sm_90): every row a contiguous,
/// 16-byte aligned run of `row_bytes` in device and shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkRows {
    /// Rows (bulk copies) per tile.
    pub rows: usize,
    /// Bytes per row.
    pub row_bytes: usize,
}

/// Shortest row the bulk path takes: shorter rows keep the 16-byte `cp.async` (one bulk
/// instruction per 16 or 32 bytes buys nothing over it).
pub const BULK_MIN_ROW_BYTES: usize = 64;

/// Which pipelined tiles a plan copies with the bulk-copy engine (sm_90; [`TileCopy::bulk`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BulkCopies {
    /// None: every tile by the threads' `cp.async`.
    #[default]
    Off,
    /// Tiles that are one contiguous run in device and in shared memory, one instruction each
    /// ([`crate::codegen::KernelOptions::bulk_runs`]).
    Runs,
    /// Every tile whose rows qualify, one instruction per row, or one for a tile that is a
    /// single run ([`crate::codegen::KernelOptions::bulk_copies`]).
    Rows,
}

/// Whether (and how) pipelined `tile`, cut into `units` of `vector`, of an operand with element
/// strides `kstrides`, can be copied by `cp.async.bulk`: 16-byte vectors along a dim that is
/// contiguous in shared memory too, every row start 16-byte aligned in shared memory (the device
/// side is aligned by [`vector_copy_sized`]'s rule for 16-byte vectors), and either the whole
/// tile one run of at least [`BULK_MIN_ROW_BYTES`] in both memories (its rows back to back in
/// the operand as in shared memory: one instruction) or rows of at least that many bytes (one
/// instruction per row).
fn bulk_rows(tile: &Tile, vector: VectorCopy, units: &[usize], es: usize, kstrides: &[usize]) -> Option<BulkRows> {
    let c = vector.vec_dim?;
    let row_bytes = tile.shape[c] * es;
    let aligned = |x: usize| x.is_multiple_of(16);
    let smem_rows_aligned =
        (0..tile.shape.len()).all(|d| d == c || tile.shape[d] == 1 || aligned(tile.strides[d] * es));
    let ok = tile.pipelined
        && vector.vec * es == 16
        && tile.strides[c] == 1
        && aligned(tile.offset)
        && aligned(tile.bytes)
        && smem_rows_aligned;
    if !ok {
        return None;
    }
    // One run: every dim of extent > 1 strides by the elements of the dims inside it, in shared
    // memory and in the operand alike (row-major over the tile's shape, the contiguous dim last).
    let numel: usize = tile.shape.iter().product();
    let mut inner = 1;
    let mut run = kstrides.len() == tile.shape.len();
    for d in (0..tile.shape.len()).rev() {
        if tile.shape[d] > 1 {
            run &= tile.strides[d] == inner && kstrides.get(d) == Some(&inner);
        }
        inner *= tile.shape[d];
    }
    if run && numel * es >= BULK_MIN_ROW_BYTES {
        return Some(BulkRows { rows: 1, row_bytes: numel * es });
    }
    let total: usize = units.iter().product();
    (row_bytes >= BULK_MIN_ROW_BYTES).then(|| BulkRows { rows: total / units[c], row_bytes })
}

/// The copy of every input iterator's tile.
pub(super) fn plan_copies(
    bg: &BlockGraph,
    tiles: &[Vec<Option<Tile>>],
    vectors: &[Option<VectorCopy>],
    threads: usize,
    bulk: BulkCopies,
    sizes: &[Vec<DimSize>],
) -> Vec<Option<TileCopy>> {
    bg.nodes()
        .iter()
        .enumerate()
        .map(|(i, nd)| {
            let BlockOp::Input { input, .. } = nd.op else { return None };
            let tile = tiles[i].first()?.as_ref()?;
            let vector = vectors[i]?;
            // A runtime-sized operand's copies are predicated unit by unit (no strength reduction:
            // its strides and bounds follow the size).
            let sized = sizes.get(input).is_some_and(|s| s.iter().any(|d| *d != DimSize::Fixed));
            let mut copy = tile_copy(&bg.inputs()[input], input, tile, vector, threads, !sized);
            copy.bulk = match bulk {
                BulkCopies::Off => None,
                BulkCopies::Runs => copy.bulk.filter(|b| b.rows == 1),
                BulkCopies::Rows => copy.bulk,
            };
            Some(copy)
        })
        .collect()
}

/// The copy of `tile` from input `input` laid out as `kdesc` by `threads` threads.
///
/// Strength-reduced copies: with the copying threads a multiple of the vectors of one outer row,
/// every copy of a thread has the same inner position and the next one is a fixed number of outer
/// rows further: two pointer increments per copy instead of the full 64-bit index arithmetic (the
/// weight-bound kernels issue tens of copies per thread and iteration from one or two warps per
/// scheduler; ncu on the H200: latency-bound instruction issue, about 0.2 instructions per cycle
/// per scheduler).
fn tile_copy(
    kdesc: &TensorDesc,
    input: usize,
    tile: &Tile,
    vector: VectorCopy,
    threads: usize,
    strided: bool,
) -> TileCopy {
    let VectorCopy { vec_dim, vec, guard } = vector;
    let shape = &tile.shape;
    let mut units = shape.clone();
    if let Some(c) = vec_dim {
        units[c] = shape[c] / vec;
    }
    let total: usize = units.iter().product();
    let mut method = if vec > 1 { CopyMethod::CpAsync } else { CopyMethod::Elements };
    let outer = (0..shape.len()).find(|&d| units[d] > 1);
    if let (true, Some(d0)) = (strided && guard.is_none() && vec > 1 && total > threads, outer) {
        let inner: usize = units[d0 + 1..].iter().product();
        // The largest multiple of `inner` threads copies.
        let used = threads / inner * inner;
        if used > 0 && total > used {
            let mult = if Some(d0) == vec_dim { vec } else { 1 };
            let rows = used / inner * mult;
            method = CopyMethod::CpAsyncStrided {
                threads: used,
                src_step: rows * kdesc.strides[d0],
                dst_step: rows * tile.strides[d0],
            };
        }
    }
    // A guarded copy may run element by element: never the bulk engine (runtime-sized kernels
    // keep `cp.async`).
    let bulk =
        if guard.is_some() { None } else { bulk_rows(tile, vector, &units, kdesc.dtype.size_bytes(), &kdesc.strides) };
    TileCopy { input, vec_dim, vec, units, total, method, bulk, guard }
}

/// Which input tiles are copied when (input iterator nodes, in node order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loads {
    /// Copied once, before the loop: tiles not walked by the loop (every tile when it has one
    /// iteration).
    pub once: Vec<usize>,
    /// Walked by the loop through a ring of stage buffers, copied stages − 1 iterations ahead.
    pub pipelined: Vec<usize>,
    /// Walked by the loop in one buffer, copied at the start of every iteration after a barrier
    /// (tiles that cannot be copied in 16-byte vectors).
    pub per_iteration: Vec<usize>,
}

impl Loads {
    /// Sorts the input iterators of `bg` by when their tiles are copied.
    pub(super) fn new(bg: &BlockGraph, tiles: &[Vec<Option<Tile>>]) -> Loads {
        let nodes = bg.nodes();
        let frange = bg.forloop_range();
        let pipelined_tile = |i: usize| tiles[i].first().and_then(Option::as_ref).is_some_and(|t| t.pipelined);
        let mut loads = Loads::default();
        for (i, nd) in nodes.iter().enumerate() {
            let walks = matches!(nd.op, BlockOp::Input { forloop_dim: Some(_), .. });
            if !matches!(nd.op, BlockOp::Input { .. }) {
                continue;
            }
            if !walks || frange == 1 {
                loads.once.push(i);
            }
            if pipelined_tile(i) {
                loads.pipelined.push(i);
            } else if walks && frange > 1 {
                loads.per_iteration.push(i);
            }
        }
        loads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn vec_of(shape: &[usize], dtype: DType, tile: &[usize]) -> (Option<usize>, usize) {
        let v = vector_copy(&TensorDesc::new(shape, dtype), tile);
        (v.vec_dim, v.vec)
    }

    #[test]
    fn the_widest_aligned_vector_is_chosen() {
        // Qwen2.5-7B gate/up weight tiles at 128, 256 and 512 blocks.
        let w = [3584, 18944];
        assert_eq!(vec_of(&w, DType::Bf16, &[224, 64]), (Some(1), 8), "128 bytes: 16-byte vectors");
        assert_eq!(vec_of(&w, DType::Bf16, &[224, 148]), (Some(1), 4), "296 bytes: 8-byte vectors");
        assert_eq!(vec_of(&w, DType::Bf16, &[224, 74]), (Some(1), 2), "148 bytes: 4-byte vectors");
        assert_eq!(vec_of(&w, DType::Bf16, &[224, 37]), (Some(1), 1), "74 bytes: element by element");
        // f32: a vector holds at least two elements (8 bytes).
        assert_eq!(vec_of(&[8, 6], DType::F32, &[4, 6]), (Some(1), 2));
        assert_eq!(vec_of(&[8, 5], DType::F32, &[4, 5]), (Some(1), 1));
        // the tile spans one element of the contiguous dim
        assert_eq!(vec_of(&[8, 2], DType::F16, &[8, 1]), (None, 1));
    }

    fn tile(shape: &[usize], strides: &[usize], offset: usize, pipelined: bool) -> Tile {
        Tile::for_test(DType::F16, shape, strides, offset, pipelined)
    }

    #[test]
    fn pipelined_tiles_of_long_aligned_rows_are_bulk_copied() {
        let v16 = VectorCopy { vec_dim: Some(1), vec: 8, guard: None };
        // The benchmark's gated MLP weight tile: 512 rows of 64 bytes.
        let t = tile(&[512, 32], &[32, 1], 3072, true);
        let k = [4096, 1];
        assert_eq!(bulk_rows(&t, v16, &[512, 4], 2, &k), Some(BulkRows { rows: 512, row_bytes: 64 }));
        // One 1 KiB row (an activation row walked by the loop).
        let x = tile(&[1, 512], &[512, 1], 0, true);
        assert_eq!(bulk_rows(&x, v16, &[1, 64], 2, &[4096, 1]), Some(BulkRows { rows: 1, row_bytes: 1024 }));
        // Not pipelined, rows of 32 bytes, 8-byte vectors, a padded row that breaks the
        // alignment, a misaligned stage offset: cp.async.
        assert_eq!(bulk_rows(&tile(&[512, 32], &[32, 1], 0, false), v16, &[512, 4], 2, &k), None);
        assert_eq!(bulk_rows(&tile(&[512, 16], &[16, 1], 0, true), v16, &[512, 2], 2, &k), None);
        let v8 = VectorCopy { vec_dim: Some(1), vec: 4, guard: None };
        assert_eq!(bulk_rows(&tile(&[64, 36], &[36, 1], 0, true), v8, &[64, 9], 2, &k), None);
        assert_eq!(bulk_rows(&tile(&[64, 32], &[36, 1], 0, true), v16, &[64, 4], 2, &k), None);
        assert_eq!(bulk_rows(&tile(&[64, 32], &[32, 1], 8, true), v16, &[64, 4], 2, &k), None);
        // The contiguous dim is not contiguous in shared memory (a transposed layout).
        assert_eq!(bulk_rows(&tile(&[64, 32], &[1, 64], 0, true), v16, &[64, 4], 2, &k), None);
        // A weight stored tile by tile ([(n / 16) · k, 16]): 512 rows of 32 bytes back to back in
        // the operand and in shared memory, one 16 KiB run; rows of 16 bytes too (8 columns).
        let run = tile(&[512, 16], &[16, 1], 0, true);
        assert_eq!(bulk_rows(&run, v16, &[512, 2], 2, &[16, 1]), Some(BulkRows { rows: 1, row_bytes: 16384 }));
        let run8 = tile(&[1024, 8], &[8, 1], 0, true);
        assert_eq!(bulk_rows(&run8, v16, &[1024, 1], 2, &[8, 1]), Some(BulkRows { rows: 1, row_bytes: 16384 }));
        // The same tile of a row-major weight (rows 4 KiB apart), or padded in shared memory: not a run.
        assert_eq!(bulk_rows(&run, v16, &[512, 2], 2, &[2048, 1]), None);
        assert_eq!(bulk_rows(&tile(&[512, 16], &[24, 1], 0, true), v16, &[512, 2], 2, &[16, 1]), None);
        // A run shorter than 64 bytes keeps cp.async.
        assert_eq!(bulk_rows(&tile(&[2, 8], &[8, 1], 0, true), v16, &[2, 1], 2, &[8, 1]), None);
    }

    #[test]
    fn a_runtime_sized_contiguous_dim_gets_vectors_guarded_by_its_size() {
        // K of decode attention, [heads, dim, S] with S (size parameter 0) contiguous: tiles of
        // 64 keys take 16-byte vectors, checked at run time (`n0 % 8 == 0`).
        let k = TensorDesc::new(&[32, 128, 4096], DType::Bf16);
        let s = [DimSize::Fixed, DimSize::Fixed, DimSize::Var(0)];
        let v = vector_copy_sized(&k, &[1, 128, 64], &s);
        assert_eq!(v, VectorCopy { vec_dim: Some(2), vec: 8, guard: Some(0) });
        // 12 keys a tile: 8-byte vectors (n0 % 4 == 0); 5 keys: element by element, unguarded.
        assert_eq!(vector_copy_sized(&k, &[1, 128, 12], &s), VectorCopy { vec_dim: Some(2), vec: 4, guard: Some(0) });
        assert_eq!(vector_copy_sized(&k, &[1, 128, 5], &s), VectorCopy { vec_dim: Some(2), vec: 1, guard: None });
        // Per-block parts along the contiguous dim keep element copies.
        let parts = [DimSize::Fixed, DimSize::Fixed, DimSize::Blocks { param: 0, slab: 256, tile: 1 }];
        assert_eq!(vector_copy_sized(&k, &[1, 128, 64], &parts), VectorCopy { vec_dim: Some(2), vec: 1, guard: None });
        // A fixed contiguous dim beside a runtime-sized outer one: unguarded, as before.
        let v_cache = TensorDesc::new(&[32, 4096, 128], DType::Bf16);
        let sv = [DimSize::Fixed, DimSize::Var(0), DimSize::Fixed];
        assert_eq!(
            vector_copy_sized(&v_cache, &[1, 64, 128], &sv),
            VectorCopy { vec_dim: Some(2), vec: 8, guard: None }
        );
        // The guarded copy is cp.async unit by unit: never strength-reduced or bulk-copied.
        let t = tile(&[1, 128, 64], &[8192, 64, 1], 0, true);
        let c = tile_copy(&k, 1, &t, VectorCopy { vec_dim: Some(2), vec: 8, guard: Some(0) }, 128, true);
        assert_eq!((c.method, c.bulk, c.guard, c.total), (CopyMethod::CpAsync, None, Some(0), 1024));
    }

    #[test]
    fn rows_of_every_block_start_aligned() {
        // Rows 24 bytes apart: a one-row tile moves by 24 bytes per block, so 16-byte vectors
        // would be misaligned for every other block; 8-byte ones are not.
        assert_eq!(vec_of(&[5, 12], DType::F16, &[1, 8]), (Some(1), 4));
        // Rows of nine halves fit no vector at all.
        assert_eq!(vec_of(&[5, 9], DType::F16, &[1, 9]), (Some(1), 1));
        // A dim of extent one never moves: its stride does not matter.
        assert_eq!(vec_of(&[1, 8], DType::F16, &[1, 8]), (Some(1), 8));
    }
}
