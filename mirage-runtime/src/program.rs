//! The executor of built `#[mugraph]` programs: [`Program`] holds a cubin and its
//! [`LaunchPlan`], checks the caller's tensors against the plan, allocates outputs and
//! intermediate buffers and launches every kernel in order on a stream.
//!
//! Tensors of mixed element types pass through [`TensorArg`] (borrowed) and [`AnyTensor`]
//! (owned), enums over the four element types.
//!
//! ```no_run
//! use mirage_runtime::{AnyTensor, Gpu, Program, ProgramArtifacts, RuntimeError, TensorArg};
//! use mirage_runtime::half::f16;
//!
//! // What `#[mugraph]` generates (the bytes come from `include_bytes!` of the build artifacts).
//! static SCALE: Program = Program::new(ProgramArtifacts {
//!     name: "scale",
//!     fingerprint: "0123456789abcdef",
//!     cubin: &[],
//!     plan_json: "{}",
//!     mugraph_json: "{}",
//! });
//!
//! fn main() -> Result<(), RuntimeError> {
//!     let gpu = Gpu::new(0)?;
//!     let x = gpu.upload(&vec![f16::ONE; 8 * 16], &[8, 16])?;
//!     let outputs: Vec<AnyTensor> = SCALE.run(gpu.stream(), &[TensorArg::from(&x)])?;
//!     let y = outputs.into_iter().next().expect("one output").into_f16()?;
//!     println!("{:?}", gpu.download(&y)?);
//!     Ok(())
//! }
//! ```

use std::sync::OnceLock;

use half::{bf16, f16};

use crate::align::check_pointers;
use crate::error::RuntimeError;
use cudarc::driver::{CudaStream, SyncOnDrop};

use crate::kernel::{Kernel, Module};
use crate::plan::{ArgRef, LaunchPlan, TensorDesc};
use crate::stream::Stream;
use crate::tensor::{DeviceTensor, Element};
use crate::view::{AnyView, AnyViewMut};
use crate::workspace::{Workspace, WorkspaceLayout};
use mirage_core::DType;

/// A borrowed device tensor of any element type: an input of [`Program::run`].
#[derive(Clone, Copy, Debug)]
pub enum TensorArg<'a> {
    /// A `half::f16` tensor.
    F16(&'a DeviceTensor<f16>),
    /// A `half::bf16` tensor.
    BF16(&'a DeviceTensor<bf16>),
    /// An `f32` tensor.
    F32(&'a DeviceTensor<f32>),
    /// An `i32` tensor (indices).
    I32(&'a DeviceTensor<i32>),
}

impl<'a> From<&'a DeviceTensor<f16>> for TensorArg<'a> {
    fn from(t: &'a DeviceTensor<f16>) -> Self {
        TensorArg::F16(t)
    }
}
impl<'a> From<&'a DeviceTensor<bf16>> for TensorArg<'a> {
    fn from(t: &'a DeviceTensor<bf16>) -> Self {
        TensorArg::BF16(t)
    }
}
impl<'a> From<&'a DeviceTensor<f32>> for TensorArg<'a> {
    fn from(t: &'a DeviceTensor<f32>) -> Self {
        TensorArg::F32(t)
    }
}
impl<'a> From<&'a DeviceTensor<i32>> for TensorArg<'a> {
    fn from(t: &'a DeviceTensor<i32>) -> Self {
        TensorArg::I32(t)
    }
}

impl<'a> TensorArg<'a> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorArg::F16(_) => DType::F16,
            TensorArg::BF16(_) => DType::Bf16,
            TensorArg::F32(_) => DType::F32,
            TensorArg::I32(_) => DType::I32,
        }
    }

    /// Element type, shape and strides.
    pub fn spec(&self) -> TensorDesc {
        let layout = match self {
            TensorArg::F16(t) => t.layout(),
            TensorArg::BF16(t) => t.layout(),
            TensorArg::F32(t) => t.layout(),
            TensorArg::I32(t) => t.layout(),
        };
        layout.desc(self.dtype())
    }

    /// The tensor as a borrowed view.
    pub fn view(&self) -> AnyView<'a> {
        match *self {
            TensorArg::F16(t) => AnyView::from(t),
            TensorArg::BF16(t) => AnyView::from(t),
            TensorArg::F32(t) => AnyView::from(t),
            TensorArg::I32(t) => AnyView::from(t),
        }
    }
}

/// An owned device tensor of any element type: an output of [`Program::run`].
#[derive(Debug)]
pub enum AnyTensor {
    /// A `half::f16` tensor.
    F16(DeviceTensor<f16>),
    /// A `half::bf16` tensor.
    BF16(DeviceTensor<bf16>),
    /// An `f32` tensor.
    F32(DeviceTensor<f32>),
    /// An `i32` tensor (indices).
    I32(DeviceTensor<i32>),
}

