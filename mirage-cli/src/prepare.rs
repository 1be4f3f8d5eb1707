//! `mirage prepare`: fill the search cache `.mirage/` for every `#[mugraph]` function of a
//! package, or check that an offline build (`MIRAGE_OFFLINE=1`, as in CI) would find a verified
//! entry for each (`--check`), the way `cargo sqlx prepare --check` checks `.sqlx/`.

use std::path::{Path, PathBuf};

use clap::Args;
use mirage::cache::Cache;
use mirage::lower::lower_file;
use mirage::search::{SearchConfig, superoptimize};

use crate::input::{arch, bucket_builds, path_of, programs_of};
use crate::{CliError, Result, progress};

/// The flags of `mirage prepare`.
#[derive(Args, Debug)]
pub struct PrepareArgs {
    /// Only check: every function must have a cache entry that verifies (nothing is written).
    #[arg(long)]
    check: bool,
    /// The package's Cargo.toml (default: the nearest one above the current directory).
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
    /// Source files with `#[mugraph]` functions (default: every .rs file of the package that has one).
    #[arg(long = "file", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Target architecture (default: MIRAGE_CUDA_ARCH, or sm_90a).
    #[arg(long)]
    arch: Option<String>,
    /// The cache directory (default: `.mirage` at the workspace root).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

/// The package directory: the manifest's, or the nearest one above the current directory.
fn package_dir(manifest: Option<&Path>) -> Result<PathBuf> {
    if let Some(m) = manifest {
        if !m.is_file() {
            return Err(CliError::new(format!("{}: no such manifest", m.display())));
        }
        let dir = m.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        return std::fs::canonicalize(dir).map_err(|e| CliError::new(format!("{}: {e}", dir.display())));
    }
    let cwd = std::env::current_dir().map_err(|e| CliError::new(format!("the current directory: {e}")))?;
    cwd.ancestors()
        .find(|d| d.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| CliError::new("no Cargo.toml here or above: run in a package or give --manifest-path"))
}

/// Every `.rs` file under `dir` containing `#[mugraph]`, skipping `target/`, hidden directories
/// and other packages (directories with their own Cargo.toml).
fn scan(dir: &Path, root: bool, out: &mut Vec<PathBuf>) -> Result<()> {
    if !root && dir.join("Cargo.toml").exists() {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| CliError::new(format!("reading {}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !name.starts_with('.') && name != "target" {
                scan(&p, false, out)?;
            }
        } else if name.ends_with(".rs") && std::fs::read_to_string(&p).is_ok_and(|t| t.contains("#[mugraph]")) {
            out.push(p);
        }
    }
    Ok(())
}

/// Runs `mirage prepare`.
pub fn run(a: &PrepareArgs) -> Result<()> {
    let package = package_dir(a.manifest_path.as_deref())?;
    let scanned = a.files.is_empty();
    let files = if scanned {
        let mut found = Vec::new();
        scan(&package, true, &mut found)?;
        found
    } else {
        a.files.clone()
    };
    let cache = match &a.cache_dir {
        Some(d) => Cache::new(d),
        None => Cache::new(mirage::build::cache_dir_from(&mirage::build::workspace_root_from(&package))),
    };
    let (arch_name, model) = arch(a.arch.as_deref())?;
    // The build's configuration: the cache key depends on it.
    let cfg = SearchConfig { offline: Some(a.check), ..SearchConfig::for_arch(model) };
    let mut jobs = Vec::new();
    for f in &files {
        // A scanned file that only mentions #[mugraph] (in a comment or a string) has none.
        let programs = match programs_of(f) {
            Err(_) if scanned && lower_file(f).is_ok_and(|p| p.is_empty()) => continue,
            other => other.map_err(|e| {
                let hint = if scanned { " (name the kernel files with --file to check only those)" } else { "" };
                CliError::new(format!("{}{hint}", e.message))
            })?,
        };
        // A program of several size buckets: one cache entry per bucket, as in the build.
        for p in programs {
            for (label, built) in bucket_builds(&p) {
                jobs.push((f.clone(), built, label));
            }
        }
    }
    if jobs.is_empty() {
        return Err(CliError::new(format!("no .rs file with #[mugraph] functions in {}", package.display())));
    }
    let verb = if a.check { "checking" } else { "preparing" };
    println!(
        "{verb} the search cache {} for {} #[mugraph] function(s) on {arch_name}",
        cache.dir().display(),
        jobs.len()
    );
    let bar = progress::steps(jobs.len(), verb);
    let mut failed = Vec::new();
    for (file, p, label) in &jobs {
        let name = format!("{}::{}{label}", file.display(), path_of(p));
        bar.set_message(format!("{verb} {}", path_of(p)));
        // A program's runtime-sized dims are part of its key, as in the build.
        let sized = SearchConfig { dims: p.dims.clone(), ..cfg.clone() };
        let started = std::time::Instant::now();
        let line = match superoptimize(&p.graph, &sized, Some(&cache)) {
            Ok(r) if r.from_cache => {
                format!("ok       {name}: cached µGraph verified ({:.2} µs)", r.best.cost.total_us)
            }
            Ok(r) => format!(
                "searched {name}: {} kernel(s), {:.2} µs, stored in {} ({:.1} s)",
                r.best.graph.num_kernels(),
                r.best.cost.total_us,
                r.cache_path.as_ref().map_or("?".into(), |p| p.display().to_string()),
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                failed.push(name.clone());
                format!("FAILED   {name}: {e}")
            }
        };
        bar.suspend(|| println!("{line}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if failed.is_empty() {
        println!("{} function(s): the cache is ready for offline builds (MIRAGE_OFFLINE=1)", jobs.len());
        return Ok(());
    }
    let hint = if a.check { "run `mirage prepare` and commit the cache" } else { "see the messages above" };
    Err(CliError::no(format!("{} of {} function(s) have no usable cache entry: {hint}", failed.len(), jobs.len())))
}
