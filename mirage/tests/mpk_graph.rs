#![cfg(feature = "build")]
//! The megakernel compiler on the CPU: dependency derivation and counters, the schedule's
//! check (with schedules that must be rejected), and the build errors of bad step graphs.

use mirage::ir::{AccKind, BinaryOp, BlockGraph, DType, GridMap, KernelGraph, Scalar, TensorDesc, UnaryOp};
use mirage::mpk::decoder::{DecoderConfig, decoder_step};
use mirage::mpk::deps::CounterOf;
use mirage::mpk::schedule::{Schedule, validate};
use mirage::mpk::{
    BuildError, Builtin, Compiled, GraphError, MpkOptions, ParamExpr, ScheduleError, StepGraph, TableLimits, compile,
};

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

const F32: DType = DType::F32;

fn opts(workers: usize) -> MpkOptions {
    MpkOptions { workers, ..MpkOptions::default() }
}

/// `exp` of a `[rows, cols]` tensor, the rows split over `tiles` blocks.
fn rows_block(rows: usize, cols: usize, tiles: usize) -> R<BlockGraph> {
    let d = TensorDesc::new(&[rows, cols], F32);
    let mut bg = BlockGraph::new(vec![d], [tiles, 1, 1], 128, 1)?;
    let m: GridMap = [Some(0), None, None];
    let x = bg.input(0, m, None)?;
    let y = bg.unary(UnaryOp::Exp, x)?;
    let a = bg.accum(AccKind::Sum, &[y])?;
    bg.output(a, m)?;
    Ok(bg)
}

/// `a + b` of two `[n]` tensors in one block.
fn add_block(n: usize) -> R<BlockGraph> {
    let d = TensorDesc::new(&[n], F32);
    let mut bg = BlockGraph::new(vec![d.clone(), d], [1, 1, 1], 128, 1)?;
    let none: GridMap = [None; 3];
    let a = bg.input(0, none, None)?;
    let b = bg.input(1, none, None)?;
    let s = bg.binary(BinaryOp::Add, a, b)?;
    let acc = bg.accum(AccKind::Sum, &[s])?;
    bg.output(acc, none)?;
    Ok(bg)
}

/// The tasks of operator `name` in `c`.
fn tasks_of(c: &Compiled, name: &str) -> Vec<usize> {
    let op = c.graph.op_named(name);
    (0..c.tasks.len()).filter(|&t| Some(c.tasks[t].op) == op).collect()
}

fn waits_of(c: &Compiled, t: usize) -> Vec<CounterOf> {
    c.sync.waits[t].iter().map(|&k| c.sync.counters[k].of).collect()
}

#[test]
fn a_consumer_tile_waits_only_for_the_producer_tiles_it_reads() -> R {
    let mut g = StepGraph::new("overlap")?;
    let x = g.input("x", &[8, 32], F32)?;
    let a = g.block("a", rows_block(8, 32, 4)?, &[x])?[0]; // 2-row tiles
    g.block("b", rows_block(8, 32, 2)?, &[a])?; // 4-row tiles
    let c = compile(&g, &opts(3))?;
    let (ta, tb) = (tasks_of(&c, "a"), tasks_of(&c, "b"));
    assert_eq!(c.deps[tb[0]], vec![ta[0], ta[1]]);
    assert_eq!(c.deps[tb[1]], vec![ta[2], ta[3]]);
    assert!(ta.iter().all(|&t| c.deps[t].is_empty()));
    // Two of four producer tiles: per-task counters, one signal each.
    assert_eq!(waits_of(&c, tb[0]), vec![CounterOf::Task(ta[0]), CounterOf::Task(ta[1])]);
    for &t in &ta {
        assert_eq!(c.sync.signals[t].len(), 1);
        assert_eq!(c.sync.counters[c.sync.signals[t][0]].triggers, 1);
    }
    // b's tiles are waited on by no one: they signal nothing but the step barrier (implicit).
    assert!(tb.iter().all(|&t| c.sync.signals[t].is_empty()));
    Ok(())
}

