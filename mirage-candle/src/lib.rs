//! Run mirage's `#[mugraph]` programs on [candle](https://github.com/huggingface/candle) tensors.
//!
//! A `#[mugraph]` function compiles (in a build script, with `mirage-rs`'s `build` feature) into a
//! [`Program`]: a cubin and a launch plan. This crate launches such a program on tensors that live
//! on a candle [`CudaDevice`], on the device's own stream, without copies:
//!
//! - [`run`]: any program, any number of inputs and outputs, on candle [`Tensor`]s;
//! - [`MirageOp`]: the same as a candle custom op ([`CustomOp1`], [`CustomOp2`], [`CustomOp3`]) for
//!   programs of one output, so `x.apply_op3(&w1, &w3, MirageOp::new(&kernels::gated_mlp::PROGRAM))`
//!   fits in a candle model's forward pass.
//!
//! ```no_run
//! use candle_core::{DType, Device, Tensor};
//! # mod kernels { pub mod gated_mlp { pub static PROGRAM: mirage_runtime::Program =
//! #     mirage_runtime::Program::new(mirage_runtime::ProgramArtifacts {
//! #         name: "gated_mlp", fingerprint: "", cubin: &[], plan_json: "", mugraph_json: "" }); } }
//! # fn main() -> candle_core::Result<()> {
//! let dev = Device::new_cuda(0)?;
//! let x = Tensor::randn(0f32, 1.0, (16, 2048), &dev)?.to_dtype(DType::BF16)?;
//! let wg = Tensor::randn(0f32, 0.02, (2048, 8192), &dev)?.to_dtype(DType::BF16)?;
//! let wu = Tensor::randn(0f32, 0.02, (2048, 8192), &dev)?.to_dtype(DType::BF16)?;
//! // `kernels::gated_mlp` is a `#[mugraph]` function of the caller's crate.
//! let h = mirage_candle::run(&kernels::gated_mlp::PROGRAM, &[&x, &wg, &wu])?;
//! assert_eq!(h[0].dims(), &[16, 8192]);
//! # Ok(()) }
//! ```
//!
//! # What is checked
//!
//! Before any CUDA call: every tensor is on the same CUDA device (a CPU or Metal tensor is an
//! error naming the parameter), its element type is one mirage takes (`bf16`, `f16`, `f32`, or `i32` where the
//! program takes indices), its shape and strides are
//! what the program was built for (a transposed or broadcast view is an error, as for any mirage
//! launch: call [`Tensor::contiguous`] first), and every device pointer is aligned as the
//! program's kernels need. The errors are mirage's own (they name the program, the parameter,
//! what it needs and what it got), carried in a [`candle_core::Error`].
//!
//! # Streams and ordering
//!
//! Launches go on the candle device's stream ([`CudaDevice::cuda_stream`]), in order with
//! candle's own kernels; the outputs are candle tensors on that device, allocated by candle's
//! allocator. Each call allocates its outputs and, when the program keeps intermediate buffers,
//! a workspace for them (stream-ordered, released after the launch).
//!
//! # Building
//!
//! candle's CUDA backend links the CUDA libraries and compiles its own kernels with nvcc at
//! build time (`CUDA_COMPUTE_CAP` chooses the architecture). The repository's
//! `scripts/install-cuda-link.sh` prepares that on a machine without a CUDA toolkit.

use candle_core::backend::BackendStorage;
use candle_core::cuda::CudaStorageSlice;
use candle_core::op::BackpropOp;
use candle_core::{
    CpuStorage, CudaDevice, CudaStorage, CustomOp1, CustomOp2, CustomOp3, Layout as CandleLayout, Shape, Storage,
    Tensor,
};
use mirage_runtime::cudarc::driver::{CudaSlice, CudaView, DeviceRepr};
use mirage_runtime::half::{bf16, f16};
use mirage_runtime::{
    AnyView, AnyViewMut, DType, Layout, Program, RuntimeError, Stream, TensorView, TensorViewMut, check_tensors_sized,
};

