//! The benchmark programs as kernel graphs, and the golden µGraphs Mirage found for
//! them (`mirage/goldens/`), paired with their programs.

use crate::import::{ImportError, ImportOptions, import_mirage_json_with};
use crate::ir::{DType, IrError, KernelGraph};

/// `silu(X @ W1) * (X @ W2)` with `X[m, k]`, `W1, W2 [k, n]`.
pub fn gated_mlp(m: usize, k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], dtype)?;
    let w1 = g.input(&[k, n], dtype)?;
    let w2 = g.input(&[k, n], dtype)?;
    let a = g.matmul(x, w1)?;
    let a = g.silu(a)?;
    let b = g.matmul(x, w2)?;
    let o = g.mul(a, b)?;
    g.output(o, None)?;
    Ok(g)
}

/// `rms_norm(X) @ W` (no epsilon, no weight) with `X[m, k]`, `W[k, n]`.
pub fn rmsnorm_linear(m: usize, k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], dtype)?;
    let w = g.input(&[k, n], dtype)?;
    let y = g.rms_norm(x, 0.0, None)?;
    let o = g.matmul(y, w)?;
    g.output(o, None)?;
    Ok(g)
}

/// `X @ W + (X @ A) @ B` with `X[m, k]`, `W[k, n]`, `A[k, r]`, `B[r, n]`.
pub fn lora(m: usize, k: usize, n: usize, r: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[m, k], dtype)?;
    let w = g.input(&[k, n], dtype)?;
    let a = g.input(&[k, r], dtype)?;
    let b = g.input(&[r, n], dtype)?;
    let xw = g.matmul(x, w)?;
    let xa = g.matmul(x, a)?;
    let xab = g.matmul(xa, b)?;
    let o = g.add(xw, xab)?;
    g.output(o, None)?;
    Ok(g)
}

/// Attention without the max subtraction, as Mirage writes it: `E = exp(Q @ K)`,
/// `(E / sum(E, 2)) @ V` with `Q[h, q, d]`, `K[h, d, s]`, `V[h, s, d]`.
pub fn gqa(h: usize, q: usize, s: usize, d: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let qt = g.input(&[h, q, d], dtype)?;
    let k = g.input(&[h, d, s], dtype)?;
    let v = g.input(&[h, s, d], dtype)?;
    let qk = g.matmul(qt, k)?;
    let e = g.exp(qk)?;
    let sum = g.reduce_sum(e, 2)?;
    let p = g.div(e, sum)?;
    let o = g.matmul(p, v)?;
    g.output(o, None)?;
    Ok(g)
}

/// nTrans block: `rms_norm(X + alpha * (rms_norm(H) + X))` with `H, X, alpha [m, n]`.
pub fn ntrans(m: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let h = g.input(&[m, n], dtype)?;
    let x = g.input(&[m, n], dtype)?;
    let alpha = g.input(&[m, n], dtype)?;
    let hn = g.rms_norm(h, 0.0, None)?;
    let s = g.add(hn, x)?;
    let t = g.mul(alpha, s)?;
    let u = g.add(x, t)?;
    let o = g.rms_norm(u, 0.0, None)?;
    g.output(o, None)?;
    Ok(g)
}

/// Qwen2.5 QKV pre-norm: `(rms_norm(X) * G) @ W` with `X, G [1, k]` and a column-major `W[k, n]`.
pub fn qwen_rmsnorm_gain_linear(k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[1, k], dtype)?;
    let gain = g.input(&[1, k], dtype)?;
    let w = g.input_strided(&[k, n], &[1, k], dtype)?;
    let y = g.rms_norm(x, 0.0, None)?;
    let y = g.mul(y, gain)?;
    let o = g.matmul(y, w)?;
    g.output(o, None)?;
    Ok(g)
}

