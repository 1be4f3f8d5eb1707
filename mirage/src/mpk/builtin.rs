//! Built-in decode tasks: the few operators a decode step needs that µGraphs cannot express yet
//! (a gather by token id, rotary embeddings at a runtime position, a KV-cache append, split-KV
//! attention over a runtime key length, argmax), and an empty task for measuring the megakernel's own
//! overheads. Each kind has its operand rules, its tile grid, the regions a tile reads and
//! writes, a CPU reference of one tile (the ground truth of the tests) and a CUDA template in
//! the megakernel's device header (`device.cuh`) that the resident kernel calls.
//!
//! Token ids live in `f32` tensors holding exact integers (every id below 2^24 is exact); a
//! task that reads an id or a runtime position out of range writes zeros and reports
//! `ERR_INDEX` (the CPU reference returns the same error).

use crate::ir::{DType, Scalar, TensorDesc};

use super::graph::{GraphError, ParamExpr, StepGraph, TensorId};
use super::region::Region;

/// Largest vocabulary (exact integer ids in `f32`).
pub const MAX_VOCAB: usize = 1 << 24;
/// Largest row of a head in [`Builtin::AttentionPartial`]: `head_dim · element size` is a power
/// of two from 16 to 512 bytes (a row is read in 16-byte vectors, at most 32 per row: head dims
/// 8 to 256 in f16/bf16, 4 to 128 in f32).
pub const MAX_HEAD_ROW_BYTES: usize = 512;
/// Most query heads per KV head of [`Builtin::AttentionPartial`] (each thread keeps an
/// accumulator per query head of its group in registers).
pub const MAX_GROUP: usize = 16;

/// A built-in task kind. Operands are listed as inputs then outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `out[b, :] = table[tokens[b], :]`. Inputs: `table [vocab, hidden]` (row-major),
    /// `tokens [batch]` f32 ids. Output: `[batch, hidden]`, the table's type. Tiles:
    /// `hidden / chunk` column slabs × `batch`.
    Embedding {
        /// Columns per tile (must divide `hidden`).
        chunk: usize,
    },
    /// Rotary embedding (rotate-half layout) of each head of rows at positions `pos + r`: for
    /// `i < d/2`, angle `(pos + r) · inv_freq[i]`, `out[i] = x[i] cos − x[i + d/2] sin`,
    /// `out[i + d/2] = x[i + d/2] cos + x[i] sin`, where head `h` of row `r` is
    /// `x[r, h·d .. (h+1)·d]` and `d = 2 · len(inv_freq)`. Inputs: `x [rows, heads·d]`,
    /// `inv_freq [d/2]` f32 (any RoPE scaling is computed into it). Output: like `x`. Tiles:
    /// `heads × rows`. With `norm`, each head is first RMS-normalized over its `d` elements
    /// and multiplied by a gain (Qwen3's per-head q/k norm): `x[i] ← x[i] / √(mean(x²) + eps)
    /// · gain[i]`, kept in f32 into the rotation; the gain `[1, d]` (the type of `x`) is a
    /// third input.
    Rope {
        /// The position of row 0.
        pos: ParamExpr,
        /// The per-head RMSNorm's epsilon, when the head is normalized first.
        norm: Option<Scalar>,
    },
    /// `cache[h, pos + r, :] = k[r, h·d .. (h+1)·d]`. Input: `k [rows, kv_heads·d]`. Output:
    /// `cache [kv_heads, capacity, d]`, a state of `k`'s type. Tiles: `kv_heads`.
    KvAppend {
        /// The position of row 0.
        pos: ParamExpr,
    },
    /// Split-KV (flash-decoding) attention of one query row over the first `keylen` cached keys,
    /// first half: tile `(c, kvh)` takes key chunk `c` of KV head `kvh` — keys
    /// [`chunk_range`]`(keylen, chunks, c)`, each chunk an equal share of the runtime key length
    /// — for every query head `h = kvh · group + g` of the KV head's group (reading each K/V row
    /// once) and writes the chunk's partial result `partial[kvh, c, g, :] = (o[0..d], m, l)` in
    /// f32: with scores `s_j = scale · q[h] · K[j]` over the chunk, `m = max s_j`,
    /// `l = Σ exp(s_j − m)`, `o = Σ exp(s_j − m) · V[j] / l`. An empty chunk writes the neutral
    /// partial `(0, −∞, 0)`. Inputs: `q [1, heads·d]`, `k_cache`, `v_cache [kv_heads, capacity,
    /// d]`. Output: `[kv_heads, chunks, group, d + 2]` f32. Tiles: `chunks × kv_heads`.
    AttentionPartial {
        /// Number of keys (1..=capacity).
        keylen: ParamExpr,
        /// Multiplies the scores (usually `1/√d`).
        scale: Scalar,
        /// Key chunks per KV head (static; see [`split_kv_chunks`]).
        chunks: usize,
    },
    /// Split-KV attention, second half: head `h` merges the partials of its KV head's chunks,
    /// `out[h] = Σ_c w_c · o_c / Σ_c w_c` with `w_c = l_c · exp(m_c − max m)` (empty chunks weigh
    /// nothing; zeros when every chunk is empty, as after a key length out of range). Input: the
    /// partials `[kv_heads, chunks, group, d + 2]` f32. Output: `[1, heads·d]` of `dtype`.
    /// Tiles: `heads`.
    AttentionCombine {
        /// The output's element type (the query's).
        dtype: DType,
    },
    /// Decode attention of one query row as one operator: at the runtime position `pos`, RoPE
    /// of the query heads and of the new key (each head first RMS-normalized with its gain when
    /// `norm` is given, as [`Builtin::Rope`]), the append of the new key and value at row `pos`
    /// of the caches, split-KV attention over keys `0..=pos` ([`Builtin::AttentionPartial`])
    /// and the merge of the chunks ([`Builtin::AttentionCombine`]): one dependency hop where the
    /// separate operators take four.
    ///
    /// Inputs: `q [1, heads·d]`, `k`, `v [1, kv_heads·d]` (the projections, before RoPE),
    /// `inv_freq [d/2]` f32, and with `norm` the gains `q_norm`, `k_norm [1, d]` (q's type).
    /// Outputs: `out [1, heads·d]` (q's type), `partials [kv_heads, chunks, group, d + 2]` f32,
    /// and the states `k_cache`, `v_cache [kv_heads, capacity, d]` (q's type). Tiles:
    /// `chunks × kv_heads`. Tile `(c, h)`: when key `pos` falls in chunk `c`
    /// ([`chunk_range`]`(pos + 1, chunks, c)`), appends the new key (after RoPE, rounded to q's
    /// type) and value at row `pos` of KV head `h`; writes chunk `c`'s partial of the group's
    /// query heads (after RoPE, rounded to q's type, as a rope operator's output would be)
    /// into `partials[h, c]`; and the tile that finishes last among KV head `h`'s chunks — on
    /// the device the holder of the step's last ticket of an atomic counter per KV head
    /// ([`Builtin::ticket_counters`]), on the CPU chunk `chunks − 1` — merges the KV head's
    /// partials into its query heads of `out`. Every tile of a KV head therefore declares the
    /// same writes of `out` and of the caches ([`Builtin::overlapping_writes`]). A position out
    /// of range (`pos < 0` or `pos ≥ capacity`) writes zeros and neutral partials, leaves the
    /// caches alone and is `ERR_INDEX`.
    DecodeAttention {
        /// The position of the query row (the new key's row of the caches).
        pos: ParamExpr,
        /// Multiplies the scores (usually `1/√d`).
        scale: Scalar,
        /// Key chunks per KV head (static; see [`split_kv_chunks`]).
        chunks: usize,
        /// The per-head RMSNorm's epsilon of q and k before RoPE (Qwen3), when given.
        norm: Option<Scalar>,
        /// Whether q, k and v come as one tensor `[1, heads·d + 2·kv_heads·d]` laid out q | k |
        /// v (one projection's output: [`crate::mpk::decoder`]'s fused q/k/v projection), the
        /// inputs then being `qkv, inv_freq` (and the gains); else three inputs `q, k, v`.
        fused: bool,
        /// Whether the operator merges the chunks itself (the ticket above, output `out`); when
        /// `false` it has no `out` and no tickets — its outputs are `partials, k_cache,
        /// v_cache` — and a [`Builtin::MergeProjection`] merges each KV head's partials in its
        /// own first loads (DECISIONS change 101).
        merge: bool,
    },
    /// The output projection of unmerged decode-attention partials, by KV head group: tile
    /// `(x, kvh)` merges KV head `kvh`'s chunks into its `group` query heads as
    /// [`Builtin::AttentionCombine`] does (each head's `d` values rounded to `W`'s type, as a
    /// merged attention output holds them), and multiplies those `group·d` values by rows
    /// `kvh·group·d ..` and columns `x·cols ..` of `W`, summing in f32: `out[kvh, x·cols + j] =
    /// Σ_r a[kvh·group·d + r] · W[kvh·group·d + r, x·cols + j]`. The sum over `kvh` of `out`'s
    /// rows is the whole projection `a · W`; its consumer adds them (the decoder's gated MLP,
    /// [`crate::mpk::decoder::streamed_gated_mlp_of_parts`]), so no tile waits for other KV
    /// heads' chunks. Inputs: `partials [kv_heads, chunks, group, d + 2]` f32, `W [kv_heads·
    /// group·d, n]` row-major (16-bit or f32). Output: `[kv_heads, n]` of `W`'s type. Tiles:
    /// `n / cols × kv_heads`.
    MergeProjection {
        /// Columns of `W` per tile: a power of two from 8 to [`MAX_MERGE_PROJECTION_COLS`]
        /// dividing `n`.
        cols: usize,
    },
    /// First half of argmax over the last dim: each tile finds the largest value (smallest
    /// index among equals) of its `chunk` columns below `columns`. Input: `logits [rows,
    /// width]`. Output: `[rows, width / chunk, 2]` f32 (value, index; a tile with no column
    /// below `columns` writes (−∞, its first column)). Tiles: `width / chunk` × `rows`.
    ArgmaxPartial {
        /// Columns per tile (must divide the logits' width).
        chunk: usize,
        /// The columns that count, at most the width: the vocabulary, where the logits are padded
        /// past it (an LM head whose vocabulary is not a whole round of its tasks:
        /// [`crate::mpk::decoder::lm_head_width`]).
        columns: usize,
    },
    /// Second half of argmax: the best (value, index) of each row. Input: the partials
    /// `[rows, n, 2]` f32. Output: `[rows]` f32 ids. Tiles: `rows`.
    ArgmaxReduce,
    /// An empty task for overhead measurements: `y[i] = 1 + x[i]`, or `1 + max(x)` when `all`.
    /// Input: `x [n]` f32 (`n` = the output's length unless `all`). Output: `y [m]` f32. Tiles:
    /// `m`.
    Nop {
        /// Whether each tile reads all of `x` (then it depends on every producer tile).
        all: bool,
    },
}

/// A runtime index out of range, found by a task (the CPU reference's `ERR_INDEX`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a runtime index from {source_name} is out of range: expected 0 <= index < {bound}, found {value}")]
pub struct IndexError {
    /// The value read.
    pub value: i64,
    /// Its exclusive upper bound.
    pub bound: i64,
    /// The tensor or parameter it came from.
    pub source_name: String,
}

fn expect(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}

fn fmt(d: &TensorDesc) -> String {
    super::graph::fmt_desc(d)
}

fn rank(d: &TensorDesc, r: usize, what: &str) -> Result<(), String> {
    expect(d.shape.len() == r, || format!("{what}: expected rank {r}, found {}", fmt(d)))
}

fn row_major(d: &TensorDesc, what: &str) -> Result<(), String> {
    expect(d.is_row_major(), || format!("{what}: expected a row-major layout, found {}", fmt(d)))
}

fn f32_typed(d: &TensorDesc, what: &str) -> Result<(), String> {
    expect(d.dtype == DType::F32, || format!("{what}: expected f32, found {}", fmt(d)))
}

/// Where a [`Builtin::DecodeAttention`]'s partials sit among its outputs: after the merged
/// `out` when it merges (outputs `out, partials, k_cache, v_cache`), first when it does not
/// (`partials, k_cache, v_cache`). The caches follow the partials either way. The one place
/// that layout is written down: the checks, regions, shared memory and emitter read it here.
pub(crate) fn decode_attention_partials_at(merge: bool) -> usize {
    usize::from(merge)
}

