//! Loading a megakernel ([`Megakernel`]) and running it ([`Session`]).

use std::marker::PhantomData;
use std::sync::OnceLock;
use std::time::Duration;

use cudarc::driver::{CudaSlice, DevicePtr, sys};
use half::{bf16, f16};

use super::MpkError;
use super::plan::{MpkPlan, TensorKind, abi};
use super::timeline::Timeline;
use crate::desc::LaunchConfig;
use crate::driver::guard;
use crate::error::RuntimeError;
use crate::kernel::{Kernel, Module};
use crate::program::AnyTensor;
use crate::stream::Stream;
use crate::tensor::{DeviceTensor, Element};
use mirage_core::{DType, TensorDesc};

/// The build artifacts of one megakernel, as `&'static` data (from `include_bytes!` and
/// `include_str!` of the files `mirage::mpk` writes).
#[derive(Clone, Copy, Debug)]
pub struct MegakernelArtifacts {
    /// The step graph's name.
    pub name: &'static str,
    /// The cubin holding the resident kernel.
    pub cubin: &'static [u8],
    /// The plan as JSON ([`MpkPlan::from_json`]).
    pub plan_json: &'static str,
}

/// A built megakernel: its cubin and plan, loaded on first use. Put it in a `static`
/// ([`Megakernel::new`] is a `const fn`); [`Megakernel::session`] takes `&'static self` because
/// the kernel it looks up borrows the megakernel's module.
pub struct Megakernel {
    artifacts: MegakernelArtifacts,
    module: Module,
    plan: OnceLock<Result<MpkPlan, String>>,
    kernel: OnceLock<Kernel<'static>>,
}

impl std::fmt::Debug for Megakernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Megakernel").field("name", &self.artifacts.name).finish_non_exhaustive()
    }
}

impl Megakernel {
    /// A megakernel from its artifacts; nothing is parsed or loaded until first use.
    pub const fn new(artifacts: MegakernelArtifacts) -> Megakernel {
        Megakernel {
            module: Module::from_cubin(artifacts.name, artifacts.cubin),
            artifacts,
            plan: OnceLock::new(),
            kernel: OnceLock::new(),
        }
    }