/// Qwen2.5 MLP down projection with its gate: `(silu(X) * Y) @ W` with `X, Y [1, k]` and a
/// column-major `W[k, n]`.
pub fn qwen_silu_gate_linear(k: usize, n: usize, dtype: DType) -> Result<KernelGraph, IrError> {
    let mut g = KernelGraph::new();
    let x = g.input(&[1, k], dtype)?;
    let y = g.input(&[1, k], dtype)?;
    let w = g.input_strided(&[k, n], &[1, k], dtype)?;
    let s = g.silu(x)?;
    let s = g.mul(s, y)?;
    let o = g.matmul(s, w)?;
    g.output(o, None)?;
    Ok(g)
}

/// A file of µGraphs Mirage found, with the program it was searched for.
#[derive(Clone, Copy)]
pub struct GoldenCase {
    /// The file's name without `.json`.
    pub name: &'static str,
    /// The file's text.
    pub json: &'static str,
    /// The element type of the program (the file's 16-bit code is read as this).
    pub dtype: DType,
    /// Builds the program.
    pub program: fn() -> Result<KernelGraph, IrError>,
}

impl GoldenCase {
    /// Imports every candidate of the file.
    pub fn candidates(&self) -> Result<Vec<KernelGraph>, ImportError> {
        import_mirage_json_with(self.json, ImportOptions { half_dtype: self.dtype })
    }

    /// The name as a C identifier (`qwen2.5_…` → `qwen2_5_…`).
    pub fn ident(&self) -> String {
        self.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
    }

    /// The program (named `{ident}_program`) followed by every candidate (`{ident}_c{j}`).
    pub fn named_graphs(&self) -> Result<Vec<(String, KernelGraph)>, String> {
        let base = self.ident();
        let program = (self.program)().map_err(|e| format!("{}: program: {e}", self.name))?;
        let mut out = vec![(format!("{base}_program"), program)];
        let candidates = self.candidates().map_err(|e| format!("{}: {e}", self.name))?;
        out.extend(candidates.into_iter().enumerate().map(|(j, c)| (format!("{base}_c{j}"), c)));
        Ok(out)
    }
}

const F16: DType = DType::F16;
const BF16: DType = DType::Bf16;

/// Every golden file with its program (the table of `mirage/goldens/README.md`'s source).
pub fn golden_cases() -> Vec<GoldenCase> {
    vec![
        GoldenCase {
            name: "gated_mlp",
            json: include_str!("../../goldens/gated_mlp.json"),
            dtype: F16,
            program: || gated_mlp(8, 4096, 4096, F16),
        },
        GoldenCase {
            name: "rmsnorm_bs1",
            json: include_str!("../../goldens/rmsnorm_bs1.json"),
            dtype: F16,
            program: || rmsnorm_linear(2, 4096, 6144, F16),
        },
        GoldenCase {
            name: "rmsnorm_bs8",
            json: include_str!("../../goldens/rmsnorm_bs8.json"),
            dtype: F16,
            program: || rmsnorm_linear(16, 4096, 6144, F16),
        },
        GoldenCase {
            name: "lora",
            json: include_str!("../../goldens/lora.json"),
            dtype: F16,
            program: || lora(16, 256, 4096, 16, F16),
        },
        GoldenCase {
            name: "gqa_bs1",
            json: include_str!("../../goldens/gqa_bs1.json"),
            dtype: F16,
            program: || gqa(2, 256, 4096, 64, F16),
        },
        GoldenCase {
            name: "ntrans_bs1",
            json: include_str!("../../goldens/ntrans_bs1.json"),
            dtype: F16,
            program: || ntrans(8, 4096, F16),
        },
        GoldenCase {
            name: "qwen2.5_659704256b064506",
            json: include_str!("../../goldens/qwen2.5_659704256b064506.json"),
            dtype: BF16,
            program: || qwen_rmsnorm_gain_linear(3584, 4608, BF16),
        },
        GoldenCase {
            name: "qwen2.5_64644b2e7bbffb94",
            json: include_str!("../../goldens/qwen2.5_64644b2e7bbffb94.json"),
            dtype: BF16,
            program: || qwen_silu_gate_linear(18944, 3584, BF16),
        },
        GoldenCase {
            name: "qwen2.5_6508b4ab6af4f866",
            json: include_str!("../../goldens/qwen2.5_6508b4ab6af4f866.json"),
            dtype: BF16,
            program: || qwen_silu_gate_linear(11008, 2048, BF16),
        },
    ]
}

