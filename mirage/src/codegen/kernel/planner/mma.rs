//! How each matmul of a block graph runs: FMA for f32 tiles, `mma.sync` m16n8k16 tiles dealt to
//! the warps round-robin, or whole 16-row bands per warp for register chains; and which register
//! accumulators the kernel declares.

use crate::ir::{BlockGraph, BlockOp, DType, TensorRef};

use super::fusion::{RegisterPlan, RowBands, mma_dtype};
use super::tiles::{Tile, ctype};

/// How one matmul `[m, k] x [k, n]` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatmulPlan {
    /// f32 operands: FMA, one output element per thread.
    Fma(FmaMatmul),
    /// Tensor cores, mma tiles dealt to the warps round-robin.
    Tiled(TiledMatmul),
    /// Tensor cores, whole 16-row bands per warp (register chains, [`RegisterPlan::row_owned`]).
    Rows(RowMatmul),
    /// CUDA cores, 16-byte vectors of B per thread: a register-accumulated matmul of a few rows.
    Vector(VectorMatmul),
}

/// Most rows of a register-accumulated 16-bit matmul that runs on the CUDA cores
/// ([`VectorMatmul`]) instead of padding its rows to the tensor cores' 16.
pub const VECTOR_MAX_ROWS: usize = 4;

/// A register-accumulated matmul `[m, k] x [k, n]` of at most [`VECTOR_MAX_ROWS`] rows with a
/// row-major 16-bit B tile: thread `t` owns the 8 columns `(t % lanes) * 8 ..` (one 16-byte
/// vector of every B row it reads) and the B rows `t / lanes, t / lanes + groups, …`, and adds
/// `a[i, r] * b[r, cols]` for each of the `m` rows into `2 m` register fragments of 4 floats.
/// `lanes` is the B row's `n / 8` vectors rounded up to a power of two, so that the threads
/// owning the same columns are a power-of-two distance apart; when `n / 8` is not one, the
/// `lanes - n / 8` threads of each row group past the row's end idle (at least half the lanes
/// work: `n = 48` keeps 6 of 8, Mistral's 112-column tiles 14 of 16).
/// After the loop the row groups' partial sums meet: by shuffles within a warp, then one warp
/// (or one row group) after another into the accumulator's tile. Decode-time weight streaming:
/// an m16n8k16 `mma` would pad one row to 16, and its fragment loads and `ldmatrix` cost more
/// issue slots than the FMAs (H200, DECISIONS change 32: the Llama-3.2-1B LM head kernel 176 →
/// 148 µs with FMAs at the same tiles and pipeline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorMatmul {
    /// Rows of the result.
    pub m: usize,
    /// The reduction length.
    pub k: usize,
    /// Columns of the result.
    pub n: usize,
    /// B's element type.
    pub dtype: DType,
    /// Threads per B row: `n / 8` rounded up to a power of two, dividing the block's threads
    /// (the threads with `t % lanes >= n / 8` idle).
    pub lanes: usize,
    /// Row groups: threads / `lanes`.
    pub groups: usize,
}

/// An f32 matmul.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FmaMatmul {
    /// Rows of the result.
    pub m: usize,
    /// The reduction length.
    pub k: usize,
    /// Columns of the result.
    pub n: usize,
}

