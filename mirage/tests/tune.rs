//! Offline tuning without a GPU: a bundle is packed (searched, generated, compiled by nvcc), a
//! record of measurements is made up as the GPU machine would write it, and importing it stores
//! the fastest correct candidate in the search cache, which the search then returns on a hit
//! (re-verified) with the measurement. Candidates that mismatched the reference, failed, or are
//! not in the bundle are never chosen. The cost model is checked against the candidates an H200
//! measured (`tests/data/calibration-h200.json`): how well it ranks them, and that constants
//! fitted on some program families rank the others.

use std::path::PathBuf;

use mirage::cache::{Cache, CacheEntry, CacheKey};
use mirage::cost::Arch;
use mirage::ir::{DType, KernelGraph, UnaryOp};
use mirage::search::{SearchConfig, superoptimize};
use mirage::tune::bundle::{BundleProgram, PackOptions, import, pack, read_manifest};
use mirage::tune::calibration::{CalibrationSet, Evaluation, evaluate};
use mirage::tune::{TuneConfig, TuneRecord};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mirage-tune-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `silu(X @ W1) * (X @ W2)` at a small shape.
fn gated_mlp() -> KernelGraph {
    let mut g = KernelGraph::new();
    let build = |g: &mut KernelGraph| -> Result<(), mirage::ir::IrError> {
        let x = g.input(&[2, 256], DType::F16)?;
        let w1 = g.input(&[256, 512], DType::F16)?;
        let w2 = g.input(&[256, 512], DType::F16)?;
        let a = g.matmul(x, w1)?;
        let a = g.silu(a)?;
        let b = g.matmul(x, w2)?;
        let o = g.mul(a, b)?;
        g.output(o, None)
    };
    build(&mut g).expect("a valid program");
    g
}

/// The tests' pack: a fresh search (no cache), 4 candidates a program, default code generation.
fn pack_options() -> PackOptions {
    PackOptions {
        search: SearchConfig { offline: Some(false), ..SearchConfig::default() },
        tune: TuneConfig { candidates: 4, ..TuneConfig::default() },
        kernel: Default::default(),
        nvcc: Default::default(),
        commit: "test".into(),
        cache: None,
    }
}

