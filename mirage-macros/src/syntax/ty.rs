//! Tensor types of the `#[mugraph]` language: `Tensor<T, D0, D1, ...>` and the
//! `#[strides(...)]` parameter attribute.

use std::fmt;

use mirage_core::DType;
use mirage_core::shape::{MAX_RANK, check_strides, fmt_shape, row_major_strides};
use syn::punctuated::Punctuated;
use syn::{Error, Expr, GenericArgument, Lit, LitInt, PathArguments, Result, Token, Type};

/// The static type of a tensor: element type and shape (rank 1..=4, every dim at least 1).
/// A dim sized at run time by a declared variable (`Tensor<f16, B, 4096>`) has its upper bound
/// in `shape` (the compile size) and the variable in `vars`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Extent of each dim (a runtime-sized dim at its upper bound).
    pub shape: Vec<usize>,
    /// Per dim, the runtime-sized dim sizing it (an index into the program's declared
    /// [`DimDecl`]s, with its name); empty when none does.
    pub vars: Vec<Option<DimRef>>,
}

/// A use of a declared runtime-sized dim in a type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DimRef {
    /// Its index among the declared dims.
    pub index: usize,
    /// Its name.
    pub name: String,
}

/// A runtime-sized dim declared by `#[mugraph(dims(B = 1..=64))]`.
#[derive(Clone, Debug)]
pub struct DimDecl {
    /// Its name, as written.
    pub name: proc_macro2::Ident,
    /// The smallest size.
    pub lo: usize,
    /// The largest size: the compile size.
    pub hi: usize,
    /// The upper bounds of its size buckets, ascending, the last one `hi`: bucket `i` covers
    /// `buckets[i-1]+1..=buckets[i]` (the first from `lo`). Declared with `buckets(...)` or the
    /// default ladder ([`super::dims::default_buckets`]).
    pub buckets: Vec<usize>,
}

impl TensorType {
    /// A type with literal dims only.
    pub fn fixed(dtype: DType, shape: Vec<usize>) -> Self {
        TensorType { dtype, shape, vars: Vec::new() }
    }

    /// A type with the given per-dim variables (stored empty when there is none).
    pub fn with_vars(dtype: DType, shape: Vec<usize>, vars: Vec<Option<DimRef>>) -> Self {
        let vars = if vars.iter().any(Option::is_some) { vars } else { Vec::new() };
        TensorType { dtype, shape, vars }
    }

    /// The rank (number of dims).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The variable sizing dim `d`, if any.
    pub fn var(&self, d: usize) -> Option<&DimRef> {
        self.vars.get(d).and_then(Option::as_ref)
    }

    /// Whether a declared variable sizes some dim.
    pub fn is_sized(&self) -> bool {
        !self.vars.is_empty()
    }

    /// The dims as written: `[B, 4096]`.
    pub fn fmt_dims(&self) -> String {
        let dims: Vec<String> = (0..self.rank())
            .map(|d| match self.var(d) {
                Some(v) => v.name.clone(),
                None => self.shape[d].to_string(),
            })
            .collect();
        format!("[{}]", dims.join(", "))
    }
}

impl fmt::Display for TensorType {
    /// Renders the type as it is written: `Tensor<f16, 8, 4096>`, `Tensor<f16, B, 4096>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{}", self.dtype)?;
        for d in 0..self.rank() {
            match self.var(d) {
                Some(v) => write!(f, ", {}", v.name)?,
                None => write!(f, ", {}", self.shape[d])?,
            }
        }
        f.write_str(">")
    }
}

const TENSOR_FORM: &str = "expected `Tensor<T, D0, D1, ...>` with T one of f16, bf16, f32, i32 and 1 to 4 dims (integer literals, or names declared with `#[mugraph(dims(B = 1..=64))]`), e.g. `Tensor<f16, 8, 4096>`";

