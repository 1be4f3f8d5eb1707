//! The nvcc driver: finds nvcc and compiles CUDA C++ to cubins, with a content-addressed cache.
//!
//! nvcc is looked for, in this order:
//! 1. the `NVCC` environment variable (the path of the binary);
//! 2. `$CUDA_HOME/bin/nvcc`, then `$CUDA_PATH/bin/nvcc`;
//! 3. `nvcc` on `PATH`;
//! 4. the Python package `nvidia-cuda-nvcc` (`<site-packages>/nvidia/cu13/bin/nvcc`), which
//!    `scripts/install-nvcc.sh` installs.
//!
//! [`compile_cubin`] runs `nvcc -cubin -O3 -std=c++17 -arch=<arch>` for `MIRAGE_CUDA_ARCH`
//! (default `sm_90a`), keeping the source and the cubin in a cache directory under a hash of
//! everything that determines the output, so an identical compile is not repeated. Files are
//! written to a temporary name and renamed, so concurrent builds sharing a cache are safe.
//!
//! ```no_run
//! use mirage::nvcc::{CompileOptions, compile_cubin};
//!
//! let src = r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }"#;
//! let cubin = compile_cubin(src, "twice", &CompileOptions::default())?;
//! assert!(cubin.bytes.starts_with(b"\x7fELF"));
//! # Ok::<(), mirage::nvcc::NvccError>(())
//! ```

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

/// The default target architecture (H100/H200).
pub const DEFAULT_ARCH: &str = "sm_90a";

/// The environment variable that selects the target architecture.
pub const ARCH_ENV: &str = "MIRAGE_CUDA_ARCH";

/// The environment variable naming the directory of nvcc's cache, instead of
/// [`default_cache_dir`] (and instead of the per-build-script directory of
/// [`crate::build::Builder`]). Cargo runs a package's build script once per configuration
/// (`cargo clippy`, `cargo test` and `cargo doc` each have their own `$OUT_DIR`); pointing them at
/// one directory lets the later runs reuse the earlier ones' cubins. The cache is
/// content-addressed and its writes are atomic, so sharing it is safe. A relative path is taken
/// from the current directory (in a build script, the package's root): prefer an absolute one.
pub const CACHE_DIR_ENV: &str = "MIRAGE_NVCC_CACHE_DIR";

/// Environment variables that change which nvcc is used, what it builds or where it keeps it; a
/// build script should emit `cargo:rerun-if-env-changed` for each.
pub const ENV_VARS: &[&str] = &["NVCC", "CUDA_HOME", "CUDA_PATH", ARCH_ENV, CACHE_DIR_ENV];

/// The script that installs nvcc 13.0 from NVIDIA's Python packages.
pub const INSTALL_SCRIPT: &str = "scripts/install-nvcc.sh";

/// Bumped when the cache layout or the meaning of a cache key changes.
const CACHE_VERSION: &str = "mirage-nvcc-cache-v1";

/// Errors of the nvcc driver. Messages say what was expected and what was found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NvccError {
    /// No nvcc was found by any of the supported ways.
    #[error("nvcc not found: {detail}\n{}", how_to_provide_nvcc())]
    NotFound {
        /// What was tried, or why the explicit setting is wrong.
        detail: String,
    },

    /// nvcc could not be started or did not answer `--version`.
    #[error("cannot run nvcc at {}: {reason}\n{}", path.display(), how_to_provide_nvcc())]
    NotRunnable {
        /// The nvcc path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// An architecture name nvcc would not accept.
    #[error(
        "invalid CUDA architecture {found:?} (from {origin}): expected sm_<digits> with an optional 'a' suffix, e.g. sm_90a or sm_80"
    )]
    InvalidArch {
        /// The value given.
        found: String,
        /// Where it came from.
        origin: &'static str,
    },

    /// A kernel name that cannot be used as a file name.
    #[error(
        "invalid kernel source name {found:?}: expected 1 to 100 characters from [A-Za-z0-9_.-], not starting with '.'"
    )]
    InvalidName {
        /// The name given.
        found: String,
    },

    /// nvcc rejected the source.
    #[error("{0}")]
    Compile(Box<CompileFailure>),

    /// nvcc succeeded but its output is not a cubin.
    #[error("nvcc wrote {} for `{name}`: expected an ELF cubin, found {found}", path.display())]
    BadOutput {
        /// The name of the source.
        name: String,
        /// The output file.
        path: PathBuf,
        /// What the file holds.
        found: String,
    },

    /// A file-system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The details of a failed nvcc run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileFailure {
    /// The name of the source.
    pub name: String,
    /// The target architecture.
    pub arch: String,
    /// The path of the `.cu` file nvcc compiled (kept for inspection).
    pub cu_path: PathBuf,
    /// The command line.
    pub command: String,
    /// nvcc's exit status.
    pub status: String,
    /// nvcc's stderr (and stdout).
    pub output: String,
}

