//! Borrowed device buffers: what a launch reads ([`TensorView`]) and writes ([`TensorViewMut`]),
//! typed by element, and their type-erased forms ([`AnyView`], [`AnyViewMut`]) for programs with
//! mixed element types.
//!
//! A view is a device buffer plus a [`Layout`]; it borrows the buffer for its lifetime and never
//! owns or frees it. It is made from one of our [`DeviceTensor`]s, from a cudarc
//! [`CudaSlice`], [`CudaView`] or [`CudaViewMut`] with a shape (an engine's own buffers), or,
//! unsafely, from a raw device pointer and its length. Every constructor checks, before any CUDA
//! call, that the buffer covers every offset of the layout; a raw pointer must also be non-null
//! and aligned for the element type.
//!
//! Alignment: a view may start at any element (a sub-buffer from [`CudaSlice::slice`], a raw
//! pointer), but a launch also needs each pointer aligned to what its program's kernels need —
//! up to 16 bytes for a tensor they copy in 16-byte vectors; the element size for outputs
//! (`KernelLaunch::arg_align` in the plan). The launch checks that before any kernel runs and
//! returns an error naming the parameter otherwise; a base from a fresh CUDA allocation
//! (256-byte aligned) always passes.
//!
//! Ordering: buffers that cudarc owns keep cudarc's own stream ordering (the launch stream waits
//! for their last write, and their next users wait for the launch). A raw pointer carries no
//! ordering: the caller makes sure the work that writes or reads it is ordered with the launch
//! (the same stream, or events).

use std::fmt;
use std::marker::PhantomData;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop};

use mirage_core::{DType, TensorDesc};

use crate::error::RuntimeError;
use crate::tensor::{DeviceTensor, Element, Layout};

/// A cudarc buffer whose device pointer a launch reads through.
pub(crate) trait ReadPtr: Sync {
    /// The pointer for a read on `stream` (which first waits for the buffer's last write), and a
    /// guard that records the read when dropped after the launch.
    fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
}

/// A cudarc buffer whose device pointer a launch writes through.
pub(crate) trait WritePtr: Send {
    /// The pointer for a write on `stream` (which first waits for the buffer's last use), and a
    /// guard that records the write when dropped after the launch.
    fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
}

impl<T: Element> ReadPtr for CudaSlice<T> {
    fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr(stream)
    }
}
impl<T: Element> ReadPtr for CudaView<'_, T> {
    fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr(stream)
    }
}
impl<T: Element> ReadPtr for CudaViewMut<'_, T> {
    fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr(stream)
    }
}
impl<T: Element> WritePtr for CudaSlice<T> {
    fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr_mut(stream)
    }
}
impl<T: Element> WritePtr for CudaViewMut<'_, T> {
    fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.device_ptr_mut(stream)
    }
}

#[derive(Clone, Copy)]
enum ReadSource<'a> {
    Cudarc(&'a dyn ReadPtr),
    Raw(u64),
}

enum WriteSource<'a> {
    Cudarc(&'a mut dyn WritePtr),
    Raw(u64),
}

/// Checks a raw device pointer (pure): non-null and aligned for `dtype`.
pub fn check_raw_pointer(ptr: u64, dtype: DType) -> Result<(), RuntimeError> {
    let align = dtype.size_bytes() as u64;
    if ptr == 0 || !ptr.is_multiple_of(align) {
        return Err(RuntimeError::Mismatch {
            what: "a raw device pointer",
            expected: format!("a non-null pointer aligned to {align} bytes (one {dtype} element)"),
            found: format!("{ptr:#x}"),
        });
    }
    Ok(())
}

/// A borrowed device buffer of any element type that a launch reads: an input of
/// [`Program::launch_views`](crate::Program::launch_views).
#[derive(Clone, Copy)]
pub struct AnyView<'a> {
    src: ReadSource<'a>,
    layout: Layout,
    dtype: DType,
}

impl fmt::Debug for AnyView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyView").field("dtype", &self.dtype).field("layout", &self.layout).finish_non_exhaustive()
    }
}

