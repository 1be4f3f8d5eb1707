//! The build-script API: `mirage::build::compile_or_exit(files)` in a user's build.rs finds
//! every `#[mugraph]` function of the files, lowers it, optimizes it, generates CUDA, compiles a
//! cubin with nvcc and writes the artifacts the `#[mugraph]` expansion embeds.
//!
//! ```no_run
//! // In build.rs's `fn main()`, with
//! // `[build-dependencies] mirage-rs = { version = "0.1", features = ["build"] }`:
//! mirage::build::compile_or_exit(["src/kernels.rs"]);
//! ```
//!
//! [`compile_or_exit`] prints every error (file:line:column and function) and exits with status
//! 1; [`compile`] returns them ([`BuildError`]) for a build script that does more.
//!
//! Artifacts go to `$OUT_DIR/mirage/`, four files per function, named
//! `<fn name>-<fingerprint hash>` ([`artifact_stem`]; the macro computes the same name from its
//! tokens, so an artifact of an older version of the function is simply not found):
//! `.cubin` (the kernels), `.plan.json` (the launch plan, read at run time, recording the
//! fingerprint), `.mugraph.json` (the chosen µGraph) and `.cu` (the CUDA source, for
//! inspection). A file is written only when its content changes. A fifth, `.build.json`, records
//! what they were built from (the compiler, the settings, the search cache entry): a function
//! whose record still matches is not searched, verified or compiled again, so editing one
//! function of a file rebuilds only that one.
//!
//! Each program is superoptimized ([`crate::search::superoptimize`]): the cheapest µGraph proven
//! equivalent to it, read from the persistent search cache when the cache holds one
//! (re-verified once, never trusted), searched otherwise; a program no single search solves is
//! searched in parts and composed ([`crate::search::partition`]), and an operator no search
//! expresses becomes its own library kernel, named in a `cargo:warning=` line with the reason.
//! A program the search cannot handle at all is compiled from its own kernel graph (one kernel
//! per operator, each lowered to a default block graph, the operators listed) and a
//! `cargo:warning=` line says why. Kernel-level operators left in the chosen µGraph get default
//! block graphs. The environment:
//!
//! | variable | effect |
//! |---|---|
//! | `MIRAGE_CACHE_DIR` | the search cache directory (default: `.mirage/` at the workspace root) |
//! | `MIRAGE_CACHE_WRITE=1` | store new search results there; by default they go to `$OUT_DIR/mirage/search-cache/` only (like sqlx's offline mode: commit the cache after `mirage prepare`) |
//! | `MIRAGE_OFFLINE=1` | a function without a cache entry is an error instead of a search |
//! | `MIRAGE_SEARCH_BUDGET=S` | the search's wall-clock budget per function, in seconds (default 60); the best verified µGraph found by then is used |
//! | `MIRAGE_SEARCH_STATES=N` | the search's state budget per function (default: none): stops the search after N visited states, a limit that does not depend on the machine's speed (the time budget still applies) |
//! | `MIRAGE_CUDA_ARCH` | the target architecture (default sm_90a) |
//! | `MIRAGE_NVCC_CACHE_DIR` | nvcc's cache directory (default: `$OUT_DIR/mirage/nvcc-cache/`); one directory shared by several build configurations (`cargo clippy`, `cargo test`) compiles each kernel once ([`nvcc::CACHE_DIR_ENV`]) |
//! | `MIRAGE_TUNE` | measure candidates on a visible GPU ([`crate::tune`]); stores into the cache directory |
//!
//! Searching takes seconds per function when the build script is optimized and minutes when
//! not: a `cargo:warning=` says so when mirage runs at `opt-level` 0 (add
//! `[profile.dev.build-override] opt-level = 3`). While it works the build prints a line per
//! function and, every ten seconds, which ones are still running, on stderr (shown by
//! `cargo build -vv`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::cache::Cache;
use crate::codegen::{self, CodegenError, KernelOptions};
use crate::cost::Arch;
use crate::dims::{DimPlan, Dims};
use crate::ir::{KernelGraph, KernelOp};
use crate::lower::{self, LowerError};
use crate::nvcc::{self, NvccError};
use crate::search::{self, SearchConfig, SearchError};
use crate::tune;

/// The directory under `$OUT_DIR` holding the artifacts, and their file stem (shared with the
/// `#[mugraph]` expansion, which looks for them).
pub use mirage_core::{ARTIFACT_DIR, artifact_stem};

/// The artifact stem of one size bucket of a program ([`lower::ProgramBucket`]), shared with the
/// `#[mugraph]` expansion.
pub use crate::lower::syntax::bucket_stem;

/// Steps slower than this are reported with a `cargo:warning=` line.
const SLOW_STEP: Duration = Duration::from_secs(1);

/// How often the build says which functions are still being searched.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The search cache directory, instead of `.mirage/` at the workspace root.
pub const CACHE_DIR_ENV: &str = "MIRAGE_CACHE_DIR";
/// `1`: store new search results in the cache directory (default: in `$OUT_DIR` only).
pub const CACHE_WRITE_ENV: &str = "MIRAGE_CACHE_WRITE";
/// The search's wall-clock budget per function, in seconds.
pub const SEARCH_BUDGET_ENV: &str = "MIRAGE_SEARCH_BUDGET";
/// The search's state budget per function ([`SearchConfig::max_states`]).
pub const SEARCH_STATES_ENV: &str = "MIRAGE_SEARCH_STATES";

/// The `opt-level` mirage itself was compiled with (recorded by its build script).
const OPT_LEVEL: &str = env!("MIRAGE_BUILD_OPT_LEVEL");