impl std::fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "nvcc failed to compile `{}` for {} ({}); CUDA source: {}\ncommand: {}\n{}",
            self.name,
            self.arch,
            self.status,
            self.cu_path.display(),
            self.command,
            self.output
        )
    }
}

fn how_to_provide_nvcc() -> String {
    format!(
        "Provide nvcc (CUDA 13.0) in one of these ways, checked in this order:\n\
         \x20 1. set NVCC to the path of the nvcc binary;\n\
         \x20 2. set CUDA_HOME (or CUDA_PATH) to a CUDA toolkit containing bin/nvcc;\n\
         \x20 3. put nvcc on PATH;\n\
         \x20 4. install the Python package nvidia-cuda-nvcc (nvcc under <site-packages>/nvidia/cu13/bin), \
         e.g. with `bash {INSTALL_SCRIPT}` from the mirage repository \
         (pip install nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-cuda-runtime==13.0.* \
         nvidia-nvvm==13.0.* nvidia-cuda-cccl==13.0.*).\n\
         nvcc also needs a host C++ compiler (g++) on PATH."
    )
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NvccError {
    let path = path.to_path_buf();
    move |source| NvccError::Io { action, path, source }
}

/// The environment the nvcc finder looks at, made explicit so that finding is a pure function
/// of it ([`find_nvcc_in`]) and testable without touching the process environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvccEnv {
    /// `NVCC`: the path of the nvcc binary.
    pub nvcc: Option<OsString>,
    /// `CUDA_HOME`: a CUDA toolkit root.
    pub cuda_home: Option<OsString>,
    /// `CUDA_PATH`: a CUDA toolkit root.
    pub cuda_path: Option<OsString>,
    /// `PATH`.
    pub path: Option<OsString>,
    /// Directories of the Python `nvidia` namespace package (`<site-packages>/nvidia`).
    pub nvidia_package_dirs: Vec<PathBuf>,
}

impl NvccEnv {
    /// The process environment's variables, without the Python package directories (finding
    /// those runs Python; see [`NvccEnv::with_python_packages`]).
    pub fn from_process() -> NvccEnv {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        NvccEnv {
            nvcc: var("NVCC"),
            cuda_home: var("CUDA_HOME"),
            cuda_path: var("CUDA_PATH"),
            path: var("PATH"),
            nvidia_package_dirs: Vec::new(),
        }
    }

    /// Adds the `nvidia` package directories of the Python installation (`python3`, else
    /// `python`): `nvidia.__path__`, and `nvidia/` under every site-packages and the user site.
    pub fn with_python_packages(mut self) -> NvccEnv {
        self.nvidia_package_dirs.extend(python_nvidia_dirs());
        self
    }
}

const PYTHON_QUERY: &str = r#"
import os, site
dirs = []
try:
    import nvidia
    dirs += list(getattr(nvidia, "__path__", []))
except Exception:
    pass
try:
    dirs += [os.path.join(p, "nvidia") for p in site.getsitepackages()]
except Exception:
    pass
try:
    dirs.append(os.path.join(site.getusersitepackages(), "nvidia"))
except Exception:
    pass
print("\n".join(dirs))
"#;

