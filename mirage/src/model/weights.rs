//! The tensors of a model as the megakernel decoder takes them: their names and shapes under the
//! decoder's names (see [`crate::mpk::decoder`]), the Hugging Face tensor each comes from, and
//! the conversion of a Hugging Face tensor (`[out, in]`, any float type) into the decoder's
//! (`[in, out]`, the decoder's element type).

use half::{bf16, f16};
use rayon::prelude::*;

use super::{ModelConfig, ModelError};
use crate::ir::DType;
use crate::mpk::decoder::{WeightStorage, lm_head_width};

/// How a tensor is initialised with random values (as `benches/py/decode_baseline.py` does).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal values scaled by `1 / sqrt(fan_in)`.
    Normal {
        /// The scale's fan-in (1 for the embedding, whose values are unit normal).
        fan_in: usize,
    },
    /// All ones (norm weights).
    Ones,
}

/// One tensor of the decoder and where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightSpec {
    /// The decoder's name (`l0.wq`).
    pub name: String,
    /// The decoder's shape (`[in, out]` for projections, `[1, n]` for norms).
    pub shape: Vec<usize>,
    /// The Hugging Face tensor (`model.layers.0.self_attn.q_proj.weight`).
    pub hf_name: String,
    /// Its shape in a checkpoint (`[out, in]`, `[n]`).
    pub hf_shape: Vec<usize>,
    /// Whether the decoder's tensor is the checkpoint's transposed.
    pub transposed: bool,
    /// Random initialisation of the checkpoint's tensor (the embedding's for a tied head).
    pub init: Init,
}

/// The model's tensors of `cfg` in the decoder graph's order: `embed`, per layer `attn_norm`,
/// `wq`, `wk`, `wv`, `wo`, `mlp_norm`, `wg`, `wu`, `wd` (then `q_norm`, `k_norm` with q/k
/// norm), `final_norm`, `lm_head` (the embedding, transposed, when tied). The megakernel
/// decoder takes a layer's `wq`, `wk`, `wv` as one input: [`fuse_qkv`] joins them.
pub fn weight_layout(cfg: &ModelConfig) -> Vec<WeightSpec> {
    let (h, qw, kvw, i) = (cfg.hidden, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.intermediate);
    let linear = |name: String, hf: String, fan_in: usize, out: usize| WeightSpec {
        name,
        shape: vec![fan_in, out],
        hf_name: hf,
        hf_shape: vec![out, fan_in],
        transposed: true,
        init: Init::Normal { fan_in },
    };
    let norm = |name: String, hf: String, n: usize| WeightSpec {
        name,
        shape: vec![1, n],
        hf_name: hf,
        hf_shape: vec![n],
        transposed: false,
        init: Init::Ones,
    };
    let embed_hf = "model.embed_tokens.weight".to_owned();
    let mut v = vec![WeightSpec {
        name: "embed".into(),
        shape: vec![cfg.vocab, h],
        hf_name: embed_hf.clone(),
        hf_shape: vec![cfg.vocab, h],
        transposed: false,
        init: Init::Normal { fan_in: 1 },
    }];
    for l in 0..cfg.layers {
        let d = |s: &str| format!("l{l}.{s}");
        let hf = |s: &str| format!("model.layers.{l}.{s}.weight");
        v.push(norm(d("attn_norm"), hf("input_layernorm"), h));
        v.push(linear(d("wq"), hf("self_attn.q_proj"), h, qw));
        v.push(linear(d("wk"), hf("self_attn.k_proj"), h, kvw));
        v.push(linear(d("wv"), hf("self_attn.v_proj"), h, kvw));
        v.push(linear(d("wo"), hf("self_attn.o_proj"), qw, h));
        v.push(norm(d("mlp_norm"), hf("post_attention_layernorm"), h));
        v.push(linear(d("wg"), hf("mlp.gate_proj"), h, i));
        v.push(linear(d("wu"), hf("mlp.up_proj"), h, i));
        v.push(linear(d("wd"), hf("mlp.down_proj"), i, h));
        if cfg.qk_norm {
            v.push(norm(d("q_norm"), hf("self_attn.q_norm"), cfg.head_dim));
            v.push(norm(d("k_norm"), hf("self_attn.k_norm"), cfg.head_dim));
        }
    }
    v.push(norm("final_norm".into(), "model.norm.weight".into(), h));
    if cfg.tie_embeddings {
        v.push(WeightSpec { init: Init::Normal { fan_in: 1 }, ..linear("lm_head".into(), embed_hf, h, cfg.vocab) });
    } else {
        v.push(linear("lm_head".into(), "lm_head.weight".into(), h, cfg.vocab));
    }
    v
}

