//! Snapshot tests of generated CUDA for a few small graphs: a change to code generation shows up
//! as a reviewable diff of the kernel source (`mirage/tests/snapshots/`).
#![cfg(feature = "build")]

use mirage::codegen::{KernelOptions, generate};
use mirage::ir::DType;
use mirage::testing::programs::coverage_cases;

fn kernels(case: &str, dtype: DType) -> String {
    let (name, graph) = coverage_cases(dtype)
        .expect("coverage graphs build")
        .into_iter()
        .find(|(n, _)| n == case)
        .unwrap_or_else(|| panic!("no coverage case {case}"));
    let g = generate(&graph, &name, &KernelOptions::default()).expect("generates");
    format!("{}\n// plan\n{}", g.kernels_source, serde_json::to_string_pretty(&g.plan).expect("plan serializes"))
}

#[test]
fn snapshot_matmul_odd_shapes_f16() {
    insta::assert_snapshot!(kernels("matmul_5x24x13", DType::F16));
}

#[test]
fn snapshot_accumulator_rms_last_bf16() {
    insta::assert_snapshot!(kernels("accumulator_acc_rms_last", DType::Bf16));
}

#[test]
fn snapshot_iterator_matrix_f32() {
    insta::assert_snapshot!(kernels("iterator_imap01r_f1_r4", DType::F32));
}

/// Split-KV of a bf16 program: the first kernel stores its parts as `float` (`from_f32<float>`),
/// the combine loads `float` tiles (4-byte copies) and stores `__nv_bfloat16`; the plan's buffers
/// are f32.
#[test]
fn snapshot_split_kv_f32_parts_bf16() {
    insta::assert_snapshot!(kernels("online_softmax_split_kv", DType::Bf16));
}

/// Programmatic dependent launch: every kernel after a program's first begins by waiting for the
/// one before it (`griddepcontrol.wait`, before any load), and its launch says so; the first
/// kernel does neither.
#[test]
fn kernels_after_the_first_wait_for_the_previous_grid_before_any_load() {
    let (name, graph) = coverage_cases(DType::Bf16)
        .expect("coverage graphs build")
        .into_iter()
        .find(|(n, _)| n == "online_softmax_split_kv")
        .expect("the split-KV case");
    let g = generate(&graph, &name, &KernelOptions::default()).expect("generates");
    assert_eq!(g.plan.kernels.iter().map(|k| k.waits_for_previous).collect::<Vec<_>>(), [false, true]);
    let bodies: Vec<&str> = g.kernels_source.split("extern \"C\" __global__").skip(1).collect();
    assert_eq!(bodies.len(), 2);
    const WAIT: &str = "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");";
    assert!(!bodies[0].contains("griddepcontrol"), "{}", bodies[0]);
    let wait = bodies[1].find(WAIT).unwrap_or_else(|| panic!("no wait:\n{}", bodies[1]));
    let first_load = bodies[1].find("cp_async").or_else(|| bodies[1].find("in0[")).expect("a load");
    assert!(wait < first_load, "the wait comes after a load:\n{}", bodies[1]);
    // Guarded for sm_80, where the instruction does not exist.
    assert!(bodies[1][..wait].contains("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900"));
    // A plan written before the field existed reads as plain launches.
    let mut json: serde_json::Value = serde_json::to_value(&g.plan).expect("serializes");
    for k in json["kernels"].as_array_mut().expect("kernels") {
        k.as_object_mut().expect("an object").remove("waits_for_previous");
    }
    let old: mirage_runtime::LaunchPlan = serde_json::from_value(json).expect("an older plan reads");
    assert!(old.kernels.iter().all(|k| !k.waits_for_previous));
}

#[test]
fn snapshot_online_softmax_f16() {
    insta::assert_snapshot!(kernels("online_softmax_rescale_pair", DType::F16));
}

