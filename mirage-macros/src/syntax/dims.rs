//! The arguments of the attribute: `#[mugraph]`, or `#[mugraph(dims(B = 1..=64, S = 1..=32768))]`
//! declaring runtime-sized dims that the function's types may name (`Tensor<bf16, B, 4096>`).
//!
//! Each declaration is `NAME = lo..=hi` with integer literals `1 <= lo <= hi <=`
//! [`MAX_DIM_VAR`]; names are distinct and not an element type's name. The launcher takes any
//! size in the range.
//!
//! The range is built as a few *size buckets*, each a specialization searched, verified and
//! compiled at its own upper bound, and the launcher runs the bucket holding the sizes it is
//! given: `buckets(B = [1, 8, 16, 64])` after `dims(...)` lists a dim's bucket upper bounds
//! (ascending, inside the range, the last one the range's upper bound: here 1..=1, 2..=8,
//! 9..=16, 17..=64; `[64]` is one build for the whole range). A dim without a list gets
//! [`default_buckets`]. With several dims the buckets are the product of theirs, at most
//! [`MAX_BUCKETS`].

use mirage_core::DType;
use mirage_core::shape::MAX_DIM_VAR;
use proc_macro2::TokenStream;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Error, Expr, Ident, RangeLimits, Result, Token};

use super::ty::{DimDecl, int_literal, parse_usize};

const FORM: &str = "expected `#[mugraph]` or `#[mugraph(dims(B = 1..=64, ...))]`";

/// The most buckets a program is built as (the product over its dims): each is a search, a
/// verification and an nvcc run of its own.
pub const MAX_BUCKETS: usize = 16;

/// The most buckets [`default_buckets`] gives one dim.
pub const MAX_DEFAULT_BUCKETS: usize = 12;

/// The default bucket upper bounds of a dim declared `lo..=hi`: the ladder 1, 8, then doubling
/// (16, 32, 64, 128, ...) below `hi`, at most [`MAX_DEFAULT_BUCKETS`] - 1 of them, then `hi`
/// (for `1..=64`: 1, 8, 16, 32, 64; for `1..=32768`: 1, 8, 16, ..., 4096, 32768).
///
/// Why these: a bucket's kernels are ranked over its range and run at its sizes, so its bounds
/// belong where the µGraph a fixed-size build would choose changes. On the H200 (gated MLP,
/// 4096 × 4096 weights) a fixed build costs about the same from 1 to 8 rows (29.6 and 31.2 µs)
/// and steps up past 16 (46.3 µs at 17, 77.0 at 64: row tiles of 16 and more); decoding (one
/// row) is the most common size, so it gets a bucket of its own. Decode attention over a key
/// length changes µGraph family every doubling or two (one block per head holding every key up
/// to about 512 keys, split key ranges past it, more ranges as the keys grow): with buckets 4×
/// apart it ran 1.16–1.32× the fixed builds at 256, 512 and 4096 keys (DECISIONS change 62),
/// with 2× apart it takes their µGraphs. Each bucket is a search, a verification and an nvcc
/// run: the build time grows with the count, hence the cap (past the cap the last bucket runs
/// from the previous bound to `hi`).
pub fn default_buckets(lo: usize, hi: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut b = 1usize;
    while b < hi && out.len() + 1 < MAX_DEFAULT_BUCKETS {
        if b >= lo {
            out.push(b);
        }
        b = if b == 1 { 8 } else { b * 2 };
    }
    out.push(hi);
    out
}

/// The buckets of a program's dims: for each bucket (the product of the dims' buckets, the first
/// dim outermost), the range `(lo, hi)` of every dim. One bucket covering the declared ranges
/// when no dim is split; none for a program without dims.
pub fn bucket_ranges(dims: &[DimDecl]) -> Vec<Vec<(usize, usize)>> {
    if dims.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Vec<(usize, usize)>> = vec![Vec::new()];
    for d in dims {
        let mut ranges = Vec::with_capacity(d.buckets.len());
        let mut lo = d.lo;
        for &hi in &d.buckets {
            ranges.push((lo, hi));
            lo = hi + 1;
        }
        out = out.iter().flat_map(|prefix| ranges.iter().map(move |r| [prefix.as_slice(), &[*r]].concat())).collect();
    }
    out
}

