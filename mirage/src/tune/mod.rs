//! Measured selection (autotuning): the analytic cost model ranks µGraphs without a GPU; tuning
//! times the best few of them on one and keeps the fastest.
//!
//! 1. [`tuning_candidates`]: the search's candidates, cheapest first by the model, picked so that
//!    they differ in structure (number of kernels, the grid and threads of the heaviest kernel:
//!    split-K with a combine kernel, wider or narrower tiles, other block counts). The first is the
//!    model's choice.
//! 2. [`compile_candidates`]: one translation unit and one cubin holding every candidate, with a
//!    launch plan per candidate.
//! 3. [`measure`]: on a GPU, each candidate runs once on random inputs (outputs poisoned with NaN)
//!    and is compared with the CPU reference interpreter; a failing or mismatching one is skipped
//!    with a warning, never chosen. The others are timed (CUDA events, L2 flushed before each
//!    launch, median) in several rounds, alternating their order.
//! 4. [`select`] (pure, [`record`]): the fastest correct candidate; [`choose_verified`] proves it
//!    equivalent to the program with fingerprints (the next fastest when it is not) before its
//!    µGraph is stored in the search cache (`.mirage/`) with the measured times and the device's
//!    name, so later builds, with or without a GPU, reuse it (re-verified like every cache entry).
//!
//! Two ways in: `MIRAGE_TUNE=1` when building with a GPU visible ([`tune_and_store`], called by
//! `mirage::build` for every program whose cache entry has no measurement; `MIRAGE_TUNE=force`
//! measures again), and an offline [`bundle`]: `tune pack` here writes the candidates' cubins and
//! plans with a manifest, `tune measure` on a GPU machine writes a JSON record ([`TuneRecord`]),
//! and `tune import` stores the choices in `.mirage/` (the `tune` example of this crate).
//! [`record::Calibration`] compares the model's predictions with a record's measurements.

pub mod bundle;
pub mod calibration;
pub mod measure;
pub mod record;

use std::collections::HashMap;
use std::path::PathBuf;

use crate::cache::{Cache, CacheEntry, CacheError, CacheKey, CachedCandidate};
use crate::codegen::plan::LaunchPlan;
use crate::codegen::{CodegenError, KernelOptions, generate_unit};
use crate::eval::EvalError;
use crate::fingerprint::{FingerprintContext, VerifyConfig, VerifyError};
use crate::ir::{CanonicalHash, KernelGraph, KernelOp};
use crate::nvcc::{self, NvccError};
use crate::search::{self, Candidate, SearchConfig, SearchError};

pub use record::{CandidateTiming, ProgramTiming, TuneRecord, select};

/// The environment variable that asks `mirage::build` to tune on a visible GPU: `1` tunes the
/// programs whose cache entry has no measurement yet, `force` measures every program again.
pub const TUNE_ENV: &str = "MIRAGE_TUNE";

/// What `MIRAGE_TUNE` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneMode {
    /// No tuning (unset, empty or `0`).
    Off,
    /// Tune programs whose cache entry has no measurement (`1`).
    Missing,
    /// Tune every program again (`force`).
    Force,
}

impl TuneMode {
    /// The mode a value of `MIRAGE_TUNE` asks for; anything else is an error naming the values.
    pub fn parse(value: Option<&str>) -> Result<TuneMode, String> {
        match value.map(str::trim) {
            None | Some("" | "0") => Ok(TuneMode::Off),
            Some("1") => Ok(TuneMode::Missing),
            Some("force") => Ok(TuneMode::Force),
            Some(other) => Err(format!("{TUNE_ENV}={other:?}: expected 1 (tune untuned programs), force or 0")),
        }
    }

    /// The mode of the environment.
    pub fn from_env() -> Result<TuneMode, String> {
        TuneMode::parse(std::env::var(TUNE_ENV).ok().as_deref())
    }
}

/// Settings of tuning.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneConfig {
    /// Candidates measured per program (the model's choice included).
    pub candidates: usize,
    /// Untimed launches per candidate and round.
    pub warmup: usize,
    /// Timed launches per candidate and round (their median is the round's time).
    pub iters: usize,
    /// Rounds over all candidates, alternately forwards and backwards; a candidate's time is the
    /// median of its rounds' medians.
    pub rounds: usize,
    /// Seed of the random inputs.
    pub seed: u64,
}