/// qknorm-style attention block: `rms_norm(Q)` is loop-invariant (hoisted, its A fragments
/// preloaded), `exp(Q·K)` stays in mma fragments (row sums by shuffles, the second matmul's A
/// from registers), the normalized V tile is stored as f16 for ldmatrix, `Σ exp(Q·K)·V` accumulates
/// in registers (`codegen::fusion`).
#[test]
fn snapshot_attention_register_chain_f16() {
    use mirage::ir::{AccKind, BlockGraph, BlockOp, KernelGraph, Scalar, TensorDesc, UnaryOp};
    let d = DType::F16;
    let q = TensorDesc::new(&[64, 64], d);
    let k = TensorDesc::new(&[64, 256], d);
    let v = TensorDesc::new(&[256, 64], d);
    let mut bg = BlockGraph::new(vec![q, k, v], [1, 1, 1], 128, 4).expect("block graph");
    let none = [None, None, None];
    let tq = bg.input(0, none, None).expect("q");
    let tk = bg.input(1, none, Some(1)).expect("k");
    let tv = bg.input(2, none, Some(0)).expect("v");
    let nq = bg.op(BlockOp::RmsNorm { eps: Scalar(1e-6) }, &[tq]).expect("norm q");
    let nv = bg.op(BlockOp::RmsNorm { eps: Scalar(1e-6) }, &[tv]).expect("norm v");
    let s = bg.matmul(nq, tk).expect("q·k");
    let p = bg.unary(UnaryOp::Exp, s).expect("exp");
    let l = bg.accum(AccKind::SumLast, &[p]).expect("row sums");
    let pv = bg.matmul(p, nv).expect("p·v");
    let o = bg.accum(AccKind::Sum, &[pv]).expect("acc");
    bg.output(o, none).expect("out o");
    bg.output(l, none).expect("out l");
    let mut g = KernelGraph::new();
    let xq = g.input(&[64, 64], d).expect("xq");
    let xk = g.input(&[64, 256], d).expect("xk");
    let xv = g.input(&[256, 64], d).expect("xv");
    let outs = g.custom(&[xq, xk, xv], bg).expect("custom");
    g.output(outs[0], None).expect("o");
    g.output(outs[1], None).expect("l");
    let out = generate(&g, "attention_register_chain", &KernelOptions::default()).expect("generates");
    for expected in [
        "A preloaded in registers, result in registers",
        "exp on register fragments",
        "row sums of register fragments",
        "A from registers, accumulated in registers, B by ldmatrix.trans",
        "loop-invariant operators, once",
    ] {
        assert!(out.kernels_source.contains(expected), "missing `{expected}` in\n{}", out.kernels_source);
    }
    insta::assert_snapshot!(format!(
        "{}\n// plan\n{}",
        out.kernels_source,
        serde_json::to_string_pretty(&out.plan).expect("plan serializes")
    ));
}

/// The generated source and plan of `x[m, 1024] · w[1024, n]` (bf16, 4 blocks over the columns,
/// 8 loop iterations, 128 threads), asserting it runs on the CUDA cores (`mirage::fma8`, no
/// `mma.sync`).
fn vector_matmul_kernel(m: usize, n: usize, name: &str) -> String {
    use mirage::ir::{AccKind, BlockGraph, KernelGraph, TensorDesc};
    let d = DType::Bf16;
    let x = TensorDesc::new(&[m, 1024], d);
    let w = TensorDesc::new(&[1024, n], d);
    let mut bg = BlockGraph::new(vec![x, w], [4, 1, 1], 128, 8).expect("block graph");
    let tx = bg.input(0, [None, None, None], Some(1)).expect("x");
    let tw = bg.input(1, [Some(1), None, None], Some(0)).expect("w");
    let p = bg.matmul(tx, tw).expect("x·w");
    let acc = bg.accum(AccKind::Sum, &[p]).expect("acc");
    bg.output(acc, [Some(1), None, None]).expect("out");
    let mut g = KernelGraph::new();
    let gx = g.input(&[m, 1024], d).expect("gx");
    let gw = g.input(&[1024, n], d).expect("gw");
    let outs = g.custom(&[gx, gw], bg).expect("custom");
    g.output(outs[0], None).expect("y");
    let out = generate(&g, name, &KernelOptions::default()).expect("generates");
    assert!(
        out.kernels_source.contains("mirage::fma8<__nv_bfloat16>") && !out.kernels_source.contains("mma_16816("),
        "a {m}-row matmul runs on the CUDA cores:\n{}",
        out.kernels_source
    );
    format!("{}\n// plan\n{}", out.kernels_source, serde_json::to_string_pretty(&out.plan).expect("plan serializes"))
}

