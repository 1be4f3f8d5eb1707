//! Parsing and checking a `#[mugraph]` function into a [`Program`].
//!
//! Rules beyond the grammar of the module docs:
//! - Binary `+ - * /` between tensors of one element type and one rank, with size-1
//!   broadcasting (each dim equal, or one side 1).
//! - Float literals are scalars: `x * c` and `c * x` lower to `mul_scalar(c)`, `x / c` to
//!   `mul_scalar(1/c)`, `c / x` to `recip(x)` (times `c` unless `c` is 1); `x + c` and `c + x`
//!   to `add_scalar(c)`, `x - c` to `add_scalar(-c)`, `c - x` to `add_scalar(c)` of `neg(x)`.
//!   `-x` is `neg(x)`. Arithmetic between literals is folded (`0.5 * 2.0`).
//! - `pow(x, c)` with a literal exponent is accepted for `c` in {1, 2, 0.5, -1} (identity,
//!   `square`, `sqrt`, `recip`); otherwise both operands are tensors.
//! - `softmax(x, dim)` is the numerically safe softmax, `exp(x - max(x, dim)) / sum(exp(x -
//!   max(x, dim)), dim)`: the five operators `reduce_max`, `sub`, `exp`, `reduce_sum`, `div`, with
//!   the `exp` shared. Subtracting the row maximum keeps every `exp` at most 1, so large logits do
//!   not overflow (f16 overflows at `exp(11.1)`, f32 at `exp(88.7)`). The unshifted form, equal
//!   in exact arithmetic, stays writable explicitly: `let e = exp(x); e / e.sum(dim)`. The search
//!   keeps the maximum: a µGraph that drops it is rejected (see `mirage::search::float_check`).
//! - `rms_norm(x)` has `eps = 0.0`; the weight of `rms_norm_weighted(x, w, eps)` has `x`'s rank,
//!   leading dims 1 and `x`'s last dim.
//! - `layer_norm(x, eps)` (eps 0 when omitted) normalizes the last dim: it is `rms_norm` of the
//!   centered input, `rms_norm(x - sum(x, last) * (1/n), eps)` — exactly `(x - mean) /
//!   sqrt(var + eps)` — and is lowered to those operators, which the search fuses into one
//!   kernel. `layer_norm_weighted(x, w, b, eps)` multiplies by `w` and adds `b` (both shaped like
//!   the RMS-norm weight).
//! - `rope(x, cos, sin)` and `rope_interleaved(x, cos, sin)` rotate each head of `2·cos.last`
//!   elements of `x`'s last dim (pairs `j, j + h/2` and `2j, 2j + 1` respectively); `cos` and
//!   `sin` have `x`'s rank and leading dims equal to `x`'s or 1.
//! - `i32` tensors hold indices: `gather(table, ids)` reads the rows of a `[rows, width]` table at
//!   `i32` ids (the result has the ids' shape followed by `width`; an id outside the table gives
//!   zeros), and `argmax(x, dim)` returns the `i32` position of the maximum along `dim` (kept with
//!   size 1; ties to the lowest position). Every other function, and arithmetic, takes floats
//!   only; an `i32` tensor may be a parameter, gather's ids, or a result.
//! - Every parameter and every `let` binding must be used; a name may be shadowed by a later
//!   `let`, as in Rust.

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Error, Expr, FnArg, ItemFn, Lit, Pat, Result, ReturnType, Stmt, Type, UnOp};

use mirage_core::ops::{BinaryDsl, Dsl};
use mirage_core::shape::{
    ShapeError, argmax_shape, broadcast_shape, check_rms_norm_weight, concat_shape, gather_shape, matmul_shape,
    rope_shape, row_major_strides,
};
use mirage_core::{BinaryOp, DType, RopeLayout, Scalar, UnaryOp};

use super::program::{Op, Param, Program, Value, ValueId};
use super::ty::{DimDecl, DimRef, TensorType, int_literal, parse_strides, parse_tensor_type, parse_usize};

/// One function of the language: its name and how it is called. Each is also a method on its
/// first operand: `matmul(x, w)` is `x.matmul(w)`.
#[derive(Clone, Debug)]
pub struct FnSpec {
    /// The name.
    pub name: &'static str,
    /// How it is called, for messages.
    pub usage: String,
    /// Fewest arguments (the first operand included).
    pub min_args: usize,
    /// Most arguments (the first operand included).
    pub max_args: usize,
    /// The unary operator of the table it applies (`name(x)`), or `None` for a function with its
    /// own rule below.
    pub unary: Option<UnaryOp>,
}

/// The functions with their own rule in [`Checker::call`] (name, usage, fewest and most
/// arguments); the table's unary operators with [`Dsl::Special`] are among them.
const SPECIAL_FUNCTIONS: &[(&str, &str, usize, usize)] = &[
    ("matmul", "matmul(a, b)", 2, 2),
    ("clamp", "clamp(x, lo, hi)", 3, 3),
    ("sum", "sum(x, dim)", 2, 2),
    ("reduce_sum", "reduce_sum(x, dim)", 2, 2),
    ("max", "max(x, dim)", 2, 2),
    ("reduce_max", "reduce_max(x, dim)", 2, 2),
    ("rms_norm", "rms_norm(x) or rms_norm(x, eps)", 1, 2),
    ("rms_norm_weighted", "rms_norm_weighted(x, w) or rms_norm_weighted(x, w, eps)", 2, 3),
    ("concat", "concat(a, b, dim)", 3, 3),
    ("pow", "pow(a, b)", 2, 2),
    ("softmax", "softmax(x, dim)", 2, 2),
    ("layer_norm", "layer_norm(x) or layer_norm(x, eps)", 1, 2),
    ("layer_norm_weighted", "layer_norm_weighted(x, w, b) or layer_norm_weighted(x, w, b, eps)", 3, 4),
    ("rope", "rope(x, cos, sin)", 3, 3),
    ("rope_interleaved", "rope_interleaved(x, cos, sin)", 3, 3),
    ("gather", "gather(table, ids)", 2, 2),
    ("argmax", "argmax(x, dim)", 2, 2),
];

