//! The one evaluator: it gives the IR its meaning by walking any µGraph — block graphs
//! with their partition, loop, accumulate and concatenate rules — over an abstract value domain.
//!
//! With `f32` values ([`crate::reference`]) it is the CPU reference interpreter; with finite-field
//! values it is the fingerprint engine. Semantics live here and nowhere else.

use std::borrow::Cow;

use rayon::prelude::*;

use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, GridMap, KernelGraph, KernelOp, Phase, RopeLayout, TensorRef, UnaryOp,
    row_major_strides,
};

/// A value domain: the arithmetic the evaluator is instantiated with.
pub trait Domain: Sync {
    /// One element.
    type V: Copy + Send + Sync + std::fmt::Debug;
    /// The additive identity.
    fn zero(&self) -> Self::V;
    /// The initial value of a running maximum (`-∞` for floats).
    fn neg_infinity(&self) -> Self::V;
    /// The count `n` as a value (divisor of means).
    fn count(&self, n: usize) -> Self::V;
    /// A float constant of the program (scalars, epsilons).
    fn constant(&self, c: f32) -> Self::V;
    /// `a + b`.
    fn add(&self, a: Self::V, b: Self::V) -> Self::V;
    /// `a - b`.
    fn sub(&self, a: Self::V, b: Self::V) -> Self::V;
    /// `a · b`.
    fn mul(&self, a: Self::V, b: Self::V) -> Self::V;
    /// `a / b`.
    fn div(&self, a: Self::V, b: Self::V) -> Self::V;
    /// `a ^ b`.
    fn pow(&self, a: Self::V, b: Self::V) -> Self::V;
    /// `max(a, b)`.
    fn max(&self, a: Self::V, b: Self::V) -> Self::V;
    /// An element-wise unary function.
    fn unary(&self, op: &UnaryOp, a: Self::V) -> Self::V;
    /// The index an element of an `i32` tensor holds (a `gather` id), or `None` when it is
    /// negative or too large to address anything.
    fn index(&self, v: Self::V) -> Option<usize>;
    /// Whether `a` comes strictly after `b` in the order `argmax` maximizes.
    fn greater(&self, a: Self::V, b: Self::V) -> bool;
    /// The `i32` value `argmax` returns for position `i` of the searched `row` (the row's
    /// elements in order): the value whose [`Domain::index`] is `i`.
    fn position(&self, i: usize, row: &[Self::V]) -> Self::V;
    /// `acc + a · b` (the matmul inner step).
    #[inline]
    fn mul_add(&self, acc: Self::V, a: Self::V, b: Self::V) -> Self::V {
        self.add(acc, self.mul(a, b))
    }
    /// One output row of a matmul: with `n = out.len()` and `b` row-major `[a.len(), n]`, for
    /// `kk` in order, `out[j] = mul_add(out[j], a[kk], b[kk·n + j])`. A domain may override it
    /// with a faster path that gives the same values.
    #[inline]
    fn matmul_row(&self, out: &mut [Self::V], a: &[Self::V], b: &[Self::V]) {
        let n = out.len();
        for (kk, &av) in a.iter().enumerate() {
            for (o, &bv) in out.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                *o = self.mul_add(*o, av, bv);
            }
        }
    }
}

/// A dense row-major tensor of domain values (the evaluator works on logical values; device
/// strides do not enter the semantics).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<V> {
    /// Extent of each dim.
    pub shape: Vec<usize>,
    /// Elements in row-major order.
    pub data: Vec<V>,
}

/// Why an evaluation could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The number of inputs differs from the graph's.
    #[error("the graph takes {expected} inputs, {found} were given")]
    InputCount {
        /// The graph's input count.
        expected: usize,
        /// Given.
        found: usize,
    },
    /// An input's shape differs from its parameter's.
    #[error("input {index}: expected shape {expected:?}, found {found:?}")]
    InputShape {
        /// Which input.
        index: usize,
        /// The parameter's shape.
        expected: Vec<usize>,
        /// The given shape.
        found: Vec<usize>,
    },
    /// A tensor's data length disagrees with its shape.
    #[error("a tensor of shape {shape:?} needs {expected} elements, found {found}")]
    DataLength {
        /// Its shape.
        shape: Vec<usize>,
        /// Product of the shape.
        expected: usize,
        /// Data length.
        found: usize,
    },
}

