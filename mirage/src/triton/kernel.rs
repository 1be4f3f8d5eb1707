//! One block graph → one `@triton.jit` function.
//!
//! Every tile is a Triton block tensor of f32 values whose shape is the tile's shape with each
//! dim rounded up to a power of two (Triton's `tl.arange` needs one). The padding holds values
//! that mean nothing; they never reach a real element, because the only operators that combine
//! elements at different positions mask them first: reductions (with the reduction's identity),
//! the `K` dim of matmuls (with zeros), strided `sum_to` groups and concatenation (by selection);
//! loads and stores are masked to the real tile.
//!
//! The structure of the block graph maps directly: the grid is the launch grid
//! (`tl.program_id(0..3)`), the for-loop is `for it in range(F)` with the accumulators and running
//! maxima carried across iterations, input iterators with a for-loop dim are loads inside the
//! loop, those without one and every operator computed only from them are hoisted before it, and
//! accumulators are finished after it, followed by the epilogue and the output savers.
//! Matmuls are `tl.dot` on operands rounded to the tile's element type (f16/bf16; f32 tiles use
//! IEEE f32 products), accumulated in f32. `tl.dot` needs every dim to be at least 16: a smaller
//! `M` or `N` is replicated up to 16 and one copy kept, a smaller `K` is replicated and the sum
//! scaled back by the (power of two) number of copies, which is exact.
//!
//! The index operators follow the reference: `rope` rotates each head's pairs (split apart by a
//! reshape and `tl.split` when the head is a power of two, selected through a new dim
//! otherwise), `gather` loads table rows at the ids straight from device memory (an id outside the
//! table reads zeros), and `argmax` takes the lowest position of the maximum (of the first NaN
//! when there is one); ids and positions travel as f32 values, exact below 2^24.

use std::fmt::Write as _;

use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, Phase, RopeLayout, Scalar, TensorRef, UnaryOp, num_elements,
};

use super::TritonError;

/// The most elements one Triton block tensor may hold (`TRITON_MAX_TENSOR_NUMEL`).
pub const MAX_BLOCK_ELEMENTS: usize = 1 << 20;

/// Smallest dim `tl.dot` accepts.
const DOT_MIN: usize = 16;

/// The Triton element type of a tensor.
pub fn tl_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "tl.float16",
        DType::Bf16 => "tl.bfloat16",
        DType::F32 => "tl.float32",
        DType::I32 => "tl.int32",
    }
}

/// A float constant as Python source; infinities and NaN use the module's constants.
pub fn py_float(c: Scalar) -> String {
    let v = c.0;
    if v.is_nan() {
        "NAN".into()
    } else if v == f32::INFINITY {
        "POS_INF".into()
    } else if v == f32::NEG_INFINITY {
        "NEG_INF".into()
    } else {
        // Debug prints the shortest text that reads back as the same f32, always with a `.`
        // or an exponent, so Python reads a float.
        format!("{v:?}")
    }
}

/// A shape as a Python tuple.
fn tuple(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// The padded (power-of-two) shape of a tile.
fn padded(shape: &[usize]) -> Vec<usize> {
    shape.iter().map(|d| d.next_power_of_two()).collect()
}

/// `[None, :, None]`: places a 1-D range at position `d` of a rank-`rank` tensor.
fn place(d: usize, rank: usize) -> String {
    if rank == 1 {
        return String::new();
    }
    let idx: Vec<&str> = (0..rank).map(|i| if i == d { ":" } else { "None" }).collect();
    format!("[{}]", idx.join(", "))
}

/// `tl.arange(0, n)` placed at position `d` of a rank-`rank` tensor.
fn arange_at(n: usize, d: usize, rank: usize) -> String {
    format!("tl.arange(0, {n}){}", place(d, rank))
}

/// Where a kernel output is written: its shape and element strides.
#[derive(Clone, Debug)]
pub struct OutputLayout {
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// Its element strides.
    pub strides: Vec<usize>,
}

/// A generated kernel.
#[derive(Clone, Debug)]
pub struct TritonKernel {
    /// The `@triton.jit` function.
    pub code: String,
    /// `num_warps` of the launch.
    pub num_warps: usize,
}

/// Generates the `@triton.jit` function `name(in0, .., out0, ..)` of a block graph whose outputs
/// are written with `outputs` (one layout per output saver, in order).
pub fn generate_kernel(bg: &BlockGraph, name: &str, outputs: &[OutputLayout]) -> Result<TritonKernel, TritonError> {
    Gen::new(bg, name, outputs)?.run()
}

struct Gen<'a> {
    bg: &'a BlockGraph,
    name: &'a str,
    outputs: &'a [OutputLayout],
    /// Whether node `i` is computed once before the loop.
    hoisted: Vec<bool>,
    /// Whether offsets need 64-bit arithmetic.
    wide: bool,
    out: String,
}