/// A tensor's values in one of the decoder's element types.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightData {
    /// bfloat16 values.
    Bf16(Vec<bf16>),
    /// IEEE half values.
    F16(Vec<f16>),
    /// f32 values.
    F32(Vec<f32>),
}

impl WeightData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            WeightData::Bf16(_) => DType::Bf16,
            WeightData::F16(_) => DType::F16,
            WeightData::F32(_) => DType::F32,
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            WeightData::Bf16(v) => v.len(),
            WeightData::F16(v) => v.len(),
            WeightData::F32(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as f32 (exact).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            WeightData::Bf16(v) => v.par_iter().map(|x| x.to_f32()).collect(),
            WeightData::F16(v) => v.par_iter().map(|x| x.to_f32()).collect(),
            WeightData::F32(v) => v.clone(),
        }
    }
}

/// One tensor of the decoder: its name, shape and values.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    /// The decoder's name (`l0.wq`).
    pub name: String,
    /// The decoder's shape.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: WeightData,
}

impl Weight {
    /// This tensor (the decoder's `[k, n]` or any other) as a megakernel input of shape `shape`:
    /// unchanged where the shapes are equal, cut into contiguous column tiles where `shape` is
    /// such a storage of it ([`WeightStorage::of_shape`]: a decoder built with
    /// [`DecoderConfig::contiguous_below`](crate::mpk::decoder::DecoderConfig::contiguous_below)).
    /// An LM head `[k, vocab]` whose vocabulary is not a whole round of the head's tasks is
    /// first padded with zero columns to [`lm_head_width`]`(vocab)`, as the decoder built it.
    /// Any other shape is an error naming both.
    pub fn stored_as(self, shape: &[usize]) -> Result<Weight, ModelError> {
        if self.shape == shape {
            return Ok(self);
        }
        if let [k, n] = *self.shape {
            let wide = lm_head_width(n);
            if wide != n && shape.iter().product::<usize>() == k * wide && self.data.len() == k * n {
                // `lm_head_width(wide) == wide`: padded, the weight is not padded again
                return self.padded_columns(wide).stored_as(shape);
            }
        }
        let storage = match *self.shape {
            [k, n] => WeightStorage::of_shape(k, n, shape),
            _ => None,
        };
        let refuse = |w: Weight| ModelError::Storage { name: w.name, shape: w.shape, stored: shape.to_vec() };
        let Some(storage) = storage else { return Err(refuse(self)) };
        let (k, n) = (self.shape[0], self.shape[1]);
        let data = match &self.data {
            WeightData::Bf16(v) => storage.store(k, n, v).map(WeightData::Bf16),
            WeightData::F16(v) => storage.store(k, n, v).map(WeightData::F16),
            WeightData::F32(v) => storage.store(k, n, v).map(WeightData::F32),
        };
        // None: the values are not `k · n` (a hand-made `Weight`).
        let Some(data) = data else { return Err(refuse(self)) };
        Ok(Weight { name: self.name, shape: shape.to_vec(), data })
    }

    /// This `[k, n]` weight with zero columns appended up to `wide` (`data` holds `k · n` values).
    fn padded_columns(self, wide: usize) -> Weight {
        fn pad<T: Copy + Default>(v: &[T], n: usize, wide: usize) -> Vec<T> {
            let mut out = Vec::with_capacity(v.len() / n.max(1) * wide);
            for row in v.chunks(n.max(1)) {
                out.extend_from_slice(row);
                out.resize(out.len() + wide - n, T::default());
            }
            out
        }
        let (k, n) = (self.shape[0], self.shape[1]);
        let data = match &self.data {
            WeightData::Bf16(v) => WeightData::Bf16(pad(v, n, wide)),
            WeightData::F16(v) => WeightData::F16(pad(v, n, wide)),
            WeightData::F32(v) => WeightData::F32(pad(v, n, wide)),
        };
        Weight { name: self.name, shape: vec![k, wide], data }
    }
}

