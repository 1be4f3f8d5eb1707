//! Models from Hugging Face checkpoints: tiny Llama and Qwen3 checkpoints written with random
//! weights load back exactly (one file or shards, bf16/f16/f32), bad checkpoints are clear
//! errors, and the model's CPU reference agrees with the megakernel decoder's step graph.

use std::path::Path;

use mirage::ir::DType;
use mirage::model::reference::Reference;
use mirage::model::{
    Checkpoint, ModelConfig, ModelError, RopeScaling, Weight, WeightData, WriteOptions, fuse_qkv, random_weights,
    write_checkpoint, write_checkpoint_with,
};
use mirage::mpk::decoder::{DecoderConfig, decoder_step};
use mirage::mpk::exec::{HostTensors, reference_step};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A two-layer Llama 3 with the toy decoder's shapes (tied head, Llama 3 RoPE scaling).
fn tiny_llama() -> ModelConfig {
    ModelConfig {
        name: "tiny-llama".into(),
        vocab: 512,
        hidden: 256,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        intermediate: 512,
        eps: 1e-5,
        rope_theta: 500_000.0,
        rope_scaling: Some(RopeScaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192,
        }),
        qk_norm: false,
        tie_embeddings: true,
    }
}

/// A two-layer Qwen3: q/k norm, heads · head_dim (256) above hidden (128), untied head.
fn tiny_qwen3() -> ModelConfig {
    ModelConfig {
        name: "tiny-qwen3".into(),
        vocab: 384,
        hidden: 128,
        heads: 4,
        kv_heads: 1,
        head_dim: 64,
        intermediate: 256,
        eps: 1e-6,
        rope_theta: 1_000_000.0,
        rope_scaling: None,
        qk_norm: true,
        tie_embeddings: false,
        ..tiny_llama()
    }
}

fn collect(stream: impl Iterator<Item = Result<Weight, ModelError>>) -> R<Vec<Weight>> {
    Ok(stream.collect::<Result<Vec<_>, _>>()?)
}

/// Norm weights made to differ from 1 (random weights have all-ones norms), so the
/// comparisons see whether each norm is applied with its own weight.
fn uneven_norms(ws: Vec<Weight>) -> Vec<Weight> {
    ws.into_iter()
        .enumerate()
        .map(|(t, mut w)| {
            if w.name.ends_with("norm") {
                let v: Vec<f32> = (0..w.data.len()).map(|k| 1.0 + 0.3 * ((k * 7 + t) as f32).sin()).collect();
                w.data = WeightData::F32(v);
            }
            w
        })
        .collect()
}

#[test]
fn a_written_checkpoint_loads_back_exactly() -> R {
    for cfg in [tiny_llama(), tiny_qwen3(), ModelConfig { tie_embeddings: false, ..tiny_llama() }] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(&cfg.name);
        write_checkpoint(&path, &cfg, 11)?;
        let ckpt = Checkpoint::open(&path)?;
        assert_eq!(ckpt.config(), &cfg);
        for dtype in [DType::Bf16, DType::F32, DType::F16] {
            let loaded = collect(ckpt.weights(dtype))?;
            assert_eq!(loaded, collect(random_weights(&cfg, 11, dtype))?, "{} in {dtype}", cfg.name);
        }
        let wk = collect(random_weights(&cfg, 11, DType::Bf16))?.into_iter().find(|w| w.name == "l1.wk");
        assert_eq!(Some(ckpt.weight("l1.wk", DType::Bf16)?), wk);
        assert!(ckpt.weight("l9.wk", DType::Bf16).is_err());
    }
    Ok(())
}

#[test]
fn shards_and_other_file_types_hold_the_same_values() -> R {
    let cfg = tiny_llama();
    let dir = tempfile::tempdir()?;
    let expected = collect(random_weights(&cfg, 3, DType::F32))?;
    for dtype in [DType::F32, DType::Bf16, DType::F16] {
        let path = dir.path().join(format!("sharded-{dtype}"));
        write_checkpoint_with(&path, &cfg, 3, &WriteOptions { dtype, max_shard_bytes: Some(600_000) })?;
        let ckpt = Checkpoint::open(&path)?;
        assert!(ckpt.files().len() > 1, "{dtype}: {:?}", ckpt.files());
        assert!(path.join("model.safetensors.index.json").is_file());
        let loaded = collect(ckpt.weights(DType::F32))?;
        for (a, b) in loaded.iter().zip(&expected) {
            assert_eq!((&a.name, &a.shape), (&b.name, &b.shape));
            let (a, b) = (a.data.to_f32(), b.data.to_f32());
            if dtype == DType::F16 {
                // bf16 values in f16: exact but for the smallest (f16 subnormals).
                assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 6e-8 + 1e-3 * y.abs()));
            } else {
                assert_eq!(a, b, "{dtype}");
            }
        }
    }
    Ok(())
}

