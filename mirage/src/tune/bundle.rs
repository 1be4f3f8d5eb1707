//! The offline tuning bundle, for builds on machines without a GPU: [`pack`] writes every
//! program's candidates (one cubin per program, the launch plans and a manifest; the candidates'
//! µGraphs beside them) into a folder; [`measure_bundle`] runs on a GPU machine and returns a
//! [`TuneRecord`]; [`import`] stores each program's fastest correct candidate in the search cache.
//!
//! Layout of a bundle folder:
//!
//! - `manifest.json`: the programs (name, kernel graph, cache key), each with its cubin's file
//!   name and its candidates (hash, kernels, estimate, structure family, launch plan);
//! - `cubins/<program>.cubin`;
//! - `mugraphs/<program>.json`: the candidates' µGraphs, read back by [`import`] (the measuring
//!   side needs only the manifest and the cubins).
//!
//! Every measured program runs in a process of its own ([`child_main`], spawned by
//! [`measure_bundle`]), reporting [`Event`] lines: a kernel that brings its process down (an
//! illegal address poisons the CUDA context) or hangs costs that candidate, which is marked
//! unusable, and the process is started again without it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::measure::{Event, Unit, apply, copy_bandwidth, run_candidates};
use super::record::{CandidateTiming, ProgramTiming, TuneRecord};
use super::{
    TuneCandidate, TuneConfig, TuneError, choose_verified, compile_candidates, tuned_entry, tuning_candidates,
};
use crate::cache::{Cache, CacheEntry, CacheKey};
use crate::codegen::KernelOptions;
use crate::codegen::plan::LaunchPlan;
use crate::fingerprint::VerifyConfig;
use crate::ir::{CanonicalHash, KernelGraph};
use crate::nvcc;
use crate::search::{SearchConfig, SearchError};

/// The `format` field of a bundle manifest.
pub const BUNDLE_FORMAT: &str = "mirage-tune-bundle";
/// The version of the bundle layout.
pub const BUNDLE_VERSION: u32 = 1;

/// One candidate of a bundled program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BundleCandidate {
    /// The µGraph's canonical hash (hex).
    pub hash: String,
    /// Its number of kernels.
    pub kernels: usize,
    /// The cost model's estimate, µs.
    pub predicted_us: f64,
    /// Its structure family ([`super::family`]).
    pub family: String,
    /// How to launch it from the program's cubin.
    pub plan: LaunchPlan,
    /// Whether it is the cache's choice at pack time, added beside the search's candidates
    /// because the search did not produce it ([`super::with_current_choice`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_cache: bool,
}

/// One bundled program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BundleProgram {
    /// The `#[mugraph]` function's name (unique in the bundle).
    pub name: String,
    /// The program's kernel graph (the IR's JSON, as a JSON value).
    pub program: serde_json::Value,
    /// Its canonical hash (hex): the cache key's program hash.
    pub program_hash: String,
    /// The cache key's architecture (`sm_90`).
    pub cache_arch: String,
    /// The cache key's search version.
    pub search_version: String,
    /// The cubin's file name under `cubins/`.
    pub cubin: String,
    /// The candidates, the model's choice first.
    pub candidates: Vec<BundleCandidate>,
}

impl BundleProgram {
    /// The program's kernel graph.
    pub fn graph(&self) -> Result<KernelGraph, TuneError> {
        let text = serde_json::to_string(&self.program).map_err(|e| TuneError::format(&self.name, e))?;
        KernelGraph::from_json(&text).map_err(|e| TuneError::format(&self.name, e))
    }

    /// Timings of its candidates, none measured yet.
    pub fn empty_timings(&self) -> Vec<CandidateTiming> {
        self.candidates.iter().map(|c| CandidateTiming::new(c.hash.clone(), c.kernels, c.predicted_us)).collect()
    }
}