fn python_nvidia_dirs() -> Vec<PathBuf> {
    for python in ["python3", "python"] {
        let Ok(out) = Command::new(python).arg("-c").arg(PYTHON_QUERY).output() else {
            continue;
        };
        if !out.status.success() {
            continue;
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines().map(str::trim).filter(|l| !l.is_empty()) {
            let dir = PathBuf::from(line);
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        return dirs;
    }
    Vec::new()
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}

fn nvcc_file_name() -> &'static str {
    if cfg!(windows) { "nvcc.exe" } else { "nvcc" }
}

/// Finds nvcc in an explicit environment (see the module docs for the order). An `NVCC` that
/// does not name an executable file is an error rather than a fall-through.
pub fn find_nvcc_in(env: &NvccEnv) -> Result<PathBuf, NvccError> {
    if let Some(nvcc) = &env.nvcc {
        let path = PathBuf::from(nvcc);
        return if is_executable_file(&path) {
            Ok(path)
        } else {
            Err(NvccError::NotFound {
                detail: format!(
                    "NVCC is set to {}, expected an executable nvcc binary there, found none",
                    path.display()
                ),
            })
        };
    }
    let mut tried = Vec::new();
    for (var, root) in [("CUDA_HOME", &env.cuda_home), ("CUDA_PATH", &env.cuda_path)] {
        if let Some(root) = root {
            let path = Path::new(root).join("bin").join(nvcc_file_name());
            if is_executable_file(&path) {
                return Ok(path);
            }
            tried.push(format!("{var}: {}", path.display()));
        }
    }
    match &env.path {
        Some(path) => {
            for dir in std::env::split_paths(path) {
                let candidate = dir.join(nvcc_file_name());
                if is_executable_file(&candidate) {
                    return Ok(candidate);
                }
            }
            tried.push("PATH: no nvcc in any directory".to_owned());
        }
        None => tried.push("PATH: not set".to_owned()),
    }
    for dir in &env.nvidia_package_dirs {
        for sub in ["cu13", "cuda_nvcc"] {
            let candidate = dir.join(sub).join("bin").join(nvcc_file_name());
            if is_executable_file(&candidate) {
                return Ok(candidate);
            }
        }
    }
    if env.nvidia_package_dirs.is_empty() {
        tried.push("Python package nvidia-cuda-nvcc: no nvidia package directory found".to_owned());
    } else {
        let dirs: Vec<String> = env.nvidia_package_dirs.iter().map(|d| d.display().to_string()).collect();
        tried.push(format!("Python package nvidia-cuda-nvcc: no cu13/bin/nvcc under {}", dirs.join(", ")));
    }
    Err(NvccError::NotFound { detail: format!("tried {}", tried.join("; ")) })
}

/// Finds nvcc from the process environment, asking Python for its packages only when the
/// environment variables and `PATH` do not lead to one.
pub fn find_nvcc() -> Result<PathBuf, NvccError> {
    let env = NvccEnv::from_process();
    match find_nvcc_in(&env) {
        Ok(path) => Ok(path),
        // An explicit NVCC that is wrong is reported as such.
        Err(e) if env.nvcc.is_some() => Err(e),
        Err(_) => find_nvcc_in(&env.with_python_packages()),
    }
}

/// `nvcc --version` of the binary at `nvcc`, memoized per process.
pub fn nvcc_version(nvcc: &Path) -> Result<String, NvccError> {
    static VERSIONS: OnceLock<Mutex<Vec<(PathBuf, String)>>> = OnceLock::new();
    let versions = VERSIONS.get_or_init(|| Mutex::new(Vec::new()));
    if let Some((_, v)) = versions.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(p, _)| p == nvcc) {
        return Ok(v.clone());
    }
    let out = Command::new(nvcc).arg("--version").output().map_err(|e| NvccError::NotRunnable {
        path: nvcc.to_path_buf(),
        reason: format!("expected `nvcc --version` to run, found: {e}"),
    })?;
    if !out.status.success() {
        return Err(NvccError::NotRunnable {
            path: nvcc.to_path_buf(),
            reason: format!(
                "expected `nvcc --version` to succeed, found {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    versions.lock().unwrap_or_else(|p| p.into_inner()).push((nvcc.to_path_buf(), version.clone()));
    Ok(version)
}

/// Checks an architecture name: `sm_` followed by digits and an optional `a` (or `f`) suffix.
pub fn check_arch(arch: &str, origin: &'static str) -> Result<(), NvccError> {
    let ok = arch.strip_prefix("sm_").is_some_and(|rest| {
        let digits = rest.strip_suffix('a').or_else(|| rest.strip_suffix('f')).unwrap_or(rest);
        !digits.is_empty() && digits.len() <= 4 && digits.bytes().all(|b| b.is_ascii_digit())
    });
    if ok { Ok(()) } else { Err(NvccError::InvalidArch { found: arch.to_owned(), origin }) }
}

/// The target architecture: the explicit one, else the value of `MIRAGE_CUDA_ARCH`, else
/// [`DEFAULT_ARCH`] (pure: the environment value is passed in).
pub fn resolve_arch(explicit: Option<&str>, env_value: Option<&str>) -> Result<String, NvccError> {
    let (arch, origin) = match (explicit, env_value.map(str::trim).filter(|v| !v.is_empty())) {
        (Some(a), _) => (a, "CompileOptions::arch"),
        (None, Some(a)) => (a, "MIRAGE_CUDA_ARCH"),
        (None, None) => (DEFAULT_ARCH, "the default"),
    };
    check_arch(arch, origin)?;
    Ok(arch.to_owned())
}

fn check_name(name: &str) -> Result<(), NvccError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok { Ok(()) } else { Err(NvccError::InvalidName { found: name.to_owned() }) }
}

/// Options of [`compile_cubin`]. The default compiles for `MIRAGE_CUDA_ARCH` (or `sm_90a`) with
/// nvcc found by [`find_nvcc`], caching under [`default_cache_dir`].
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Target architecture; `None` reads `MIRAGE_CUDA_ARCH`, defaulting to `sm_90a`.
    pub arch: Option<String>,
    /// Include directories (`-I`). The contents of their header files are part of the cache key.
    pub include_dirs: Vec<PathBuf>,
    /// Further nvcc flags, after the standard ones.
    pub extra_flags: Vec<String>,
    /// Where sources and cubins are kept; `None` is [`default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// The nvcc binary; `None` is [`find_nvcc`].
    pub nvcc: Option<PathBuf>,
    /// Build a fatbin for [`resolve_archs`] of the architecture (`MIRAGE_CUDA_ARCHS`, by default
    /// sm_80 and sm_90a) instead of one cubin; the driver loads the code of the device's
    /// architecture. Each architecture costs one more compile.
    pub multi_arch: bool,
}

/// A compiled cubin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cubin {
    /// The cubin's bytes (an ELF file).
    pub bytes: Vec<u8>,
    /// Where the cubin is stored in the cache.
    pub path: PathBuf,
    /// Where the CUDA source it was built from is stored.
    pub cu_path: PathBuf,
    /// The architecture it was built for.
    pub arch: String,
    /// Whether it came from the cache rather than a fresh nvcc run.
    pub cached: bool,
}

/// The cache directory [`CACHE_DIR_ENV`] names, if it is set and not empty.
pub fn cache_dir_from_env() -> Option<PathBuf> {
    cache_dir_override(std::env::var_os(CACHE_DIR_ENV).as_deref())
}

/// The directory a value of [`CACHE_DIR_ENV`] names: `None` for an unset or blank value.
fn cache_dir_override(value: Option<&OsStr>) -> Option<PathBuf> {
    value.filter(|v| !v.to_string_lossy().trim().is_empty()).map(PathBuf::from)
}

/// The cache directory of a build whose output directory is `base`: [`CACHE_DIR_ENV`] when set,
/// else `<base>/mirage/nvcc-cache` (beside the build's artifacts, `mirage_core::ARTIFACT_DIR`).
pub fn cache_dir_under(base: &Path) -> PathBuf {
    cache_dir_from_env().unwrap_or_else(|| base.join(mirage_core::ARTIFACT_DIR).join("nvcc-cache"))
}

/// The default cache directory: [`CACHE_DIR_ENV`] when set, else [`cache_dir_under`] `<base>`
/// where `<base>` is `$OUT_DIR` in a build script, else `$CARGO_TARGET_DIR`, else the cargo
/// target directory the running binary lives in (the nearest ancestor holding cargo's
/// `CACHEDIR.TAG`, e.g. for tests), else the system temporary directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = cache_dir_from_env() {
        return dir;
    }
    let from_exe = || {
        let exe = std::env::current_exe().ok()?;
        exe.ancestors().skip(1).find(|dir| dir.join("CACHEDIR.TAG").is_file()).map(Path::to_path_buf)
    };
    let base = std::env::var_os("OUT_DIR")
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR"))
        .map(PathBuf::from)
        .or_else(from_exe)
        .unwrap_or_else(std::env::temp_dir);
    cache_dir_under(&base)
}