/// A two-row matmul streamed over K (`x[2, 1024] · w[1024, 512]`): `codegen::kernel::planner::
/// VectorMatmul` runs it on the CUDA cores (`mirage::fma8` over 16-byte rows of the B tile, row
/// groups met by shuffles, then warp by warp into the accumulator) instead of `mma.sync`.
#[test]
fn snapshot_vector_matmul_two_rows_bf16() {
    insta::assert_snapshot!(vector_matmul_kernel(2, 512, "vector_matmul_two_rows"));
}

/// One row against 112-column tiles (`w[1024, 448]` over 4 blocks, Mistral-7B's gated-MLP tile
/// width): 14 vectors per B row, so 16 lanes of which the last 2 of every row group idle — the
/// loop and the writers are guarded by `vc < 112`, and the shuffles still meet lanes 16 apart.
#[test]
fn snapshot_vector_matmul_fourteen_vectors_bf16() {
    let src = vector_matmul_kernel(1, 448, "vector_matmul_fourteen_vectors");
    assert!(src.contains("const int vc = (tid % 16) * 8;"), "16 lanes per B row:\n{src}");
    assert!(src.contains("if (vc < 112) {"), "idle lanes skip the loop:\n{src}");
    assert!(src.contains("const int r = tid / 16 + q_r * 8;"), "a loop of static trips over the row groups:\n{src}");
    assert!(src.contains("if (lane < 14) {"), "only the 14 working lanes write:\n{src}");
    assert!(src.contains("meet[(warp) * 112 + 0 + vc + 0] = racc"), "every warp's sums at once:\n{src}");
    insta::assert_snapshot!(src);
}

/// Qwen2.5-7B's down projection at 16 rows, one K slice (`[16, 296] x [296, 112]` per iteration,
/// 8 warps): 14 mma tiles of 19 k-steps. Its k-steps are dealt to the warps (warp w: k-steps w,
/// w + 8, …), each loading the A fragment once per k-step for all 14 tiles, every tile into its
/// own accumulator; after the loop every warp stores its partial sums at once into the loop's
/// dead stage buffers and each element is summed over the warps in warp order — two barriers,
/// the sums of one round per warp bit for bit (DECISIONS changes 43 and 84).
#[test]
fn snapshot_mma_k_strided_bf16() {
    let src = accumulated_bf16_matmul("mma_k_strided", [16, 4736], [4736, 224], 16);
    assert!(src.contains("for (int kt = warp; kt < 19; kt += 8) {"), "k-steps dealt to the warps:\n{src}");
    assert!(src.contains("mirage::mma_16816<__nv_bfloat16>(racc"), "into the register accumulator:\n{src}");
    assert!(src.contains("[mt * 14 + nt], fa, fb);"), "every tile its own accumulator:\n{src}");
    assert_eq!(src.matches("uint32_t fa[4];").count(), 1, "one A fragment per k-step:\n{src}");
    assert!(src.contains("if (warp < 8) {"), "every warp stores its partial sums at once:\n{src}");
    assert!(src.contains("(meet + warp * 1792)[(r)*112 + (q)] = d[0];"), "each into its own slot:\n{src}");
    let sum = (1..8).fold("= meet[e]".to_string(), |v, w| format!("{v} + meet[{} + e]", w * 1792));
    assert!(src.contains(&format!("{sum};")), "summed over the warps in warp order:\n{src}");
    assert!(!src.contains("if (warp == 1) {"), "no round per warp:\n{src}");
    insta::assert_snapshot!(src);
}

