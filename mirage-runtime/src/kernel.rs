//! Modules ([`Module`], a cubin or PTX image), kernels in them ([`Kernel`]), launch
//! configurations ([`LaunchConfig`]) and launches ([`KernelArgs`]).
//!
//! Both [`Module`] and [`Kernel`] are built by `const fn`s, so generated code keeps them in
//! `static`s: the image is loaded on first use, once per process, and the function looked up
//! once.
//!
//! ```no_run
//! use mirage_runtime::{Gpu, Kernel, LaunchConfig, Module, RuntimeError};
//!
//! // In real code: include_bytes!(concat!(env!("OUT_DIR"), "/scale.cubin")).
//! static CUBIN: &[u8] = &[];
//! static MODULE: Module = Module::from_cubin("scale", CUBIN);
//! static SCALE: Kernel = Kernel::new(&MODULE, "scale_f32");
//!
//! fn scale(gpu: &Gpu, x: &mut mirage_runtime::DeviceTensor<f32>, by: f32) -> Result<(), RuntimeError> {
//!     let n = u32::try_from(x.num_elements()).unwrap_or(u32::MAX);
//!     let cfg = LaunchConfig::new((n.div_ceil(256), 1, 1), (256, 1, 1), 0);
//!     let mut args = SCALE.args(gpu.stream())?;
//!     args.tensor_mut(x).scalar(&by).scalar(&n);
//!     // SAFETY: scale_f32(float* x, float by, unsigned n) reads and writes x[0..n).
//!     unsafe { args.launch(cfg) }
//! }
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DeviceRepr, LaunchArgs, PushKernelArg, sys};
use cudarc::nvrtc::Ptx;

use crate::arch::{image_archs, select_arch};
use crate::desc::{ComputeCapability, LaunchConfig};
use crate::driver::guard;
use crate::error::RuntimeError;
use crate::stream::Stream;
use crate::tensor::{DeviceTensor, Element};

/// Dynamic shared memory a kernel may use without opting in, in bytes (48 KiB).
pub const DEFAULT_DYNAMIC_SMEM_LIMIT: u32 = 48 * 1024;

/// The largest number of threads in one block.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;

impl LaunchConfig {
    /// Checks the configuration against CUDA's limits (pure): every dimension at least 1, grid
    /// at most (2^31-1, 65535, 65535), block at most (1024, 1024, 64) and 1024 threads in all.
    /// The error names `kernel` and the configuration.
    pub fn validate(&self, kernel: &str) -> Result<(), RuntimeError> {
        let fail =
            |reason: String| Err(RuntimeError::LaunchConfig { kernel: kernel.to_owned(), config: *self, reason });
        let axes = ["x", "y", "z"];
        let grid = [self.grid.0, self.grid.1, self.grid.2];
        let block = [self.block.0, self.block.1, self.block.2];
        let grid_max = [i32::MAX as u32, 65535, 65535];
        let block_max = [1024, 1024, 64];
        for i in 0..3 {
            if grid[i] == 0 {
                return fail(format!("expected grid.{} >= 1, found 0", axes[i]));
            }
            if grid[i] > grid_max[i] {
                return fail(format!("expected grid.{} <= {}, found {}", axes[i], grid_max[i], grid[i]));
            }
            if block[i] == 0 {
                return fail(format!("expected block.{} >= 1, found 0", axes[i]));
            }
            if block[i] > block_max[i] {
                return fail(format!("expected block.{} <= {}, found {}", axes[i], block_max[i], block[i]));
            }
        }
        let threads = self.threads_per_block();
        if threads > u64::from(MAX_THREADS_PER_BLOCK) {
            return fail(format!("expected at most {MAX_THREADS_PER_BLOCK} threads per block, found {threads}"));
        }
        Ok(())
    }
}

/// Checks a kernel's shared memory against the device's opt-in limit per block (pure).
pub fn check_shared_memory(
    kernel: &str,
    dynamic_bytes: u32,
    static_bytes: u32,
    optin_limit: u32,
) -> Result<(), RuntimeError> {
    if u64::from(dynamic_bytes) + u64::from(static_bytes) <= u64::from(optin_limit) {
        Ok(())
    } else {
        Err(RuntimeError::SharedMemory {
            kernel: kernel.to_owned(),
            requested: dynamic_bytes,
            static_bytes,
            limit: optin_limit,
        })
    }
}