/// Why a build failed. Messages name the file, line, column and function where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A `#[mugraph]` function (or its file) could not be read, parsed, checked or lowered.
    #[error("mirage: {0}")]
    Lower(Box<LowerError>),

    /// Code generation failed for a function.
    #[error("mirage: {at}: code generation failed: {source}")]
    Codegen {
        /// The function.
        at: Box<FnLocation>,
        /// What went wrong.
        source: CodegenError,
    },

    /// nvcc could not be found or failed for a function.
    #[error("mirage: {at}: {source}")]
    Nvcc {
        /// The function (`<all>` for a setting every function shares, such as the architecture).
        at: Box<FnLocation>,
        /// What went wrong (a missing nvcc names the ways to provide one).
        source: NvccError,
    },

    /// No output directory: `compile` runs in a build script, where cargo sets `OUT_DIR`.
    #[error(
        "mirage: OUT_DIR is not set: expected mirage::build::compile to run in a build script \
         (build.rs), where cargo sets OUT_DIR, or an output directory set with Builder::out_dir"
    )]
    NoOutDir,

    /// The superoptimizer could not produce a µGraph in a way a fallback would hide: offline
    /// mode with no cache entry, or verification that could not run.
    #[error("mirage: {at}: {source}")]
    Search {
        /// The function.
        at: Box<FnLocation>,
        /// What went wrong.
        source: Box<SearchError>,
    },

    /// A program with runtime-sized dims has no µGraph that serves every size of its ranges
    /// (none verifies over them, or code generation cannot write any at runtime sizes): there is
    /// no static fallback, which would only run at the upper bounds.
    #[error(
        "mirage: {at}: no µGraph serves the runtime-sized dims {ranges} (the program is not built at a fixed size instead): {source}"
    )]
    Dims {
        /// The function.
        at: Box<FnLocation>,
        /// The declared ranges, as written.
        ranges: String,
        /// Why the search found none.
        source: Box<SearchError>,
    },

    /// Tuning (`MIRAGE_TUNE`) failed in a way that is not a candidate's own failure.
    #[error("mirage: {at}: tuning: {source}")]
    Tune {
        /// The function (`<all>` for the `MIRAGE_TUNE` setting itself).
        at: Box<FnLocation>,
        /// What went wrong.
        source: Box<crate::tune::TuneError>,
    },

    /// An environment variable (or setting) has a value mirage does not understand.
    #[error("mirage: {name}={value:?}: {expected}")]
    Setting {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// What it should be.
        expected: String,
    },

    /// Several functions failed: every error, in file and source order.
    #[error("{}\nmirage: {} errors in #[mugraph] functions", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"), .0.len())]
    Many(Vec<BuildError>),

    /// Writing an artifact failed.
    #[error("mirage: writing {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A bucket's ranges as in messages: `B in 9..=16` (a single size: `B = 1`).
fn fmt_bucket(names: &[String], ranges: &[(usize, usize)]) -> String {
    let parts: Vec<String> = ranges
        .iter()
        .enumerate()
        .map(|(i, &(lo, hi))| {
            let name = names.get(i).map_or("dim", String::as_str);
            if lo == hi { format!("{name} = {lo}") } else { format!("{name} in {lo}..={hi}") }
        })
        .collect();
    parts.join(", ")
}

/// Where a `#[mugraph]` function is: `file:line:column: `module::name``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FnLocation {
    /// The source file.
    pub file: String,
    /// 1-based line of the function's name.
    pub line: usize,
    /// 1-based column of the function's name.
    pub column: usize,
    /// The function's path (`module::name`).
    pub function: String,
}

impl std::fmt::Display for FnLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: `{}`", self.file, self.line, self.column, self.function)
    }
}

/// The artifacts written for one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactPaths {
    /// The cubin.
    pub cubin: PathBuf,
    /// The launch plan (JSON).
    pub plan: PathBuf,
    /// The chosen µGraph (JSON).
    pub mugraph: PathBuf,
    /// The CUDA source.
    pub cuda: PathBuf,
}

/// What was built for one `#[mugraph]` function.
#[derive(Clone, Debug)]
pub struct BuiltProgram {
    /// The source file.
    pub file: PathBuf,
    /// The function's position: 1-based line and column of its name.
    pub line_column: (usize, usize),
    /// The inline modules enclosing it in its file, outermost first.
    pub module_path: Vec<String>,
    /// The function's name.
    pub name: String,
    /// The program's fingerprint hash (the macro computes the same).
    pub fingerprint_hash: String,
    /// For a program built as several size buckets: this bucket's index and, per dimension
    /// variable, the `(lo, hi)` it covers (each bucket is a program of its own here).
    pub bucket: Option<(usize, Vec<(usize, usize)>)>,
    /// The names of the function's dimension variables, in declaration order.
    pub dims_names: Vec<String>,
    /// The artifacts' file stem ([`artifact_stem`]; with a bucket, [`bucket_stem`] of it).
    pub stem: String,
    /// The artifacts.
    pub paths: ArtifactPaths,
    /// The chosen µGraph (kernel operators lowered to default block graphs).
    pub mugraph: KernelGraph,
    /// How it was chosen: the search's report (chosen µGraph, top candidates and their
    /// estimated costs, search statistics or the cache file), or why the program's own graph
    /// was used.
    pub search_report: String,
    /// Whether the µGraph came from the search (or its cache) rather than the fallback.
    pub searched: bool,
    /// Whether it came from the search cache.
    pub from_cache: bool,
    /// The launch plan.
    pub plan: codegen::plan::LaunchPlan,
    /// Whether the cubin came from nvcc's cache.
    pub nvcc_cached: bool,
    /// Whether the artifacts of an earlier build were reused as they were (same function, same
    /// compiler, settings and cache entry): nothing searched, verified or compiled.
    pub reused: bool,
    /// Time spent generating and compiling it.
    pub elapsed: Duration,
}

impl BuiltProgram {
    /// `module::name` (just `name` at the top level of its file).
    pub fn path(&self) -> String {
        qualified(&self.module_path, &self.name)
    }
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The directory holding the artifacts (`$OUT_DIR/mirage`).
    pub artifact_dir: PathBuf,
    /// The target architecture.
    pub arch: String,
    /// Every function built, in file order then source order.
    pub programs: Vec<BuiltProgram>,
}

/// Builds the `#[mugraph]` functions of the given files with the default settings: artifacts in
/// `$OUT_DIR/mirage/`, architecture from `MIRAGE_CUDA_ARCH` (default sm_90a), cargo directives
/// on stdout. See [`Builder`] for the settings.
pub fn compile<I, P>(files: I) -> Result<BuildReport, BuildError>
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    Builder::new().files(files).compile()
}

/// [`compile`] for a build script's `main`: on failure prints every error (file:line:column and
/// function, one per bad function) to stderr, which cargo shows, and exits with status 1.
pub fn compile_or_exit<I, P>(files: I) -> BuildReport
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    Builder::new().files(files).compile_or_exit()
}

/// Settings of a build; [`compile`] uses the defaults.
#[derive(Clone, Debug)]
pub struct Builder {
    files: Vec<PathBuf>,
    out_dir: Option<PathBuf>,
    arch: Option<String>,
    cargo_directives: bool,
    kernel_options: KernelOptions,
    nvcc: Option<PathBuf>,
    search: Option<SearchConfig>,
    cache_dir: Option<PathBuf>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// No files yet; defaults for everything else.
    pub fn new() -> Builder {
        Builder {
            files: Vec::new(),
            out_dir: None,
            arch: None,
            cargo_directives: true,
            kernel_options: KernelOptions::default(),
            nvcc: None,
            search: None,
            cache_dir: None,
        }
    }

