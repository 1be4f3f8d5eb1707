//! What the user names on the command line: `FILE[::FN]` programs, µGraph files in our JSON,
//! cache entries or Mirage's JSON, the target architecture and the search cache.

use std::path::{Path, PathBuf};

use mirage::cache::{CACHE_FORMAT, Cache, CacheEntry};
use mirage::cost::Arch;
use mirage::import::{ImportOptions, import_mirage_json_with};
use mirage::ir::{DType, KernelGraph};
use mirage::lower::{Program, lower_file};
use mirage::search::{SearchConfig, SearchError, SearchResult, superoptimize};

use crate::{CliError, Result, Target, progress};

/// Splits `FILE[::FN]` at the first `::` after the file name.
pub fn split_target(target: &str) -> (PathBuf, Option<String>) {
    let name_start = target.rfind(['/', '\\']).map_or(0, |i| i + 1);
    match target[name_start..].find("::") {
        Some(i) => {
            let at = name_start + i;
            let function = &target[at + 2..];
            (PathBuf::from(&target[..at]), (!function.is_empty()).then(|| function.to_string()))
        }
        None => (PathBuf::from(target), None),
    }
}

/// `module::name` of a lowered program.
pub fn path_of(p: &Program) -> String {
    p.module_path.iter().map(String::as_str).chain([p.name.as_str()]).collect::<Vec<_>>().join("::")
}

/// What is searched and cached for a program, as the build does it: the program itself, or one
/// program per size bucket, each with the label that names its bucket in messages
/// (` bucket 0 [(1, 16)]`; empty for a program without buckets).
pub fn bucket_builds(p: &Program) -> Vec<(String, Program)> {
    p.builds()
        .into_iter()
        .map(|(bucket, built)| {
            (bucket.map_or(String::new(), |i| format!(" bucket {i} {:?}", p.buckets[i].ranges)), built)
        })
        .collect()
}

/// Every `#[mugraph]` function of a file (an error when there is none).
pub fn programs_of(file: &Path) -> Result<Vec<Program>> {
    if file.extension().is_none_or(|e| e != "rs") {
        return Err(CliError::new(format!(
            "{}: expected a Rust source file (.rs) with #[mugraph] functions",
            file.display()
        )));
    }
    let programs = lower_file(file).map_err(|e| {
        // Errors without a position (the file cannot be read) name just the file.
        CliError::new(if e.line == 0 { format!("{}: {}", e.file, e.message) } else { e.to_string() })
    })?;
    if programs.is_empty() {
        return Err(CliError::new(format!("{}: no #[mugraph] function in this file", file.display())));
    }
    Ok(programs)
}

/// The function `name` (a bare name or a `module::name` path) among a file's programs.
pub fn select(programs: Vec<Program>, file: &Path, name: &str) -> Result<Program> {
    let names = || programs.iter().map(path_of).collect::<Vec<_>>().join(", ");
    let matching: Vec<&Program> = programs.iter().filter(|p| path_of(p) == name || p.name == name).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(CliError::new(format!(
            "{}: no #[mugraph] function `{name}`; the file has: {}",
            file.display(),
            names()
        ))),
        _ => Err(CliError::new(format!(
            "{}: several #[mugraph] functions are named `{name}`: name one by its module path ({})",
            file.display(),
            names()
        ))),
    }
}

