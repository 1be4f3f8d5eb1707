//! The Triton backend: snapshots of generated modules for a few small graphs, every golden,
//! benchmark and coverage µGraph generated and compiled by Python (`py_compile`: the syntax; no
//! Triton needed), and the unsupported constructs' errors. Running the modules against the CPU
//! reference needs a GPU: `scripts/triton_check.py`.
#![cfg(feature = "build")]

use std::path::{Path, PathBuf};

use mirage::cache::Cache;
use mirage::ir::{AccKind, BlockGraph, DType, KernelGraph, TensorDesc};
use mirage::search::SearchConfig;
use mirage::testing::benchmarks::benchmark_set;
use mirage::testing::programs::{coverage_cases, golden_cases};
use mirage::triton::{TritonError, generate};

fn coverage(case: &str, dtype: DType) -> KernelGraph {
    coverage_cases(dtype)
        .expect("coverage graphs build")
        .into_iter()
        .find(|(n, _)| n == case)
        .unwrap_or_else(|| panic!("no coverage case {case}"))
        .1
}

#[test]
fn snapshot_gated_mlp_small_f16() {
    let g = mirage::testing::programs::gated_mlp(8, 64, 32, DType::F16).expect("builds");
    let names = ["x".to_string(), "w1".into(), "w2".into()];
    insta::assert_snapshot!(generate(&g, "gated_mlp", Some(&names)).expect("generates"));
}

#[test]
fn snapshot_online_softmax_f16() {
    let g = coverage("online_softmax_rescale_pair", DType::F16);
    insta::assert_snapshot!(generate(&g, "online_softmax", None).expect("generates"));
}

#[test]
fn snapshot_in_loop_reductions_rms_concat_bf16() {
    let g = coverage("in_loop_reductions_rms_concat", DType::Bf16);
    insta::assert_snapshot!(generate(&g, "reductions", None).expect("generates"));
}

#[test]
fn snapshot_accumulator_sum_to_f32() {
    let g = coverage("accumulator_acc_sum_to_8_", DType::F32);
    insta::assert_snapshot!(generate(&g, "sum_to", None).expect("generates"));
}

/// The chosen µGraph of every benchmark program, from the committed search cache (read, not
/// re-verified: the build and `mirage prepare --check` verify).
fn chosen_benchmarks() -> Vec<(String, KernelGraph)> {
    let cache = Cache::at_workspace(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let cfg = SearchConfig::default();
    benchmark_set()
        .expect("benchmarks build")
        .into_iter()
        .map(|b| {
            let key = cfg.cache_key(&b.program);
            let (_, graph) = cache
                .load(&key)
                .unwrap_or_else(|e| panic!("{}: {e}", b.name))
                .unwrap_or_else(|| panic!("{}: no entry in {}: run `mirage prepare`", b.name, cache.dir().display()));
            (b.name.to_string(), graph)
        })
        .collect()
}

/// Every µGraph the GPU check runs: benchmark choices, golden programs and candidates, coverage.
fn every_mugraph() -> Vec<(String, KernelGraph)> {
    let mut all = chosen_benchmarks();
    for case in golden_cases() {
        all.extend(case.named_graphs().expect("golden graphs import"));
    }
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let cases = coverage_cases(dtype).expect("coverage graphs build");
        all.extend(cases.into_iter().map(|(n, g)| (format!("coverage_{}_{n}", dtype.name()), g)));
    }
    all
}

fn python() -> PathBuf {
    let py = PathBuf::from(std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into()));
    let found = std::process::Command::new(&py).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "{} not found: scripts/setup.sh installs python3 (or set PYTHON)", py.display());
    py
}