    /// Adds a source file (relative paths are relative to the package root, the build script's
    /// working directory).
    pub fn file(mut self, file: impl AsRef<Path>) -> Builder {
        self.files.push(file.as_ref().to_path_buf());
        self
    }

    /// Adds source files.
    pub fn files<I, P>(mut self, files: I) -> Builder
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        self.files.extend(files.into_iter().map(|f| f.as_ref().to_path_buf()));
        self
    }

    /// Writes the artifacts under `dir/mirage/` instead of `$OUT_DIR/mirage/`.
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Builder {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Targets `arch` (e.g. `sm_80`) instead of `MIRAGE_CUDA_ARCH` or sm_90a.
    pub fn arch(mut self, arch: impl Into<String>) -> Builder {
        self.arch = Some(arch.into());
        self
    }

    /// Whether to print `cargo:` directives (rerun-if-changed, warnings); on by default.
    pub fn cargo_directives(mut self, on: bool) -> Builder {
        self.cargo_directives = on;
        self
    }

    /// Uses this nvcc binary instead of finding one (`NVCC`, `CUDA_HOME`/`CUDA_PATH`, `PATH`, the
    /// Python package; see `mirage::nvcc::find_nvcc`).
    pub fn nvcc(mut self, path: impl AsRef<Path>) -> Builder {
        self.nvcc = Some(path.as_ref().to_path_buf());
        self
    }

    /// Code generation options.
    pub fn kernel_options(mut self, opts: KernelOptions) -> Builder {
        self.kernel_options = opts;
        self
    }

    /// Search settings (default: [`SearchConfig::for_arch`] of the target architecture).
    pub fn search_config(mut self, cfg: SearchConfig) -> Builder {
        self.search = Some(cfg);
        self
    }

    /// Keeps the search cache in `dir` instead of `MIRAGE_CACHE_DIR` or `.mirage/` at the
    /// workspace root (the nearest directory above the package, `CARGO_MANIFEST_DIR`, whose
    /// Cargo.toml has `[workspace]`).
    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> Builder {
        self.cache_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    fn say(&self, line: &str) {
        if self.cargo_directives {
            println!("{line}");
        }
    }

    /// [`Builder::compile`], printing every error and exiting with status 1 on failure (see
    /// [`compile_or_exit`]).
    pub fn compile_or_exit(&self) -> BuildReport {
        match self.compile() {
            Ok(report) => report,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1)
            }
        }
    }

    /// The search cache: read from the cache directory; written there only with
    /// `MIRAGE_CACHE_WRITE=1` or tuning, else into `out_dir/mirage/search-cache/`.
    fn cache(&self, artifact_dir: &Path, tune_mode: tune::TuneMode) -> Result<Cache, BuildError> {
        let dir = match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => cache_dir_from(&workspace_root()),
        };
        let write = match std::env::var(CACHE_WRITE_ENV).as_deref().map(str::trim) {
            Ok("1") => true,
            Ok("" | "0") | Err(_) => false,
            Ok(other) => {
                return Err(BuildError::Setting {
                    name: CACHE_WRITE_ENV.into(),
                    value: other.into(),
                    expected: "expected 1 (store new search results in the cache directory) or 0".into(),
                });
            }
        };
        let cache = Cache::new(dir);
        Ok(if write || tune_mode != tune::TuneMode::Off {
            cache
        } else {
            cache.with_write_dir(artifact_dir.join("search-cache"))
        })
    }

    /// Runs the build: lower every file, then generate and compile every function (in parallel),
    /// then write the artifacts. Every function is built even when others fail; the errors are
    /// returned together ([`BuildError::Many`] when there are several), in file and source order.
    pub fn compile(&self) -> Result<BuildReport, BuildError> {
        for file in &self.files {
            self.say(&format!("cargo:rerun-if-changed={}", file.display()));
        }
        for var in nvcc::ENV_VARS {
            self.say(&format!("cargo:rerun-if-env-changed={var}"));
        }
        let out_dir = match &self.out_dir {
            Some(dir) => dir.clone(),
            None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or(BuildError::NoOutDir)?),
        };
        let artifact_dir = out_dir.join(ARTIFACT_DIR);
        std::fs::create_dir_all(&artifact_dir)
            .map_err(|source| BuildError::Io { path: artifact_dir.clone(), source })?;
        let env_arch = std::env::var(nvcc::ARCH_ENV).ok();
        let arch =
            nvcc::resolve_arch(self.arch.as_deref(), env_arch.as_deref()).map_err(|source| BuildError::Nvcc {
                at: Box::new(FnLocation { file: "<build>".into(), line: 0, column: 0, function: "<all>".into() }),
                source,
            })?;

        let started = Instant::now();
        let mut jobs = Vec::new();
        let mut errors: Vec<BuildError> = Vec::new();
        for file in &self.files {
            let (programs, lower_errors) = lower::lower_file_all(file);
            errors.extend(lower_errors.into_iter().map(BuildError::from));
            let positions = fn_positions(file);
            for program in programs {
                let line_column = positions
                    .iter()
                    .find(|(m, n, _)| *m == program.module_path && *n == program.name)
                    .map_or((0, 0), |(_, _, lc)| *lc);
                // A program of several size buckets: each bucket is built as a program of its own
                // (its sub-range of the dims, its graph at their upper bounds), the same way.
                let names: Vec<String> = program.dims.vars.iter().map(|v| v.name.clone()).collect();
                for (bucket, built) in program.builds() {
                    let bucket = bucket.map(|i| (i, program.buckets[i].ranges.clone()));
                    jobs.push((file.clone(), line_column, built, bucket, names.clone()));
                }
            }
        }
        if started.elapsed() > SLOW_STEP {
            self.say(&format!(
                "cargo:warning=mirage: parsed and lowered {} programs in {:.1} s",
                jobs.len(),
                started.elapsed().as_secs_f64()
            ));
        }
        self.say("cargo:rerun-if-env-changed=MIRAGE_OFFLINE");
        for var in [tune::TUNE_ENV, CACHE_DIR_ENV, CACHE_WRITE_ENV, SEARCH_BUDGET_ENV, SEARCH_STATES_ENV] {
            self.say(&format!("cargo:rerun-if-env-changed={var}"));
        }
        let tune_mode = tune::TuneMode::from_env().map_err(|reason| BuildError::Tune {
            at: Box::new(FnLocation { file: "<build>".into(), line: 0, column: 0, function: "<all>".into() }),
            source: Box::new(tune::TuneError::format(tune::TUNE_ENV, reason)),
        })?;
        let mut search_cfg = match &self.search {
            Some(cfg) => cfg.clone(),
            None => SearchConfig::for_arch(Arch::from_name(&arch).unwrap_or_default()),
        };
        if let Some(budget) = search_budget()? {
            search_cfg.budget = budget;
        }
        if let Some(states) = search_states()? {
            search_cfg.max_states = states;
        }
        let cache = self.cache(&artifact_dir, tune_mode)?;
        let nvcc_opts = nvcc::CompileOptions {
            arch: Some(arch.clone()),
            cache_dir: Some(nvcc::cache_dir_under(&out_dir)),
            nvcc: self.nvcc.clone(),
            multi_arch: true,
            ..Default::default()
        };
        let progress = Progress::default();
        let finished = AtomicBool::new(false);
        let results: Vec<Result<BuiltProgram, BuildError>> = std::thread::scope(|scope| {
            scope.spawn(|| progress.heartbeat(&finished, started));
            let results = jobs
                .par_iter()
                .map(|(file, line_column, program, bucket, names)| {
                    let shared = Shared {
                        artifact_dir: &artifact_dir,
                        nvcc_opts: &nvcc_opts,
                        search_cfg: &search_cfg,
                        tune_mode,
                        cache: &cache,
                        progress: &progress,
                    };
                    self.build_one(&shared, file, *line_column, program, bucket.clone(), names.clone())
                })
                .collect();
            finished.store(true, Ordering::Relaxed);
            results
        });
        let mut programs = Vec::with_capacity(results.len());
        for r in results {
            let built = match r {
                Ok(built) => built,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if !built.searched {
                self.say(&format!(
                    "cargo:warning=mirage: `{}` ({}): {}",
                    built.path(),
                    built.file.display(),
                    built.search_report.lines().next().unwrap_or("")
                ));
            }
            for note in built.search_report.lines().filter(|l| l.starts_with("note: ")) {
                self.say(&format!("cargo:warning=mirage: `{}`: {}", built.path(), &note[6..]));
            }
            if built.elapsed > SLOW_STEP || built.bucket.is_some() {
                self.say(&format!(
                    "cargo:warning=mirage: built `{}`{} ({}, {} kernels, {}, {}) in {:.1} s",
                    built.path(),
                    built.bucket.as_ref().map_or(String::new(), |(i, ranges)| format!(
                        " bucket {i} ({}; {})",
                        fmt_bucket(&built.dims_names, ranges),
                        built.search_report.lines().next().unwrap_or("").trim_end_matches(':')
                    )),
                    built.file.display(),
                    built.plan.kernels.len(),
                    if built.reused {
                        "reused"
                    } else if built.from_cache {
                        "µGraph from the search cache"
                    } else if built.searched {
                        "searched"
                    } else {
                        "not searched"
                    },
                    if built.nvcc_cached { "cubin from nvcc's cache" } else { "nvcc" },
                    built.elapsed.as_secs_f64()
                ));
            }
            programs.push(built);
        }
        if programs.iter().any(|p| !p.reused) && OPT_LEVEL == "0" {
            self.say(
                "cargo:warning=mirage: the build script runs unoptimized (opt-level 0): searching and verifying \
                 take minutes instead of seconds. Add `[profile.dev.build-override] opt-level = 3` (and the same \
                 for `profile.release`) to the workspace's Cargo.toml",
            );
        }
        if errors.len() > 1 {
            return Err(BuildError::Many(errors));
        }
        if let Some(e) = errors.pop() {
            return Err(e);
        }
        if started.elapsed() > SLOW_STEP {
            let compiled = programs.iter().filter(|p| !p.nvcc_cached).count();
            self.say(&format!(
                "cargo:warning=mirage: built {} #[mugraph] programs ({compiled} compiled by nvcc for {arch}, {} from its cache) in {:.1} s",
                programs.len(),
                programs.len() - compiled,
                started.elapsed().as_secs_f64()
            ));
        }
        Ok(BuildReport { artifact_dir, arch, programs })
    }

    fn build_one(
        &self,
        shared: &Shared<'_>,
        file: &Path,
        (line, column): (usize, usize),
        program: &lower::Program,
        bucket: Option<(usize, Vec<(usize, usize)>)>,
        dims_names: Vec<String>,
    ) -> Result<BuiltProgram, BuildError> {
        let Shared { artifact_dir, nvcc_opts, search_cfg, tune_mode, cache, progress } = *shared;
        let started = Instant::now();
        let at = || {
            Box::new(FnLocation {
                file: file.display().to_string(),
                line,
                column,
                function: qualified(&program.module_path, &program.name),
            })
        };
        let codegen_err = |source: CodegenError| BuildError::Codegen { at: at(), source };
        let stem = match &bucket {
            Some((i, _)) => bucket_stem(&artifact_stem(&program.name, &program.fingerprint_hash), *i),
            None => artifact_stem(&program.name, &program.fingerprint_hash),
        };
        let paths = ArtifactPaths {
            cubin: artifact_dir.join(format!("{stem}.cubin")),
            plan: artifact_dir.join(format!("{stem}.plan.json")),
            mugraph: artifact_dir.join(format!("{stem}.mugraph.json")),
            cuda: artifact_dir.join(format!("{stem}.cu")),
        };
        let record_path = artifact_dir.join(format!("{stem}.build.json"));
        // Runtime-sized dims: the search chooses a µGraph for every size of the ranges (they are
        // part of its cache key) and code generation takes the sizes at launch.
        let sized_cfg;
        let search_cfg = if program.dims.is_static() {
            search_cfg
        } else {
            sized_cfg = SearchConfig { dims: program.dims.clone(), ..search_cfg.clone() };
            &sized_cfg
        };
        let cache_key = search_cfg.cache_key(&program.graph);
        let record_key = || self.record_key(shared, program, &cache_key);
        if tune_mode == tune::TuneMode::Off
            && let Some(reused) = BuildRecord::reuse(&record_path, &record_key(), &paths)
        {
            return Ok(BuiltProgram {
                file: file.to_path_buf(),
                line_column: (line, column),
                module_path: program.module_path.clone(),
                name: program.name.clone(),
                fingerprint_hash: program.fingerprint_hash.clone(),
                bucket,
                dims_names,
                stem,
                paths,
                mugraph: reused.mugraph,
                search_report: reused.record.search_report,
                searched: reused.record.searched,
                from_cache: reused.record.from_cache,
                plan: reused.plan,
                nvcc_cached: true,
                reused: true,
                elapsed: started.elapsed(),
            });
        }
        let function = qualified(&program.module_path, &program.name);
        let _running = progress.start(&function, &format!("{}:{line}:{column}", file.display()), search_cfg.budget);
        let tuned = if program.dims.is_static() {
            self.tune(&program.name, &program.graph, search_cfg, cache, tune_mode, nvcc_opts)
        } else if tune_mode != tune::TuneMode::Off {
            Ok("note: not tuned: tuning does not measure programs with runtime-sized dims yet\n".to_string())
        } else {
            Ok(String::new())
        };
        let tuned = tuned.map_err(|source| BuildError::Tune { at: at(), source: Box::new(source) })?;
        let (chosen, search_report, plan_report, searched, from_cache) = match search::superoptimize(
            &program.graph,
            search_cfg,
            Some(cache),
        ) {
            Ok(result) => {
                let mut report = tuned + &result.to_string();
                if !result.from_cache {
                    report += &cache_notes(cache, &cache_key);
                }
                if let Some(outcome) = result.stats.budget_outcome(&result.best) {
                    report += &format!("note: {outcome}\n");
                }
                report += &sized_note(&program.dims, &result.best.graph);
                (result.best.graph.clone(), report, result.summary(), true, result.from_cache)
            }
            Err(source @ (SearchError::Offline { .. } | SearchError::Verify(_) | SearchError::Eval(_))) => {
                return Err(BuildError::Search { at: at(), source: Box::new(source) });
            }
            // A program with runtime-sized dims has no fallback: its own kernel graph is built at
            // the upper bounds only.
            Err(source) if !program.dims.is_static() => {
                return Err(BuildError::Dims {
                    at: at(),
                    ranges: search::ranges::fmt_vars(&program.dims),
                    source: Box::new(source),
                });
            }
            Err(e) => {
                let ops: Vec<String> = program
                    .graph
                    .nodes()
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| !matches!(n.op, KernelOp::Input { .. } | KernelOp::Output { .. }))
                    .map(|(i, n)| format!("`{}` (%{i})", n.op.name()))
                    .collect();
                let report = format!(
                    "not superoptimized ({e}): compiled from its own kernel graph, one kernel per operator ({}), each lowered to a default block graph\n",
                    ops.join(", ")
                );
                (program.graph.clone(), report.clone(), report, false, false)
            }
        };
        let mugraph =
            codegen::default_blocks::lower_to_blocks(&chosen).map_err(|e| codegen_err(CodegenError::Ir(e)))?;
        let kernel_prefix: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let mut generated = codegen::generate_sized(&mugraph, &program.dims, &kernel_prefix, &self.kernel_options)
            .map_err(codegen_err)?;
        generated.plan.name = program.name.clone();
        generated.plan.fingerprint = program.fingerprint_hash.clone();
        generated.plan.input_names = program.params.iter().map(|p| p.name.clone()).collect();
        generated.plan.search_report = Some(plan_report);
        let cubin = nvcc::compile_cubin(&generated.source, &stem, nvcc_opts)
            .map_err(|source| BuildError::Nvcc { at: at(), source })?;
        write_if_changed(&paths.cuda, generated.source.as_bytes())?;
        write_if_changed(&paths.mugraph, mugraph.to_json().as_bytes())?;
        write_if_changed(&paths.cubin, &cubin.bytes)?;
        // The plan last: the macro looks for it, so it appears only with everything else.
        write_if_changed(&paths.plan, generated.plan.to_json().as_bytes())?;
        // The record last, keyed on the cache entry as it is now (the one just verified or stored).
        let record = BuildRecord { key: record_key(), searched, from_cache, search_report: search_report.clone() };
        write_if_changed(&record_path, record.to_json().as_bytes())?;
        Ok(BuiltProgram {
            file: file.to_path_buf(),
            line_column: (line, column),
            module_path: program.module_path.clone(),
            name: program.name.clone(),
            fingerprint_hash: program.fingerprint_hash.clone(),
            bucket,
            dims_names,
            stem,
            paths,
            mugraph,
            search_report,
            searched,
            from_cache,
            plan: generated.plan,
            nvcc_cached: cubin.cached,
            reused: false,
            elapsed: started.elapsed(),
        })
    }
}

