#![cfg(feature = "build")]
//! The resident kernel's generated CUDA compiles with nvcc for sm_90a (nvcc from the Python
//! wheels here), and its tables say what the compiler decided.

use mirage::codegen::CodegenError;
use mirage::mpk::emit::{ResidentKernel, emit, generate};
use mirage::mpk::testmode::{cases, overhead_graphs};
use mirage::mpk::{Compiled, MpkOptions, StepGraph, compile};
use mirage::nvcc::{CompileOptions, compile_cubin};

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn no_bodies(
    _: &mirage::ir::BlockGraph,
    name: &str,
    _: &mirage::codegen::KernelOptions,
) -> Result<mirage::codegen::KernelSource, CodegenError> {
    Err(CodegenError::Unsupported(format!("task body `{name}`: not expected in a graph of built-in tasks")))
}

/// Compiles and emits a graph of built-in tasks (asking for a task body is an error).
fn builtin_kernel(g: &StepGraph, workers: usize) -> (Compiled, ResidentKernel) {
    let c =
        compile(g, &MpkOptions { workers, ..MpkOptions::default() }).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    let k = emit(&c, &no_bodies).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    (c, k)
}

fn nvcc(k: &ResidentKernel) {
    let opts = CompileOptions { arch: Some("sm_90a".into()), ..Default::default() };
    let cubin = compile_cubin(&k.source, &k.kernel, &opts).unwrap_or_else(|e| panic!("{}: {e}", k.kernel));
    assert!(cubin.bytes.starts_with(b"\x7fELF"), "{}: not an ELF cubin", k.kernel);
}

