//! The superoptimizer: enumerate µGraphs for a program, keep those proven
//! equivalent, pick the cheapest by the cost model, and cache the answer.
//!
//! [`superoptimize`] is the entry point:
//!
//! 1. With a [`Cache`], a hit is re-verified against the program with fingerprints (and, for a
//!    program that takes a maximum, [`wide_range_check`]) and returned without searching; a corrupt or wrong entry is reported in [`SearchResult::notes`] and
//!    searched again. With `MIRAGE_OFFLINE=1` (or [`SearchConfig::offline`]) a miss is an error.
//! 2. The enumerator ([`enumerate`](self) module docs) builds µGraphs of up to
//!    [`SearchConfig::max_kernels`] kernels, fewer kernels first, within a wall-clock budget
//!    (the best found so far is used when it runs out), in parallel on all cores. When it finds
//!    nothing with every input read by one kernel, it searches again letting the final kernel
//!    re-read inputs ([`SearchConfig::reread_inputs`]). For a safe-softmax attention program,
//!    [`attention`] adds the online-softmax and split-KV µGraphs the enumerator does not reach.
//! 3. Every complete candidate is costed ([`crate::cost::estimate`]); candidates are sorted by
//!    cost, ties by canonical hash (so the result does not depend on thread timing), and verified
//!    in that order with finite-field fingerprints at the program's real shapes
//!    ([`FingerprintContext`]); the first equivalent one that also passes the f32 float check
//!    ([`float_check`]) is chosen.
//! 4. An input read in conflicting roles (a residual's `x`) is searched as one copy per role and
//!    read twice by the µGraph; a program no search solves whole is searched in parts and the
//!    parts composed, verified as a whole ([`partition`]). The whole program, its parts and
//!    their growing share one budget ([`budget`]).
//!
//! ```no_run
//! use mirage::search::{superoptimize, SearchConfig};
//! use mirage::cache::Cache;
//! use mirage::ir::{DType, KernelGraph};
//! // rms_norm(X) @ W with X [2, 4096], W [4096, 6144].
//! let mut program = KernelGraph::new();
//! let x = program.input(&[2, 4096], DType::F16)?;
//! let w = program.input(&[4096, 6144], DType::F16)?;
//! let y = program.rms_norm(x, 0.0, None)?;
//! let o = program.matmul(y, w)?;
//! program.output(o, None)?;
//! let result = superoptimize(&program, &SearchConfig::default(), Some(&Cache::at_workspace(".")))?;
//! println!("{result}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod attention;
pub mod budget;
mod enumerate;
pub mod expr;
pub mod norm_split;
pub mod oracle;
pub mod partition;
mod pattern;
pub mod ranges;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

pub use crate::cache::UnfusedOperator;
use crate::cache::{Cache, CacheEntry, CacheKey, CachedCandidate};
use crate::cost::{Arch, CostReport, estimate};
use crate::dims::Dims;
use crate::eval::{EvalError, RunShapes, evaluate_at};
use crate::fingerprint::{FingerprintContext, Verdict, VerifyConfig, VerifyError, mix64};
use crate::ir::{AccKind, BlockOp, CanonicalHash, DType, KernelGraph, KernelOp};
use crate::reference::{HostTensor, max_scaled_error, run};
pub use expr::{NoPruning, Pruner, StructuralPruner};
pub use oracle::{Z3Counts, Z3Pruner};

/// Version of the search algorithm; part of every cache key.
pub const SEARCH_ALGORITHM_VERSION: u32 = 6;

/// Limits and presets of the search.
#[derive(Clone, Debug)]
pub struct SearchConfig {
    /// The target the cost model ranks for.
    pub arch: Arch,
    /// Most kernels in a µGraph (1 = one fused kernel; 2 allows split reductions with a combine
    /// kernel and unfused variants).
    pub max_kernels: usize,
    /// Most operators in a block graph, not counting input iterators and output savers.
    pub max_block_ops: usize,
    /// Most kernel tensors one block graph reads.
    pub max_block_inputs: usize,
    /// Most tensors one block graph writes.
    pub max_block_outputs: usize,
    /// Most blocks in a grid.
    pub max_blocks: usize,
    /// Most blocks along one grid axis.
    pub max_axis_blocks: usize,
    /// Candidate for-loop ranges (1, no loop, is always tried).
    pub forloop_ranges: Vec<usize>,
    /// Candidate threads per block.
    pub threads: Vec<usize>,
    /// Try kernel-level (library) operators as kernels of their own.
    pub kernel_level_ops: bool,
    /// Intermediate kernels kept per kernel position (cheapest per output signature).
    pub max_intermediates: usize,
    /// Intermediate custom kernels must split a reduction across the grid (split-K / split-KV
    /// partial results, combined by a later kernel); unfused variants still come from
    /// kernel-level operators.
    pub split_intermediates_only: bool,
    /// Let a later kernel read program inputs an earlier kernel already read. When off, a search
    /// that finds no candidate within its budget tries again with it on, in what is left of the
    /// budget.
    pub reread_inputs: bool,
    /// Wall-clock budget of the whole search (the whole program, its parts and their growing
    /// share it: [`budget`]); the best verified µGraph found by then is used.
    pub budget: Duration,
    /// State budget of the whole search (prefixes visited, [`SearchStats::states`]): like
    /// `budget`, but independent of the machine's speed and load.
    pub max_states: u64,
    /// Prune with abstract expressions ([`StructuralPruner`]); off only for ablations.
    pub pruning: bool,
    /// With `pruning`, ask the z3 subexpression oracle about every prefix the structural check
    /// rejects and keep those it proves ([`Z3Pruner`]).
    pub z3: bool,
    /// Fingerprint verification settings.
    pub verify: VerifyConfig,
    /// How many of the cheapest candidates to verify for the report (the winner always is).
    pub verify_top: usize,
    /// Most candidates tried before giving up on finding a verified one.
    pub max_verify: usize,
    /// Candidates listed in the result.
    pub top_k: usize,
    /// Run the f32 float check on the chosen µGraph.
    pub float_check: bool,
    /// Treat a cache miss as an error; `None` reads `MIRAGE_OFFLINE` (`1` = offline).
    pub offline: Option<bool>,
    /// The program's runtime-sized dims (none: a static program). The program is given at the
    /// compile size (every variable at its upper bound); the chosen µGraph is verified over the
    /// ranges ([`ranges`]). Part of the cache key.
    pub dims: Dims,
    /// When no µGraph of the whole program is found, search it in parts
    /// ([`partition`] module docs), in what is left of the budget ([`budget`]), and compose
    /// them; off, such a search is an error.
    pub partition: bool,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            arch: Arch::sm90(),
            max_kernels: 2,
            max_block_ops: 9,
            max_block_inputs: 4,
            max_block_outputs: 2,
            max_blocks: 4096,
            max_axis_blocks: 1024,
            forloop_ranges: vec![4, 8, 16, 32, 64],
            threads: vec![128, 256],
            kernel_level_ops: true,
            max_intermediates: 8,
            split_intermediates_only: true,
            reread_inputs: false,
            budget: Duration::from_secs(60),
            max_states: u64::MAX,
            pruning: true,
            z3: false,
            verify: VerifyConfig::default(),
            verify_top: 1,
            max_verify: 32,
            top_k: 5,
            float_check: true,
            offline: None,
            dims: Dims::default(),
            partition: true,
        }
    }
}

