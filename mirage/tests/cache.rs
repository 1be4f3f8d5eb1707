//! The persistent search cache: a hit skips the search (after re-verifying the cached
//! µGraph), a corrupt or wrong entry is reported and searched again, and offline mode turns a
//! miss into an error that says what to do.
#![cfg(feature = "build")]

use std::path::PathBuf;

use mirage::cache::{CACHE_FORMAT, Cache, CacheEntry, CacheKey};
use mirage::ir::{DType, KernelGraph};
use mirage::search::{SearchConfig, SearchError, superoptimize};

fn program() -> KernelGraph {
    mirage::testing::programs::rmsnorm_linear(2, 512, 1024, DType::F16).expect("program")
}

fn cfg() -> SearchConfig {
    SearchConfig { offline: Some(false), ..SearchConfig::single_kernel() }
}

/// A fresh directory under the target dir's temp folder.
fn temp_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("mirage-cache-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn key(p: &KernelGraph, c: &SearchConfig) -> CacheKey {
    CacheKey { program_hash: p.canonical_hash(), arch: c.arch.name.to_string(), search_version: c.version() }
}

#[test]
fn a_hit_skips_the_search() {
    let dir = temp_dir("hit");
    let cache = Cache::new(&dir);
    let p = program();
    let first = superoptimize(&p, &cfg(), Some(&cache)).expect("search");
    assert!(!first.from_cache && first.stats.states > 0);
    let path = first.cache_path.clone().expect("written");
    assert!(path.starts_with(&dir) && path.exists());
    // Human-readable JSON with the chosen µGraph, cost, top candidates and a timestamp.
    let text = std::fs::read_to_string(&path).expect("read");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["format"], CACHE_FORMAT);
    assert!(
        v["mugraph"].is_object() && v["cost_us"].is_number() && v["top"].is_array() && v["created_unix_s"].is_number()
    );
    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).expect("dir").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");

    let second = superoptimize(&p, &cfg(), Some(&cache)).expect("hit");
    assert!(second.from_cache);
    assert_eq!(second.stats.states, 0, "no search on a hit");
    assert_eq!(second.best.hash, first.best.hash);
    assert_eq!(second.best.verified, Some(true));
    assert!(second.to_string().contains("search cache"));
    // Another search configuration is another key: a miss.
    let other = SearchConfig { forloop_ranges: vec![8], ..cfg() };
    assert_ne!(other.version(), cfg().version());
    assert!(!superoptimize(&p, &other, Some(&cache)).expect("search").from_cache);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_entry_is_reported_and_searched_again() {
    let dir = temp_dir("corrupt");
    let cache = Cache::new(&dir);
    let p = program();
    let path = cache.path(&key(&p, &cfg()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    for garbage in ["{ not json", "{\"format\": \"mirage-search-cache\", \"version\": 1}", "\u{0}\u{1}binary"] {
        std::fs::write(&path, garbage).expect("write");
        let r = superoptimize(&p, &cfg(), Some(&cache)).expect("recovers");
        assert!(!r.from_cache);
        assert!(r.notes.iter().any(|n| n.contains("corrupt")), "{:?}", r.notes);
        // Rewritten with a good entry: the next run is a hit.
        assert!(superoptimize(&p, &cfg(), Some(&cache)).expect("hit").from_cache);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cached_graph_that_does_not_compute_the_program_is_never_trusted() {
    let dir = temp_dir("wrong");
    let cache = Cache::new(&dir);
    let p = program();
    let k = key(&p, &cfg());
    // A well-formed entry holding the µGraph of another program with the same signature.
    let other = mirage::testing::programs::rmsnorm_linear(2, 512, 1024, DType::F16).expect("program");
    let mut g = KernelGraph::new();
    let x = g.input(&[2, 512], DType::F16).expect("x");
    let w = g.input(&[512, 1024], DType::F16).expect("w");
    let y = g.matmul(x, w).expect("matmul"); // no normalization
    g.output(y, None).expect("output");
    assert_eq!(other.inputs(), g.inputs());
    let entry = CacheEntry::new(&k, &g, 1.0, vec![]).expect("entry");
    cache.store(&k, &entry).expect("store");
    let r = superoptimize(&p, &cfg(), Some(&cache)).expect("search");
    assert!(!r.from_cache);
    assert!(r.notes.iter().any(|n| n.contains("does not compute the program")), "{:?}", r.notes);
    assert_ne!(r.best.hash, g.canonical_hash());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn offline_mode_fails_on_a_miss_with_a_clear_message() {
    let dir = temp_dir("offline");
    let cache = Cache::new(&dir);
    let p = program();
    let offline = SearchConfig { offline: Some(true), ..cfg() };
    let err = superoptimize(&p, &offline, Some(&cache)).expect_err("miss");
    assert!(matches!(err, SearchError::Offline { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("MIRAGE_OFFLINE=1")
            && msg.contains(&dir.display().to_string())
            && msg.contains("without MIRAGE_OFFLINE"),
        "{msg}"
    );
    // Without any cache it is a miss too.
    assert!(superoptimize(&p, &offline, None).is_err());
    // After an online search, offline mode uses the entry.
    superoptimize(&p, &cfg(), Some(&cache)).expect("search");
    assert!(superoptimize(&p, &offline, Some(&cache)).expect("hit").from_cache);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `MIRAGE_OFFLINE=1` in the environment: checked in a child process so that no test of this
/// binary runs with a changed environment.
#[test]
fn the_environment_variable_selects_offline_mode() {
    if std::env::var_os("MIRAGE_CACHE_TEST_CHILD").is_some() {
        let dir = temp_dir("env-child");
        let err = superoptimize(&program(), &SearchConfig { offline: None, ..cfg() }, Some(&Cache::new(&dir)))
            .expect_err("offline miss");
        assert!(matches!(err, SearchError::Offline { .. }), "{err}");
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "the_environment_variable_selects_offline_mode", "--nocapture"])
        .env("MIRAGE_CACHE_TEST_CHILD", "1")
        .env("MIRAGE_OFFLINE", "1")
        .output()
        .expect("run the child");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

/// Splits beyond `max_axis_blocks` joined the search later: only a program with a dim they exist
/// for (a vocabulary of 151936 = 2^7 · 1187) gets another key; every other program keeps its key.
#[test]
fn only_programs_with_wide_splits_get_another_key() {
    let c = cfg();
    let small = program();
    assert!(!c.has_wide_splits(&small));
    assert_eq!(c.cache_key(&small).search_version, c.version());
    assert_eq!(c.cache_key(&small), key(&small, &c));
    // Mistral's vocabulary 32000 = 2^8 · 125 splits into at most 500 blocks of 64: unchanged.
    let mistral = mirage::testing::programs::rmsnorm_linear(1, 4096, 32000, DType::Bf16).expect("program");
    assert!(!c.has_wide_splits(&mistral));
    assert_eq!(c.cache_key(&mistral).search_version, c.version());
    // Llama's 128256 = 2^8 · 501 already splits into 1002 blocks of 128 within the cap: unchanged.
    let llama = mirage::testing::programs::rmsnorm_linear(1, 2048, 128256, DType::Bf16).expect("program");
    assert!(!c.has_wide_splits(&llama));
    assert_eq!(c.cache_key(&llama).search_version, c.version());
    let qwen = mirage::testing::programs::rmsnorm_linear(1, 896, 151936, DType::Bf16).expect("program");
    assert!(c.has_wide_splits(&qwen));
    let wide = c.cache_key(&qwen).search_version;
    assert_ne!(wide, c.version());
    assert!(wide.starts_with(&format!("s{}-", mirage::search::SEARCH_ALGORITHM_VERSION)), "{wide}");
    // With a block cap the wide splits do not fit in, the key is the old one.
    let capped = SearchConfig { max_blocks: 1024, ..cfg() };
    assert!(!capped.has_wide_splits(&qwen));
    assert_eq!(capped.cache_key(&qwen).search_version, capped.version());
}