/// A bundle's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// [`BUNDLE_VERSION`].
    pub version: u32,
    /// The nvcc target of the cubins.
    pub arch: String,
    /// The commit the bundle was packed from.
    pub commit: String,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Untimed launches per candidate and round.
    pub warmup: usize,
    /// Timed launches per candidate and round.
    pub iters: usize,
    /// Timing rounds.
    pub rounds: usize,
    /// The programs.
    pub programs: Vec<BundleProgram>,
}

impl Manifest {
    /// The measurement settings it records.
    pub fn config(&self) -> TuneConfig {
        TuneConfig {
            warmup: self.warmup,
            iters: self.iters,
            rounds: self.rounds,
            seed: self.seed,
            ..TuneConfig::default()
        }
    }

    /// The program named `name`.
    pub fn program(&self, name: &str) -> Result<&BundleProgram, TuneError> {
        self.programs
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| TuneError::format("manifest.json", format!("no program named {name:?}")))
    }
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("manifest.json")
}

fn mugraphs_path(dir: &Path, program: &str) -> PathBuf {
    dir.join("mugraphs").join(format!("{program}.json"))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), TuneError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(TuneError::io(parent))?;
    }
    std::fs::write(path, bytes).map_err(TuneError::io(path))
}

/// Reads the manifest of the bundle in `dir`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, TuneError> {
    let path = manifest_path(dir);
    let text = std::fs::read_to_string(&path).map_err(TuneError::io(&path))?;
    let m: Manifest = serde_json::from_str(&text).map_err(|e| TuneError::format(path.display().to_string(), e))?;
    if m.format != BUNDLE_FORMAT || m.version != BUNDLE_VERSION {
        return Err(TuneError::format(
            path.display().to_string(),
            format!("format {:?} version {}, expected {BUNDLE_FORMAT:?} version {BUNDLE_VERSION}", m.format, m.version),
        ));
    }
    Ok(m)
}

/// How [`pack`] compiles and what it records.
#[derive(Clone, Debug)]
pub struct PackOptions {
    /// The search settings (the cache key's architecture and version come from them).
    pub search: SearchConfig,
    /// Candidates per program and measurement settings.
    pub tune: TuneConfig,
    /// Code generation.
    pub kernel: KernelOptions,
    /// nvcc (its `arch` is the bundle's).
    pub nvcc: nvcc::CompileOptions,
    /// The commit packed.
    pub commit: String,
    /// The search cache whose current choices are packed beside the search's candidates (so the
    /// measurement times what a build uses now); `None` packs the search's candidates only.
    pub cache: Option<Cache>,
}