#[test]
fn every_generated_module_compiles_in_python() {
    let dir = std::env::temp_dir().join(format!("mirage-triton-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let all = every_mugraph();
    let mut files = Vec::new();
    for (name, g) in &all {
        let src = generate(g, name, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(src.contains("@triton.jit") && src.contains("\ndef launch("), "{name}");
        let kernels = mirage::codegen::default_blocks::lower_to_blocks(g).expect("lowers").num_kernels();
        assert_eq!(src.matches("@triton.jit").count(), kernels, "{name}: one @triton.jit per kernel");
        let file = dir.join(format!("{}.py", name.replace('.', "_")));
        std::fs::write(&file, src).expect("write");
        files.push(file);
    }
    let script = "import py_compile, sys\nfor f in sys.argv[1:]:\n    py_compile.compile(f, doraise=True)\nprint(len(sys.argv) - 1)";
    let out = std::process::Command::new(python()).arg("-c").arg(script).args(&files).output().expect("python runs");
    assert!(out.status.success(), "py_compile failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let compiled: usize = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a count");
    assert_eq!(compiled, all.len());
    // 11 benchmark programs, 9 golden programs and their 181 Mirage µGraphs, the coverage set.
    assert!(all.len() >= 11 + 9 + 181, "{}", all.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn launcher_names_and_checks_its_parameters() {
    let g = mirage::testing::programs::gated_mlp(8, 64, 32, DType::F16).expect("builds");
    // Python keywords and the module's own names are renamed; duplicates get distinct names.
    let names = ["lambda".to_string(), "torch".into(), "lambda".into()];
    let src = generate(&g, "mlp", Some(&names)).expect("generates");
    assert!(src.contains("def launch(lambda_, torch_, lambda__):"), "{src}");
    assert!(src.contains("_device = _check(lambda_, \"lambda_\", (8, 64), (64, 1), torch.float16, None)"), "{src}");
    let e = generate(&g, "mlp", Some(&names[..2])).expect_err("two names for three inputs");
    assert!(e.to_string().contains("2 input names given for a program of 3 inputs"), "{e}");
}

#[test]
fn strided_inputs_and_outputs_keep_their_layouts() {
    let mut g = KernelGraph::new();
    let x = g.input_strided(&[12, 40], &[1, 12], DType::F16).expect("input");
    let w = g.input(&[40, 24], DType::F16).expect("input");
    let y = g.matmul(x, w).expect("matmul");
    g.output(y, Some(vec![1, 12])).expect("output");
    g.output(y, None).expect("output");
    let src = generate(&g, "strided", None).expect("generates");
    assert!(src.contains("_check(x0, \"x0\", (12, 40), (1, 12), torch.float16, None)"), "{src}");
    assert!(src.contains("_out0 = torch.empty_strided((12, 24), (1, 12), dtype=torch.float16"), "{src}");
    // The same tensor returned twice: the second is a copy in its own layout.
    assert!(
        src.contains("_out1 = torch.empty_strided((12, 24), (24, 1)") && src.contains("_out1.copy_(_out0)"),
        "{src}"
    );
    assert!(src.contains("return (_out0, _out1)"), "{src}");
}

#[test]
fn tiles_beyond_triton_block_limits_are_a_clear_error() {
    // One block reading a whole [2048, 1024] tensor: 2^21 elements in one tile.
    let desc = TensorDesc::new(&[2048, 1024], DType::F32);
    let mut bg = BlockGraph::new(vec![desc], [1, 1, 1], 128, 1).expect("block graph");
    let t = bg.input(0, [None, None, None], None).expect("iterator");
    let a = bg.accum(AccKind::Sum, &[t]).expect("accumulator");
    bg.output(a, [None, None, None]).expect("saver");
    let mut g = KernelGraph::new();
    let x = g.input(&[2048, 1024], DType::F32).expect("input");
    let outs = g.custom(&[x], bg).expect("custom");
    g.output(outs[0], None).expect("output");
    let e = generate(&g, "huge", None).expect_err("too large for one Triton block");
    assert!(matches!(e, TritonError::Unsupported(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("huge_k0") && msg.contains("[2048, 1024]") && msg.contains("at most 1048576"), "{msg}");
}
