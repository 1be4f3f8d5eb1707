//! A Llama-family decoder step as a step graph: token embedding, then per layer RMSNorm, the
//! q/k/v projections, rotary embeddings, the KV-cache append, grouped-query attention over the
//! cache up to the runtime position, the output projection with its residual add, RMSNorm, the
//! gated MLP (silu(x·Wg) · (x·Wu)) · Wd with its residual add; then the final norm, the LM head
//! and argmax, which writes the next token back into the `token` state the next step embeds.
//!
//! The projections are streamed block graphs built here ([`projection_tiling`]: 16 to 128
//! weight columns per task, one round of tasks over the workers where a width allows), each RMSNorm
//! folded into the projections that consume it (no norm operator of its own), the residual add
//! and `silu(gate) · up` in their epilogues; embedding and argmax are built-in tasks, and so is
//! each layer's attention: one operator ([`Builtin::DecodeAttention`]) for RoPE (with Qwen3's
//! per-head q/k norm), the cache append, split-KV attention and the merge of its chunks.
//! Batch 1: one token per step at position `pos` (a runtime parameter), attending to keys
//! `0..=pos`.
//!
//! Tensor names: `embed [vocab, hidden]`, `token [1]` (state, f32 id), `inv_freq [head_dim/2]`
//! (f32), per layer `l{i}.attn_norm [1, hidden]`, `l{i}.wqkv [hidden, heads·head_dim +
//! 2·kv_heads·head_dim]` (the q, k and v projections' columns side by side, one operator whose
//! equal tiles split all three over the workers; [`crate::model::fuse_qkv`] joins a model's
//! `l{i}.wq`, `l{i}.wk`, `l{i}.wv`), `l{i}.wo [heads·head_dim, hidden]`,
//! `l{i}.mlp_norm [1, hidden]`, `l{i}.wg`/`l{i}.wu [hidden, intermediate]`,
//! `l{i}.wd [intermediate, hidden]`, with `qk_norm` `l{i}.q_norm`/`l{i}.k_norm [1, head_dim]`,
//! `l{i}.k_cache`/`l{i}.v_cache [kv_heads, capacity,
//! head_dim]` (states); `final_norm [1, hidden]`, `lm_head [hidden, V]`. The logits are the
//! buffer `logits.out [1, V]`, V = [`lm_head_width`]`(vocab)`: the vocabulary rounded up to a
//! whole round of the head's tasks ([`lm_head_tiling`]; zero weight columns, whose logits the
//! argmax skips). Weights are `[in, out]` (x · W), or, with
//! [`DecoderConfig::contiguous_below`], those of narrow tasks tile by tile ([`WeightStorage`]:
//! `[(out / cols) · in, cols]`; [`crate::model::Weight::stored_as`] converts).

use rayon::prelude::*;

use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, KernelGraph, Scalar, TensorDesc, UnaryOp};

use super::TaskTimes;
use super::builtin::{Builtin, QkvRows, decode_attention, decode_attention_partials, merge_projection};
use super::graph::{GraphError, ParamExpr, StepGraph, TensorId};

/// The shape of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (dividing `heads`).
    pub kv_heads: usize,
    /// Head dimension (even).
    pub head_dim: usize,
    /// MLP intermediate size.
    pub intermediate: usize,
    /// Positions the KV cache holds.
    pub capacity: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3; inputs `l{i}.q_norm`/`l{i}.k_norm
    /// [1, head_dim]`, fused into the [`Builtin::Rope`] tasks).
    pub qk_norm: bool,
    /// Element type of weights and activations.
    pub dtype: DType,
    /// Streamed projections whose tasks take fewer weight columns than this store their weight
    /// tile by tile ([`weight_storage`]: each task's `k × cols` tile one contiguous run, the
    /// input `[(n / cols) · k, cols]`) instead of row-major `[k, n]`, whose rows give such a
    /// task `2 · cols`-byte segments `2 · n` bytes apart; above 8, the tilings may also take
    /// 8, 24, 40, ... columns ([`DecoderConfig::tile_unit`]). 0: every weight row-major, tiles
    /// of 16 columns and more. The models' configurations
    /// ([`ModelConfig::decoder_config`](crate::model::ModelConfig::decoder_config)) take
    /// [`DEFAULT_CONTIGUOUS_BELOW`]; [`DecoderConfig::toy`] takes 0. DECISIONS change 66.
    pub contiguous_below: usize,
    /// The output projection by KV head group (DECISIONS change 101): each layer's attention
    /// leaves its split-KV partials unmerged ([`super::builtin::decode_attention_partials`]),
    /// a [`Builtin::MergeProjection`] tile merges one KV head's partials in its first loads and
    /// multiplies them by its rows and columns of `l{i}.wo` (row-major `[heads·head_dim,
    /// hidden]`), writing that group's partial sums `[kv_heads, hidden]`, and the gated MLP adds
    /// those rows to the residual as it loads it ([`streamed_gated_mlp_of_parts`]). No tile
    /// waits for another KV head's chunks, and the merge's fence, ticket and second round of
    /// loads leave the attention. `false`: the attention merges its chunks itself and the output
    /// projection is a streamed block graph ([`streamed_projection_residual`]).
    pub grouped_output: bool,
}

/// The models' [`DecoderConfig::contiguous_below`]: the 16- and 32-column tiles stored
/// contiguously, 64 columns and wider row-major. Measured on the H200 (DECISIONS change 66,
/// session 27): Llama-3.2-1B 1.074 → 1.027 ms/token, Qwen3-0.6B 1.039 → 1.003, Llama-3.1-8B
/// unchanged (4.81); every projection contiguous (129) gave the same as 64.
pub const DEFAULT_CONTIGUOUS_BELOW: usize = 64;

/// The widest residual row (`hidden`) whose models take [`DecoderConfig::grouped_output`] by
/// default ([`default_grouped_output`]); `None`: no model's.
///
/// `None` for now. With the gated MLP's parts added in separate passes (change 101's G3), the
/// grouped form measured faster only at hidden 1024 (below). Change 102 (the parts' sum heading
/// the gate/up's one pass) is in main and makes every grouped decoder's gate/up different code
/// from the G3 that was measured and checked on the device; that code has not run on a GPU yet
/// (session 46 got no machine for it). The next measurement sets this: `Some(1024)` if change
/// 102 keeps Qwen3's gain, or no limit at all if the grouped form then beats the merged one at
/// every width.
pub const GROUPED_OUTPUT_MAX_HIDDEN: Option<usize> = None;

/// The models' [`DecoderConfig::grouped_output`]: on for residual rows of at most
/// [`GROUPED_OUTPUT_MAX_HIDDEN`] elements. The grouped form saves the attention's merge (about
/// 2.5 µs a layer at each of the three models) and costs the gated MLP a load and sum of
/// `kv_heads` partial rows of `hidden` elements per task, which grows with the row. Measured on
/// an H100 against the merged form in one lease (DECISIONS change 101, session 46, G3):
/// Qwen3-0.6B (hidden 1024) 2.6% faster, Llama-3.2-1B (2048) 1.1% slower, Llama-3.1-8B (4096) the
/// same.
pub fn default_grouped_output(hidden: usize) -> bool {
    GROUPED_OUTPUT_MAX_HIDDEN.is_some_and(|max| hidden <= max)
}