/// Small graphs that together cover every construct code generation must handle: every kernel
/// operator (lowered to default block graphs; rope, gather, argmax and layer norm in
/// `index_and_rotation_cases`), every accumulator, input iterators with a matrix
/// of imap / forloop combinations and output savers with several omaps, strided inputs, and tile
/// shapes that are not multiples of the tensor-core tile. Each is built for `dtype`.
pub fn coverage_cases(dtype: DType) -> Result<Vec<(String, KernelGraph)>, IrError> {
    use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, Domain, Law, Scalar, UnaryOp};
    let mut out: Vec<(String, KernelGraph)> = Vec::new();
    let d = dtype;
    let mut push = |name: &str, g: KernelGraph| out.push((name.to_string(), g));

    // Kernel-level operators.
    for op in UnaryOp::ALL {
        let mut g = KernelGraph::new();
        let x = g.input(&[6, 40], d)?;
        // Operators of positive numbers (sqrt, recip) get positive, well-conditioned operands.
        let x = match op.spec().domain {
            Domain::Positive => {
                let e = g.exp(x)?;
                g.unary(UnaryOp::MulScalar { c: Scalar(2.0) }, e)?
            }
            Domain::Real => x,
        };
        let y = g.unary(op, x)?;
        g.output(y, None)?;
        push(&format!("unary_{}", op.name()), g);
    }
    // The operators of all reals over 16 times the test range (the GPU test draws inputs from a
    // narrow one): saturation of tanh and sigmoid, the tails of silu and gelu. The exponential is
    // left out: over [-64, 64] it leaves f16 (its own case covers it).
    let mut g = KernelGraph::new();
    let x = g.input(&[6, 40], d)?;
    let wide = g.unary(UnaryOp::MulScalar { c: Scalar(16.0) }, x)?;
    for op in UnaryOp::ALL.into_iter().filter(|op| op.spec().domain == Domain::Real && op.spec().law != Law::Exp) {
        let y = g.unary(op, wide)?;
        g.output(y, None)?;
    }
    push("unary_wide_range", g);
    for op in BinaryOp::ALL {
        let mut g = KernelGraph::new();
        let a = g.input(&[3, 5, 24], d)?;
        let b = g.input(&[3, 1, 24], d)?;
        let (a, b) = if matches!(op, BinaryOp::Div | BinaryOp::Pow) {
            let ea = g.exp(a)?;
            let eb = g.exp(b)?;
            (if op == BinaryOp::Pow { ea } else { a }, eb)
        } else {
            (a, b)
        };
        let y = g.binary(op, a, b)?;
        g.output(y, None)?;
        push(&format!("binary_{}_broadcast", op.name()), g);
    }
    for (name, a_shape, b_shape) in [
        ("matmul_5x24x13", vec![5, 24], vec![24, 13]),
        ("matmul_16x64x32", vec![16, 64], vec![64, 32]),
        ("matmul_batched_3x7x40x9", vec![3, 7, 40], vec![3, 40, 9]),
    ] {
        let mut g = KernelGraph::new();
        let a = g.input(&a_shape, d)?;
        let b = g.input(&b_shape, d)?;
        let y = g.matmul(a, b)?;
        g.output(y, None)?;
        push(name, g);
    }
    {
        let mut g = KernelGraph::new();
        let a = g.input(&[12, 40], d)?;
        let b = g.input_strided(&[40, 24], &[1, 40], d)?;
        let y = g.matmul(a, b)?;
        g.output(y, None)?;
        push("matmul_column_major_weight", g);
    }
    for dim in 0..3 {
        let mut g = KernelGraph::new();
        let x = g.input(&[4, 6, 40], d)?;
        let s = g.reduce_sum(x, dim)?;
        let m = g.reduce_max(x, dim)?;
        g.output(s, None)?;
        g.output(m, None)?;
        push(&format!("reduce_sum_max_dim{dim}"), g);
    }
    {
        let mut g = KernelGraph::new();
        let x = g.input(&[5, 96], d)?;
        let w = g.input(&[1, 96], d)?;
        let y = g.rms_norm(x, 1e-5, Some(w))?;
        let z = g.rms_norm(x, 0.0, None)?;
        g.output(y, None)?;
        g.output(z, None)?;
        push("rms_norm_weight_and_plain", g);
    }
    for dim in 0..2 {
        let mut g = KernelGraph::new();
        let a = g.input(&[8, 24], d)?;
        let b = g.input(if dim == 0 { &[4, 24] } else { &[8, 8] }, d)?;
        let y = g.concat(a, b, dim)?;
        g.output(y, None)?;
        push(&format!("concat_dim{dim}"), g);
    }

    // Block graphs: input iterators over a [48, 96] tensor with a matrix of imaps, forloop dims
    // and ranges, summed by acc_sum and saved with the matching omap.
    let x_desc = crate::ir::TensorDesc::new(&[48, 96], d);
    for (imap, fdim, frange) in [
        ([Some(0), Some(1), None], Some(1), 4usize),
        ([Some(1), Some(0), None], Some(0), 2),
        ([Some(0), None, Some(1)], None, 1),
        ([None, Some(1), None], Some(0), 3),
        ([Some(1), None, None], Some(1), 2),
    ] {
        let grid = [
            if imap[0].is_some() { 2 } else { 1 },
            if imap[1].is_some() { 3 } else { 1 },
            if imap[2].is_some() { 4 } else { 1 },
        ];
        let mut bg = BlockGraph::new(vec![x_desc.clone()], grid, 128, frange)?;
        let t = bg.input(0, imap, fdim)?;
        let a = bg.accum(AccKind::Sum, &[t])?;
        bg.output(a, imap)?;
        let mut g = KernelGraph::new();
        let x = g.input(&[48, 96], d)?;
        let outs = g.custom(&[x], bg)?;
        g.output(outs[0], None)?;
        let f = |e: Option<usize>| e.map_or("r".to_string(), |v| v.to_string());
        push(&format!("iterator_imap{}{}{}_f{}_r{frange}", f(imap[0]), f(imap[1]), f(imap[2]), f(fdim)), g);
    }
    // Every accumulator, over a column-major input walked by the loop.
    let cm = crate::ir::TensorDesc { shape: vec![32, 64], strides: vec![1, 32], dtype: d };
    let accs = [AccKind::Sum, AccKind::SumLast, AccKind::RmsLast, AccKind::SumTo { width: 8 }, AccKind::Max];
    for acc in accs {
        let mut bg = BlockGraph::new(vec![cm.clone()], [2, 1, 1], 128, 4)?;
        let t = bg.input(0, [Some(0), None, None], Some(1))?;
        let a = bg.accum(acc, &[t])?;
        let e = bg.unary(UnaryOp::MulScalar { c: Scalar(0.5) }, a)?;
        bg.output(e, [Some(0), None, None])?;
        let mut g = KernelGraph::new();
        let x = g.input_strided(&[32, 64], &[1, 32], d)?;
        let outs = g.custom(&[x], bg)?;
        g.output(outs[0], None)?;
        push(&format!("accumulator_{}", acc.name().replace(['(', ')'], "_")), g);
    }
    // Online softmax: running max, the rescaling pair, in-loop matmul of a non-multiple-of-16
    // tile, epilogue division; two outputs.
    {
        let q = crate::ir::TensorDesc::new(&[24, 40], d);
        let k = crate::ir::TensorDesc::new(&[40, 96], d);
        let v = crate::ir::TensorDesc::new(&[96, 24], d);
        let mut bg = BlockGraph::new(vec![q, k, v], [2, 1, 1], 128, 4)?;
        let tq = bg.input(0, [Some(0), None, None], None)?;
        let tk = bg.input(1, [None, None, None], Some(1))?;
        let tv = bg.input(2, [None, None, None], Some(0))?;
        let s = bg.matmul(tq, tk)?;
        let mx = bg.push(BlockOp::RunningMax { dim: 1 }, &[s])?;
        let (m, diff) = (mx[0], mx[1]);
        let shifted = bg.binary(BinaryOp::Sub, s, m)?;
        let p = bg.unary(UnaryOp::Exp, shifted)?;
        let r = bg.unary(UnaryOp::Exp, diff)?;
        let pv = bg.matmul(p, tv)?;
        let num = bg.accum(AccKind::Rescale, &[pv, r])?;
        let den = bg.accum(AccKind::SumLastRescale, &[p, r])?;
        let o = bg.binary(BinaryOp::Div, num, den)?;
        bg.output(o, [Some(0), None, None])?;
        bg.output(den, [Some(0), None, None])?;
        let mut g = KernelGraph::new();
        let xq = g.input(&[24, 40], d)?;
        let xk = g.input(&[40, 96], d)?;
        let xv = g.input(&[96, 24], d)?;
        let outs = g.custom(&[xq, xk, xv], bg)?;
        g.output(outs[0], None)?;
        g.output(outs[1], None)?;
        push("online_softmax_rescale_pair", g);
    }
    // The attention µGraphs of `search::attention` for the safe softmax with a scale: the online
    // softmax (3 heads, 2 blocks over 8 query rows, 6 key tiles of 16) and split-KV (one query
    // row, 4 key ranges of 2 tiles, head dim 24) with its combine kernel.
    for (name, rows, split) in [("online_softmax_attention", 8, false), ("online_softmax_split_kv", 1, true)] {
        let mut p = KernelGraph::new();
        let q = p.input(&[3, rows, 24], d)?;
        let k = p.input(&[3, 24, 96], d)?;
        let v = p.input(&[3, 96, 24], d)?;
        let s = p.matmul(q, k)?;
        let s = p.unary(UnaryOp::MulScalar { c: Scalar(0.25) }, s)?;
        let m = p.reduce_max(s, 2)?;
        let s = p.binary(BinaryOp::Sub, s, m)?;
        let e = p.exp(s)?;
        let l = p.reduce_sum(e, 2)?;
        let pr = p.div(e, l)?;
        let o = p.matmul(pr, v)?;
        p.output(o, None)?;
        let a = crate::search::attention::recognize(&p)
            .ok_or_else(|| IrError::rule(name, "attention", "not recognized as safe-softmax attention"))?;
        let g = if split {
            crate::search::attention::split_kv(&p, &a, 4, 2, 128)?
        } else {
            crate::search::attention::online_softmax(&p, &a, 2, 6, 128)?
        };
        push(name, g);
    }
    // Split-K of a normalized projection (`search::norm_split`): 2 ranges of k over 2 column tiles,
    // parts [2·8, 64] read by the combine's loop beside x's ranges (acc_rms_last).
    {
        let mut p = KernelGraph::new();
        let x = p.input(&[8, 128], d)?;
        let g = p.input(&[1, 128], d)?;
        let w = p.input(&[128, 64], d)?;
        let nx = p.rms_norm(x, 0.0, None)?;
        let a = p.binary(BinaryOp::Mul, nx, g)?;
        let o = p.matmul(a, w)?;
        p.output(o, None)?;
        let np = crate::search::norm_split::NormProjection { inputs: [0, 2], gain: Some(1), rows: 8, k: 128, n: 64 };
        push("norm_split_k", crate::search::norm_split::split_k(&p, &np, 2, 32, 2, 128, 128)?);
    }
    // In-loop reductions and rms_norm, strided sum-to, concat, and a running max; an epilogue matmul.
    {
        let x = crate::ir::TensorDesc::new(&[16, 128], d);
        let mut bg = BlockGraph::new(vec![x.clone(), x], [2, 1, 1], 256, 2)?;
        let a = bg.input(0, [Some(0), None, None], Some(1))?;
        let b = bg.input(1, [Some(0), None, None], Some(1))?;
        let n = bg.op(BlockOp::RmsNorm { eps: Scalar(1e-6) }, &[a])?;
        let s = bg.op(BlockOp::ReduceSumTo { dim: 1, width: 16 }, &[n])?;
        let c = bg.op(BlockOp::Concat { dim: 1 }, &[s, s])?;
        let mx = bg.op(BlockOp::ReduceMax { dim: 1 }, &[b])?;
        let sm = bg.op(BlockOp::ReduceSum { dim: 1 }, &[b])?;
        let acc_c = bg.accum(AccKind::Sum, &[c])?;
        let acc_mx = bg.accum(AccKind::Max, &[mx])?;
        let acc_sm = bg.accum(AccKind::Sum, &[sm])?;
        let y = bg.binary(BinaryOp::Add, acc_mx, acc_sm)?;
        let z = bg.binary(BinaryOp::Mul, acc_c, y)?;
        bg.output(z, [Some(0), None, None])?;
        let mut g = KernelGraph::new();
        let xa = g.input(&[16, 128], d)?;
        let xb = g.input(&[16, 128], d)?;
        let outs = g.custom(&[xa, xb], bg)?;
        g.output(outs[0], None)?;
        push("in_loop_reductions_rms_concat", g);
    }
    index_and_rotation_cases(d, &mut push)?;
    Ok(out)
}