/// Packs `programs` (name, kernel graph) into the bundle folder `dir`. A program already in the
/// bundle with the same graph, cache key and number of candidates is kept as it is (packing is
/// resumable); the others are searched, verified, generated and compiled; one whose search finds
/// no whole-program candidate is left out of the bundle. `progress` hears one line per program.
pub fn pack(
    dir: &Path,
    programs: &[(String, KernelGraph)],
    opts: &PackOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Manifest, TuneError> {
    let arch = nvcc::resolve_arch(opts.nvcc.arch.as_deref(), std::env::var(nvcc::ARCH_ENV).ok().as_deref())?;
    let old = read_manifest(dir).ok().filter(|m| m.arch == arch);
    let mut manifest = Manifest {
        format: BUNDLE_FORMAT.into(),
        version: BUNDLE_VERSION,
        arch: arch.clone(),
        commit: opts.commit.clone(),
        seed: opts.tune.seed,
        warmup: opts.tune.warmup,
        iters: opts.tune.iters,
        rounds: opts.tune.rounds,
        programs: Vec::new(),
    };
    for (name, graph) in programs {
        if manifest.programs.iter().any(|p| &p.name == name) {
            return Err(TuneError::format(name, "two programs of that name"));
        }
        let hash = graph.canonical_hash().to_hex();
        let version = opts.search.version_for(graph);
        // The cache's entry, read once: a kept program must hold its µGraph, a packed one gets it.
        // An entry that cannot be read is packed without (the search's candidates alone), and
        // said: `import` will replace it.
        let cached = match opts.cache.as_ref().map(|c| c.load(&opts.search.cache_key(graph))) {
            Some(Ok(entry)) => entry,
            Some(Err(e)) => {
                progress(&format!("{name}: warning: the cache's entry is unreadable ({e}); packed without it"));
                None
            }
            None => None,
        };
        let current = cached.as_ref().map(|(_, g)| g.canonical_hash().to_hex());
        let kept = old.as_ref().and_then(|m| m.programs.iter().find(|p| &p.name == name)).filter(|p| {
            let searched = p.candidates.iter().filter(|c| !c.from_cache).count();
            p.program_hash == hash
                && p.search_version == version
                && (searched == opts.tune.candidates || searched < opts.tune.candidates.min(2))
                && current.as_ref().is_none_or(|h| p.candidates.iter().any(|c| &c.hash == h))
                && dir.join("cubins").join(&p.cubin).is_file()
                && mugraphs_path(dir, name).is_file()
        });
        if let Some(p) = kept {
            progress(&format!("{name}: kept from the existing bundle ({} candidates)", p.candidates.len()));
            manifest.programs.push(p.clone());
            continue;
        }
        let started = std::time::Instant::now();
        let p = match pack_one(dir, name, graph, cached.as_ref(), opts, &arch) {
            Ok(p) => p,
            // A program the search cannot build as one µGraph (its build partitions it, or falls
            // back to one kernel per operator) has nothing to choose between: say so, go on.
            Err(TuneError::Search(SearchError::NotFound(why))) => {
                progress(&format!("{name}: skipped, nothing to tune ({why}; its build partitions it or falls back)"));
                continue;
            }
            Err(e) => return Err(e),
        };
        progress(&format!(
            "{name}: {} candidates ({} families{}) packed in {:.1} s",
            p.candidates.len(),
            {
                let mut f: Vec<&str> = p.candidates.iter().map(|c| c.family.as_str()).collect();
                f.sort_unstable();
                f.dedup();
                f.len()
            },
            if p.candidates.iter().any(|c| c.from_cache) { ", the cache's current choice added" } else { "" },
            started.elapsed().as_secs_f64()
        ));
        manifest.programs.push(p);
        // Written after every program: an interrupted pack resumes from here.
        let text = serde_json::to_string_pretty(&manifest).map_err(|e| TuneError::format("manifest", e))?;
        write(&manifest_path(dir), text.as_bytes())?;
    }
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| TuneError::format("manifest", e))?;
    write(&manifest_path(dir), text.as_bytes())?;
    Ok(manifest)
}

/// Searches, verifies, generates and compiles the candidates of one program into `dir`, with
/// the cache's current choice (`cached`, its entry) among them.
fn pack_one(
    dir: &Path,
    name: &str,
    graph: &KernelGraph,
    cached: Option<&(CacheEntry, KernelGraph)>,
    opts: &PackOptions,
    arch: &str,
) -> Result<BundleProgram, TuneError> {
    let candidates = tuning_candidates(graph, &opts.search, opts.tune.candidates)?;
    let searched = candidates.len();
    let (candidates, _) = super::with_current_choice(candidates, cached, &opts.search.arch);
    let nvcc_opts = nvcc::CompileOptions { arch: Some(arch.to_string()), ..opts.nvcc.clone() };
    let compiled = compile_candidates(name, &candidates, &opts.kernel, &nvcc_opts)?;
    let cubin = format!("{name}.cubin");
    write(&dir.join("cubins").join(&cubin), &compiled.cubin)?;
    let graphs: Vec<serde_json::Value> = candidates
        .iter()
        .map(|c| serde_json::from_str(&c.graph.to_json()).map_err(|e| TuneError::format(name, e)))
        .collect::<Result<_, _>>()?;
    let text = serde_json::to_string(&graphs).map_err(|e| TuneError::format(name, e))?;
    write(&mugraphs_path(dir, name), text.as_bytes())?;
    Ok(BundleProgram {
        name: name.to_string(),
        program: serde_json::from_str(&graph.to_json()).map_err(|e| TuneError::format(name, e))?,
        program_hash: graph.canonical_hash().to_hex(),
        cache_arch: opts.search.arch.name.to_string(),
        search_version: opts.search.version_for(graph),
        cubin,
        candidates: candidates
            .iter()
            .zip(compiled.plans)
            .enumerate()
            .map(|(i, (c, plan))| BundleCandidate {
                hash: c.hash.to_hex(),
                kernels: c.graph.num_kernels(),
                predicted_us: c.predicted_us,
                family: c.family.clone(),
                plan,
                from_cache: i >= searched,
            })
            .collect(),
    })
}