    /// The step graph's name.
    pub fn name(&self) -> &'static str {
        self.artifacts.name
    }

    /// The plan, parsed and checked on first use (pure: no CUDA call).
    pub fn plan(&self) -> Result<&MpkPlan, MpkError> {
        let parsed = self.plan.get_or_init(|| {
            MpkPlan::from_json(self.artifacts.plan_json).map_err(|e| match e {
                MpkError::Plan { reason, .. } => reason,
                other => other.to_string(),
            })
        });
        parsed
            .as_ref()
            .map_err(|reason| MpkError::Plan { name: self.artifacts.name.to_owned(), reason: reason.clone() })
    }

    fn kernel(&'static self) -> Result<&'static Kernel<'static>, MpkError> {
        let plan = self.plan()?;
        Ok(self.kernel.get_or_init(|| {
            // Interned once per megakernel (a bounded, one-time allocation).
            let name: &'static str = Box::leak(plan.kernel.clone().into_boxed_str());
            Kernel::new(&self.module, name)
        }))
    }

    /// A new instance on `stream`'s device: loads the cubin (once), checks that every worker
    /// block fits on the device at once, and allocates every tensor (zeroed), the pointer table,
    /// the counters and the status words.
    pub fn session(&'static self, stream: &Stream) -> Result<Session, MpkError> {
        let plan = self.plan()?;
        let kernel = self.kernel()?;
        kernel.load(stream)?;
        let per_sm = kernel.max_active_blocks_per_sm(stream, plan.threads, plan.smem_bytes)?;
        let ctx = stream.raw().context();
        let sms = guard("reading the SM count", || {
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(RuntimeError::driver("reading the SM count"))
        })?;
        let sms = u32::try_from(sms).unwrap_or(0);
        let fit = per_sm.saturating_mul(sms);
        if fit < plan.workers {
            return Err(MpkError::Occupancy {
                megakernel: plan.name.clone(),
                workers: plan.workers,
                threads: plan.threads,
                smem_bytes: plan.smem_bytes,
                per_sm,
                sms,
                fit,
            });
        }
        let mut tensors = Vec::with_capacity(plan.tensors.len());
        for t in &plan.tensors {
            tensors.push(match t.spec.dtype {
                DType::F16 => AnyTensor::F16(stream.zeros_with_layout(layout(&t.spec)?)?),
                DType::Bf16 => AnyTensor::BF16(stream.zeros_with_layout(layout(&t.spec)?)?),
                DType::F32 => AnyTensor::F32(stream.zeros_with_layout(layout(&t.spec)?)?),
                DType::I32 => AnyTensor::I32(stream.zeros_with_layout(layout(&t.spec)?)?),
            });
        }
        let pointers: Vec<u64> = tensors.iter().map(|t| device_address(stream, t)).collect();
        let raw = stream.raw();
        let alloc_err = |what: &str| RuntimeError::driver(format!("allocating the megakernel's {what}"));
        let table = if pointers.is_empty() {
            raw.alloc_zeros::<u64>(1).map_err(alloc_err("pointer table"))?
        } else {
            raw.clone_htod(&pointers).map_err(alloc_err("pointer table"))?
        };
        let counters = raw.alloc_zeros::<u32>(plan.counters as usize).map_err(alloc_err("counters"))?;
        let status = raw.alloc_zeros::<u32>(abi::STATUS_WORDS).map_err(alloc_err("status words"))?;
        let worker_sm = raw.alloc_zeros::<u32>(plan.workers as usize).map_err(alloc_err("worker table"))?;
        Ok(Session {
            mk: self,
            stream: stream.clone(),
            tensors,
            table,
            counters,
            status,
            worker_sm,
            steps_done: 0,
            poisoned: None,
            watchdog: Duration::from_secs(10),
            prefetch_ahead: DEFAULT_PREFETCH_AHEAD,
        })
    }
}

fn layout(spec: &TensorDesc) -> Result<crate::tensor::Layout, RuntimeError> {
    crate::tensor::Layout::strided(&spec.shape, &spec.strides)
}

fn device_address(stream: &Stream, t: &AnyTensor) -> u64 {
    let (ptr, _sync) = match t {
        AnyTensor::F16(x) => x.as_slice().device_ptr(stream.raw()),
        AnyTensor::BF16(x) => x.as_slice().device_ptr(stream.raw()),
        AnyTensor::F32(x) => x.as_slice().device_ptr(stream.raw()),
        AnyTensor::I32(x) => x.as_slice().device_ptr(stream.raw()),
    };
    ptr
}

/// A typed reference to a tensor of a session's plan, checked once ([`Session::tensor`]).
#[derive(Debug)]
pub struct TensorHandle<T> {
    index: usize,
    megakernel: &'static str,
    _element: PhantomData<fn() -> T>,
}

impl<T> Clone for TensorHandle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for TensorHandle<T> {}

/// A reference to a runtime parameter of a session's plan ([`Session::param`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamHandle {
    index: usize,
    megakernel: &'static str,
}

/// The runtime parameter values of one step ([`Session::param_values`]; all 0 at first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamValues {
    megakernel: &'static str,
    values: Vec<i32>,
}

impl ParamValues {
    /// Sets a parameter.
    pub fn set(&mut self, param: ParamHandle, value: i32) -> Result<&mut Self, MpkError> {
        if param.megakernel != self.megakernel {
            return Err(MpkError::Request {
                megakernel: self.megakernel.to_owned(),
                reason: format!("a parameter handle of megakernel `{}` was used", param.megakernel),
            });
        }
        self.values[param.index] = value;
        Ok(self)
    }

