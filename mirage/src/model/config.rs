//! A Hugging Face `config.json` read into a [`ModelConfig`]: the fields that decide a decode step,
//! the defaults transformers gives the ones a file leaves out, and a clear error for every field
//! that is missing, inconsistent or asks for something the decoder does not do.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{ModelConfig, ModelError, RopeScaling};

/// The model types read, with the `head_dim` transformers defaults to (`None`: hidden / heads).
const MODEL_TYPES: [(&str, Option<usize>); 4] =
    [("llama", None), ("mistral", None), ("qwen2", None), ("qwen3", Some(128))];

/// The fields of one `config.json`, with the file they came from for messages.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    file: &'a Path,
}

impl Fields<'_> {
    fn error(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::Config { file: self.file.to_path_buf(), field: field.into(), reason: reason.into() }
    }

    /// The field's value, `None` where it is absent or `null`.
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    fn usize_opt(&self, field: &str) -> Result<Option<usize>, ModelError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.error(field, format!("expected a non-negative integer, found {v}"))),
        }
    }

    /// A required size: present and positive.
    fn size(&self, field: &str) -> Result<usize, ModelError> {
        match self.usize_opt(field)? {
            None => Err(self.error(field, "missing")),
            Some(0) => Err(self.error(field, "must be positive, found 0")),
            Some(n) => Ok(n),
        }
    }

    fn f64_opt(&self, field: &str) -> Result<Option<f64>, ModelError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.error(field, format!("expected a number, found {v}"))),
        }
    }

    fn bool_opt(&self, field: &str) -> Result<Option<bool>, ModelError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => {
                v.as_bool().map(Some).ok_or_else(|| self.error(field, format!("expected true or false, found {v}")))
            }
        }
    }

    fn str_opt(&self, field: &str) -> Result<Option<&str>, ModelError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| self.error(field, format!("expected a string, found {v}"))),
        }
    }
}

impl ModelConfig {
    /// Reads a `config.json` given as text (messages name the file `config.json`); the model is
    /// named after its `model_type`.
    pub fn from_json(json: &str) -> Result<ModelConfig, ModelError> {
        parse(json, Path::new("config.json"), None)
    }

    /// Reads `dir/config.json`; the model is named after the directory.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<ModelConfig, ModelError> {
        let dir = dir.as_ref();
        let file = dir.join("config.json");
        let json = std::fs::read_to_string(&file).map_err(|source| ModelError::Io { path: file.clone(), source })?;
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        parse(&json, &file, name)
    }
}

fn parse(json: &str, file: &Path, name: Option<String>) -> Result<ModelConfig, ModelError> {
    let value: Value = serde_json::from_str(json).map_err(|e| ModelError::Corrupt {
        file: PathBuf::from(file),
        what: "JSON file",
        reason: e.to_string(),
    })?;
    let map = value.as_object().ok_or_else(|| ModelError::Corrupt {
        file: PathBuf::from(file),
        what: "model configuration",
        reason: "not a JSON object".into(),
    })?;
    let f = Fields { map, file };
    let model_type = f.str_opt("model_type")?.ok_or_else(|| f.error("model_type", "missing"))?;
    let known: Vec<&str> = MODEL_TYPES.iter().map(|(t, _)| *t).collect();
    let &(_, default_head_dim) = MODEL_TYPES.iter().find(|(t, _)| *t == model_type).ok_or_else(|| {
        f.error("model_type", format!("`{model_type}` is not supported (supported: {})", known.join(", ")))
    })?;

    let vocab = f.size("vocab_size")?;
    let hidden = f.size("hidden_size")?;
    let layers = f.size("num_hidden_layers")?;
    let heads = f.size("num_attention_heads")?;
    let intermediate = f.size("intermediate_size")?;
    let kv_heads = match f.usize_opt("num_key_value_heads")? {
        None => heads,
        Some(0) => return Err(f.error("num_key_value_heads", "must be positive, found 0")),
        Some(n) => n,
    };
    if !heads.is_multiple_of(kv_heads) {
        return Err(f.error("num_key_value_heads", format!("{kv_heads} does not divide num_attention_heads = {heads}")));
    }
    let head_dim = match (f.usize_opt("head_dim")?, default_head_dim) {
        (Some(d), _) => d,
        (None, Some(d)) => d,
        (None, None) if hidden.is_multiple_of(heads) => hidden / heads,
        (None, None) => {
            return Err(f.error(
                "head_dim",
                format!("missing, and num_attention_heads = {heads} does not divide hidden_size = {hidden}"),
            ));
        }
    };
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(f.error("head_dim", format!("must be even and positive for RoPE, found {head_dim}")));
    }
    // The largest tensors' element counts must be addressable (f32 bytes included).
    let products = [
        ("vocab_size", vec![vocab, hidden]),
        ("num_attention_heads", vec![heads, head_dim, hidden]),
        ("intermediate_size", vec![intermediate, hidden]),
    ];
    for (field, factors) in products {
        let fits =
            factors.iter().try_fold(4usize, |acc, &x| acc.checked_mul(x)).is_some_and(|b| b <= isize::MAX as usize);
        if !fits {
            return Err(f.error(field, format!("the tensor of shape {factors:?} is too large to address")));
        }
    }
    let eps = f.f64_opt("rms_norm_eps")?.unwrap_or(1e-6);
    if !(eps > 0.0 && eps.is_finite()) {
        return Err(f.error("rms_norm_eps", format!("must be positive, found {eps}")));
    }
    if let Some(act) = f.str_opt("hidden_act")?
        && act != "silu"
    {
        return Err(f.error("hidden_act", format!("`{act}` is not supported (the MLP is SiLU-gated)")));
    }
    for field in ["attention_bias", "mlp_bias"] {
        if f.bool_opt(field)? == Some(true) {
            return Err(f.error(field, "biases are not supported: the decoder has no bias yet"));
        }
    }
    check_sliding_window(&f, model_type)?;
    let (rope_theta, rope_scaling) = rope(&f)?;
    Ok(ModelConfig {
        name: name.unwrap_or_else(|| model_type.to_owned()),
        vocab,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        intermediate,
        eps: eps as f32,
        rope_theta,
        rope_scaling,
        qk_norm: model_type == "qwen3",
        // transformers' Llama, Mistral, Qwen2 and Qwen3 configurations all default to untied.
        tie_embeddings: f.bool_opt("tie_word_embeddings")?.unwrap_or(false),
    })
}