/// Sixteen rows against K tiles of 28 (`x[16, 896] · w[896, 256]`, F 32: the Qwen-0.5B LM head's
/// loop at 16 rows): `mma.sync` with k-steps past the tile's 28 rows. The A pairs load as one
/// 32-bit word (k even: a pair never straddles 28), zero where `c0 ≥ 28`; B goes through
/// `ldmatrix.trans`, the last k-step's rows past 28 reading row 27 and their registers zeroed —
/// no conversion through f32 and back. (Bits packing of B pairs: `snapshot_matmul_odd_shapes_f16`.)
#[test]
fn snapshot_mma_k_tile_of_28_bf16() {
    let src = accumulated_bf16_matmul("mma_k_tile_of_28", [16, 896], [896, 256], 32);
    assert!(src.contains("mirage::mma_16816<__nv_bfloat16>("), "a 16-row matmul runs on mma.sync:\n{src}");
    assert!(src.contains("(c0) < 28 ? *reinterpret_cast<const uint32_t*>("), "A pairs: one guarded word:\n{src}");
    assert!(src.contains("ldmatrix_x2_trans(fb, &t1[(kr < 28 ? kr : 27)*"), "B by ldmatrix, rows clamped:\n{src}");
    assert!(
        src.contains("if (ck >= 28) fb[0] = 0u; if (ck + 8 >= 28) fb[1] = 0u;"),
        "B's registers past k zeroed:\n{src}"
    );
    assert!(!src.contains("pack2<"), "no operand goes through f32:\n{src}");
    insta::assert_snapshot!(src);
}

/// The generated source and plan of one kernel `name` computing `x · w` (bf16) accumulated over
/// a loop of `forloop` iterations along k, the output columns split over a grid of 2 blocks of
/// 256 threads.
fn accumulated_bf16_matmul(name: &str, xs: [usize; 2], ws: [usize; 2], forloop: usize) -> String {
    use mirage::ir::{AccKind, BlockGraph, KernelGraph, TensorDesc};
    let d = DType::Bf16;
    let (x, w) = (TensorDesc::new(&xs, d), TensorDesc::new(&ws, d));
    let mut bg = BlockGraph::new(vec![x, w], [2, 1, 1], 256, forloop).expect("block graph");
    let tx = bg.input(0, [None, None, None], Some(1)).expect("x");
    let tw = bg.input(1, [Some(1), None, None], Some(0)).expect("w");
    let p = bg.matmul(tx, tw).expect("x·w");
    let acc = bg.accum(AccKind::Sum, &[p]).expect("acc");
    bg.output(acc, [Some(1), None, None]).expect("out");
    let mut g = KernelGraph::new();
    let gx = g.input(&xs, d).expect("gx");
    let gw = g.input(&ws, d).expect("gw");
    let outs = g.custom(&[gx, gw], bg).expect("custom");
    g.output(outs[0], None).expect("y");
    let out = generate(&g, name, &KernelOptions::default()).expect("generates");
    format!("{}\n// plan\n{}", out.kernels_source, serde_json::to_string_pretty(&out.plan).expect("plan serializes"))
}

/// The block graph of [`scalar_operators_join_the_wider_pass_after_them`] with `threads`
/// threads: `a = exp(s)`, `b = x·a`, `c = s·a` for `x [1, 128]` and `s [1, 1]`, `b` and `c` summed
/// over the (one) iteration and saved. Returns it and the nodes of `a`, `b`, `c`.
fn scalar_then_wide(threads: usize) -> (mirage::ir::BlockGraph, [usize; 3]) {
    use mirage::ir::{AccKind, BinaryOp, BlockGraph, TensorDesc, UnaryOp};
    let f32s = |s: &[usize]| TensorDesc::new(s, DType::F32);
    let mut b = BlockGraph::new(vec![f32s(&[1, 128]), f32s(&[1, 1])], [1, 1, 1], threads, 1).expect("block graph");
    let x = b.input(0, [None; 3], None).expect("x");
    let s = b.input(1, [None; 3], None).expect("s");
    let a = b.unary(UnaryOp::Exp, s).expect("a");
    let p = b.binary(BinaryOp::Mul, x, a).expect("b");
    let c = b.binary(BinaryOp::Mul, s, a).expect("c");
    let pa = b.accum(AccKind::Sum, &[p]).expect("sum b");
    let ca = b.accum(AccKind::Sum, &[c]).expect("sum c");
    b.output(pa, [None; 3]).expect("save b");
    b.output(ca, [None; 3]).expect("save c");
    (b, [a.node, p.node, c.node])
}

