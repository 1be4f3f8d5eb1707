//! The verifier's mutant corpus: every single-edit mutant ([`mirage::testing::mutants`]) of every
//! golden µGraph and every benchmark program, by every mutation kind, classified by the f32
//! reference on random inputs (equivalent, not equivalent, rejected by the IR checker); the
//! fingerprint verifier must reject every non-equivalent mutant and accept every equivalent one
//! but those of its one known limit, counted apart ([`duplicates_a_norm`]: an `rms_norm` without
//! epsilon applied twice, the same `rms_norm` in exact arithmetic). Equivalence is decided by the
//! f32 reference and, where it sees no difference, in f64 (`classify`): a difference below f32's
//! resolution (an `rms_norm` with epsilon applied twice) is still a difference.
//!
//! - [`the_verifier_is_right_on_a_sample_of_the_mutant_corpus`] (CI, about two minutes on two busy
//!   cores): of each golden file's first candidate and of each benchmark program, three valid
//!   mutants of kinds that rotate with the source (invalid mutants are all counted: they cost
//!   nothing to classify), every kind checked at least once. The benchmark programs are the same
//!   graphs at their model sizes divided by [`CI_SHRINK`]
//!   (`mirage::testing::benchmarks::benchmark_set_shrunk`): at full size the reference and the
//!   fingerprints of a batch-8 attention take minutes per mutant here.
//! - [`the_verifier_is_right_on_the_whole_mutant_corpus`] (ignored; `--ignored`): every candidate
//!   of every golden file and every benchmark program at full size, every valid mutant.
//!
//! `MIRAGE_MUTANTS_PER_KIND=n` takes up to `n` valid mutants per kind and µGraph instead;
//! `MIRAGE_MUTANTS_FILTER=text` keeps the sources whose name contains it. `--nocapture` prints
//! the table: per kind, mutants generated, invalid, not sampled, equivalent (accepted),
//! inequivalent (rejected) and unclear to the f32 reference.
#![cfg(feature = "build")]

use std::collections::BTreeMap;
use std::time::Instant;

use mirage::fingerprint::{FingerprintContext, Verdict, VerifyConfig};
use mirage::ir::{BlockOp, KernelGraph, KernelOp};
use mirage::reference::run;
use mirage::testing::benchmarks::{benchmark_set, benchmark_set_shrunk};
use mirage::testing::inputs::graph_inputs;
use mirage::testing::mutants::{At, Class, Edit, Kind, Mutant, classify, input_range, mutants};
use mirage::testing::programs::golden_cases;

/// Counts of one mutation kind.
#[derive(Default, Debug)]
struct Tally {
    generated: usize,
    invalid: usize,
    not_sampled: usize,
    equivalent: usize,
    not_equivalent: usize,
    unclear: usize,
    /// Non-equivalent mutants the verifier rejected.
    rejected: usize,
    /// Equivalent mutants the verifier accepted.
    accepted: usize,
    /// Equivalent mutants that apply an `rms_norm` twice, which the verifier rejects (see
    /// [`duplicates_a_norm`]).
    norm_twice_rejected: usize,
}

/// Whether `edit` applies an `rms_norm` without epsilon (kernel or block operator) again to its
/// own result. In exact arithmetic that is the same `rms_norm` (its result has a mean square of
/// exactly 1), so the reference finds the mutant equivalent (in f64 too); the fingerprint
/// verifier rejects it: in its finite fields the square root is an uninterpreted hash, for which
/// `sqrt(m / sqrt(m)²) = 1` does not hold. A known limit of the verifier (it loses such µGraphs,
/// which a search never needs: they only add work), counted apart, not a failure. With an
/// epsilon the mutant is not equivalent (the normalized row's mean square is `ms / (ms + eps)`):
/// the classifier's f64 check says so, and the verifier must reject it like any other.
fn duplicates_a_norm(g: &KernelGraph, edit: &Edit) -> bool {
    let Edit::Duplicate(at) = edit else { return false };
    match *at {
        At::Kernel(n) => matches!(g.nodes()[n].op, KernelOp::RmsNorm { eps } if eps.0 == 0.0),
        At::Block(n, b) => match &g.nodes()[n].op {
            KernelOp::Custom { block } => matches!(block.nodes()[b].op, BlockOp::RmsNorm { eps } if eps.0 == 0.0),
            _ => false,
        },
    }
}

/// A program and the µGraphs whose mutants are checked against it.
struct Source {
    name: String,
    program: KernelGraph,
    graphs: Vec<(String, KernelGraph)>,
}

/// The benchmark programs' model sizes are divided by this in the CI sample.
const CI_SHRINK: usize = 16;

