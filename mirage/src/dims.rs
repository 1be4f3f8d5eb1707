//! Runtime-sized dimensions: dimension variables with declared ranges, which tensor dims they
//! size, and what a µGraph built at the compile size does at another size.
//!
//! A program with dimension variables is built (lowered, searched, verified) at the *compile
//! size*: every variable at the upper bound of its range. [`DimPlan::analyze`] follows the
//! variables through a kernel graph built that way, symbolically: which dims of every device tensor
//! they size, which grid axes and which for-loop of each custom kernel split them (and the slab
//! each part covers), and rejects what the padded-tile rule cannot run at another size (a grid
//! axis splitting a variable dim in one tensor and a fixed dim in another, a concatenation along
//! a variable dim, a variable dim meeting a literal of the same extent, ...). [`DimPlan::run_shapes`]
//! then gives the geometry at given sizes, which [`crate::eval::evaluate_at`] runs.

use std::fmt;

use crate::eval::{BlockRun, RunShapes};
use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, IrError, KernelGraph, KernelOp, TensorRef, UnaryOp, row_major_strides,
};

/// The largest upper bound a dimension variable may declare (the DSL checks it too).
pub use mirage_core::shape::MAX_DIM_VAR;

/// A dimension variable: a name and the range of sizes it takes at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DimVar {
    /// The name (as declared: `B`, `S`).
    pub name: String,
    /// The smallest size.
    pub lo: usize,
    /// The largest size: the compile size.
    pub hi: usize,
}

/// The dimension variables of a program and the input dims they size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Dims {
    /// The declared variables.
    pub vars: Vec<DimVar>,
    /// For each program input, for each of its dims: the variable sizing it, or `None` (fixed).
    pub inputs: Vec<Vec<Option<usize>>>,
}

impl Dims {
    /// Whether no variable is declared (a static program).
    pub fn is_static(&self) -> bool {
        self.vars.is_empty()
    }

    /// The compile size of every variable: its upper bound.
    pub fn compile_sizes(&self) -> Vec<usize> {
        self.vars.iter().map(|v| v.hi).collect()
    }

    /// Checks `sizes` (one per variable) against the declared ranges.
    pub fn check_sizes(&self, sizes: &[usize]) -> Result<(), IrError> {
        if sizes.len() != self.vars.len() {
            return Err(IrError::rule(
                "dims",
                format!("{} sizes", sizes.len()),
                format!("the program declares {} dimension variables", self.vars.len()),
            ));
        }
        for (v, &n) in self.vars.iter().zip(sizes) {
            if n < v.lo || n > v.hi {
                return Err(IrError::rule(
                    "dims",
                    format!("{} = {n}", v.name),
                    format!("{} is declared in {}..={}", v.name, v.lo, v.hi),
                ));
            }
        }
        Ok(())
    }

    /// The sizes a µGraph of `plan` is verified at for variable `var`: both ends of its range,
    /// 1, 3, 17, `hi - 1`, a prime in range, and for each tile size the plan splits the variable
    /// with, one size past a multiple of it (none of them a multiple of any tile, except where the
    /// range leaves no choice). Sorted, without repeats.
    pub fn verification_sizes(&self, var: usize, plan: &DimPlan) -> Vec<usize> {
        let v = &self.vars[var];
        let mut sizes = vec![v.lo, v.hi, 1, 3, 17, v.hi.saturating_sub(1), largest_prime_at_most(v.hi)];
        for t in plan.tiles(var) {
            sizes.push(t + 1);
            sizes.push(v.hi - t + 1);
        }
        sizes.retain(|&n| n >= v.lo && n <= v.hi);
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }
}

/// Size buckets: a runtime-sized program is built as a few specializations, each for a sub-range
/// of its dims (a bucket), and its launcher runs the one holding the sizes found at launch.
impl Dims {
    /// The dims of the bucket covering `ranges` (one `(lo, hi)` per variable, inside the declared
    /// ranges): the same variables over the sub-ranges, built at their upper bounds. A bucket of
    /// one size keeps its variable (`B = 1..=1`): its launch plan still reads the size from the
    /// tensors, which the dispatcher of a bucketed program needs.
    pub fn bucket(&self, ranges: &[(usize, usize)]) -> Result<Dims, IrError> {
        if ranges.len() != self.vars.len() {
            return Err(IrError::rule(
                "buckets",
                format!("{} ranges", ranges.len()),
                format!("the program declares {} dimension variables", self.vars.len()),
            ));
        }
        for (v, &(lo, hi)) in self.vars.iter().zip(ranges) {
            if lo > hi || lo < v.lo || hi > v.hi {
                return Err(IrError::rule(
                    "buckets",
                    format!("{} in {lo}..={hi}", v.name),
                    format!("a bucket is a non-empty part of the declared range {}..={}", v.lo, v.hi),
                ));
            }
        }
        let vars = self.vars.iter().zip(ranges).map(|(v, &(lo, hi))| DimVar { name: v.name.clone(), lo, hi }).collect();
        Ok(Dims { vars, inputs: self.inputs.clone() })
    }