/// A tensor-core matmul with its 16x8 result tiles dealt to the warps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TiledMatmul {
    /// Rows of the result.
    pub m: usize,
    /// The reduction length.
    pub k: usize,
    /// Columns of the result.
    pub n: usize,
    /// The mma element type.
    pub dtype: DType,
    /// 16x8 result tiles.
    pub tiles: usize,
    /// 8-column tiles per row of tiles.
    pub nt: usize,
    /// 16-deep k-steps.
    pub kt: usize,
    /// Slices the k-steps are split into over the warps ([`k_split`]; 1: no split).
    pub split: usize,
    /// Independent accumulator chains over the k-steps: mma latency, not issue, bounds one chain;
    /// 4 chains keep the tensor pipe busy.
    pub chains: usize,
    /// (tile, slice) items per warp; with [`k_strided`](Self::k_strided), every tile.
    pub per_warp: usize,
    /// The k-steps are dealt to the warps instead of the tiles ([`k_strided`]): warp `w` runs
    /// k-steps `w, w + warps, …` of every tile, loading each A fragment once for all the tiles
    /// of its band; the warps' partial sums meet after the loop.
    pub k_strided: bool,
    /// B goes through `ldmatrix.trans` (a row-major `[k][n]` tile in the mma type with 16-byte
    /// aligned rows and an even k).
    pub b_ldmatrix: bool,
    /// Accumulates in registers across the iterations (its `acc_sum` has no code in the loop).
    pub accumulates: bool,
}

/// Where a row-owned matmul's A operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ASource {
    /// A shared-memory tile.
    Smem(TensorRef),
    /// Fragments loaded before the loop (the operand is loop-invariant).
    Preloaded,
    /// The register value of this node (accumulator fragments of a row-owned matmul).
    Registers(usize),
}

/// Where a row-owned matmul's result goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOut {
    /// A fresh register value.
    Registers,
    /// The register accumulator, across iterations.
    Accumulator,
    /// Its shared-memory f32 tile.
    Smem,
}

/// A tensor-core matmul with whole 16-row bands per warp (warp `w` owns bands `w, w + warps, …`):
/// each k-step loads one A fragment and runs the band's `n / 8` mma tiles on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowMatmul {
    /// The bands.
    pub bands: RowBands,
    /// The mma element type.
    pub dtype: DType,
    /// The A operand.
    pub a: ASource,
    /// The result.
    pub out: RowOut,
    /// B goes through `ldmatrix.trans` (a row-major `[k][n]` tile in the mma type with 16-byte
    /// aligned rows and an even k).
    pub b_ldmatrix: bool,
}

/// The plan of every matmul of `bg`, given its tiles.
pub(super) fn plan_matmuls(
    bg: &BlockGraph,
    rp: &RegisterPlan,
    tiles: &[Vec<Option<Tile>>],
    warps: usize,
) -> Vec<Option<MatmulPlan>> {
    let tile = |t: TensorRef| tiles[t.node][t.port].as_ref().expect("operand tile planned before use");
    bg.nodes()
        .iter()
        .enumerate()
        .map(|(i, nd)| {
            if !matches!(nd.op, BlockOp::Matmul) {
                return None;
            }
            if rp.row_owned[i] {
                return Some(MatmulPlan::Rows(row_matmul(bg, rp, i, tile(nd.inputs[1]))));
            }
            let (a, b, accumulates) = (tile(nd.inputs[0]), tile(nd.inputs[1]), rp.fused[i].is_some());
            if accumulates && let Some(v) = vector_matmul(a, b, warps * 32) {
                return Some(MatmulPlan::Vector(v));
            }
            Some(tiled_matmul(a, b, accumulates, warps, bg.forloop_range()))
        })
        .collect()
}

/// The plan of row-owned matmul `i` with B tile `b`.
fn row_matmul(bg: &BlockGraph, rp: &RegisterPlan, i: usize, b: &Tile) -> RowMatmul {
    let bands = RowBands::of(bg, i).expect("row-owned matmuls have bands");
    let dtype = mma_dtype(bg, i).expect("register chains admit only f16/bf16 matmuls");
    let a_ref = bg.nodes()[i].inputs[0];
    let a = if rp.preload_a[i] {
        ASource::Preloaded
    } else if rp.reg[a_ref.node] {
        ASource::Registers(a_ref.node)
    } else {
        ASource::Smem(a_ref)
    };
    let out = if rp.reg[i] {
        RowOut::Registers
    } else if rp.fused[i].is_some() {
        RowOut::Accumulator
    } else {
        RowOut::Smem
    };
    let r = b.shape.len();
    let (k, n) = (b.shape[r - 2], b.shape[r - 1]);
    RowMatmul { bands, dtype, a, out, b_ldmatrix: b_by_ldmatrix(b, ctype(dtype), k, n) }
}

