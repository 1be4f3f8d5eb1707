//! Golden µGraphs: every candidate Mirage found for the benchmark programs imports into our IR and,
//! run by the reference interpreter on fresh random inputs, matches its program in f32.
//! Deliberately corrupted candidates must mismatch: the check can fail.
#![cfg(feature = "build")]

use mirage::ir::{AccKind, BlockGraph, BlockOp, KernelGraph, KernelOp};
use mirage::reference::{HostTensor, max_scaled_error, run};
use mirage::testing::inputs::graph_inputs;
use mirage::testing::programs::{GoldenCase, golden_cases};

fn random_inputs(g: &KernelGraph, seed: u64) -> Vec<HostTensor> {
    graph_inputs(g, seed, |_| -1.0..1.0)
}

/// Largest scaled error of `candidate` against `reference` (≤ 1: within f32 tolerance).
fn error(reference: &[HostTensor], candidate: &[HostTensor]) -> f32 {
    assert_eq!(reference.len(), candidate.len(), "output count");
    reference
        .iter()
        .zip(candidate)
        .map(|(r, c)| {
            let scale = r.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            max_scaled_error(c, r, 1e-4 * scale, 1e-3).unwrap_or(f32::INFINITY)
        })
        .fold(0.0, f32::max)
}

struct Checked {
    case: GoldenCase,
    program: KernelGraph,
    inputs: Vec<HostTensor>,
    expected: Vec<HostTensor>,
    candidates: Vec<KernelGraph>,
}

fn load(case: GoldenCase, seed: u64) -> Checked {
    let program = (case.program)().unwrap_or_else(|e| panic!("{}: program: {e}", case.name));
    let candidates = case.candidates().unwrap_or_else(|e| panic!("{}: import: {e}", case.name));
    let inputs = random_inputs(&program, seed);
    let expected = run(&program, &inputs).expect("program runs");
    Checked { case, program, inputs, expected, candidates }
}

#[test]
fn every_golden_candidate_imports_and_matches_its_program() {
    let mut total = 0;
    for (i, case) in golden_cases().into_iter().enumerate() {
        let c = load(case, 1000 + i as u64);
        assert!(!c.candidates.is_empty(), "{}: no candidates", c.case.name);
        for (j, cand) in c.candidates.iter().enumerate() {
            assert_eq!(
                cand.inputs(),
                c.program.inputs(),
                "{} candidate {j}: inputs differ from the program's",
                c.case.name
            );
            let got = run(cand, &c.inputs).expect("candidate runs");
            let e = error(&c.expected, &got);
            assert!(e <= 1.0, "{} candidate {j}: scaled error {e} exceeds the f32 tolerance", c.case.name);
            total += 1;
        }
        println!("{}: {} candidates match the program", c.case.name, c.candidates.len());
    }
    assert_eq!(total, 181, "every candidate of every file was checked");
}

/// Rebuilds `g` through the builders with block operator `(kernel node, block node)` replaced by
/// `f`'s answer; `None` when the result breaks a rule (re-inferred shapes no longer fit).
fn rebuild_with(g: &KernelGraph, target: (usize, usize), op: BlockOp) -> Option<KernelGraph> {
    let mut out = KernelGraph::new();
    for (ni, node) in g.nodes().iter().enumerate() {
        let new_op = match &node.op {
            KernelOp::Custom { block } if ni == target.0 => {
                let mut b =
                    BlockGraph::new(block.inputs().to_vec(), block.grid(), block.threads(), block.forloop_range())
                        .ok()?;
                for (bi, bnode) in block.nodes().iter().enumerate() {
                    let o = if bi == target.1 { op.clone() } else { bnode.op.clone() };
                    b.push(o, &bnode.inputs).ok()?;
                }
                KernelOp::Custom { block: Box::new(b) }
            }
            other => other.clone(),
        };
        out.push(new_op, &node.inputs).ok()?;
    }
    Some(out)
}

/// A block operator with its position `(kernel node, block node)`, the rank of its input (for
/// input iterators, else 0), its block graph's grid and for-loop range.
type BlockOpAt = ((usize, usize), BlockOp, usize, [usize; 3], usize);

/// Every block operator of `g` with its position.
fn block_ops(g: &KernelGraph) -> Vec<BlockOpAt> {
    let mut out = Vec::new();
    for (ni, node) in g.nodes().iter().enumerate() {
        if let KernelOp::Custom { block } = &node.op {
            for (bi, bnode) in block.nodes().iter().enumerate() {
                let rank = match &bnode.op {
                    BlockOp::Input { input, .. } => block.inputs()[*input].shape.len(),
                    _ => 0,
                };
                out.push(((ni, bi), bnode.op.clone(), rank, block.grid(), block.forloop_range()));
            }
        }
    }
    out
}

/// Every valid graph obtained by changing one grid-map entry of one input iterator.
fn imap_mutants(g: &KernelGraph) -> Vec<KernelGraph> {
    let mut out = Vec::new();
    for (at, op, rank, grid, _) in block_ops(g) {
        let BlockOp::Input { input, imap, forloop_dim } = op else { continue };
        for axis in (0..3).filter(|&a| grid[a] > 1) {
            for alt in std::iter::once(None).chain((0..rank).map(Some)).filter(|&o| o != imap[axis]) {
                let mut m = imap;
                m[axis] = alt;
                out.extend(rebuild_with(g, at, BlockOp::Input { input, imap: m, forloop_dim }));
            }
        }
    }
    out
}

/// Every graph obtained by turning one `acc_sum` over more than one iteration into `acc_max`.
fn accumulator_mutants(g: &KernelGraph) -> Vec<KernelGraph> {
    block_ops(g)
        .into_iter()
        .filter(|(_, op, _, _, frange)| *frange > 1 && *op == BlockOp::Accum { acc: AccKind::Sum })
        .filter_map(|(at, ..)| rebuild_with(g, at, BlockOp::Accum { acc: AccKind::Max }))
        .collect()
}

#[test]
fn corrupted_candidates_mismatch() {
    let (mut imaps, mut accs) = (0, 0);
    for (i, case) in golden_cases().into_iter().enumerate() {
        let c = load(case, 2000 + i as u64);
        // The first two candidates of each file are enough to exercise every kind of graph.
        for cand in c.candidates.iter().take(2) {
            for (kind, mutants) in [("imap", imap_mutants(cand)), ("accumulator", accumulator_mutants(cand))] {
                for m in mutants.iter().take(3) {
                    let got = run(m, &c.inputs).expect("mutant runs");
                    let e = error(&c.expected, &got);
                    assert!(
                        e > 10.0,
                        "{}: a mutant with a changed {kind} still matches (scaled error {e})",
                        c.case.name
                    );
                    if kind == "imap" { imaps += 1 } else { accs += 1 }
                }
            }
        }
    }
    println!("rejected {imaps} changed-imap mutants and {accs} acc_sum→acc_max mutants");
    assert!(imaps >= 5 && accs >= 5, "too few mutants were built: {imaps} imap, {accs} accumulator");
}