    /// The bucket of `buckets` (per bucket, one `(lo, hi)` per variable) holding `sizes`: the
    /// first whose every range contains its size.
    pub fn bucket_of(buckets: &[Vec<(usize, usize)>], sizes: &[usize]) -> Option<usize> {
        buckets
            .iter()
            .position(|b| b.len() == sizes.len() && b.iter().zip(sizes).all(|(&(lo, hi), &n)| lo <= n && n <= hi))
    }
}

fn largest_prime_at_most(n: usize) -> usize {
    let is_prime = |k: usize| k >= 2 && (2..).take_while(|d| d * d <= k).all(|d| !k.is_multiple_of(d));
    (2..=n).rev().find(|&k| is_prime(k)).unwrap_or(1)
}

/// The extent of a dim of a device tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extent {
    /// A literal extent.
    Fixed(usize),
    /// The size of a dimension variable (by index).
    Var(usize),
    /// `ceil(n / slab) · tile` at size `n` of variable `var`: a dim along which a kernel's blocks
    /// concatenate their `tile`-wide results while a grid axis splits `var` in parts of `slab`
    /// (the partial results of split-KV attention, one per key range).
    Blocks {
        /// The variable the grid axis splits.
        var: usize,
        /// The part of the variable each block covers.
        slab: usize,
        /// The width each block writes.
        tile: usize,
    },
    /// `copies` copies of variable `var`'s dim side by side, each laid out at the compile size
    /// `whole` (the variable's upper bound) and valid on its first `n` positions at size `n`: a
    /// dim along which a grid axis that splits a fixed dim stacks the blocks' tiles while each
    /// tile covers `var` whole (the partial sums of split-K over a batch of runtime size, one
    /// copy per range of the contraction). The tensor keeps its compile-size layout (the buffer is
    /// allocated at the upper bound); a custom kernel reads it one copy per block or iteration,
    /// the positions past `n` of each copy as padding (zeros), and nothing else reads it.
    Stacked {
        /// The variable each copy holds.
        var: usize,
        /// The number of copies (the stacking axis's blocks).
        copies: usize,
        /// The compile-size extent of one copy (the variable's upper bound).
        whole: usize,
    },
}

impl Extent {
    /// The variable the extent follows, if any.
    pub fn var(self) -> Option<usize> {
        match self {
            Extent::Fixed(_) => None,
            Extent::Var(v) | Extent::Blocks { var: v, .. } | Extent::Stacked { var: v, .. } => Some(v),
        }
    }
}

/// How a grid axis or the for-loop of a custom kernel covers a variable dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    /// The variable.
    pub var: usize,
    /// The extent each part covers at the compile size: the block's slab (grid axis) or the tile
    /// of one iteration (for-loop).
    pub part: usize,
    /// For the for-loop: the extent of the block's slab it iterates over (the variable's upper
    /// bound when no grid axis splits the dim too); for a grid axis, the variable's upper bound.
    pub whole: usize,
}

impl Split {
    /// The number of parts at size `n`: `ceil(min(n, whole) / part)`.
    pub fn parts(&self, n: usize) -> usize {
        n.min(self.whole).div_ceil(self.part)
    }
}

/// How a custom kernel's launch follows the variables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelDims {
    /// Per grid axis (x, y, z): the variable dim it splits, or `None` (a fixed extent).
    pub grid: [Option<Split>; 3],
    /// The variable dim the for-loop splits, or `None` (a fixed trip count).
    pub forloop: Option<Split>,
    /// The variables the kernel's tensors depend on (sorted).
    pub vars: Vec<usize>,
    /// The in-block reductions over a padded dim whose padding, as code generation pads a tile
    /// (zeros), is not the reduction's identity — a maximum, an argmax, an RMS count, or a sum
    /// of something other than zeros there (`exp(0) = 1`): by the masked-reduction rule
    /// ([`crate::eval::Valid`]) they skip the padding, which code has to do with masks. Each is
    /// described as in messages (`reduce_max over S`).
    pub masked: Vec<String>,
    /// The dims of the kernel's inputs that hold stacked copies of a variable
    /// ([`Extent::Stacked`]), each read one copy per block or iteration: `(input, dim, var)`.
    /// At size `n` of `var` a tile of such a dim holds `n` valid positions, the rest padding.
    pub stacked: Vec<(usize, usize, usize)>,
}