impl DecoderConfig {
    /// A tiny two-layer decoder for tests (vocabulary 512, hidden 256, 4 heads of 64 over 2 KV
    /// heads, MLP 512, 128 positions, bf16).
    pub fn toy() -> DecoderConfig {
        DecoderConfig {
            vocab: 512,
            hidden: 256,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            intermediate: 512,
            capacity: 128,
            eps: 1e-5,
            qk_norm: false,
            dtype: DType::Bf16,
            contiguous_below: 0,
            grouped_output: false,
        }
    }

    /// The column step of the streamed projections' one-round tilings ([`projection_tiling_in`]):
    /// 8 when tiles of 8 columns would be stored contiguously (`contiguous_below > 8`: a task's
    /// 16-byte rows one run, where row-major they would be 16-byte segments a row apart), else 16.
    pub fn tile_unit(&self) -> usize {
        if self.contiguous_below > 8 { 8 } else { 16 }
    }

    /// The RoPE inverse frequencies `theta^(-2i/head_dim)` (the `inv_freq` input without
    /// scaling).
    pub fn inv_freq(&self, theta: f64) -> Vec<f32> {
        (0..self.head_dim / 2).map(|i| theta.powf(-2.0 * i as f64 / self.head_dim as f64) as f32).collect()
    }
}

/// Chunk of the vocabulary per argmax tile, of the hidden size per embedding tile, and of a
/// projection's reduced dim per loop iteration: the largest divisor of `n` not above `target`.
fn chunk(n: usize, target: usize) -> usize {
    (1..=target.min(n)).rev().find(|&c| n.is_multiple_of(c)).unwrap_or(1)
}

/// Workers the LM head is cut for: one task each (the default [`super::MpkOptions::workers`],
/// the H100's and H200's 132 SMs).
pub const LM_HEAD_TASKS: usize = 132;

/// Columns of the LM head's weight and logits for a vocabulary of `vocab` words: `vocab`
/// rounded up to a whole number of [`lm_head_tiling`]'s tasks — the extra columns are zero
/// weights ([`crate::model::Weight::stored_as`] pads them) whose logits the argmax skips.
/// Llama-3's 128256 becomes 132 tasks of 976 (128832, 0.45% more weight), Qwen3's 151936 132
/// of 1152 (152064); a vocabulary that divides (32000: 125 tasks of 256) stays. Applied to its
/// own result it gives it back.
pub fn lm_head_width(vocab: usize) -> usize {
    let cols = lm_head_cols(vocab);
    vocab.div_ceil(cols) * cols
}

/// Columns per LM head task: ⌈vocab / [`LM_HEAD_TASKS`]⌉ rounded up to a multiple of 16 (rows
/// of 16-byte vectors of a 16-bit weight).
fn lm_head_cols(vocab: usize) -> usize {
    vocab.div_ceil(LM_HEAD_TASKS).max(1).next_multiple_of(16)
}

/// The LM head's tiling over `k` inputs (the hidden size) and a vocabulary of `vocab`: one
/// round of at most [`LM_HEAD_TASKS`] tasks of [`lm_head_width`]`(vocab) / tasks` columns, each
/// worker streaming its whole share of the head in one pipeline, the reduced dim walked in steps
/// of the largest divisor of `k` up to `12288 / cols` rows (about 24 KiB of a 16-bit weight).
/// Before (DECISIONS change 75) the head took tasks of 128 columns, 8 or 9 per worker, and paid
/// a task's ~3 µs of pipeline fill, drain and signal each time; Llama-3's 1002 tasks also left
/// 7.6 rounds over 132 workers.
pub fn lm_head_tiling(k: usize, vocab: usize) -> ProjectionTiling {
    let cols = lm_head_cols(vocab);
    ProjectionTiling { cols, step: chunk(k, (12288 / cols).max(1)) }
}

/// The task widths a projection too wide for one round of tasks takes, widest first
/// ([`projection_tiling_in`]).
const WIDE_TILE_WIDTHS: [usize; 4] = [128, 64, 32, 16];

/// Tiles the argmax over the vocabulary aims at: about one per worker. Each argmax tile is a
/// task with a dispatch, a wait and a block reduction whatever its width, so a vocabulary whose
/// divisors near 1024 are small (Qwen3's 151936 = 2^7 · 1187) should not get a tile per 128
/// logits (1187 tasks; DECISIONS change 70).
pub const ARGMAX_TILES: usize = 128;

/// Vocabulary columns per argmax tile: the largest divisor of `vocab` not above
/// max(1024, ⌈vocab / [`ARGMAX_TILES`]⌉).
pub fn argmax_chunk(vocab: usize) -> usize {
    chunk(vocab, vocab.div_ceil(ARGMAX_TILES).max(1024))
}

fn ir(graph: &str, op: &str) -> impl Fn(crate::ir::IrError) -> GraphError {
    let (graph, op) = (graph.to_owned(), op.to_owned());
    move |e| GraphError::Operand { graph: graph.clone(), op: op.clone(), reason: e.to_string() }
}

