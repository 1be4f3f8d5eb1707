//! The device handle ([`Gpu`]), its description ([`DeviceInfo`]) and streams ([`Stream`]).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError, sys};

use crate::error::RuntimeError;
use crate::tensor::{DeviceTensor, Element, Layout};

/// A compute capability `major.minor` (9.0 is Hopper, 8.0 is Ampere A100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl ComputeCapability {
    /// A compute capability from its two parts.
    pub const fn new(major: u32, minor: u32) -> Self {
        ComputeCapability { major, minor }
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What the runtime knows about a device, read once when the [`Gpu`] is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device ordinal.
    pub ordinal: usize,
    /// The device name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability.
    pub compute_capability: ComputeCapability,
    /// Number of streaming multiprocessors.
    pub sm_count: u32,
    /// Largest shared memory a block can opt in to, in bytes (227 KiB on H100/H200).
    pub max_shared_memory_per_block_optin: u32,
    /// L2 cache size in bytes.
    pub l2_cache_bytes: u64,
    /// Total device memory in bytes.
    pub total_memory_bytes: u64,
    /// Free device memory in bytes when the device was opened.
    pub free_memory_bytes: u64,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MIB: f64 = 1024.0 * 1024.0;
        write!(
            f,
            "device {}: {} (sm_{}{}), {} SMs, {} KiB shared memory per block (opt-in), {:.0} MiB L2, \
             {:.0} MiB memory ({:.0} MiB free)",
            self.ordinal,
            self.name,
            self.compute_capability.major,
            self.compute_capability.minor,
            self.sm_count,
            self.max_shared_memory_per_block_optin / 1024,
            self.l2_cache_bytes as f64 / MIB,
            self.total_memory_bytes as f64 / MIB,
            self.free_memory_bytes as f64 / MIB,
        )
    }
}

/// Whether the CUDA driver library can be loaded on this machine. Makes no CUDA call.
pub fn driver_available() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the candidate library names and drops the
    // handles again; it calls no CUDA function.
    unsafe { sys::is_culib_present() }
}

/// Runs a closure that calls into cudarc, turning a panic of the bindings (a symbol missing
/// from an old driver, say) into an error.
pub(crate) fn guard<R>(context: &str, f: impl FnOnce() -> Result<R, RuntimeError>) -> Result<R, RuntimeError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            Err(RuntimeError::DriverPanic { context: context.to_owned(), message })
        }
    }
}

/// Checks a device ordinal against the device count (pure).
pub fn check_ordinal(ordinal: usize, count: usize) -> Result<(), RuntimeError> {
    if ordinal < count { Ok(()) } else { Err(RuntimeError::NoDevice { ordinal, count }) }
}

/// Checks a device's compute capability against a minimum (pure).
pub fn check_compute_capability(
    ordinal: usize,
    name: &str,
    found: ComputeCapability,
    required: ComputeCapability,
) -> Result<(), RuntimeError> {
    if found >= required {
        Ok(())
    } else {
        Err(RuntimeError::ComputeCapability { ordinal, name: name.to_owned(), found, required })
    }
}

/// The number of CUDA devices, or [`RuntimeError::NoDriver`] when there is no driver.
pub fn device_count() -> Result<usize, RuntimeError> {
    if !driver_available() {
        return Err(RuntimeError::NoDriver);
    }
    guard("counting CUDA devices", || match CudaContext::device_count() {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        // cuInit reports a driver without devices as an error.
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(e) => Err(RuntimeError::driver("counting CUDA devices")(e)),
    })
}

/// An open CUDA device: its context, its default stream and what it is.
///
/// Create with [`Gpu::new`]. Cloning is cheap and shares the context.
#[derive(Clone, Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Stream,
    info: DeviceInfo,
}

impl Gpu {
    /// The oldest compute capability the runtime accepts (sm_80, Ampere).
    pub const MIN_COMPUTE_CAPABILITY: ComputeCapability = ComputeCapability::new(8, 0);

    /// Opens device `ordinal`. Fails with [`RuntimeError::NoDriver`] when libcuda is absent,
    /// [`RuntimeError::NoDevice`] when there is no such device and
    /// [`RuntimeError::ComputeCapability`] when it is older than sm_80. Never panics.
    pub fn new(ordinal: usize) -> Result<Gpu, RuntimeError> {
        Self::with_min_compute_capability(ordinal, Self::MIN_COMPUTE_CAPABILITY)
    }