#[test]
fn random_weights_are_deterministic_and_scaled_like_the_pytorch_baseline() -> R {
    let cfg = tiny_llama();
    let a = collect(random_weights(&cfg, 5, DType::F32))?;
    assert_eq!(a, collect(random_weights(&cfg, 5, DType::F32))?);
    assert_ne!(a, collect(random_weights(&cfg, 6, DType::F32))?);
    let std = |w: &Weight| {
        let v = w.data.to_f32();
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        (mean, (v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32).sqrt())
    };
    for w in &a {
        let (mean, sd) = std(w);
        let expected = match w.name.as_str() {
            "embed" | "lm_head" => 1.0,
            n if n.ends_with("norm") => {
                assert!(w.data.to_f32().iter().all(|&x| x == 1.0), "{n}");
                continue;
            }
            n if n.ends_with("wo") => 1.0 / ((cfg.heads * cfg.head_dim) as f32).sqrt(),
            n if n.ends_with("wd") => 1.0 / (cfg.intermediate as f32).sqrt(),
            _ => 1.0 / (cfg.hidden as f32).sqrt(),
        };
        assert!((sd / expected - 1.0).abs() < 0.05 && mean.abs() < 0.05 * expected, "{}: {mean} {sd}", w.name);
    }
    // Tied: the head is the embedding transposed.
    let (embed, head) = (a[0].data.to_f32(), a[a.len() - 1].data.to_f32());
    assert_eq!(head[3 * cfg.vocab + 17], embed[17 * cfg.hidden + 3]);
    Ok(())
}

/// Rewrites `dir`'s `model.safetensors` through `edit` (the list of tensors: name, dtype,
/// shape, bytes).
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>)) -> R {
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file)?;
    let st = SafeTensors::deserialize(&bytes)?;
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> =
        st.iter().map(|(n, v)| (n.to_owned(), v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut tensors);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| Ok((n.clone(), TensorView::new(*d, s.clone(), b)?)))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    safetensors::serialize_to_file(views, None, &file)?;
    Ok(())
}

fn open_err(dir: &Path) -> String {
    Checkpoint::open(dir).expect_err("an error").to_string()
}

