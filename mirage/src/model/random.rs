//! Random weights at a model's real shapes, for benchmarks and tests: each checkpoint tensor's
//! values are normal · `1 / sqrt(fan_in)` (the embedding unit normal, norms 1.0), as
//! `benches/py/decode_baseline.py` initialises them, rounded to bf16 as a Hugging Face checkpoint
//! stores them. Element `k` of a tensor comes from a counter-based generator keyed by the seed
//! and the tensor's Hugging Face name, so tensors are generated in parallel and independently of
//! their order; [`write_checkpoint`] writes the same values as a checkpoint directory.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use half::{bf16, f16};
use rayon::prelude::*;
use safetensors::{Dtype, View};

use super::weights::{Init, WeightSpec, convert, weight_layout};
use super::{ModelConfig, ModelError, Weight};
use crate::ir::DType;
use crate::mpk::exec::SplitMix;

/// Values per parallel piece of generation (an even number: values come in pairs).
const PIECE: usize = 1 << 16;

/// 64 bits identifying a tensor: FNV-1a of its name.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The checkpoint values (bf16, row-major in `spec.hf_shape`) of `spec`'s tensor.
fn hf_values(spec: &WeightSpec, seed: u64) -> Vec<bf16> {
    let n: usize = spec.hf_shape.iter().product();
    let fan_in = match spec.init {
        Init::Ones => return vec![bf16::ONE; n],
        Init::Normal { fan_in } => fan_in,
    };
    let scale = 1.0 / (fan_in as f32).sqrt();
    let key = SplitMix(seed ^ name_hash(&spec.hf_name)).next_u64();
    let mut out = vec![bf16::ZERO; n];
    out.par_chunks_mut(PIECE).enumerate().for_each(|(c, chunk)| {
        let first_pair = (c * PIECE / 2) as u64;
        for (p, pair) in chunk.chunks_mut(2).enumerate() {
            // Box-Muller on 24-bit uniforms: u1 in (0, 1], u2 in [0, 1).
            let bits =
                SplitMix(key.wrapping_add((first_pair + p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))).next_u64();
            let u1 = ((bits >> 40) + 1) as f32 / (1u64 << 24) as f32;
            let u2 = (bits & 0xff_ffff) as f32 / (1u64 << 24) as f32;
            let r = (-2.0 * u1.ln()).sqrt() * scale;
            let (s, co) = (std::f32::consts::TAU * u2).sin_cos();
            pair[0] = bf16::from_f32(r * co);
            if let Some(second) = pair.get_mut(1) {
                *second = bf16::from_f32(r * s);
            }
        }
    });
    out
}

/// The decoder's tensors of `cfg` with random values (see the module docs), in the decoder
/// graph's order, in `dtype`: the same stream as [`Checkpoint::weights`](super::Checkpoint::weights)
/// of the checkpoint [`write_checkpoint`] writes with the same seed. Deterministic for a seed (on
/// one platform: the generator uses f32 `ln` and `sin_cos`).
pub fn random_weights(cfg: &ModelConfig, seed: u64, dtype: DType) -> impl Iterator<Item = Result<Weight, ModelError>> {
    weight_layout(cfg).into_iter().map(move |spec| {
        let values = hf_values(&spec, seed);
        convert(&spec, dtype, |k| values[k].to_f32())
    })
}

/// How [`write_checkpoint_with`] writes a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteOptions {
    /// The files' element type (bf16, f16 or f32; the values are bf16's, so f32 holds them
    /// exactly).
    pub dtype: DType,
    /// Split the tensors into shards of at most this many bytes each (one tensor larger than
    /// that gets a shard of its own), listed by `model.safetensors.index.json`; `None`: one
    /// `model.safetensors`.
    pub max_shard_bytes: Option<usize>,
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions { dtype: DType::Bf16, max_shard_bytes: None }
    }
}

/// Writes a Hugging Face checkpoint of `cfg` with [`random_weights`]' values for `seed` into
/// `dir` (created if needed): `config.json` and one bf16 `model.safetensors`.
pub fn write_checkpoint(dir: impl AsRef<Path>, cfg: &ModelConfig, seed: u64) -> Result<(), ModelError> {
    write_checkpoint_with(dir, cfg, seed, &WriteOptions::default())
}

/// A checkpoint tensor whose bytes are generated when written (one tensor in memory at a time).
struct Lazy {
    spec: WeightSpec,
    /// The checkpoint's shape (`spec.hf_shape`).
    shape: Vec<usize>,
    seed: u64,
    dtype: Dtype,
}