macro_rules! any_conversions {
    ($($variant:ident $ty:ty => $into:ident, $as:ident;)*) => {$(
        impl From<DeviceTensor<$ty>> for AnyTensor {
            fn from(t: DeviceTensor<$ty>) -> Self {
                AnyTensor::$variant(t)
            }
        }

        impl TryFrom<AnyTensor> for DeviceTensor<$ty> {
            type Error = RuntimeError;
            fn try_from(t: AnyTensor) -> Result<Self, RuntimeError> {
                t.$into()
            }
        }

        impl AnyTensor {
            #[doc = concat!("The tensor as a `DeviceTensor<", stringify!($ty), ">`, or an error naming the element type it has.")]
            pub fn $into(self) -> Result<DeviceTensor<$ty>, RuntimeError> {
                match self {
                    AnyTensor::$variant(t) => Ok(t),
                    other => Err(other.type_error(<$ty as Element>::DTYPE)),
                }
            }

            #[doc = concat!("Borrows the tensor as a `DeviceTensor<", stringify!($ty), ">`, or an error naming the element type it has.")]
            pub fn $as(&self) -> Result<&DeviceTensor<$ty>, RuntimeError> {
                match self {
                    AnyTensor::$variant(t) => Ok(t),
                    other => Err(other.type_error(<$ty as Element>::DTYPE)),
                }
            }
        }
    )*};
}

any_conversions! {
    F16 f16 => into_f16, as_f16;
    BF16 bf16 => into_bf16, as_bf16;
    F32 f32 => into_f32, as_f32;
    I32 i32 => into_i32, as_i32;
}

impl AnyTensor {
    fn type_error(&self, expected: DType) -> RuntimeError {
        RuntimeError::Mismatch {
            what: "converting a tensor of any element type to a typed tensor",
            expected: format!("a {expected} tensor"),
            found: format!("a {} tensor of shape {:?}", self.dtype(), self.shape()),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.as_arg().dtype()
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            AnyTensor::F16(t) => t.shape(),
            AnyTensor::BF16(t) => t.shape(),
            AnyTensor::F32(t) => t.shape(),
            AnyTensor::I32(t) => t.shape(),
        }
    }

    /// Element type, shape and strides.
    pub fn spec(&self) -> TensorDesc {
        self.as_arg().spec()
    }

    /// Borrows the tensor as a [`TensorArg`].
    pub fn as_arg(&self) -> TensorArg<'_> {
        match self {
            AnyTensor::F16(t) => TensorArg::F16(t),
            AnyTensor::BF16(t) => TensorArg::BF16(t),
            AnyTensor::F32(t) => TensorArg::F32(t),
            AnyTensor::I32(t) => TensorArg::I32(t),
        }
    }

    /// Downloads the tensor's storage (row-major values for a row-major tensor) converted to
    /// `f32` (indices below 2^24 exactly), waiting on the stream the tensor was allocated on.
    pub fn to_host_f32(&self) -> Result<Vec<f32>, RuntimeError> {
        Ok(match self {
            AnyTensor::F16(t) => t.to_host()?.into_iter().map(f16::to_f32).collect(),
            AnyTensor::BF16(t) => t.to_host()?.into_iter().map(bf16::to_f32).collect(),
            AnyTensor::F32(t) => t.to_host()?,
            AnyTensor::I32(t) => t.to_host()?.into_iter().map(|v| v as f32).collect(),
        })
    }

    /// Uploads row-major `f32` values converted to the element type of `spec`, with the layout of
    /// `spec` (strided specs get a storage buffer of exactly the layout's size). For `i32` a value
    /// is rounded to the nearest integer (saturating) and NaN becomes `i32::MIN`, a poison no
    /// index takes.
    pub fn upload_f32(stream: &Stream, spec: &TensorDesc, values: &[f32]) -> Result<AnyTensor, RuntimeError> {
        fn storage<T: Copy>(
            spec: &TensorDesc,
            values: &[f32],
            zero: T,
            conv: impl Fn(f32) -> T,
        ) -> Result<Vec<T>, RuntimeError> {
            let layout = crate::tensor::Layout::strided(&spec.shape, &spec.strides)?;
            if values.len() != layout.num_elements() {
                return Err(RuntimeError::Length {
                    what: "host values",
                    shape: spec.shape.clone(),
                    strides: spec.strides.clone(),
                    expected: layout.num_elements(),
                    at_least: false,
                    found: values.len(),
                });
            }
            let mut out = vec![zero; layout.storage_len()];
            let rm = mirage_core::row_major_strides(&spec.shape);
            for (flat, &v) in values.iter().enumerate() {
                let off: usize = (0..spec.shape.len()).map(|d| flat / rm[d] % spec.shape[d] * spec.strides[d]).sum();
                out[off] = conv(v);
            }
            Ok(out)
        }
        Ok(match spec.dtype {
            DType::F16 => AnyTensor::F16(stream.upload_strided(
                &storage(spec, values, f16::ZERO, f16::from_f32)?,
                &spec.shape,
                &spec.strides,
            )?),
            DType::Bf16 => AnyTensor::BF16(stream.upload_strided(
                &storage(spec, values, bf16::ZERO, bf16::from_f32)?,
                &spec.shape,
                &spec.strides,
            )?),
            DType::F32 => AnyTensor::F32(stream.upload_strided(
                &storage(spec, values, 0.0, |v| v)?,
                &spec.shape,
                &spec.strides,
            )?),
            DType::I32 => AnyTensor::I32(stream.upload_strided(
                &storage(spec, values, 0, |v| if v.is_nan() { i32::MIN } else { v.round() as i32 })?,
                &spec.shape,
                &spec.strides,
            )?),
        })
    }

    /// An uninitialised row-major tensor of `spec`'s shape and element type (a plan's outputs
    /// and buffers are row-major).
    fn alloc(stream: &Stream, spec: &TensorDesc) -> Result<AnyTensor, RuntimeError> {
        // SAFETY: every bit pattern is a valid f16, bf16, f32 and i32, so reading unwritten device
        // memory is never undefined behaviour; the plan's kernels write every element of the
        // outputs and buffers before anything reads them (the code generator's contract, checked
        // on the GPU with NaN-poisoned outputs by the golden test).
        unsafe {
            Ok(match spec.dtype {
                DType::F16 => AnyTensor::F16(stream.alloc_uninit(&spec.shape)?),
                DType::Bf16 => AnyTensor::BF16(stream.alloc_uninit(&spec.shape)?),
                DType::F32 => AnyTensor::F32(stream.alloc_uninit(&spec.shape)?),
                DType::I32 => AnyTensor::I32(stream.alloc_uninit(&spec.shape)?),
            })
        }
    }

    /// The tensor as a borrowed view a launch writes.
    pub fn view_mut(&mut self) -> AnyViewMut<'_> {
        match self {
            AnyTensor::F16(t) => AnyViewMut::from(t),
            AnyTensor::BF16(t) => AnyViewMut::from(t),
            AnyTensor::F32(t) => AnyViewMut::from(t),
            AnyTensor::I32(t) => AnyViewMut::from(t),
        }
    }
}

