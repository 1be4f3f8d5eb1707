//! Pointer alignment: what a plan's kernels need of every device pointer they take, checked
//! before a launch.
//!
//! Generated kernels move device memory in vectors (16-, 8- and 4-byte `cp.async` copies of input
//! tiles) whose addresses must be aligned to the vector. A view may start anywhere its element
//! type allows (a `bf16` view one element into a buffer is 2 bytes past a 16-byte boundary);
//! handed to a kernel that copies it in 16-byte vectors, it would fault the kernel with a
//! misaligned-address error, which poisons the CUDA context of the whole process. So every launch
//! first checks each pointer against the alignment the plan records for it
//! ([`KernelLaunch::arg_align`](crate::plan::KernelLaunch::arg_align)); a misaligned one is an
//! error naming the parameter, the alignment found and the one needed, and no kernel runs.

use crate::error::RuntimeError;
use crate::plan::{ArgRef, LaunchPlan};

/// The alignment of `ptr`: the largest power of two (up to 2^63) dividing it.
fn alignment_of(ptr: u64) -> u64 {
    if ptr == 0 { 1 << 63 } else { 1 << ptr.trailing_zeros() }
}

/// Checks the device pointers of a launch of `plan` (pure: no CUDA call, no allocation unless
/// it fails): every pointer argument of every kernel must be a multiple of the alignment the
/// plan records for it ([`KernelLaunch::align_of_arg`](crate::plan::KernelLaunch::align_of_arg)).
/// `pointers` are the inputs', the outputs' and the intermediate buffers', each in plan order.
/// The error names program `program`, the parameter (its name, `output i` or `buffer i`), the
/// kernel, the alignment needed and the pointer with its alignment, and says what to do.
pub fn check_pointers(program: &str, plan: &LaunchPlan, pointers: [&[u64]; 3]) -> Result<(), RuntimeError> {
    let [inputs, outputs, buffers] = pointers;
    for k in &plan.kernels {
        for (j, arg) in k.args.iter().enumerate() {
            let ptr = match *arg {
                ArgRef::Input(i) => inputs.get(i),
                ArgRef::Output(i) => outputs.get(i),
                ArgRef::Buffer(i) => buffers.get(i),
            };
            // A missing pointer is the caller's list being short: `Program` checks the lists
            // against the plan before it gets here, and launches nothing for it either way.
            let Some(&ptr) = ptr else { continue };
            let need = k.align_of_arg(j) as u64;
            if need <= 1 || ptr.is_multiple_of(need) {
                continue;
            }
            let param = match *arg {
                ArgRef::Input(i) => plan.input_name(i),
                ArgRef::Output(i) => format!("output {i}"),
                ArgRef::Buffer(i) => format!("buffer {i} (in the workspace)"),
            };
            return Err(RuntimeError::Argument {
                program: program.to_owned(),
                param,
                expected: format!(
                    "a device pointer aligned to {need} bytes (kernel `{}` moves it in {need}-byte vectors)",
                    k.name
                ),
                found: format!(
                    "{ptr:#x}, aligned to {} bytes: copy the tensor into a fresh allocation (a CUDA \
                     allocation starts 256-byte aligned) or start its view at a multiple of {need} bytes",
                    alignment_of(ptr)
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{TensorDesc, test_plans};
    use mirage_core::DType;

    /// `y = f(x, w)` through a buffer: kernel 0 copies `x` in 16-byte vectors and `w` in 8-byte
    /// ones; kernel 1 reads `x` element by element and writes `y`; the second kernel's plan has
    /// no record (an old plan): 16 bytes for everything.
    fn plan(record_second: bool) -> LaunchPlan {
        let second = if record_second { vec![2, 4, 4] } else { vec![] };
        test_plans::plan(
            &[("x", TensorDesc::new(&[8, 64], DType::Bf16)), ("w", TensorDesc::new(&[64, 32], DType::Bf16))],
            vec![TensorDesc::new(&[8, 32], DType::F32)],
            vec![TensorDesc::new(&[8, 32], DType::F32)],
            vec![
                test_plans::kernel("p_k0", vec![ArgRef::Input(0), ArgRef::Input(1), ArgRef::Buffer(0)], vec![16, 8, 4]),
                test_plans::kernel("p_k1", vec![ArgRef::Input(0), ArgRef::Buffer(0), ArgRef::Output(0)], second),
            ],
        )
    }

    #[test]
    fn aligned_pointers_pass() {
        let p = plan(true);
        p.validate().expect("a valid plan");
        check_pointers("p", &p, [&[0x1000, 0x2008], &[0x3004], &[0x4000]]).expect("aligned");
        check_pointers("p", &plan(false), [&[0x1000, 0x2010], &[0x3010], &[0x4000]]).expect("aligned to 16");
    }

    #[test]
    fn a_misaligned_pointer_is_an_error_naming_the_parameter_and_both_alignments() {
        let p = plan(true);
        // x two bytes past a 16-byte boundary: what a bf16 view one element into a buffer gives.
        let e = check_pointers("p", &p, [&[0x1002, 0x2000], &[0x3000], &[0x4000]]).expect_err("x at 2 bytes");
        assert_eq!(
            e.to_string(),
            "`p`: parameter `x`: expected a device pointer aligned to 16 bytes (kernel `p_k0` moves it in \
             16-byte vectors), found 0x1002, aligned to 2 bytes: copy the tensor into a fresh allocation \
             (a CUDA allocation starts 256-byte aligned) or start its view at a multiple of 16 bytes"
        );
        // 8 bytes past: still short of 16.
        let e = check_pointers("p", &p, [&[0x1008, 0x2000], &[0x3000], &[0x4000]]).expect_err("x at 8");
        assert!(e.to_string().contains("found 0x1008, aligned to 8 bytes"), "{e}");
        // w needs 8: 4 bytes past fails, 8 passes.
        let e = check_pointers("p", &p, [&[0x1000, 0x2004], &[0x3000], &[0x4000]]).expect_err("w at 4");
        assert!(e.to_string().contains("parameter `w`: expected a device pointer aligned to 8 bytes"), "{e}");
        // The output and the buffer are named as such.
        let e = check_pointers("p", &p, [&[0x1000, 0x2000], &[0x3002], &[0x4000]]).expect_err("y at 2");
        assert!(e.to_string().contains("parameter `output 0`: expected a device pointer aligned to 4 bytes"), "{e}");
        assert!(e.to_string().contains("kernel `p_k1`"), "{e}");
        let e = check_pointers("p", &p, [&[0x1000, 0x2000], &[0x3000], &[0x4002]]).expect_err("buffer");
        assert!(e.to_string().contains("parameter `buffer 0 (in the workspace)`"), "{e}");
        // An old plan asks 16 of every pointer.
        let e = check_pointers("p", &plan(false), [&[0x1000, 0x2010], &[0x3008], &[0x4000]]).expect_err("old");
        assert!(e.to_string().contains("`output 0`: expected a device pointer aligned to 16 bytes"), "{e}");
    }
}