/// The extent of a tile dim inside a block: a literal, or a part of a runtime-sized dim (the
/// tile keeps its compile-size extent; at run sizes part of it may be padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TileExt {
    Fixed,
    Part(Extent),
}

/// The result of following the dimension variables through a kernel graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimPlan {
    dims: Dims,
    /// Per node, per output port, per dim.
    extents: Vec<Vec<Vec<Extent>>>,
    /// Per node: the launch of a custom kernel.
    kernels: Vec<Option<KernelDims>>,
}

fn err(op: impl Into<String>, what: impl Into<String>, rule: impl Into<String>) -> IrError {
    IrError::rule(op, what, rule)
}

impl DimPlan {
    /// Follows `dims` through `graph` (built at the compile size). A static `dims` (no variables)
    /// gives a plan whose every extent is fixed.
    pub fn analyze(graph: &KernelGraph, dims: &Dims) -> Result<Self, IrError> {
        for (i, v) in dims.vars.iter().enumerate() {
            if v.lo == 0 || v.lo > v.hi || v.hi > MAX_DIM_VAR {
                return Err(err(
                    "dims",
                    format!("{} = {}..={}", v.name, v.lo, v.hi),
                    format!("a range must be non-empty, start at 1 or more and end at {MAX_DIM_VAR} or less"),
                ));
            }
            if dims.vars[..i].iter().any(|w| w.name == v.name) {
                return Err(err("dims", v.name.clone(), "the variable is declared twice"));
            }
        }
        let params = graph.inputs();
        if !dims.is_static() && dims.inputs.len() != params.len() {
            return Err(err(
                "dims",
                format!("{} input annotations", dims.inputs.len()),
                format!("the program takes {} inputs", params.len()),
            ));
        }
        let names = |e: &[Extent]| fmt_extents(e, dims);
        let mut extents: Vec<Vec<Vec<Extent>>> = Vec::with_capacity(graph.nodes().len());
        let mut kernels = Vec::with_capacity(graph.nodes().len());
        let mut next_input = 0;
        for node in graph.nodes() {
            let args: Vec<&[Extent]> = node.inputs.iter().map(|t| extents[t.node][t.port].as_slice()).collect();
            let name = node.op.name();
            let mut kernel = None;
            // Stacked copies are laid out at the upper bound with padding inside: only a custom
            // kernel reading one copy per block or iteration knows where each copy ends.
            if !matches!(node.op, KernelOp::Custom { .. })
                && let Some(a) = args.iter().find(|a| a.iter().any(|x| matches!(x, Extent::Stacked { .. })))
            {
                return Err(err(
                    &name,
                    names(a),
                    "stacked copies of a runtime-sized dim are read by a custom kernel one copy at a time, not by this operator nor as a program output",
                ));
            }
            let out: Vec<Vec<Extent>> = match &node.op {
                KernelOp::Input { desc } => {
                    let marks = dims.inputs.get(next_input).cloned().unwrap_or_else(|| vec![None; desc.shape.len()]);
                    next_input += 1;
                    if marks.len() != desc.shape.len() {
                        return Err(err(
                            "input",
                            format!("input {} of rank {}", next_input - 1, desc.shape.len()),
                            format!("{} dims annotated", marks.len()),
                        ));
                    }
                    let e: Vec<Extent> = desc
                        .shape
                        .iter()
                        .zip(&marks)
                        .map(|(&n, m)| match m {
                            Some(v) if *v < dims.vars.len() && dims.vars[*v].hi == n => Ok(Extent::Var(*v)),
                            Some(v) => Err(err(
                                "input",
                                format!("input {} of shape {:?}", next_input - 1, desc.shape),
                                match dims.vars.get(*v) {
                                    Some(var) => format!(
                                        "a dim sized by {} must be built at its upper bound {}, found {n}",
                                        var.name, var.hi
                                    ),
                                    None => format!("no dimension variable {v}"),
                                },
                            )),
                            None => Ok(Extent::Fixed(n)),
                        })
                        .collect::<Result<_, _>>()?;
                    if e.iter().any(|x| matches!(x, Extent::Var(_))) && desc.strides != row_major_strides(&desc.shape) {
                        return Err(err(
                            "input",
                            names(&e),
                            "an input with a runtime-sized dim must be row-major (its strides follow the size)",
                        ));
                    }
                    vec![e]
                }
                KernelOp::Output { strides } => {
                    if strides.is_some() && args[0].iter().any(|x| x.var().is_some()) {
                        return Err(err(
                            "output",
                            names(args[0]),
                            "an output with a runtime-sized dim must be row-major (its strides follow the size)",
                        ));
                    }
                    vec![]
                }
                KernelOp::Matmul => {
                    let (a, b) = (args[0], args[1]);
                    let r = a.len();
                    same(&name, &a[..r - 2], &b[..r - 2], dims)?;
                    same(&name, &a[r - 1..], &b[r - 2..r - 1], dims)?;
                    let mut o = a.to_vec();
                    o[r - 1] = b[r - 1];
                    vec![o]
                }
                KernelOp::Unary { .. } => vec![args[0].to_vec()],
                KernelOp::Binary { .. } => vec![broadcast(&name, args[0], args[1], dims)?],
                KernelOp::ReduceSum { dim } | KernelOp::ReduceMax { dim } | KernelOp::Argmax { dim } => {
                    let mut o = args[0].to_vec();
                    o[*dim] = Extent::Fixed(1);
                    vec![o]
                }
                KernelOp::RmsNorm { .. } => {
                    if let Some(w) = args.get(1) {
                        let r = w.len();
                        same(&name, &args[0][r - 1..], &w[r - 1..], dims)?;
                    }
                    vec![args[0].to_vec()]
                }
                KernelOp::Concat { dim } => {
                    let (a, b) = (args[0], args[1]);
                    let (Extent::Fixed(x), Extent::Fixed(y)) = (a[*dim], b[*dim]) else {
                        return Err(err(
                            &name,
                            format!("{} and {}", names(a), names(b)),
                            "a concatenation along a runtime-sized dim is not supported",
                        ));
                    };
                    let mut o = broadcast_exact(&name, a, b, *dim, dims)?;
                    o[*dim] = Extent::Fixed(x + y);
                    vec![o]
                }
                KernelOp::Rope { .. } => {
                    let (x, c) = (args[0], args[1]);
                    let r = x.len();
                    if x[r - 1].var().is_some() || c[r - 1].var().is_some() {
                        return Err(err(&name, names(x), "rope's last dim (the heads) must be fixed"));
                    }
                    broadcast(&name, x, c, dims)?;
                    broadcast(&name, x, args[2], dims)?;
                    vec![x.to_vec()]
                }
                KernelOp::Gather => {
                    if args[0].iter().any(|x| x.var().is_some()) {
                        return Err(err(&name, names(args[0]), "a gather's table must have fixed dims"));
                    }
                    let mut o = args[1].to_vec();
                    o.push(args[0][1]);
                    vec![o]
                }
                KernelOp::Custom { block } => {
                    let (k, outs) = analyze_block(block, &args, dims)?;
                    kernel = Some(k);
                    outs
                }
            };
            // The symbolic extents agree with the compile-size shapes.
            for (port, e) in out.iter().enumerate() {
                let desc = &node.outputs[port];
                let at_hi: Vec<usize> = e.iter().map(|x| extent_at(*x, &dims.compile_sizes())).collect();
                if at_hi != desc.shape {
                    return Err(err(
                        &name,
                        names(e),
                        format!("the dims do not follow the compile-size shape {:?}", desc.shape),
                    ));
                }
            }
            extents.push(out);
            kernels.push(kernel);
        }
        Ok(DimPlan { dims: dims.clone(), extents, kernels })
    }