/// The measuring process of one program (`tune measure-program`): checks and times its
/// candidates except `skip`, printing one [`Event`] per line on stdout.
pub fn child_main(dir: &Path, program: &str, skip: &[usize]) -> Result<(), TuneError> {
    let manifest = read_manifest(dir)?;
    let p = manifest.program(program)?;
    let graph = p.graph()?;
    let path = dir.join("cubins").join(&p.cubin);
    let bytes = std::fs::read(&path).map_err(TuneError::io(&path))?;
    // The process measures one program: its cubin lives until the process ends.
    let cubin: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    let plans: Vec<LaunchPlan> = p.candidates.iter().map(|c| c.plan.clone()).collect();
    let gpu = mirage_runtime::Gpu::new(0)?;
    let mut emit = |e: &Event| {
        if let Ok(line) = serde_json::to_string(e) {
            println!("{line}");
        }
    };
    let unit = Unit { name: &p.name, program: &graph, cubin, plans: &plans };
    run_candidates(&gpu, unit, &manifest.config(), skip, &mut emit)
}

/// How long a measuring process may stay silent: computing the reference, then per candidate.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Until the reference is computed.
    pub reference: Duration,
    /// Per candidate check or timing round.
    pub candidate: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { reference: Duration::from_secs(900), candidate: Duration::from_secs(120) }
    }
}

