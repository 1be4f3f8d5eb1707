//! The device handle ([`Gpu`]): an open device's context, its default [`Stream`] and its
//! description ([`DeviceInfo`]), with the pure checks used when opening one.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaContext, sys};

use crate::desc::ComputeCapability;
use crate::driver::{device_count, driver_available, guard};
use crate::error::RuntimeError;
use crate::stream::Stream;
use crate::tensor::{DeviceTensor, Element};

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
            let stream = Stream::from_raw(ctx.default_stream());
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
        Ok(Stream::from_raw(inner))
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