/// A module image: what [`Module`] loads.
#[derive(Clone, Copy, Debug)]
pub enum ModuleImage {
    /// A cubin (ELF) or fatbin, e.g. from `include_bytes!`: the normal path.
    Cubin(&'static [u8]),
    /// PTX text, compiled by the driver when loaded (must come from an nvcc no newer than the
    /// driver).
    Ptx(&'static str),
}

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();

/// Checks that an image looks loadable before handing it to the driver (which reads it without
/// a length): a cubin must start with the ELF or fatbin magic, PTX must hold no NUL byte.
pub fn check_image(name: &str, image: &ModuleImage) -> Result<(), RuntimeError> {
    let fail = |reason: String| Err(RuntimeError::InvalidImage { name: name.to_owned(), reason });
    match image {
        ModuleImage::Cubin(bytes) => {
            if bytes.len() < 64 {
                return fail(format!(
                    "expected a cubin of at least 64 bytes (an ELF header), found {} bytes",
                    bytes.len()
                ));
            }
            if bytes[..4] != ELF_MAGIC && bytes[..4] != FATBIN_MAGIC {
                return fail(format!(
                    "expected a cubin starting with the ELF magic 7f 45 4c 46 (or a fatbin), found {:02x?}",
                    &bytes[..4]
                ));
            }
        }
        ModuleImage::Ptx(text) => {
            if let Some(at) = text.find('\0') {
                return fail(format!("expected PTX text without NUL bytes, found one at byte {at}"));
            }
            if !text.contains(".version") {
                return fail("expected PTX text with a `.version` directive, found none".to_owned());
            }
        }
    }
    Ok(())
}

struct LoadedModule {
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
    smem_optin: u32,
    /// The device's compute capability major version (programmatic dependent launch needs 9).
    cc_major: u32,
}

/// A cubin (or PTX) image, loaded on first use and cached for the life of the process.
///
/// Put it in a `static`; all [`Kernel`]s of the image share its loaded modules. A module is
/// loaded once per CUDA context, on first use with a stream of that context (each device, or
/// each context of one device). What is loaded for a context is kept for the life of the process
/// (it holds the context alive).
pub struct Module {
    name: &'static str,
    image: ModuleImage,
    loaded: Mutex<Vec<&'static LoadedModule>>,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module").field("name", &self.name).field("loaded", &self.is_loaded()).finish()
    }
}

impl Module {
    /// A module from cubin bytes (typically `include_bytes!` of a file nvcc wrote).
    /// `name` is used in error messages.
    pub const fn from_cubin(name: &'static str, cubin: &'static [u8]) -> Module {
        Module { name, image: ModuleImage::Cubin(cubin), loaded: Mutex::new(Vec::new()) }
    }

    /// A module from PTX text, compiled by the driver when loaded.
    pub const fn from_ptx(name: &'static str, ptx: &'static str) -> Module {
        Module { name, image: ModuleImage::Ptx(ptx), loaded: Mutex::new(Vec::new()) }
    }

    /// The module's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the module has been loaded on some context.
    pub fn is_loaded(&self) -> bool {
        !lock(&self.loaded).is_empty()
    }

    /// The number of contexts the module has been loaded on.
    pub fn loaded_contexts(&self) -> usize {
        lock(&self.loaded).len()
    }

    fn get(&self, stream: &Stream) -> Result<&'static LoadedModule, RuntimeError> {
        let ctx = stream.raw().context();
        // Held while loading, so that a context loads the module once.
        let mut loaded = lock(&self.loaded);
        if let Some(found) = loaded.iter().find(|l| l.ctx == *ctx) {
            return Ok(found);
        }
        check_image(self.name, &self.image)?;
        let fresh = guard(&format!("loading module `{}`", self.name), || {
            if let ModuleImage::Cubin(bytes) = self.image {
                self.check_arch(ctx, bytes)?;
            }
            let (ptx, what) = match self.image {
                // The driver reads the image through a pointer: give it an owned, malloc-aligned
                // copy rather than the (byte-aligned) static.
                ModuleImage::Cubin(bytes) => (Ptx::from_binary(bytes.to_vec()), "cubin"),
                ModuleImage::Ptx(text) => (Ptx::from_src(text), "PTX"),
            };
            let module = ctx.load_module(ptx).map_err(|source| RuntimeError::Load {
                name: self.name.to_owned(),
                what: format!("{what} module on device {}", ctx.ordinal()),
                source,
            })?;
            let smem = ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                .map_err(RuntimeError::driver("reading the opt-in shared memory limit"))?;
            let (major, _) = ctx
                .compute_capability()
                .map_err(RuntimeError::driver(format!("reading the compute capability of device {}", ctx.ordinal())))?;
            Ok(LoadedModule {
                ctx: ctx.clone(),
                module,
                smem_optin: u32::try_from(smem).unwrap_or(0),
                cc_major: u32::try_from(major).unwrap_or(0),
            })
        })?;
        // Kept for the life of the process: kernels and launches borrow it (one per context).
        let fresh: &'static LoadedModule = Box::leak(Box::new(fresh));
        loaded.push(fresh);
        Ok(fresh)
    }

