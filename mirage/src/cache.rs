//! The persistent search cache: `.mirage/` at the workspace root, meant to be
//! committed (like sqlx's `.sqlx/`), so builds are reproducible and fast without re-searching.
//!
//! One human-readable JSON file per (canonical program hash, target architecture, search
//! configuration version), named `{hash}-{arch}-{version}.json`, holding the chosen µGraph (the
//! IR's versioned JSON, embedded as a JSON value), its estimated cost, the top candidates' costs and
//! a timestamp. Files are written to a temporary name and renamed into place, so concurrent builds
//! never see half a file. A file that cannot be read or parsed is reported as
//! [`CacheError::Corrupt`]; the search treats it as a miss and never trusts it — and even a
//! well-formed entry is verified against the program again before use
//! ([`crate::search::superoptimize`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::ir::{CanonicalHash, KernelGraph};

/// The `format` field of every cache file.
pub const CACHE_FORMAT: &str = "mirage-search-cache";
/// The version of the cache file layout.
pub const CACHE_VERSION: u32 = 1;

/// What identifies a cache entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Canonical hash of the program.
    pub program_hash: CanonicalHash,
    /// Target architecture (`sm_90`, …).
    pub arch: String,
    /// Version of the search configuration ([`crate::search::SearchConfig::version`]).
    pub search_version: String,
}

impl CacheKey {
    /// The entry's file name.
    pub fn file_name(&self) -> String {
        format!("{}{}.json", self.program_arch_prefix(), clean(&self.search_version))
    }

    /// The start of the file name of every entry of this program and architecture, whatever
    /// the search version: `{hash}-{arch}-`.
    pub fn program_arch_prefix(&self) -> String {
        format!("{}-{}-", self.program_hash.to_hex(), clean(&self.arch))
    }
}

/// A key part as a file-name part: letters, digits and `_`, anything else `-`.
fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect()
}

/// Cost summary of a candidate kept next to the winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CachedCandidate {
    /// Canonical hash of the candidate µGraph.
    pub hash: String,
    /// Number of kernels.
    pub kernels: usize,
    /// Estimated time, µs.
    pub cost_us: f64,
    /// Whether fingerprints verified it (`None`: not checked).
    pub verified: Option<bool>,
    /// Its median time measured on a GPU by tuning ([`crate::tune`]), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_us: Option<f64>,
}

/// An operator a partitioned search kept as its own library kernel (not fused), and why: the
/// search expressed no µGraph of it, or the budget ran out before its turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnfusedOperator {
    /// The operator: `` `name` (%node) `` of the program.
    pub operator: String,
    /// Why it was not fused.
    pub why: String,
}

/// One cache file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// [`CACHE_FORMAT`].
    pub format: String,
    /// [`CACHE_VERSION`].
    pub version: u32,
    /// Canonical hash of the program (hex).
    pub program_hash: String,
    /// Target architecture.
    pub arch: String,
    /// Search configuration version.
    pub search_version: String,
    /// The chosen µGraph: the IR's versioned JSON ([`KernelGraph::to_json`]) as a JSON value.
    pub mugraph: serde_json::Value,
    /// Its estimated time, µs.
    pub cost_us: f64,
    /// Its time measured on a GPU, µs, when tuning recorded one (wins over the model).
    #[serde(default)]
    pub measured_us: Option<f64>,
    /// The GPU the times were measured on (its name), when tuning recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The best candidates (the winner first) with their estimated costs.
    pub top: Vec<CachedCandidate>,
    /// When the entry was written (seconds since the Unix epoch).
    pub created_unix_s: u64,
    /// The operators the µGraph keeps as their own library kernels because the search that
    /// found it did not fuse them, with why (a cache hit reports them again). Entries written
    /// before this field existed read as none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfused: Vec<UnfusedOperator>,
}

impl CacheEntry {
    /// A new entry for `key` holding `mugraph`.
    pub fn new(
        key: &CacheKey,
        mugraph: &KernelGraph,
        cost_us: f64,
        top: Vec<CachedCandidate>,
    ) -> Result<Self, CacheError> {
        let value = serde_json::from_str(&mugraph.to_json()).map_err(|e| CacheError::Corrupt {
            path: PathBuf::new(),
            reason: format!("serializing the µGraph: {e}"),
        })?;
        Ok(CacheEntry {
            format: CACHE_FORMAT.into(),
            version: CACHE_VERSION,
            program_hash: key.program_hash.to_hex(),
            arch: key.arch.clone(),
            search_version: key.search_version.clone(),
            mugraph: value,
            cost_us,
            measured_us: None,
            device: None,
            top,
            created_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            unfused: Vec::new(),
        })
    }