/// The step graph `name` of one decode step of a decoder of shape `cfg`.
pub fn decoder_step(name: &str, cfg: &DecoderConfig) -> Result<StepGraph, GraphError> {
    let mut g = StepGraph::new(name)?;
    let (h, dt) = (cfg.hidden, cfg.dtype);
    let (qw, kvw) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
    let pos = g.param("pos")?;
    let embed = g.input("embed", &[cfg.vocab, h], dt)?;
    let token = g.state("token", &[1], DType::F32)?;
    let inv_freq = g.input("inv_freq", &[cfg.head_dim / 2], DType::F32)?;
    let mut x = g.builtin("embedding", Builtin::Embedding { chunk: chunk(h, 256) }, &[embed, token])?[0];
    // The operators of every layer (the weights' input shapes, tile by tile or row-major, are
    // theirs: `weight_storage`).
    // q, k and v as one projection: equal tiles over all three (Llama-3.2-1B: 128 tasks of 24
    // columns, where three operators took 64 of 32 and 2 × 32 of 16; DECISIONS change 89).
    let qkv = streamed_norm_projections(cfg, &[qw + 2 * kvw]).map_err(ir(name, "qkv"))?;
    // The output projection as a streamed block graph, or (grouped) merge projections.
    let o = if cfg.grouped_output {
        None
    } else {
        Some(streamed_projection_residual(cfg, qw).map_err(ir(name, "o_proj"))?)
    };
    let mlp = if cfg.grouped_output {
        streamed_gated_mlp_of_parts(cfg, cfg.kv_heads).map_err(ir(name, "mlp"))?
    } else {
        streamed_gated_mlp(cfg).map_err(ir(name, "mlp"))?
    };
    // The MLP's weights are its last three inputs (after x, the parts when grouped, the gain).
    let mlp_w = mlp.inputs().len() - 3;
    let shape = |kg: &KernelGraph, i: usize| kg.inputs()[i].shape.clone();
    for l in 0..cfg.layers {
        let p = |s: &str| format!("l{l}.{s}");
        let attn_norm = g.input(&p("attn_norm"), &[1, h], dt)?;
        let wqkv = g.input(&p("wqkv"), &shape(&qkv, 2), dt)?;
        // Grouped, the output projection's tiles take rows of one KV head group: row-major.
        let wo_shape = o.as_ref().map_or_else(|| vec![qw, h], |o| shape(o, 1));
        let wo = g.input(&p("wo"), &wo_shape, dt)?;
        let mlp_norm = g.input(&p("mlp_norm"), &[1, h], dt)?;
        let wg = g.input(&p("wg"), &shape(&mlp, mlp_w), dt)?;
        let wu = g.input(&p("wu"), &shape(&mlp, mlp_w + 1), dt)?;
        let wd = g.input(&p("wd"), &shape(&mlp, mlp_w + 2), dt)?;
        let k_cache = g.state(&p("k_cache"), &[cfg.kv_heads, cfg.capacity, cfg.head_dim], dt)?;
        let v_cache = g.state(&p("v_cache"), &[cfg.kv_heads, cfg.capacity, cfg.head_dim], dt)?;

        let rows = g.mugraph(&p("qkv"), &qkv, &[x, attn_norm, wqkv])?[0];
        let norm = if cfg.qk_norm {
            let q_norm = g.input(&p("q_norm"), &[1, cfg.head_dim], dt)?;
            let k_norm = g.input(&p("k_norm"), &[1, cfg.head_dim], dt)?;
            Some((Scalar(cfg.eps), [q_norm, k_norm]))
        } else {
            None
        };
        let scale = Scalar(1.0 / (cfg.head_dim as f32).sqrt());
        let workers = super::MpkOptions::default().workers;
        let attend = if cfg.grouped_output { decode_attention_partials } else { decode_attention };
        let a = attend(
            &mut g,
            &p("attention"),
            QkvRows::Fused(rows),
            inv_freq,
            norm,
            [k_cache, v_cache],
            ParamExpr::of(pos),
            scale,
            workers,
        )?;
        x = match &o {
            Some(o) => {
                let x = g.mugraph(&p("o_proj"), o, &[a, wo, x])?[0];
                g.mugraph(&p("mlp"), &mlp, &[x, mlp_norm, wg, wu, wd])?[0]
            }
            None => {
                let parts = merge_projection(&mut g, &p("o_proj"), a, wo, workers)?;
                g.mugraph(&p("mlp"), &mlp, &[x, parts, mlp_norm, wg, wu, wd])?[0]
            }
        };
    }
    let final_norm = g.input("final_norm", &[1, h], dt)?;
    let width = lm_head_width(cfg.vocab);
    let tiling = lm_head_tiling(h, cfg.vocab);
    let head = streamed_norm_projection(cfg, width, tiling).map_err(ir(name, "logits"))?;
    let lm_head = g.input("lm_head", &shape(&head, 2), dt)?;
    let logits = g.mugraph("logits", &head, &[x, final_norm, lm_head])?[0];
    // An argmax tile per LM head task where the head is wide (each starts when its task ends).
    let chunk = if tiling.cols >= 256 { tiling.cols } else { argmax_chunk(width) };
    let argmax = Builtin::ArgmaxPartial { chunk, columns: cfg.vocab };
    let partial = g.builtin("argmax", argmax, &[logits])?[0];
    g.add_builtin("next_token", Builtin::ArgmaxReduce, &[partial], &[token])?;
    Ok(g)
}

/// The step graph's name of the decoder of model `model` (`llama-3.2-1b`), with `layers` when
/// it is a variant with fewer layers: letters and digits kept, anything else `_`, prefixed
/// `decode_` (`decode_llama_3_2_1b`, `decode_qwen3_0_6b_2l`).
pub fn step_name(model: &str, layers: Option<usize>) -> String {
    let base: String = model.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    match layers {
        Some(l) => format!("decode_{base}_{l}l"),
        None => format!("decode_{base}"),
    }
}

/// `rms_norm(x, w) · W_j` for each output width `j`: inputs `x [1, hidden]`, `w [1, hidden]`,
/// then one weight `[hidden, width_j]` per output.
pub fn norm_projections(cfg: &DecoderConfig, widths: &[usize]) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let x = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let w = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let weights: Vec<_> = widths.iter().map(|&n| k.input(&[cfg.hidden, n], cfg.dtype)).collect::<Result<_, _>>()?;
    let n = k.rms_norm(x, cfg.eps, Some(w))?;
    for wj in weights {
        let y = k.matmul(n, wj)?;
        k.output(y, None)?;
    }
    Ok(k)
}

/// Tasks a streamed projection aims at: about one for each of the H200's 132 workers, so that a
/// short projection (o_proj, down, k and v) streams its weights on every SM at once.
pub const PROJECTION_TASKS: usize = 128;

/// How the tasks of a streamed projection `x [1, k] · W [k, n]` cut it: `cols` weight columns
/// per task, the reduced dim walked by the for-loop in steps of `step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProjectionTiling {
    /// Weight columns per task.
    pub cols: usize,
    /// Rows of the weight per loop iteration.
    pub step: usize,
}

/// The tiling of a streamed projection of `k` inputs and `n` outputs. When a width of 16 to 128
/// columns in steps of 16 (32- to 256-byte row segments of a 16-bit weight) dividing `n` gives at
/// most [`PROJECTION_TASKS`] tasks, the narrowest such: one round of tasks, each worker streaming
/// the fewest columns (Llama-3.1-8B's gate/up, 14 336 outputs: 112 columns, 128 tasks, where 64
/// columns made 224 tasks, a second round on 92 of the 132 workers; Qwen3-0.6B's, 3072: 32
/// columns, 96 tasks instead of 192 of 16; DECISIONS change 56). Else (an LM head) the widest of
/// 128, 64, 32 and 16 that still gives at least [`PROJECTION_TASKS`] tasks, else the narrowest
/// of them that divides `n` (or `n` whole); in that fallback 128 columns serve outputs of
/// 16 384 and more (an LM head): half as many tasks as at 64, each streaming twice as long
/// between its pipeline's fill and drain (DECISIONS change 49). The reduced dim is walked in
/// steps of about `128 · 64 / cols` rows ([`ProjectionTiling::of`]).
pub fn projection_tiling(k: usize, n: usize) -> ProjectionTiling {
    projection_tiling_in(16, k, n)
}

/// [`projection_tiling`] with one-round widths from `unit` to 128 columns in steps of `unit`
/// (16, or 8 for a decoder whose tiles of 8 columns lie contiguously: [`DecoderConfig::tile_unit`]).
/// Qwen3-0.6B at 8: o_proj and down (1024 outputs) 128 tasks of 8 columns where 16 gave 64,
/// gate/up (3072) 128 of 24 where 32 gave 96.
pub fn projection_tiling_in(unit: usize, k: usize, n: usize) -> ProjectionTiling {
    let widths = WIDE_TILE_WIDTHS;
    let unit = unit.clamp(1, 128);
    let one_round = (unit..=128).step_by(unit).find(|&c| n.is_multiple_of(c) && n / c <= PROJECTION_TASKS);
    let cols = one_round
        .or_else(|| widths.into_iter().find(|&c| n.is_multiple_of(c) && n / c >= PROJECTION_TASKS))
        .or_else(|| widths.into_iter().rev().find(|&c| n.is_multiple_of(c)))
        .unwrap_or(n);
    ProjectionTiling::of(k, cols)
}