    /// Checks that the image holds code the context's device runs, naming both when not.
    fn check_arch(&self, ctx: &Arc<CudaContext>, bytes: &[u8]) -> Result<(), RuntimeError> {
        let Some(archs) = image_archs(bytes) else { return Ok(()) };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(RuntimeError::driver(format!("reading the compute capability of device {}", ctx.ordinal())))?;
        let device = ComputeCapability::new(u32::try_from(major).unwrap_or(0), u32::try_from(minor).unwrap_or(0));
        match select_arch(device, &archs) {
            Some(_) => Ok(()),
            None => Err(RuntimeError::Architecture {
                name: self.name.to_owned(),
                ordinal: ctx.ordinal(),
                device,
                available: archs.iter().map(ToString::to_string).collect(),
            }),
        }
    }
}

/// Locks a mutex, going on after a thread panicked while holding it (the data is a cache that
/// stays consistent).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct LoadedKernel {
    /// The module (and context) it was looked up in.
    module: &'static LoadedModule,
    function: CudaFunction,
    static_smem: u32,
    smem_optin: u32,
    /// The dynamic shared memory limit set on the function so far (48 KiB until raised).
    dynamic_smem_limit: Mutex<u32>,
}

/// One `__global__` function of a [`Module`], looked up by its (`extern "C"`) name on first use.
pub struct Kernel<'m> {
    module: &'m Module,
    name: &'static str,
    loaded: Mutex<Vec<&'static LoadedKernel>>,
}

impl fmt::Debug for Kernel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel").field("module", &self.module.name).field("name", &self.name).finish()
    }
}

/// Facts about a loaded kernel, from the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// Registers per thread.
    pub num_regs: u32,
    /// Static shared memory per block, in bytes.
    pub static_smem_bytes: u32,
    /// Local memory (spills) per thread, in bytes.
    pub local_bytes: u32,
    /// Most threads per block this kernel can be launched with.
    pub max_threads_per_block: u32,
}