    /// The chosen µGraph, checked against every rule of the IR.
    pub fn graph(&self) -> Result<KernelGraph, String> {
        let text = serde_json::to_string(&self.mugraph).map_err(|e| e.to_string())?;
        KernelGraph::from_json(&text).map_err(|e| e.to_string())
    }
}

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Reading or writing failed.
    #[error("search cache {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A cache file exists but is not a valid entry for its key.
    #[error("corrupt search cache entry {path}: {reason} (it will be searched again and rewritten)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// A search cache directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    dir: PathBuf,
    /// Where new entries go (and are looked up first), when not `dir`.
    write_dir: Option<PathBuf>,
}

impl Cache {
    /// A cache in `dir` (created on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Cache { dir: dir.into(), write_dir: None }
    }

    /// The same cache, writing new entries to `dir` instead (and reading them from there first):
    /// the cache directory itself is only read.
    pub fn with_write_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.write_dir = Some(dir.into());
        self
    }

    /// Where new entries are written: the write directory, or the cache directory.
    pub fn write_dir(&self) -> &Path {
        self.write_dir.as_deref().unwrap_or(&self.dir)
    }

    /// The file the entry for `key` is read from: the write directory's when it has one, else
    /// the cache directory's ([`Cache::path`]), present or not.
    pub fn read_path(&self, key: &CacheKey) -> PathBuf {
        match &self.write_dir {
            Some(w) if w.join(key.file_name()).is_file() => w.join(key.file_name()),
            _ => self.path(key),
        }
    }

    /// Entries of the same program and architecture written by another search version (an
    /// older mirage, or other search settings): they no longer apply, and a build that searches
    /// again says so instead of dropping them silently.
    pub fn other_versions(&self, key: &CacheKey) -> Vec<PathBuf> {
        let name = key.file_name();
        let prefix = key.program_arch_prefix();
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json") && n != name)
            })
            .collect();
        found.sort();
        found
    }

    /// The cache of a workspace: `{root}/.mirage`.
    pub fn at_workspace(root: impl AsRef<Path>) -> Self {
        Cache::new(root.as_ref().join(".mirage"))
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry for `key` lives.
    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// Reads the entry for `key`: `Ok(None)` when there is none, [`CacheError::Corrupt`] when the
    /// file is unreadable, malformed, or belongs to another key.
    pub fn load(&self, key: &CacheKey) -> Result<Option<(CacheEntry, KernelGraph)>, CacheError> {
        let path = self.read_path(key);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(CacheError::Corrupt { path, reason: format!("not UTF-8 text: {e}") });
            }
            Err(source) => return Err(CacheError::Io { path, source }),
        };
        let corrupt = |reason: String| CacheError::Corrupt { path: path.clone(), reason };
        let entry: CacheEntry = serde_json::from_str(&text).map_err(|e| corrupt(format!("not a cache entry: {e}")))?;
        if entry.format != CACHE_FORMAT || entry.version != CACHE_VERSION {
            return Err(corrupt(format!(
                "format {:?} version {}, expected {CACHE_FORMAT:?} version {CACHE_VERSION}",
                entry.format, entry.version
            )));
        }
        if entry.program_hash != key.program_hash.to_hex()
            || entry.arch != key.arch
            || entry.search_version != key.search_version
        {
            return Err(corrupt(format!(
                "the entry is for program {} on {} (search {}), not this key",
                entry.program_hash, entry.arch, entry.search_version
            )));
        }
        let graph = entry.graph().map_err(|e| corrupt(format!("its µGraph is invalid: {e}")))?;
        Ok(Some((entry, graph)))
    }

    /// Writes the entry for `key` into the write directory atomically (temporary file + rename); returns its path.
    pub fn store(&self, key: &CacheKey, entry: &CacheEntry) -> Result<PathBuf, CacheError> {
        let dir = self.write_dir();
        std::fs::create_dir_all(dir).map_err(|source| CacheError::Io { path: dir.to_path_buf(), source })?;
        let path = dir.join(key.file_name());
        let text = serde_json::to_string_pretty(entry)
            .map_err(|e| CacheError::Corrupt { path: path.clone(), reason: format!("serializing: {e}") })?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let tmp = dir.join(format!(".{}.tmp.{}.{nanos}", key.file_name(), std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            CacheError::Io { path: path.clone(), source }
        })?;
        Ok(path)
    }
}