impl Builtin {
    /// The kind's name.
    pub fn name(&self) -> &'static str {
        match self {
            Builtin::Embedding { .. } => "embedding",
            Builtin::Rope { .. } => "rope",
            Builtin::KvAppend { .. } => "kv_append",
            Builtin::AttentionPartial { .. } => "attention_partial",
            Builtin::AttentionCombine { .. } => "attention_combine",
            Builtin::DecodeAttention { .. } => "decode_attention",
            Builtin::MergeProjection { .. } => "merge_projection",
            Builtin::ArgmaxPartial { .. } => "argmax_partial",
            Builtin::ArgmaxReduce => "argmax_reduce",
            Builtin::Nop { .. } => "nop",
        }
    }

    /// Number of input operands.
    pub fn num_inputs(&self) -> usize {
        match self {
            Builtin::Embedding { .. } | Builtin::Rope { norm: None, .. } | Builtin::MergeProjection { .. } => 2,
            Builtin::AttentionPartial { .. } | Builtin::Rope { norm: Some(_), .. } => 3,
            Builtin::DecodeAttention { norm, fused, .. } => {
                (if *fused { 2 } else { 4 }) + if norm.is_some() { 2 } else { 0 }
            }
            _ => 1,
        }
    }

    /// Number of output operands.
    pub fn num_outputs(&self) -> usize {
        match self {
            Builtin::DecodeAttention { merge, .. } => decode_attention_partials_at(*merge) + 3,
            _ => 1,
        }
    }

    /// Whether tiles of one operator of this kind declare the same output elements, of which
    /// one tile writes each at run time (see [`Builtin::DecodeAttention`]): every such tile
    /// signals before its consumers run, so they wait for all of them.
    pub fn overlapping_writes(&self) -> bool {
        matches!(self, Builtin::DecodeAttention { .. })
    }

    /// Counters of the megakernel private to an operator of this kind with tile grid `grid`,
    /// which its tiles take tickets from (not dependency counters: nothing waits on them).
    pub fn ticket_counters(&self, grid: [usize; 3]) -> usize {
        match self {
            Builtin::DecodeAttention { merge: true, .. } => grid[1],
            _ => 0,
        }
    }

    /// The runtime parameters it reads.
    pub fn params(&self) -> Vec<ParamExpr> {
        match self {
            Builtin::Rope { pos, .. } | Builtin::KvAppend { pos } => vec![*pos],
            Builtin::AttentionPartial { keylen, .. } => vec![*keylen],
            Builtin::DecodeAttention { pos, .. } => vec![*pos],
            _ => vec![],
        }
    }

    /// Whether its outputs include a state tensor (it writes only part of it each step).
    pub fn writes_state(&self) -> bool {
        matches!(self, Builtin::KvAppend { .. } | Builtin::DecodeAttention { .. })
    }

    /// The outputs it writes for these inputs (for kinds whose outputs are new buffers; a
    /// [`Builtin::KvAppend`] writes an existing state and has none to create).
    pub fn output_descs(&self, inputs: &[&TensorDesc]) -> Result<Vec<TensorDesc>, String> {
        expect(inputs.len() == self.num_inputs(), || {
            format!("{}: expected {} inputs, found {}", self.name(), self.num_inputs(), inputs.len())
        })?;
        let d = |shape: &[usize], dtype: DType| TensorDesc::new(shape, dtype);
        Ok(match self {
            Builtin::Embedding { .. } => {
                rank(inputs[0], 2, "table")?;
                rank(inputs[1], 1, "tokens")?;
                vec![d(&[inputs[1].shape[0], inputs[0].shape[1]], inputs[0].dtype)]
            }
            Builtin::Rope { .. } => vec![d(&inputs[0].shape, inputs[0].dtype)],
            Builtin::KvAppend { .. } => {
                return Err("kv_append writes an existing state tensor (the cache): use add_builtin".into());
            }
            Builtin::DecodeAttention { .. } => {
                return Err("decode_attention writes the caches' existing states: use decode_attention()".into());
            }
            Builtin::AttentionPartial { chunks, .. } => {
                let (kvh, group, d) = attention_dims(inputs[0], inputs[1])?;
                vec![TensorDesc::new(&[kvh, *chunks, group, d + 2], DType::F32)]
            }
            Builtin::MergeProjection { .. } => {
                let (kvh, n) = merge_projection_dims(inputs[0], inputs[1])?;
                vec![d(&[kvh, n], inputs[1].dtype)]
            }
            Builtin::AttentionCombine { dtype } => {
                rank(inputs[0], 4, "partials")?;
                let s = &inputs[0].shape;
                expect(s[3] > 2, || {
                    format!("partials: expected [kv_heads, chunks, group, d + 2], found {}", fmt(inputs[0]))
                })?;
                vec![d(&[1, s[0] * s[2] * (s[3] - 2)], *dtype)]
            }
            Builtin::ArgmaxPartial { chunk, columns } => {
                rank(inputs[0], 2, "logits")?;
                expect(*chunk > 0 && inputs[0].shape[1].is_multiple_of(*chunk), || {
                    format!("chunk {chunk} must divide the vocabulary {}", inputs[0].shape[1])
                })?;
                expect(*columns >= 1 && *columns <= inputs[0].shape[1], || {
                    format!("columns {columns}: at least 1 and at most the logits' width {}", inputs[0].shape[1])
                })?;
                vec![d(&[inputs[0].shape[0], inputs[0].shape[1] / chunk, 2], DType::F32)]
            }
            Builtin::ArgmaxReduce => {
                rank(inputs[0], 3, "partials")?;
                vec![d(&[inputs[0].shape[0]], DType::F32)]
            }
            Builtin::Nop { .. } => vec![d(&inputs[0].shape, DType::F32)],
        })
    }

    /// Checks the operands and returns the tile grid. `params` is the graph's number of runtime
    /// parameters.
    pub fn check(&self, inputs: &[&TensorDesc], outputs: &[&TensorDesc], params: usize) -> Result<[usize; 3], String> {
        expect(inputs.len() == self.num_inputs() && outputs.len() == self.num_outputs(), || {
            format!(
                "{}: expected {} inputs and {} output(s), found {} and {}",
                self.name(),
                self.num_inputs(),
                self.num_outputs(),
                inputs.len(),
                outputs.len()
            )
        })?;
        for p in self.params() {
            expect(p.param.0 < params, || format!("runtime parameter #{} does not exist", p.param.0))?;
        }
        for (i, d) in inputs.iter().enumerate() {
            row_major(d, &format!("input {i}"))?;
        }
        for (i, d) in outputs.iter().enumerate() {
            row_major(d, &format!("output {i}"))?;
        }
        let out = outputs[0];
        let same = |want: &TensorDesc| {
            expect(out.shape == want.shape && out.dtype == want.dtype, || {
                format!("output: expected {}, found {}", fmt(want), fmt(out))
            })
        };
        match self {
            Builtin::Embedding { chunk } => {
                let (table, tokens) = (inputs[0], inputs[1]);
                rank(table, 2, "table")?;
                rank(tokens, 1, "tokens")?;
                f32_typed(tokens, "tokens")?;
                let (vocab, hidden) = (table.shape[0], table.shape[1]);
                expect(vocab <= MAX_VOCAB, || format!("a vocabulary of at most 2^24 ids, found {vocab}"))?;
                expect(*chunk > 0 && hidden.is_multiple_of(*chunk), || {
                    format!("chunk {chunk} must divide hidden {hidden}")
                })?;
                same(&TensorDesc::new(&[tokens.shape[0], hidden], table.dtype))?;
                Ok([hidden / chunk, tokens.shape[0], 1])
            }
            Builtin::Rope { norm, .. } => {
                let (x, inv) = (inputs[0], inputs[1]);
                rank(x, 2, "x")?;
                rank(inv, 1, "inv_freq")?;
                f32_typed(inv, "inv_freq")?;
                let d = 2 * inv.shape[0];
                expect(x.shape[1].is_multiple_of(d), || {
                    format!("x: expected rows of whole heads of {d} (2 × inv_freq), found {}", fmt(x))
                })?;
                if let Some(eps) = norm {
                    head_norm(*eps, &[(inputs[2], "gain")], d, x.dtype)?;
                }
                same(x)?;
                Ok([x.shape[1] / d, x.shape[0], 1])
            }
            Builtin::KvAppend { .. } => {
                let k = inputs[0];
                rank(k, 2, "k")?;
                rank(out, 3, "cache")?;
                let (rows, kvh, d) = (k.shape[0], out.shape[0], out.shape[2]);
                expect(k.shape[1] == kvh * d && out.dtype == k.dtype && out.shape[1] >= rows, || {
                    format!(
                        "cache: expected {} [kv_heads, capacity >= {rows}, d] with kv_heads·d = {}, found {}",
                        k.dtype,
                        k.shape[1],
                        fmt(out)
                    )
                })?;
                Ok([kvh, 1, 1])
            }
            Builtin::AttentionPartial { scale, chunks, .. } => {
                let (q, kc, vc) = (inputs[0], inputs[1], inputs[2]);
                let (kvh, group, d) = split_kv_dims(q, kc, vc, *scale, *chunks)?;
                f32_typed(out, "partials")?;
                same(&TensorDesc::new(&[kvh, *chunks, group, d + 2], DType::F32))?;
                Ok([*chunks, kvh, 1])
            }
            Builtin::AttentionCombine { .. } => {
                let p = inputs[0];
                f32_typed(p, "partials")?;
                let want = self.output_descs(inputs)?;
                same(&want[0])?;
                Ok([p.shape[0] * p.shape[2], 1, 1])
            }
            Builtin::DecodeAttention { scale, chunks, norm, fused, merge, .. } => {
                let o = decode_attention_partials_at(*merge);
                let (partials, kc, vc) = (outputs[o], outputs[o + 1], outputs[o + 2]);
                rank(kc, 3, "k_cache")?;
                let kv_width = kc.shape[0] * kc.shape[2];
                let ops = AttentionOperands::of(*fused, inputs[0].shape.get(1).copied().unwrap_or(0), kv_width);
                let q_desc = if *fused {
                    let qkv = inputs[0];
                    rank(qkv, 2, "qkv")?;
                    expect(qkv.shape[1] > 2 * kv_width, || {
                        format!(
                            "qkv: expected [1, heads·d + 2·{kv_width}] (q | k | v of {kv_width} columns each), found {}",
                            fmt(qkv)
                        )
                    })?;
                    // q: the columns before k's
                    TensorDesc::new(&[qkv.shape[0], ops.k.1], qkv.dtype)
                } else {
                    inputs[0].clone()
                };
                let q = &q_desc;
                let inv = inputs[ops.inv_freq];
                let (kvh, group, d) = split_kv_dims(q, kc, vc, *scale, *chunks)?;
                if !*fused {
                    let kv_row = TensorDesc::new(&[1, kvh * d], q.dtype);
                    for (t, what) in [(inputs[1], "k"), (inputs[2], "v")] {
                        expect(t.shape == kv_row.shape && t.dtype == kv_row.dtype, || {
                            format!("{what}: expected {} (one row of the KV heads), found {}", fmt(&kv_row), fmt(t))
                        })?;
                    }
                }
                rank(inv, 1, "inv_freq")?;
                f32_typed(inv, "inv_freq")?;
                expect(2 * inv.shape[0] == d, || {
                    format!("inv_freq: expected [{}] (head dim / 2), found {}", d / 2, fmt(inv))
                })?;
                if let Some(eps) = norm {
                    head_norm(*eps, &[(inputs[ops.gains], "q_norm"), (inputs[ops.gains + 1], "k_norm")], d, q.dtype)?;
                }
                if *merge {
                    same(q)?;
                }
                let want = TensorDesc::new(&[kvh, *chunks, group, d + 2], DType::F32);
                expect(partials.shape == want.shape && partials.dtype == want.dtype, || {
                    format!("partials: expected {}, found {}", fmt(&want), fmt(partials))
                })?;
                Ok([*chunks, kvh, 1])
            }
            Builtin::MergeProjection { cols } => {
                let (kvh, n) = merge_projection_dims(inputs[0], inputs[1])?;
                expect(
                    cols.is_power_of_two() && (8..=MAX_MERGE_PROJECTION_COLS).contains(cols) && n.is_multiple_of(*cols),
                    || {
                        format!(
                            "cols {cols}: expected a power of two from 8 to {MAX_MERGE_PROJECTION_COLS} dividing the projection's width {n}"
                        )
                    },
                )?;
                let rows = inputs[0].shape[2] * (inputs[0].shape[3] - 2);
                expect(rows <= MAX_MERGE_PROJECTION_ROWS, || {
                    format!("a KV head group of at most {MAX_MERGE_PROJECTION_ROWS} values (group · d), found {rows}")
                })?;
                same(&TensorDesc::new(&[kvh, n], inputs[1].dtype))?;
                Ok([n / cols, kvh, 1])
            }
            Builtin::ArgmaxPartial { chunk, .. } => {
                let want = self.output_descs(inputs)?;
                expect(inputs[0].shape[1] <= MAX_VOCAB, || {
                    format!("a vocabulary of at most 2^24 ids, found {}", inputs[0].shape[1])
                })?;
                same(&want[0])?;
                Ok([inputs[0].shape[1] / chunk, inputs[0].shape[0], 1])
            }
            Builtin::ArgmaxReduce => {
                let p = inputs[0];
                rank(p, 3, "partials")?;
                f32_typed(p, "partials")?;
                expect(p.shape[2] == 2, || format!("partials: expected [rows, n, 2], found {}", fmt(p)))?;
                same(&TensorDesc::new(&[p.shape[0]], DType::F32))?;
                Ok([p.shape[0], 1, 1])
            }
            Builtin::Nop { all } => {
                let x = inputs[0];
                rank(x, 1, "x")?;
                rank(out, 1, "y")?;
                f32_typed(x, "x")?;
                f32_typed(out, "y")?;
                expect(*all || x.shape == out.shape, || format!("y: expected {}, found {}", fmt(x), fmt(out)))?;
                Ok([out.shape[0], 1, 1])
            }
        }
    }

    /// What tile `tile` reads — `(region, prefetch)`: whether the region is a fixed weight
    /// slab worth streaming before the task's dependencies are met — and writes. Regions that
    /// depend on runtime values (a token's row, the cache rows up to a position) are the
    /// conservative box around every value they can take.
    pub fn regions(
        &self,
        tile: [usize; 3],
        inputs: &[(TensorId, &TensorDesc)],
        outputs: &[(TensorId, &TensorDesc)],
    ) -> (Vec<(Region, bool)>, Vec<Region>) {
        let (out, od) = outputs[0];
        let whole = |(t, d): (TensorId, &TensorDesc)| Region::whole(t, &d.shape);
        let [x, y, _] = tile;
        match self {
            Builtin::Embedding { chunk } => {
                let (table, td) = inputs[0];
                let rows = Region::at(table, vec![0, x * chunk], &[td.shape[0], *chunk]);
                let token = Region::at(inputs[1].0, vec![y], &[1]);
                (vec![(rows, false), (token, false)], vec![Region::at(out, vec![y, x * chunk], &[1, *chunk])])
            }
            Builtin::Rope { .. } => {
                let d = 2 * inputs[1].1.shape[0];
                let row = Region::at(inputs[0].0, vec![y, x * d], &[1, d]);
                let mut reads = vec![(row, false), (whole(inputs[1]), false)];
                reads.extend(inputs.get(2).map(|&gain| (whole(gain), true)));
                (reads, vec![Region::at(out, vec![y, x * d], &[1, d])])
            }
            Builtin::KvAppend { .. } => {
                let (kt, kd) = inputs[0];
                let d = od.shape[2];
                let read = Region::at(kt, vec![0, x * d], &[kd.shape[0], d]);
                (vec![(read, false)], vec![Region::at(out, vec![x, 0, 0], &[1, od.shape[1], d])])
            }
            Builtin::AttentionPartial { .. } => {
                let (q, kc, vc) = (inputs[0].0, inputs[1], inputs[2].0);
                let [_, _, group, d2] = od.shape[..] else { unreachable!("checked: rank 4") };
                let d = d2 - 2;
                let cache = |t| Region::at(t, vec![y, 0, 0], &[1, kc.1.shape[1], d]);
                let reads = vec![
                    (Region::at(q, vec![0, y * group * d], &[1, group * d]), false),
                    (cache(kc.0), false),
                    (cache(vc), false),
                ];
                (reads, vec![Region::at(out, vec![y, x, 0, 0], &[1, 1, group, d2])])
            }
            Builtin::AttentionCombine { .. } => {
                let (p, pd) = inputs[0];
                let [_, chunks, group, d2] = pd.shape[..] else { unreachable!("checked: rank 4") };
                let read = Region::at(p, vec![x / group, 0, x % group, 0], &[1, chunks, 1, d2]);
                (vec![(read, false)], vec![Region::at(out, vec![0, x * (d2 - 2)], &[1, d2 - 2])])
            }
            Builtin::DecodeAttention { fused, merge, .. } => {
                let o = decode_attention_partials_at(*merge);
                let ((pt, pd), (kc, kd), (vc, _)) = (outputs[o], outputs[o + 1], outputs[o + 2]);
                let (kvh, cap, d) = (kd.shape[0], kd.shape[1], kd.shape[2]);
                let group = pd.shape[2];
                let ops = AttentionOperands::of(*fused, inputs[0].1.shape[1], kvh * d);
                let cache = |t| Region::at(t, vec![y, 0, 0], &[1, cap, d]);
                let row = |(i, at): (usize, usize), width: usize| {
                    (Region::at(inputs[i].0, vec![0, at + y * width], &[1, width]), false)
                };
                let mut reads = vec![
                    row(ops.q, group * d),
                    row(ops.k, d),
                    row(ops.v, d),
                    (whole(inputs[ops.inv_freq]), false),
                    (cache(kc), false),
                    (cache(vc), false),
                ];
                reads.extend(inputs[ops.gains..].iter().map(|&gain| (whole(gain), true)));
                let partial = Region::at(pt, vec![y, x, 0, 0], &[1, 1, group, d + 2]);
                let mut writes = Vec::with_capacity(4);
                if *merge {
                    writes.push(Region::at(out, vec![0, y * group * d], &[1, group * d]));
                }
                writes.extend([partial, cache(kc), cache(vc)]);
                (reads, writes)
            }
            Builtin::MergeProjection { cols } => {
                let ((p, pd), (w, _)) = (inputs[0], inputs[1]);
                let [_, chunks, group, d2] = pd.shape[..] else { unreachable!("checked: rank 4") };
                let rows = group * (d2 - 2);
                let reads = vec![
                    (Region::at(p, vec![y, 0, 0, 0], &[1, chunks, group, d2]), false),
                    (Region::at(w, vec![y * rows, x * cols], &[rows, *cols]), true),
                ];
                (reads, vec![Region::at(out, vec![y, x * cols], &[1, *cols])])
            }
            Builtin::ArgmaxPartial { chunk, .. } => {
                let read = Region::at(inputs[0].0, vec![y, x * chunk], &[1, *chunk]);
                (vec![(read, false)], vec![Region::at(out, vec![y, x, 0], &[1, 1, 2])])
            }
            Builtin::ArgmaxReduce => {
                let (p, pd) = inputs[0];
                (
                    vec![(Region::at(p, vec![x, 0, 0], &[1, pd.shape[1], 2]), false)],
                    vec![Region::at(out, vec![x], &[1])],
                )
            }
            Builtin::Nop { all } => {
                let read = if *all { whole(inputs[0]) } else { Region::at(inputs[0].0, vec![x], &[1]) };
                (vec![(read, false)], vec![Region::at(out, vec![x], &[1])])
            }
        }
    }

    /// Dynamic shared memory one task needs with `threads` threads, given its operands.
    pub fn smem_bytes(&self, threads: usize, inputs: &[&TensorDesc], outputs: &[&TensorDesc]) -> usize {
        let warps = threads / 32;
        match self {
            Builtin::AttentionPartial { .. } => {
                let d = inputs[1].shape[2];
                let group = inputs[0].shape[1] / d / inputs[1].shape[0];
                attention_smem_floats(group, d, threads) * 4
            }
            Builtin::DecodeAttention { chunks, merge, .. } => {
                // The partials are [kv_heads, chunks, group, d + 2].
                let pd = outputs[decode_attention_partials_at(*merge)];
                let (group, d) = (pd.shape[2], pd.shape[3] - 2);
                // attention_chunk's, then a norm scale per head, the heads and the new value as
                // loaded, and the two gains; the merge reuses the space for (m, l) of every
                // chunk of the group. The angles' cos and sin live in the worker's angle table
                // (`emit::angle_table_bytes`), past every task's share.
                let attend = attention_smem_floats(group, d, threads) + group + 1 + (group + 2) * d + 2 * d;
                attend.max(2 * group * chunks) * 4
            }
            Builtin::MergeProjection { cols } => {
                let p = inputs[0];
                let (chunks, group, d) = (p.shape[1], p.shape[2], p.shape[3] - 2);
                let vector = 16 / inputs[1].dtype.size_bytes();
                let row_groups = threads / (cols / vector).max(1);
                // (m, l) of every chunk of the group, the merged heads as `W`'s type (in whole
                // 16-byte units), the row groups' column sums.
                let heads = (group * d * inputs[1].dtype.size_bytes()).div_ceil(16) * 4;
                (2 * group * chunks + heads + row_groups * cols) * 4
            }
            Builtin::Rope { norm: Some(_), .. } => warps * 4,
            Builtin::ArgmaxPartial { .. } | Builtin::ArgmaxReduce => warps * 8,
            _ => 0,
        }
    }

    /// Runs tile `tile` on the CPU: reads `inputs` (row-major f32 values of each input) and
    /// writes its region of `output` (row-major f32 values of the whole output). `params` are
    /// the step's runtime parameter values; `names` names the inputs then the parameters for
    /// errors.
    pub fn run_tile(
        &self,
        tile: [usize; 3],
        inputs: &[(&[f32], &TensorDesc)],
        outputs: &mut [(&mut [f32], &TensorDesc)],
        params: &[i32],
        names: &dyn Fn(IndexSource) -> String,
    ) -> Result<(), IndexError> {
        let [x, y, _] = tile;
        if let Builtin::DecodeAttention { pos, scale, chunks, norm, fused, .. } = self {
            let p = pos.eval(params);
            return decode_attention_tile([x, y], inputs, outputs, p, *scale, *chunks, *norm, *fused)
                .map_err(|bound| IndexError { value: p, bound, source_name: names(IndexSource::Param(pos.param.0)) });
        }
        let [(out, od)] = outputs else { unreachable!("checked: one output") };
        let (out, od): (&mut [f32], &TensorDesc) = (out, od);
        match self {
            Builtin::Embedding { chunk } => {
                let (table, td) = inputs[0];
                let hidden = td.shape[1];
                let id = inputs[1].0[y];
                let cols = x * chunk..(x + 1) * chunk;
                let dst = &mut out[y * hidden..(y + 1) * hidden][cols.clone()];
                if !(id >= 0.0 && id < td.shape[0] as f32 && id.fract() == 0.0) {
                    dst.fill(0.0);
                    let value = if id.is_finite() { id as i64 } else { i64::from(i32::MIN) };
                    return Err(IndexError {
                        value,
                        bound: td.shape[0] as i64,
                        source_name: names(IndexSource::Input(1)),
                    });
                }
                let row = id as usize * hidden;
                dst.copy_from_slice(&table[row..row + hidden][cols]);
                Ok(())
            }
            Builtin::Rope { pos, norm } => {
                let (xs, xd) = inputs[0];
                let inv = inputs[1].0;
                let d = 2 * inv.len();
                let at = y * xd.shape[1] + x * d;
                let head = head_rms_norm(&xs[at..at + d], norm.map(|eps| (eps.0, inputs[2].0)));
                let p = pos.eval(params) + y as i64;
                if !(0..=i64::from(i32::MAX)).contains(&p) {
                    out[at..at + d].fill(0.0);
                    return Err(IndexError {
                        value: p,
                        bound: i64::from(i32::MAX),
                        source_name: names(IndexSource::Param(pos.param.0)),
                    });
                }
                out[at..at + d].copy_from_slice(&rope_head(&head, inv, p));
                Ok(())
            }
            Builtin::KvAppend { pos } => {
                let (k, kd) = inputs[0];
                let (rows, width) = (kd.shape[0], kd.shape[1]);
                let (cap, d) = (od.shape[1], od.shape[2]);
                let p = pos.eval(params);
                if p < 0 || p + rows as i64 > cap as i64 {
                    return Err(IndexError {
                        value: p,
                        bound: (cap - rows + 1) as i64,
                        source_name: names(IndexSource::Param(pos.param.0)),
                    });
                }
                for r in 0..rows {
                    let src = r * width + x * d;
                    let dst = (x * cap + p as usize + r) * d;
                    out[dst..dst + d].copy_from_slice(&k[src..src + d]);
                }
                Ok(())
            }
            Builtin::AttentionPartial { keylen, scale, chunks } => {
                let (q, kc, vc) = (inputs[0].0, inputs[1].0, inputs[2].0);
                let cap = inputs[1].1.shape[1];
                let [_, _, group, d2] = od.shape[..] else { unreachable!("checked: rank 4") };
                let d = d2 - 2;
                let l = keylen.eval(params);
                let dst = (y * chunks + x) * group * d2;
                let partials = &mut out[dst..dst + group * d2];
                let neutral = |p: &mut [f32]| neutral_partials(p, d);
                if l < 1 || l > cap as i64 {
                    neutral(partials);
                    return Err(IndexError {
                        value: l,
                        bound: cap as i64 + 1,
                        source_name: names(IndexSource::Param(keylen.param.0)),
                    });
                }
                let keys = chunk_range(l as usize, *chunks, x);
                if keys.is_empty() {
                    neutral(partials);
                    return Ok(());
                }
                let at = |j: usize| (y * cap + j) * d;
                for (g, row) in partials.chunks_mut(d2).enumerate() {
                    let h = y * group + g;
                    let qh = &q[h * d..(h + 1) * d];
                    chunk_partial(qh, keys.clone(), |j| &kc[at(j)..at(j) + d], |j| &vc[at(j)..at(j) + d], scale.0, row);
                }
                Ok(())
            }
            Builtin::AttentionCombine { .. } => {
                let (p, pd) = inputs[0];
                let [_, chunks, group, d2] = pd.shape[..] else { unreachable!("checked: rank 4") };
                let d = d2 - 2;
                let (kvh, g) = (x / group, x % group);
                let row = |c: usize| &p[((kvh * chunks + c) * group + g) * d2..][..d2];
                merge_partials(chunks, row, &mut out[x * d..(x + 1) * d]);
                Ok(())
            }
            Builtin::ArgmaxPartial { chunk, columns } => {
                let (logits, ld) = inputs[0];
                let vocab = ld.shape[1];
                let n = vocab / chunk;
                let start = x * chunk;
                let end = (start + chunk).min(*columns).max(start);
                let (best, idx) = argmax(&logits[y * vocab + start..y * vocab + end], start);
                out[(y * n + x) * 2] = best;
                out[(y * n + x) * 2 + 1] = idx as f32;
                Ok(())
            }
            Builtin::ArgmaxReduce => {
                let (p, pd) = inputs[0];
                let n = pd.shape[1];
                let mut best = (f32::NEG_INFINITY, f32::INFINITY);
                for j in 0..n {
                    let (v, i) = (p[(x * n + j) * 2], p[(x * n + j) * 2 + 1]);
                    if v > best.0 || (v == best.0 && i < best.1) {
                        best = (v, i);
                    }
                }
                out[x] = if best.1.is_finite() { best.1 } else { p[x * n * 2 + 1] };
                Ok(())
            }
            Builtin::MergeProjection { cols } => {
                let ((p, pd), (w, wd)) = (inputs[0], inputs[1]);
                let [_, chunks, group, d2] = pd.shape[..] else { unreachable!("checked: rank 4") };
                let (d, n) = (d2 - 2, wd.shape[1]);
                let rows = group * d;
                // The group's merged heads, rounded to W's type as a merged output holds them.
                let mut a = vec![0.0f32; rows];
                for g in 0..group {
                    let row = |c: usize| &p[((y * chunks + c) * group + g) * d2..][..d2];
                    merge_partials(chunks, row, &mut a[g * d..(g + 1) * d]);
                }
                a.iter_mut().for_each(|v| *v = wd.dtype.round(*v));
                for j in x * cols..(x + 1) * cols {
                    let s: f32 = a.iter().enumerate().map(|(r, av)| av * w[(y * rows + r) * n + j]).sum();
                    out[y * n + j] = s;
                }
                Ok(())
            }
            Builtin::DecodeAttention { .. } => unreachable!("run before the match"),
            Builtin::Nop { all } => {
                let xs = inputs[0].0;
                let v = if *all { xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) } else { xs[x] };
                out[x] = v + 1.0;
                Ok(())
            }
        }
    }
}