/// The program `FILE::FN` names (`FILE` alone when it has exactly one function).
pub fn one_program(target: &str) -> Result<(PathBuf, Program)> {
    let (file, function) = split_target(target);
    let programs = programs_of(&file)?;
    match function {
        Some(name) => Ok((file.clone(), select(programs, &file, &name)?)),
        None if programs.len() == 1 => Ok((file, programs.into_iter().next().expect("one program"))),
        None => Err(CliError::new(format!(
            "{} has {} #[mugraph] functions: name one as {}::NAME ({})",
            file.display(),
            programs.len(),
            file.display(),
            programs.iter().map(path_of).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The target architecture as the build resolves it, and its cost model (sm_90's for targets
/// without one, as in the build).
pub fn arch(explicit: Option<&str>) -> Result<(String, Arch)> {
    let env = std::env::var(mirage::nvcc::ARCH_ENV).ok();
    let name = mirage::nvcc::resolve_arch(explicit, env.as_deref()).map_err(|e| CliError::new(e.to_string()))?;
    let model = Arch::from_name(&name).unwrap_or_default();
    Ok((name, model))
}

/// The search cache for programs of `file`: `--cache-dir`, `MIRAGE_CACHE_DIR`, or `.mirage` at its
/// workspace root.
pub fn cache_for(file: &Path, dir: Option<&Path>) -> Cache {
    match dir {
        Some(d) => Cache::new(d),
        None => {
            let abs = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
            let start = abs.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
            Cache::new(mirage::build::cache_dir_from(&mirage::build::workspace_root_from(&start)))
        }
    }
}

/// How the µGraph to show or emit was obtained.
pub enum Chosen {
    /// From the superoptimizer (its cache or a search).
    Searched(Box<SearchResult>),
    /// The search cannot handle the program: the build compiles the program's own graph.
    Fallback(String),
}

/// The µGraph the build would choose for `program`: the cache entry (re-verified) or a search,
/// with a progress bar; `offline` makes a cache miss an error.
pub fn chosen(program: &Program, opts: &Target, file: &Path, offline: bool) -> Result<(Chosen, KernelGraph)> {
    let (_, model) = arch(opts.arch.as_deref())?;
    // A program of runtime-sized dims (or one size bucket of one: [`bucket_builds`]) is searched
    // over its ranges, as the build searches it, so its cache entry is the build's.
    let cfg = SearchConfig { offline: Some(offline), dims: program.dims.clone(), ..SearchConfig::for_arch(model) };
    let cache = cache_for(file, opts.cache_dir.as_deref());
    let what = format!("`{}`: search cache {}, else searching", path_of(program), cache.dir().display());
    match progress::timed(&what, cfg.budget, || superoptimize(&program.graph, &cfg, Some(&cache))) {
        Ok(result) => {
            let graph = result.best.graph.clone();
            Ok((Chosen::Searched(Box::new(result)), graph))
        }
        Err(e @ (SearchError::Program(_) | SearchError::NotFound(_))) => {
            Ok((Chosen::Fallback(e.to_string()), program.graph.clone()))
        }
        Err(e) => Err(CliError::new(format!("`{}`: {e}", path_of(program)))),
    }
}

/// Reads a file as text.
pub fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| CliError::new(format!("cannot read {}: {e}", path.display())))
}

/// A program named as `FILE.rs[::FN]` or as a µGraph JSON file of ours; its name for messages.
pub fn program_graph(spec: &str) -> Result<(String, KernelGraph)> {
    let (file, _) = split_target(spec);
    if file.extension().is_some_and(|e| e == "rs") {
        let (_, p) = one_program(spec)?;
        return Ok((path_of(&p), p.graph));
    }
    let text = read_text(&file)?;
    let graph = KernelGraph::from_json(&text).map_err(|e| {
        CliError::new(format!(
            "{}: expected `FILE.rs::FN` or a µGraph JSON file of mirage-rs (format \"{}\"): {e}",
            file.display(),
            mirage::ir::FORMAT
        ))
    })?;
    Ok((file.display().to_string(), graph))
}

/// The candidate µGraphs of a file: ours (one), a search cache entry (its µGraph), or Mirage's
/// JSON (every µGraph in it; 16-bit floats read as `half`). Each comes with a name.
pub fn candidates(path: &Path, half: DType) -> Result<Vec<(String, KernelGraph)>> {
    let text = read_text(path)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| CliError::new(format!("{}: not valid JSON: {e}", path.display())))?;
    let bad = |e: String| CliError::new(format!("{}: {e}", path.display()));
    match value.get("format").and_then(|f| f.as_str()) {
        Some(f) if f == mirage::ir::FORMAT => {
            let g = KernelGraph::from_json(&text).map_err(|e| bad(e.to_string()))?;
            Ok(vec![(path.display().to_string(), g)])
        }
        Some(f) if f == CACHE_FORMAT => {
            let entry: CacheEntry =
                serde_json::from_value(value).map_err(|e| bad(format!("not a search cache entry: {e}")))?;
            let g = entry.graph().map_err(|e| bad(format!("the cache entry's µGraph is invalid: {e}")))?;
            Ok(vec![(format!("{} (cached for {})", path.display(), entry.arch), g)])
        }
        Some(other) => Err(bad(format!(
            "unknown format \"{other}\": expected \"{}\" (a µGraph), \"{CACHE_FORMAT}\" (a cache entry) or Mirage's JSON",
            mirage::ir::FORMAT
        ))),
        None if value.is_array() => {
            let graphs = import_mirage_json_with(&text, ImportOptions { half_dtype: half })
                .map_err(|e| bad(format!("importing Mirage's µGraphs: {e}")))?;
            Ok(graphs.into_iter().enumerate().map(|(i, g)| (format!("Mirage candidate {i}"), g)).collect())
        }
        None => Err(bad(format!(
            "expected a µGraph of mirage-rs (an object with \"format\": \"{}\"), a search cache entry or Mirage's µGraph JSON (an array)",
            mirage::ir::FORMAT
        ))),
    }
}

/// The element type Mirage's 16-bit codes stand for in a program: bf16 when its inputs are.
pub fn half_dtype(program: &KernelGraph) -> DType {
    if program.inputs().iter().any(|d| d.dtype == DType::Bf16) { DType::Bf16 } else { DType::F16 }
}

/// `name [8, 4096] f16, ...` of a program's parameters.
pub fn signature(p: &Program) -> String {
    p.params.iter().map(|q| format!("{} {:?} {}", q.name, q.desc.shape, q.desc.dtype)).collect::<Vec<_>>().join(", ")
}