impl<'a> Gen<'a> {
    fn new(bg: &'a BlockGraph, name: &'a str, outputs: &'a [OutputLayout]) -> Result<Self, TritonError> {
        let nodes = bg.nodes();
        let mut hoisted = vec![false; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            hoisted[i] = match &n.op {
                BlockOp::Input { forloop_dim, .. } => forloop_dim.is_none(),
                BlockOp::Accum { .. } | BlockOp::RunningMax { .. } | BlockOp::Output { .. } => false,
                _ => {
                    n.outputs.first().is_some_and(|t| t.phase == Phase::InLoop)
                        && n.inputs.iter().all(|t| hoisted[t.node])
                }
            };
        }
        let savers = nodes.iter().filter(|n| matches!(n.op, BlockOp::Output { .. })).count();
        if savers != outputs.len() {
            return Err(TritonError::Internal(format!(
                "kernel `{name}` has {savers} output savers but {} output layouts were given",
                outputs.len()
            )));
        }
        let span = |shape: &[usize], strides: &[usize]| crate::ir::storage_len(shape, strides);
        let wide = bg
            .inputs()
            .iter()
            .map(|d| span(&d.shape, &d.strides))
            .chain(outputs.iter().map(|o| span(&o.shape, &o.strides)))
            .any(|n| n > i32::MAX as usize);
        Ok(Gen { bg, name, outputs, hoisted, wide, out: String::new() })
    }