    /// The variables and annotations this plan follows.
    pub fn dims(&self) -> &Dims {
        &self.dims
    }

    /// The extents of a tensor of the graph.
    pub fn extents(&self, t: TensorRef) -> &[Extent] {
        &self.extents[t.node][t.port]
    }

    /// The launch of node `node` if it is a custom kernel.
    pub fn kernel(&self, node: usize) -> Option<&KernelDims> {
        self.kernels.get(node).and_then(Option::as_ref)
    }

    /// The tile sizes (`Split::part`) the graph's kernels split variable `var` with.
    pub fn tiles(&self, var: usize) -> Vec<usize> {
        let mut t: Vec<usize> = self
            .kernels
            .iter()
            .flatten()
            .flat_map(|k| k.grid.iter().flatten().chain(k.forloop.iter()))
            .filter(|s| s.var == var)
            .map(|s| s.part)
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// The shape of a tensor at `sizes` (one per variable).
    pub fn shape_at(&self, t: TensorRef, sizes: &[usize]) -> Vec<usize> {
        self.extents(t).iter().map(|e| extent_at(*e, sizes)).collect()
    }

    /// The shapes of the program inputs and the geometry of every custom kernel at `sizes`.
    pub fn run_shapes(&self, graph: &KernelGraph, sizes: &[usize]) -> Result<RunShapes, IrError> {
        self.dims.check_sizes(sizes)?;
        let mut inputs = Vec::new();
        let mut blocks = Vec::with_capacity(graph.nodes().len());
        for (i, node) in graph.nodes().iter().enumerate() {
            if let KernelOp::Input { .. } = node.op {
                inputs.push(self.shape_at(TensorRef::new(i), sizes));
            }
            blocks.push(match (&node.op, self.kernel(i)) {
                (KernelOp::Custom { block }, Some(k)) => {
                    let mut grid = block.grid();
                    for (a, s) in k.grid.iter().enumerate() {
                        if let Some(s) = s {
                            grid[a] = s.parts(sizes[s.var]);
                        }
                    }
                    let forloop_range = k.forloop.map_or(block.forloop_range(), |s| s.parts(sizes[s.var]));
                    let outputs = (0..node.outputs.len()).map(|p| self.shape_at(TensorRef { node: i, port: p }, sizes));
                    let stacked = k.stacked.iter().map(|&(input, dim, v)| (input, dim, sizes[v])).collect();
                    Some(BlockRun { grid, forloop_range, outputs: outputs.collect(), stacked })
                }
                _ => None,
            });
        }
        Ok(RunShapes { inputs, blocks })
    }
}

/// The value of an extent at `sizes`.
pub fn extent_at(e: Extent, sizes: &[usize]) -> usize {
    match e {
        Extent::Fixed(n) => n,
        Extent::Var(v) => sizes[v],
        Extent::Blocks { var, slab, tile } => sizes[var].div_ceil(slab) * tile,
        Extent::Stacked { copies, whole, .. } => copies * whole,
    }
}

/// Extents as in messages: `[B, 4096]`.
pub fn fmt_extents(e: &[Extent], dims: &Dims) -> String {
    let names: Vec<String> = e
        .iter()
        .map(|x| match x {
            Extent::Fixed(n) => n.to_string(),
            Extent::Var(v) => var_name(*v, dims),
            Extent::Blocks { var, slab, tile } => format!("ceil({}/{slab})*{tile}", var_name(*var, dims)),
            Extent::Stacked { var, copies, whole } => {
                format!("{copies} copies of {} (each {whole})", var_name(*var, dims))
            }
        })
        .collect();
    format!("[{}]", names.join(", "))
}

fn var_name(v: usize, dims: &Dims) -> String {
    dims.vars.get(v).map_or_else(|| format!("#{v}"), |d| d.name.clone())
}

impl fmt::Display for DimVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}..={}", self.name, self.lo, self.hi)
    }
}

