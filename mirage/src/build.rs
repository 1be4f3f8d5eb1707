//! The build-script API: `mirage::build::compile(files)` in a user's build.rs finds
//! every `#[mugraph]` function of the files, lowers it, optimizes it, generates CUDA, compiles a
//! cubin with nvcc and writes the artifacts the `#[mugraph]` expansion embeds.
//!
//! ```no_run
//! // In build.rs's `fn main()`, with
//! // `[build-dependencies] mirage = { version = "0.1", features = ["build"] }`:
//! let report = mirage::build::compile(["src/kernels.rs"]).unwrap();
//! for program in &report.programs {
//!     println!("{} -> {}", program.path(), program.paths.cubin.display());
//! }
//! ```
//!
//! Artifacts go to `$OUT_DIR/mirage/`, four files per function, named
//! `<fn name>-<fingerprint hash>` ([`artifact_stem`]; the macro computes the same name from its
//! tokens, so an artifact of an older version of the function is simply not found):
//! `.cubin` (the kernels), `.plan.json` (the launch plan, read at run time, recording the
//! fingerprint), `.mugraph.json` (the chosen µGraph) and `.cu` (the CUDA source, for
//! inspection). A file is written only when its content changes.
//!
//! Each program is superoptimized ([`crate::search::superoptimize`]): the cheapest µGraph proven
//! equivalent to it, read from the persistent search cache `.mirage/` at the workspace root when
//! the cache holds one (re-verified, never trusted), searched and stored there otherwise. Commit
//! `.mirage/` so that other machines and CI build without searching; with `MIRAGE_OFFLINE=1` a
//! cache miss is a build error. A program the search cannot handle is compiled from its own
//! kernel graph (every operator lowered to a default block graph) and a `cargo:warning=` line
//! says why. Kernel-level operators left in the chosen µGraph get default block graphs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::cache::Cache;
use crate::codegen::{self, CodegenError, KernelOptions};
use crate::cost::Arch;
use crate::ir::KernelGraph;
use crate::lower::{self, LowerError};
use crate::nvcc::{self, NvccError};
use crate::search::{self, SearchConfig, SearchError};
use crate::tune;

/// The directory under `$OUT_DIR` holding the artifacts, and their file stem (shared with the
/// `#[mugraph]` expansion, which looks for them).
pub use mirage_core::{ARTIFACT_DIR, artifact_stem};