/// The build artifacts of one program, as `&'static` data (from `include_bytes!` and
/// `include_str!` in generated code).
#[derive(Clone, Copy, Debug)]
pub struct ProgramArtifacts {
    /// The program's name (the `#[mugraph]` function's name).
    pub name: &'static str,
    /// The `fingerprint_hash` of the `#[mugraph]` program (16 hex digits); the plan must record
    /// the same one. Empty to skip the check.
    pub fingerprint: &'static str,
    /// The cubin holding every kernel of the plan.
    pub cubin: &'static [u8],
    /// The launch plan as JSON ([`LaunchPlan::from_json`]).
    pub plan_json: &'static str,
    /// The chosen µGraph as JSON, for inspection (mirage's `KernelGraph::from_json` reads it).
    pub mugraph_json: &'static str,
}

/// One size bucket of a program with runtime-sized dims built as several specializations
/// ([`Program::bucketed`]): the sub-range of every dim it covers and its own program, built at
/// the sub-ranges' upper bounds.
#[derive(Debug)]
pub struct Bucket {
    /// Per runtime-sized dim (in declaration order), the smallest and largest size it covers.
    pub ranges: &'static [(usize, usize)],
    /// The bucket's program (its plan's dims are these sub-ranges).
    pub program: Program,
}

impl Bucket {
    /// Whether every size of `sizes` (one per dim) lies in this bucket's range of its dim.
    pub fn contains(&self, sizes: &[usize]) -> bool {
        self.ranges.len() == sizes.len() && self.ranges.iter().zip(sizes).all(|(&(lo, hi), &n)| lo <= n && n <= hi)
    }
}

/// A built program: a cubin and its launch plan, loaded on first use and run on any stream of
/// the device it was first used on.
///
/// A program with runtime-sized dims may be built as size buckets ([`Program::bucketed`]): each
/// call then reads the sizes from the tensors, checks them against the declared ranges (before
/// any CUDA call) and runs the bucket holding them ([`Program::bucket_of`] tells which).
///
/// Put it in a `static` (`Program::new` is a `const fn`): [`Program::run`] takes `&'static self`
/// because the kernels it looks up borrow the program's module. Their names are interned once per
/// program (a bounded, one-time allocation that lives as long as the program).
pub struct Program {
    artifacts: ProgramArtifacts,
    module: Module,
    plan: OnceLock<Result<LaunchPlan, RuntimeError>>,
    kernels: OnceLock<Vec<Kernel<'static>>>,
    buckets: &'static [Bucket],
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("name", &self.artifacts.name)
            .field("fingerprint", &self.artifacts.fingerprint)
            .finish()
    }
}

impl Program {
    /// A program from its build artifacts; nothing is parsed or loaded until first use.
    pub const fn new(artifacts: ProgramArtifacts) -> Program {
        Program {
            module: Module::from_cubin(artifacts.name, artifacts.cubin),
            artifacts,
            plan: OnceLock::new(),
            kernels: OnceLock::new(),
            buckets: &[],
        }
    }

    /// A program built as size buckets: `buckets` cover the declared ranges (disjoint, in
    /// order; each a program of its own), and `artifacts` name the whole program and hold the
    /// last bucket's plan and µGraph (its cubin is not used). [`Program::plan`] is that plan
    /// with the declared ranges: it describes the inputs and outputs at the upper bounds, while
    /// every launch runs the bucket holding the sizes found.
    pub const fn bucketed(artifacts: ProgramArtifacts, buckets: &'static [Bucket]) -> Program {
        Program {
            module: Module::from_cubin(artifacts.name, artifacts.cubin),
            artifacts,
            plan: OnceLock::new(),
            kernels: OnceLock::new(),
            buckets,
        }
    }

