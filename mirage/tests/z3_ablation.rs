//! The z3 ablation: every benchmark program (and the generality set's programs) searched with the
//! structural pruner alone and with the z3 oracle behind it ([`SearchConfig::z3`]), side by side:
//! states visited, search time (enumeration and costing), the cheapest candidate that the
//! fingerprint verifier accepts, and the candidates only the z3 search found (µGraphs the
//! structural check lost), with how many of those are cheaper than the structural search's best
//! and verify.
//!
//! The ablation is slow (two searches per program): `cargo test -p mirage-rs --features testing
//! --test z3_ablation -- --ignored --nocapture` (the test profile is optimized). Environment:
//! `MIRAGE_ABLATION_FILTER=a,b` keeps the programs whose name contains one of the texts;
//! `MIRAGE_ABLATION_BUDGET_S` is each search's wall-clock budget (default 60 s, the default
//! configuration's); `MIRAGE_ABLATION_GENERALITY=0` leaves the generality set out.

#![cfg(feature = "build")]

use std::collections::HashSet;
use std::error::Error;
use std::path::Path;
use std::time::Duration;

use mirage::fingerprint::{FingerprintContext, Verdict};
use mirage::ir::{DType, KernelGraph};
use mirage::search::{Candidate, SearchConfig, SearchStats, candidates, superoptimize};
use mirage::testing::benchmarks::benchmark_set;

/// One search of one program.
struct Run {
    stats: SearchStats,
    cands: Vec<Candidate>,
    best: Option<f64>,
}

/// The cost of the cheapest of `cands` (sorted) that the fingerprint verifier accepts, trying at
/// most `limit`.
fn cheapest_verified(
    ctx: &FingerprintContext,
    cands: &[Candidate],
    limit: usize,
) -> Result<Option<f64>, Box<dyn Error>> {
    for c in cands.iter().take(limit) {
        if matches!(ctx.check(&c.graph)?, Verdict::Equivalent) {
            return Ok(Some(c.cost.total_us));
        }
    }
    Ok(None)
}

fn search(program: &KernelGraph, cfg: &SearchConfig, ctx: &FingerprintContext) -> Result<Run, Box<dyn Error>> {
    let (cands, stats) = candidates(program, cfg, None)?;
    let best = cheapest_verified(ctx, &cands, cfg.max_verify)?;
    Ok(Run { stats, cands, best })
}

