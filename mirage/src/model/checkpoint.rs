//! A Hugging Face checkpoint directory (`config.json` and `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`), memory-mapped and checked against its configuration when
//! opened, then streamed one tensor at a time under the decoder's names.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::weights::{WeightSpec, convert, weight_layout};
use super::{ModelConfig, ModelError, Weight};
use crate::ir::DType;

/// Where one tensor lies in the mapped files.
#[derive(Clone, Debug)]
struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Range<usize>,
}

/// An opened checkpoint: its configuration and its memory-mapped weight files.
#[derive(Debug)]
pub struct Checkpoint {
    config: ModelConfig,
    paths: Vec<PathBuf>,
    maps: Vec<Mmap>,
    tensors: HashMap<String, Entry>,
    layout: Vec<WeightSpec>,
}

impl Checkpoint {
    /// Opens the checkpoint in `dir`: reads `config.json`, maps the weight files, and checks that
    /// every tensor the decoder needs is there with the shape the configuration implies and a
    /// float element type, and that there are no biases.
    pub fn open(dir: impl AsRef<Path>) -> Result<Checkpoint, ModelError> {
        let dir = dir.as_ref();
        let config = ModelConfig::from_dir(dir)?;
        let paths = weight_files(dir)?;
        let mut maps = Vec::with_capacity(paths.len());
        let mut tensors = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let map = map_file(path)?;
            index_file(&map, path, i, &mut tensors)?;
            maps.push(map);
        }
        let layout = weight_layout(&config);
        let ckpt = Checkpoint { config, paths, maps, tensors, layout };
        ckpt.check()?;
        Ok(ckpt)
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weight files.
    pub fn files(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The decoder's tensors, in the decoder graph's order, converted to `dtype` one at a time
    /// (what is streamed is one tensor in memory, besides the mapped files).
    pub fn weights(&self, dtype: DType) -> impl Iterator<Item = Result<Weight, ModelError>> + '_ {
        self.layout.iter().map(move |spec| self.load(spec, dtype))
    }

    /// One of the decoder's tensors by its decoder name (`l0.wq`), converted to `dtype`.
    pub fn weight(&self, name: &str, dtype: DType) -> Result<Weight, ModelError> {
        let spec = self
            .layout
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ModelError::Missing { name: name.into(), files: "the decoder's tensors".into() })?;
        self.load(spec, dtype)
    }

    fn load(&self, spec: &WeightSpec, dtype: DType) -> Result<Weight, ModelError> {
        let e = self.tensors.get(&spec.hf_name).ok_or_else(|| self.missing(&spec.hf_name))?;
        let bytes = &self.maps[e.file][e.bytes.clone()];
        match e.dtype {
            Dtype::BF16 => convert(spec, dtype, |k| half::bf16::from_bits(u16_at(bytes, k)).to_f32()),
            Dtype::F16 => convert(spec, dtype, |k| half::f16::from_bits(u16_at(bytes, k)).to_f32()),
            Dtype::F32 => convert(spec, dtype, |k| {
                let b = &bytes[4 * k..4 * k + 4];
                f32::from_le_bytes([b[0], b[1], b[2], b[3]])
            }),
            other => Err(self.dtype_error(&spec.hf_name, e.file, other)),
        }
    }

    fn missing(&self, name: &str) -> ModelError {
        let files: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        ModelError::Missing { name: name.into(), files: files.join(", ") }
    }

    fn dtype_error(&self, name: &str, file: usize, dtype: Dtype) -> ModelError {
        ModelError::Dtype { name: name.into(), file: self.paths[file].clone(), dtype: dtype.to_string() }
    }

    /// Every tensor of the layout present, shaped and typed as it should be; no bias anywhere.
    fn check(&self) -> Result<(), ModelError> {
        let mut biases: Vec<(&String, &Entry)> = self.tensors.iter().filter(|(n, _)| n.ends_with(".bias")).collect();
        biases.sort_by_key(|(n, _)| n.as_str());
        if let Some((name, e)) = biases.first() {
            return Err(ModelError::Bias { name: (*name).clone(), file: self.paths[e.file].clone() });
        }
        for spec in &self.layout {
            let e = self.tensors.get(&spec.hf_name).ok_or_else(|| self.missing(&spec.hf_name))?;
            if e.shape != spec.hf_shape {
                return Err(ModelError::Shape {
                    name: spec.hf_name.clone(),
                    file: self.paths[e.file].clone(),
                    expected: spec.hf_shape.clone(),
                    found: e.shape.clone(),
                });
            }
            if !matches!(e.dtype, Dtype::BF16 | Dtype::F16 | Dtype::F32) {
                return Err(self.dtype_error(&spec.hf_name, e.file, e.dtype));
            }
        }
        Ok(())
    }
}

fn u16_at(bytes: &[u8], k: usize) -> u16 {
    u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]])
}

/// `model.safetensors`, or the shards `model.safetensors.index.json` maps tensors to (each once,
/// in the order first named).
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(ModelError::NoWeights { dir: dir.to_path_buf() });
    }
    let text = std::fs::read_to_string(&index).map_err(|source| ModelError::Io { path: index.clone(), source })?;
    let corrupt = |reason: String| ModelError::Corrupt { file: index.clone(), what: "shard index", reason };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let map =
        value.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| corrupt("no `weight_map` object".into()))?;
    let mut files: Vec<PathBuf> = Vec::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| corrupt(format!("the file of `{name}` is not a string")))?;
        if file.contains('/') || file.contains('\\') || file == ".." {
            return Err(corrupt(format!("the file of `{name}`, `{file}`, is not in the checkpoint's directory")));
        }
        let path = dir.join(file);
        if !files.contains(&path) {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(corrupt("`weight_map` names no file".into()));
    }
    Ok(files)
}

fn map_file(path: &Path) -> Result<Mmap, ModelError> {
    let file = File::open(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    // SAFETY: the map is read-only and lives as long as the checkpoint. Undefined behaviour
    // would need another process to truncate or rewrite the file while it is open, which a
    // checkpoint directory being read does not see (the same contract as every memory-mapped
    // model loader).
    unsafe { Mmap::map(&file) }.map_err(|source| ModelError::Io { path: path.to_path_buf(), source })
}

/// Parses and validates a safetensors file's header and records where its tensors lie.
fn index_file(map: &[u8], path: &Path, file: usize, out: &mut HashMap<String, Entry>) -> Result<(), ModelError> {
    let corrupt = |e: safetensors::SafeTensorError| ModelError::Corrupt {
        file: path.to_path_buf(),
        what: "safetensors file",
        reason: e.to_string(),
    };
    // Full validation (offsets within the file, no overlaps, sizes matching shapes).
    SafeTensors::deserialize(map).map_err(corrupt)?;
    let (header, meta) = SafeTensors::read_metadata(map).map_err(corrupt)?;
    let start = 8 + header;
    for (name, info) in meta.tensors() {
        let (lo, hi) = info.data_offsets;
        let entry = Entry { file, dtype: info.dtype, shape: info.shape.clone(), bytes: start + lo..start + hi };
        if out.insert(name.clone(), entry).is_some() {
            return Err(ModelError::Corrupt {
                file: path.to_path_buf(),
                what: "checkpoint",
                reason: format!("tensor `{name}` is in more than one file"),
            });
        }
    }
    Ok(())
}
