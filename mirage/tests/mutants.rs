//! The verifier's mutant corpus: every single-edit mutant ([`mirage::testing::mutants`]) of every
//! golden µGraph and every benchmark program, by every mutation kind, classified by the f32
//! reference on random inputs (equivalent, not equivalent, rejected by the IR checker); the
//! fingerprint verifier must reject every non-equivalent mutant and accept every equivalent one,
//! with no exemption. Equivalence is decided by the f32 reference and, where it sees no
//! difference, in f64 (`classify`): a difference below f32's resolution (an `rms_norm` with
//! epsilon applied twice) is still a difference. An `rms_norm` without epsilon applied twice is
//! the same `rms_norm` in exact arithmetic, and the verifier proves it (its one rule beyond the
//! field, `mirage::fingerprint::fold_repeated_norms`).
//!
//! - [`the_verifier_is_right_on_a_sample_of_the_mutant_corpus`] (CI, well under two minutes on
//!   two busy cores): of each golden file's first candidate and of each benchmark program, three
//!   valid mutants of kinds that rotate with the source (invalid mutants are all counted: they
//!   cost nothing to classify), every kind checked at least once, and at least one `rms_norm`
//!   applied twice accepted. The benchmark programs are the same graphs at their model sizes
//!   divided by [`CI_SHRINK`] (`mirage::testing::benchmarks::benchmark_set_shrunk`).
//! - [`the_verifier_is_right_on_the_whole_mutant_corpus`] (ignored; `--ignored`, in release: the
//!   reference interpreter dominates): every candidate of every golden file and every benchmark
//!   program at full size, every valid mutant — 20 sources, 192 µGraphs, 9229 mutants of which
//!   3564 pass the IR checker.
//!
//! Sources are taken one after another; the mutants of one source are classified and verified
//! on `MIRAGE_MUTANTS_THREADS` threads (default: the machine's available parallelism), sharing
//! the program's fingerprints and reference outputs, which are computed once per source; the
//! results are tallied in generation order, so the output does not depend on the threads.
//! `MIRAGE_MUTANTS_PER_KIND=n` takes up to `n` valid mutants per kind and µGraph instead;
//! `MIRAGE_MUTANTS_FILTER=text` keeps the sources whose name contains it;
//! `MIRAGE_MUTANTS_COUNT_ONLY=1` prints the corpus's size per source and stops. `--nocapture`
//! prints the table: per kind, mutants generated, invalid, not sampled, equivalent (accepted),
//! inequivalent (rejected) and unclear to the f32 reference.
#![cfg(feature = "build")]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use mirage::fingerprint::{FingerprintContext, Verdict, VerifyConfig};
use mirage::ir::{BlockOp, KernelGraph, KernelOp};
use mirage::testing::benchmarks::{benchmark_set, benchmark_set_shrunk};
use mirage::testing::inputs::graph_inputs;
use mirage::testing::mutants::{At, Class, Edit, Kind, Mutant, ProgramRun, input_range, mutants};
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
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.generated += o.generated;
        self.invalid += o.invalid;
        self.not_sampled += o.not_sampled;
        self.equivalent += o.equivalent;
        self.not_equivalent += o.not_equivalent;
        self.unclear += o.unclear;
        self.rejected += o.rejected;
        self.accepted += o.accepted;
    }
}

