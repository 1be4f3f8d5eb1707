//! Lowering `#[mugraph]` functions to kernel graphs.
//!
//! The DSL is parsed and checked by [`syntax`], the module `mirage-macros` compiles too (the same
//! source files, included here with `#[path]`, the way cxx shares its syntax module), so the
//! macro's compile errors and the build's lowering can never disagree. Lowering then maps each
//! checked value to one IR builder call: parameters become inputs in signature order, results
//! become outputs in tuple order.
//!
//! ```
//! let src = r#"
//!     #[mugraph]
//!     fn gated_mlp(x: Tensor<f16, 8, 64>, w1: Tensor<f16, 64, 32>, w2: Tensor<f16, 64, 32>)
//!         -> Tensor<f16, 8, 32>
//!     {
//!         silu(x.matmul(w1)) * x.matmul(w2)
//!     }
//! "#;
//! let programs = mirage::lower::lower_source(src).unwrap();
//! // The same program through the IR builders.
//! use mirage::ir::{DType, KernelGraph};
//! let mut g = KernelGraph::new();
//! let x = g.input(&[8, 64], DType::F16).unwrap();
//! let w1 = g.input(&[64, 32], DType::F16).unwrap();
//! let w2 = g.input(&[64, 32], DType::F16).unwrap();
//! let a = g.matmul(x, w1).unwrap();
//! let a = g.silu(a).unwrap();
//! let b = g.matmul(x, w2).unwrap();
//! let o = g.mul(a, b).unwrap();
//! g.output(o, None).unwrap();
//! assert_eq!(programs[0].graph.canonical_hash(), g.canonical_hash());
//! ```

use std::path::Path;

use proc_macro2::Span;

use crate::dims::{DimVar, Dims};
use crate::ir::{IrError, KernelGraph, TensorDesc, TensorRef};

#[path = "../../mirage-macros/src/syntax/mod.rs"]
pub mod syntax;

/// A lowered `#[mugraph]` function: its signature and its kernel graph (the program the search
/// must match).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The function's name.
    pub name: String,
    /// The inline modules (`mod a { mod b { ... } }`) enclosing it in its file, outermost first.
    pub module_path: Vec<String>,
    /// The parameters in signature order: the graph's inputs.
    pub params: Vec<ProgramParam>,
    /// The results in order (row-major): the graph's outputs.
    pub outputs: Vec<TensorDesc>,
    /// Whether the function returns a tuple (even of one tensor).
    pub tuple_result: bool,
    /// The kernel graph (with runtime-sized dims: at their upper bounds, the compile size).
    pub graph: KernelGraph,
    /// The runtime-sized dims of `#[mugraph(dims(...))]` and the input dims they size (static:
    /// none).
    pub dims: Dims,
    /// The canonical text of the checked program ([`syntax::Program::fingerprint`]): the macro
    /// computes the same text from its tokens.
    pub fingerprint: String,
    /// A short stable hash of `fingerprint` ([`syntax::Program::fingerprint_hash`]).
    pub fingerprint_hash: String,
    /// The size buckets of a program with runtime-sized dims split into several (`buckets(...)`
    /// or the default ladder), each lowered at its own upper bounds; empty when the program is
    /// built once (no dims, or one bucket for the declared ranges).
    pub buckets: Vec<ProgramBucket>,
}

impl Program {
    /// What is built for this function: itself (`None`), or one program per size bucket (its
    /// index), each with the bucket's graph and dims and the function's name and fingerprint.
    pub fn builds(&self) -> Vec<(Option<usize>, Program)> {
        if self.buckets.is_empty() {
            return vec![(None, self.clone())];
        }
        let bare = Program { buckets: Vec::new(), ..self.clone() };
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (Some(i), Program { graph: b.graph.clone(), dims: b.dims.clone(), ..bare.clone() }))
            .collect()
    }
}

/// One size bucket of a program: a sub-range of its dims and the kernel graph at its upper
/// bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramBucket {
    /// Per variable, the `(lo, hi)` this bucket covers.
    pub ranges: Vec<(usize, usize)>,
    /// The kernel graph at the bucket's upper bounds.
    pub graph: KernelGraph,
    /// The bucket's dims ([`Dims::bucket`]).
    pub dims: Dims,
}

/// A parameter of a lowered program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramParam {
    /// The parameter's name.
    pub name: String,
    /// Shape, strides and element type.
    pub desc: TensorDesc,
}

/// A `#[mugraph]` source could not be lowered: where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct LowerError {
    /// The file (`<source>` when lowering text with [`lower_source`]).
    pub file: String,
    /// 1-based line of the offending token.
    pub line: usize,
    /// 1-based column (in characters) of the offending token.
    pub column: usize,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl LowerError {
    fn from_syn(err: &syn::Error, file: &str) -> Self {
        let start = err.span().start();
        LowerError { file: file.to_string(), line: start.line, column: start.column + 1, message: err.to_string() }
    }
}

