//! Built-in decode tasks: the few operators a decode step needs that µGraphs cannot express yet
//! (a gather by token id, rotary embeddings at a runtime position, a KV-cache append, attention
//! over a runtime key length, argmax), and an empty task for measuring the megakernel's own
//! overheads. Each kind has its operand rules, its tile grid, the regions a tile reads and
//! writes, a CPU reference of one tile (the ground truth of the tests) and a CUDA template in
//! the megakernel's device header (`device.cuh`) that the resident kernel calls.
//!
//! Token ids live in `f32` tensors holding exact integers (every id below 2^24 is exact); a
//! task that reads an id or a runtime position out of range writes zeros and reports
//! `ERR_INDEX` (the CPU reference returns the same error).

use crate::ir::{DType, Scalar, TensorDesc};

use super::graph::{ParamExpr, TensorId};
use super::region::Region;

/// Largest vocabulary (exact integer ids in `f32`).
pub const MAX_VOCAB: usize = 1 << 24;
/// Largest head dimension of [`Builtin::Attention`] (held in registers, 32 lanes × 16).
pub const MAX_HEAD_DIM: usize = 512;

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
    /// Attention of one query row over the first `keylen` cached keys, grouped-query:
    /// head `h` reads KV head `h / (heads / kv_heads)`;
    /// `out[h] = softmax(scale · q[h] · K[0..keylen]ᵀ) · V[0..keylen]` with head `h` at
    /// `[h·d, (h+1)·d)`. Inputs: `q [1, heads·d]`, `k_cache`, `v_cache [kv_heads, capacity, d]`.
    /// Output: like `q`. Tiles: `heads`.
    Attention {
        /// Number of keys (1..=capacity).
        keylen: ParamExpr,
        /// Multiplies the scores (usually `1/√d`).
        scale: Scalar,
    },
    /// First half of argmax over the last dim: each tile finds the largest value (smallest
    /// index among equals) of `chunk` columns. Input: `logits [rows, vocab]`. Output:
    /// `[rows, vocab / chunk, 2]` f32 (value, index). Tiles: `vocab / chunk` × `rows`.
    ArgmaxPartial {
        /// Columns per tile (must divide `vocab`).
        chunk: usize,
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

impl Builtin {
    /// The kind's name.
    pub fn name(&self) -> &'static str {
        match self {
            Builtin::Embedding { .. } => "embedding",
            Builtin::Rope { .. } => "rope",
            Builtin::KvAppend { .. } => "kv_append",
            Builtin::Attention { .. } => "attention",
            Builtin::ArgmaxPartial { .. } => "argmax_partial",
            Builtin::ArgmaxReduce => "argmax_reduce",
            Builtin::Nop { .. } => "nop",
        }
    }

    /// Number of input operands.
    pub fn num_inputs(&self) -> usize {
        match self {
            Builtin::Embedding { .. } | Builtin::Rope { norm: None, .. } => 2,
            Builtin::Attention { .. } | Builtin::Rope { norm: Some(_), .. } => 3,
            _ => 1,
        }
    }

    /// The runtime parameters it reads.
    pub fn params(&self) -> Vec<ParamExpr> {
        match self {
            Builtin::Rope { pos, .. } | Builtin::KvAppend { pos } => vec![*pos],
            Builtin::Attention { keylen, .. } => vec![*keylen],
            _ => vec![],
        }
    }

    /// Whether its output must be a state tensor (it writes only part of it each step).
    pub fn writes_state(&self) -> bool {
        matches!(self, Builtin::KvAppend { .. })
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
            Builtin::Attention { .. } => vec![d(&inputs[0].shape, inputs[0].dtype)],
            Builtin::ArgmaxPartial { chunk } => {
                rank(inputs[0], 2, "logits")?;
                expect(*chunk > 0 && inputs[0].shape[1].is_multiple_of(*chunk), || {
                    format!("chunk {chunk} must divide the vocabulary {}", inputs[0].shape[1])
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
        expect(inputs.len() == self.num_inputs() && outputs.len() == 1, || {
            format!(
                "{}: expected {} inputs and 1 output, found {} and {}",
                self.name(),
                self.num_inputs(),
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
        row_major(outputs[0], "output")?;
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
                    let want = TensorDesc::new(&[1, d], x.dtype);
                    expect(inputs[2].shape == want.shape && inputs[2].dtype == want.dtype, || {
                        format!("gain: expected {} (one head), found {}", fmt(&want), fmt(inputs[2]))
                    })?;
                    expect(eps.0.is_finite() && eps.0 >= 0.0, || {
                        format!("eps: expected a finite number >= 0, found {}", eps.0)
                    })?;
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
            Builtin::Attention { scale, .. } => {
                let (q, kc, vc) = (inputs[0], inputs[1], inputs[2]);
                rank(q, 2, "q")?;
                rank(kc, 3, "k_cache")?;
                expect(q.shape[0] == 1, || format!("q: expected one query row [1, heads·d], found {}", fmt(q)))?;
                expect(kc == vc, || format!("v_cache: expected the k_cache's {}, found {}", fmt(kc), fmt(vc)))?;
                let (kvh, d) = (kc.shape[0], kc.shape[2]);
                expect(kc.dtype == q.dtype && q.shape[1].is_multiple_of(d), || {
                    format!(
                        "k_cache: expected {} [kv_heads, capacity, d] with d dividing {}, found {}",
                        q.dtype,
                        q.shape[1],
                        fmt(kc)
                    )
                })?;
                let heads = q.shape[1] / d;
                expect(heads.is_multiple_of(kvh), || format!("kv_heads {kvh} must divide heads {heads}"))?;
                expect(d <= MAX_HEAD_DIM, || format!("head dim at most {MAX_HEAD_DIM}, found {d}"))?;
                expect(scale.0.is_finite(), || format!("scale: expected a finite number, found {}", scale.0))?;
                same(q)?;
                Ok([heads, 1, 1])
            }
            Builtin::ArgmaxPartial { chunk } => {
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
        output: (TensorId, &TensorDesc),
    ) -> (Vec<(Region, bool)>, Vec<Region>) {
        let (out, od) = output;
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
            Builtin::Attention { .. } => {
                let (q, qd) = inputs[0];
                let (kc, kd) = inputs[1];
                let d = kd.shape[2];
                let heads = qd.shape[1] / d;
                let kvh = x / (heads / kd.shape[0]);
                let cache = |t| Region::at(t, vec![kvh, 0, 0], &[1, kd.shape[1], d]);
                let reads = vec![
                    (Region::at(q, vec![0, x * d], &[1, d]), false),
                    (cache(kc), false),
                    (cache(inputs[2].0), false),
                ];
                (reads, vec![Region::at(out, vec![0, x * d], &[1, d])])
            }
            Builtin::ArgmaxPartial { chunk } => {
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

    /// Dynamic shared memory one task needs with `threads` threads.
    pub fn smem_bytes(&self, threads: usize, inputs: &[&TensorDesc]) -> usize {
        let warps = threads / 32;
        match self {
            Builtin::Attention { .. } => warps * (inputs[1].shape[2] + 2) * 4,
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
        output: (&mut [f32], &TensorDesc),
        params: &[i32],
        names: &dyn Fn(IndexSource) -> String,
    ) -> Result<(), IndexError> {
        let (out, od) = output;
        let [x, y, _] = tile;
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
                let h = d / 2;
                for i in 0..h {
                    let (s, c) = (p as f64 * f64::from(inv[i])).sin_cos();
                    let (s, c) = (s as f32, c as f32);
                    let (a, b) = (head[i], head[i + h]);
                    out[at + i] = a * c - b * s;
                    out[at + i + h] = b * c + a * s;
                }
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
            Builtin::Attention { keylen, scale } => {
                let (q, qd) = inputs[0];
                let (kc, kd) = inputs[1];
                let vc = inputs[2].0;
                let (kvh, cap, d) = (kd.shape[0], kd.shape[1], kd.shape[2]);
                let heads = qd.shape[1] / d;
                let l = keylen.eval(params);
                let dst = x * d;
                if l < 1 || l > cap as i64 {
                    out[dst..dst + d].fill(0.0);
                    return Err(IndexError {
                        value: l,
                        bound: cap as i64 + 1,
                        source_name: names(IndexSource::Param(keylen.param.0)),
                    });
                }
                let g = x / (heads / kvh);
                let qh = &q[x * d..(x + 1) * d];
                let scores: Vec<f64> = (0..l as usize)
                    .map(|j| {
                        let kr = &kc[(g * cap + j) * d..(g * cap + j + 1) * d];
                        f64::from(scale.0) * qh.iter().zip(kr).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let total: f64 = w.iter().sum();
                for i in 0..d {
                    let v: f64 = w.iter().enumerate().map(|(j, wj)| wj * f64::from(vc[(g * cap + j) * d + i])).sum();
                    out[dst + i] = (v / total) as f32;
                }
                Ok(())
            }
            Builtin::ArgmaxPartial { chunk } => {
                let (logits, ld) = inputs[0];
                let vocab = ld.shape[1];
                let n = vocab / chunk;
                let start = x * chunk;
                let (best, idx) = argmax(&logits[y * vocab + start..y * vocab + start + chunk], start);
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
            Builtin::Nop { all } => {
                let xs = inputs[0].0;
                let v = if *all { xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) } else { xs[x] };
                out[x] = v + 1.0;
                Ok(())
            }
        }
    }
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
        let a = Builtin::Attention { keylen: ParamExpr::of(ParamId(0)), scale: Scalar(0.125) };
        let q = d(&[1, 8 * 64], DType::F16);
        let kc = d(&[3, 32, 64], DType::F16);
        assert!(
            a.check(&[&q, &kc, &kc], &[&q], 1)
                .expect_err("an operand error")
                .contains("kv_heads 3 must divide heads 8")
        );
        assert!(
            a.check(&[&q, &d(&[2, 32, 64], DType::F16), &d(&[2, 32, 64], DType::F16)], &[&q], 0)
                .expect_err("an operand error")
                .contains("parameter #0")
        );
        assert_eq!(a.check(&[&q, &d(&[2, 32, 64], DType::F16), &d(&[2, 32, 64], DType::F16)], &[&q], 1), Ok([8, 1, 1]));
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
        r.run_tile([0, 0, 0], &[(&x, &xd), (&inv, &inv_d)], (&mut out, &xd), &[1], &names).expect("in range");
        // position 2: angles 2 and 1.
        let (s2, c2) = 2.0f64.sin_cos();
        let (s1, c1) = 1.0f64.sin_cos();
        let want = [c2 as f32, -(s1 as f32), s2 as f32, c1 as f32];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?} vs {want:?}");
        }
        let e = r
            .run_tile([0, 0, 0], &[(&x, &xd), (&inv, &inv_d)], (&mut out, &xd), &[-5], &names)
            .expect_err("a negative position");
        assert_eq!((e.value, e.source_name.as_str()), (-4, "pos"));
    }
}
