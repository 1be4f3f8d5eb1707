//! The arguments of the attribute: `#[mugraph]`, or `#[mugraph(dims(B = 1..=64, S = 1..=32768))]`
//! declaring runtime-sized dims that the function's types may name (`Tensor<bf16, B, 4096>`).
//!
//! Each declaration is `NAME = lo..=hi` with integer literals `1 <= lo <= hi <=`
//! [`MAX_DIM_VAR`]; names are distinct and not an element type's name. The function is built at
//! the upper bounds and its launcher takes any size in the range.

use mirage_core::DType;
use mirage_core::shape::MAX_DIM_VAR;
use proc_macro2::TokenStream;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Error, Expr, Ident, RangeLimits, Result, Token};

use super::ty::{DimDecl, int_literal, parse_usize};

const FORM: &str = "expected `#[mugraph]` or `#[mugraph(dims(B = 1..=64, ...))]`";

/// Parses the attribute's arguments: none, or `dims(...)`; returns the declared dims in order.
pub fn parse_attr_args(args: TokenStream) -> Result<Vec<DimDecl>> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    let parser = |input: ParseStream<'_>| -> Result<Vec<DimDecl>> {
        let key: Ident = input.parse().map_err(|e| Error::new(e.span(), FORM))?;
        if key != "dims" {
            return Err(Error::new_spanned(
                &key,
                format!("unknown #[mugraph] argument `{key}`: {FORM} (runtime-sized dims with their ranges)"),
            ));
        }
        let content;
        syn::parenthesized!(content in input);
        let decls = Punctuated::<(Ident, Expr), Token![,]>::parse_terminated_with(&content, |c| {
            let name: Ident = c.parse()?;
            let _: Token![=] = c.parse().map_err(|e| {
                Error::new(e.span(), format!("expected `{name} = lo..=hi` (an inclusive range of sizes)"))
            })?;
            Ok((name, c.parse()?))
        })?;
        if !input.is_empty() {
            return Err(input.error(format!("unexpected tokens after `dims(...)`: {FORM}")));
        }
        if decls.is_empty() {
            return Err(Error::new_spanned(&key, "`dims()` declares nothing: write e.g. `dims(B = 1..=64)`"));
        }
        let mut out: Vec<DimDecl> = Vec::new();
        for (name, range) in decls {
            if let Some(prev) = out.iter().find(|d| d.name == name) {
                let mut e = Error::new_spanned(&name, format!("the dim `{name}` is declared twice"));
                e.combine(Error::new_spanned(&prev.name, "first declared here"));
                return Err(e);
            }
            if DType::from_name(&name.to_string()).is_some() || name == "Tensor" {
                return Err(Error::new_spanned(
                    &name,
                    format!("`{name}` names a type of the language: call the dim something else (e.g. `B`, `S`)"),
                ));
            }
            let (lo, hi) = parse_range(&name, &range)?;
            out.push(DimDecl { name, lo, hi });
        }
        Ok(out)
    };
    parser.parse2(args)
}

/// `lo..=hi` with `1 <= lo <= hi <= MAX_DIM_VAR`.
fn parse_range(name: &Ident, range: &Expr) -> Result<(usize, usize)> {
    let form = format!("expected an inclusive range of integer literals, e.g. `{name} = 1..=64`");
    let Expr::Range(r) = range else {
        return Err(Error::new_spanned(range, form));
    };
    if matches!(r.limits, RangeLimits::HalfOpen(_)) {
        return Err(Error::new_spanned(
            range,
            format!("write the range inclusively, `lo..=hi` (the upper bound is a size the dim takes): {form}"),
        ));
    }
    let bound = |e: &Option<Box<Expr>>, which: &str| -> Result<usize> {
        let Some(e) = e else {
            return Err(Error::new_spanned(range, format!("the range needs a {which} bound: {form}")));
        };
        let Some(lit) = int_literal(e) else {
            return Err(Error::new_spanned(e, format!("the {which} bound must be an integer literal: {form}")));
        };
        parse_usize(lit, "bound")
    };
    let (lo, hi) = (bound(&r.start, "lower")?, bound(&r.end, "upper")?);
    if lo == 0 {
        return Err(Error::new_spanned(range, format!("`{name}` starts at 0: a dim is at least 1, write `1..={hi}`")));
    }
    if lo > hi {
        return Err(Error::new_spanned(range, format!("the range {lo}..={hi} of `{name}` is empty")));
    }
    if hi > MAX_DIM_VAR {
        return Err(Error::new_spanned(
            range,
            format!("`{name}` goes up to {hi}: a runtime-sized dim may go up to {MAX_DIM_VAR} (2^20) at most"),
        ));
    }
    Ok((lo, hi))
}