/// The split-KV operand rules shared by [`Builtin::AttentionPartial`] and
/// [`Builtin::DecodeAttention`]: `(kv_heads, group, d)` of `q` and caches `kc`, `vc` (equal),
/// a head's row a power of two from 16 to [`MAX_HEAD_ROW_BYTES`] bytes, at most [`MAX_GROUP`]
/// query heads per KV head, at least one chunk, a finite scale.
fn split_kv_dims(
    q: &TensorDesc,
    kc: &TensorDesc,
    vc: &TensorDesc,
    scale: Scalar,
    chunks: usize,
) -> Result<(usize, usize, usize), String> {
    expect(kc == vc, || format!("v_cache: expected the k_cache's {}, found {}", fmt(kc), fmt(vc)))?;
    let (kvh, group, d) = attention_dims(q, kc)?;
    let row = d * q.dtype.size_bytes();
    expect(row.is_power_of_two() && (16..=MAX_HEAD_ROW_BYTES).contains(&row), || {
        format!(
            "head dim {d}: a head's row of {row} bytes must be a power of two from 16 to {MAX_HEAD_ROW_BYTES} bytes"
        )
    })?;
    expect(group <= MAX_GROUP, || format!("at most {MAX_GROUP} query heads per KV head, found {group}"))?;
    expect(chunks >= 1, || "chunks: expected at least one key chunk per KV head".to_string())?;
    expect(scale.0.is_finite(), || format!("scale: expected a finite number, found {}", scale.0))?;
    Ok((kvh, group, d))
}