impl Builder {
    /// `MIRAGE_TUNE`: measures the program's candidates on a visible GPU and stores the fastest
    /// in the cache before the search reads it; returns `note:` lines for the report.
    fn tune(
        &self,
        name: &str,
        graph: &KernelGraph,
        search_cfg: &SearchConfig,
        cache: &Cache,
        mode: tune::TuneMode,
        nvcc_opts: &nvcc::CompileOptions,
    ) -> Result<String, tune::TuneError> {
        let compile = (&self.kernel_options, nvcc_opts);
        match tune::tune_and_store(name, graph, search_cfg, cache, mode, compile, &tune::TuneConfig::default())? {
            tune::TuneOutcome::Skipped(why) if mode != tune::TuneMode::Off => Ok(format!("note: not tuned: {why}\n")),
            tune::TuneOutcome::Skipped(_) => Ok(String::new()),
            tune::TuneOutcome::Stored { timings, chosen, warnings } => {
                let us =
                    |i: usize| timings.get(i).and_then(|t| t.measured_us).map_or("-".into(), |m| format!("{m:.2} µs"));
                let mut notes = format!(
                    "note: tuned on the GPU: candidate {chosen} of {} chosen ({}; the model's choice {})\n",
                    timings.len(),
                    us(chosen),
                    us(0)
                );
                for w in warnings {
                    notes += &format!("note: {w}\n");
                }
                Ok(notes)
            }
        }
    }
}