impl ProjectionTiling {
    /// `cols` columns per task over a reduced dim of `k`, walked in steps of `128 · 64 / cols`
    /// rows (the largest divisor of `k` up to it), so that an iteration moves about 16 KiB of
    /// each weight whatever the width (the mma planner splits a narrow tile's k-steps over the
    /// warps: every warp keeps 8 k-steps).
    pub fn of(k: usize, cols: usize) -> ProjectionTiling {
        ProjectionTiling::stepping(k, cols, 128 * 64)
    }

    /// This tiling's columns in steps of about `256 · 64 / cols` rows (the largest divisor of
    /// `k` up to it), twice [`ProjectionTiling::of`]'s.
    pub fn double_steps(self, k: usize) -> ProjectionTiling {
        ProjectionTiling::stepping(k, self.cols, 256 * 64)
    }

    /// `cols` columns in steps of about `elements / cols` rows of a reduced dim of `k`.
    fn stepping(k: usize, cols: usize, elements: usize) -> ProjectionTiling {
        ProjectionTiling { cols, step: chunk(k, (elements / cols.max(1)).max(1)) }
    }
}

/// The most bytes of weights a gated MLP's gate/up task may stream for its loop to take
/// [`ProjectionTiling::double_steps`]: a task this small (Qwen3-0.6B's 2 × 1024 × 24 bf16, 96
/// KiB) streams its whole weights from the pipeline's prologue in two stages; larger ones (the
/// 1B's 512 KiB) keep [`ProjectionTiling::of`]'s 16 KiB a weight a stage (DECISIONS change 91:
/// the 1B's in 64 KiB stages was 1–1.5% slower, Qwen3's in two 1.3–2.4% faster).
pub const GATE_UP_DOUBLE_STEP_BYTES: usize = 96 * 1024;

/// The tilings of projections of `k` inputs to each of `widths` outputs that run side by side
/// (one operator each, all ready at once: a layer's q, k and v): [`projection_tiling`]'s, then,
/// while their tasks together outnumber [`PROJECTION_TASKS`] (a second round of tasks on some
/// workers, which every consumer waits for), the projection with the most tasks — the one of
/// the narrowest tiles among equals — widens its tiles twofold, up to 64 columns. Llama-3.2-1B:
/// q 32 columns (64 tasks), k and v 16 (32 each) where each alone takes 16 (192 tasks in all);
/// a projection alone keeps its tiling (DECISIONS change 50).
pub fn grouped_tilings(k: usize, widths: &[usize]) -> Vec<ProjectionTiling> {
    grouped_tilings_in(16, k, widths)
}

/// [`grouped_tilings`] from [`projection_tiling_in`]`(unit, ..)`'s tilings.
pub fn grouped_tilings_in(unit: usize, k: usize, widths: &[usize]) -> Vec<ProjectionTiling> {
    let mut t: Vec<ProjectionTiling> = widths.iter().map(|&n| projection_tiling_in(unit, k, n)).collect();
    loop {
        let tasks = |i: usize, t: &[ProjectionTiling]| widths[i] / t[i].cols;
        if (0..widths.len()).map(|i| tasks(i, &t)).sum::<usize>() <= PROJECTION_TASKS {
            return t;
        }
        let widen = (0..widths.len())
            .filter(|&i| t[i].cols * 2 <= 64 && widths[i].is_multiple_of(t[i].cols * 2))
            .max_by_key(|&i| (tasks(i, &t), std::cmp::Reverse(t[i].cols), std::cmp::Reverse(i)));
        let Some(i) = widen else { return t };
        t[i] = ProjectionTiling::of(k, t[i].cols * 2);
    }
}

/// How a streamed projection's weight `W [k, n]` lies in device memory: the step graph's input
/// of that weight has [`WeightStorage::shape`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightStorage {
    /// Row-major `[k, n]`: a task of `cols` columns reads `k` segments of `cols` elements, a row
    /// of the whole weight apart.
    Rows,
    /// Tile by tile: the `k × cols` tile of columns `t·cols .. (t+1)·cols` row-major at element
    /// `t · k · cols`, the input `[(n / cols) · k, cols]`, so a task reads one contiguous run.
    Tiles {
        /// Columns per tile (a task's columns; dividing `n`).
        cols: usize,
    },
}

impl WeightStorage {
    /// The input shape of a weight of `k` rows and `n` columns stored this way.
    pub fn shape(self, k: usize, n: usize) -> Vec<usize> {
        match self {
            WeightStorage::Rows => vec![k, n],
            WeightStorage::Tiles { cols } => vec![n / cols * k, cols],
        }
    }

    /// The storage of a weight `[k, n]` held as an input of shape `shape`: [`WeightStorage::Rows`]
    /// when it is `[k, n]`, tiles of `c` columns when it is `[(n / c) · k, c]` for a `c` below `n`
    /// dividing it, else `None`.
    pub fn of_shape(k: usize, n: usize, shape: &[usize]) -> Option<WeightStorage> {
        match *shape {
            [r, c] if r == k && c == n => Some(WeightStorage::Rows),
            [r, c] if c > 0 && c < n && n.is_multiple_of(c) && r == n / c * k => Some(WeightStorage::Tiles { cols: c }),
            _ => None,
        }
    }

    /// A row-major `[k, n]` weight's values in this storage; `None` when `rows` does not hold
    /// `k · n` values or the tiles do not divide `n`.
    pub fn store<T: Copy + Send + Sync>(self, k: usize, n: usize, rows: &[T]) -> Option<Vec<T>> {
        if !self.fits(k, n, rows.len()) {
            return None;
        }
        let WeightStorage::Tiles { cols } = self else { return Some(rows.to_vec()) };
        let mut out = rows.to_vec();
        out.par_chunks_mut(k * cols).enumerate().for_each(|(t, tile)| {
            for (r, row) in tile.chunks_mut(cols).enumerate() {
                row.copy_from_slice(&rows[r * n + t * cols..][..cols]);
            }
        });
        Some(out)
    }

    /// The row-major `[k, n]` values of a weight stored this way (the inverse of
    /// [`WeightStorage::store`]); `None` as there.
    pub fn load<T: Copy + Send + Sync>(self, k: usize, n: usize, stored: &[T]) -> Option<Vec<T>> {
        if !self.fits(k, n, stored.len()) {
            return None;
        }
        let WeightStorage::Tiles { cols } = self else { return Some(stored.to_vec()) };
        let mut out = stored.to_vec();
        out.par_chunks_mut(n).enumerate().for_each(|(r, row)| {
            for (t, seg) in row.chunks_mut(cols).enumerate() {
                seg.copy_from_slice(&stored[t * k * cols + r * cols..][..cols]);
            }
        });
        Some(out)
    }

    /// Whether `len` values are a `[k, n]` weight this storage can cut.
    fn fits(self, k: usize, n: usize, len: usize) -> bool {
        let tiles = match self {
            WeightStorage::Rows => true,
            WeightStorage::Tiles { cols } => cols > 0 && n.is_multiple_of(cols),
        };
        tiles && len > 0 && k.checked_mul(n) == Some(len)
    }
}