/// Scalar operators join a wider element-wise pass (DECISIONS change 83): `a = exp(s)` and
/// `c = s·a` (one element each) run in the pass of `b = x·a` over `[1, 128]`, every thread
/// computing them for its own elements — one pass and no barrier between them; `a`, read only
/// in the pass, stays in a register, and `c`, read after it, is stored once, by element 0.
#[test]
fn scalar_operators_join_the_wider_pass_after_them() {
    use mirage::codegen::{generate_kernel, plan_kernel};
    use mirage::ir::{AccKind, BlockGraph, TensorDesc, UnaryOp};
    let (b, [a, p, c]) = scalar_then_wide(128);
    let plan = plan_kernel(&b, "k", &KernelOptions::default()).expect("plans");
    let g = &plan.groups;
    let group = g.group_of[a].map(|i| g.groups[i].clone());
    assert_eq!(group, Some(vec![a, p, c]), "one pass: {:?}", g.groups);
    let gid = g.group_of[a].expect("grouped");
    assert_eq!(g.shapes[gid], vec![1, 128]);
    assert_eq!((g.scalar[a], g.scalar[p], g.scalar[c]), (true, false, true));
    assert_eq!((g.in_register[a], g.in_register[p], g.in_register[c]), (true, false, false));
    let src = generate_kernel(&b, "k", &KernelOptions::default()).expect("generates").code;
    assert!(src.contains("// one pass: exp, mul, mul"), "{src}");
    let c_store = format!("if (e == 0) {{ t{c}[0] = v{c};");
    assert!(src.contains(&c_store), "no `{c_store}` in:\n{src}");
    // `a` has no shared-memory tile: nothing stores it.
    assert!(!src.contains(&format!("t{a} ")), "{src}");

    // With 32 threads the pass takes 4 elements of the row per thread and step: the scalars are
    // computed per element there too, `c` stored by the first element of the first step only.
    let (bv, [_, _, c]) = scalar_then_wide(32);
    let src = generate_kernel(&bv, "k", &KernelOptions::default()).expect("generates").code;
    assert!(src.contains("// one pass: exp, mul, mul (4 elements of a row per thread and step)"), "{src}");
    let c_store = format!("if (e0 == 0 && u == 0) {{ t{c}[0] = v{c};");
    assert!(src.contains(&c_store), "no `{c_store}` in:\n{src}");

    // Two wide operators of different shapes stay in passes of their own.
    let f32s = |s: &[usize]| TensorDesc::new(s, DType::F32);
    let mut b2 = BlockGraph::new(vec![f32s(&[1, 128]), f32s(&[1, 64])], [1, 1, 1], 128, 1).expect("block graph");
    let x = b2.input(0, [None; 3], None).expect("x");
    let y = b2.input(1, [None; 3], None).expect("y");
    let ex = b2.unary(UnaryOp::Exp, x).expect("exp x");
    let ey = b2.unary(UnaryOp::Exp, y).expect("exp y");
    let sx = b2.accum(AccKind::Sum, &[ex]).expect("sum");
    let sy = b2.accum(AccKind::Sum, &[ey]).expect("sum");
    b2.output(sx, [None; 3]).expect("save");
    b2.output(sy, [None; 3]).expect("save");
    let plan2 = plan_kernel(&b2, "k", &KernelOptions::default()).expect("plans");
    let g2 = &plan2.groups;
    assert!(g2.group_of[ex.node].is_none() || g2.group_of[ex.node] != g2.group_of[ey.node], "{:?}", g2.groups);
}

/// A loop whose last operator computes the tile a norm's thread sum reads (`s = x + y`, then
/// only `acc_rms_last(s)`): the thread sum runs in the accumulator's place, and the barrier after
/// `s` stays — `s` is not the loop's last operator, the thread sum is (DECISIONS change 101).
#[test]
fn a_thread_sum_of_the_loops_last_computed_tile_follows_its_barrier() {
    use mirage::ir::{AccKind, BinaryOp, BlockGraph, KernelGraph, TensorDesc};
    let d = DType::Bf16;
    let row = TensorDesc::new(&[1, 1024], d);
    let mut bg = BlockGraph::new(vec![row.clone(), row], [1, 1, 1], 256, 4).expect("block graph");
    let x = bg.input(0, [None; 3], Some(1)).expect("x");
    let y = bg.input(1, [None; 3], Some(1)).expect("y");
    let s = bg.binary(BinaryOp::Add, x, y).expect("x + y");
    let r = bg.accum(AccKind::RmsLast, &[s]).expect("rms");
    bg.output(r, [None; 3]).expect("out");
    let mut g = KernelGraph::new();
    let (gx, gy) = (g.input(&[1, 1024], d).expect("gx"), g.input(&[1, 1024], d).expect("gy"));
    let outs = g.custom(&[gx, gy], bg).expect("custom");
    g.output(outs[0], None).expect("r");
    let src = generate(&g, "rms_of_sum", &KernelOptions::default()).expect("generates").kernels_source;
    let body = &src[src.find("for (int it = 0;").expect("a loop")..];
    let body = &body[..body.find("// after the loop").expect("the loop's end")];
    let add = body.find("] = (mirage::to_f32(t0[").expect("x + y");
    let sum = body.find("tsum").expect("a thread sum");
    let barrier = body[add..].find("__syncthreads();").map(|b| b + add).expect("a barrier after x + y");
    assert!(barrier < sum, "the thread sum reads x + y after its barrier: {body}");
    assert!(!body.contains("warp_sum"), "{body}");
}