/// Every function of the language: the unary operators of the table written `name(x)`
/// ([`Dsl::Function`]), then the functions with their own rule.
pub fn functions() -> Vec<FnSpec> {
    let unary = UnaryOp::ALL.into_iter().filter(|op| op.spec().dsl == Dsl::Function).map(|op| FnSpec {
        name: op.name(),
        usage: format!("{}(x)", op.name()),
        min_args: 1,
        max_args: 1,
        unary: Some(op),
    });
    let special = SPECIAL_FUNCTIONS.iter().map(|&(name, usage, min_args, max_args)| FnSpec {
        name,
        usage: usage.to_string(),
        min_args,
        max_args,
        unary: None,
    });
    unary.chain(special).collect()
}

fn function_list() -> String {
    functions().iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
}

const EXPRESSIONS: &str = "a #[mugraph] body is built from parameters, `let`-bound names, float literals, \
`+ - * /` (between tensors, or a tensor and a float), unary `-`, parentheses, and calls of the language's functions";

/// Parses and checks a `#[mugraph]` function whose attribute declared the runtime-sized `dims`
/// ([`super::parse_attr_args`]; its attributes other than the parameters' `#[strides]` are
/// ignored).
pub fn parse(item: &ItemFn, dims: Vec<DimDecl>) -> Result<Program> {
    let sig = &item.sig;
    if let Some(t) = &sig.constness {
        return Err(Error::new_spanned(
            t,
            "`const fn` is not supported: a #[mugraph] function becomes a GPU kernel launcher",
        ));
    }
    if let Some(t) = &sig.asyncness {
        return Err(Error::new_spanned(
            t,
            "`async fn` is not supported: the launcher is a plain function that enqueues the kernel on a stream",
        ));
    }
    if let Some(t) = &sig.unsafety {
        return Err(Error::new_spanned(
            t,
            "`unsafe fn` is not supported: the launcher checks shapes and is safe to call",
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(Error::new_spanned(abi, "an `extern` ABI is not supported on a #[mugraph] function"));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(Error::new_spanned(
            &sig.generics,
            "generic parameters are not supported: a #[mugraph] signature spells out element types and dims as literals, e.g. `Tensor<f16, 8, 4096>`",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(Error::new_spanned(v, "variadic parameters are not supported"));
    }

    let mut cx = Checker { dims, ..Checker::default() };
    for arg in &sig.inputs {
        cx.param(arg)?;
    }
    cx.check_dims_used()?;
    if cx.params.is_empty() {
        return Err(Error::new_spanned(
            &sig.ident,
            "a #[mugraph] function needs at least one tensor parameter, e.g. `x: Tensor<f16, 8, 4096>`",
        ));
    }

    let (declared, tuple_result) = return_types(sig, &cx.dims)?;

    let stmts = &item.block.stmts;
    let Some((last, lets)) = stmts.split_last() else {
        return Err(Error::new_spanned(
            &item.block,
            "the body is empty: write `let` bindings and then the result expression",
        ));
    };
    for stmt in lets {
        cx.statement(stmt)?;
    }
    let result = match last {
        Stmt::Expr(e, None) => e,
        Stmt::Local(_) => {
            return Err(Error::new_spanned(
                last,
                "the body ends with a `let`: end it with the result expression (no semicolon)",
            ));
        }
        other => return Err(statement_error(other)),
    };
    let outputs = cx.result(result, &declared, tuple_result)?;
    cx.check_all_used()?;
    let (values, outputs) = prune(cx.values, outputs);
    Ok(Program {
        name: sig.ident.clone(),
        vis: item.vis.clone(),
        params: cx.params,
        values,
        outputs,
        tuple_result,
        dims: cx.dims,
    })
}

/// The declared result types and whether they form a tuple.
fn return_types(sig: &syn::Signature, dims: &[DimDecl]) -> Result<(Vec<(TensorType, Span)>, bool)> {
    let missing = "a #[mugraph] function must declare its result: `-> Tensor<T, D0, ...>` or a tuple of them";
    match &sig.output {
        ReturnType::Default => Err(Error::new(sig.paren_token.span.close(), missing)),
        ReturnType::Type(_, ty) => match strip_parens(ty) {
            Type::Tuple(t) if t.elems.is_empty() => Err(Error::new_spanned(ty, missing)),
            Type::Tuple(t) => {
                let types =
                    t.elems.iter().map(|e| Ok((parse_tensor_type(e, dims)?, e.span()))).collect::<Result<Vec<_>>>()?;
                Ok((types, true))
            }
            other => Ok((vec![(parse_tensor_type(other, dims)?, other.span())], false)),
        },
    }
}

fn strip_parens(ty: &Type) -> &Type {
    match ty {
        Type::Paren(p) => strip_parens(&p.elem),
        Type::Group(g) => strip_parens(&g.elem),
        other => other,
    }
}

fn statement_error(stmt: &Stmt) -> Error {
    match stmt {
        Stmt::Expr(Expr::Return(r), _) => Error::new_spanned(
            r,
            "`return` is not supported: end the body with the result expression (no `return`, no semicolon)",
        ),
        Stmt::Item(item) => {
            Error::new_spanned(item, "items are not allowed in a #[mugraph] body: only `let` bindings and the result")
        }
        Stmt::Macro(m) => Error::new_spanned(
            &m.mac,
            "macros are not allowed in a #[mugraph] body: only `let` bindings and the result",
        ),
        other => Error::new_spanned(
            other,
            "a #[mugraph] body holds `let name = expr;` bindings and one final result expression (without a semicolon); this statement is neither",
        ),
    }
}

/// A value of an expression: a tensor or a float scalar.
#[derive(Clone, Copy, Debug)]
enum Operand {
    Tensor(ValueId),
    Float(f64),
}

/// A name in scope: a parameter or a `let` binding.
struct Binding {
    name: syn::Ident,
    value: ValueId,
    used: bool,
    is_param: bool,
}

#[derive(Default)]
struct Checker {
    params: Vec<Param>,
    values: Vec<Value>,
    scope: Vec<Binding>,
    dims: Vec<DimDecl>,
}

/// The size a runtime-sized dim takes when shape rules are checked symbolically
/// ([`Checker::shaped`]): an odd multiple of 2^21, above every upper bound (2^20 at most), so a
/// variable never equals a literal it could equal at its upper bound, two variables never equal
/// each other, and a sum of two such sizes (an even multiple) is never taken for a variable.
fn probe(index: usize) -> usize {
    (2 * index + 3) << 21
}

/// The shape with every runtime-sized dim at its [`probe`] size.
fn probe_shape(ty: &TensorType) -> Vec<usize> {
    (0..ty.rank()).map(|d| ty.var(d).map_or(ty.shape[d], |v| probe(v.index))).collect()
}

/// What a shape rule says when it holds at the compile sizes but not symbolically.
const SYMBOLIC: &str = "a runtime-sized dim meets only itself (never a literal, even one equal to its upper bound, nor another runtime-sized dim)";

impl Checker {
    /// Adds a value; every operand must be a float tensor except the ids of `gather`.
    fn push(&mut self, op: Op, args: Vec<ValueId>, ty: TensorType, span: Span) -> Result<ValueId> {
        let index_operands = if op == Op::Gather { &args[1..] } else { &[][..] };
        if let Some(&a) = args.iter().find(|a| !self.ty(**a).dtype.is_float() && !index_operands.contains(a)) {
            return Err(Error::new(
                span,
                format!(
                    "`{op}` computes on floats, but an operand is `{}`: i32 tensors hold indices, which only `gather` reads (as its ids) and a result returns",
                    self.ty(a)
                ),
            ));
        }
        self.values.push(Value { op, args, ty, span });
        Ok(self.values.len() - 1)
    }

    fn ty(&self, v: ValueId) -> &TensorType {
        &self.values[v].ty
    }

    fn param(&mut self, arg: &FnArg) -> Result<()> {
        let pt = match arg {
            FnArg::Receiver(r) => {
                return Err(Error::new_spanned(
                    r,
                    "`self` parameters are not supported: a #[mugraph] function is a free function of tensors",
                ));
            }
            FnArg::Typed(pt) => pt,
        };
        let name = plain_ident(&pt.pat, "a parameter")?;
        let ty = parse_tensor_type(&pt.ty, &self.dims)?;
        let mut strides = None;
        for attr in &pt.attrs {
            if !attr.path().is_ident("strides") {
                return Err(Error::new_spanned(
                    attr,
                    "unsupported attribute on a #[mugraph] parameter: the only one allowed is `#[strides(s0, s1, ...)]`",
                ));
            }
            if strides.is_some() {
                return Err(Error::new_spanned(attr, "`#[strides]` is given twice for this parameter"));
            }
            if ty.is_sized() {
                return Err(Error::new_spanned(
                    attr,
                    format!(
                        "`{name}: {ty}` has a runtime-sized dim: its strides follow the size, so it is row-major (remove `#[strides]`)"
                    ),
                ));
            }
            strides = Some(parse_strides(attr, &ty)?);
        }
        if let Some(d) = self.dims.iter().find(|d| d.name == *name) {
            let mut e = Error::new_spanned(name, format!("the parameter `{name}` has the name of a runtime-sized dim"));
            e.combine(Error::new_spanned(&d.name, "declared here: give one of them another name"));
            return Err(e);
        }
        if let Some(prev) = self.scope.iter().find(|b| b.name == *name) {
            let mut e = Error::new_spanned(name, format!("the parameter `{name}` is declared twice"));
            e.combine(Error::new_spanned(&prev.name, "first declared here"));
            return Err(e);
        }
        let index = self.params.len();
        let explicit_strides = strides.is_some();
        let strides = strides.unwrap_or_else(|| row_major_strides(&ty.shape));
        let value = self.push(Op::Param(index), vec![], ty.clone(), name.span())?;
        self.params.push(Param { name: name.clone(), ty, strides, explicit_strides });
        self.scope.push(Binding { name: name.clone(), value, used: false, is_param: true });
        Ok(())
    }

    fn statement(&mut self, stmt: &Stmt) -> Result<()> {
        let local = match stmt {
            Stmt::Local(l) => l,
            other => return Err(statement_error(other)),
        };
        if let Some(attr) = local.attrs.first() {
            return Err(Error::new_spanned(attr, "attributes on `let` are not supported in a #[mugraph] body"));
        }
        let (pat, annotation) = match &local.pat {
            Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            other => (other, None),
        };
        let name = plain_ident(pat, "a `let` binding")?;
        let Some(init) = &local.init else {
            return Err(Error::new_spanned(local, "a `let` needs a value: `let name = expr;`"));
        };
        if let Some((else_token, _)) = &init.diverge {
            return Err(Error::new_spanned(else_token, "`let ... else` is not supported: write `let name = expr;`"));
        }
        let value = self.tensor(&init.expr, &format!("the value of `{name}`"))?;
        if let Some(ann) = annotation {
            let declared = parse_tensor_type(ann, &self.dims)?;
            let found = self.ty(value);
            if declared != *found {
                return Err(Error::new_spanned(
                    ann,
                    format!("`{name}` is declared `{declared}` but its value is `{found}`"),
                ));
            }
        }
        self.scope.push(Binding { name: name.clone(), value, used: false, is_param: false });
        Ok(())
    }

    fn result(&mut self, expr: &Expr, declared: &[(TensorType, Span)], tuple_result: bool) -> Result<Vec<ValueId>> {
        let exprs: Vec<&Expr> = match (strip_expr(expr), tuple_result) {
            (Expr::Tuple(t), true) => t.elems.iter().collect(),
            (Expr::Tuple(t), false) => {
                return Err(Error::new_spanned(
                    t,
                    format!("the result is a tuple of {} but the return type is one tensor", t.elems.len()),
                ));
            }
            (_, true) => {
                return Err(Error::new_spanned(
                    expr,
                    format!(
                        "the return type is a tuple of {} tensors: write the result as a tuple `(a, b, ...)`",
                        declared.len()
                    ),
                ));
            }
            (_, false) => vec![expr],
        };
        if exprs.len() != declared.len() {
            return Err(Error::new_spanned(
                expr,
                format!("the result has {} tensors but the return type declares {}", exprs.len(), declared.len()),
            ));
        }
        let mut outputs = Vec::with_capacity(exprs.len());
        for (i, (e, (ty, _))) in exprs.iter().zip(declared).enumerate() {
            let what = if tuple_result { format!("result {i}") } else { "the result".to_string() };
            let v = self.tensor(e, &what)?;
            let found = self.ty(v);
            if found != ty {
                return Err(Error::new_spanned(e, format!("{what} is `{found}` but the return type declares `{ty}`")));
            }
            outputs.push(v);
        }
        Ok(outputs)
    }

    /// Every declared dim sizes a dim of some parameter (the launcher reads its size there).
    fn check_dims_used(&self) -> Result<()> {
        for (i, d) in self.dims.iter().enumerate() {
            if !self.params.iter().any(|p| p.ty.vars.iter().flatten().any(|v| v.index == i)) {
                return Err(Error::new_spanned(
                    &d.name,
                    format!(
                        "the dim `{}` is declared but no parameter uses it: the launcher reads its size from a parameter's shape",
                        d.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The result type of shape rule `rule` over `operands`: checked at the compile sizes and
    /// symbolically (every runtime-sized dim at its [`probe`] size); a result dim is sized by a
    /// variable where it is the variable's probe size (and its upper bound at the compile sizes).
    /// `err` makes the error from what the rule says.
    fn shaped(
        &self,
        dtype: DType,
        operands: &[ValueId],
        rule: impl Fn(&[&[usize]]) -> std::result::Result<Vec<usize>, ShapeError>,
        err: impl Fn(String) -> Error,
    ) -> Result<TensorType> {
        let compile: Vec<&[usize]> = operands.iter().map(|&v| self.ty(v).shape.as_slice()).collect();
        let shape = rule(&compile).map_err(|rule| err(rule.to_string()))?;
        if operands.iter().all(|&v| !self.ty(v).is_sized()) {
            return Ok(TensorType::fixed(dtype, shape));
        }
        let probes: Vec<Vec<usize>> = operands.iter().map(|&v| probe_shape(self.ty(v))).collect();
        let probes: Vec<&[usize]> = probes.iter().map(Vec::as_slice).collect();
        let symbolic = rule(&probes).map_err(|_| err(SYMBOLIC.to_string()))?;
        let mut vars = Vec::with_capacity(shape.len());
        for (d, (&c, &p)) in shape.iter().zip(&symbolic).enumerate() {
            if c == p {
                vars.push(None);
                continue;
            }
            let Some((index, decl)) = self.dims.iter().enumerate().find(|(i, x)| probe(*i) == p && x.hi == c) else {
                return Err(err(format!(
                    "dim {d} of the result would depend on a runtime-sized dim other than by being it (e.g. a concatenation along it), which is not supported"
                )));
            };
            vars.push(Some(DimRef { index, name: decl.name.to_string() }));
        }
        Ok(TensorType::with_vars(dtype, shape, vars))
    }

    /// [`Checker::shaped`] for a rule with no result (it only checks).
    fn checked(
        &self,
        operands: &[ValueId],
        rule: impl Fn(&[&[usize]]) -> std::result::Result<(), ShapeError>,
        err: impl Fn(String) -> Error,
    ) -> Result<()> {
        let dtype = self.ty(operands[0]).dtype;
        self.shaped(dtype, operands, |s| rule(s).map(|()| vec![1]), err).map(|_| ())
    }

    fn check_all_used(&self) -> Result<()> {
        if let Some(b) = self.scope.iter().find(|b| !b.used) {
            let msg = if b.is_param {
                format!("the parameter `{}` is never used: every parameter must feed a result", b.name)
            } else {
                format!("`{}` is bound but never used: every `let` must feed a result (remove it)", b.name)
            };
            return Err(Error::new_spanned(&b.name, msg));
        }
        Ok(())
    }

    /// Checks `e` and requires a tensor; `what` names it in messages.
    fn tensor(&mut self, e: &Expr, what: &str) -> Result<ValueId> {
        match self.expr(e)? {
            Operand::Tensor(v) => Ok(v),
            Operand::Float(_) => Err(Error::new_spanned(e, format!("expected a tensor for {what}, found a float"))),
        }
    }

    /// Checks `e` and requires a float (a literal or arithmetic of literals).
    fn float(&mut self, e: &Expr, what: &str) -> Result<f64> {
        match self.expr(e)? {
            Operand::Float(v) => Ok(v),
            Operand::Tensor(_) => {
                Err(Error::new_spanned(e, format!("expected a float literal for {what}, found a tensor")))
            }
        }
    }

    fn expr(&mut self, e: &Expr) -> Result<Operand> {
        match e {
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Lit(l) => match &l.lit {
                Lit::Float(f) => {
                    match f.suffix() {
                        "" | "f32" | "f64" => {}
                        other => return Err(Error::new_spanned(f, format!("unsupported float suffix `{other}`"))),
                    }
                    let v: f64 = f.base10_parse().map_err(|_| Error::new_spanned(f, "not a valid float literal"))?;
                    finite(v, f)
                }
                Lit::Int(i) => Err(Error::new_spanned(
                    i,
                    format!(
                        "integer literal `{i}` where a tensor or a float is expected: scalars are float literals, write `{}.0`",
                        i.base10_digits()
                    ),
                )),
                other => Err(Error::new_spanned(other, "unsupported literal: only float literals are scalars")),
            },
            Expr::Path(p) => {
                let ident = match (&p.qself, p.path.get_ident()) {
                    (None, Some(ident)) if p.attrs.is_empty() => ident,
                    _ => return Err(Error::new_spanned(p, format!("unsupported path: {EXPRESSIONS}"))),
                };
                let Some(b) = self.scope.iter_mut().rev().find(|b| b.name == *ident) else {
                    let names = self.scope.iter().map(|b| format!("`{}`", b.name)).collect::<Vec<_>>().join(", ");
                    let hint = if functions().iter().any(|f| ident == f.name) {
                        format!(" (`{ident}` is a function: call it, e.g. `{ident}(x)`)")
                    } else {
                        String::new()
                    };
                    return Err(Error::new_spanned(ident, format!("unknown name `{ident}`{hint}; in scope: {names}")));
                };
                b.used = true;
                Ok(Operand::Tensor(b.value))
            }
            Expr::Unary(u) => match u.op {
                UnOp::Neg(_) => match self.expr(&u.expr)? {
                    Operand::Float(v) => Ok(Operand::Float(-v)),
                    Operand::Tensor(x) => Ok(Operand::Tensor(self.unary(UnaryOp::Neg, x, e.span())?)),
                },
                _ => Err(Error::new_spanned(
                    u,
                    format!("unsupported unary operator `{}`: the only one is `-`", u.op.to_token_stream()),
                )),
            },
            Expr::Binary(b) => self.binary(b),
            Expr::MethodCall(m) => {
                if let Some(t) = &m.turbofish {
                    return Err(Error::new_spanned(t, "methods of a #[mugraph] body take no generic arguments"));
                }
                let spec = find_function(&m.method, true)?;
                let mut args = vec![&*m.receiver];
                args.extend(m.args.iter());
                self.call(spec, &m.method, &args, e, true)
            }
            Expr::Call(c) => {
                let ident = match strip_expr(&c.func) {
                    Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => p.path.get_ident(),
                    _ => None,
                };
                let Some(ident) = ident else {
                    return Err(Error::new_spanned(
                        &c.func,
                        format!("call a function of the language by its bare name; allowed: {}", function_list()),
                    ));
                };
                let spec = find_function(ident, false)?;
                let args: Vec<&Expr> = c.args.iter().collect();
                self.call(spec, ident, &args, e, false)
            }
            Expr::Tuple(t) => Err(Error::new_spanned(
                t,
                "a tuple is only allowed as the whole result of a function that returns several tensors",
            )),
            other => {
                Err(Error::new_spanned(other, format!("unsupported expression: {EXPRESSIONS} ({})", function_list())))
            }
        }
    }

    fn unary(&mut self, f: UnaryOp, x: ValueId, span: Span) -> Result<ValueId> {
        let ty = self.ty(x).clone();
        self.push(Op::Unary(f), vec![x], ty, span)
    }

    /// A binary function of two tensors with size-1 broadcasting.
    fn broadcast(&mut self, f: BinaryOp, symbol: &str, a: ValueId, b: ValueId, at: &dyn ToTokens) -> Result<ValueId> {
        let (ta, tb) = (self.ty(a), self.ty(b));
        let op = format!("`{symbol}`");
        same_dtype(&op, ta, tb, at)?;
        let ty = self.shaped(
            ta.dtype,
            &[a, b],
            |s| broadcast_shape(s[0], s[1]),
            |rule| Error::new_spanned(at, format!("shape mismatch in {op}: `{ta}` and `{tb}`: {rule}")),
        )?;
        self.push(Op::Binary(f), vec![a, b], ty, span_of(at))
    }

    /// `layer_norm(x, eps)` as `rms_norm(x - sum(x, last) * (1/n), eps)` (times `w`, plus `b`).
    fn layer_norm(&mut self, x: ValueId, eps: f32, params: Option<(ValueId, ValueId)>, span: Span) -> Result<ValueId> {
        let ty = self.ty(x).clone();
        let last = ty.rank() - 1;
        let n = ty.shape[last];
        let row = reduced(&ty, last);
        let sum = self.push(Op::ReduceSum { dim: last }, vec![x], row.clone(), span)?;
        let mean =
            self.push(Op::Unary(UnaryOp::MulScalar { c: Scalar((1.0 / n as f64) as f32) }), vec![sum], row, span)?;
        let centered = self.push(Op::Binary(BinaryOp::Sub), vec![x, mean], ty.clone(), span)?;
        match params {
            None => self.push(Op::RmsNorm { eps }, vec![centered], ty, span),
            Some((w, b)) => {
                let scaled = self.push(Op::RmsNorm { eps }, vec![centered, w], ty.clone(), span)?;
                self.push(Op::Binary(BinaryOp::Add), vec![scaled, b], ty, span)
            }
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary) -> Result<Operand> {
        let symbol = b.op.to_token_stream().to_string();
        let Some(f) = BinaryOp::from_infix(&symbol) else {
            let infix: Vec<&str> = BinaryOp::ALL
                .into_iter()
                .filter_map(|op| match op.spec().dsl {
                    BinaryDsl::Infix(s) => Some(s),
                    BinaryDsl::Special => None,
                })
                .collect();
            return Err(Error::new_spanned(
                b.op,
                format!("unsupported operator `{symbol}`: the operators are `{}`", infix.join(" ")),
            ));
        };
        let symbol = symbol.as_str();
        let lhs = self.expr(&b.left)?;
        let rhs = self.expr(&b.right)?;
        let span = b.span();
        match (lhs, rhs) {
            (Operand::Tensor(x), Operand::Tensor(y)) => Ok(Operand::Tensor(self.broadcast(f, symbol, x, y, b)?)),
            (Operand::Float(x), Operand::Float(y)) => {
                let v = match f {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div if y == 0.0 => return Err(Error::new_spanned(&b.right, "division by zero")),
                    BinaryOp::Div => x / y,
                    BinaryOp::Pow => x.powf(y),
                };
                finite(v, b)
            }
            (Operand::Tensor(x), Operand::Float(c)) | (Operand::Float(c), Operand::Tensor(x)) if f == BinaryOp::Mul => {
                let c = to_f32(c, b)?;
                Ok(Operand::Tensor(self.unary(UnaryOp::MulScalar { c: Scalar(c) }, x, span)?))
            }
            (Operand::Tensor(x), Operand::Float(c)) if f == BinaryOp::Div => {
                if c == 0.0 {
                    return Err(Error::new_spanned(&b.right, "division by zero"));
                }
                let c = to_f32(1.0 / c, b)?;
                Ok(Operand::Tensor(self.unary(UnaryOp::MulScalar { c: Scalar(c) }, x, span)?))
            }
            (Operand::Float(c), Operand::Tensor(x)) if f == BinaryOp::Div => {
                let r = self.unary(UnaryOp::Recip, x, span)?;
                if c == 1.0 {
                    return Ok(Operand::Tensor(r));
                }
                let c = to_f32(c, b)?;
                Ok(Operand::Tensor(self.unary(UnaryOp::MulScalar { c: Scalar(c) }, r, span)?))
            }
            (Operand::Tensor(x), Operand::Float(c)) | (Operand::Float(c), Operand::Tensor(x)) if f == BinaryOp::Add => {
                let c = to_f32(c, b)?;
                Ok(Operand::Tensor(self.unary(UnaryOp::AddScalar { c: Scalar(c) }, x, span)?))
            }
            (Operand::Tensor(x), Operand::Float(c)) if f == BinaryOp::Sub => {
                let c = to_f32(-c, b)?;
                Ok(Operand::Tensor(self.unary(UnaryOp::AddScalar { c: Scalar(c) }, x, span)?))
            }
            (Operand::Float(c), Operand::Tensor(x)) if f == BinaryOp::Sub => {
                let c = to_f32(c, b)?;
                let n = self.unary(UnaryOp::Neg, x, span)?;
                Ok(Operand::Tensor(self.unary(UnaryOp::AddScalar { c: Scalar(c) }, n, span)?))
            }
            _ => Err(Error::new_spanned(
                b,
                format!(
                    "`{symbol}` between a tensor and a float is not supported: a float may add to, subtract from, \
                     multiply or divide a tensor (`x + 1e-5`, `1.0 - x`, `x * 0.5`, `x / 2.0`, `1.0 / x`); \
                     for `pow` write `pow(x, 2.0)`"
                ),
            )),
        }
    }

    fn dim(&self, e: &Expr, fname: &str, x: ValueId) -> Result<usize> {
        let Some(lit) = int_literal(e) else {
            let found = match strip_expr(e) {
                Expr::Lit(l) if matches!(l.lit, Lit::Float(_)) => "a float literal".to_string(),
                Expr::Unary(_) => "a negative or computed value (dims are counted from 0)".to_string(),
                _ => format!("`{}`", e.to_token_stream()),
            };
            return Err(Error::new_spanned(
                e,
                format!("the dim of `{fname}` must be an integer literal (e.g. `1`), found {found}"),
            ));
        };
        let dim = parse_usize(lit, "dim")?;
        let ty = self.ty(x);
        let rank = ty.rank();
        if dim >= rank {
            return Err(Error::new_spanned(
                e,
                format!(
                    "dim {dim} is out of range for `{fname}` of `{ty}`: its dims are 0..={}",
                    rank.saturating_sub(1)
                ),
            ));
        }
        Ok(dim)
    }

    fn call(&mut self, spec: FnSpec, name: &syn::Ident, args: &[&Expr], at: &Expr, method: bool) -> Result<Operand> {
        if args.len() < spec.min_args || args.len() > spec.max_args {
            let (found, usage) = if method {
                (args.len() - 1, method_usage(&spec.usage))
            } else {
                (args.len(), spec.usage.split(" or ").map(|u| format!("`{u}`")).collect::<Vec<_>>().join(" or "))
            };
            return Err(Error::new_spanned(
                at,
                format!("wrong number of arguments to `{name}`: {found} given; call it as {usage}"),
            ));
        }
        let span = at.span();
        let fname = spec.name;
        let first = if method {
            match self.expr(args[0])? {
                Operand::Tensor(v) => v,
                Operand::Float(_) => {
                    return Err(Error::new_spanned(
                        args[0],
                        format!("the method `.{fname}()` is called on a float; methods apply to tensors"),
                    ));
                }
            }
        } else {
            self.tensor(args[0], &format!("the first argument of `{fname}`"))?
        };
        if let Some(op) = spec.unary {
            return Ok(Operand::Tensor(self.unary(op, first, span)?));
        }
        let v = match fname {
            "clamp" => {
                let lo = self.float(args[1], "the lower bound of `clamp`")?;
                let hi = self.float(args[2], "the upper bound of `clamp`")?;
                if lo > hi {
                    return Err(Error::new_spanned(
                        at,
                        format!("`clamp` needs lo <= hi, found lo = {lo} and hi = {hi}"),
                    ));
                }
                let (lo, hi) = (to_f32(lo, args[1])?, to_f32(hi, args[2])?);
                self.unary(UnaryOp::Clamp { lo: Scalar(lo), hi: Scalar(hi) }, first, span)?
            }
            "matmul" => {
                let b = self.tensor(args[1], "the second operand of `matmul`")?;
                let (ta, tb) = (self.ty(first), self.ty(b));
                same_dtype("`matmul`", ta, tb, at)?;
                let ty = self.shaped(
                    ta.dtype,
                    &[first, b],
                    |s| matmul_shape(s[0], s[1]),
                    |rule| Error::new_spanned(at, format!("shape mismatch in `matmul`: `{ta}` x `{tb}`: {rule}")),
                )?;
                self.push(Op::Matmul, vec![first, b], ty, span)?
            }
            "sum" | "reduce_sum" | "max" | "reduce_max" | "softmax" => {
                let dim = self.dim(args[1], fname, first)?;
                let ty = reduced(self.ty(first), dim);
                if fname == "softmax" {
                    let out_ty = self.ty(first).clone();
                    let m = self.push(Op::ReduceMax { dim }, vec![first], ty.clone(), span)?;
                    let shifted = self.push(Op::Binary(BinaryOp::Sub), vec![first, m], out_ty.clone(), span)?;
                    let e = self.unary(UnaryOp::Exp, shifted, span)?;
                    let s = self.push(Op::ReduceSum { dim }, vec![e], ty.clone(), span)?;
                    self.push(Op::Binary(BinaryOp::Div), vec![e, s], out_ty, span)?
                } else {
                    let op = if fname.ends_with("sum") { Op::ReduceSum { dim } } else { Op::ReduceMax { dim } };
                    self.push(op, vec![first], ty, span)?
                }
            }
            "rms_norm" => {
                let eps = match args.get(1) {
                    Some(e) => match self.expr(e)? {
                        Operand::Float(v) => v,
                        Operand::Tensor(_) => {
                            return Err(Error::new_spanned(
                                e,
                                "the second argument of `rms_norm` is eps, a float literal; for a weighted norm write `rms_norm_weighted(x, w, eps)`",
                            ));
                        }
                    },
                    None => 0.0,
                };
                let eps = check_eps(eps, args.get(1).copied().unwrap_or(at))?;
                let ty = self.ty(first).clone();
                self.push(Op::RmsNorm { eps }, vec![first], ty, span)?
            }
            "rms_norm_weighted" => {
                let w = self.tensor(args[1], "the weight of `rms_norm_weighted`")?;
                let eps = match args.get(2) {
                    Some(e) => self.float(e, "eps of `rms_norm_weighted`")?,
                    None => 0.0,
                };
                let eps = check_eps(eps, args.get(2).copied().unwrap_or(at))?;
                let (tx, tw) = (self.ty(first), self.ty(w));
                same_dtype("`rms_norm_weighted`", tx, tw, at)?;
                self.checked(
                    &[first, w],
                    |s| check_rms_norm_weight(s[0], s[1]),
                    |rule| {
                        Error::new_spanned(
                            args[1],
                            format!("shape mismatch in `rms_norm_weighted`: x is `{tx}`, the weight is `{tw}`; {rule}"),
                        )
                    },
                )?;
                let ty = tx.clone();
                self.push(Op::RmsNorm { eps }, vec![first, w], ty, span)?
            }
            "concat" => {
                let b = self.tensor(args[1], "the second operand of `concat`")?;
                let dim = self.dim(args[2], fname, first)?;
                let (ta, tb) = (self.ty(first), self.ty(b));
                same_dtype("`concat`", ta, tb, at)?;
                let ty = self.shaped(
                    ta.dtype,
                    &[first, b],
                    |s| concat_shape(s[0], s[1], dim),
                    |rule| {
                        Error::new_spanned(
                            at,
                            format!("shape mismatch in `concat`: `{ta}` and `{tb}` along dim {dim}: {rule}"),
                        )
                    },
                )?;
                self.push(Op::Concat { dim }, vec![first, b], ty, span)?
            }
            "layer_norm" | "layer_norm_weighted" => {
                let weighted = fname == "layer_norm_weighted";
                let eps_at = if weighted { 3 } else { 1 };
                let tx = self.ty(first);
                if let Some(v) = tx.var(tx.rank() - 1) {
                    return Err(Error::new_spanned(
                        at,
                        format!(
                            "`{fname}` of `{tx}` normalizes its last dim, which is the runtime-sized `{}`: its mean divides by the size, which the build fixes; only a fixed last dim is supported",
                            v.name
                        ),
                    ));
                }
                let params = if weighted {
                    let w = self.tensor(args[1], "the weight of `layer_norm_weighted`")?;
                    let b = self.tensor(args[2], "the bias of `layer_norm_weighted`")?;
                    for (p, what, at) in [(w, "weight", args[1]), (b, "bias", args[2])] {
                        let (tx, tp) = (self.ty(first), self.ty(p));
                        same_dtype("`layer_norm_weighted`", tx, tp, at)?;
                        self.checked(
                            &[first, p],
                            |s| check_rms_norm_weight(s[0], s[1]),
                            |rule| {
                                Error::new_spanned(
                                    at,
                                    format!(
                                        "shape mismatch in `layer_norm_weighted`: x is `{tx}`, the {what} is `{tp}`; {rule}"
                                    ),
                                )
                            },
                        )?;
                    }
                    Some((w, b))
                } else {
                    None
                };
                let eps = match args.get(eps_at) {
                    Some(e) => self.float(e, &format!("eps of `{fname}`"))?,
                    None => 0.0,
                };
                let eps = check_eps(eps, args.get(eps_at).copied().unwrap_or(at))?;
                self.layer_norm(first, eps, params, span)?
            }
            "rope" | "rope_interleaved" => {
                let layout = if fname == "rope" { RopeLayout::HalfSplit } else { RopeLayout::Interleaved };
                let cos = self.tensor(args[1], &format!("the cosines of `{fname}`"))?;
                let sin = self.tensor(args[2], &format!("the sines of `{fname}`"))?;
                let (tx, tc, ts) = (self.ty(first), self.ty(cos), self.ty(sin));
                same_dtype(&format!("`{fname}`"), tx, tc, at)?;
                same_dtype(&format!("`{fname}`"), tx, ts, at)?;
                if tx.var(tx.rank() - 1).is_some() || tc.var(tc.rank() - 1).is_some() {
                    return Err(Error::new_spanned(
                        at,
                        format!("`{fname}` of `{tx}` with cos `{tc}`: the last dim (the heads) must be fixed"),
                    ));
                }
                let ty = self.shaped(
                    tx.dtype,
                    &[first, cos, sin],
                    |s| rope_shape(s[0], s[1], s[2]),
                    |rule| {
                        Error::new_spanned(
                            at,
                            format!("shape mismatch in `{fname}`: x is `{tx}`, cos `{tc}`, sin `{ts}`: {rule}"),
                        )
                    },
                )?;
                self.push(Op::Rope { layout }, vec![first, cos, sin], ty, span)?
            }
            "gather" => {
                let ids = self.tensor(args[1], "the ids of `gather`")?;
                let (tt, ti) = (self.ty(first), self.ty(ids));
                if ti.dtype != DType::I32 {
                    return Err(Error::new_spanned(
                        args[1],
                        format!("the ids of `gather` must be `Tensor<i32, ...>`, found `{ti}`"),
                    ));
                }
                if tt.is_sized() {
                    return Err(Error::new_spanned(
                        args[0],
                        format!(
                            "the table of `gather` is `{tt}`: a table has fixed dims (the ids may be runtime-sized)"
                        ),
                    ));
                }
                let ty = self.shaped(
                    tt.dtype,
                    &[first, ids],
                    |s| gather_shape(s[0], s[1]),
                    |rule| {
                        Error::new_spanned(
                            at,
                            format!("shape mismatch in `gather`: the table is `{tt}`, the ids `{ti}`: {rule}"),
                        )
                    },
                )?;
                self.push(Op::Gather, vec![first, ids], ty, span)?
            }
            "argmax" => {
                let dim = self.dim(args[1], fname, first)?;
                let tx = self.ty(first);
                let ty = self.shaped(
                    DType::I32,
                    &[first],
                    |s| argmax_shape(s[0], dim),
                    |rule| Error::new_spanned(at, format!("`argmax` of `{tx}` along dim {dim}: {rule}")),
                )?;
                self.push(Op::Argmax { dim }, vec![first], ty, span)?
            }
            "pow" => match self.expr(args[1])? {
                Operand::Tensor(b) => self.broadcast(BinaryOp::Pow, "pow", first, b, at)?,
                Operand::Float(c) => {
                    let special = [(2.0, UnaryOp::Square), (0.5, UnaryOp::Sqrt), (-1.0, UnaryOp::Recip)];
                    match special.into_iter().find(|&(e, _)| e == c) {
                        Some((_, f)) => self.unary(f, first, span)?,
                        None if c == 1.0 => first,
                        None => {
                            return Err(Error::new_spanned(
                                args[1],
                                format!(
                                    "`pow` with the float exponent {c} is not supported: a literal exponent must be 1.0, 2.0, 0.5 or -1.0; otherwise pass the exponent as a tensor"
                                ),
                            ));
                        }
                    }
                }
            },
            _ => {
                return Err(Error::new_spanned(
                    name,
                    format!("unknown function `{name}`; allowed: {}", function_list()),
                ));
            }
        };
        Ok(Operand::Tensor(v))
    }
}

/// `clamp(x, lo, hi)` as a method: `` `x.clamp(lo, hi)` `` (each alternative of `a or b`).
fn method_usage(usage: &str) -> String {
    usage
        .split(" or ")
        .map(|u| {
            let (name, rest) = u.split_once('(').unwrap_or((u, ")"));
            let args = rest.trim_end_matches(')');
            let (receiver, others) = args.split_once(", ").unwrap_or((args, ""));
            format!("`{receiver}.{name}({others})`")
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

fn find_function(name: &syn::Ident, method: bool) -> Result<FnSpec> {
    functions().into_iter().find(|f| name == f.name).ok_or_else(|| {
        let msg = if method {
            format!(
                "unknown method `{name}`; the methods of a tensor are: {} (e.g. `x.matmul(w)`, `x.sum(1)`)",
                function_list()
            )
        } else {
            format!("unknown function `{name}`; allowed: {} (each also a method on its first operand)", function_list())
        };
        Error::new_spanned(name, msg)
    })
}

fn plain_ident<'a>(pat: &'a Pat, what: &str) -> Result<&'a syn::Ident> {
    match pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() && p.attrs.is_empty() => {
            Ok(&p.ident)
        }
        Pat::Ident(p) if p.mutability.is_some() => Err(Error::new_spanned(
            pat,
            format!("{what} cannot be `mut`: tensors of a #[mugraph] function are immutable values"),
        )),
        other => Err(Error::new_spanned(
            other,
            format!("{what} must be a plain identifier (no patterns, `ref`, `mut` or `_`)"),
        )),
    }
}

fn strip_expr(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_expr(&p.expr),
        Expr::Group(g) => strip_expr(&g.expr),
        other => other,
    }
}

fn span_of(t: &dyn ToTokens) -> Span {
    t.to_token_stream().into_iter().next().map_or_else(Span::call_site, |tt| tt.span())
}

fn finite(v: f64, at: &dyn ToTokens) -> Result<Operand> {
    to_f32(v, at)?;
    Ok(Operand::Float(v))
}

fn to_f32(v: f64, at: &dyn ToTokens) -> Result<f32> {
    let f = v as f32;
    if f.is_finite() { Ok(f) } else { Err(Error::new_spanned(at, format!("the scalar {v} is not a finite f32"))) }
}

fn check_eps(eps: f64, at: &dyn ToTokens) -> Result<f32> {
    if eps < 0.0 {
        return Err(Error::new_spanned(at, format!("eps must be at least 0, found {eps}")));
    }
    to_f32(eps, at)
}

fn same_dtype(op: &str, a: &TensorType, b: &TensorType, at: &dyn ToTokens) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::new_spanned(
            at,
            format!(
                "element types differ in {op}: `{a}` and `{b}`; both operands must have one element type (there are no implicit conversions)"
            ),
        ));
    }
    Ok(())
}

/// `ty` reduced over `dim` (kept with size 1, no longer runtime-sized).
fn reduced(ty: &TensorType, dim: usize) -> TensorType {
    let mut shape = ty.shape.clone();
    shape[dim] = 1;
    let vars = (0..ty.rank()).map(|d| if d == dim { None } else { ty.var(d).cloned() }).collect();
    TensorType::with_vars(ty.dtype, shape, vars)
}

/// Keeps the values that reach an output (and every parameter), renumbered in order.
fn prune(values: Vec<Value>, outputs: Vec<ValueId>) -> (Vec<Value>, Vec<ValueId>) {
    let mut live = vec![false; values.len()];
    for (i, v) in values.iter().enumerate() {
        live[i] = matches!(v.op, Op::Param(_));
    }
    for &o in &outputs {
        live[o] = true;
    }
    for i in (0..values.len()).rev() {
        if live[i] {
            for &a in &values[i].args {
                live[a] = true;
            }
        }
    }
    let mut new_id = vec![usize::MAX; values.len()];
    let mut kept = Vec::new();
    for (i, mut v) in values.into_iter().enumerate() {
        if live[i] {
            v.args = v.args.iter().map(|&a| new_id[a]).collect();
            new_id[i] = kept.len();
            kept.push(v);
        }
    }
    let outputs = outputs.iter().map(|&o| new_id[o]).collect();
    (kept, outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unary_operator_is_reachable_from_the_language() {
        let functions = functions();
        for op in UnaryOp::ALL {
            let by_name = functions.iter().find(|f| f.name == op.name());
            match op.spec().dsl {
                Dsl::Function => assert_eq!(by_name.and_then(|f| f.unary), Some(op), "{op}"),
                Dsl::Special => assert!(by_name.is_some_and(|f| f.unary.is_none()), "{op} needs its own rule"),
                Dsl::Arithmetic => assert!(by_name.is_none(), "{op} is not called by name"),
            }
        }
        let mut names: Vec<&str> = functions.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), functions.len(), "function names are distinct");
    }
}