#[test]
fn the_resident_kernel_of_every_test_graph_compiles() -> R {
    for case in cases()? {
        let g = &case.graph;
        let c = compile(g, &MpkOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
        let k = generate(&c).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
        let head = format!("extern \"C\" __global__ void __launch_bounds__(256, 1) {}(const mpk::Params p)", k.kernel);
        assert!(k.source.contains(&head), "{}", g.name());
        assert!(k.source.contains(&format!("static __device__ const mpk::Task mpk_tasks[{}]", c.tasks.len() + 1)));
        // one task body per distinct block graph, each a device function of the tile index
        let blocks: std::collections::HashSet<_> = c
            .graph
            .ops()
            .iter()
            .filter_map(|o| match &o.kind {
                mirage::mpk::OpKind::Block(bg) => Some(bg.as_ref()),
                _ => None,
            })
            .collect();
        assert_eq!(k.source.matches("__device__ __noinline__ void mpk_body").count(), blocks.len(), "{}", g.name());
        assert!(!k.source.contains("blockIdx.x, by = blockIdx.y"), "{}: a task body reads blockIdx", g.name());
        nvcc(&k);
    }
    Ok(())
}

#[test]
fn the_overhead_graphs_compile_and_their_tables_follow_the_schedule() -> R {
    for g in overhead_graphs(132, 64)? {
        let (c, k) = builtin_kernel(&g, 132);
        let begin: Vec<String> = std::iter::once(0)
            .chain(c.schedule.workers.iter().scan(0, |n, w| {
                *n += w.len();
                Some(*n)
            }))
            .map(|n| n.to_string())
            .collect();
        let table = format!("mpk_worker_begin[133] = {{{}}};", begin.join(","));
        assert!(k.source.contains(&table), "{}: no `{table}`", g.name());
        nvcc(&k);
    }
    Ok(())
}

#[test]
fn weights_are_prefetched_in_strided_runs() -> R {
    let case = cases()?.into_iter().find(|c| c.graph.name() == "op_projection").ok_or("no such test case")?;
    let c = compile(&case.graph, &MpkOptions { workers: 8, ..MpkOptions::default() })?;
    let w = case.graph.tensor_named("w").ok_or("no such tensor")?;
    // every task of the projection prefetches its slab of `w` (an input), nothing else
    let proj: Vec<_> = c.tasks.iter().filter(|t| t.reads.iter().any(|r| r.tensor == w)).collect();
    assert!(!proj.is_empty());
    for t in proj {
        assert!(
            t.prefetch.iter().all(|r| r.tensor == w || c.graph.tensor(r.tensor).kind == mirage::mpk::TensorKind::Input)
        );
        assert!(t.prefetch.iter().any(|r| r.tensor == w));
    }
    // The tables carry those runs only when the options ask for the prefetch (off by default,
    // DECISIONS change 58); without them the declared table is `[1]`, the all-zero placeholder.
    let table = |opts: &MpkOptions| -> Result<String, Box<dyn std::error::Error>> {
        let k = generate(&compile(&case.graph, opts)?)?;
        let at = k.source.find("mpk::Prefetch mpk_prefetch[").ok_or("no prefetch table")?;
        let end = k.source[at..].find(';').ok_or("an unterminated table")?;
        Ok(k.source[at..at + end].to_string())
    };
    let off = MpkOptions { workers: 8, ..MpkOptions::default() };
    assert!(!off.prefetch);
    assert_eq!(table(&off)?, "mpk::Prefetch mpk_prefetch[1] = {{0ull,{0ull,0ull,0ull},{0,0,0},0,0,0}}");
    let on = table(&MpkOptions { prefetch: true, ..off.clone() })?;
    assert!(!on.starts_with("mpk::Prefetch mpk_prefetch[1]") && on.contains("ull,{"), "{on}");
    Ok(())
}

/// A megakernel builds for several architectures like any program: with `multi_arch` the
/// resident kernel is a fatbin holding sm_80 and sm_90a code (so a build can serve an A100 and
/// an H100/H200), or for the list `MIRAGE_CUDA_ARCHS` names.
#[test]
fn the_resident_kernel_builds_as_a_fatbin_for_several_architectures() -> R {
    let want = mirage::nvcc::resolve_archs("sm_90a", std::env::var(mirage::nvcc::ARCHS_ENV).ok().as_deref())?;
    let case = cases()?.into_iter().next().ok_or("no test graph")?;
    let c = compile(&case.graph, &MpkOptions::default())?;
    let k = generate(&c)?;
    let opts = CompileOptions { arch: Some("sm_90a".into()), multi_arch: true, ..Default::default() };
    let fatbin = compile_cubin(&k.source, &format!("{}_fat", k.kernel), &opts)?;
    assert_eq!(fatbin.arch, want.join("+"));
    if want.len() > 1 {
        let archs = mirage::image_archs(&fatbin.bytes).ok_or("not a fatbin")?;
        let mut names: Vec<String> = archs.iter().map(ToString::to_string).collect();
        let mut want = want.clone();
        names.sort();
        want.sort();
        assert_eq!(names, want);
    }
    Ok(())
}

/// With `KernelOptions::bulk_runs`, a task body copies each weight tile stored tile by tile
/// (one contiguous run) with one `cp.async.bulk` by thread 0, its stages counted on mbarriers it
/// initializes and invalidates itself; row-major weights keep the threads' `cp.async`; without
/// the option nothing changes; and the resident kernel compiles for sm_90a and sm_80. One layer
/// of Llama-3.2-1B (the test-mode graphs are too small for a pipeline).
#[test]
fn bulk_runs_copy_weights_stored_tile_by_tile_in_one_instruction() -> R {
    use mirage::mpk::decoder::{DecoderConfig, decoder_step};
    let model = mirage::model::ModelConfig::preset("llama-3.2-1b").ok_or("a preset")?;
    let tiled_cfg = DecoderConfig { layers: 1, vocab: 1024, ..model.decoder_config(64, mirage::ir::DType::Bf16) };
    assert!(tiled_cfg.contiguous_below > 16, "the models' default stores narrow tiles contiguously");
    let rows_cfg = DecoderConfig { contiguous_below: 0, ..tiled_cfg.clone() };
    let mut bulk = MpkOptions::default();
    bulk.kernel.bulk_runs = true;
    let tiled = generate(&compile(&decoder_step("l1_tiled", &tiled_cfg)?, &bulk)?)?;
    let rows = generate(&compile(&decoder_step("l1_rows", &rows_cfg)?, &bulk)?)?;
    let plain = generate(&compile(&decoder_step("l1_plain", &tiled_cfg)?, &MpkOptions::default())?)?;
    let one = "if (tid == 0) mirage::bulk_copy(";
    assert!(tiled.source.contains(one), "{}", tiled.source);
    assert!(tiled.source.contains("mirage::mbar_inval(&mbar[s])"));
    assert!(tiled.source.contains("mirage::fence_proxy_async_all();"));
    // A 16 KiB stage of a 16-column weight tile (1B's k, v, o_proj, down) in one instruction.
    assert!(tiled.source.contains("16384u, &mbar["), "{}", tiled.source);
    assert!(!rows.source.contains("16384u, &mbar["), "row-major weights are not runs: {}", rows.source);
    assert!(
        !plain.source.contains("mirage::bulk_copy(") && !plain.source.contains("mirage::mbar_"),
        "{}",
        plain.source
    );
    for arch in ["sm_90a", "sm_80"] {
        let opts = CompileOptions { arch: Some(arch.into()), ..Default::default() };
        let cubin = compile_cubin(&tiled.source, &format!("{}_{}", tiled.kernel, arch.replace('_', "")), &opts)
            .map_err(|e| format!("{arch}: {e}"))?;
        assert!(cubin.bytes.starts_with(b"\x7fELF"), "{arch}: an ELF cubin");
    }
    Ok(())
}

/// The loop of the task body of operator `op` (`for (int it = 0;` .. `// after the loop`) in a
/// resident kernel's source.
fn loop_of<'a>(source: &'a str, op: &str) -> &'a str {
    let body = &source[source.find(&format!("// task body of `{op}`")).unwrap_or_else(|| panic!("no body of {op}"))..];
    let start = body.find("for (int it = 0;").unwrap_or_else(|| panic!("{op}: no loop"));
    let end = body.find("// after the loop").unwrap_or_else(|| panic!("{op}: no loop end"));
    &body[start..end]
}

