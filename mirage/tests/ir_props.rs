//! Properties of the IR's JSON format and canonical hash (DESIGN §4): JSON round-trips are the
//! identity on random valid graphs; the hash ignores node numbering and the insertion order of
//! independent operators, and changes with wiring, shapes, strides, dtypes, maps, ranges and
//! constants; malformed JSON is rejected with a clear error.
#![cfg(feature = "build")]

use mirage::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, FORMAT, GridMap, IrError, KernelGraph, KernelOp, Scalar, TensorDesc,
    TensorRef, UnaryOp, VERSION,
};
use mirage::reference::{HostTensor, run};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;

#[track_caller]
fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Random valid graphs
// ---------------------------------------------------------------------------------------------

const DTYPES: [DType; 3] = [DType::F16, DType::Bf16, DType::F32];
const BINARIES: [BinaryOp; BinaryOp::ALL.len()] = BinaryOp::ALL;

/// A float constant: mostly ordinary values, sometimes any bit pattern (subnormals, NaNs with
/// payloads), infinities or signed zeros.
fn constant(rng: &mut StdRng) -> Scalar {
    Scalar(match rng.random_range(0..8) {
        0 => f32::from_bits(rng.random()),
        1 => *[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -0.0, 0.0, f32::MIN_POSITIVE / 8.0, f32::MAX]
            .choose(rng)
            .unwrap_or(&0.0),
        _ => rng.random_range(-4.0f32..4.0),
    })
}

/// Any operator of the table; those with parameters get random constants (an operator this
/// does not know keeps the table's example parameters).
fn random_unary(rng: &mut StdRng) -> UnaryOp {
    match UnaryOp::ALL.choose(rng).copied().unwrap_or(UnaryOp::Exp) {
        UnaryOp::Clamp { .. } => UnaryOp::Clamp { lo: constant(rng), hi: constant(rng) },
        UnaryOp::MulScalar { .. } => UnaryOp::MulScalar { c: constant(rng) },
        other => other,
    }
}

fn random_shape(rng: &mut StdRng) -> Vec<usize> {
    let rank = rng.random_range(1..=3);
    (0..rank).map(|_| *[1, 2, 4, 8].choose(rng).unwrap_or(&1)).collect()
}

fn pick<T: Copy>(rng: &mut StdRng, v: &[T]) -> Option<T> {
    v.choose(rng).copied()
}

/// Tries `f` with up to `tries` random choices; keeps the first success.
fn attempt<T>(tries: usize, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    (0..tries).find_map(|_| f())
}