/// A search version string, `s{SEARCH_ALGORITHM_VERSION}-xxxxxxxx`, from the text of what it
/// covers (the configuration, and the tokens of later additions that only some programs carry).
fn hashed_version(text: &str) -> String {
    let h = text.bytes().fold(0x243f_6a88_85a3_08d3u64, |h, b| mix64(h ^ b as u64));
    format!("s{SEARCH_ALGORITHM_VERSION}-{:08x}", h as u32)
}

impl SearchConfig {
    /// One fused kernel only: the fast preset for element-wise, norm and GEMM-epilogue programs.
    pub fn single_kernel() -> Self {
        SearchConfig { max_kernels: 1, ..SearchConfig::default() }
    }

    /// The default limits for another architecture.
    pub fn for_arch(arch: Arch) -> Self {
        SearchConfig { arch, ..SearchConfig::default() }
    }

    /// The version string of everything that changes which µGraph is chosen (not the budget,
    /// verification effort or reporting): part of the cache key.
    pub fn version(&self) -> String {
        let text = format!(
            "{SEARCH_ALGORITHM_VERSION}|{}|{}|{}|{}|{}|{}|{}|{:?}|{:?}|{}|{}|{}|{}|{}",
            self.arch.search_identity(),
            self.max_kernels,
            self.max_block_ops,
            self.max_block_inputs,
            self.max_block_outputs,
            self.max_blocks,
            self.max_axis_blocks,
            self.forloop_ranges,
            self.threads,
            self.kernel_level_ops,
            self.max_intermediates,
            self.split_intermediates_only,
            self.reread_inputs,
            self.pruning
        );
        // z3 joined the configuration later: only a search with it on hashes differently, so the
        // cache entries of searches without it keep their keys.
        let text = if self.pruning && self.z3 { format!("{text}|z3") } else { text };
        // Likewise the declared ranges and the input dims they size.
        let text = if self.dims.is_static() {
            text
        } else {
            let vars: Vec<String> = self.dims.vars.iter().map(ToString::to_string).collect();
            // Ranked at representative sizes of the ranges ([`ranges::rank`]), not at the upper
            // bounds alone; candidates that stack copies of a runtime-sized dim
            // ([`crate::dims::Extent::Stacked`]: split-K over a batch) joined later.
            format!(
                "{text}|dims {} {:?}|ranked by worst ratio at {:?}|stacked copies",
                vars.join(", "),
                self.dims.inputs,
                ranges::rank_sizes(&self.dims)
            )
        };
        hashed_version(&text)
    }

    /// The version string of a search of `program`: [`SearchConfig::version`], with a `wide`
    /// token when some tensor dim of `program` has splits beyond `max_axis_blocks`
    /// ([`has_wide_splits`](Self::has_wide_splits)). Those splits joined the search later; only
    /// the programs they exist for hash differently, so every other cache entry keeps its key.
    pub fn version_for(&self, program: &KernelGraph) -> String {
        let version = self.version();
        // The attention candidates' narrowest key tile joined later ([`attention::MIN_KEY_TILE_BYTES`]):
        // only the programs [`attention::recognize`] takes hash differently.
        let version = if attention::recognize(program).is_some() {
            hashed_version(&format!("{version}|attention key tiles {}", attention::MIN_KEY_TILE_BYTES))
        } else {
            version
        };
        // Split-K for normalized projections joined later ([`norm_split`]): only the programs
        // [`norm_split::recognize`] takes hash differently.
        let version = if self.max_kernels >= 2 && norm_split::recognize(program).is_some() {
            hashed_version(&format!("{version}|norm split-K {}", norm_split::MIN_TILE_BYTES))
        } else {
            version
        };
        if !self.has_wide_splits(program) {
            return version;
        }
        hashed_version(&format!("{version}|wide {}", enumerate::WIDE_SPLIT_MIN_TILE))
    }

    /// Whether some tensor dim of `program` splits into more than `max_axis_blocks` blocks of a
    /// power-of-two extent of at least 64 within `max_blocks`, its odd part exceeding
    /// `max_axis_blocks` (151936 = 2^7 · 1187, not 128256 = 2^8 · 501): the search offers such
    /// splits for its classes, which are sized by these dims.
    pub fn has_wide_splits(&self, program: &KernelGraph) -> bool {
        program
            .nodes()
            .iter()
            .flat_map(|n| &n.outputs)
            .flat_map(|d| &d.shape)
            .any(|&n| !enumerate::wide_splits(n, self.max_axis_blocks, self.max_blocks).is_empty())
    }

    /// The search cache key of `program` under this configuration.
    pub fn cache_key(&self, program: &KernelGraph) -> CacheKey {
        CacheKey {
            program_hash: program.canonical_hash(),
            arch: self.arch.name.to_string(),
            search_version: self.version_for(program),
        }
    }

    fn is_offline(&self) -> bool {
        self.offline.unwrap_or_else(|| std::env::var("MIRAGE_OFFLINE").is_ok_and(|v| v.trim() == "1"))
    }
}

/// A costed candidate µGraph.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The µGraph (program inputs and outputs in the program's order).
    pub graph: KernelGraph,
    /// Its cost estimate.
    pub cost: CostReport,
    /// Its canonical hash.
    pub hash: CanonicalHash,
    /// Fingerprint verdict: `Some(true)` equivalent, `Some(false)` rejected, `None` not checked.
    pub verified: Option<bool>,
}

