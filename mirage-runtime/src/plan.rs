//! Launch plans: which kernels of a cubin run in which order on which buffers.
//!
//! `mirage`'s code generator writes a [`LaunchPlan`] as JSON next to the cubin it builds; at run
//! time [`LaunchPlan::from_json`] reads it back without the compiler, and
//! [`Program`](crate::Program) executes it. The plan records the fingerprint of the
//! `#[mugraph]` program it was built for, so a stale artifact is detected.
//!
//! ```
//! use mirage_runtime::plan::{ArgRef, LaunchPlan, TensorDesc};
//! use mirage_runtime::DType;
//!
//! let json = r#"{"version":1,"name":"scale","fingerprint":"00112233aabbccdd",
//!   "inputs":[{"shape":[8,16],"strides":[16,1],"dtype":"f16"}],
//!   "outputs":[{"shape":[8,16],"strides":[16,1],"dtype":"f16"}],
//!   "buffers":[],
//!   "kernels":[{"name":"scale_k0","grid":[8,1,1],"threads":128,"smem_bytes":0,
//!               "args":[{"input":0},{"output":0}]}]}"#;
//! let plan = LaunchPlan::from_json(json).unwrap();
//! assert_eq!(plan.inputs[0], TensorDesc::new(&[8, 16], DType::F16));
//! assert_eq!(plan.kernels[0].args, vec![ArgRef::Input(0), ArgRef::Output(0)]);
//! ```

use serde::{Deserialize, Serialize};

pub use mirage_core::TensorDesc;

use crate::desc::LaunchConfig;
use crate::error::RuntimeError;

/// Version of the plan format; [`LaunchPlan::from_json`] rejects other versions.
pub const PLAN_VERSION: u32 = 1;

/// The alignment (bytes) every pointer argument of a kernel is taken to need when the plan does
/// not record it ([`KernelLaunch::arg_align`] empty: a plan written before it was recorded): the
/// widest vector a generated kernel moves, so that such a plan is checked conservatively.
pub const UNRECORDED_ARG_ALIGN: usize = 16;

/// The largest alignment (bytes) a plan may ask of a pointer argument: that of every buffer in a
/// workspace and of every CUDA allocation's base.
pub const MAX_ARG_ALIGN: usize = 256;

/// An argument of a kernel launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgRef {
    /// The program's input `i`.
    Input(usize),
    /// The program's output `i`.
    Output(usize),
    /// Intermediate buffer `i`.
    Buffer(usize),
}

/// An intermediate device buffer between kernels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// Shape, row-major strides and element type (at the compile size: the workspace is laid
    /// out for the upper bound of every runtime-sized dim).
    pub desc: TensorDesc,
    /// Per dim, the runtime-sized dim ([`LaunchPlan::dims`] index) sizing it; empty when none does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<Option<usize>>,
}

/// A runtime-sized dimension of a program: its name and the range of sizes it takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanDim {
    /// The name as declared (`B`).
    pub name: String,
    /// The smallest size.
    pub lo: usize,
    /// The largest size: the compile size, at which every shape of the plan is written.
    pub hi: usize,
}

/// A grid axis whose extent follows a runtime-sized dim: `ceil(n / tile)` blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridDim {
    /// The dim ([`LaunchPlan::dims`] index).
    pub dim: usize,
    /// The extent one block covers.
    pub tile: usize,
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelLaunch {
    /// `extern "C"` name in the cubin.
    pub name: String,
    /// Blocks along x, y, z.
    pub grid: [usize; 3],
    /// Threads per block.
    pub threads: usize,
    /// Dynamic shared memory (bytes).
    pub smem_bytes: usize,
    /// Arguments in parameter order: the kernel's operands, then its outputs.
    pub args: Vec<ArgRef>,
    /// Per grid axis (x, y, z), the runtime-sized dim whose size sets its extent; empty when
    /// the grid is fixed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grid_dims: Vec<Option<GridDim>>,
    /// The runtime-sized dims ([`LaunchPlan::dims`] indices) passed after the pointers, one
    /// `int` parameter each, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub size_args: Vec<usize>,
    /// Per argument (in [`KernelLaunch::args`] order), the alignment in bytes the kernel needs of
    /// its device pointer: the widest vector it moves at an address `base + offset` whose offset
    /// is a multiple of that vector (16 for a tile copied in 16-byte `cp.async` vectors, 8 or 4 for
    /// narrower ones, the element size for element loads and stores). The run time checks it
    /// before launching ([`crate::check_pointers`]). Empty in plans written before it was
    /// recorded: then every argument needs [`UNRECORDED_ARG_ALIGN`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arg_align: Vec<usize>,
    /// The kernel begins by waiting for the kernel launched before it (`griddepcontrol.wait`),
    /// so the run time may launch it with programmatic dependent launch on sm_90 (it is then
    /// scheduled while that kernel drains; its wait returns once that kernel has completed and
    /// its writes are visible). `false` in plans written before it was recorded: such kernels
    /// are launched plainly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waits_for_previous: bool,
}