/// A random valid block graph over `operands`, or `None` when the random choices led nowhere.
fn random_block(rng: &mut StdRng, operands: &[TensorDesc]) -> Option<BlockGraph> {
    let grid = [*[1, 2, 4].choose(rng)?, *[1, 1, 2].choose(rng)?, *[1, 1, 1, 2].choose(rng)?];
    let frange = *[1, 1, 2, 4].choose(rng)?;
    let threads = *[32, 128, 256].choose(rng)?;
    let mut bg = BlockGraph::new(operands.to_vec(), grid, threads, frange).ok()?;
    let mut in_loop: Vec<TensorRef> = Vec::new();
    for (i, d) in operands.iter().enumerate() {
        let rank = d.shape.len();
        let t = attempt(12, || {
            let mut imap: GridMap = [None; 3];
            for (a, m) in imap.iter_mut().enumerate() {
                if grid[a] > 1 && rng.random_bool(0.7) {
                    *m = Some(rng.random_range(0..rank));
                }
            }
            let fdim = if rng.random_bool(0.6) { Some(rng.random_range(0..rank)) } else { None };
            bg.input(i, imap, fdim).ok()
        });
        in_loop.extend(t);
    }
    if in_loop.is_empty() {
        return None;
    }
    for _ in 0..rng.random_range(0..5) {
        let a = pick(rng, &in_loop)?;
        let b = pick(rng, &in_loop)?;
        let rank = bg.tile(a).ok()?.shape.len();
        let dim = rng.random_range(0..rank);
        let r = match rng.random_range(0..9) {
            0 => bg.unary(random_unary(rng), a).map(|t| vec![t]),
            1 => bg.binary(*BINARIES.choose(rng)?, a, b).map(|t| vec![t]),
            2 => bg.matmul(a, b).map(|t| vec![t]),
            3 => bg.op(BlockOp::ReduceSum { dim }, &[a]).map(|t| vec![t]),
            4 => bg.op(BlockOp::ReduceSumTo { dim, width: *[1, 2].choose(rng)? }, &[a]).map(|t| vec![t]),
            5 => bg.op(BlockOp::ReduceMax { dim }, &[a]).map(|t| vec![t]),
            6 => bg.op(BlockOp::RmsNorm { eps: constant(rng) }, &[a]).map(|t| vec![t]),
            7 => bg.push(BlockOp::RunningMax { dim }, &[a]),
            _ => bg.op(BlockOp::Concat { dim }, &[a, b]).map(|t| vec![t]),
        };
        in_loop.extend(r.unwrap_or_default());
    }
    let mut after: Vec<TensorRef> = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let t = attempt(6, || {
            let x = pick(rng, &in_loop)?;
            let r = pick(rng, &in_loop)?;
            let acc = match rng.random_range(0..7) {
                0 => AccKind::SumLast,
                1 => AccKind::RmsLast,
                2 => AccKind::SumTo { width: *[1, 2].choose(rng)? },
                3 => AccKind::Max,
                4 => AccKind::Rescale,
                5 => AccKind::SumLastRescale,
                _ => AccKind::Sum,
            };
            let ins = if matches!(acc, AccKind::Rescale | AccKind::SumLastRescale) { vec![x, r] } else { vec![x] };
            bg.accum(acc, &ins).ok()
        });
        after.extend(t);
    }
    for _ in 0..rng.random_range(0..3) {
        let (Some(a), Some(b)) = (pick(rng, &after), pick(rng, &after)) else { break };
        let r =
            if rng.random_bool(0.5) { bg.unary(random_unary(rng), a) } else { bg.binary(*BINARIES.choose(rng)?, a, b) };
        after.extend(r.ok());
    }
    let mut saved = 0;
    for _ in 0..rng.random_range(1..=2) {
        let done = attempt(12, || {
            let t = pick(rng, &after)?;
            let rank = bg.tile(t).ok()?.shape.len();
            let mut omap: GridMap = [None; 3];
            for (a, m) in omap.iter_mut().enumerate() {
                if grid[a] > 1 {
                    *m = Some(rng.random_range(0..rank));
                }
            }
            bg.output(t, omap).ok()
        });
        saved += usize::from(done.is_some());
    }
    (saved > 0).then_some(bg)
}

fn random_input(rng: &mut StdRng, g: &mut KernelGraph, dtype: DType) -> Option<TensorRef> {
    let shape = random_shape(rng);
    let dtype = if rng.random_bool(0.1) { *DTYPES.choose(rng)? } else { dtype };
    if shape.len() == 2 && rng.random_bool(0.3) {
        // Column-major.
        g.input_strided(&shape, &[1, shape[0]], dtype).ok()
    } else {
        g.input(&shape, dtype).ok()
    }
}

