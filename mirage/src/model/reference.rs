//! The model's own CPU decode step, written from the [`ModelConfig`] and the decoder's tensors
//! alone (independent of the megakernel's step graph, to check it against the Hugging Face
//! model): f32 arithmetic on the loaded weights, batch 1, greedy.
//!
//! One step at position `pos` with token `t`: `x = embed[t]`; per layer
//! `n = rms_norm(x) · attn_norm`, `q = n·Wq`, `k = n·Wk`, `v = n·Wv` split into heads, (q/k norm:
//! each head `rms_norm(·) · q_norm` / `k_norm`), RoPE rotate-half on q and k with
//! [`ModelConfig::inv_freq`] at angle `pos · inv_freq[i]`, k and v appended to the layer's cache
//! at `pos`, grouped-query attention of each query head over its KV head's positions `0..=pos`
//! (scale `1/sqrt(head_dim)`), `x += a·Wo`, `n = rms_norm(x) · mlp_norm`,
//! `x += (silu(n·Wg) · (n·Wu))·Wd`; then `logits = (rms_norm(x) · final_norm)·lm_head` and the
//! next token is the first index of the largest logit.

use std::collections::HashMap;

use rayon::prelude::*;

use super::weights::weight_layout;
use super::{ModelConfig, ModelError, Weight};

/// One step's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The logits over the vocabulary.
    pub logits: Vec<f32>,
    /// The greedy next token (the first index of the largest logit).
    pub next: usize,
}

/// A model on the CPU: its weights (f32) and KV caches.
#[derive(Clone, Debug)]
pub struct Reference {
    cfg: ModelConfig,
    weights: HashMap<String, Vec<f32>>,
    inv_freq: Vec<f32>,
    capacity: usize,
    /// Per layer `[kv_heads, capacity, head_dim]`.
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
    /// Positions written so far (`0..filled`).
    filled: usize,
}

impl Reference {
    /// The model `cfg` with the decoder's tensors `weights` (a stream such as
    /// [`Checkpoint::weights`](super::Checkpoint::weights) or [`random_weights`](super::random_weights))
    /// and KV caches of `capacity` positions. Every tensor of the layout must be there with its
    /// shape.
    pub fn new(
        cfg: &ModelConfig,
        weights: impl IntoIterator<Item = Result<Weight, ModelError>>,
        capacity: usize,
    ) -> Result<Reference, ModelError> {
        let mut got: HashMap<String, Weight> = HashMap::new();
        for w in weights {
            let w = w?;
            got.insert(w.name.clone(), w);
        }
        let mut map = HashMap::new();
        for spec in weight_layout(cfg) {
            let w = got.remove(&spec.name).ok_or_else(|| ModelError::Missing {
                name: spec.name.clone(),
                files: "the weights given to the reference".into(),
            })?;
            if w.shape != spec.shape {
                return Err(ModelError::Step(format!(
                    "weight `{}`: expected shape {:?}, found {:?}",
                    spec.name, spec.shape, w.shape
                )));
            }
            map.insert(spec.name, w.data.to_f32());
        }
        let cache = vec![0.0; cfg.kv_heads * capacity * cfg.head_dim];
        Ok(Reference {
            cfg: cfg.clone(),
            weights: map,
            inv_freq: cfg.inv_freq(),
            capacity,
            k_cache: vec![cache.clone(); cfg.layers],
            v_cache: vec![cache; cfg.layers],
            filled: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn w(&self, name: &str) -> &[f32] {
        // Every layout name was inserted by `new`.
        self.weights.get(name).map_or(&[], Vec::as_slice)
    }

    /// One decode step: token `token` at position `pos` (at most the number of positions
    /// decoded so far, below the capacity; an earlier position overwrites the cache from there).
    pub fn step(&mut self, token: usize, pos: usize) -> Result<Step, ModelError> {
        let c = self.cfg.clone();
        if token >= c.vocab {
            return Err(ModelError::Step(format!("token {token} is out of range (vocabulary {})", c.vocab)));
        }
        if pos >= self.capacity || pos > self.filled {
            return Err(ModelError::Step(format!(
                "position {pos} is out of range (capacity {}, {} positions decoded)",
                self.capacity, self.filled
            )));
        }
        let (h, d) = (c.hidden, c.head_dim);
        let mut x = self.w("embed")[token * h..(token + 1) * h].to_vec();
        for l in 0..c.layers {
            let p = |s: &str| format!("l{l}.{s}");
            let n = rms_norm(&x, self.w(&p("attn_norm")), c.eps);
            let mut q = matvec(&n, self.w(&p("wq")));
            let mut k = matvec(&n, self.w(&p("wk")));
            let v = matvec(&n, self.w(&p("wv")));
            if c.qk_norm {
                for head in q.chunks_mut(d) {
                    let normed = rms_norm(head, self.w(&p("q_norm")), c.eps);
                    head.copy_from_slice(&normed);
                }
                for head in k.chunks_mut(d) {
                    let normed = rms_norm(head, self.w(&p("k_norm")), c.eps);
                    head.copy_from_slice(&normed);
                }
            }
            rope(&mut q, d, pos, &self.inv_freq);
            rope(&mut k, d, pos, &self.inv_freq);
            for g in 0..c.kv_heads {
                let at = (g * self.capacity + pos) * d;
                self.k_cache[l][at..at + d].copy_from_slice(&k[g * d..(g + 1) * d]);
                self.v_cache[l][at..at + d].copy_from_slice(&v[g * d..(g + 1) * d]);
            }
            let a = self.attention(l, &q, pos);
            let o = matvec(&a, self.w(&p("wo")));
            x.iter_mut().zip(&o).for_each(|(xi, oi)| *xi += oi);
            let n = rms_norm(&x, self.w(&p("mlp_norm")), c.eps);
            let gate = matvec(&n, self.w(&p("wg")));
            let up = matvec(&n, self.w(&p("wu")));
            let m: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let down = matvec(&m, self.w(&p("wd")));
            x.iter_mut().zip(&down).for_each(|(xi, di)| *xi += di);
        }
        self.filled = pos + 1;
        let n = rms_norm(&x, self.w("final_norm"), c.eps);
        let logits = matvec(&n, self.w("lm_head"));
        let next = argmax(&logits);
        Ok(Step { logits, next })
    }

    /// Greedy decoding: `steps` tokens after `first` at positions `0..steps`, each step's next
    /// token fed to the next; returns every step's result.
    pub fn generate(&mut self, first: usize, steps: usize) -> Result<Vec<Step>, ModelError> {
        let mut token = first;
        let mut out = Vec::with_capacity(steps);
        for pos in 0..steps {
            let s = self.step(token, pos)?;
            token = s.next;
            out.push(s);
        }
        Ok(out)
    }

    /// Attention of every query head of `q` over positions `0..=pos` of layer `l`'s cache.
    fn attention(&self, l: usize, q: &[f32], pos: usize) -> Vec<f32> {
        let c = &self.cfg;
        let (d, group) = (c.head_dim, c.heads / c.kv_heads);
        let scale = 1.0 / (d as f32).sqrt();
        let (kc, vc) = (&self.k_cache[l], &self.v_cache[l]);
        let mut out = vec![0.0; c.heads * d];
        out.par_chunks_mut(d).enumerate().for_each(|(head, o)| {
            let g = head / group;
            let qh = &q[head * d..(head + 1) * d];
            let row = |j: usize| (g * self.capacity + j) * d;
            let scores: Vec<f32> = (0..=pos)
                .map(|j| qh.iter().zip(&kc[row(j)..row(j) + d]).map(|(a, b)| a * b).sum::<f32>() * scale)
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = e.iter().sum();
            for (j, ej) in e.iter().enumerate() {
                let vr = &vc[row(j)..row(j) + d];
                o.iter_mut().zip(vr).for_each(|(oi, vi)| *oi += ej / total * vi);
            }
        });
        out
    }
}

/// `x / sqrt(mean(x²) + eps) · w`.
fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, wi)| v * r * wi).collect()
}