/// Dims that a shape rule equates must be the same variable or the same literal.
fn same(op: &str, a: &[Extent], b: &[Extent], dims: &Dims) -> Result<(), IrError> {
    if a != b {
        return Err(err(
            op,
            format!("{} and {}", fmt_extents(a, dims), fmt_extents(b, dims)),
            "a runtime-sized dim must meet the same variable (not a literal, even one equal to its upper bound)",
        ));
    }
    Ok(())
}

/// Size-1 broadcasting over extents: equal, or one side the literal 1.
fn broadcast(op: &str, a: &[Extent], b: &[Extent], dims: &Dims) -> Result<Vec<Extent>, IrError> {
    broadcast_exact(op, a, b, usize::MAX, dims)
}

/// [`broadcast`] on every dim but `skip`.
fn broadcast_exact(op: &str, a: &[Extent], b: &[Extent], skip: usize, dims: &Dims) -> Result<Vec<Extent>, IrError> {
    let mut o = a.to_vec();
    for d in 0..a.len().min(b.len()) {
        if d == skip {
            continue;
        }
        o[d] = match (a[d], b[d]) {
            (x, y) if x == y => x,
            (Extent::Fixed(1), y) => y,
            (x, Extent::Fixed(1)) => x,
            _ => {
                same(op, &a[d..=d], &b[d..=d], dims)?;
                a[d]
            }
        };
    }
    Ok(o)
}