/// The report's line for a program with runtime-sized dims: the ranges and the sizes the chosen
/// µGraph was verified at (besides the upper bounds); empty for a static program.
fn sized_note(dims: &Dims, chosen: &KernelGraph) -> String {
    if dims.is_static() {
        return String::new();
    }
    let plan = codegen::default_blocks::lower_to_blocks(chosen).and_then(|g| DimPlan::analyze(&g, dims));
    let at = match plan {
        Ok(plan) => search::ranges::range_sizes(dims, &plan)
            .iter()
            .map(|s| search::ranges::fmt_sizes(dims, s))
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => format!("sizes that could not be listed ({e})"),
    };
    // A one-size bucket (`B = 1..=1`) has no sizes besides its upper bound.
    let at = if at.is_empty() { String::new() } else { format!(" and at {at}") };
    format!(
        "note: runtime-sized dims {}: searched and built at the upper bounds, verified at those{at}; the kernels take the sizes at launch\n",
        search::ranges::fmt_vars(dims)
    )
}

impl Builder {
    /// What a function's artifacts depend on besides its fingerprint (in the file name): the
    /// compiler (mirage's version and the build script binary), the target and every setting of
    /// search, code generation and nvcc, and the search cache entry the µGraph would come from.
    fn record_key(&self, shared: &Shared<'_>, program: &lower::Program, cache_key: &crate::cache::CacheKey) -> String {
        let entry = std::fs::read(shared.cache.read_path(cache_key))
            .map(|bytes| {
                use sha2::Digest;
                format!("{:x}", sha2::Sha256::digest(&bytes))
            })
            .unwrap_or_else(|_| "none".into());
        format!(
            "compiler {}\nprogram {} {}\nsearch {:?}\nkernels {:?}\nnvcc {:?}\ncache {} {entry}",
            compiler_identity(),
            program.fingerprint_hash,
            program.graph.canonical_hash().to_hex(),
            shared.search_cfg,
            self.kernel_options,
            shared.nvcc_opts,
            shared.cache.read_path(cache_key).display(),
        )
    }
}