impl<'a> AnyView<'a> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The layout (shape and strides).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Element type, shape and strides.
    pub fn desc(&self) -> TensorDesc {
        self.layout.desc(self.dtype)
    }

    /// The device pointer for a read on `stream`, and the guard to drop after the launch.
    pub(crate) fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, Option<SyncOnDrop<'s>>) {
        match self.src {
            ReadSource::Cudarc(buffer) => {
                let (ptr, sync) = buffer.read_ptr(stream);
                (ptr, Some(sync))
            }
            ReadSource::Raw(ptr) => (ptr, None),
        }
    }
}

/// A borrowed device buffer of any element type that a launch writes: an output of
/// [`Program::launch_views`](crate::Program::launch_views).
pub struct AnyViewMut<'a> {
    src: WriteSource<'a>,
    layout: Layout,
    dtype: DType,
}

impl fmt::Debug for AnyViewMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyViewMut").field("dtype", &self.dtype).field("layout", &self.layout).finish_non_exhaustive()
    }
}

impl<'a> AnyViewMut<'a> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The layout (shape and strides).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Element type, shape and strides.
    pub fn desc(&self) -> TensorDesc {
        self.layout.desc(self.dtype)
    }

    /// The view borrowed for a shorter lifetime (views of different lifetimes then fit in one
    /// slice, as [`Program::launch_views`](crate::Program::launch_views) takes them).
    pub fn reborrow(&mut self) -> AnyViewMut<'_> {
        let src = match &mut self.src {
            WriteSource::Cudarc(buffer) => WriteSource::Cudarc(&mut **buffer),
            WriteSource::Raw(ptr) => WriteSource::Raw(*ptr),
        };
        AnyViewMut { src, layout: self.layout, dtype: self.dtype }
    }

    /// The device pointer for a write on `stream`, and the guard to drop after the launch.
    pub(crate) fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, Option<SyncOnDrop<'s>>) {
        match &mut self.src {
            WriteSource::Cudarc(buffer) => {
                let (ptr, sync) = buffer.write_ptr(stream);
                (ptr, Some(sync))
            }
            WriteSource::Raw(ptr) => (*ptr, None),
        }
    }
}

/// A borrowed device buffer of `T` with a layout, read by a launch.
///
/// ```no_run
/// use mirage_runtime::{Gpu, RuntimeError, TensorView};
///
/// fn main() -> Result<(), RuntimeError> {
///     let gpu = Gpu::new(0)?;
///     // An engine's own cudarc buffer, seen as an [8, 16] row-major tensor.
///     let (slice, _) = gpu.zeros::<f32>(&[8 * 16])?.into_parts();
///     let view = TensorView::from_cudarc(&slice, &[8, 16])?;
///     assert_eq!(view.layout().shape(), &[8, 16]);
///     // A shape the buffer cannot hold is an error, before any CUDA call.
///     assert!(TensorView::from_cudarc(&slice, &[8, 17]).is_err());
///     Ok(())
/// }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a, T: Element> {
    any: AnyView<'a>,
    _element: PhantomData<&'a T>,
}

impl<'a, T: Element> TensorView<'a, T> {
    fn new(src: ReadSource<'a>, len: usize, layout: Layout) -> Result<Self, RuntimeError> {
        layout.check_storage_len("device buffer", len)?;
        Ok(TensorView { any: AnyView { src, layout, dtype: T::DTYPE }, _element: PhantomData })
    }

    /// A cudarc buffer seen as a row-major tensor of `shape`; it must hold at least the shape's
    /// element count.
    pub fn from_cudarc(buffer: &'a CudaSlice<T>, shape: &[usize]) -> Result<Self, RuntimeError> {
        Self::new(ReadSource::Cudarc(buffer), buffer.len(), Layout::row_major(shape)?)
    }

    /// A cudarc buffer seen as a tensor of `shape` and `strides` (in elements); it must cover
    /// every offset of the layout.
    pub fn from_cudarc_strided(
        buffer: &'a CudaSlice<T>,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self, RuntimeError> {
        Self::new(ReadSource::Cudarc(buffer), buffer.len(), Layout::strided(shape, strides)?)
    }

