//! The element types a device tensor can hold ([`Element`]), layouts ([`Layout`]) and device tensors
//! ([`DeviceTensor`]).

use std::fmt;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};

use mirage_core::{DType, TensorDesc, row_major_strides};

use crate::error::RuntimeError;

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
}

/// A type a [`DeviceTensor`] can hold: `half::f16`, `half::bf16`, `f32` or `i32` (indices)
/// (sealed).
pub trait Element:
    sealed::Sealed + DeviceRepr + ValidAsZeroBits + Copy + Default + fmt::Debug + Send + Sync + 'static
{
    /// The type's tag.
    const DTYPE: DType;
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for half::bf16 {
    const DTYPE: DType = DType::Bf16;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}

/// A tensor's shape (rank 1 to 4, every dimension at least 1) and strides, in elements.
///
/// Built only through [`Layout::row_major`] and [`Layout::strided`], which validate; all checks
/// are pure and make no CUDA call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    rank: usize,
    shape: [usize; Layout::MAX_RANK],
    strides: [usize; Layout::MAX_RANK],
    storage_len: usize,
}

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layout").field("shape", &self.shape()).field("strides", &self.strides()).finish()
    }
}

impl Layout {
    /// The largest rank supported.
    pub const MAX_RANK: usize = mirage_core::MAX_RANK;

    /// A row-major (C order, last dimension contiguous) layout.
    pub fn row_major(shape: &[usize]) -> Result<Layout, RuntimeError> {
        check_shape(shape)?;
        // Strides that saturate belong to a shape whose element count overflows: `strided`
        // reports it.
        Self::strided(shape, &row_major_strides(shape))
    }

    /// A layout with explicit strides (in elements). Strides must be given for every dimension,
    /// be non-zero on dimensions larger than 1, and keep every offset within `usize`.
    pub fn strided(shape: &[usize], strides: &[usize]) -> Result<Layout, RuntimeError> {
        check_shape(shape)?;
        if strides.len() != shape.len() {
            return Err(RuntimeError::StridesRank { shape: shape.to_vec(), strides: strides.to_vec() });
        }
        let overflow = || RuntimeError::LayoutOverflow { shape: shape.to_vec(), strides: strides.to_vec() };
        let mut max_offset = 0usize;
        for (dim, (&size, &stride)) in shape.iter().zip(strides).enumerate() {
            if size > 1 && stride == 0 {
                return Err(RuntimeError::ZeroStride { shape: shape.to_vec(), strides: strides.to_vec(), dim });
            }
            let span = (size - 1).checked_mul(stride).ok_or_else(overflow)?;
            max_offset = max_offset.checked_add(span).ok_or_else(overflow)?;
        }
        // Every element count must fit too.
        shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(overflow)?;
        let storage_len = max_offset.checked_add(1).ok_or_else(overflow)?;
        let mut layout =
            Layout { rank: shape.len(), shape: [1; Self::MAX_RANK], strides: [0; Self::MAX_RANK], storage_len };
        layout.shape[..shape.len()].copy_from_slice(shape);
        layout.strides[..shape.len()].copy_from_slice(strides);
        Ok(layout)
    }

    /// The number of dimensions (1 to 4).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape[..self.rank]
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides[..self.rank]
    }

    /// The description of a tensor of element type `dtype` with this layout.
    pub fn desc(&self, dtype: DType) -> TensorDesc {
        TensorDesc { shape: self.shape().to_vec(), strides: self.strides().to_vec(), dtype }
    }

    /// The number of elements (product of the shape).
    pub fn num_elements(&self) -> usize {
        self.shape().iter().product()
    }

    /// The storage a tensor of this layout needs: its largest offset plus one, in elements.
    pub fn storage_len(&self) -> usize {
        self.storage_len
    }

    /// Whether the strides are the row-major ones for the shape.
    pub fn is_row_major(&self) -> bool {
        self.strides() == row_major_strides(self.shape())
    }

    /// The offset of a multi-index, or `None` when the index has the wrong rank or is out of
    /// bounds.
    pub fn offset(&self, index: &[usize]) -> Option<usize> {
        if index.len() != self.rank {
            return None;
        }
        let mut off = 0;
        for ((&i, &n), &s) in index.iter().zip(self.shape()).zip(self.strides()) {
            if i >= n {
                return None;
            }
            off += i * s;
        }
        Some(off)
    }

    /// Checks the length of row-major host data for this layout: it must equal
    /// [`Layout::num_elements`] when the layout is row-major, and be at least
    /// [`Layout::storage_len`] otherwise.
    pub fn check_host_len(&self, found: usize) -> Result<(), RuntimeError> {
        if self.is_row_major() {
            if found == self.num_elements() { Ok(()) } else { Err(self.length_error("host data", found, false)) }
        } else {
            self.check_storage_len("host data", found)
        }
    }

    /// Checks that a buffer of `found` elements covers every offset of this layout.
    pub fn check_storage_len(&self, what: &'static str, found: usize) -> Result<(), RuntimeError> {
        if found >= self.storage_len { Ok(()) } else { Err(self.length_error(what, found, true)) }
    }

    fn length_error(&self, what: &'static str, found: usize, at_least: bool) -> RuntimeError {
        RuntimeError::Length {
            what,
            shape: self.shape().to_vec(),
            strides: self.strides().to_vec(),
            expected: if at_least { self.storage_len } else { self.num_elements() },
            at_least,
            found,
        }
    }
}

