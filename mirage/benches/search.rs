//! Search time per benchmark program (the bar: under 60 s each on a 2-core machine), with the
//! chosen µGraph's kernel count and estimated cost next to Mirage's best, and the pruning
//! ablation on rmsnorm_linear.
//!
//! `cargo bench -p mirage-rs --features build --bench search`: first a table (search and
//! verification time, kernels, estimated cost, states, Mirage's best) and the ablation, then
//! criterion's measurement of the search alone (enumeration and costing,
//! [`mirage::search::candidates`]; 10 samples per program). `MIRAGE_BENCH_FILTER=name` restricts
//! the programs.

use std::time::{Duration, Instant};

use criterion::Criterion;
use mirage::cost::estimate;
use mirage::ir::DType;
use mirage::search::{NoPruning, SearchConfig, candidates, superoptimize, superoptimize_with};
use mirage::testing::benchmarks::benchmark_set;

fn table(filter: &str) {
    let cfg = SearchConfig::default();
    println!(
        "{:20} {:>8} {:>8} {:>7} {:>9} {:>10}   Mirage best",
        "program", "search s", "verify s", "kernels", "cost µs", "states"
    );
    for b in benchmark_set().expect("programs").iter().filter(|b| b.name.contains(filter)) {
        let t = Instant::now();
        match superoptimize(&b.program, &cfg, None) {
            Ok(r) => {
                let mirage = b.golden.and_then(|g| g.candidates().ok()).map(|cands| {
                    let k = cands.iter().map(|c| c.num_kernels()).min().unwrap_or(0);
                    let c = cands
                        .iter()
                        .filter_map(|c| estimate(c, &cfg.arch).ok())
                        .map(|r| r.total_us)
                        .fold(f64::INFINITY, f64::min);
                    format!("{k} kernel(s) {c:.2} µs")
                });
                println!(
                    "{:20} {:>8.2} {:>8.2} {:>7} {:>9.2} {:>10}   {}{}",
                    b.name,
                    r.stats.search_time.as_secs_f64(),
                    r.stats.verify_time.as_secs_f64(),
                    r.best.graph.num_kernels(),
                    r.best.cost.total_us,
                    r.stats.states,
                    mirage.unwrap_or_else(|| "-".into()),
                    if r.stats.timed_out { "  (budget exhausted)" } else { "" }
                );
            }
            Err(e) => println!("{:20} failed after {:.1} s: {e}", b.name, t.elapsed().as_secs_f64()),
        }
    }
}

fn ablation() {
    let program = mirage::testing::programs::rmsnorm_linear(2, 4096, 6144, DType::F16).expect("program");
    println!("\nablation, rmsnorm_linear_bs1, one kernel:");
    for ops in [4, 5, 6] {
        let cfg = SearchConfig {
            max_kernels: 1,
            max_block_ops: ops,
            budget: Duration::from_secs(60),
            verify_top: 1,
            ..SearchConfig::default()
        };
        let on = superoptimize(&program, &cfg, None);
        let off = superoptimize_with(&program, &SearchConfig { pruning: false, ..cfg.clone() }, None, Some(&NoPruning));
        let show = |r: &Result<mirage::search::SearchResult, mirage::search::SearchError>| match r {
            Ok(r) => format!(
                "{:>9} states {:>7.2} s  best {:.2} µs{}",
                r.stats.states,
                r.stats.search_time.as_secs_f64(),
                r.best.cost.total_us,
                if r.stats.timed_out { " (budget exhausted)" } else { "" }
            ),
            Err(e) => format!("error: {e}"),
        };
        println!("  max {ops} block ops: pruning {}", show(&on));
        println!("  max {ops} block ops: none    {}", show(&off));
    }
}

fn main() {
    let filter = std::env::var("MIRAGE_BENCH_FILTER").unwrap_or_default();
    table(&filter);
    if filter.is_empty() || "rmsnorm_linear_bs1".contains(&filter) {
        ablation();
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut group = c.benchmark_group("search");
    for b in benchmark_set().expect("programs").into_iter().filter(|b| b.name.contains(&filter)) {
        let cfg = SearchConfig::default();
        group.bench_function(b.name, |bench| bench.iter(|| candidates(&b.program, &cfg, None).map(|(c, _)| c.len())));
    }
    group.finish();
    c.final_summary();
}