/// Where tensor `name` goes in a layer's joined q/k/v projection ([`fuse_qkv`]): its layer
/// prefix and slot (0 for `l{i}.wq`, 1 for `.wk`, 2 for `.wv`), or `None` for any other tensor.
pub fn qkv_slot(name: &str) -> Option<(&str, usize)> {
    let (layer, part) = name.rsplit_once('.')?;
    Some((layer, ["wq", "wk", "wv"].iter().position(|p| *p == part)?))
}

/// The megakernel decoder's inputs from a model's tensors ([`weight_layout`]'s order): each
/// layer's `l{i}.wq [k, qw]`, `l{i}.wk` and `l{i}.wv [k, kvw]` become one `l{i}.wqkv [k, qw +
/// 2·kvw]`, each row the three rows side by side (the decoder's one q/k/v projection,
/// [`crate::mpk::decoder`]); every other tensor passes through unchanged. A layer's three
/// projections are held until the last of them arrives; one missing, of another row count or
/// element type is an error naming it.
pub fn fuse_qkv(
    weights: impl Iterator<Item = Result<Weight, ModelError>>,
) -> impl Iterator<Item = Result<Weight, ModelError>> {
    let mut held: Vec<Weight> = Vec::new();
    let mut weights = weights.fuse();
    std::iter::from_fn(move || {
        loop {
            let Some(next) = weights.next() else {
                // A layer's projections that never got their third.
                return held.pop().map(|w| {
                    Err(ModelError::Qkv(format!("`{}` without the layer's other q/k/v projections", w.name)))
                });
            };
            let w = match next {
                Ok(w) => w,
                Err(e) => return Some(Err(e)),
            };
            let Some((layer, slot)) = qkv_slot(&w.name).map(|(l, s)| (l.to_owned(), s)) else { return Some(Ok(w)) };
            if held.len() != slot || held.iter().any(|h| !h.name.starts_with(&format!("{layer}."))) {
                return Some(Err(ModelError::Qkv(format!(
                    "`{}`: expected the layer's q, k and v projections in that order (held: {:?})",
                    w.name,
                    held.iter().map(|h| h.name.as_str()).collect::<Vec<_>>()
                ))));
            }
            held.push(w);
            if held.len() == 3 {
                let parts = std::mem::take(&mut held);
                return Some(join_columns(&format!("{layer}.wqkv"), parts));
            }
        }
    })
}

/// `[k, n_j]` weights of one element type side by side as `name [k, Σ n_j]`.
fn join_columns(name: &str, parts: Vec<Weight>) -> Result<Weight, ModelError> {
    fn join<T: Copy>(parts: &[(&[T], usize)], k: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.0.len()).sum());
        for r in 0..k {
            for &(v, n) in parts {
                out.extend_from_slice(&v[r * n..(r + 1) * n]);
            }
        }
        out
    }
    let k = parts[0].shape.first().copied().unwrap_or(0);
    for w in &parts {
        let ok = w.shape.len() == 2 && w.shape[0] == k && w.data.len() == k * w.shape[1];
        if !ok || w.data.dtype() != parts[0].data.dtype() {
            return Err(ModelError::Qkv(format!(
                "`{}` of shape {:?} ({}) cannot join `{}` of shape {:?} ({}) as `{name}`",
                w.name,
                w.shape,
                w.data.dtype(),
                parts[0].name,
                parts[0].shape,
                parts[0].data.dtype()
            )));
        }
    }
    let n: usize = parts.iter().map(|w| w.shape[1]).sum();
    macro_rules! joined {
        ($variant:ident) => {{
            let v: Vec<_> = parts
                .iter()
                .map(|w| match &w.data {
                    WeightData::$variant(v) => (v.as_slice(), w.shape[1]),
                    _ => unreachable!("one element type, checked"),
                })
                .collect();
            WeightData::$variant(join(&v, k))
        }};
    }
    let data = match parts[0].data {
        WeightData::Bf16(_) => joined!(Bf16),
        WeightData::F16(_) => joined!(F16),
        WeightData::F32(_) => joined!(F32),
    };
    Ok(Weight { name: name.to_owned(), shape: vec![k, n], data })
}

/// Elements per parallel piece of work.
const PIECE: usize = 1 << 16;

