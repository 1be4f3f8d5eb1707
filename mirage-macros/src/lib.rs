//! `#[mugraph]`: the attribute that turns a Rust tensor function into a call of a superoptimized,
//! verified CUDA kernel.
//!
//! The attribute parses and checks the function with the DSL syntax module shared with
//! `mirage::lower` (the same source files are compiled into both crates, so the macro and the
//! build script can never disagree about a program) and reports every user error as a compile
//! error at the offending tokens. A checked function expands into a typed launcher that embeds the
//! artifacts `mirage::build::compile` wrote in the package's build script (`expand.rs`); when they
//! are missing or belong to another version of the function, into a compile error saying what to
//! add to build.rs or to redo.
//!
//! ```compile_fail
//! use mirage_macros::mugraph;
//!
//! #[mugraph]
//! fn scale(x: Tensor<f16, 8, 4096>) -> Tensor<f16, 8, 4096> {
//!     x + 1.0 // error: a float may only multiply or divide a tensor
//! }
//! # fn main() {}
//! ```

use proc_macro::TokenStream;

mod expand;
// Shared with `mirage::lower`, which uses all of it; the macro needs only part.
#[allow(dead_code, unused_imports)]
mod syntax;

/// Marks a tensor function to be superoptimized into a fused CUDA kernel at build time.
///
/// The function's parameters are `name: Tensor<T, D0, ...>` (T one of f16, bf16, f32, i32; 1 to
/// 4 dims, optionally `#[strides(...)]`), its body `let` bindings and one result expression over
/// the language's functions and `+ - * /`. A dim is an integer literal or a runtime-sized dim
/// declared by the attribute, `#[mugraph(dims(B = 1..=64))]`: the launcher then takes any size
/// in the range. Errors point at the offending tokens.
#[proc_macro_attribute]
pub fn mugraph(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = match syn::parse::<syn::Item>(item) {
        Ok(syn::Item::Fn(f)) => f,
        Ok(other) => {
            let msg = "#[mugraph] applies to a function: `fn name(x: Tensor<T, D0, ...>, ...) -> Tensor<...> { ... }`";
            return syn::Error::new_spanned(other, msg).to_compile_error().into();
        }
        Err(err) => return err.to_compile_error().into(),
    };
    let checked = syntax::parse_attr_args(attr.into()).and_then(|dims| syntax::parse(&item, dims));
    match checked {
        Ok(program) => {
            let out_dir = std::env::var_os("OUT_DIR").map(std::path::PathBuf::from);
            expand::expand(&program, &item, &source_file(), out_dir.as_deref()).into()
        }
        Err(err) => err.to_compile_error().into(),
    }
}

/// The file being compiled, relative to the package root (what build.rs lists).
fn source_file() -> String {
    let span = proc_macro::Span::call_site();
    let file = span.local_file().unwrap_or_else(|| std::path::PathBuf::from(span.file()));
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from);
    let cwd = std::env::current_dir().ok();
    expand::package_relative(&file, manifest_dir.as_deref(), cwd.as_deref())
}