/// Whether `edit` applies an `rms_norm` without epsilon (kernel or block operator, unweighted)
/// again to its own result: the same `rms_norm` in exact arithmetic, which the verifier must
/// accept (its rule `mirage::fingerprint::fold_repeated_norms`). The CI sample must contain one.
fn duplicates_a_plain_norm(g: &KernelGraph, edit: &Edit) -> bool {
    let Edit::Duplicate(at) = edit else { return false };
    match *at {
        At::Kernel(n) => {
            let node = &g.nodes()[n];
            matches!(node.op, KernelOp::RmsNorm { eps } if eps.0 == 0.0) && node.inputs.len() == 1
        }
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
    let corpus = run_corpus(false, sampling);
    if std::env::var("MIRAGE_MUTANTS_FILTER").is_ok() || std::env::var("MIRAGE_MUTANTS_COUNT_ONLY").is_ok() {
        return;
    }
    // A kind whose mutants the IR checker all rejects (in this sample: every forloop-dim
    // mutant) has nothing to verify.
    for kind in Kind::ALL {
        let t = &corpus.tally[&kind];
        let valid = t.generated - t.invalid;
        assert!(valid == 0 || t.equivalent + t.not_equivalent > 0, "the sample checked no {kind} mutant");
    }
    assert!(corpus.norms_twice > 0, "the sample checked no rms_norm applied twice (an equivalent mutant to accept)");
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

/// What happened to one picked mutant.
enum Outcome {
    /// The IR checker rejects it.
    Invalid,
    /// The reference cannot tell (why).
    Unclear(String),
    /// The reference's class (equivalent or not) and the verifier's verdict, or why the verifier
    /// could not run.
    Checked { equivalent: bool, verdict: Result<Verdict, String> },
}

/// One source's results.
struct SourceRun {
    tally: BTreeMap<Kind, Tally>,
    failures: Vec<String>,
    unclear: Vec<String>,
    /// Equivalent mutants that apply an `rms_norm` without epsilon twice, all accepted.
    norms_twice: usize,
    graphs: usize,
    seconds: f64,
}

/// The whole run's results.
struct Corpus {
    tally: BTreeMap<Kind, Tally>,
    norms_twice: usize,
}

/// Worker threads: `MIRAGE_MUTANTS_THREADS`, else the machine's available parallelism.
fn workers() -> usize {
    match std::env::var("MIRAGE_MUTANTS_THREADS") {
        Ok(v) => v.trim().parse::<usize>().unwrap_or_else(|e| panic!("MIRAGE_MUTANTS_THREADS={v:?}: {e}")).max(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// `f(i)` for `i` in `0..n` on `threads` threads (each takes the next index), results in index
/// order.
fn parallel_map<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(n) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = f(i);
                    *slots[i].lock().expect("no worker panicked holding a slot") = Some(r);
                }
            });
        }
    });
    slots.into_iter().map(|m| m.into_inner().expect("not poisoned").expect("every index ran")).collect()
}