/// What the search did.
#[derive(Clone, Debug, Default)]
pub struct SearchStats {
    /// Prefixes (kernel- and block-level states) visited.
    pub states: u64,
    /// Operator applications the pruner rejected.
    pub pruned: u64,
    /// Block configurations skipped because their cost lower bound exceeded the best found.
    pub bounded: u64,
    /// Distinct complete candidates found.
    pub candidates: usize,
    /// Candidates verified equivalent.
    pub verified: usize,
    /// Candidates rejected by fingerprints or the float check.
    pub rejected: usize,
    /// The budget (time or states) ran out before the enumeration finished: the candidates are
    /// those found by then, and the chosen µGraph is the best verified one among them.
    pub timed_out: bool,
    /// The wall-clock budget the enumeration ran under ([`SearchConfig::budget`]).
    pub budget: Duration,
    /// The state budget it ran under ([`SearchConfig::max_states`]; `u64::MAX`: none).
    pub max_states: u64,
    /// Time spent enumerating and costing.
    pub search_time: Duration,
    /// Time spent verifying.
    pub verify_time: Duration,
    /// The pruner used.
    pub pruner: String,
    /// The program's operators (`name (%node)`) that no tile or kernel tensor computed although
    /// the results of all their operands were computed: where a search that found nothing
    /// stopped.
    pub never_computed: Vec<String>,
    /// What the z3 oracle did, when the pruner has one ([`SearchConfig::z3`]).
    pub z3: Option<Z3Counts>,
    /// Operators of a partitioned search ([`SearchConfig::partition`]) kept as their own
    /// library kernels, each with why (no search expressed it, or the budget ran out first).
    pub unfused: Vec<UnfusedOperator>,
    /// Fused parts composed by a partitioned search (0: the µGraph is of the whole program).
    pub parts: usize,
    /// How a runtime-sized program's candidates were ranked over its declared ranges
    /// ([`ranges::rank`]): the sizes, and what the ranking changed (`None` for a static program).
    pub ranked: Option<String>,
}

impl SearchStats {
    /// The budget the enumeration ran under, in words: `budget 60 s`, `budget 60 s / 100000
    /// states`.
    pub fn budget_text(&self) -> String {
        let time = format!("budget {:.1} s", self.budget.as_secs_f64());
        if self.max_states == u64::MAX { time } else { format!("{time} / {} states", self.max_states) }
    }

    /// The budget, what was used of it and the outcome, in words: `budget 60.0 s: used 12.3 s
    /// searching and 0.8 s verifying, 51234 states; outcome: the whole program (2 kernel(s))`,
    /// or `…; outcome: 3 parts composed (4 kernel(s)), 1 operator(s) unfused: ...`.
    pub fn budget_report(&self, chosen: &Candidate) -> String {
        let kernels = chosen.graph.num_kernels();
        let mut outcome = if self.parts == 0 && self.unfused.is_empty() {
            format!("the whole program ({kernels} kernel(s))")
        } else {
            format!("{} part(s) composed ({kernels} kernel(s))", self.parts)
        };
        if !self.unfused.is_empty() {
            let ops: Vec<String> = self.unfused.iter().map(|u| format!("{} ({})", u.operator, u.why)).collect();
            outcome += &format!(", {} operator(s) unfused: {}", ops.len(), ops.join("; "));
        }
        format!(
            "{}: used {:.1} s searching and {:.1} s verifying, {} states{}; outcome: {outcome}",
            self.budget_text(),
            self.search_time.as_secs_f64(),
            self.verify_time.as_secs_f64(),
            self.states,
            if self.timed_out { " (ran out)" } else { "" }
        )
    }

    /// When the budget ran out, what the build reports: the budget, what was visited by then and
    /// what was used. `None` when the enumeration finished within its budget.
    pub fn budget_outcome(&self, chosen: &Candidate) -> Option<String> {
        self.timed_out.then(|| {
            format!(
                "search {} exhausted after {} states in {:.1} s: using the best verified µGraph found by then ({} kernel(s), estimated {:.2} µs, {} candidates); a larger budget (MIRAGE_SEARCH_BUDGET, MIRAGE_SEARCH_STATES) may find a better one",
                self.budget_text(),
                self.states,
                self.search_time.as_secs_f64(),
                chosen.graph.num_kernels(),
                chosen.cost.total_us,
                self.candidates
            )
        })
    }
}

/// The answer of [`superoptimize`].
#[derive(Clone, Debug)]
pub struct SearchResult {
    /// Canonical hash of the program.
    pub program_hash: CanonicalHash,
    /// The chosen µGraph (verified).
    pub best: Candidate,
    /// The cheapest candidates, the chosen one first.
    pub top: Vec<Candidate>,
    /// What the search did (zeros on a cache hit).
    pub stats: SearchStats,
    /// Whether the answer came from the cache.
    pub from_cache: bool,
    /// The cache file read or written.
    pub cache_path: Option<PathBuf>,
    /// Warnings: corrupt or stale cache entries, cache write failures.
    pub notes: Vec<String>,
    /// On a cache hit, the top candidates the search recorded in the entry (costs as estimated
    /// then); empty otherwise.
    pub cached_top: Vec<CachedCandidate>,
    /// The architecture the costs are for.
    pub arch: String,
    /// On a cache hit of a tuned entry, the chosen µGraph's measured median time (µs) and the
    /// GPU it was measured on ([`crate::tune`]).
    pub measured: Option<(f64, String)>,
}