/// The environment variable listing the architectures a multi-architecture build targets,
/// comma-separated (e.g. `sm_80,sm_90a`).
pub const ARCHS_ENV: &str = "MIRAGE_CUDA_ARCHS";

/// The architectures a multi-architecture build targets by default: sm_80 (A100, and every
/// compute capability 8.x: A10, L4, L40S) and sm_90a (H100/H200).
pub const DEFAULT_ARCHS: [&str; 2] = ["sm_80", "sm_90a"];

/// The architectures of a multi-architecture build: the list in `env_value` (`MIRAGE_CUDA_ARCHS`)
/// when set, else [`DEFAULT_ARCHS`] when `primary` is the default architecture, else `primary`
/// alone (an explicit `MIRAGE_CUDA_ARCH` or builder setting). Sorted, without repeats.
pub fn resolve_archs(primary: &str, env_value: Option<&str>) -> Result<Vec<String>, NvccError> {
    let mut archs: Vec<String> = match env_value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(list) => list.split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect(),
        None if primary == DEFAULT_ARCH => DEFAULT_ARCHS.iter().map(|a| (*a).to_owned()).collect(),
        None => vec![primary.to_owned()],
    };
    for arch in &archs {
        check_arch(arch, ARCHS_ENV)?;
    }
    archs.sort();
    archs.dedup();
    Ok(archs)
}

/// The nvcc flags of a fatbin holding machine code for every architecture in `archs`.
pub fn fatbin_flags(archs: &[String]) -> Vec<String> {
    let mut flags = vec!["-fatbin".to_owned(), "-O3".to_owned(), "-std=c++17".to_owned()];
    for arch in archs {
        let virtual_arch = arch.replacen("sm_", "compute_", 1);
        flags.push(format!("-gencode=arch={virtual_arch},code={arch}"));
    }
    flags
}

/// The standard nvcc flags for an architecture.
pub fn standard_flags(arch: &str) -> Vec<String> {
    vec!["-cubin".into(), "-O3".into(), "-std=c++17".into(), format!("-arch={arch}")]
}