/// Where a [`Builtin::DecodeAttention`] finds its operands among its inputs: `(input, first
/// column)` of q, k and v, and the inputs of `inv_freq` and of the first gain.
pub(crate) struct AttentionOperands {
    pub q: (usize, usize),
    pub k: (usize, usize),
    pub v: (usize, usize),
    pub inv_freq: usize,
    pub gains: usize,
}

impl AttentionOperands {
    /// The operands' places with input 0 of width `width` (q's, or q | k | v's when `fused`)
    /// and `kv_width = kv_heads · d` columns of k and of v.
    pub fn of(fused: bool, width: usize, kv_width: usize) -> AttentionOperands {
        if fused {
            let qw = width.saturating_sub(2 * kv_width);
            AttentionOperands { q: (0, 0), k: (0, qw), v: (0, qw + kv_width), inv_freq: 1, gains: 2 }
        } else {
            AttentionOperands { q: (0, 0), k: (1, 0), v: (2, 0), inv_freq: 3, gains: 4 }
        }
    }
}

/// The per-head RMSNorm's operand rules ([`Builtin::Rope`], [`Builtin::DecodeAttention`]):
/// each gain one head `[1, d]` of `dtype`, `eps` finite and not negative.
fn head_norm(eps: Scalar, gains: &[(&TensorDesc, &str)], d: usize, dtype: DType) -> Result<(), String> {
    let want = TensorDesc::new(&[1, d], dtype);
    for &(t, what) in gains {
        expect(t.shape == want.shape && t.dtype == want.dtype, || {
            format!("{what}: expected {} (one head), found {}", fmt(&want), fmt(t))
        })?;
    }
    expect(eps.0.is_finite() && eps.0 >= 0.0, || format!("eps: expected a finite number >= 0, found {}", eps.0))
}

/// The rotation of one head (rotate-half layout) at position `pos`: for `i < d/2`, angle
/// `pos · inv[i]` (in f64, sine and cosine rounded to f32), `(a, b) = (x[i], x[i + d/2])` to
/// `(a cos − b sin, b cos + a sin)` in f32.
fn rope_head(x: &[f32], inv: &[f32], pos: i64) -> Vec<f32> {
    let h = inv.len();
    let mut out = vec![0.0f32; 2 * h];
    for i in 0..h {
        let (s, c) = (pos as f64 * f64::from(inv[i])).sin_cos();
        let (s, c) = (s as f32, c as f32);
        let (a, b) = (x[i], x[i + h]);
        out[i] = a * c - b * s;
        out[i + h] = b * c + a * s;
    }
    out
}

/// One query head's split-KV partial over `keys` (key `j`'s row `key(j)`, value row `val(j)`)
/// into `row [d + 2]`: `(o / l, m, l)` with scores `scale · q · K[j]`, `m = max`, `l = Σ exp(s −
/// m)`, `o = Σ exp(s − m) V[j]`, all in f64, stored in f32. `keys` is not empty.
fn chunk_partial<'a>(
    qh: &[f32],
    keys: std::ops::Range<usize>,
    key: impl Fn(usize) -> &'a [f32],
    val: impl Fn(usize) -> &'a [f32],
    scale: f32,
    row: &mut [f32],
) {
    let d = qh.len();
    let scores: Vec<f64> = keys
        .clone()
        .map(|j| f64::from(scale) * qh.iter().zip(key(j)).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>())
        .collect();
    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let total: f64 = w.iter().sum();
    for (i, o) in row[..d].iter_mut().enumerate() {
        let v: f64 = keys.clone().zip(&w).map(|(j, wj)| wj * f64::from(val(j)[i])).sum();
        *o = (v / total) as f32;
    }
    row[d] = m as f32;
    row[d + 1] = total as f32;
}

/// The neutral partial `(0, −∞, 0)` of an empty chunk, for each `[d + 2]` row of `rows`.
fn neutral_partials(rows: &mut [f32], d: usize) {
    for row in rows.chunks_mut(d + 2) {
        row[..d].fill(0.0);
        row[d] = f32::NEG_INFINITY;
        row[d + 1] = 0.0;
    }
}

/// One query head's merge of its `chunks` partials (`row(c)`, `[d + 2]` each) into `out [d]`:
/// `Σ_c w_c o_c / Σ_c w_c` with `w_c = l_c · exp(m_c − max m)` in f64, empty chunks weighing
/// nothing, zeros when all are empty.
fn merge_partials<'a>(chunks: usize, row: impl Fn(usize) -> &'a [f32], out: &mut [f32]) {
    let d = out.len();
    let m = (0..chunks).map(|c| f64::from(row(c)[d])).fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = (0..chunks)
        .map(|c| {
            let r = row(c);
            if r[d] == f32::NEG_INFINITY { 0.0 } else { f64::from(r[d + 1]) * (f64::from(r[d]) - m).exp() }
        })
        .collect();
    let total: f64 = weights.iter().sum();
    for (i, o) in out.iter_mut().enumerate() {
        let v: f64 = weights.iter().enumerate().map(|(c, w)| w * f64::from(row(c)[i])).sum();
        *o = if total > 0.0 { (v / total) as f32 } else { 0.0 };
    }
}

/// The CPU reference of tile `[c, h]` of a [`Builtin::DecodeAttention`] at position `pos`
/// (outputs: out, partials, k_cache, v_cache; without `out` when the operator does not merge);
/// `Err(bound)` for a position out of range.
#[allow(clippy::too_many_arguments)]
fn decode_attention_tile(
    [c, h]: [usize; 2],
    inputs: &[(&[f32], &TensorDesc)],
    outputs: &mut [(&mut [f32], &TensorDesc)],
    pos: i64,
    scale: Scalar,
    chunks: usize,
    norm: Option<Scalar>,
    fused: bool,
) -> Result<(), i64> {
    let (mut out, rest) = match outputs {
        [(out, _), rest @ ..] if rest.len() == 3 => (Some(out), rest),
        rest => (None, rest),
    };
    let [(partials, pd), (kc, kd), (vc, _)] = rest else { unreachable!("checked: three or four outputs") };
    // The caches hold q's type.
    let dtype = kd.dtype;
    let (cap, d) = (kd.shape[1], kd.shape[2]);
    let group = pd.shape[2];
    let d2 = d + 2;
    let heads = h * group * d..(h + 1) * group * d;
    let slot = (h * chunks + c) * group * d2..(h * chunks + c + 1) * group * d2;
    if !(0..cap as i64).contains(&pos) {
        if let Some(out) = out.as_mut() {
            out[heads].fill(0.0);
        }
        neutral_partials(&mut partials[slot], d);
        return Err(cap as i64);
    }
    let pos = pos as usize;
    let ops = AttentionOperands::of(fused, inputs[0].1.shape[1], kd.shape[0] * d);
    let row = |(i, at): (usize, usize)| &inputs[i].0[at..];
    let (q, k, v, inv) = (row(ops.q), row(ops.k), row(ops.v), inputs[ops.inv_freq].0);
    let gain = |i: usize| norm.map(|eps| (eps.0, inputs[ops.gains + i].0));
    // RoPE'd heads, rounded to the type as a rope operator's output buffer holds them.
    let roped = |x: &[f32], gain| -> Vec<f32> {
        rope_head(&head_rms_norm(x, gain), inv, pos as i64).into_iter().map(|v| dtype.round(v)).collect()
    };
    let qs: Vec<Vec<f32>> = (0..group).map(|g| roped(&q[(h * group + g) * d..][..d], gain(0))).collect();
    let k_new = roped(&k[h * d..(h + 1) * d], gain(1));
    let v_new = &v[h * d..(h + 1) * d];
    let row = |j: usize| (h * cap + j) * d;
    if chunk_range(pos + 1, chunks, c).contains(&pos) {
        kc[row(pos)..row(pos) + d].copy_from_slice(&k_new);
        vc[row(pos)..row(pos) + d].copy_from_slice(v_new);
    }
    // Key `pos` comes from the new row (the tile that appends it may not have run yet).
    let (kc, vc): (&[f32], &[f32]) = (kc, vc);
    let key = |j: usize| if j == pos { &k_new[..] } else { &kc[row(j)..row(j) + d] };
    let val = |j: usize| if j == pos { v_new } else { &vc[row(j)..row(j) + d] };
    let chunk_rows = |cc: usize| -> Vec<f32> {
        let mut rows = vec![0.0f32; group * d2];
        let keys = chunk_range(pos + 1, chunks, cc);
        if keys.is_empty() {
            neutral_partials(&mut rows, d);
        } else {
            for (g, r) in rows.chunks_mut(d2).enumerate() {
                chunk_partial(&qs[g], keys.clone(), key, val, scale.0, r);
            }
        }
        rows
    };
    partials[slot].copy_from_slice(&chunk_rows(c));
    if let Some(out) = out.filter(|_| c + 1 == chunks) {
        let all: Vec<Vec<f32>> = (0..chunks).map(chunk_rows).collect();
        for g in 0..group {
            let at = (h * group + g) * d;
            merge_partials(chunks, |cc| &all[cc][g * d2..(g + 1) * d2], &mut out[at..at + d]);
        }
    }
    Ok(())
}

/// Floats of shared memory one split-KV chunk (`attention_chunk` of `device.cuh`) uses: the
/// group's queries, the scores of one key tile, (m, l, correction) per head and the cross-warp
/// reduction.
fn attention_smem_floats(group: usize, d: usize, threads: usize) -> usize {
    group * (d + threads + 3 + threads / 32 * d)
}

/// `(kv_heads, group, d)` of attention operands `q [1, heads·d]` and a cache `[kv_heads,
/// capacity, d]` of `q`'s type, `group = heads / kv_heads`.
fn attention_dims(q: &TensorDesc, kc: &TensorDesc) -> Result<(usize, usize, usize), String> {
    rank(q, 2, "q")?;
    rank(kc, 3, "k_cache")?;
    expect(q.shape[0] == 1, || format!("q: expected one query row [1, heads·d], found {}", fmt(q)))?;
    let (kvh, d) = (kc.shape[0], kc.shape[2]);
    expect(kc.dtype == q.dtype && d > 0 && kvh > 0 && q.shape[1].is_multiple_of(d), || {
        format!(
            "k_cache: expected {} [kv_heads, capacity, d] with d dividing {}, found {}",
            q.dtype,
            q.shape[1],
            fmt(kc)
        )
    })?;
    let heads = q.shape[1] / d;
    expect(heads.is_multiple_of(kvh), || format!("kv_heads {kvh} must divide heads {heads}"))?;
    Ok((kvh, heads / kvh, d))
}

/// The most values of a KV head group (`group · d`) a [`Builtin::MergeProjection`] tile merges
/// and multiplies: its shared memory holds them with the chunks' `(m, l)` pairs.
pub const MAX_MERGE_PROJECTION_ROWS: usize = 4096;

/// `(kv_heads, n)` of a [`Builtin::MergeProjection`]'s operands: partials `[kv_heads, chunks,
/// group, d + 2]` f32 and a row-major weight `[kv_heads·group·d, n]` (16-bit or f32).
fn merge_projection_dims(p: &TensorDesc, w: &TensorDesc) -> Result<(usize, usize), String> {
    rank(p, 4, "partials")?;
    f32_typed(p, "partials")?;
    rank(w, 2, "W")?;
    let [kvh, chunks, group, d2] = p.shape[..] else { unreachable!("checked: rank 4") };
    expect(kvh > 0 && chunks > 0 && group > 0 && d2 > 2, || {
        format!("partials: expected [kv_heads, chunks, group, d + 2], found {}", fmt(p))
    })?;
    expect(w.shape[0] == kvh * group * (d2 - 2) && w.shape[1] > 0, || {
        format!("W: expected [{} (kv_heads · group · d), n], found {}", kvh * group * (d2 - 2), fmt(w))
    })?;
    expect(matches!(w.dtype, DType::F32 | DType::F16 | DType::Bf16), || {
        format!("W: expected f32, f16 or bf16, found {}", fmt(w))
    })?;
    Ok((kvh, w.shape[1]))
}