/// Why no µGraph could be produced.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The program cannot be searched.
    #[error("cannot search this program: {0}")]
    Program(String),
    /// Offline mode and no usable cache entry.
    #[error(
        "MIRAGE_OFFLINE=1 and the search cache has no usable entry for program {program} (arch {arch}, search {version}): expected {path}{reason}. Run the build once without MIRAGE_OFFLINE to search and fill the cache, then commit the .mirage directory"
    )]
    Offline {
        /// Program hash (hex).
        program: String,
        /// Architecture.
        arch: String,
        /// Search configuration version.
        version: String,
        /// Where the entry should be.
        path: String,
        /// Why the entry there is not usable, if there is one.
        reason: String,
    },
    /// Verification could not run.
    #[error("verification failed to run: {0}")]
    Verify(#[from] VerifyError),
    /// The float check could not run.
    #[error("float check failed to run: {0}")]
    Eval(#[from] EvalError),
    /// Nothing verified within the limits.
    #[error("no verified µGraph found: {0}")]
    NotFound(String),
}

/// Superoptimizes `program`: the cheapest verified µGraph, from `cache` when it holds one.
pub fn superoptimize(
    program: &KernelGraph,
    cfg: &SearchConfig,
    cache: Option<&Cache>,
) -> Result<SearchResult, SearchError> {
    superoptimize_with(program, cfg, cache, None)
}

/// Why a cached µGraph cannot be used (`None`: it can): fingerprints, and for a program that
/// takes a maximum the wide-range float check (an entry that drops the maximum is as wrong as one
/// that computes something else).
fn cached_verdict(
    program: &KernelGraph,
    graph: &KernelGraph,
    cfg: &SearchConfig,
) -> Result<Option<String>, SearchError> {
    if let Verdict::NotEquivalent { witness } = FingerprintContext::new(program, &cfg.verify)?.check(graph)? {
        return Ok(Some(format!("does not compute the program ({witness})")));
    }
    if let Err(why) = ranges::RangeCheck::new(program, cfg)?.check(graph, cfg.float_check)? {
        return Ok(Some(format!("does not compute the program over the declared ranges ({why})")));
    }
    if !takes_a_maximum(program) {
        return Ok(None);
    }
    Ok(wide_range_check(program, graph)?.err().map(|e| format!("does not keep the program's maximum ({e})")))
}

/// [`superoptimize`] with a custom pruner (`None`: the configuration's default).
pub fn superoptimize_with(
    program: &KernelGraph,
    cfg: &SearchConfig,
    cache: Option<&Cache>,
    pruner: Option<&dyn Pruner>,
) -> Result<SearchResult, SearchError> {
    program.validate().map_err(|e| SearchError::Program(e.to_string()))?;
    let key = cfg.cache_key(program);
    let program_hash = key.program_hash;
    let mut notes = Vec::new();
    let mut unusable = String::new();
    if let Some(cache) = cache {
        let path = cache.path(&key);
        match cache.load(&key) {
            Ok(Some((entry, graph))) => match cached_verdict(program, &graph, cfg)? {
                None => {
                    let cost = estimate(&graph, &cfg.arch).map_err(|e| SearchError::Program(e.to_string()))?;
                    let best = Candidate { hash: graph.canonical_hash(), graph, cost, verified: Some(true) };
                    // What the search that wrote the entry did not fuse is reported on every hit.
                    notes.extend(entry.unfused.iter().map(|u| {
                        format!(
                            "{} kept as its own library kernel (not fused) by the search that wrote this cache entry: {}",
                            u.operator, u.why
                        )
                    }));
                    return Ok(SearchResult {
                        program_hash,
                        top: vec![best.clone()],
                        best,
                        stats: SearchStats { unfused: entry.unfused.clone(), ..SearchStats::default() },
                        from_cache: true,
                        cache_path: Some(path),
                        notes,
                        measured: entry.measured_us.map(|us| (us, entry.device.clone().unwrap_or_default())),
                        cached_top: entry.top,
                        arch: cfg.arch.name.to_string(),
                    });
                }
                Some(why) => {
                    unusable = format!("; the entry there {why}");
                    notes.push(format!("cached µGraph {} {why}; searching again", path.display()));
                }
            },
            Ok(None) => {}
            Err(e) => {
                unusable = format!("; {e}");
                notes.push(e.to_string());
            }
        }
    }
    if cfg.is_offline() {
        let path =
            cache.map_or_else(|| "a search cache (none was given)".to_string(), |c| c.path(&key).display().to_string());
        return Err(SearchError::Offline {
            program: program_hash.to_hex(),
            arch: key.arch.clone(),
            version: key.search_version.clone(),
            path,
            reason: unusable,
        });
    }
    let mut result = search_normalized_products(program, cfg, pruner)?;
    result.notes.splice(0..0, notes);
    if let Some(cache) = cache {
        let top = result
            .top
            .iter()
            .map(|c| CachedCandidate {
                hash: c.hash.to_hex(),
                kernels: c.graph.num_kernels(),
                cost_us: c.cost.total_us,
                verified: c.verified,
                measured_us: None,
            })
            .collect();
        let stored = CacheEntry::new(&key, &result.best.graph, result.best.cost.total_us, top)
            .map(|e| CacheEntry { unfused: result.stats.unfused.clone(), ..e })
            .and_then(|e| cache.store(&key, &e));
        match stored {
            Ok(p) => result.cache_path = Some(p),
            Err(e) => result.notes.push(format!("could not write the search cache: {e}")),
        }
    }
    Ok(result)
}

/// [`search`], then for a program that normalizes a product before a reduction
/// ([`expr::has_normalized_products`]: `(rms_norm(x) * g) @ w`, whose normal form `Σ x·g·w /
/// rms(x)` has no `rms_norm(x) * g` for the default pruner to match) a search of one-kernel
/// µGraphs with the pruner that keeps such products
/// ([`StructuralPruner::with_normalized_products`]), in what is left of the budget; the cheaper
/// verified µGraph of the two is chosen. The extra search runs after the first, so the first's
/// result (and the cache entries of the programs it does not beat) is what it was without it;
/// the pruner does not replace the default in searches of several kernels, where the
/// intermediate kernels it keeps crowd the cheaper µGraphs out of the `max_intermediates` kept per
/// position.
fn search_normalized_products(
    program: &KernelGraph,
    cfg: &SearchConfig,
    pruner: Option<&dyn Pruner>,
) -> Result<SearchResult, SearchError> {
    let start = Instant::now();
    let mut visited = 0;
    let first = search(program, cfg, pruner, &mut visited);
    let applies = pruner.is_none() && cfg.pruning && !cfg.z3 && cfg.max_kernels > 1 && {
        let split = partition::split_reads(program);
        let searched = split.as_ref().map_or(program, |s| &s.program);
        enumerate::analyze(searched).is_ok_and(|info| {
            expr::has_normalized_products(&info.outputs.iter().map(|(e, _, _)| e.clone()).collect::<Vec<_>>())
        })
    };
    let left = cfg.budget.saturating_sub(start.elapsed());
    let states_left = cfg.max_states.saturating_sub(visited);
    let timed_out = first.as_ref().is_ok_and(|r| r.stats.timed_out);
    if !applies || left.is_zero() || states_left == 0 || timed_out {
        return first;
    }
    let one = SearchConfig { max_kernels: 1, partition: false, budget: left, max_states: states_left, ..cfg.clone() };
    let second = search(program, &one, None, &mut 0);
    match (first, second) {
        (Ok(a), Ok(b)) => {
            let note = format!(
                "searched one-kernel µGraphs again keeping normalized products (rms_norm(x) * g before a matmul): {} states, {} candidates, best {:.2} µs",
                b.stats.states, b.stats.candidates, b.best.cost.total_us
            );
            let (mut chosen, other) = if b.best.cost.total_us < a.best.cost.total_us { (b, a) } else { (a, b) };
            chosen.stats.states += other.stats.states;
            chosen.stats.search_time += other.stats.search_time;
            chosen.stats.verify_time += other.stats.verify_time;
            // The whole search's limits (the first search's result already reports them; the
            // second ran on what the first left).
            chosen.stats.budget = cfg.budget;
            chosen.stats.max_states = cfg.max_states;
            chosen.notes.push(note);
            Ok(chosen)
        }
        (Err(_), Ok(b)) => Ok(b),
        (a, Err(_)) => a,
    }
}

/// The enumeration and costing alone, without verification: every distinct complete candidate,
/// cheapest first (ties by canonical hash), none verified yet. [`superoptimize`] verifies them in
/// this order.
pub fn candidates(
    program: &KernelGraph,
    cfg: &SearchConfig,
    pruner: Option<&dyn Pruner>,
) -> Result<(Vec<Candidate>, SearchStats), SearchError> {
    candidates_until(program, cfg, pruner, None)
}

/// [`candidates`], giving up at `give_up` (a budget from now) if no complete µGraph has been found
/// by then; with one found, the search goes on to `cfg`'s own limits.
fn candidates_until(
    program: &KernelGraph,
    cfg: &SearchConfig,
    pruner: Option<&dyn Pruner>,
    give_up: Option<budget::Budget>,
) -> Result<(Vec<Candidate>, SearchStats), SearchError> {
    let start = Instant::now();
    // An input read in conflicting roles (a residual's `x`) is searched as one copy per role.
    let split = partition::split_reads(program);
    let searched = split.as_ref().map_or(program, |s| &s.program);
    let info = enumerate::analyze(searched).map_err(SearchError::Program)?;
    let targets: Vec<expr::E> = info.outputs.iter().map(|(e, _, _)| e.clone()).collect();
    // A program that normalizes a product before a reduction (`(rms_norm(x) * g) @ w`: the
    // normal form has no `rms_norm(x) * g` to match) is searched for one kernel with the pruner
    // that keeps such products ([`search_normalized_products`]).
    let products =
        (pruner.is_none() && cfg.pruning && !cfg.z3 && cfg.max_kernels <= 1 && expr::has_normalized_products(&targets))
            .then(|| StructuralPruner::with_normalized_products(&targets));
    let structural = StructuralPruner::new(&targets);
    let z3 = (pruner.is_none() && cfg.pruning && cfg.z3)
        .then(|| Z3Pruner::new(&targets, program.inputs().len(), crate::absexpr::OracleConfig::default()));
    let pruner: &dyn Pruner = match (pruner, &z3, &products) {
        (Some(p), _, _) => p,
        (None, Some(z3), _) => z3,
        (None, None, Some(products)) => products,
        (None, None, None) if cfg.pruning => &structural,
        (None, None, None) => &NoPruning,
    };
    let run = enumerate::Run {
        info: &info,
        cfg,
        pruner,
        deadline: start + cfg.budget,
        give_up: give_up.map(|b| (Instant::now() + b.time_left(), b.states_left())),
        states: AtomicU64::new(0),
        pruned: AtomicU64::new(0),
        timed_out: AtomicBool::new(false),
        best_us: AtomicU64::new(f64::INFINITY.to_bits()),
        bounded: AtomicU64::new(0),
        reached: info.steps.iter().map(|_| AtomicBool::new(false)).collect(),
    };
    let found = enumerate::enumerate(&run)
        .into_iter()
        .filter_map(|f| match &split {
            Some(s) => s.merge(&f.graph),
            None => Some(f.graph),
        })
        .chain(attention::candidates(program, cfg))
        .chain(norm_split::candidates(program, cfg));
    let mut cands: Vec<Candidate> = found
        .collect::<Vec<_>>()
        .into_par_iter()
        .filter_map(|graph| {
            let cost = estimate(&graph, &cfg.arch).ok()?;
            cost.feasible().then(|| Candidate { hash: graph.canonical_hash(), graph, cost, verified: None })
        })
        .collect();
    cands.sort_by(|a, b| a.cost.total_us.total_cmp(&b.cost.total_us).then_with(|| a.hash.cmp(&b.hash)));
    cands.dedup_by(|a, b| a.hash == b.hash);
    // Runtime-sized dims: ranked for the whole of the declared ranges, not the compile size alone.
    let ranked = ranges::rank(&mut cands, &cfg.dims, &cfg.arch);
    let stats = SearchStats {
        ranked,
        states: run.states.load(Ordering::Relaxed),
        pruned: run.pruned.load(Ordering::Relaxed),
        bounded: run.bounded.load(Ordering::Relaxed),
        candidates: cands.len(),
        timed_out: run.timed_out.load(Ordering::Relaxed),
        budget: cfg.budget,
        max_states: cfg.max_states,
        search_time: start.elapsed(),
        pruner: pruner.name().to_string(),
        never_computed: run.frontier(),
        z3: pruner.z3_counts(),
        ..SearchStats::default()
    };
    Ok((cands, stats))
}

/// Searches without any cache; `visited` is set to the states visited (also when no µGraph is
/// found, so that a partitioned search charges them to its budget).
fn search(
    program: &KernelGraph,
    cfg: &SearchConfig,
    pruner: Option<&dyn Pruner>,
    visited: &mut u64,
) -> Result<SearchResult, SearchError> {
    let mut budget = budget::Budget::of(cfg);
    // With partitioning on, the whole program gets its share of the budget to find something
    // (the rule of [`budget`]): a search that has found nothing by then stops and leaves the
    // rest to the parts; one that has found a µGraph goes on to the whole budget, as without
    // partitioning.
    let share = cfg.partition.then(|| {
        let (num, den) = budget::WHOLE_SHARE;
        budget.portion(num, den)
    });
    let (mut cands, mut stats) = candidates_until(program, cfg, pruner, share)?;
    *visited = stats.states;
    let mut notes = Vec::new();
    if cands.is_empty() && !cfg.reread_inputs && !stats.timed_out {
        // Nothing where each program input is read by one kernel: within what is left of the
        // budget, let the final kernel re-read inputs an earlier kernel read (outputs of
        // different forms from one input: q and k rotated, v plain).
        let wider = SearchConfig {
            reread_inputs: true,
            budget: cfg.budget.saturating_sub(stats.search_time),
            max_states: cfg.max_states.saturating_sub(stats.states),
            ..cfg.clone()
        };
        let mut left = share;
        if let Some(l) = &mut left {
            l.charge(stats.states);
        }
        let (again, more) = candidates_until(program, &wider, pruner, left)?;
        notes.push(format!(
            "no µGraph reads each input in one kernel ({} states); searched again letting the final kernel re-read inputs: {} states, {} candidates",
            stats.states, more.states, more.candidates
        ));
        stats = SearchStats {
            states: stats.states + more.states,
            pruned: stats.pruned + more.pruned,
            bounded: stats.bounded + more.bounded,
            search_time: stats.search_time + more.search_time,
            ..more
        };
        cands = again;
        *visited = stats.states;
    }
    stats.budget = cfg.budget;
    stats.max_states = cfg.max_states;
    budget.charge(stats.states);
    if cands.is_empty() && cfg.partition {
        let parts = partition::search_parts(program, cfg, pruner, budget);
        if let Some(p) = &parts {
            *visited += p.stats.states;
        }
        if let Some(parts) = parts {
            return composed(program, cfg, stats, notes, parts);
        }
    }
    let vstart = Instant::now();
    notes.extend(stats.ranked.clone());
    if cands.is_empty() {
        let stopped = match stats.never_computed.as_slice() {
            [] => String::new(),
            ops => format!("; no partial µGraph applied {} to its computed operands", ops.join(", ")),
        };
        return Err(SearchError::NotFound(format!(
            "{} states visited in {:.1} s{}, no complete candidate{stopped}; raise max_kernels, max_block_ops or the budget",
            stats.states,
            stats.search_time.as_secs_f64(),
            if stats.timed_out { format!(" ({} exhausted)", stats.budget_text()) } else { String::new() }
        )));
    }
    let ctx = FingerprintContext::new(program, &cfg.verify)?;
    let mut over_ranges = ranges::RangeCheck::new(program, cfg)?;
    let mut range_rejected = Vec::new();
    let mut best: Option<usize> = None;
    let mut tried = 0;
    for i in 0..cands.len() {
        let verified_enough =
            best.is_some() && cands[..i].iter().filter(|c| c.verified == Some(true)).count() >= cfg.verify_top.max(1);
        if verified_enough || tried >= cfg.max_verify {
            break;
        }
        tried += 1;
        let ok = ctx.check(&cands[i].graph)?.is_equivalent();
        // Runtime-sized dims: the same at several sizes of each range (fingerprints for every
        // candidate, the float check where it runs).
        let ok = ok && {
            match over_ranges.check(&cands[i].graph, best.is_none() && cfg.float_check)? {
                Ok(()) => true,
                Err(msg) => {
                    range_rejected.push(format!("candidate {} {msg}", cands[i].hash));
                    false
                }
            }
        };
        let ok = ok
            && (best.is_some() || !cfg.float_check || {
                match float_check(program, &cands[i].graph)? {
                    Ok(()) => true,
                    Err(msg) => {
                        notes.push(format!(
                            "candidate {} passed fingerprints but failed the float check: {msg}",
                            cands[i].hash
                        ));
                        false
                    }
                }
            });
        cands[i].verified = Some(ok);
        if ok {
            stats.verified += 1;
            best.get_or_insert(i);
        } else {
            stats.rejected += 1;
        }
    }
    stats.verify_time = vstart.elapsed();
    let Some(b) = best else {
        let why = over_ranges.rejections();
        return Err(SearchError::NotFound(format!(
            "{} candidates, the {tried} cheapest were rejected by verification{why}",
            cands.len()
        )));
    };
    if let Some(first) = range_rejected.first() {
        notes.push(format!("{} candidate(s) rejected over the declared ranges, e.g. {first}", range_rejected.len()));
    }
    let best = cands[b].clone();
    let top: Vec<Candidate> = std::iter::once(best.clone())
        .chain(cands.iter().enumerate().filter(|(i, c)| *i != b && c.verified != Some(false)).map(|(_, c)| c.clone()))
        .take(cfg.top_k.max(1))
        .collect();
    Ok(SearchResult::searched(program, cfg, best, top, stats, notes))
}

/// The result of a partitioned search ([`partition::search_parts`]) after the whole search
/// (`whole`) found nothing: the composed µGraph verified against the whole program.
fn composed(
    program: &KernelGraph,
    cfg: &SearchConfig,
    whole: SearchStats,
    mut notes: Vec<String>,
    parts: partition::Parts,
) -> Result<SearchResult, SearchError> {
    let vstart = Instant::now();
    let graph = parts.graph;
    let verdict = FingerprintContext::new(program, &cfg.verify)?.check(&graph)?;
    if let Verdict::NotEquivalent { witness } = verdict {
        return Err(SearchError::NotFound(format!(
            "the µGraph composed of the program's parts does not compute the program ({witness})"
        )));
    }
    // Runtime-sized dims: the composition is verified over the declared ranges like any candidate.
    if let Err(msg) = ranges::RangeCheck::new(program, cfg)?.check(&graph, cfg.float_check)? {
        return Err(SearchError::NotFound(format!(
            "the µGraph composed of the program's parts is not right over the declared ranges: {msg}"
        )));
    }
    if cfg.float_check
        && let Err(msg) = float_check(program, &graph)?
    {
        return Err(SearchError::NotFound(format!(
            "the µGraph composed of the program's parts failed the float check: {msg}"
        )));
    }
    let cost = estimate(&graph, &cfg.arch).map_err(|e| SearchError::Program(e.to_string()))?;
    let best = Candidate { hash: graph.canonical_hash(), graph, cost, verified: Some(true) };
    let composed_verify = vstart.elapsed();
    notes.push(format!(
        "no µGraph of the whole program ({} states in {:.1} s{}): searched in parts and composed, verified as a whole in {:.1} s (after the budget)",
        whole.states,
        whole.search_time.as_secs_f64(),
        if whole.timed_out { ", its share of the budget exhausted".to_string() } else { String::new() },
        composed_verify.as_secs_f64()
    ));
    notes.extend(parts.notes);
    let p = parts.stats;
    let stats = SearchStats {
        states: whole.states + p.states,
        pruned: whole.pruned + p.pruned,
        bounded: whole.bounded + p.bounded,
        candidates: whole.candidates + p.candidates,
        verified: p.verified + 1,
        rejected: p.rejected,
        timed_out: p.timed_out,
        search_time: whole.search_time + p.search_time,
        verify_time: p.verify_time + composed_verify,
        unfused: parts.unfused,
        parts: parts.fused,
        ..whole
    };
    let top = vec![best.clone()];
    Ok(SearchResult::searched(program, cfg, best, top, stats, notes))
}

impl SearchResult {
    /// The result of a search (not a cache hit) of `program`.
    fn searched(
        program: &KernelGraph,
        cfg: &SearchConfig,
        best: Candidate,
        top: Vec<Candidate>,
        stats: SearchStats,
        notes: Vec<String>,
    ) -> SearchResult {
        SearchResult {
            program_hash: program.canonical_hash(),
            best,
            top,
            stats,
            from_cache: false,
            cache_path: None,
            notes,
            cached_top: Vec::new(),
            arch: cfg.arch.name.to_string(),
            measured: None,
        }
    }
}

/// Deterministic inputs for the float check (and the tuner's measurements): floats in `[-0.5, 0.5)`, and for `i32` inputs ids
/// in `0..=rows` of the smallest table they index (`rows` itself reads zeros).
pub(crate) fn float_inputs(g: &KernelGraph, seed: u64) -> Result<Vec<HostTensor>, EvalError> {
    let shapes: Vec<Vec<usize>> = g.inputs().iter().map(|d| d.shape.clone()).collect();
    float_inputs_of(g, &shapes, seed)
}

/// [`float_inputs`] of the given shapes (a program's inputs at run sizes).
fn float_inputs_of(g: &KernelGraph, shapes: &[Vec<usize>], seed: u64) -> Result<Vec<HostTensor>, EvalError> {
    let bounds = crate::fingerprint::index_bounds(g);
    shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            let n: usize = shape.iter().product();
            let base = mix64(seed ^ (i as u64 + 1));
            let bits = |j: usize| mix64(base.wrapping_add(j as u64)) >> 40;
            let data = match bounds.get(i).copied().flatten() {
                Some(rows) => (0..n).map(|j| (bits(j) % (rows as u64 + 1)) as f32).collect(),
                None => (0..n).map(|j| bits(j) as f32 / (1u64 << 24) as f32 - 0.5).collect(),
            };
            HostTensor::new(shape.clone(), data)
        })
        .collect()
}

