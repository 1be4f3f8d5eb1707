//! Code generation for attention over a runtime key length `S` (`#[mugraph(dims(S = ..))]`):
//! the key tensor's runtime-sized dim is its last (strides computed in the kernel from the size),
//! the for-loop walks `S` in `ceil(n / tile)` iterations with the last one's loads predicated,
//! the running maximum and the sums of `exp` over a key tile skip the padded keys (masks), and
//! split-KV's grid over key ranges has `ceil(n / slab)` blocks whose parts the combine kernel
//! reads only where they exist. No GPU: the plan's marks, a snapshot, nvcc for sm_90a and sm_80, and the
//! search picking a µGraph for the S-sized program.
#![cfg(feature = "build")]

mod support;
use support::{attention_over_s, online_softmax, split_kv};

use std::time::Duration;

use mirage::codegen::{GeneratedProgram, KernelOptions, generate_sized, sized_support};
use mirage::cost::{Arch, estimate, estimate_sizes};
use mirage::dims::Dims;
use mirage::ir::{BlockOp, DType, KernelGraph, KernelOp, TensorDesc};
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage::search::ranges::{rank, rank_sizes};
use mirage::search::{Candidate, SearchConfig, attention, superoptimize};
use mirage_runtime::plan::{GridDim, LaunchPlan, PlanDim};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn generated(name: &str, g: &KernelGraph, dims: &Dims) -> Result<GeneratedProgram, Box<dyn std::error::Error>> {
    Ok(generate_sized(g, dims, name, &KernelOptions::default())?)
}