impl KernelLaunch {
    /// The alignment in bytes argument `j` needs ([`KernelLaunch::arg_align`], or
    /// [`UNRECORDED_ARG_ALIGN`] when the plan does not record it).
    pub fn align_of_arg(&self, j: usize) -> usize {
        self.arg_align.get(j).copied().unwrap_or(UNRECORDED_ARG_ALIGN)
    }

    /// The launch configuration: the grid, `threads` along x, the dynamic shared memory. An
    /// extent that does not fit in `u32` is an error naming the kernel.
    pub fn config(&self) -> Result<LaunchConfig, RuntimeError> {
        self.config_with(self.grid)
    }

    /// The launch configuration at the sizes `sizes` of the plan's runtime-sized dims (one per
    /// dim, already checked against the ranges): the grid axes of [`KernelLaunch::grid_dims`]
    /// get `ceil(n / tile)` blocks.
    pub fn config_at(&self, sizes: &[usize]) -> Result<LaunchConfig, RuntimeError> {
        let mut grid = self.grid;
        for (a, g) in self.grid_dims.iter().enumerate().take(3) {
            if let Some(g) = g {
                grid[a] = sizes.get(g.dim).copied().unwrap_or(0).div_ceil(g.tile.max(1));
            }
        }
        self.config_with(grid)
    }

    fn config_with(&self, grid: [usize; 3]) -> Result<LaunchConfig, RuntimeError> {
        let fit = |v: usize, what: &str| {
            u32::try_from(v).map_err(|_| RuntimeError::Plan {
                program: self.name.clone(),
                reason: format!("expected {what} to fit in 32 bits, found {v}"),
            })
        };
        Ok(LaunchConfig::new(
            (fit(grid[0], "grid.x")?, fit(grid[1], "grid.y")?, fit(grid[2], "grid.z")?),
            (fit(self.threads, "threads")?, 1, 1),
            fit(self.smem_bytes, "the dynamic shared memory")?,
        ))
    }
}

/// Everything needed to run a generated µGraph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchPlan {
    /// [`PLAN_VERSION`].
    pub version: u32,
    /// The program's name.
    pub name: String,
    /// The `fingerprint_hash` of the `#[mugraph]` program the plan was built for (16 hex
    /// digits); empty for plans not built from a `#[mugraph]` function.
    #[serde(default)]
    pub fingerprint: String,
    /// The names of the program's parameters, in order (may be empty: then inputs are named
    /// `input 0`, `input 1`, ... in errors).
    #[serde(default)]
    pub input_names: Vec<String>,
    /// The program's inputs, in parameter order.
    pub inputs: Vec<TensorDesc>,
    /// The program's outputs, in order (row-major).
    pub outputs: Vec<TensorDesc>,
    /// Intermediate buffers.
    pub buffers: Vec<Buffer>,
    /// The launches, in order.
    pub kernels: Vec<KernelLaunch>,
    /// How the µGraph was chosen, as text: the superoptimizer's report (the chosen µGraph, the
    /// top candidates with their estimated costs, the search statistics or cache file), when the
    /// plan was built by `mirage::build`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_report: Option<String>,
    /// The program's runtime-sized dims (none: every shape is fixed). The plan's shapes are
    /// written at the compile size, every such dim at its upper bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<PlanDim>,
    /// Per input, per dim: the runtime-sized dim sizing it (empty when the plan has no dims).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_dims: Vec<Vec<Option<usize>>>,
    /// Per output, per dim: the runtime-sized dim sizing it (empty when the plan has no dims).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_dims: Vec<Vec<Option<usize>>>,
}