/// Steps slower than this are reported with a `cargo:warning=` line.
const SLOW_STEP: Duration = Duration::from_secs(1);

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

    /// Tuning (`MIRAGE_TUNE`) failed in a way that is not a candidate's own failure.
    #[error("mirage: {at}: tuning: {source}")]
    Tune {
        /// The function (`<all>` for the `MIRAGE_TUNE` setting itself).
        at: Box<FnLocation>,
        /// What went wrong.
        source: Box<crate::tune::TuneError>,
    },

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
    /// The artifacts' file stem ([`artifact_stem`]).
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

    /// Keeps the search cache in `dir` instead of `.mirage/` at the workspace root (the topmost
    /// directory above the package, `CARGO_MANIFEST_DIR`, whose Cargo.toml has `[workspace]`).
    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> Builder {
        self.cache_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    fn say(&self, line: &str) {
        if self.cargo_directives {
            println!("{line}");
        }
    }

    /// Runs the build: lower every file, then generate and compile every function (in parallel),
    /// then write the artifacts. The first error in file and source order is returned.
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
        for file in &self.files {
            let programs = lower::lower_file(file)?;
            let positions = fn_positions(file);
            for program in programs {
                let line_column = positions
                    .iter()
                    .find(|(m, n, _)| *m == program.module_path && *n == program.name)
                    .map_or((0, 0), |(_, _, lc)| *lc);
                jobs.push((file.clone(), line_column, program));
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
        self.say(&format!("cargo:rerun-if-env-changed={}", tune::TUNE_ENV));
        let tune_mode = tune::TuneMode::from_env().map_err(|reason| BuildError::Tune {
            at: Box::new(FnLocation { file: "<build>".into(), line: 0, column: 0, function: "<all>".into() }),
            source: Box::new(tune::TuneError::format(tune::TUNE_ENV, reason)),
        })?;
        let search_cfg = match &self.search {
            Some(cfg) => cfg.clone(),
            None => SearchConfig::for_arch(Arch::from_name(&arch).unwrap_or_default()),
        };
        let cache = Cache::new(match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => workspace_root().join(".mirage"),
        });
        let nvcc_opts = nvcc::CompileOptions {
            arch: Some(arch.clone()),
            cache_dir: Some(artifact_dir.join("nvcc-cache")),
            nvcc: self.nvcc.clone(),
            multi_arch: true,
            ..Default::default()
        };
        let results: Vec<Result<BuiltProgram, BuildError>> = jobs
            .par_iter()
            .map(|(file, line_column, program)| {
                let shared = Shared {
                    artifact_dir: &artifact_dir,
                    nvcc_opts: &nvcc_opts,
                    search_cfg: &search_cfg,
                    tune_mode,
                    cache: &cache,
                };
                self.build_one(&shared, file, *line_column, program)
            })
            .collect();
        let mut programs = Vec::with_capacity(results.len());
        for r in results {
            let built = r?;
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
            if built.elapsed > SLOW_STEP {
                self.say(&format!(
                    "cargo:warning=mirage: built `{}` ({}, {} kernels, {}, {}) in {:.1} s",
                    built.path(),
                    built.file.display(),
                    built.plan.kernels.len(),
                    if built.from_cache {
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
    ) -> Result<BuiltProgram, BuildError> {
        let Shared { artifact_dir, nvcc_opts, search_cfg, tune_mode, cache } = *shared;
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
        let stem = artifact_stem(&program.name, &program.fingerprint_hash);
        let tuned = self.tune(&program.name, &program.graph, search_cfg, cache, tune_mode, nvcc_opts);
        let tuned = tuned.map_err(|source| BuildError::Tune { at: at(), source: Box::new(source) })?;
        let (chosen, search_report, plan_report, searched, from_cache) = match search::superoptimize(
            &program.graph,
            search_cfg,
            Some(cache),
        ) {
            Ok(result) => {
                (result.best.graph.clone(), tuned + &result.to_string(), result.summary(), true, result.from_cache)
            }
            Err(source @ (SearchError::Offline { .. } | SearchError::Verify(_) | SearchError::Eval(_))) => {
                return Err(BuildError::Search { at: at(), source: Box::new(source) });
            }
            Err(e) => {
                let report = format!(
                    "not superoptimized ({e}): compiled from its own kernel graph, every operator lowered to a default block graph\n"
                );
                (program.graph.clone(), report.clone(), report, false, false)
            }
        };
        let mugraph =
            codegen::default_blocks::lower_to_blocks(&chosen).map_err(|e| codegen_err(CodegenError::Ir(e)))?;
        let kernel_prefix: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let mut generated = codegen::generate(&mugraph, &kernel_prefix, &self.kernel_options).map_err(codegen_err)?;
        generated.plan.name = program.name.clone();
        generated.plan.fingerprint = program.fingerprint_hash.clone();
        generated.plan.input_names = program.params.iter().map(|p| p.name.clone()).collect();
        generated.plan.search_report = Some(plan_report);
        let cubin = nvcc::compile_cubin(&generated.source, &stem, nvcc_opts)
            .map_err(|source| BuildError::Nvcc { at: at(), source })?;
        let paths = ArtifactPaths {
            cubin: artifact_dir.join(format!("{stem}.cubin")),
            plan: artifact_dir.join(format!("{stem}.plan.json")),
            mugraph: artifact_dir.join(format!("{stem}.mugraph.json")),
            cuda: artifact_dir.join(format!("{stem}.cu")),
        };
        write_if_changed(&paths.cuda, generated.source.as_bytes())?;
        write_if_changed(&paths.mugraph, mugraph.to_json().as_bytes())?;
        write_if_changed(&paths.cubin, &cubin.bytes)?;
        // The plan last: the macro looks for it, so it appears only with everything else.
        write_if_changed(&paths.plan, generated.plan.to_json().as_bytes())?;
        Ok(BuiltProgram {
            file: file.to_path_buf(),
            line_column: (line, column),
            module_path: program.module_path.clone(),
            name: program.name.clone(),
            fingerprint_hash: program.fingerprint_hash.clone(),
            stem,
            paths,
            mugraph,
            search_report,
            searched,
            from_cache,
            plan: generated.plan,
            nvcc_cached: cubin.cached,
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

impl From<LowerError> for BuildError {
    fn from(e: LowerError) -> Self {
        BuildError::Lower(Box::new(e))
    }
}

/// The workspace root of the package being built: the topmost directory from
/// `CARGO_MANIFEST_DIR` (or the current directory) upwards whose Cargo.toml declares
/// `[workspace]`; the package directory itself when none does.
pub fn workspace_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    workspace_root_from(&start)
}

/// The workspace root above `start`: the topmost directory from `start` upwards whose Cargo.toml
/// declares `[workspace]`; `start` itself when none does.
pub fn workspace_root_from(start: &Path) -> PathBuf {
    let mut root = start.to_path_buf();
    for dir in start.ancestors() {
        let is_workspace = std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|text| text.lines().any(|l| l.trim() == "[workspace]"));
        if is_workspace {
            root = dir.to_path_buf();
        }
    }
    root
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
    /// The search cache `.mirage/`.
    cache: &'a Cache,
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

    const KERNELS: &str = "use mirage::prelude::*;\n\nmod inner {\n    #[mugraph]\n    fn double(x: Tensor<f32, 4, 8>) -> Tensor<f32, 4, 8> {\n        x * 2.0\n    }\n}\n";

    #[test]
    fn errors_name_file_line_column_and_function() {
        let dir = temp_dir("errors");
        let file = dir.join("kernels.rs");
        std::fs::write(&file, KERNELS).expect("write");
        let builder = Builder::new()
            .file(&file)
            .out_dir(&dir)
            .cache_dir(dir.join(".mirage"))
            .cargo_directives(false)
            .nvcc(dir.join("no-such-nvcc"));
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
        assert_eq!(std::fs::read_dir(&cache).expect("cache dir").count(), 1);

        // A second build rewrites nothing and takes the µGraph from the cache.
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).expect("mtime");
        let before: Vec<_> =
            [&built.paths.cubin, &built.paths.plan, &built.paths.mugraph, &built.paths.cuda].map(|p| mtime(p)).into();
        std::thread::sleep(Duration::from_millis(20));
        let again = builder.compile().unwrap_or_else(|e| panic!("{e}"));
        assert!(again.programs[0].nvcc_cached);
        assert!(again.programs[0].from_cache, "{}", again.programs[0].search_report);
        assert_eq!(again.programs[0].mugraph.canonical_hash(), built.mugraph.canonical_hash());
        let after: Vec<_> =
            [&built.paths.cubin, &built.paths.plan, &built.paths.mugraph, &built.paths.cuda].map(|p| mtime(p)).into();
        assert_eq!(before, after);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Offline with an empty cache: a build error naming MIRAGE_OFFLINE, the function and the
    /// cache file, not a silent fallback.
    #[test]
    fn offline_without_a_cache_entry_is_an_error() {
        let dir = temp_dir("offline");
        let file = dir.join("kernels.rs");
        std::fs::write(&file, KERNELS).expect("write");
        let builder = Builder::new()
            .file(&file)
            .out_dir(&dir)
            .cache_dir(dir.join(".mirage"))
            .search_config(SearchConfig { offline: Some(true), ..SearchConfig::default() })
            .cargo_directives(false)
            .nvcc(dir.join("no-such-nvcc"));
        let e = builder.compile().expect_err("offline, nothing cached");
        let msg = e.to_string();
        assert!(matches!(e, BuildError::Search { .. }), "{msg}");
        assert!(
            msg.contains("MIRAGE_OFFLINE=1") && msg.contains("`inner::double`") && msg.contains(".mirage"),
            "{msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_workspace_root_has_the_workspace_manifest() {
        let root = workspace_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("a Cargo.toml at the root");
        assert!(manifest.lines().any(|l| l.trim() == "[workspace]"), "{}", root.display());
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
