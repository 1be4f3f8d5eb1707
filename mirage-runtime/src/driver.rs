//! The driver layer, the bottom of everything that touches CUDA: whether the driver library can
//! be loaded ([`driver_available`]), how many devices it sees ([`device_count`]), and [`guard`],
//! which every call into cudarc goes through so that a panic of the bindings (a symbol missing
//! from an old driver, say) becomes a [`RuntimeError`] instead of unwinding into the caller.
//! This is the only module that calls cudarc's `sys` API or catches its panics.

use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::driver::{CudaContext, DriverError, sys};

use crate::error::RuntimeError;

/// Whether the CUDA driver library can be loaded on this machine. Makes no CUDA call. Checked
/// here rather than with cudarc's `is_culib_present`, which exists only when cudarc loads the
/// driver at run time: another crate of the build (candle's CUDA backend) may switch cudarc to
/// linking it, and this check is right in both modes.
pub fn driver_available() -> bool {
    use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
    ["cuda", "nvcuda"].iter().any(|name| {
        // SAFETY: loading the driver library runs only its initializers (what cudarc's own
        // check and its first call do); no CUDA function is called and the handle is dropped.
        unsafe { libloading::Library::new(format!("{DLL_PREFIX}{name}{DLL_SUFFIX}")) }.is_ok()
    })
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
