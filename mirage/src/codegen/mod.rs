//! CUDA code generation: every kernel of a µGraph becomes one `__global__` function
//! of one translation unit, with the launch plan that runs them.

pub mod default_blocks;
pub mod kernel;
pub mod plan;

pub use kernel::{
    DimSize, KernelOptions, KernelPlan, KernelSizes, KernelSource, LoopSize, generate_kernel, generate_task_body,
    plan_kernel,
};

use crate::dims::{DimPlan, Dims, Extent};
use crate::ir::{IrError, KernelGraph, KernelOp, TensorRef};
use plan::{ArgRef, Buffer, GridDim, KernelLaunch, LaunchPlan, PLAN_VERSION, PlanDim};

/// The device library included at the top of every translation unit.
pub const DEVICE_LIBRARY: &str = include_str!("../../cuda/mirage_device.cuh");

/// A generated translation unit and its launch plan.
#[derive(Clone, Debug)]
pub struct GeneratedProgram {
    /// The whole translation unit: the device library, then the kernels.
    pub source: String,
    /// The kernels alone (what snapshot tests look at).
    pub kernels_source: String,
    /// How to launch them.
    pub plan: LaunchPlan,
}

/// Generates CUDA for `graph`; kernels are named `{name}_k{i}`.
pub fn generate(graph: &KernelGraph, name: &str, opts: &KernelOptions) -> Result<GeneratedProgram, CodegenError> {
    generate_sized(graph, &Dims::default(), name, opts)
}

/// The C name of the size parameter of runtime-sized dim `v`.
fn size_param(v: usize) -> String {
    format!("n{v}")
}

/// The dims of a tensor as the plan records them: the variable of each runtime-sized dim.
fn plan_marks(extents: &[Extent]) -> Vec<Option<usize>> {
    extents.iter().map(|e| if let Extent::Var(v) = e { Some(*v) } else { None }).collect()
}

