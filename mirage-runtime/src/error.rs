//! The crate's one error type.

use cudarc::driver::DriverError;

use crate::desc::{ComputeCapability, LaunchConfig};

/// Everything that can go wrong in `mirage-runtime`. Messages say what was expected and what
/// was found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The CUDA driver library could not be loaded: no NVIDIA driver on this machine.
    #[error(
        "no CUDA driver library (libcuda) found: expected the NVIDIA driver's libcuda.so to be \
         loadable, found none (this machine cannot run GPU code)"
    )]
    NoDriver,

    /// The requested device ordinal does not exist.
    #[error(
        "no CUDA device with ordinal {ordinal}: expected an ordinal below the device count, \
         found {count} device(s)"
    )]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },

    /// The device is older than the runtime supports.
    #[error(
        "CUDA device {ordinal} ({name}) has compute capability {found}: expected at least \
         {required} (sm_{}{} or newer)",
        required.major, required.minor
    )]
    ComputeCapability {
        /// The device's ordinal.
        ordinal: usize,
        /// The device's name.
        name: String,
        /// The device's compute capability.
        found: ComputeCapability,
        /// The minimum this runtime needs.
        required: ComputeCapability,
    },

    /// A CUDA driver call failed.
    #[error("CUDA driver error while {context}: {source}")]
    Driver {
        /// What the runtime was doing.
        context: String,
        /// The driver's error code and message.
        #[source]
        source: DriverError,
    },

    /// The driver bindings panicked (for example a symbol missing from an old driver).
    #[error("the CUDA driver bindings failed while {context}: {message}")]
    DriverPanic {
        /// What the runtime was doing.
        context: String,
        /// The panic message.
        message: String,
    },

    /// A shape with an unsupported rank.
    #[error("invalid shape {shape:?}: expected rank 1 to 4, found rank {}", shape.len())]
    Rank {
        /// The shape given.
        shape: Vec<usize>,
    },

    /// A shape with a zero-sized dimension.
    #[error(
        "invalid shape {shape:?}: expected every dimension to be at least 1, found 0 in \
         dimension {dim}"
    )]
    EmptyDimension {
        /// The shape given.
        shape: Vec<usize>,
        /// The dimension that is 0.
        dim: usize,
    },

    /// Strides whose count does not match the shape's rank.
    #[error(
        "strides {strides:?} for shape {shape:?}: expected {} strides (one per dimension), \
         found {}",
        shape.len(), strides.len()
    )]
    StridesRank {
        /// The shape given.
        shape: Vec<usize>,
        /// The strides given.
        strides: Vec<usize>,
    },

    /// A zero stride on a dimension larger than 1 (elements would alias).
    #[error(
        "strides {strides:?} for shape {shape:?}: expected a non-zero stride for dimension \
         {dim} of size {}, found 0 (elements would alias)",
        shape[*dim]
    )]
    ZeroStride {
        /// The shape given.
        shape: Vec<usize>,
        /// The strides given.
        strides: Vec<usize>,
        /// The dimension with the zero stride.
        dim: usize,
    },

    /// Shape and strides whose element count or largest offset does not fit in `usize`.
    #[error("shape {shape:?} with strides {strides:?}: expected offsets that fit in usize, found an overflow")]
    LayoutOverflow {
        /// The shape given.
        shape: Vec<usize>,
        /// The strides given.
        strides: Vec<usize>,
    },

    /// A host buffer or device allocation whose length does not match the layout.
    #[error(
        "{what} for shape {shape:?} with strides {strides:?}: expected {}{expected} elements, \
         found {found}",
        if *at_least { "at least " } else { "" }
    )]
    Length {
        /// What was measured ("host data", "device allocation").
        what: &'static str,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// The tensor's strides.
        strides: Vec<usize>,
        /// The length the layout needs.
        expected: usize,
        /// Whether a longer buffer would also have been accepted.
        at_least: bool,
        /// The length given.
        found: usize,
    },

    /// Two tensors that an operation needs to agree do not.
    #[error("{what}: expected {expected}, found {found}")]
    Mismatch {
        /// The operation.
        what: &'static str,
        /// What it needed.
        expected: String,
        /// What it got.
        found: String,
    },

    /// A launch configuration that cannot be launched.
    #[error("invalid launch configuration for kernel `{kernel}` ({config}): {reason}")]
    LaunchConfig {
        /// The kernel's name.
        kernel: String,
        /// The configuration.
        config: LaunchConfig,
        /// What is wrong with it, as expected vs found.
        reason: String,
    },

    /// More shared memory than the device allows per block.
    #[error(
        "kernel `{kernel}` needs {requested} bytes of dynamic plus {static_bytes} bytes of static \
         shared memory per block: expected at most {limit} bytes in total (the device's opt-in \
         limit per block), found {}",
        u64::from(*requested) + u64::from(*static_bytes)
    )]
    SharedMemory {
        /// The kernel's name.
        kernel: String,
        /// Dynamic shared memory asked for, in bytes.
        requested: u32,
        /// The kernel's static shared memory, in bytes.
        static_bytes: u32,
        /// The device's opt-in limit per block, in bytes.
        limit: u32,
    },

    /// A kernel image (cubin or PTX) or kernel name that cannot be loaded.
    #[error("cannot load `{name}`: {reason}")]
    InvalidImage {
        /// The module or kernel name.
        name: String,
        /// What is wrong, as expected vs found.
        reason: String,
    },

    /// The driver refused to load a module or find a function in it.
    #[error("loading `{name}` ({what}): {source}")]
    Load {
        /// The module or kernel name.
        name: String,
        /// What was being loaded.
        what: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },

    /// A module image holds no code the device can run.
    #[error(
        "module `{name}` cannot run on CUDA device {ordinal} (compute capability {device}, sm_{}{}): expected \
         code for it, found code for {} only (rebuild with the device's architecture in MIRAGE_CUDA_ARCHS)",
        device.major, device.minor, if available.is_empty() { "no architecture".to_owned() } else { available.join(", ") }
    )]
    Architecture {
        /// The module name.
        name: String,
        /// The device ordinal.
        ordinal: usize,
        /// The device's compute capability.
        device: ComputeCapability,
        /// The architectures the image holds code for (`sm_80`, `sm_90a`, `compute_90` for PTX).
        available: Vec<String>,
    },

    /// The driver rejected a kernel launch.
    #[error("launching kernel `{kernel}` with {config}: {source}")]
    Launch {
        /// The kernel's name.
        kernel: String,
        /// The launch configuration.
        config: LaunchConfig,
        /// The driver's error.
        #[source]
        source: DriverError,
    },

    /// A launch plan that cannot be used: unparsable, inconsistent, or not the program's.
    #[error("launch plan of `{program}`: {reason}")]
    Plan {
        /// The program's name.
        program: String,
        /// What is wrong, as expected vs found.
        reason: String,
    },

    /// A tensor passed to a program that does not match its parameter.
    #[error("`{program}`: parameter `{param}`: expected {expected}, found {found}")]
    Argument {
        /// The program's name.
        program: String,
        /// The parameter's name.
        param: String,
        /// What the parameter needs.
        expected: String,
        /// What was given.
        found: String,
    },

    /// A timing request that cannot produce a measurement.
    #[error("invalid timing request: {0}")]
    Timing(String),
}

impl RuntimeError {
    /// Wraps a driver error with what the runtime was doing.
    pub(crate) fn driver(context: impl Into<String>) -> impl FnOnce(DriverError) -> Self {
        let context = context.into();
        move |source| RuntimeError::Driver { context, source }
    }
}