/// The decoder's tensor of `spec` in `dtype`, from the checkpoint's element `k` (row-major in
/// `spec.hf_shape`) given by `src(k)`: transposed where the spec says, each value rounded to
/// nearest even where `dtype` is narrower than the source.
pub fn convert(spec: &WeightSpec, dtype: DType, src: impl Fn(usize) -> f32 + Sync) -> Result<Weight, ModelError> {
    let data = match dtype {
        DType::Bf16 => WeightData::Bf16(gather(spec, &src, bf16::from_f32)),
        DType::F16 => WeightData::F16(gather(spec, &src, f16::from_f32)),
        DType::F32 => WeightData::F32(gather(spec, &src, |x| x)),
        other => return Err(ModelError::TargetDtype(other)),
    };
    Ok(Weight { name: spec.name.clone(), shape: spec.shape.clone(), data })
}

/// The destination's values in parallel: copied in order, or transposed from `[rows, cols]` to
/// `[cols, rows]` a band of destination rows at a time (each band reads the source's rows in
/// short contiguous runs).
fn gather<T: Send + Copy + Default>(
    spec: &WeightSpec,
    src: &(impl Fn(usize) -> f32 + Sync),
    to: impl Fn(f32) -> T + Sync,
) -> Vec<T> {
    let n: usize = spec.hf_shape.iter().product();
    let mut out = vec![T::default(); n];
    if !spec.transposed || n == 0 {
        out.par_chunks_mut(PIECE).enumerate().for_each(|(c, chunk)| {
            let base = c * PIECE;
            chunk.iter_mut().enumerate().for_each(|(k, o)| *o = to(src(base + k)));
        });
        return out;
    }
    let (rows, cols) = (spec.hf_shape[0], spec.hf_shape[1]);
    const BAND: usize = 16;
    out.par_chunks_mut(BAND * rows).enumerate().for_each(|(b, band)| {
        let c0 = b * BAND;
        let width = band.len() / rows;
        for r in 0..rows {
            for dc in 0..width {
                band[dc * rows + r] = to(src(r * cols + c0 + dc));
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(name: &str, shape: [usize; 2], base: f32) -> Weight {
        let data = (0..shape[0] * shape[1]).map(|i| base + i as f32).collect();
        Weight { name: name.into(), shape: shape.to_vec(), data: WeightData::F32(data) }
    }

    #[test]
    fn a_layers_q_k_v_projections_join_column_by_column() {
        let ws = vec![
            f32s("embed", [3, 2], 0.0),
            f32s("l0.wq", [2, 3], 100.0),
            f32s("l0.wk", [2, 1], 200.0),
            f32s("l0.wv", [2, 2], 300.0),
            f32s("l0.wo", [3, 2], 400.0),
        ];
        let out: Vec<Weight> = fuse_qkv(ws.into_iter().map(Ok)).collect::<Result<_, _>>().expect("joined");
        let names: Vec<&str> = out.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["embed", "l0.wqkv", "l0.wo"]);
        assert_eq!(out[1].shape, vec![2, 6]);
        // each row: q's row | k's row | v's row
        let want = [100.0, 101.0, 102.0, 200.0, 300.0, 301.0, 103.0, 104.0, 105.0, 201.0, 302.0, 303.0];
        assert_eq!(out[1].data, WeightData::F32(want.to_vec()));
        assert_eq!(out[0], f32s("embed", [3, 2], 0.0));
    }

    #[test]
    fn q_k_v_projections_that_cannot_join_are_errors_naming_them() {
        let err = |ws: Vec<Weight>| -> String {
            fuse_qkv(ws.into_iter().map(Ok)).find_map(Result::err).expect("an error").to_string()
        };
        // k before q
        let e = err(vec![f32s("l0.wk", [2, 1], 0.0), f32s("l0.wq", [2, 1], 0.0)]);
        assert!(e.contains("`l0.wk`: expected the layer's q, k and v projections in that order"), "{e}");
        // another layer's v
        let e = err(vec![f32s("l0.wq", [2, 1], 0.0), f32s("l0.wk", [2, 1], 0.0), f32s("l1.wv", [2, 1], 0.0)]);
        assert!(e.contains("`l1.wv`") && e.contains("l0.wq"), "{e}");
        // rows differ
        let e = err(vec![f32s("l0.wq", [2, 1], 0.0), f32s("l0.wk", [3, 1], 0.0), f32s("l0.wv", [2, 1], 0.0)]);
        assert!(e.contains("`l0.wk` of shape [3, 1]") && e.contains("as `l0.wqkv`"), "{e}");
        // the last layer's v never comes
        let e = err(vec![f32s("l0.wq", [2, 1], 0.0), f32s("l0.wk", [2, 1], 0.0)]);
        assert!(e.contains("without the layer's other q/k/v projections"), "{e}");
        // an error of the source passes through
        let e = fuse_qkv([Err(ModelError::TargetDtype(DType::I32))].into_iter()).find_map(Result::err);
        assert!(matches!(e, Some(ModelError::TargetDtype(_))));
    }

    #[test]
    fn an_lm_head_no_width_divides_is_padded_with_zero_columns() {
        // [2, 1001]: 1001 = 7 · 11 · 13, no task width of 16 columns divides it: padded to 1008
        // (63 tasks of 16, `lm_head_width`).
        let (k, n, wide) = (2, 1001, 1008);
        assert_eq!(lm_head_width(n), wide);
        let w = Weight {
            name: "lm_head".into(),
            shape: vec![k, n],
            data: WeightData::F32((0..k * n).map(|i| i as f32 + 1.0).collect()),
        };
        let p = w.clone().stored_as(&[k, wide]).expect("padded");
        assert_eq!(p.shape, vec![k, wide]);
        let v = p.data.to_f32();
        for r in 0..k {
            for c in 0..wide {
                let want = if c < n { (r * n + c) as f32 + 1.0 } else { 0.0 };
                assert_eq!(v[r * wide + c], want, "row {r} column {c}");
            }
        }
        // padded, then tile by tile (16 columns)
        let t = w.clone().stored_as(&[63 * k, 16]).expect("padded tiles");
        assert_eq!(t.data.to_f32()[..16], v[..16]);
        // a width that is already a whole round of tasks is never padded: [2, 1008] does not
        // become [2, 1024]
        let even = Weight { name: "w".into(), shape: vec![k, wide], data: WeightData::F32(vec![0.0; k * wide]) };
        assert!(even.stored_as(&[k, 1024]).is_err());
        // any other shape is still an error
        assert!(w.stored_as(&[k, 1025]).is_err());
    }

    #[test]
    fn projections_are_transposed_and_rounded_to_nearest_even() {
        let spec = WeightSpec {
            name: "w".into(),
            shape: vec![3, 2],
            hf_name: "w".into(),
            hf_shape: vec![2, 3],
            transposed: true,
            init: Init::Ones,
        };
        // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1),
        // 1 + 3·2^-8 a tie between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6).
        let src = [1.0 + 2f32.powi(-8), 2.0, 3.0, 4.0, 1.0 + 3.0 * 2f32.powi(-8), 6.0];
        let w = convert(&spec, DType::Bf16, |k| src[k]).expect("converted");
        assert_eq!(w.shape, vec![3, 2]);
        assert_eq!(w.data.to_f32(), vec![1.0, 4.0, 2.0, 1.0 + 2f32.powi(-6), 3.0, 6.0]);
        let w = convert(&spec, DType::F32, |k| src[k]).expect("converted");
        assert_eq!(w.data.to_f32(), vec![src[0], src[3], src[1], src[4], src[2], src[5]]);
        assert!(matches!(convert(&spec, DType::I32, |k| src[k]), Err(ModelError::TargetDtype(DType::I32))));
    }

    #[test]
    fn a_large_transpose_matches_the_definition() {
        let (rows, cols) = (37, 1000);
        let spec = WeightSpec {
            name: "w".into(),
            shape: vec![cols, rows],
            hf_name: "w".into(),
            hf_shape: vec![rows, cols],
            transposed: true,
            init: Init::Ones,
        };
        let w = convert(&spec, DType::F32, |k| k as f32).expect("converted").data.to_f32();
        for c in 0..cols {
            for r in 0..rows {
                assert_eq!(w[c * rows + r], (r * cols + c) as f32);
            }
        }
    }

    #[test]
    fn qkv_slot_names_a_layers_q_k_and_v_only() {
        assert_eq!(qkv_slot("l3.wq"), Some(("l3", 0)));
        assert_eq!(qkv_slot("l3.wk"), Some(("l3", 1)));
        assert_eq!(qkv_slot("l12.wv"), Some(("l12", 2)));
        for other in ["l3.wqkv", "l3.wo", "embed", "l3.wq.bias", "wq"] {
            assert_eq!(qkv_slot(other), None, "{other}");
        }
    }

    #[test]
    fn the_layout_is_the_decoder_graphs_inputs() {
        let cfg = ModelConfig::preset("llama-3.2-1b").expect("a preset");
        let cfg = ModelConfig { layers: 2, vocab: 1024, ..cfg };
        let rows = crate::mpk::decoder::DecoderConfig { contiguous_below: 0, ..cfg.decoder_config(16, DType::Bf16) };
        let g = crate::mpk::decoder::decoder_step("m", &rows).expect("a graph");
        let graph: Vec<(String, Vec<usize>)> = crate::mpk::decoder::weight_names(&g);
        // Stored tile by tile: every weight of the layout, as `fuse_qkv` passes it on (a layer's
        // q, k and v side by side), converts to the graph's input shape.
        let mut dcfg = cfg.decoder_config(16, DType::Bf16);
        dcfg.contiguous_below = 64;
        let g = crate::mpk::decoder::decoder_step("m", &dcfg).expect("a graph");
        let tiles: std::collections::HashMap<String, Vec<usize>> =
            crate::mpk::decoder::weight_names(&g).into_iter().collect();
        let zeros = weight_layout(&cfg).into_iter().map(|s| {
            let n: usize = s.shape.iter().product();
            Ok(Weight { name: s.name, shape: s.shape, data: WeightData::F32(vec![0.0; n]) })
        });
        let (mut ours, mut tiled) = (Vec::new(), 0);
        for w in fuse_qkv(zeros) {
            let w = w.expect("the layout's q, k and v join");
            let (name, shape) = (w.name.clone(), w.shape.clone());
            let stored = &tiles[&name];
            let w = w.stored_as(stored).expect("a storage of the decoder's tensor");
            assert_eq!(&w.shape, stored);
            tiled += usize::from(stored != &shape);
            ours.push((name, shape));
        }
        // Row-major: the layout's shapes are the graph's inputs.
        let (mut a, mut b) = (graph, ours);
        a.sort();
        b.sort();
        assert_eq!(a, b);
        // 1B at 2 layers: q | k | v (24 columns), o_proj and down (16) of each layer are tiles,
        // gate/up (64 columns) rows; the head of this 1024-word vocabulary at 16 columns, tiles.
        assert_eq!(tiled, 2 * 3 + 1);
    }

    #[test]
    fn weights_are_stored_tile_by_tile_and_back() {
        let (k, n) = (3, 8);
        let rows: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
        let w = Weight { name: "l0.wd".into(), shape: vec![k, n], data: WeightData::F32(rows.clone()) };
        let tiles = w.clone().stored_as(&[4 * k, 2]).expect("tiles of 2 columns");
        // tile 0 = columns 0..2 of rows 0..3, then tile 1 = columns 2..4, ...
        let v = tiles.data.to_f32();
        assert_eq!(&v[..8], &[0.0, 1.0, 8.0, 9.0, 16.0, 17.0, 2.0, 3.0]);
        assert_eq!(WeightStorage::Tiles { cols: 2 }.load(k, n, &v), Some(rows.clone()));
        // values that are not [3, 8]: refused, not a panic
        let short = Weight { data: WeightData::F32(rows[1..].to_vec()), ..w.clone() };
        assert!(short.stored_as(&[4 * k, 2]).is_err());
        assert_eq!(WeightStorage::Tiles { cols: 3 }.store(k, n, &rows), None);
        assert_eq!(WeightStorage::Rows.load(k, n, &rows[1..]), None);
        assert_eq!(w.clone().stored_as(&[k, n]).expect("unchanged"), w);
        for bad in [vec![k * n], vec![n, k], vec![3 * k, 3], vec![k, n, 1], vec![0, 0]] {
            let e = w.clone().stored_as(&bad).expect_err("no storage of [3, 8]").to_string();
            assert!(e.contains("l0.wd") && e.contains("[3, 8]") && e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