/// How decoder `cfg` stores the weight `[k, n]` of a projection tiled by `tiling`: tile by tile
/// where its tasks take fewer than [`DecoderConfig::contiguous_below`] columns (and more than one
/// task shares the weight), else row-major.
pub fn weight_storage(cfg: &DecoderConfig, n: usize, tiling: ProjectionTiling) -> WeightStorage {
    if tiling.cols < cfg.contiguous_below && tiling.cols < n {
        WeightStorage::Tiles { cols: tiling.cols }
    } else {
        WeightStorage::Rows
    }
}

/// The block graph of a batch-1 projection `x [1, k] · W_j [k, n]` for each `W_j` (all of the
/// same `n`), as weight streaming wants it: each block owns the [`projection_tiling`] columns
/// of every `W_j` and walks `k` in the for-loop.
///
/// With `norm = Some(eps)` the projection is of `rms_norm(x, g)` for a gain `g [1, k]` (the
/// second input): the loop multiplies `x ∘ g` into the weights and accumulates `Σ x²` over the
/// same iterations (`acc_rms_last`), and the accumulators are divided by `sqrt(mean(x²) + eps)`
/// after the loop — `rms_norm(x)·g·W = ((x∘g)·W) / sqrt(mean(x²) + eps)`, so no separate norm
/// operator (and no dependency hop) precedes the projection.
///
/// With `parts > 0` the input is the sum `x + Σ_p P[p]` of `x` and the rows of a second input
/// `P [parts, k]` (the output projection's per-group partial sums of
/// [`crate::mpk::builtin::Builtin::MergeProjection`]), added in the loop in f32 before anything
/// else reads `x`; the gain, the weights and the extra inputs follow `P`.
///
/// `epilogue` combines the accumulators (one per weight, in f32, normalized when `norm` is
/// given) and the after-loop tiles of the extra inputs into the saved tile; `extra` gives each
/// extra input's rows — `[rows, n]` operands split like the output, carried through the loop
/// unchanged (an `acc_max` of the same tile, exact).
///
/// The weights lie as `storage` says: row-major, each block taking its columns of every row, or
/// tile by tile, each block taking its tile's `k` rows (the grid and the loop split the same
/// dim).
#[allow(clippy::too_many_arguments)]
fn streamed_block(
    k: usize,
    n: usize,
    ProjectionTiling { cols, step }: ProjectionTiling,
    storage: WeightStorage,
    norm: Option<Scalar>,
    parts: usize,
    weights: usize,
    extra: &[usize],
    dtype: DType,
    epilogue: impl FnOnce(
        &mut BlockGraph,
        &[crate::ir::TensorRef],
        &[crate::ir::TensorRef],
    ) -> Result<crate::ir::TensorRef, crate::ir::IrError>,
) -> Result<BlockGraph, crate::ir::IrError> {
    // Operand positions: x, then P, the gain, the weights and the extra inputs, as present.
    let gain = 1 + usize::from(parts > 0);
    let first_weight = gain + usize::from(norm.is_some());
    let mut inputs = vec![TensorDesc::new(&[1, k], dtype)];
    if parts > 0 {
        inputs.push(TensorDesc::new(&[parts, k], dtype));
    }
    if norm.is_some() {
        inputs.push(TensorDesc::new(&[1, k], dtype));
    }
    inputs.extend((0..weights).map(|_| TensorDesc::new(&storage.shape(k, n), dtype)));
    inputs.extend(extra.iter().map(|&rows| TensorDesc::new(&[rows, n], dtype)));
    let mut b = BlockGraph::new(inputs, [n / cols, 1, 1], 256, k / step)?;
    let split = [Some(1), None, None];
    let weight_split = match storage {
        WeightStorage::Rows => split,
        WeightStorage::Tiles { .. } => [Some(0), None, None],
    };
    let mut x = b.input(0, [None; 3], Some(1))?;
    if parts > 0 {
        let p = b.input(1, [None; 3], Some(1))?;
        let sum = b.op(BlockOp::ReduceSum { dim: 0 }, &[p])?;
        x = b.binary(BinaryOp::Add, x, sum)?;
    }
    let rms = match norm {
        Some(_) => {
            let g = b.input(gain, [None; 3], Some(1))?;
            let rms = b.accum(AccKind::RmsLast, &[x])?;
            x = b.binary(BinaryOp::Mul, x, g)?;
            Some(rms)
        }
        None => None,
    };
    let mut accs = Vec::new();
    for j in 0..weights {
        let w = b.input(first_weight + j, weight_split, Some(0))?;
        let y = b.matmul(x, w)?;
        accs.push(b.accum(AccKind::Sum, &[y])?);
    }
    let mut carried = Vec::new();
    for j in 0..extra.len() {
        let r = b.input(first_weight + weights + j, split, None)?;
        carried.push(b.accum(AccKind::Max, &[r])?);
    }
    if let (Some(rms), Some(eps)) = (rms, norm) {
        // sqrt(mean(x²) + eps) from the root mean square.
        let ms = b.unary(UnaryOp::Square, rms)?;
        let ms = b.unary(UnaryOp::AddScalar { c: eps }, ms)?;
        let den = b.unary(UnaryOp::Sqrt, ms)?;
        for acc in &mut accs {
            *acc = b.binary(BinaryOp::Div, *acc, den)?;
        }
    }
    let out = epilogue(&mut b, &accs, &carried)?;
    b.output(out, split)?;
    Ok(b)
}

/// [`norm_projections`] as streamed blocks (`streamed_block`), one operator per weight, each
/// with the norm folded in: inputs `x [1, hidden]`, `w [1, hidden]`, then one weight
/// `[hidden, width_j]` per output.
pub fn streamed_norm_projections(cfg: &DecoderConfig, widths: &[usize]) -> Result<KernelGraph, crate::ir::IrError> {
    tiled_norm_projections(cfg, widths, &grouped_tilings_in(cfg.tile_unit(), cfg.hidden, widths))
}

/// One streamed projection `rms_norm(x, w) · W` of `width` outputs tiled by `tiling` (the LM
/// head's [`lm_head_tiling`]), its weight stored as [`weight_storage`] says: inputs
/// `x [1, hidden]`, `w [1, hidden]`, `W [hidden, width]`.
pub fn streamed_norm_projection(
    cfg: &DecoderConfig,
    width: usize,
    tiling: ProjectionTiling,
) -> Result<KernelGraph, crate::ir::IrError> {
    tiled_norm_projections(cfg, &[width], &[tiling])
}

/// The streamed norm projections of `widths`, the `j`-th tiled by `tilings[j]`, each weight
/// stored as [`weight_storage`] says.
fn tiled_norm_projections(
    cfg: &DecoderConfig,
    widths: &[usize],
    tilings: &[ProjectionTiling],
) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let x = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let w = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let storage: Vec<_> = widths.iter().zip(tilings).map(|(&n, &t)| weight_storage(cfg, n, t)).collect();
    let weights: Vec<_> = widths
        .iter()
        .zip(&storage)
        .map(|(&n, s)| k.input(&s.shape(cfg.hidden, n), cfg.dtype))
        .collect::<Result<_, _>>()?;
    for (((&width, wj), &tiling), storage) in widths.iter().zip(weights).zip(tilings).zip(storage) {
        let norm = Some(Scalar(cfg.eps));
        let block =
            streamed_block(cfg.hidden, width, tiling, storage, norm, 0, 1, &[], cfg.dtype, |_, accs, _| Ok(accs[0]))?;
        let y = k.custom(&[x, w, wj], block)?[0];
        k.output(y, None)?;
    }
    Ok(k)
}