/// The plan of a matmul of tiles `a` and `b` dealt to `warps` warps; `accumulates`: it adds to
/// register accumulators across the `iters` iterations.
fn tiled_matmul(a: &Tile, b: &Tile, accumulates: bool, warps: usize, iters: usize) -> MatmulPlan {
    let r = a.shape.len();
    let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
    let dtype = if a.dtype != DType::F32 { a.dtype } else { b.dtype };
    if dtype == DType::F32 {
        return MatmulPlan::Fma(FmaMatmul { m, k, n });
    }
    let (mt, nt, kt) = (m.div_ceil(16), n.div_ceil(8), k.div_ceil(16));
    let tiles = mt * nt;
    // A register-accumulated matmul with few tiles splits its k-steps over the warps too.
    let split = if accumulates { k_split(tiles, kt, warps) } else { 1 };
    let chains = (kt / split).clamp(1, 4);
    let per_warp = (tiles * split).div_ceil(warps);
    let b_ldmatrix = b_by_ldmatrix(b, ctype(dtype), k, n);
    let k_strided = accumulates && k_strided(mt, nt, kt, warps, per_warp, split, iters);
    // Dealt k-steps: every warp holds every tile, one chain per tile, no k-slices.
    let (split, chains, per_warp) = if k_strided { (1, 1, tiles) } else { (split, chains, per_warp) };
    MatmulPlan::Tiled(TiledMatmul {
        m,
        k,
        n,
        dtype,
        tiles,
        nt,
        kt,
        split,
        chains,
        per_warp,
        k_strided,
        b_ldmatrix,
        accumulates,
    })
}

/// The CUDA-core plan of a register-accumulated matmul of tiles `a` and `b` run by `threads`
/// threads, when it qualifies: at most [`VECTOR_MAX_ROWS`] rows, no batch dims, B a row-major
/// 16-bit tile with 16-byte aligned rows and `n / 8`, rounded up to a power of two, dividing
/// `threads`.
fn vector_matmul(a: &Tile, b: &Tile, threads: usize) -> Option<VectorMatmul> {
    let r = a.shape.len();
    let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
    let batch = |t: &Tile| t.shape[..t.shape.len() - 2].iter().product::<usize>();
    let dtype = b.dtype;
    let (sb0, sb1) = (b.strides[r - 2], b.strides[r - 1]);
    let lanes = (n / 8).next_power_of_two();
    let qualifies = m <= VECTOR_MAX_ROWS
        && batch(a) == 1
        && batch(b) == 1
        && matches!(dtype, DType::F16 | DType::Bf16)
        && b.ctype == ctype(dtype)
        && sb1 == 1
        && sb0.is_multiple_of(8)
        && n.is_multiple_of(8)
        && b.offset.is_multiple_of(16)
        && n >= 8
        && threads.is_multiple_of(lanes);
    qualifies.then(|| VectorMatmul { m, k, n, dtype, lanes, groups: threads / lanes })
}

/// How many ways a register-accumulated matmul of `tiles` mma tiles and `kt` k-steps splits its
/// k-steps over `warps` warps: the fewest slices that deal (tile, slice) items evenly to the
/// warps, when the tiles alone leave warps idle or unevenly loaded and every slice keeps at
/// least 8 k-steps (1: no split). The slices' partial sums meet once, after the loop.
pub fn k_split(tiles: usize, kt: usize, warps: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    if tiles == 0 || warps == 0 || tiles.is_multiple_of(warps) {
        return 1;
    }
    let split = warps / gcd(tiles, warps);
    if split > 1 && kt.is_multiple_of(split) && kt / split >= 8 { split } else { 1 }
}