fn sources(full: bool) -> Vec<Source> {
    let mut out = Vec::new();
    for case in golden_cases() {
        let program = (case.program)().unwrap_or_else(|e| panic!("{}: program: {e}", case.name));
        let cands = case.candidates().unwrap_or_else(|e| panic!("{}: import: {e}", case.name));
        let take = if full { cands.len() } else { 1 };
        let graphs = cands.into_iter().take(take).enumerate().map(|(i, g)| (format!("candidate {i}"), g)).collect();
        out.push(Source { name: case.ident(), program, graphs });
    }
    let benchmarks = if full { benchmark_set() } else { benchmark_set_shrunk(CI_SHRINK) };
    for b in benchmarks.expect("benchmark programs") {
        let size = if full { String::new() } else { format!(" (sizes / {CI_SHRINK})") };
        out.push(Source {
            name: format!("benchmark {}{size}", b.name),
            graphs: vec![("program".to_string(), b.program.clone())],
            program: b.program,
        });
    }
    out
}

/// Which valid mutants of one µGraph are classified and verified.
#[derive(Clone, Copy, Debug)]
enum Sampling {
    /// All of them.
    All,
    /// At most this many per kind, evenly spaced in generation order.
    PerKind(usize),
    /// At most this many in all, one kind after another (starting at a kind that moves with the
    /// source, so that the sources together cover every kind), each kind's first unpicked one.
    PerGraph(usize),
}

/// Valid mutants picked per µGraph in CI (each is run by the f32 reference at the program's
/// real shapes, which is most of the test's time).
const CI_PER_GRAPH: usize = 3;

/// The picked mutants, as `(kind, index into by_kind[kind])`.
fn pick(by_kind: &BTreeMap<Kind, Vec<&Mutant>>, sampling: Sampling, source: usize) -> Vec<(Kind, usize)> {
    let evenly = |len: usize, n: usize| -> Vec<usize> {
        if n < len { (0..n).map(|j| j * len / n).collect() } else { (0..len).collect() }
    };
    match sampling {
        Sampling::All => by_kind.iter().flat_map(|(k, ms)| (0..ms.len()).map(|i| (*k, i))).collect(),
        Sampling::PerKind(n) => {
            by_kind.iter().flat_map(|(k, ms)| evenly(ms.len(), n).into_iter().map(|i| (*k, i))).collect()
        }
        Sampling::PerGraph(n) => {
            let kinds: Vec<Kind> = by_kind.keys().copied().collect();
            let mut taken: BTreeMap<Kind, usize> = BTreeMap::new();
            let mut out = Vec::new();
            let total: usize = by_kind.values().map(Vec::len).sum();
            let mut step = 0;
            while out.len() < n.min(total) && !kinds.is_empty() {
                let k = kinds[(source * 3 + step) % kinds.len()];
                step += 1;
                let next = taken.entry(k).or_default();
                if *next < by_kind[&k].len() {
                    out.push((k, *next));
                    *next += 1;
                }
            }
            out
        }
    }
}

#[test]
fn the_verifier_is_right_on_a_sample_of_the_mutant_corpus() {
    let sampling = match per_kind() {
        Some(n) => Sampling::PerKind(n),
        None => Sampling::PerGraph(CI_PER_GRAPH),
    };
    let tally = run_corpus(false, sampling);
    if std::env::var("MIRAGE_MUTANTS_FILTER").is_ok() {
        return;
    }
    // A kind whose mutants the IR checker all rejects (in this sample: every forloop-dim
    // mutant) has nothing to verify.
    for kind in Kind::ALL {
        let t = &tally[&kind];
        let valid = t.generated - t.invalid;
        assert!(valid == 0 || t.equivalent + t.not_equivalent > 0, "the sample checked no {kind} mutant");
    }
}

#[test]
#[ignore = "the whole corpus: every candidate of every golden file, the benchmark programs at full size, every valid mutant; run with --ignored"]
fn the_verifier_is_right_on_the_whole_mutant_corpus() {
    run_corpus(true, per_kind().map_or(Sampling::All, Sampling::PerKind));
}

/// `MIRAGE_MUTANTS_PER_KIND`, when set.
fn per_kind() -> Option<usize> {
    let v = std::env::var("MIRAGE_MUTANTS_PER_KIND").ok()?;
    Some(v.trim().parse::<usize>().unwrap_or_else(|e| panic!("MIRAGE_MUTANTS_PER_KIND={v:?}: {e}")))
}