#[test]
fn bad_checkpoints_are_clear_errors() -> R {
    let cfg = tiny_llama();
    let tmp = tempfile::tempdir()?;
    let fresh = |name: &str| -> R<std::path::PathBuf> {
        let dir = tmp.path().join(name);
        write_checkpoint(&dir, &cfg, 1)?;
        Ok(dir)
    };
    let d = fresh("missing")?;
    rewrite(&d, |t| t.retain(|(n, ..)| n != "model.layers.1.mlp.up_proj.weight"))?;
    let e = open_err(&d);
    assert!(
        e.contains("tensor `model.layers.1.mlp.up_proj.weight` is missing (searched ")
            && e.contains("model.safetensors"),
        "{e}"
    );

    let d = fresh("shape")?;
    rewrite(&d, |t| {
        let w = t.iter_mut().find(|(n, ..)| n == "model.layers.0.self_attn.k_proj.weight").expect("k_proj");
        w.2 = vec![64, 512];
    })?;
    let e = open_err(&d);
    assert!(
        e.contains("tensor `model.layers.0.self_attn.k_proj.weight` in ")
            && e.contains("expected shape [128, 256], found [64, 512]"),
        "{e}"
    );

    let d = fresh("bias")?;
    rewrite(&d, |t| t.push(("model.layers.0.self_attn.q_proj.bias".into(), Dtype::BF16, vec![256], vec![0; 512])))?;
    let e = open_err(&d);
    assert!(e.contains("`model.layers.0.self_attn.q_proj.bias`") && e.contains("the decoder has no bias yet"), "{e}");

    let d = fresh("dtype")?;
    rewrite(&d, |t| {
        let w = t.iter_mut().find(|(n, ..)| n == "model.norm.weight").expect("norm");
        w.1 = Dtype::I16;
    })?;
    let e = open_err(&d);
    assert!(e.contains("tensor `model.norm.weight`") && e.contains("element type I16 is not supported"), "{e}");

    let d = fresh("corrupt")?;
    let file = d.join("model.safetensors");
    let len = std::fs::metadata(&file)?.len();
    std::fs::OpenOptions::new().write(true).open(&file)?.set_len(len - 100)?;
    let e = open_err(&d);
    assert!(e.contains("not a valid safetensors file"), "{e}");
    std::fs::write(&file, b"\x05")?;
    assert!(open_err(&d).contains("not a valid safetensors file"));

    let d = fresh("none")?;
    std::fs::remove_file(d.join("model.safetensors"))?;
    assert!(open_err(&d).contains("no weights (neither model.safetensors nor model.safetensors.index.json)"));
    std::fs::write(d.join("model.safetensors.index.json"), r#"{"weight_map": {"a": "../x.safetensors"}}"#)?;
    assert!(open_err(&d).contains("is not in the checkpoint's directory"), "{}", open_err(&d));
    std::fs::write(d.join("model.safetensors.index.json"), r#"{"weight_map": {"a": "gone.safetensors"}}"#)?;
    assert!(open_err(&d).contains("gone.safetensors"), "{}", open_err(&d));

    let d = fresh("config")?;
    std::fs::write(d.join("config.json"), r#"{"model_type": "llama", "hidden_size": 256}"#)?;
    let e = open_err(&d);
    assert!(e.contains("config.json: field `vocab_size`: missing"), "{e}");
    std::fs::remove_file(d.join("config.json"))?;
    assert!(open_err(&d).contains("config.json"));
    Ok(())
}

/// The model's reference against the megakernel decoder's whole-graph CPU reference, step by
/// step, on the same weights; the decoder's token choice is fed to both. Both forms of the
/// decoder's output projection (`grouped_output`).
fn compare_with_decoder(cfg: &ModelConfig, weights: &[Weight], dtype: DType, steps: usize, tol: f32) -> R {
    for grouped_output in [false, true] {
        let dcfg = DecoderConfig { grouped_output, ..cfg.decoder_config(16, dtype) };
        compare_with(cfg, &dcfg, weights, steps, tol)?;
    }
    Ok(())
}

/// [`compare_with_decoder`] with the decoder of shape `dcfg`.
fn compare_with(cfg: &ModelConfig, dcfg: &DecoderConfig, weights: &[Weight], steps: usize, tol: f32) -> R {
    let (capacity, dtype) = (dcfg.capacity, dcfg.dtype);
    let g = decoder_step("tiny", dcfg)?;
    let mut host = HostTensors::zeros(&g);
    // The decoder's inputs: a layer's q, k and v projections joined (`fuse_qkv`).
    for w in fuse_qkv(weights.iter().cloned().map(Ok)) {
        let w = w?;
        // Row-major, or tile by tile where the decoder stores it so (`contiguous_below`).
        let t = g.tensor_named(&w.name).ok_or(format!("no tensor {}", w.name))?;
        host.set(t, &w.clone().stored_as(&g.tensor(t).desc.shape)?.data.to_f32())?;
    }
    host.set(g.tensor_named("inv_freq").ok_or("no inv_freq")?, &cfg.inv_freq())?;
    let (token, logits) =
        (g.tensor_named("token").ok_or("no token")?, g.tensor_named("logits.out").ok_or("no logits")?);
    host.set(token, &[7.0])?;
    let mut model = Reference::new(cfg, weights.iter().cloned().map(Ok), capacity)?;
    for pos in 0..steps {
        let t = host.get(token)[0] as usize;
        let ours = model.step(t, pos)?;
        reference_step(&g, &mut host, &[pos as i32])?;
        let theirs = host.get(logits);
        let scale = ours.logits.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = ours.logits.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        let form = if dcfg.grouped_output { "grouped output" } else { "merged output" };
        println!("{} {dtype} ({form}) step {pos}: max logit difference {err:.3e} of scale {scale:.3e}", cfg.name);
        assert!(err <= tol * scale, "{dtype}, step {pos}: logits differ by {err} (scale {scale})");
        let chosen = host.get(token)[0] as usize;
        assert!(chosen < cfg.vocab, "step {pos}: the decoder chose {chosen}, past the vocabulary {}", cfg.vocab);
        let best = ours.logits[ours.next];
        assert!(
            ours.logits[chosen] >= best - tol * scale,
            "{dtype}, step {pos}: the decoder chose {chosen}, we {}",
            ours.next
        );
    }
    Ok(())
}

#[test]
fn the_reference_agrees_with_the_decoder_step_graph() -> R {
    let cfg = tiny_llama();
    let dir = tempfile::tempdir()?;
    write_checkpoint(dir.path(), &cfg, 21)?;
    let ckpt = Checkpoint::open(dir.path())?;
    // f32 decoder: only summation order differs.
    let weights = uneven_norms(collect(ckpt.weights(DType::F32))?);
    compare_with_decoder(&cfg, &weights, DType::F32, 6, 1e-4)?;
    // bf16 decoder: its buffers between kernels are rounded to bf16 (about 3 significant
    // digits at each of ~20 roundings), as in the decoder's own test against a direct model.
    let weights = uneven_norms(collect(ckpt.weights(DType::Bf16))?);
    compare_with_decoder(&cfg, &weights, DType::Bf16, 6, 0.03)?;
    let untied = ModelConfig { tie_embeddings: false, ..cfg };
    let weights = uneven_norms(collect(random_weights(&untied, 4, DType::F32))?);
    compare_with_decoder(&untied, &weights, DType::F32, 4, 1e-4)
}

#[test]
fn qwen3_decodes_on_the_reference_and_the_decoder_step_agrees() -> R {
    let cfg = tiny_qwen3();
    let dir = tempfile::tempdir()?;
    write_checkpoint(dir.path(), &cfg, 8)?;
    let ckpt = Checkpoint::open(dir.path())?;
    let weights = uneven_norms(collect(ckpt.weights(DType::F32))?);
    let mut model = Reference::new(&cfg, weights.iter().cloned().map(Ok), 16)?;
    let steps = model.generate(3, 8)?;
    assert!(steps.iter().all(|s| s.logits.len() == cfg.vocab && s.logits.iter().all(|v| v.is_finite())));
    // Greedy decoding is repeatable, and the q/k norm weights take part.
    let again = Reference::new(&cfg, weights.iter().cloned().map(Ok), 16)?.generate(3, 8)?;
    assert_eq!(steps, again);
    let mut other = weights.clone();
    for w in other.iter_mut().filter(|w| w.name.ends_with("q_norm")) {
        w.data = WeightData::F32(vec![2.0; cfg.head_dim]);
    }
    let changed = Reference::new(&cfg, other.into_iter().map(Ok), 16)?.generate(3, 2)?;
    assert_ne!(changed[1].logits, steps[1].logits);

    // The megakernel decoder (q/k norm fused into its RoPE task) computes the same model.
    compare_with_decoder(&cfg, &weights, DType::F32, 6, 1e-4)?;
    let weights = uneven_norms(collect(ckpt.weights(DType::Bf16))?);
    compare_with_decoder(&cfg, &weights, DType::Bf16, 6, 0.03)
}

#[test]
fn a_vocabulary_no_tile_width_divides_decodes_through_a_padded_head() -> R {
    // 1001 = 7 · 11 · 13 words: the decoder's head and logits take 1008 columns (zero weights
    // past 1001, skipped by the argmax), 63 tasks of 16 columns instead of one task of 1001.
    let cfg = ModelConfig { vocab: 1001, tie_embeddings: false, ..tiny_llama() };
    let g = decoder_step("tiny", &cfg.decoder_config(16, DType::F32))?;
    let logits = g.tensor_named("logits.out").ok_or("no logits")?;
    assert_eq!(g.tensor(logits).desc.shape, vec![1, 1008]);
    let head = g.tensor_named("lm_head").ok_or("no lm_head")?;
    assert_eq!(g.tensor(head).desc.shape.iter().product::<usize>(), cfg.hidden * 1008);
    let weights = uneven_norms(collect(random_weights(&cfg, 6, DType::F32))?);
    compare_with_decoder(&cfg, &weights, DType::F32, 4, 1e-4)
}

#[test]
fn reference_steps_out_of_range_are_errors() -> R {
    let cfg = tiny_llama();
    let mut model = Reference::new(&cfg, random_weights(&cfg, 1, DType::F32), 4)?;
    let e = model.step(cfg.vocab, 0).expect_err("an error").to_string();
    assert!(e.contains("token 512 is out of range (vocabulary 512)"), "{e}");
    let e = model.step(0, 1).expect_err("an error").to_string();
    assert!(e.contains("position 1 is out of range (capacity 4, 0 positions decoded)"), "{e}");
    model.generate(0, 4)?;
    assert!(model.step(0, 4).is_err());
    let partial = random_weights(&cfg, 1, DType::F32).filter(|w| !matches!(w, Ok(w) if w.name == "l1.wv"));
    let e = Reference::new(&cfg, partial, 4).expect_err("an error").to_string();
    assert!(e.contains("tensor `l1.wv` is missing"), "{e}");
    Ok(())
}

/// Random weights of a real model, timed (the whole of Llama-3.2-1B: 1.5·10⁹ values).
#[test]
#[ignore = "generates 1.5e9 values: run on a machine with many cores (-- --ignored --nocapture prints the rate)"]
fn random_weights_at_real_scale() -> R {
    let name = std::env::var("MIRAGE_MODEL").unwrap_or_else(|_| "llama-3.2-1b".into());
    let cfg = ModelConfig::preset(&name).ok_or("no such preset")?;
    let start = std::time::Instant::now();
    let mut values = 0usize;
    for w in random_weights(&cfg, 0, DType::Bf16) {
        values += w?.data.len();
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "{name}: {values} values in {s:.2} s ({:.2e} values/s, {} threads)",
        values as f64 / s,
        rayon::current_num_threads()
    );
    Ok(())
}

/// The model's reference on a checkpoint, as JSON for `benches/py/decode_baseline.py --compare`:
/// `MIRAGE_CHECKPOINT` is the directory (where it has no `config.json`, the random checkpoint of
/// preset `MIRAGE_MODEL`, default llama-3.2-1b, seed 0, is written there first); greedy decoding
/// of `MIRAGE_STEPS` (32) steps from token `MIRAGE_FIRST` (1), the logits of the first
/// `MIRAGE_DUMP` (4) steps; written to `MIRAGE_OUT` (default `reference.json` in the directory).
#[test]
#[ignore = "needs MIRAGE_CHECKPOINT and a large machine for real models"]
fn reference_tokens_of_a_checkpoint() -> R {
    let dir = std::env::var("MIRAGE_CHECKPOINT").map_err(|_| "set MIRAGE_CHECKPOINT to a checkpoint directory")?;
    let dir = std::path::PathBuf::from(dir);
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (steps, first, dump) = (env("MIRAGE_STEPS", 32), env("MIRAGE_FIRST", 1), env("MIRAGE_DUMP", 4));
    if !dir.join("config.json").is_file() {
        let name = std::env::var("MIRAGE_MODEL").unwrap_or_else(|_| "llama-3.2-1b".into());
        let cfg = ModelConfig::preset(&name).ok_or("no such preset")?;
        let start = std::time::Instant::now();
        write_checkpoint(&dir, &cfg, 0)?;
        println!("wrote {name} to {} in {:.1} s", dir.display(), start.elapsed().as_secs_f64());
    }
    let ckpt = Checkpoint::open(&dir)?;
    let start = std::time::Instant::now();
    let mut model = Reference::new(ckpt.config(), ckpt.weights(DType::F32), steps)?;
    println!("loaded in {:.1} s", start.elapsed().as_secs_f64());
    let start = std::time::Instant::now();
    let out = model.generate(first, steps)?;
    println!("{steps} steps in {:.1} s", start.elapsed().as_secs_f64());
    let tokens: Vec<usize> = out.iter().map(|s| s.next).collect();
    let logits: Vec<&Vec<f32>> = out.iter().take(dump).map(|s| &s.logits).collect();
    let json = serde_json::json!({ "model": ckpt.config().name, "first": first, "tokens": tokens, "logits": logits });
    let file = std::env::var("MIRAGE_OUT").map(std::path::PathBuf::from).unwrap_or_else(|_| dir.join("reference.json"));
    std::fs::write(&file, json.to_string())?;
    println!("tokens {tokens:?} -> {}", file.display());
    Ok(())
}