/// Runs `program` on candle tensors and returns its outputs as candle tensors on the same device.
///
/// The inputs are in the program's parameter order and must all live on one candle CUDA device;
/// the launch is queued on that device's stream (asynchronous, like any candle op). Shapes may
/// be any size in a runtime-sized dimension's declared range (the outputs follow).
///
/// # Errors
/// A tensor not on a CUDA device, on another device than the first input, of an element type
/// mirage does not take, or not matching the program's parameter (count, element type, shape,
/// strides, alignment); a program whose artifact is missing or stale; a CUDA failure.
pub fn run(program: &'static Program, inputs: &[&Tensor]) -> candle_core::Result<Vec<Tensor>> {
    let guards: Vec<_> = inputs.iter().map(|t| t.storage_and_layout()).collect();
    let mut storages = Vec::with_capacity(inputs.len());
    for (i, (storage, layout)) in guards.iter().enumerate() {
        match &**storage {
            Storage::Cuda(s) => storages.push((s, *layout)),
            other => {
                return Err(param_error(
                    program,
                    i,
                    format!("is on the {:?} device; mirage runs on CUDA devices only", other.device().location()),
                ));
            }
        }
    }
    let outputs = launch(program, &storages)?;
    Ok(outputs
        .into_iter()
        .map(|(storage, shape)| Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false))
        .collect())
}

/// A `#[mugraph]` program of one output as a candle custom op: [`CustomOp1`], [`CustomOp2`] or
/// [`CustomOp3`] for programs of one, two or three inputs (`t.apply_op3(&a, &b, op)`). For other
/// programs use [`run`]. The CUDA forward pass is [`run`]'s; the CPU and Metal ones are errors
/// (mirage programs run on CUDA devices only).
#[derive(Clone, Copy)]
pub struct MirageOp {
    program: &'static Program,
}

impl std::fmt::Debug for MirageOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirageOp").field("program", &self.program.name()).finish()
    }
}

impl MirageOp {
    /// The custom op of `program` (a `#[mugraph]` function's `PROGRAM` static).
    pub fn new(program: &'static Program) -> MirageOp {
        MirageOp { program }
    }

    /// The program it runs.
    pub fn program(&self) -> &'static Program {
        self.program
    }

    fn forward(&self, inputs: &[(&CudaStorage, &CandleLayout)]) -> candle_core::Result<(CudaStorage, Shape)> {
        let mut outputs = launch(self.program, inputs)?;
        match (outputs.pop(), outputs.is_empty()) {
            (Some(out), true) => Ok(out),
            (None, _) | (Some(_), false) => Err(candle_core::Error::msg(format!(
                "mirage program `{}` has {} outputs; a candle custom op returns one: use mirage_candle::run",
                self.program.name(),
                outputs.len() + 1
            ))),
        }
    }

    fn cpu_error(&self) -> candle_core::Error {
        candle_core::Error::msg(format!(
            "mirage program `{}` runs on CUDA devices only (its inputs are on the CPU)",
            self.program.name()
        ))
    }
}

impl CustomOp1 for MirageOp {
    fn name(&self) -> &'static str {
        self.program.name()
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &CandleLayout) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(self.cpu_error())
    }

    fn cuda_fwd(&self, s1: &CudaStorage, l1: &CandleLayout) -> candle_core::Result<(CudaStorage, Shape)> {
        self.forward(&[(s1, l1)])
    }
}

impl CustomOp2 for MirageOp {
    fn name(&self) -> &'static str {
        self.program.name()
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &CandleLayout,
        _: &CpuStorage,
        _: &CandleLayout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(self.cpu_error())
    }

    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &CandleLayout,
        s2: &CudaStorage,
        l2: &CandleLayout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.forward(&[(s1, l1), (s2, l2)])
    }
}