impl Default for TuneConfig {
    fn default() -> Self {
        TuneConfig { candidates: 12, warmup: 10, iters: 100, rounds: 3, seed: 0x7475_6e65 }
    }
}

/// Why tuning failed.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Searching or verifying the candidates failed.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// Verification could not run.
    #[error("verification failed to run: {0}")]
    Verify(#[from] VerifyError),
    /// The float check could not run.
    #[error("the float check failed to run: {0}")]
    Eval(#[from] EvalError),
    /// Code generation failed.
    #[error("code generation failed: {0}")]
    Codegen(#[from] CodegenError),
    /// nvcc failed.
    #[error(transparent)]
    Nvcc(#[from] NvccError),
    /// The GPU failed outside a candidate's own launch (opening it, uploading inputs).
    #[error("GPU: {0}")]
    Runtime(#[from] mirage_runtime::RuntimeError),
    /// The search cache could not be read or written.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A bundle or record is not what it should be.
    #[error("{what}: {reason}")]
    Format {
        /// The file or entry.
        what: String,
        /// What is wrong.
        reason: String,
    },
}

impl TuneError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TuneError {
        let path = path.into();
        move |source| TuneError::Io { path, source }
    }

    /// A malformed bundle, record or entry.
    pub fn format(what: impl Into<String>, reason: impl std::fmt::Display) -> TuneError {
        TuneError::Format { what: what.into(), reason: reason.to_string() }
    }
}

/// A verified candidate µGraph to measure.
#[derive(Clone, Debug)]
pub struct TuneCandidate {
    /// The µGraph.
    pub graph: KernelGraph,
    /// Its canonical hash.
    pub hash: CanonicalHash,
    /// The model's estimate, µs.
    pub predicted_us: f64,
    /// Its structure family ([`family`]).
    pub family: String,
}

/// The structure family of a costed µGraph: its number of kernels and the grid and threads of its
/// most expensive kernel. Candidates of one family differ only in loop ranges (tile depth,
/// pipeline stages) and in their lighter kernels (a combine kernel's grid).
pub fn family(c: &Candidate) -> String {
    let mut heaviest: Option<(f64, String)> = None;
    let mut k = 0;
    for node in c.graph.nodes() {
        let what = match &node.op {
            KernelOp::Input { .. } | KernelOp::Output { .. } => continue,
            KernelOp::Custom { block } => format!("grid {:?} × {}", block.grid(), block.threads()),
            op => op.name(),
        };
        let us = c.cost.kernels.get(k).map_or(0.0, |kc| kc.us);
        k += 1;
        if heaviest.as_ref().is_none_or(|(h, _)| us > *h) {
            heaviest = Some((us, what));
        }
    }
    format!("{} kernel(s), heaviest {}", c.graph.num_kernels(), heaviest.map_or_else(String::new, |h| h.1))
}

/// The order in which to try candidates (indices into `cands`, cheapest first): round-robin over
/// the structure families, the families in the order of their cheapest member, each family's
/// members cheapest first. The first index is the cheapest candidate.
pub fn diverse_order(families: &[String]) -> Vec<usize> {
    let mut order_of_family: Vec<&str> = Vec::new();
    let mut members: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, f) in families.iter().enumerate() {
        if !members.contains_key(f.as_str()) {
            order_of_family.push(f);
        }
        members.entry(f).or_default().push(i);
    }
    let mut out = Vec::with_capacity(families.len());
    for round in 0.. {
        let before = out.len();
        for f in &order_of_family {
            if let Some(&i) = members[f].get(round) {
                out.push(i);
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// The candidates to measure for `program`: up to `count` µGraphs of the search, the model's
/// cheapest first, then in [`diverse_order`]. They are not verified here (fingerprints at real
/// shapes take minutes for the largest programs): the measurement compares every candidate with
/// the reference interpreter, and [`choose_verified`] verifies the fastest before anything is
/// stored.
pub fn tuning_candidates(
    program: &KernelGraph,
    cfg: &SearchConfig,
    count: usize,
) -> Result<Vec<TuneCandidate>, TuneError> {
    let (cands, _) = search::candidates(program, cfg, None)?;
    if cands.is_empty() {
        return Err(SearchError::NotFound("the search found no candidate".into()).into());
    }
    let families: Vec<String> = cands.iter().map(family).collect();
    Ok(diverse_order(&families)
        .into_iter()
        .take(count.max(1))
        .map(|i| TuneCandidate {
            graph: cands[i].graph.clone(),
            hash: cands[i].hash,
            predicted_us: cands[i].cost.total_us,
            family: families[i].clone(),
        })
        .collect())
}

/// `candidates` with the cache's current choice for the program among them, and its index:
/// `current` is the program's cache entry with its µGraph (`Cache::load` under the search's key),
/// if it has one. A measurement that does not time the µGraph the build uses now cannot tell
/// whether replacing it pays (the cache may hold a µGraph the tuning search does not produce —
/// one found by an earlier search, or composed from a partitioned build). When the choice is not
/// among `candidates` it is appended, with the cost model's estimate for `arch` (the entry's
/// recorded one if the model cannot cost it) and its structure family. `None` without an entry.
pub fn with_current_choice(
    mut candidates: Vec<TuneCandidate>,
    current: Option<&(CacheEntry, KernelGraph)>,
    arch: &crate::cost::Arch,
) -> (Vec<TuneCandidate>, Option<usize>) {
    let Some((entry, graph)) = current else { return (candidates, None) };
    let hash = graph.canonical_hash();
    if let Some(i) = candidates.iter().position(|c| c.hash == hash) {
        return (candidates, Some(i));
    }
    let (predicted_us, family) = match crate::cost::estimate(graph, arch) {
        Ok(cost) => {
            let c = Candidate { graph: graph.clone(), cost, hash, verified: Some(true) };
            (c.cost.total_us, family(&c))
        }
        Err(_) => (entry.cost_us, format!("{} kernel(s), the cache's choice", graph.num_kernels())),
    };
    candidates.push(TuneCandidate { graph: graph.clone(), hash, predicted_us, family });
    let i = candidates.len() - 1;
    (candidates, Some(i))
}

/// The fastest usable candidate that fingerprint verification proves equivalent to `program`
/// (and, for a program that takes a maximum, that keeps it: [`search::wide_range_check`]):
/// usable candidates are verified in order of their measured times until one passes; those that
/// fail are marked unusable in `timings` (with the reason). `None` when none passes.
pub fn choose_verified(
    program: &KernelGraph,
    graphs: &[&KernelGraph],
    timings: &mut [CandidateTiming],
    verify: &VerifyConfig,
) -> Result<Option<usize>, TuneError> {
    let mut ctx: Option<FingerprintContext> = None;
    while let Some(i) = select(timings) {
        let graph = graphs.get(i).ok_or_else(|| TuneError::format("tuning outcome", format!("no µGraph {i}")))?;
        let ctx = match &mut ctx {
            Some(c) => c,
            None => ctx.insert(FingerprintContext::new(program, verify)?),
        };
        if !ctx.check(graph)?.is_equivalent() {
            timings[i].error = Some("fingerprint verification: not equivalent to the program".into());
            continue;
        }
        // Fingerprints cannot see whether a maximum is subtracted (`search::wide_range_check`).
        match search::takes_a_maximum(program).then(|| search::wide_range_check(program, graph)).transpose()? {
            Some(Err(msg)) => timings[i].error = Some(format!("wide-range float check: {msg}")),
            _ => return Ok(Some(i)),
        }
    }
    Ok(None)
}

/// How much faster than the cache's current µGraph a candidate must measure to replace it (a
/// fraction of the current one's time): closer timings are within one run's noise, and replacing
/// on them would churn the cache and the generated code for nothing.
pub const REPLACE_MARGIN: f64 = 0.02;

/// The candidate to store: `chosen` (the fastest verified one), or `current` (the cache's µGraph
/// now) when `chosen` is not faster than it by more than [`REPLACE_MARGIN`] and `current` ran
/// correctly and verifies.
pub fn keep_current_within_margin(
    program: &KernelGraph,
    graphs: &[&KernelGraph],
    timings: &[CandidateTiming],
    chosen: usize,
    current: Option<usize>,
    verify: &VerifyConfig,
) -> Result<usize, TuneError> {
    let Some(c) = current.filter(|&c| c != chosen) else { return Ok(chosen) };
    let (Some(cur), Some(best)) = (timings.get(c), timings.get(chosen)) else { return Ok(chosen) };
    let (Some(cur_us), Some(best_us)) = (cur.measured_us, best.measured_us) else { return Ok(chosen) };
    if !cur.usable() || best_us < cur_us * (1.0 - REPLACE_MARGIN) {
        return Ok(chosen);
    }
    // Verified like any choice: only the current one is offered.
    let mut only: Vec<CandidateTiming> = timings.to_vec();
    for (i, t) in only.iter_mut().enumerate() {
        if i != c {
            t.error.get_or_insert_with(|| "not offered".into());
        }
    }
    Ok(choose_verified(program, graphs, &mut only, verify)?.unwrap_or(chosen))
}

/// The candidates of one program compiled together: one translation unit (candidate `i`'s
/// kernels named `c{i}_k{j}`), its cubin and one launch plan per candidate.
#[derive(Clone, Debug)]
pub struct CompiledCandidates {
    /// The CUDA source.
    pub source: String,
    /// The cubin.
    pub cubin: Vec<u8>,
    /// One launch plan per candidate, in order.
    pub plans: Vec<LaunchPlan>,
}

/// Generates and compiles `candidates` into one cubin named after `name`.
pub fn compile_candidates(
    name: &str,
    candidates: &[TuneCandidate],
    kernel_opts: &KernelOptions,
    nvcc_opts: &nvcc::CompileOptions,
) -> Result<CompiledCandidates, TuneError> {
    let named: Vec<(String, &KernelGraph)> =
        candidates.iter().enumerate().map(|(i, c)| (format!("c{i}"), &c.graph)).collect();
    let (source, plans) = generate_unit(&named, kernel_opts)?;
    let ident: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let cubin = nvcc::compile_cubin(&source, &format!("tune_{ident}"), nvcc_opts)?;
    Ok(CompiledCandidates { source, cubin: cubin.bytes, plans })
}

/// The cache entry recording a tuning outcome: the chosen candidate's µGraph (`chosen` indexes
/// `candidates` and `timings`, which are parallel), the model's estimate, the measured median and
/// the device, and every candidate with its estimate and measurement (the chosen one first).
pub fn tuned_entry(
    key: &CacheKey,
    candidates: &[TuneCandidate],
    timings: &[CandidateTiming],
    chosen: usize,
    device: &str,
) -> Result<CacheEntry, TuneError> {
    let (Some(c), Some(t)) = (candidates.get(chosen), timings.get(chosen)) else {
        return Err(TuneError::format("tuning outcome", format!("no candidate {chosen}")));
    };
    let cached = |c: &TuneCandidate, t: &CandidateTiming| CachedCandidate {
        hash: c.hash.to_hex(),
        kernels: c.graph.num_kernels(),
        cost_us: c.predicted_us,
        verified: Some(true),
        measured_us: t.measured_us,
    };
    let mut top = vec![cached(c, t)];
    top.extend(
        candidates.iter().zip(timings).enumerate().filter(|(i, _)| *i != chosen).map(|(_, (c, t))| cached(c, t)),
    );
    let mut entry = CacheEntry::new(key, &c.graph, c.predicted_us, top)?;
    entry.measured_us = t.measured_us;
    entry.device = Some(device.to_string());
    Ok(entry)
}

/// What [`tune_and_store`] did for one program.
#[derive(Clone, Debug)]
pub enum TuneOutcome {
    /// Tuning was not asked for, or the cache entry already holds a measurement.
    Skipped(String),
    /// Measured; the chosen candidate was stored in the cache.
    Stored {
        /// Every candidate's measurement, the model's choice first.
        timings: Vec<CandidateTiming>,
        /// The index of the chosen one.
        chosen: usize,
        /// Warnings (an unreadable cache entry that was replaced; failing or mismatching
        /// candidates).
        warnings: Vec<String>,
    },
}

/// `MIRAGE_TUNE` at build time: when `mode` asks for it and a GPU is visible, measures the
/// candidates of `program` on it and stores the fastest correct one in `cache` (under the key the
/// search uses), so that the search that follows takes it from there. Without a GPU, or with a
/// measured entry and [`TuneMode::Missing`], nothing happens. When no candidate runs correctly
/// the cache is left as it was and the warnings say why.
pub fn tune_and_store(
    name: &str,
    program: &KernelGraph,
    search_cfg: &SearchConfig,
    cache: &Cache,
    mode: TuneMode,
    compile: (&KernelOptions, &nvcc::CompileOptions),
    cfg: &TuneConfig,
) -> Result<TuneOutcome, TuneError> {
    if mode == TuneMode::Off {
        return Ok(TuneOutcome::Skipped("tuning not asked for".into()));
    }
    let key = search_cfg.cache_key(program);
    // Read once: for the measurement it may already hold, and as the current choice. An entry
    // that cannot be read is measured without (the search's candidates alone) and replaced by the
    // store below; the outcome's warnings say so.
    let (cached, unreadable) = match cache.load(&key) {
        Ok(entry) => (entry, None),
        Err(e) => (None, Some(format!("the cache's entry is unreadable ({e}); measured without it and replaced"))),
    };
    if mode == TuneMode::Missing
        && let Some((entry, _)) = &cached
        && entry.measured_us.is_some()
    {
        return Ok(TuneOutcome::Skipped(format!(
            "the cache entry was measured on {} ({TUNE_ENV}=force measures again)",
            entry.device.as_deref().unwrap_or("a GPU")
        )));
    }
    if let Err(e) = mirage_runtime::Gpu::new(0) {
        return Ok(TuneOutcome::Skipped(format!("no GPU to tune on ({e})")));
    }
    let candidates = tuning_candidates(program, search_cfg, cfg.candidates)?;
    let (candidates, current) = with_current_choice(candidates, cached.as_ref(), &search_cfg.arch);
    let compiled = compile_candidates(name, &candidates, compile.0, compile.1)?;
    // A build compiles its programs in parallel: their measurements take the GPU one at a time.
    static GPU_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = GPU_TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let gpu = mirage_runtime::Gpu::new(0)?;
    let predicted: Vec<f64> = candidates.iter().map(|c| c.predicted_us).collect();
    let hashes: Vec<String> = candidates.iter().map(|c| c.hash.to_hex()).collect();
    let kernels: Vec<usize> = candidates.iter().map(|c| c.graph.num_kernels()).collect();
    let mut timings =
        measure::measure_in_process(&gpu, name, program, &compiled, cfg, (&hashes, &kernels, &predicted))?;
    let graphs: Vec<&KernelGraph> = candidates.iter().map(|c| &c.graph).collect();
    let chosen = choose_verified(program, &graphs, &mut timings, &search_cfg.verify)?;
    let warnings: Vec<String> =
        unreadable
            .into_iter()
            .chain(timings.iter().enumerate().filter_map(|(i, t)| {
                t.error.as_ref().map(|e| format!("candidate {i} ({}) skipped: {e}", &t.hash[..16]))
            }))
            .collect();
    let Some(chosen) = chosen else {
        return Ok(TuneOutcome::Skipped(format!("no candidate ran correctly: {}", warnings.join("; "))));
    };
    let chosen = keep_current_within_margin(program, &graphs, &timings, chosen, current, &search_cfg.verify)?;
    let entry = tuned_entry(&key, &candidates, &timings, chosen, &gpu.info().name)?;
    cache.store(&key, &entry)?;
    Ok(TuneOutcome::Stored { timings, chosen, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_comes_from_the_environment_value() {
        assert_eq!(TuneMode::parse(None), Ok(TuneMode::Off));
        assert_eq!(TuneMode::parse(Some("0")), Ok(TuneMode::Off));
        assert_eq!(TuneMode::parse(Some(" 1 ")), Ok(TuneMode::Missing));
        assert_eq!(TuneMode::parse(Some("force")), Ok(TuneMode::Force));
        let e = TuneMode::parse(Some("yes")).expect_err("not a mode");
        assert!(e.contains("MIRAGE_TUNE") && e.contains("force"), "{e}");
    }

    #[test]
    fn the_diverse_order_takes_each_family_before_a_second_member() {
        let f = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(diverse_order(&f(&["a", "a", "b", "a", "c", "b"])), vec![0, 2, 4, 1, 5, 3]);
        assert_eq!(diverse_order(&f(&["a"])), vec![0]);
        assert!(diverse_order(&[]).is_empty());
    }
}
