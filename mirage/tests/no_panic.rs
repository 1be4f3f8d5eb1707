//! Inputs users control never panic: fuzz tests (proptest, a deterministic generator; the case
//! counts are printed, `MIRAGE_FUZZ_SCALE=N` runs N times as many) over
//!
//! - the `#[mugraph]` language: random token streams and mutated random programs
//!   (`mirage::testing::random`), through the macro's checker (`mirage::lower::syntax`, the
//!   module `mirage-macros` compiles: `parse_attr_args` and `parse`, called as functions) and
//!   through `mirage::lower::lower_source`;
//! - the Mirage importer (`mirage::import`) on mutated golden files (JSON-aware edits,
//!   truncation, bytes replaced);
//! - search cache files (`mirage::cache`: truncated, corrupted, wrong format or version,
//!   edited µGraphs), loaded and, when one loads, verified by an offline search;
//! - launch plans (`LaunchPlan::from_json`, `Program::with_plan`) and µGraph files
//!   (`KernelGraph::from_json`).
//!
//! Each case runs under `catch_unwind`: a panic fails the test (with the input, shrunk); an
//! error must say something (a non-empty message, at a line of the source for the DSL).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::Value;

use mirage::cache::{Cache, CacheEntry};
use mirage::codegen::plan::LaunchPlan;
use mirage::codegen::{KernelOptions, generate};
use mirage::import::{ImportOptions, import_mirage_json_with};
use mirage::ir::{DType, KernelGraph};
use mirage::lower::{lower_source, syntax};
use mirage::search::{SearchConfig, superoptimize};
use mirage::testing::programs::{gated_mlp, golden_cases};
use mirage::testing::random::random_program;

/// Runs `check` on `cases` values of `strategy` (times `MIRAGE_FUZZ_SCALE`) from a fixed seed;
/// a panic or an `Err` fails the test. Returns the number of cases run.
fn fuzz<S: Strategy>(what: &str, cases: u32, strategy: S, check: impl Fn(S::Value) -> Result<(), String>) -> u32
where
    S::Value: std::fmt::Debug,
{
    let scale: u32 = std::env::var("MIRAGE_FUZZ_SCALE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1);
    let config =
        Config { cases: cases * scale, failure_persistence: None, max_shrink_iters: 2000, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let ran = std::cell::Cell::new(0u32);
    let result = runner.run(&strategy, |value| {
        ran.set(ran.get() + 1);
        match catch_unwind(AssertUnwindSafe(|| check(value))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(TestCaseError::fail(e)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(TestCaseError::fail(format!("PANIC: {msg}")))
            }
        }
    });
    if let Err(e) = result {
        panic!("{what}: {e}");
    }
    let n = cases * scale;
    println!("{what}: {n} cases, 0 panics ({} runs with shrinking)", ran.get());
    n
}

// ---------------------------------------------------------------------------------------------
// The #[mugraph] language.

/// Tokens of the language and near-misses of it.
const VOCAB: &[&str] = &[
    "#",
    "[",
    "]",
    "mugraph",
    "mirage",
    "::",
    "fn",
    "pub",
    "f",
    "x",
    "y",
    "w",
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    ",",
    ";",
    ":",
    "->",
    "=",
    "let",
    "Tensor",
    "f16",
    "bf16",
    "f32",
    "i32",
    "f64",
    "0",
    "1",
    "2",
    "3",
    "8",
    "64",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "0.5",
    "1.0",
    "1e308",
    "1e-40",
    "-",
    "+",
    "*",
    "/",
    ".",
    "matmul",
    "sum",
    "max",
    "reduce_sum",
    "softmax",
    "rms_norm",
    "rms_norm_weighted",
    "layer_norm",
    "layer_norm_weighted",
    "concat",
    "rope",
    "rope_interleaved",
    "gather",
    "argmax",
    "pow",
    "clamp",
    "exp",
    "sqrt",
    "recip",
    "silu",
    "strides",
    "mod",
    "async",
    "const",
    "unsafe",
    "'a",
    "T",
    "impl",
    "return",
    "if",
    "true",
    "\"s\"",
    "..",
    "&",
    "mut",
    "?",
    "!",
    "_",
    "self",
];

/// Numbers substituted for numbers (sizes, dims, strides, constants).
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "5",
    "7",
    "64",
    "65536",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999",
    "0.0",
    "1.0",
    "-1.0",
    "0.000001",
    "1e38",
    "1e39",
    "1e308",
    "3.5",
];

/// A file of rough tokens: words (identifiers and numbers, `1.5` and `1e-6` whole), `->`, `::`,
/// and single characters; comments dropped.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let start = i;
            if c.is_whitespace() {
                i += 1;
                continue;
            } else if c.is_ascii_digit() {
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric()
                        || chars[i] == '_'
                        || (chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
                        || (chars[i] == '-' && matches!(chars[i - 1], 'e' | 'E')))
                {
                    i += 1;
                }
            } else if c.is_alphanumeric() || c == '_' {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            } else if matches!((c, chars.get(i + 1)), ('-', Some('>')) | (':', Some(':'))) {
                i += 2;
            } else {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        }
    }
    out
}