/// A random valid kernel graph: random operators on random operands, kept when the builders
/// accept them.
fn random_graph(seed: u64) -> KernelGraph {
    let mut rng = StdRng::seed_from_u64(seed);
    let rng = &mut rng;
    let mut g = KernelGraph::new();
    let dtype = DTYPES[rng.random_range(0..3)];
    let mut ts: Vec<TensorRef> = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        ts.extend(random_input(rng, &mut g, dtype));
    }
    let mut outputs = 0;
    for _ in 0..rng.random_range(2..=12) {
        let kind = rng.random_range(0..11);
        let made: Vec<TensorRef> = attempt(8, || {
            let a = pick(rng, &ts)?;
            let b = pick(rng, &ts)?;
            let rank = g.desc(a).ok()?.shape.len();
            let dim = rng.random_range(0..rank);
            match kind {
                0 => random_input(rng, &mut g, dtype).map(|t| vec![t]),
                1 => g.unary(random_unary(rng), a).ok().map(|t| vec![t]),
                2 => g.binary(*BINARIES.choose(rng)?, a, b).ok().map(|t| vec![t]),
                3 => g.matmul(a, b).ok().map(|t| vec![t]),
                4 => g.reduce_sum(a, dim).ok().map(|t| vec![t]),
                5 => g.reduce_max(a, dim).ok().map(|t| vec![t]),
                6 => g
                    .rms_norm(a, constant(rng).0, if rng.random_bool(0.5) { Some(b) } else { None })
                    .ok()
                    .map(|t| vec![t]),
                7 => g.concat(a, b, dim).ok().map(|t| vec![t]),
                8 => {
                    let strides = if rng.random_bool(0.3) && rank == 2 {
                        let s = &g.desc(a).ok()?.shape;
                        Some(vec![1, s[0]])
                    } else {
                        None
                    };
                    g.output(a, strides).ok()?;
                    outputs += 1;
                    Some(vec![])
                }
                _ => {
                    let ops: Vec<TensorRef> = if rng.random_bool(0.5) { vec![a] } else { vec![a, b] };
                    let descs = ops.iter().map(|&t| g.desc(t).cloned()).collect::<Result<Vec<_>, _>>().ok()?;
                    let bg = random_block(rng, &descs)?;
                    g.custom(&ops, bg).ok()
                }
            }
        })
        .unwrap_or_default();
        ts.extend(made);
    }
    if outputs == 0 || rng.random_bool(0.5) {
        let t = *ts.last().unwrap_or(&TensorRef::new(0));
        let _ = g.output(t, None);
    }
    g
}

// ---------------------------------------------------------------------------------------------
// Reordering
// ---------------------------------------------------------------------------------------------

/// A random topological order of nodes `0..n` with operands `deps(i)`, keeping the relative order
/// of the nodes `ordered` marks (the signature: inputs among inputs, outputs among outputs).
fn random_topo_order(
    rng: &mut StdRng,
    n: usize,
    deps: impl Fn(usize) -> Vec<usize>,
    class: impl Fn(usize) -> Option<u8>,
) -> Vec<usize> {
    let mut placed = vec![false; n];
    let mut order = Vec::with_capacity(n);
    while order.len() < n {
        let ready: Vec<usize> = (0..n)
            .filter(|&i| !placed[i] && deps(i).iter().all(|&d| placed[d]))
            // A signature node may go only after every earlier node of its class.
            .filter(|&i| class(i).is_none_or(|c| (0..i).all(|j| placed[j] || class(j) != Some(c))))
            .collect();
        let i = *ready.choose(rng).expect("a DAG always has a ready node");
        placed[i] = true;
        order.push(i);
    }
    order
}

fn remap(t: TensorRef, new_index: &[usize]) -> TensorRef {
    TensorRef { node: new_index[t.node], port: t.port }
}

fn reorder_block(rng: &mut StdRng, bg: &BlockGraph) -> BlockGraph {
    let nodes = bg.nodes();
    let order = random_topo_order(
        rng,
        nodes.len(),
        |i| nodes[i].inputs.iter().map(|t| t.node).collect(),
        |i| matches!(nodes[i].op, BlockOp::Output { .. }).then_some(0),
    );
    let mut new_index = vec![0; nodes.len()];
    let mut out = ok(BlockGraph::new(bg.inputs().to_vec(), bg.grid(), bg.threads(), bg.forloop_range()));
    for (k, &i) in order.iter().enumerate() {
        new_index[i] = k;
        let inputs: Vec<TensorRef> = nodes[i].inputs.iter().map(|&t| remap(t, &new_index)).collect();
        ok(out.push(nodes[i].op.clone(), &inputs));
    }
    out
}