impl View for Lazy {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let v = hf_values(&self.spec, self.seed);
        let bytes: Vec<u8> = match self.dtype {
            Dtype::F32 => v.par_iter().flat_map_iter(|x| x.to_f32().to_le_bytes()).collect(),
            Dtype::F16 => v.par_iter().flat_map_iter(|x| f16::from_f32(x.to_f32()).to_le_bytes()).collect(),
            _ => v.par_iter().flat_map_iter(|x| x.to_le_bytes()).collect(),
        };
        Cow::Owned(bytes)
    }

    fn data_len(&self) -> usize {
        self.shape.iter().product::<usize>() * (self.dtype.bitsize() / 8)
    }
}

/// [`write_checkpoint`] with a choice of element type and sharding.
pub fn write_checkpoint_with(
    dir: impl AsRef<Path>,
    cfg: &ModelConfig,
    seed: u64,
    opts: &WriteOptions,
) -> Result<(), ModelError> {
    let dir = dir.as_ref();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io { path, source }
    };
    let dtype = match opts.dtype {
        DType::Bf16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::F32 => Dtype::F32,
        other => return Err(ModelError::TargetDtype(other)),
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let config = dir.join("config.json");
    std::fs::write(&config, config_json(cfg, opts.dtype)).map_err(io(&config))?;

    let mut tensors: Vec<Lazy> = Vec::new();
    for spec in weight_layout(cfg) {
        if !tensors.iter().any(|t| t.spec.hf_name == spec.hf_name) {
            tensors.push(Lazy { shape: spec.hf_shape.clone(), spec, seed, dtype });
        }
    }
    let mut shards: Vec<Vec<Lazy>> = vec![Vec::new()];
    let mut bytes = 0;
    let total: usize = tensors.iter().map(View::data_len).sum();
    for t in tensors {
        let limit = opts.max_shard_bytes.unwrap_or(usize::MAX);
        let last = shards.last_mut().expect("at least one shard");
        if !last.is_empty() && bytes + t.data_len() > limit {
            shards.push(Vec::new());
            bytes = 0;
        }
        bytes += t.data_len();
        shards.last_mut().expect("at least one shard").push(t);
    }
    let write = |file: &Path, shard: Vec<Lazy>| {
        let named = shard.into_iter().map(|t| (t.spec.hf_name.clone(), t));
        safetensors::serialize_to_file(named, None, file).map_err(|e| ModelError::Corrupt {
            file: file.to_path_buf(),
            what: "safetensors file written",
            reason: e.to_string(),
        })
    };
    if opts.max_shard_bytes.is_none() {
        let shard = shards.pop().expect("one shard");
        return write(&dir.join("model.safetensors"), shard);
    }
    let count = shards.len();
    let mut weight_map = HashMap::new();
    for (i, shard) in shards.into_iter().enumerate() {
        let name = format!("model-{:05}-of-{count:05}.safetensors", i + 1);
        for t in &shard {
            weight_map.insert(t.spec.hf_name.clone(), name.clone());
        }
        write(&dir.join(&name), shard)?;
    }
    let index = serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
    let file = dir.join("model.safetensors.index.json");
    std::fs::write(&file, format!("{index:#}")).map_err(io(&file))
}

/// A Hugging Face `config.json` for `cfg` (model type `qwen3` with q/k norm, else `llama`).
fn config_json(cfg: &ModelConfig, dtype: DType) -> String {
    let (model_type, arch) = if cfg.qk_norm { ("qwen3", "Qwen3ForCausalLM") } else { ("llama", "LlamaForCausalLM") };
    let rope_scaling = cfg.rope_scaling.as_ref().map(|s| {
        serde_json::json!({
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_positions,
        })
    });
    let torch_dtype = match dtype {
        DType::F16 => "float16",
        DType::F32 => "float32",
        _ => "bfloat16",
    };
    let json = serde_json::json!({
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": cfg.vocab,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate,
        "hidden_act": "silu",
        // The f32's shortest decimal (1e-5, not 9.999999747378752e-6).
        "rms_norm_eps": cfg.eps.to_string().parse::<f64>().unwrap_or(f64::from(cfg.eps)),
        "rope_theta": cfg.rope_theta,
        "rope_scaling": rope_scaling,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": false,
        "mlp_bias": false,
        "torch_dtype": torch_dtype,
    });
    format!("{json:#}")
}
