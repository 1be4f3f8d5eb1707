//! Llama-family models: their configuration (the fields of a Hugging Face `config.json` that
//! decide a decode step), the configurations of the models the benchmarks use, the mapping to the
//! megakernel's [`DecoderConfig`], and their weights.
//!
//! - [`ModelConfig::from_dir`] / [`ModelConfig::from_json`] read a `config.json` (`llama`,
//!   `mistral`, `qwen2`, `qwen3`); every missing or inconsistent field is an error naming the
//!   field and the file. [`ModelConfig::inv_freq`] gives RoPE's frequencies with Llama 3's
//!   scaling.
//! - [`Checkpoint::open`] memory-maps a checkpoint directory (`model.safetensors` or the sharded
//!   `model.safetensors.index.json`), checks every tensor the decoder needs against the config,
//!   and [`Checkpoint::weights`] streams them one at a time under the decoder's names
//!   (`embed`, `l{i}.wq`, ...; projections transposed from Hugging Face's `[out, in]` to the
//!   decoder's `[in, out]`), converted to the decoder's element type; [`fuse_qkv`] joins each
//!   layer's q, k and v projections into the megakernel decoder's one `l{i}.wqkv` input.
//! - [`random_weights`] streams the same tensors with random values at real shapes (scaled as
//!   `benches/py/decode_baseline.py` does), generated in parallel from a counter-based
//!   generator; [`write_checkpoint`] writes them as a Hugging Face checkpoint directory, which
//!   PyTorch (`decode_baseline.py --weights DIR`) loads too.
//! - [`reference::Reference`] is the model's own CPU decode step (f32 math, KV caches), written
//!   from the configuration alone, independent of the megakernel's step graph, to check it.

mod checkpoint;
mod config;
mod random;
pub mod reference;
mod rope;
mod weights;

use std::path::PathBuf;

pub use checkpoint::Checkpoint;
pub use random::{WriteOptions, random_weights, write_checkpoint, write_checkpoint_with};
pub use weights::{Weight, WeightData, WeightSpec, fuse_qkv, qkv_slot, weight_layout};

use crate::ir::DType;
use crate::mpk::decoder::DecoderConfig;

/// Why a model configuration, checkpoint or reference step failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A field of `config.json` is missing, malformed, inconsistent or unsupported.
    #[error("{file}: field `{field}`: {reason}")]
    Config {
        /// The file.
        file: PathBuf,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The directory holds neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("{dir}: no weights (neither model.safetensors nor model.safetensors.index.json)")]
    NoWeights {
        /// The directory.
        dir: PathBuf,
    },
    /// A file is not a valid safetensors file (or shard index).
    #[error("{file}: not a valid {what}: {reason}")]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What the file should be.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A tensor the model needs is in none of the files.
    #[error("tensor `{name}` is missing (searched {files})")]
    Missing {
        /// The tensor's Hugging Face name.
        name: String,
        /// The files searched.
        files: String,
    },
    /// A tensor's shape is not what the configuration implies.
    #[error("tensor `{name}` in {file}: expected shape {expected:?}, found {found:?}")]
    Shape {
        /// The tensor's Hugging Face name.
        name: String,
        /// Its file.
        file: PathBuf,
        /// The shape the configuration implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's element type is not bf16, f16 or f32.
    #[error("tensor `{name}` in {file}: element type {dtype} is not supported (bf16, f16 and f32 are)")]
    Dtype {
        /// The tensor's Hugging Face name.
        name: String,
        /// Its file.
        file: PathBuf,
        /// The element type in the file.
        dtype: String,
    },
    /// The checkpoint has bias tensors (Qwen2's q/k/v projections have them).
    #[error(
        "tensor `{name}` in {file}: the decoder has no bias yet (checkpoints with attention or MLP biases, such as Qwen2's, are not supported)"
    )]
    Bias {
        /// The bias tensor's name.
        name: String,
        /// Its file.
        file: PathBuf,
    },
    /// The decoder's element type is not bf16, f16 or f32.
    #[error("weights can be converted to bf16, f16 or f32, not {0}")]
    TargetDtype(DType),
    /// A weight cannot be laid out as the megakernel's input of that name.
    #[error("weight `{name}` of shape {shape:?} cannot be stored as the input of shape {stored:?}")]
    Storage {
        /// The decoder's name of the weight.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The input's shape.
        stored: Vec<usize>,
    },
    /// A layer's q, k and v projections could not be joined into the decoder's one input
    /// ([`fuse_qkv`]): one is missing, out of order, or of another row count or element type.
    #[error("joining the q/k/v projections: {0}")]
    Qkv(String),
    /// A CPU reference step was asked for something out of range.
    #[error("reference step: {0}")]
    Step(String),
}