impl<V: Copy> Tensor<V> {
    /// A tensor from a shape and row-major data.
    pub fn new(shape: Vec<usize>, data: Vec<V>) -> Result<Self, EvalError> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(EvalError::DataLength { shape, expected, found: data.len() });
        }
        Ok(Tensor { shape, data })
    }

    /// A tensor filled with `v`.
    pub fn full(shape: &[usize], v: V) -> Self {
        Tensor { shape: shape.to_vec(), data: vec![v; shape.iter().product()] }
    }

    /// Element at a multi-index.
    pub fn at(&self, idx: &[usize]) -> V {
        let strides = row_major_strides(&self.shape);
        self.data[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()]
    }

    /// Element-wise map.
    pub fn map(&self, f: impl Fn(V) -> V) -> Self {
        Tensor { shape: self.shape.clone(), data: self.data.iter().map(|&v| f(v)).collect() }
    }

    /// Copies the box `[offset, offset + shape)` out of this tensor.
    pub fn region(&self, offset: &[usize], shape: &[usize]) -> Self {
        let src = row_major_strides(&self.shape);
        let n: usize = shape.iter().product();
        let mut data = Vec::with_capacity(n);
        let rank = shape.len();
        let last = shape[rank - 1];
        let rows = n / last;
        let mut idx = vec![0usize; rank];
        for _ in 0..rows {
            let base: usize = (0..rank).map(|d| (offset[d] + idx[d]) * src[d]).sum();
            data.extend_from_slice(&self.data[base..base + last]);
            // advance idx over the leading dims
            for d in (0..rank - 1).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Tensor { shape: shape.to_vec(), data }
    }

    /// Copies the box `[offset, offset + shape)` out of this tensor, with `pad` wherever the box
    /// reaches past the tensor (the padded-tile rule of runtime-sized dims, see [`RunShapes`]).
    pub fn region_padded(&self, offset: &[usize], shape: &[usize], pad: V) -> Self {
        if offset.iter().zip(shape).zip(&self.shape).all(|((o, s), e)| o + s <= *e) {
            return self.region(offset, shape);
        }
        let src = row_major_strides(&self.shape);
        let n: usize = shape.iter().product();
        let mut data = Vec::with_capacity(n);
        let mut idx = vec![0usize; shape.len()];
        for _ in 0..n {
            let inside = (0..shape.len()).all(|d| offset[d] + idx[d] < self.shape[d]);
            data.push(if inside {
                self.data[(0..shape.len()).map(|d| (offset[d] + idx[d]) * src[d]).sum::<usize>()]
            } else {
                pad
            });
            advance(&mut idx, shape);
        }
        Tensor { shape: shape.to_vec(), data }
    }

    /// Writes the part of `tile` at `offset` that lies inside this tensor; the rest of the tile
    /// (past a runtime-sized dim's extent) is dropped.
    pub fn write_region_clipped(&mut self, offset: &[usize], tile: &Tensor<V>) {
        if offset.iter().zip(&tile.shape).zip(&self.shape).all(|((o, s), e)| o + s <= *e) {
            return self.write_region(offset, tile);
        }
        let dst = row_major_strides(&self.shape);
        let mut idx = vec![0usize; tile.shape.len()];
        for &v in &tile.data {
            if (0..idx.len()).all(|d| offset[d] + idx[d] < self.shape[d]) {
                self.data[(0..idx.len()).map(|d| (offset[d] + idx[d]) * dst[d]).sum::<usize>()] = v;
            }
            advance(&mut idx, &tile.shape);
        }
    }

    /// Writes `tile` into this tensor at `offset`.
    pub fn write_region(&mut self, offset: &[usize], tile: &Tensor<V>) {
        let dst = row_major_strides(&self.shape);
        let rank = tile.shape.len();
        let last = tile.shape[rank - 1];
        let rows = tile.data.len() / last;
        let mut idx = vec![0usize; rank];
        for r in 0..rows {
            let base: usize = (0..rank).map(|d| (offset[d] + idx[d]) * dst[d]).sum();
            self.data[base..base + last].copy_from_slice(&tile.data[r * last..(r + 1) * last]);
            for d in (0..rank - 1).rev() {
                idx[d] += 1;
                if idx[d] < tile.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Steps a row-major multi-index `idx` within `shape` (wrapping to zeros after the last).
fn advance(idx: &mut [usize], shape: &[usize]) {
    for d in (0..shape.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// Splits a shape around `dim` into (outer, extent, inner) element counts.
fn around(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (shape[..dim].iter().product(), shape[dim], shape[dim + 1..].iter().product())
}

/// Tensor operations over a domain: the semantics of every operator.
struct Ops<'d, D: Domain>(&'d D);

impl<D: Domain> Ops<'_, D> {
    fn unary(&self, op: &UnaryOp, x: &Tensor<D::V>) -> Tensor<D::V> {
        x.map(|v| self.0.unary(op, v))
    }

    fn scalar_binary(&self, op: BinaryOp, a: D::V, b: D::V) -> D::V {
        let d = self.0;
        match op {
            BinaryOp::Add => d.add(a, b),
            BinaryOp::Sub => d.sub(a, b),
            BinaryOp::Mul => d.mul(a, b),
            BinaryOp::Div => d.div(a, b),
            BinaryOp::Pow => d.pow(a, b),
        }
    }

    /// Binary op with size-1 broadcasting (shapes already checked by the IR).
    fn binary(&self, op: BinaryOp, a: &Tensor<D::V>, b: &Tensor<D::V>) -> Tensor<D::V> {
        self.zip(a, b, |x, y| self.scalar_binary(op, x, y))
    }

    /// Element-wise maximum with broadcasting.
    fn max(&self, a: &Tensor<D::V>, b: &Tensor<D::V>) -> Tensor<D::V> {
        self.zip(a, b, |x, y| self.0.max(x, y))
    }

    /// Combines two equal-rank tensors element-wise with size-1 broadcasting.
    fn zip(&self, a: &Tensor<D::V>, b: &Tensor<D::V>, f: impl Fn(D::V, D::V) -> D::V) -> Tensor<D::V> {
        if a.shape == b.shape {
            let data = a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect();
            return Tensor { shape: a.shape.clone(), data };
        }
        let shape: Vec<usize> = a.shape.iter().zip(&b.shape).map(|(&x, &y)| x.max(y)).collect();
        let (sa, sb) = (row_major_strides(&a.shape), row_major_strides(&b.shape));
        let n: usize = shape.iter().product();
        let mut data = Vec::with_capacity(n);
        let mut idx = vec![0usize; shape.len()];
        for _ in 0..n {
            let (mut ia, mut ib) = (0, 0);
            for d in 0..shape.len() {
                if a.shape[d] != 1 {
                    ia += idx[d] * sa[d];
                }
                if b.shape[d] != 1 {
                    ib += idx[d] * sb[d];
                }
            }
            data.push(f(a.data[ia], b.data[ib]));
            for d in (0..shape.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Tensor { shape, data }
    }

    /// Batched `[..., m, k] x [..., k, n]`.
    fn matmul(&self, a: &Tensor<D::V>, b: &Tensor<D::V>) -> Tensor<D::V> {
        let r = a.shape.len();
        let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
        let batch: usize = a.shape[..r - 2].iter().product();
        let mut shape = a.shape.clone();
        shape[r - 1] = n;
        let zero = self.0.zero();
        let mut data = vec![zero; batch * m * n];
        let d = self.0;
        let row = |(row_idx, row): (usize, &mut [D::V])| {
            let (bi, i) = (row_idx / m, row_idx % m);
            let ab = &a.data[bi * m * k + i * k..bi * m * k + (i + 1) * k];
            let bb = &b.data[bi * k * n..(bi + 1) * k * n];
            d.matmul_row(row, ab, bb);
        };
        if n > 0 && batch * m * n * k >= 1 << 22 {
            // Large products: parallel over output rows.
            data.par_chunks_mut(n).enumerate().for_each(row);
        } else if n > 0 {
            data.chunks_mut(n).enumerate().for_each(row);
        }
        Tensor { shape, data }
    }

    /// Reduction of `dim` to `width` with strided grouping: output `j` combines inputs
    /// `j, j + width, j + 2·width, …` with `f`.
    fn reduce(&self, x: &Tensor<D::V>, dim: usize, width: usize, f: impl Fn(D::V, D::V) -> D::V) -> Tensor<D::V> {
        let (outer, extent, inner) = around(&x.shape, dim);
        let mut shape = x.shape.clone();
        shape[dim] = width;
        let mut data = Vec::with_capacity(outer * width * inner);
        for o in 0..outer {
            for j in 0..width {
                for i in 0..inner {
                    let mut acc = x.data[(o * extent + j) * inner + i];
                    let mut e = j + width;
                    while e < extent {
                        acc = f(acc, x.data[(o * extent + e) * inner + i]);
                        e += width;
                    }
                    data.push(acc);
                }
            }
        }
        Tensor { shape, data }
    }

    fn reduce_sum(&self, x: &Tensor<D::V>, dim: usize, width: usize) -> Tensor<D::V> {
        self.reduce(x, dim, width, |a, b| self.0.add(a, b))
    }

    fn reduce_max(&self, x: &Tensor<D::V>, dim: usize) -> Tensor<D::V> {
        self.reduce(x, dim, 1, |a, b| self.0.max(a, b))
    }

    fn last(x: &Tensor<D::V>) -> usize {
        x.shape.len() - 1
    }

    /// `Σ_last x²` (last dim kept with size 1).
    fn sum_squares_last(&self, x: &Tensor<D::V>) -> Tensor<D::V> {
        let sq = x.map(|v| self.0.mul(v, v));
        self.reduce_sum(&sq, Self::last(x), 1)
    }

    /// `sqrt(s / n + eps)`.
    fn rms_from_sum(&self, s: &Tensor<D::V>, n: usize, eps: Option<f32>) -> Tensor<D::V> {
        let d = self.0;
        let count = d.count(n);
        s.map(|v| {
            let mean = d.div(v, count);
            let mean = match eps {
                Some(e) => d.add(mean, d.constant(e)),
                None => mean,
            };
            d.unary(&UnaryOp::Sqrt, mean)
        })
    }

    fn rms_norm(&self, x: &Tensor<D::V>, eps: f32, weight: Option<&Tensor<D::V>>) -> Tensor<D::V> {
        let n = x.shape[Self::last(x)];
        let rms = self.rms_from_sum(&self.sum_squares_last(x), n, Some(eps));
        let y = self.binary(BinaryOp::Div, x, &rms);
        match weight {
            Some(w) => self.binary(BinaryOp::Mul, &y, w),
            None => y,
        }
    }

    fn concat(&self, a: &Tensor<D::V>, b: &Tensor<D::V>, dim: usize) -> Tensor<D::V> {
        let (outer, ea, inner) = around(&a.shape, dim);
        let eb = b.shape[dim];
        let mut shape = a.shape.clone();
        shape[dim] = ea + eb;
        let mut data = Vec::with_capacity(outer * (ea + eb) * inner);
        for o in 0..outer {
            data.extend_from_slice(&a.data[o * ea * inner..(o + 1) * ea * inner]);
            data.extend_from_slice(&b.data[o * eb * inner..(o + 1) * eb * inner]);
        }
        Tensor { shape, data }
    }

    /// `rope(x, cos, sin)`: each head of `h = 2·cos.last` elements of `x`'s last dim rotated
    /// pair by pair as [`RopeLayout::pair`] says; `cos`/`sin` broadcast over the leading dims.
    fn rope(&self, layout: RopeLayout, x: &Tensor<D::V>, cos: &Tensor<D::V>, sin: &Tensor<D::V>) -> Tensor<D::V> {
        let d = self.0;
        let r = x.shape.len();
        let width = x.shape[r - 1];
        let half = cos.shape[r - 1];
        let head = 2 * half;
        let cstr = row_major_strides(&cos.shape);
        let rows = x.data.len() / width;
        let mut data = Vec::with_capacity(x.data.len());
        let mut idx = vec![0usize; r];
        for row in 0..rows {
            // The row's multi-index over the leading dims, and the matching row of cos/sin.
            let mut rest = row;
            for dim in (0..r - 1).rev() {
                idx[dim] = rest % x.shape[dim];
                rest /= x.shape[dim];
            }
            let cbase: usize = (0..r - 1).filter(|&dim| cos.shape[dim] != 1).map(|dim| idx[dim] * cstr[dim]).sum();
            let xrow = &x.data[row * width..(row + 1) * width];
            for (p, &v) in xrow.iter().enumerate() {
                let (base, j) = (p - p % head, p % head);
                let (partner, k, first) = layout.pair(j, head);
                let (c, s) = (cos.data[cbase + k], sin.data[cbase + k]);
                let other = d.mul(xrow[base + partner], s);
                let own = d.mul(v, c);
                data.push(if first { d.sub(own, other) } else { d.add(own, other) });
            }
        }
        Tensor { shape: x.shape.clone(), data }
    }

    /// Rows of `table` at `ids`, columns `col0..col0 + width`: `ids`'s shape followed by
    /// `width`; an id that addresses no row gives zeros.
    fn gather(&self, table: &Tensor<D::V>, ids: &Tensor<D::V>, col0: usize, width: usize) -> Tensor<D::V> {
        let (rows, cols) = (table.shape[0], table.shape[1]);
        let mut data = Vec::with_capacity(ids.data.len() * width);
        for &id in &ids.data {
            match self.0.index(id).filter(|&r| r < rows) {
                Some(r) => data.extend_from_slice(&table.data[r * cols + col0..r * cols + col0 + width]),
                None => data.extend(std::iter::repeat_n(self.0.zero(), width)),
            }
        }
        let mut shape = ids.shape.clone();
        shape.push(width);
        Tensor { shape, data }
    }

    /// The position of the maximum along `dim` (kept with size 1): the first element no later
    /// element is [`Domain::greater`] than (ties go to the lowest position).
    fn argmax(&self, x: &Tensor<D::V>, dim: usize) -> Tensor<D::V> {
        let d = self.0;
        let (outer, extent, inner) = around(&x.shape, dim);
        let mut shape = x.shape.clone();
        shape[dim] = 1;
        let mut data = Vec::with_capacity(outer * inner);
        let mut row = Vec::with_capacity(extent);
        for o in 0..outer {
            for i in 0..inner {
                row.clear();
                row.extend((0..extent).map(|e| x.data[(o * extent + e) * inner + i]));
                let mut best = 0;
                for (e, &v) in row.iter().enumerate().skip(1) {
                    if d.greater(v, row[best]) {
                        best = e;
                    }
                }
                data.push(d.position(best, &row));
            }
        }
        Tensor { shape, data }
    }

    /// The element-wise and reduction operators common to both levels.
    fn common_block_op(&self, op: &BlockOp, args: &[&Tensor<D::V>]) -> Option<Tensor<D::V>> {
        Some(match op {
            BlockOp::Matmul => self.matmul(args[0], args[1]),
            BlockOp::Unary { op } => self.unary(op, args[0]),
            BlockOp::Binary { op } => self.binary(*op, args[0], args[1]),
            BlockOp::ReduceSum { dim } => self.reduce_sum(args[0], *dim, 1),
            BlockOp::ReduceSumTo { dim, width } => self.reduce_sum(args[0], *dim, *width),
            BlockOp::ReduceMax { dim } => self.reduce_max(args[0], *dim),
            BlockOp::RmsNorm { eps } => self.rms_norm(args[0], eps.0, None),
            BlockOp::Concat { dim } => self.concat(args[0], args[1], *dim),
            BlockOp::Rope { layout } => self.rope(*layout, args[0], args[1], args[2]),
            BlockOp::Argmax { dim } => self.argmax(args[0], *dim),
            BlockOp::Input { .. }
            | BlockOp::Output { .. }
            | BlockOp::Gather { .. }
            | BlockOp::RunningMax { .. }
            | BlockOp::Accum { .. } => return None,
        })
    }
}

/// The launch geometry of one block graph at run sizes other than the compile size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRun {
    /// Blocks along x, y, z (`ceil(n / slab)` along an axis that splits a runtime-sized dim).
    pub grid: [usize; 3],
    /// For-loop iterations (`ceil(min(n, slab) / tile)` when the loop splits a runtime-sized dim).
    pub forloop_range: usize,
    /// The shapes of the tensors the output savers write, in order.
    pub outputs: Vec<Vec<usize>>,
    /// `(input, dim, n)`: dim `dim` of input `input` holds stacked copies of a variable at size
    /// `n` ([`crate::dims::Extent::Stacked`], laid out at the compile size): each tile of it is
    /// one copy, valid on its first `n` positions, the rest padding (zeros).
    pub stacked: Vec<(usize, usize, usize)>,
}

/// A kernel graph evaluated at run sizes: the shape of every input and, for each node that is a
/// custom kernel, its geometry ([`crate::dims::DimPlan::run_shapes`] derives them from the sizes
/// of the dimension variables).
///
/// The padded-tile rule: a block graph keeps the tile sizes chosen at the compile size (the
/// upper bound of every range); an input iterator's tile that reaches past a tensor's extent
/// is padded there (zeros), element-wise operators compute on the padding as on any element,
/// every reduction over a padded dim (a sum, maximum, argmax, a matmul's contraction, an RMS
/// mean, a running maximum, an accumulator) takes the padding as its identity — the masked
/// reductions of [`Valid`] — and an output saver writes only the part of its tile inside the
/// output's extent. Kernel-level operators compute on the tensors as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunShapes {
    /// The shape of each program input, in order.
    pub inputs: Vec<Vec<usize>>,
    /// Indexed by node: the geometry of each custom kernel (`None` for other nodes).
    pub blocks: Vec<Option<BlockRun>>,
}

/// Evaluates a kernel graph on `inputs` (one per `Input` node, in order); returns one tensor per
/// `Output` node, in order.
pub fn evaluate<D: Domain>(
    graph: &KernelGraph,
    domain: &D,
    inputs: &[Tensor<D::V>],
) -> Result<Vec<Tensor<D::V>>, EvalError> {
    evaluate_graph(graph, domain, inputs, None)
}

/// Evaluates a kernel graph built at the compile size on `inputs` of the run sizes `run`
/// describes, by the padded-tile rule (see [`RunShapes`]).
pub fn evaluate_at<D: Domain>(
    graph: &KernelGraph,
    domain: &D,
    inputs: &[Tensor<D::V>],
    run: &RunShapes,
) -> Result<Vec<Tensor<D::V>>, EvalError> {
    evaluate_graph(graph, domain, inputs, Some(run))
}

fn evaluate_graph<D: Domain>(
    graph: &KernelGraph,
    domain: &D,
    inputs: &[Tensor<D::V>],
    run: Option<&RunShapes>,
) -> Result<Vec<Tensor<D::V>>, EvalError> {
    let params = graph.inputs();
    if params.len() != inputs.len() {
        return Err(EvalError::InputCount { expected: params.len(), found: inputs.len() });
    }
    for (index, (p, t)) in params.iter().zip(inputs).enumerate() {
        let expected_shape = run.and_then(|r| r.inputs.get(index)).unwrap_or(&p.shape);
        if *expected_shape != t.shape {
            return Err(EvalError::InputShape { index, expected: expected_shape.clone(), found: t.shape.clone() });
        }
        let expected: usize = t.shape.iter().product();
        if t.data.len() != expected {
            return Err(EvalError::DataLength { shape: t.shape.clone(), expected, found: t.data.len() });
        }
    }
    let ops = Ops(domain);
    // Inputs are borrowed, not copied (weights can be hundreds of MB); computed tensors are owned.
    let mut values: Vec<Vec<Cow<'_, Tensor<D::V>>>> = Vec::with_capacity(graph.nodes().len());
    let mut next_input = 0;
    let mut outputs = Vec::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let args: Vec<&Tensor<D::V>> = node.inputs.iter().map(|t| values[t.node][t.port].as_ref()).collect();
        if let KernelOp::Input { .. } = &node.op {
            next_input += 1;
            values.push(vec![Cow::Borrowed(&inputs[next_input - 1])]);
            continue;
        }
        let produced = match &node.op {
            KernelOp::Input { .. } => vec![],
            KernelOp::Output { .. } => {
                outputs.push(args[0].clone());
                vec![]
            }
            KernelOp::Matmul => vec![ops.matmul(args[0], args[1])],
            KernelOp::Unary { op } => vec![ops.unary(op, args[0])],
            KernelOp::Binary { op } => vec![ops.binary(*op, args[0], args[1])],
            KernelOp::ReduceSum { dim } => vec![ops.reduce_sum(args[0], *dim, 1)],
            KernelOp::ReduceMax { dim } => vec![ops.reduce_max(args[0], *dim)],
            KernelOp::RmsNorm { eps } => vec![ops.rms_norm(args[0], eps.0, args.get(1).copied())],
            KernelOp::Concat { dim } => vec![ops.concat(args[0], args[1], *dim)],
            KernelOp::Rope { layout } => vec![ops.rope(*layout, args[0], args[1], args[2])],
            KernelOp::Gather => vec![ops.gather(args[0], args[1], 0, args[0].shape[1])],
            KernelOp::Argmax { dim } => vec![ops.argmax(args[0], *dim)],
            KernelOp::Custom { block } => {
                let geometry = run.and_then(|r| r.blocks.get(i)).and_then(Option::as_ref);
                evaluate_block(block, &ops, &args, geometry)
            }
        };
        values.push(produced.into_iter().map(Cow::Owned).collect());
    }
    Ok(outputs)
}

/// Evaluates one block graph on its operands: one tensor per output saver.
pub fn evaluate_block_graph<D: Domain>(bg: &BlockGraph, domain: &D, inputs: &[&Tensor<D::V>]) -> Vec<Tensor<D::V>> {
    evaluate_block(bg, &Ops(domain), inputs, None)
}

/// Evaluates block `block` of a block graph alone: for each output saver in order, the offset
/// of the region it writes and the tile it writes there.
pub fn evaluate_block_tile<D: Domain>(
    bg: &BlockGraph,
    domain: &D,
    inputs: &[&Tensor<D::V>],
    block: [usize; 3],
) -> Vec<(Vec<usize>, Tensor<D::V>)> {
    run_block(bg, &Ops(domain), inputs, block, bg.forloop_range(), &[])
}

/// Per-block loop-carried state of one node.
enum Carry<V> {
    None,
    Acc(Option<AccState<V>>),
    RunningMax(Option<Tensor<V>>),
}

/// An accumulator's state: its value, the valid box of the value (see [`Valid`]), and for
/// `RmsLast` the number of valid elements summed so far.
struct AccState<V> {
    value: Tensor<V>,
    valid: Valid,
    count: usize,
}

/// The output tiles of one block, each with its offset in the kernel's output.
type BlockTiles<V> = Vec<(Vec<usize>, Tensor<V>)>;

/// Evaluates one block graph: every block independently (in parallel), then concatenates the
/// blocks' output tiles. `run` is its geometry at run sizes (`None`: the compile size).
fn evaluate_block<D: Domain>(
    bg: &BlockGraph,
    ops: &Ops<'_, D>,
    inputs: &[&Tensor<D::V>],
    run: Option<&BlockRun>,
) -> Vec<Tensor<D::V>> {
    let (grid, frange) = run.map_or((bg.grid(), bg.forloop_range()), |r| (r.grid, r.forloop_range));
    let stacked = run.map_or(&[][..], |r| r.stacked.as_slice());
    let per_block: Vec<BlockTiles<D::V>> = (0..grid.iter().product::<usize>())
        .into_par_iter()
        .map(|flat| {
            let b = [flat % grid[0], (flat / grid[0]) % grid[1], flat / (grid[0] * grid[1])];
            run_block(bg, ops, inputs, b, frange, stacked)
        })
        .collect();
    let shapes: Vec<Vec<usize>> = match run {
        Some(r) => r.outputs.clone(),
        None => bg.output_descs().into_iter().map(|d| d.shape).collect(),
    };
    let mut outs: Vec<Tensor<D::V>> = shapes.iter().map(|s| Tensor::full(s, ops.0.zero())).collect();
    for block in per_block {
        for (k, (offset, tile)) in block.into_iter().enumerate() {
            outs[k].write_region_clipped(&offset, &tile);
        }
    }
    outs
}

/// A block's gather: the rows of `table` at `ids`, over the block's slab of the table's width
/// (split by the grid axes that `imap` maps to dim 1).
fn gather_block<D: Domain>(
    ops: &Ops<'_, D>,
    table: &Tensor<D::V>,
    imap: &GridMap,
    grid: [usize; 3],
    b: [usize; 3],
    ids: &Tensor<D::V>,
) -> Tensor<D::V> {
    let mut width = table.shape[1];
    let mut col0 = 0;
    for a in 0..3 {
        if imap[a] == Some(1) {
            width /= grid[a];
            col0 += b[a] * width;
        }
    }
    ops.gather(table, ids, col0, width)
}

/// Runs block `b` over `frange` loop iterations: returns, for each output saver in order, the
/// offset and the tile it writes. Tiles keep their compile-size extents and offsets; an input
/// tile reaching past its tensor is padded there, and every reduction skips the padding (see
/// [`Valid`]); a tile of stacked copies (`stacked`, as [`BlockRun::stacked`]) is padded past the
/// copy's valid positions.
fn run_block<D: Domain>(
    bg: &BlockGraph,
    ops: &Ops<'_, D>,
    inputs: &[&Tensor<D::V>],
    b: [usize; 3],
    frange: usize,
    stacked: &[(usize, usize, usize)],
) -> BlockTiles<D::V> {
    let d = ops.0;
    let grid = bg.grid();
    let nodes = bg.nodes();
    let mut carry: Vec<Carry<D::V>> = nodes
        .iter()
        .map(|n| match n.op {
            BlockOp::Accum { .. } => Carry::Acc(None),
            BlockOp::RunningMax { .. } => Carry::RunningMax(None),
            _ => Carry::None,
        })
        .collect();
    let mut values: Vec<Vec<Tensor<D::V>>> = vec![Vec::new(); nodes.len()];
    // Per node, per port: the valid box of the value (the rest is padding).
    let mut valid: Vec<Vec<Valid>> = vec![Vec::new(); nodes.len()];
    let get = |values: &Vec<Vec<Tensor<D::V>>>, t: &TensorRef| -> Tensor<D::V> { values[t.node][t.port].clone() };
    let in_loop = |i: usize| match nodes[i].op {
        BlockOp::Accum { .. } | BlockOp::Output { .. } => false,
        _ => nodes[i].outputs.first().is_some_and(|t| t.phase == Phase::InLoop),
    };
    // The loop body.
    for it in 0..frange {
        for (i, node) in nodes.iter().enumerate() {
            if let BlockOp::Accum { acc } = node.op {
                let x = &values[node.inputs[0].node][node.inputs[0].port];
                let xv = &valid[node.inputs[0].node][node.inputs[0].port];
                let last = x.shape.len() - 1;
                let zeroed = || ops.fill_padding(x, xv, d.zero());
                let (folded, fv) = match acc {
                    AccKind::Sum | AccKind::Rescale => (zeroed().into_owned(), xv.clone()),
                    AccKind::Max => (ops.fill_padding(x, xv, d.neg_infinity()).into_owned(), xv.clone()),
                    AccKind::SumLast | AccKind::SumLastRescale => {
                        (ops.reduce_sum(&zeroed(), last, 1), reduced_valid(xv, last, 1))
                    }
                    AccKind::RmsLast => (ops.sum_squares_last(&zeroed()), reduced_valid(xv, last, 1)),
                    AccKind::SumTo { width } => {
                        (ops.reduce_sum(&zeroed(), last, width), reduced_valid(xv, last, width))
                    }
                };
                let count = xv.get(last).copied().unwrap_or(1);
                let Carry::Acc(state) = &mut carry[i] else { continue };
                *state = Some(match state.take() {
                    None => AccState { value: folded, valid: fv, count },
                    Some(prev) => {
                        let value = match acc {
                            AccKind::Max => ops.max(&prev.value, &folded),
                            AccKind::Rescale | AccKind::SumLastRescale => {
                                let r = &values[node.inputs[1].node][node.inputs[1].port];
                                ops.binary(BinaryOp::Add, &ops.binary(BinaryOp::Mul, &prev.value, r), &folded)
                            }
                            _ => ops.binary(BinaryOp::Add, &prev.value, &folded),
                        };
                        // Only the loop dim's padding shrinks from one iteration to the next: the
                        // union of the boxes is the larger box.
                        let valid = prev.valid.iter().zip(&fv).map(|(&p, &f)| p.max(f)).collect();
                        AccState { value, valid, count: prev.count + count }
                    }
                });
                continue;
            }
            if !in_loop(i) {
                continue;
            }
            let (produced, produced_valid) = match &node.op {
                BlockOp::Input { input, imap, forloop_dim } => {
                    if forloop_dim.is_none() && it > 0 {
                        continue; // loaded once, before the loop
                    }
                    let src = inputs[*input];
                    let tile = &node.outputs[0].shape;
                    // The block's slab as at the compile size (the padded-tile rule).
                    let compiled = &bg.inputs()[*input].shape;
                    let mut offset = vec![0usize; tile.len()];
                    for a in 0..3 {
                        if let Some(dim) = imap[a] {
                            offset[dim] += b[a] * (compiled[dim] / grid[a]);
                        }
                    }
                    if let Some(f) = forloop_dim {
                        offset[*f] += it * tile[*f];
                    }
                    let mut v: Valid =
                        (0..tile.len()).map(|k| tile[k].min(src.shape[k].saturating_sub(offset[k]))).collect();
                    let mut region = src.region_padded(&offset, tile, d.zero());
                    let mut copies = stacked.iter().filter(|s| s.0 == *input).peekable();
                    if copies.peek().is_some() {
                        // One copy per tile: its positions past the size hold another size's
                        // padding (whatever the producer computed there), read as zeros.
                        for &(_, dim, n) in copies {
                            if let Some(x) = v.get_mut(dim) {
                                *x = (*x).min(n);
                            }
                        }
                        region = ops.fill_padding(&region, &v, d.zero()).into_owned();
                    }
                    (vec![region], vec![v])
                }
                BlockOp::Gather { table, imap } => {
                    let ids = &values[node.inputs[0].node][node.inputs[0].port];
                    let g = gather_block(ops, inputs[*table], imap, grid, b, ids);
                    let v = gathered_valid(&valid[node.inputs[0].node][node.inputs[0].port], &g);
                    (vec![g], vec![v])
                }
                BlockOp::RunningMax { dim } => {
                    let x = &values[node.inputs[0].node][node.inputs[0].port];
                    let xv = &valid[node.inputs[0].node][node.inputs[0].port];
                    let cur = ops.reduce_max(&ops.fill_padding(x, xv, d.neg_infinity()), *dim);
                    let Carry::RunningMax(prev) = &mut carry[i] else { continue };
                    let (m, diff) = match prev.take() {
                        None => (cur.clone(), cur.map(|_| d.neg_infinity())),
                        Some(p) => {
                            let m = ops.max(&p, &cur);
                            let diff = ops.binary(BinaryOp::Sub, &p, &m);
                            (m, diff)
                        }
                    };
                    *prev = Some(m.clone());
                    let v = reduced_valid(xv, *dim, 1);
                    (vec![m, diff], vec![v.clone(), v])
                }
                op => {
                    let args: Vec<&Tensor<D::V>> = node.inputs.iter().map(|t| &values[t.node][t.port]).collect();
                    let arg_valid: Vec<&Valid> = node.inputs.iter().map(|t| &valid[t.node][t.port]).collect();
                    match ops.masked_block_op(op, &args, &arg_valid) {
                        Some((t, v)) => (vec![t], vec![v]),
                        None => continue,
                    }
                }
            };
            values[i] = produced;
            valid[i] = produced_valid;
        }
    }
    // After the loop: finish accumulators, run the epilogue, save outputs.
    let mut saved = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        match &node.op {
            BlockOp::Accum { acc } => {
                let Carry::Acc(Some(state)) = &mut carry[i] else { continue };
                let value = match acc {
                    // The mean over the valid elements only (at least one: an empty mean is
                    // padding, never saved).
                    AccKind::RmsLast => ops.rms_from_sum(&state.value, state.count.max(1), None),
                    _ => state.value.clone(),
                };
                values[i] = vec![value];
                valid[i] = vec![state.valid.clone()];
            }
            BlockOp::Output { omap, .. } => {
                let tile = get(&values, &node.inputs[0]);
                let mut offset = vec![0usize; tile.shape.len()];
                for a in 0..3 {
                    if let Some(dim) = omap[a] {
                        offset[dim] += b[a] * tile.shape[dim];
                    }
                }
                saved.push((offset, tile));
            }
            BlockOp::Gather { table, imap } if !in_loop(i) => {
                let ids = &values[node.inputs[0].node][node.inputs[0].port];
                let g = gather_block(ops, inputs[*table], imap, grid, b, ids);
                valid[i] = vec![gathered_valid(&valid[node.inputs[0].node][node.inputs[0].port], &g)];
                values[i] = vec![g];
            }
            op if !in_loop(i) => {
                let args: Vec<&Tensor<D::V>> = node.inputs.iter().map(|t| &values[t.node][t.port]).collect();
                let arg_valid: Vec<&Valid> = node.inputs.iter().map(|t| &valid[t.node][t.port]).collect();
                if let Some((t, v)) = ops.masked_block_op(op, &args, &arg_valid) {
                    values[i] = vec![t];
                    valid[i] = vec![v];
                }
            }
            _ => {}
        }
    }
    saved
}

/// The valid box of a tile: per dim, how many leading positions hold elements of the tensors
/// (the rest is padding, where an input tile reached past a runtime-sized dim's extent). Padding
/// is always a tail (tiles keep their compile-size offsets), so a box is exact.
///
/// The masked-reduction rule: element-wise operators compute on the padding as on any element
/// (the result's box is the operands' common box), but every reduction — `ReduceSum`,
/// `ReduceSumTo`, `ReduceMax`, `Argmax`, a matmul's contraction, `RmsNorm`'s mean, `RunningMax`
/// and every accumulator — takes the padded elements as its identity (0 for sums and products'
/// contraction, −∞ for maxima; a mean counts the valid elements only), so padding never
/// reaches a result. A reduction's result is valid along the reduced dim: it is the reduction of
/// the valid elements (the identity when there are none).
pub type Valid = Vec<usize>;

/// The box of a reduction of `dim` to `width` over a value of box `v`.
fn reduced_valid(v: &[usize], dim: usize, width: usize) -> Valid {
    let mut o = v.to_vec();
    o[dim] = width;
    o
}

/// The box of a gather's result: the ids' box and the whole gathered width.
fn gathered_valid<V>(ids: &[usize], g: &Tensor<V>) -> Valid {
    let mut o = ids.to_vec();
    o.push(g.shape[g.shape.len() - 1]);
    o
}

impl<D: Domain> Ops<'_, D> {
    /// `x` with every element outside the box `v` replaced by `id` (borrowed when there is no
    /// padding).
    fn fill_padding<'t>(&self, x: &'t Tensor<D::V>, v: &[usize], id: D::V) -> Cow<'t, Tensor<D::V>> {
        if v.iter().zip(&x.shape).all(|(a, b)| a >= b) {
            return Cow::Borrowed(x);
        }
        let mut out = x.clone();
        let mut idx = vec![0usize; x.shape.len()];
        for e in out.data.iter_mut() {
            if idx.iter().zip(v).any(|(i, n)| i >= n) {
                *e = id;
            }
            advance(&mut idx, &x.shape);
        }
        Cow::Owned(out)
    }

    /// A block operator common to both levels by the masked-reduction rule (see [`Valid`]): the
    /// result and its valid box.
    fn masked_block_op(&self, op: &BlockOp, args: &[&Tensor<D::V>], v: &[&Valid]) -> Option<(Tensor<D::V>, Valid)> {
        let d = self.0;
        let zero = |k: usize| self.fill_padding(args[k], v[k], d.zero());
        Some(match op {
            BlockOp::Matmul => {
                let (a, b) = (zero(0), zero(1));
                let r = a.shape.len();
                let mut o: Valid = v[0].clone();
                o[r - 1] = v[1][r - 1];
                for k in 0..r - 2 {
                    o[k] = o[k].min(v[1][k]);
                }
                (self.matmul(&a, &b), o)
            }
            BlockOp::ReduceSum { dim } => (self.reduce_sum(&zero(0), *dim, 1), reduced_valid(v[0], *dim, 1)),
            BlockOp::ReduceSumTo { dim, width } => {
                (self.reduce_sum(&zero(0), *dim, *width), reduced_valid(v[0], *dim, *width))
            }
            BlockOp::ReduceMax { dim } => {
                let x = self.fill_padding(args[0], v[0], d.neg_infinity());
                (self.reduce_max(&x, *dim), reduced_valid(v[0], *dim, 1))
            }
            BlockOp::Argmax { dim } => {
                let x = self.fill_padding(args[0], v[0], d.neg_infinity());
                (self.argmax(&x, *dim), reduced_valid(v[0], *dim, 1))
            }
            BlockOp::RmsNorm { eps } => {
                let x = args[0];
                let n = v[0][x.shape.len() - 1].max(1);
                let rms = self.rms_from_sum(&self.sum_squares_last(&zero(0)), n, Some(eps.0));
                (self.binary(BinaryOp::Div, x, &rms), v[0].clone())
            }
            BlockOp::Concat { dim } => {
                let t = self.concat(args[0], args[1], *dim);
                let mut o: Valid = v[0].iter().zip(v[1].iter()).map(|(&a, &b)| a.min(b)).collect();
                o[*dim] = if v[0][*dim] >= args[0].shape[*dim] { args[0].shape[*dim] + v[1][*dim] } else { v[0][*dim] };
                (t, o)
            }
            BlockOp::Unary { .. } | BlockOp::Rope { .. } => (self.common_block_op(op, args)?, v[0].clone()),
            BlockOp::Binary { .. } => {
                let t = self.common_block_op(op, args)?;
                let o = (0..t.shape.len())
                    .map(|k| {
                        (0..2)
                            .map(|a| if args[a].shape[k] == t.shape[k] { v[a][k] } else { t.shape[k] })
                            .min()
                            .unwrap_or(t.shape[k])
                    })
                    .collect();
                (t, o)
            }
            BlockOp::Input { .. }
            | BlockOp::Output { .. }
            | BlockOp::Gather { .. }
            | BlockOp::RunningMax { .. }
            | BlockOp::Accum { .. } => return None,
        })
    }
}