    /// Opens device `ordinal`, requiring at least compute capability `required`.
    pub fn with_min_compute_capability(ordinal: usize, required: ComputeCapability) -> Result<Gpu, RuntimeError> {
        // cudarc panics on its first call when libcuda cannot be loaded: check first.
        if !driver_available() {
            return Err(RuntimeError::NoDriver);
        }
        let count = device_count()?;
        check_ordinal(ordinal, count)?;
        guard("opening a CUDA device", || {
            let ctx =
                CudaContext::new(ordinal).map_err(RuntimeError::driver(format!("opening CUDA device {ordinal}")))?;
            let attr = |a: sys::CUdevice_attribute, what: &str| -> Result<i32, RuntimeError> {
                ctx.attribute(a).map_err(RuntimeError::driver(format!("reading the {what} of CUDA device {ordinal}")))
            };
            let name = ctx.name().map_err(RuntimeError::driver(format!("reading the name of device {ordinal}")))?;
            let (major, minor) = ctx
                .compute_capability()
                .map_err(RuntimeError::driver(format!("reading the compute capability of device {ordinal}")))?;
            let cc = ComputeCapability::new(nonneg(major), nonneg(minor));
            check_compute_capability(ordinal, &name, cc, required)?;
            use sys::CUdevice_attribute as A;
            let sm_count = nonneg(attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?);
            let smem = nonneg(attr(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "opt-in shared memory per block",
            )?);
            let l2 = nonneg(attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size")?);
            let (free, total) = ctx
                .mem_get_info()
                .map_err(RuntimeError::driver(format!("reading the memory size of device {ordinal}")))?;
            let info = DeviceInfo {
                ordinal,
                name,
                compute_capability: cc,
                sm_count,
                max_shared_memory_per_block_optin: smem,
                l2_cache_bytes: u64::from(l2),
                total_memory_bytes: total as u64,
                free_memory_bytes: free as u64,
            };
            let stream = Stream { inner: ctx.default_stream() };
            Ok(Gpu { ctx, stream, info })
        })
    }

    /// What the device is (read when it was opened).
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The device's default stream; [`Gpu::upload`] and friends use it.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// A new stream on this device, independent of the default one.
    pub fn new_stream(&self) -> Result<Stream, RuntimeError> {
        let inner = self
            .ctx
            .new_stream()
            .map_err(RuntimeError::driver(format!("creating a stream on device {}", self.info.ordinal)))?;
        Ok(Stream { inner })
    }

    /// Blocks until all work on the device has finished.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        self.ctx.synchronize().map_err(RuntimeError::driver(format!(
            "synchronizing device {} (an earlier launch may have failed)",
            self.info.ordinal
        )))
    }

    /// The underlying cudarc context, for what this crate does not wrap.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Uploads row-major host data of the given shape (on the default stream).
    /// `host.len()` must equal the product of the shape.
    pub fn upload<T: Element>(&self, host: &[T], shape: &[usize]) -> Result<DeviceTensor<T>, RuntimeError> {
        self.stream.upload(host, shape)
    }

    /// Uploads host storage for a strided layout (on the default stream); see [`Stream::upload_strided`].
    pub fn upload_strided<T: Element>(
        &self,
        host: &[T],
        shape: &[usize],
        strides: &[usize],
    ) -> Result<DeviceTensor<T>, RuntimeError> {
        self.stream.upload_strided(host, shape, strides)
    }

    /// A zero-filled row-major tensor (on the default stream).
    pub fn zeros<T: Element>(&self, shape: &[usize]) -> Result<DeviceTensor<T>, RuntimeError> {
        self.stream.zeros(shape)
    }

    /// An uninitialised row-major tensor (on the default stream); see [`Stream::alloc_uninit`].
    ///
    /// # Safety
    /// The contents are unspecified until written: read them only after a kernel or copy has
    /// written every element.
    pub unsafe fn alloc_uninit<T: Element>(&self, shape: &[usize]) -> Result<DeviceTensor<T>, RuntimeError> {
        // SAFETY: the caller upholds the contract documented above.
        unsafe { self.stream.alloc_uninit(shape) }
    }

    /// Downloads a tensor's storage to the host (on the default stream), waiting for it.
    pub fn download<T: Element>(&self, tensor: &DeviceTensor<T>) -> Result<Vec<T>, RuntimeError> {
        self.stream.download(tensor)
    }
}