#[test]
fn a_consumer_of_every_tile_waits_on_the_aggregate_counter() -> R {
    let mut g = StepGraph::new("aggregate")?;
    let x = g.input("x", &[8, 32], F32)?;
    let a = g.block("a", rows_block(8, 32, 4)?, &[x])?[0];
    g.block("b", rows_block(8, 32, 1)?, &[a])?;
    let c = compile(&g, &opts(2))?;
    let (ta, tb) = (tasks_of(&c, "a"), tasks_of(&c, "b"));
    assert_eq!(c.deps[tb[0]], ta);
    let a_op = c.graph.op_named("a").ok_or("no a")?;
    assert_eq!(waits_of(&c, tb[0]), vec![CounterOf::Op(a_op)]);
    let k = c.sync.waits[tb[0]][0];
    assert_eq!(c.sync.counters[k].triggers, 4);
    assert!(ta.iter().all(|&t| c.sync.signals[t] == vec![k]));
    Ok(())
}

#[test]
fn a_wait_implied_by_another_is_dropped() -> R {
    let mut g = StepGraph::new("implied")?;
    let x = g.input("x", &[4], F32)?;
    let a = g.builtin("a", Builtin::Nop { all: false }, &[x])?[0];
    let b = g.builtin("b", Builtin::Nop { all: true }, &[a])?[0];
    g.block("c", add_block(4)?, &[a, b])?;
    let c = compile(&g, &opts(2))?;
    let tc = tasks_of(&c, "c")[0];
    // c reads all of a and all of b; every tile of b already waited for all of a.
    assert_eq!(c.deps[tc].len(), 8);
    assert_eq!(waits_of(&c, tc), vec![CounterOf::Op(c.graph.op_named("b").ok_or("no b")?)]);
    Ok(())
}

#[test]
fn a_state_written_after_it_is_read_waits_for_its_readers() -> R {
    let mut g = StepGraph::new("war")?;
    let x = g.input("x", &[4], F32)?;
    let s = g.state("s", &[4], F32)?;
    g.builtin("read", Builtin::Nop { all: false }, &[s])?;
    g.add_builtin("write", Builtin::Nop { all: false }, &[x], &[s])?;
    let c = compile(&g, &opts(2))?;
    let (r, w) = (tasks_of(&c, "read"), tasks_of(&c, "write"));
    for i in 0..4 {
        assert_eq!(c.deps[w[i]], vec![r[i]], "write tile {i} waits for the read of its element only");
    }
    Ok(())
}