/// Classifies and verifies the picked mutants of one source, in parallel over the mutants (the
/// program's fingerprints and reference outputs are computed once, before, and shared).
fn run_source(si: usize, src: &Source, sampling: Sampling, threads: usize) -> SourceRun {
    let start = Instant::now();
    let ctx = FingerprintContext::new(&src.program, &VerifyConfig::default())
        .unwrap_or_else(|e| panic!("{}: the program does not fingerprint: {e}", src.name));
    let inputs = graph_inputs(&src.program, 4000 + si as u64, input_range);
    let reference =
        ProgramRun::new(&src.program, inputs).unwrap_or_else(|e| panic!("{}: the program does not run: {e}", src.name));
    let mut tally: BTreeMap<Kind, Tally> = BTreeMap::new();
    // Every picked mutant of every µGraph: (graph, mutant).
    let mut work: Vec<(&String, &KernelGraph, Mutant)> = Vec::new();
    for (gname, g) in &src.graphs {
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
            tally.entry(*kind).or_default().not_sampled += ms.len() - picks.iter().filter(|(k, _)| k == kind).count();
        }
        work.extend(picks.into_iter().map(|(kind, i)| (gname, g, by_kind[&kind][i].clone())));
    }
    let outcomes = parallel_map(work.len(), threads, |w| {
        let m = &work[w].2;
        let Ok(mg) = &m.graph else { return Outcome::Invalid };
        match reference.classify(&m.graph) {
            Class::Invalid(_) => Outcome::Invalid,
            Class::Unclear(why) => Outcome::Unclear(why),
            class @ (Class::Equivalent | Class::NotEquivalent) => Outcome::Checked {
                equivalent: class == Class::Equivalent,
                verdict: ctx.check(mg).map_err(|e| e.to_string()),
            },
        }
    });
    let (mut failures, mut unclear, mut norms_twice) = (Vec::new(), Vec::new(), 0);
    for ((gname, g, m), outcome) in work.iter().zip(outcomes) {
        let what = format!("{} {gname}: {} mutant {:?}", src.name, m.kind, m.edit);
        let t = tally.entry(m.kind).or_default();
        match outcome {
            Outcome::Invalid => {}
            Outcome::Unclear(why) => {
                t.unclear += 1;
                unclear.push(format!("{what}: {why}"));
            }
            Outcome::Checked { verdict: Err(e), .. } => {
                failures.push(format!("{what}: the verifier could not run: {e}"))
            }
            Outcome::Checked { equivalent: true, verdict: Ok(v) } => {
                t.equivalent += 1;
                match v {
                    Verdict::Equivalent => {
                        t.accepted += 1;
                        norms_twice += usize::from(duplicates_a_plain_norm(g, &m.edit));
                    }
                    Verdict::NotEquivalent { witness } => {
                        failures.push(format!("{what}: equivalent in the reference but rejected ({witness})"))
                    }
                }
            }
            Outcome::Checked { equivalent: false, verdict: Ok(v) } => {
                t.not_equivalent += 1;
                match v {
                    Verdict::NotEquivalent { .. } => t.rejected += 1,
                    Verdict::Equivalent => {
                        failures.push(format!("{what}: not equivalent in the reference but accepted"))
                    }
                }
            }
        }
    }
    SourceRun {
        tally,
        failures,
        unclear,
        norms_twice,
        graphs: src.graphs.len(),
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// Classifies and verifies the sampled mutants of the sources (one source after another, each
/// one's mutants in parallel); prints the corpus's size, the table and the time, and fails on
/// any verifier error: a non-equivalent mutant accepted, an equivalent one rejected.
/// `MIRAGE_MUTANTS_COUNT_ONLY=1` prints the sizes (sources, µGraphs, mutants) and stops.
fn run_corpus(full: bool, sampling: Sampling) -> Corpus {
    let start = Instant::now();
    let only = std::env::var("MIRAGE_MUTANTS_FILTER").unwrap_or_default();
    let filtered = !only.trim().is_empty();
    let srcs: Vec<(usize, Source)> =
        sources(full).into_iter().enumerate().filter(|(_, s)| s.name.contains(only.trim())).collect();
    let threads = workers();
    if std::env::var("MIRAGE_MUTANTS_COUNT_ONLY").is_ok_and(|v| v.trim() == "1") {
        let (mut graphs, mut generated, mut valid) = (0, 0, 0);
        for (_, src) in &srcs {
            let (mut g_n, mut v_n) = (0, 0);
            for (_, g) in &src.graphs {
                let ms = mutants(g);
                g_n += ms.len();
                v_n += ms.iter().filter(|m| m.graph.is_ok()).count();
            }
            println!("{}: {} µGraph(s), {g_n} mutants, {v_n} valid", src.name, src.graphs.len());
            graphs += src.graphs.len();
            generated += g_n;
            valid += v_n;
        }
        println!("corpus: {} sources, {graphs} µGraphs, {generated} mutants, {valid} valid", srcs.len());
        return Corpus { tally: BTreeMap::new(), norms_twice: 0 };
    }
    let mut tally: BTreeMap<Kind, Tally> = BTreeMap::new();
    let (mut failures, mut unclear, mut norms_twice, mut graphs) = (Vec::new(), Vec::new(), 0, 0);
    for (si, src) in &srcs {
        let r = run_source(*si, src, sampling, threads);
        let checked: usize = r.tally.values().map(|t| t.equivalent + t.not_equivalent + t.unclear).sum();
        println!(
            "{}: {} µGraph(s), {checked} mutants checked in {:.1} s, {} verifier failures",
            src.name,
            r.graphs,
            r.seconds,
            r.failures.len()
        );
        for (k, t) in &r.tally {
            tally.entry(*k).or_default().add(t);
        }
        failures.extend(r.failures);
        unclear.extend(r.unclear);
        norms_twice += r.norms_twice;
        graphs += r.graphs;
    }
    println!(
        "mutant corpus ({}, sampling {sampling:?} valid mutants per µGraph): {} sources, {graphs} µGraphs, {:.1} s on {threads} threads",
        if full { "full" } else { "CI sample" },
        srcs.len(),
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
        sum.add(t);
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
        "non-equivalent mutants rejected: {}/{} ; equivalent mutants accepted: {}/{} ({norms_twice} of them an rms_norm applied twice) ; unclear: {}",
        sum.rejected, sum.not_equivalent, sum.accepted, sum.equivalent, sum.unclear
    );
    for u in unclear.iter().take(10) {
        println!("unclear (not counted): {u}");
    }
    assert!(failures.is_empty(), "{} verifier failures:\n{}", failures.len(), failures.join("\n"));
    if !filtered {
        for kind in Kind::ALL {
            let t = tally.get(&kind);
            assert!(t.is_some_and(|t| t.generated > 0), "no {kind} mutant was generated");
        }
        assert!(sum.rejected >= 30, "too few non-equivalent mutants were checked: {}", sum.rejected);
        assert!(sum.accepted > 0, "no equivalent mutant was checked");
    }
    assert!(
        sum.unclear * 20 <= sum.equivalent + sum.not_equivalent,
        "more than 5% of the mutants are neither clearly equivalent nor clearly not"
    );
    Corpus { tally, norms_twice }
}