/// The keys of chunk `c` of `chunks` over a key length `keylen`: chunks of `⌈keylen / chunks⌉`
/// keys from key 0, the last ones shorter or empty.
pub fn chunk_range(keylen: usize, chunks: usize, c: usize) -> std::ops::Range<usize> {
    let per = keylen.div_ceil(chunks.max(1));
    let lo = (c * per).min(keylen);
    lo..(lo + per).min(keylen)
}

/// The fewest keys a split-KV chunk has when the cache is full: below that a chunk's fixed cost
/// (reading its query group, writing and combining its partial) outweighs the keys it reads
/// (session 10: the toy's 128-key cache in 66 chunks per KV head, about 2 keys each, decoded at
/// 74 µs/token; in 2 chunks of 64, at 54).
pub const MIN_CHUNK_KEYS: usize = 64;

/// Key chunks per KV head of split-KV attention over a cache of `capacity` keys for `workers`
/// workers: as many as fill the workers once (`kv_heads × chunks` tasks), but no more than give
/// every chunk [`MIN_CHUNK_KEYS`] keys of a full cache; at least one.
pub fn split_kv_chunks(kv_heads: usize, capacity: usize, workers: usize) -> usize {
    (workers / kv_heads.max(1)).min(capacity.div_ceil(MIN_CHUNK_KEYS)).max(1)
}

/// Adds split-KV attention of `q` over the first `keylen` keys of `k_cache`/`v_cache` (see
/// [`Builtin::AttentionPartial`]) with [`split_kv_chunks`]`(kv_heads, capacity, workers)` chunks per KV
/// head: operators `name` (the partials, buffer `{name}.out`) and `{name}_combine` (the result,
/// buffer `{name}_combine.out`, like `q`), which it returns.
pub fn split_kv_attention(
    g: &mut StepGraph,
    name: &str,
    [q, k_cache, v_cache]: [TensorId; 3],
    keylen: ParamExpr,
    scale: Scalar,
    workers: usize,
) -> Result<TensorId, GraphError> {
    // A cache of the wrong rank is the builtin's error below; these are only the chunk count's.
    let dim = |i: usize| g.tensors().get(k_cache.0).and_then(|t| t.desc.shape.get(i).copied()).unwrap_or(1);
    let (kv_heads, capacity) = (dim(0), dim(1));
    let dtype = g.tensors().get(q.0).map_or(DType::F32, |t| t.desc.dtype);
    let chunks = split_kv_chunks(kv_heads, capacity, workers);
    let partial = g.builtin(name, Builtin::AttentionPartial { keylen, scale, chunks }, &[q, k_cache, v_cache])?[0];
    Ok(g.builtin(&format!("{name}_combine"), Builtin::AttentionCombine { dtype }, &[partial])?[0])
}

/// The new query, key and value rows a [`decode_attention`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkvRows {
    /// Three tensors: `q [1, heads·d]`, `k` and `v [1, kv_heads·d]`.
    Separate([TensorId; 3]),
    /// One tensor `[1, heads·d + 2·kv_heads·d]` laid out q | k | v: one projection's output,
    /// whose tiles then split the three rows' columns evenly between the workers.
    Fused(TensorId),
}

/// Adds [`Builtin::DecodeAttention`] `name` at position `pos`: RoPE of the projections' query
/// and key rows `rows` (after the per-head norm with gains `q_norm`, `k_norm` when `norm` is
/// given), the append of the key and value rows to `k_cache`/`v_cache`, attention over keys
/// `0..=pos` in [`split_kv_chunks`]`(kv_heads, capacity, workers)` chunks per KV head, and the
/// merge. Writes the buffers `{name}.out` (the result, `[1, heads·d]` like `q`, which it
/// returns) and `{name}.partials`.
#[allow(clippy::too_many_arguments)]
pub fn decode_attention(
    g: &mut StepGraph,
    name: &str,
    rows: QkvRows,
    inv_freq: TensorId,
    norm: Option<(Scalar, [TensorId; 2])>,
    caches: [TensorId; 2],
    pos: ParamExpr,
    scale: Scalar,
    workers: usize,
) -> Result<TensorId, GraphError> {
    add_decode_attention(g, name, rows, inv_freq, norm, caches, pos, scale, workers, true)
}

/// [`decode_attention`] without the merge ([`Builtin::DecodeAttention`] with `merge: false`):
/// writes only the buffer `{name}.partials` (`[kv_heads, chunks, group, d + 2]` f32, which it
/// returns) besides the caches, for a [`Builtin::MergeProjection`] ([`merge_projection`]) to
/// merge.
#[allow(clippy::too_many_arguments)]
pub fn decode_attention_partials(
    g: &mut StepGraph,
    name: &str,
    rows: QkvRows,
    inv_freq: TensorId,
    norm: Option<(Scalar, [TensorId; 2])>,
    caches: [TensorId; 2],
    pos: ParamExpr,
    scale: Scalar,
    workers: usize,
) -> Result<TensorId, GraphError> {
    add_decode_attention(g, name, rows, inv_freq, norm, caches, pos, scale, workers, false)
}

/// Adds [`Builtin::MergeProjection`] `name` of the decode-attention partials `partials` and the
/// row-major weight `w [kv_heads·group·d, n]`, with [`merge_projection_cols`] columns per tile;
/// writes and returns the buffer `{name}.out [kv_heads, n]` (`w`'s type).
pub fn merge_projection(
    g: &mut StepGraph,
    name: &str,
    partials: TensorId,
    w: TensorId,
    workers: usize,
) -> Result<TensorId, GraphError> {
    // Operands and shapes are the builtin's to check (g.builtin below); these only choose the
    // tiles.
    let dim = |t: TensorId, i: usize| g.tensors().get(t.0).and_then(|t| t.desc.shape.get(i).copied());
    let kv_heads = dim(partials, 0).unwrap_or(1).max(1);
    let n = dim(w, 1).unwrap_or(0);
    let cols = merge_projection_cols(kv_heads, n, workers);
    Ok(g.builtin(name, Builtin::MergeProjection { cols }, &[partials, w])?[0])
}

/// Columns per [`Builtin::MergeProjection`] tile for `kv_heads` groups and an output of `n`:
/// the narrowest power of two from 8 dividing `n` whose tiles (`n / cols` per group) fit one
/// round on `workers` workers (Qwen3-0.6B: 64 of 1024 over 8 KV heads, 128 tiles; Llama-3.2-1B
/// 128 of 2048; Llama-3.1-8B 256 of 4096), else the widest up to [`MAX_MERGE_PROJECTION_COLS`]
/// dividing `n`; 8 when none divides it (which the builtin's check then reports).
pub fn merge_projection_cols(kv_heads: usize, n: usize, workers: usize) -> usize {
    let widths =
        || (3..=MAX_MERGE_PROJECTION_COLS.trailing_zeros()).map(|b| 1usize << b).filter(|c| n.is_multiple_of(*c));
    widths().find(|&c| n / c * kv_heads <= workers.max(1)).or_else(|| widths().next_back()).unwrap_or(8)
}

/// The widest [`Builtin::MergeProjection`] tile: 128 16-byte column vectors of f32 (256 of a
/// 16-bit type), each a thread's, at 256 threads a task.
pub const MAX_MERGE_PROJECTION_COLS: usize = 512;

#[allow(clippy::too_many_arguments)]
fn add_decode_attention(
    g: &mut StepGraph,
    name: &str,
    rows: QkvRows,
    inv_freq: TensorId,
    norm: Option<(Scalar, [TensorId; 2])>,
    [k_cache, v_cache]: [TensorId; 2],
    pos: ParamExpr,
    scale: Scalar,
    workers: usize,
    merge: bool,
) -> Result<TensorId, GraphError> {
    let first = match rows {
        QkvRows::Separate([q, _, _]) => q,
        QkvRows::Fused(qkv) => qkv,
    };
    let desc = |t: TensorId| g.tensors().get(t.0).map(|t| t.desc.clone());
    let (Some(qd), Some(kd)) = (desc(first), desc(k_cache)) else {
        return Err(GraphError::Operand {
            graph: g.name().into(),
            op: name.into(),
            reason: "an operand is not a tensor of this graph".into(),
        });
    };
    // Shapes are the builtin's to check (add_builtin below); these only size the buffers.
    let dim = |i: usize| kd.shape.get(i).copied().unwrap_or(1).max(1);
    let (kv_heads, capacity, d) = (dim(0), dim(1), dim(2));
    let width = qd.shape.get(1).copied().unwrap_or(0);
    let fused = matches!(rows, QkvRows::Fused(_));
    // The query row's width: q's, or the columns of q | k | v before k's (at least one head).
    let q_width = if fused { AttentionOperands::of(true, width, kv_heads * d).k.1.max(d) } else { width };
    let group = q_width / d / kv_heads;
    let chunks = split_kv_chunks(kv_heads, capacity, workers);
    let out_shape: Vec<usize> = qd.shape.iter().take(1).copied().chain([q_width]).collect();
    let out = if merge { Some(g.buffer(&format!("{name}.out"), &out_shape, qd.dtype)?) } else { None };
    let partials = g.buffer(&format!("{name}.partials"), &[kv_heads, chunks, group.max(1), d + 2], DType::F32)?;
    let mut inputs = match rows {
        QkvRows::Separate([q, k, v]) => vec![q, k, v],
        QkvRows::Fused(qkv) => vec![qkv],
    };
    inputs.push(inv_freq);
    inputs.extend(norm.iter().flat_map(|(_, gains)| *gains));
    let b = Builtin::DecodeAttention { pos, scale, chunks, norm: norm.map(|(eps, _)| eps), fused, merge };
    let outputs: Vec<TensorId> = out.into_iter().chain([partials, k_cache, v_cache]).collect();
    g.add_builtin(name, b, &inputs, &outputs)?;
    Ok(out.unwrap_or(partials))
}

/// Grouped-query attention of one query row in f64, the ground truth of the split-KV tasks:
/// head `h` of `q [heads·d]` over keys `0..keylen` of KV head `h / (heads / kv_heads)` of
/// caches `[kv_heads, capacity, d]` (row-major values), `softmax(scale · q K^T) V`.
pub fn reference_attention(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    [kv_heads, capacity, d]: [usize; 3],
    keylen: usize,
    scale: f32,
) -> Vec<f32> {
    let heads = q.len() / d;
    let group = heads / kv_heads;
    let mut out = vec![0.0f32; heads * d];
    for h in 0..heads {
        let at = |j: usize| ((h / group) * capacity + j) * d;
        let qh = &q[h * d..(h + 1) * d];
        let s: Vec<f64> = (0..keylen)
            .map(|j| {
                f64::from(scale)
                    * qh.iter().zip(&k_cache[at(j)..]).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()
            })
            .collect();
        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
        let total: f64 = w.iter().sum();
        for i in 0..d {
            let v: f64 = w.iter().enumerate().map(|(j, wj)| wj * f64::from(v_cache[at(j) + i])).sum();
            out[h * d + i] = (v / total) as f32;
        }
    }
    out
}

/// Where a runtime index came from (for error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexSource {
    /// Input operand `i` of the task.
    Input(usize),
    /// Runtime parameter `p` of the graph.
    Param(usize),
}

/// One head `x` of a [`Builtin::Rope`] before its rotation: as it is, or with `(eps, gain)`
/// RMS-normalized (sum of squares in f64, the scale `1 / √(mean + eps)` rounded to f32, then
/// `x · scale · gain` in f32).
pub fn head_rms_norm(x: &[f32], norm: Option<(f32, &[f32])>) -> Vec<f32> {
    match norm {
        None => x.to_vec(),
        Some((eps, gain)) => {
            let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            let scale = (1.0 / (ss / x.len() as f64 + f64::from(eps)).sqrt()) as f32;
            x.iter().zip(gain).map(|(&v, &g)| v * scale * g).collect()
        }
    }
}