/// [`projection_residual`] as one streamed block (`streamed_block`): `r + a · W` with the sum in f32.
pub fn streamed_projection_residual(cfg: &DecoderConfig, width: usize) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let tiling = projection_tiling_in(cfg.tile_unit(), width, cfg.hidden);
    let storage = weight_storage(cfg, cfg.hidden, tiling);
    let a = k.input(&[1, width], cfg.dtype)?;
    let w = k.input(&storage.shape(width, cfg.hidden), cfg.dtype)?;
    let r = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let block = streamed_block(width, cfg.hidden, tiling, storage, None, 0, 1, &[1], cfg.dtype, |b, accs, carried| {
        b.binary(BinaryOp::Add, carried[0], accs[0])
    })?;
    let out = k.custom(&[a, w, r], block)?[0];
    k.output(out, None)?;
    Ok(k)
}

/// [`gated_mlp`] with streamed blocks: one operator for `silu(n · Wg) · (n · Wu)` with the norm
/// `n = rms_norm(x, w)` folded in (both weights' columns in one task), and one for `x + m · Wd`.
pub fn streamed_gated_mlp(cfg: &DecoderConfig) -> Result<KernelGraph, crate::ir::IrError> {
    streamed_gated_mlp_in(cfg, 0)
}

/// [`gated_mlp_of_parts`] with streamed blocks, as [`streamed_gated_mlp`] of the residual
/// `x + Σ_p P[p]`: both operators add the `parts` rows of `P` to `x` as they load it (the
/// gate/up task over the whole row, in its loop before the folded norm; the down task its
/// columns, in its epilogue), so no operator of its own sums the output projection's partial
/// sums. Inputs `x [1, hidden]`, `P [parts, hidden]`, `w`, `Wg`, `Wu`, `Wd`.
pub fn streamed_gated_mlp_of_parts(cfg: &DecoderConfig, parts: usize) -> Result<KernelGraph, crate::ir::IrError> {
    streamed_gated_mlp_in(cfg, parts.max(1))
}

fn streamed_gated_mlp_in(cfg: &DecoderConfig, parts: usize) -> Result<KernelGraph, crate::ir::IrError> {
    let (h, i) = (cfg.hidden, cfg.intermediate);
    let mut k = KernelGraph::new();
    let unit = cfg.tile_unit();
    let (mut up_tiling, down_tiling) = (projection_tiling_in(unit, h, i), projection_tiling_in(unit, i, h));
    if 2 * h * up_tiling.cols * cfg.dtype.size_bytes() <= GATE_UP_DOUBLE_STEP_BYTES {
        up_tiling = up_tiling.double_steps(h);
    }
    let (up_storage, down_storage) = (weight_storage(cfg, i, up_tiling), weight_storage(cfg, h, down_tiling));
    let x = k.input(&[1, h], cfg.dtype)?;
    let p = if parts > 0 { Some(k.input(&[parts, h], cfg.dtype)?) } else { None };
    let w = k.input(&[1, h], cfg.dtype)?;
    let wg = k.input(&up_storage.shape(h, i), cfg.dtype)?;
    let wu = k.input(&up_storage.shape(h, i), cfg.dtype)?;
    let wd = k.input(&down_storage.shape(i, h), cfg.dtype)?;
    let eps = Some(Scalar(cfg.eps));
    let gate_up = streamed_block(h, i, up_tiling, up_storage, eps, parts, 2, &[], cfg.dtype, |b, accs, _| {
        let s = b.unary(UnaryOp::Silu, accs[0])?;
        b.binary(BinaryOp::Mul, s, accs[1])
    })?;
    let m = k.custom(&[&[x][..], p.as_slice(), &[w, wg, wu]].concat(), gate_up)?[0];
    let extra: Vec<usize> = [1].into_iter().chain(p.map(|_| parts)).collect();
    let down = streamed_block(i, h, down_tiling, down_storage, None, 0, 1, &extra, cfg.dtype, |b, accs, carried| {
        // x + Σ_p P[p] + m · Wd (the parts summed first, as the gate/up task sums them).
        let r = match carried.get(1) {
            Some(&parts) => {
                let sum = b.op(BlockOp::ReduceSum { dim: 0 }, &[parts])?;
                b.binary(BinaryOp::Add, carried[0], sum)?
            }
            None => carried[0],
        };
        b.binary(BinaryOp::Add, r, accs[0])
    })?;
    let out = k.custom(&[&[m, wd, x][..], p.as_slice()].concat(), down)?[0];
    k.output(out, None)?;
    Ok(k)
}

/// `r + a · W`: inputs `a [1, width]`, `W [width, hidden]`, `r [1, hidden]`.
pub fn projection_residual(cfg: &DecoderConfig, width: usize) -> Result<KernelGraph, crate::ir::IrError> {
    let mut k = KernelGraph::new();
    let a = k.input(&[1, width], cfg.dtype)?;
    let w = k.input(&[width, cfg.hidden], cfg.dtype)?;
    let r = k.input(&[1, cfg.hidden], cfg.dtype)?;
    let y = k.matmul(a, w)?;
    let out = k.add(r, y)?;
    k.output(out, None)?;
    Ok(k)
}

/// `x + (silu(n · Wg) · (n · Wu)) · Wd` with `n = rms_norm(x, w)`: inputs `x`, `w`, `Wg`, `Wu`,
/// `Wd`.
pub fn gated_mlp(cfg: &DecoderConfig) -> Result<KernelGraph, crate::ir::IrError> {
    gated_mlp_in(cfg, 0)
}

/// [`gated_mlp`] of the residual `r = x + Σ_p P[p]`: `r + (silu(n · Wg) · (n · Wu)) · Wd` with
/// `n = rms_norm(r, w)`. Inputs `x [1, hidden]`, `P [parts, hidden]`, `w`, `Wg`, `Wu`, `Wd`.
pub fn gated_mlp_of_parts(cfg: &DecoderConfig, parts: usize) -> Result<KernelGraph, crate::ir::IrError> {
    gated_mlp_in(cfg, parts.max(1))
}