/// For each output of a program, the (extra output holding its searched row, dim) when it is an
/// argmax's positions.
type ArgmaxRows = Vec<Option<(usize, usize)>>;

/// A copy of `program` that also returns the searched row of every output an `argmax`
/// produces, and for each original output the (extra output, dim) of its row.
fn with_argmax_rows(program: &KernelGraph) -> Option<(KernelGraph, ArgmaxRows)> {
    let mut g = KernelGraph::new();
    for n in program.nodes() {
        g.push(n.op.clone(), &n.inputs).ok()?;
    }
    let outputs = program.outputs();
    let mut rows = Vec::with_capacity(outputs.len());
    let mut extra = outputs.len();
    for (t, _) in &outputs {
        let node = &program.nodes()[t.node];
        rows.push(match node.op {
            KernelOp::Argmax { dim } => {
                g.output(node.inputs[0], None).ok()?;
                extra += 1;
                Some((extra - 1, dim))
            }
            _ => None,
        });
    }
    Some((g, rows))
}

/// Positions `got` of an argmax whose program positions are `want`, over rows `row` (the
/// program's values, searched along `dim`): each equal, or a near tie — the values at both
/// positions within tolerance of each other (a different summation order may flip those).
fn positions_match(want: &HostTensor, got: &HostTensor, row: &HostTensor, dim: usize, rtol: f32) -> Result<(), String> {
    if want.shape != got.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let scale = row.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let atol = rtol * 0.1 * scale.max(f32::MIN_POSITIVE);
    let strides = crate::ir::row_major_strides(&row.shape);
    let out_strides = crate::ir::row_major_strides(&want.shape);
    for (e, (&w, &g)) in want.data.iter().zip(&got.data).enumerate() {
        if w == g {
            continue;
        }
        let base: usize =
            (0..row.shape.len()).filter(|&d| d != dim).map(|d| (e / out_strides[d] % want.shape[d]) * strides[d]).sum();
        let at =
            |p: f32| (p >= 0.0 && (p as usize) < row.shape[dim]).then(|| row.data[base + p as usize * strides[dim]]);
        match (at(w), at(g)) {
            (Some(vw), Some(vg)) if (vw - vg).abs() <= atol + rtol * vw.abs() => {}
            _ => {
                return Err(format!("element {e}: position {g}, expected {w} (values {:?} and {:?})", at(g), at(w)));
            }
        }
    }
    Ok(())
}

