//! The snapshot of record of code generation: the generated CUDA (with its launch plan) and the
//! cost model's estimate of every golden µGraph, every coverage program, every benchmark program
//! and every µGraph in the workspace's search cache (`.mirage/`: the kernels the `#[mugraph]`
//! examples and tests are built from) are hashed with SHA-256 and compared with the values in
//! `mirage/tests/codegen_hashes.txt`.
//!
//! A refactoring of the code generator or the cost model must leave every hash as it is. A change
//! that alters generated code on purpose re-records the file and commits it with the change:
//!
//! ```sh
//! MIRAGE_RECORD_CODEGEN_HASHES=1 cargo test -p mirage-rs --features testing --test codegen_hash
//! ```
//!
//! `MIRAGE_CODEGEN_DUMP=<dir>` also writes every hashed text to `<dir>/<name>.txt`, so two
//! commits' outputs can be compared with `diff -r`.
#![cfg(feature = "build")]

use std::fmt::Write;
use std::path::{Path, PathBuf};

use mirage::cache::CacheEntry;
use mirage::codegen::{KernelOptions, generate};
use mirage::cost::{Arch, estimate};
use mirage::ir::{DType, KernelGraph};
use mirage::testing::benchmarks::benchmark_set;
use mirage::testing::programs::{coverage_cases, golden_cases};
use sha2::{Digest, Sha256};

/// The committed record.
const RECORD: &str = "tests/codegen_hashes.txt";
/// Set to `1` to rewrite the record from the current code instead of comparing with it.
const RECORD_VAR: &str = "MIRAGE_RECORD_CODEGEN_HASHES";
/// Set to a directory to write every hashed text there.
const DUMP_VAR: &str = "MIRAGE_CODEGEN_DUMP";

/// Every program the record covers, named uniquely, in a fixed order.
fn programs() -> Vec<(String, KernelGraph)> {
    let mut out = Vec::new();
    for case in golden_cases() {
        let graphs = case.named_graphs().unwrap_or_else(|e| panic!("golden {}: {e}", case.name));
        out.extend(graphs.into_iter().map(|(n, g)| (format!("golden/{n}"), g)));
    }
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let graphs = coverage_cases(dtype).unwrap_or_else(|e| panic!("coverage {}: {e}", dtype.name()));
        out.extend(graphs.into_iter().map(|(n, g)| (format!("coverage/{}/{n}", dtype.name()), g)));
    }
    for b in benchmark_set().expect("benchmark programs build") {
        out.push((format!("benchmark/{}", b.name), b.program));
    }
    out.extend(cached_graphs());
    out
}

/// The µGraph of every entry of the workspace's search cache, named by its program hash, its
/// architecture and its search version.
fn cached_graphs() -> Vec<(String, KernelGraph)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".mirage");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let entry: CacheEntry =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not a cache entry: {e}", path.display()));
            let graph = entry.graph().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // The file name after the program hash: the architecture and the search version (a
            // program with runtime-sized dims has its own, so it never shares a name with the
            // static program of the same compile size).
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            let tail = stem.strip_prefix(entry.program_hash.as_str()).unwrap_or(stem).trim_start_matches('-');
            (format!("cache/{}-{tail}", &entry.program_hash[..16]), graph)
        })
        .collect()
}

/// What is hashed for one program: the kernels and launch plan generated with the default
/// options and with an A100's shared memory (fewer pipeline stages where tiles are large), and
/// the cost model's estimate on both architectures. Errors are part of the text: a program that
/// stops (or starts) generating changes its hash.
fn hashed_text(graph: &KernelGraph, name: &str) -> String {
    let ident: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let mut text = String::new();
    for arch in [Arch::sm90(), Arch::sm80()] {
        let opts = KernelOptions { max_smem_bytes: arch.smem_per_block, ..KernelOptions::default() };
        writeln!(text, "== cuda, {} B of shared memory", opts.max_smem_bytes).ok();
        match generate(graph, &ident, &opts) {
            Ok(g) => {
                text.push_str(&g.kernels_source);
                let plan = serde_json::to_string_pretty(&g.plan).expect("plans serialize");
                writeln!(text, "== launch plan\n{plan}").ok();
            }
            Err(e) => writeln!(text, "error: {e}").unwrap_or(()),
        }
        writeln!(text, "== cost on {}", arch.name).ok();
        match estimate(graph, &arch) {
            Ok(r) => write!(text, "{r}").unwrap_or(()),
            Err(e) => writeln!(text, "error: {e}").unwrap_or(()),
        }
    }
    text
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `(name, hash)` of every program, then `("combined", hash of those lines)`.
fn current() -> Vec<(String, String)> {
    let dump = std::env::var_os(DUMP_VAR).map(PathBuf::from);
    let mut lines = Vec::new();
    for (name, graph) in programs() {
        let text = hashed_text(&graph, &name);
        if let Some(dir) = &dump {
            let path = dir.join(format!("{name}.txt"));
            std::fs::create_dir_all(path.parent().expect("a file in the dump directory")).expect("dump directory");
            std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        lines.push((name, hex(&Sha256::digest(text.as_bytes()))));
    }
    let mut all = Sha256::new();
    for (name, hash) in &lines {
        all.update(format!("{hash}  {name}\n").as_bytes());
    }
    lines.insert(0, ("combined".to_string(), hex(&all.finalize())));
    lines
}

fn render(lines: &[(String, String)]) -> String {
    let mut out = String::from(
        "# SHA-256 of the generated CUDA, launch plans and cost estimates of every golden, coverage,\n\
         # benchmark and cached µGraph (mirage/tests/codegen_hash.rs). Re-record deliberately with\n\
         # MIRAGE_RECORD_CODEGEN_HASHES=1 cargo test -p mirage-rs --features testing --test codegen_hash\n",
    );
    for (name, hash) in lines {
        writeln!(out, "{hash}  {name}").ok();
    }
    out
}

fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (hash, name) = l.split_once("  ").unwrap_or_else(|| panic!("malformed record line `{l}`"));
            (name.to_string(), hash.to_string())
        })
        .collect()
}

#[test]
fn generated_code_matches_the_recorded_hashes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(RECORD);
    let now = current();
    assert!(now.len() > 300, "only {} programs enumerated", now.len());
    if std::env::var(RECORD_VAR).is_ok_and(|v| v.trim() == "1") {
        std::fs::write(&path, render(&now)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("recorded {} hashes in {}; combined {}", now.len() - 1, path.display(), now[0].1);
        return;
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (record it with {RECORD_VAR}=1)", path.display()));
    let recorded = parse(&text);
    let hash_of = |lines: &[(String, String)], name: &str| lines.iter().find(|l| l.0 == name).map(|l| l.1.clone());
    let mut diffs = Vec::new();
    for (name, hash) in &now {
        match hash_of(&recorded, name) {
            None => diffs.push(format!("new: {name}")),
            Some(h) if &h != hash => diffs.push(format!("changed: {name}")),
            Some(_) => {}
        }
    }
    for (name, _) in &recorded {
        if hash_of(&now, name).is_none() {
            diffs.push(format!("gone: {name}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "generated code differs from the record in {} of {} entries:\n{}\n\
         If the change is deliberate, re-record with {RECORD_VAR}=1 and commit {RECORD}; \
         {DUMP_VAR}=<dir> writes every hashed text for a diff.",
        diffs.len(),
        now.len(),
        diffs.join("\n")
    );
    println!("{} programs, combined {}", now.len() - 1, now[0].1);
}