#[test]
fn split_kv_over_s_takes_the_key_length_at_launch() -> TestResult {
    let (g, dims) = split_kv()?;
    let out = generated("attn_sk", &g, &dims)?;
    let plan = LaunchPlan::from_json(&out.plan.to_json())?;
    assert_eq!(plan.dims, vec![PlanDim { name: "S".into(), lo: 1, hi: 1024 }]);
    // K is [heads, dim, S] (S last: its strides follow the size), V is [heads, S, dim].
    assert_eq!(plan.input_dims, vec![vec![None, None, None], vec![None, None, Some(0)], vec![None, Some(0), None]]);
    assert_eq!(plan.output_dims, vec![vec![None, None, None]]);
    // The per-range parts keep their layout at the upper bound (4 ranges): no marks.
    assert!(plan.buffers.iter().all(|b| b.dims.is_empty()), "{:?}", plan.buffers);
    let k0 = &plan.kernels[0];
    assert_eq!(k0.grid_dims, vec![None, Some(GridDim { dim: 0, tile: 256 }), None]);
    assert_eq!(k0.size_args, vec![0]);
    assert_eq!(plan.kernels[1].size_args, vec![0]);
    // At S = 257 two key ranges hold keys; at S = 1 one; at the upper bound all four.
    let at = |n: usize| -> Result<Vec<usize>, Box<dyn std::error::Error>> {
        let found = [
            TensorDesc::new(&[2, 1, 32], DType::Bf16),
            TensorDesc::new(&[2, 32, n], DType::Bf16),
            TensorDesc::new(&[2, n, 32], DType::Bf16),
        ];
        Ok(mirage_runtime::check_tensors_sized(&plan, &found)?)
    };
    assert_eq!(k0.config_at(&at(257)?)?.grid, (2, 2, 1));
    assert_eq!(k0.config_at(&at(1)?)?.grid, (2, 1, 1));
    assert_eq!(k0.config_at(&at(1024)?)?.grid, (2, 4, 1));
    assert_eq!(plan.outputs_at(&at(17)?), vec![TensorDesc::new(&[2, 1, 32], DType::Bf16)]);
    // Sizes outside the range or disagreeing between K and V are errors naming S.
    let bad = [
        TensorDesc::new(&[2, 1, 32], DType::Bf16),
        TensorDesc::new(&[2, 32, 17], DType::Bf16),
        TensorDesc::new(&[2, 18, 32], DType::Bf16),
    ];
    let e = mirage_runtime::check_tensors_sized(&plan, &bad).expect_err("K and V disagree").to_string();
    assert!(e.contains("S = 17") && e.contains("S = 18"), "{e}");
    let big = [
        TensorDesc::new(&[2, 1, 32], DType::Bf16),
        TensorDesc::new(&[2, 32, 1025], DType::Bf16),
        TensorDesc::new(&[2, 1025, 32], DType::Bf16),
    ];
    let e = mirage_runtime::check_tensors_sized(&plan, &big).expect_err("past the range").to_string();
    assert!(e.contains("S in 1..=1024"), "{e}");
    // The kernels: the key range's trip count, K's strides from the size, the running maximum
    // and the sums of exp masked, the combine reading only the parts that exist.
    let src = &out.kernels_source;
    for needle in [
        "const int iters = min(4, (max(n0 - by*256, 0) + 63) / 64);",
        "for (int it = 0; it < iters; ++it) {",
        // K (S contiguous) in 16-byte vectors when S is a multiple of 8 (rows aligned, no vector
        // straddles S) and K's base is 16-byte aligned, pipelined; otherwise the same 256 units
        // of 8 keys per stage through aligned-down windows, no element loop.
        "if (n0 % 8 == 0 && reinterpret_cast<uintptr_t>(in1) % 16 == 0) {",
        "if ((by*256 + (nit)*64 + (v % 8)*8) < n0) mirage::cp_async16(d, in1 + go);",
        "mirage::window_copy<8>(reinterpret_cast<__nv_bfloat16*>(smem + 128 + (nit % 4)*4608) + ((((v / 8) % 32))*72 + ((v % 8)*8)*1), in1 + go, min(max(n0 - (by*256 + (nit)*64 + (v % 8)*8), 0), 8), in1, in1 + (long long)2*32*n0);",
        // A K row's stride is the size: per unit, one row index and one key offset.
        "(long long)(0 + ((v / 8) % 32))*n0 + (long long)(by*256 + (nit)*64 + (v % 8)*8)*1;",
        "if ((by*256 + (it)*64 + r) < n0) { v = fmaxf(v, t4[(r)]); }",
        "if ((by*256 + (it)*64 + r) < n0) { v = v + t7[(r)]; }",
        "t7[((e % 64))] = (((by*256 + (it)*64 + (e % 64)) < n0) ? v7 : 0.0f);",
        "for (int r = 0; r < 4; r += 1) { if ((0 + r) < (((n0 + 255) / 256) * 1)) { v = fmaxf(v, t2[(r)]); } }",
    ] {
        assert!(src.contains(needle), "missing `{needle}` in\n{src}");
    }
    // No element loop over K is left: the fallback copies the vector path's units.
    assert!(!src.contains("for (int q_v = 0; q_v < 32; ++q_v) {"), "{src}");
    assert_eq!(
        src.matches("mirage::window_copy<8>(").count(),
        src.matches("if (n0 % 8 == 0 && reinterpret_cast<uintptr_t>(in1) % 16 == 0) {").count()
    );
    insta::assert_snapshot!(out.kernels_source);
    Ok(())
}

#[test]
fn the_device_window_copy_is_the_planned_formula() {
    // `mirage::window_copy` transliterates `planner::window::WindowPlan` (whose tests check it
    // against element copies): the chunk and shifts, the loads, the guard, the network, the masks.
    let lib = mirage::codegen::DEVICE_LIBRARY;
    for line in [
        "const unsigned b = static_cast<unsigned>(a & 15u);",
        "const bool need0 = vb > 0u, need1 = b + vb > 16u;",
        "const bool whole = (!need0 || (c >= l && c + 16u <= h)) && (!need1 || c + 32u <= h);",
        "for (int j = 0; j < 6; ++j) s2[j] = (q & 2u) ? w[j + 2] : w[j];",
        "for (int j = 0; j < 5; ++j) s1[j] = (q & 1u) ? s2[j + 1] : s2[j];",
        "const unsigned sel = 0x3210u + 0x1111u * r;",
        "const unsigned keep = vb > 4u * j ? min(vb - 4u * j, 4u) : 0u;",
        "o[j] = __byte_perm(s1[j], s1[j + 1], sel) & mask;",
    ] {
        assert!(lib.contains(line), "missing `{line}` in mirage::window_copy");
    }
}