/// Classifies and verifies the sampled mutants of the sources; prints the table and fails on
/// any verifier error. Returns the counts per kind.
fn run_corpus(full: bool, sampling: Sampling) -> BTreeMap<Kind, Tally> {
    let start = Instant::now();
    let mut tally: BTreeMap<Kind, Tally> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let mut unclear: Vec<String> = Vec::new();
    let mut norm_twice: Vec<String> = Vec::new();
    let mut graphs = 0;
    let only = std::env::var("MIRAGE_MUTANTS_FILTER").unwrap_or_default();
    for (si, src) in sources(full).into_iter().enumerate().filter(|(_, s)| s.name.contains(only.trim())) {
        let ctx = FingerprintContext::new(&src.program, &VerifyConfig::default())
            .unwrap_or_else(|e| panic!("{}: the program does not fingerprint: {e}", src.name));
        let inputs = graph_inputs(&src.program, 4000 + si as u64, input_range);
        let want = run(&src.program, &inputs).unwrap_or_else(|e| panic!("{}: the program does not run: {e}", src.name));
        let t_src = Instant::now();
        for (gname, g) in &src.graphs {
            graphs += 1;
            let all = mutants(g);
            let mut by_kind: BTreeMap<Kind, Vec<&Mutant>> = BTreeMap::new();
            for m in &all {
                let t = tally.entry(m.kind).or_default();
                t.generated += 1;
                match &m.graph {
                    Err(_) => t.invalid += 1,
                    Ok(_) => by_kind.entry(m.kind).or_default().push(m),
                }
            }
            let picks = pick(&by_kind, sampling, si);
            for (kind, ms) in &by_kind {
                tally.entry(*kind).or_default().not_sampled +=
                    ms.len() - picks.iter().filter(|(k, _)| k == kind).count();
            }
            for (kind, i) in picks {
                let t = tally.entry(kind).or_default();
                {
                    let m = by_kind[&kind][i];
                    let what = format!("{} {gname}: {kind} mutant {:?}", src.name, m.edit);
                    let class = classify(&src.program, &m.graph, &inputs, &want);
                    let Ok(mg) = &m.graph else { continue };
                    let verdict = match &class {
                        Class::Equivalent | Class::NotEquivalent => match ctx.check(mg) {
                            Ok(v) => v,
                            Err(e) => {
                                failures.push(format!("{what}: the verifier could not run: {e}"));
                                continue;
                            }
                        },
                        Class::Unclear(why) => {
                            t.unclear += 1;
                            unclear.push(format!("{what}: {why}"));
                            continue;
                        }
                        Class::Invalid(_) => continue,
                    };
                    match (class, verdict) {
                        (Class::Equivalent, Verdict::Equivalent) => {
                            t.equivalent += 1;
                            t.accepted += 1;
                        }
                        (Class::Equivalent, Verdict::NotEquivalent { .. }) if duplicates_a_norm(g, &m.edit) => {
                            t.equivalent += 1;
                            t.norm_twice_rejected += 1;
                            norm_twice.push(what);
                        }
                        (Class::Equivalent, Verdict::NotEquivalent { witness }) => {
                            t.equivalent += 1;
                            failures.push(format!("{what}: equivalent in f32 but rejected ({witness})"));
                        }
                        (_, Verdict::NotEquivalent { .. }) => {
                            t.not_equivalent += 1;
                            t.rejected += 1;
                        }
                        (_, Verdict::Equivalent) => {
                            t.not_equivalent += 1;
                            failures.push(format!("{what}: not equivalent in f32 but accepted"));
                        }
                    }
                }
            }
        }
        println!("{}: {} µGraph(s) in {:.1} s", src.name, src.graphs.len(), t_src.elapsed().as_secs_f64());
    }
    println!(
        "mutant corpus ({}, sampling {sampling:?} valid mutants per µGraph): {graphs} µGraphs, {:.1} s",
        if full { "full" } else { "CI sample" },
        start.elapsed().as_secs_f64()
    );
    println!(
        "{:20} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "kind", "generated", "invalid", "skipped", "equiv", "accepted", "inequiv", "rejected", "unclear"
    );
    let mut sum = Tally::default();
    for (kind, t) in &tally {
        println!(
            "{:20} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            kind.to_string(),
            t.generated,
            t.invalid,
            t.not_sampled,
            t.equivalent,
            t.accepted,
            t.not_equivalent,
            t.rejected,
            t.unclear
        );
        sum.generated += t.generated;
        sum.invalid += t.invalid;
        sum.not_sampled += t.not_sampled;
        sum.equivalent += t.equivalent;
        sum.accepted += t.accepted;
        sum.not_equivalent += t.not_equivalent;
        sum.rejected += t.rejected;
        sum.unclear += t.unclear;
    }
    println!(
        "{:20} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "total",
        sum.generated,
        sum.invalid,
        sum.not_sampled,
        sum.equivalent,
        sum.accepted,
        sum.not_equivalent,
        sum.rejected,
        sum.unclear
    );
    println!(
        "rejection rate of non-equivalent mutants: {}/{} ; equivalent mutants accepted: {}/{}",
        sum.rejected, sum.not_equivalent, sum.accepted, sum.equivalent
    );
    println!(
        "equivalent mutants rejected as the verifier's known limit (an rms_norm applied twice): {}",
        norm_twice.len()
    );
    for n in &norm_twice {
        println!("  {n}");
    }
    for u in unclear.iter().take(10) {
        println!("unclear (not counted): {u}");
    }
    assert!(failures.is_empty(), "{} verifier failures:\n{}", failures.len(), failures.join("\n"));
    for kind in Kind::ALL {
        let t = tally.get(&kind);
        assert!(t.is_some_and(|t| t.generated > 0), "no {kind} mutant was generated");
    }
    assert!(sum.rejected >= 30, "too few non-equivalent mutants were checked: {}", sum.rejected);
    assert!(sum.accepted > 0, "no equivalent mutant was checked");
    assert!(
        sum.unclear * 20 <= sum.equivalent + sum.not_equivalent,
        "more than 5% of the mutants are neither clearly equivalent nor clearly not"
    );
    tally
}
