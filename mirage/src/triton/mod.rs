//! The Triton backend: any µGraph → one Python module of `@triton.jit` kernels and a launcher.
//!
//! Kernel-level operators are first lowered to their default block graphs
//! ([`crate::codegen::default_blocks::lower_to_blocks`]), so every kernel is a block graph; each
//! becomes one `@triton.jit` function ([`kernel`] describes the mapping). The module's
//! `launch(...)` takes the program's inputs as torch tensors (on one CUDA device, with the shapes,
//! element types and strides of the program's signature, checked with a clear error), allocates
//! the outputs and the intermediate tensors, launches the kernels in order and returns the
//! output (a tuple for several).
//!
//! ```
//! use mirage::ir::{DType, KernelGraph};
//! let mut g = KernelGraph::new();
//! let x = g.input(&[8, 64], DType::F16)?;
//! let w = g.input(&[64, 32], DType::F16)?;
//! let y = g.matmul(x, w)?;
//! let y = g.silu(y)?;
//! g.output(y, None)?;
//! let module = mirage::triton::generate(&g, "linear_silu", None)?;
//! assert!(module.contains("@triton.jit") && module.contains("def launch(x0, x1):"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Unsupported, with a [`TritonError::Unsupported`] naming the kernel and the tile: tiles (after
//! rounding each dim up to a power of two) and the temporaries of `tl.dot` padding, strided
//! `sum_to`, `concat` and `rope` with a head that is not a power of two holding more than
//! [`kernel::MAX_BLOCK_ELEMENTS`] elements, Triton's limit of one block tensor; kernels whose
//! shared memory ([`smem`]) exceeds the limit of [`TritonOptions`] even with `num_stages=1`. Thread counts that are not a power-of-two number of warps run with
//! the next smaller power of two (`num_warps` must be one; the result does not depend on it).

pub mod kernel;
pub mod smem;

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::codegen::default_blocks::lower_to_blocks;
use crate::ir::{DType, IrError, KernelGraph, KernelOp, TensorRef, row_major_strides};
use kernel::{OutputLayout, generate_kernel, uses_libdevice};

/// Why a Triton module could not be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TritonError {
    /// The graph breaks a rule of the IR (or a kernel operator has no default block graph).
    #[error("invalid µGraph: {0}")]
    Ir(IrError),
    /// A construct the Triton backend does not handle.
    #[error("the Triton backend does not support this: {0}")]
    Unsupported(String),
    /// A disagreement inside the generator.
    #[error("internal error in the Triton backend: {0}")]
    Internal(String),
}

/// The torch element type of a tensor.
fn torch_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "torch.float16",
        DType::Bf16 => "torch.bfloat16",
        DType::F32 => "torch.float32",
        DType::I32 => "torch.int32",
    }
}

/// A Python identifier from a name (`x0` when empty; keywords and names the module uses get a
/// trailing `_`).
fn py_ident(name: &str) -> String {
    const TAKEN: &[&str] = &[
        "False",
        "None",
        "True",
        "and",
        "as",
        "assert",
        "async",
        "await",
        "break",
        "class",
        "continue",
        "def",
        "del",
        "elif",
        "else",
        "except",
        "finally",
        "for",
        "from",
        "global",
        "if",
        "import",
        "in",
        "is",
        "lambda",
        "nonlocal",
        "not",
        "or",
        "pass",
        "raise",
        "return",
        "try",
        "while",
        "with",
        "yield",
        "torch",
        "triton",
        "tl",
        "libdevice",
        "launch",
        "device",
    ];
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'x');
    }
    if TAKEN.contains(&s.as_str()) || s.starts_with("_") {
        s.push('_');
    }
    s
}