/// The macro's checker on every function of `text` (as the attribute sees its item), then the
/// lowering of the file; either may reject it, neither may panic, and an error says where and
/// what.
fn check_dsl(text: &str) -> Result<(), String> {
    if let Ok(file) = syn::parse_file(text) {
        for item in &file.items {
            if let syn::Item::Fn(f) = item {
                for attr in &f.attrs {
                    if let syn::Meta::List(list) = &attr.meta
                        && let Err(e) = syntax::parse_attr_args(list.tokens.clone())
                        && e.to_string().is_empty()
                    {
                        return Err("an attribute error without a message".into());
                    }
                }
                if let Err(e) = syntax::parse(f, Vec::new())
                    && e.to_string().is_empty()
                {
                    return Err("a checker error without a message".into());
                }
            }
        }
    }
    match lower_source(text) {
        Ok(_) => Ok(()),
        Err(e) if e.message.is_empty() => Err(format!("an empty message at {}:{}", e.line, e.column)),
        Err(e) if e.line == 0 => Err(format!("an error without a line: {e}")),
        Err(e) if e.message.contains("internal error") => Err(format!("an internal error: {e}")),
        Err(_) => Ok(()),
    }
}

#[test]
fn random_token_streams_never_panic() {
    let token = prop::sample::select(VOCAB);
    let strategy = (any::<bool>(), prop::collection::vec(token, 0..80));
    fuzz("DSL token streams", 3000, strategy, |(prefixed, toks)| {
        let body = toks.join(" ");
        let text = if prefixed { format!("#[mugraph] fn f(x: Tensor<f16, 8, 64>) -> {body}") } else { body };
        check_dsl(&text)
    });
}

/// Random programs (`mirage::testing::random`) with 1 to 5 edits: a token deleted, inserted,
/// replaced or duplicated, two swapped, a number replaced, the text cut short.
#[test]
fn mutated_random_programs_never_panic() {
    let corpus: Vec<Vec<String>> = (0..64).map(|s| tokens(&random_program(s).source)).collect();
    for (seed, toks) in corpus.iter().enumerate() {
        check_dsl(&toks.join(" ")).unwrap_or_else(|e| panic!("seed {seed} before any edit: {e}"));
        assert!(lower_source(&toks.join(" ")).is_ok(), "the tokens of seed {seed} lower");
    }
    let edit = (0usize..7, any::<prop::sample::Index>(), any::<prop::sample::Index>());
    let strategy = (0..corpus.len(), prop::collection::vec(edit, 1..6));
    fuzz("mutated random programs", 4000, strategy, |(program, edits)| {
        let mut toks = corpus[program].clone();
        for (kind, at, with) in edits {
            let i = at.index(toks.len().max(1));
            let numbers: Vec<usize> =
                (0..toks.len()).filter(|&j| toks[j].starts_with(|c: char| c.is_ascii_digit())).collect();
            match kind {
                0 if i < toks.len() => drop(toks.remove(i)),
                1 => toks.insert(i.min(toks.len()), with.get(VOCAB).to_string()),
                2 if i < toks.len() => toks[i] = with.get(VOCAB).to_string(),
                3 if i < toks.len() => toks.insert(i, toks[i].clone()),
                4 if i + 1 < toks.len() => toks.swap(i, i + 1),
                5 if !numbers.is_empty() => toks[numbers[at.index(numbers.len())]] = with.get(NUMBERS).to_string(),
                6 => toks.truncate(i),
                _ => {}
            }
        }
        check_dsl(&toks.join(" "))
    });
}

// ---------------------------------------------------------------------------------------------
// JSON files: the importer, the cache, plans and µGraphs.