/// `desc` with the dims `marks` names set to their `sizes` (row-major strides recomputed when
/// any changed).
fn desc_at(desc: &TensorDesc, marks: Option<&Vec<Option<usize>>>, sizes: &[usize]) -> TensorDesc {
    let Some(marks) = marks.filter(|m| m.iter().any(Option::is_some)) else { return desc.clone() };
    let shape: Vec<usize> =
        desc.shape.iter().zip(marks).map(|(&n, m)| m.and_then(|v| sizes.get(v).copied()).unwrap_or(n)).collect();
    TensorDesc::new(&shape, desc.dtype)
}

impl LaunchPlan {
    /// Parses a plan written by `mirage`'s code generator and checks it ([`LaunchPlan::validate`]).
    pub fn from_json(json: &str) -> Result<LaunchPlan, RuntimeError> {
        let plan: LaunchPlan = serde_json::from_str(json).map_err(|e| RuntimeError::Plan {
            program: "<unparsed>".to_owned(),
            reason: format!("expected a launch plan in JSON, found invalid JSON: {e}"),
        })?;
        plan.validate()?;
        Ok(plan)
    }

    /// The plan as JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings, integers and vectors cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The name of input `i` in error messages: its parameter name, or `input i`.
    pub fn input_name(&self, i: usize) -> String {
        self.input_names.get(i).cloned().unwrap_or_else(|| format!("input {i}"))
    }

    /// The sizes of the runtime-sized dims read from the tensors `found` for the inputs (pure):
    /// every use of a dim must give the same size, within its range. The error names the dim,
    /// the parameter and the sizes found. Empty for a plan without such dims; a tensor whose rank
    /// differs from its parameter's is left to [`crate::program::check_tensors`] to report.
    pub fn sizes_of(&self, found: &[TensorDesc]) -> Result<Vec<usize>, RuntimeError> {
        let mut sizes: Vec<Option<(usize, String)>> = vec![None; self.dims.len()];
        for (i, (marks, got)) in self.input_dims.iter().zip(found).enumerate() {
            if got.shape.len() != marks.len() {
                continue;
            }
            for (axis, (m, &n)) in marks.iter().zip(&got.shape).enumerate() {
                let Some(v) = *m else { continue };
                let Some(dim) = self.dims.get(v) else { continue };
                let here = format!("{} dim {axis}", self.input_name(i));
                let fail = |expected: String| {
                    Err(RuntimeError::Argument {
                        program: self.name.clone(),
                        param: self.input_name(i),
                        expected,
                        found: format!("{} = {n} (dim {axis} of shape {:?})", dim.name, got.shape),
                    })
                };
                if n < dim.lo || n > dim.hi {
                    return fail(format!("{} in {}..={}", dim.name, dim.lo, dim.hi));
                }
                match &sizes[v] {
                    Some((first, at)) if *first != n => {
                        return fail(format!("{} = {first} (the size {at} gave it)", dim.name));
                    }
                    Some(_) => {}
                    None => sizes[v] = Some((n, here)),
                }
            }
        }
        sizes
            .into_iter()
            .zip(&self.dims)
            .map(|(s, d)| {
                s.map(|(n, _)| n).ok_or_else(|| RuntimeError::Plan {
                    program: self.name.clone(),
                    reason: format!("expected an input sized by {}, found none (or none of the right rank)", d.name),
                })
            })
            .collect()
    }

    /// The inputs at `sizes` of the runtime-sized dims.
    pub fn inputs_at(&self, sizes: &[usize]) -> Vec<TensorDesc> {
        self.inputs.iter().enumerate().map(|(i, d)| desc_at(d, self.input_dims.get(i), sizes)).collect()
    }

    /// The outputs at `sizes` of the runtime-sized dims.
    pub fn outputs_at(&self, sizes: &[usize]) -> Vec<TensorDesc> {
        self.outputs.iter().enumerate().map(|(i, d)| desc_at(d, self.output_dims.get(i), sizes)).collect()
    }

    /// The intermediate buffers at `sizes` of the runtime-sized dims (each lies at the start of
    /// its place in a workspace laid out for the upper bounds).
    pub fn buffers_at(&self, sizes: &[usize]) -> Vec<TensorDesc> {
        self.buffers.iter().map(|b| desc_at(&b.desc, Some(&b.dims), sizes)).collect()
    }