/// The same graph with its nodes re-pushed in another random topological order (block graphs
/// too), references renumbered.
fn reorder(rng: &mut StdRng, g: &KernelGraph) -> KernelGraph {
    let nodes = g.nodes();
    let class = |i: usize| match nodes[i].op {
        KernelOp::Input { .. } => Some(0),
        KernelOp::Output { .. } => Some(1),
        _ => None,
    };
    let order = random_topo_order(rng, nodes.len(), |i| nodes[i].inputs.iter().map(|t| t.node).collect(), class);
    let mut new_index = vec![0; nodes.len()];
    let mut out = KernelGraph::new();
    for (k, &i) in order.iter().enumerate() {
        new_index[i] = k;
        let inputs: Vec<TensorRef> = nodes[i].inputs.iter().map(|&t| remap(t, &new_index)).collect();
        let op = match &nodes[i].op {
            KernelOp::Custom { block } => KernelOp::Custom { block: Box::new(reorder_block(rng, block)) },
            other => other.clone(),
        };
        ok(out.push(op, &inputs));
    }
    out
}

fn random_inputs(g: &KernelGraph, seed: u64) -> Vec<HostTensor> {
    mirage::testing::inputs::graph_inputs(g, seed, |_| 0.5..1.5)
}

fn same_bits(a: &[HostTensor], b: &[HostTensor]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.shape == y.shape
                && x.data.iter().zip(&y.data).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// (a) `from_json ∘ to_json` is the identity, hash included.
    #[test]
    fn json_round_trip_is_the_identity(seed in any::<u64>()) {
        let g = random_graph(seed);
        prop_assert!(g.validate().is_ok());
        let json = g.to_json();
        let back = KernelGraph::from_json(&json);
        prop_assert!(back.is_ok(), "{:?}\n{}", back, json);
        let back = back.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.canonical_hash(), g.canonical_hash());
        prop_assert_eq!(back.to_json(), json);
        prop_assert_eq!(back, g.clone());
        for node in g.nodes() {
            if let KernelOp::Custom { block } = &node.op {
                let b = BlockGraph::from_json(&block.to_json());
                prop_assert_eq!(b.as_ref().ok(), Some(&**block), "{:?}", b);
            }
        }
    }

    /// (b) Renumbering nodes and reordering independent operators keeps the hash (and the
    /// meaning: the reference interpreter gives the same bits).
    #[test]
    fn hash_ignores_node_order(seed in any::<u64>()) {
        let g = random_graph(seed);
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let h = g.canonical_hash();
        for _ in 0..3 {
            let r = reorder(&mut rng, &g);
            prop_assert_eq!(r.nodes().len(), g.nodes().len());
            prop_assert_eq!(r.inputs(), g.inputs());
            prop_assert_eq!(r.canonical_hash(), h);
        }
        let r = reorder(&mut rng, &g);
        let inputs = random_inputs(&g, seed);
        let (a, b) = (run(&g, &inputs), run(&r, &inputs));
        prop_assert!(a.is_ok() && b.is_ok());
        prop_assert!(same_bits(&a.unwrap_or_default(), &b.unwrap_or_default()), "reordered graph computes something else");
    }
}

#[test]
fn random_graphs_are_rich() {
    // The generator must actually produce the operators the properties are about.
    let (mut custom, mut matmul, mut nodes, mut block_nodes, mut reordered) = (0, 0, 0, 0, 0);
    let mut rng = StdRng::seed_from_u64(1);
    for seed in 0..200 {
        let g = random_graph(seed);
        nodes += g.nodes().len();
        for n in g.nodes() {
            match &n.op {
                KernelOp::Custom { block } => {
                    custom += 1;
                    block_nodes += block.nodes().len();
                }
                KernelOp::Matmul => matmul += 1,
                _ => {}
            }
        }
        if reorder(&mut rng, &g).nodes() != g.nodes() {
            reordered += 1;
        }
    }
    println!("custom {custom}, matmul {matmul}, nodes {nodes}, block nodes {block_nodes}, reordered {reordered}");
    assert!(
        custom >= 100 && matmul >= 20 && nodes >= 1000 && block_nodes >= 1000 && reordered >= 150,
        "custom {custom}, matmul {matmul}, nodes {nodes}, block nodes {block_nodes}, reordered {reordered}"
    );
}