/// [`gated_mlp`] of `x`, or with `parts > 0` of `x + Σ_p P[p]` ([`gated_mlp_of_parts`]).
fn gated_mlp_in(cfg: &DecoderConfig, parts: usize) -> Result<KernelGraph, crate::ir::IrError> {
    let (h, i) = (cfg.hidden, cfg.intermediate);
    let mut k = KernelGraph::new();
    let x = k.input(&[1, h], cfg.dtype)?;
    let p = if parts > 0 { Some(k.input(&[parts, h], cfg.dtype)?) } else { None };
    let w = k.input(&[1, h], cfg.dtype)?;
    let wg = k.input(&[h, i], cfg.dtype)?;
    let wu = k.input(&[h, i], cfg.dtype)?;
    let wd = k.input(&[i, h], cfg.dtype)?;
    let r = match p {
        Some(p) => {
            let sum = k.reduce_sum(p, 0)?;
            k.add(x, sum)?
        }
        None => x,
    };
    let n = k.rms_norm(r, cfg.eps, Some(w))?;
    let gate = k.matmul(n, wg)?;
    let up = k.matmul(n, wu)?;
    let s = k.silu(gate)?;
    let m = k.mul(s, up)?;
    let d = k.matmul(m, wd)?;
    let out = k.add(r, d)?;
    k.output(out, None)?;
    Ok(k)
}

/// Where a decode step's time goes for one operator kind ([`op_kind`]: the same operator of
/// every layer together).
#[derive(Clone, Debug, PartialEq)]
pub struct KindProfile {
    /// The kind (`qkv.k0`, `attention`, `logits.k0`).
    pub kind: String,
    /// Operators of this kind (one per layer, or one).
    pub ops: usize,
    /// Tasks of one operator.
    pub tasks: usize,
    /// Mean body time of a task (ready to end), ns.
    pub body_ns: f64,
    /// Mean wait of a task (start to ready: prefetch issue and dependency wait), ns.
    pub wait_ns: f64,
    /// Mean time from an operator's first task ready to its last task's end in a step, ns.
    pub span_ns: f64,
    /// The kind's tasks' time (wait and body) over the workers' time of the steps
    /// (workers × Σ step spans): the shares of all kinds and the time between tasks make 1.
    pub share: f64,
}

/// The kind of operator `name` of a decoder step: the name without its layer prefix `l{i}.`.
pub fn op_kind(name: &str) -> &str {
    match name.strip_prefix('l').and_then(|r| r.split_once('.')) {
        Some((digits, rest)) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => rest,
        _ => name,
    }
}

/// Per operator kind, from the task times of a timed run (`Timeline::tasks`) of `workers`
/// workers on a graph whose operators are named `op_names` and whose task `t` belongs to
/// operator `task_op[t]`: tasks, mean body and wait, mean operator span, and share of the
/// workers' time; in the order of the kinds' first operators.
pub fn profile(op_names: &[String], task_op: &[usize], runs: &[TaskTimes], workers: usize) -> Vec<KindProfile> {
    use std::collections::BTreeMap;
    // Each step's span, first start to last end.
    let mut steps: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    // Per (op, step): first ready, last end, runs.
    let mut per_op: BTreeMap<(usize, u32), (u64, u64)> = BTreeMap::new();
    for r in runs {
        let s = steps.entry(r.step).or_insert((r.start, r.end));
        *s = (s.0.min(r.start), s.1.max(r.end));
        let o = per_op.entry((task_op[r.task as usize], r.step)).or_insert((r.ready, r.end));
        *o = (o.0.min(r.ready), o.1.max(r.end));
    }
    let total: u64 = steps.values().map(|(a, b)| b.saturating_sub(*a)).sum();
    let mut kinds: Vec<String> = Vec::new();
    let kind_of: Vec<usize> = op_names
        .iter()
        .map(|n| {
            let k = op_kind(n);
            kinds.iter().position(|x| x == k).unwrap_or_else(|| {
                kinds.push(k.to_owned());
                kinds.len() - 1
            })
        })
        .collect();
    // Σ body, Σ wait, runs, Σ span, (op, step) pairs, operators seen.
    let mut acc = vec![(0u64, 0u64, 0usize, 0u64, 0usize, std::collections::BTreeSet::new()); kinds.len()];
    for r in runs {
        let op = task_op[r.task as usize];
        let a = &mut acc[kind_of[op]];
        a.0 += r.busy_ns();
        a.1 += r.wait_ns();
        a.2 += 1;
        a.5.insert(op);
    }
    for (&(op, _), &(ready, end)) in &per_op {
        let a = &mut acc[kind_of[op]];
        a.3 += end.saturating_sub(ready);
        a.4 += 1;
    }
    kinds
        .into_iter()
        .zip(acc)
        .filter(|(_, a)| a.2 > 0)
        .map(|(kind, (body, wait, n, span, pairs, ops))| {
            let per = |v: u64, d: usize| v as f64 / d.max(1) as f64;
            KindProfile {
                kind,
                ops: ops.len(),
                tasks: n / pairs.max(1),
                body_ns: per(body, n),
                wait_ns: per(wait, n),
                span_ns: per(span, pairs),
                share: (body + wait) as f64 / (workers as f64 * total as f64).max(1.0),
            }
        })
        .collect()
}

/// One operator's place in a layer's timeline ([`layer_timeline`]), in ns from the layer's
/// first task ready, means over the steps.
#[derive(Clone, Debug, PartialEq)]
pub struct OpWindow {
    /// The operator.
    pub name: String,
    /// Its first task ready.
    pub first_ready_ns: f64,
    /// Its last task's end.
    pub last_end_ns: f64,
}

/// The operators of layer `layer` (named `l{layer}.…`), in graph order, with when each begins
/// (its first task ready) and ends (its last task's end) relative to the layer's first task
/// ready, averaged over the steps of `runs`: the chain of a layer's operators and the gaps
/// between them (what [`profile`]'s spans do not show).
pub fn layer_timeline(op_names: &[String], task_op: &[usize], runs: &[TaskTimes], layer: usize) -> Vec<OpWindow> {
    use std::collections::BTreeMap;
    let prefix = format!("l{layer}.");
    let ops: Vec<usize> = (0..op_names.len()).filter(|&o| op_names[o].starts_with(&prefix)).collect();
    // Per (step, op): first ready, last end.
    let mut per: BTreeMap<(u32, usize), (u64, u64)> = BTreeMap::new();
    for r in runs {
        let op = task_op[r.task as usize];
        if op_names[op].starts_with(&prefix) {
            let e = per.entry((r.step, op)).or_insert((r.ready, r.end));
            *e = (e.0.min(r.ready), e.1.max(r.end));
        }
    }
    let mut t0: BTreeMap<u32, u64> = BTreeMap::new();
    for (&(step, _), &(ready, _)) in &per {
        let e = t0.entry(step).or_insert(ready);
        *e = (*e).min(ready);
    }
    ops.into_iter()
        .filter_map(|op| {
            let w: Vec<(f64, f64)> = per
                .iter()
                .filter(|((_, o), _)| *o == op)
                .map(|(&(step, _), &(ready, end))| {
                    let base = t0[&step];
                    (ready.saturating_sub(base) as f64, end.saturating_sub(base) as f64)
                })
                .collect();
            (!w.is_empty()).then(|| OpWindow {
                name: op_names[op].clone(),
                first_ready_ns: w.iter().map(|x| x.0).sum::<f64>() / w.len() as f64,
                last_end_ns: w.iter().map(|x| x.1).sum::<f64>() / w.len() as f64,
            })
        })
        .collect()
}

/// The names of a decoder step's weight inputs with their shapes, in graph order (what a
/// checkpoint must provide, `token` and `inv_freq` excluded).
pub fn weight_names(g: &StepGraph) -> Vec<(String, Vec<usize>)> {
    g.tensors()
        .iter()
        .filter(|t| t.kind == super::graph::TensorKind::Input && t.name != "inv_freq")
        .map(|t| (t.name.clone(), t.desc.shape.clone()))
        .collect()
}