/// mirage's version and the identity of the running build script (its size and modification
/// time: cargo relinks it whenever mirage or the build script changes).
fn compiler_identity() -> &'static str {
    static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IDENTITY.get_or_init(|| {
        let exe = std::env::current_exe().and_then(|p| Ok((std::fs::metadata(&p)?, p)));
        let stamp = match exe {
            Ok((meta, path)) => {
                let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                format!("{} {} {:?}", path.display(), meta.len(), modified)
            }
            Err(e) => format!("unknown ({e})"),
        };
        format!("mirage {} ({stamp})", env!("CARGO_PKG_VERSION"))
    })
}

/// `MIRAGE_SEARCH_BUDGET`: seconds (`30`, `2.5`, `30s`), or none.
fn search_budget() -> Result<Option<Duration>, BuildError> {
    let Ok(value) = std::env::var(SEARCH_BUDGET_ENV) else { return Ok(None) };
    let text = value.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.strip_suffix('s').unwrap_or(text).trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e7 => Ok(Some(Duration::from_secs_f64(s))),
        _ => Err(BuildError::Setting {
            name: SEARCH_BUDGET_ENV.into(),
            value,
            expected: "expected the search's budget per function in seconds, a positive number (e.g. 30 or 2.5)".into(),
        }),
    }
}

/// `MIRAGE_SEARCH_STATES`: a positive number of states, or none.
fn search_states() -> Result<Option<u64>, BuildError> {
    let Ok(value) = std::env::var(SEARCH_STATES_ENV) else { return Ok(None) };
    let text = value.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.replace('_', "").parse::<u64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(BuildError::Setting {
            name: SEARCH_STATES_ENV.into(),
            value,
            expected: "expected the search's state budget per function, a positive whole number (e.g. 200000)".into(),
        }),
    }
}

/// `note:` lines for a function that was searched: where the result went when it is not in the
/// cache directory, and entries of older search versions that no longer apply.
fn cache_notes(cache: &Cache, key: &crate::cache::CacheKey) -> String {
    let mut notes = String::new();
    let older = cache.other_versions(key);
    if !older.is_empty() {
        let names: Vec<String> =
            older.iter().filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
        notes += &format!(
            "note: {} holds entries of this program from another search version ({}): they no longer apply \
             (mirage or the search settings changed), so it was searched again\n",
            cache.dir().display(),
            names.join(", ")
        );
    }
    if cache.write_dir() != cache.dir() {
        notes += &format!(
            "note: {} has no entry for it: the searched µGraph is stored in {} only; run `mirage prepare` \
             (or build with {CACHE_WRITE_ENV}=1) to keep it there for other machines and CI\n",
            cache.dir().display(),
            cache.write_dir().display()
        );
    }
    notes
}

/// What a function's artifacts were built from (`<stem>.build.json`), so that the next build
/// can reuse them without searching, verifying or compiling.
#[derive(serde::Serialize, serde::Deserialize)]
struct BuildRecord {
    /// [`Builder::record_key`] at the time.
    key: String,
    /// [`BuiltProgram::searched`].
    searched: bool,
    /// [`BuiltProgram::from_cache`].
    from_cache: bool,
    /// [`BuiltProgram::search_report`].
    search_report: String,
}

/// A record that matched, with the artifacts it describes.
struct Reused {
    record: BuildRecord,
    plan: codegen::plan::LaunchPlan,
    mugraph: KernelGraph,
}

impl BuildRecord {
    fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The record at `path` and its artifacts when the record's key is `key` and every artifact
    /// is there and readable; `None` means build again.
    fn reuse(path: &Path, key: &str, paths: &ArtifactPaths) -> Option<Reused> {
        let record: BuildRecord = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        if record.key != key || !paths.cubin.is_file() || !paths.cuda.is_file() {
            return None;
        }
        let plan = codegen::plan::LaunchPlan::from_json(&std::fs::read_to_string(&paths.plan).ok()?).ok()?;
        let mugraph = KernelGraph::from_json(&std::fs::read_to_string(&paths.mugraph).ok()?).ok()?;
        Some(Reused { record, plan, mugraph })
    }
}

/// Which functions are being searched: a line on stderr when one starts and ends, and every
/// [`HEARTBEAT`] the ones still running (shown live by `cargo build -vv`).
#[derive(Default)]
struct Progress {
    running: Mutex<Vec<(String, Instant)>>,
}

/// Removes its function from [`Progress`] when dropped, saying how long it took.
struct Running<'a> {
    progress: &'a Progress,
    function: String,
}

impl Progress {
    fn start<'a>(&'a self, function: &str, at: &str, budget: Duration) -> Running<'a> {
        eprintln!("mirage: building `{function}` ({at}; search budget {:.0} s)", budget.as_secs_f64());
        if let Ok(mut running) = self.running.lock() {
            running.push((function.to_owned(), Instant::now()));
        }
        Running { progress: self, function: function.to_owned() }
    }

    fn heartbeat(&self, finished: &AtomicBool, started: Instant) {
        let mut last = Instant::now();
        while !finished.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if last.elapsed() < HEARTBEAT {
                continue;
            }
            last = Instant::now();
            let Ok(running) = self.running.lock() else { return };
            if !running.is_empty() {
                let list: Vec<String> =
                    running.iter().map(|(f, t)| format!("`{f}` ({:.0} s)", t.elapsed().as_secs_f64())).collect();
                eprintln!("mirage: {:.0} s: still building {}", started.elapsed().as_secs_f64(), list.join(", "));
            }
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut running) = self.progress.running.lock()
            && let Some(i) = running.iter().position(|(f, _)| *f == self.function)
        {
            let (_, since) = running.remove(i);
            eprintln!("mirage: built `{}` in {:.1} s", self.function, since.elapsed().as_secs_f64());
        }
    }
}