/// One edit of a JSON document.
#[derive(Clone, Debug)]
enum JsonEdit {
    /// Replace a node (chosen by index in document order) with a value of [`replacement`].
    Replace(prop::sample::Index, u8),
    /// Remove a node from its array or object.
    Remove(prop::sample::Index),
    /// Duplicate an array element in place.
    Duplicate(prop::sample::Index),
    /// Cut the serialized text short (at a fraction of its length, in 1/65536).
    Truncate(u16),
    /// Replace a byte of the serialized text (at a fraction of its length) with this one.
    Byte(u16, u8),
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, v)| JsonEdit::Replace(i, v)),
        2 => any::<prop::sample::Index>().prop_map(JsonEdit::Remove),
        1 => any::<prop::sample::Index>().prop_map(JsonEdit::Duplicate),
        1 => any::<u16>().prop_map(JsonEdit::Truncate),
        1 => (any::<u16>(), any::<u8>()).prop_map(|(at, b)| JsonEdit::Byte(at, b)),
    ]
}

/// The values an edited node takes: other types, boundary numbers, small sizes (`small`: no
/// number above 64, so an edited µGraph stays cheap to verify).
fn replacement(v: u8, small: bool) -> Value {
    let big: &[Value] = &[
        Value::from(-1),
        Value::from(1.5),
        Value::from(4_294_967_296u64),
        Value::from(u64::MAX),
        Value::from(1e300),
        Value::from(i64::MIN),
    ];
    let common: Vec<Value> = vec![
        Value::Null,
        Value::Bool(true),
        Value::from(0),
        Value::from(1),
        Value::from(2),
        Value::from(3),
        Value::from(7),
        Value::from(64),
        Value::from("x"),
        Value::from(""),
        Value::Array(vec![]),
        Value::Array(vec![Value::from(1), Value::from(2)]),
        serde_json::json!({}),
    ];
    let all: Vec<Value> = if small { common } else { common.into_iter().chain(big.iter().cloned()).collect() };
    all[v as usize % all.len()].clone()
}

/// Paths (array indices and object keys) of every node of `v`, in document order.
fn node_paths(v: &Value, prefix: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(prefix.clone());
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                prefix.push(PathStep::Index(i));
                node_paths(x, prefix, out);
                prefix.pop();
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                prefix.push(PathStep::Key(k.clone()));
                node_paths(x, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Index(usize),
    Key(String),
}

fn node_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        PathStep::Index(i) => v.get_mut(*i),
        PathStep::Key(k) => v.get_mut(k.as_str()),
    })
}

/// `text` with `edits` applied (JSON-aware edits first, then the text edits).
fn edit_json(text: &str, edits: &[JsonEdit], small: bool) -> Vec<u8> {
    let mut doc: Value = serde_json::from_str(text).expect("the corpus is JSON");
    for e in edits {
        let mut paths = Vec::new();
        node_paths(&doc, &mut Vec::new(), &mut paths);
        match e {
            JsonEdit::Replace(i, v) => {
                if let Some(node) = node_mut(&mut doc, &paths[i.index(paths.len())]) {
                    *node = replacement(*v, small);
                }
            }
            JsonEdit::Remove(i) | JsonEdit::Duplicate(i) => {
                let path = &paths[i.index(paths.len())];
                let Some((last, parent)) = path.split_last() else { continue };
                match (node_mut(&mut doc, parent), last) {
                    (Some(Value::Array(a)), PathStep::Index(j)) if matches!(e, JsonEdit::Remove(_)) => {
                        drop(a.remove(*j))
                    }
                    (Some(Value::Array(a)), PathStep::Index(j)) => {
                        let x = a[*j].clone();
                        a.insert(*j, x);
                    }
                    (Some(Value::Object(o)), PathStep::Key(k)) if matches!(e, JsonEdit::Remove(_)) => drop(o.remove(k)),
                    _ => {}
                }
            }
            JsonEdit::Truncate(_) | JsonEdit::Byte(..) => {}
        }
    }
    let mut bytes = serde_json::to_vec(&doc).expect("a JSON value serializes");
    for e in edits {
        let len = bytes.len();
        let at = |f: u16| (f as usize * len) >> 16;
        match *e {
            JsonEdit::Truncate(f) => bytes.truncate(at(f)),
            JsonEdit::Byte(f, b) if !bytes.is_empty() => {
                let i = at(f).min(bytes.len() - 1);
                bytes[i] = b;
            }
            _ => {}
        }
    }
    bytes
}

fn json_edits() -> impl Strategy<Value = Vec<JsonEdit>> {
    prop::collection::vec(json_edit(), 1..4)
}