/// The artifact stem of bucket `index` of a bucketed program whose stem is `stem`.
pub fn bucket_stem(stem: &str, index: usize) -> String {
    format!("{stem}-b{index}")
}

/// Parses the attribute's arguments: none, or `dims(...)` optionally followed by `buckets(...)`;
/// returns the declared dims in order, each with its buckets.
pub fn parse_attr_args(args: TokenStream) -> Result<Vec<DimDecl>> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    let parser = |input: ParseStream<'_>| -> Result<Vec<DimDecl>> {
        let mut out = parse_dims(input)?;
        if input.is_empty() {
            apply_default_buckets(&mut out, &[]);
            return Ok(out);
        }
        let _: Token![,] =
            input.parse().map_err(|e| Error::new(e.span(), format!("unexpected tokens after `dims(...)`: {FORM}")))?;
        if input.is_empty() {
            apply_default_buckets(&mut out, &[]);
            return Ok(out);
        }
        let key: Ident = input.parse().map_err(|e| Error::new(e.span(), BUCKETS_FORM))?;
        if key == "dims" {
            return Err(Error::new_spanned(&key, "`dims(...)` is given twice: declare every dim in one `dims(...)`"));
        }
        if key != "buckets" {
            return Err(Error::new_spanned(
                &key,
                format!("unknown #[mugraph] argument `{key}` after `dims(...)`: {BUCKETS_FORM}"),
            ));
        }
        let explicit = parse_buckets(input, &key, &mut out)?;
        let _: Option<Token![,]> = input.parse()?;
        if !input.is_empty() {
            return Err(input.error(format!("unexpected tokens after `buckets(...)`: {BUCKETS_FORM}")));
        }
        apply_default_buckets(&mut out, &explicit);
        let count: usize = out.iter().map(|d| d.buckets.len()).product();
        if count > MAX_BUCKETS {
            return Err(Error::new_spanned(
                &key,
                format!(
                    "{count} buckets (the product of the dims' bucket lists) is more than {MAX_BUCKETS}: each bucket is a search, \
                     a verification and an nvcc run; list fewer"
                ),
            ));
        }
        Ok(out)
    };
    parser.parse2(args)
}

const BUCKETS_FORM: &str =
    "expected `buckets(B = [1, 8, 16, 64], ...)` after `dims(...)` (each dim's bucket upper bounds)";

/// Gives the dims not in `explicit` the default buckets; while the product is over
/// [`MAX_BUCKETS`], thins the default list with the most buckets (the later dim on a tie):
/// [`thin_buckets`] keeps every other bound, so the dim's buckets grow from 2× to 4× apart (then
/// 16×, ...) rather than one dim losing all of its own. With `B = 1..=64, S = 1..=32768`: B's
/// 1, 16, 64 and S's 1, 64, 1024, 32768 (12 buckets; S alone would get twelve, B alone five).
fn apply_default_buckets(dims: &mut [DimDecl], explicit: &[usize]) {
    for (i, d) in dims.iter_mut().enumerate() {
        if !explicit.contains(&i) {
            d.buckets = default_buckets(d.lo, d.hi);
        }
    }
    while dims.iter().map(|d| d.buckets.len()).product::<usize>() > MAX_BUCKETS {
        let widest = (0..dims.len())
            .filter(|i| !explicit.contains(i) && dims[*i].buckets.len() > 1)
            .max_by_key(|&i| (dims[i].buckets.len(), i));
        // Only explicit lists are left: their product over the cap is the caller's error.
        let Some(i) = widest else { break };
        dims[i].buckets = thin_buckets(&dims[i].buckets);
    }
}