#[test]
fn online_softmax_over_s_walks_the_keys_it_has() -> TestResult {
    let (g, dims) = online_softmax()?;
    let out = generated("attn_os", &g, &dims)?;
    assert_eq!(out.plan.kernels.len(), 1);
    assert!(out.plan.kernels[0].grid_dims.is_empty(), "the grid is over heads only");
    let src = &out.kernels_source;
    for needle in [
        "const int iters = min(16, (max(n0, 0) + 63) / 64);",
        // K's tile (S contiguous) is pipelined: 16-byte vectors when S is a multiple of 8 and K's
        // base is 16-byte aligned, predicated; window copies otherwise (a vector would straddle S
        // or start misaligned).
        "if (n0 % 8 == 0 && reinterpret_cast<uintptr_t>(in1) % 16 == 0) {",
        "if (((nit)*64 + (v % 8)*8) < n0) mirage::cp_async16(d, in1 + go);",
        // Otherwise the same units through aligned-down 16-byte windows: the keys left in the
        // unit as its valid count, the tensor's bounds (2·32·S elements) for the chunk guard.
        "min(max(n0 - ((nit)*64 + (v % 8)*8), 0), 8), in1, in1 + (long long)2*32*n0);",
        // V's rows past S are zero-filled beside the 16-byte copies.
        "< n0) mirage::cp_async16(d, in2 + go); else { *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u); }",
        "if (((it)*64 + r) < n0) { v = fmaxf(v, t4[(r)]); }",
    ] {
        assert!(src.contains(needle), "missing `{needle}` in\n{src}");
    }
    Ok(())
}

#[test]
fn s_sized_attention_kernels_compile_for_sm90a_and_sm80() -> TestResult {
    // Both copies of K (vectors, windows) in every kernel, for the H200 and for sm_80.
    for arch in ["sm_90a", "sm_80"] {
        let opts = CompileOptions { arch: Some(arch.to_string()), ..Default::default() };
        for (name, (g, dims)) in [("attn_sk", split_kv()?), ("attn_os", online_softmax()?)] {
            let out = generated(name, &g, &dims)?;
            assert!(out.kernels_source.contains("mirage::window_copy<8>("), "{name}");
            let cubin = compile_cubin(&out.source, name, &opts)?;
            assert!(cubin.bytes.starts_with(b"\x7fELF"), "{name} for {arch}: an ELF cubin");
        }
    }
    Ok(())
}

#[test]
fn the_search_picks_an_s_sized_attention_in_a_small_budget() -> TestResult {
    // bf16 at a test shape, S = 1..=1024: the search verifies over the range and chooses a
    // µGraph code generation writes; it is one of the fused forms (one key loop, masks).
    let (p, dims) = attention_over_s(2, 32, 1024);
    let cfg = SearchConfig {
        budget: Duration::from_secs(120),
        max_states: 200_000,
        dims: dims.clone(),
        offline: Some(false),
        ..SearchConfig::default()
    };
    let r = superoptimize(&p, &cfg, None)?;
    assert_eq!(r.best.verified, Some(true));
    sized_support(&r.best.graph, &dims, &KernelOptions::default())?;
    let out = generated("attn_best", &r.best.graph, &dims)?;
    assert!(out.kernels_source.contains("const int n0"), "{}", out.kernels_source);
    Ok(())
}