/// The f32 float check of the chosen µGraph: program and candidate on the same random inputs, every
/// output within the element type's tolerance (relative to the output's largest magnitude); an
/// argmax's positions equal, or near ties of its row. A program that takes a maximum is also
/// checked on wide inputs ([`wide_range_check`]): the candidate must keep the maximum the program
/// subtracts.
/// The outer `Result` is a failure to run, the inner one the verdict.
pub fn float_check(program: &KernelGraph, candidate: &KernelGraph) -> Result<Result<(), String>, EvalError> {
    let verdict = float_check_at(program, candidate, None)?;
    if verdict.is_err() || !takes_a_maximum(program) {
        return Ok(verdict);
    }
    wide_range_check(program, candidate)
}

/// The scale of the inputs of [`wide_range_check`]: floats in `[-128, 128)`, beyond the range
/// where `exp` of an input (or of a sum or product of inputs) is finite in f32 (`exp(88.7)`
/// overflows).
pub const WIDE_RANGE_SCALE: f32 = 256.0;

/// Whether a graph computes a maximum anywhere: a kernel `reduce_max`, or in a custom kernel a
/// block `reduce_max`, a running maximum or a max accumulator.
pub fn takes_a_maximum(g: &KernelGraph) -> bool {
    g.nodes().iter().any(|n| match &n.op {
        KernelOp::ReduceMax { .. } => true,
        KernelOp::Custom { block } => block.nodes().iter().any(|b| {
            matches!(
                b.op,
                BlockOp::ReduceMax { .. } | BlockOp::RunningMax { .. } | BlockOp::Accum { acc: AccKind::Max }
            )
        }),
        _ => false,
    })
}