    fn line(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "    ".repeat(indent));
    }

    fn var(t: TensorRef) -> String {
        if t.port == 0 { format!("t{}", t.node) } else { format!("t{}_{}", t.node, t.port) }
    }

    fn shape(&self, t: TensorRef) -> Result<&'a [usize], TritonError> {
        Ok(&self.bg.tile(t).map_err(TritonError::Ir)?.shape)
    }

    /// Errors when a block tensor of `shape` (already padded) is too large for Triton.
    fn check_size(&self, what: &str, shape: &[usize]) -> Result<(), TritonError> {
        let n = num_elements(shape);
        if n > MAX_BLOCK_ELEMENTS {
            return Err(TritonError::Unsupported(format!(
                "kernel `{}`: {what} needs a block tensor of shape {shape:?} ({n} elements); Triton block tensors hold at most {MAX_BLOCK_ELEMENTS}",
                self.name
            )));
        }
        Ok(())
    }

    fn run(mut self) -> Result<TritonKernel, TritonError> {
        let bg = self.bg;
        let nodes = bg.nodes();
        for (i, n) in nodes.iter().enumerate() {
            for (p, t) in n.outputs.iter().enumerate() {
                self.check_size(&format!("tile %{i}.{p} ({})", n.op.name()), &padded(&t.shape))?;
            }
        }
        let params: Vec<String> = (0..bg.inputs().len())
            .map(|i| format!("in{i}"))
            .chain((0..self.outputs.len()).map(|i| format!("out{i}")))
            .collect();
        let grid = bg.grid();
        let _ = writeln!(
            self.out,
            "@triton.jit\ndef {}({}):\n    # grid {grid:?}, {} threads, for-loop of {} iterations",
            self.name,
            params.join(", "),
            bg.threads(),
            bg.forloop_range()
        );
        for (a, &g) in grid.iter().enumerate() {
            if g > 1 {
                let cast = if self.wide { ".to(tl.int64)" } else { "" };
                self.line(1, &format!("pid{a} = tl.program_id({a}){cast}"));
            }
        }
        // Before the loop: loop-invariant tiles, then the carried state.
        for i in 0..nodes.len() {
            if self.hoisted[i] {
                self.node(i, 1)?;
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            match &n.op {
                BlockOp::Accum { acc } => {
                    let p = tuple(&padded(&n.outputs[0].shape));
                    let init = match acc {
                        AccKind::Max => format!("tl.full({p}, NEG_INF, tl.float32)"),
                        _ => format!("tl.zeros({p}, dtype=tl.float32)"),
                    };
                    self.line(1, &format!("a{i} = {init}"));
                }
                BlockOp::RunningMax { .. } => {
                    let p = tuple(&padded(&n.outputs[0].shape));
                    self.line(1, &format!("m{i} = tl.full({p}, NEG_INF, tl.float32)"));
                }
                _ => {}
            }
        }
        self.line(1, &format!("for it in range({}):", bg.forloop_range()));
        for (i, n) in nodes.iter().enumerate() {
            let in_loop = match n.op {
                BlockOp::Accum { .. } | BlockOp::RunningMax { .. } => true,
                BlockOp::Output { .. } => false,
                _ => !self.hoisted[i] && n.outputs.first().is_some_and(|t| t.phase == Phase::InLoop),
            };
            if in_loop {
                self.node(i, 2)?;
            }
        }
        // After the loop: finished accumulators, the epilogue, the output savers.
        let mut saver = 0;
        for (i, n) in nodes.iter().enumerate() {
            match &n.op {
                BlockOp::Accum { acc } => {
                    let value = match acc {
                        AccKind::RmsLast => {
                            let last = self.shape(n.inputs[0])?.last().copied().unwrap_or(1);
                            format!("tl.sqrt(a{i} / {}.0)", bg.forloop_range() * last)
                        }
                        _ => format!("a{i}"),
                    };
                    self.line(1, &format!("t{i} = {value}"));
                }
                BlockOp::Output { omap, .. } => {
                    self.store(i, saver, omap)?;
                    saver += 1;
                }
                _ if n.outputs.first().is_some_and(|t| t.phase == Phase::AfterLoop) => self.node(i, 1)?,
                _ => {}
            }
        }
        Ok(TritonKernel { code: self.out, num_warps: super::smem::num_warps(bg) })
    }

    /// `tl.where(mask, x, fill)` masking the padding of dim `d` of tile `t`, or `x` when that dim
    /// has none.
    fn masked_dim(&self, t: TensorRef, d: usize, fill: &str) -> Result<String, TritonError> {
        let s = self.shape(t)?;
        let x = Self::var(t);
        if s[d].is_power_of_two() {
            return Ok(x);
        }
        Ok(format!("tl.where({} < {}, {x}, {fill})", arange_at(s[d].next_power_of_two(), d, s.len()), s[d]))
    }

    /// The mask of a tile's real elements (`None` when nothing is padded).
    fn tile_mask(shape: &[usize]) -> Option<String> {
        let parts: Vec<String> = shape
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.is_power_of_two())
            .map(|(d, &n)| format!("({} < {n})", arange_at(n.next_power_of_two(), d, shape.len())))
            .collect();
        (!parts.is_empty()).then(|| parts.join(" & "))
    }

    /// Element offsets of a tile at `bases` (one expression per dim, `""` for 0) in a tensor
    /// with `strides`.
    fn offsets(shape: &[usize], bases: &[String], strides: &[usize]) -> String {
        let r = shape.len();
        let terms: Vec<String> = (0..r)
            .map(|d| {
                let range = arange_at(shape[d].next_power_of_two(), d, r);
                let idx = if bases[d].is_empty() { range } else { format!("({} + {range})", bases[d]) };
                if strides[d] == 1 { idx } else { format!("{idx} * {}", strides[d]) }
            })
            .collect();
        terms.join(" + ")
    }

    fn node(&mut self, i: usize, ind: usize) -> Result<(), TritonError> {
        let bg = self.bg;
        let n = &bg.nodes()[i];
        let arg = |k: usize| Self::var(n.inputs[k]);
        let out_shape = n.outputs.first().map(|t| t.shape.clone()).unwrap_or_default();
        let rank = out_shape.len();
        match &n.op {
            BlockOp::Input { input, imap, forloop_dim } => {
                let desc = &bg.inputs()[*input];
                let grid = bg.grid();
                let mut bases = vec![Vec::<String>::new(); rank];
                for a in 0..3 {
                    if let Some(d) = imap[a] {
                        bases[d].push(format!("pid{a} * {}", desc.shape[d] / grid[a]));
                    }
                }
                if let Some(f) = forloop_dim {
                    bases[*f].push(format!("it * {}", out_shape[*f]));
                }
                let bases: Vec<String> = bases.into_iter().map(|b| b.join(" + ")).collect();
                let offs = Self::offsets(&out_shape, &bases, &desc.strides);
                let mask = Self::tile_mask(&out_shape).map(|m| format!(", mask={m}, other=0.0")).unwrap_or_default();
                self.line(ind, &format!("t{i} = tl.load(in{input} + {offs}{mask}).to(tl.float32)"));
            }
            BlockOp::Output { .. } => {}
            BlockOp::Matmul => self.matmul(i, ind)?,
            BlockOp::Rope { layout } => self.rope(i, ind, *layout)?,
            BlockOp::Gather { table, imap } => self.gather(i, ind, *table, imap)?,
            BlockOp::Argmax { dim } => self.argmax(i, ind, *dim)?,
            BlockOp::Unary { op } => {
                let e = unary(op, &arg(0));
                self.line(ind, &format!("t{i} = {e}"));
            }
            BlockOp::Binary { op } => {
                let e = binary(*op, &arg(0), &arg(1));
                self.line(ind, &format!("t{i} = {e}"));
            }
            BlockOp::ReduceSum { dim } => {
                let x = self.masked_dim(n.inputs[0], *dim, "0.0")?;
                self.line(ind, &format!("t{i} = tl.expand_dims(tl.sum({x}, axis={dim}), {dim})"));
            }
            BlockOp::ReduceMax { dim } => {
                let x = self.masked_dim(n.inputs[0], *dim, "NEG_INF")?;
                self.line(ind, &format!("t{i} = tl.expand_dims(tl.max({x}, axis={dim}), {dim})"));
            }
            BlockOp::ReduceSumTo { dim, width } => {
                let e = self.sum_to(n.inputs[0], *dim, *width)?;
                self.line(ind, &format!("t{i} = {e}"));
            }
            BlockOp::RmsNorm { eps } => {
                let last = rank - 1;
                let x = self.masked_dim(n.inputs[0], last, "0.0")?;
                let len = out_shape[last];
                self.line(ind, &format!("ms{i} = tl.expand_dims(tl.sum({x} * {x}, axis={last}), {last}) / {len}.0"));
                self.line(ind, &format!("t{i} = {} / tl.sqrt(ms{i} + {})", arg(0), py_float(*eps)));
            }
            BlockOp::Concat { dim } => {
                let e = self.concat(i, *dim)?;
                self.line(ind, &format!("t{i} = {e}"));
            }
            BlockOp::RunningMax { dim } => {
                let x = self.masked_dim(n.inputs[0], *dim, "NEG_INF")?;
                self.line(ind, &format!("t{i} = tl.maximum(m{i}, tl.expand_dims(tl.max({x}, axis={dim}), {dim}))"));
                self.line(ind, &format!("t{i}_1 = tl.where(it == 0, NEG_INF, m{i} - t{i})"));
                self.line(ind, &format!("m{i} = t{i}"));
            }
            BlockOp::Accum { acc } => {
                let x = n.inputs[0];
                let xr = self.shape(x)?.len();
                let last = xr - 1;
                let fold = match acc {
                    AccKind::Sum | AccKind::Max | AccKind::Rescale => Self::var(x),
                    AccKind::SumLast | AccKind::SumLastRescale => {
                        let m = self.masked_dim(x, last, "0.0")?;
                        format!("tl.expand_dims(tl.sum({m}, axis={last}), {last})")
                    }
                    AccKind::RmsLast => {
                        let m = self.masked_dim(x, last, "0.0")?;
                        format!("tl.expand_dims(tl.sum({m} * {m}, axis={last}), {last})")
                    }
                    AccKind::SumTo { width } => self.sum_to(x, last, *width)?,
                };
                let update = match acc {
                    AccKind::Max => format!("tl.maximum(a{i}, {fold})"),
                    AccKind::Rescale | AccKind::SumLastRescale => {
                        format!("tl.where(it == 0, 0.0, a{i} * {}) + {fold}", arg(1))
                    }
                    _ => format!("a{i} + {fold}"),
                };
                self.line(ind, &format!("a{i} = {update}"));
            }
        }
        Ok(())
    }

    /// `x` with dim `d` summed down to `width` with strided grouping (output `j` sums `j`,
    /// `j + width`, ...).
    fn sum_to(&self, x: TensorRef, d: usize, width: usize) -> Result<String, TritonError> {
        let s = self.shape(x)?;
        let r = s.len();
        let len = s[d];
        let p = padded(s);
        if len.is_power_of_two() && width.is_power_of_two() {
            // Row-major reshape groups index e as (e / width, e % width): sum the first part.
            let mut split = p.clone();
            split.splice(d..=d, [len / width, width]);
            self.check_size("sum_to", &split)?;
            return Ok(format!("tl.sum(tl.reshape({}, {}), axis={d})", Self::var(x), tuple(&split)));
        }
        // Select element e into group j when e % width == j, through a new dim after d.
        let pw = width.next_power_of_two();
        let mut wide = p.clone();
        wide.insert(d + 1, pw);
        self.check_size("sum_to", &wide)?;
        let e = arange_at(p[d], d, r + 1);
        let j = arange_at(pw, d + 1, r + 1);
        Ok(format!(
            "tl.sum(tl.where(({e} % {width} == {j}) & ({e} < {len}), tl.expand_dims({}, {}), 0.0), axis={d})",
            Self::var(x),
            d + 1
        ))
    }

    /// Concatenation along `d` by selection through a new dim after `d`.
    fn concat(&self, i: usize, d: usize) -> Result<String, TritonError> {
        let n = &self.bg.nodes()[i];
        let (a, b) = (n.inputs[0], n.inputs[1]);
        let (sa, sb) = (self.shape(a)?, self.shape(b)?);
        let r = sa.len();
        let po = n.outputs[0].shape[d].next_power_of_two();
        let part = |t: TensorRef, s: &[usize], shift: usize| -> Result<String, TritonError> {
            let mut wide = padded(s);
            wide.insert(d + 1, po);
            self.check_size("concat", &wide)?;
            let e = arange_at(s[d].next_power_of_two(), d, r + 1);
            let o = arange_at(po, d + 1, r + 1);
            let at = if shift == 0 { e.clone() } else { format!("{e} + {shift}") };
            Ok(format!(
                "tl.sum(tl.where(({at} == {o}) & ({e} < {}), tl.expand_dims({}, {}), 0.0), axis={d})",
                s[d],
                Self::var(t),
                d + 1
            ))
        };
        Ok(format!("{} + {}", part(a, sa, 0)?, part(b, sb, sa[d])?))
    }

    fn matmul(&mut self, i: usize, ind: usize) -> Result<(), TritonError> {
        let n = &self.bg.nodes()[i];
        let (a, b) = (n.inputs[0], n.inputs[1]);
        let r = self.shape(a)?.len();
        let sa = self.shape(a)?;
        let sb = self.shape(b)?;
        let (m, k, nn) = (sa[r - 2], sa[r - 1], sb[r - 1]);
        let (pm, pk, pn) = (m.next_power_of_two(), k.next_power_of_two(), nn.next_power_of_two());
        let dt = n.outputs[0].dtype;
        let mut av = self.masked_dim(a, r - 1, "0.0")?;
        let mut bv = self.masked_dim(b, r - 2, "0.0")?;
        if r > 2 {
            av = format!("tl.reshape({av}, ({pm}, {pk}))");
            bv = format!("tl.reshape({bv}, ({pk}, {pn}))");
        }
        self.line(ind, &format!("a{i}_ = {av}"));
        self.line(ind, &format!("b{i}_ = {bv}"));
        let (dm, dn, dk) = (pm.max(DOT_MIN), pn.max(DOT_MIN), pk.max(DOT_MIN));
        for shape in [[dm / pm, pm, pk], [pk, dn / pn, pn], [dm, dk / pk, pk], [dk / pk, pk, dn]] {
            self.check_size("matmul", &shape)?;
        }
        if pm < DOT_MIN {
            self.line(
                ind,
                &format!(
                    "a{i}_ = tl.reshape(tl.broadcast_to(a{i}_[None, :, :], ({}, {pm}, {pk})), ({dm}, {pk}))",
                    dm / pm
                ),
            );
        }
        if pn < DOT_MIN {
            self.line(
                ind,
                &format!(
                    "b{i}_ = tl.reshape(tl.broadcast_to(b{i}_[:, None, :], ({pk}, {}, {pn})), ({pk}, {dn}))",
                    dn / pn
                ),
            );
        }
        if pk < DOT_MIN {
            let c = dk / pk;
            self.line(
                ind,
                &format!("a{i}_ = tl.reshape(tl.broadcast_to(a{i}_[:, None, :], ({dm}, {c}, {pk})), ({dm}, {dk}))"),
            );
            self.line(
                ind,
                &format!("b{i}_ = tl.reshape(tl.broadcast_to(b{i}_[None, :, :], ({c}, {pk}, {dn})), ({dk}, {dn}))"),
            );
        }
        let dot = match dt {
            DType::F32 => format!("tl.dot(a{i}_, b{i}_, input_precision=\"ieee\", out_dtype=tl.float32)"),
            _ => {
                let t = tl_dtype(dt);
                format!("tl.dot(a{i}_.to({t}), b{i}_.to({t}), out_dtype=tl.float32)")
            }
        };
        self.line(ind, &format!("c{i}_ = {dot}"));
        if pk < DOT_MIN {
            self.line(ind, &format!("c{i}_ = c{i}_ * {}", 1.0 / (dk / pk) as f64));
        }
        if pn < DOT_MIN {
            let c = dn / pn;
            self.line(
                ind,
                &format!(
                    "c{i}_ = tl.sum(tl.where(tl.arange(0, {c})[None, :, None] == 0, tl.reshape(c{i}_, ({dm}, {c}, {pn})), 0.0), axis=1)"
                ),
            );
        }
        if pm < DOT_MIN {
            let c = dm / pm;
            self.line(
                ind,
                &format!(
                    "c{i}_ = tl.sum(tl.where(tl.arange(0, {c})[:, None, None] == 0, tl.reshape(c{i}_, ({c}, {pm}, {pn})), 0.0), axis=0)"
                ),
            );
        }
        let value = if r > 2 {
            format!("tl.reshape(c{i}_, {})", tuple(&padded(&n.outputs[0].shape)))
        } else {
            format!("c{i}_")
        };
        self.line(ind, &format!("t{i} = {value}"));
        Ok(())
    }

    /// `rope` node `i`: pairs of each head of the last dim rotated by the angle's cos and sin
    /// (the pairing of [`RopeLayout::pair`]). With a power-of-two head, the pairs are split apart
    /// by a reshape (`tl.split`) and joined back (`tl.join`); otherwise each element's partner
    /// and angle are selected through a new dim, as `concat` does.
    fn rope(&mut self, i: usize, ind: usize, layout: RopeLayout) -> Result<(), TritonError> {
        let n = &self.bg.nodes()[i];
        let (x, c, s) = (Self::var(n.inputs[0]), Self::var(n.inputs[1]), Self::var(n.inputs[2]));
        let xs = self.shape(n.inputs[0])?.to_vec();
        let cs = self.shape(n.inputs[1])?.to_vec();
        let r = xs.len();
        let last = r - 1;
        let half = cs[last];
        let head = 2 * half;
        let px = padded(&xs);
        let pc = padded(&cs);
        if head.is_power_of_two() {
            let lp = px[last];
            let nh = lp / head;
            let lead = &px[..last];
            let with = |tail: &[usize]| tuple(&[lead, tail].concat());
            // (.., heads, half, 2): the pair of each angle along the new last dim.
            let perm: Vec<String> = (0..last).chain([last, last + 2, last + 1]).map(|d| d.to_string()).collect();
            let swap = format!("({})", perm.join(", "));
            match layout {
                RopeLayout::HalfSplit => {
                    self.line(ind, &format!("x{i}_ = tl.permute(tl.reshape({x}, {}), {swap})", with(&[nh, 2, half])));
                }
                RopeLayout::Interleaved => {
                    self.line(ind, &format!("x{i}_ = tl.reshape({x}, {})", with(&[nh, half, 2])));
                }
            }
            self.line(ind, &format!("x{i}a, x{i}b = tl.split(x{i}_)"));
            let cshape = tuple(&[&pc[..last], &[1, half][..]].concat());
            self.line(ind, &format!("c{i}_ = tl.reshape({c}, {cshape})"));
            self.line(ind, &format!("s{i}_ = tl.reshape({s}, {cshape})"));
            self.line(ind, &format!("y{i}_ = tl.join(x{i}a * c{i}_ - x{i}b * s{i}_, x{i}b * c{i}_ + x{i}a * s{i}_)"));
            if layout == RopeLayout::HalfSplit {
                self.line(ind, &format!("y{i}_ = tl.permute(y{i}_, {swap})"));
            }
            self.line(ind, &format!("t{i} = tl.reshape(y{i}_, {})", tuple(&px)));
            return Ok(());
        }
        // Selection: output position p (dim `last`) reads its partner q and its angle k through
        // a new last dim.
        let lp = px[last];
        let hp = pc[last];
        let mut wide = px.clone();
        wide.push(lp);
        self.check_size("rope", &wide)?;
        let mut wide_c = pc.clone();
        wide_c[last] = lp;
        wide_c.push(hp);
        self.check_size("rope", &wide_c)?;
        let p = arange_at(lp, last, r + 1);
        self.line(ind, &format!("p{i}_ = {p}"));
        self.line(ind, &format!("j{i}_ = p{i}_ % {head}"));
        let (partner, angle) = match layout {
            RopeLayout::HalfSplit => (
                format!("tl.where(j{i}_ < {half}, p{i}_ + {half}, p{i}_ - {half})"),
                format!("tl.where(j{i}_ < {half}, j{i}_, j{i}_ - {half})"),
            ),
            RopeLayout::Interleaved => (format!("p{i}_ + 1 - 2 * (j{i}_ % 2)"), format!("j{i}_ // 2")),
        };
        let q = arange_at(lp, r, r + 1);
        let k = arange_at(hp, r, r + 1);
        self.line(
            ind,
            &format!("b{i}_ = tl.sum(tl.where({q} == {partner}, tl.expand_dims({x}, {last}), 0.0), axis={r})"),
        );
        for (v, src) in [("c", &c), ("s", &s)] {
            self.line(
                ind,
                &format!("{v}{i}_ = tl.sum(tl.where({k} == {angle}, tl.expand_dims({src}, {last}), 0.0), axis={r})"),
            );
        }
        let j1 = format!("(tl.arange(0, {lp}){} % {head})", place(last, r));
        let first = match layout {
            RopeLayout::HalfSplit => format!("{j1} < {half}"),
            RopeLayout::Interleaved => format!("{j1} % 2 == 0"),
        };
        self.line(ind, &format!("t{i} = tl.where({first}, {x} * c{i}_ - b{i}_ * s{i}_, {x} * c{i}_ + b{i}_ * s{i}_)"));
        Ok(())
    }

    /// `gather` node `i`: element `(ids.., c)` is column `c0 + c` of row `id` of kernel operand
    /// `table` (`c0` the block's slab of the width), read from device memory in the table's
    /// layout; an id outside `0..rows` reads 0. Ids arrive as exact f32 values (below 2^24).
    fn gather(&mut self, i: usize, ind: usize, table: usize, imap: &[Option<usize>; 3]) -> Result<(), TritonError> {
        let n = &self.bg.nodes()[i];
        let ids = Self::var(n.inputs[0]);
        let ids_rank = self.shape(n.inputs[0])?.len();
        let out = n.outputs[0].shape.clone();
        let r = out.len();
        let width = out[r - 1];
        let pw = width.next_power_of_two();
        let desc = &self.bg.inputs()[table];
        let (rows, s0, s1) = (desc.shape[0], desc.strides[0], desc.strides[1]);
        let int = if self.wide { "tl.int64" } else { "tl.int32" };
        let mut col = arange_at(pw, r - 1, r);
        for (a, m) in imap.iter().enumerate() {
            if *m == Some(1) {
                col = format!("(pid{a} * {width} + {col})");
            }
        }
        let grow: String =
            format!("[{}]", (0..r).map(|d| if d < ids_rank { ":" } else { "None" }).collect::<Vec<_>>().join(", "));
        self.line(ind, &format!("id{i}_ = {ids}.to({int})"));
        self.line(ind, &format!("ok{i}_ = (id{i}_ >= 0) & (id{i}_ < {rows})"));
        let mut mask = format!("ok{i}_{grow}");
        if !width.is_power_of_two() {
            mask = format!("{mask} & ({} < {width})", arange_at(pw, r - 1, r));
        }
        self.line(
            ind,
            &format!(
                "t{i} = tl.load(in{table} + tl.where(ok{i}_, id{i}_, 0){grow} * {s0} + {col} * {s1}, mask={mask}, other=0.0).to(tl.float32)"
            ),
        );
        Ok(())
    }

    /// `argmax` node `i` along `dim`: the lowest position of a NaN when the slice holds one,
    /// else the lowest position of its maximum; as an f32 value (exact below 2^24).
    fn argmax(&mut self, i: usize, ind: usize, dim: usize) -> Result<(), TritonError> {
        let n = &self.bg.nodes()[i];
        let x = Self::var(n.inputs[0]);
        let s = self.shape(n.inputs[0])?;
        let (len, r) = (s[dim], s.len());
        let pl = len.next_power_of_two();
        self.line(ind, &format!("k{i}_ = {}", arange_at(pl, dim, r)));
        let valid = if len.is_power_of_two() { String::new() } else { format!(" & (k{i}_ < {len})") };
        self.line(ind, &format!("nan{i}_ = ({x} != {x}){valid}"));
        self.line(
            ind,
            &format!("m{i}_ = tl.expand_dims(tl.max(tl.where(({x} == {x}){valid}, {x}, NEG_INF), axis={dim}), {dim})"),
        );
        self.line(ind, &format!("anynan{i}_ = tl.expand_dims(tl.max(nan{i}_.to(tl.int32), axis={dim}), {dim}) > 0"));
        self.line(ind, &format!("hit{i}_ = tl.where(anynan{i}_, nan{i}_, ({x} == m{i}_){valid})"));
        self.line(
            ind,
            &format!("t{i} = tl.expand_dims(tl.min(tl.where(hit{i}_, k{i}_, {pl}), axis={dim}), {dim}).to(tl.float32)"),
        );
        Ok(())
    }

    /// Output saver `i` writes its tile as kernel output `k`.
    fn store(&mut self, i: usize, k: usize, omap: &[Option<usize>; 3]) -> Result<(), TritonError> {
        let n = &self.bg.nodes()[i];
        let t = n.inputs[0];
        let tile = self.bg.tile(t).map_err(TritonError::Ir)?;
        let shape = tile.shape.clone();
        let layout = &self.outputs[k];
        let mut bases = vec![Vec::<String>::new(); shape.len()];
        for (a, d) in omap.iter().enumerate() {
            if let Some(d) = *d {
                bases[d].push(format!("pid{a} * {}", shape[d]));
            }
        }
        let bases: Vec<String> = bases.into_iter().map(|b| b.join(" + ")).collect();
        let offs = Self::offsets(&shape, &bases, &layout.strides);
        let mask = Self::tile_mask(&shape).map(|m| format!(", mask={m}")).unwrap_or_default();
        // The saver's stored type (the tile's unless the saver converts).
        let dtype = self.bg.output_descs().get(k).map_or(tile.dtype, |d| d.dtype);
        let value = format!("{}.to({})", Self::var(t), tl_dtype(dtype));
        self.line(1, &format!("tl.store(out{k} + {offs}, {value}{mask})"));
        Ok(())
    }
}