/// Sliding-window attention is refused where it is in effect: Mistral applies `sliding_window`
/// whenever it is set, Qwen2/Qwen3 only with `use_sliding_window`.
fn check_sliding_window(f: &Fields<'_>, model_type: &str) -> Result<(), ModelError> {
    let window = f.usize_opt("sliding_window")?;
    let active = match model_type {
        "qwen2" | "qwen3" => f.bool_opt("use_sliding_window")?.unwrap_or(false),
        _ => window.is_some(),
    };
    match window {
        Some(w) if active => Err(f.error(
            "sliding_window",
            format!("sliding-window attention ({w} positions) is not supported: the decoder attends to every position"),
        )),
        _ => Ok(()),
    }
}

/// `rope_theta` (default 10000, as transformers) and the scaling, from the top level or from
/// `rope_parameters` (transformers 5), with `rope_scaling`'s `type` as an old name of
/// `rope_type`.
fn rope(f: &Fields<'_>) -> Result<(f64, Option<RopeScaling>), ModelError> {
    let (params, where_) = match f.get("rope_parameters") {
        Some(Value::Object(m)) => (Some(m), "rope_parameters"),
        Some(v) => return Err(f.error("rope_parameters", format!("expected an object, found {v}"))),
        None => match f.get("rope_scaling") {
            Some(Value::Object(m)) => (Some(m), "rope_scaling"),
            Some(v) => return Err(f.error("rope_scaling", format!("expected an object or null, found {v}"))),
            None => (None, "rope_scaling"),
        },
    };
    let top_theta = f.f64_opt("rope_theta")?;
    let Some(params) = params else {
        return Ok((check_theta(f, "rope_theta", top_theta.unwrap_or(10_000.0))?, None));
    };
    let sub = Fields { map: params, file: f.file };
    let named = |field: &str| format!("{where_}.{field}");
    let theta = match sub.f64_opt("rope_theta").map_err(|_| f.error(&named("rope_theta"), "expected a number"))? {
        Some(t) => check_theta(f, &named("rope_theta"), t)?,
        None => check_theta(f, "rope_theta", top_theta.unwrap_or(10_000.0))?,
    };
    let kind = match (sub.get("rope_type"), sub.get("type")) {
        (Some(v), _) | (None, Some(v)) => {
            v.as_str().ok_or_else(|| f.error(&named("rope_type"), format!("expected a string, found {v}")))?
        }
        (None, None) => return Err(f.error(&named("rope_type"), "missing")),
    };
    match kind {
        "default" => Ok((theta, None)),
        "llama3" => {
            let num = |field: &str| -> Result<f64, ModelError> {
                match sub.get(field) {
                    None => Err(f.error(&named(field), "missing")),
                    Some(v) => v
                        .as_f64()
                        .filter(|x| x.is_finite() && *x > 0.0)
                        .ok_or_else(|| f.error(&named(field), format!("expected a positive number, found {v}"))),
                }
            };
            let (factor, low, high) = (num("factor")?, num("low_freq_factor")?, num("high_freq_factor")?);
            if high <= low {
                return Err(
                    f.error(&named("high_freq_factor"), format!("must exceed low_freq_factor = {low}, found {high}"))
                );
            }
            let original = num("original_max_position_embeddings")?;
            if original.fract() != 0.0 {
                return Err(f.error(
                    &named("original_max_position_embeddings"),
                    format!("expected an integer, found {original}"),
                ));
            }
            let scaling = RopeScaling {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_positions: original as usize,
            };
            Ok((theta, Some(scaling)))
        }
        other => Err(f.error(
            &named("rope_type"),
            format!("RoPE scaling of type `{other}` is not supported (only `llama3` and `default` are)"),
        )),
    }
}