fn check_shape(shape: &[usize]) -> Result<(), RuntimeError> {
    if shape.is_empty() || shape.len() > Layout::MAX_RANK {
        return Err(RuntimeError::Rank { shape: shape.to_vec() });
    }
    if let Some(dim) = shape.iter().position(|&d| d == 0) {
        return Err(RuntimeError::EmptyDimension { shape: shape.to_vec(), dim });
    }
    Ok(())
}

/// A typed tensor in device memory: a device allocation plus a [`Layout`] it covers.
#[derive(Debug)]
pub struct DeviceTensor<T: Element> {
    data: CudaSlice<T>,
    layout: Layout,
}

impl<T: Element> DeviceTensor<T> {
    /// Wraps an existing device allocation; it must cover every offset of `layout`.
    pub fn from_slice(data: CudaSlice<T>, layout: Layout) -> Result<Self, RuntimeError> {
        layout.check_storage_len("device allocation", data.len())?;
        Ok(DeviceTensor { data, layout })
    }

    /// The layout (shape and strides).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        self.layout.strides()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// The number of elements (product of the shape).
    pub fn num_elements(&self) -> usize {
        self.layout.num_elements()
    }

    /// The size of the device allocation in bytes.
    pub fn num_bytes(&self) -> usize {
        self.data.num_bytes()
    }

    /// The raw device allocation, e.g. to pass to a kernel as a read-only pointer.
    pub fn as_slice(&self) -> &CudaSlice<T> {
        &self.data
    }

    /// The raw device allocation, mutably, e.g. to pass to a kernel as an output pointer.
    pub fn as_slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.data
    }

    /// The allocation and the layout, taken apart.
    pub fn into_parts(self) -> (CudaSlice<T>, Layout) {
        (self.data, self.layout)
    }

    /// The stream the allocation was made on.
    pub fn alloc_stream(&self) -> &std::sync::Arc<CudaStream> {
        self.data.stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_strides() {
        let l = Layout::row_major(&[2, 3, 4]).expect("valid");
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert_eq!(l.num_elements(), 24);
        assert_eq!(l.storage_len(), 24);
        assert!(l.is_row_major());
        assert_eq!(l.offset(&[1, 2, 3]), Some(23));
        assert_eq!(l.offset(&[2, 0, 0]), None);
        assert_eq!(l.offset(&[0, 0]), None);
    }

    #[test]
    fn rank_limits() {
        assert!(matches!(Layout::row_major(&[]), Err(RuntimeError::Rank { .. })));
        assert!(matches!(Layout::row_major(&[1, 2, 3, 4, 5]), Err(RuntimeError::Rank { .. })));
        assert!(Layout::row_major(&[1, 2, 3, 4]).is_ok());
        let e = Layout::row_major(&[1, 2, 3, 4, 5]).expect_err("rank 5");
        assert!(e.to_string().contains("expected rank 1 to 4, found rank 5"), "{e}");
    }

    #[test]
    fn zero_dimension_rejected() {
        let e = Layout::row_major(&[4, 0]).expect_err("empty dim");
        assert!(matches!(e, RuntimeError::EmptyDimension { dim: 1, .. }), "{e}");
    }

    #[test]
    fn column_major_layout() {
        let l = Layout::strided(&[3, 5], &[1, 3]).expect("valid");
        assert!(!l.is_row_major());
        assert_eq!(l.storage_len(), 15);
        assert_eq!(l.offset(&[2, 4]), Some(14));
    }

    #[test]
    fn padded_layout_needs_max_offset_plus_one() {
        let l = Layout::strided(&[2, 3], &[8, 1]).expect("valid");
        assert_eq!(l.storage_len(), 8 + 2 + 1);
        assert!(l.check_host_len(11).is_ok());
        assert!(l.check_host_len(16).is_ok());
        let e = l.check_host_len(10).expect_err("too short");
        assert!(e.to_string().contains("expected at least 11 elements, found 10"), "{e}");
    }

    #[test]
    fn bad_strides_rejected() {
        assert!(matches!(Layout::strided(&[2, 3], &[3]), Err(RuntimeError::StridesRank { .. })));
        assert!(matches!(Layout::strided(&[2, 3], &[0, 1]), Err(RuntimeError::ZeroStride { dim: 0, .. })));
        // A zero stride on a size-1 dimension is harmless.
        assert!(Layout::strided(&[1, 3], &[0, 1]).is_ok());
        assert!(matches!(Layout::strided(&[2, 3], &[usize::MAX, 1]), Err(RuntimeError::LayoutOverflow { .. })));
        assert!(matches!(Layout::row_major(&[usize::MAX, 2]), Err(RuntimeError::LayoutOverflow { .. })));
    }

    #[test]
    fn host_length_must_match_row_major_shape() {
        let l = Layout::row_major(&[8, 16]).expect("valid");
        assert!(l.check_host_len(128).is_ok());
        let e = l.check_host_len(127).expect_err("short");
        assert!(e.to_string().contains("expected 128 elements, found 127"), "{e}");
        let e = l.check_host_len(129).expect_err("long");
        assert!(matches!(e, RuntimeError::Length { expected: 128, found: 129, at_least: false, .. }));
    }

    #[test]
    fn dtype_names() {
        assert_eq!(<half::f16 as Element>::DTYPE.name(), "f16");
        assert_eq!(<half::bf16 as Element>::DTYPE.name(), "bf16");
        assert_eq!(<f32 as Element>::DTYPE.name(), "f32");
        assert_eq!(DType::Bf16.size_bytes(), 2);
        assert_eq!(DType::F32.size_bytes(), 4);
    }
}