impl From<LowerError> for BuildError {
    fn from(e: LowerError) -> Self {
        BuildError::Lower(Box::new(e))
    }
}

/// The workspace root of the package being built: the nearest directory from
/// `CARGO_MANIFEST_DIR` (or the current directory) upwards whose Cargo.toml declares
/// `[workspace]` (as cargo finds it); the package directory itself when none does.
pub fn workspace_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    workspace_root_from(&start)
}

/// The workspace root above `start`: the nearest directory from `start` upwards whose
/// Cargo.toml declares `[workspace]` (a crate with its own `[workspace]`, nested in another
/// workspace's directory, is its own root); `start` itself when none does.
pub fn workspace_root_from(start: &Path) -> PathBuf {
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|text| text.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or(start)
        .to_path_buf()
}

/// The search cache directory of the workspace whose root is `root`: `MIRAGE_CACHE_DIR` when set
/// (relative to the current directory: the package's in a build script), else `root/.mirage`.
pub fn cache_dir_from(root: &Path) -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => root.join(".mirage"),
    }
}

/// What the build of every program of one `compile` call shares.
#[derive(Clone, Copy)]
struct Shared<'a> {
    /// Where the artifacts go.
    artifact_dir: &'a Path,
    /// nvcc's options (architecture, its cache).
    nvcc_opts: &'a nvcc::CompileOptions,
    /// The search's configuration.
    search_cfg: &'a SearchConfig,
    /// Whether and how candidates are timed (`MIRAGE_TUNE`).
    tune_mode: tune::TuneMode,
    /// The search cache.
    cache: &'a Cache,
    /// What is running, for progress lines.
    progress: &'a Progress,
}

fn qualified(module_path: &[String], name: &str) -> String {
    module_path.iter().map(String::as_str).chain([name]).collect::<Vec<_>>().join("::")
}