/// Lowers a checked program to its kernel graph. The IR's rules are checked again by its
/// builders; a disagreement with the syntax module's rules is reported at the value's tokens.
pub fn lower_checked(program: &syntax::Program) -> Result<KernelGraph, syn::Error> {
    let ir_err = |span: Span, e: IrError| syn::Error::new(span, format!("the kernel graph rejects this: {e}"));
    let missing = |span: Span| syn::Error::new(span, "internal error: a value refers to a later value");
    let mut graph = KernelGraph::new();
    let mut refs: Vec<TensorRef> = Vec::with_capacity(program.values.len());
    for v in &program.values {
        let args = v
            .args
            .iter()
            .map(|&a| refs.get(a).copied().ok_or_else(|| missing(v.span)))
            .collect::<Result<Vec<_>, _>>()?;
        let arg = |i: usize| args.get(i).copied().ok_or_else(|| missing(v.span));
        let t = match &v.op {
            syntax::Op::Param(i) => {
                let p = program.params.get(*i).ok_or_else(|| missing(v.span))?;
                graph.input_strided(&p.ty.shape, &p.strides, p.ty.dtype)
            }
            syntax::Op::Matmul => graph.matmul(arg(0)?, arg(1)?),
            syntax::Op::Unary(op) => graph.unary(*op, arg(0)?),
            syntax::Op::Binary(op) => graph.binary(*op, arg(0)?, arg(1)?),
            syntax::Op::ReduceSum { dim } => graph.reduce_sum(arg(0)?, *dim),
            syntax::Op::ReduceMax { dim } => graph.reduce_max(arg(0)?, *dim),
            syntax::Op::RmsNorm { eps } => graph.rms_norm(arg(0)?, *eps, args.get(1).copied()),
            syntax::Op::Concat { dim } => graph.concat(arg(0)?, arg(1)?, *dim),
            syntax::Op::Rope { layout } => graph.rope(*layout, arg(0)?, arg(1)?, arg(2)?),
            syntax::Op::Gather => graph.gather(arg(0)?, arg(1)?),
            syntax::Op::Argmax { dim } => graph.argmax(arg(0)?, *dim),
        }
        .map_err(|e| ir_err(v.span, e))?;
        refs.push(t);
    }
    for &o in &program.outputs {
        let t = refs.get(o).copied().ok_or_else(|| missing(program.name.span()))?;
        graph.output(t, None).map_err(|e| ir_err(program.name.span(), e))?;
    }
    Ok(graph)
}

/// The runtime-sized dims of a checked program: the declared ranges, and per parameter per dim
/// the variable sizing it.
pub fn program_dims(program: &syntax::Program) -> Dims {
    if program.dims.is_empty() {
        return Dims::default();
    }
    Dims {
        vars: program.dims.iter().map(|d| DimVar { name: d.name.to_string(), lo: d.lo, hi: d.hi }).collect(),
        inputs: program
            .params
            .iter()
            .map(|p| (0..p.ty.rank()).map(|d| p.ty.var(d).map(|v| v.index)).collect())
            .collect(),
    }
}

fn lower_in(item: &syn::ItemFn, dims: Vec<syntax::DimDecl>, module_path: Vec<String>) -> Result<Program, syn::Error> {
    let bucket_ranges = syntax::bucket_ranges(&dims);
    let checked = syntax::parse(item, dims.clone())?;
    let graph = lower_checked(&checked)?;
    let program_dims = program_dims(&checked);
    let mut buckets = Vec::new();
    if bucket_ranges.len() > 1 {
        for ranges in bucket_ranges {
            // The same function checked and lowered with the dims at the bucket's upper bounds.
            let sub: Vec<syntax::DimDecl> = dims
                .iter()
                .zip(&ranges)
                .map(|(d, &(lo, hi))| syntax::DimDecl { name: d.name.clone(), lo, hi, buckets: vec![hi] })
                .collect();
            let bucket_graph = lower_checked(&syntax::parse(item, sub)?)?;
            let bucket_dims = program_dims
                .bucket(&ranges)
                .map_err(|e| syn::Error::new(checked.name.span(), format!("size bucket {ranges:?}: {e}")))?;
            buckets.push(ProgramBucket { ranges, graph: bucket_graph, dims: bucket_dims });
        }
    }
    let params = checked
        .params
        .iter()
        .map(|p| ProgramParam {
            name: p.name.to_string(),
            desc: TensorDesc { shape: p.ty.shape.clone(), strides: p.strides.clone(), dtype: p.ty.dtype },
        })
        .collect();
    let outputs = checked.output_types().into_iter().map(|t| TensorDesc::new(&t.shape, t.dtype)).collect();
    Ok(Program {
        name: checked.name.to_string(),
        module_path,
        params,
        outputs,
        tuple_result: checked.tuple_result,
        graph,
        dims: program_dims,
        fingerprint: checked.fingerprint(),
        fingerprint_hash: checked.fingerprint_hash(),
        buckets,
    })
}