/// Measures one program in child processes made by `spawn(skip)` (which must run
/// [`child_main`]), starting a new one without the candidate that was running whenever a process
/// dies or goes silent. Returns the timings and the reference's seconds.
pub fn measure_isolated(
    p: &BundleProgram,
    spawn: &dyn Fn(&[usize]) -> Command,
    limits: Limits,
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<CandidateTiming>, Option<f64>), TuneError> {
    let mut timings = p.empty_timings();
    let mut reference_s = None;
    for _attempt in 0..=p.candidates.len() {
        let skip: Vec<usize> = (0..timings.len()).filter(|&i| timings[i].error.is_some()).collect();
        for t in timings.iter_mut().filter(|t| t.error.is_none()) {
            t.rounds_us.clear();
            t.min_us = None;
            t.measured_us = None;
        }
        let mut child = spawn(&skip)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| TuneError::format(&p.name, format!("starting the measuring process: {e}")))?;
        let stdout = child.stdout.take().ok_or_else(|| TuneError::format(&p.name, "no stdout"))?;
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut running: Option<usize> = None;
        let mut done = false;
        let mut silent = false;
        loop {
            let limit = if reference_s.is_none() && running.is_none() { limits.reference } else { limits.candidate };
            match rx.recv_timeout(limit) {
                Ok(line) => match serde_json::from_str::<Event>(&line) {
                    Ok(e) => {
                        match e {
                            Event::Reference { seconds } => reference_s = Some(seconds),
                            Event::Start { index, .. } => running = Some(index),
                            Event::Done => done = true,
                            _ => running = None,
                        }
                        apply(&mut timings, &e);
                    }
                    Err(_) => log(&format!("{}: {line}", p.name)),
                },
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    silent = true;
                    let _ = child.kill();
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = child.wait().map_err(|e| TuneError::format(&p.name, format!("waiting for it: {e}")))?;
        let _ = reader.join();
        if done && status.success() {
            return Ok((timings, reference_s));
        }
        let why = if silent { format!("silent for {:?}, stopped", limits.candidate) } else { format!("exit {status}") };
        match running {
            Some(i) => {
                log(&format!(
                    "{}: candidate {i} brought its measuring process down ({why}); measuring again without it",
                    p.name
                ));
                timings[i].error = Some(format!("the measuring process stopped while it ran ({why})"));
            }
            None => {
                return Err(TuneError::format(
                    &p.name,
                    format!("the measuring process stopped outside a candidate ({why})"),
                ));
            }
        }
    }
    Err(TuneError::format(&p.name, "every candidate brought its measuring process down"))
}

/// Measures every program of the bundle in `dir` (or those whose names contain one of `only`) on
/// GPU 0: the copy bandwidth first, then each program in processes made by `spawn(program, skip)`.
pub fn measure_bundle(
    dir: &Path,
    only: &[String],
    spawn: &dyn Fn(&str, &[usize]) -> Command,
    limits: Limits,
    log: &mut dyn FnMut(&str),
) -> Result<TuneRecord, TuneError> {
    let manifest = read_manifest(dir)?;
    let (device, info, bw) = {
        let gpu = mirage_runtime::Gpu::new(0)?;
        let bw = copy_bandwidth(&gpu)?;
        (gpu.info().name.clone(), gpu.info().to_string(), bw)
    };
    log(&format!("{info}: copy bandwidth {:.2} TB/s", bw / 1e6));
    let mut record = TuneRecord::new(device, info, manifest.commit.clone());
    record.copy_bytes_per_us = Some(bw);
    for p in manifest.programs.iter().filter(|p| only.is_empty() || only.iter().any(|o| p.name.contains(o.as_str()))) {
        let graph = p.graph()?;
        let bytes = |d: &crate::ir::TensorDesc| d.shape.iter().product::<usize>() * d.dtype.size_bytes();
        let io_bytes = graph.inputs().into_iter().map(bytes).sum::<usize>()
            + graph.outputs().iter().filter_map(|(t, _)| graph.desc(*t).ok()).map(bytes).sum::<usize>();
        let spawn_one = |skip: &[usize]| spawn(&p.name, skip);
        let (candidates, reference_s) = match measure_isolated(p, &spawn_one, limits, log) {
            Ok(r) => r,
            Err(e) => {
                log(&format!("{}: not measured: {e}", p.name));
                (p.empty_timings(), None)
            }
        };
        let timing = ProgramTiming {
            name: p.name.clone(),
            program_hash: p.program_hash.clone(),
            io_bytes,
            candidates,
            reference_s,
        };
        let chosen = timing.chosen().and_then(|i| timing.candidates[i].measured_us.map(|m| (i, m)));
        log(&format!(
            "{}: model's choice {}, fastest {}",
            p.name,
            timing.candidates.first().and_then(|c| c.measured_us).map_or("-".into(), |m| format!("{m:.1} µs")),
            chosen.map_or("none usable".into(), |(i, m)| format!("#{i} {m:.1} µs"))
        ));
        record.programs.push(timing);
    }
    Ok(record)
}

/// What [`import`] did for one program.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The program.
    pub name: String,
    /// The cache file written, or why nothing was.
    pub outcome: Result<PathBuf, String>,
}