    /// Checks the runtime-sized dims of a plan: non-empty ranges, one annotation per dim of
    /// every input, output and buffer that names a declared dim at its upper bound, row-major
    /// tensors wherever a dim is runtime-sized, grid and size arguments naming declared dims.
    fn validate_dims(&self) -> Result<(), String> {
        for d in &self.dims {
            if d.lo == 0 || d.lo > d.hi {
                return Err(format!(
                    "expected a non-empty range of sizes from 1 for {}, found {}..={}",
                    d.name, d.lo, d.hi
                ));
            }
        }
        let lists = [("input", &self.input_dims, &self.inputs), ("output", &self.output_dims, &self.outputs)];
        for (what, marks, descs) in lists {
            if self.dims.is_empty() && marks.is_empty() {
                continue;
            }
            if marks.len() != descs.len() {
                return Err(format!("expected {} {what} dim annotations, found {}", descs.len(), marks.len()));
            }
        }
        let buffers: Vec<(&Vec<Option<usize>>, &TensorDesc)> =
            self.buffers.iter().filter(|b| !b.dims.is_empty()).map(|b| (&b.dims, &b.desc)).collect();
        let all =
            self.input_dims.iter().zip(&self.inputs).chain(self.output_dims.iter().zip(&self.outputs)).chain(buffers);
        for (marks, desc) in all {
            if marks.len() != desc.shape.len() {
                return Err(format!("expected one dim annotation per dim of {desc}, found {}", marks.len()));
            }
            for (&n, m) in desc.shape.iter().zip(marks) {
                let Some(v) = m else { continue };
                match self.dims.get(*v) {
                    None => return Err(format!("expected dims below {}, found dim {v}", self.dims.len())),
                    Some(d) if d.hi != n => {
                        return Err(format!(
                            "expected {desc} to be written with {} at its upper bound {}",
                            d.name, d.hi
                        ));
                    }
                    Some(_) => {}
                }
            }
            if marks.iter().any(Option::is_some) && !desc.is_row_major() {
                return Err(format!("expected a row-major tensor where a dim is runtime-sized, found {desc}"));
            }
        }
        for k in &self.kernels {
            if !k.grid_dims.is_empty() && k.grid_dims.len() != 3 {
                return Err(format!("kernel `{}`: expected 3 grid dims, found {}", k.name, k.grid_dims.len()));
            }
            let used = k.grid_dims.iter().flatten().map(|g| g.dim).chain(k.size_args.iter().copied());
            if let Some(v) = used.into_iter().find(|&v| v >= self.dims.len()) {
                return Err(format!("kernel `{}`: expected dims below {}, found dim {v}", k.name, self.dims.len()));
            }
            if k.grid_dims.iter().flatten().any(|g| g.tile == 0) {
                return Err(format!("kernel `{}`: expected grid tiles of at least 1", k.name));
            }
        }
        Ok(())
    }

    /// Checks the recorded alignments: one per argument (or none), each a power of two up to
    /// [`MAX_ARG_ALIGN`].
    fn validate_align(&self) -> Result<(), String> {
        for k in &self.kernels {
            if k.arg_align.is_empty() {
                continue;
            }
            if k.arg_align.len() != k.args.len() {
                return Err(format!(
                    "kernel `{}`: expected one pointer alignment per argument ({}), found {}",
                    k.name,
                    k.args.len(),
                    k.arg_align.len()
                ));
            }
            if let Some(a) = k.arg_align.iter().find(|a| !a.is_power_of_two() || **a > MAX_ARG_ALIGN) {
                return Err(format!(
                    "kernel `{}`: expected pointer alignments that are powers of two up to {MAX_ARG_ALIGN} bytes, found {a}",
                    k.name
                ));
            }
        }
        Ok(())
    }