#[test]
fn a_folded_norm_sums_its_squares_in_registers() -> R {
    use mirage::mpk::decoder::{DecoderConfig, decoder_step};
    // DECISIONS change 92: the loop of a norm-folded projection (the 1B's q|k|v, gate/up and LM
    // head) sums each thread's squares in a register — no warp's reduction and its barrier in
    // the loop, one block reduction after it — and keeps two barriers an iteration (the
    // stage's, the staged x·g tile's).
    let model = mirage::model::ModelConfig::preset("llama-3.2-1b").ok_or("a preset")?;
    let cfg = DecoderConfig { layers: 1, vocab: 1024, ..model.decoder_config(64, mirage::ir::DType::Bf16) };
    let k = generate(&compile(&decoder_step("l1", &cfg)?, &MpkOptions::default())?)?;
    for op in ["l0.qkv.k0", "l0.mlp.k0", "logits.k0"] {
        let body = loop_of(&k.source, op);
        assert_eq!(body.matches("__syncthreads();").count(), 2, "{op}: {body}");
        assert!(!body.contains("warp_sum"), "{op}: {body}");
        assert!(body.contains("tsum2 += (mirage::to_f32(t0["), "{op}: {body}");
    }
    // The output projection has no norm: no thread sum.
    let o = loop_of(&k.source, "l0.o_proj.k0");
    assert!(!o.contains("tsum"), "{o}");
    assert_eq!(
        k.source.matches("{ const float s = mirage::warp_sum(tsum2); if (lane == 0) meet[warp] = s; }").count(),
        3
    );
    nvcc(&k);
    // A one-stage loop copies each iteration into the buffer being read: the per-iteration
    // fold and its barrier stay.
    let mut one = MpkOptions::default();
    one.kernel.max_stages = 1;
    let k1 = generate(&compile(&decoder_step("l1_one_stage", &cfg)?, &one)?)?;
    let body = loop_of(&k1.source, "l0.qkv.k0");
    assert!(!k1.source.contains("tsum") && body.contains("warp_sum"), "{body}");
    Ok(())
}