/// A loop that adds a short sum over a leading dim to a row, then normalizes and scales it
/// (`s = x + Σ_p P[p]`, `acc_rms_last(s)`, `y = s · g`: the decoder's grouped gate/up, DECISIONS
/// change 102): the sum heads one pass computing `s` and `y` per element, with no tile of its
/// own; the accumulator of `s` does not end the pass, it takes its thread sum after the pass's
/// barrier; one barrier an iteration besides the stage's. Nothing stores `Σ P` to a tile.
#[test]
fn a_short_leading_sum_heads_the_pass_of_the_row_it_joins() {
    use mirage::ir::{AccKind, BinaryOp, BlockGraph, BlockOp, KernelGraph, TensorDesc};
    let d = DType::Bf16;
    let row = TensorDesc::new(&[1, 1024], d);
    let parts = TensorDesc::new(&[8, 1024], d);
    let mut bg = BlockGraph::new(vec![row.clone(), parts, row], [1, 1, 1], 256, 4).expect("block graph");
    let x = bg.input(0, [None; 3], Some(1)).expect("x");
    let p = bg.input(1, [None; 3], Some(1)).expect("P");
    let g = bg.input(2, [None; 3], Some(1)).expect("g");
    let sum = bg.op(BlockOp::ReduceSum { dim: 0 }, &[p]).expect("Σ P");
    let s = bg.binary(BinaryOp::Add, x, sum).expect("x + Σ P");
    let r = bg.accum(AccKind::RmsLast, &[s]).expect("rms");
    let y = bg.binary(BinaryOp::Mul, s, g).expect("s · g");
    let o = bg.accum(AccKind::Sum, &[y]).expect("Σ y");
    bg.output(r, [None; 3]).expect("out r");
    bg.output(o, [None; 3]).expect("out o");
    let mut kg = KernelGraph::new();
    let ins = [kg.input(&[1, 1024], d), kg.input(&[8, 1024], d), kg.input(&[1, 1024], d)];
    let ins: Vec<_> = ins.into_iter().map(|t| t.expect("input")).collect();
    let outs = kg.custom(&ins, bg).expect("custom");
    kg.output(outs[0], None).expect("r");
    kg.output(outs[1], None).expect("o");
    let src = generate(&kg, "norm_of_parts", &KernelOptions::default()).expect("generates").kernels_source;
    let body = &src[src.find("for (int it = 0;").expect("a loop")..];
    let body = &body[..body.find("// after the loop").expect("the loop's end")];
    let pass = body.find("// one pass: reduce_sum(0), add, mul").unwrap_or_else(|| panic!("one pass: {body}"));
    assert!(body.contains(&format!("float r{} = 0.0f;", sum.node)), "the sum per element: {body}");
    assert!(!body.contains(&format!("t{}[", sum.node)), "Σ P has no tile: {body}");
    let tsum = body.find("tsum").expect("a thread sum");
    let barrier = body[pass..].find("__syncthreads();").map(|b| b + pass).expect("a barrier after the pass");
    assert!(barrier < tsum, "the thread sum reads s after the pass's barrier: {body}");
    // Σ y is the loop's last operator: the next iteration's first barrier follows it.
    assert_eq!(body.matches("__syncthreads();").count(), 2, "the stage's and the pass's: {body}");
}