#[test]
fn the_issue_shape_has_code_at_runtime_sizes() -> TestResult {
    // 32 heads, head dim 128, bf16, S = 1..=32768: the online softmax (key tiles of 128) and
    // split-KV (16 ranges of 2048 keys, tiles of 128) are written and compile for sm_90a.
    let (p, dims) = attention_over_s(32, 128, 32768);
    let a = attention::recognize(&p).expect("recognized");
    // `MIRAGE_CODEGEN_DUMP=<dir>` writes each translation unit there (for `nvcc --resource-usage`).
    let dump = std::env::var_os("MIRAGE_CODEGEN_DUMP").map(std::path::PathBuf::from);
    for arch in ["sm_90a", "sm_80"] {
        let opts = CompileOptions { arch: Some(arch.to_string()), ..Default::default() };
        for (name, g) in [
            ("issue_os", attention::online_softmax(&p, &a, 1, 32768 / 128, 128)?),
            ("issue_sk", attention::split_kv(&p, &a, 16, 2048 / 128, 128)?),
        ] {
            sized_support(&g, &dims, &KernelOptions::default())?;
            let out = generated(name, &g, &dims)?;
            if let Some(dir) = &dump {
                std::fs::create_dir_all(dir)?;
                std::fs::write(dir.join(format!("{name}.cu")), &out.source)?;
            }
            assert!(out.kernels_source.contains("const int iters = min("), "{name}");
            assert!(out.kernels_source.contains("mirage::window_copy<8>("), "{name}");
            let cubin = compile_cubin(&out.source, name, &opts)?;
            assert!(cubin.bytes.starts_with(b"\x7fELF"), "{name} for {arch}: an ELF cubin");
        }
    }
    Ok(())
}

/// The two split-KV µGraphs of the issue's shape the ranking tests compare: 4 key ranges of 8192
/// (the cheapest at the upper bound) and 32 ranges of 1024, key tiles of 128 and 32.
fn issue_split_kv(p: &KernelGraph) -> Result<[KernelGraph; 2], Box<dyn std::error::Error>> {
    let a = attention::recognize(p).expect("recognized");
    Ok([attention::split_kv(p, &a, 4, 8192 / 128, 256)?, attention::split_kv(p, &a, 32, 1024 / 32, 256)?])
}

#[test]
fn the_cost_at_a_runtime_size_follows_the_launch_there() -> TestResult {
    let (p, dims) = attention_over_s(32, 128, 32768);
    let [wide, narrow] = issue_split_kv(&p)?;
    for g in [&wide, &narrow] {
        // At the upper bound, the launch is the block graph's own: the estimate is the search's.
        let at_hi = estimate_sizes(g, &dims, &[vec![32768]], &Arch::sm90())?;
        let plain = estimate(g, &Arch::sm90())?;
        assert!((at_hi[0].total_us - plain.total_us).abs() < 1e-6 * plain.total_us, "{} vs {}", at_hi[0], plain);
        assert_eq!(at_hi[0].kernels.len(), plain.kernels.len());
    }
    // At S = 4097, the 8192-key ranges give one block per head (32 blocks, 33 key tiles each);
    // the 1024-key ranges give 5 per head (160 blocks): fewer bytes, and the narrow one cheaper.
    let [w, n] = [&wide, &narrow].map(|g| estimate_sizes(g, &dims, &[vec![4097], vec![32768]], &Arch::sm90()));
    let (w, n) = (w?, n?);
    assert!(w[0].kernels[0].why.starts_with("grid [32, 1, 1] × 256 threads, F 33 "), "{}", w[0]);
    assert!(n[0].kernels[0].why.starts_with("grid [32, 5, 1] × 256 threads, F 32 "), "{}", n[0]);
    assert!(w[0].kernels[0].bytes < w[1].kernels[0].bytes / 7.0, "{} vs {}", w[0], w[1]);
    assert!(n[0].total_us < w[0].total_us, "at S = 4097: {} vs {}", n[0], w[0]);
    assert!(w[1].total_us < n[1].total_us, "at S = 32768 the wide ranges are the cheaper: {} vs {}", w[1], n[1]);
    Ok(())
}

#[test]
fn the_representative_sizes_are_the_ends_and_the_geometric_middle() -> TestResult {
    let (_, dims) = attention_over_s(2, 32, 32768);
    assert_eq!(rank_sizes(&dims), vec![vec![1], vec![181], vec![32768]]);
    assert_eq!(rank_sizes(&dims.bucket(&[(4097, 32768)])?), vec![vec![4097], vec![11587], vec![32768]]);
    assert_eq!(rank_sizes(&dims.bucket(&[(8, 8)])?), vec![vec![8]]);
    assert_eq!(rank_sizes(&dims.bucket(&[(8, 9)])?), vec![vec![8], vec![9]]);
    Ok(())
}

