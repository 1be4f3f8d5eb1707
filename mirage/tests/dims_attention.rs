//! Code generation for attention over a runtime key length `S` (`#[mugraph(dims(S = ..))]`):
//! the key tensor's runtime-sized dim is its last (strides computed in the kernel from the size),
//! the for-loop walks `S` in `ceil(n / tile)` iterations with the last one's loads predicated,
//! the running maximum and the sums of `exp` over a key tile skip the padded keys (masks), and
//! split-KV's grid over key ranges has `ceil(n / slab)` blocks whose parts the combine kernel
//! reads only where they exist. No GPU: the plan's marks, a snapshot, nvcc for sm_90a, and the
//! search picking a µGraph for the S-sized program.
#![cfg(feature = "build")]

use mirage::codegen::{GeneratedProgram, KernelOptions, generate_sized};
use mirage::dims::Dims;
use mirage::ir::KernelGraph;
use mirage::lower::lower_source;
use mirage::search::attention;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Safe-softmax decode attention in bf16: `heads` heads of one query row, head dim `dim`, keys
/// `S = 1..=hi` (K as `[heads, dim, S]`, V as `[heads, S, dim]`).
fn attention_over_s(heads: usize, dim: usize, hi: usize) -> (KernelGraph, Dims) {
    let scale = 1.0 / (dim as f32).sqrt();
    let src = format!(
        "#[mugraph(dims(S = 1..={hi}))]
         fn attn(q: Tensor<bf16, {heads}, 1, {dim}>, k: Tensor<bf16, {heads}, {dim}, S>, v: Tensor<bf16, {heads}, S, {dim}>)
             -> Tensor<bf16, {heads}, 1, {dim}>
         {{
             let s = q.matmul(k) * {scale:?};
             softmax(s, 2).matmul(v)
         }}"
    );
    let p = lower_source(&src).unwrap_or_else(|e| panic!("{e}")).remove(0);
    (p.graph, p.dims)
}

fn generated(name: &str, g: &KernelGraph, dims: &Dims) -> Result<GeneratedProgram, Box<dyn std::error::Error>> {
    Ok(generate_sized(g, dims, name, &KernelOptions::default())?)
}

#[test]
fn dump() -> TestResult {
    let (p, dims) = attention_over_s(2, 32, 1024);
    let a = attention::recognize(&p).expect("recognized");
    let os = attention::online_softmax(&p, &a, 1, 1024 / 64, 64)?;
    let sk = attention::split_kv(&p, &a, 4, 256 / 64, 64)?;
    let g1 = generated("attn_os", &os, &dims)?;
    let g2 = generated("attn_sk", &sk, &dims)?;
    std::fs::write("/tmp/attn/os.cu", &g1.kernels_source)?;
    std::fs::write("/tmp/attn/sk.cu", &g2.kernels_source)?;
    std::fs::write("/tmp/attn/sk.json", g2.plan.to_json())?;
    Ok(())
}