impl CustomOp3 for MirageOp {
    fn name(&self) -> &'static str {
        self.program.name()
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &CandleLayout,
        _: &CpuStorage,
        _: &CandleLayout,
        _: &CpuStorage,
        _: &CandleLayout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(self.cpu_error())
    }

    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &CandleLayout,
        s2: &CudaStorage,
        l2: &CandleLayout,
        s3: &CudaStorage,
        l3: &CandleLayout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.forward(&[(s1, l1), (s2, l2), (s3, l3)])
    }
}

/// A candle storage's typed buffer from the layout's start on, for a mirage view.
enum InputBuffer<'a> {
    Bf16(CudaView<'a, bf16>),
    F16(CudaView<'a, f16>),
    F32(CudaView<'a, f32>),
    I32(CudaView<'a, i32>),
}

/// An output buffer allocated on the candle device.
enum OutputBuffer {
    Bf16(CudaSlice<bf16>),
    F16(CudaSlice<f16>),
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
}

/// The launch behind [`run`] and [`MirageOp`]: views of the inputs, outputs allocated on the
/// device, a workspace, the program queued on the device's stream.
fn launch(
    program: &'static Program,
    inputs: &[(&CudaStorage, &CandleLayout)],
) -> candle_core::Result<Vec<(CudaStorage, Shape)>> {
    let Some((first, _)) = inputs.first() else {
        return Err(wrap(program.plan().err().unwrap_or_else(|| RuntimeError::Plan {
            program: program.name().to_owned(),
            reason: "no inputs were given".to_owned(),
        })));
    };
    let device = first.device().clone();
    let mut buffers = Vec::with_capacity(inputs.len());
    let mut layouts = Vec::with_capacity(inputs.len());
    for (i, (storage, layout)) in inputs.iter().enumerate() {
        if storage.device().id() != device.id() {
            return Err(param_error(
                program,
                i,
                format!("is on CUDA device {:?}, the first input on {:?}", storage.device().id(), device.id()),
            ));
        }
        let (buffer, dtype) = input_buffer(program, i, storage, layout.start_offset())?;
        layouts.push((layout_of(layout).map_err(wrap)?, dtype));
        buffers.push(buffer);
    }
    let views = buffers
        .iter()
        .zip(&layouts)
        .map(|(buffer, &(layout, _))| input_view(buffer, layout))
        .collect::<Result<Vec<AnyView<'_>>, _>>()
        .map_err(wrap)?;

    // The outputs' shapes at the inputs' sizes (everything checked before any allocation).
    let plan = program.plan().map_err(wrap)?;
    let found: Vec<_> = views.iter().map(AnyView::desc).collect();
    let sizes = check_tensors_sized(plan, &found).map_err(wrap)?;
    let specs = plan.outputs_at(&sizes);

    let stream = Stream::from_raw(device.cuda_stream());
    let mut outputs = specs
        .iter()
        .map(|s| alloc_output(&device, s.dtype, s.shape.iter().product()))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let mut workspace = program.workspace(&stream).map_err(wrap)?;
    {
        let mut out_views = outputs
            .iter_mut()
            .zip(&specs)
            .map(|(buffer, spec)| output_view(buffer, &spec.shape))
            .collect::<Result<Vec<AnyViewMut<'_>>, _>>()
            .map_err(wrap)?;
        program.launch_views(&stream, &views, &mut out_views, &mut workspace).map_err(wrap)?;
    }
    Ok(outputs
        .into_iter()
        .zip(specs)
        .map(|(buffer, spec)| {
            let storage = match buffer {
                OutputBuffer::Bf16(s) => CudaStorage::wrap_cuda_slice(s, device.clone()),
                OutputBuffer::F16(s) => CudaStorage::wrap_cuda_slice(s, device.clone()),
                OutputBuffer::F32(s) => CudaStorage::wrap_cuda_slice(s, device.clone()),
                OutputBuffer::I32(s) => CudaStorage::wrap_cuda_slice(s, device.clone()),
            };
            (storage, Shape::from(spec.shape))
        })
        .collect())
}

fn input_buffer<'a>(
    program: &Program,
    index: usize,
    storage: &'a CudaStorage,
    start: usize,
) -> candle_core::Result<(InputBuffer<'a>, DType)> {
    fn from<T: DeviceRepr>(slice: &CudaSlice<T>, start: usize) -> Option<CudaView<'_, T>> {
        (start <= slice.len()).then(|| slice.slice(start..))
    }
    let out_of_range = || param_error(program, index, format!("starts at element {start}, past its buffer's end"));
    Ok(match &storage.slice {
        CudaStorageSlice::BF16(s) => (InputBuffer::Bf16(from(s, start).ok_or_else(out_of_range)?), DType::Bf16),
        CudaStorageSlice::F16(s) => (InputBuffer::F16(from(s, start).ok_or_else(out_of_range)?), DType::F16),
        CudaStorageSlice::F32(s) => (InputBuffer::F32(from(s, start).ok_or_else(out_of_range)?), DType::F32),
        CudaStorageSlice::I32(s) => (InputBuffer::I32(from(s, start).ok_or_else(out_of_range)?), DType::I32),
        _ => {
            return Err(param_error(
                program,
                index,
                format!("has element type {:?}; mirage takes bf16, f16, f32 and i32", storage.dtype()),
            ));
        }
    })
}

/// candle's layout (dims and strides in elements; the start offset is applied to the buffer) as
/// mirage's.
fn layout_of(layout: &CandleLayout) -> Result<Layout, RuntimeError> {
    Layout::strided(layout.dims(), layout.stride())
}

fn input_view<'a>(buffer: &'a InputBuffer<'a>, layout: Layout) -> Result<AnyView<'a>, RuntimeError> {
    Ok(match buffer {
        InputBuffer::Bf16(v) => TensorView::from_cudarc_view(v, layout)?.erase(),
        InputBuffer::F16(v) => TensorView::from_cudarc_view(v, layout)?.erase(),
        InputBuffer::F32(v) => TensorView::from_cudarc_view(v, layout)?.erase(),
        InputBuffer::I32(v) => TensorView::from_cudarc_view(v, layout)?.erase(),
    })
}

fn alloc_output(device: &CudaDevice, dtype: DType, len: usize) -> candle_core::Result<OutputBuffer> {
    Ok(match dtype {
        DType::Bf16 => OutputBuffer::Bf16(alloc(device, len)?),
        DType::F16 => OutputBuffer::F16(alloc(device, len)?),
        DType::F32 => OutputBuffer::F32(alloc(device, len)?),
        DType::I32 => OutputBuffer::I32(alloc(device, len)?),
    })
}

/// An uninitialised output buffer of `len` elements on the candle device's stream.
fn alloc<T: DeviceRepr>(device: &CudaDevice, len: usize) -> candle_core::Result<CudaSlice<T>> {
    // SAFETY: the buffer is an output of the launch queued next on the same stream, whose kernels
    // store every element before anything reads it; when the launch fails, the buffer is dropped
    // unread (`launch` returns before wrapping it into a candle storage).
    unsafe { device.alloc::<T>(len) }
}

fn output_view<'a>(buffer: &'a mut OutputBuffer, shape: &[usize]) -> Result<AnyViewMut<'a>, RuntimeError> {
    Ok(match buffer {
        OutputBuffer::Bf16(s) => TensorViewMut::from_cudarc(s, shape)?.erase(),
        OutputBuffer::F16(s) => TensorViewMut::from_cudarc(s, shape)?.erase(),
        OutputBuffer::F32(s) => TensorViewMut::from_cudarc(s, shape)?.erase(),
        OutputBuffer::I32(s) => TensorViewMut::from_cudarc(s, shape)?.erase(),
    })
}

fn wrap(e: RuntimeError) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// An error about input `index`, named as the program's plan names it when the plan loads.
fn param_error(program: &Program, index: usize, what: String) -> candle_core::Error {
    let name = program.plan().ok().and_then(|p| p.input_names.get(index).cloned());
    let param = name.map_or_else(|| format!("input {index}"), |n| format!("parameter `{n}`"));
    candle_core::Error::msg(format!("mirage program `{}`: {param} {what}", program.name()))
}
