//! Helpers shared by integration tests: deterministic inputs (`dims.rs`, `dims_dsl.rs`), a
//! hand-built gated-MLP kernel (`dims_codegen.rs`, `param_align.rs`) and decode attention over a
//! runtime key length (`dims_attention.rs`, `param_align.rs`).
#![allow(dead_code, reason = "each test crate that includes this module uses some of its helpers")]

use mirage::dims::Dims;
use mirage::ir::{AccKind, BinaryOp, BlockGraph, DType, IrError, KernelGraph, TensorDesc, UnaryOp};
use mirage::lower::lower_source;
use mirage::reference::HostTensor;
use mirage::search::attention;

/// Deterministic inputs in [-1, 1) of the given shapes.
pub fn inputs(shapes: &[Vec<usize>], seed: u64) -> Vec<HostTensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: usize = s.iter().product();
            let data = (0..n)
                .map(|i| {
                    let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        ^ (seed + k as u64).wrapping_mul(0xBF58_476D);
                    ((h >> 40) % 2048) as f32 / 1024.0 - 1.0
                })
                .collect();
            HostTensor::new(s.clone(), data).expect("data fits the shape")
        })
        .collect()
}

/// The gated MLP `silu(x @ w1) * (x @ w2)`, x `[64, 128]`, w1 and w2 `[128, 256]`, f16, as one
/// kernel of grid `[4, 256 / cols]` (16 rows by `cols` columns per block) and `threads` threads.
pub fn gated_mlp(cols: usize, threads: usize) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[64, 128], DType::F16)?;
    let w1 = g.input(&[128, 256], DType::F16)?;
    let w2 = g.input(&[128, 256], DType::F16)?;
    let descs = vec![
        TensorDesc::new(&[64, 128], DType::F16),
        TensorDesc::new(&[128, 256], DType::F16),
        TensorDesc::new(&[128, 256], DType::F16),
    ];
    let mut bg = BlockGraph::new(descs, [4, 256 / cols, 1], threads, 1)?;
    let tx = bg.input(0, [Some(0), None, None], None)?;
    let t1 = bg.input(1, [None, Some(1), None], None)?;
    let t2 = bg.input(2, [None, Some(1), None], None)?;
    let a = bg.matmul(tx, t1)?;
    let b = bg.matmul(tx, t2)?;
    let s = bg.unary(UnaryOp::Silu, a)?;
    let y = bg.binary(BinaryOp::Mul, b, s)?;
    let acc = bg.accum(AccKind::Sum, &[y])?;
    bg.output(acc, [Some(0), Some(1), None])?;
    let out = g.custom(&[x, w1, w2], bg)?[0];
    g.output(out, None)?;
    Ok(g)
}

/// Safe-softmax decode attention in bf16: `heads` heads of one query row, head dim `dim`, keys
/// `S = 1..=hi` (K as `[heads, dim, S]`, V as `[heads, S, dim]`).
pub fn attention_over_s(heads: usize, dim: usize, hi: usize) -> (KernelGraph, Dims) {
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

/// The split-KV µGraph of [`attention_over_s`] at `S = 1..=1024`: 4 key ranges of 256, key
/// tiles of 64.
pub fn split_kv() -> Result<(KernelGraph, Dims), Box<dyn std::error::Error>> {
    let (p, dims) = attention_over_s(2, 32, 1024);
    let a = attention::recognize(&p).expect("recognized");
    Ok((attention::split_kv(&p, &a, 4, 256 / 64, 64)?, dims))
}

/// The online-softmax µGraph of [`attention_over_s`] at `S = 1..=1024`: key tiles of 64.
pub fn online_softmax() -> Result<(KernelGraph, Dims), Box<dyn std::error::Error>> {
    let (p, dims) = attention_over_s(2, 32, 1024);
    let a = attention::recognize(&p).expect("recognized");
    Ok((attention::online_softmax(&p, &a, 1, 1024 / 64, 64)?, dims))
}