#[test]
fn decode_tasks_depend_on_their_heads() -> R {
    let cfg = DecoderConfig::toy();
    let g = decoder_step("toy", &cfg)?;
    let c = compile(&g, &opts(8))?;
    let attn = tasks_of(&c, "l0.attention");
    // q | k | v: one projection's tasks
    let qkv = tasks_of(&c, "l0.qkv.k0");
    // split-KV: 132 / kv_heads chunks per KV head would fill an H200's workers, but each chunk
    // keeps at least MIN_CHUNK_KEYS keys of the full cache
    let chunks = (132 / cfg.kv_heads).min(cfg.capacity.div_ceil(mirage::mpk::builtin::MIN_CHUNK_KEYS));
    assert!(chunks < 132 / cfg.kv_heads, "the toy's cache is short enough to cap the chunks");
    assert_eq!(attn.len(), chunks * cfg.kv_heads);
    let (d, group) = (cfg.head_dim, cfg.heads / cfg.kv_heads);
    // The projection task `i` of a tiling of `cols` columns, for the columns [lo, hi).
    let (qw, kvw) = (cfg.heads * d, cfg.kv_heads * d);
    let cols = mirage::mpk::decoder::projection_tiling_in(cfg.tile_unit(), cfg.hidden, qw + 2 * kvw).cols;
    assert_eq!(qkv.len(), (qw + 2 * kvw) / cols);
    let cover = |lo: usize, hi: usize| -> Vec<usize> {
        qkv.iter().enumerate().filter(|(i, _)| i * cols < hi && (i + 1) * cols > lo).map(|(_, &t)| t).collect()
    };
    for &t in &attn {
        // a chunk of KV head `kvh` reads the projections of its group's query heads and its KV
        // head's new key and value (RoPE, the appends and the merge are the operator's own):
        // the tasks of q | k | v covering those columns
        let kvh = c.tasks[t].tile[1];
        let mut want = cover(kvh * group * d, (kvh + 1) * group * d);
        want.extend(cover(qw + kvh * d, qw + (kvh + 1) * d));
        want.extend(cover(qw + kvw + kvh * d, qw + kvw + (kvh + 1) * d));
        want.sort();
        want.dedup();
        assert_eq!(c.deps[t], want, "attention chunk {:?}", c.tasks[t].tile);
    }
    // The next step's token is written after this step's embedding read it.
    let emb = tasks_of(&c, "embedding");
    let next = tasks_of(&c, "next_token")[0];
    assert!(emb.iter().all(|e| c.deps[next].contains(e)));
    Ok(())
}

#[test]
fn the_list_schedule_passes_its_check_for_any_worker_count() -> R {
    let g = decoder_step("toy", &DecoderConfig::toy())?;
    for workers in [1, 3, 8, 132] {
        let c = compile(&g, &opts(workers))?;
        assert_eq!(c.schedule.workers.len(), workers);
        assert_eq!(c.schedule.workers.iter().map(Vec::len).sum::<usize>(), c.tasks.len());
        // Every list follows the global order.
        for list in &c.schedule.workers {
            assert!(list.windows(2).all(|p| p[0] < p[1]));
        }
    }
    Ok(())
}

/// x → a (4 tiles) → b (4 tiles, tile i reads a's tile i), on two workers.
fn chain() -> R<Compiled> {
    let mut g = StepGraph::new("chain")?;
    let x = g.input("x", &[4], F32)?;
    let a = g.builtin("a", Builtin::Nop { all: false }, &[x])?[0];
    g.builtin("b", Builtin::Nop { all: false }, &[a])?;
    Ok(compile(&g, &opts(2))?)
}

fn check(c: &Compiled, s: &Schedule) -> Result<(), ScheduleError> {
    validate(&c.graph, &c.tasks, &c.deps, &c.sync, s)
}

#[test]
fn a_consumer_listed_before_its_producer_on_one_worker_deadlocks() -> R {
    let c = chain()?;
    // tasks: a0..a3 = 0..3, b0..b3 = 4..7
    let s = Schedule { workers: vec![vec![4, 0, 5, 1], vec![2, 6, 3, 7]] };
    let e = check(&c, &s).expect_err("an error");
    assert!(matches!(e, ScheduleError::Deadlock { step: 1, .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("worker 0 at `b[0]` waits for `a[0]` (0/1)"), "{msg}");
    assert!(check(&c, &c.schedule).is_ok());
    Ok(())
}

#[test]
fn crossed_lists_deadlock() -> R {
    let c = chain()?;
    let s = Schedule { workers: vec![vec![5, 0, 2, 6], vec![4, 1, 3, 7]] };
    let e = check(&c, &s).expect_err("an error");
    let msg = e.to_string();
    assert!(msg.contains("worker 0 at `b[1]`") && msg.contains("worker 1 at `b[0]`"), "{msg}");
    Ok(())
}

#[test]
fn lists_that_lose_or_repeat_a_task_are_rejected() -> R {
    let c = chain()?;
    let lost = Schedule { workers: vec![vec![0, 1, 2, 3], vec![4, 5, 6]] };
    assert!(check(&c, &lost).expect_err("an error").to_string().contains("`b[3]` is on no worker's list"));
    let twice = Schedule { workers: vec![vec![0, 1, 2, 3, 4], vec![4, 5, 6, 7]] };
    assert!(check(&c, &twice).expect_err("an error").to_string().contains("`b[0]` is listed twice"));
    Ok(())
}

#[test]
fn a_missing_wait_is_caught_by_the_vector_clocks() -> R {
    let mut c = chain()?;
    // b2 runs on the other worker than a2 in some valid schedule; drop its wait.
    let s = Schedule { workers: vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]] };
    assert!(check(&c, &s).is_ok());
    c.sync.waits[6].clear();
    let e = check(&c, &s).expect_err("an error");
    assert_eq!(
        e.to_string(),
        "schedule of `chain`: `b[2]` may run before `a[2]`, which it depends on: no wait orders them"
    );
    Ok(())
}