/// Parses `Tensor<T, D0, ...>` (the path may be qualified, e.g. `mirage::Tensor<...>`); a dim
/// may name one of the declared runtime-sized `dims`.
pub fn parse_tensor_type(ty: &Type, dims: &[DimDecl]) -> Result<TensorType> {
    let ty = strip_type_groups(ty);
    let path = match ty {
        Type::Path(p) if p.qself.is_none() => &p.path,
        Type::Reference(_) => {
            return Err(Error::new_spanned(
                ty,
                format!("tensors are taken by value in a #[mugraph] signature: {TENSOR_FORM}"),
            ));
        }
        Type::Tuple(_) => {
            return Err(Error::new_spanned(ty, format!("a tuple is only allowed as the return type: {TENSOR_FORM}")));
        }
        _ => return Err(Error::new_spanned(ty, TENSOR_FORM)),
    };
    let Some(last) = path.segments.last() else {
        return Err(Error::new_spanned(ty, TENSOR_FORM));
    };
    if last.ident != "Tensor" || path.segments.iter().rev().skip(1).any(|s| !s.arguments.is_none()) {
        return Err(Error::new_spanned(ty, format!("unsupported type: {TENSOR_FORM}")));
    }
    let args = match &last.arguments {
        PathArguments::AngleBracketed(a) => &a.args,
        PathArguments::None => {
            return Err(Error::new_spanned(ty, format!("`Tensor` needs an element type and dims: {TENSOR_FORM}")));
        }
        PathArguments::Parenthesized(_) => return Err(Error::new_spanned(&last.arguments, TENSOR_FORM)),
    };
    let mut iter = args.iter();
    let Some(first) = iter.next() else {
        return Err(Error::new_spanned(ty, TENSOR_FORM));
    };
    let dtype = parse_dtype(first)?;
    let mut shape = Vec::new();
    let mut vars = Vec::new();
    for arg in iter {
        let (n, var) = parse_dim(arg, dims)?;
        shape.push(n);
        vars.push(var);
    }
    if shape.is_empty() {
        return Err(Error::new_spanned(
            ty,
            "a tensor needs at least one dim (rank 0 is not supported): write e.g. `Tensor<f32, 1>` for a single element",
        ));
    }
    if shape.len() > MAX_RANK {
        return Err(Error::new_spanned(
            args,
            format!("rank {} is not supported: tensors have 1 to {MAX_RANK} dims", shape.len()),
        ));
    }
    if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none() {
        return Err(Error::new_spanned(args, "the number of elements of this tensor overflows usize"));
    }
    Ok(TensorType::with_vars(dtype, shape, vars))
}

fn strip_type_groups(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip_type_groups(&g.elem),
        Type::Paren(p) => strip_type_groups(&p.elem),
        other => other,
    }
}