impl<'m> Kernel<'m> {
    /// The kernel called `name` in `module`.
    pub const fn new(module: &'m Module, name: &'static str) -> Kernel<'m> {
        Kernel { module, name, loaded: Mutex::new(Vec::new()) }
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn get(&self, stream: &Stream) -> Result<&'static LoadedKernel, RuntimeError> {
        let module = self.module.get(stream)?;
        let mut loaded = lock(&self.loaded);
        if let Some(found) = loaded.iter().find(|k| std::ptr::eq(k.module, module)) {
            return Ok(found);
        }
        if self.name.contains('\0') {
            return Err(RuntimeError::InvalidImage {
                name: self.name.to_owned(),
                reason: "expected a kernel name without NUL bytes, found one".to_owned(),
            });
        }
        let fresh = guard(&format!("looking up kernel `{}`", self.name), || {
            let function = module.module.load_function(self.name).map_err(|source| RuntimeError::Load {
                name: self.name.to_owned(),
                what: format!("function in module `{}`", self.module.name),
                source,
            })?;
            let static_smem = function
                .shared_size_bytes()
                .map_err(RuntimeError::driver(format!("reading the shared memory size of `{}`", self.name)))?;
            Ok(LoadedKernel {
                module,
                function,
                static_smem: u32::try_from(static_smem).unwrap_or(0),
                smem_optin: module.smem_optin,
                dynamic_smem_limit: Mutex::new(DEFAULT_DYNAMIC_SMEM_LIMIT),
            })
        })?;
        // Kept for the life of the process, like its module.
        let fresh: &'static LoadedKernel = Box::leak(Box::new(fresh));
        loaded.push(fresh);
        Ok(fresh)
    }

    /// Loads the module and looks the kernel up now (otherwise done on first launch).
    pub fn load(&self, stream: &Stream) -> Result<KernelInfo, RuntimeError> {
        let k = self.get(stream)?;
        let attr = |a: sys::CUfunction_attribute| -> Result<u32, RuntimeError> {
            let v = k
                .function
                .get_attribute(a)
                .map_err(RuntimeError::driver(format!("reading an attribute of kernel `{}`", self.name)))?;
            Ok(u32::try_from(v).unwrap_or(0))
        };
        use sys::CUfunction_attribute as F;
        Ok(KernelInfo {
            num_regs: attr(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            static_smem_bytes: k.static_smem,
            local_bytes: attr(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            max_threads_per_block: attr(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        })
    }

    /// How many blocks of this kernel fit on one SM at once with `threads` threads and
    /// `dynamic_smem_bytes` of dynamic shared memory (the driver's occupancy calculator; the
    /// kernel's dynamic shared memory limit is raised first when more than 48 KiB is asked for).
    pub fn max_active_blocks_per_sm(
        &self,
        stream: &Stream,
        threads: u32,
        dynamic_smem_bytes: u32,
    ) -> Result<u32, RuntimeError> {
        let k = self.get(stream)?;
        let config = LaunchConfig::new((1, 1, 1), (threads, 1, 1), dynamic_smem_bytes);
        k.prepare(self.name, config)?;
        guard(&format!("querying the occupancy of kernel `{}`", self.name), || {
            k.function
                .occupancy_max_active_blocks_per_multiprocessor(threads, dynamic_smem_bytes as usize, None)
                .map_err(RuntimeError::driver(format!(
                    "querying the occupancy of kernel `{}` with {config}",
                    self.name
                )))
        })
    }

    /// Launches the kernel on `stream` with `params`, one pointer per kernel parameter to its
    /// value (as `cuLaunchKernelEx` takes them), after the checks of [`KernelArgs::launch`].
    /// With `after_previous` on a device of compute capability 9.0 or newer the launch allows
    /// programmatic stream serialization: the kernel may be scheduled before the work queued
    /// before it on the stream has finished, and must wait for it itself (`griddepcontrol.wait`
    /// before reading anything that work wrote). Elsewhere `after_previous` is ignored.
    /// Returns whether the launch was programmatic.
    ///
    /// # Safety
    /// `params` must match the kernel's parameters in number, order and type, the kernel must
    /// stay within the memory it is given for this configuration, and with `after_previous` it
    /// must begin with `griddepcontrol.wait`.
    pub unsafe fn launch_params(
        &self,
        stream: &Stream,
        config: LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
        after_previous: bool,
    ) -> Result<bool, RuntimeError> {
        let loaded = self.get(stream)?;
        loaded.prepare(self.name, config)?;
        let programmatic = after_previous && loaded.module.cc_major >= 9;
        let kernel = self.name;
        guard(&format!("launching kernel `{kernel}` with {config}"), || {
            let fail = |source| RuntimeError::Launch { kernel: kernel.to_owned(), config, source };
            stream.raw().context().bind_to_thread().map_err(fail)?;
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                // SAFETY: a plain-data union; every field of it is valid zeroed.
                value: unsafe { std::mem::zeroed() },
            };
            attr.value.programmaticStreamSerializationAllowed = 1;
            let cfg = sys::CUlaunchConfig {
                gridDimX: config.grid.0,
                gridDimY: config.grid.1,
                gridDimZ: config.grid.2,
                blockDimX: config.block.0,
                blockDimY: config.block.1,
                blockDimZ: config.block.2,
                sharedMemBytes: config.dynamic_smem_bytes,
                hStream: stream.raw().cu_stream(),
                attrs: &mut attr,
                numAttrs: u32::from(programmatic),
            };
            // SAFETY: the configuration was validated and the shared memory limit set above; the
            // parameters and, when programmatic, the kernel's own wait are the caller's contract.
            unsafe {
                sys::cuLaunchKernelEx(&cfg, loaded.function.cu_function(), params.as_mut_ptr(), std::ptr::null_mut())
            }
            .result()
            .map_err(fail)
        })?;
        Ok(programmatic)
    }

    /// Starts a launch on `stream`: push the arguments in the kernel's parameter order, then
    /// [`KernelArgs::launch`]. Loads the module and the kernel on first use.
    pub fn args<'a>(&'a self, stream: &'a Stream) -> Result<KernelArgs<'a>, RuntimeError> {
        let loaded = self.get(stream)?;
        Ok(KernelArgs { inner: stream.raw().launch_builder(&loaded.function), kernel: self.name, loaded })
    }
}

/// A kernel launch being assembled: arguments in the kernel's parameter order.
///
/// Tensors are passed as device pointers (`const T*` for [`KernelArgs::tensor`], `T*` for
/// [`KernelArgs::tensor_mut`]), scalars by value. The same arguments can be launched several
/// times (useful for timing).
pub struct KernelArgs<'a> {
    inner: LaunchArgs<'a>,
    kernel: &'static str,
    loaded: &'a LoadedKernel,
}