#[test]
fn hash_ignores_insertion_order_of_a_hand_built_graph() {
    // exp(a) and neg(b) are independent: either order, same hash, different node lists.
    let build = |exp_first: bool| {
        let mut g = KernelGraph::new();
        let a = ok(g.input(&[4], DType::F32));
        let b = ok(g.input(&[4], DType::F32));
        let (e, n) = if exp_first {
            let e = ok(g.exp(a));
            (e, ok(g.unary(UnaryOp::Neg, b)))
        } else {
            let n = ok(g.unary(UnaryOp::Neg, b));
            (ok(g.exp(a)), n)
        };
        let s = ok(g.binary(BinaryOp::Sub, e, n));
        ok(g.output(s, None));
        g
    };
    let (x, y) = (build(true), build(false));
    assert_ne!(x, y);
    assert_eq!(x.canonical_hash(), y.canonical_hash());
    assert_eq!(x.canonical_hash().to_hex().len(), 64);
}

// ---------------------------------------------------------------------------------------------
// (c) The hash sees every structural change
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Fixture {
    swap_sub: bool,
    rewire_mul: bool,
    inputs_swapped: bool,
    outputs_swapped: bool,
    cols: usize,
    column_major_a: bool,
    dtype: DType,
    imap_x: GridMap,
    fdim_x: Option<usize>,
    omap: GridMap,
    grid: [usize; 3],
    threads: usize,
    frange: usize,
    acc: AccKind,
    c: f32,
    clamp_hi: f32,
    eps: f32,
    out_strides: Option<Vec<usize>>,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture {
            swap_sub: false,
            rewire_mul: false,
            inputs_swapped: false,
            outputs_swapped: false,
            cols: 8,
            column_major_a: false,
            dtype: DType::F32,
            imap_x: [Some(0), Some(1), None],
            fdim_x: None,
            omap: [Some(0), Some(1), None],
            grid: [2, 2, 1],
            threads: 128,
            frange: 1,
            acc: AccKind::Sum,
            c: 2.0,
            clamp_hi: 1.0,
            eps: 1e-6,
            out_strides: None,
        }
    }
}

/// `r = rms_norm(clamp(c · ((a - b) · a)))`, then a block graph adding tiles of `r` and `b`;
/// every field of `Fixture` changes exactly one thing.
fn fixture(p: &Fixture) -> KernelGraph {
    let mut g = KernelGraph::new();
    let shape = [8, p.cols];
    let mk = |g: &mut KernelGraph, column_major: bool| {
        if column_major { ok(g.input_strided(&shape, &[1, 8], p.dtype)) } else { ok(g.input(&shape, p.dtype)) }
    };
    let (a, b) = if p.inputs_swapped {
        let b = mk(&mut g, false);
        (mk(&mut g, p.column_major_a), b)
    } else {
        let a = mk(&mut g, p.column_major_a);
        (a, mk(&mut g, false))
    };
    let s = if p.swap_sub { ok(g.binary(BinaryOp::Sub, b, a)) } else { ok(g.binary(BinaryOp::Sub, a, b)) };
    let t = ok(g.mul(s, if p.rewire_mul { b } else { a }));
    let m = ok(g.unary(UnaryOp::MulScalar { c: Scalar(p.c) }, t));
    let cl = ok(g.unary(UnaryOp::Clamp { lo: Scalar(0.0), hi: Scalar(p.clamp_hi) }, m));
    let r = ok(g.rms_norm(cl, p.eps, None));
    let descs = vec![ok(g.desc(r)).clone(), ok(g.desc(b)).clone()];
    let mut bg = ok(BlockGraph::new(descs, p.grid, p.threads, p.frange));
    let x = ok(bg.input(0, p.imap_x, p.fdim_x));
    let y = ok(bg.input(1, [Some(0), Some(1), None], None));
    let z = ok(bg.binary(BinaryOp::Add, x, y));
    let acc = ok(bg.accum(p.acc, &[z]));
    ok(bg.output(acc, p.omap));
    let k = ok(g.custom(&[r, b], bg))[0];
    if p.outputs_swapped {
        ok(g.output(r, None));
        ok(g.output(k, p.out_strides.clone()));
    } else {
        ok(g.output(k, p.out_strides.clone()));
        ok(g.output(r, None));
    }
    g
}