fn parse_dtype(arg: &GenericArgument) -> Result<DType> {
    let unsupported = |found: String| {
        Error::new_spanned(
            arg,
            format!("unsupported element type `{found}`: allowed are f16, bf16, f32 and i32 (indices)"),
        )
    };
    match arg {
        GenericArgument::Type(Type::Path(p)) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else {
                return Err(unsupported(quote::quote!(#arg).to_string()));
            };
            match DType::from_name(&last.ident.to_string()) {
                Some(d) if last.arguments.is_none() => Ok(d),
                _ => Err(unsupported(quote::quote!(#arg).to_string())),
            }
        }
        GenericArgument::Const(_) => Err(Error::new_spanned(
            arg,
            "the first argument of `Tensor` is the element type (f16, bf16, f32 or i32), then the dims",
        )),
        other => Err(unsupported(quote::quote!(#other).to_string())),
    }
}

/// A dim: an integer literal, or the name of a declared runtime-sized dim (given at its upper
/// bound, with the variable).
fn parse_dim(arg: &GenericArgument, dims: &[DimDecl]) -> Result<(usize, Option<DimRef>)> {
    if let GenericArgument::Type(Type::Path(p)) = arg
        && p.qself.is_none()
        && let Some(name) = p.path.get_ident()
    {
        let Some((index, d)) = dims.iter().enumerate().find(|(_, d)| d.name == *name) else {
            let declared = if dims.is_empty() {
                "none is declared".to_string()
            } else {
                format!("declared: {}", dims.iter().map(|d| format!("`{}`", d.name)).collect::<Vec<_>>().join(", "))
            };
            return Err(Error::new_spanned(
                name,
                format!(
                    "unknown dim `{name}`: a dim is an integer literal or a runtime-sized dim declared with `#[mugraph(dims({name} = 1..=64))]` ({declared})"
                ),
            ));
        };
        return Ok((d.hi, Some(DimRef { index, name: name.to_string() })));
    }
    let lit = match arg {
        GenericArgument::Const(e) => int_literal(e),
        _ => None,
    };
    let Some(lit) = lit else {
        return Err(Error::new_spanned(
            arg,
            format!(
                "dims must be integer literals or declared dim names (the macro needs every shape), found `{}`",
                quote::quote!(#arg)
            ),
        ));
    };
    let dim = parse_usize(lit, "dim")?;
    if dim == 0 {
        return Err(Error::new_spanned(lit, "a dim must be at least 1"));
    }
    Ok((dim, None))
}

/// The integer literal `e` is, looking through parentheses, braces of one expression and groups.
pub fn int_literal(e: &Expr) -> Option<&LitInt> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Some(i),
            _ => None,
        },
        Expr::Paren(p) => int_literal(&p.expr),
        Expr::Group(g) => int_literal(&g.expr),
        Expr::Block(b) if b.attrs.is_empty() && b.label.is_none() && b.block.stmts.len() == 1 => {
            match &b.block.stmts[0] {
                syn::Stmt::Expr(e, None) => int_literal(e),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Parses an unsuffixed or integer-suffixed literal as a `usize`, with a spanned error.
pub fn parse_usize(lit: &LitInt, what: &str) -> Result<usize> {
    match lit.suffix() {
        "" | "usize" | "u8" | "u16" | "u32" | "u64" | "i32" | "i64" => {}
        other => {
            return Err(Error::new_spanned(
                lit,
                format!("a {what} is an unsuffixed integer literal, found suffix `{other}`"),
            ));
        }
    }
    lit.base10_parse::<usize>()
        .map_err(|_| Error::new_spanned(lit, format!("the {what} `{lit}` does not fit in usize")))
}

/// Parses the tokens of `#[strides(s0, s1, ...)]` for a parameter of type `ty`: one integer
/// literal per dim, addressing distinct elements (no two indices alias).
pub fn parse_strides(attr: &syn::Attribute, ty: &TensorType) -> Result<Vec<usize>> {
    let list = match &attr.meta {
        syn::Meta::List(list) => list,
        _ => {
            return Err(Error::new_spanned(
                attr,
                format!(
                    "expected `#[strides(...)]` with one integer literal per dim, e.g. `#[strides({})]`",
                    example_strides(ty)
                ),
            ));
        }
    };
    let lits = list.parse_args_with(Punctuated::<LitInt, Token![,]>::parse_terminated).map_err(|e| {
        Error::new(e.span(), format!("{e}: `#[strides(...)]` takes integer literals separated by commas"))
    })?;
    if lits.len() != ty.rank() {
        return Err(Error::new_spanned(
            &list.tokens,
            format!(
                "`#[strides]` needs one stride per dim: `{ty}` has rank {}, found {} strides",
                ty.rank(),
                lits.len()
            ),
        ));
    }
    let strides = lits.iter().map(|l| parse_usize(l, "stride")).collect::<Result<Vec<_>>>()?;
    if let Err(rule) = check_strides(&ty.shape, &strides) {
        return Err(Error::new_spanned(
            &list.tokens,
            format!("strides {strides:?} for shape {}: {rule}", fmt_shape(&ty.shape)),
        ));
    }
    Ok(strides)
}

fn example_strides(ty: &TensorType) -> String {
    let mut s = row_major_strides(&ty.shape);
    s.reverse();
    s.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}