    /// A cudarc sub-buffer ([`CudaSlice::slice`]) seen as a tensor with `layout`. A launch needs
    /// its start aligned as the program's kernels need (up to 16 bytes: see the module docs),
    /// which a sub-buffer starting at an element that is not a multiple of 16 bytes may not be.
    pub fn from_cudarc_view(view: &'a CudaView<'a, T>, layout: Layout) -> Result<Self, RuntimeError> {
        Self::new(ReadSource::Cudarc(view), view.len(), layout)
    }

    /// A raw device pointer to `len` elements of `T`, seen as a tensor with `layout`. Checked:
    /// the pointer is non-null and aligned to the element, and `len` covers the layout. A launch
    /// further checks it against the alignment the program's kernels need (up to 16 bytes: see
    /// the module docs).
    ///
    /// # Safety
    /// `ptr` must point to at least `len` elements of `T` in device memory of the context the
    /// view is launched on, valid and not written by other work for the lifetime `'a`; the caller
    /// orders any work that writes it with the launches that read it.
    pub unsafe fn from_raw(ptr: u64, len: usize, layout: Layout) -> Result<Self, RuntimeError> {
        check_raw_pointer(ptr, T::DTYPE)?;
        Self::new(ReadSource::Raw(ptr), len, layout)
    }

    /// The layout (shape and strides).
    pub fn layout(&self) -> &Layout {
        &self.any.layout
    }

    /// The view without its element type.
    pub fn erase(self) -> AnyView<'a> {
        self.any
    }
}

impl<'a, T: Element> From<&'a DeviceTensor<T>> for TensorView<'a, T> {
    fn from(t: &'a DeviceTensor<T>) -> Self {
        TensorView {
            any: AnyView { src: ReadSource::Cudarc(t.as_slice()), layout: *t.layout(), dtype: T::DTYPE },
            _element: PhantomData,
        }
    }
}

impl<'a, T: Element> From<TensorView<'a, T>> for AnyView<'a> {
    fn from(v: TensorView<'a, T>) -> Self {
        v.any
    }
}

impl<'a, T: Element> From<&'a DeviceTensor<T>> for AnyView<'a> {
    fn from(t: &'a DeviceTensor<T>) -> Self {
        TensorView::from(t).any
    }
}

/// A borrowed device buffer of `T` with a layout, written by a launch (an output).
#[derive(Debug)]
pub struct TensorViewMut<'a, T: Element> {
    any: AnyViewMut<'a>,
    _element: PhantomData<&'a mut T>,
}

impl<'a, T: Element> TensorViewMut<'a, T> {
    fn new(src: WriteSource<'a>, len: usize, layout: Layout) -> Result<Self, RuntimeError> {
        layout.check_storage_len("device buffer", len)?;
        Ok(TensorViewMut { any: AnyViewMut { src, layout, dtype: T::DTYPE }, _element: PhantomData })
    }

    /// A cudarc buffer seen as a row-major tensor of `shape`; it must hold at least the shape's
    /// element count.
    pub fn from_cudarc(buffer: &'a mut CudaSlice<T>, shape: &[usize]) -> Result<Self, RuntimeError> {
        let len = buffer.len();
        Self::new(WriteSource::Cudarc(buffer), len, Layout::row_major(shape)?)
    }

    /// A cudarc buffer seen as a tensor of `shape` and `strides` (in elements).
    pub fn from_cudarc_strided(
        buffer: &'a mut CudaSlice<T>,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self, RuntimeError> {
        let len = buffer.len();
        Self::new(WriteSource::Cudarc(buffer), len, Layout::strided(shape, strides)?)
    }

    /// A mutable cudarc sub-buffer ([`CudaSlice::slice_mut`]) seen as a tensor with `layout` (an
    /// output needs only its element's alignment; see the module docs).
    pub fn from_cudarc_view(view: &'a mut CudaViewMut<'a, T>, layout: Layout) -> Result<Self, RuntimeError> {
        let len = view.len();
        Self::new(WriteSource::Cudarc(view), len, layout)
    }

    /// A raw device pointer to `len` elements of `T`, seen as a tensor with `layout`. Checked:
    /// the pointer is non-null and aligned to the element, and `len` covers the layout; a launch
    /// checks it against what the kernels need (see the module docs).
    ///
    /// # Safety
    /// `ptr` must point to at least `len` elements of `T` in device memory of the context the
    /// view is launched on, valid and used by nothing else for the lifetime `'a`; the caller
    /// orders the launches that write it with any other work that uses it.
    pub unsafe fn from_raw(ptr: u64, len: usize, layout: Layout) -> Result<Self, RuntimeError> {
        check_raw_pointer(ptr, T::DTYPE)?;
        Self::new(WriteSource::Raw(ptr), len, layout)
    }