    /// The values in plan order.
    pub fn values(&self) -> &[i32] {
        &self.values
    }
}

/// One instance of a megakernel on a device: its tensors, counters and status (see the module
/// documentation). Steps are counted across runs: the counters are monotonic, never reset
/// between steps or launches (a task of global step `s` waits until a counter reaches
/// `s × triggers`).
#[derive(Debug)]
pub struct Session {
    mk: &'static Megakernel,
    stream: Stream,
    tensors: Vec<AnyTensor>,
    table: CudaSlice<u64>,
    counters: CudaSlice<u32>,
    status: CudaSlice<u32>,
    worker_sm: CudaSlice<u32>,
    steps_done: u32,
    poisoned: Option<String>,
    watchdog: Duration,
    prefetch_ahead: u32,
}

/// Tasks a worker prefetches ahead by default ([`Session::set_prefetch_ahead`]): none, each
/// task streams its own weights into L2 just before its dependency wait (faster than one task
/// ahead for all three decode models once q, k and v run in one round of tasks: DECISIONS,
/// session 20).
pub const DEFAULT_PREFETCH_AHEAD: u32 = 0;

/// The widest prefetch window [`Session::set_prefetch_ahead`] takes (far more than any worker's
/// tasks in one step, far below where the device's task indices would overflow).
pub const MAX_PREFETCH_AHEAD: u32 = 1 << 16;

impl Session {
    /// The plan.
    pub fn plan(&self) -> &MpkPlan {
        // A session exists only for a megakernel whose plan parsed.
        self.mk.plan.get().and_then(|p| p.as_ref().ok()).expect("a session's plan was parsed when it was created")
    }