/// An element-wise unary function of `x` (a variable) in Triton.
fn unary(op: &UnaryOp, x: &str) -> String {
    match op {
        UnaryOp::Exp => format!("tl.exp({x})"),
        UnaryOp::Square => format!("{x} * {x}"),
        UnaryOp::Sqrt => format!("tl.sqrt({x})"),
        UnaryOp::Silu => format!("{x} / (1.0 + tl.exp(-{x}))"),
        UnaryOp::Gelu => format!("0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))"),
        UnaryOp::Relu => format!("tl.maximum({x}, 0.0)"),
        UnaryOp::Neg => format!("-{x}"),
        UnaryOp::Recip => format!("1.0 / {x}"),
        UnaryOp::Clamp { lo, hi } => format!("tl.minimum(tl.maximum({x}, {}), {})", py_float(*lo), py_float(*hi)),
        UnaryOp::MulScalar { c } => format!("{} * {x}", py_float(*c)),
        UnaryOp::Tanh => format!("libdevice.tanh({x})"),
        UnaryOp::Sigmoid => format!("1.0 / (1.0 + tl.exp(-{x}))"),
        UnaryOp::GeluTanh => {
            format!("0.5 * {x} * (1.0 + libdevice.tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))")
        }
        UnaryOp::AddScalar { c } => format!("{x} + {}", py_float(*c)),
    }
}

/// An element-wise binary function of `a` and `b` (variables) in Triton.
fn binary(op: BinaryOp, a: &str, b: &str) -> String {
    match op {
        BinaryOp::Add => format!("{a} + {b}"),
        BinaryOp::Sub => format!("{a} - {b}"),
        BinaryOp::Mul => format!("{a} * {b}"),
        BinaryOp::Div => format!("{a} / {b}"),
        BinaryOp::Pow => format!("libdevice.pow({a}, {b})"),
    }
}

/// Whether a kernel's code calls libdevice (the module imports it then).
pub fn uses_libdevice(code: &str) -> bool {
    code.contains("libdevice.")
}