#[test]
fn hash_changes_with_every_structural_change() {
    let base = Fixture::default();
    let variants: Vec<(&str, Fixture)> = vec![
        ("base", base.clone()),
        ("operands of sub swapped", Fixture { swap_sub: true, ..base.clone() }),
        ("mul rewired to another tensor of the same shape", Fixture { rewire_mul: true, ..base.clone() }),
        ("inputs declared in the other order", Fixture { inputs_swapped: true, ..base.clone() }),
        ("outputs in the other order", Fixture { outputs_swapped: true, ..base.clone() }),
        ("a shape", Fixture { cols: 16, ..base.clone() }),
        ("an input's strides", Fixture { column_major_a: true, ..base.clone() }),
        ("the dtype", Fixture { dtype: DType::F16, ..base.clone() }),
        ("the dtype (bf16)", Fixture { dtype: DType::Bf16, ..base.clone() }),
        ("an imap", Fixture { imap_x: [Some(1), Some(0), None], ..base.clone() }),
        ("an omap", Fixture { omap: [Some(1), Some(0), None], ..base.clone() }),
        ("a forloop dim (0)", Fixture { fdim_x: Some(0), ..base.clone() }),
        ("a forloop dim (1)", Fixture { fdim_x: Some(1), ..base.clone() }),
        ("the forloop range", Fixture { frange: 2, ..base.clone() }),
        ("the grid", Fixture { grid: [1, 2, 1], ..base.clone() }),
        ("the threads", Fixture { threads: 256, ..base.clone() }),
        ("the accumulator", Fixture { acc: AccKind::Max, ..base.clone() }),
        ("a scalar", Fixture { c: 3.0, ..base.clone() }),
        ("a scalar's sign of zero", Fixture { c: -0.0, ..base.clone() }),
        ("a scalar of zero", Fixture { c: 0.0, ..base.clone() }),
        ("a clamp bound", Fixture { clamp_hi: f32::INFINITY, ..base.clone() }),
        ("a clamp bound (NaN)", Fixture { clamp_hi: f32::NAN, ..base.clone() }),
        ("an epsilon", Fixture { eps: 1e-5, ..base.clone() }),
        ("output strides", Fixture { out_strides: Some(vec![1, 8]), ..base.clone() }),
    ];
    let hashes: Vec<_> = variants.iter().map(|(_, p)| fixture(p).canonical_hash()).collect();
    assert_eq!(fixture(&base).canonical_hash(), hashes[0], "the hash is deterministic");
    for i in 0..variants.len() {
        for j in 0..i {
            assert_ne!(hashes[i], hashes[j], "changing {} vs {} left the hash unchanged", variants[i].0, variants[j].0);
        }
        // Every variant also round-trips through JSON.
        let g = fixture(&variants[i].1);
        assert_eq!(ok(KernelGraph::from_json(&g.to_json())), g, "{}", variants[i].0);
    }
}

#[test]
fn non_finite_constants_round_trip() {
    for v in [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fc0_0001),
        f32::from_bits(0xff80_0001),
        -0.0,
        f32::from_bits(1),
    ] {
        let mut g = KernelGraph::new();
        let x = ok(g.input(&[2], DType::F32));
        let y = ok(g.unary(UnaryOp::Clamp { lo: Scalar(v), hi: Scalar(f32::INFINITY) }, x));
        let z = ok(g.rms_norm(y, v, None));
        ok(g.output(z, None));
        let back = ok(KernelGraph::from_json(&g.to_json()));
        assert_eq!(back, g, "constant {v:?} (bits {:#010x})", v.to_bits());
        assert_eq!(back.canonical_hash(), g.canonical_hash());
    }
}

