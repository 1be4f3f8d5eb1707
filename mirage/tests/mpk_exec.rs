#![cfg(feature = "build")]
//! The megakernel's task lists run on the CPU: every test-mode graph (each decode operator
//! alone, one layer, the two-layer toy model) executed task by task in the schedule's order —
//! the workers interleaved at random as the counters allow — gives exactly the whole-graph
//! reference; the decoder graph (also with Qwen3's q/k norm, and with its weights stored tile
//! by tile) matches an independent
//! implementation of the model; a
//! missing wait and out-of-range runtime indices are caught.

use mirage::ir::DType;
use mirage::mpk::decoder::{DecoderConfig, WeightStorage, decoder_step};
use mirage::mpk::exec::{ExecError, HostTensors, execute_step, reference_step};
use mirage::mpk::testmode::{cases, compare_step};
use mirage::mpk::{Builtin, MpkOptions, StepGraph, TensorId, compile};

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn opts(workers: usize) -> MpkOptions {
    MpkOptions { workers, ..MpkOptions::default() }
}

#[test]
fn every_test_graph_runs_its_schedule_exactly_like_the_reference() -> R {
    for case in cases()? {
        let name = case.graph.name().to_owned();
        for workers in [1, 7] {
            let c = compile(&case.graph, &opts(workers)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut reference = case.init(1);
            let steps = case.steps.min(3);
            for step in 0..steps {
                let params = case.params(step);
                let before = reference.clone();
                reference_step(&c.graph, &mut reference, &params).unwrap_or_else(|e| panic!("{name}: {e}"));
                for seed in 0..3 {
                    let mut run = before.clone();
                    execute_step(&c, &mut run, &params, seed).unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
                    for (i, t) in c.graph.tensors().iter().enumerate() {
                        let (a, b) = (run.get(TensorId(i)), reference.get(TensorId(i)));
                        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(same, "{name}, {workers} workers, step {step}, seed {seed}: `{}` differs", t.name);
                    }
                }
                // The reference agrees with itself through the test-mode comparison.
                compare_step(&c.graph, &before, &reference, &params, 0.0).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
    Ok(())
}

/// The toy decoder written directly (f32 math on the same bf16-rounded weights), one step.
struct Direct<'a> {
    cfg: &'a DecoderConfig,
    g: &'a StepGraph,
    host: &'a HostTensors,
}

impl Direct<'_> {
    fn w(&self, name: &str) -> &[f32] {
        self.host.get(self.g.tensor_named(name).expect("a tensor of the decoder"))
    }
    fn matvec(&self, x: &[f32], name: &str) -> Vec<f32> {
        let id = self.g.tensor_named(name).expect("a tensor of the decoder");
        let stored = self.host.get(id);
        let (k, n) = (x.len(), stored.len() / x.len());
        // The graph's input may hold the weight tile by tile (`contiguous_below`).
        let storage = WeightStorage::of_shape(k, n, &self.g.tensors()[id.0].desc.shape).expect("a [k, n] weight");
        let w = storage.load(k, n, stored).expect("k · n values");
        (0..n).map(|j| x.iter().enumerate().map(|(i, xi)| xi * w[i * n + j]).sum()).collect()
    }
    fn norm(&self, x: &[f32], name: &str) -> Vec<f32> {
        let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let r = (ms + self.cfg.eps).sqrt();
        x.iter().zip(self.w(name)).map(|(v, w)| v / r * w).collect()
    }
    fn rope(&self, x: &mut [f32], pos: usize) {
        let d = self.cfg.head_dim;
        let inv = self.w("inv_freq");
        for head in x.chunks_mut(d) {
            for i in 0..d / 2 {
                let (s, c) = (pos as f64 * f64::from(inv[i])).sin_cos();
                let (a, b) = (head[i], head[i + d / 2]);
                head[i] = a * c as f32 - b * s as f32;
                head[i + d / 2] = b * c as f32 + a * s as f32;
            }
        }
    }
    /// Logits of one step at `pos`; `caches` are updated.
    fn step(&self, token: usize, pos: usize, caches: &mut [(Vec<f32>, Vec<f32>)]) -> Vec<f32> {
        let (cfg, h, d) = (self.cfg, self.cfg.hidden, self.cfg.head_dim);
        let mut x = self.w("embed")[token * h..(token + 1) * h].to_vec();
        for (l, (kc, vc)) in caches.iter_mut().enumerate() {
            let p = |s: &str| format!("l{l}.{s}");
            let n = self.norm(&x, &p("attn_norm"));
            // One projection of q | k | v (`l{i}.wqkv`).
            let qkv = self.matvec(&n, &p("wqkv"));
            let (qw, kvw) = (cfg.heads * d, cfg.kv_heads * d);
            let (mut q, mut k, v) = (qkv[..qw].to_vec(), qkv[qw..qw + kvw].to_vec(), qkv[qw + kvw..].to_vec());
            if cfg.qk_norm {
                // per head, before RoPE
                q = q.chunks(d).flat_map(|head| self.norm(head, &p("q_norm"))).collect();
                k = k.chunks(d).flat_map(|head| self.norm(head, &p("k_norm"))).collect();
            }
            self.rope(&mut q, pos);
            self.rope(&mut k, pos);
            for g in 0..cfg.kv_heads {
                let at = (g * cfg.capacity + pos) * d;
                kc[at..at + d].copy_from_slice(&k[g * d..(g + 1) * d]);
                vc[at..at + d].copy_from_slice(&v[g * d..(g + 1) * d]);
            }
            let mut a = vec![0.0f32; cfg.heads * d];
            for head in 0..cfg.heads {
                let g = head / (cfg.heads / cfg.kv_heads);
                let qh = &q[head * d..(head + 1) * d];
                let s: Vec<f32> = (0..=pos)
                    .map(|j| {
                        qh.iter().zip(&kc[(g * cfg.capacity + j) * d..]).map(|(a, b)| a * b).sum::<f32>()
                            / (d as f32).sqrt()
                    })
                    .collect();
                let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = s.iter().map(|v| (v - m).exp()).collect();
                let t: f32 = e.iter().sum();
                for i in 0..d {
                    a[head * d + i] = (0..=pos).map(|j| e[j] * vc[(g * cfg.capacity + j) * d + i]).sum::<f32>() / t;
                }
            }
            let o = self.matvec(&a, &p("wo"));
            x.iter_mut().zip(o).for_each(|(xi, oi)| *xi += oi);
            let n = self.norm(&x, &p("mlp_norm"));
            let (gate, up) = (self.matvec(&n, &p("wg")), self.matvec(&n, &p("wu")));
            let m: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let dn = self.matvec(&m, &p("wd"));
            x.iter_mut().zip(dn).for_each(|(xi, di)| *xi += di);
        }
        let n = self.norm(&x, "final_norm");
        self.matvec(&n, "lm_head")
    }
}

#[test]
fn the_decoder_graph_computes_the_model() -> R {
    let toy = DecoderConfig::toy();
    decoder_matches_the_model("toy", &toy)?;
    // Qwen3's q/k norm, head_dim 128 over hidden 256 with 4 heads
    let qwen = DecoderConfig { layers: 1, qk_norm: true, head_dim: 128, eps: 1e-6, ..toy.clone() };
    decoder_matches_the_model("layer_qk_norm", &qwen)?;
    // every weight tile by tile
    let contiguous = DecoderConfig { layers: 1, contiguous_below: 64, ..toy.clone() };
    decoder_matches_the_model("layer_contiguous", &contiguous)?;
    // the output projection by KV head group, its partial sums added by the MLP
    let grouped = DecoderConfig { layers: 1, grouped_output: true, ..toy };
    decoder_matches_the_model("layer_grouped", &grouped)?;
    decoder_matches_the_model("layer_grouped_qk_norm", &DecoderConfig { grouped_output: true, ..qwen })
}

/// The test case `name` (a decoder of shape `cfg`) against [`Direct`] over 4 steps.
fn decoder_matches_the_model(name: &str, cfg: &DecoderConfig) -> R {
    let case = cases()?.into_iter().find(|c| c.graph.name() == name).ok_or("no such test case")?;
    let g = &case.graph;
    let mut host = case.init(7);
    let mut caches: Vec<(Vec<f32>, Vec<f32>)> = (0..cfg.layers)
        .map(|l| {
            let get =
                |s: &str| host.get(g.tensor_named(&format!("l{l}.{s}")).expect("a cache of the decoder")).to_vec();
            (get("k_cache"), get("v_cache"))
        })
        .collect();
    let token_id = g.tensor_named("token").ok_or("no such tensor")?;
    let logits_id = g.tensor_named("logits.out").ok_or("no such tensor")?;
    for pos in 0..4 {
        let token = host.get(token_id)[0] as usize;
        let direct = Direct { cfg, g, host: &host }.step(token, pos, &mut caches);
        reference_step(g, &mut host, &[pos as i32])?;
        let logits = host.get(logits_id);
        let scale = direct.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = logits.iter().zip(&direct).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        // bf16 buffers between the kernels: about 3 significant digits at each of ~20 roundings.
        assert!(err < 0.03 * scale, "{name} step {pos}: logits differ by {err} (scale {scale})");
        let best = direct.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let chosen = host.get(token_id)[0] as usize;
        assert!(direct[chosen] >= best - 0.03 * scale, "{name} step {pos}: token {chosen} is not (near) the best");
    }
    Ok(())
}

#[test]
fn a_missing_wait_shows_up_as_a_read_of_unwritten_data() -> R {
    let mut g = StepGraph::new("chain")?;
    let x = g.input("x", &[8], DType::F32)?;
    let a = g.builtin("a", Builtin::Nop { all: false }, &[x])?[0];
    g.builtin("b", Builtin::Nop { all: false }, &[a])?;
    let mut c = compile(&g, &opts(4))?;
    // a's tiles on workers 0 and 1, b's on 2 and 3: only the waits order them.
    c.schedule.workers = vec![(0..4).collect(), (4..8).collect(), (8..12).collect(), (12..16).collect()];
    let host = HostTensors::zeros(&c.graph);
    for seed in 0..4 {
        execute_step(&c, &mut host.clone(), &[], seed)?;
    }
    for w in &mut c.sync.waits[8..] {
        w.clear();
    }
    let caught =
        (0..32).any(|seed| matches!(execute_step(&c, &mut host.clone(), &[], seed), Err(ExecError::Unwritten { .. })));
    assert!(caught, "no interleaving of 32 read b's input before a wrote it");
    Ok(())
}

#[test]
fn runtime_indices_out_of_range_are_errors() -> R {
    let cfg = DecoderConfig { layers: 1, ..DecoderConfig::toy() };
    let g = decoder_step("one", &cfg)?;
    let c = compile(&g, &opts(4))?;
    let mut host = HostTensors::zeros(&c.graph);
    host.set(g.tensor_named("token").ok_or("no such tensor")?, &[cfg.vocab as f32])?;
    let e = execute_step(&c, &mut host, &[0], 0).expect_err("an error").to_string();
    assert!(e.contains("tensor `token` is out of range: expected 0 <= index < 512, found 512"), "{e}");
    let mut host = HostTensors::zeros(&c.graph);
    let e = reference_step(&c.graph, &mut host, &[cfg.capacity as i32]).expect_err("an error").to_string();
    assert!(e.contains("runtime parameter `pos` is out of range: expected 0 <= index < 128, found 128"), "{e}");
    Ok(())
}

#[test]
fn the_step_comparison_accepts_near_ties_of_argmax_and_nothing_else() -> R {
    let case = cases()?.into_iter().find(|c| c.graph.name() == "op_argmax").ok_or("no such test case")?;
    let g = &case.graph;
    let mut before = case.init(1);
    let logits = g.tensor_named("logits").ok_or("no such tensor")?;
    let mut l = vec![0.0f32; 512];
    l[100] = 1.0;
    l[300] = 0.999; // a near-tie in another chunk
    l[7] = 0.5;
    // a chunk of small logits (384..448, chunk 64): its near-tie is judged by the margin of the
    // whole tensor's magnitude, as the logits themselves are compared
    l[400] = 0.25;
    l[401] = 0.234375; // 1/64 below (bf16 values)
    l[402] = 0.1875;
    before.set(logits, &l)?;
    let mut after = before.clone();
    reference_step(g, &mut after, &[])?;
    let token = g.tensor_named("token").ok_or("no such tensor")?;
    assert_eq!(after.get(token), &[100.0]);
    compare_step(g, &before, &after, &[], 2e-2)?;
    after.set(token, &[300.0])?;
    compare_step(g, &before, &after, &[], 2e-2)?;
    after.set(token, &[7.0])?;
    let e = compare_step(g, &before, &after, &[], 2e-2).expect_err("a far choice");
    assert!(e.contains("`token` element 0: the device chose index 7, the CPU 100"), "{e}");
    // a value of a partial is compared as a value
    let partial = g.tensor_named("argmax.out").ok_or("no such tensor")?;
    let mut p = after.get(partial).to_vec();
    after.set(token, &[100.0])?;
    assert_eq!((p[12], p[13]), (0.25, 400.0));
    let mut near = p.clone();
    // 1/64 below: within 2e-2 of the largest logit, 1.0 (not of the chunk's own largest, 0.25)
    (near[12], near[13]) = (0.234375, 401.0);
    after.set(partial, &near)?;
    compare_step(g, &before, &after, &[], 2e-2)?;
    (near[12], near[13]) = (0.25, 402.0); // index 402's logit is 1/16 below
    after.set(partial, &near)?;
    let e = compare_step(g, &before, &after, &[], 2e-2).expect_err("a far choice in a small chunk");
    assert!(e.contains("`argmax.out` element 13: the device chose index 402, the CPU 400"), "{e}");
    p[2] += 0.5;
    after.set(partial, &p)?;
    assert!(compare_step(g, &before, &after, &[], 2e-2).is_err());
    Ok(())
}