/// Whether a unary operator maps 0 to 0 (zero padding stays zero through it).
fn keeps_zero(op: &UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Square
            | UnaryOp::Sqrt
            | UnaryOp::Silu
            | UnaryOp::Gelu
            | UnaryOp::GeluTanh
            | UnaryOp::Relu
            | UnaryOp::Neg
            | UnaryOp::Tanh
            | UnaryOp::MulScalar { .. }
    )
}

/// Follows the variables through one block graph: the kernel's launch and its outputs' extents.
/// Alongside, whether each tile's padding is zeros as code generation pads input tiles, and
/// which reductions over a padded dim that does not make exact ([`KernelDims::masked`]).
fn analyze_block(bg: &BlockGraph, args: &[&[Extent]], dims: &Dims) -> Result<(KernelDims, Vec<Vec<Extent>>), IrError> {
    let grid = bg.grid();
    let hi = dims.compile_sizes();
    let axes = ["x", "y", "z"];
    // Per axis: Some(Some(split)) = splits a variable, Some(None) = splits a fixed dim.
    let mut axis: [Option<Option<Split>>; 3] = [None; 3];
    let mut forloop: Option<Option<Split>> = None;
    let bind = |slot: &mut Option<Option<Split>>, s: Option<Split>, what: &str| -> Result<(), IrError> {
        match slot {
            None => {
                *slot = Some(s);
                Ok(())
            }
            Some(prev) if *prev == s => Ok(()),
            Some(prev) => Err(err(
                "custom",
                what.to_string(),
                format!(
                    "it splits {} in one tensor and {} in another: at other sizes their parts would differ",
                    fmt_split(*prev, dims),
                    fmt_split(s, dims)
                ),
            )),
        }
    };
    // A dim a grid axis or the for-loop splits: a variable's (a split) or a fixed one (none).
    let split_of = |e: Extent, part: usize, whole: usize, what: &str| -> Result<Option<Split>, IrError> {
        match e {
            Extent::Var(v) => Ok(Some(Split { var: v, part, whole })),
            Extent::Fixed(_) => Ok(None),
            Extent::Blocks { .. } => Err(err(
                "custom",
                what.to_string(),
                format!("it splits {}, a dim of per-block parts: not supported", fmt_extents(&[e], dims)),
            )),
            // One copy per part: as many parts at every size (a fixed split).
            Extent::Stacked { whole: w, .. } if part == w => Ok(None),
            Extent::Stacked { .. } => Err(err(
                "custom",
                what.to_string(),
                format!(
                    "it splits {} in parts of {part}: a block or iteration reads one copy whole",
                    fmt_extents(&[e], dims)
                ),
            )),
        }
    };
    let mut tiles: Vec<Vec<Vec<TileExt>>> = Vec::with_capacity(bg.nodes().len());
    // Per node, per port: whether the tile's padding (if any) is zeros.
    let mut zeros: Vec<Vec<bool>> = Vec::with_capacity(bg.nodes().len());
    let mut masked = Vec::new();
    // Accumulators folding padding in: masked when the for-loop walks a runtime-sized dim.
    let mut folded = Vec::new();
    let mut outputs = Vec::new();
    let mut stacked = Vec::new();
    for node in bg.nodes() {
        let name = node.op.name();
        let t: Vec<&[TileExt]> = node.inputs.iter().map(|r| tiles[r.node][r.port].as_slice()).collect();
        let z: Vec<bool> = node.inputs.iter().map(|r| zeros[r.node][r.port]).collect();
        let padded = |x: &[TileExt]| x.iter().any(|e| matches!(e, TileExt::Part(_)));
        // A reduction of operand `k` over `dim` that needs a mask unless `exact`.
        let mut over = |k: usize, dim: usize, exact: bool| {
            if let TileExt::Part(e) = t[k][dim]
                && !exact
            {
                masked.push(format!("{name} over {}", fmt_extents(&[e], dims)));
            }
        };
        let same_tile = |a: &[TileExt], b: &[TileExt]| -> Result<(), IrError> {
            if a != b {
                return Err(err(
                    &name,
                    format!("{a:?} and {b:?}"),
                    "a part of a runtime-sized dim meets a fixed dim or another variable",
                ));
            }
            Ok(())
        };
        let bcast = |a: &[TileExt], b: &[TileExt], sa: &[usize], sb: &[usize]| -> Result<Vec<TileExt>, IrError> {
            let mut o = a.to_vec();
            for d in 0..a.len() {
                o[d] = match (a[d], b[d]) {
                    (x, y) if x == y => x,
                    (TileExt::Fixed, y) if sa[d] == 1 => y,
                    (x, TileExt::Fixed) if sb[d] == 1 => x,
                    _ => {
                        same_tile(&a[d..=d], &b[d..=d])?;
                        a[d]
                    }
                };
            }
            Ok(o)
        };
        let shape = |r: &TensorRef| bg.nodes()[r.node].outputs[r.port].shape.clone();
        let reduced = |d: usize| {
            let mut o = t[0].to_vec();
            o[d] = TileExt::Fixed;
            o
        };
        let (out, zero): (Vec<Vec<TileExt>>, Vec<bool>) = match &node.op {
            BlockOp::Input { input, imap, forloop_dim } => {
                let e = args[*input];
                let compiled = &bg.inputs()[*input].shape;
                let mut slab = compiled.clone();
                for a in 0..3 {
                    if let Some(d) = imap[a] {
                        let what = format!("grid axis {}", axes[a]);
                        let s = split_of(e[d], compiled[d] / grid[a], compiled[d], &what)?;
                        bind(&mut axis[a], s, &what)?;
                        slab[d] /= grid[a];
                    }
                }
                if let Some(f) = forloop_dim {
                    let s = split_of(e[*f], slab[*f] / bg.forloop_range(), slab[*f], "the for-loop")?;
                    bind(&mut forloop, s, "the for-loop")?;
                }
                let shape = &node.outputs[0].shape;
                let mut tile = Vec::with_capacity(e.len());
                for (d, x) in e.iter().enumerate() {
                    tile.push(match *x {
                        Extent::Fixed(_) => TileExt::Fixed,
                        // One copy of a variable: its positions past the size are padding.
                        Extent::Stacked { var, whole, .. } if shape[d] == whole => {
                            stacked.push((*input, d, var));
                            TileExt::Part(Extent::Var(var))
                        }
                        Extent::Stacked { .. } => {
                            return Err(err(
                                "custom",
                                format!("input {input}'s tile {shape:?}"),
                                format!(
                                    "dim {d} holds {}: a block or iteration reads one copy whole",
                                    fmt_extents(&[*x], dims)
                                ),
                            ));
                        }
                        e => TileExt::Part(e),
                    });
                }
                (vec![tile], vec![true])
            }
            BlockOp::Output { omap, .. } => {
                let tile = t[0];
                let ts = shape(&node.inputs[0]);
                let mut o: Vec<Extent> = ts.iter().map(|&n| Extent::Fixed(n)).collect();
                for (d, x) in tile.iter().enumerate() {
                    let along = (0..3).find(|&a| omap[a] == Some(d));
                    let by = along.and_then(|a| axis[a].flatten());
                    o[d] = match (x, along, by) {
                        (TileExt::Part(Extent::Var(v)), _, Some(s)) if s.var == *v && s.part == ts[d] => {
                            Extent::Var(*v)
                        }
                        // A tile covering a variable whole, stacked by an axis over a fixed dim.
                        (TileExt::Part(Extent::Var(v)), Some(a), None) if hi[*v] == ts[d] => {
                            if grid[a] == 1 {
                                Extent::Var(*v)
                            } else {
                                Extent::Stacked { var: *v, copies: grid[a], whole: ts[d] }
                            }
                        }
                        (TileExt::Part(e), None, None) if extent_at(*e, &hi) == ts[d] => *e,
                        (TileExt::Fixed, Some(a), None) => Extent::Fixed(ts[d] * grid[a]),
                        (TileExt::Fixed, Some(_), Some(s)) => Extent::Blocks { var: s.var, slab: s.part, tile: ts[d] },
                        (TileExt::Fixed, None, None) => Extent::Fixed(ts[d]),
                        _ => {
                            return Err(err(
                                "output saver",
                                format!("tile {ts:?} with omap {omap:?}"),
                                format!(
                                    "dim {d} of the saved tile does not cover {} whole at every size",
                                    match x {
                                        TileExt::Part(e) =>
                                            format!("the runtime-sized dim {}", fmt_extents(&[*e], dims)),
                                        TileExt::Fixed => "a fixed dim".to_string(),
                                    }
                                ),
                            ));
                        }
                    };
                }
                outputs.push(o);
                (vec![], vec![])
            }
            BlockOp::Matmul => {
                let (a, b) = (t[0], t[1]);
                let r = a.len();
                same_tile(&a[r - 1..], &b[r - 2..r - 1])?;
                over(0, r - 1, z[0] && z[1]);
                let mut o = a.to_vec();
                o[r - 1] = b[r - 1];
                let zero = !padded(&o) || (z[0] && z[1]);
                (vec![o], vec![zero])
            }
            BlockOp::Unary { op } => {
                let zero = !padded(t[0]) || (z[0] && keeps_zero(op));
                (vec![t[0].to_vec()], vec![zero])
            }
            BlockOp::RmsNorm { .. } => {
                over(0, t[0].len() - 1, false);
                (vec![t[0].to_vec()], vec![z[0]])
            }
            BlockOp::Binary { op } => {
                let o = bcast(t[0], t[1], &shape(&node.inputs[0]), &shape(&node.inputs[1]))?;
                let zero = !padded(&o)
                    || match op {
                        // An unpadded operand's flag is true (no padding): its finite elements times zero
                        // padding are zero.
                        BinaryOp::Mul => z[0] && z[1],
                        BinaryOp::Add | BinaryOp::Sub => z[0] && z[1] && t[0] == t[1],
                        BinaryOp::Div | BinaryOp::Pow => false,
                    };
                (vec![o], vec![zero])
            }
            BlockOp::ReduceSum { dim } | BlockOp::ReduceSumTo { dim, .. } => {
                over(0, *dim, z[0]);
                (vec![reduced(*dim)], vec![z[0]])
            }
            BlockOp::ReduceMax { dim } => {
                over(0, *dim, false);
                (vec![reduced(*dim)], vec![z[0]])
            }
            BlockOp::Argmax { dim } => {
                over(0, *dim, false);
                let o = reduced(*dim);
                let zero = !padded(&o);
                (vec![o], vec![zero])
            }
            BlockOp::RunningMax { dim } => {
                over(0, *dim, false);
                let o = reduced(*dim);
                let zero = !padded(&o);
                (vec![o.clone(), o], vec![z[0], zero])
            }
            BlockOp::Concat { dim } => {
                if t[0][*dim] != TileExt::Fixed || t[1][*dim] != TileExt::Fixed {
                    return Err(err(&name, format!("{:?}", t[0]), "a concatenation along a runtime-sized dim"));
                }
                (vec![t[0].to_vec()], vec![z[0] && z[1]])
            }
            BlockOp::Rope { .. } => {
                if t[0].last() != Some(&TileExt::Fixed) {
                    return Err(err(&name, format!("{:?}", t[0]), "rope's last dim (the heads) must be fixed"));
                }
                (vec![t[0].to_vec()], vec![z[0]])
            }
            BlockOp::Gather { table, .. } => {
                if args[*table].iter().any(|x| x.var().is_some()) {
                    return Err(err(&name, "table", "a gather's table must have fixed dims"));
                }
                let mut o = t[0].to_vec();
                o.push(TileExt::Fixed);
                let zero = !padded(&o);
                (vec![o], vec![zero])
            }
            BlockOp::Accum { acc } => {
                let last = t[0].len() - 1;
                // Across iterations each position folds in its elements: padding there is
                // harmless unless the for-loop walks a runtime-sized dim (a position padded in one
                // iteration holds a key in another), which is known once every input is read.
                let needs = match acc {
                    AccKind::Max => padded(t[0]),
                    AccKind::Sum
                    | AccKind::Rescale
                    | AccKind::SumLast
                    | AccKind::SumTo { .. }
                    | AccKind::SumLastRescale => padded(t[0]) && !z[0],
                    AccKind::RmsLast => {
                        over(0, last, false);
                        false
                    }
                };
                if needs {
                    folded.push(format!("{name} over a padded tile"));
                }
                match acc {
                    AccKind::Sum | AccKind::Max | AccKind::Rescale => (vec![t[0].to_vec()], vec![z[0]]),
                    AccKind::SumLast | AccKind::RmsLast | AccKind::SumTo { .. } | AccKind::SumLastRescale => {
                        (vec![reduced(last)], vec![z[0]])
                    }
                }
            }
        };
        tiles.push(out);
        zeros.push(zero);
    }
    let mut vars: Vec<usize> =
        args.iter().flat_map(|e| e.iter()).chain(outputs.iter().flatten()).filter_map(|x| x.var()).collect();
    vars.sort_unstable();
    vars.dedup();
    if forloop.flatten().is_some() {
        masked.extend(folded);
    }
    let k = KernelDims { grid: axis.map(Option::flatten), forloop: forloop.flatten(), vars, masked, stacked };
    Ok((k, outputs))
}

fn fmt_split(s: Option<Split>, dims: &Dims) -> String {
    match s {
        Some(s) => format!("variable {} in parts of {}", dims.vars[s.var].name, s.part),
        None => "a fixed dim".to_string(),
    }
}