#[test]
fn mutated_mirage_files_never_panic_the_importer() {
    let cases = golden_cases();
    let strategy = (0..cases.len(), json_edits());
    fuzz("Mirage importer, mutated golden files", 600, strategy, |(case, edits)| {
        let case = &cases[case];
        let bytes = edit_json(case.json, &edits, false);
        let Ok(text) = String::from_utf8(bytes) else { return Ok(()) };
        match import_mirage_json_with(&text, ImportOptions { half_dtype: case.dtype }) {
            Err(e) if e.to_string().is_empty() => Err("an import error without a message".into()),
            _ => Ok(()),
        }
    });
}

/// A small program and its µGraph (the program's operators in default block graphs).
fn small_program() -> (KernelGraph, KernelGraph) {
    let program = gated_mlp(8, 64, 32, DType::F16).expect("a valid program");
    let mugraph = mirage::codegen::default_blocks::lower_to_blocks(&program).expect("default blocks");
    (program, mugraph)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mirage-no-panic-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

#[test]
fn corrupt_cache_files_are_errors() {
    let (program, mugraph) = small_program();
    let dir = scratch("cache");
    let cache = Cache::new(&dir);
    let cfg = SearchConfig { offline: Some(true), ..SearchConfig::single_kernel() };
    let key = cfg.cache_key(&program);
    let entry = CacheEntry::new(&key, &mugraph, 1.0, Vec::new()).expect("an entry");
    let path = cache.store(&key, &entry).expect("stored");
    let valid = std::fs::read_to_string(&path).expect("written");
    // The untouched entry loads and is used by an offline search.
    assert!(matches!(cache.load(&key), Ok(Some(_))));
    assert!(superoptimize(&program, &cfg, Some(&cache)).is_ok_and(|r| r.from_cache));
    fuzz("search cache files", 400, json_edits(), |edits| {
        std::fs::write(&path, edit_json(&valid, &edits, true)).map_err(|e| e.to_string())?;
        check_cache(&cache, &program, &cfg, &path)
    });
    // Wrong format and version, and an empty file, are each a clear error.
    let doc: Value = serde_json::from_str(&valid).expect("JSON");
    for (field, value) in [("version", Value::from(2)), ("format", Value::from("something else"))] {
        let mut d = doc.clone();
        d[field] = value;
        std::fs::write(&path, d.to_string()).expect("written");
        let e = cache.load(&key).expect_err("rejected");
        assert!(e.to_string().contains("version") && e.to_string().contains(&path.display().to_string()), "{e}");
    }
    std::fs::write(&path, "").expect("written");
    let e = cache.load(&key).expect_err("rejected");
    assert!(e.to_string().contains("not a cache entry"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Loads the cache entry; an entry that loads is verified by an offline search (which uses it
/// when it computes the program and reports otherwise).
fn check_cache(cache: &Cache, program: &KernelGraph, cfg: &SearchConfig, path: &Path) -> Result<(), String> {
    let key = cfg.cache_key(program);
    match cache.load(&key) {
        Err(e) if !e.to_string().contains(&path.display().to_string()) => {
            Err(format!("the error does not name the file: {e}"))
        }
        Err(_) | Ok(None) => Ok(()),
        Ok(Some(_)) => match superoptimize(program, cfg, Some(cache)) {
            Err(e) if e.to_string().is_empty() => Err("a search error without a message".into()),
            _ => Ok(()),
        },
    }
}

#[test]
fn corrupt_plans_and_mugraphs_are_errors() {
    let (_, mugraph) = small_program();
    let generated = generate(&mugraph, "fuzz", &KernelOptions::default()).expect("generated");
    let plan = generated.plan.to_json();
    let graph = mugraph.to_json();
    static CUBIN: &[u8] = b"not a cubin: no GPU is touched";
    fuzz("launch plans", 600, json_edits(), |edits| {
        let Ok(text) = String::from_utf8(edit_json(&plan, &edits, false)) else { return Ok(()) };
        match LaunchPlan::from_json(&text) {
            Err(e) if e.to_string().is_empty() => Err("a plan error without a message".into()),
            Err(_) => Ok(()),
            Ok(p) => match mirage::Program::with_plan("fuzz", CUBIN, p) {
                Err(e) if e.to_string().is_empty() => Err("a plan error without a message".into()),
                _ => Ok(()),
            },
        }
    });
    fuzz("µGraph files", 600, json_edits(), |edits| {
        let Ok(text) = String::from_utf8(edit_json(&graph, &edits, false)) else { return Ok(()) };
        match KernelGraph::from_json(&text) {
            Err(e) if e.to_string().is_empty() => Err("a µGraph error without a message".into()),
            Err(_) => Ok(()),
            Ok(g) => g.validate().map_err(|e| format!("from_json accepted an invalid graph: {e}")),
        }
    });
}