fn check_theta(f: &Fields<'_>, field: &str, theta: f64) -> Result<f64, ModelError> {
    if theta.is_finite() && theta > 1.0 {
        Ok(theta)
    } else {
        Err(f.error(field, format!("must be a number above 1, found {theta}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_3_2_1B: &str = r#"{
        "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
        "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
        "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
        "vocab_size": 128256}"#;

    const QWEN3_0_6B: &str = r#"{
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128,
        "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
        "sliding_window": null, "tie_word_embeddings": true, "use_sliding_window": false,
        "vocab_size": 151936}"#;

    fn err(json: &str) -> String {
        ModelConfig::from_json(json).expect_err("an error").to_string()
    }

    fn with(base: &str, field: &str, value: &str) -> String {
        let mut v: Value = serde_json::from_str(base).expect("valid JSON");
        let m = v.as_object_mut().expect("an object");
        if value.is_empty() {
            m.remove(field);
        } else {
            m.insert(field.into(), serde_json::from_str(value).expect("valid JSON"));
        }
        v.to_string()
    }

    #[test]
    fn published_configs_read_as_the_presets() {
        let mut c = ModelConfig::from_json(LLAMA_3_2_1B).expect("a config");
        c.name = "llama-3.2-1b".into();
        assert_eq!(Some(c), ModelConfig::preset("llama-3.2-1b"));
        let mut c = ModelConfig::from_json(QWEN3_0_6B).expect("a config");
        assert_eq!(c.name, "qwen3");
        c.name = "qwen3-0.6b".into();
        assert_eq!(Some(c), ModelConfig::preset("qwen3-0.6b"));
    }

    #[test]
    fn defaults_follow_transformers() {
        let minimal = r#"{"model_type": "mistral", "vocab_size": 1000, "hidden_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512}"#;
        let c = ModelConfig::from_json(minimal).expect("a config");
        assert_eq!(
            (c.kv_heads, c.head_dim, c.rope_theta, c.tie_embeddings, c.qk_norm),
            (4, 64, 10_000.0, false, false)
        );
        assert_eq!((c.eps, c.rope_scaling), (1e-6, None));
        let q = ModelConfig::from_json(&with(minimal, "model_type", "\"qwen3\"")).expect("a config");
        assert_eq!((q.head_dim, q.qk_norm), (128, true));
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            ("hidden_size", "", "field `hidden_size`: missing"),
            ("vocab_size", "0", "field `vocab_size`: must be positive"),
            ("num_key_value_heads", "5", "field `num_key_value_heads`: 5 does not divide num_attention_heads = 32"),
            ("head_dim", "63", "field `head_dim`: must be even"),
            ("model_type", "\"gpt2\"", "`gpt2` is not supported (supported: llama, mistral, qwen2, qwen3)"),
            ("attention_bias", "true", "field `attention_bias`: biases are not supported"),
            ("hidden_act", "\"gelu\"", "field `hidden_act`: `gelu` is not supported"),
            ("sliding_window", "4096", "field `sliding_window`: sliding-window attention (4096 positions)"),
            ("rope_scaling", r#"{"rope_type": "yarn", "factor": 4.0}"#, "RoPE scaling of type `yarn` is not supported"),
            ("rope_scaling", r#"{"type": "llama3", "factor": 8.0}"#, "field `rope_scaling.low_freq_factor`: missing"),
            ("num_hidden_layers", "\"16\"", "field `num_hidden_layers`: expected a non-negative integer"),
            (
                "vocab_size",
                "4611686018427387904",
                "field `vocab_size`: the tensor of shape [4611686018427387904, 2048] is too large",
            ),
        ];
        for (field, value, expected) in cases {
            let e = err(&with(LLAMA_3_2_1B, field, value));
            assert!(e.starts_with("config.json: ") && e.contains(expected), "{field} = {value}: {e}");
        }
        // Qwen's window applies only with use_sliding_window (and a window).
        let windowed = with(QWEN3_0_6B, "sliding_window", "4096");
        assert!(ModelConfig::from_json(&windowed).is_ok());
        assert!(ModelConfig::from_json(&with(QWEN3_0_6B, "use_sliding_window", "true")).is_ok());
        let e = err(&with(&windowed, "use_sliding_window", "true"));
        assert!(e.contains("field `sliding_window`"), "{e}");
        let e = err(&with(&with(LLAMA_3_2_1B, "hidden_size", "2050"), "head_dim", ""));
        assert!(e.contains("field `head_dim`: missing, and num_attention_heads = 32 does not divide"), "{e}");
        assert!(err("[1, 2]").contains("not a valid model configuration"));
        assert!(err("{").contains("not a valid JSON file"));
    }

    #[test]
    fn rope_parameters_of_transformers_5_are_read() {
        let v5 = with(
            &with(LLAMA_3_2_1B, "rope_scaling", ""),
            "rope_parameters",
            r#"{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
        );
        let (a, b) =
            (ModelConfig::from_json(&v5).expect("a config"), ModelConfig::from_json(LLAMA_3_2_1B).expect("a config"));
        assert_eq!(a, b);
    }
}