/// A bucket list with every other upper bound removed: the first kept (a bucket of its own for
/// the smallest sizes, decoding's single row), the last kept (the list must reach the dim's
/// upper bound); two buckets become one.
pub fn thin_buckets(buckets: &[usize]) -> Vec<usize> {
    let Some(&last) = buckets.last() else { return Vec::new() };
    if buckets.len() <= 2 {
        return vec![last];
    }
    let mut out: Vec<usize> = buckets.iter().step_by(2).copied().collect();
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

/// `buckets(NAME = [INT, ...], ...)`: sets the buckets of the named dims; returns their indices.
fn parse_buckets(input: ParseStream<'_>, key: &Ident, dims: &mut [DimDecl]) -> Result<Vec<usize>> {
    let content;
    syn::parenthesized!(content in input);
    let lists = Punctuated::<(Ident, Expr), Token![,]>::parse_terminated_with(&content, |c| {
        let name: Ident = c.parse()?;
        let _: Token![=] = c.parse().map_err(|e| {
            Error::new(e.span(), format!("expected `{name} = [..]` (the bucket upper bounds, ascending)"))
        })?;
        Ok((name, c.parse()?))
    })?;
    if lists.is_empty() {
        return Err(Error::new_spanned(key, "`buckets()` lists nothing: write e.g. `buckets(B = [1, 8, 16, 64])`"));
    }
    let mut explicit: Vec<usize> = Vec::new();
    for (name, list) in lists {
        let Some(index) = dims.iter().position(|d| d.name == name) else {
            return Err(Error::new_spanned(
                &name,
                format!("`{name}` is not a dim of `dims(...)`: buckets split a declared dim's range"),
            ));
        };
        if explicit.contains(&index) {
            return Err(Error::new_spanned(&name, format!("the buckets of `{name}` are listed twice")));
        }
        let d = &dims[index];
        let form = format!("expected a list of integer literals, e.g. `{name} = [1, 8, 16, {}]`", d.hi);
        let Expr::Array(array) = &list else {
            return Err(Error::new_spanned(&list, form));
        };
        if array.elems.is_empty() {
            return Err(Error::new_spanned(
                &list,
                format!("the bucket list of `{name}` is empty: give at least its upper bound, `{name} = [{}]`", d.hi),
            ));
        }
        let mut uppers: Vec<usize> = Vec::with_capacity(array.elems.len());
        for e in &array.elems {
            let Some(lit) = int_literal(e) else {
                return Err(Error::new_spanned(e, form));
            };
            let n = parse_usize(lit, "bucket bound")?;
            if n < d.lo || n > d.hi {
                return Err(Error::new_spanned(
                    e,
                    format!("the bucket bound {n} is outside the range {}..={} of `{name}`", d.lo, d.hi),
                ));
            }
            if let Some(&prev) = uppers.last()
                && n <= prev
            {
                return Err(Error::new_spanned(
                    e,
                    format!("the bucket bounds of `{name}` must increase: {n} comes after {prev}"),
                ));
            }
            uppers.push(n);
        }
        if uppers.last() != Some(&d.hi) {
            return Err(Error::new_spanned(
                &list,
                format!(
                    "the last bucket of `{name}` must end at its upper bound {} (every size of the range needs a bucket): add `{}`",
                    d.hi, d.hi
                ),
            ));
        }
        dims[index].buckets = uppers;
        explicit.push(index);
    }
    Ok(explicit)
}

/// `dims(NAME = lo..=hi, ...)`.
fn parse_dims(input: ParseStream<'_>) -> Result<Vec<DimDecl>> {
    {
        let key: Ident = input.parse().map_err(|e| Error::new(e.span(), FORM))?;
        if key == "buckets" {
            return Err(Error::new_spanned(
                &key,
                "`buckets(...)` splits the ranges `dims(...)` declares: write `#[mugraph(dims(B = 1..=64), buckets(B = [1, 8, 16, 64]))]`",
            ));
        }
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
        if !input.is_empty() && !input.peek(Token![,]) {
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
            out.push(DimDecl { name, lo, hi, buckets: vec![hi] });
        }
        Ok(out)
    }
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