// ---------------------------------------------------------------------------------------------
// from_json rejects what it cannot trust
// ---------------------------------------------------------------------------------------------

#[track_caller]
fn format_err<T: std::fmt::Debug>(r: Result<T, IrError>, parts: &[&str]) -> String {
    let e = match r {
        Ok(v) => panic!("expected an error mentioning {parts:?}, got Ok({v:?})"),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(matches!(e, IrError::Format(_) | IrError::Rule { .. }), "{e:?}");
    for p in parts {
        assert!(msg.contains(p), "error message {msg:?} does not contain {p:?}");
    }
    msg
}

fn small_graph() -> KernelGraph {
    let mut g = KernelGraph::new();
    let a = ok(g.input(&[2, 3], DType::F32));
    let b = ok(g.input(&[3, 4], DType::F32));
    let m = ok(g.matmul(a, b));
    let descs = vec![ok(g.desc(m)).clone()];
    let mut bg = ok(BlockGraph::new(descs, [2, 1, 1], 128, 2));
    let x = ok(bg.input(0, [Some(1), None, None], Some(1)));
    let acc = ok(bg.accum(AccKind::SumLast, &[x]));
    ok(bg.output(acc, [Some(1), None, None]));
    let k = ok(g.custom(&[m], bg))[0];
    ok(g.output(k, None));
    g
}

fn edit(g: &KernelGraph, f: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = ok(serde_json::from_str(&g.to_json()));
    f(&mut v);
    v.to_string()
}

fn remove_field(v: &mut Value, key: &str) {
    if let Some(o) = v.as_object_mut() {
        o.remove(key);
    }
}

#[test]
fn from_json_rejects_other_formats_and_versions() {
    let g = small_graph();
    assert_eq!(ok(KernelGraph::from_json(&g.to_json())), g);
    let v: Value = ok(serde_json::from_str(&g.to_json()));
    assert_eq!(v["format"], FORMAT);
    assert_eq!(v["version"], VERSION);
    format_err(KernelGraph::from_json("{"), &["invalid µGraph JSON"]);
    format_err(KernelGraph::from_json("[1, 2]"), &["invalid µGraph JSON"]);
    format_err(
        KernelGraph::from_json(&edit(&g, |v| v["format"] = "mirage/mugraph".into())),
        &["invalid µGraph JSON", "expected format \"mirage-rs/mugraph\", found \"mirage/mugraph\""],
    );
    format_err(
        KernelGraph::from_json(&edit(&g, |v| v["version"] = (VERSION + 1).into())),
        &["invalid µGraph JSON", &format!("expected version {VERSION}, found {}", VERSION + 1)],
    );
    format_err(
        KernelGraph::from_json(&edit(&g, |v| v["version"] = "1".into())),
        &["invalid µGraph JSON", "expected u32"],
    );
    format_err(KernelGraph::from_json(&edit(&g, |v| remove_field(v, "format"))), &["invalid µGraph JSON", "format"]);
    format_err(KernelGraph::from_json(&edit(&g, |v| remove_field(v, "graph"))), &["invalid µGraph JSON", "graph"]);
    // A block graph document is not a kernel graph.
    let KernelOp::Custom { block } = &g.nodes()[3].op else { panic!("node 3 is the custom kernel") };
    format_err(KernelGraph::from_json(&block.to_json()), &["invalid µGraph JSON"]);
    format_err(BlockGraph::from_json(&edit(&g, |_| {})), &["invalid µGraph JSON"]);
}

#[test]
fn from_json_checks_every_rule() {
    let g = small_graph();
    // A recorded output shape the rules disagree with.
    let j = edit(&g, |v| v["graph"]["nodes"][2]["outputs"][0]["shape"] = serde_json::json!([2, 5]));
    format_err(KernelGraph::from_json(&j), &["matmul", "node 2", "recorded outputs", "differ from the inferred"]);
    // An input whose shape breaks the matmul's rule.
    let j = edit(&g, |v| {
        v["graph"]["nodes"][1]["op"]["desc"]["shape"] = serde_json::json!([4, 4]);
        v["graph"]["nodes"][1]["outputs"][0]["shape"] = serde_json::json!([4, 4]);
        v["graph"]["nodes"][1]["op"]["desc"]["strides"] = serde_json::json!([4, 1]);
        v["graph"]["nodes"][1]["outputs"][0]["strides"] = serde_json::json!([4, 1]);
    });
    format_err(
        KernelGraph::from_json(&j),
        &["matmul", "inner dims differ: a is [.., m, k] with k = 3, b is [.., k, n] with k = 4"],
    );
    // Aliasing strides on an input.
    let j = edit(&g, |v| {
        v["graph"]["nodes"][0]["op"]["desc"]["strides"] = serde_json::json!([1, 1]);
        v["graph"]["nodes"][0]["outputs"][0]["strides"] = serde_json::json!([1, 1]);
    });
    format_err(KernelGraph::from_json(&j), &["input", "strides alias"]);
    // An operand produced later (or never).
    let j = edit(&g, |v| v["graph"]["nodes"][2]["inputs"][0]["node"] = 3.into());
    format_err(KernelGraph::from_json(&j), &["matmul", "node 2", "operand %3 is not produced by an earlier node"]);
    // Inside the block graph: a tile shape, an omap, a forloop dim.
    let j = edit(&g, |v| {
        v["graph"]["nodes"][3]["op"]["block"]["nodes"][0]["outputs"][0]["shape"] = serde_json::json!([2, 4])
    });
    format_err(KernelGraph::from_json(&j), &["input iterator", "block node 0", "recorded outputs"]);
    let j = edit(&g, |v| {
        v["graph"]["nodes"][3]["op"]["block"]["nodes"][2]["op"]["omap"] = serde_json::json!([null, null, null])
    });
    format_err(KernelGraph::from_json(&j), &["output saver", "grid.x = 2 > 1 needs an omap entry"]);
    let j = edit(&g, |v| v["graph"]["nodes"][3]["op"]["block"]["nodes"][0]["op"]["forloop_dim"] = 4.into());
    format_err(KernelGraph::from_json(&j), &["input iterator", "forloop_dim 4 is not a dim of a rank-2 tensor"]);
    let j = edit(&g, |v| v["graph"]["nodes"][3]["op"]["block"]["forloop_range"] = 0.into());
    format_err(KernelGraph::from_json(&j), &["block graph", "forloop_range must be at least 1"]);
    let j = edit(&g, |v| v["graph"]["nodes"][3]["op"]["block"]["nodes"][1]["op"]["acc"] = "sum_last_rescale".into());
    format_err(KernelGraph::from_json(&j), &["acc_sum_last_rescale", "expects 2 operands"]);
    // The kernel-level outputs of a custom op must be what its block graph saves.
    let j = edit(&g, |v| v["graph"]["nodes"][3]["outputs"][0]["shape"] = serde_json::json!([2, 1]));
    format_err(KernelGraph::from_json(&j), &["custom", "node 3", "recorded outputs"]);
    // The same checks when reading a block graph on its own.
    let KernelOp::Custom { block } = &g.nodes()[3].op else { panic!("node 3 is the custom kernel") };
    assert_eq!(ok(BlockGraph::from_json(&block.to_json())), **block);
    let mut v: Value = ok(serde_json::from_str(&block.to_json()));
    v["graph"]["nodes"][1]["outputs"][0]["phase"] = "in_loop".into();
    format_err(BlockGraph::from_json(&v.to_string()), &["acc_sum_last", "block node 1", "recorded outputs"]);
    let mut v: Value = ok(serde_json::from_str(&block.to_json()));
    v["graph"]["threads"] = 100.into();
    format_err(BlockGraph::from_json(&v.to_string()), &["block graph", "threads per block must be a multiple of 32"]);
}