fn nonneg(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// A CUDA stream: work queued on it runs in order, asynchronously to the host.
///
/// Get one from [`Gpu::stream`] (the default stream) or [`Gpu::new_stream`]. Cloning is cheap
/// and refers to the same stream.
#[derive(Clone, Debug)]
pub struct Stream {
    pub(crate) inner: Arc<CudaStream>,
}

impl Stream {
    /// Blocks until all work queued on this stream has finished. A failed asynchronous launch
    /// shows up here.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        self.inner
            .synchronize()
            .map_err(RuntimeError::driver("synchronizing a stream (an earlier launch may have failed)"))
    }

    /// The underlying cudarc stream, for what this crate does not wrap.
    pub fn raw(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// The ordinal of the device the stream belongs to.
    pub fn ordinal(&self) -> usize {
        self.inner.context().ordinal()
    }

    /// Uploads row-major host data of the given shape. `host.len()` must equal the product of
    /// the shape; this is checked before any CUDA call.
    pub fn upload<T: Element>(&self, host: &[T], shape: &[usize]) -> Result<DeviceTensor<T>, RuntimeError> {
        let layout = Layout::row_major(shape)?;
        layout.check_host_len(host.len())?;
        self.upload_checked(host, layout)
    }

    /// Uploads host storage for a strided layout. `host` is the whole storage buffer: it must
    /// hold at least the largest offset of the layout plus one element (checked before any CUDA
    /// call); the device allocation has `host.len()` elements.
    pub fn upload_strided<T: Element>(
        &self,
        host: &[T],
        shape: &[usize],
        strides: &[usize],
    ) -> Result<DeviceTensor<T>, RuntimeError> {
        let layout = Layout::strided(shape, strides)?;
        layout.check_storage_len("host data", host.len())?;
        self.upload_checked(host, layout)
    }

    fn upload_checked<T: Element>(&self, host: &[T], layout: Layout) -> Result<DeviceTensor<T>, RuntimeError> {
        let context = || format!("uploading {} {} elements of shape {:?}", host.len(), T::DTYPE, layout.shape());
        guard(&context(), || {
            let data = self.inner.clone_htod(host).map_err(RuntimeError::driver(context()))?;
            DeviceTensor::from_slice(data, layout)
        })
    }

    /// A zero-filled row-major tensor.
    pub fn zeros<T: Element>(&self, shape: &[usize]) -> Result<DeviceTensor<T>, RuntimeError> {
        let layout = Layout::row_major(shape)?;
        self.zeros_with_layout(layout)
    }

    /// A zero-filled tensor with the given layout (its storage is exactly large enough).
    pub fn zeros_with_layout<T: Element>(&self, layout: Layout) -> Result<DeviceTensor<T>, RuntimeError> {
        let len = layout.storage_len();
        let context = || format!("allocating {len} zeroed {} elements", T::DTYPE);
        guard(&context(), || {
            let data = self.inner.alloc_zeros::<T>(len).map_err(RuntimeError::driver(context()))?;
            DeviceTensor::from_slice(data, layout)
        })
    }

    /// An uninitialised row-major tensor.
    ///
    /// # Safety
    /// The contents are unspecified until written: read them (download, or pass the tensor as a
    /// kernel input) only after a kernel or copy has written every element.
    pub unsafe fn alloc_uninit<T: Element>(&self, shape: &[usize]) -> Result<DeviceTensor<T>, RuntimeError> {
        let layout = Layout::row_major(shape)?;
        let len = layout.storage_len();
        let context = || format!("allocating {len} {} elements", T::DTYPE);
        guard(&context(), || {
            // SAFETY: the memory is left uninitialised; the caller promises to write it before
            // reading it (this function's contract).
            let data = unsafe { self.inner.alloc::<T>(len) }.map_err(RuntimeError::driver(context()))?;
            DeviceTensor::from_slice(data, layout)
        })
    }

    /// Downloads a tensor's whole storage (`storage_len()` elements, in storage order; for a
    /// row-major tensor that is the tensor in row-major order) and waits for it.
    pub fn download<T: Element>(&self, tensor: &DeviceTensor<T>) -> Result<Vec<T>, RuntimeError> {
        let context = || format!("downloading {} {} elements", tensor.as_slice().len(), T::DTYPE);
        guard(&context(), || {
            let host = self.inner.clone_dtoh(tensor.as_slice()).map_err(RuntimeError::driver(context()))?;
            self.synchronize()?;
            Ok(host)
        })
    }

    /// Copies `src` into `dst` on the device. Both must have the same storage length.
    pub fn copy<T: Element>(&self, src: &DeviceTensor<T>, dst: &mut DeviceTensor<T>) -> Result<(), RuntimeError> {
        let (from, to) = (src.as_slice().len(), dst.as_slice().len());
        if from != to {
            return Err(RuntimeError::Mismatch {
                what: "device-to-device copy",
                expected: format!("a destination of {from} elements (the source's length)"),
                found: format!("{to} elements"),
            });
        }
        guard("copying device memory", || {
            self.inner
                .memcpy_dtod(src.as_slice(), dst.as_slice_mut())
                .map_err(RuntimeError::driver(format!("copying {from} {} elements on the device", T::DTYPE)))
        })
    }

    /// Records a timing event (created with timing enabled) on this stream now.
    pub fn record_timing_event(&self) -> Result<TimingEvent, RuntimeError> {
        let event = self
            .inner
            .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(RuntimeError::driver("recording a timing event"))?;
        Ok(TimingEvent { event })
    }
}

/// A CUDA event created with timing enabled, recorded on a stream.
#[derive(Debug)]
pub struct TimingEvent {
    event: CudaEvent,
}

impl TimingEvent {
    /// Creates an unrecorded timing event on the stream's context.
    pub fn new(stream: &Stream) -> Result<TimingEvent, RuntimeError> {
        let event = stream
            .inner
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(RuntimeError::driver("creating a timing event"))?;
        Ok(TimingEvent { event })
    }

    /// Records the event on `stream` (after the work queued so far).
    pub fn record(&self, stream: &Stream) -> Result<(), RuntimeError> {
        self.event.record(&stream.inner).map_err(RuntimeError::driver("recording a timing event"))
    }

    /// Microseconds from this event to `end`, waiting for both to complete.
    pub fn elapsed_us(&self, end: &TimingEvent) -> Result<f64, RuntimeError> {
        let ms =
            self.event.elapsed_ms(&end.event).map_err(RuntimeError::driver("reading the time between two events"))?;
        Ok(f64::from(ms) * 1000.0)
    }
}