    /// The layout (shape and strides).
    pub fn layout(&self) -> &Layout {
        &self.any.layout
    }

    /// The view without its element type.
    pub fn erase(self) -> AnyViewMut<'a> {
        self.any
    }
}

impl<'a, T: Element> From<&'a mut DeviceTensor<T>> for TensorViewMut<'a, T> {
    fn from(t: &'a mut DeviceTensor<T>) -> Self {
        let layout = *t.layout();
        TensorViewMut {
            any: AnyViewMut { src: WriteSource::Cudarc(t.as_slice_mut()), layout, dtype: T::DTYPE },
            _element: PhantomData,
        }
    }
}

impl<'a, T: Element> From<TensorViewMut<'a, T>> for AnyViewMut<'a> {
    fn from(v: TensorViewMut<'a, T>) -> Self {
        v.any
    }
}

impl<'a, T: Element> From<&'a mut DeviceTensor<T>> for AnyViewMut<'a> {
    fn from(t: &'a mut DeviceTensor<T>) -> Self {
        TensorViewMut::from(t).any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn raw_views_are_checked_before_any_cuda_call() {
        let layout = Layout::row_major(&[4, 8]).expect("valid");
        // SAFETY: these views are never launched; only the checks run.
        let ok = unsafe { TensorView::<f16>::from_raw(0x1000, 32, layout) }.expect("covers the layout");
        assert_eq!(ok.erase().desc(), TensorDesc::new(&[4, 8], DType::F16));
        // SAFETY: never launched; only the checks run.
        let e = unsafe { TensorView::<f16>::from_raw(0x1000, 31, layout) }.expect_err("short");
        assert!(e.to_string().contains("expected at least 32 elements, found 31"), "{e}");
        // SAFETY: never launched; only the checks run.
        let e = unsafe { TensorView::<f32>::from_raw(0x1002, 32, layout) }.expect_err("misaligned");
        assert!(e.to_string().contains("aligned to 4 bytes (one f32 element)"), "{e}");
        assert!(e.to_string().contains("0x1002"), "{e}");
        // SAFETY: never launched; only the checks run.
        assert!(unsafe { TensorViewMut::<f32>::from_raw(0, 32, layout) }.is_err());
        let strided = Layout::strided(&[4, 8], &[16, 1]).expect("valid");
        // SAFETY: never launched; only the checks run.
        let v = unsafe { TensorViewMut::<f32>::from_raw(0x2000, 56, strided) }.expect("padded rows");
        assert_eq!(v.erase().desc().strides, vec![16, 1]);
        // SAFETY: never launched; only the checks run.
        assert!(unsafe { TensorViewMut::<f32>::from_raw(0x2000, 55, strided) }.is_err());
    }

    /// Outputs of different lifetimes go into one slice through `reborrow` (what the `_into`
    /// launchers do).
    fn outputs_of<'x, 'y>(a: TensorViewMut<'x, f32>, b: TensorViewMut<'y, f16>) -> Vec<TensorDesc> {
        let (mut a, mut b) = (a.erase(), b.erase());
        let views: &mut [AnyViewMut<'_>] = &mut [a.reborrow(), b.reborrow()];
        views.iter().map(AnyViewMut::desc).collect()
    }

    #[test]
    fn output_views_of_different_lifetimes_share_a_slice() {
        let layout = Layout::row_major(&[2, 2]).expect("valid");
        // SAFETY: these views are never launched.
        let a = unsafe { TensorViewMut::<f32>::from_raw(0x1000, 4, layout) }.expect("valid");
        // SAFETY: never launched; only the checks run.
        let b = unsafe { TensorViewMut::<f16>::from_raw(0x2000, 4, layout) }.expect("valid");
        let descs = outputs_of(a, b);
        assert_eq!(descs[1], TensorDesc::new(&[2, 2], DType::F16));
    }
}
