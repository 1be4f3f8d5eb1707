//! The run-time half of mirage: device handle, typed device tensors, cubin loading and launching,
//! CUDA-event timing (DESIGN.md §12). Being written.
