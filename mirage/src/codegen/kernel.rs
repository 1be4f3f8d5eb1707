//! One block graph → one CUDA `__global__` function.
//!
//! The generated kernel follows the block graph's structure literally: input iterators copy
//! tiles from device memory into shared memory (16-byte `cp.async` copies, pipelined over the
//! for-loop iterations when the tile layout allows it), in-loop operators run on shared-memory
//! tiles (tensor-core `mma.sync` for matmuls of f16/bf16 tiles), accumulators fold iterations,
//! the epilogue runs after the loop and output savers write each block's slab.
//!
//! Intermediate tiles are stored as f32; input tiles keep their element type and the dimension
//! order of their device layout. A matmul whose only consumer is `acc_sum` accumulates in
//! registers across iterations.

use std::fmt::Write;

use crate::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, DType, Phase, TensorDesc, TensorRef, UnaryOp};

use super::CodegenError;
use super::fusion::{RegisterPlan, RowBands, mma_dtype};
use super::smem::{Interval, SmemPlanner};

/// The C type of an element type.
pub fn ctype(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "__half",
        DType::Bf16 => "__nv_bfloat16",
        DType::F32 => "float",
    }
}

/// The generated source of one kernel and how to launch it.
#[derive(Clone, Debug)]
pub struct KernelSource {
    /// The `extern "C"` function name.
    pub name: String,
    /// CUDA C++ source of the function.
    pub code: String,
    /// Blocks along x, y, z.
    pub grid: [usize; 3],
    /// Threads per block.
    pub threads: usize,
    /// Dynamic shared memory in bytes.
    pub smem_bytes: usize,
    /// Static shared memory in bytes (block-reduction scratch); dynamic plus static must fit the
    /// per-block limit.
    pub static_smem_bytes: usize,
    /// Pipeline stages of the tiles walked by the for-loop (1: each iteration's loads are waited
    /// for before its compute, no overlap).
    pub stages: usize,
}

/// Options of kernel generation.
#[derive(Clone, Debug)]
pub struct KernelOptions {
    /// Dynamic shared memory available to one block (bytes).
    pub max_smem_bytes: usize,
    /// Most pipeline stages for tiles walked by the for-loop.
    pub max_stages: usize,
}

impl Default for KernelOptions {
    fn default() -> Self {
        // H100/H200: 227 KB of shared memory per block with opt-in.
        KernelOptions { max_smem_bytes: 227 * 1024, max_stages: 4 }
    }
}

/// Where a tile lives and how to address it.
#[derive(Clone, Debug)]
struct Tile {
    /// C variable name of the tile pointer.
    var: String,
    /// Element C type in shared memory.
    ctype: &'static str,
    /// Element type for tensor-core operands (f16/bf16) or f32.
    dtype: DType,
    shape: Vec<usize>,
    /// Element strides in shared memory.
    strides: Vec<usize>,
    /// Byte offset in dynamic shared memory (of stage 0 for pipelined tiles).
    offset: usize,
    /// Bytes of one stage.
    bytes: usize,
    /// Pipelined over the for-loop (stage buffer chosen by iteration).
    pipelined: bool,
}

impl Tile {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// `to_f32(var[offset])` for a multi-index given as C expressions (broadcast dims of size 1
    /// contribute nothing).
    fn load(&self, idx: &[String]) -> String {
        let off = self.offset_expr(idx);
        if self.ctype == "float" {
            format!("{}[{off}]", self.var)
        } else {
            format!("mirage::to_f32({}[{off}])", self.var)
        }
    }

    /// The statement storing f32 `value` at a multi-index (converted to the tile's element type).
    fn store(&self, idx: &[String], value: &str) -> String {
        let off = self.offset_expr(idx);
        if self.ctype == "float" {
            format!("{}[{off}] = {value};", self.var)
        } else {
            format!("{}[{off}] = mirage::from_f32<{}>({value});", self.var, self.ctype)
        }
    }

    fn offset_expr(&self, idx: &[String]) -> String {
        let terms: Vec<String> = (0..self.shape.len())
            .filter(|&d| self.shape[d] > 1)
            .map(|d| {
                if self.strides[d] == 1 { format!("({})", idx[d]) } else { format!("({})*{}", idx[d], self.strides[d]) }
            })
            .collect();
        if terms.is_empty() { "0".into() } else { terms.join(" + ") }
    }
}

/// Row-major strides of an f32 tile with its rows padded by 4 floats when they are a multiple of
/// 32 floats long and there are at least 8 of them (mma fragment stores and operand loads touch
/// 8 rows at once: unpadded, all 8 start in the same bank), and the size in elements.
fn padded_f32_strides(shape: &[usize]) -> (Vec<usize>, usize) {
    let r = shape.len();
    if r < 2 {
        return (row_major(shape), shape.iter().product());
    }
    let n = shape[r - 1];
    let rows: usize = shape[..r - 1].iter().product();
    if n % 32 != 0 || rows < 8 {
        return (row_major(shape), shape.iter().product());
    }
    let mut strides = vec![1; r];
    let mut s = n + 4;
    for d in (0..r - 1).rev() {
        strides[d] = s;
        s *= shape[d];
    }
    (strides, s)
}

/// Row-major strides of an f16/bf16 tile (`es` bytes per element) with rows padded by 16 bytes
/// when they are a multiple of 32 bytes and at least 128 bytes long (as input tiles: the eight
/// rows an `ldmatrix` touches then start in different banks), and the size in elements.
fn padded_mma_strides(shape: &[usize], es: usize) -> (Vec<usize>, usize) {
    let r = shape.len();
    if r < 2 {
        return (row_major(shape), shape.iter().product());
    }
    let n = shape[r - 1];
    let rows: usize = shape[..r - 1].iter().product();
    if rows < 2 || (n * es) % 32 != 0 || n * es < 128 {
        return (row_major(shape), shape.iter().product());
    }
    let mut strides = vec![1; r];
    let mut s = n + 16 / es;
    for d in (0..r - 1).rev() {
        strides[d] = s;
        s *= shape[d];
    }
    (strides, s)
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    crate::ir::row_major_strides(shape)
}

/// C expressions of the multi-index of flat row-major index `e` over `shape`.
fn unflatten(e: &str, shape: &[usize]) -> Vec<String> {
    let strides = row_major(shape);
    (0..shape.len())
        .map(|d| {
            if shape[d] == 1 {
                "0".to_string()
            } else if d == 0 {
                format!("({e} / {})", strides[0])
            } else if strides[d] == 1 {
                format!("({e} % {})", shape[d])
            } else {
                format!("(({e} / {}) % {})", strides[d], shape[d])
            }
        })
        .collect()
}

fn float_lit(v: f32) -> String {
    if v.is_nan() {
        "__int_as_float(0x7fc00000)".into()
    } else if v.is_infinite() {
        if v > 0.0 { "__int_as_float(0x7f800000)".into() } else { "__int_as_float(0xff800000)".into() }
    } else {
        format!("{v:?}f")
    }
}

fn unary_expr(op: &UnaryOp, x: &str) -> String {
    match op {
        UnaryOp::Exp => format!("__expf({x})"),
        UnaryOp::Square => format!("({x})*({x})"),
        UnaryOp::Sqrt => format!("sqrtf({x})"),
        UnaryOp::Silu => format!("mirage::silu({x})"),
        UnaryOp::Gelu => format!("mirage::gelu({x})"),
        UnaryOp::Relu => format!("mirage::relu({x})"),
        UnaryOp::Neg => format!("(-({x}))"),
        UnaryOp::Recip => format!("(1.0f/({x}))"),
        UnaryOp::Clamp { lo, hi } => format!("mirage::clampf({x}, {}, {})", float_lit(lo.0), float_lit(hi.0)),
        UnaryOp::MulScalar { c } => format!("({}*({x}))", float_lit(c.0)),
    }
}

fn binary_expr(op: BinaryOp, a: &str, b: &str) -> String {
    match op {
        BinaryOp::Add => format!("({a} + {b})"),
        BinaryOp::Sub => format!("({a} - {b})"),
        BinaryOp::Mul => format!("({a} * {b})"),
        BinaryOp::Div => format!("({a} / {b})"),
        BinaryOp::Pow => format!("powf({a}, {b})"),
    }
}

/// Where a row-owned matmul's A operand comes from.
enum ASource<'t> {
    /// A shared-memory tile.
    Smem(&'t Tile),
    /// Fragments loaded before the loop (`name[band][k-step][4]`).
    Preloaded(String),
    /// A register value (`name[band][tile][4]` accumulator fragments).
    Regs(String),
}

/// Where a row-owned matmul's result goes.
enum RowOut<'t> {
    /// A fresh register value `name[band][tile][4]`.
    Regs(String),
    /// The register accumulator `name[band * tiles + tile][4]`, across iterations.
    Acc(String),
    /// A shared-memory f32 tile.
    Smem(&'t Tile),
}

fn unary_name(op: &UnaryOp) -> String {
    BlockOp::Unary { op: *op }.name()
}

/// Kernel generation state.
struct Gen<'a> {
    bg: &'a BlockGraph,
    threads: usize,
    warps: usize,
    tiles: Vec<Vec<Option<Tile>>>,
    /// Matmul nodes whose result accumulates in registers (node → the acc_sum node).
    fused: Vec<Option<usize>>,
    /// Hoisting and register-chain decisions.
    rp: RegisterPlan,
    stages: usize,
    out: String,
    /// A block-wide reduction uses the static scratch array `red` (one float per warp).
    uses_red: bool,
}

/// How an input iterator's copy is done.
struct CopyPlan {
    /// The device dim that is contiguous (stride 1) and copied in vectors, if any.
    vec_dim: Option<usize>,
    /// Elements per 16-byte vector (1 when copying element by element).
    vec: usize,
}

fn copy_plan(desc: &TensorDesc, tile: &[usize]) -> CopyPlan {
    let es = desc.dtype.size_bytes();
    let per16 = 16 / es;
    let c = (0..desc.shape.len()).find(|&d| desc.strides[d] == 1 && tile[d] > 1);
    if let Some(c) = c {
        let others_aligned = (0..desc.shape.len()).all(|d| d == c || tile[d] == 1 || (desc.strides[d] * es) % 16 == 0);
        if tile[c] % per16 == 0 && others_aligned {
            return CopyPlan { vec_dim: Some(c), vec: per16 };
        }
        return CopyPlan { vec_dim: Some(c), vec: 1 };
    }
    CopyPlan { vec_dim: None, vec: 1 }
}