/// The check of what a maximum is for, which fingerprints cannot make: `exp(x − m) / Σ exp(x −
/// m)` is the same rational function for every `m`, so the finite-field check proves the safe
/// softmax equal to the unshifted one, and a µGraph that drops the maximum (or combines split
/// partial results by `exp(m_part)` without subtracting the overall maximum) passes it. Program
/// and candidate run in f32 on inputs [`WIDE_RANGE_SCALE`] times wider than the float check's;
/// wherever the program's output is finite, the candidate's must be finite too. The unshifted
/// form overflows there (`inf / inf`) and is rejected. Values are compared by the ordinary float
/// check only: at these inputs a softmax is nearly one-hot and so ill-conditioned that one
/// rounding of a logit in another summation order moves an output by more than any tolerance.
/// Outer `Result`: a failure to run; inner: the verdict.
pub fn wide_range_check(program: &KernelGraph, candidate: &KernelGraph) -> Result<Result<(), String>, EvalError> {
    let bounds = crate::fingerprint::index_bounds(program);
    let mut inputs = float_inputs(program, 0x7769_6465_2172)?;
    for (i, t) in inputs.iter_mut().enumerate() {
        if bounds.get(i).copied().flatten().is_none() {
            t.data.iter_mut().for_each(|v| *v *= WIDE_RANGE_SCALE);
        }
    }
    let want = run(program, &inputs)?;
    let got = run(candidate, &inputs)?;
    if want.len() != got.len() {
        return Ok(Err(format!("{} outputs, expected {}", got.len(), want.len())));
    }
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        if w.shape != g.shape {
            return Ok(Err(format!("output {k}: shape {:?}, expected {:?}", g.shape, w.shape)));
        }
        if let Some(e) = w.data.iter().zip(&g.data).position(|(x, y)| x.is_finite() && !y.is_finite()) {
            return Ok(Err(format!(
                "output {k}, element {e}: {} on inputs in [-{h}, {h}) where the program computes {} (an exp that overflows: the µGraph does not subtract the maximum the program subtracts)",
                g.data[e],
                w.data[e],
                h = WIDE_RANGE_SCALE / 2.0
            )));
        }
    }
    Ok(Ok(()))
}

