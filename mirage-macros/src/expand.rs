//! The success path of `#[mugraph]`: the expansion of a checked program.
//!
//! The typed launcher that embeds the build artifacts (DESIGN §11) is not wired up yet; until it
//! is, a checked program expands to a compile error that says so, rather than to code that would
//! pretend to run the kernel.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::ItemFn;

use crate::syntax::Program;

/// Expands a checked `#[mugraph]` function.
pub fn expand(program: &Program, item: &ItemFn) -> TokenStream {
    let message = format!(
        "#[mugraph] `{}` was checked successfully; the build pipeline that turns it into a kernel launcher is not wired up yet",
        program.name
    );
    quote_spanned! {item.sig.ident.span()=>
        ::core::compile_error!(#message);
    }
}