/// The largest value of `values` (NaN ignored) and its index plus `start` (the smallest among
/// equals; the first index when every value is NaN or −∞).
pub fn argmax(values: &[f32], start: usize) -> (f32, usize) {
    let mut best = (f32::NEG_INFINITY, start);
    for (j, &v) in values.iter().enumerate() {
        if v > best.0 {
            best = (v, start + j);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpk::graph::ParamId;

    fn d(shape: &[usize], dtype: DType) -> TensorDesc {
        TensorDesc::new(shape, dtype)
    }

    #[test]
    fn grids_and_operand_errors() {
        let e = Builtin::Embedding { chunk: 64 };
        let table = d(&[100, 256], DType::Bf16);
        let tokens = d(&[1], DType::F32);
        assert_eq!(e.check(&[&table, &tokens], &[&d(&[1, 256], DType::Bf16)], 0), Ok([4, 1, 1]));
        let bad = e.check(&[&table, &tokens], &[&d(&[1, 128], DType::Bf16)], 0).expect_err("an operand error");
        assert!(bad.contains("expected bf16 [1, 256]"), "{bad}");
        let bad = Builtin::Embedding { chunk: 100 }.check(&[&table, &tokens], &[&d(&[1, 256], DType::Bf16)], 0);
        assert!(bad.expect_err("an operand error").contains("must divide hidden 256"));
        let a = Builtin::AttentionPartial { keylen: ParamExpr::of(ParamId(0)), scale: Scalar(0.125), chunks: 4 };
        let q = d(&[1, 8 * 64], DType::F16);
        let kc = d(&[3, 32, 64], DType::F16);
        assert!(
            a.check(&[&q, &kc, &kc], &[&q], 1)
                .expect_err("an operand error")
                .contains("kv_heads 3 must divide heads 8")
        );
        let kc = d(&[2, 32, 64], DType::F16);
        let partials = d(&[2, 4, 4, 66], DType::F32);
        assert!(a.check(&[&q, &kc, &kc], &[&partials], 0).expect_err("an operand error").contains("parameter #0"));
        assert_eq!(a.check(&[&q, &kc, &kc], &[&partials], 1), Ok([4, 2, 1]));
        assert_eq!(a.output_descs(&[&q, &kc, &kc]), Ok(vec![partials.clone()]));
        let e = a.check(&[&q, &kc, &kc], &[&q], 1).expect_err("an operand error");
        assert!(e.contains("partials: expected f32"), "{e}");
        let q96 = d(&[1, 4 * 96], DType::F16);
        let kc96 = d(&[2, 32, 96], DType::F16);
        let e = a.check(&[&q96, &kc96, &kc96], &[&d(&[2, 4, 2, 98], DType::F32)], 1).expect_err("an operand error");
        assert!(e.contains("head dim 96: a head's row of 192 bytes must be a power of two"), "{e}");
        let q32 = d(&[1, 32 * 64], DType::F16);
        let kc1 = d(&[1, 32, 64], DType::F16);
        let e = a.check(&[&q32, &kc1, &kc1], &[&d(&[1, 4, 32, 66], DType::F32)], 1).expect_err("an operand error");
        assert!(e.contains("at most 16 query heads per KV head, found 32"), "{e}");
        let zero = Builtin::AttentionPartial { keylen: ParamExpr::of(ParamId(0)), scale: Scalar(0.125), chunks: 0 };
        let e = zero.check(&[&q, &kc, &kc], &[&d(&[2, 0, 4, 66], DType::F32)], 1).expect_err("an operand error");
        assert!(e.contains("at least one key chunk"), "{e}");
        let c = Builtin::AttentionCombine { dtype: DType::F16 };
        assert_eq!(c.check(&[&partials], &[&q], 0), Ok([8, 1, 1]));
        let e = c.check(&[&partials], &[&d(&[1, 8 * 64], DType::Bf16)], 0).expect_err("an operand error");
        assert!(e.contains("output: expected f16 [1, 512]"), "{e}");
    }

    /// A step graph of split-KV attention: `q [1, heads·d]`, caches `[kv_heads, cap, d]`,
    /// `chunks` chunks; key length `pos + 1`. Returns it with (q, k_cache, v_cache, partials,
    /// out).
    fn split_kv_graph(
        heads: usize,
        kvh: usize,
        dim: usize,
        cap: usize,
        chunks: usize,
        dtype: DType,
    ) -> (StepGraph, [TensorId; 5]) {
        let mut g = StepGraph::new("split_kv").expect("a name");
        let pos = g.param("pos").expect("a parameter");
        let q = g.input("q", &[1, heads * dim], dtype).expect("q");
        let kc = g.state("k_cache", &[kvh, cap, dim], dtype).expect("k_cache");
        let vc = g.state("v_cache", &[kvh, cap, dim], dtype).expect("v_cache");
        let scale = Scalar(1.0 / (dim as f32).sqrt());
        let a = Builtin::AttentionPartial { keylen: ParamExpr::of(pos).plus(1), scale, chunks };
        let p = g.builtin("attention", a, &[q, kc, vc]).expect("partials")[0];
        let o = g.builtin("attention_combine", Builtin::AttentionCombine { dtype }, &[p]).expect("combine")[0];
        (g, [q, kc, vc, p, o])
    }

    fn random_inputs(g: &StepGraph, ids: &[TensorId], seed: u64) -> crate::mpk::exec::HostTensors {
        let mut rng = crate::mpk::exec::SplitMix(seed);
        let mut host = crate::mpk::exec::HostTensors::zeros(g);
        for &t in ids {
            let n: usize = g.tensor(t).desc.shape.iter().product();
            // q and K in ±2: scores of a few units, so the softmax is far from uniform
            let v: Vec<f32> = (0..n).map(|_| rng.uniform(-2.0, 2.0)).collect();
            host.set(t, &v).expect("sizes agree");
        }
        host
    }

    /// The key lengths a split into `chunks` must get right: 1, 2, 3, chunks − 1, chunks,
    /// chunks + 1, a large odd length, the whole cache.
    fn key_lengths(chunks: usize, cap: usize) -> Vec<usize> {
        let mut l = vec![1, 2, 3, chunks.saturating_sub(1), chunks, chunks + 1, (cap * 3 / 4) | 1, cap];
        l.retain(|&x| (1..=cap).contains(&x));
        l.sort_unstable();
        l.dedup();
        l
    }

    #[test]
    fn split_kv_matches_the_reference_attention() {
        // (group, head dim, chunks) over two KV heads; the cache holds 300 keys.
        for (group, dim, chunks) in [(1, 64, 4), (4, 64, 16), (8, 64, 5), (1, 128, 1), (4, 128, 7), (8, 128, 16)] {
            let (kvh, cap) = (2, 300);
            let (g, [q, kc, vc, p, o]) = split_kv_graph(kvh * group, kvh, dim, cap, chunks, DType::F32);
            let mut host = random_inputs(&g, &[q, kc, vc], (group * 1000 + dim + chunks) as u64);
            for l in key_lengths(chunks, cap) {
                crate::mpk::exec::reference_step(&g, &mut host, &[l as i32 - 1]).expect("in range");
                let want =
                    reference_attention(host.get(q), host.get(kc), host.get(vc), [kvh, cap, dim], l, g_scale(dim));
                let got = host.get(o);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                        "group {group}, d {dim}, chunks {chunks}, keylen {l}: element {i}: {a} vs {b}"
                    );
                }
                // the partials: empty chunks neutral, no NaN anywhere
                let parts = host.get(p);
                for h in 0..kvh {
                    for c in 0..chunks {
                        let empty = chunk_range(l, chunks, c).is_empty();
                        for gi in 0..group {
                            let row = &parts[((h * chunks + c) * group + gi) * (dim + 2)..][..dim + 2];
                            assert!(row.iter().all(|v| !v.is_nan()), "a NaN in chunk {c} at keylen {l}");
                            if empty {
                                assert_eq!((row[dim], row[dim + 1]), (f32::NEG_INFINITY, 0.0));
                                assert!(row[..dim].iter().all(|&v| v == 0.0));
                            } else {
                                assert!(
                                    row[dim].is_finite() && row[dim + 1] >= 1.0,
                                    "chunk {c} at keylen {l}: {row:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    fn g_scale(dim: usize) -> f32 {
        1.0 / (dim as f32).sqrt()
    }

    #[test]
    fn chunks_cover_the_keys_once() {
        for chunks in [1, 3, 16] {
            for l in 1..100 {
                let covered: Vec<usize> = (0..chunks).flat_map(|c| chunk_range(l, chunks, c)).collect();
                assert_eq!(covered, (0..l).collect::<Vec<_>>(), "keylen {l}, {chunks} chunks");
            }
        }
        // The three models' caches (8 KV heads, thousands of keys) fill the 132 workers.
        assert_eq!(split_kv_chunks(8, 4160, 132), 16);
        assert_eq!(split_kv_chunks(200, 4160, 132), 1);
        // The toy's 128-key cache: two chunks of 64 keys, not 16 of 8; a short cache one.
        assert_eq!(split_kv_chunks(2, 128, 132), 2);
        assert_eq!(split_kv_chunks(2, 129, 132), 3);
        assert_eq!(split_kv_chunks(8, 10, 132), 1);
    }

    #[test]
    fn a_key_length_out_of_range_is_an_index_error_and_zeros() {
        let (g, [q, kc, vc, _, o]) = split_kv_graph(4, 2, 64, 16, 4, DType::Bf16);
        let mut host = random_inputs(&g, &[q, kc, vc], 7);
        for pos in [16, -1] {
            let e = crate::mpk::exec::reference_step(&g, &mut host, &[pos]).expect_err("out of range").to_string();
            assert!(e.contains(&format!("found {}", pos + 1)) && e.contains("expected 0 <= index < 17"), "{e}");
        }
        // the combine of all-neutral partials (what a device step leaves after the error) is 0
        let c = Builtin::AttentionCombine { dtype: DType::Bf16 };
        let pd = d(&[2, 4, 2, 66], DType::F32);
        let mut partial = vec![0.0f32; 2 * 4 * 2 * 66];
        for row in partial.chunks_mut(66) {
            row[64] = f32::NEG_INFINITY;
        }
        let od = g.tensor(o).desc.clone();
        let mut out = vec![f32::NAN; 4 * 64];
        for h in 0..4 {
            c.run_tile([h, 0, 0], &[(&partial, &pd)], &mut [(&mut out[..], &od)], &[], &|_| String::new())
                .expect("no index");
        }
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn split_kv_dependencies_are_exact() {
        use crate::mpk::{MpkOptions, compile};
        let (g, [q, kc, vc, _, o]) = split_kv_graph(8, 2, 64, 64, 5, DType::Bf16);
        let c = compile(&g, &MpkOptions { workers: 6, ..MpkOptions::default() }).expect("compiles");
        let op = |n: &str| g.op_named(n).expect("an operator");
        let (part, comb) = (op("attention"), op("attention_combine"));
        for (t, task) in c.tasks.iter().enumerate() {
            if task.op == comb {
                // head x waits for exactly the 5 chunks of its KV head x / 4
                let want: Vec<usize> = (0..c.tasks.len())
                    .filter(|&p| c.tasks[p].op == part && c.tasks[p].tile[1] == task.tile[0] / 4)
                    .collect();
                assert_eq!(c.deps[t], want, "combine[{}]", task.tile[0]);
            }
        }
        // any order the counters allow gives the reference's result
        let mut host = random_inputs(&g, &[q, kc, vc], 3);
        let mut want = host.clone();
        crate::mpk::exec::reference_step(&g, &mut want, &[40]).expect("in range");
        for seed in 0..4 {
            crate::mpk::exec::execute_step(&c, &mut host, &[40], seed).expect("runs");
            assert_eq!(host.get(o), want.get(o), "seed {seed}");
        }
    }

    #[test]
    fn the_decoder_waits_for_every_attention_tile_before_o_proj() {
        use crate::mpk::decoder::{DecoderConfig, decoder_step};
        use crate::mpk::deps::CounterOf;
        use crate::mpk::{MpkOptions, compile};
        let g = decoder_step("toy", &DecoderConfig { layers: 1, ..DecoderConfig::toy() }).expect("a step graph");
        let c = compile(&g, &MpkOptions::default()).expect("compiles");
        let attn = g.op_named("l0.attention").expect("an operator");
        let parts: Vec<usize> = (0..c.tasks.len()).filter(|&t| c.tasks[t].op == attn).collect();
        // 2 KV heads over a 128-key cache: 2 chunks of 64 keys each (MIN_CHUNK_KEYS), not the
        // 66 each that would fill the 132 workers
        assert_eq!(parts.len(), 4);
        let o_proj: Vec<usize> =
            (0..c.tasks.len()).filter(|&t| g.ops()[c.tasks[t].op.0].name.starts_with("l0.o_proj")).collect();
        assert!(!o_proj.is_empty());
        for t in o_proj {
            // whichever tile of a KV head takes the last ticket writes its heads: wait for all
            assert!(parts.iter().all(|k| c.deps[t].contains(k)), "o_proj task {t} must wait for every attention tile");
        }
        // one ticket counter per KV head, two increments per step each, before the barrier
        let first = c.sync.first_ticket(attn).expect("tickets");
        for kvh in 0..2 {
            let k = c.sync.counters[first + kvh];
            assert_eq!((k.of, k.triggers), (CounterOf::Ticket(attn, kvh as u32), 2));
        }
        assert!(first + 2 <= c.sync.barrier());
        assert!(c.sync.waits.iter().flatten().all(|&k| !matches!(c.sync.counters[k].of, CounterOf::Ticket(..))));
        // the fused operator replaces rope, append and the combine
        for gone in ["l0.rope_q", "l0.rope_k", "l0.append_k", "l0.append_v", "l0.attention_combine"] {
            assert!(g.op_named(gone).is_none(), "{gone}");
        }
    }

    /// Inputs and states of a decode-attention test: `[q, k, v, inv_freq, q_norm, k_norm,
    /// k_cache, v_cache]` of `heads`, `kvh`, `dim`, `cap`.
    fn attention_operands(
        g: &mut StepGraph,
        heads: usize,
        kvh: usize,
        dim: usize,
        cap: usize,
        dtype: DType,
    ) -> [TensorId; 8] {
        let q = g.input("q", &[1, heads * dim], dtype).expect("q");
        let k = g.input("k", &[1, kvh * dim], dtype).expect("k");
        let v = g.input("v", &[1, kvh * dim], dtype).expect("v");
        let inv = g.input("inv_freq", &[dim / 2], DType::F32).expect("inv_freq");
        let qn = g.input("q_norm", &[1, dim], dtype).expect("q_norm");
        let kn = g.input("k_norm", &[1, dim], dtype).expect("k_norm");
        let kc = g.state("k_cache", &[kvh, cap, dim], dtype).expect("k_cache");
        let vc = g.state("v_cache", &[kvh, cap, dim], dtype).expect("v_cache");
        [q, k, v, inv, qn, kn, kc, vc]
    }

    /// The step of the separate operators the fused one replaces (rope of q and k, the two
    /// appends, split-KV attention and its combine), and the fused step; each with its
    /// operands and its result.
    fn fused_and_separate(
        heads: usize,
        kvh: usize,
        dim: usize,
        cap: usize,
        chunks: usize,
        dtype: DType,
        eps: Option<Scalar>,
    ) -> [(StepGraph, [TensorId; 8], TensorId); 2] {
        let scale = Scalar(1.0 / (dim as f32).sqrt());
        let mut a = StepGraph::new("separate").expect("a name");
        let pos = a.param("pos").expect("a parameter");
        let ops = attention_operands(&mut a, heads, kvh, dim, cap, dtype);
        let [q, k, v, inv, qn, kn, kc, vc] = ops;
        let rope = Builtin::Rope { pos: ParamExpr::of(pos), norm: eps };
        let gains = |x: TensorId, n: TensorId| if eps.is_some() { vec![x, inv, n] } else { vec![x, inv] };
        let qr = a.builtin("rope_q", rope.clone(), &gains(q, qn)).expect("rope_q")[0];
        let kr = a.builtin("rope_k", rope, &gains(k, kn)).expect("rope_k")[0];
        a.add_builtin("append_k", Builtin::KvAppend { pos: ParamExpr::of(pos) }, &[kr], &[kc]).expect("append_k");
        a.add_builtin("append_v", Builtin::KvAppend { pos: ParamExpr::of(pos) }, &[v], &[vc]).expect("append_v");
        let part = Builtin::AttentionPartial { keylen: ParamExpr::of(pos).plus(1), scale, chunks };
        let p = a.builtin("attention", part, &[qr, kc, vc]).expect("partials")[0];
        let out_a = a.builtin("combine", Builtin::AttentionCombine { dtype }, &[p]).expect("combine")[0];

        let mut b = StepGraph::new("fused").expect("a name");
        let pos = b.param("pos").expect("a parameter");
        let ops_b = attention_operands(&mut b, heads, kvh, dim, cap, dtype);
        let [q, k, v, inv, qn, kn, kc, vc] = ops_b;
        // the chunk count of `workers` that gives `chunks` per KV head (caches of >= 64·chunks)
        let workers = chunks * kvh;
        assert_eq!(split_kv_chunks(kvh, cap, workers), chunks, "test setup");
        let out_b = decode_attention(
            &mut b,
            "attention",
            QkvRows::Separate([q, k, v]),
            inv,
            eps.map(|e| (e, [qn, kn])),
            [kc, vc],
            ParamExpr::of(pos),
            scale,
            workers,
        )
        .expect("fused");
        [(a, ops, out_a), (b, ops_b, out_b)]
    }

    #[test]
    fn decode_attention_equals_the_operators_it_fuses() {
        // (heads, KV heads, head dim, chunks, type, norm): steps at positions 0.. over a cache
        // of 64·chunks + 5 keys, every output and both caches bit for bit.
        let cases = [
            (4, 2, 64, 2, DType::Bf16, None),
            (8, 2, 64, 3, DType::F32, None),
            (4, 1, 128, 4, DType::F16, Some(Scalar(1e-6))),
            (16, 2, 32, 1, DType::Bf16, Some(Scalar(1e-5))),
        ];
        for (heads, kvh, dim, chunks, dtype, eps) in cases {
            let cap = 64 * chunks + 5;
            let [(a, ops_a, out_a), (b, ops_b, out_b)] = fused_and_separate(heads, kvh, dim, cap, chunks, dtype, eps);
            let (mut ha, mut hb) = (crate::mpk::exec::HostTensors::zeros(&a), crate::mpk::exec::HostTensors::zeros(&b));
            let mut rng = crate::mpk::exec::SplitMix((heads * 100 + dim + chunks) as u64);
            let inv: Vec<f32> = (0..dim / 2).map(|i| 10000f32.powf(-2.0 * i as f32 / dim as f32)).collect();
            ha.set(ops_a[3], &inv).expect("inv");
            hb.set(ops_b[3], &inv).expect("inv");
            for i in [4, 5] {
                let gain: Vec<f32> = (0..dim).map(|_| rng.uniform(0.5, 1.5)).collect();
                ha.set(ops_a[i], &gain).expect("gain");
                hb.set(ops_b[i], &gain).expect("gain");
            }
            let positions: Vec<usize> = (0..cap).filter(|p| p % 7 == 0 || *p < 4 || *p + 2 >= cap).collect();
            for (n, &pos) in positions.iter().enumerate() {
                // new q, k, v each step; the caches keep what earlier steps appended (and zeros)
                for i in 0..3 {
                    let len: usize = a.tensor(ops_a[i]).desc.shape.iter().product();
                    let x: Vec<f32> = (0..len).map(|_| rng.uniform(-2.0, 2.0)).collect();
                    ha.set(ops_a[i], &x).expect("x");
                    hb.set(ops_b[i], &x).expect("x");
                }
                crate::mpk::exec::reference_step(&a, &mut ha, &[pos as i32]).expect("in range");
                crate::mpk::exec::reference_step(&b, &mut hb, &[pos as i32]).expect("in range");
                let what =
                    format!("heads {heads}/{kvh}, d {dim}, {chunks} chunks, {dtype}, norm {eps:?}, step {n} at {pos}");
                assert_eq!(hb.get(out_b), ha.get(out_a), "out: {what}");
                assert_eq!(hb.get(ops_b[6]), ha.get(ops_a[6]), "k_cache: {what}");
                assert_eq!(hb.get(ops_b[7]), ha.get(ops_a[7]), "v_cache: {what}");
                assert!(hb.get(out_b).iter().all(|v| v.is_finite()), "{what}");
            }
        }
    }

    #[test]
    fn decode_attention_runs_in_any_order_the_counters_allow() {
        use crate::mpk::{MpkOptions, compile};
        let [_, (g, ops, out)] = fused_and_separate(8, 2, 64, 64 * 5 + 5, 5, DType::Bf16, Some(Scalar(1e-6)));
        let c = compile(&g, &MpkOptions { workers: 6, ..MpkOptions::default() }).expect("compiles");
        let mut host = random_inputs(&g, &ops, 3);
        let mut want = host.clone();
        crate::mpk::exec::reference_step(&g, &mut want, &[200]).expect("in range");
        for seed in 0..4 {
            let mut h = host.clone();
            crate::mpk::exec::execute_step(&c, &mut h, &[200], seed).expect("runs");
            assert_eq!(h.get(out), want.get(out), "seed {seed}");
            assert_eq!(h.get(ops[6]), want.get(ops[6]), "seed {seed}");
        }
        // out of range: zeros, the caches untouched, an index error naming the parameter
        for pos in [64 * 5 + 5, -1] {
            let e = crate::mpk::exec::reference_step(&g, &mut host, &[pos]).expect_err("out of range").to_string();
            assert!(e.contains(&format!("found {pos}")) && e.contains("expected 0 <= index < 325"), "{e}");
            assert!(e.contains("runtime parameter `pos`"), "{e}");
            assert!(host.get(out).iter().all(|&v| v == 0.0));
        }
        assert_eq!(host.get(ops[6]), random_inputs(&g, &ops, 3).get(ops[6]), "the caches are left alone");
    }

    #[test]
    fn decode_attention_operand_errors() {
        let mut g = StepGraph::new("bad").expect("a name");
        let pos = g.param("pos").expect("a parameter");
        let [q, k, v, inv, qn, _, kc, vc] = attention_operands(&mut g, 8, 2, 64, 128, DType::Bf16);
        let out = g.buffer("out", &[1, 8 * 64], DType::Bf16).expect("out");
        let partials = g.buffer("partials", &[2, 2, 4, 66], DType::F32).expect("partials");
        let b = |norm| Builtin::DecodeAttention {
            pos: ParamExpr::of(pos),
            scale: Scalar(0.125),
            chunks: 2,
            norm,
            fused: false,
            merge: true,
        };
        let e = g.add_builtin("a", b(None), &[q, k, v, inv], &[out, partials, kc]).expect_err("three outputs");
        assert!(e.to_string().contains("expected 4 inputs and 4 output(s), found 4 and 3"), "{e}");
        let e = g.add_builtin("a", b(None), &[q, v, v, qn], &[out, partials, kc, vc]).expect_err("inv_freq");
        assert!(e.to_string().contains("inv_freq: expected rank 1"), "{e}");
        let e = g.add_builtin("a", b(None), &[q, q, v, inv], &[out, partials, kc, vc]).expect_err("k");
        assert!(e.to_string().contains("k: expected bf16 [1, 128] (one row of the KV heads)"), "{e}");
        let e = g.add_builtin("a", b(Some(Scalar(1e-6))), &[q, k, v, inv, qn, inv], &[out, partials, kc, vc]);
        assert!(e.expect_err("k_norm").to_string().contains("k_norm: expected bf16 [1, 64] (one head)"));
        let e = g.add_builtin("a", b(None), &[q, k, v, inv], &[out, out, kc, vc]).expect_err("partials");
        assert!(e.to_string().contains("partials: expected f32 [2, 2, 4, 66]"), "{e}");
        let e = b(None).output_descs(&[&g.tensor(q).desc; 4]).expect_err("no new outputs");
        assert!(e.contains("use decode_attention()"), "{e}");
        g.add_builtin("a", b(None), &[q, k, v, inv], &[out, partials, kc, vc]).expect("well formed");
        // q | k | v in one tensor: at least one query head besides k and v, the heads' group
        // whole; the result as wide as the query row.
        let f = |norm| Builtin::DecodeAttention {
            pos: ParamExpr::of(pos),
            scale: Scalar(0.125),
            chunks: 2,
            norm,
            fused: true,
            merge: true,
        };
        let kv_only = g.input("kv_only", &[1, 2 * 2 * 64], DType::Bf16).expect("kv_only");
        let e = g.add_builtin("f", f(None), &[kv_only, inv], &[out, partials, kc, vc]).expect_err("no q");
        assert!(e.to_string().contains("qkv: expected [1, heads·d + 2·128]"), "{e}");
        let e = g.add_builtin("f", f(None), &[q, k, v, inv], &[out, partials, kc, vc]).expect_err("separate");
        assert!(e.to_string().contains("expected 2 inputs and 4 output(s), found 4 and 4"), "{e}");
        let qkv = g.input("qkv", &[1, (8 + 4) * 64], DType::Bf16).expect("qkv");
        let e = g.add_builtin("f", f(Some(Scalar(1e-6))), &[qkv, inv, qn, inv], &[out, partials, kc, vc]);
        assert!(e.expect_err("k_norm").to_string().contains("k_norm: expected bf16 [1, 64] (one head)"));
        let wide = g.buffer("wide", &[1, 12 * 64], DType::Bf16).expect("wide");
        let e = g.add_builtin("f", f(None), &[qkv, inv], &[wide, partials, kc, vc]).expect_err("out");
        assert!(e.to_string().contains("expected bf16 [1, 512]"), "{e}");
        g.add_builtin("f", f(None), &[qkv, inv], &[out, partials, kc, vc]).expect("well formed");
    }

    /// A decode attention (bf16 or f32, `heads` over `kvh`, head dim `dim`, `chunks` chunks)
    /// whose partials a [`Builtin::MergeProjection`] multiplies by `W [heads·dim, n]`, and the
    /// same attention merged by itself followed by a plain `out · W` (block graph), each with
    /// its operands (the fused one's `[q, k, v, inv, q_norm, k_norm, k_cache, v_cache]`, then
    /// `W`) and result (the parts `[kvh, n]`; the product `[1, n]`).
    #[allow(clippy::type_complexity)]
    fn grouped_and_merged(
        heads: usize,
        kvh: usize,
        dim: usize,
        chunks: usize,
        n: usize,
        dtype: DType,
    ) -> [(StepGraph, Vec<TensorId>, TensorId); 2] {
        let cap = 64 * chunks + 5;
        let scale = Scalar(1.0 / (dim as f32).sqrt());
        let workers = chunks * kvh;
        let graph = |name: &str, grouped: bool| {
            let mut g = StepGraph::new(name).expect("a name");
            let pos = g.param("pos").expect("a parameter");
            let ops = attention_operands(&mut g, heads, kvh, dim, cap, dtype);
            let [q, k, v, inv, _, _, kc, vc] = ops;
            let w = g.input("w", &[heads * dim, n], dtype).expect("w");
            let rows = QkvRows::Separate([q, k, v]);
            let p = ParamExpr::of(pos);
            let out = if grouped {
                let parts =
                    decode_attention_partials(&mut g, "attention", rows, inv, None, [kc, vc], p, scale, workers)
                        .expect("partials");
                merge_projection(&mut g, "o_proj", parts, w, workers * 4).expect("merge_projection")
            } else {
                let a = decode_attention(&mut g, "attention", rows, inv, None, [kc, vc], p, scale, workers)
                    .expect("attention");
                let mut kg = crate::ir::KernelGraph::new();
                let (ka, kw) =
                    (kg.input(&[1, heads * dim], dtype).expect("a"), kg.input(&[heads * dim, n], dtype).expect("w"));
                let y = kg.matmul(ka, kw).expect("a · w");
                kg.output(y, None).expect("output");
                g.mugraph("o_proj", &kg, &[a, w]).expect("o_proj")[0]
            };
            let mut operands = ops.to_vec();
            operands.push(w);
            (g, operands, out)
        };
        [graph("grouped", true), graph("merged", false)]
    }

    #[test]
    fn merge_projection_parts_sum_to_the_merged_projection() {
        use crate::mpk::{MpkOptions, compile};
        // (heads, KV heads, head dim, chunks, n, type): the parts' sum over the KV heads against
        // the merged attention times W; f32 to the summation order, bf16 to a rounding of each
        // part (the merged heads are rounded to the type on both paths).
        for (heads, kvh, dim, chunks, n, dtype) in
            [(4, 2, 64, 2, 96, DType::F32), (8, 2, 64, 3, 64, DType::Bf16), (4, 4, 128, 2, 256, DType::Bf16)]
        {
            let [(a, ops_a, parts), (b, ops_b, full)] = grouped_and_merged(heads, kvh, dim, chunks, n, dtype);
            let (mut ha, mut hb) = (random_inputs(&a, &ops_a, 5), random_inputs(&b, &ops_b, 5));
            let c = compile(&a, &MpkOptions { workers: 5, ..MpkOptions::default() }).expect("compiles");
            let cap = 64 * chunks + 5;
            for pos in [0, 1, 63, 64, 100, cap - 1] {
                let mut run = ha.clone();
                crate::mpk::exec::reference_step(&a, &mut ha, &[pos as i32]).expect("in range");
                crate::mpk::exec::reference_step(&b, &mut hb, &[pos as i32]).expect("in range");
                // the scheduled tasks in any order the counters allow agree bit for bit
                crate::mpk::exec::execute_step(&c, &mut run, &[pos as i32], pos as u64).expect("runs");
                assert_eq!(run.get(parts), ha.get(parts), "schedule, pos {pos}");
                let (p, want) = (ha.get(parts), hb.get(full));
                let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let tol = if dtype == DType::F32 { 1e-5 } else { 2e-2 } * scale;
                for j in 0..n {
                    let sum: f32 = (0..kvh).map(|h| p[h * n + j]).sum();
                    assert!(
                        (sum - want[j]).abs() <= tol,
                        "{dtype} {heads}/{kvh} pos {pos} column {j}: {sum} vs {}",
                        want[j]
                    );
                }
            }
        }
    }

    #[test]
    fn merge_projection_tiles_wait_for_their_kv_head_only() {
        use crate::mpk::{MpkOptions, compile};
        let [(g, _, _), _] = grouped_and_merged(8, 2, 64, 3, 64, DType::Bf16);
        let c = compile(&g, &MpkOptions { workers: 6, ..MpkOptions::default() }).expect("compiles");
        let op = |n: &str| g.op_named(n).expect("an operator");
        let (attn, proj) = (op("attention"), op("o_proj"));
        // no merge in the attention: no tickets, no `out`
        assert!(c.sync.first_ticket(attn).is_none());
        assert!(g.tensor_named("attention.out").is_none());
        let mut seen = 0;
        for (t, task) in c.tasks.iter().enumerate() {
            if task.op == proj {
                seen += 1;
                let want: Vec<usize> = (0..c.tasks.len())
                    .filter(|&p| c.tasks[p].op == attn && c.tasks[p].tile[1] == task.tile[1])
                    .collect();
                assert_eq!(want.len(), 3);
                assert_eq!(c.deps[t], want, "o_proj tile {:?}", task.tile);
            }
        }
        // 24 workers' worth of tiles (merge_projection's `workers`): 64 columns in 8 of 8 per KV head
        assert_eq!(seen, 2 * 64 / merge_projection_cols(2, 64, 24));
        assert_eq!(merge_projection_cols(2, 64, 24), 8);
    }

    #[test]
    fn merge_projection_columns_and_operand_errors() {
        // The decoders' shapes on 132 workers: Qwen3-0.6B, Llama-3.2-1B, Llama-3.1-8B.
        assert_eq!(merge_projection_cols(8, 1024, 132), 64);
        assert_eq!(merge_projection_cols(8, 2048, 132), 128);
        assert_eq!(merge_projection_cols(8, 4096, 132), 256);
        assert_eq!(merge_projection_cols(8, 96, 132), 8, "12 tiles of 8 per group fit");
        assert_eq!(merge_projection_cols(8, 96, 40), 32, "48 tiles of 16 do not fit 40 workers; no 64 divides 96");
        assert_eq!(merge_projection_cols(1, 12, 132), 8, "no power of two from 8 divides 12: the check's error");
        let m = Builtin::MergeProjection { cols: 16 };
        let p = d(&[2, 3, 4, 66], DType::F32);
        let w = d(&[512, 64], DType::Bf16);
        assert_eq!(m.check(&[&p, &w], &[&d(&[2, 64], DType::Bf16)], 0), Ok([4, 2, 1]));
        assert_eq!(m.output_descs(&[&p, &w]), Ok(vec![d(&[2, 64], DType::Bf16)]));
        let e = m.check(&[&p, &d(&[256, 64], DType::Bf16)], &[&d(&[2, 64], DType::Bf16)], 0).expect_err("rows");
        assert!(e.contains("W: expected [512 (kv_heads · group · d), n]"), "{e}");
        let e = m.check(&[&d(&[2, 3, 4, 66], DType::Bf16), &w], &[&d(&[2, 64], DType::Bf16)], 0).expect_err("f32");
        assert!(e.contains("partials: expected f32"), "{e}");
        let e = m.check(&[&p, &w], &[&d(&[1, 64], DType::Bf16)], 0).expect_err("out");
        assert!(e.contains("output: expected bf16 [2, 64]"), "{e}");
        for cols in [12, 24, 128] {
            let e = Builtin::MergeProjection { cols }.check(&[&p, &w], &[&d(&[2, 64], DType::Bf16)], 0);
            let want = format!("cols {cols}: expected a power of two from 8 to 512 dividing the projection's width 64");
            assert!(e.expect_err("cols").contains(&want));
        }
        // An operand that is no tensor of the graph: the builtin's own error.
        let mut g = StepGraph::new("bad").expect("a name");
        let w = g.input("w", &[512, 64], DType::Bf16).expect("w");
        let e = merge_projection(&mut g, "o", TensorId(99), w, 132).expect_err("no such tensor");
        assert!(e.to_string().contains("an operand is not a tensor of this graph"), "{e}");
        let big = d(&[1, 1, 64, 130], DType::F32);
        let e = m.check(&[&big, &d(&[8192, 64], DType::Bf16)], &[&d(&[1, 64], DType::Bf16)], 0).expect_err("big");
        assert!(e.contains("a KV head group of at most 4096 values"), "{e}");
    }

    #[test]
    fn decode_attention_reads_q_k_v_from_one_tensor() {
        // The same steps with q, k and v as three inputs and as one q | k | v input: every
        // output and both caches bit for bit.
        for (heads, kvh, dim, chunks, dtype, eps) in
            [(8, 2, 64, 3, DType::Bf16, None), (4, 1, 128, 2, DType::F16, Some(Scalar(1e-6)))]
        {
            let cap = 64 * chunks + 5;
            let [_, (a, ops_a, out_a)] = fused_and_separate(heads, kvh, dim, cap, chunks, dtype, eps);
            let [_, _, _, inv, qn, kn, kc, vc] = ops_a;
            let mut b = StepGraph::new("one_input").expect("a name");
            let pos = b.param("pos").expect("a parameter");
            let ops_b = attention_operands(&mut b, heads, kvh, dim, cap, dtype);
            let (qw, kvw) = (heads * dim, kvh * dim);
            let qkv = b.input("qkv", &[1, qw + 2 * kvw], dtype).expect("qkv");
            let scale = Scalar(1.0 / (dim as f32).sqrt());
            let out_b = decode_attention(
                &mut b,
                "attention",
                QkvRows::Fused(qkv),
                ops_b[3],
                eps.map(|e| (e, [ops_b[4], ops_b[5]])),
                [ops_b[6], ops_b[7]],
                ParamExpr::of(pos),
                scale,
                chunks * kvh,
            )
            .expect("fused rows");
            assert_eq!(b.tensor(out_b).desc.shape, vec![1, qw]);
            let (mut ha, mut hb) = (crate::mpk::exec::HostTensors::zeros(&a), crate::mpk::exec::HostTensors::zeros(&b));
            let mut rng = crate::mpk::exec::SplitMix((heads * 10 + dim) as u64);
            let inv_v: Vec<f32> = (0..dim / 2).map(|i| 10000f32.powf(-2.0 * i as f32 / dim as f32)).collect();
            ha.set(inv, &inv_v).expect("inv");
            hb.set(ops_b[3], &inv_v).expect("inv");
            for (ia, ib) in [(qn, ops_b[4]), (kn, ops_b[5])] {
                let gain: Vec<f32> = (0..dim).map(|_| rng.uniform(0.5, 1.5)).collect();
                ha.set(ia, &gain).expect("gain");
                hb.set(ib, &gain).expect("gain");
            }
            for pos in [0, 1, 5, 64, cap - 1] {
                let mut row = Vec::new();
                for (i, len) in [qw, kvw, kvw].into_iter().enumerate() {
                    let x: Vec<f32> = (0..len).map(|_| dtype.round(rng.uniform(-2.0, 2.0))).collect();
                    ha.set(ops_a[i], &x).expect("x");
                    row.extend(x);
                }
                hb.set(qkv, &row).expect("qkv");
                crate::mpk::exec::reference_step(&a, &mut ha, &[pos as i32]).expect("in range");
                crate::mpk::exec::reference_step(&b, &mut hb, &[pos as i32]).expect("in range");
                let what = format!("heads {heads}/{kvh}, d {dim}, {dtype}, at {pos}");
                assert_eq!(hb.get(out_b), ha.get(out_a), "out: {what}");
                assert_eq!(hb.get(ops_b[6]), ha.get(kc), "k_cache: {what}");
                assert_eq!(hb.get(ops_b[7]), ha.get(vc), "v_cache: {what}");
            }
            // A tile of KV head h reads its group's query heads, k's and v's head h: three
            // boxes of the one input.
            let op = b.ops().iter().find(|o| o.name == "attention").expect("the operator");
            let crate::mpk::graph::OpKind::Builtin(builtin) = &op.kind else { unreachable!("a built-in") };
            let io = |ts: &[TensorId]| ts.iter().map(|&t| (t, &b.tensor(t).desc)).collect::<Vec<_>>();
            let (ins, outs) = (io(&op.inputs), io(&op.outputs));
            let (reads, _) = builtin.regions([1, kvh - 1, 0], &ins, &outs);
            let h = kvh - 1;
            let boxes: Vec<_> = reads.iter().take(3).map(|(r, _)| (r.tensor, r.lo[1], r.hi[1])).collect();
            let gd = heads / kvh * dim;
            let want = [
                (qkv, h * gd, (h + 1) * gd),
                (qkv, qw + h * dim, qw + (h + 1) * dim),
                (qkv, qw + kvw + h * dim, qw + kvw + (h + 1) * dim),
            ];
            assert_eq!(boxes, want, "heads {heads}/{kvh}");
        }
    }

    #[test]
    fn argmax_tiles_skip_the_columns_past_the_vocabulary() {
        // logits [1, 8] of which 6 count: the padding's 9s must not win.
        let ld = d(&[1, 8], DType::F32);
        let logits = [-5.0, -4.0, -3.0, -2.0, -1.0, -0.5, 9.0, 9.0];
        let a = Builtin::ArgmaxPartial { chunk: 4, columns: 6 };
        let pd = a.output_descs(&[&ld]).expect("well formed").remove(0);
        assert_eq!(pd.shape, vec![1, 2, 2]);
        assert_eq!(a.check(&[&ld], &[&pd], 0), Ok([2, 1, 1]));
        let mut out = [0.0f32; 4];
        let names = |_| String::from("-");
        for x in 0..2 {
            a.run_tile([x, 0, 0], &[(&logits, &ld)], &mut [(&mut out[..], &pd)], &[], &names).expect("a tile");
        }
        assert_eq!(out, [-2.0, 3.0, -0.5, 5.0]);
        // a tile of padding only: (−∞, its first column)
        let a = Builtin::ArgmaxPartial { chunk: 4, columns: 3 };
        a.run_tile([1, 0, 0], &[(&logits, &ld)], &mut [(&mut out[..], &pd)], &[], &names).expect("a tile");
        assert_eq!(out[2..], [f32::NEG_INFINITY, 4.0]);
        for bad in [0, 9] {
            let e = Builtin::ArgmaxPartial { chunk: 4, columns: bad }.output_descs(&[&ld]).expect_err("bad columns");
            assert!(e.contains(&format!("columns {bad}: at least 1 and at most the logits' width 8")), "{e}");
        }
    }

    #[test]
    fn argmax_prefers_the_smallest_index_and_ignores_nan() {
        assert_eq!(argmax(&[1.0, 3.0, f32::NAN, 3.0], 10), (3.0, 11));
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY], 4), (f32::NEG_INFINITY, 4));
    }

    #[test]
    fn rope_rotates_pairs_by_position() {
        let r = Builtin::Rope { pos: ParamExpr::of(ParamId(0)).plus(1), norm: None };
        let xd = d(&[1, 4], DType::F32);
        let inv_d = d(&[2], DType::F32);
        let x = [1.0, 0.0, 0.0, 1.0];
        let inv = [1.0, 0.5];
        let mut out = [0.0f32; 4];
        let names = |_| String::from("pos");
        r.run_tile([0, 0, 0], &[(&x, &xd), (&inv, &inv_d)], &mut [(&mut out[..], &xd)], &[1], &names)
            .expect("in range");
        // position 2: angles 2 and 1.
        let (s2, c2) = 2.0f64.sin_cos();
        let (s1, c1) = 1.0f64.sin_cos();
        let want = [c2 as f32, -(s1 as f32), s2 as f32, c1 as f32];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?} vs {want:?}");
        }
        let e = r
            .run_tile([0, 0, 0], &[(&x, &xd), (&inv, &inv_d)], &mut [(&mut out[..], &xd)], &[-5], &names)
            .expect_err("a negative position");
        assert_eq!((e.value, e.source_name.as_str()), (-4, "pos"));
    }
}