/// Writes a file only when its content changes (keeps the mtimes of unchanged artifacts, so
/// nothing that includes them is rebuilt), through a temporary file and a rename.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let io = |source| BuildError::Io { path: path.to_path_buf(), source };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The (module path, name, (line, column)) of every `#[mugraph]` function of a file (empty when
/// it cannot be read or parsed: lowering reports that).
fn fn_positions(file: &Path) -> Vec<(Vec<String>, String, (usize, usize))> {
    fn walk(items: &[syn::Item], path: &mut Vec<String>, out: &mut Vec<(Vec<String>, String, (usize, usize))>) {
        for item in items {
            match item {
                syn::Item::Fn(f) if f.attrs.iter().any(lower::is_mugraph_attr) => {
                    let start = f.sig.ident.span().start();
                    out.push((path.clone(), f.sig.ident.to_string(), (start.line, start.column + 1)));
                }
                syn::Item::Mod(m) => {
                    if let Some((_, items)) = &m.content {
                        path.push(m.ident.to_string());
                        walk(items, path, out);
                        path.pop();
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    if let Some(parsed) = std::fs::read_to_string(file).ok().and_then(|text| syn::parse_file(&text).ok()) {
        walk(&parsed.items, &mut Vec::new(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_and_paths() {
        assert_eq!(artifact_stem("gated_mlp", "0123456789abcdef"), "gated_mlp-0123456789abcdef");
        assert_eq!(qualified(&["a".into(), "b".into()], "f"), "a::b::f");
        assert_eq!(qualified(&[], "f"), "f");
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mirage-build-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// A builder for `source` written to a kernels file in a fresh directory `tag`, with its
    /// outputs and cache there and an nvcc that does not exist (no test here compiles CUDA).
    fn builder_without_nvcc(tag: &str, source: &str) -> (PathBuf, PathBuf, Builder) {
        let dir = temp_dir(tag);
        let file = dir.join("kernels.rs");
        std::fs::write(&file, source).expect("write");
        let builder = Builder::new()
            .file(&file)
            .out_dir(&dir)
            .cache_dir(dir.join(".mirage"))
            .cargo_directives(false)
            .nvcc(dir.join("no-such-nvcc"));
        (dir, file, builder)
    }

    const KERNELS: &str = "use mirage::prelude::*;\n\nmod inner {\n    #[mugraph]\n    fn double(x: Tensor<f32, 4, 8>) -> Tensor<f32, 4, 8> {\n        x * 2.0\n    }\n}\n";

    #[test]
    fn errors_name_file_line_column_and_function() {
        let (dir, file, builder) = builder_without_nvcc("errors", KERNELS);
        let e = builder.compile().expect_err("no nvcc there");
        let msg = e.to_string();
        assert!(msg.contains(&format!("{}:5:8: `inner::double`", file.display())), "{msg}");
        assert!(msg.contains("Provide nvcc"), "names the ways to provide nvcc: {msg}");

        std::fs::write(&file, KERNELS.replace("x * 2.0", "x * 1e40")).expect("write");
        let e = builder.compile().expect_err("a DSL error");
        assert!(matches!(e, BuildError::Lower(_)), "{e}");
        assert!(e.to_string().contains(&format!("{}:6:13:", file.display())), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Needs nvcc (CI installs it; a missing nvcc fails the test): the whole pipeline into a
    /// temporary directory.
    #[test]
    fn builds_artifacts_and_rewrites_only_changes() {
        if let Err(e) = nvcc::find_nvcc() {
            panic!("this test needs nvcc 13.0 (`bash scripts/setup.sh` installs it): {e}");
        }
        let dir = temp_dir("artifacts");
        let file = dir.join("kernels.rs");
        std::fs::write(&file, KERNELS).expect("write");
        let cache = dir.join(".mirage");
        let builder = Builder::new().file(&file).out_dir(&dir).cache_dir(&cache).arch("sm_80").cargo_directives(false);
        let report = builder.compile().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.arch, "sm_80");
        let [built] = report.programs.as_slice() else { panic!("one program, found {}", report.programs.len()) };
        assert_eq!(built.path(), "inner::double");
        assert_eq!(built.line_column, (5, 8));
        assert!(built.stem.starts_with("double-") && built.stem.len() == "double-".len() + 16, "{}", built.stem);
        assert_eq!(built.paths.cubin, dir.join("mirage").join(format!("{}.cubin", built.stem)));
        let plan = mirage_runtime::LaunchPlan::from_json(&std::fs::read_to_string(&built.paths.plan).expect("plan"))
            .expect("valid plan");
        assert_eq!(plan.fingerprint, built.fingerprint_hash);
        assert_eq!(plan.input_names, ["x"]);
        let mugraph = KernelGraph::from_json(&std::fs::read_to_string(&built.paths.mugraph).expect("µGraph"))
            .expect("valid µGraph");
        assert_eq!(mugraph.num_kernels(), plan.kernels.len());
        assert!(mirage_runtime::image_archs(&std::fs::read(&built.paths.cubin).expect("cubin")).is_some());
        assert!(std::fs::read_to_string(&built.paths.cuda).expect("source").contains("__global__"));
        // Searched (costed for the A100), recorded in the plan, stored in the cache.
        assert!(built.searched && !built.from_cache, "{}", built.search_report);
        assert!(
            built.search_report.contains("chosen µGraph") && built.search_report.contains("on sm_80"),
            "{}",
            built.search_report
        );
        let recorded = plan.search_report.as_deref().expect("the plan records the search");
        assert!(recorded.starts_with("chosen µGraph") && built.search_report.contains(recorded), "{recorded}");
        // Stored in OUT_DIR only (the cache directory is read, not written, without
        // MIRAGE_CACHE_WRITE=1), and the report says how to keep it.
        assert!(!cache.exists(), "the build wrote into the cache directory");
        assert_eq!(std::fs::read_dir(dir.join("mirage").join("search-cache")).expect("OUT_DIR's cache").count(), 1);
        assert!(built.search_report.contains("mirage prepare"), "{}", built.search_report);

        // A second build reuses everything: nothing searched, verified or rewritten.
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).expect("mtime");
        let before: Vec<_> =
            [&built.paths.cubin, &built.paths.plan, &built.paths.mugraph, &built.paths.cuda].map(|p| mtime(p)).into();
        std::thread::sleep(Duration::from_millis(20));
        let again = builder.compile().unwrap_or_else(|e| panic!("{e}"));
        assert!(again.programs[0].reused && again.programs[0].nvcc_cached);
        assert_eq!(again.programs[0].search_report, built.search_report);
        assert_eq!(again.programs[0].mugraph.canonical_hash(), built.mugraph.canonical_hash());
        let after: Vec<_> =
            [&built.paths.cubin, &built.paths.plan, &built.paths.mugraph, &built.paths.cuda].map(|p| mtime(p)).into();
        assert_eq!(before, after);

        // Without the record, the µGraph comes from the (OUT_DIR) cache, verified again, and the
        // artifacts are the same.
        std::fs::remove_file(dir.join("mirage").join(format!("{}.build.json", built.stem))).expect("record");
        let third = builder.compile().unwrap_or_else(|e| panic!("{e}"));
        assert!(!third.programs[0].reused && third.programs[0].from_cache, "{}", third.programs[0].search_report);
        assert_eq!(third.programs[0].mugraph.canonical_hash(), built.mugraph.canonical_hash());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Offline with an empty cache: a build error naming MIRAGE_OFFLINE, the function and the
    /// cache file, not a silent fallback.
    #[test]
    fn offline_without_a_cache_entry_is_an_error() {
        let (dir, _, builder) = builder_without_nvcc("offline", KERNELS);
        let builder = builder.search_config(SearchConfig { offline: Some(true), ..SearchConfig::default() });
        let e = builder.compile().expect_err("offline, nothing cached");
        let msg = e.to_string();
        assert!(matches!(e, BuildError::Search { .. }), "{msg}");
        assert!(
            msg.contains("MIRAGE_OFFLINE=1") && msg.contains("`inner::double`") && msg.contains(".mirage"),
            "{msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every bad function is reported, with its position, not only the first.
    #[test]
    fn every_bad_function_is_reported() {
        let bad = KERNELS.replace("x * 2.0", "x * 1e40")
            + "\n#[mugraph]\nfn also_bad(x: Tensor<f32, 4, 8>) -> Tensor<f32, 4, 8> {\n    x * 1e40\n}\n";
        let (dir, file, builder) = builder_without_nvcc("many", &bad);
        let e = builder.compile().expect_err("two DSL errors");
        let BuildError::Many(errors) = &e else { panic!("expected both errors: {e}") };
        assert_eq!(errors.len(), 2, "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("{}:6:13:", file.display())), "{msg}");
        assert!(msg.contains(&format!("{}:12:9:", file.display())), "{msg}");
        assert!(msg.ends_with("2 errors in #[mugraph] functions"), "{msg}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An entry of another search version is reported when the program is searched again.
    #[test]
    fn entries_of_other_search_versions_are_reported() {
        let dir = temp_dir("versions");
        let program = lower::lower_source(KERNELS).expect("lowers").remove(0).graph;
        let key = SearchConfig::default().cache_key(&program);
        let cache = Cache::new(dir.join(".mirage")).with_write_dir(dir.join("out"));
        std::fs::create_dir_all(cache.dir()).expect("mkdir");
        let old = cache.dir().join(key.file_name().replace(&key.search_version, "s1-00000000"));
        std::fs::write(&old, "{}").expect("write");
        let other_arch = cache.dir().join(key.file_name().replace(&key.arch, "sm_80"));
        std::fs::write(&other_arch, "{}").expect("write");
        assert_eq!(cache.other_versions(&key), [old]);
        let notes = cache_notes(&cache, &key);
        assert!(notes.contains("s1-00000000") && notes.contains("another search version"), "{notes}");
        assert!(notes.contains("MIRAGE_CACHE_WRITE=1"), "{notes}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_workspace_root_has_the_workspace_manifest() {
        let root = workspace_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("a Cargo.toml at the root");
        assert!(manifest.lines().any(|l| l.trim() == "[workspace]"), "{}", root.display());
        // A crate with its own `[workspace]` inside this one (the quick-start fixture) is its
        // own root, like cargo says.
        let fixture = root.join("fixtures").join("quickstart");
        assert_eq!(workspace_root_from(&fixture.join("src")), fixture);
    }

    #[test]
    fn missing_out_dir_is_an_error() {
        if std::env::var_os("OUT_DIR").is_some() {
            // Checked in a child process without OUT_DIR, so no test here runs with a changed
            // environment.
            let exe = std::env::current_exe().expect("test binary");
            let out = std::process::Command::new(exe)
                .args(["--exact", "build::tests::missing_out_dir_is_an_error"])
                .env_remove("OUT_DIR")
                .output()
                .expect("run the child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}");
            return;
        }
        let e = Builder::new().cargo_directives(false).compile().expect_err("no OUT_DIR");
        assert!(e.to_string().contains("OUT_DIR is not set"), "{e}");
    }
}