    /// Checks the plan's internal consistency (pure): the version, every argument index in
    /// range, ranks 1 to 4, strides as many as dims, outputs and buffers row-major, every
    /// output written by some kernel.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        let fail = |reason: String| Err(RuntimeError::Plan { program: self.name.clone(), reason });
        if self.version != PLAN_VERSION {
            return fail(format!(
                "expected plan format version {PLAN_VERSION}, found {} (rebuild with this version of mirage)",
                self.version
            ));
        }
        if !self.input_names.is_empty() && self.input_names.len() != self.inputs.len() {
            return fail(format!(
                "expected {} input names (one per input), found {}",
                self.inputs.len(),
                self.input_names.len()
            ));
        }
        let all = self
            .inputs
            .iter()
            .map(|t| ("input", t))
            .chain(self.outputs.iter().map(|t| ("output", t)))
            .chain(self.buffers.iter().map(|b| ("buffer", &b.desc)));
        for (what, t) in all {
            if t.shape.is_empty() || t.shape.len() > 4 || t.shape.contains(&0) {
                return fail(format!("expected {what} shapes of rank 1 to 4 without empty dims, found {:?}", t.shape));
            }
            if t.strides.len() != t.shape.len() {
                return fail(format!(
                    "expected one stride per dim for {what} shape {:?}, found {:?}",
                    t.shape, t.strides
                ));
            }
            if what != "input" && !t.is_row_major() {
                return fail(format!("expected a row-major {what}, found {t}"));
            }
        }
        if let Err(reason) = self.validate_dims().and_then(|()| self.validate_align()) {
            return fail(reason);
        }
        let mut written = vec![false; self.outputs.len()];
        for k in &self.kernels {
            for a in &k.args {
                let (what, i, n) = match *a {
                    ArgRef::Input(i) => ("input", i, self.inputs.len()),
                    ArgRef::Output(i) => {
                        if let Some(w) = written.get_mut(i) {
                            *w = true;
                        }
                        ("output", i, self.outputs.len())
                    }
                    ArgRef::Buffer(i) => ("buffer", i, self.buffers.len()),
                };
                if i >= n {
                    return fail(format!("kernel `{}`: expected {what} index below {n}, found {i}", k.name));
                }
            }
            k.config()?;
        }
        if let Some(o) = written.iter().position(|w| !w) {
            return fail(format!("expected every output to be written by a kernel, found output {o} written by none"));
        }
        Ok(())
    }
}

/// Plans for the crate's unit tests, the fields no test varies at their usual values.
#[cfg(test)]
pub(crate) mod test_plans {
    use super::*;

    /// A launch of kernel `name` on `args` with the recorded alignments `arg_align` (empty: an
    /// old plan's), one block of 128 threads, no dynamic shared memory, a fixed grid.
    pub(crate) fn kernel(name: &str, args: Vec<ArgRef>, arg_align: Vec<usize>) -> KernelLaunch {
        KernelLaunch {
            name: name.into(),
            grid: [1, 1, 1],
            threads: 128,
            smem_bytes: 0,
            args,
            grid_dims: vec![],
            size_args: vec![],
            arg_align,
            waits_for_previous: false,
        }
    }