/// [`float_check`] on the ordinary inputs alone; with `at`, at run sizes (the program's and the
/// candidate's geometry there).
fn float_check_at(
    program: &KernelGraph,
    candidate: &KernelGraph,
    at: Option<(&RunShapes, &RunShapes)>,
) -> Result<Result<(), String>, EvalError> {
    let eval = |g: &KernelGraph, x: &[HostTensor], run_shapes: Option<&RunShapes>| match run_shapes {
        Some(r) => evaluate_at(g, &crate::reference::F32, x, r),
        None => run(g, x),
    };
    let inputs = match at {
        Some((p, _)) => float_inputs_of(program, &p.inputs, 0x666c_6f61_7421)?,
        None => float_inputs(program, 0x666c_6f61_7421)?,
    };
    let (with_rows, rows) = match with_argmax_rows(program) {
        Some((g, rows)) => (eval(&g, &inputs, at.map(|a| a.0))?, rows),
        None => (eval(program, &inputs, at.map(|a| a.0))?, Vec::new()),
    };
    let got = eval(candidate, &inputs, at.map(|a| a.1))?;
    let dtype = program.inputs().iter().map(|d| d.dtype).find(|d| d.is_float()).unwrap_or(DType::F32);
    let rtol = match dtype {
        DType::F16 => 1e-2,
        DType::Bf16 => 2e-2,
        DType::F32 | DType::I32 => 1e-4,
    };
    let want = &with_rows[..with_rows.len().min(program.outputs().len())];
    if want.len() != got.len() {
        return Ok(Err(format!("{} outputs, expected {}", got.len(), want.len())));
    }
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        if let Some(&Some((row, dim))) = rows.get(k) {
            if let Err(e) = positions_match(w, g, &with_rows[row], dim, rtol) {
                return Ok(Err(format!("output {k} (argmax): {e}")));
            }
            continue;
        }
        let scale = w.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        match max_scaled_error(g, w, rtol * 0.1 * scale.max(f32::MIN_POSITIVE), rtol) {
            Some(e) if e <= 1.0 => {}
            Some(e) => return Ok(Err(format!("output {k}: scaled error {e:.3} exceeds the {dtype} tolerance"))),
            None => return Ok(Err(format!("output {k}: shape {:?}, expected {:?}", g.shape, w.shape))),
        }
    }
    Ok(Ok(()))
}

/// Writes a µGraph kernel by kernel: grid, threads, loop, iterators, operators, savers.
pub fn describe(g: &KernelGraph) -> String {
    let mut s = String::new();
    let mut k = 0;
    for (i, n) in g.nodes().iter().enumerate() {
        let args = n.inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        match &n.op {
            KernelOp::Input { desc } => s += &format!("  %{i} = input {:?} {}\n", desc.shape, desc.dtype),
            KernelOp::Output { .. } => s += &format!("  output {args}\n"),
            KernelOp::Custom { block } => {
                s += &format!(
                    "  %{i} = k{k}: custom({args}) grid {:?}, {} threads, forloop_range {}\n",
                    block.grid(),
                    block.threads(),
                    block.forloop_range()
                );
                for (j, b) in block.nodes().iter().enumerate() {
                    let bargs = b.inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
                    let shape = b.outputs.first().map(|t| format!(" -> {:?}", t.shape)).unwrap_or_default();
                    let what = match &b.op {
                        BlockOp::Input { input, imap, forloop_dim } => format!(
                            "input {input} imap {} forloop_dim {}",
                            fmt_map(imap),
                            forloop_dim.map_or("-".into(), |d| d.to_string())
                        ),
                        BlockOp::Output { omap, store } => {
                            let stored = store.map(|d| format!(" stored as {d}")).unwrap_or_default();
                            format!("output {bargs} omap {}{stored}", fmt_map(omap))
                        }
                        op => format!("{}({bargs})", op.name()),
                    };
                    s += &format!("      %{j} = {what}{shape}\n");
                }
                k += 1;
            }
            op => {
                s += &format!("  %{i} = k{k}: {}({args}) (library kernel)\n", op.name());
                k += 1;
            }
        }
    }
    s
}

fn fmt_map(m: &[Option<usize>; 3]) -> String {
    let f = |e: Option<usize>| e.map_or("-".to_string(), |d| d.to_string());
    format!("({}, {}, {})", f(m[0]), f(m[1]), f(m[2]))
}

impl SearchResult {
    /// The chosen µGraph, its cost estimate and the top candidates with theirs: the part of the
    /// report that is the same whether the answer was searched or read from the cache (the build
    /// records it in the launch plan, which therefore does not change on a cache hit).
    pub fn summary(&self) -> String {
        let mut s = format!(
            "chosen µGraph ({} kernel(s), estimated {:.2} µs on {}):\n",
            self.best.graph.num_kernels(),
            self.best.cost.total_us,
            self.arch
        );
        s += &describe(&self.best.graph);
        s += &format!("cost: {}", self.best.cost);
        s += "top candidates:\n";
        let verdict = |v: Option<bool>| match v {
            Some(true) => "verified",
            Some(false) => "rejected",
            None => "not verified",
        };
        if self.from_cache {
            if let Some((us, device)) = &self.measured {
                s += &format!("  (chosen by measurement: {us:.2} µs on {device})\n");
            }
            for (i, c) in self.cached_top.iter().enumerate() {
                let measured = c.measured_us.map_or(String::new(), |m| format!(", measured {m:.2} µs"));
                s += &format!(
                    "  #{i}: {:.2} µs, {} kernel(s), {}{measured}, {}\n",
                    c.cost_us,
                    c.kernels,
                    verdict(c.verified),
                    c.hash.get(..16).unwrap_or(&c.hash)
                );
            }
        } else {
            for (i, c) in self.top.iter().enumerate() {
                s += &format!(
                    "  #{i}: {:.2} µs, {} kernel(s), {}, {}\n",
                    c.cost.total_us,
                    c.graph.num_kernels(),
                    verdict(c.verified),
                    &c.hash.to_hex()[..16]
                );
            }
        }
        s
    }
}

impl fmt::Display for SearchResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = &self.program_hash.to_hex()[..16];
        if self.from_cache {
            writeln!(
                f,
                "program {short}: µGraph from the search cache ({}), re-verified",
                self.cache_path.as_ref().map_or("?".into(), |p| p.display().to_string())
            )?;
        } else {
            let s = &self.stats;
            writeln!(
                f,
                "program {short}: searched {} states ({} pruned by the {} pruner, {} configurations bounded by cost), {} candidates, {} verified, {} rejected; search {:.2} s{}, verification {:.2} s",
                s.states,
                s.pruned,
                s.pruner,
                s.bounded,
                s.candidates,
                s.verified,
                s.rejected,
                s.search_time.as_secs_f64(),
                if s.timed_out {
                    format!(" ({} exhausted: the best verified µGraph found by then)", s.budget_text())
                } else {
                    String::new()
                },
                s.verify_time.as_secs_f64()
            )?;
            writeln!(f, "{}", s.budget_report(&self.best))?;
            if let Some(z) = &s.z3 {
                writeln!(
                    f,
                    "z3: {} structural rejects, {} memo hits, {} queries ({} unknown) in {:.2} s, {} rescued, {} not asked (opaque)",
                    z.structural_rejects,
                    z.cache_hits,
                    z.queries,
                    z.unknown,
                    z.z3_time.as_secs_f64(),
                    z.rescues,
                    z.opaque
                )?;
            }
        }
        write!(f, "{}", self.summary())?;
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}