/// `x · W` with `W [len(x), out]` row-major, columns in parallel bands.
fn matvec(x: &[f32], w: &[f32]) -> Vec<f32> {
    let out_len = w.len() / x.len().max(1);
    let mut out = vec![0.0; out_len];
    const BAND: usize = 256;
    out.par_chunks_mut(BAND).enumerate().for_each(|(b, o)| {
        let c0 = b * BAND;
        for (i, xi) in x.iter().enumerate() {
            let row = &w[i * out_len + c0..i * out_len + c0 + o.len()];
            o.iter_mut().zip(row).for_each(|(oj, wj)| *oj += xi * wj);
        }
    });
    out
}

/// Rotate-half RoPE of each head of `x` at position `pos`.
fn rope(x: &mut [f32], d: usize, pos: usize, inv_freq: &[f32]) {
    let half = d / 2;
    for head in x.chunks_mut(d) {
        for (i, f) in inv_freq.iter().enumerate() {
            let (s, c) = (pos as f64 * f64::from(*f)).sin_cos();
            let (s, c) = (s as f32, c as f32);
            let (a, b) = (head[i], head[i + half]);
            head[i] = a * c - b * s;
            head[i + half] = b * c + a * s;
        }
    }
}

/// The first index of the largest value.
fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_at_position_zero_is_the_identity_and_rotates_pairs_half_apart() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        rope(&mut x, 4, 0, &[1.0, 0.5]);
        assert_eq!(x, vec![1.0, 2.0, 3.0, 4.0]);
        let mut x = vec![1.0, 0.0, 0.0, 0.0];
        rope(&mut x, 4, 1, &[std::f32::consts::FRAC_PI_2, 0.0]);
        // Pair (0, 2) rotates by 90°: (1, 0) -> (0, 1).
        assert!(x[0].abs() < 1e-6 && (x[2] - 1.0).abs() < 1e-6 && x[1] == 0.0 && x[3] == 0.0, "{x:?}");
    }

    #[test]
    fn matvec_and_argmax_follow_their_definitions() {
        // [1, 2] · [[1, 2, 3], [4, 5, 6]] = [9, 12, 15].
        assert_eq!(matvec(&[1.0, 2.0], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), vec![9.0, 12.0, 15.0]);
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        let n = rms_norm(&[3.0, 4.0], &[1.0, 2.0], 0.0);
        let r = (12.5f32).sqrt();
        assert_eq!(n, vec![3.0 / r, 8.0 / r]);
    }
}