fn tuple(v: &[usize]) -> String {
    match v {
        [one] => format!("({one},)"),
        _ => format!("({})", v.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// What the generated module is for: the shared memory each kernel may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TritonOptions {
    /// Shared memory per block, in bytes, that a kernel may use (the device's opt-in limit):
    /// [`smem::SM90_SHARED_MEMORY`] (the default) or [`smem::SM80_SHARED_MEMORY`].
    pub smem_limit: usize,
}

impl Default for TritonOptions {
    fn default() -> Self {
        TritonOptions { smem_limit: smem::SM90_SHARED_MEMORY }
    }
}

/// Generates the Triton module of `graph` for an sm_90 GPU ([`TritonOptions::default`]): kernels
/// named `{name}_k{i}`, and `launch(...)` whose parameters are `input_names` (the program's
/// parameter names; `x0, x1, ..` when `None`).
pub fn generate(graph: &KernelGraph, name: &str, input_names: Option<&[String]>) -> Result<String, TritonError> {
    generate_with(graph, name, input_names, &TritonOptions::default())
}

/// [`generate`] with explicit options. Each kernel is launched with the largest `num_stages` (3,
/// 2, 1) whose estimated shared memory ([`smem::estimate`]) fits `options.smem_limit`; a kernel
/// that does not fit even with one stage is a [`TritonError::Unsupported`] here rather than
/// Triton's `OutOfResources` on the GPU.
pub fn generate_with(
    graph: &KernelGraph,
    name: &str,
    input_names: Option<&[String]>,
    options: &TritonOptions,
) -> Result<String, TritonError> {
    let graph = lower_to_blocks(graph).map_err(TritonError::Ir)?;
    let base = py_ident(name);
    let n_inputs = graph.inputs().len();
    let mut params: Vec<String> = match input_names {
        Some(names) if names.len() == n_inputs => names.iter().map(|n| py_ident(n)).collect(),
        Some(names) => {
            return Err(TritonError::Internal(format!(
                "{} input names given for a program of {n_inputs} inputs",
                names.len()
            )));
        }
        None => (0..n_inputs).map(|i| format!("x{i}")).collect(),
    };
    // Two parameters must not share a name after sanitizing.
    for i in 0..params.len() {
        while params[..i].contains(&params[i]) {
            params[i].push('_');
        }
    }

    // Which program output each tensor is first returned as, and its strides.
    let outputs = graph.outputs();
    let mut first_output: HashMap<TensorRef, usize> = HashMap::new();
    for (k, (t, _)) in outputs.iter().enumerate() {
        first_output.entry(*t).or_insert(k);
    }

    let mut kernels = String::new();
    let mut body = String::new();
    let mut var_of: HashMap<TensorRef, String> = HashMap::new();
    let mut input_index = 0;
    let mut buffers = 0;
    let mut launches = 0;
    for (i, node) in graph.nodes().iter().enumerate() {
        match &node.op {
            KernelOp::Input { desc } => {
                let p = &params[input_index];
                let (set, device) = if input_index == 0 { ("_device = ", "None") } else { ("", "_device") };
                let _ = writeln!(
                    body,
                    "    {set}_check({p}, \"{p}\", {}, {}, {}, {device})",
                    tuple(&desc.shape),
                    tuple(&desc.strides),
                    torch_dtype(desc.dtype)
                );
                var_of.insert(TensorRef::new(i), p.clone());
                input_index += 1;
            }
            KernelOp::Output { .. } => {}
            KernelOp::Custom { block } => {
                let kname = format!("{base}_k{launches}");
                let mut layouts = Vec::new();
                let mut args: Vec<String> = node.inputs.iter().map(|t| var_of[t].clone()).collect();
                for (port, desc) in node.outputs.iter().enumerate() {
                    let t = TensorRef { node: i, port };
                    let (var, strides) = match first_output.get(&t) {
                        Some(&k) => (format!("_out{k}"), outputs[k].1.clone()),
                        None => {
                            buffers += 1;
                            (format!("_buf{}", buffers - 1), row_major_strides(&desc.shape))
                        }
                    };
                    let _ = writeln!(
                        body,
                        "    {var} = torch.empty_strided({}, {}, dtype={}, device=_device)",
                        tuple(&desc.shape),
                        tuple(&strides),
                        torch_dtype(desc.dtype)
                    );
                    layouts.push(OutputLayout { shape: desc.shape.clone(), strides });
                    var_of.insert(t, var.clone());
                    args.push(var);
                }
                let k = generate_kernel(block, &kname, &layouts)?;
                let smem = smem::choose_stages(block, &kname, options.smem_limit)?;
                kernels.push_str(&k.code);
                kernels.push('\n');
                let grid = block.grid();
                let _ = writeln!(
                    body,
                    "    {kname}[({}, {}, {})]({}, num_warps={}, num_stages={})  # ~{} bytes of shared memory",
                    grid[0],
                    grid[1],
                    grid[2],
                    args.join(", "),
                    k.num_warps,
                    smem.num_stages,
                    smem.total()
                );
                launches += 1;
            }
            other => {
                return Err(TritonError::Internal(format!("kernel operator {} left after lowering", other.name())));
            }
        }
    }
    // Outputs that are not a kernel's first result of their tensor: copies.
    let mut results = Vec::new();
    for (k, (t, strides)) in outputs.iter().enumerate() {
        let desc = graph.desc(*t).map_err(TritonError::Ir)?;
        let source = var_of
            .get(t)
            .cloned()
            .ok_or_else(|| TritonError::Internal(format!("output {k} reads a tensor nothing produced")))?;
        if source != format!("_out{k}") {
            let _ = writeln!(
                body,
                "    _out{k} = torch.empty_strided({}, {}, dtype={}, device=_device)",
                tuple(&desc.shape),
                tuple(strides),
                torch_dtype(desc.dtype)
            );
            let _ = writeln!(body, "    _out{k}.copy_({source})");
        }
        results.push(format!("_out{k}"));
    }
    let result = match results.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join(", ")),
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by mirage: the Triton version of the µGraph of `{name}` ({launches} kernel(s)).\n\
         # launch({}) takes torch tensors on one CUDA device and returns the output(s).",
        params.join(", ")
    );
    s.push_str("import torch\nimport triton\nimport triton.language as tl\n");
    if uses_libdevice(&kernels) {
        s.push_str(
            "try:\n    from triton.language.extra import libdevice\nexcept ImportError:\n    from triton.language.extra.cuda import libdevice\n",
        );
    }
    s.push_str(
        "\nPOS_INF = tl.constexpr(float(\"inf\"))\nNEG_INF = tl.constexpr(float(\"-inf\"))\nNAN = tl.constexpr(float(\"nan\"))\n\n\n",
    );
    s.push_str(&kernels);
    s.push_str(CHECK);
    let _ = writeln!(s, "\n\ndef launch({}):", params.join(", "));
    if params.is_empty() {
        s.push_str("    _device = torch.device(\"cuda\")\n");
    }
    s.push_str(&body);
    let _ = writeln!(s, "    return {result}");
    Ok(s)
}

/// The launcher's argument check.
const CHECK: &str = r#"
def _check(t, name, shape, strides, dtype, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, found {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {list(shape)}, found {list(t.shape)}")
    if t.dtype != dtype:
        raise ValueError(f"{name}: expected element type {dtype}, found {t.dtype}")
    if tuple(t.stride()) != strides:
        raise ValueError(f"{name}: expected strides {list(strides)}, found {list(t.stride())}")
    if not t.is_cuda:
        raise ValueError(f"{name}: expected a CUDA tensor, found one on {t.device}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (where the first input is), found one on {t.device}")
    return t.device
"#;