    /// Plan `p` of the named `inputs`, `outputs`, intermediate `buffers` and `kernels`: every
    /// shape fixed, no fingerprint, no search report.
    pub(crate) fn plan(
        inputs: &[(&str, TensorDesc)],
        outputs: Vec<TensorDesc>,
        buffers: Vec<TensorDesc>,
        kernels: Vec<KernelLaunch>,
    ) -> LaunchPlan {
        LaunchPlan {
            version: PLAN_VERSION,
            name: "p".into(),
            fingerprint: String::new(),
            input_names: inputs.iter().map(|(n, _)| (*n).to_owned()).collect(),
            inputs: inputs.iter().map(|(_, d)| d.clone()).collect(),
            outputs,
            buffers: buffers.into_iter().map(|desc| Buffer { desc, dims: vec![] }).collect(),
            kernels,
            search_report: None,
            dims: vec![],
            input_dims: vec![],
            output_dims: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mirage_core::DType;

    fn plan() -> LaunchPlan {
        let mut p = test_plans::plan(
            &[("x", TensorDesc { shape: vec![4, 8], strides: vec![1, 4], dtype: DType::Bf16 })],
            vec![TensorDesc::new(&[4, 8], DType::F32)],
            vec![TensorDesc::new(&[4, 1], DType::F16)],
            vec![
                test_plans::kernel("p_k0", vec![ArgRef::Input(0), ArgRef::Buffer(0)], vec![16, 2]),
                test_plans::kernel("p_k1", vec![ArgRef::Input(0), ArgRef::Buffer(0), ArgRef::Output(0)], vec![]),
            ],
        );
        p.fingerprint = "0123456789abcdef".into();
        p.search_report = Some("chosen µGraph (2 kernel(s))".into());
        for k in &mut p.kernels {
            k.grid = [4, 1, 1];
        }
        p.kernels[1].smem_bytes = 1024;
        p
    }

    #[test]
    fn json_round_trip() {
        let p = plan();
        let json = p.to_json();
        assert!(json.contains("\"bf16\""), "{json}");
        assert!(json.contains("\"fingerprint\": \"0123456789abcdef\""), "{json}");
        assert_eq!(LaunchPlan::from_json(&json).expect("valid"), p);
    }

    #[test]
    fn old_plans_without_fingerprint_parse() {
        let mut p = plan();
        p.fingerprint.clear();
        p.input_names.clear();
        let json =
            serde_json::to_string(&p).expect("serializes").replace(",\"fingerprint\":\"\",\"input_names\":[]", "");
        assert!(!json.contains("fingerprint"), "{json}");
        assert_eq!(LaunchPlan::from_json(&json).expect("valid"), p);
        assert_eq!(p.input_name(0), "input 0");
    }

    #[test]
    fn inconsistent_plans_rejected() {
        let mut p = plan();
        p.kernels[1].args[2] = ArgRef::Output(3);
        let e = p.validate().expect_err("bad index");
        assert!(e.to_string().contains("expected output index below 1, found 3"), "{e}");

        let mut p = plan();
        p.kernels[1].args.pop();
        let e = p.validate().expect_err("unwritten output");
        assert!(e.to_string().contains("output 0 written by none"), "{e}");

        let mut p = plan();
        p.version = 7;
        assert!(p.validate().expect_err("version").to_string().contains("found 7"));

        let mut p = plan();
        p.outputs[0].strides = vec![1, 4];
        assert!(p.validate().expect_err("strided output").to_string().contains("row-major output"));

        let mut p = plan();
        p.kernels[0].grid[0] = usize::MAX;
        assert!(p.validate().expect_err("grid").to_string().contains("grid.x"));

        assert!(LaunchPlan::from_json("{").expect_err("json").to_string().contains("invalid JSON"));
    }

    /// `y[B, 16] = f(x[B, 32], h[B, 32])` through a buffer `[B, 16]`, `B = 1..=64`, the grid's x
    /// axis in blocks of 16 rows.
    fn sized_plan() -> LaunchPlan {
        let mut p = plan();
        p.input_names = vec!["x".into(), "h".into()];
        p.inputs = vec![TensorDesc::new(&[64, 32], DType::F16), TensorDesc::new(&[64, 32], DType::F16)];
        p.outputs = vec![TensorDesc::new(&[64, 16], DType::F16)];
        p.buffers = vec![Buffer { desc: TensorDesc::new(&[64, 16], DType::F32), dims: vec![Some(0), None] }];
        p.dims = vec![PlanDim { name: "B".into(), lo: 1, hi: 64 }];
        p.input_dims = vec![vec![Some(0), None], vec![Some(0), None]];
        p.output_dims = vec![vec![Some(0), None]];
        for k in &mut p.kernels {
            k.grid = [4, 1, 1];
            k.grid_dims = vec![Some(GridDim { dim: 0, tile: 16 }), None, None];
            k.size_args = vec![0];
            k.arg_align.clear();
        }
        p.kernels[0].args = vec![ArgRef::Input(0), ArgRef::Input(1), ArgRef::Buffer(0)];
        p.kernels[1].args = vec![ArgRef::Buffer(0), ArgRef::Output(0)];
        p
    }

    #[test]
    fn runtime_sized_dims_follow_the_tensors() {
        let p = sized_plan();
        assert_eq!(LaunchPlan::from_json(&p.to_json()).expect("valid"), p);
        let found = [TensorDesc::new(&[17, 32], DType::F16), TensorDesc::new(&[17, 32], DType::F16)];
        let sizes = p.sizes_of(&found).expect("consistent");
        assert_eq!(sizes, vec![17]);
        assert_eq!(p.inputs_at(&sizes), found.to_vec());
        assert_eq!(p.outputs_at(&sizes), vec![TensorDesc::new(&[17, 16], DType::F16)]);
        assert_eq!(p.buffers_at(&sizes), vec![TensorDesc::new(&[17, 16], DType::F32)]);
        assert_eq!(p.kernels[0].config_at(&sizes).expect("fits"), LaunchConfig::new((2, 1, 1), (128, 1, 1), 0));
        assert_eq!(p.kernels[0].config_at(&[64]).expect("fits"), p.kernels[0].config().expect("fits"));
        // A static plan has no sizes and its shapes as written.
        assert_eq!(plan().sizes_of(&[TensorDesc::new(&[4, 8], DType::Bf16)]).expect("static"), Vec::<usize>::new());
    }

    #[test]
    fn wrong_sizes_are_errors_naming_the_dim_the_parameter_and_the_sizes() {
        let p = sized_plan();
        let t = |rows: usize| TensorDesc::new(&[rows, 32], DType::F16);
        let e = p.sizes_of(&[t(65), t(65)]).expect_err("past the range").to_string();
        assert!(e.contains("parameter `x`"), "{e}");
        assert!(e.contains("B in 1..=64") && e.contains("B = 65"), "{e}");
        let e = p.sizes_of(&[t(17), t(5)]).expect_err("two sizes of B").to_string();
        assert!(e.contains("parameter `h`") && e.contains("B = 17 (the size x dim 0 gave it)"), "{e}");
        assert!(e.contains("found B = 5 (dim 0 of shape [5, 32])"), "{e}");
        // Through the launcher's check: the same error, and a wrong rank named before sizes.
        let e = crate::program::check_tensors_sized(&p, &[t(17), t(5)]).expect_err("two sizes").to_string();
        assert!(e.contains("parameter `h`"), "{e}");
        let e = crate::program::check_tensors_sized(&p, &[TensorDesc::new(&[17], DType::F16), t(17)]);
        assert!(e.expect_err("rank").to_string().contains("shape [64, 32]"));
        assert_eq!(crate::program::check_tensors_sized(&p, &[t(3), t(3)]).expect("consistent"), vec![3]);
        let e = p.sizes_of(&[TensorDesc::new(&[17], DType::F16), TensorDesc::new(&[3], DType::F16)]);
        assert!(e.expect_err("no input of the right rank").to_string().contains("expected an input sized by B"));
    }

    #[test]
    fn inconsistent_runtime_sized_plans_rejected() {
        let mut p = sized_plan();
        p.dims[0].lo = 65;
        assert!(p.validate().expect_err("empty range").to_string().contains("non-empty range"));
        let mut p = sized_plan();
        p.inputs[0] = TensorDesc::new(&[32, 32], DType::F16);
        assert!(p.validate().expect_err("not at hi").to_string().contains("upper bound 64"));
        let mut p = sized_plan();
        p.input_dims.pop();
        assert!(p.validate().expect_err("annotations").to_string().contains("input dim annotations"));
        let mut p = sized_plan();
        p.kernels[1].size_args = vec![3];
        assert!(p.validate().expect_err("unknown dim").to_string().contains("found dim 3"));
        let mut p = sized_plan();
        p.inputs[1] = TensorDesc { shape: vec![64, 32], strides: vec![1, 64], dtype: DType::F16 };
        assert!(p.validate().expect_err("strided").to_string().contains("row-major tensor"));
    }

    #[test]
    fn pointer_alignments_are_recorded_per_argument_and_default_for_old_plans() {
        let p = plan();
        let json = p.to_json();
        assert!(json.contains("\"arg_align\""), "{json}");
        let back = LaunchPlan::from_json(&json).expect("valid");
        assert_eq!(back.kernels[0].arg_align, vec![16, 2]);
        assert_eq!((back.kernels[0].align_of_arg(0), back.kernels[0].align_of_arg(1)), (16, 2));
        // The second kernel's plan predates the field: every argument needs 16 bytes.
        assert!(back.kernels[1].arg_align.is_empty());
        assert_eq!(back.kernels[1].align_of_arg(2), UNRECORDED_ARG_ALIGN);
        assert_eq!(UNRECORDED_ARG_ALIGN, 16);

        let mut bad = plan();
        bad.kernels[0].arg_align = vec![16];
        let e = bad.validate().expect_err("one short").to_string();
        assert!(e.contains("kernel `p_k0`: expected one pointer alignment per argument (2), found 1"), "{e}");
        bad.kernels[0].arg_align = vec![16, 6];
        let e = bad.validate().expect_err("not a power of two").to_string();
        assert!(e.contains("powers of two up to 256 bytes, found 6"), "{e}");
        bad.kernels[0].arg_align = vec![512, 2];
        assert!(bad.validate().expect_err("too large").to_string().contains("found 512"));
    }

    #[test]
    fn launch_config_from_plan() {
        let cfg = plan().kernels[1].config().expect("fits");
        assert_eq!(cfg, LaunchConfig::new((4, 1, 1), (128, 1, 1), 1024));
    }
}
