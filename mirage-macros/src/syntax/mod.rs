//! The `#[mugraph]` language, written once and compiled into both `mirage-macros`
//! (spanned compile errors, the launcher's signature) and `mirage::lower` (lowering to the
//! kernel graph), the way cxx shares its `syntax` module between its macro and its build crate.
//! It depends only on syn, quote, proc-macro2 and `mirage-core` (element types, shape rules and
//! the operator table, whose unary rows with [`mirage_core::ops::Dsl::Function`] are the
//! language's one-argument functions).
//!
//! A `DIM` is a runtime-sized dim declared in the attribute ([`dims`]): the program is checked and
//! built at its upper bound, and every shape rule is also checked symbolically (a variable meets
//! only itself: never a literal, even one equal to its upper bound, nor another variable).
//!
//! [`parse`] turns a `#[mugraph]` function into a checked [`Program`]: the parameters with their
//! element types, shapes and strides, and the body as a DAG of typed [`Value`]s in evaluation
//! order (parameters first), every shape and element type computed. Every user error is a
//! [`syn::Error`] at the offending tokens, saying what is allowed.
//!
//! The grammar:
//!
//! ```text
//! attr    := "#[mugraph]" | "#[mugraph(dims(" (NAME "=" INT "..=" INT),+ ")"
//!              ["," "buckets(" (NAME "=" "[" INT,+ "]"),+ ")"] ")]"
//! fn      := attrs vis "fn" NAME "(" param,* ")" "->" ret "{" let* result "}"
//! param   := ["#[strides(" INT,+ ")]"] NAME ":" tensor
//! tensor  := "Tensor<" ("f16" | "bf16" | "f32" | "i32") ("," (INT | DIM)){1,4} ">"
//! ret     := tensor | "(" tensor,+ ")"
//! let     := "let" NAME [":" tensor] "=" expr ";"
//! result  := expr | "(" expr,+ ")"
//! expr    := NAME | FLOAT | "(" expr ")" | "-" expr | expr ("+" | "-" | "*" | "/") expr
//!          | FUNC "(" arg,* ")" | expr "." FUNC "(" arg,* ")"
//! ```
//!
//! See [`functions`] for the functions (each also callable as a method on its first operand) and
//! [`check`] for the rules of scalars and broadcasting.

pub mod check;
pub mod dims;
pub mod program;
pub mod ty;

pub use check::{functions, parse};
pub use dims::{MAX_BUCKETS, bucket_ranges, bucket_stem, default_buckets, parse_attr_args, thin_buckets};
pub use program::{Op, Param, Program, Value, ValueId};
pub use ty::{DimDecl, DimRef, TensorType};