/// Parses, checks and lowers one `#[mugraph]` function (the runtime-sized dims of its
/// `#[mugraph(dims(...))]` attribute, if it has one).
pub fn lower(item: &syn::ItemFn) -> Result<Program, syn::Error> {
    let dims = match item.attrs.iter().find(|a| is_mugraph_attr(a)) {
        Some(attr) => attr_args(attr)?,
        None => Vec::new(),
    };
    lower_in(item, dims, Vec::new())
}

/// Whether `attr` is `#[mugraph]` or `#[mirage::mugraph]` (with or without arguments).
pub fn is_mugraph_attr(attr: &syn::Attribute) -> bool {
    let path = attr.path();
    let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    matches!(names.as_slice(), [m] if m == "mugraph")
        || matches!(names.as_slice(), [c, m] if (c == "mirage" || c == "mirage_macros") && m == "mugraph")
}

/// The runtime-sized dims an attribute declares.
fn attr_args(attr: &syn::Attribute) -> Result<Vec<syntax::DimDecl>, syn::Error> {
    match &attr.meta {
        syn::Meta::Path(_) => Ok(Vec::new()),
        syn::Meta::List(list) => syntax::parse_attr_args(list.tokens.clone()),
        syn::Meta::NameValue(nv) => Err(syn::Error::new_spanned(
            nv,
            "#[mugraph] takes no value: write `#[mugraph]` or `#[mugraph(dims(B = 1..=64))]`",
        )),
    }
}

/// Lowers every `#[mugraph]` function of `items` into `out`; a function that cannot be lowered
/// adds its error to `errors` and the walk goes on.
fn collect(items: &[syn::Item], module_path: &mut Vec<String>, out: &mut Vec<Program>, errors: &mut Vec<syn::Error>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => {
                if let Some(attr) = f.attrs.iter().find(|a| is_mugraph_attr(a)) {
                    match attr_args(attr).and_then(|dims| lower_in(f, dims, module_path.clone())) {
                        Ok(program) => out.push(program),
                        Err(e) => errors.push(e),
                    }
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    module_path.push(m.ident.to_string());
                    collect(items, module_path, out, errors);
                    module_path.pop();
                }
            }
            _ => {}
        }
    }
}

/// Finds and lowers every `#[mugraph]` function of a Rust source file: at the top level and in
/// inline `mod` blocks at any depth, in source order. The first error is returned
/// ([`lower_file_all`] returns every one).
pub fn lower_source(file_text: &str) -> Result<Vec<Program>, LowerError> {
    lower_source_named(file_text, "<source>")
}

fn lower_source_named(file_text: &str, file: &str) -> Result<Vec<Program>, LowerError> {
    let (programs, mut errors) = lower_source_all(file_text, file);
    if errors.is_empty() { Ok(programs) } else { Err(errors.swap_remove(0)) }
}

/// Every `#[mugraph]` function of a source file that lowers, and an error for each one that does
/// not (in source order; a file that does not parse is one error).
fn lower_source_all(file_text: &str, file: &str) -> (Vec<Program>, Vec<LowerError>) {
    let parsed = match syn::parse_file(file_text) {
        Ok(parsed) => parsed,
        Err(e) => return (Vec::new(), vec![LowerError::from_syn(&e, file)]),
    };
    let (mut out, mut errors) = (Vec::new(), Vec::new());
    collect(&parsed.items, &mut Vec::new(), &mut out, &mut errors);
    (out, errors.iter().map(|e| LowerError::from_syn(e, file)).collect())
}

/// Reads a file and lowers every `#[mugraph]` function in it ([`lower_source`]); errors name the
/// file.
pub fn lower_file(path: &Path) -> Result<Vec<Program>, LowerError> {
    let (programs, mut errors) = lower_file_all(path);
    if errors.is_empty() { Ok(programs) } else { Err(errors.swap_remove(0)) }
}

/// Reads a file and lowers every `#[mugraph]` function in it: the functions that lower, and an
/// error for every one that does not (the build reports them all, not only the first).
pub fn lower_file_all(path: &Path) -> (Vec<Program>, Vec<LowerError>) {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => lower_source_all(&text, &file),
        Err(e) => {
            (Vec::new(), vec![LowerError { file, line: 0, column: 0, message: format!("cannot read the file: {e}") }])
        }
    }
}