#[test]
fn candidates_over_a_range_are_ranked_by_their_worst_ratio() -> TestResult {
    let (p, dims) = attention_over_s(32, 128, 32768);
    let dims = dims.bucket(&[(4097, 32768)])?;
    let [wide, narrow] = issue_split_kv(&p)?;
    let candidate = |graph: KernelGraph| -> Result<Candidate, Box<dyn std::error::Error>> {
        Ok(Candidate { cost: estimate(&graph, &Arch::sm90())?, hash: graph.canonical_hash(), graph, verified: None })
    };
    let (wide_hash, narrow_hash) = (wide.canonical_hash(), narrow.canonical_hash());
    // The search's order: cheapest at the upper bound first.
    let mut cands = vec![candidate(wide.clone())?, candidate(narrow.clone())?];
    assert!(cands[0].cost.total_us < cands[1].cost.total_us);
    let note = rank(&mut cands, &dims, &Arch::sm90()).expect("a note for a ranged program");
    // Each candidate's worst ratio over the sizes, recomputed here: the first has the smaller.
    let sizes = rank_sizes(&dims);
    let costs: Vec<Vec<f64>> = [&wide, &narrow]
        .iter()
        .map(|g| Ok(estimate_sizes(g, &dims, &sizes, &Arch::sm90())?.iter().map(|r| r.total_us).collect()))
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let best: Vec<f64> = (0..sizes.len()).map(|i| costs[0][i].min(costs[1][i])).collect();
    let worst = |c: &[f64]| c.iter().zip(&best).map(|(x, b)| x / b).fold(0.0, f64::max);
    assert!(worst(&costs[1]) < worst(&costs[0]), "{costs:?}");
    assert_eq!(cands[0].hash, narrow_hash, "{note}");
    assert_eq!(cands[1].hash, wide_hash);
    assert!(note.contains("S = 4097; S = 11587; S = 32768"), "{note}");
    assert!(note.contains("the cheapest at the compile size would be"), "{note}");
    // A range of one size keeps the compile-size order, with no note.
    let mut kept = vec![candidate(wide)?, candidate(narrow)?];
    assert!(rank(&mut kept, &dims.bucket(&[(32768, 32768)])?, &Arch::sm90()).is_none());
    assert_eq!(kept[0].hash, wide_hash);
    Ok(())
}

#[test]
fn attention_candidates_walk_key_tiles_of_whole_lines() -> TestResult {
    // K is [heads, dim, S]: a key tile reads a segment of each of K's rows. Every candidate that
    // loops over the keys reads at least 128 bytes of each row per iteration (64 bf16 keys, 32
    // f32); a block without a loop may take any slab.
    for (dtype, elem, hi) in [("bf16", 2, 32768), ("f32", 4, 4096)] {
        let src = format!(
            "#[mugraph(dims(S = 1..={hi}))]
             fn attn(q: Tensor<{dtype}, 32, 1, 128>, k: Tensor<{dtype}, 32, 128, S>, v: Tensor<{dtype}, 32, S, 128>)
                 -> Tensor<{dtype}, 32, 1, 128>
             {{
                 softmax(q.matmul(k) * 0.088388346, 2).matmul(v)
             }}"
        );
        let p = mirage::lower::lower_source(&src)?.remove(0).graph;
        let cands = attention::candidates(&p, &SearchConfig::default());
        assert!(cands.len() >= 10, "{dtype}: {} candidates", cands.len());
        let mut looped = 0;
        for g in &cands {
            for node in g.nodes() {
                let KernelOp::Custom { block } = &node.op else { continue };
                for n in block.nodes() {
                    if let BlockOp::Input { input: 1, forloop_dim: Some(_), .. } = n.op
                        && block.forloop_range() > 1
                    {
                        let keys = *n.outputs[0].shape.last().expect("a tile has dims");
                        assert!(keys * elem >= attention::MIN_KEY_TILE_BYTES, "{dtype}: a key tile of {keys}");
                        looped += 1;
                    }
                }
            }
        }
        assert!(looped > 0, "{dtype}: no candidate loops over the keys");
    }
    Ok(())
}