#[test]
fn a_miscounted_counter_is_caught() -> R {
    let mut c = chain()?;
    let k = c.sync.waits[4][0];
    c.sync.counters[k].triggers = 2;
    assert!(matches!(
        check(&c, &c.schedule.clone()).expect_err("an error"),
        ScheduleError::Triggers { triggers: 2, found: 1, .. }
    ));
    Ok(())
}

fn graph_error(r: Result<impl std::fmt::Debug, GraphError>) -> String {
    r.expect_err("an error").to_string()
}

#[test]
fn a_cycle_through_buffers_is_an_error_naming_its_operators() -> R {
    let mut g = StepGraph::new("cyclic")?;
    let a = g.buffer("a", &[4], F32)?;
    let b = g.buffer("b", &[4], F32)?;
    g.add_builtin("f", Builtin::Nop { all: false }, &[b], &[a])?;
    g.add_builtin("h", Builtin::Nop { all: false }, &[a], &[b])?;
    let e = compile(&g, &opts(2)).expect_err("an error");
    assert!(matches!(e, BuildError::Graph(GraphError::Cycle { .. })), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("`f` -> `h` -> `f`") || msg.contains("`h` -> `f` -> `h`"), "{msg}");
    Ok(())
}

#[test]
fn operators_added_out_of_order_are_ordered_by_their_buffers() -> R {
    let mut g = StepGraph::new("reordered")?;
    let x = g.input("x", &[4], F32)?;
    let a = g.buffer("a", &[4], F32)?;
    let b = g.buffer("b", &[4], F32)?;
    g.add_builtin("second", Builtin::Nop { all: false }, &[a], &[b])?;
    g.add_builtin("first", Builtin::Nop { all: false }, &[x], &[a])?;
    let c = compile(&g, &opts(2))?;
    let names: Vec<&str> = c.order.iter().map(|o| c.graph.ops()[o.0].name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
    Ok(())
}

#[test]
fn dataflow_errors_name_the_tensor() -> R {
    let mut g = StepGraph::new("unwritten")?;
    let a = g.buffer("a", &[4], F32)?;
    g.builtin("f", Builtin::Nop { all: false }, &[a])?;
    let e = compile(&g, &opts(2)).expect_err("an error").to_string();
    assert!(e.contains("tensor `a`: read by `f` but written by no operator"), "{e}");

    let mut g = StepGraph::new("twice")?;
    let x = g.input("x", &[4], F32)?;
    let a = g.buffer("a", &[4], F32)?;
    g.add_builtin("f", Builtin::Nop { all: false }, &[x], &[a])?;
    g.add_builtin("h", Builtin::Nop { all: false }, &[x], &[a])?;
    let e = compile(&g, &opts(2)).expect_err("an error").to_string();
    assert!(e.contains("tensor `a`: a buffer is written once per step, found two writers `f` and `h`"), "{e}");
    Ok(())
}

#[test]
fn operand_errors_name_the_operator() -> R {
    let mut g = StepGraph::new("bad")?;
    let x = g.input("x", &[8, 16], F32)?;
    let e = graph_error(g.block("exp", rows_block(8, 32, 4)?, &[x]));
    assert!(e.contains("operator `exp`: operand 0: expected f32 [8, 32], found `x`: f32 [8, 16]"), "{e}");
    let y = g.input("y", &[4], F32)?;
    let e = graph_error(g.add_builtin("w", Builtin::Nop { all: false }, &[y], &[y]));
    assert!(e.contains("operator `w`: writes `y`, an input"), "{e}");
    let s = g.state("s", &[4], F32)?;
    let e = graph_error(g.add_builtin("inplace", Builtin::Nop { all: false }, &[s], &[s]));
    assert!(e.contains("reads and writes `s`"), "{e}");
    let q = g.input("q", &[1, 8 * 64], DType::F16)?;
    let kc = g.state("kc", &[3, 16, 64], DType::F16)?;
    let p = g.param("pos")?;
    let attn = Builtin::AttentionPartial { keylen: ParamExpr::of(p), scale: Scalar(0.125), chunks: 4 };
    let e = graph_error(g.builtin("attn", attn, &[q, kc, kc]));
    assert!(e.contains("operator `attn`: kv_heads 3 must divide heads 8"), "{e}");
    let e = graph_error(g.input("x", &[2], F32));
    assert!(e.contains("tensor `x`: the name is taken"), "{e}");
    let e = graph_error(g.param("bad name"));
    assert!(e.contains("expected only letters, digits"), "{e}");
    Ok(())
}

#[test]
fn a_mugraph_returning_its_input_is_unsupported() -> R {
    let mut k = KernelGraph::new();
    let a = k.input(&[4], F32)?;
    k.output(a, None)?;
    let mut g = StepGraph::new("identity")?;
    let x = g.input("x", &[4], F32)?;
    let e = graph_error(g.mugraph("id", &k, &[x]));
    assert!(e.contains("operator `id`: unsupported: an output is its input 0 itself"), "{e}");
    Ok(())
}

#[test]
fn table_overflows_are_build_errors() -> R {
    let mut g = StepGraph::new("wide")?;
    let x = g.input("x", &[70_000], F32)?;
    g.builtin("wide_op", Builtin::Nop { all: false }, &[x])?;
    let e = compile(&g, &opts(2)).expect_err("an error").to_string();
    assert!(
        e.contains("operator `wide_op` has a grid [70000, 1, 1]: the task table holds tiles below 65536 per axis"),
        "{e}"
    );

    let g = decoder_step("toy", &DecoderConfig::toy())?;
    let small = |limits| MpkOptions { workers: 4, limits, ..MpkOptions::default() };
    let e =
        compile(&g, &small(TableLimits { max_tasks: 50, ..TableLimits::default() })).expect_err("an error").to_string();
    assert!(e.contains("tasks per step: the tables hold at most 50"), "{e}");
    // Each tile of `b` reads 32 of the 64 one-row tiles of `a`: 32 per-task waits.
    let mut g2 = StepGraph::new("many_waits")?;
    let x = g2.input("x", &[64, 1], F32)?;
    let a = g2.block("a", rows_block(64, 1, 64)?, &[x])?[0];
    g2.block("b", rows_block(64, 1, 2)?, &[a])?;
    let e =
        compile(&g2, &small(TableLimits { max_waits_per_task: 16, ..TableLimits::default() })).expect_err("an error");
    assert!(e.to_string().contains("task `b[0]` waits on 32 counters: the tables hold at most 16 per task"), "{e}");
    assert!(compile(&g2, &opts(4)).is_ok());
    let e = compile(&g2, &MpkOptions { threads: 100, ..MpkOptions::default() }).expect_err("an error");
    assert!(matches!(e, BuildError::Options(_)), "{e}");
    Ok(())
}
