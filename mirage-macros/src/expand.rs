//! The success path of `#[mugraph]`: the expansion of a checked program into a typed launcher
//! that embeds the build artifacts.
//!
//! For `fn gated_mlp(x: Tensor<f16, 8, 4096>, ...) -> Tensor<f16, 8, 4096>` it expands to
//!
//! ```text
//! /// (the user's docs, then the signature's shapes)
//! pub fn gated_mlp(gpu: &::mirage::Gpu, x: &::mirage::DeviceTensor<::mirage::half::f16>, ...)
//!     -> Result<::mirage::DeviceTensor<::mirage::half::f16>, ::mirage::RuntimeError>
//! { gated_mlp_on(gpu.stream(), x, ...) }
//!
//! pub fn gated_mlp_on(stream: &::mirage::Stream, x: ..., ...) -> Result<..., ::mirage::RuntimeError> {
//!     let [o0] = gated_mlp::PROGRAM.run_exact::<1>(stream, &[::mirage::AnyView::from(x), ...])?;
//!     Ok(o0.into_f16()?)
//! }
//!
//! pub fn gated_mlp_into<'mirage_views>(stream: &::mirage::Stream, workspace: &mut ::mirage::Workspace,
//!     x: impl Into<::mirage::TensorView<'mirage_views, ::mirage::half::f16>>, ...,
//!     output0: impl Into<::mirage::TensorViewMut<'mirage_views, ::mirage::half::f16>>) -> Result<(), ::mirage::RuntimeError>
//! { gated_mlp::PROGRAM.launch_views(stream, &[..views of the inputs..], &mut [..of the outputs..], workspace) }
//!
//! pub mod gated_mlp {
//!     pub static PROGRAM: ::mirage::Program = ::mirage::Program::new(::mirage::ProgramArtifacts {
//!         name: "gated_mlp", fingerprint: "<hash>",
//!         cubin: include_bytes!(concat!(env!("OUT_DIR"), "/mirage/gated_mlp-<hash>.cubin")),
//!         plan_json: include_str!(...), mugraph_json: include_str!(...),
//!     });
//! }
//! ```
//!
//! The artifacts are named `<fn name>-<fingerprint hash>` (the build script computes the same
//! name from the same checked program): at expansion time the macro reads `OUT_DIR` (set by
//! cargo for packages with a build script) and checks that the plan exists and records this
//! program's fingerprint; otherwise the expansion is a compile error saying what to add or redo.

use std::path::{Path, PathBuf};

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ItemFn;

use mirage_core::{ARTIFACT_DIR, DType, artifact_stem};

use crate::syntax::{Program, TensorType, bucket_ranges, bucket_stem};

/// Where the artifacts of a program stand.
#[derive(Debug, PartialEq, Eq)]
pub enum ArtifactState {
    /// The plan and cubin exist and the plan records this program's fingerprint.
    Ready,
    /// `OUT_DIR` is not set: the package has no build script.
    NoOutDir,
    /// No artifact of any version of this function.
    NotBuilt,
    /// Artifacts of another version of this function (or a plan recording another fingerprint).
    Stale,
    /// The plan exists but the cubin does not.
    MissingCubin,
}

/// Looks for the artifacts of `name` with `fingerprint_hash` under `out_dir/mirage/`.
#[cfg(test)]
pub fn artifact_state(out_dir: Option<&Path>, name: &str, fingerprint_hash: &str) -> ArtifactState {
    artifact_state_of(out_dir, name, fingerprint_hash, &artifact_stem(name, fingerprint_hash))
}

/// [`artifact_state`] of the artifacts named `stem` (one size bucket's: [`bucket_stem`]).
pub fn artifact_state_of(out_dir: Option<&Path>, name: &str, fingerprint_hash: &str, stem: &str) -> ArtifactState {
    let Some(out_dir) = out_dir else { return ArtifactState::NoOutDir };
    let dir = out_dir.join(ARTIFACT_DIR);
    match std::fs::read_to_string(dir.join(format!("{stem}.plan.json"))) {
        Ok(plan) => {
            let compact: String = plan.chars().filter(|c| !c.is_whitespace()).collect();
            if !compact.contains(&format!("\"fingerprint\":\"{fingerprint_hash}\"")) {
                ArtifactState::Stale
            } else if !dir.join(format!("{stem}.cubin")).is_file() {
                ArtifactState::MissingCubin
            } else {
                ArtifactState::Ready
            }
        }
        Err(_) => {
            let prefix = format!("{name}-");
            let other_version = std::fs::read_dir(&dir).into_iter().flatten().flatten().any(|e| {
                let file = e.file_name().to_string_lossy().into_owned();
                file.strip_prefix(&prefix)
                    .and_then(|rest| rest.strip_suffix(".plan.json"))
                    // A size bucket's plan: `<hash>-b<index>`.
                    .map(|rest| rest.split_once("-b").map_or(rest, |(hash, _)| hash))
                    .is_some_and(|hash| hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()))
            });
            if other_version { ArtifactState::Stale } else { ArtifactState::NotBuilt }
        }
    }
}

