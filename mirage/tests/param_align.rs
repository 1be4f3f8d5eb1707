//! The pointer alignment a launch plan records per kernel argument (`KernelLaunch::arg_align`),
//! derived from the kernels' copies: exact values for a static gated MLP and the S-sized
//! attention (whose K, copied in guarded vectors, needs only its element's alignment: the guard
//! checks its base), the launcher's check on those plans, and the committed search-cache entries
//! (which record no alignment: it is derived when the plan is generated) still giving plans that
//! carry it. No GPU.
#![cfg(feature = "build")]

mod support;
use support::{gated_mlp, online_softmax, split_kv};

use std::path::Path;

use mirage::cache::CacheEntry;
use mirage::codegen::{KernelOptions, generate, generate_sized};
use mirage_runtime::check_pointers;
use mirage_runtime::plan::{ArgRef, LaunchPlan};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Per kernel, its arguments and their recorded alignments.
type Recorded = Vec<(Vec<ArgRef>, Vec<usize>)>;

/// `(args, alignments)` of every kernel of `plan`, after a JSON round trip.
fn recorded(plan: &LaunchPlan) -> Result<Recorded, Box<dyn std::error::Error>> {
    let plan = LaunchPlan::from_json(&plan.to_json())?;
    Ok(plan.kernels.iter().map(|k| (k.args.clone(), k.arg_align.clone())).collect())
}

#[test]
fn a_static_gated_mlp_needs_its_vectors_alignment() -> TestResult {
    use ArgRef::{Input, Output};
    let g = generate(&gated_mlp(8, 256)?, "gmlp", &KernelOptions::default())?;
    // x's 16-row tiles of 128 halves and the weights' 8-column tiles (16 bytes a row) are copied
    // in 16-byte vectors; y is stored element by element.
    assert_eq!(recorded(&g.plan)?, vec![(vec![Input(0), Input(1), Input(2), Output(0)], vec![16, 16, 16, 2])]);
    let g = generate(&gated_mlp(4, 128)?, "gmlp4", &KernelOptions::default())?;
    // 4 columns of halves: 8 bytes a row, 8-byte vectors.
    assert_eq!(recorded(&g.plan)?, vec![(vec![Input(0), Input(1), Input(2), Output(0)], vec![16, 8, 8, 2])]);

    // The launcher's check on these plans: x 2 bytes past a 16-byte boundary is an error naming
    // x; w1 8 bytes past passes in the narrow program only; the output may start anywhere its
    // element does.
    let wide = generate(&gated_mlp(8, 256)?, "gmlp", &KernelOptions::default())?.plan;
    let e = check_pointers("gmlp", &wide, [&[0x1002, 0x2000, 0x3000], &[0x4000], &[]]).expect_err("x misaligned");
    let e = e.to_string();
    assert!(e.starts_with("`gmlp`: parameter `input 0`: expected a device pointer aligned to 16 bytes"), "{e}");
    assert!(e.contains("found 0x1002, aligned to 2 bytes: copy the tensor into a fresh allocation"), "{e}");
    let e = check_pointers("gmlp", &wide, [&[0x1000, 0x2008, 0x3000], &[0x4000], &[]]).expect_err("w1 at 8");
    assert!(e.to_string().contains("parameter `input 1`"), "{e}");
    check_pointers("gmlp", &g.plan, [&[0x1000, 0x2008, 0x3008], &[0x4002], &[]]).expect("the narrow program");
    check_pointers("gmlp", &wide, [&[0x1000, 0x2000, 0x3000], &[0x4002], &[]]).expect("outputs need 2");
    Ok(())
}