const HEADER_EXTENSIONS: &[&str] = &["h", "hh", "hpp", "hxx", "cuh", "inc", "inl", "cu"];

/// Hashes the header files under an include directory (sorted, with relative paths), so that a
/// changed header changes the cache key.
fn hash_include_dir(hasher: &mut Sha256, dir: &Path) -> Result<(), NvccError> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(entries) => entries,
            // A missing include directory is nvcc's business; it contributes nothing here.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("reading include directory", &d)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err("reading include directory", &d))?;
            let path = entry.path();
            let ty = entry.file_type().map_err(io_err("reading include directory", &path))?;
            if ty.is_dir() {
                stack.push(path);
            } else if path.extension().and_then(OsStr::to_str).is_some_and(|ext| HEADER_EXTENSIONS.contains(&ext)) {
                files.push(path);
            }
        }
    }
    files.sort();
    for file in files {
        let rel = file.strip_prefix(dir).unwrap_or(&file);
        hasher.update(rel.to_string_lossy().as_bytes());
        hasher.update([0]);
        let content = std::fs::read(&file).map_err(io_err("reading header", &file))?;
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    Ok(())
}

/// The cache key of a compile: a SHA-256 over the source, the architecture, the flags, the
/// include directories (and their headers' contents) and nvcc's version.
fn cache_key(
    source: &str,
    arch: &str,
    flags: &[String],
    include_dirs: &[PathBuf],
    nvcc_version: &str,
) -> Result<String, NvccError> {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(CACHE_VERSION.as_bytes());
    field(nvcc_version.as_bytes());
    field(arch.as_bytes());
    for flag in flags {
        field(flag.as_bytes());
    }
    field(source.as_bytes());
    for dir in include_dirs {
        h.update(dir.to_string_lossy().as_bytes());
        h.update([0]);
        hash_include_dir(&mut h, dir)?;
    }
    let digest = h.finalize();
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    Ok(hex)
}

/// A unique temporary name next to `path`, for write-then-rename.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

/// Writes a file atomically: to a temporary name in the same directory, then renamed.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), NvccError> {
    let tmp = temp_path(path);
    std::fs::write(&tmp, bytes).map_err(io_err("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err("renaming into place", path)(e)
    })
}

/// Whether nvcc's output looks like a cubin (an ELF file) or a fatbin.
fn is_elf(bytes: &[u8]) -> bool {
    bytes.len() >= 64 && (bytes.starts_with(b"\x7fELF") || bytes.starts_with(&0xBA55_ED50u32.to_le_bytes()))
}