/// The build-script snippet for a source file.
fn build_snippet(source_file: &str) -> String {
    format!(
        "    // build.rs\n    fn main() {{\n        mirage::build::compile_or_exit([\"{source_file}\"]);\n    }}\n\n\
         and to Cargo.toml:\n\n    [build-dependencies]\n    mirage-rs = {{ version = \"{}\", features = [\"build\"] }}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The compile error for artifacts that are not ready (`None` when they are).
pub fn artifact_error(state: &ArtifactState, name: &str, stem: &str, source_file: &str) -> Option<String> {
    let snippet = build_snippet(source_file);
    Some(match state {
        ArtifactState::Ready => return None,
        ArtifactState::NoOutDir => format!(
            "#[mugraph] `{name}` has no build artifacts: OUT_DIR is not set, so this package has no build script. \
             The kernels of a #[mugraph] function are built by mirage in build.rs; add one that compiles this file:\n\n{snippet}"
        ),
        ArtifactState::NotBuilt => format!(
            "#[mugraph] `{name}` was not built: no artifact `{stem}.plan.json` in $OUT_DIR/{ARTIFACT_DIR}/. \
             List this file in the package's build.rs:\n\n{snippet}"
        ),
        ArtifactState::Stale => format!(
            "#[mugraph] `{name}`: the program changed since the last build (no artifact `{stem}.plan.json` for this version, only for an older one): \
             rerun cargo build (build.rs did not see the change — is `{source_file}` listed in mirage::build::compile?)"
        ),
        ArtifactState::MissingCubin => format!(
            "#[mugraph] `{name}`: the launch plan `{stem}.plan.json` exists but the cubin `{stem}.cubin` does not: rerun cargo build"
        ),
    })
}

/// The source file of the function relative to the package root (what build.rs lists), from
/// the path rustc was given, `CARGO_MANIFEST_DIR` and rustc's working directory.
pub fn package_relative(file: &Path, manifest_dir: Option<&Path>, cwd: Option<&Path>) -> String {
    let absolute: PathBuf = match (file.is_absolute(), cwd) {
        (false, Some(cwd)) => cwd.join(file),
        _ => file.to_path_buf(),
    };
    let relative = manifest_dir.and_then(|m| absolute.strip_prefix(m).ok()).unwrap_or(file);
    relative.to_string_lossy().replace('\\', "/")
}

fn element_type(dtype: DType) -> TokenStream {
    match dtype {
        DType::F16 => quote!(::mirage::half::f16),
        DType::Bf16 => quote!(::mirage::half::bf16),
        DType::F32 => quote!(f32),
        DType::I32 => quote!(i32),
    }
}

fn into_method(dtype: DType) -> Ident {
    format_ident!("into_{}", dtype.name())
}

fn describe(ty: &TensorType, strides: Option<&[usize]>) -> String {
    match strides {
        Some(s) if !ty.is_sized() => format!("`{} {:?}`, strides `{s:?}`", ty.dtype, ty.shape),
        _ => format!("`{} {}`", ty.dtype, ty.fmt_dims()),
    }
}

/// Expands a checked `#[mugraph]` function. `source_file` is the function's file relative to the
/// package root (for the messages), `out_dir` the value of `OUT_DIR`.
pub fn expand(program: &Program, item: &ItemFn, source_file: &str, out_dir: Option<&Path>) -> TokenStream {
    let name = &program.name;
    let name_str = name.to_string();
    let hash = program.fingerprint_hash();
    let stem = artifact_stem(&name_str, &hash);
    let buckets = bucket_ranges(&program.dims);
    let stems: Vec<String> = if buckets.len() > 1 {
        (0..buckets.len()).map(|i| bucket_stem(&stem, i)).collect()
    } else {
        vec![stem.clone()]
    };
    for stem in &stems {
        let state = artifact_state_of(out_dir, &name_str, &hash, stem);
        if let Some(message) = artifact_error(&state, &name_str, stem, source_file) {
            return quote_spanned! {name.span()=> ::core::compile_error!(#message); };
        }
    }
    expand_ready(program, item, &hash, &stem)
}

/// The launcher, given artifacts that are ready.
pub fn expand_ready(program: &Program, item: &ItemFn, hash: &str, stem: &str) -> TokenStream {
    let name = &program.name;
    let name_str = name.to_string();
    let vis = &program.vis;
    let attrs = &item.attrs;
    let name_on = format_ident!("{}_on", name);
    let name_into = format_ident!("{}_into", name);
    let taken = |s: &str| program.params.iter().any(|p| p.name == s);
    let gpu = if taken("gpu") { format_ident!("mirage_gpu") } else { format_ident!("gpu") };
    let stream = if taken("stream") { format_ident!("mirage_stream") } else { format_ident!("stream") };
    let workspace = if taken("workspace") { format_ident!("mirage_workspace") } else { format_ident!("workspace") };
    let view_types: Vec<TokenStream> = program.params.iter().map(|p| element_type(p.ty.dtype)).collect();

    let params: Vec<&Ident> = program.params.iter().map(|p| &p.name).collect();
    let param_types: Vec<TokenStream> = program
        .params
        .iter()
        .map(|p| {
            let t = element_type(p.ty.dtype);
            quote!(&::mirage::DeviceTensor<#t>)
        })
        .collect();
    let outputs = program.output_types();
    let out_types: Vec<TokenStream> = outputs
        .iter()
        .map(|t| {
            let e = element_type(t.dtype);
            quote!(::mirage::DeviceTensor<#e>)
        })
        .collect();
    let ret = if program.tuple_result { quote!((#(#out_types,)*)) } else { quote!(#(#out_types)*) };
    let n_out = outputs.len();
    let out_vars: Vec<Ident> = (0..n_out).map(|i| Ident::new(&format!("output{i}"), Span::mixed_site())).collect();
    let intos: Vec<Ident> = outputs.iter().map(|t| into_method(t.dtype)).collect();
    // The `_into` form's output parameters: `output0`, ... unless a parameter has that name.
    let out_params: Vec<Ident> = (0..n_out)
        .map(|i| {
            let plain = format!("output{i}");
            if taken(&plain) { format_ident!("mirage_output{}", i) } else { format_ident!("{}", plain) }
        })
        .collect();
    let out_elems: Vec<TokenStream> = outputs.iter().map(|t| element_type(t.dtype)).collect();
    let result =
        if program.tuple_result { quote!((#(#out_vars.#intos()?,)*)) } else { quote!(#(#out_vars.#intos()?)*) };

    let mut doc =
        format!("Runs the `#[mugraph]` program `{name_str}` on `gpu`'s default stream (see [`{name_str}_on`]).\n\n");
    doc.push_str("Parameters (checked before any CUDA call):\n");
    for p in &program.params {
        doc.push_str(&format!("- `{}`: {}\n", p.name, describe(&p.ty, Some(&p.strides))));
    }
    if !program.dims.is_empty() {
        let ranges: Vec<String> = program.dims.iter().map(|d| format!("`{}` in {}..={}", d.name, d.lo, d.hi)).collect();
        doc.push_str(&format!(
            "\nRuntime-sized dims (read from the tensors: every use of one must have the same size, in its range; row-major): {}.\n",
            ranges.join(", ")
        ));
        let buckets = bucket_ranges(&program.dims);
        if buckets.len() > 1 {
            let list: Vec<String> = buckets
                .iter()
                .map(|b| b.iter().map(|(lo, hi)| format!("{lo}..={hi}")).collect::<Vec<_>>().join(" × "))
                .collect();
            doc.push_str(&format!(
                "\nBuilt as {} size buckets ({}), each specialized at its upper bound; a call runs the one holding its sizes.\n",
                buckets.len(),
                list.join(", ")
            ));
        }
    }
    doc.push_str("\nReturns ");
    doc.push_str(&outputs.iter().map(|t| describe(t, None)).collect::<Vec<_>>().join(", "));
    doc.push_str(
        " (row-major).\n\n# Errors\n\nA tensor whose element type, shape or strides differ from the signature's \
         (the error names the parameter, what it needs and what was given), a runtime-sized dim out of its range or \
         of different sizes in two parameters (the error names the dim, the parameter and the sizes), or an error of \
         the CUDA driver.",
    );
    let doc_on = format!(
        "Runs the `#[mugraph]` program `{name_str}` on `stream`; asynchronous like any launch (see [`{name_str}`]).\n\n\
         # Errors\n\nAs [`{name_str}`]."
    );
    let doc_into = format!(
        "Runs the `#[mugraph]` program `{name_str}` on `stream`, reading borrowed inputs and writing \
         caller-provided outputs (`output0`, ... in the order of the result), with `workspace` for the \
         intermediate buffers (make it once with `{name_str}::PROGRAM.workspace(stream)`): allocates \
         nothing, so steady-state calls are cheap and can be captured in a CUDA graph. Inputs are \
         anything that converts into a `TensorView` (our `DeviceTensor`s, a cudarc buffer with a shape), \
         outputs into a `TensorViewMut`; asynchronous like any launch.\n\n\
         # Errors\n\nAs [`{name_str}`], and an output of the wrong element type, shape or strides, a \
         workspace smaller than the program needs (the error gives both sizes), or a view whose device \
         pointer is not aligned as the kernels need (up to 16 bytes for an input they copy in 16-byte \
         vectors, the element for an output: the error names the parameter and both alignments; a view \
         that starts a fresh allocation always passes). No kernel runs when a check fails."
    );
    let doc_mod = format!(
        "The compiled program of [`{name_str}`]: its cubin, launch plan and chosen µGraph, built by \
         `mirage::build::compile` as `$OUT_DIR/mirage/{stem}.*`."
    );
    let artifacts_of = |stem: &str| {
        let artifact = |ext: &str| format!("/{ARTIFACT_DIR}/{stem}.{ext}");
        let (cubin, plan, mugraph) = (artifact("cubin"), artifact("plan.json"), artifact("mugraph.json"));
        quote! {
            ::mirage::ProgramArtifacts {
                name: #name_str,
                fingerprint: #hash,
                cubin: ::core::include_bytes!(::core::concat!(::core::env!("OUT_DIR"), #cubin)),
                plan_json: ::core::include_str!(::core::concat!(::core::env!("OUT_DIR"), #plan)),
                mugraph_json: ::core::include_str!(::core::concat!(::core::env!("OUT_DIR"), #mugraph)),
            }
        }
    };
    let buckets = bucket_ranges(&program.dims);
    let program_static = if buckets.len() > 1 {
        // Size buckets: each bucket's program, and the whole program dispatching to them. The
        // whole program's plan is the last bucket's (its cubin is not used).
        let n = buckets.len();
        let last = bucket_stem(stem, n - 1);
        let (plan, mugraph) =
            (format!("/{ARTIFACT_DIR}/{last}.plan.json"), format!("/{ARTIFACT_DIR}/{last}.mugraph.json"));
        let entries = buckets.iter().enumerate().map(|(i, ranges)| {
            let artifacts = artifacts_of(&bucket_stem(stem, i));
            let ranges = ranges.iter().map(|(lo, hi)| quote!((#lo, #hi)));
            quote! { ::mirage::Bucket { ranges: &[#(#ranges),*], program: ::mirage::Program::new(#artifacts) } }
        });
        quote! {
            #[doc = "The program: run it with `Program::run`, inspect its plan, µGraphs and size buckets (`Program::bucket_of`)."]
            pub static PROGRAM: ::mirage::Program = ::mirage::Program::bucketed(
                ::mirage::ProgramArtifacts {
                    name: #name_str,
                    fingerprint: #hash,
                    cubin: &[],
                    plan_json: ::core::include_str!(::core::concat!(::core::env!("OUT_DIR"), #plan)),
                    mugraph_json: ::core::include_str!(::core::concat!(::core::env!("OUT_DIR"), #mugraph)),
                },
                &BUCKETS,
            );
            #[doc = "The size buckets of `PROGRAM`, in order."]
            pub static BUCKETS: [::mirage::Bucket; #n] = [#(#entries),*];
        }
    } else {
        let artifacts = artifacts_of(stem);
        quote! {
            #[doc = "The program: run it with `Program::run`, inspect its plan and µGraph."]
            pub static PROGRAM: ::mirage::Program = ::mirage::Program::new(#artifacts);
        }
    };
    let outputs_var = Ident::new("outputs", Span::mixed_site());

    quote! {
        #(#attrs)*
        #[doc = ""]
        #[doc = #doc]
        #vis fn #name(#gpu: &::mirage::Gpu, #(#params: #param_types),*) -> ::core::result::Result<#ret, ::mirage::RuntimeError> {
            #name_on(#gpu.stream(), #(#params),*)
        }

        #[doc = #doc_on]
        #[allow(dead_code)]
        #vis fn #name_on(#stream: &::mirage::Stream, #(#params: #param_types),*) -> ::core::result::Result<#ret, ::mirage::RuntimeError> {
            let #outputs_var = #name::PROGRAM.run_exact::<#n_out>(#stream, &[#(::mirage::AnyView::from(#params)),*])?;
            let [#(#out_vars),*] = #outputs_var;
            ::core::result::Result::Ok(#result)
        }

        #[doc = #doc_into]
        #[allow(dead_code, clippy::too_many_arguments)]
        #vis fn #name_into<'mirage_views>(
            #stream: &::mirage::Stream,
            #workspace: &mut ::mirage::Workspace,
            #(#params: impl ::core::convert::Into<::mirage::TensorView<'mirage_views, #view_types>>,)*
            #(#out_params: impl ::core::convert::Into<::mirage::TensorViewMut<'mirage_views, #out_elems>>,)*
        ) -> ::core::result::Result<(), ::mirage::RuntimeError> {
            #name::PROGRAM.launch_views(
                #stream,
                &[#(::mirage::AnyView::from(::core::convert::Into::<::mirage::TensorView<'mirage_views, #view_types>>::into(#params))),*],
                &mut [#(::mirage::AnyViewMut::from(::core::convert::Into::<::mirage::TensorViewMut<'mirage_views, #out_elems>>::into(#out_params)).reborrow()),*],
                #workspace,
            )
        }

        #[doc = #doc_mod]
        #[allow(dead_code)]
        #vis mod #name {
            #program_static
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mirage-macros-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(ARTIFACT_DIR)).expect("temp dir");
        dir
    }

    #[test]
    fn artifact_states() {
        let hash = "0123456789abcdef";
        assert_eq!(artifact_state(None, "f", hash), ArtifactState::NoOutDir);
        let dir = temp_dir("states");
        assert_eq!(artifact_state(Some(&dir), "f", hash), ArtifactState::NotBuilt);
        let art = dir.join(ARTIFACT_DIR);
        std::fs::write(art.join("f-fedcba9876543210.plan.json"), "{}").expect("write");
        assert_eq!(artifact_state(Some(&dir), "f", hash), ArtifactState::Stale);
        // Another function's artifacts do not count.
        assert_eq!(artifact_state(Some(&dir), "g", hash), ArtifactState::NotBuilt);
        std::fs::write(art.join(format!("f-{hash}.plan.json")), format!("{{\n  \"fingerprint\": \"{hash}\"\n}}"))
            .expect("write");
        assert_eq!(artifact_state(Some(&dir), "f", hash), ArtifactState::MissingCubin);
        std::fs::write(art.join(format!("f-{hash}.cubin")), b"\x7fELF").expect("write");
        assert_eq!(artifact_state(Some(&dir), "f", hash), ArtifactState::Ready);
        std::fs::write(art.join(format!("f-{hash}.plan.json")), "{\"fingerprint\": \"0000000000000000\"}")
            .expect("write");
        assert_eq!(artifact_state(Some(&dir), "f", hash), ArtifactState::Stale);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn messages_say_what_to_add() {
        let m = artifact_error(&ArtifactState::NoOutDir, "f", "f-0", "src/kernels.rs").expect("error");
        assert!(m.contains("mirage::build::compile_or_exit([\"src/kernels.rs\"]);"), "{m}");
        assert!(m.contains("[build-dependencies]"), "{m}");
        assert!(m.contains("features = [\"build\"]"), "{m}");
        let m = artifact_error(&ArtifactState::Stale, "f", "f-0", "src/kernels.rs").expect("error");
        assert!(m.contains("the program changed since the last build"), "{m}");
        assert!(m.contains("rerun cargo build"), "{m}");
        assert!(artifact_error(&ArtifactState::Ready, "f", "f-0", "src/kernels.rs").is_none());
    }

    #[test]
    fn source_files_relative_to_the_package() {
        let m = Path::new("/ws/pkg");
        assert_eq!(package_relative(Path::new("pkg/src/k.rs"), Some(m), Some(Path::new("/ws"))), "src/k.rs");
        assert_eq!(package_relative(Path::new("/ws/pkg/src/k.rs"), Some(m), None), "src/k.rs");
        assert_eq!(package_relative(Path::new("src/k.rs"), None, None), "src/k.rs");
        assert_eq!(package_relative(Path::new("other/k.rs"), Some(m), Some(Path::new("/elsewhere"))), "other/k.rs");
    }

    #[test]
    fn a_sized_launcher_documents_its_dims() {
        let item: ItemFn = syn::parse_quote! {
            pub fn rows(x: Tensor<f16, B, 64>, w: Tensor<f16, 64, 32>) -> Tensor<f16, B, 32> {
                x.matmul(w)
            }
        };
        let dims = crate::syntax::parse_attr_args(quote!(dims(B = 1..=64))).expect("dims");
        let program = crate::syntax::parse(&item, dims).expect("valid");
        assert_eq!(program.params[0].ty.shape, vec![64, 64], "built at the upper bound");
        assert_eq!(program.output_types()[0].to_string(), "Tensor<f16, B, 32>");
        let hash = program.fingerprint_hash();
        let out = expand_ready(&program, &item, &hash, &artifact_stem("rows", &hash)).to_string();
        assert!(out.contains("`f16 [B, 64]`") && out.contains("`B` in 1..=64"), "{out}");
        assert!(out.contains("out of its range"), "{out}");
    }

    #[test]
    fn expansion_shape() {
        let item: ItemFn = syn::parse_quote! {
            /// Gated MLP.
            pub fn gated_mlp(x: Tensor<f16, 8, 64>, #[strides(1, 64)] w: Tensor<bf16, 64, 32>) -> (Tensor<f16, 8, 32>, Tensor<f32, 8, 1>) {
                let y = x.matmul(w);
                (y, y.sum(1))
            }
        };
        let program = crate::syntax::parse(&item, Vec::new());
        // Mixed element types are rejected by the checker; build a valid one instead.
        assert!(program.is_err());
        let item: ItemFn = syn::parse_quote! {
            /// Gated MLP.
            pub fn gated_mlp(gpu: Tensor<f16, 8, 64>, #[strides(1, 64)] w: Tensor<f16, 64, 32>) -> (Tensor<f16, 8, 32>, Tensor<f16, 8, 1>) {
                let y = gpu.matmul(w);
                (y, y.sum(1))
            }
        };
        let program = crate::syntax::parse(&item, Vec::new()).expect("valid");
        let hash = program.fingerprint_hash();
        let out = expand_ready(&program, &item, &hash, &artifact_stem("gated_mlp", &hash)).to_string();
        assert!(out.contains("pub fn gated_mlp (mirage_gpu : & :: mirage :: Gpu , gpu : & :: mirage :: DeviceTensor < :: mirage :: half :: f16 >"), "{out}");
        assert!(out.contains("pub fn gated_mlp_on (stream : & :: mirage :: Stream"), "{out}");
        assert!(out.contains("(:: mirage :: DeviceTensor < :: mirage :: half :: f16 > , :: mirage :: DeviceTensor < :: mirage :: half :: f16 > ,)"), "{out}");
        assert!(out.contains("run_exact :: < 2usize >"), "{out}");
        assert!(out.contains("pub fn gated_mlp_into < 'mirage_views > (stream : & :: mirage :: Stream , workspace : & mut :: mirage :: Workspace , gpu : impl :: core :: convert :: Into < :: mirage :: TensorView < 'mirage_views , :: mirage :: half :: f16 >>"), "{out}");
        assert!(out.contains("output1 : impl :: core :: convert :: Into < :: mirage :: TensorViewMut < 'mirage_views , :: mirage :: half :: f16 >>"), "{out}");
        assert!(out.contains("launch_views"), "{out}");
        assert!(out.contains(&format!("\"/mirage/gated_mlp-{hash}.cubin\"")), "{out}");
        assert!(out.contains("pub mod gated_mlp"), "{out}");
        assert!(!out.contains("strides ("), "the #[strides] attribute is stripped: {out}");
        assert!(out.contains("strides `[1, 64]`"), "the docs give the strides: {out}");
    }
}