#[test]
fn the_s_sized_attention_needs_only_elements_of_k() -> TestResult {
    use ArgRef::{Buffer, Input, Output};
    // Split-KV: kernel 0 reads q (one row of 32 bf16 per head: 16-byte vectors), K through the
    // guarded copy (2: the guard checks K's base) and V's key tiles (rows of 32 bf16: 16); it
    // writes the per-range parts (f32 buffers). Kernel 1 combines the parts.
    let (g, dims) = split_kv()?;
    let sk = generate_sized(&g, &dims, "attn_sk", &KernelOptions::default())?;
    let kernels = recorded(&sk.plan)?;
    assert_eq!(kernels.len(), 2, "{kernels:?}");
    assert_eq!(kernels[0].0[..3], [Input(0), Input(1), Input(2)]);
    assert_eq!(kernels[0].1[..3], [16, 2, 16], "{kernels:?}");
    for (args, align) in &kernels {
        for (a, &n) in args.iter().zip(align) {
            if matches!(a, Output(_)) {
                assert_eq!(n, 2, "the bf16 output is stored element by element: {kernels:?}");
            }
            if matches!(a, Buffer(_)) {
                assert!(n <= 16, "{kernels:?}");
            }
        }
    }
    // K 2 bytes past alignment passes (windows); q or V there is an error.
    let ptrs = |q: u64, k: u64, v: u64| [q, k, v];
    let bufs: Vec<u64> = (0..sk.plan.buffers.len() as u64).map(|b| 0x10000 * (b + 1)).collect();
    check_pointers("attn", &sk.plan, [&ptrs(0x1000, 0x2002, 0x3000), &[0x4000], &bufs]).expect("K misaligned");
    let e = check_pointers("attn", &sk.plan, [&ptrs(0x1000, 0x2002, 0x3002), &[0x4000], &bufs]).expect_err("V");
    assert!(e.to_string().contains("parameter `input 2`: expected a device pointer aligned to 16 bytes"), "{e}");

    // Online softmax: one kernel, the same for q, K and V.
    let (g, dims) = online_softmax()?;
    let os = generate_sized(&g, &dims, "attn_os", &KernelOptions::default())?;
    let kernels = recorded(&os.plan)?;
    assert_eq!(kernels, vec![(vec![Input(0), Input(1), Input(2), Output(0)], vec![16, 2, 16, 2])]);
    // The kernels check K's base beside the size before its vector copies.
    for src in [&sk.kernels_source, &os.kernels_source] {
        assert!(src.contains("if (n0 % 8 == 0 && reinterpret_cast<uintptr_t>(in1) % 16 == 0) {"), "{src}");
        assert!(!src.contains("if (n0 % 8 == 0) {"), "{src}");
    }
    Ok(())
}

/// The committed search-cache entries record µGraphs, not alignments: each still loads, and the
/// plan generated from it records one alignment per argument of every kernel, each at least
/// the argument's element size and at most 16.
#[test]
fn committed_cache_entries_still_load_and_give_recorded_alignments() -> TestResult {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".mirage");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() > 10, "{} entries in {}", files.len(), dir.display());
    let mut checked = 0;
    for path in &files {
        let text = std::fs::read_to_string(path)?;
        assert!(!text.contains("arg_align"), "{}", path.display());
        let entry: CacheEntry = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let graph = entry.graph().map_err(|e| format!("{}: {e}", path.display()))?;
        // Entries of programs with runtime-sized dims need their dims to generate; the static
        // ones generate as they are.
        let Ok(g) = generate(&graph, "cached", &KernelOptions::default()) else { continue };
        let plan = LaunchPlan::from_json(&g.plan.to_json())?;
        for k in &plan.kernels {
            assert_eq!(k.arg_align.len(), k.args.len(), "{}: kernel {}", path.display(), k.name);
            for (a, &n) in k.args.iter().zip(&k.arg_align) {
                let es = match *a {
                    ArgRef::Input(i) => plan.inputs[i].dtype.size_bytes(),
                    ArgRef::Output(i) => plan.outputs[i].dtype.size_bytes(),
                    ArgRef::Buffer(i) => plan.buffers[i].desc.dtype.size_bytes(),
                };
                assert!(n >= es && n <= 16 && n.is_power_of_two(), "{}: {} arg {a:?}: {n}", path.display(), k.name);
                if matches!(a, ArgRef::Output(_)) {
                    assert_eq!(n, es, "{}: outputs are stored element by element", path.display());
                }
            }
        }
        checked += 1;
    }
    assert!(checked > 10, "only {checked} entries generated");
    Ok(())
}
