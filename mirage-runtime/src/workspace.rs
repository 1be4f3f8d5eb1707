//! Scratch memory for a program's intermediate buffers: where each buffer of a
//! [`LaunchPlan`] lies in one allocation ([`WorkspaceLayout`], pure) and the reusable allocation
//! itself ([`Workspace`]).
//!
//! A caller allocates a workspace once (for one program, or the largest of several) and passes it
//! to every `_into` launch, so that steady-state launches allocate nothing and can be captured in
//! a CUDA graph.

use cudarc::driver::{CudaSlice, DevicePtrMut, SyncOnDrop};

use crate::driver::guard;
use crate::error::RuntimeError;
use crate::plan::LaunchPlan;
use crate::stream::Stream;
use crate::tensor::Layout;

/// The alignment of every buffer in a workspace, in bytes (what `cudaMalloc` guarantees).
pub const WORKSPACE_ALIGN: usize = 256;

/// Where the intermediate buffers of a plan lie in a workspace (pure: no CUDA call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceLayout {
    /// Byte offset of each buffer of the plan, in order, each a multiple of [`WORKSPACE_ALIGN`].
    pub offsets: Vec<usize>,
    /// The bytes a workspace needs for this plan.
    pub bytes: usize,
}

impl WorkspaceLayout {
    /// The layout of `plan`'s intermediate buffers, one after the other, aligned.
    pub fn of(plan: &LaunchPlan) -> Result<WorkspaceLayout, RuntimeError> {
        let overflow = || RuntimeError::Plan {
            program: plan.name.clone(),
            reason: "expected intermediate buffers whose total size fits in usize, found an overflow".to_owned(),
        };
        let mut offsets = Vec::with_capacity(plan.buffers.len());
        let mut end = 0usize;
        for buffer in &plan.buffers {
            let layout = Layout::strided(&buffer.desc.shape, &buffer.desc.strides)?;
            let size = layout.storage_len().checked_mul(buffer.desc.dtype.size_bytes()).ok_or_else(overflow)?;
            let start = end.checked_next_multiple_of(WORKSPACE_ALIGN).ok_or_else(overflow)?;
            offsets.push(start);
            end = start.checked_add(size).ok_or_else(overflow)?;
        }
        Ok(WorkspaceLayout { offsets, bytes: end })
    }

    /// Checks that a workspace of `found` bytes is large enough for program `program` (pure).
    pub fn check(&self, program: &str, found: usize) -> Result<(), RuntimeError> {
        if found >= self.bytes {
            Ok(())
        } else {
            Err(RuntimeError::Argument {
                program: program.to_owned(),
                param: "workspace".to_owned(),
                expected: format!(
                    "at least {} bytes ({} intermediate buffer{})",
                    self.bytes,
                    self.offsets.len(),
                    if self.offsets.len() == 1 { "" } else { "s" }
                ),
                found: format!("{found} bytes"),
            })
        }
    }
}

/// Reusable device scratch memory for the intermediate buffers of programs.
///
/// Make one with [`Workspace::new`] or
/// [`Program::workspace`](crate::Program::workspace) and pass it to every launch; one workspace
/// serves any program whose [`WorkspaceLayout::bytes`] it covers (launches on one stream use it
/// one after the other). A workspace that is too small is an error naming both sizes.
#[derive(Debug)]
pub struct Workspace {
    data: Option<CudaSlice<u8>>,
}

impl Workspace {
    /// A workspace of `bytes` bytes on `stream`'s device (no allocation for 0 bytes).
    pub fn new(stream: &Stream, bytes: usize) -> Result<Workspace, RuntimeError> {
        if bytes == 0 {
            return Ok(Workspace::empty());
        }
        let context = format!("allocating a workspace of {bytes} bytes");
        guard(&context, || {
            // SAFETY: the workspace only holds intermediate buffers, which every plan writes
            // before it reads them; every bit pattern is a valid `u8`.
            let data = unsafe { stream.raw().alloc::<u8>(bytes) }.map_err(RuntimeError::driver(context.clone()))?;
            Ok(Workspace { data: Some(data) })
        })
    }

    /// A workspace of no bytes, enough for programs without intermediate buffers.
    pub const fn empty() -> Workspace {
        Workspace { data: None }
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.data.as_ref().map_or(0, CudaSlice::len)
    }

    /// The base pointer for a launch on `stream` (which first waits for the workspace's last use)
    /// and the guard to drop after the launch; `None` for an empty workspace.
    pub(crate) fn write_ptr<'s>(&'s mut self, stream: &'s Stream) -> Option<(u64, SyncOnDrop<'s>)> {
        self.data.as_mut().map(|d| d.device_ptr_mut(stream.raw()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ArgRef, test_plans};
    use mirage_core::{DType, TensorDesc};

    fn plan(buffers: Vec<TensorDesc>) -> LaunchPlan {
        test_plans::plan(
            &[("x", TensorDesc::new(&[8, 64], DType::F16))],
            vec![TensorDesc::new(&[8, 64], DType::F16)],
            buffers,
            vec![test_plans::kernel("p_k0", vec![ArgRef::Input(0), ArgRef::Output(0)], vec![])],
        )
    }

    #[test]
    fn buffers_are_aligned_one_after_the_other() {
        let p = plan(vec![
            TensorDesc::new(&[8, 3], DType::F16),  // 48 bytes at 0
            TensorDesc::new(&[8, 64], DType::F32), // 2048 bytes at 256
            TensorDesc::new(&[1], DType::I32),     // 4 bytes at 2304
        ]);
        let w = WorkspaceLayout::of(&p).expect("valid");
        assert_eq!(w.offsets, vec![0, 256, 2304]);
        assert_eq!(w.bytes, 2308);
        assert!(w.offsets.iter().all(|o| o % WORKSPACE_ALIGN == 0));
        assert!(w.check("p", 2308).is_ok());
        assert!(w.check("p", 1 << 20).is_ok());
        let e = w.check("p", 2307).expect_err("one byte short");
        assert_eq!(
            e.to_string(),
            "`p`: parameter `workspace`: expected at least 2308 bytes (3 intermediate buffers), found 2307 bytes"
        );
    }

    #[test]
    fn a_plan_without_buffers_needs_no_workspace() {
        let w = WorkspaceLayout::of(&plan(vec![])).expect("valid");
        assert_eq!(w.bytes, 0);
        assert!(w.check("p", Workspace::empty().bytes()).is_ok());
    }

    #[test]
    fn strided_buffers_take_their_storage() {
        let p = plan(vec![TensorDesc { shape: vec![4, 8], strides: vec![16, 1], dtype: DType::Bf16 }]);
        assert_eq!(WorkspaceLayout::of(&p).expect("valid").bytes, (3 * 16 + 8) * 2);
    }
}