/// Coverage of the operators transformer code needs beyond the element-wise table: layer norm
/// (as the DSL lowers it, unfused and as one fused kernel), both rotary layouts (also applied to
/// the partial products of a matmul inside its loop), gathers (a whole embedding row, the width
/// split across the grid, out-of-range ids) and argmax (along every dim, a long row reduced by
/// several warps, and feeding a gather).
fn index_and_rotation_cases(d: DType, push: &mut impl FnMut(&str, KernelGraph)) -> Result<(), IrError> {
    use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, RopeLayout, Scalar, TensorDesc, UnaryOp};
    let i32 = DType::I32;
    // layer_norm_weighted(x, w, b, 1e-5) as lowered: rms_norm of the centered rows, scaled, shifted.
    {
        let mut g = KernelGraph::new();
        let x = g.input(&[5, 96], d)?;
        let w = g.input(&[1, 96], d)?;
        let b = g.input(&[1, 96], d)?;
        let s = g.reduce_sum(x, 1)?;
        let m = g.unary(UnaryOp::MulScalar { c: Scalar(1.0 / 96.0) }, s)?;
        let c = g.binary(BinaryOp::Sub, x, m)?;
        let n = g.rms_norm(c, 1e-5, Some(w))?;
        let y = g.add(n, b)?;
        g.output(y, None)?;
        push("layer_norm_weighted_unfused", g);
    }
    // The same as one kernel: whole rows per block, the mean and the normalization in the loop.
    {
        let xd = TensorDesc::new(&[6, 96], d);
        let wd = TensorDesc::new(&[1, 96], d);
        let mut bg = BlockGraph::new(vec![xd, wd.clone(), wd], [3, 1, 1], 128, 1)?;
        let x = bg.input(0, [Some(0), None, None], None)?;
        let w = bg.input(1, [None, None, None], None)?;
        let b = bg.input(2, [None, None, None], None)?;
        let s = bg.op(BlockOp::ReduceSum { dim: 1 }, &[x])?;
        let m = bg.unary(UnaryOp::MulScalar { c: Scalar(1.0 / 96.0) }, s)?;
        let c = bg.binary(BinaryOp::Sub, x, m)?;
        let n = bg.op(BlockOp::RmsNorm { eps: Scalar(1e-5) }, &[c])?;
        let nw = bg.binary(BinaryOp::Mul, n, w)?;
        let y = bg.binary(BinaryOp::Add, nw, b)?;
        let a = bg.accum(AccKind::Sum, &[y])?;
        bg.output(a, [Some(0), None, None])?;
        let mut g = KernelGraph::new();
        let gx = g.input(&[6, 96], d)?;
        let gw = g.input(&[1, 96], d)?;
        let gb = g.input(&[1, 96], d)?;
        let outs = g.custom(&[gx, gw, gb], bg)?;
        g.output(outs[0], None)?;
        push("layer_norm_weighted_fused", g);
    }
    // Rotary embeddings: [heads 2, positions 6, two heads of 32 per row], angles per position.
    for layout in RopeLayout::ALL {
        let mut g = KernelGraph::new();
        let x = g.input(&[2, 6, 64], d)?;
        let c = g.input(&[1, 6, 16], d)?;
        let s = g.input(&[1, 6, 16], d)?;
        let y = g.rope(layout, x, c, s)?;
        g.output(y, None)?;
        push(&format!("{}_broadcast_angles", layout.name()), g);
    }
    // QKV projection + rope in one kernel: the rotation of each partial product, summed.
    {
        let (xd, wd) = (TensorDesc::new(&[8, 64], d), TensorDesc::new(&[64, 128], d));
        let cd = TensorDesc::new(&[8, 32], d);
        let mut bg = BlockGraph::new(vec![xd, wd, cd.clone(), cd], [2, 1, 1], 128, 4)?;
        let x = bg.input(0, [None, None, None], Some(1))?;
        let w = bg.input(1, [Some(1), None, None], Some(0))?;
        let c = bg.input(2, [None, None, None], None)?;
        let s = bg.input(3, [None, None, None], None)?;
        let p = bg.matmul(x, w)?;
        let r = bg.op(BlockOp::Rope { layout: RopeLayout::HalfSplit }, &[p, c, s])?;
        let a = bg.accum(AccKind::Sum, &[r])?;
        bg.output(a, [Some(1), None, None])?;
        let mut g = KernelGraph::new();
        let gx = g.input(&[8, 64], d)?;
        let gw = g.input(&[64, 128], d)?;
        let gc = g.input(&[8, 32], d)?;
        let gs = g.input(&[8, 32], d)?;
        let outs = g.custom(&[gx, gw, gc, gs], bg)?;
        g.output(outs[0], None)?;
        push("qkv_projection_rope_in_loop", g);
    }
    // Gathers: rows of a table at i32 ids (ids outside the table read zeros).
    {
        let mut g = KernelGraph::new();
        let t = g.input(&[50, 40], d)?;
        let ids = g.input(&[3, 5], i32)?;
        let y = g.gather(t, ids)?;
        g.output(y, None)?;
        push("gather_rows", g);
    }
    {
        let td = TensorDesc::new(&[30, 128], d);
        let idd = TensorDesc::new(&[12], i32);
        let mut bg = BlockGraph::new(vec![td, idd], [4, 2, 1], 128, 1)?;
        let ids = bg.input(1, [None, Some(0), None], None)?;
        let rows = bg.op(BlockOp::Gather { table: 0, imap: [Some(1), None, None] }, &[ids])?;
        let a = bg.accum(AccKind::Sum, &[rows])?;
        bg.output(a, [Some(1), Some(0), None])?;
        let mut g = KernelGraph::new();
        let gt = g.input(&[30, 128], d)?;
        let gi = g.input(&[12], i32)?;
        let outs = g.custom(&[gt, gi], bg)?;
        g.output(outs[0], None)?;
        push("gather_width_split", g);
    }
    // argmax along every dim; a long row reduced by several warps.
    for dim in 0..3 {
        let mut g = KernelGraph::new();
        let x = g.input(&[4, 6, 40], d)?;
        let m = g.argmax(x, dim)?;
        g.output(m, None)?;
        push(&format!("argmax_dim{dim}"), g);
    }
    {
        let mut g = KernelGraph::new();
        let x = g.input(&[2, 3000], d)?;
        let m = g.argmax(x, 1)?;
        g.output(m, None)?;
        push("argmax_long_rows", g);
    }
    // Greedy decoding: the embedding of the argmax of the logits. The logits are an input, so
    // the argmax is exact: an argmax of computed logits may differ from the reference's wherever
    // rounding reorders two near-equal logits.
    {
        let mut g = KernelGraph::new();
        let logits = g.input(&[2, 200], d)?;
        let emb = g.input(&[200, 48], d)?;
        let next = g.argmax(logits, 1)?;
        let y = g.gather(emb, next)?;
        g.output(y, None)?;
        g.output(next, None)?;
        push("argmax_then_gather", g);
    }
    Ok(())
}
