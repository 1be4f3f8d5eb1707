//! Launch plans: which kernels of a cubin run in which order on which buffers (DESIGN §2, §11).
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

use crate::error::RuntimeError;
use crate::kernel::LaunchConfig;

/// Version of the plan format; [`LaunchPlan::from_json`] rejects other versions.
pub const PLAN_VERSION: u32 = 1;

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
    /// Shape, row-major strides and element type.
    pub desc: TensorDesc,
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
}

impl KernelLaunch {
    /// The launch configuration: the grid, `threads` along x, the dynamic shared memory. An
    /// extent that does not fit in `u32` is an error naming the kernel.
    pub fn config(&self) -> Result<LaunchConfig, RuntimeError> {
        let fit = |v: usize, what: &str| {
            u32::try_from(v).map_err(|_| RuntimeError::Plan {
                program: self.name.clone(),
                reason: format!("expected {what} to fit in 32 bits, found {v}"),
            })
        };
        Ok(LaunchConfig::new(
            (fit(self.grid[0], "grid.x")?, fit(self.grid[1], "grid.y")?, fit(self.grid[2], "grid.z")?),
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

#[cfg(test)]
mod tests {
    use super::*;
    use mirage_core::DType;

    fn plan() -> LaunchPlan {
        LaunchPlan {
            version: PLAN_VERSION,
            name: "p".into(),
            fingerprint: "0123456789abcdef".into(),
            input_names: vec!["x".into()],
            inputs: vec![TensorDesc { shape: vec![4, 8], strides: vec![1, 4], dtype: DType::Bf16 }],
            outputs: vec![TensorDesc::new(&[4, 8], DType::F32)],
            buffers: vec![Buffer { desc: TensorDesc::new(&[4, 1], DType::F16) }],
            kernels: vec![
                KernelLaunch {
                    name: "p_k0".into(),
                    grid: [4, 1, 1],
                    threads: 128,
                    smem_bytes: 0,
                    args: vec![ArgRef::Input(0), ArgRef::Buffer(0)],
                },
                KernelLaunch {
                    name: "p_k1".into(),
                    grid: [4, 1, 1],
                    threads: 128,
                    smem_bytes: 1024,
                    args: vec![ArgRef::Input(0), ArgRef::Buffer(0), ArgRef::Output(0)],
                },
            ],
            search_report: Some("chosen µGraph (2 kernel(s))".into()),
        }
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

    #[test]
    fn launch_config_from_plan() {
        let cfg = plan().kernels[1].config().expect("fits");
        assert_eq!(cfg, LaunchConfig::new((4, 1, 1), (128, 1, 1), 1024));
    }
}
