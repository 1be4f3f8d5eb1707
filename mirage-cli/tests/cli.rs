//! The `mirage` command end to end: every subcommand on small programs, and bad input (unreadable
//! files, functions that do not exist, malformed JSON, shapes that do not match) giving a clear
//! message and a non-zero exit status, never a panic.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use mirage::codegen::default_blocks::lower_to_blocks;
use mirage::lower::lower_source;
use predicates::prelude::*;
use predicates::str::contains;
use tempfile::TempDir;

/// Two small programs: an element-wise one (searched in well under a second) and a gated MLP.
const KERNELS: &str = r#"use mirage::prelude::*;

#[mugraph]
fn scale(x: Tensor<f32, 4, 8>) -> Tensor<f32, 4, 8> {
    x * 2.0
}

mod nn {
    #[mugraph]
    pub fn mlp(x: Tensor<f16, 16, 64>, w1: Tensor<f16, 64, 32>, w2: Tensor<f16, 64, 32>) -> Tensor<f16, 16, 32> {
        silu(x.matmul(w1)) * x.matmul(w2)
    }
}
"#;

/// A temporary package: `Cargo.toml` (its own workspace) and `src/kernels.rs`.
struct Package {
    dir: TempDir,
}

impl Package {
    fn new() -> Package {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("Cargo.toml"),
            "[workspace]\n\n[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        )
        .expect("write");
        std::fs::create_dir_all(dir.path().join("src")).expect("src");
        std::fs::write(dir.path().join("src/kernels.rs"), KERNELS).expect("write");
        Package { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn kernels(&self) -> String {
        self.path("src/kernels.rs").display().to_string()
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::write(&p, text).expect("write");
        p
    }
}

fn mirage() -> Command {
    let mut c = Command::cargo_bin("mirage").expect("the mirage binary");
    c.env_remove("MIRAGE_OFFLINE").env_remove("MIRAGE_CUDA_ARCH");
    c
}

/// A clean failure: the exit status, the message, and no panic.
fn fails(cmd: &mut Command, code: i32, message: &str) {
    cmd.assert().code(code).stderr(contains(message)).stderr(contains("panicked").not());
}

/// Our JSON of a program written in the DSL (its kernel graph lowered to default block graphs).
fn mugraph_json(source: &str) -> String {
    let program = lower_source(source).expect("lowers").remove(0);
    lower_to_blocks(&program.graph).expect("default block graphs").to_json()
}

#[test]
fn show_prints_the_program_the_choice_and_pictures() {
    let pkg = Package::new();
    let target = format!("{}::scale", pkg.kernels());
    let (dot, svg) = (pkg.path("out/scale.dot"), pkg.path("out/scale.svg"));
    mirage()
        .args(["show", &target, "--dot"])
        .arg(&dot)
        .arg("--svg")
        .arg(&svg)
        .assert()
        .success()
        .stdout(contains("program `scale`"))
        .stdout(contains("inputs: x [4, 8] f32"))
        .stdout(contains("chosen µGraph"))
        .stdout(contains("cost:"))
        .stdout(contains("top candidates"));
    let dot_text = std::fs::read_to_string(&dot).expect("dot written");
    assert!(dot_text.starts_with("digraph mugraph {") && dot_text.contains("cluster_k0"), "{dot_text}");
    let svg_text = std::fs::read_to_string(&svg).expect("svg written");
    assert!(svg_text.contains("<svg") && svg_text.contains("kernel k0"), "{svg_text}");
    // The search stored its answer in the workspace's cache; the next show reads it offline.
    assert!(pkg.path(".mirage").read_dir().expect("cache dir").count() == 1);
    mirage().args(["show", &target, "--offline"]).assert().success().stdout(contains("from the search cache"));
}

#[test]
fn show_without_a_function_shows_every_one() {
    let pkg = Package::new();
    mirage()
        .args(["show", &pkg.kernels(), "--cache-dir"])
        .arg(pkg.path("cache"))
        .assert()
        .success()
        .stdout(contains("program `scale`"))
        .stdout(contains("program `nn::mlp`"));
}

#[test]
fn show_rejects_bad_targets() {
    let pkg = Package::new();
    fails(mirage().args(["show", "no/such/file.rs::f"]), 2, "cannot read the file");
    fails(
        mirage().args(["show", &format!("{}::nope", pkg.kernels())]),
        2,
        "no #[mugraph] function `nope`; the file has: scale, nn::mlp",
    );
    let txt = pkg.write("notes.txt", "hello");
    fails(mirage().arg("show").arg(&txt), 2, "expected a Rust source file");
    let empty = pkg.write("src/empty.rs", "fn main() {}\n");
    fails(mirage().arg("show").arg(&empty), 2, "no #[mugraph] function in this file");
    let broken =
        pkg.write("src/broken.rs", "#[mugraph]\nfn f(x: Tensor<f32, 4>) -> Tensor<f32, 4> { frobnicate(x) }\n");
    fails(mirage().arg("show").arg(&broken), 2, "broken.rs:2:");
    fails(mirage().args(["show", &pkg.kernels(), "--svg", "x.svg"]), 2, "name one as");
    fails(
        mirage()
            .args(["show", &format!("{}::scale", pkg.kernels()), "--offline", "--cache-dir"])
            .arg(pkg.path("empty-cache")),
        2,
        "MIRAGE_OFFLINE=1",
    );
    fails(mirage().args(["show", &format!("{}::scale", pkg.kernels()), "--arch", "sm_9x"]), 2, "sm_9x");
}

#[test]
fn search_prints_a_summary_table() {
    let pkg = Package::new();
    mirage()
        .args(["search", &format!("{}::scale", pkg.kernels()), "--max-kernels", "1", "--budget", "20", "--top", "3"])
        .assert()
        .success()
        .stdout(contains("| states | pruned |"))
        .stdout(contains("| # | kernels | estimated µs | verdict | hash |"))
        .stdout(contains("equivalent (chosen)"))
        .stdout(contains("chosen µGraph"));
    // `search` does not touch the cache.
    assert!(!pkg.path(".mirage").exists());
}

/// A small attention over a runtime key length `S`, built as two size buckets.
const ATTN_OVER_S_BUCKETS: &str = "#[mugraph(dims(S = 1..=256), buckets(S = [64, 256]))]
fn attn(q: Tensor<bf16, 2, 1, 32>, k: Tensor<bf16, 2, 32, S>, v: Tensor<bf16, 2, S, 32>) -> Tensor<bf16, 2, 1, 32> {
    softmax(q.matmul(k) * 0.17677669, 2).matmul(v)
}
";

#[test]
fn search_searches_a_runtime_sized_program_over_its_ranges_per_bucket() {
    // Two buckets of a small attention over S: one search each, over its sub-range, ranked at
    // the bucket's representative sizes (the note names them).
    let pkg = Package::new();
    let file = pkg.write("src/attn.rs", ATTN_OVER_S_BUCKETS);
    mirage()
        .args(["search", &format!("{}::attn", file.display()), "--budget", "20", "--top", "3"])
        .assert()
        .success()
        .stdout(contains("search of `attn bucket 0 [(1, 64)]`"))
        .stdout(contains("search of `attn bucket 1 [(65, 256)]`"))
        .stdout(contains("ranked over the declared ranges at S = 1; S = 8; S = 64"))
        .stdout(contains("ranked over the declared ranges at S = 65; S = 129; S = 256"));
    assert!(!pkg.path(".mirage").exists());
}

#[test]
fn show_and_emit_give_what_the_build_builds_for_each_size_bucket() {
    // Each bucket's µGraph as the build chooses it (over the bucket's range), and the CUDA the
    // build compiles for it: kernels taking the key length at launch, named per bucket.
    let pkg = Package::new();
    let file = pkg.write("src/attn.rs", ATTN_OVER_S_BUCKETS);
    let target = format!("{}::attn", file.display());
    mirage()
        .args(["show", &target])
        .assert()
        .success()
        .stdout(contains("size bucket 0 [(1, 64)]: S = 1..=64"))
        .stdout(contains("size bucket 1 [(65, 256)]: S = 65..=256"))
        .stdout(contains("ranked over the declared ranges at S = 65; S = 129; S = 256"));
    mirage()
        .args(["emit", "--cuda", "--offline", &target])
        .assert()
        .success()
        .stdout(contains("// size bucket 0: S = 1..=64"))
        .stdout(contains("// size bucket 1: S = 65..=256"))
        .stdout(contains("-b1_k0(").or(contains("_b1_k0(")))
        .stdout(contains("const int n0)"));
    fails(
        mirage().args(["emit", "--triton", "--offline", &target]),
        2,
        "the Triton emitter writes static programs only",
    );
}

#[test]
fn search_rejects_bad_limits() {
    let pkg = Package::new();
    let t = format!("{}::scale", pkg.kernels());
    fails(mirage().args(["search", &t, "--threads", "33"]), 2, "--threads: 33 is not a multiple of 32");
    fails(mirage().args(["search", &t, "--max-kernels", "0"]), 2, "--max-kernels must be at least 1");
    fails(mirage().args(["search", &t, "--budget", "0"]), 2, "--budget must be a positive number");
    fails(mirage().args(["search", &t, "--forloop-ranges", "4,0"]), 2, "every range must be at least 1");
    fails(mirage().args(["search", &pkg.kernels()]), 2, "has 2 #[mugraph] functions: name one");
    fails(mirage().args(["search", &format!("{}::missing", pkg.kernels())]), 2, "no #[mugraph] function `missing`");
    fails(mirage().args(["search", "missing.rs::scale"]), 2, "missing.rs: cannot read the file");
}

#[test]
fn verify_says_equivalent_or_gives_a_witness() {
    let pkg = Package::new();
    let program = format!("{}::scale", pkg.kernels());
    let same = pkg.write("same.json", &mugraph_json(KERNELS));
    mirage()
        .args(["verify", &program])
        .arg(&same)
        .arg("--float-check")
        .assert()
        .success()
        .stdout(contains("equivalent to `scale` (fingerprints, 2 trials), and the f32 reference agrees"));
    let other = "#[mugraph]\nfn s(x: Tensor<f32, 4, 8>) -> Tensor<f32, 4, 8> { x * 3.0 }\n";
    let different = pkg.write("different.json", &mugraph_json(other));
    mirage()
        .args(["verify", &program])
        .arg(&different)
        .assert()
        .code(1)
        .stdout(contains("NOT equivalent to `scale`"))
        .stdout(contains("at index"))
        .stderr(contains("1 of 1 candidate(s) do not compute `scale`"));
    // A program may be our JSON too.
    mirage().arg("verify").arg(&same).arg(&same).assert().success();
}

#[test]
fn verify_rejects_bad_input() {
    let pkg = Package::new();
    let program = format!("{}::scale", pkg.kernels());
    let shapes = "#[mugraph]\nfn s(x: Tensor<f32, 8, 4>) -> Tensor<f32, 8, 4> { x * 2.0 }\n";
    let wrong_shapes = pkg.write("shapes.json", &mugraph_json(shapes));
    mirage()
        .args(["verify", &program])
        .arg(&wrong_shapes)
        .assert()
        .code(1)
        .stdout(contains("signatures differ: the program takes inputs ([4, 8]:f32), the candidate takes ([8, 4]:f32)"));
    let malformed = pkg.write("malformed.json", "{\"format\": ");
    fails(mirage().args(["verify", &program]).arg(&malformed), 2, "malformed.json: not valid JSON");
    let foreign = pkg.write("foreign.json", "{\"format\": \"something-else\"}");
    fails(mirage().args(["verify", &program]).arg(&foreign), 2, "unknown format \"something-else\"");
    let object = pkg.write("object.json", "{\"nodes\": []}");
    fails(mirage().args(["verify", &program]).arg(&object), 2, "expected a µGraph of mirage-rs");
    // A µGraph whose recorded input shape disagrees with its operators.
    let mut doc: serde_json::Value = serde_json::from_str(&mugraph_json(KERNELS)).expect("json");
    doc["graph"]["nodes"][0]["op"]["desc"]["shape"] = serde_json::json!([4, 9]);
    let bad_graph = pkg.write("bad.json", &doc.to_string());
    fails(mirage().args(["verify", &program]).arg(&bad_graph), 2, "bad.json:");
    fails(mirage().args(["verify", &program, "no-such.json"]), 2, "cannot read no-such.json");
    fails(mirage().args(["verify", "no-such-program.json"]).arg(&bad_graph), 2, "cannot read no-such-program.json");
}

fn lora_golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mirage/goldens/lora.json")
}

const LORA: &str = "#[mugraph]\nfn lora(x: Tensor<f16, 16, 256>, w: Tensor<f16, 256, 4096>, a: Tensor<f16, 256, 16>, b: Tensor<f16, 16, 4096>) -> Tensor<f16, 16, 4096> {\n    x.matmul(w) + x.matmul(a).matmul(b)\n}\n";

#[test]
fn verify_and_import_read_mirage_json() {
    let pkg = Package::new();
    let lora = pkg.write("src/lora.rs", LORA);
    let program = format!("{}::lora", lora.display());
    mirage()
        .args(["verify", &program])
        .arg(lora_golden())
        .assert()
        .success()
        .stdout(contains("Mirage candidate 0: equivalent to `lora`"))
        .stdout(contains("Mirage candidate 3: equivalent to `lora`"));
    mirage()
        .args(["import"])
        .arg(lora_golden())
        .args(["--program", &program])
        .assert()
        .success()
        .stdout(contains("4 µGraph(s) from"))
        .stdout(contains("| 0 | 1 | equivalent |"))
        .stdout(contains("4 equivalent; the cheapest by the cost model is #"));
}

#[test]
fn import_reports_candidates_of_another_program() {
    let pkg = Package::new();
    // Mirage's LoRA µGraphs checked against a program of other shapes: none computes it.
    let other = pkg.write("src/other.rs", &LORA.replace("4096", "2048"));
    mirage()
        .arg("import")
        .arg(lora_golden())
        .args(["--program", &format!("{}::lora", other.display())])
        .assert()
        .code(1)
        .stdout(contains("NOT equivalent: signatures differ"))
        .stderr(contains("none of the 4 µGraph(s) computes `lora`"));
    let malformed = pkg.write("m.json", "[{\"op_type\": ");
    fails(
        mirage().arg("import").arg(&malformed).args(["--program", &format!("{}::lora", other.display())]),
        2,
        "not valid JSON",
    );
    let not_mirage = pkg.write("n.json", "[[{\"op_type\": \"kn_bogus\"}]]");
    fails(
        mirage().arg("import").arg(&not_mirage).args(["--program", &format!("{}::lora", other.display())]),
        2,
        "importing Mirage's µGraphs",
    );
    fails(mirage().arg("import").arg(lora_golden()).args(["--program", "nope.rs::lora"]), 2, "cannot read the file");
}

#[test]
fn prepare_fills_then_checks_the_cache() {
    let pkg = Package::new();
    let manifest = pkg.path("Cargo.toml");
    // Keep the package small: one function. A file that only mentions #[mugraph] is skipped.
    pkg.write("src/kernels.rs", &KERNELS[..KERNELS.find("mod nn").expect("mod nn")]);
    pkg.write("src/main.rs", "// Kernels are #[mugraph] functions in kernels.rs.\nfn main() {}\n");
    mirage()
        .args(["prepare", "--check", "--manifest-path"])
        .arg(&manifest)
        .assert()
        .code(1)
        .stdout(contains("FAILED"))
        .stdout(contains("MIRAGE_OFFLINE=1"))
        .stderr(contains("1 of 1 function(s) have no usable cache entry: run `mirage prepare` and commit the cache"));
    mirage()
        .args(["prepare", "--manifest-path"])
        .arg(&manifest)
        .assert()
        .success()
        .stdout(contains("searched"))
        .stdout(contains("kernels.rs::scale"));
    mirage()
        .args(["prepare", "--check", "--manifest-path"])
        .arg(&manifest)
        .assert()
        .success()
        .stdout(contains("ok       "))
        .stdout(contains("cached µGraph verified"))
        .stdout(contains("the cache is ready for offline builds"));
    // Run from inside the package, without --manifest-path.
    mirage().current_dir(pkg.path("src")).args(["prepare", "--check"]).assert().success();
}

#[test]
fn prepare_rejects_bad_packages() {
    let pkg = Package::new();
    fails(mirage().args(["prepare", "--manifest-path"]).arg(pkg.path("nope/Cargo.toml")), 2, "no such manifest");
    pkg.write("src/kernels.rs", "#[mugraph]\nfn f(x: Tensor<f32, 4>) -> Tensor<f32, 4> { x +* 2.0 }\n");
    fails(mirage().args(["prepare", "--manifest-path"]).arg(pkg.path("Cargo.toml")), 2, "kernels.rs:2:");
    pkg.write("src/kernels.rs", "fn main() {}\n");
    fails(
        mirage().args(["prepare", "--manifest-path"]).arg(pkg.path("Cargo.toml")),
        2,
        "no .rs file with #[mugraph] functions",
    );
}

#[test]
fn emit_prints_cuda_or_triton() {
    let pkg = Package::new();
    let target = format!("{}::nn::mlp", pkg.kernels());
    mirage()
        .args(["emit", "--cuda", &target])
        .assert()
        .success()
        .stdout(contains("__global__"))
        .stdout(contains("mlp_"));
    let out = pkg.path("mlp.py");
    mirage().args(["emit", "--triton", &target, "--offline", "-o"]).arg(&out).assert().success();
    let py = std::fs::read_to_string(&out).expect("written");
    assert!(py.contains("@triton.jit") && py.contains("def launch(x, w1, w2):"), "{py}");
    fails(mirage().args(["emit", &target]), 2, "--cuda");
    fails(mirage().args(["emit", "--cuda", "--triton", &target]), 2, "cannot be used with");
    fails(mirage().args(["emit", "--triton", &pkg.kernels()]), 2, "name one as");
    fails(mirage().args(["emit", "--cuda", "no/such.rs::mlp"]), 2, "cannot read the file");
    fails(
        mirage().args(["emit", "--cuda", &format!("{}::nn::other", pkg.kernels())]),
        2,
        "no #[mugraph] function `nn::other`",
    );
}