#[test]
#[ignore = "slow: two full searches of every benchmark and generality program"]
fn ablation_table() -> Result<(), Box<dyn Error>> {
    let filter = std::env::var("MIRAGE_ABLATION_FILTER").unwrap_or_default();
    let budget = match std::env::var("MIRAGE_ABLATION_BUDGET_S") {
        Ok(s) => s.trim().parse::<f64>().map_err(|e| format!("MIRAGE_ABLATION_BUDGET_S={s:?}: {e}"))?,
        Err(_) => 60.0,
    };
    let mut programs: Vec<(String, KernelGraph)> =
        benchmark_set()?.into_iter().map(|b| (b.name.to_string(), b.program)).collect();
    if !std::env::var("MIRAGE_ABLATION_GENERALITY").is_ok_and(|v| v.trim() == "0") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/kernels/generality.rs");
        programs.extend(mirage::lower::lower_file(&path)?.into_iter().map(|p| (p.name, p.graph)));
    }
    programs.retain(|(name, _)| filter.split(',').any(|f| name.contains(f.trim())));
    let cfg = SearchConfig { budget: Duration::from_secs_f64(budget), ..SearchConfig::default() };
    println!(
        "{:28} | {:>9} {:>7} {:>9} | {:>9} {:>7} {:>9} | {:>6} {:>7} {:>6} {:>7} | {:>6} {:>7}",
        "program",
        "states",
        "time s",
        "best µs",
        "states",
        "time s",
        "best µs",
        "z3 q",
        "z3 s",
        "rescue",
        "memo",
        "z3only",
        "cheaper"
    );
    println!("{:28} | {:^27} | {:^27} |", "", "structural", "structural + z3");
    let (mut t_off, mut t_on) = (0.0, 0.0);
    let mut lost_programs = Vec::new();
    for (name, program) in &programs {
        let ctx = FingerprintContext::new(program, &cfg.verify)?;
        let off = search(program, &SearchConfig { z3: false, ..cfg.clone() }, &ctx)?;
        let on = search(program, &SearchConfig { z3: true, ..cfg.clone() }, &ctx)?;
        let known: HashSet<_> = off.cands.iter().map(|c| c.hash).collect();
        let only: Vec<Candidate> = on.cands.iter().filter(|c| !known.contains(&c.hash)).cloned().collect();
        // Of the candidates only z3 found, those cheaper than the structural search's best that
        // verify: µGraphs the structural check lost that would have won.
        let bar = off.best.unwrap_or(f64::INFINITY);
        let mut cheaper = 0;
        for c in only.iter().take_while(|c| c.cost.total_us < bar).take(cfg.max_verify) {
            if matches!(ctx.check(&c.graph)?, Verdict::Equivalent) {
                cheaper += 1;
            }
        }
        if cheaper > 0 {
            lost_programs.push(name.clone());
        }
        let z = on.stats.z3.unwrap_or_default();
        let fmt_best = |b: Option<f64>| b.map_or("none".to_string(), |b| format!("{b:.2}"));
        let out = |s: &SearchStats| if s.timed_out { "*" } else { "" };
        println!(
            "{:28} | {:>9} {:>6.2}{:1} {:>9} | {:>9} {:>6.2}{:1} {:>9} | {:>6} {:>7.2} {:>6} {:>7} | {:>6} {:>7}",
            name,
            off.stats.states,
            off.stats.search_time.as_secs_f64(),
            out(&off.stats),
            fmt_best(off.best),
            on.stats.states,
            on.stats.search_time.as_secs_f64(),
            out(&on.stats),
            fmt_best(on.best),
            z.queries,
            z.z3_time.as_secs_f64(),
            z.rescues,
            z.cache_hits,
            only.len(),
            cheaper
        );
        t_off += off.stats.search_time.as_secs_f64();
        t_on += on.stats.search_time.as_secs_f64();
    }
    println!(
        "total search time: structural {t_off:.1} s, structural + z3 {t_on:.1} s ({:+.1}%); * = budget ({budget} s) ran out",
        100.0 * (t_on - t_off) / t_off.max(f64::MIN_POSITIVE)
    );
    println!(
        "programs where z3 found a cheaper verified µGraph the structural check lost: {}",
        if lost_programs.is_empty() { "none".to_string() } else { lost_programs.join(", ") }
    );
    Ok(())
}

/// `(x + y) @ w`: the structural check rejects `x @ w` (a partial product of the distributed
/// sum); z3 proves it, and the search reports what the oracle did.
#[test]
fn z3_search_reports_its_work_and_finds_what_the_structural_search_finds() -> Result<(), Box<dyn Error>> {
    let mut g = KernelGraph::new();
    let x = g.input(&[8, 64], DType::F16)?;
    let y = g.input(&[8, 64], DType::F16)?;
    let w = g.input(&[64, 64], DType::F16)?;
    let s = g.add(x, y)?;
    let o = g.matmul(s, w)?;
    g.output(o, None)?;
    let cfg = SearchConfig { max_kernels: 1, max_block_ops: 4, offline: Some(false), ..SearchConfig::default() };
    let off = superoptimize(&g, &cfg, None)?;
    let on = superoptimize(&g, &SearchConfig { z3: true, ..cfg.clone() }, None)?;
    assert_ne!(cfg.version(), SearchConfig { z3: true, ..cfg.clone() }.version(), "z3 is part of the cache key");
    assert_eq!(off.stats.z3, None);
    let z = on.stats.z3.ok_or("the z3 search reports no z3 counts")?;
    assert!(z.structural_rejects > 0 && z.queries > 0 && z.rescues > 0, "{z:?}");
    assert!(z.structural_rejects >= z.cache_hits + z.queries, "{z:?}");
    assert!(on.best.cost.total_us <= off.best.cost.total_us + 1e-9);
    assert!(on.to_string().contains("z3: "), "{on}");
    Ok(())
}
