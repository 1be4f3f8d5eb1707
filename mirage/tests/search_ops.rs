//! The superoptimizer on programs of the transformer operators beyond the benchmark set: layer
//! norm (lowered to `rms_norm` of the centered input) fuses into one kernel, a projection with
//! its rotary embedding, an LM head with its argmax, an embedding lookup with its norm and a
//! tanh-GELU MLP each get a verified µGraph of at most two kernels, and the float check accepts
//! them. The layer norm and embedding cases are ignored until the search finds them.
#![cfg(feature = "build")]

use mirage::lower::lower_source;
use mirage::search::{SearchConfig, SearchResult, describe, float_check, superoptimize};

/// Lowers one `#[mugraph]` function and superoptimizes it.
fn search(src: &str, cfg: &SearchConfig) -> (mirage::ir::KernelGraph, SearchResult) {
    let program = lower_source(src).unwrap_or_else(|e| panic!("{e}")).remove(0).graph;
    let r = superoptimize(&program, cfg, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.best.verified, Some(true));
    assert_eq!(float_check(&program, &r.best.graph).expect("float check runs"), Ok(()));
    println!(
        "{} kernel(s), {:.2} µs, search {:.2} s, {} states\n{}",
        r.best.graph.num_kernels(),
        r.best.cost.total_us,
        r.stats.search_time.as_secs_f64(),
        r.stats.states,
        describe(&r.best.graph)
    );
    (program, r)
}

#[test]
#[ignore = "open: the enumerator has no operator to apply the norm weight: `analyze` adds `Div` for rms_norm but not `Mul`, the block-level `rms_norm` and the library `rms_norm` kernel take no weight, so `rms_norm(c, eps, w)` (LayerNorm's last step) is unreachable unless the program multiplies elsewhere (the unweighted `layer_norm(x, 1e-5)` at this shape is one kernel in 400 states)"]
fn layer_norm_fuses_into_one_kernel() {
    let (_, r) = search(
        "#[mugraph]
         fn ln(x: Tensor<f16, 8, 768>, w: Tensor<f16, 1, 768>, b: Tensor<f16, 1, 768>) -> Tensor<f16, 8, 768> {
             layer_norm_weighted(x, w, b, 1e-5)
         }",
        &SearchConfig::single_kernel(),
    );
    assert_eq!(r.best.graph.num_kernels(), 1);
}

#[test]
fn a_projection_and_its_rotary_embedding() {
    let (_, r) = search(
        "#[mugraph]
         fn q_rope(x: Tensor<f16, 8, 512>, wq: Tensor<f16, 512, 512>, cos: Tensor<f16, 8, 32>, sin: Tensor<f16, 8, 32>)
             -> Tensor<f16, 8, 512>
         {
             rope(x.matmul(wq), cos, sin)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
fn an_lm_head_and_its_argmax() {
    let (_, r) = search(
        "#[mugraph]
         fn next_token(h: Tensor<f16, 2, 256>, w: Tensor<f16, 256, 2048>) -> Tensor<i32, 2, 1> {
             argmax(h.matmul(w), 1)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
#[ignore = "open: as for layer_norm_weighted, the weight of `rms_norm_weighted` cannot be applied (no `Mul` in the operator set, no weighted block or library rms_norm); `gather` itself is reachable as a library kernel"]
fn an_embedding_lookup_and_its_norm() {
    let (_, r) = search(
        "#[mugraph]
         fn embed(emb: Tensor<f16, 1000, 256>, ids: Tensor<i32, 8>, g: Tensor<f16, 1, 256>) -> Tensor<f16, 8, 256> {
             rms_norm_weighted(gather(emb, ids), g, 1e-6)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
fn a_tanh_gelu_mlp_is_one_kernel() {
    let (_, r) = search(
        "#[mugraph]
         fn mlp(x: Tensor<f16, 8, 256>, w: Tensor<f16, 256, 512>) -> Tensor<f16, 8, 512> {
             gelu_tanh(x.matmul(w)) * 0.5 + 1.0
         }",
        &SearchConfig::single_kernel(),
    );
    assert_eq!(r.best.graph.num_kernels(), 1);
}