/// Most mma tiles of a matmul whose k-steps are dealt to the warps ([`k_strided`]): each warp
/// holds an accumulator fragment (4 floats) of every tile.
pub const K_STRIDED_MAX_TILES: usize = 16;

/// Issue slots of one A fragment (four 32-bit shared-memory loads and their addresses) and of one
/// tile's k-step (its B fragment and the `mma`), the units in which [`k_strided`] compares the
/// two ways of dealing a register-accumulated matmul to the warps.
const A_FRAGMENT_COST: usize = 4;
const TILE_STEP_COST: usize = 3;
/// Issue slots one tile of one warp costs in the sequential meeting of the warps' partial sums
/// after the loop (a round per warp, a barrier between rounds, its `+=` on a row-strided f32 tile
/// bank-conflicted). Calibrated on the H200 (DECISIONS change 43): dealing k-steps lost 3–27% on
/// kernels whose saving over the loop was 3–10.5 times `rounds x tiles` and won 13.5% on the one
/// at 18.3 times.
const COMBINE_TILE_COST: usize = 16;

/// Whether a register-accumulated matmul of `mt x nt` mma tiles and `kt` k-steps, run `iters`
/// times by the loop, deals its k-steps to the `warps` warps (warp `w`: k-steps `w, w + warps, …`
/// of every tile) instead of (tile, k-slice) items (`per_warp` items of `kt / split` k-steps
/// each): when the tiles fit the registers ([`K_STRIDED_MAX_TILES`]), every warp gets at least
/// two k-steps, and the issue slots the busiest warp saves over the loop exceed what the
/// sequential meeting of the partial sums after it costs (`COMBINE_TILE_COST` per round and
/// tile). Dealing tiles loads a tile's A fragment once per
/// tile; a band of one 16-row tile and many columns (a decode projection of 16 rows: Qwen2.5-7B's
/// down projection has 14 tiles of 19 k-steps over 8 warps) then loads the same A fragments
/// again for every tile and leaves warps unevenly loaded.
pub fn k_strided(mt: usize, nt: usize, kt: usize, warps: usize, per_warp: usize, split: usize, iters: usize) -> bool {
    let tiles = mt * nt;
    if warps == 0 || split == 0 || tiles > K_STRIDED_MAX_TILES || kt < 2 * warps {
        return false;
    }
    let items = per_warp * (kt / split) * (A_FRAGMENT_COST + TILE_STEP_COST);
    let strided = kt.div_ceil(warps) * (mt * A_FRAGMENT_COST + tiles * TILE_STEP_COST);
    let combine = warps.min(kt) * tiles * COMBINE_TILE_COST;
    strided < items && iters * (items - strided) > combine
}

/// Whether B goes through `ldmatrix.trans`: a row-major `[k][n]` tile in the mma type `ty` with
/// 16-byte aligned rows (every tile starts 16-byte aligned in shared memory) and an even `k`.
/// When `k` is not a multiple of 16, the last k-step's rows past `k` are read from row `k - 1`
/// (inside the tile, so no other tile's bytes and no race) and the registers holding them are
/// zeroed after the load; an even `k` keeps each register's pair on one side of it.
fn b_by_ldmatrix(b: &Tile, ty: &str, k: usize, n: usize) -> bool {
    let r = b.shape.len();
    let (sb0, sb1) = (b.strides[r - 2], b.strides[r - 1]);
    b.ctype == ty
        && sb1 == 1
        && sb0.is_multiple_of(8)
        && n.is_multiple_of(8)
        && k.is_multiple_of(2)
        && b.offset.is_multiple_of(16)
        && b.bytes.is_multiple_of(16)
}