/// Compiles CUDA C++ `source` to a cubin with nvcc (`-cubin -O3 -std=c++17 -arch=<arch>`, the
/// include directories, then any extra flags). `name` (letters, digits, `_`, `-`, `.`) names
/// the files in the cache. An identical compile (same source, architecture, flags, headers and
/// nvcc version) is served from the cache. On a compile error the message holds nvcc's output
/// and the path of the `.cu` file.
pub fn compile_cubin(source: &str, name: &str, opts: &CompileOptions) -> Result<Cubin, NvccError> {
    check_name(name)?;
    let env_arch = std::env::var(ARCH_ENV).ok();
    let primary = resolve_arch(opts.arch.as_deref(), env_arch.as_deref())?;
    let archs = if opts.multi_arch {
        resolve_archs(&primary, std::env::var(ARCHS_ENV).ok().as_deref())?
    } else {
        vec![primary]
    };
    // One architecture is a cubin; several are a fatbin, named by the list (`sm_80+sm_90a`).
    let arch = archs.join("+");
    let nvcc = match &opts.nvcc {
        Some(path) => path.clone(),
        None => find_nvcc()?,
    };
    let version = nvcc_version(&nvcc)?;
    let mut flags = if archs.len() > 1 { fatbin_flags(&archs) } else { standard_flags(&arch) };
    for dir in &opts.include_dirs {
        let mut flag = OsString::from("-I");
        flag.push(dir);
        flags.push(flag.to_string_lossy().into_owned());
    }
    flags.extend(opts.extra_flags.iter().cloned());
    let key = cache_key(source, &arch, &flags, &opts.include_dirs, &version)?;

    let cache_dir = opts.cache_dir.clone().unwrap_or_else(default_cache_dir);
    std::fs::create_dir_all(&cache_dir).map_err(io_err("creating cache directory", &cache_dir))?;
    let stem = format!("{name}-{arch}-{}", &key[..16]);
    let cu_path = cache_dir.join(format!("{stem}.cu"));
    let cubin_path = cache_dir.join(format!("{stem}.cubin"));

    // A damaged entry (not an ELF file or fatbin) is rebuilt below.
    if let Ok(bytes) = std::fs::read(&cubin_path)
        && is_elf(&bytes)
    {
        return Ok(Cubin { bytes, path: cubin_path, cu_path, arch, cached: true });
    }

    write_atomic(&cu_path, source.as_bytes())?;
    let tmp_cubin = temp_path(&cubin_path);
    let mut cmd = Command::new(&nvcc);
    cmd.args(&flags).arg("-o").arg(&tmp_cubin).arg(&cu_path);
    let command = format!("{} {} -o {} {}", nvcc.display(), flags.join(" "), tmp_cubin.display(), cu_path.display());
    let out = cmd.output().map_err(|e| NvccError::NotRunnable {
        path: nvcc.clone(),
        reason: format!("expected to start nvcc, found: {e}"),
    })?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp_cubin);
        let mut output = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !stdout.trim().is_empty() {
            output.push('\n');
            output.push_str(stdout.trim_end());
        }
        return Err(NvccError::Compile(Box::new(CompileFailure {
            name: name.to_owned(),
            arch,
            cu_path,
            command,
            status: out.status.to_string(),
            output,
        })));
    }
    let bytes = std::fs::read(&tmp_cubin).map_err(io_err("reading nvcc's output", &tmp_cubin))?;
    if !is_elf(&bytes) {
        let _ = std::fs::remove_file(&tmp_cubin);
        return Err(NvccError::BadOutput {
            name: name.to_owned(),
            path: tmp_cubin,
            found: format!("{} bytes starting with {:02x?}", bytes.len(), &bytes[..bytes.len().min(4)]),
        });
    }
    std::fs::rename(&tmp_cubin, &cubin_path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp_cubin);
        io_err("renaming the cubin into place", &cubin_path)(e)
    })?;
    Ok(Cubin { bytes, path: cubin_path, cu_path, arch, cached: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_cache_dir_override_is_no_override() {
        assert_eq!(cache_dir_override(None), None);
        assert_eq!(cache_dir_override(Some(OsStr::new(""))), None);
        assert_eq!(cache_dir_override(Some(OsStr::new("  "))), None);
        assert_eq!(cache_dir_override(Some(OsStr::new("/t/nvcc"))), Some(PathBuf::from("/t/nvcc")));
    }

    /// A fresh directory under the system temp dir, unique to this test process and tag.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mirage-nvcc-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        dir
    }

    fn fake_nvcc(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let path = dir.join("nvcc");
        std::fs::write(&path, "#!/bin/sh\n").unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        }
        path
    }

    /// The real nvcc: these tests must fail, not skip, when it is missing (CI installs it).
    fn real_nvcc() -> PathBuf {
        find_nvcc().unwrap_or_else(|e| panic!("these tests need nvcc 13.0: {e}"))
    }

    fn opts(cache: &Path, arch: &str) -> CompileOptions {
        CompileOptions {
            arch: Some(arch.to_owned()),
            cache_dir: Some(cache.to_path_buf()),
            nvcc: Some(real_nvcc()),
            ..CompileOptions::default()
        }
    }

    const SAXPY: &str = r#"