/// The tensor called `name`, or an error naming it.
pub fn tensor(g: &StepGraph, name: &str) -> Result<TensorId, GraphError> {
    g.tensor_named(name).ok_or_else(|| GraphError::Dataflow {
        graph: g.name().into(),
        tensor: name.into(),
        reason: "no such tensor".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argmax_takes_about_one_tile_per_worker_where_the_vocabulary_divides() {
        // Llama's 128256 = 2^8 · 3 · 167: 1002 columns, 128 tiles (as before).
        assert_eq!(argmax_chunk(128_256), 1002);
        // Qwen3's 151936 = 2^7 · 1187: 1187 columns, 128 tiles (was 128 columns, 1187 tiles).
        assert_eq!(argmax_chunk(151_936), 1187);
        // a small vocabulary is one tile; a power of two 1024 columns
        assert_eq!(argmax_chunk(256), 256);
        assert_eq!(argmax_chunk(1 << 17), 1024);
        for v in [1usize, 7, 1000, 32_000, 151_936] {
            assert!(v.is_multiple_of(argmax_chunk(v)), "{v}");
        }
    }

    #[test]
    fn the_lm_head_is_one_round_of_wide_tasks() {
        let t = |cols, step| ProjectionTiling { cols, step };
        // Llama-3: 132 tasks of 976 columns (128832, zero-padded); Qwen3: 132 of 1152.
        assert_eq!(lm_head_width(128_256), 128_832);
        assert_eq!(lm_head_tiling(2048, 128_256), t(976, 8));
        assert_eq!(lm_head_tiling(4096, 128_256), t(976, 8));
        assert_eq!(lm_head_width(151_936), 152_064);
        assert_eq!(lm_head_tiling(1024, 151_936), t(1152, 8));
        // A vocabulary a width divides stays; the toy's 512 is 32 tasks of 16.
        assert_eq!(lm_head_width(32_000), 32_000);
        assert_eq!(lm_head_tiling(4096, 32_000), t(256, 32));
        assert_eq!(lm_head_tiling(256, 512), t(16, 256));
        for v in [1, 15, 17, 512, 1000, 32_001, 32_002, 50_257, 128_256, 151_936, 256_000] {
            let (w, c) = (lm_head_width(v), lm_head_tiling(2048, v).cols);
            assert!(w >= v && w - v < c && w.is_multiple_of(c) && c.is_multiple_of(16), "{v}: {w} {c}");
            assert!(w / c <= LM_HEAD_TASKS, "{v}: {} tasks", w / c);
            assert_eq!(lm_head_width(w), w, "{v}: padded once");
            assert_eq!(lm_head_tiling(2048, w).cols, c, "{v}: the padded head tiles alike");
        }
        // Llama-3's padded head: `argmax_chunk` also lands on the head's tasks (the decoder takes
        // the head's tile width itself wherever it is at least 256 columns).
        assert!(lm_head_width(128_256).is_multiple_of(976) && argmax_chunk(128_832) == 976);
    }

    #[test]
    fn kinds_drop_the_layer_prefix_only() {
        assert_eq!(op_kind("l12.qkv.k0"), "qkv.k0");
        assert_eq!(op_kind("l0.attention"), "attention");
        assert_eq!(op_kind("logits.k0"), "logits.k0");
        assert_eq!(op_kind("lx.a"), "lx.a");
        assert_eq!(op_kind("l.a"), "l.a");
    }

    #[test]
    fn the_layer_timeline_is_relative_to_the_layer_start() {
        let names: Vec<String> = ["embedding", "l0.a", "l0.b", "l1.a"].map(String::from).to_vec();
        let task_op = [0, 1, 1, 2, 3];
        let run = |task, step, ready, end| TaskTimes { task, step, worker: 0, start: ready, ready, end };
        let runs = [
            run(0, 0, 0, 5),
            run(1, 0, 10, 20),
            run(2, 0, 12, 25),
            run(3, 0, 30, 40),
            run(4, 0, 45, 50),
            run(1, 1, 100, 104),
            run(2, 1, 101, 106),
            run(3, 1, 110, 130),
        ];
        let t = layer_timeline(&names, &task_op, &runs, 0);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].name.as_str(), t[0].first_ready_ns, t[0].last_end_ns), ("l0.a", 0.0, (15.0 + 6.0) / 2.0));
        assert_eq!((t[1].name.as_str(), t[1].first_ready_ns, t[1].last_end_ns), ("l0.b", 15.0, 30.0));
        assert!(layer_timeline(&names, &task_op, &runs, 7).is_empty());
    }

    #[test]
    fn the_profile_sums_each_kind_over_layers_and_steps() {
        let names: Vec<String> = ["embedding", "l0.proj", "l1.proj", "head"].map(String::from).to_vec();
        // tasks 1, 2 of operator 1 and 3, 4 of operator 2 (two workers)
        let task_op = [0, 1, 1, 2, 2, 3];
        let run = |task, step, start, ready, end| TaskTimes { task, step, worker: 0, start, ready, end };
        let runs = [
            // step 0 spans 0..100, step 1 spans 200..260 (two workers).
            run(0, 0, 0, 0, 10),
            run(1, 0, 10, 20, 50),
            run(2, 0, 0, 30, 40),
            run(3, 0, 50, 50, 90),
            run(4, 0, 40, 60, 70),
            run(5, 0, 90, 95, 100),
            run(0, 1, 200, 200, 210),
            run(1, 1, 210, 210, 230),
            run(2, 1, 200, 215, 225),
            run(3, 1, 230, 230, 250),
            run(4, 1, 225, 235, 240),
            run(5, 1, 250, 250, 260),
        ];
        let p = profile(&names, &task_op, &runs, 2);
        let kinds: Vec<&str> = p.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(kinds, ["embedding", "proj", "head"]);
        let proj = &p[1];
        assert_eq!((proj.ops, proj.tasks), (2, 2));
        // bodies 30+10+40+10 + 20+10+20+5 = 145 over 8 runs; waits 10+30+0+20 + 0+15+0+10 = 85.
        assert!((proj.body_ns - 145.0 / 8.0).abs() < 1e-9, "{proj:?}");
        assert!((proj.wait_ns - 85.0 / 8.0).abs() < 1e-9, "{proj:?}");
        // spans: l0 step 0: 20..50, l1 step 0: 50..90, l0 step 1: 210..230, l1 step 1: 230..250.
        assert!((proj.span_ns - (30.0 + 40.0 + 20.0 + 20.0) / 4.0).abs() < 1e-9, "{proj:?}");
        // workers × (100 + 60) = 320.
        assert!((proj.share - 230.0 / 320.0).abs() < 1e-9, "{proj:?}");
        let shares: f64 = p.iter().map(|k| k.share).sum();
        assert!((shares - (230.0 + 20.0 + 20.0) / 320.0).abs() < 1e-9, "{shares}");
        assert_eq!((p[2].tasks, p[2].body_ns, p[2].wait_ns), (1, 7.5, 2.5));
    }
}
