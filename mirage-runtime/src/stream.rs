//! Streams ([`Stream`]): where uploads, downloads, copies, launches and timing events are
//! queued; and timing events ([`TimingEvent`]).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream, sys};

use crate::driver::guard;
use crate::error::RuntimeError;
use crate::tensor::{DeviceTensor, Element, Layout};

/// A CUDA stream: work queued on it runs in order, asynchronously to the host.
///
/// Get one from [`Gpu::stream`](crate::Gpu::stream) (the default stream) or
/// [`Gpu::new_stream`](crate::Gpu::new_stream). Cloning is cheap
/// and refers to the same stream.
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<CudaStream>,
}

impl Stream {
    /// Wraps a cudarc stream: the default stream of a context, a new one, the stream an
    /// allocation was made on, or the stream of the engine that calls mirage, so that launches
    /// queue on it in order with the engine's own work.
    pub fn from_raw(inner: Arc<CudaStream>) -> Stream {
        Stream { inner }
    }

    /// Wraps a raw `CUstream` that another library owns (a PyTorch or candle stream, say), on
    /// `ctx`, its context.
    ///
    /// # Safety
    /// `stream` must be a valid stream of `ctx`, kept alive by its owner as long as the returned
    /// [`Stream`] (or anything holding it) is used; the caller orders work queued through mirage
    /// with the owner's other work on other streams.
    pub unsafe fn from_cu_stream(ctx: &Arc<CudaContext>, stream: sys::CUstream) -> Stream {
        // SAFETY: the caller upholds cudarc's contract, which is this function's.
        Stream { inner: unsafe { ctx.wrap_borrowed_stream(stream) } }
    }

    /// Starts capturing the work queued on this stream into a CUDA graph (global capture mode:
    /// CUDA calls that are unsafe during a capture, such as allocations, fail until the capture
    /// ends). Launch programs with their `_into` forms, which allocate nothing, then call
    /// [`Stream::end_capture`].
    pub fn begin_capture(&self) -> Result<(), RuntimeError> {
        guard("starting a CUDA graph capture", || {
            self.inner
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
                .map_err(RuntimeError::driver("starting a CUDA graph capture"))
        })
    }

    /// Ends the capture begun by [`Stream::begin_capture`] and instantiates the graph; an error
    /// when the capture recorded no work or was invalidated (by an allocation, say).
    pub fn end_capture(&self) -> Result<CapturedGraph, RuntimeError> {
        let context =
            "ending a CUDA graph capture (an allocation or synchronization during the capture invalidates it)";
        guard(context, || {
            let graph =
                self.inner.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(RuntimeError::driver(context))?;
            graph.map(|graph| CapturedGraph { graph }).ok_or_else(|| RuntimeError::Mismatch {
                what: "a CUDA graph capture",
                expected: "at least one operation queued between begin_capture and end_capture".to_owned(),
                found: "an empty capture".to_owned(),
            })
        })
    }

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

/// An instantiated CUDA graph captured from a [`Stream`]: replays the captured work, with the
/// same device pointers, on that stream.
pub struct CapturedGraph {
    graph: CudaGraph,
}

impl std::fmt::Debug for CapturedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedGraph").finish_non_exhaustive()
    }
}

impl CapturedGraph {
    /// Queues one replay of the captured work on the stream it was captured from.
    pub fn launch(&self) -> Result<(), RuntimeError> {
        guard("launching a CUDA graph", || self.graph.launch().map_err(RuntimeError::driver("launching a CUDA graph")))
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
            .raw()
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(RuntimeError::driver("creating a timing event"))?;
        Ok(TimingEvent { event })
    }

    /// Records the event on `stream` (after the work queued so far).
    pub fn record(&self, stream: &Stream) -> Result<(), RuntimeError> {
        self.event.record(stream.raw()).map_err(RuntimeError::driver("recording a timing event"))
    }

    /// Microseconds from this event to `end`, waiting for both to complete.
    pub fn elapsed_us(&self, end: &TimingEvent) -> Result<f64, RuntimeError> {
        let ms =
            self.event.elapsed_ms(&end.event).map_err(RuntimeError::driver("reading the time between two events"))?;
        Ok(f64::from(ms) * 1000.0)
    }
}

impl<T: Element> DeviceTensor<T> {
    /// Downloads the storage on the stream the tensor was allocated on and waits for it.
    pub fn to_host(&self) -> Result<Vec<T>, RuntimeError> {
        Stream::from_raw(self.alloc_stream().clone()).download(self)
    }
}