    /// The size buckets (empty for a program built once).
    pub fn buckets(&self) -> &'static [Bucket] {
        self.buckets
    }

    /// The bucket that runs at `sizes` (one per runtime-sized dim, in declaration order): its
    /// index, or `None` for a program built once. Pure: no CUDA call. Fails for sizes outside
    /// the declared ranges (the error names the dim and the range) or a plan that is invalid.
    pub fn bucket_of(&self, sizes: &[usize]) -> Result<Option<usize>, RuntimeError> {
        if self.buckets.is_empty() {
            return Ok(None);
        }
        let plan = self.plan()?;
        if sizes.len() != plan.dims.len() {
            return Err(RuntimeError::Plan {
                program: self.artifacts.name.to_owned(),
                reason: format!(
                    "expected {} sizes (one per runtime-sized dim), found {}",
                    plan.dims.len(),
                    sizes.len()
                ),
            });
        }
        for (d, &n) in plan.dims.iter().zip(sizes) {
            if n < d.lo || n > d.hi {
                return Err(RuntimeError::Plan {
                    program: self.artifacts.name.to_owned(),
                    reason: format!("expected {} in {}..={}, found {} = {n}", d.name, d.lo, d.hi, d.name),
                });
            }
        }
        match self.buckets.iter().position(|b| b.contains(sizes)) {
            Some(i) => Ok(Some(i)),
            None => Err(RuntimeError::Plan {
                program: self.artifacts.name.to_owned(),
                reason: format!(
                    "no size bucket holds the sizes {sizes:?}: the buckets do not cover the declared ranges"
                ),
            }),
        }
    }

    /// For a bucketed program, the bucket's program that runs the given inputs (their sizes
    /// checked first); `None` for a program built once.
    fn dispatch(&self, inputs: &[AnyView<'_>]) -> Result<Option<&'static Program>, RuntimeError> {
        if self.buckets.is_empty() {
            return Ok(None);
        }
        let sizes = self.check_views(self.plan()?, inputs)?;
        Ok(self.bucket_of(&sizes)?.map(|i| &self.buckets[i].program))
    }

    /// A program from a cubin and an already parsed plan (e.g. one of several plans sharing a
    /// cubin); the plan is validated now.
    pub fn with_plan(name: &'static str, cubin: &'static [u8], plan: LaunchPlan) -> Result<Program, RuntimeError> {
        plan.validate()?;
        let program = Program::new(ProgramArtifacts { name, fingerprint: "", cubin, plan_json: "", mugraph_json: "" });
        let _ = program.plan.set(Ok(plan));
        Ok(program)
    }

    /// The program's name.
    pub fn name(&self) -> &'static str {
        self.artifacts.name
    }

    /// The number of CUDA contexts its module has been loaded on (once per context, on first use;
    /// of a bucketed program: its buckets' modules, summed).
    pub fn loaded_contexts(&self) -> usize {
        self.module.loaded_contexts() + self.buckets.iter().map(|b| b.program.loaded_contexts()).sum::<usize>()
    }

    /// The program's build artifacts.
    pub fn artifacts(&self) -> &ProgramArtifacts {
        &self.artifacts
    }

    /// The chosen µGraph as JSON.
    pub fn mugraph_json(&self) -> &'static str {
        self.artifacts.mugraph_json
    }

    /// The launch plan, parsed on first use (pure: no CUDA call). Fails when the plan is invalid
    /// or was built for another version of the program (a stale artifact).
    pub fn plan(&self) -> Result<&LaunchPlan, RuntimeError> {
        let parsed = self.plan.get_or_init(|| {
            let plan = LaunchPlan::from_json(self.artifacts.plan_json).map_err(|e| match e {
                RuntimeError::Plan { reason, .. } => RuntimeError::Plan { program: self.artifacts.name.to_owned(), reason },
                other => other,
            })?;
            let expected = self.artifacts.fingerprint;
            if !expected.is_empty() && plan.fingerprint != expected {
                return Err(RuntimeError::Plan {
                    program: self.artifacts.name.to_owned(),
                    reason: format!(
                        "expected the artifact of program fingerprint {expected}, found one built for {:?}: the artifact is stale, rebuild (cargo build)",
                        plan.fingerprint
                    ),
                });
            }
            widen_to_buckets(plan, self.buckets).map_err(|reason| RuntimeError::Plan { program: self.artifacts.name.to_owned(), reason })
        });
        match parsed {
            Ok(plan) => Ok(plan),
            Err(e) => Err(RuntimeError::Plan { program: self.artifacts.name.to_owned(), reason: plan_error_reason(e) }),
        }
    }

    /// Checks tensors (element type, shape, strides) against the plan's inputs (pure: no CUDA
    /// call). The error names the parameter, what it needs and what was given.
    pub fn check_inputs(&self, found: &[TensorDesc]) -> Result<(), RuntimeError> {
        check_tensors(self.plan()?, found)
    }

    /// Runs the program on `stream`: checks the inputs, allocates the outputs and a workspace for
    /// the intermediate buffers, and queues every kernel in order. Asynchronous like any launch:
    /// the outputs are ready once the stream reaches this point (downloads on the stream wait for
    /// it).
    pub fn run(&'static self, stream: &Stream, inputs: &[TensorArg<'_>]) -> Result<Vec<AnyTensor>, RuntimeError> {
        let views: Vec<AnyView<'_>> = inputs.iter().map(TensorArg::view).collect();
        self.run_views(stream, &views)
    }

    /// [`Program::run`] on borrowed views (of our tensors or of a caller's cudarc buffers).
    pub fn run_views(&'static self, stream: &Stream, inputs: &[AnyView<'_>]) -> Result<Vec<AnyTensor>, RuntimeError> {
        if let Some(bucket) = self.dispatch(inputs)? {
            return bucket.run_views(stream, inputs);
        }
        let plan = self.plan()?;
        let sizes = self.check_views(plan, inputs)?;
        let mut outputs =
            plan.outputs_at(&sizes).iter().map(|s| AnyTensor::alloc(stream, s)).collect::<Result<Vec<_>, _>>()?;
        let mut workspace = self.workspace(stream)?;
        let mut views: Vec<AnyViewMut<'_>> = outputs.iter_mut().map(AnyTensor::view_mut).collect();
        self.launch_views(stream, inputs, &mut views, &mut workspace)?;
        drop(views);
        Ok(outputs)
    }

    /// [`Program::run_views`] for a program with `N` outputs, returned as an array (what
    /// `#[mugraph]` launchers use).
    pub fn run_exact<const N: usize>(
        &'static self,
        stream: &Stream,
        inputs: &[AnyView<'_>],
    ) -> Result<[AnyTensor; N], RuntimeError> {
        let plan = self.plan()?;
        if plan.outputs.len() != N {
            return Err(RuntimeError::Plan {
                program: self.artifacts.name.to_owned(),
                reason: format!(
                    "expected {N} outputs (the function's signature), found {} in the plan",
                    plan.outputs.len()
                ),
            });
        }
        let outputs = self.run_views(stream, inputs)?;
        let found = outputs.len();
        outputs.try_into().map_err(|_| RuntimeError::Plan {
            program: self.artifacts.name.to_owned(),
            reason: format!("expected {N} outputs, found {found}"),
        })
    }

    /// Runs the program into caller-allocated outputs (checked against the plan), allocating a
    /// workspace; useful to time launches without output allocations, or to poison outputs.
    pub fn run_into(
        &'static self,
        stream: &Stream,
        inputs: &[TensorArg<'_>],
        outputs: &mut [AnyTensor],
    ) -> Result<(), RuntimeError> {
        let mut workspace = self.workspace(stream)?;
        let views: Vec<AnyView<'_>> = inputs.iter().map(TensorArg::view).collect();
        let mut outs: Vec<AnyViewMut<'_>> = outputs.iter_mut().map(AnyTensor::view_mut).collect();
        self.launch_views(stream, &views, &mut outs, &mut workspace)
    }

    /// Uninitialised outputs of the plan's shapes and element types.
    pub fn alloc_outputs(&self, stream: &Stream) -> Result<Vec<AnyTensor>, RuntimeError> {
        self.plan()?.outputs.iter().map(|s| AnyTensor::alloc(stream, s)).collect()
    }

    /// Uninitialised intermediate buffers of the plan, one tensor each (for [`Program::launch`];
    /// of a bucketed program: of its last bucket, which [`Program::launch`] runs at its sizes).
    pub fn alloc_buffers(&self, stream: &Stream) -> Result<Vec<AnyTensor>, RuntimeError> {
        if let Some(last) = self.buckets.last() {
            return last.program.alloc_buffers(stream);
        }
        self.plan()?.buffers.iter().map(|b| AnyTensor::alloc(stream, &b.desc)).collect()
    }

    /// Where the plan's intermediate buffers lie in a workspace, and the bytes it needs (pure).
    /// For a bucketed program: the layout of the bucket that needs the most bytes, so that one
    /// workspace serves every bucket.
    pub fn workspace_layout(&self) -> Result<WorkspaceLayout, RuntimeError> {
        let mut largest: Option<WorkspaceLayout> = None;
        for b in self.buckets {
            let layout = b.program.workspace_layout()?;
            if largest.as_ref().is_none_or(|l| layout.bytes > l.bytes) {
                largest = Some(layout);
            }
        }
        match largest {
            Some(layout) => Ok(layout),
            None => WorkspaceLayout::of(self.plan()?),
        }
    }

    /// A workspace of exactly the size this program needs, on `stream`'s device.
    pub fn workspace(&self, stream: &Stream) -> Result<Workspace, RuntimeError> {
        Workspace::new(stream, self.workspace_layout()?.bytes)
    }

    /// Queues every kernel of the plan on `stream` with the given inputs, outputs and
    /// intermediate buffers (one tensor each), all checked against the plan first (including
    /// their pointers' alignment, as [`Program::launch_views`] does).
    pub fn launch(
        &'static self,
        stream: &Stream,
        inputs: &[TensorArg<'_>],
        outputs: &mut [AnyTensor],
        buffers: &mut [AnyTensor],
    ) -> Result<(), RuntimeError> {
        let plan = self.plan()?;
        let name = self.artifacts.name;
        let views: Vec<AnyView<'_>> = inputs.iter().map(TensorArg::view).collect();
        if let Some(bucket) = self.dispatch(&views)? {
            return bucket.launch(stream, inputs, outputs, buffers);
        }
        let sizes = self.check_views(plan, &views)?;
        let buffer_descs: Vec<TensorDesc> = buffers.iter().map(AnyTensor::spec).collect();
        check_list(name, "buffer", &plan.buffers_at(&sizes), &buffer_descs)?;
        let mut outs: Vec<AnyViewMut<'_>> = outputs.iter_mut().map(AnyTensor::view_mut).collect();
        let mut bufs: Vec<AnyViewMut<'_>> = buffers.iter_mut().map(AnyTensor::view_mut).collect();
        let output_descs: Vec<TensorDesc> = outs.iter().map(AnyViewMut::desc).collect();
        check_list(name, "output", &plan.outputs_at(&sizes), &output_descs)?;
        let raw = stream.raw();
        let mut guards = Vec::new();
        let input_ptrs = read_ptrs(&views, raw, &mut guards);
        let output_ptrs = write_ptrs(&mut outs, raw, &mut guards);
        let buffer_ptrs = write_ptrs(&mut bufs, raw, &mut guards);
        let launched = self.launch_ptrs(stream, plan, &sizes, [&input_ptrs, &output_ptrs, &buffer_ptrs]);
        drop(guards);
        launched
    }

    /// Queues every kernel of the plan on `stream`, reading `inputs`, writing `outputs` and
    /// keeping the intermediate buffers in `workspace`; everything is checked against the plan
    /// first (element types, shapes, strides, the workspace's size, and every device pointer's
    /// alignment: each must be a multiple of what the kernels need of it, up to 16 bytes for an
    /// input they copy in 16-byte vectors, [`check_pointers`]; the error names the parameter).
    /// No kernel runs when a check fails. Allocates nothing on the device, so it can be captured
    /// in a CUDA graph.
    pub fn launch_views(
        &'static self,
        stream: &Stream,
        inputs: &[AnyView<'_>],
        outputs: &mut [AnyViewMut<'_>],
        workspace: &mut Workspace,
    ) -> Result<(), RuntimeError> {
        if let Some(bucket) = self.dispatch(inputs)? {
            return bucket.launch_views(stream, inputs, outputs, workspace);
        }
        let plan = self.plan()?;
        let name = self.artifacts.name;
        let sizes = self.check_views(plan, inputs)?;
        let output_descs: Vec<TensorDesc> = outputs.iter().map(AnyViewMut::desc).collect();
        check_list(name, "output", &plan.outputs_at(&sizes), &output_descs)?;
        // Laid out for the upper bounds: every buffer at a smaller size fits in its place.
        let layout = WorkspaceLayout::of(plan)?;
        layout.check(name, workspace.bytes())?;
        let raw = stream.raw();
        let mut guards = Vec::new();
        let input_ptrs = read_ptrs(inputs, raw, &mut guards);
        let output_ptrs = write_ptrs(outputs, raw, &mut guards);
        let base = workspace.write_ptr(stream).map(|(ptr, guard)| {
            guards.push(guard);
            ptr
        });
        let buffer_ptrs: Vec<u64> = layout.offsets.iter().map(|&o| base.unwrap_or(0) + o as u64).collect();
        let launched = self.launch_ptrs(stream, plan, &sizes, [&input_ptrs, &output_ptrs, &buffer_ptrs]);
        drop(guards);
        launched
    }

    /// The launch loop: every kernel of the plan with its arguments' device pointers (inputs,
    /// outputs, buffers), at `sizes` of the plan's runtime-sized dims (grid extents and the
    /// trailing `int` size parameters). First, before any kernel runs, every pointer is checked
    /// against the alignment its kernels need ([`check_pointers`]).
    fn launch_ptrs(
        &'static self,
        stream: &Stream,
        plan: &LaunchPlan,
        sizes: &[usize],
        [inputs, outputs, buffers]: [&[u64]; 3],
    ) -> Result<(), RuntimeError> {
        check_pointers(self.artifacts.name, plan, [inputs, outputs, buffers])?;
        let kernels = self.kernels(plan);
        for (i, (launch, kernel)) in plan.kernels.iter().zip(kernels).enumerate() {
            let config = launch.config_at(sizes)?;
            // Sizes were checked against the ranges (at most 2^20): they fit in an `int`.
            let size_args: Vec<i32> = launch
                .size_args
                .iter()
                .map(|&v| sizes.get(v).map_or(0, |&n| i32::try_from(n).unwrap_or(i32::MAX)))
                .collect();
            // Indices were checked by `LaunchPlan::validate`; the lists by the caller.
            let ptrs: Vec<u64> = launch
                .args
                .iter()
                .map(|a| match *a {
                    ArgRef::Input(i) => inputs.get(i).copied().unwrap_or(0),
                    ArgRef::Output(i) => outputs.get(i).copied().unwrap_or(0),
                    ArgRef::Buffer(i) => buffers.get(i).copied().unwrap_or(0),
                })
                .collect();
            let mut params: Vec<*mut std::ffi::c_void> = ptrs
                .iter()
                .map(|p| std::ptr::from_ref(p).cast_mut().cast())
                .chain(size_args.iter().map(|n| std::ptr::from_ref(n).cast_mut().cast()))
                .collect();
            // A kernel after the first that waits for the one before it may be scheduled while
            // that one drains (programmatic dependent launch on sm_90).
            let after_previous = i > 0 && launch.waits_for_previous && dependent_launch_enabled();
            // SAFETY: the plan was generated together with the cubin: its argument list is the
            // kernel's parameter list (device pointers of the element types checked by the
            // caller, in order, then the `int` sizes), every tensor has the plan's layout and
            // covers it (checked when its view was made and against the plan), every pointer has
            // the alignment the kernel's vector accesses need (checked above), the buffers lie
            // inside the workspace (its size was checked), and the kernels write only outputs and
            // buffers; a kernel marked `waits_for_previous` begins with `griddepcontrol.wait`.
            // `params` points into `ptrs` and `size_args`, alive until the launch returns.
            unsafe { kernel.launch_params(stream, config, &mut params, after_previous) }?;
        }
        Ok(())
    }

    /// Checks the inputs; returns the sizes of the runtime-sized dims they give.
    fn check_views(&self, plan: &LaunchPlan, inputs: &[AnyView<'_>]) -> Result<Vec<usize>, RuntimeError> {
        let found: Vec<TensorDesc> = inputs.iter().map(AnyView::desc).collect();
        check_tensors_sized(plan, &found)
    }

    fn kernels(&'static self, plan: &LaunchPlan) -> &'static [Kernel<'static>] {
        self.kernels.get_or_init(|| {
            plan.kernels
                .iter()
                .map(|k| {
                    // Interned once per program (see the type's documentation).
                    let name: &'static str = Box::leak(k.name.clone().into_boxed_str());
                    Kernel::new(&self.module, name)
                })
                .collect()
        })
    }
}

/// The plan of a bucketed program: its last bucket's, with every dim's range widened to the
/// declared one (from the first bucket's lower bound). Unchanged without buckets.
fn widen_to_buckets(mut plan: LaunchPlan, buckets: &[Bucket]) -> Result<LaunchPlan, String> {
    let Some(last) = buckets.last() else { return Ok(plan) };
    if plan.dims.len() != last.ranges.len() {
        return Err(format!(
            "expected the last bucket's plan to have {} runtime-sized dims, found {}",
            last.ranges.len(),
            plan.dims.len()
        ));
    }
    for (i, d) in plan.dims.iter_mut().enumerate() {
        d.lo = buckets.iter().filter_map(|b| b.ranges.get(i)).map(|r| r.0).min().unwrap_or(d.lo);
        d.hi = buckets.iter().filter_map(|b| b.ranges.get(i)).map(|r| r.1).max().unwrap_or(d.hi);
    }
    Ok(plan)
}

fn plan_error_reason(e: &RuntimeError) -> String {
    match e {
        RuntimeError::Plan { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// Checks tensors against a plan's inputs (pure): their number, then each one's element type,
/// shape and strides, in order. The error names the program, the parameter, what it needs and
/// what was given.
pub fn check_tensors(plan: &LaunchPlan, found: &[TensorDesc]) -> Result<(), RuntimeError> {
    check_tensors_sized(plan, found).map(|_| ())
}

/// [`check_tensors`] for a plan with runtime-sized dims: reads their sizes from the tensors
/// ([`LaunchPlan::sizes_of`]: one size per dim, in range) and checks every tensor against its
/// parameter at those sizes; returns the sizes (empty for a plan without such dims).
pub fn check_tensors_sized(plan: &LaunchPlan, found: &[TensorDesc]) -> Result<Vec<usize>, RuntimeError> {
    if found.len() != plan.inputs.len() {
        return Err(RuntimeError::Mismatch {
            what: "the number of tensors passed to a program",
            expected: format!(
                "{} ({})",
                plan.inputs.len(),
                (0..plan.inputs.len()).map(|i| plan.input_name(i)).collect::<Vec<_>>().join(", ")
            ),
            found: found.len().to_string(),
        });
    }
    // A tensor of the wrong rank is reported against its parameter before sizes are read.
    for (i, (want, got)) in plan.inputs.iter().zip(found).enumerate() {
        if want.shape.len() != got.shape.len() {
            check_tensor(&plan.name, &plan.input_name(i), want, got)?;
        }
    }
    let sizes = plan.sizes_of(found)?;
    for (i, (want, got)) in plan.inputs_at(&sizes).iter().zip(found).enumerate() {
        check_tensor(&plan.name, &plan.input_name(i), want, got)?;
    }
    Ok(sizes)
}

/// Checks one tensor against a parameter's spec (pure). The error names the program and the
/// parameter and says what was expected and found.
pub fn check_tensor(program: &str, param: &str, want: &TensorDesc, got: &TensorDesc) -> Result<(), RuntimeError> {
    let fail = |expected: String, found: String| {
        Err(RuntimeError::Argument { program: program.to_owned(), param: param.to_owned(), expected, found })
    };
    if want.dtype != got.dtype {
        return fail(format!("element type {}", want.dtype), format!("{}", got.dtype));
    }
    if want.shape != got.shape {
        return fail(format!("shape {:?}", want.shape), format!("shape {:?}", got.shape));
    }
    if want.strides != got.strides {
        let layout = if want.is_row_major() { " (row-major)" } else { "" };
        return fail(
            format!("strides {:?}{layout} for shape {:?}", want.strides, want.shape),
            format!("strides {:?}", got.strides),
        );
    }
    Ok(())
}

fn check_list(program: &str, what: &str, specs: &[TensorDesc], found: &[TensorDesc]) -> Result<(), RuntimeError> {
    if specs.len() != found.len() {
        return Err(RuntimeError::Plan {
            program: program.to_owned(),
            reason: format!("expected {} {what} tensors, found {}", specs.len(), found.len()),
        });
    }
    for (i, (want, got)) in specs.iter().zip(found).enumerate() {
        check_tensor(program, &format!("{what} {i}"), want, got)?;
    }
    Ok(())
}

/// The device pointers of views a launch reads on `stream`, keeping their guards.
fn read_ptrs<'s>(views: &'s [AnyView<'_>], stream: &'s CudaStream, guards: &mut Vec<SyncOnDrop<'s>>) -> Vec<u64> {
    views
        .iter()
        .map(|v| {
            let (ptr, guard) = v.read_ptr(stream);
            guards.extend(guard);
            ptr
        })
        .collect()
}

/// The device pointers of views a launch writes on `stream`, keeping their guards.
fn write_ptrs<'s>(
    views: &'s mut [AnyViewMut<'_>],
    stream: &'s CudaStream,
    guards: &mut Vec<SyncOnDrop<'s>>,
) -> Vec<u64> {
    views
        .iter_mut()
        .map(|v| {
            let (ptr, guard) = v.write_ptr(stream);
            guards.extend(guard);
            ptr
        })
        .collect()
}

/// The environment variable that turns programmatic dependent launch off (`0`): every kernel
/// of a program then starts only after the one before it has finished, as on devices older
/// than sm_90.
pub const DEPENDENT_LAUNCH_ENV: &str = "MIRAGE_DEPENDENT_LAUNCH";

/// Whether kernels after a program's first may be launched programmatically (read once from
/// [`DEPENDENT_LAUNCH_ENV`]; on unless it is `0`).
pub fn dependent_launch_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var(DEPENDENT_LAUNCH_ENV).map_or(true, |v| v.trim() != "0"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::test_plans;

    fn plan_json(fingerprint: &str) -> String {
        let mut p = test_plans::plan(
            &[
                ("x", TensorDesc::new(&[8, 64], DType::F16)),
                ("w", TensorDesc { shape: vec![64, 32], strides: vec![1, 64], dtype: DType::Bf16 }),
            ],
            vec![TensorDesc::new(&[8, 32], DType::F32)],
            vec![TensorDesc::new(&[8, 1], DType::F32)],
            vec![test_plans::kernel("p_k0", vec![ArgRef::Input(0), ArgRef::Input(1), ArgRef::Output(0)], vec![])],
        );
        p.fingerprint = fingerprint.into();
        p.to_json()
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    fn program(plan_fingerprint: &str, fingerprint: &'static str) -> Program {
        Program::new(ProgramArtifacts {
            name: "p",
            fingerprint,
            cubin: &[],
            plan_json: leak(plan_json(plan_fingerprint)),
            mugraph_json: "",
        })
    }

    #[test]
    fn inputs_checked_before_any_cuda_call() {
        let p = program("00000000000000aa", "00000000000000aa");
        let good = [
            TensorDesc::new(&[8, 64], DType::F16),
            TensorDesc { shape: vec![64, 32], strides: vec![1, 64], dtype: DType::Bf16 },
        ];
        p.check_inputs(&good).expect("matching tensors");

        let mut bad = good.clone();
        bad[0].shape = vec![8, 65];
        bad[0].strides = vec![65, 1];
        let e = p.check_inputs(&bad).expect_err("shape");
        assert_eq!(e.to_string(), "`p`: parameter `x`: expected shape [8, 64], found shape [8, 65]");

        let mut bad = good.clone();
        bad[1].dtype = DType::F16;
        let e = p.check_inputs(&bad).expect_err("dtype");
        assert_eq!(e.to_string(), "`p`: parameter `w`: expected element type bf16, found f16");

        let mut bad = good.clone();
        bad[1].strides = vec![32, 1];
        let e = p.check_inputs(&bad).expect_err("strides");
        assert_eq!(
            e.to_string(),
            "`p`: parameter `w`: expected strides [1, 64] for shape [64, 32], found strides [32, 1]"
        );

        let e = p.check_inputs(&good[..1]).expect_err("count");
        assert!(e.to_string().contains("expected 2 (x, w), found 1"), "{e}");
    }

    #[test]
    fn stale_plans_rejected() {
        let p = program("00000000000000bb", "00000000000000aa");
        let e = p.plan().expect_err("stale");
        assert!(e.to_string().contains("the artifact is stale"), "{e}");
        // The error is cached and stays the same.
        assert_eq!(p.plan().expect_err("stale").to_string(), e.to_string());
        // An empty expected fingerprint skips the check.
        assert!(program("00000000000000bb", "").plan().is_ok());
    }

    #[test]
    fn invalid_plans_rejected() {
        static BROKEN: Program = Program::new(ProgramArtifacts {
            name: "broken",
            fingerprint: "",
            cubin: &[],
            plan_json: "{",
            mugraph_json: "",
        });
        let e = BROKEN.plan().expect_err("invalid");
        assert!(e.to_string().starts_with("launch plan of `broken`: expected a launch plan in JSON"), "{e}");
    }

    #[test]
    fn with_plan_validates() {
        let mut plan = LaunchPlan::from_json(&plan_json("")).expect("valid");
        assert!(Program::with_plan("p", &[], plan.clone()).is_ok());
        plan.kernels.clear();
        assert!(Program::with_plan("p", &[], plan).is_err());
    }
}