#include <cuda_fp16.h>
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void staged(const __half* x, __half* y) {
    extern __shared__ __half smem[];
    smem[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = smem[blockDim.x - 1 - threadIdx.x];
}
"#;

    #[test]
    fn nvcc_pointing_nowhere_is_a_clear_error() {
        let env =
            NvccEnv { nvcc: Some("/nonexistent/bin/nvcc".into()), path: Some("/usr/bin".into()), ..NvccEnv::default() };
        let e = find_nvcc_in(&env).expect_err("NVCC names no file");
        let msg = e.to_string();
        assert!(msg.contains("NVCC is set to /nonexistent/bin/nvcc"), "{msg}");
        for way in ["NVCC", "CUDA_HOME", "CUDA_PATH", "PATH", "nvidia-cuda-nvcc", "scripts/install-nvcc.sh"] {
            assert!(msg.contains(way), "message should mention {way}: {msg}");
        }
    }

    #[test]
    fn nothing_found_names_every_way() {
        let empty = scratch("empty");
        let env = NvccEnv {
            path: Some(empty.clone().into_os_string()),
            cuda_home: Some(empty.join("cuda").into_os_string()),
            nvidia_package_dirs: vec![empty.join("nvidia")],
            ..NvccEnv::default()
        };
        let msg = find_nvcc_in(&env).expect_err("nothing there").to_string();
        assert!(msg.starts_with("nvcc not found"), "{msg}");
        assert!(msg.contains("CUDA_HOME: ") && msg.contains("cu13/bin/nvcc"), "{msg}");
        assert!(msg.contains(INSTALL_SCRIPT), "{msg}");
    }

    #[test]
    fn finder_order() {
        let root = scratch("order");
        let explicit = fake_nvcc(&root.join("explicit"));
        let home = fake_nvcc(&root.join("home/bin"));
        let cuda_path = fake_nvcc(&root.join("cudapath/bin"));
        let on_path = fake_nvcc(&root.join("onpath"));
        let pip = fake_nvcc(&root.join("site/nvidia/cu13/bin"));
        let full = NvccEnv {
            nvcc: Some(explicit.clone().into_os_string()),
            cuda_home: Some(root.join("home").into_os_string()),
            cuda_path: Some(root.join("cudapath").into_os_string()),
            path: std::env::join_paths([root.join("nothing"), root.join("onpath")]).ok(),
            nvidia_package_dirs: vec![root.join("site/nvidia")],
        };
        let found = |env: &NvccEnv| find_nvcc_in(env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found(&full), explicit);
        let env = NvccEnv { nvcc: None, ..full.clone() };
        assert_eq!(found(&env), home);
        let env = NvccEnv { cuda_home: Some(root.join("missing").into_os_string()), ..env };
        assert_eq!(found(&env), cuda_path);
        let env = NvccEnv { cuda_path: None, ..env };
        assert_eq!(found(&env), on_path);
        let env = NvccEnv { path: None, ..env };
        assert_eq!(found(&env), pip);
    }

    #[test]
    fn multi_arch_resolution() {
        let archs = |p: &str, env: Option<&str>| resolve_archs(p, env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(archs(DEFAULT_ARCH, None), vec!["sm_80", "sm_90a"]);
        assert_eq!(archs("sm_80", None), vec!["sm_80"]);
        assert_eq!(archs(DEFAULT_ARCH, Some("sm_90a, sm_80,sm_90a")), vec!["sm_80", "sm_90a"]);
        assert_eq!(archs(DEFAULT_ARCH, Some(" ")), vec!["sm_80", "sm_90a"]);
        let e = resolve_archs(DEFAULT_ARCH, Some("sm_80,compute_90")).expect_err("bad arch");
        assert!(e.to_string().contains("\"compute_90\" (from MIRAGE_CUDA_ARCHS)"), "{e}");
        assert_eq!(
            fatbin_flags(&archs(DEFAULT_ARCH, None))[3..],
            ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a"]
        );
    }

    /// A fatbin for the default architectures, read back as the runtime does: a simulated sm_80
    /// device (A100) selects the sm_80 code, an sm_89 one (L40S) too, an H200 the sm_90a code, and
    /// a Blackwell device none (its error names both sides).
    #[test]
    fn fatbins_hold_code_for_each_architecture() {
        use mirage_runtime::{ComputeCapability, image_archs, select_arch};
        let cache = scratch("fatbin");
        let fat_opts = CompileOptions { multi_arch: true, ..opts(&cache, DEFAULT_ARCH) };
        let fatbin = compile_cubin(SAXPY, "saxpy_fat", &fat_opts).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fatbin.arch, "sm_80+sm_90a");
        let archs = image_archs(&fatbin.bytes).expect("a fatbin");
        let names: Vec<String> = archs.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["sm_80", "sm_90a"]);
        let pick = |major, minor| select_arch(ComputeCapability::new(major, minor), &archs).map(|a| a.to_string());
        assert_eq!(pick(8, 0).as_deref(), Some("sm_80"));
        assert_eq!(pick(8, 9).as_deref(), Some("sm_80"));
        assert_eq!(pick(9, 0).as_deref(), Some("sm_90a"));
        assert_eq!(pick(10, 0), None);
        let e = mirage_runtime::RuntimeError::Architecture {
            name: "saxpy".into(),
            ordinal: 0,
            device: ComputeCapability::new(10, 0),
            available: names,
        };
        assert!(
            e.to_string()
                .contains("compute capability 10.0, sm_100): expected code for it, found code for sm_80, sm_90a only"),
            "{e}"
        );
        let cubin = compile_cubin(SAXPY, "saxpy_80", &opts(&cache, "sm_80")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(image_archs(&cubin.bytes).map(|a| a[0].to_string()).as_deref(), Some("sm_80"));
    }

    #[test]
    fn arch_resolution() {
        assert_eq!(resolve_arch(None, None).ok().as_deref(), Some("sm_90a"));
        assert_eq!(resolve_arch(None, Some("sm_80")).ok().as_deref(), Some("sm_80"));
        assert_eq!(resolve_arch(Some("sm_90a"), Some("sm_80")).ok().as_deref(), Some("sm_90a"));
        assert_eq!(resolve_arch(None, Some("  ")).ok().as_deref(), Some("sm_90a"));
        let e = resolve_arch(None, Some("-arch=sm_90; rm")).expect_err("bad arch");
        assert!(e.to_string().contains("MIRAGE_CUDA_ARCH"), "{e}");
        assert!(check_arch("compute_90", "x").is_err());
        assert!(check_arch("sm_", "x").is_err());
        assert!(check_arch("sm_100a", "x").is_ok());
    }

    #[test]
    fn default_cache_dir_is_under_the_target_dir() {
        let dir = default_cache_dir();
        // `MIRAGE_NVCC_CACHE_DIR` (set by scripts/test.sh) names the directory outright.
        if let Some(named) = cache_dir_from_env() {
            assert_eq!(dir, named);
            return;
        }
        assert!(dir.ends_with("mirage/nvcc-cache"), "{}", dir.display());
        // Inside a build script (and under `cargo test` of a package with one, as mirage is)
        // OUT_DIR is set and the cache lands there; otherwise tests run from
        // target/<profile>/deps and the cache lands in the cargo target directory.
        if let Some(out) = std::env::var_os("OUT_DIR") {
            assert!(dir.starts_with(&out), "{} is not under OUT_DIR {}", dir.display(), Path::new(&out).display());
        } else if std::env::var_os("CARGO_TARGET_DIR").is_none() {
            let base = dir.parent().and_then(Path::parent).unwrap_or_else(|| panic!("{}", dir.display()));
            assert!(base.join("CACHEDIR.TAG").is_file(), "{}", dir.display());
        }
    }

    #[test]
    fn bad_names_rejected() {
        for name in ["", "../x", ".hidden", "a b", "x/y"] {
            assert!(matches!(check_name(name), Err(NvccError::InvalidName { .. })), "{name:?}");
        }
        assert!(check_name("gated_mlp-0.v1").is_ok());
    }

    #[test]
    fn compiles_for_sm90a_and_sm80() {
        let cache = scratch("archs");
        for arch in ["sm_90a", "sm_80"] {
            let cubin = compile_cubin(SAXPY, "saxpy", &opts(&cache, arch)).unwrap_or_else(|e| panic!("{e}"));
            assert!(cubin.bytes.starts_with(b"\x7fELF"), "{arch}: not an ELF file");
            assert_eq!(cubin.arch, arch);
            assert!(!cubin.cached);
            assert_eq!(std::fs::read(&cubin.path).ok(), Some(cubin.bytes.clone()));
            assert!(cubin.cu_path.exists());
        }
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn identical_compile_hits_the_cache() {
        let cache = scratch("cache");
        let first = compile_cubin(SAXPY, "cached", &opts(&cache, "sm_90a")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!first.cached);
        let second = compile_cubin(SAXPY, "cached", &opts(&cache, "sm_90a")).unwrap_or_else(|e| panic!("{e}"));
        assert!(second.cached, "second identical compile should come from the cache");
        assert_eq!(first.bytes, second.bytes);
        assert_eq!(first.path, second.path);
        // A different flag is a different entry.
        let mut o = opts(&cache, "sm_90a");
        o.extra_flags.push("-lineinfo".into());
        let third = compile_cubin(SAXPY, "cached", &o).unwrap_or_else(|e| panic!("{e}"));
        assert!(!third.cached);
        assert_ne!(third.path, first.path);
        // No temporary files are left behind.
        let leftovers: Vec<_> = std::fs::read_dir(&cache)
            .map(|rd| rd.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(leftovers.iter().all(|n| !n.to_string_lossy().contains(".tmp-")), "{leftovers:?}");
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn changed_header_changes_the_key() {
        let dir = scratch("headers");
        let inc = dir.join("include");
        std::fs::create_dir_all(&inc).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(inc.join("k.cuh"), "#define SCALE 2.0f\n").unwrap_or_else(|e| panic!("{e}"));
        let src = "#include \"k.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] *= SCALE; }\n";
        let mut o = opts(&dir.join("cache"), "sm_90a");
        o.include_dirs.push(inc.clone());
        let a = compile_cubin(src, "hdr", &o).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(inc.join("k.cuh"), "#define SCALE 3.0f\n").unwrap_or_else(|e| panic!("{e}"));
        let b = compile_cubin(src, "hdr", &o).unwrap_or_else(|e| panic!("{e}"));
        assert!(!b.cached, "a changed header must not hit the cache");
        assert_ne!(a.path, b.path);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn compile_error_reports_nvcc_output_and_source_path() {
        let cache = scratch("error");
        let src = "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared_thing; }\n";
        let e = compile_cubin(src, "broken", &opts(&cache, "sm_90a")).expect_err("must not compile");
        let msg = e.to_string();
        let NvccError::Compile(failure) = &e else { panic!("expected a compile error, found {e:?}") };
        let (cu_path, output) = (&failure.cu_path, &failure.output);
        println!("{msg}");
        assert!(output.contains("undeclared_thing"), "nvcc's message should be in the error: {msg}");
        assert!(msg.contains(&cu_path.display().to_string()), "{msg}");
        assert!(cu_path.exists(), "the .cu file should be kept for inspection");
        assert_eq!(std::fs::read_to_string(cu_path).ok().as_deref(), Some(src));
        let _ = std::fs::remove_dir_all(&cache);
    }
}