/// Shared-memory strides of an input tile and its size in elements: the device layout's dim
/// order, compact, except that a vector-copied tile whose rows are a multiple of 32 bytes and at
/// least 128 bytes long gets each row padded by 16 bytes. Unpadded, the rows of such a tile start
/// in the same bank, so the eight rows an `ldmatrix` or an mma fragment load touches at once
/// conflict 8-way; padded, consecutive rows start 4 banks apart. Shorter rows conflict at most
/// 4-way and pay relatively more shared memory for the padding (fewer pipeline stages): on the
/// H200 (run 5, benches/results/NOTES.md) padding 64- and 96-byte weight rows made the
/// weight-bound batch-1 kernels 10–25% slower.
fn input_tile_strides(desc: &TensorDesc, tile: &[usize], vectorized: bool) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..tile.len()).collect();
    // innermost first: ascending device stride
    order.sort_by_key(|&d| (desc.strides[d], std::cmp::Reverse(d)));
    let es = desc.dtype.size_bytes();
    let rows: usize = order.iter().skip(1).map(|&d| tile[d]).product();
    let mut strides = vec![0; tile.len()];
    let mut s = 1;
    for (k, d) in order.into_iter().enumerate() {
        strides[d] = s;
        s *= tile[d];
        if k == 0 && vectorized && rows > 1 && (s * es) % 32 == 0 && s * es >= 128 {
            s += 16 / es;
        }
    }
    (strides, s)
}

impl<'a> Gen<'a> {
    fn tile(&self, t: TensorRef) -> &Tile {
        // Every operand was assigned a tile before its users are generated.
        self.tiles[t.node][t.port].as_ref().expect("operand tile planned before use")
    }