impl fmt::Debug for KernelArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelArgs").field("kernel", &self.kernel).finish_non_exhaustive()
    }
}

impl<'a> KernelArgs<'a> {
    /// Passes a tensor the kernel only reads (a `const T*` parameter).
    pub fn tensor<T: Element>(&mut self, tensor: &'a DeviceTensor<T>) -> &mut Self {
        self.inner.arg(tensor.as_slice());
        self
    }

    /// Passes a tensor the kernel writes (a `T*` parameter).
    pub fn tensor_mut<T: Element>(&mut self, tensor: &'a mut DeviceTensor<T>) -> &mut Self {
        self.inner.arg(tensor.as_slice_mut());
        self
    }

    /// Passes a scalar by value (`int`, `unsigned`, `float`, `__half`, ...). Its Rust type must
    /// have the size and representation of the kernel's parameter.
    pub fn scalar<S: DeviceRepr>(&mut self, value: &'a S) -> &mut Self {
        self.inner.arg(value);
        self
    }

    /// Launches the kernel. Validates the configuration, checks the shared memory against the
    /// device's opt-in limit and raises the kernel's dynamic shared memory limit when more than
    /// 48 KiB is needed. Asynchronous: a fault inside the kernel shows up at the next
    /// synchronization.
    ///
    /// # Safety
    /// The arguments pushed must match the kernel's parameters in number, order and type, and
    /// the kernel must stay within the tensors' allocations and write only tensors passed with
    /// [`KernelArgs::tensor_mut`], for this configuration.
    pub unsafe fn launch(&mut self, config: LaunchConfig) -> Result<(), RuntimeError> {
        // SAFETY: this function's contract is `launch_as`'s.
        unsafe { self.launch_as(config, false) }
    }

    /// [`KernelArgs::launch`] as a cooperative launch (`cuLaunchCooperativeKernel`): the driver
    /// starts it only if every block of the grid can be resident at once (an error otherwise),
    /// so blocks may wait on each other.
    ///
    /// # Safety
    /// As for [`KernelArgs::launch`].
    pub unsafe fn launch_cooperative(&mut self, config: LaunchConfig) -> Result<(), RuntimeError> {
        // SAFETY: this function's contract is `launch_as`'s.
        unsafe { self.launch_as(config, true) }
    }

    /// A normal or cooperative launch.
    ///
    /// # Safety
    /// As for [`KernelArgs::launch`].
    unsafe fn launch_as(&mut self, config: LaunchConfig, cooperative: bool) -> Result<(), RuntimeError> {
        self.loaded.prepare(self.kernel, config)?;
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: config.grid,
            block_dim: config.block,
            shared_mem_bytes: config.dynamic_smem_bytes,
        };
        let kernel = self.kernel;
        let how = if cooperative { "cooperatively launching" } else { "launching" };
        guard(&format!("{how} kernel `{kernel}` with {config}"), || {
            // SAFETY: the configuration was validated and the shared memory limit set above;
            // that the arguments match the kernel is this function's contract with the caller.
            let launched =
                unsafe { if cooperative { self.inner.launch_cooperative(cfg) } else { self.inner.launch(cfg) } };
            launched.map(|_| ()).map_err(|source| RuntimeError::Launch { kernel: kernel.to_owned(), config, source })
        })
    }
}

impl LoadedKernel {
    /// The checks before every launch (and occupancy query) of `kernel` with `config`: a valid
    /// configuration, and the kernel's dynamic shared memory limit raised to what it asks for.
    fn prepare(&self, kernel: &str, config: LaunchConfig) -> Result<(), RuntimeError> {
        config.validate(kernel)?;
        self.ensure_shared_memory(kernel, config)
    }