/// Register accumulator fragments per thread of every node that has them: a fused matmul's (its
/// tiles or bands per warp) and a register value's sum over the iterations (its bands).
pub(super) fn register_accumulators(
    bg: &BlockGraph,
    rp: &RegisterPlan,
    matmuls: &[Option<MatmulPlan>],
) -> Vec<Option<usize>> {
    (0..bg.nodes().len())
        .map(|i| {
            if rp.reg_acc[i] {
                let b = RowBands::of_register_value(bg, bg.nodes()[i].inputs[0].node)
                    .expect("register chains start at a matmul");
                return Some(b.per_warp * b.nt);
            }
            rp.fused[i]?;
            match matmuls[i].as_ref()? {
                MatmulPlan::Rows(p) => Some(p.bands.per_warp * p.bands.nt),
                MatmulPlan::Tiled(p) => Some(p.per_warp),
                MatmulPlan::Vector(p) => Some(2 * p.m),
                MatmulPlan::Fma(_) => unreachable!("f32 matmuls are never fused"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_band_of_many_k_steps_deals_its_k_steps_to_the_warps() {
        // Qwen2.5-7B down projection, 16 rows: [16, 296] x [296, 112], 8 warps, 16 iterations.
        // Dealt as tiles: 2 tiles of 19 k-steps for the busiest warp (266 slots an iteration); as
        // k-steps: 3 of 14 tiles (138). 16 x 128 saved > 8 rounds x 14 tiles x 16.
        assert!(k_strided(1, 14, 19, 8, 2, 1, 16));
        // The same at 8 iterations: the meeting after the loop costs more than the loop saves.
        assert!(!k_strided(1, 14, 19, 8, 2, 1, 8));
        // Llama-3.2-1B gate/up at 16 rows ([16, 256] x [256, 64], 8 iterations): 448 saved, 1024
        // for the meeting (H200: 21% slower dealt as k-steps).
        assert!(!k_strided(1, 8, 16, 8, 1, 1, 8));
        // Four bands of one tile, k split 2 ways (8 k-steps per item): every A fragment is used
        // once either way, 56 slots each: no gain however long the loop.
        assert!(!k_strided(4, 1, 16, 8, 1, 2, 1000));
        // Too many tiles for the registers, too few k-steps for every warp to get two.
        assert!(!k_strided(1, 32, 64, 8, 4, 1, 1000));
        assert!(!k_strided(1, 6, 8, 8, 3, 4, 1000));
        assert!(!k_strided(1, 14, 15, 8, 2, 1, 1000));
        assert!(!k_strided(1, 14, 19, 0, 2, 1, 1000));
    }

    #[test]
    fn the_k_strided_plan_holds_every_tile_per_warp() {
        let bf = DType::Bf16;
        let a = tile(bf, &[16, 296], &[296, 1], 0);
        let b = tile(bf, &[296, 112], &[120, 1], 9472);
        let MatmulPlan::Tiled(p) = tiled_matmul(&a, &b, true, 8, 16) else { panic!("a tensor-core plan") };
        assert!(p.k_strided && p.b_ldmatrix);
        assert_eq!((p.tiles, p.kt, p.per_warp, p.split, p.chains), (14, 19, 14, 1, 1));
        // Not register-accumulated: the result goes to shared memory tile by tile, as before.
        let MatmulPlan::Tiled(p) = tiled_matmul(&a, &b, false, 8, 16) else { panic!("a tensor-core plan") };
        assert!(!p.k_strided);
        assert_eq!(p.per_warp, 2);
    }

    #[test]
    fn few_accumulated_tiles_split_their_k_steps_over_the_warps() {
        assert_eq!(k_split(4, 32, 8), 2, "gated_mlp_bs1: 4 tiles, 8 warps");
        assert_eq!(k_split(6, 64, 8), 4, "rmsnorm_linear_bs1: 6 tiles, 8 warps: 24 items, 3 per warp");
        assert_eq!(k_split(6, 32, 4), 2, "rmsnorm_linear_bs8: 6 tiles, 4 warps: 12 items, 3 per warp");
        assert_eq!(k_split(4, 32, 4), 1, "one tile per warp already");
        assert_eq!(k_split(6, 16, 8), 1, "slices of 4 k-steps are too short");
        assert_eq!(k_split(16, 4, 8), 1);
    }

    fn tile(dtype: DType, shape: &[usize], strides: &[usize], offset: usize) -> Tile {
        Tile::for_test(dtype, shape, strides, offset, true)
    }

    #[test]
    fn matmuls_of_a_few_rows_with_a_row_major_16_bit_b_run_on_the_cuda_cores() {
        let bf = DType::Bf16;
        let b = tile(bf, &[64, 128], &[128, 1], 1024);
        // One row (decode), 256 threads: 16 lanes of 8 columns per B row, 16 row groups.
        let v = vector_matmul(&tile(bf, &[1, 64], &[64, 1], 0), &b, 256).expect("one row qualifies");
        assert_eq!(v, VectorMatmul { m: 1, k: 64, n: 128, dtype: bf, lanes: 16, groups: 16 });
        assert_eq!(vector_matmul(&tile(bf, &[4, 64], &[64, 1], 0), &b, 128).map(|v| (v.m, v.groups)), Some((4, 8)));
        let f16b = tile(DType::F16, &[64, 512], &[520, 1], 0);
        let v = vector_matmul(&tile(DType::F16, &[2, 64], &[64, 1], 0), &f16b, 128).expect("padded rows qualify");
        assert_eq!((v.lanes, v.groups), (64, 2));
        // Each refusal, one condition at a time.
        let a1 = tile(bf, &[1, 64], &[64, 1], 0);
        assert_eq!(vector_matmul(&tile(bf, &[5, 64], &[64, 1], 0), &b, 256), None, "more than VECTOR_MAX_ROWS rows");
        assert_eq!(vector_matmul(&tile(bf, &[16, 64], &[64, 1], 0), &b, 256), None, "a tensor-core band");
        let f32b = tile(DType::F32, &[64, 128], &[128, 1], 0);
        assert_eq!(vector_matmul(&tile(DType::F32, &[1, 64], &[64, 1], 0), &f32b, 256), None, "f32");
        assert_eq!(vector_matmul(&a1, &tile(bf, &[64, 128], &[1, 64], 0), 256), None, "column-major B");
        assert_eq!(vector_matmul(&a1, &tile(bf, &[64, 128], &[132, 1], 0), 256), None, "rows not 16-byte aligned");
        assert_eq!(vector_matmul(&a1, &tile(bf, &[64, 128], &[128, 1], 8), 256), None, "tile not 16-byte aligned");
        // 12 vectors per B row: 16 lanes, the last 4 of each row group idle.
        let v = vector_matmul(&a1, &tile(bf, &[64, 96], &[96, 1], 0), 256).expect("12 vectors qualify");
        assert_eq!((v.n, v.lanes, v.groups), (96, 16, 16));
        // Mistral-7B's 112-column tiles of the gated MLP (14 vectors), 6-vector rows.
        let v = vector_matmul(&a1, &tile(bf, &[128, 112], &[112, 1], 0), 256).expect("14 vectors qualify");
        assert_eq!((v.lanes, v.groups), (16, 16));
        let v = vector_matmul(&tile(bf, &[2, 64], &[64, 1], 0), &tile(bf, &[64, 48], &[48, 1], 0), 256);
        assert_eq!(v.map(|v| (v.lanes, v.groups)), Some((8, 32)));
        assert_eq!(vector_matmul(&a1, &tile(bf, &[64, 100], &[104, 1], 0), 256), None, "n not a multiple of 8");
        assert_eq!(vector_matmul(&a1, &tile(bf, &[64, 4096], &[4096, 1], 0), 256), None, "512 lanes for 256 threads");
        let batched = (tile(bf, &[2, 1, 64], &[64, 64, 1], 0), tile(bf, &[2, 64, 128], &[8192, 128, 1], 0));
        assert_eq!(vector_matmul(&batched.0, &batched.1, 256), None, "batch dims");
    }
}