/// [`generate`] for a µGraph built at the upper bounds of `dims` (none: a static program): every
/// kernel takes the sizes of the runtime-sized dims it uses as `int` parameters after its
/// pointers, its grid axes over such dims get `ceil(n / slab)` blocks at launch, its for-loop
/// over one `ceil(valid / tile)` iterations, strides of tensors sized at other dims than dim 0 are
/// computed from the sizes, reductions over padding are masked ([`KernelSizes`]), and the plan
/// records the ranges and which dims they size (a tensor of per-block parts keeps its layout at
/// the upper bound and gets no mark). What the kernels cannot do at a runtime size (an RMS mean
/// over padding, a padded tile kept in registers) is an [`CodegenError::Unsupported`] naming the
/// kernel.
pub fn generate_sized(
    graph: &KernelGraph,
    dims: &Dims,
    name: &str,
    opts: &KernelOptions,
) -> Result<GeneratedProgram, CodegenError> {
    let (graph, sized) = sized_graph(graph, dims)?;
    let marks = |t: TensorRef| sized.as_ref().map(|p| plan_marks(p.extents(t))).unwrap_or_default();
    let inputs: Vec<_> = graph.inputs().into_iter().cloned().collect();
    let mut outputs = Vec::new();
    let mut output_of: std::collections::HashMap<TensorRef, usize> = Default::default();
    for (k, (t, strides)) in graph.outputs().into_iter().enumerate() {
        let desc = graph.desc(t).map_err(CodegenError::Ir)?.clone();
        if strides != crate::ir::row_major_strides(&desc.shape) {
            return Err(CodegenError::Unsupported(format!("output {k} with non-row-major strides {strides:?}")));
        }
        if output_of.insert(t, k).is_some() {
            return Err(CodegenError::Unsupported(format!("output {k}: the same tensor returned twice")));
        }
        outputs.push(crate::ir::TensorDesc::new(&desc.shape, desc.dtype));
    }
    let mut arg_of: std::collections::HashMap<TensorRef, ArgRef> = Default::default();
    let mut buffers = Vec::new();
    let mut kernels = Vec::new();
    let mut kernels_source = String::new();
    let mut input_index = 0;
    for (i, node) in graph.nodes().iter().enumerate() {
        match &node.op {
            KernelOp::Input { .. } => {
                let t = TensorRef::new(i);
                if let Some(k) = output_of.get(&t) {
                    return Err(CodegenError::Unsupported(format!(
                        "output {k} is the program's input {input_index} itself"
                    )));
                }
                arg_of.insert(t, ArgRef::Input(input_index));
                input_index += 1;
            }
            KernelOp::Output { .. } => {}
            KernelOp::Custom { block } => {
                let kname = format!("{name}_k{}", kernels.len());
                let kdims = sized.as_ref().and_then(|p| p.kernel(i)).cloned().unwrap_or_default();
                let kopts = KernelOptions {
                    sizes: kernel_sizes(sized.as_ref(), &graph, i),
                    waits_for_previous_kernel: !kernels.is_empty(),
                    ..opts.clone()
                };
                let src = generate_kernel(block, &kname, &kopts)?;
                kernels_source.push_str(&src.code);
                kernels_source.push('\n');
                let mut args: Vec<ArgRef> = node.inputs.iter().map(|t| arg_of[t].clone()).collect();
                for (port, desc) in node.outputs.iter().enumerate() {
                    let t = TensorRef { node: i, port };
                    let arg = match output_of.get(&t) {
                        Some(&k) => ArgRef::Output(k),
                        None => {
                            let m = marks(t);
                            let m = if m.iter().any(Option::is_some) { m } else { Vec::new() };
                            buffers.push(Buffer { desc: desc.clone(), dims: m });
                            ArgRef::Buffer(buffers.len() - 1)
                        }
                    };
                    arg_of.insert(t, arg.clone());
                    args.push(arg);
                }
                kernels.push(KernelLaunch {
                    name: kname,
                    grid: src.grid,
                    threads: src.threads,
                    smem_bytes: src.smem_bytes,
                    args,
                    grid_dims: if kdims.grid.iter().any(Option::is_some) {
                        kdims.grid.iter().map(|s| s.map(|s| GridDim { dim: s.var, tile: s.part })).collect()
                    } else {
                        Vec::new()
                    },
                    size_args: kdims.vars.clone(),
                    arg_align: src.param_align.clone(),
                    waits_for_previous: kopts.waits_for_previous_kernel,
                });
            }
            other => {
                return Err(CodegenError::Unsupported(format!("kernel operator {} left after lowering", other.name())));
            }
        }
    }
    let input_marks: Vec<Vec<Option<usize>>> = graph
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.op, KernelOp::Input { .. }))
        .map(|(i, _)| marks(TensorRef::new(i)))
        .collect();
    let output_marks: Vec<Vec<Option<usize>>> = graph.outputs().into_iter().map(|(t, _)| marks(t)).collect();
    let source = format!("// generated by mirage for `{name}`\n{DEVICE_LIBRARY}\n{kernels_source}");
    let plan = LaunchPlan {
        version: PLAN_VERSION,
        name: name.to_string(),
        fingerprint: String::new(),
        input_names: Vec::new(),
        inputs,
        outputs,
        buffers,
        kernels,
        search_report: None,
        dims: dims.vars.iter().map(|v| PlanDim { name: v.name.clone(), lo: v.lo, hi: v.hi }).collect(),
        input_dims: if dims.is_static() { Vec::new() } else { input_marks },
        output_dims: if dims.is_static() { Vec::new() } else { output_marks },
    };
    Ok(GeneratedProgram { source, kernels_source, plan })
}

/// The µGraph code generation writes (kernel-level operators lowered to their default block
/// graphs) and, for a program with runtime-sized dims, how the variables follow through it. A
/// masked reduction code does not mask ([`crate::dims::KernelDims::masked`]: a matmul's
/// contraction over padding that is not zeros, an RMS mean over a padded dim) and a program
/// output of per-block parts ([`crate::dims::Extent::Blocks`]) are
/// [`CodegenError::Unsupported`].
fn sized_graph(graph: &KernelGraph, dims: &Dims) -> Result<(KernelGraph, Option<DimPlan>), CodegenError> {
    let graph = default_blocks::lower_to_blocks(graph).map_err(CodegenError::Ir)?;
    let sized = if dims.is_static() { None } else { Some(DimPlan::analyze(&graph, dims).map_err(CodegenError::Ir)?) };
    if let Some(p) = &sized {
        // Reductions over padding are masked in the kernels (their identity for the padding),
        // except these, whose masks are not written.
        for i in 0..graph.nodes().len() {
            let unmasked = p
                .kernel(i)
                .and_then(|k| k.masked.iter().find(|m| m.starts_with("rms_norm") || m.starts_with("acc_rms")));
            if let Some(what) = unmasked {
                return Err(CodegenError::Unsupported(format!(
                    "a masked reduction over a runtime-sized dim that code does not mask (kernel k{i}: {what})"
                )));
            }
        }
        for (k, (t, _)) in graph.outputs().into_iter().enumerate() {
            let e = p.extents(t);
            if e.iter().any(|x| matches!(x, Extent::Blocks { .. })) {
                return Err(CodegenError::Unsupported(format!(
                    "output {k} of per-block parts of a runtime-sized dim ({})",
                    crate::dims::fmt_extents(e, dims)
                )));
            }
        }
    }
    Ok((graph, sized))
}