    fn name(&self) -> &'static str {
        self.mk.artifacts.name
    }

    /// Steps run so far on this session's counters.
    pub fn steps_done(&self) -> u32 {
        self.steps_done
    }

    /// Sets the watchdog bound of one dependency wait (default 10 s; raise it under
    /// compute-sanitizer, which slows kernels down a hundredfold).
    pub fn set_watchdog(&mut self, bound: Duration) {
        self.watchdog = bound;
    }

    /// Sets how many of its later tasks each worker streams into L2 ahead of the one it runs
    /// (default [`DEFAULT_PREFETCH_AHEAD`]): the step's first task prefetches the window, every
    /// later task the task `tasks` places on; 0 prefetches each task's own weights just before
    /// its dependency wait. A wider window hides more of the weights' latency behind waits but
    /// can evict from L2 what the running tasks still read. Takes effect at the next launch;
    /// results do not depend on it (prefetches are hints). Values above
    /// [`MAX_PREFETCH_AHEAD`] are taken as it (the device adds the window to task indices).
    /// No effect on a megakernel built without the prefetch (`mirage::mpk::MpkOptions::prefetch`,
    /// off by default): its tasks have nothing to prefetch.
    pub fn set_prefetch_ahead(&mut self, tasks: u32) {
        self.prefetch_ahead = tasks.min(MAX_PREFETCH_AHEAD);
    }

    /// The handle of tensor `name`, checked to hold `T`.
    pub fn tensor<T: TensorElement>(&self, name: &str) -> Result<TensorHandle<T>, MpkError> {
        let index = self.plan().tensor_index(name)?;
        let dtype = self.plan().tensors[index].spec.dtype;
        if dtype != T::DTYPE {
            return Err(self.tensor_error(index, format!("element type {}", T::DTYPE), format!("{dtype}")));
        }
        Ok(TensorHandle { index, megakernel: self.name(), _element: PhantomData })
    }

    /// The handle of runtime parameter `name`.
    pub fn param(&self, name: &str) -> Result<ParamHandle, MpkError> {
        Ok(ParamHandle { index: self.plan().param_index(name)?, megakernel: self.name() })
    }

    /// Parameter values for one step, all 0.
    pub fn param_values(&self) -> ParamValues {
        ParamValues { megakernel: self.name(), values: vec![0; self.plan().params.len()] }
    }

    fn tensor_error(&self, index: usize, expected: String, found: String) -> MpkError {
        MpkError::Tensor {
            megakernel: self.name().to_owned(),
            tensor: self.plan().tensors[index].name.clone(),
            expected,
            found,
        }
    }

    fn check_handle<T>(&self, h: TensorHandle<T>) -> Result<(), MpkError> {
        if h.megakernel != self.name() || h.index >= self.tensors.len() {
            return Err(MpkError::Request {
                megakernel: self.name().to_owned(),
                reason: format!("a tensor handle of megakernel `{}` was used", h.megakernel),
            });
        }
        Ok(())
    }

    /// Writes a tensor's whole storage (row-major values for a row-major tensor).
    pub fn upload<T: TensorElement>(&mut self, h: TensorHandle<T>, host: &[T]) -> Result<(), MpkError> {
        self.check_handle(h)?;
        let expected = self.tensors[h.index].spec().num_elements();
        if host.len() != expected {
            return Err(self.tensor_error(h.index, format!("{expected} values"), format!("{}", host.len())));
        }
        let raw = self.stream.raw().clone();
        let err = self.handle_error();
        let tensor = T::pick_mut(&mut self.tensors[h.index]).ok_or(err)?;
        raw.memcpy_htod(host, tensor.as_slice_mut()).map_err(RuntimeError::driver("uploading a megakernel tensor"))?;
        Ok(())
    }

    /// Reads a tensor's whole storage, waiting for the stream.
    pub fn download<T: TensorElement>(&self, h: TensorHandle<T>) -> Result<Vec<T>, MpkError> {
        self.check_handle(h)?;
        let tensor = T::pick(&self.tensors[h.index]).ok_or_else(|| self.handle_error())?;
        Ok(self.stream.download(tensor)?)
    }

    fn handle_error(&self) -> MpkError {
        MpkError::Request {
            megakernel: self.name().to_owned(),
            reason: "a tensor handle does not match the element type of its tensor".into(),
        }
    }

    /// Writes a tensor from `f32` values converted to its element type.
    pub fn upload_f32(&mut self, name: &str, values: &[f32]) -> Result<(), MpkError> {
        let index = self.plan().tensor_index(name)?;
        match self.plan().tensors[index].spec.dtype {
            DType::F16 => {
                let h = self.tensor::<f16>(name)?;
                self.upload(h, &values.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>())
            }
            DType::Bf16 => {
                let h = self.tensor::<bf16>(name)?;
                self.upload(h, &values.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>())
            }
            DType::F32 => {
                let h = self.tensor::<f32>(name)?;
                self.upload(h, values)
            }
            DType::I32 => Err(MpkError::Request {
                megakernel: self.name().to_owned(),
                reason: format!(
                    "tensor `{name}` holds i32 indices; megakernel sessions hold f16, bf16 and f32 tensors"
                ),
            }),
        }
    }

    /// Reads a tensor as `f32` values.
    pub fn download_f32(&self, name: &str) -> Result<Vec<f32>, MpkError> {
        let index = self.plan().tensor_index(name)?;
        Ok(self.tensors[index].to_host_f32()?)
    }

    /// The kind of tensor `name` (input, state or buffer).
    pub fn tensor_kind(&self, name: &str) -> Result<TensorKind, MpkError> {
        Ok(self.plan().tensors[self.plan().tensor_index(name)?].kind)
    }

    /// Zeroes the counters and the status words and restarts the step count (after an error, or
    /// to start over). Tensors keep their contents.
    pub fn reset(&mut self) -> Result<(), MpkError> {
        let raw = self.stream.raw();
        raw.memset_zeros(&mut self.counters).map_err(RuntimeError::driver("zeroing the megakernel's counters"))?;
        raw.memset_zeros(&mut self.status).map_err(RuntimeError::driver("zeroing the megakernel's status"))?;
        self.stream.synchronize()?;
        self.steps_done = 0;
        self.poisoned = None;
        Ok(())
    }

    /// Runs one step per element of `steps` (their runtime parameter values) in one launch and
    /// waits for it; a device-side error comes back as [`MpkError::Device`].
    pub fn run(&mut self, steps: &[ParamValues]) -> Result<(), MpkError> {
        self.launch(steps, None)?;
        self.finish()
    }

    /// [`Session::run`] recording the timestamps of every task; returns the [`Timeline`].
    pub fn run_timed(&mut self, steps: &[ParamValues]) -> Result<Timeline, MpkError> {
        let ntasks = self.plan().tasks.len();
        let len = (steps.len() * ntasks * abi::TIMESTAMPS_PER_TASK).max(1);
        let stamps = self
            .stream
            .raw()
            .alloc_zeros::<u64>(len)
            .map_err(RuntimeError::driver("allocating the megakernel's timestamps"))?;
        self.launch(steps, Some(&stamps))?;
        self.finish()?;
        let raw = self.stream.raw();
        let times = raw.clone_dtoh(&stamps).map_err(RuntimeError::driver("downloading the timestamps"))?;
        let sms = raw.clone_dtoh(&self.worker_sm).map_err(RuntimeError::driver("downloading the worker SMs"))?;
        self.stream.synchronize()?;
        Ok(Timeline::new(self.plan().clone(), steps.len(), times, sms))
    }

    /// Queues one launch running `steps` without waiting for it (for timing); call
    /// [`Session::finish`] afterwards to check its status.
    pub fn launch_async(&mut self, steps: &[ParamValues]) -> Result<(), MpkError> {
        self.launch(steps, None)
    }

    fn launch(&mut self, steps: &[ParamValues], stamps: Option<&CudaSlice<u64>>) -> Result<(), MpkError> {
        if let Some(reason) = &self.poisoned {
            return Err(MpkError::Poisoned { megakernel: self.name().to_owned(), reason: reason.clone() });
        }
        let plan = self.plan();
        let request = |reason: String| MpkError::Request { megakernel: plan.name.clone(), reason };
        if steps.is_empty() {
            return Err(request("expected at least one step, found none".into()));
        }
        if let Some(bad) = steps.iter().find(|s| s.megakernel != self.name() || s.values.len() != plan.params.len()) {
            return Err(request(format!(
                "expected parameter values of `{}` ({} values), found values of `{}` ({})",
                plan.name,
                plan.params.len(),
                bad.megakernel,
                bad.values.len()
            )));
        }
        let nsteps = u32::try_from(steps.len()).map_err(|_| request("too many steps in one launch".into()))?;
        let step_base = self.steps_done;
        if step_base.checked_add(nsteps).is_none_or(|s| s > i32::MAX as u32) {
            return Err(request("the step count would overflow: call Session::reset".into()));
        }
        let values: Vec<i32> = steps.iter().flat_map(|s| s.values.iter().copied()).collect();
        let raw = self.stream.raw().clone();
        let param_buf = if values.is_empty() { raw.alloc_zeros::<i32>(1) } else { raw.clone_htod(&values) }
            .map_err(RuntimeError::driver("uploading the runtime parameters"))?;
        let addr = |s: &CudaSlice<u32>| s.device_ptr(&raw).0;
        let params = abi::MpkParams {
            buffers: self.table.device_ptr(&raw).0,
            params: param_buf.device_ptr(&raw).0,
            counters: addr(&self.counters),
            status: addr(&self.status),
            timestamps: stamps.map_or(0, |s| s.device_ptr(&raw).0),
            worker_sm: addr(&self.worker_sm),
            step_base,
            nsteps,
            watchdog_ns: u64::try_from(self.watchdog.as_nanos()).unwrap_or(u64::MAX),
            prefetch_ahead: self.prefetch_ahead,
            reserved: 0,
        };
        let config = LaunchConfig::new((plan.workers, 1, 1), (plan.threads, 1, 1), plan.smem_bytes);
        let kernel = self.mk.kernel()?;
        let mut args = kernel.args(&self.stream)?;
        args.scalar(&params);
        // SAFETY: the resident kernel takes one `MpkParams` by value (the generated source
        // asserts its size); every pointer in it is a live allocation of this session sized by
        // the plan (tensors, pointer table, counters, status, worker table, timestamps of
        // `nsteps` steps, `nsteps × params` values), and the parameter buffer lives until
        // `finish` synchronizes (it is dropped only after the stream reached it: cudarc frees
        // asynchronously on the stream).
        unsafe { args.launch_cooperative(config) }?;
        self.steps_done = step_base + nsteps;
        drop(param_buf);
        Ok(())
    }

    /// Waits for the queued launches and checks the status words.
    pub fn finish(&mut self) -> Result<(), MpkError> {
        let raw = self.stream.raw();
        let status = raw.clone_dtoh(&self.status).map_err(RuntimeError::driver("reading the megakernel's status"));
        let synced = self.stream.synchronize();
        let status = match (status, synced) {
            (Ok(s), Ok(())) => s,
            (Err(e), _) | (_, Err(e)) => {
                self.poisoned = Some(e.to_string());
                return Err(e.into());
            }
        };
        let code = status[abi::STATUS_CODE];
        if code == abi::ERR_NONE {
            return Ok(());
        }
        let task = status[abi::STATUS_TASK];
        let info = &status[abi::STATUS_INFO..abi::STATUS_INFO + 3];
        let plan = self.plan();
        let message = match code {
            abi::ERR_WATCHDOG => format!(
                "waited longer than the watchdog bound ({:?}) for counter {}: needed {}, found {} (a dependency that never comes)",
                self.watchdog, info[0], info[1], info[2]
            ),
            abi::ERR_LAUNCH => format!(
                "launched with {} blocks of {} threads: expected {} blocks of {} threads",
                info[0], info[1], info[2], plan.threads
            ),
            abi::ERR_INDEX => {
                let source = plan.tensors.get(info[2] as usize).map_or_else(
                    || format!("runtime parameter {}", info[2] as usize - plan.tensors.len()),
                    |t| format!("tensor `{}`", t.name),
                );
                format!(
                    "a runtime index from {source} is out of range: expected 0 <= index < {}, found {}",
                    info[1], info[0] as i32
                )
            }
            other => format!("unknown error code {other} (info {info:?})"),
        };
        let err = MpkError::Device {
            megakernel: plan.name.clone(),
            code,
            task,
            task_name: if code == abi::ERR_LAUNCH { "the launch check".into() } else { plan.task_name(task as usize) },
            step: status[abi::STATUS_STEP],
            message,
        };
        self.poisoned = Some(err.to_string());
        Err(err)
    }
}

/// The element types of megakernel tensors (`half::f16`, `half::bf16`, `f32`): how a typed
/// handle finds its tensor among tensors of any type.
pub trait TensorElement: Element {
    /// The tensor as `DeviceTensor<Self>`, when it holds `Self`.
    fn pick(t: &AnyTensor) -> Option<&DeviceTensor<Self>>;
    /// The same, mutably.
    fn pick_mut(t: &mut AnyTensor) -> Option<&mut DeviceTensor<Self>>;
}

macro_rules! tensor_element {
    ($($ty:ty => $variant:ident),*) => {$(
        impl TensorElement for $ty {
            fn pick(t: &AnyTensor) -> Option<&DeviceTensor<Self>> {
                match t {
                    AnyTensor::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn pick_mut(t: &mut AnyTensor) -> Option<&mut DeviceTensor<Self>> {
                match t {
                    AnyTensor::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    )*};
}
tensor_element!(f16 => F16, bf16 => BF16, f32 => F32);