#[test]
fn a_folded_norm_of_a_computed_tile_sums_its_squares_in_registers_after_its_barrier() -> R {
    use mirage::mpk::decoder::{DecoderConfig, decoder_step};
    // DECISIONS changes 101 and 102: with the output projection by KV head group, the gate/up's
    // norm reads x + Σ P, a tile its loop computes. The parts' sum heads one pass computing
    // x + Σ P and the staged x·g tile; the thread sum of x + Σ P follows that pass's barrier,
    // with no warp reduction in the loop: two barriers an iteration (the stage's, the pass's),
    // as many as the merged form's gate/up.
    let model = mirage::model::ModelConfig::preset("qwen3-0.6b").ok_or("a preset")?;
    let cfg = DecoderConfig {
        layers: 1,
        vocab: 1024,
        grouped_output: true,
        ..model.decoder_config(64, mirage::ir::DType::Bf16)
    };
    let k = generate(&compile(&decoder_step("l1_grouped", &cfg)?, &MpkOptions::default())?)?;
    let body = loop_of(&k.source, "l0.mlp.k0");
    assert!(!body.contains("warp_sum"), "{body}");
    assert_eq!(body.matches("__syncthreads();").count(), 2, "{body}");
    let pass = body.find("// one pass: reduce_sum(0), add, mul").ok_or("the parts' sum heading one pass")?;
    let square = body.find("tsum").ok_or("a thread sum")?;
    let barrier = body[pass..].find("__syncthreads();").ok_or("a barrier after the pass")? + pass;
    assert!(pass < barrier && barrier < square, "the thread sum after the pass's barrier: {body}");
    nvcc(&k);
    Ok(())
}

/// A kernel with decode attentions reserves one angle table past every task's shared memory,
/// zeroes its key before the workers start, and hands its address to every decode attention;
/// a kernel without one reserves nothing (DECISIONS change 99).
#[test]
fn decode_attentions_share_an_angle_table_past_every_tasks_share() -> R {
    use mirage::mpk::{Builtin, OpKind};
    let mut with = 0;
    for case in cases()? {
        let g = &case.graph;
        let c = compile(g, &MpkOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
        let k = generate(&c).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
        let half = mirage::mpk::emit::angle_table_half(g);
        let marker = "reinterpret_cast<mpk::AngleTable*>(smem + ";
        let Some(half) = half else {
            assert!(!k.source.contains(marker), "{}: an angle table without a decode attention", g.name());
            continue;
        };
        with += 1;
        let at: usize = k
            .source
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}: no angle table's key zeroed", g.name()));
        assert_eq!(at % 16, 0, "{}: the table at {at}", g.name());
        assert_eq!(k.smem_bytes, at + mirage::mpk::emit::angle_table_bytes(half), "{}", g.name());
        let tasks = g.ops().iter().filter(|op| matches!(op.kind, OpKind::Builtin(Builtin::DecodeAttention { .. })));
        let calls = k.source.matches("mpk::decode_attention<").count();
        assert_eq!(calls, tasks.count(), "{}", g.name());
        let arg = format!("reinterpret_cast<float*>(smem + {at}));");
        assert_eq!(k.source.matches(&arg).count(), calls, "{}: a decode attention without the table", g.name());
    }
    assert!(with > 0, "no test graph has a decode attention");
    Ok(())
}