/// The runtime sizes custom kernel `node` of `graph` takes (none without a plan).
fn kernel_sizes(sized: Option<&DimPlan>, graph: &KernelGraph, node: usize) -> KernelSizes {
    let Some(plan) = sized else { return KernelSizes::default() };
    let kdims = plan.kernel(node).cloned().unwrap_or_default();
    let slot = |v: usize| kdims.vars.iter().position(|&w| w == v).unwrap_or(0);
    let of = |t: TensorRef| -> Vec<DimSize> {
        let e = plan.extents(t);
        if e.iter().all(|x| matches!(x, Extent::Fixed(_))) {
            return Vec::new();
        }
        e.iter()
            .map(|x| match *x {
                Extent::Fixed(_) => DimSize::Fixed,
                Extent::Var(v) => DimSize::Var(slot(v)),
                Extent::Blocks { var, slab, tile } => DimSize::Blocks { param: slot(var), slab, tile },
                Extent::Stacked { var, whole, .. } => DimSize::Stacked { param: slot(var), whole },
            })
            .collect()
    };
    let n = &graph.nodes()[node];
    let forloop = kdims.forloop.map(|f| LoopSize {
        param: slot(f.var),
        part: f.part,
        whole: f.whole,
        axis: (0..3).find(|&a| kdims.grid[a].is_some_and(|g| g.var == f.var)),
    });
    KernelSizes {
        params: kdims.vars.iter().map(|&v| size_param(v)).collect(),
        inputs: n.inputs.iter().map(|&t| of(t)).collect(),
        outputs: (0..n.outputs.len()).map(|port| of(TensorRef { node, port })).collect(),
        forloop,
    }
}

/// Whether [`generate_sized`] can write `graph` (built at the upper bounds of `dims`): the checks
/// it makes before writing code (no unmasked reduction over padding, no program output of
/// per-block parts, copies that can be predicated, no padded tile in registers, tiles that fit
/// the shared memory), without writing any.
/// The search applies it to every candidate of a program with runtime-sized dims
/// ([`crate::search::ranges`]), so that it never chooses a µGraph code generation refuses.
pub fn sized_support(graph: &KernelGraph, dims: &Dims, opts: &KernelOptions) -> Result<(), CodegenError> {
    let (graph, sized) = sized_graph(graph, dims)?;
    for (i, node) in graph.nodes().iter().enumerate() {
        if let KernelOp::Custom { block } = &node.op {
            let kopts = KernelOptions { sizes: kernel_sizes(sized.as_ref(), &graph, i), ..opts.clone() };
            kernel::check_kernel(block, &format!("k{i}"), &kopts)?;
        }
    }
    Ok(())
}

/// Why code could not be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodegenError {
    /// The graph breaks a rule of the IR.
    #[error("invalid µGraph: {0}")]
    Ir(IrError),
    /// A kernel needs more shared memory than a block may have.
    #[error("kernel `{kernel}` needs {needed} bytes of shared memory, the target allows {available}")]
    SharedMemory {
        /// The kernel.
        kernel: String,
        /// Bytes its tiles need with one pipeline stage.
        needed: usize,
        /// Bytes a block may have.
        available: usize,
    },
    /// A construct code generation does not handle yet.
    #[error("code generation does not support {0}")]
    Unsupported(String),
}

/// One translation unit holding several programs (kernels named `{name}_k{i}` per program):
/// the source and one launch plan per program, in order.
pub fn generate_unit(
    programs: &[(String, &KernelGraph)],
    opts: &KernelOptions,
) -> Result<(String, Vec<LaunchPlan>), CodegenError> {
    let mut kernels = String::new();
    let mut plans = Vec::new();
    for (name, graph) in programs {
        let g = generate(graph, name, opts)?;
        kernels.push_str(&g.kernels_source);
        plans.push(g.plan);
    }
    Ok((format!("// generated by mirage\n{DEVICE_LIBRARY}\n{kernels}"), plans))
}