    fn ensure_shared_memory(&self, kernel: &str, config: LaunchConfig) -> Result<(), RuntimeError> {
        let k = self;
        check_shared_memory(kernel, config.dynamic_smem_bytes, k.static_smem, k.smem_optin)?;
        let needs_optin =
            u64::from(config.dynamic_smem_bytes) + u64::from(k.static_smem) > u64::from(DEFAULT_DYNAMIC_SMEM_LIMIT);
        if !needs_optin {
            return Ok(());
        }
        let mut limit = k.dynamic_smem_limit.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if config.dynamic_smem_bytes > *limit || *limit == DEFAULT_DYNAMIC_SMEM_LIMIT {
            let value = i32::try_from(config.dynamic_smem_bytes).unwrap_or(i32::MAX);
            k.function
                .set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value)
                .map_err(|source| RuntimeError::Launch {
                    kernel: format!("{kernel} (setting its dynamic shared memory limit)"),
                    config,
                    source,
                })?;
            *limit = (*limit).max(config.dynamic_smem_bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_configs() {
        assert!(LaunchConfig::new((1, 1, 1), (1, 1, 1), 0).validate("k").is_ok());
        assert!(LaunchConfig::new((132, 8, 1), (128, 1, 1), 100 * 1024).validate("k").is_ok());
        assert!(LaunchConfig::new((i32::MAX as u32, 65535, 65535), (32, 32, 1), 0).validate("k").is_ok());
    }

    #[test]
    fn zero_grid_rejected() {
        let e = LaunchConfig::new((0, 1, 1), (128, 1, 1), 0).validate("my_kernel").expect_err("zero grid");
        let msg = e.to_string();
        assert!(msg.contains("my_kernel") && msg.contains("expected grid.x >= 1, found 0"), "{msg}");
        assert!(msg.contains("grid (0, 1, 1), block (128, 1, 1)"), "{msg}");
        assert!(LaunchConfig::new((1, 1, 0), (128, 1, 1), 0).validate("k").is_err());
        assert!(LaunchConfig::new((1, 1, 1), (128, 0, 1), 0).validate("k").is_err());
    }

    #[test]
    fn too_many_threads_rejected() {
        let e = LaunchConfig::new((1, 1, 1), (64, 32, 1), 0).validate("k").expect_err("2048 threads");
        assert!(e.to_string().contains("expected at most 1024 threads per block, found 2048"), "{e}");
        assert!(LaunchConfig::new((1, 1, 1), (2048, 1, 1), 0).validate("k").is_err());
        assert!(LaunchConfig::new((1, 1, 1), (1, 1, 65), 0).validate("k").is_err());
        assert!(LaunchConfig::new((1, 65536, 1), (1, 1, 1), 0).validate("k").is_err());
        // Products that overflow u32 are still caught.
        assert!(LaunchConfig::new((1, 1, 1), (1024, 1024, 64), 0).validate("k").is_err());
    }

    #[test]
    fn shared_memory_limit() {
        assert!(check_shared_memory("k", 200 * 1024, 0, 227 * 1024).is_ok());
        let e = check_shared_memory("k", 227 * 1024, 1024, 227 * 1024).expect_err("over");
        assert!(matches!(e, RuntimeError::SharedMemory { .. }));
        assert!(e.to_string().contains("expected at most 232448 bytes in total"), "{e}");
        assert!(check_shared_memory("k", u32::MAX, u32::MAX, u32::MAX).is_err());
    }

    #[test]
    fn images_checked_before_the_driver() {
        let e = check_image("m", &ModuleImage::Cubin(&[0u8; 8])).expect_err("short");
        assert!(e.to_string().contains("found 8 bytes"), "{e}");
        static NOT_ELF: [u8; 64] = [1u8; 64];
        assert!(check_image("m", &ModuleImage::Cubin(&NOT_ELF)).is_err());
        static ELF: [u8; 64] = {
            let mut b = [0u8; 64];
            b[0] = 0x7f;
            b[1] = b'E';
            b[2] = b'L';
            b[3] = b'F';
            b
        };
        assert!(check_image("m", &ModuleImage::Cubin(&ELF)).is_ok());
        assert!(check_image("m", &ModuleImage::Ptx(".version 8.0\0")).is_err());
        assert!(check_image("m", &ModuleImage::Ptx("hello")).is_err());
        assert!(check_image("m", &ModuleImage::Ptx(".version 8.0\n.target sm_80\n")).is_ok());
    }

    #[test]
    fn statics_are_const_constructible() {
        static M: Module = Module::from_ptx("m", ".version 8.0");
        static K: Kernel<'static> = Kernel::new(&M, "f");
        assert_eq!(K.name(), "f");
        assert!(!M.is_loaded());
    }
}