/// Stores the fastest correct candidate of every program of `record` in `cache`: the program and
/// the candidates' µGraphs come from the bundle in `dir` (matched by name, program hash and
/// candidate hashes), the choice is made again from the timings and verified against the program
/// with fingerprints ([`choose_verified`]: the next fastest when it fails), and the entry records
/// every candidate's measurement and the device. The entry's current µGraph stays unless a
/// candidate is faster than it by more than [`super::REPLACE_MARGIN`]. A program whose cache entry holds a µGraph the
/// record did not time is left as it is, with the reason in its [`Imported::outcome`] (a bundle
/// packed with the cache, [`PackOptions::cache`], times the current choice too).
pub fn import(dir: &Path, record: &TuneRecord, cache: &Cache) -> Result<Vec<Imported>, TuneError> {
    let manifest = read_manifest(dir)?;
    let mut out = Vec::new();
    for t in &record.programs {
        let outcome = import_one(dir, &manifest, record, t, cache);
        out.push(Imported { name: t.name.clone(), outcome });
    }
    Ok(out)
}

fn import_one(
    dir: &Path,
    manifest: &Manifest,
    record: &TuneRecord,
    t: &ProgramTiming,
    cache: &Cache,
) -> Result<PathBuf, String> {
    let p = manifest.program(&t.name).map_err(|e| e.to_string())?;
    if p.program_hash != t.program_hash {
        return Err(format!("the record's program {} is not the bundle's {}", t.program_hash, p.program_hash));
    }
    let hashes: Vec<&str> = p.candidates.iter().map(|c| c.hash.as_str()).collect();
    if t.candidates.iter().map(|c| c.hash.as_str()).ne(hashes.iter().copied()) {
        return Err("the record's candidates are not the bundle's".into());
    }
    let path = mugraphs_path(dir, &p.name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let values: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let program = p.graph().map_err(|e| e.to_string())?;
    let candidates: Vec<TuneCandidate> = values
        .iter()
        .zip(&p.candidates)
        .map(|(v, c)| {
            let graph = KernelGraph::from_json(&v.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
            if graph.canonical_hash().to_hex() != c.hash {
                return Err(format!("{}: a µGraph does not have its recorded hash {}", path.display(), c.hash));
            }
            let hash: CanonicalHash = graph.canonical_hash();
            Ok(TuneCandidate { graph, hash, predicted_us: c.predicted_us, family: c.family.clone() })
        })
        .collect::<Result<_, String>>()?;
    if candidates.len() != t.candidates.len() {
        return Err(format!("{}: {} µGraphs for {} candidates", path.display(), candidates.len(), t.candidates.len()));
    }
    let program_hash = program.canonical_hash();
    let key = CacheKey { program_hash, arch: p.cache_arch.clone(), search_version: p.search_version.clone() };
    // The cache's current choice must have been timed beside the others (run, or found wrong):
    // replacing a µGraph nobody measured could make the build slower (session 32 replaced an
    // 18.6 µs one-kernel µGraph by an 81.9 µs candidate this way).
    let mut current = None;
    if let Ok(Some((_, graph))) = cache.load(&key) {
        let hash = graph.canonical_hash().to_hex();
        current = t.candidates.iter().position(|c| c.hash == hash);
        let timed = current.is_some_and(|i| t.candidates[i].measured_us.is_some() || t.candidates[i].error.is_some());
        if !timed {
            return Err(format!(
                "the cache's current µGraph {} was not measured in this record: the entry is left as it was \
                 (pack with the cache so that its choice is measured beside the candidates)",
                &hash[..16]
            ));
        }
    }
    let graphs: Vec<&KernelGraph> = candidates.iter().map(|c| &c.graph).collect();
    let mut timings = t.candidates.clone();
    let chosen = choose_verified(&program, &graphs, &mut timings, &VerifyConfig::default())
        .map_err(|e| e.to_string())?
        .ok_or("no candidate ran correctly and verified: the cache entry is left as it was")?;
    let chosen =
        super::keep_current_within_margin(&program, &graphs, &timings, chosen, current, &VerifyConfig::default())
            .map_err(|e| e.to_string())?;
    let entry = tuned_entry(&key, &candidates, &timings, chosen, &record.device).map_err(|e| e.to_string())?;
    cache.store(&key, &entry).map_err(|e| e.to_string())
}