#[test]
fn a_program_the_search_cannot_build_whole_is_skipped_by_the_pack_with_a_reason() {
    // `(-x, neg(x))`: no µGraph computes both outputs (the build compiles it one kernel per
    // operator), so there is nothing to tune; the pack goes on without it.
    let mut g = KernelGraph::new();
    let build = |g: &mut KernelGraph| -> Result<(), mirage::ir::IrError> {
        let x = g.input(&[16, 64], DType::F16)?;
        let a = g.unary(UnaryOp::Neg, x)?;
        let b = g.unary(UnaryOp::Neg, x)?;
        g.output(a, None)?;
        g.output(b, None)
    };
    build(&mut g).expect("a valid program");
    let dir = temp_dir("skip");
    let opts = pack_options();
    let mut lines = Vec::new();
    let manifest = pack(&dir.join("bundle"), &[("two_negs".into(), g)], &opts, &mut |l| lines.push(l.to_string()))
        .unwrap_or_else(|e| panic!("the pack must not fail on it: {e}"));
    assert!(manifest.programs.is_empty(), "{:?}", manifest.programs);
    assert!(lines.iter().any(|l| l.starts_with("two_negs: skipped, nothing to tune")), "{lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_packed_bundle_and_a_recorded_measurement_tune_the_cache() {
    mirage::nvcc::find_nvcc().expect("nvcc packs the candidates (scripts/setup.sh installs it)");
    let dir = temp_dir("bundle");
    let program = gated_mlp();
    let opts = pack_options();
    let search = opts.search.clone();
    let mut lines = Vec::new();
    let manifest =
        pack(&dir.join("bundle"), &[("gated".into(), program.clone())], &opts, &mut |l| lines.push(l.to_string()))
            .unwrap_or_else(|e| panic!("{e}"));
    let p = &manifest.programs[0];
    assert_eq!(p.candidates.len(), 4, "{lines:?}");
    assert!(dir.join("bundle/cubins").join(&p.cubin).is_file());
    assert_eq!(read_manifest(&dir.join("bundle")).expect("readable"), manifest);
    // Packing again keeps the program.
    let again = pack(&dir.join("bundle"), &[("gated".into(), program.clone())], &opts, &mut |_| {}).expect("packs");
    assert_eq!(again.programs, manifest.programs);

    // The record a GPU run would write: candidate 2 is the fastest but mismatched the reference,
    // candidate 3 is the fastest correct one.
    let mut record = measured(p, &[30.0, 25.0, 10.0, 20.0]);
    let mismatched = &mut record.programs[0].candidates[2];
    mismatched.rel_l2 = Some(0.5);
    mismatched.error = Some("relative L2 error 5e-1".into());
    let cache = Cache::new(dir.join("cache"));
    let imported = import(&dir.join("bundle"), &record, &cache).expect("imports");
    assert_eq!(imported.len(), 1);
    let path = imported[0].outcome.clone().unwrap_or_else(|e| panic!("{e}"));
    let key = CacheKey {
        program_hash: program.canonical_hash(),
        arch: search.arch.name.to_string(),
        search_version: search.version(),
    };
    assert_eq!(path, cache.path(&key));
    let (entry, graph) = cache.load(&key).expect("readable").expect("an entry");
    assert_eq!(graph.canonical_hash().to_hex(), p.candidates[3].hash);
    assert_eq!(entry.measured_us, Some(20.0));
    assert_eq!(entry.device.as_deref(), Some("Test GPU"));
    assert_eq!(entry.top[0].hash, p.candidates[3].hash);
    assert_eq!(entry.top.iter().filter_map(|c| c.measured_us).count(), 4);

    // The search takes the tuned µGraph from the cache (re-verified) and reports the measurement.
    let r = superoptimize(&program, &search, Some(&cache)).expect("a cache hit");
    assert!(r.from_cache);
    assert_eq!(r.best.hash.to_hex(), p.candidates[3].hash);
    assert!(r.summary().contains("chosen by measurement: 20.00 µs on Test GPU"), "{}", r.summary());

    // A record of another program, or with other candidates, is not imported.
    let mut wrong = record.clone();
    wrong.programs[0].program_hash = "00".repeat(32);
    assert!(import(&dir.join("bundle"), &wrong, &cache).expect("runs")[0].outcome.is_err());
    let mut wrong = record.clone();
    wrong.programs[0].candidates.pop();
    assert!(import(&dir.join("bundle"), &wrong, &cache).expect("runs")[0].outcome.is_err());
    // Nothing usable: nothing stored.
    let mut none = record.clone();
    none.programs[0].candidates.iter_mut().for_each(|c| c.error = Some("launch failed".into()));
    let e = import(&dir.join("bundle"), &none, &Cache::new(dir.join("empty"))).expect("runs");
    assert!(e[0].outcome.as_ref().is_err_and(|e| e.contains("no candidate")), "{e:?}");
    assert!(!dir.join("empty").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The record a GPU run would write for `p`: candidate `i` measured at `us[i]`, all correct.
fn measured(p: &BundleProgram, us: &[f64]) -> TuneRecord {
    let mut record = TuneRecord::new("Test GPU".into(), "a test".into(), "test".into());
    let mut t = mirage::tune::ProgramTiming {
        name: p.name.clone(),
        program_hash: p.program_hash.clone(),
        io_bytes: 0,
        candidates: p.empty_timings(),
        reference_s: None,
    };
    assert_eq!(t.candidates.len(), us.len());
    for (c, &us) in t.candidates.iter_mut().zip(us) {
        c.rel_l2 = Some(1e-3);
        c.rounds_us = vec![us];
        c.summarize();
    }
    record.programs.push(t);
    record
}

#[test]
fn the_caches_current_choice_is_measured_beside_the_candidates_and_replaced_only_when_clearly_beaten() {
    mirage::nvcc::find_nvcc().expect("nvcc packs the candidates (scripts/setup.sh installs it)");
    let dir = temp_dir("current");
    let program = gated_mlp();
    let wide_opts = pack_options();
    let key = wide_opts.search.cache_key(&program);
    let wide = pack(&dir.join("wide"), &[("gated".into(), program.clone())], &wide_opts, &mut |_| {})
        .unwrap_or_else(|e| panic!("{e}"));
    // The cache holds the wide pack's fourth candidate, which a search for two does not produce
    // (as a µGraph from an earlier search, or a composed one, would not be).
    let text = std::fs::read_to_string(dir.join("wide/mugraphs/gated.json")).expect("the candidates' µGraphs");
    let graphs: Vec<serde_json::Value> = serde_json::from_str(&text).expect("JSON");
    let current = KernelGraph::from_json(&graphs[3].to_string()).expect("a µGraph");
    let current_hash = current.canonical_hash().to_hex();
    assert_eq!(current_hash, wide.programs[0].candidates[3].hash);
    let cache = Cache::new(dir.join("cache"));
    cache.store(&key, &CacheEntry::new(&key, &current, 1.0, Vec::new()).expect("an entry")).expect("stored");

    // Packed with the cache: the search's two candidates, then the cache's choice.
    let narrow_opts = || PackOptions {
        tune: TuneConfig { candidates: 2, ..TuneConfig::default() },
        cache: Some(cache.clone()),
        ..pack_options()
    };
    let mut lines = Vec::new();
    let m = pack(&dir.join("narrow"), &[("gated".into(), program.clone())], &narrow_opts(), &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let p = &m.programs[0];
    let hashes: Vec<&str> = p.candidates.iter().map(|c| c.hash.as_str()).collect();
    assert_eq!(hashes.len(), 3, "{lines:?}");
    assert_eq!(&hashes[..2], &[wide.programs[0].candidates[0].hash.as_str(), &wide.programs[0].candidates[1].hash]);
    assert_eq!(hashes[2], current_hash);
    assert_eq!(p.candidates.iter().map(|c| c.from_cache).collect::<Vec<_>>(), [false, false, true]);
    assert!(lines.iter().any(|l| l.contains("the cache's current choice added")), "{lines:?}");
    assert_eq!(read_manifest(&dir.join("narrow")).expect("readable"), m, "from_cache survives the manifest");
    // Packing again keeps it (two searched candidates, the cache's choice among them).
    let again =
        pack(&dir.join("narrow"), &[("gated".into(), program.clone())], &narrow_opts(), &mut |_| {}).expect("packs");
    assert_eq!(again.programs, m.programs);

    // The cache's choice measured fastest: it stays, now with its measurement.
    let out = import(&dir.join("narrow"), &measured(p, &[30.0, 25.0, 12.0]), &cache).expect("imports");
    out[0].outcome.as_ref().unwrap_or_else(|e| panic!("{e}"));
    let (entry, graph) = cache.load(&key).expect("readable").expect("an entry");
    assert_eq!(graph.canonical_hash().to_hex(), current_hash);
    assert_eq!(entry.measured_us, Some(12.0));
    // A candidate faster by less than the margin (noise): the cache's choice stays.
    let out = import(&dir.join("narrow"), &measured(p, &[30.0, 11.9, 12.0]), &cache).expect("imports");
    out[0].outcome.as_ref().unwrap_or_else(|e| panic!("{e}"));
    let (entry, graph) = cache.load(&key).expect("readable").expect("an entry");
    assert_eq!(graph.canonical_hash().to_hex(), current_hash);
    assert_eq!(entry.measured_us, Some(12.0));
    // A searched candidate measured faster by more: it replaces the cache's choice.
    let out = import(&dir.join("narrow"), &measured(p, &[30.0, 10.0, 12.0]), &cache).expect("imports");
    out[0].outcome.as_ref().unwrap_or_else(|e| panic!("{e}"));
    let (entry, graph) = cache.load(&key).expect("readable").expect("an entry");
    assert_eq!(graph.canonical_hash().to_hex(), hashes[1]);
    assert_eq!(entry.measured_us, Some(10.0));

    // A bundle packed without the cache never timed the cache's choice: importing its record
    // leaves the entry as it is and says why, however fast its candidates ran.
    cache.store(&key, &CacheEntry::new(&key, &current, 1.0, Vec::new()).expect("an entry")).expect("stored");
    let blind_opts = PackOptions { tune: TuneConfig { candidates: 2, ..TuneConfig::default() }, ..pack_options() };
    let blind = pack(&dir.join("blind"), &[("gated".into(), program.clone())], &blind_opts, &mut |_| {})
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(blind.programs[0].candidates.len(), 2);
    let out = import(&dir.join("blind"), &measured(&blind.programs[0], &[3.0, 2.0]), &cache).expect("runs");
    let why = out[0].outcome.as_ref().expect_err("the entry is kept");
    assert!(why.contains("was not measured") && why.contains(&current_hash[..16]), "{why}");
    let (entry, graph) = cache.load(&key).expect("readable").expect("an entry");
    assert_eq!(graph.canonical_hash().to_hex(), current_hash);
    assert_eq!(entry.measured_us, None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cache entry that cannot be read (a truncated file, say) does not stop the pack: the program
/// is packed with the search's candidates alone and the pack says why; importing the measurement
/// then writes a readable entry in its place.
#[test]
fn an_unreadable_cache_entry_is_packed_without_and_replaced_on_import() {
    mirage::nvcc::find_nvcc().expect("nvcc packs the candidates (scripts/setup.sh installs it)");
    let dir = temp_dir("corrupt");
    let program = gated_mlp();
    let opts = || PackOptions {
        tune: TuneConfig { candidates: 2, ..TuneConfig::default() },
        cache: Some(Cache::new(dir.join("cache"))),
        ..pack_options()
    };
    let key = opts().search.cache_key(&program);
    let cache = Cache::new(dir.join("cache"));
    let entry = CacheEntry::new(&key, &program, 1.0, Vec::new()).expect("an entry");
    cache.store(&key, &entry).expect("stored");
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("cache"))
        .expect("the cache directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::write(&files[0], "{\"format\": \"mirage-search-cache\", \"vers").expect("truncated");
    assert!(cache.load(&key).is_err(), "the entry reads as corrupt");

    let mut lines = Vec::new();
    let m =
        pack(&dir.join("bundle"), &[("gated".into(), program.clone())], &opts(), &mut |l| lines.push(l.to_string()))
            .unwrap_or_else(|e| panic!("the pack must not fail on it: {e}"));
    let p = &m.programs[0];
    assert_eq!(p.candidates.len(), 2, "{lines:?}");
    assert!(p.candidates.iter().all(|c| !c.from_cache));
    let warning = lines.iter().find(|l| l.contains("warning")).unwrap_or_else(|| panic!("no warning in {lines:?}"));
    assert!(
        warning.starts_with("gated: warning: the cache's entry is unreadable (")
            && warning.ends_with("; packed without it"),
        "{warning}"
    );
    assert!(warning.contains(&files[0].display().to_string()), "the warning names the file: {warning}");

    let out = import(&dir.join("bundle"), &measured(p, &[20.0, 10.0]), &cache).expect("imports");
    out[0].outcome.as_ref().unwrap_or_else(|e| panic!("{e}"));
    let (entry, graph) = cache.load(&key).expect("readable again").expect("an entry");
    assert_eq!(graph.canonical_hash().to_hex(), p.candidates[1].hash);
    assert_eq!(entry.measured_us, Some(10.0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The H200 tuning records: change 13's (28 weight-streaming generality programs, 12 candidates
/// each) and change 11's for 7 benchmark programs whose candidates change 13 did not touch, with
/// the candidates' µGraphs (CUDA events, L2 flushed).
fn h200_set() -> CalibrationSet {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/calibration-h200.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let set = CalibrationSet::from_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(set.programs.len(), 35, "{path}");
    assert!(set.programs.iter().all(|p| p.candidates.len() >= 4), "{path}: every program has its candidates");
    set
}

/// The cost model ranks the measured candidates about as well as when it was calibrated on them
/// (docs/DECISIONS.md, change 14: mean Spearman 0.55, the fastest chosen in 14 of 35 programs,
/// geomean slowdown of the choice 1.06, worst 1.40), so a change that breaks the ranking of
/// weight-streaming kernels fails here.
#[test]
fn the_cost_model_ranks_the_recorded_h200_candidates() {
    let set = h200_set();
    let e = evaluate(&set, &Arch::sm90(), |_| true).expect("every candidate is costed");
    println!("{e}");
    assert_eq!(e.rows.len(), 35);
    assert!(e.mean_spearman() >= 0.48, "{}", e.summary());
    assert!(e.fastest_chosen() >= 11, "{}", e.summary());
    assert!(e.geomean_slowdown() <= 1.09, "{}", e.summary());
    assert!(e.worst_slowdown() <= 1.5, "{}", e.summary());
}

/// `base` with the constants change 14 fitted: segment bytes, copy µs, and one SM's bandwidth as
/// a multiple of its share.
fn fitted(base: &Arch, [segment, copy, share]: [f64; 3]) -> Arch {
    Arch {
        segment_bytes: segment,
        copy_us: copy,
        sm_dram_bytes_per_us: share * base.dram_bytes_per_us / base.num_sms as f64,
        ..base.clone()
    }
}

fn subset(e: &Evaluation, keep: impl Fn(&str) -> bool) -> Evaluation {
    Evaluation { rows: e.rows.iter().filter(|r| keep(&r.name)).cloned().collect() }
}

/// The family of a program of the set: its model, or `bench` for the benchmark programs.
fn family(name: &str) -> &str {
    ["llama1b_", "qwen06b_", "qwen7b_"].into_iter().find(|m| name.starts_with(m)).unwrap_or("bench")
}

/// The fit does not only describe the programs it was made on: fitted on three of the four
/// families (Llama-3.2-1B, Qwen3-0.6B, Qwen2.5-7B projections, the benchmark programs) over a
/// coarse grid, the constants rank the fourth better than the constants before change 14 did
/// (measured then: mean Spearman 0.55 against 0.30, the fastest chosen in 14 of 35 against 4,
/// geomean slowdown of the choice 1.06 against 1.21).
#[test]
fn constants_fitted_on_three_families_rank_the_fourth() {
    let set = h200_set();
    let base = Arch::sm90();
    let mut grid = Vec::new();
    for segment in [16.0, 32.0, 64.0] {
        for copy in [0.0, 0.025, 0.05] {
            for share in [1.0, 1.5, 2.0] {
                grid.push([segment, copy, share]);
            }
        }
    }
    let evals: Vec<Evaluation> =
        grid.iter().map(|&p| evaluate(&set, &fitted(&base, p), |_| true).expect("costed")).collect();
    let score = |e: &Evaluation| e.mean_spearman() - 5.0 * e.geomean_slowdown().ln();
    let before = evaluate(&set, &fitted(&base, [16.0, 0.0, 1.0]), |_| true).expect("costed");
    let mut held_out = Vec::new();
    for fam in ["llama1b_", "qwen06b_", "qwen7b_", "bench"] {
        let train = |name: &str| family(name) != fam;
        let best = (0..grid.len())
            .max_by(|&i, &j| score(&subset(&evals[i], train)).total_cmp(&score(&subset(&evals[j], train))))
            .expect("a grid");
        let test = subset(&evals[best], |name| family(name) == fam);
        println!("{fam}: fitted on the others {:?}; held out: {}", grid[best], test.summary());
        held_out.extend(test.rows);
    }
    let held_out = Evaluation { rows: held_out };
    println!("held out: {}\nconstants before change 14: {}", held_out.summary(), before.summary());
    assert_eq!(held_out.rows.len(), 35);
    assert!(held_out.mean_spearman() >= before.mean_spearman() + 0.15, "{}", held_out.summary());
    assert!(held_out.fastest_chosen() >= before.fastest_chosen() + 6, "{}", held_out.summary());
    assert!(held_out.geomean_slowdown() <= before.geomean_slowdown() - 0.1, "{}", held_out.summary());
}

/// Re-calibrating the cost model keeps the cache's keys: the default search version is the one
/// the committed `.mirage/` entries are stored under (a hit is re-verified and returned, not
/// re-ranked, so the tuned choices stay in force).
#[test]
fn the_committed_cache_entries_keep_their_search_version() {
    let version = SearchConfig::default().version();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../.mirage");
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    let keyed = names.iter().filter(|n| n.ends_with(&format!("-sm_90-{version}.json"))).count();
    assert!(keyed >= 28, "{keyed} of {} entries in {dir} are keyed by search version {version}", names.len());
}