/// Llama 3's RoPE frequency scaling (`rope_scaling` with `rope_type = "llama3"`).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    /// `factor`: how much longer the extended context is.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`.
    pub original_max_positions: usize,
}

/// The shape and numerics of a Llama-family decoder (Llama 2/3, Qwen2, Qwen3, Mistral).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// A name for messages and artifacts (`llama-3.2-1b`).
    pub name: String,
    /// `vocab_size`.
    pub vocab: usize,
    /// `hidden_size`.
    pub hidden: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_key_value_heads`.
    pub kv_heads: usize,
    /// `head_dim` (`hidden_size / num_attention_heads` where the config has none).
    pub head_dim: usize,
    /// `intermediate_size`.
    pub intermediate: usize,
    /// `rms_norm_eps`.
    pub eps: f32,
    /// `rope_theta`.
    pub rope_theta: f64,
    /// `rope_scaling` of type `llama3`, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// `tie_word_embeddings`: the LM head is the embedding matrix.
    pub tie_embeddings: bool,
}

impl ModelConfig {
    /// The names [`ModelConfig::preset`] knows.
    pub const PRESETS: [&'static str; 3] = ["llama-3.2-1b", "qwen3-0.6b", "llama-3.1-8b"];

    /// The configuration of a published model by name (one of [`ModelConfig::PRESETS`]), for
    /// random weights at real shapes; `None` for other names.
    pub fn preset(name: &str) -> Option<ModelConfig> {
        let llama3 = |factor| {
            Some(RopeScaling { factor, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_positions: 8192 })
        };
        let c = match name {
            "llama-3.2-1b" => ModelConfig {
                name: name.into(),
                vocab: 128_256,
                hidden: 2048,
                layers: 16,
                heads: 32,
                kv_heads: 8,
                head_dim: 64,
                intermediate: 8192,
                eps: 1e-5,
                rope_theta: 500_000.0,
                rope_scaling: llama3(32.0),
                qk_norm: false,
                tie_embeddings: true,
            },
            "qwen3-0.6b" => ModelConfig {
                name: name.into(),
                vocab: 151_936,
                hidden: 1024,
                layers: 28,
                heads: 16,
                kv_heads: 8,
                head_dim: 128,
                intermediate: 3072,
                eps: 1e-6,
                rope_theta: 1_000_000.0,
                rope_scaling: None,
                qk_norm: true,
                tie_embeddings: true,
            },
            "llama-3.1-8b" => ModelConfig {
                name: name.into(),
                vocab: 128_256,
                hidden: 4096,
                layers: 32,
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                intermediate: 14_336,
                eps: 1e-5,
                rope_theta: 500_000.0,
                rope_scaling: llama3(8.0),
                qk_norm: false,
                tie_embeddings: false,
            },
            _ => return None,
        };
        Some(c)
    }

    /// The megakernel decoder of this model with a KV cache of `capacity` positions, in `dtype`.
    pub fn decoder_config(&self, capacity: usize, dtype: DType) -> DecoderConfig {
        DecoderConfig {
            vocab: self.vocab,
            hidden: self.hidden,
            layers: self.layers,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            intermediate: self.intermediate,
            capacity,
            eps: self.eps,
            qk_norm: self.qk_norm,
            dtype,
            contiguous_below: crate::mpk::decoder::DEFAULT_CONTIGUOUS_BELOW,
            grouped_output: crate::mpk::decoder::default_grouped_output(self.hidden),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_known_and_consistent() {
        for name in ModelConfig::PRESETS {
            let c = ModelConfig::preset(name).expect("a preset");
            assert_eq!(c.name, name);
            assert_eq!(c.heads % c.kv_heads, 0, "{name}");
            let d = c.decoder_config(512, DType::Bf16);
            assert_eq!((d.hidden, d.layers, d.capacity, d.qk_norm), (c.hidden, c.layers, 512, c.qk_norm));
        }
        assert!(ModelConfig::preset("gpt-2").is_none());
    }
}