    fn line(&mut self, indent: usize, s: &str) {
        for _ in 0..indent {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// `for (int e = tid; e < n; e += THREADS) { body(e) }`.
    fn elementwise(&mut self, indent: usize, n: usize, body: &str) {
        self.line(indent, &format!("for (int e = tid; e < {n}; e += {}) {{", self.threads));
        for l in body.lines() {
            self.line(indent + 1, l);
        }
        self.line(indent, "}");
    }

    fn sync(&mut self, indent: usize) {
        self.line(indent, "__syncthreads();");
    }

    /// Reduction of `src` along `dim` to `width` with strided grouping; `map` transforms each
    /// element (`{x}`), `combine` is "sum" or "max"; `store` is a statement template with `{o}`
    /// (flat output index) and `{v}` (the reduced value).
    fn reduce(&mut self, indent: usize, src: &Tile, dim: usize, width: usize, map: &str, combine: &str, store: &str) {
        let mut out_shape = src.shape.clone();
        out_shape[dim] = width;
        let outputs: usize = out_shape.iter().product();
        let extent = src.shape[dim];
        let init = if combine == "sum" { "0.0f" } else { "__int_as_float(0xff800000)" };
        let op = |a: &str, b: &str| if combine == "sum" { format!("{a} + {b}") } else { format!("fmaxf({a}, {b})") };
        let idx = unflatten("o", &out_shape);
        let mut sidx = idx.clone();
        sidx[dim] = "r".to_string();
        let x = map.replace("{x}", &src.load(&sidx));
        let per_output_threads = if outputs >= self.threads || extent / width < 32 { 1 } else { 32 };
        if per_output_threads == 1 {
            self.line(indent, &format!("for (int o = tid; o < {outputs}; o += {}) {{", self.threads));
            self.line(indent + 1, &format!("float v = {init};"));
            self.line(
                indent + 1,
                &format!("for (int r = {}; r < {extent}; r += {width}) {{ v = {}; }}", idx[dim], op("v", &x)),
            );
            self.line(indent + 1, &store.replace("{o}", "o").replace("{v}", "v"));
            self.line(indent, "}");
        } else if outputs * 2 <= self.warps && extent / width >= 64 * (self.warps / outputs) {
            // Few long reductions: every warp takes a strided share of one output, the partial
            // results meet in the static scratch array `red` (one slot per warp).
            let wpo = self.warps / outputs;
            let warp_op = if combine == "sum" { "mirage::warp_sum" } else { "mirage::warp_max" };
            self.uses_red = true;
            self.line(indent, "{");
            self.line(indent + 1, &format!("const int o = warp / {wpo}, part = warp % {wpo};"));
            self.line(indent + 1, &format!("float v = {init};"));
            self.line(indent + 1, &format!("if (o < {outputs}) {{"));
            self.line(
                indent + 2,
                &format!(
                    "for (int r = {} + (part * 32 + lane) * {width}; r < {extent}; r += {}) {{ v = {}; }}",
                    idx[dim],
                    32 * wpo * width,
                    op("v", &x)
                ),
            );
            self.line(indent + 1, "}");
            self.line(indent + 1, &format!("v = {warp_op}(v);"));
            self.line(indent + 1, "if (lane == 0) red[warp] = v;");
            self.line(indent + 1, "__syncthreads();");
            self.line(indent + 1, &format!("if (tid < {outputs}) {{"));
            self.line(indent + 2, &format!("const int o = tid; float v = red[o * {wpo}];"));
            self.line(
                indent + 2,
                &format!("for (int q = 1; q < {wpo}; ++q) {{ v = {}; }}", op("v", &format!("red[o * {wpo} + q]"))),
            );
            self.line(indent + 2, &store.replace("{o}", "o").replace("{v}", "v"));
            self.line(indent + 1, "}");
            self.line(indent, "}");
        } else if outputs > self.warps && lanes_per_output(outputs, self.threads, extent / width) > 1 {
            // Many short reductions: `l` lanes of one warp per output (all outputs in one
            // pass), each summing a strided share, then log2(l) shuffles.
            let l = lanes_per_output(outputs, self.threads, extent / width);
            let shfl = |off: usize| {
                if combine == "sum" {
                    format!("v += __shfl_xor_sync(0xffffffffu, v, {off});")
                } else {
                    format!("v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, {off}));")
                }
            };
            self.line(indent, "{");
            self.line(indent + 1, &format!("const int o = tid / {l}, part = tid % {l};"));
            self.line(indent + 1, &format!("float v = {init};"));
            self.line(indent + 1, &format!("if (o < {outputs}) {{"));
            self.line(
                indent + 2,
                &format!(
                    "for (int r = {} + part * {width}; r < {extent}; r += {}) {{ v = {}; }}",
                    idx[dim],
                    l * width,
                    op("v", &x)
                ),
            );
            self.line(indent + 1, "}");
            let mut off = l / 2;
            while off >= 1 {
                self.line(indent + 1, &shfl(off));
                off /= 2;
            }
            self.line(
                indent + 1,
                &format!("if (o < {outputs} && part == 0) {{ {} }}", store.replace("{o}", "o").replace("{v}", "v")),
            );
            self.line(indent, "}");
        } else {
            let warp_op = if combine == "sum" { "mirage::warp_sum" } else { "mirage::warp_max" };
            self.line(indent, &format!("for (int o = warp; o < {outputs}; o += {}) {{", self.warps));
            self.line(indent + 1, &format!("float v = {init};"));
            self.line(
                indent + 1,
                &format!(
                    "for (int r = {} + lane * {width}; r < {extent}; r += {}) {{ v = {}; }}",
                    idx[dim],
                    32 * width,
                    op("v", &x)
                ),
            );
            self.line(indent + 1, &format!("v = {warp_op}(v);"));
            self.line(indent + 1, &format!("if (lane == 0) {{ {} }}", store.replace("{o}", "o").replace("{v}", "v")));
            self.line(indent, "}");
        }
    }

    /// Tile matmul `a[m,k] x b[k,n]`. With `acc` = Some(register array name), accumulates into
    /// registers (declared outside the loop); else writes the f32 tile `c`.
    fn matmul(&mut self, indent: usize, a: &Tile, b: &Tile, c: Option<&Tile>, acc: Option<&str>) {
        let r = a.shape.len();
        let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
        let dtype = if a.dtype != DType::F32 { a.dtype } else { b.dtype };
        if dtype == DType::F32 {
            // FMA fallback: one output element per thread.
            let c = c.expect("f32 matmuls are never fused");
            let body = format!(
                "const int i = e / {n}, j = e % {n};\nfloat s = 0.0f;\nfor (int q = 0; q < {k}; ++q) s += {} * {};\n{}[{}] = s;",
                a.load(&two("i", "q", r)),
                b.load(&two("q", "j", r)),
                c.var,
                c.offset_expr(&two("i", "j", r))
            );
            self.elementwise(indent, m * n, &body);
            return;
        }
        let ty = ctype(dtype);
        let (mt, nt, kt) = (m.div_ceil(16), n.div_ceil(8), k.div_ceil(16));
        let tiles = mt * nt;
        let a_pair = |row: &str, col: &str| a_pair_expr(a, ty, m, k, row, col);
        let b_pair = |row: &str, col: &str| b_pair_expr(b, ty, k, n, row, col);
        let b_ldmatrix = b_by_ldmatrix(b, ty, k, n);
        let sb0 = b.strides[r - 2];
        // Independent accumulator chains over the k-steps: mma latency, not issue, bounds one
        // chain; 4 chains keep the tensor pipe busy.
        // A register-accumulated matmul with few tiles splits its k-steps over the warps too.
        let split = if acc.is_some() { k_split(tiles, kt, self.warps) } else { 1 };
        let (kt_range, per) = (kt / split, tiles * split);
        let chains = kt_range.clamp(1, 4);
        let tpw = per.div_ceil(self.warps);
        let split_note = if split > 1 { format!(", k-steps split {split} ways over the warps") } else { String::new() };
        self.line(indent, &format!("// matmul [{m}x{k}] x [{k}x{n}]: {tiles} mma tiles of 16x8, {kt} k-steps in {chains} chain(s){}{split_note}", if b_ldmatrix { ", B by ldmatrix.trans" } else { "" }));
        self.line(indent, "{");
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int j = 0; j < {tpw}; ++j) {{"));
        if split > 1 {
            self.line(
                indent + 2,
                &format!("const int q = warp + j * {}, t = q % {tiles}, k0 = (q / {tiles}) * {kt_range};", self.warps),
            );
        } else {
            self.line(indent + 2, &format!("const int t = warp + j * {}, k0 = 0;", self.warps));
        }
        self.line(indent + 2, &format!("if (t < {tiles}) {{"));
        self.line(indent + 3, &format!("const int mt = t / {nt}, nt = t % {nt};"));
        match acc {
            Some(name) => self.line(indent + 3, &format!("float* d = {name}[j];")),
            None => self.line(indent + 3, "float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};"),
        }
        self.line(indent + 3, &format!("float dc[{chains}][4];"));
        self.line(indent + 3, "#pragma unroll");
        self.line(
            indent + 3,
            &format!("for (int c = 0; c < {chains}; ++c) {{ dc[c][0] = dc[c][1] = dc[c][2] = dc[c][3] = 0.0f; }}"),
        );
        self.line(indent + 3, &format!("for (int kb = 0; kb < {kt_range}; kb += {chains}) {{"));
        self.line(indent + 4, "#pragma unroll");
        self.line(indent + 4, &format!("for (int c = 0; c < {chains}; ++c) {{"));
        self.line(indent + 5, "const int kt = k0 + kb + c;");
        if kt_range % chains != 0 {
            self.line(indent + 5, &format!("if (kb + c >= {kt_range}) break;"));
        }
        self.line(indent + 5, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
        self.line(indent + 5, "const int nb = nt * 8 + (lane >> 2);");
        self.line(indent + 5, "uint32_t fa[4], fb[2];");
        for (q, (row, col)) in A_FRAGMENT.iter().enumerate() {
            self.line(indent + 5, &format!("fa[{q}] = {};", a_pair(row, col)));
        }
        if b_ldmatrix {
            self.line(
                indent + 5,
                &format!("mirage::ldmatrix_x2_trans(fb, &{}[(kt * 16 + (lane & 15))*{sb0} + nt * 8]);", b.var),
            );
        } else {
            self.line(indent + 5, &format!("fb[0] = {};", b_pair("c0", "nb")));
            self.line(indent + 5, &format!("fb[1] = {};", b_pair("c0+8", "nb")));
        }
        self.line(indent + 5, &format!("mirage::mma_16816<{ty}>(dc[c], fa, fb);"));
        self.line(indent + 4, "}");
        self.line(indent + 3, "}");
        self.line(indent + 3, "#pragma unroll");
        self.line(indent + 3, &format!("for (int c = 0; c < {chains}; ++c) {{ d[0] += dc[c][0]; d[1] += dc[c][1]; d[2] += dc[c][2]; d[3] += dc[c][3]; }}"));
        if let Some(c) = c {
            self.store_fragment(indent + 3, c, m, n);
        }
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// Tile matmul `[m, k] x [k, n]` with whole 16-row bands per warp (warp `w` owns bands
    /// `w, w + warps, …`; `fusion::RegisterPlan::row_owned`). Each k-step loads one A fragment
    /// and runs the band's `n / 8` mma tiles on it: that many independent accumulators.
    fn matmul_rows(&mut self, indent: usize, bands: RowBands, dtype: DType, a: &ASource, b: &Tile, out: &RowOut) {
        let r = b.shape.len();
        let (k, n) = (b.shape[r - 2], b.shape[r - 1]);
        let m = bands.mt * 16;
        let ty = ctype(dtype);
        let ldm = b_by_ldmatrix(b, ty, k, n);
        let sb0 = b.strides[r - 2];
        let RowBands { mt, per_warp, nt, kt } = bands;
        let warps = self.warps;
        let src = match a {
            ASource::Smem(_) => "A from shared memory",
            ASource::Preloaded(_) => "A preloaded in registers",
            ASource::Regs(_) => "A from registers",
        };
        let dst = match out {
            RowOut::Regs(_) => "result in registers",
            RowOut::Acc(_) => "accumulated in registers",
            RowOut::Smem(_) => "result to shared memory",
        };
        self.line(indent, &format!("// matmul [{m}x{k}] x [{k}x{n}]: {mt} bands of 16 rows, {per_warp} per warp, {nt} mma tiles of 16x8 per band, {kt} k-steps; {src}, {dst}{}", if ldm { ", B by ldmatrix.trans" } else { "" }));
        if let RowOut::Regs(name) = out {
            self.line(indent, &format!("float {name}[{per_warp}][{nt}][4];"));
        }
        self.line(indent, "{");
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 2, &format!("const int mt = warp + mi * {warps};"));
        // The target of tile `nt` of band `mi`.
        let target = match out {
            RowOut::Regs(name) => format!("{name}[mi][nt]"),
            RowOut::Acc(name) => format!("{name}[mi * {nt} + nt]"),
            RowOut::Smem(_) => "dl[nt]".to_string(),
        };
        match out {
            RowOut::Regs(_) => {
                self.line(indent + 2, "#pragma unroll");
                self.line(indent + 2, &format!("for (int nt = 0; nt < {nt}; ++nt) {{ {target}[0] = {target}[1] = {target}[2] = {target}[3] = 0.0f; }}"));
            }
            RowOut::Smem(_) => {
                self.line(indent + 2, &format!("float dl[{nt}][4];"));
                self.line(indent + 2, "#pragma unroll");
                self.line(
                    indent + 2,
                    &format!(
                        "for (int nt = 0; nt < {nt}; ++nt) {{ dl[nt][0] = dl[nt][1] = dl[nt][2] = dl[nt][3] = 0.0f; }}"
                    ),
                );
            }
            RowOut::Acc(_) => {}
        }
        self.line(indent + 2, &format!("if (mt < {mt}) {{"));
        self.line(indent + 3, "#pragma unroll");
        self.line(indent + 3, &format!("for (int kt = 0; kt < {kt}; ++kt) {{"));
        self.line(indent + 4, "uint32_t fa[4];");
        match a {
            ASource::Smem(t) => {
                self.line(indent + 4, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
                for (q, (row, col)) in A_FRAGMENT.iter().enumerate() {
                    self.line(indent + 4, &format!("fa[{q}] = {};", a_pair_expr(t, ty, m, k, row, col)));
                }
            }
            ASource::Preloaded(name) => {
                self.line(indent + 4, &format!("fa[0] = {name}[mi][kt][0]; fa[1] = {name}[mi][kt][1]; fa[2] = {name}[mi][kt][2]; fa[3] = {name}[mi][kt][3];"));
            }
            ASource::Regs(name) => {
                // Accumulator fragments of tiles 2kt and 2kt+1 = the A fragment of k-step kt.
                self.line(
                    indent + 4,
                    &format!("fa[0] = mirage::pack2<{ty}>({name}[mi][2 * kt][0], {name}[mi][2 * kt][1]);"),
                );
                self.line(
                    indent + 4,
                    &format!("fa[1] = mirage::pack2<{ty}>({name}[mi][2 * kt][2], {name}[mi][2 * kt][3]);"),
                );
                self.line(
                    indent + 4,
                    &format!("fa[2] = mirage::pack2<{ty}>({name}[mi][2 * kt + 1][0], {name}[mi][2 * kt + 1][1]);"),
                );
                self.line(
                    indent + 4,
                    &format!("fa[3] = mirage::pack2<{ty}>({name}[mi][2 * kt + 1][2], {name}[mi][2 * kt + 1][3]);"),
                );
            }
        }
        self.line(indent + 4, "#pragma unroll");
        self.line(indent + 4, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
        self.line(indent + 5, "uint32_t fb[2];");
        if ldm {
            self.line(
                indent + 5,
                &format!("mirage::ldmatrix_x2_trans(fb, &{}[(kt * 16 + (lane & 15))*{sb0} + nt * 8]);", b.var),
            );
        } else {
            self.line(indent + 5, "const int c0 = kt * 16 + (lane & 3) * 2, nb = nt * 8 + (lane >> 2);");
            self.line(indent + 5, &format!("fb[0] = {};", b_pair_expr(b, ty, k, n, "c0", "nb")));
            self.line(indent + 5, &format!("fb[1] = {};", b_pair_expr(b, ty, k, n, "c0+8", "nb")));
        }
        self.line(indent + 5, &format!("mirage::mma_16816<{ty}>({target}, fa, fb);"));
        self.line(indent + 4, "}");
        self.line(indent + 3, "}");
        if let RowOut::Smem(c) = out {
            self.line(indent + 3, "#pragma unroll");
            self.line(indent + 3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
            self.line(indent + 4, "const float* d = dl[nt];");
            self.store_fragment(indent + 4, c, m, n);
            self.line(indent + 3, "}");
        }
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// Loads the A fragments of a row-owned matmul into `name[per_warp][kt][4]` (before the loop).
    fn preload_a(&mut self, indent: usize, bands: RowBands, dtype: DType, a: &Tile, name: &str) {
        let r = a.shape.len();
        let (m, k) = (a.shape[r - 2], a.shape[r - 1]);
        let ty = ctype(dtype);
        let RowBands { per_warp, kt, mt, .. } = bands;
        self.line(
            indent,
            &format!("// A fragments of a loop-invariant operand, loaded once: {per_warp} band(s) x {kt} k-steps"),
        );
        self.line(indent, &format!("uint32_t {name}[{per_warp}][{kt}][4];"));
        self.line(indent, "#pragma unroll");
        self.line(indent, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int kt = 0; kt < {kt}; ++kt) {{"));
        self.line(indent + 2, &format!("const int mt = warp + mi * {};", self.warps));
        self.line(indent + 2, "const int r0 = mt * 16 + (lane >> 2), c0 = kt * 16 + (lane & 3) * 2;");
        self.line(
            indent + 2,
            &format!("{name}[mi][kt][0] = {name}[mi][kt][1] = {name}[mi][kt][2] = {name}[mi][kt][3] = 0u;"),
        );
        self.line(indent + 2, &format!("if (mt < {mt}) {{"));
        for (q, (row, col)) in A_FRAGMENT.iter().enumerate() {
            self.line(indent + 3, &format!("{name}[mi][kt][{q}] = {};", a_pair_expr(a, ty, m, k, row, col)));
        }
        self.line(indent + 2, "}");
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// `out = f(x)` on register fragments `x[per_warp][nt][4]`.
    fn unary_regs(&mut self, indent: usize, op: &UnaryOp, bands: RowBands, x: &str, out: &str) {
        let RowBands { per_warp, nt, .. } = bands;
        self.line(indent, &format!("// {} on register fragments", unary_name(op)));
        self.line(indent, &format!("float {out}[{per_warp}][{nt}][4];"));
        self.line(indent, "#pragma unroll");
        self.line(indent, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
        self.line(indent + 2, "#pragma unroll");
        self.line(
            indent + 2,
            &format!(
                "for (int q = 0; q < 4; ++q) {{ {out}[mi][nt][q] = {}; }}",
                unary_expr(op, &format!("{x}[mi][nt][q]"))
            ),
        );
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// `acc[row] += Σ_cols x[row, cols]` for register fragments `x`: each lane sums its pairs,
    /// the four lanes of a row meet by two shuffles, one adds to the shared-memory accumulator
    /// (the rows of a band belong to one warp, so no other warp touches them).
    fn row_sum_regs(&mut self, indent: usize, bands: RowBands, x: &str, acc: &Tile) {
        let RowBands { per_warp, nt, mt, .. } = bands;
        let r = acc.shape.len();
        let at = |row: &str| acc.offset_expr(&two(row, "0", r));
        self.line(indent, "// row sums of register fragments");
        self.line(indent, "#pragma unroll");
        self.line(indent, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 1, &format!("const int mt = warp + mi * {};", self.warps));
        self.line(indent + 1, "float v0 = 0.0f, v1 = 0.0f;");
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int nt = 0; nt < {nt}; ++nt) {{ v0 += {x}[mi][nt][0] + {x}[mi][nt][1]; v1 += {x}[mi][nt][2] + {x}[mi][nt][3]; }}"));
        self.line(indent + 1, "v0 += __shfl_xor_sync(0xffffffffu, v0, 1); v0 += __shfl_xor_sync(0xffffffffu, v0, 2);");
        self.line(indent + 1, "v1 += __shfl_xor_sync(0xffffffffu, v1, 1); v1 += __shfl_xor_sync(0xffffffffu, v1, 2);");
        self.line(indent + 1, &format!("if (mt < {mt} && (lane & 3) == 0) {{"));
        self.line(indent + 2, "const int r = mt * 16 + (lane >> 2);");
        self.line(indent + 2, &format!("{0}[{1}] = (it == 0 ? 0.0f : {0}[{1}]) + v0;", acc.var, at("r")));
        self.line(indent + 2, &format!("{0}[{1}] = (it == 0 ? 0.0f : {0}[{1}]) + v1;", acc.var, at("r+8")));
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// Stores fragment `d` of tile (mt, nt) into the row-major f32 tile `c`.
    fn store_fragment(&mut self, indent: usize, c: &Tile, m: usize, n: usize) {
        self.store_fragment_op(indent, c, m, n, "=");
    }

    /// Like [`Gen::store_fragment`] with assignment operator `op` (`=` or `+=`).
    fn store_fragment_op(&mut self, indent: usize, c: &Tile, m: usize, n: usize, op: &str) {
        self.line(indent, "{");
        self.line(indent + 1, "const int r = mt * 16 + (lane >> 2), q = nt * 8 + (lane & 3) * 2;");
        let guard = |row: &str, col: &str| {
            let mut conds = Vec::new();
            if m % 16 != 0 {
                conds.push(format!("{row} < {m}"));
            }
            if n % 8 != 0 {
                conds.push(format!("{col} < {n}"));
            }
            if conds.is_empty() { String::new() } else { format!("if ({}) ", conds.join(" && ")) }
        };
        for (i, (row, col)) in [("r", "q"), ("r", "q+1"), ("r+8", "q"), ("r+8", "q+1")].iter().enumerate() {
            let r = c.shape.len();
            self.line(
                indent + 1,
                &format!("{}{}[{}] {op} d[{i}];", guard(row, col), c.var, c.offset_expr(&two(row, col, r))),
            );
        }
        self.line(indent, "}");
    }
}

/// (row, column) of the four 32-bit registers of an m16n8k16 A fragment, relative to lane row
/// `r0 = mt*16 + lane/4` and column `c0 = kt*16 + (lane%4)*2`.
const A_FRAGMENT: [(&str, &str); 4] = [("r0", "c0"), ("r0+8", "c0"), ("r0", "c0+8"), ("r0+8", "c0+8")];

/// A 32-bit register holding two consecutive-k elements of A (`[m, k]`) at (`row`, `col`): a
/// direct load when the tile holds the mma type with k contiguous, else two loads and a pack;
/// zero outside the tile where the shape is not a multiple of the mma tile.
fn a_pair_expr(a: &Tile, ty: &str, m: usize, k: usize, row: &str, col: &str) -> String {
    let r = a.shape.len();
    let (sa0, sa1) = (a.strides[r - 2], a.strides[r - 1]);
    if a.ctype == ty && sa1 == 1 && sa0 % 2 == 0 && k % 16 == 0 {
        let load = format!("*reinterpret_cast<const uint32_t*>(&{}[({row})*{sa0} + ({col})])", a.var);
        if m % 16 != 0 { format!("(({row}) < {m} ? {load} : 0u)") } else { load }
    } else {
        let lim = (m % 16 != 0).then_some(m);
        let kl = (k % 16 != 0).then_some(k);
        let at = |row: &str, col: &str| guarded_load(a, row, col, lim, kl);
        format!("mirage::pack2<{ty}>({}, {})", at(row, col), at(row, &format!("{col}+1")))
    }
}

/// `to_f32(t[row, col])` of a matrix tile, `0.0f` where `row` reaches `rows` or `col` reaches
/// `cols` (each given only when the tile is not a multiple of the mma tile along that dim).
fn guarded_load(t: &Tile, row: &str, col: &str, rows: Option<usize>, cols: Option<usize>) -> String {
    let mut conds = Vec::new();
    if let Some(m) = rows {
        conds.push(format!("({row}) < {m}"));
    }
    if let Some(n) = cols {
        conds.push(format!("({col}) < {n}"));
    }
    let v = t.load(&two(row, col, t.shape.len()));
    if conds.is_empty() { v } else { format!("(({}) ? {v} : 0.0f)", conds.join(" && ")) }
}

/// A 32-bit register holding two consecutive-k elements of B (`[k, n]`) at (`row`, `col`).
fn b_pair_expr(b: &Tile, ty: &str, k: usize, n: usize, row: &str, col: &str) -> String {
    let r = b.shape.len();
    let (sb0, sb1) = (b.strides[r - 2], b.strides[r - 1]);
    if b.ctype == ty && sb0 == 1 && sb1 % 2 == 0 && k % 16 == 0 {
        let load = format!("*reinterpret_cast<const uint32_t*>(&{}[({row}) + ({col})*{sb1}])", b.var);
        if n % 8 != 0 { format!("(({col}) < {n} ? {load} : 0u)") } else { load }
    } else {
        let kl = (k % 16 != 0).then_some(k);
        let lim = (n % 8 != 0).then_some(n);
        let at = |row: &str, col: &str| guarded_load(b, row, col, kl, lim);
        format!("mirage::pack2<{ty}>({}, {})", at(row, col), at(&format!("{row}+1"), col))
    }
}

/// Whether B goes through `ldmatrix.trans`: a row-major `[k][n]` tile in the mma type with
/// 16-byte aligned rows (every tile starts 16-byte aligned in shared memory).
fn b_by_ldmatrix(b: &Tile, ty: &str, k: usize, n: usize) -> bool {
    let r = b.shape.len();
    let (sb0, sb1) = (b.strides[r - 2], b.strides[r - 1]);
    b.ctype == ty && sb1 == 1 && sb0 % 8 == 0 && n % 8 == 0 && k % 16 == 0 && b.offset % 16 == 0 && b.bytes % 16 == 0
}

/// A multi-index for a rank-`r` tile whose leading dims are 1.
fn two(row: &str, col: &str, r: usize) -> Vec<String> {
    let mut v = vec!["0".to_string(); r];
    v[r - 2] = row.to_string();
    v[r - 1] = col.to_string();
    v
}

const FOREVER: usize = usize::MAX / 2;

/// Placeholder for the static shared-memory declarations, known only after the body is generated.
const RED_MARKER: &str = "/*@static-shared@*/";

/// Generates the kernel `name` for block graph `bg`.
pub fn generate_kernel(bg: &BlockGraph, name: &str, opts: &KernelOptions) -> Result<KernelSource, CodegenError> {
    bg.validate().map_err(CodegenError::Ir)?;
    let mut stages = opts.max_stages.clamp(1, bg.forloop_range().max(1));
    loop {
        match try_generate(bg, name, stages) {
            Ok(k) if k.smem_bytes + k.static_smem_bytes <= opts.max_smem_bytes => return Ok(k),
            Ok(k) if stages > 1 => {
                let _ = k;
                stages -= 1;
            }
            Ok(k) => {
                return Err(CodegenError::SharedMemory {
                    kernel: name.to_string(),
                    needed: k.smem_bytes + k.static_smem_bytes,
                    available: opts.max_smem_bytes,
                });
            }
            Err(e) => return Err(e),
        }
    }
}

fn try_generate(bg: &BlockGraph, name: &str, max_stages: usize) -> Result<KernelSource, CodegenError> {
    let nodes = bg.nodes();
    let n = nodes.len();
    let frange = bg.forloop_range();
    let threads = bg.threads();
    let rp = RegisterPlan::new(bg);
    let mut g = Gen {
        bg,
        threads,
        warps: threads / 32,
        tiles: vec![Vec::new(); n],
        fused: rp.fused.clone(),
        rp,
        stages: 1,
        out: String::new(),
        uses_red: false,
    };

    // Users of every tile.
    let mut users: Vec<Vec<Vec<usize>>> = nodes.iter().map(|nd| vec![Vec::new(); nd.outputs.len()]).collect();
    for (i, nd) in nodes.iter().enumerate() {
        for t in &nd.inputs {
            users[t.node][t.port].push(i);
        }
    }
    // With one iteration, acc_sum / acc_max / acc_rescale are the identity: alias their operand.
    let mut alias: Vec<Option<TensorRef>> = vec![None; n];
    if frange == 1 {
        for (i, nd) in nodes.iter().enumerate() {
            if matches!(nd.op, BlockOp::Accum { acc: AccKind::Sum | AccKind::Max | AccKind::Rescale }) {
                let src = nd.inputs[0];
                alias[i] = Some(alias[src.node].filter(|_| src.port == 0).unwrap_or(src));
            }
        }
        // The operand must stay alive for the alias's users.
        for i in (0..n).rev() {
            if let Some(src) = alias[i] {
                let extra = users[i][0].clone();
                users[src.node][src.port].extend(extra);
            }
        }
    }
    let in_loop = |i: usize| match nodes[i].op {
        BlockOp::Accum { .. } | BlockOp::Output { .. } => false,
        _ => nodes[i].outputs.first().is_some_and(|t| t.phase == Phase::InLoop),
    };
    let pos = |i: usize| if in_loop(i) || matches!(nodes[i].op, BlockOp::Accum { .. }) { 1 + i } else { 1 + n + i };

    // The emission sections, each in emission order: hoisted operators; the loop body (operators
    // and the accumulators not folded into a register matmul or aliased away); the epilogue
    // (after-loop operators and output savers).
    let in_body = |j: usize| {
        !(matches!(nodes[j].op, BlockOp::Input { .. })
            || g.rp.hoisted[j]
            || (matches!(nodes[j].op, BlockOp::Accum { .. })
                && (g.fused.iter().any(|f| *f == Some(j)) || alias[j].is_some()))
            || (!in_loop(j) && !matches!(nodes[j].op, BlockOp::Accum { .. })))
    };
    let in_epilogue = |i: usize| {
        matches!(nodes[i].op, BlockOp::Output { .. }) || (!in_loop(i) && !matches!(nodes[i].op, BlockOp::Accum { .. }))
    };
    let sections: [Vec<usize>; 3] = [
        (0..n).filter(|&i| g.rp.hoisted[i]).collect(),
        (0..n).filter(|&i| in_body(i)).collect(),
        (0..n).filter(|&i| in_epilogue(i)).collect(),
    ];
    // Element-wise groups, per section.
    let port0_users: Vec<Vec<usize>> = users.iter().map(|u| u.first().cloned().unwrap_or_default()).collect();
    let ew = ElementwiseGroups::new(bg, &sections, &port0_users, &g.rp);
    // A group runs at its head's position: every member's tile is written there, and operands
    // of later members are read there.
    let gpos = |i: usize| ew.group_of[i].map_or(pos(i), |gid| pos(ew.groups[gid][0]));
    let last_use = |i: usize, p: usize| users[i][p].iter().map(|&u| gpos(u)).max().unwrap_or(gpos(i));
    let mut planner = SmemPlanner::default();
    let any_pipelined =
        nodes.iter().any(|nd| matches!(nd.op, BlockOp::Input { forloop_dim: Some(_), .. })) && frange > 1;
    g.stages = if any_pipelined { max_stages } else { 1 };
    let mut copy_plans: Vec<Option<CopyPlan>> = (0..n).map(|_| None).collect();
    let mut scratch: Vec<Option<Tile>> = vec![None; n];
    for (i, nd) in nodes.iter().enumerate() {
        let mut tiles = Vec::new();
        for (p, desc) in nd.outputs.iter().enumerate() {
            if g.fused[i].is_some() || g.rp.reg[i] || ew.in_register[i] {
                tiles.push(None);
                continue;
            }
            if let Some(src) = alias[i] {
                let t = g.tiles[src.node][src.port].clone();
                tiles.push(t);
                continue;
            }
            let var = if nd.outputs.len() == 1 { format!("t{i}") } else { format!("t{i}_{p}") };
            let tile = match &nd.op {
                BlockOp::Input { input, forloop_dim, .. } => {
                    let kdesc = &bg.inputs()[*input];
                    let plan = copy_plan(kdesc, &desc.shape);
                    let pipelined = forloop_dim.is_some() && frange > 1 && plan.vec > 1;
                    let (strides, elements) = input_tile_strides(kdesc, &desc.shape, plan.vec > 1);
                    let bytes = elements * kdesc.dtype.size_bytes();
                    let stage_bytes = bytes.div_ceil(super::smem::ALIGN) * super::smem::ALIGN;
                    let nst = if pipelined { g.stages } else { 1 };
                    let offset = planner.alloc(stage_bytes * nst, Interval { start: 0, end: FOREVER });
                    copy_plans[i] = Some(plan);
                    Tile {
                        var,
                        ctype: ctype(kdesc.dtype),
                        dtype: kdesc.dtype,
                        shape: desc.shape.clone(),
                        strides,
                        offset,
                        bytes: stage_bytes,
                        pipelined,
                    }
                }
                _ => {
                    let numel: usize = desc.shape.iter().product();
                    let persistent = matches!(nd.op, BlockOp::Accum { .. })
                        || (matches!(nd.op, BlockOp::RunningMax { .. }) && p == 0);
                    let live = if g.rp.hoisted[i] {
                        // Written before the loop; free once it starts unless read in it.
                        let end = if g.rp.dead_in_loop(bg, TensorRef { node: i, port: p }) { 0 } else { FOREVER };
                        Interval { start: 0, end }
                    } else if persistent {
                        Interval { start: 0, end: FOREVER }
                    } else {
                        Interval { start: gpos(i), end: last_use(i, p) }
                    };
                    // Tiles written by matmul fragments or element-wise ops and read as mma
                    // operands: rows padded by 16 bytes (see `padded_f32_strides`).
                    let padded = matches!(
                        nd.op,
                        BlockOp::Matmul | BlockOp::Unary { .. } | BlockOp::Binary { .. } | BlockOp::RmsNorm { .. }
                    );
                    // An element-wise result read only as a tensor-core operand of its own type
                    // is stored in that type: the matmul would round it to it when packing the
                    // fragment anyway, so the values are identical, the tile is half the size and
                    // the operand loads are 32-bit pairs or ldmatrix.
                    let mma_typed =
                        matches!(nd.op, BlockOp::Unary { .. } | BlockOp::Binary { .. } | BlockOp::RmsNorm { .. })
                            && desc.dtype != DType::F32
                            && !users[i][p].is_empty()
                            && users[i][p].iter().all(|&u| {
                                matches!(nodes[u].op, BlockOp::Matmul) && mma_dtype(bg, u) == Some(desc.dtype)
                            });
                    if mma_typed {
                        let (strides, elements) = padded_mma_strides(&desc.shape, desc.dtype.size_bytes());
                        let bytes = elements * desc.dtype.size_bytes();
                        let offset = planner.alloc(bytes, live);
                        Tile {
                            var,
                            ctype: ctype(desc.dtype),
                            dtype: desc.dtype,
                            shape: desc.shape.clone(),
                            strides,
                            offset,
                            bytes: bytes.div_ceil(16) * 16,
                            pipelined: false,
                        }
                    } else {
                        let (strides, elements) =
                            if padded { padded_f32_strides(&desc.shape) } else { (row_major(&desc.shape), numel) };
                        let offset = planner.alloc(elements * 4, live);
                        Tile {
                            var,
                            ctype: "float",
                            dtype: desc.dtype,
                            shape: desc.shape.clone(),
                            strides,
                            offset,
                            bytes: elements * 4,
                            pipelined: false,
                        }
                    }
                }
            };
            tiles.push(Some(tile));
        }
        if let BlockOp::RmsNorm { .. } = nd.op {
            let rows = nd.outputs[0].shape.iter().product::<usize>() / nd.outputs[0].shape.last().copied().unwrap_or(1);
            let at = if g.rp.hoisted[i] { 0 } else { pos(i) };
            let offset = planner.alloc(rows * 4, Interval { start: at, end: at });
            let mut shape = nd.outputs[0].shape.clone();
            if let Some(l) = shape.last_mut() {
                *l = 1;
            }
            scratch[i] = Some(Tile {
                var: format!("s{i}"),
                ctype: "float",
                dtype: DType::F32,
                strides: row_major(&shape),
                shape,
                offset,
                bytes: rows * 4,
                pipelined: false,
            });
        }
        g.tiles[i] = tiles;
    }
    let smem_bytes = planner.total();

    // ---- signature ----
    let grid = bg.grid();
    let mut params = Vec::new();
    for (j, d) in bg.inputs().iter().enumerate() {
        params.push(format!("const {}* __restrict__ in{j}", ctype(d.dtype)));
    }
    let out_descs = bg.output_descs();
    for (k, d) in out_descs.iter().enumerate() {
        params.push(format!("{}* __restrict__ out{k}", ctype(d.dtype)));
    }
    writeln!(
        g.out,
        "// block graph: grid {:?}, {} threads, forloop_range {}, {} pipeline stage(s), {} B shared memory",
        grid, threads, frange, g.stages, smem_bytes
    )
    .ok();
    writeln!(g.out, "extern \"C\" __global__ void __launch_bounds__({threads}) {name}({}) {{", params.join(", ")).ok();
    g.line(1, "extern __shared__ __align__(128) unsigned char smem[];");
    g.line(1, RED_MARKER);
    g.line(1, "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;");
    g.line(1, "const int bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;");
    g.line(1, "(void)warp; (void)lane; (void)bx; (void)by; (void)bz;");
    // Pointers of non-pipelined tiles.
    for i in 0..n {
        if alias[i].is_some() {
            continue;
        }
        for t in g.tiles[i].clone().into_iter().flatten() {
            if !t.pipelined {
                g.line(
                    1,
                    &format!("{}* const {} = reinterpret_cast<{}*>(smem + {});", t.ctype, t.var, t.ctype, t.offset),
                );
            }
        }
        if let Some(s) = scratch[i].clone() {
            g.line(1, &format!("float* const {} = reinterpret_cast<float*>(smem + {});", s.var, s.offset));
        }
    }
    // Register accumulators of fused matmuls and of register values summed over the iterations.
    for i in 0..n {
        if g.rp.reg_acc[i] {
            let b = reg_bands(&g, nodes[i].inputs[0].node);
            let len = b.per_warp * b.nt;
            g.line(1, &format!("float racc{i}[{len}][4];"));
            g.line(1, &format!("#pragma unroll\n  for (int j = 0; j < {len}; ++j) {{ racc{i}[j][0] = racc{i}[j][1] = racc{i}[j][2] = racc{i}[j][3] = 0.0f; }}"));
        }
        if g.fused[i].is_some() {
            let tpw = racc_len(&g, i);
            g.line(1, &format!("float racc{i}[{tpw}][4];"));
            g.line(1, &format!("#pragma unroll\n  for (int j = 0; j < {tpw}; ++j) {{ racc{i}[j][0] = racc{i}[j][1] = racc{i}[j][2] = racc{i}[j][3] = 0.0f; }}"));
        }
    }

    // ---- loads ----
    let block_offset = |i: usize, iter: &str| -> Vec<String> {
        let BlockOp::Input { input, imap, forloop_dim } = &nodes[i].op else { return vec![] };
        let kdesc = &bg.inputs()[*input];
        let tile = &nodes[i].outputs[0].shape;
        (0..kdesc.shape.len())
            .map(|d| {
                let mut terms = Vec::new();
                for (a, axis) in ["bx", "by", "bz"].iter().enumerate() {
                    if imap[a] == Some(d) {
                        terms.push(format!("{axis}*{}", kdesc.shape[d] / grid[a]));
                    }
                }
                if *forloop_dim == Some(d) {
                    terms.push(format!("({iter})*{}", tile[d]));
                }
                if terms.is_empty() { "0".into() } else { terms.join(" + ") }
            })
            .collect()
    };
    let emit_load = |g: &mut Gen, indent: usize, i: usize, iter: &str, buf: &str| {
        let BlockOp::Input { input, .. } = &nodes[i].op else { return };
        let kdesc = &bg.inputs()[*input];
        let tile = g.tiles[i][0].clone().expect("input tiles are planned");
        let plan = copy_plans[i].as_ref().expect("input copy planned");
        let boff = block_offset(i, iter);
        let shape = &tile.shape;
        // rows: all dims except the vector dim.
        let c = plan.vec_dim;
        let mut row_shape = shape.clone();
        if let Some(c) = c {
            row_shape[c] = shape[c] / plan.vec;
        }
        let total: usize = row_shape.iter().product();
        let idx = unflatten("v", &row_shape);
        let mut gterms = Vec::new();
        let mut sterms = Vec::new();
        for d in 0..shape.len() {
            let local = if Some(d) == c && plan.vec > 1 { format!("{}*{}", idx[d], plan.vec) } else { idx[d].clone() };
            gterms.push(format!("(long long)({} + {local})*{}", boff[d], kdesc.strides[d]));
            if shape[d] > 1 {
                sterms.push(format!("({local})*{}", tile.strides[d]));
            }
        }
        let soff = if sterms.is_empty() { "0".to_string() } else { sterms.join(" + ") };
        // Strength-reduced copies: with the copying threads a multiple of the vectors of one
        // outer row, every copy of a thread has the same inner position and the next one is a
        // fixed number of outer rows further: two pointer increments per copy instead of the
        // full 64-bit index arithmetic (the weight-bound kernels issue tens of copies per thread
        // and iteration from one or two warps per scheduler; ncu on the H200: latency-bound
        // instruction issue, about 0.2 instructions per cycle per scheduler).
        let outer = (0..shape.len()).find(|&d| row_shape[d] > 1);
        if let (true, Some(d0)) = (plan.vec > 1 && total > g.threads, outer) {
            let inner: usize = row_shape[d0 + 1..].iter().product();
            // The largest multiple of `inner` threads copies (the rest idle for this tile).
            let used = g.threads / inner * inner;
            if used > 0 && total > used {
                let mult = if Some(d0) == c { plan.vec } else { 1 };
                let rows = used / inner * mult;
                let (gstep, sstep) = (rows * kdesc.strides[d0], rows * tile.strides[d0]);
                let ty = ctype(kdesc.dtype);
                g.line(indent, &if used == g.threads { "{".to_string() } else { format!("if (tid < {used}) {{") });
                g.line(indent + 1, "const int v = tid;");
                g.line(indent + 1, &format!("const {ty}* src = in{input} + ({});", gterms.join(" + ")));
                g.line(indent + 1, &format!("{ty}* dst = {buf} + ({soff});"));
                g.line(indent + 1, &format!("for (int w = tid; w < {total}; w += {used}, src += {gstep}, dst += {sstep}) mirage::cp_async16(dst, src);"));
                g.line(indent, "}");
                return;
            }
        }
        g.line(indent, &format!("for (int v = tid; v < {total}; v += {}) {{", g.threads));
        g.line(indent + 1, &format!("const long long go = {};", gterms.join(" + ")));
        if plan.vec > 1 {
            g.line(indent + 1, &format!("mirage::cp_async16({buf} + ({soff}), in{input} + go);"));
        } else {
            g.line(indent + 1, &format!("{buf}[{soff}] = in{input}[go];"));
        }
        g.line(indent, "}");
    };
    let inputs: Vec<usize> = (0..n).filter(|&i| matches!(nodes[i].op, BlockOp::Input { .. })).collect();
    let stage_ptr =
        |t: &Tile, stage: &str| format!("reinterpret_cast<{}*>(smem + {} + ({stage})*{})", t.ctype, t.offset, t.bytes);
    // Once-loaded tiles (and every tile when there is no loop).
    g.line(1, "// tiles loaded once, before the loop");
    for &i in &inputs {
        let t = g.tiles[i][0].clone().expect("planned");
        let once = !matches!(nodes[i].op, BlockOp::Input { forloop_dim: Some(_), .. }) || frange == 1;
        if once {
            let var = t.var.clone();
            emit_load(&mut g, 1, i, "0", &var);
        }
    }
    g.line(1, "mirage::cp_async_commit();");
    let pipelined: Vec<usize> =
        inputs.iter().copied().filter(|&i| g.tiles[i][0].as_ref().is_some_and(|t| t.pipelined)).collect();
    let sync_looped: Vec<usize> = inputs
        .iter()
        .copied()
        .filter(|&i| {
            frange > 1
                && matches!(nodes[i].op, BlockOp::Input { forloop_dim: Some(_), .. })
                && !g.tiles[i][0].as_ref().is_some_and(|t| t.pipelined)
        })
        .collect();
    let s = g.stages;
    if !pipelined.is_empty() {
        g.line(1, &format!("// pipeline prologue: iterations 0..{}", s - 1));
        for st in 0..s - 1 {
            g.line(1, &format!("if ({st} < {frange}) {{"));
            for &i in &pipelined {
                let t = g.tiles[i][0].clone().expect("planned");
                let buf = stage_ptr(&t, &st.to_string());
                emit_load(&mut g, 2, i, &st.to_string(), &buf);
            }
            g.line(1, "}");
            g.line(1, "mirage::cp_async_commit();");
        }
    }

    // ---- loop-invariant operators and preloaded fragments, before the loop ----
    let preloads: Vec<usize> = (0..n).filter(|&i| g.rp.preload_a[i]).collect();
    if g.rp.hoisted.iter().any(|&h| h) || !preloads.is_empty() {
        // The once-loaded tiles are the first commit group: complete when at most the
        // prologue's groups are pending.
        g.line(1, "// loop-invariant operators, once");
        g.line(1, &format!("mirage::cp_async_wait<{}>();", if pipelined.is_empty() { 0 } else { s - 1 }));
        g.sync(1);
        for &i in &sections[0] {
            match ew.group_of[i] {
                Some(gid) if ew.groups[gid][0] != i => continue,
                Some(gid) => gen_group(&mut g, 1, &ew, gid, &scratch, &[])?,
                None => gen_op(&mut g, 1, i, &scratch)?,
            }
            g.sync(1);
        }
        for &i in &preloads {
            let a = g.tile(nodes[i].inputs[0]).clone();
            let bands = RowBands::of(bg, i).expect("row-owned matmuls have bands");
            let dtype = mma_dtype(bg, i).expect("register chains admit only f16/bf16 matmuls");
            g.preload_a(1, bands, dtype, &a, &format!("pa{i}"));
        }
    }

    // ---- the loop ----
    g.line(1, &format!("for (int it = 0; it < {frange}; ++it) {{"));
    if !pipelined.is_empty() {
        g.line(2, &format!("{{ const int nit = it + {}; if (nit < {frange}) {{", s - 1));
        for &i in &pipelined {
            let t = g.tiles[i][0].clone().expect("planned");
            let buf = stage_ptr(&t, &format!("nit % {s}"));
            emit_load(&mut g, 3, i, "nit", &buf);
        }
        g.line(2, "} }");
        g.line(2, "mirage::cp_async_commit();");
        g.line(2, &format!("mirage::cp_async_wait<{}>();", s - 1));
    } else {
        g.line(2, "mirage::cp_async_wait<0>();");
    }
    for &i in &pipelined {
        let t = g.tiles[i][0].clone().expect("planned");
        g.line(2, &format!("{}* const {} = {};", t.ctype, t.var, stage_ptr(&t, &format!("it % {s}"))));
    }
    if !sync_looped.is_empty() {
        g.sync(2);
        for &i in &sync_looped {
            let var = g.tiles[i][0].as_ref().expect("planned").var.clone();
            emit_load(&mut g, 2, i, "it", &var);
        }
    }
    g.sync(2);
    let body = &sections[1];
    for (k, &i) in body.iter().enumerate() {
        let nd = &nodes[i];
        if let BlockOp::Accum { acc } = nd.op {
            if g.rp.reg_sum[i] {
                let x = nd.inputs[0].node;
                let bands = reg_bands(&g, x);
                let out = g.tiles[i][0].clone().expect("planned");
                g.row_sum_regs(2, bands, &format!("r{x}"), &out);
            } else if g.rp.reg_acc[i] {
                let x = nd.inputs[0].node;
                let RowBands { per_warp, nt, .. } = reg_bands(&g, x);
                g.line(2, "// sum over the iterations, in registers");
                g.line(2, "#pragma unroll");
                g.line(2, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
                g.line(3, "#pragma unroll");
                g.line(3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
                g.line(4, "#pragma unroll");
                g.line(4, &format!("for (int q = 0; q < 4; ++q) {{ racc{i}[mi * {nt} + nt][q] += r{x}[mi][nt][q]; }}"));
                g.line(3, "}");
                g.line(2, "}");
            } else {
                gen_accumulate(&mut g, i, acc, frange)?;
            }
        } else {
            match ew.group_of[i] {
                Some(gid) if ew.groups[gid][0] != i => continue,
                Some(gid) => gen_group(&mut g, 2, &ew, gid, &scratch, &[])?,
                None => gen_op(&mut g, 2, i, &scratch)?,
            }
        }
        // Operators whose results stay with the warp that computed them (register values,
        // register accumulators, row sums of owned rows) need no barrier between them: each
        // reads only tiles that were complete before the first of them ran.
        let next = body.get(k + 1);
        if g.rp.warp_local(i) && next.is_some_and(|&j| g.rp.warp_local(j)) {
            g.line(2, "// no barrier: the next operator reads only this warp's registers and completed tiles");
            continue;
        }
        g.sync(2);
    }
    g.line(1, "}");

    // ---- after the loop ----
    g.line(1, "// after the loop");
    for i in 0..n {
        // Row-owned register accumulators: (node whose racc it is, acc tile node, bands).
        let row_acc = if g.rp.reg_acc[i] {
            Some((i, i, reg_bands(&g, nodes[i].inputs[0].node)))
        } else if let (Some(u), true) = (g.fused[i], g.rp.row_owned[i]) {
            Some((i, u, RowBands::of(bg, i).expect("row-owned matmuls have bands")))
        } else {
            None
        };
        if let Some((r, u, RowBands { mt, per_warp, nt, .. })) = row_acc {
            let c = g.tiles[u][0].clone().expect("acc tile planned");
            let (m, nn) = (mt * 16, nt * 8);
            g.line(1, "#pragma unroll");
            g.line(1, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
            g.line(2, &format!("const int mt = warp + mi * {}; if (mt < {mt}) {{", g.warps));
            g.line(3, "#pragma unroll");
            g.line(3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
            g.line(4, &format!("const float* d = racc{r}[mi * {nt} + nt];"));
            g.store_fragment(4, &c, m, nn);
            g.line(3, "}");
            g.line(2, "}");
            g.line(1, "}");
            continue;
        }
        if let Some(u) = g.fused[i] {
            let (m, nn) = matmul_mn(bg, i);
            let c = g.tiles[u][0].clone().expect("acc tile planned");
            let tiles = m.div_ceil(16) * nn.div_ceil(8);
            let kt = matmul_k(bg, i).div_ceil(16);
            let split = k_split(tiles, kt, g.warps);
            if split > 1 {
                // One round per k-slice: the slice-0 items store, the others add, a barrier
                // between rounds (each tile has one item per slice: no two writers in a round).
                let tpw = (tiles * split).div_ceil(g.warps);
                for round in 0..split {
                    g.line(1, "#pragma unroll");
                    g.line(1, &format!("for (int j = 0; j < {tpw}; ++j) {{"));
                    g.line(
                        2,
                        &format!(
                            "const int q = warp + j * {}, t = q % {tiles}; if (q / {tiles} == {round}) {{",
                            g.warps
                        ),
                    );
                    g.line(
                        3,
                        &format!(
                            "const int mt = t / {}, nt = t % {}; const float* d = racc{i}[j];",
                            nn.div_ceil(8),
                            nn.div_ceil(8)
                        ),
                    );
                    g.store_fragment_op(3, &c, m, nn, if round == 0 { "=" } else { "+=" });
                    g.line(2, "}");
                    g.line(1, "}");
                    g.sync(1);
                }
                continue;
            }
            let tpw = tiles.div_ceil(g.warps);
            g.line(1, "#pragma unroll");
            g.line(1, &format!("for (int j = 0; j < {tpw}; ++j) {{"));
            g.line(2, &format!("const int t = warp + j * {}; if (t < {tiles}) {{", g.warps));
            g.line(
                3,
                &format!(
                    "const int mt = t / {}, nt = t % {}; const float* d = racc{i}[j];",
                    nn.div_ceil(8),
                    nn.div_ceil(8)
                ),
            );
            g.store_fragment(3, &c, m, nn);
            g.line(2, "}");
            g.line(1, "}");
        }
    }
    for i in 0..n {
        if let BlockOp::Accum { acc: AccKind::RmsLast } = nodes[i].op {
            let x = g.tile(nodes[i].inputs[0]).clone();
            let count = frange * x.shape.last().copied().unwrap_or(1);
            let t = g.tiles[i][0].clone().expect("planned");
            g.elementwise(1, t.numel(), &format!("{0}[e] = sqrtf({0}[e] / {1});", t.var, float_lit(count as f32)));
        }
    }
    g.sync(1);
    // The output index of every saver.
    let mut saver_of = vec![usize::MAX; n];
    for (k, i) in (0..n).filter(|&i| matches!(nodes[i].op, BlockOp::Output { .. })).enumerate() {
        saver_of[i] = k;
    }
    for i in 0..n {
        let nd = &nodes[i];
        if let (Some(gid), true) = (ew.group_of[i], in_epilogue(i)) {
            if ew.groups[gid][0] == i {
                gen_group(&mut g, 1, &ew, gid, &scratch, &saver_of)?;
                g.sync(1);
            }
            continue;
        }
        match &nd.op {
            BlockOp::Output { .. } => {
                let saver = saver_of[i];
                let t = g.tile(nd.inputs[0]).clone();
                let idx = unflatten("e", &t.shape);
                let store = saver_store(nd, &t.shape, saver, &idx, &t.load(&idx), &out_descs[saver]);
                g.elementwise(1, t.numel(), &store);
            }
            BlockOp::Accum { .. } => {}
            _ if !in_loop(i) => {
                gen_op(&mut g, 1, i, &scratch)?;
                g.sync(1);
            }
            _ => {}
        }
    }
    g.line(0, "}");
    let red = if g.uses_red { format!("__shared__ float red[{}];", g.warps) } else { String::new() };
    let code = g.out.replacen(
        &format!("  {RED_MARKER}\n"),
        &if red.is_empty() { String::new() } else { format!("  {red}\n") },
        1,
    );
    let static_smem_bytes = if g.uses_red { 4 * g.warps } else { 0 };
    Ok(KernelSource { name: name.to_string(), code, grid, threads, smem_bytes, static_smem_bytes, stages: g.stages })
}

/// The statement of output saver `nd` (output `saver`, device descriptor `desc`) writing
/// `value`, the element at multi-index `idx` of its operand tile of shape `shape`.
fn saver_store(
    nd: &crate::ir::BlockNode,
    shape: &[usize],
    saver: usize,
    idx: &[String],
    value: &str,
    desc: &TensorDesc,
) -> String {
    let BlockOp::Output { omap } = &nd.op else { return String::new() };
    let gstr = row_major(&desc.shape);
    let terms: Vec<String> = (0..shape.len())
        .map(|d| {
            let mut off = Vec::new();
            for (a, axis) in ["bx", "by", "bz"].iter().enumerate() {
                if omap[a] == Some(d) {
                    off.push(format!("{axis}*{}", shape[d]));
                }
            }
            off.push(idx[d].clone());
            format!("(long long)({})*{}", off.join(" + "), gstr[d])
        })
        .collect();
    format!("out{saver}[{}] = mirage::from_f32<{}>({value});", terms.join(" + "), ctype(desc.dtype))
}

/// Runs of element-wise operators over the same tile shape, emitted as one pass.
///
/// Within one emission section (loop-invariant operators, the loop body, the epilogue), a run
/// of consecutive `Unary`/`Binary` operators whose outputs have one shape — optionally headed by
/// an `RmsNorm` (its row reduction runs first, its scaling joins the pass) and, in the epilogue,
/// followed by output savers of group members — reads each operand element once and computes
/// every member per element in registers. A member read only inside its group gets no
/// shared-memory tile; one read elsewhere is also stored. One loop and one barrier instead of one
/// per operator.
struct ElementwiseGroups {
    /// Members of each group, in emission order (at least two operators, or one and a saver).
    groups: Vec<Vec<usize>>,
    /// The group of each node.
    group_of: Vec<Option<usize>>,
    /// The member's value lives only in a register of the pass.
    in_register: Vec<bool>,
    /// The common output shape of each group.
    shapes: Vec<Vec<usize>>,
}

impl ElementwiseGroups {
    fn new(bg: &BlockGraph, sections: &[Vec<usize>], users: &[Vec<usize>], rp: &RegisterPlan) -> ElementwiseGroups {
        let nodes = bg.nodes();
        let n = nodes.len();
        let mut ew = ElementwiseGroups {
            groups: Vec::new(),
            group_of: vec![None; n],
            in_register: vec![false; n],
            shapes: Vec::new(),
        };
        let shape_of = |i: usize| nodes[i].outputs.first().map(|t| t.shape.clone());
        let pointwise = |i: usize| {
            matches!(nodes[i].op, BlockOp::Unary { .. } | BlockOp::Binary { .. })
                && !rp.reg[i]
                && nodes[i].outputs.len() == 1
        };
        for section in sections {
            let mut cur: Vec<usize> = Vec::new();
            let mut shape: Vec<usize> = Vec::new();
            let flush = |cur: &mut Vec<usize>, shape: &Vec<usize>, ew: &mut ElementwiseGroups| {
                let ops = cur.iter().filter(|&&i| !matches!(nodes[i].op, BlockOp::Output { .. })).count();
                if cur.len() >= 2 && ops >= 1 {
                    let gid = ew.groups.len();
                    for &i in cur.iter() {
                        ew.group_of[i] = Some(gid);
                    }
                    ew.groups.push(std::mem::take(cur));
                    ew.shapes.push(shape.clone());
                }
                cur.clear();
            };
            for &i in section {
                let joins = match nodes[i].op {
                    BlockOp::Unary { .. } | BlockOp::Binary { .. } if pointwise(i) => {
                        !cur.is_empty() && shape_of(i).as_ref() == Some(&shape)
                    }
                    BlockOp::Output { .. } => {
                        let t = nodes[i].inputs[0];
                        !cur.is_empty()
                            && t.port == 0
                            && cur.contains(&t.node)
                            && !matches!(nodes[t.node].op, BlockOp::Output { .. })
                    }
                    _ => false,
                };
                if joins {
                    cur.push(i);
                    continue;
                }
                flush(&mut cur, &shape, &mut ew);
                let head = pointwise(i) || matches!(nodes[i].op, BlockOp::RmsNorm { .. });
                if head {
                    cur.push(i);
                    shape = shape_of(i).unwrap_or_default();
                }
            }
            flush(&mut cur, &shape, &mut ew);
        }
        for (gid, members) in ew.groups.iter().enumerate() {
            for &i in members {
                if matches!(nodes[i].op, BlockOp::Output { .. }) {
                    continue;
                }
                ew.in_register[i] = !users[i].is_empty() && users[i].iter().all(|&u| ew.group_of[u] == Some(gid));
            }
        }
        ew
    }
}

/// Emits element-wise group `gid` as one pass (see [`ElementwiseGroups`]); `saver_of` gives
/// the output index of each saver (epilogue groups only).
fn gen_group(
    g: &mut Gen,
    indent: usize,
    ew: &ElementwiseGroups,
    gid: usize,
    scratch: &[Option<Tile>],
    saver_of: &[usize],
) -> Result<(), CodegenError> {
    let members = ew.groups[gid].clone();
    let shape = ew.shapes[gid].clone();
    let numel: usize = shape.iter().product();
    let nodes = g.bg.nodes();
    let names: Vec<String> = members.iter().map(|&i| nodes[i].op.name()).collect();
    g.line(indent, &format!("// one pass: {}", names.join(", ")));
    // An RmsNorm head reduces its rows first.
    if let BlockOp::RmsNorm { .. } = nodes[members[0]].op {
        let i = members[0];
        let x = g.tile(nodes[i].inputs[0]).clone();
        let sc = scratch[i].clone().expect("rms scratch planned");
        let last = x.shape.len() - 1;
        g.reduce(indent, &x, last, 1, "({x})*({x})", "sum", &format!("{}[{{o}}] = {{v}};", sc.var));
        g.sync(indent);
    }
    let idx = unflatten("e", &shape);
    let mut body = String::new();
    for &i in &members {
        let nd = &nodes[i];
        let operand = |g: &Gen, t: TensorRef| -> String {
            if t.port == 0 && members.contains(&t.node) { format!("v{}", t.node) } else { g.tile(t).load(&idx) }
        };
        let value = match &nd.op {
            BlockOp::Unary { op } => unary_expr(op, &operand(g, nd.inputs[0])),
            BlockOp::Binary { op } => binary_expr(*op, &operand(g, nd.inputs[0]), &operand(g, nd.inputs[1])),
            BlockOp::RmsNorm { eps } => {
                let sc = scratch[i].clone().expect("rms scratch planned");
                let nlast = shape.last().copied().unwrap_or(1);
                format!(
                    "{} * rsqrtf({}[e / {nlast}] / {} + {})",
                    operand(g, nd.inputs[0]),
                    sc.var,
                    float_lit(nlast as f32),
                    float_lit(eps.0)
                )
            }
            BlockOp::Output { .. } => {
                let t = nd.inputs[0];
                let k = saver_of[i];
                let descs = g.bg.output_descs();
                writeln!(body, "{}", saver_store(nd, &shape, k, &idx, &format!("v{}", t.node), &descs[k])).ok();
                continue;
            }
            _ => return Err(CodegenError::Unsupported(format!("{} in an element-wise group", nd.op.name()))),
        };
        writeln!(body, "const float v{i} = {value};").ok();
        if !ew.in_register[i] {
            let t = g.tiles[i][0].clone().expect("stored group members have tiles");
            writeln!(body, "{}", t.store(&idx, &format!("v{i}"))).ok();
        }
    }
    g.elementwise(indent, numel, body.trim_end());
    Ok(())
}

/// Register accumulator tiles per thread of fused matmul `i`.
fn racc_len(g: &Gen, i: usize) -> usize {
    if g.rp.row_owned[i] {
        let b = RowBands::of(g.bg, i).expect("row-owned matmuls have bands");
        b.per_warp * b.nt
    } else {
        let (m, nn) = matmul_mn(g.bg, i);
        let tiles = m.div_ceil(16) * nn.div_ceil(8);
        let split = k_split(tiles, matmul_k(g.bg, i).div_ceil(16), g.warps);
        (tiles * split).div_ceil(g.warps)
    }
}

/// Lanes per output of a reduction of `outputs` values of `len` elements each by `threads`
/// threads in one pass: the largest power of two up to 32 with `outputs * lanes <= threads` and at
/// least two elements per lane (1: not applicable).
fn lanes_per_output(outputs: usize, threads: usize, len: usize) -> usize {
    let mut l = 1;
    while l < 32 && outputs * l * 2 <= threads && len >= l * 4 {
        l *= 2;
    }
    l
}

/// How many ways a register-accumulated matmul of `tiles` mma tiles and `kt` k-steps splits its
/// k-steps over `warps` warps: the fewest slices that deal (tile, slice) items evenly to the
/// warps, when the tiles alone leave warps idle or unevenly loaded and every slice keeps at
/// least 8 k-steps (1: no split). The slices' partial sums meet once, after the loop.
fn k_split(tiles: usize, kt: usize, warps: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    if tiles == 0 || warps == 0 || tiles % warps == 0 {
        return 1;
    }
    let split = warps / gcd(tiles, warps);
    if split > 1 && kt % split == 0 && kt / split >= 8 { split } else { 1 }
}

/// The reduction length `k` of matmul node `i`.
fn matmul_k(bg: &BlockGraph, i: usize) -> usize {
    let nd = &bg.nodes()[i];
    bg.tile(nd.inputs[0]).map(|a| a.shape[a.shape.len() - 1]).unwrap_or(0)
}

/// The bands of register value `x`: those of the matmul at the head of its chain (unary
/// functions keep the fragment layout).
fn reg_bands(g: &Gen, x: usize) -> RowBands {
    let mut cur = x;
    while !matches!(g.bg.nodes()[cur].op, BlockOp::Matmul) {
        cur = g.bg.nodes()[cur].inputs[0].node;
    }
    RowBands::of(g.bg, cur).expect("register chains start at a matmul")
}

fn matmul_mn(bg: &BlockGraph, i: usize) -> (usize, usize) {
    let nd = &bg.nodes()[i];
    let s = &nd.outputs[0].shape;
    let r = s.len();
    (s[r - 2], s[r - 1])
}

/// Emits one in-loop or epilogue operator.
fn gen_op(g: &mut Gen, indent: usize, i: usize, scratch: &[Option<Tile>]) -> Result<(), CodegenError> {
    let nd = &g.bg.nodes()[i];
    let op = nd.op.clone();
    // Register chains (fusion::RegisterPlan): row-owned matmuls and unary functions on fragments.
    if matches!(op, BlockOp::Matmul) && g.rp.row_owned[i] {
        let bands = RowBands::of(g.bg, i).expect("row-owned matmuls have bands");
        let dtype = mma_dtype(g.bg, i).expect("register chains admit only f16/bf16 matmuls");
        let a_ref = nd.inputs[0];
        let a_tile = if g.rp.preload_a[i] || g.rp.reg[a_ref.node] { None } else { Some(g.tile(a_ref).clone()) };
        let b_tile = g.tile(nd.inputs[1]).clone();
        let a = if g.rp.preload_a[i] {
            ASource::Preloaded(format!("pa{i}"))
        } else if g.rp.reg[a_ref.node] {
            ASource::Regs(format!("r{}", a_ref.node))
        } else {
            ASource::Smem(a_tile.as_ref().expect("shared-memory A operand"))
        };
        let c = g.tiles[i].first().cloned().flatten();
        let out = if g.rp.reg[i] {
            RowOut::Regs(format!("r{i}"))
        } else if g.fused[i].is_some() {
            RowOut::Acc(format!("racc{i}"))
        } else {
            RowOut::Smem(c.as_ref().expect("planned"))
        };
        g.matmul_rows(indent, bands, dtype, &a, &b_tile, &out);
        return Ok(());
    }
    if let (BlockOp::Unary { op }, true) = (&op, g.rp.reg[i]) {
        let x = nd.inputs[0].node;
        let bands = reg_bands(g, x);
        g.unary_regs(indent, op, bands, &format!("r{x}"), &format!("r{i}"));
        return Ok(());
    }
    let args: Vec<Tile> = nd.inputs.iter().map(|&t| g.tile(t).clone()).collect();
    match op {
        BlockOp::Matmul => {
            if g.fused[i].is_some() {
                let name = format!("racc{i}");
                g.matmul(indent, &args[0], &args[1], None, Some(&name));
            } else {
                let c = g.tiles[i][0].clone().expect("planned");
                g.matmul(indent, &args[0], &args[1], Some(&c), None);
            }
        }
        BlockOp::Unary { op } => {
            let out = g.tiles[i][0].clone().expect("planned");
            let idx = unflatten("e", &out.shape);
            let body = out.store(&idx, &unary_expr(&op, &args[0].load(&idx)));
            g.elementwise(indent, out.numel(), &body);
        }
        BlockOp::Binary { op } => {
            let out = g.tiles[i][0].clone().expect("planned");
            let idx = unflatten("e", &out.shape);
            let body = out.store(&idx, &binary_expr(op, &args[0].load(&idx), &args[1].load(&idx)));
            g.elementwise(indent, out.numel(), &body);
        }
        BlockOp::ReduceSum { dim } | BlockOp::ReduceMax { dim } | BlockOp::ReduceSumTo { dim, .. } => {
            let out = g.tiles[i][0].clone().expect("planned");
            let (width, combine) = match op {
                BlockOp::ReduceSumTo { width, .. } => (width, "sum"),
                BlockOp::ReduceMax { .. } => (1, "max"),
                _ => (1, "sum"),
            };
            g.reduce(indent, &args[0], dim, width, "{x}", combine, &format!("{}[{{o}}] = {{v}};", out.var));
        }
        BlockOp::RmsNorm { eps } => {
            let out = g.tiles[i][0].clone().expect("planned");
            let s = scratch[i].clone().expect("rms scratch planned");
            let x = &args[0];
            let last = x.shape.len() - 1;
            let nlast = x.shape[last];
            g.reduce(indent, x, last, 1, "({x})*({x})", "sum", &format!("{}[{{o}}] = {{v}};", s.var));
            g.sync(indent);
            let idx = unflatten("e", &out.shape);
            let body = out.store(
                &idx,
                &format!(
                    "{} * rsqrtf({}[e / {nlast}] / {} + {})",
                    x.load(&idx),
                    s.var,
                    float_lit(nlast as f32),
                    float_lit(eps.0)
                ),
            );
            g.elementwise(indent, out.numel(), &body);
        }
        BlockOp::Concat { dim } => {
            let out = g.tiles[i][0].clone().expect("planned");
            let idx = unflatten("e", &out.shape);
            let split = args[0].shape[dim];
            let mut bidx = idx.clone();
            bidx[dim] = format!("({} - {split})", idx[dim]);
            let body = format!(
                "{}[e] = ({} < {split}) ? {} : {};",
                out.var,
                idx[dim],
                args[0].load(&idx),
                args[1].load(&bidx)
            );
            g.elementwise(indent, out.numel(), &body);
        }
        BlockOp::RunningMax { dim } => {
            let m = g.tiles[i][0].clone().expect("planned");
            let diff = g.tiles[i][1].clone().expect("planned");
            let store = format!(
                "{{ const float prev = {m}[{{o}}]; const float nm = (it == 0) ? {{v}} : fmaxf(prev, {{v}}); {d}[{{o}}] = (it == 0) ? __int_as_float(0xff800000) : prev - nm; {m}[{{o}}] = nm; }}",
                m = m.var,
                d = diff.var
            );
            g.reduce(indent, &args[0], dim, 1, "{x}", "max", &store);
        }
        BlockOp::Input { .. } | BlockOp::Output { .. } | BlockOp::Accum { .. } => {}
    }
    Ok(())
}

/// Emits the per-iteration fold of an accumulator.
fn gen_accumulate(g: &mut Gen, i: usize, acc: AccKind, _frange: usize) -> Result<(), CodegenError> {
    let nd = &g.bg.nodes()[i];
    let x = g.tile(nd.inputs[0]).clone();
    let out = g.tiles[i][0].clone().expect("planned");
    let last = x.shape.len() - 1;
    let idx = unflatten("e", &out.shape);
    match acc {
        AccKind::Sum => {
            let body = format!("{0}[e] = (it == 0 ? 0.0f : {0}[e]) + {1};", out.var, x.load(&idx));
            g.elementwise(2, out.numel(), &body);
        }
        AccKind::Max => {
            let body = format!("{0}[e] = (it == 0) ? {1} : fmaxf({0}[e], {1});", out.var, x.load(&idx));
            g.elementwise(2, out.numel(), &body);
        }
        AccKind::Rescale => {
            let r = g.tile(nd.inputs[1]).clone();
            let body = format!("{0}[e] = (it == 0) ? {1} : {0}[e] * {2} + {1};", out.var, x.load(&idx), r.load(&idx));
            g.elementwise(2, out.numel(), &body);
        }
        AccKind::SumLast | AccKind::RmsLast | AccKind::SumTo { .. } => {
            let width = if let AccKind::SumTo { width } = acc { width } else { 1 };
            let map = if acc == AccKind::RmsLast { "({x})*({x})" } else { "{x}" };
            let store = format!("{0}[{{o}}] = (it == 0 ? 0.0f : {0}[{{o}}]) + {{v}};", out.var);
            g.reduce(2, &x, last, width, map, "sum", &store);
        }
        AccKind::SumLastRescale => {
            let r = g.tile(nd.inputs[1]).clone();
            let oidx = unflatten("{o}", &out.shape);
            let rv = r.load(&oidx);
            let store = format!("{0}[{{o}}] = (it == 0) ? {{v}} : {0}[{{o}}] * {rv} + {{v}};", out.var);
            g.reduce(2, &x, last, 1, "{x}", "sum", &store);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{GridMap, Scalar};

    /// `(name, first byte, bytes)` of every dynamic shared-memory tile pointer in `code`, with
    /// the byte count taken from the tile's plan order (next offset or total).
    fn tile_offsets(code: &str) -> Vec<(String, usize)> {
        code.lines()
            .filter_map(|l| {
                let l = l.trim();
                let rest = l.strip_prefix("float* const ").or_else(|| l.strip_prefix("__half* const "))?;
                let (name, rest) = rest.split_once(" = ")?;
                let off = rest.split("smem + ").nth(1)?.split(')').next()?.trim().parse().ok()?;
                Some((name.to_string(), off))
            })
            .collect()
    }

    /// ntrans' block graph: `y = rms_norm(x1 + x2 * (rms_norm(x0) + x1))`, one row per block.
    fn ntrans_like() -> BlockGraph {
        let d = TensorDesc::new(&[8, 4096], DType::F16);
        let mut bg = BlockGraph::new(vec![d.clone(), d.clone(), d], [8, 1, 1], 128, 1).unwrap();
        let m: GridMap = [Some(0), None, None];
        let x0 = bg.input(0, m, None).unwrap();
        let x1 = bg.input(1, m, None).unwrap();
        let x2 = bg.input(2, m, None).unwrap();
        let n0 = bg.op(BlockOp::RmsNorm { eps: Scalar(0.0) }, &[x0]).unwrap();
        let a = bg.binary(BinaryOp::Add, x1, n0).unwrap();
        let b = bg.binary(BinaryOp::Mul, x2, a).unwrap();
        let c = bg.binary(BinaryOp::Add, x1, b).unwrap();
        let r = bg.accum(AccKind::RmsLast, &[c]).unwrap();
        let c_out = bg.accum(AccKind::Sum, &[c]).unwrap();
        let y = bg.binary(BinaryOp::Div, c_out, r).unwrap();
        bg.output(y, m).unwrap();
        bg
    }

    #[test]
    fn few_accumulated_tiles_split_their_k_steps_over_the_warps() {
        assert_eq!(k_split(4, 32, 8), 2, "gated_mlp_bs1: 4 tiles, 8 warps");
        assert_eq!(k_split(6, 64, 8), 4, "rmsnorm_linear_bs1: 6 tiles, 8 warps: 24 items, 3 per warp");
        assert_eq!(k_split(6, 32, 4), 2, "rmsnorm_linear_bs8: 6 tiles, 4 warps: 12 items, 3 per warp");
        assert_eq!(k_split(4, 32, 4), 1, "one tile per warp already");
        assert_eq!(k_split(6, 16, 8), 1, "slices of 4 k-steps are too short");
        assert_eq!(k_split(16, 4, 8), 1);
    }

    #[test]
    fn an_element_wise_group_runs_as_one_pass_and_its_stored_member_does_not_overlap_the_norm_scratch() {
        let bg = ntrans_like();
        let k = generate_kernel(&bg, "ntrans_like", &KernelOptions::default()).unwrap();
        assert!(k.code.contains("// one pass: rms_norm, add, mul, add"), "{}", k.code);
        // rms_norm's row sums (s3) are read during the whole pass that writes the last add (t6).
        let tiles = tile_offsets(&k.code);
        let at = |n: &str| {
            tiles.iter().find(|t| t.0 == n).map(|t| t.1).unwrap_or_else(|| panic!("no tile {n} in\n{}", k.code))
        };
        let (s3, t6) = (at("s3"), at("t6"));
        assert!(s3 + 4 <= t6 || t6 + 4096 * 4 <= s3, "s3 at {s3} and t6 at {t6} overlap:\n{}", k.code);
        // the intermediate members live in registers only
        for reg_only in ["t3", "t4", "t5"] {
            assert!(!tiles.iter().any(|t| t.0 == reg_only), "{reg_only} got a shared-memory tile:\n{}", k.code);
        }
    }
}
