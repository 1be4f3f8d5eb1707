//! The corpus of programs people write (`benches/kernels/corpus.rs`: norm and QKV, attention
//! output and residual, norm and gated MLP, down and residual, the whole MLP block, final norm and LM head, for
//! Llama-3.2-1B, Qwen2.5-0.5B and Mistral-7B at 1 and 16 rows, bf16), each searched with the
//! default configuration and a 60 s budget. Prints one row per program: superoptimized or not
//! (operators kept as their own library kernels), kernels, estimated µs, search time and states,
//! then every chosen µGraph with its cost estimate; fails if any program is not superoptimized.
//!
//! Slow (36 searches, weights of up to 136 M elements verified at their real shapes), so ignored
//! by default: `cargo test -p mirage-rs --features build,testing --release --test corpus -- --ignored
//! --nocapture`; `MIRAGE_CORPUS=llama1b` searches only the programs whose name contains it.
#![cfg(feature = "build")]

use std::time::Duration;

use mirage::lower::lower_source;
use mirage::search::{SearchConfig, describe, float_check, superoptimize};

/// The operators a result keeps unfused, with why.
fn unfused(r: &mirage::search::SearchResult) -> String {
    r.stats.unfused.iter().map(|u| format!("{} ({})", u.operator, u.why)).collect::<Vec<_>>().join(", ")
}

#[test]
#[ignore = "slow: 36 searches of up to 60 s each, and verification at real shapes of weights up to 136 M elements"]
fn corpus_programs_are_superoptimized() {
    let filter = std::env::var("MIRAGE_CORPUS").unwrap_or_default();
    let programs = lower_source(include_str!("../../benches/kernels/corpus.rs")).unwrap_or_else(|e| panic!("{e}"));
    let cfg = SearchConfig { budget: Duration::from_secs(60), ..SearchConfig::default() };
    let mut failures = Vec::new();
    let mut chosen = Vec::new();
    println!("| program | superoptimized | kernels | est. µs | search s | states |");
    println!("|---|---|---:|---:|---:|---:|");
    for p in programs.iter().filter(|p| p.name.contains(&filter)) {
        match superoptimize(&p.graph, &cfg, None) {
            Ok(r) => {
                let fused = r.stats.unfused.is_empty();
                let how = if !fused {
                    format!("partly: {} unfused", unfused(&r))
                } else if r.notes.iter().any(|n| n.starts_with("no µGraph of the whole program")) {
                    "yes (in parts)".to_string()
                } else {
                    "yes".to_string()
                };
                println!(
                    "| {} | {how} | {} | {:.2} | {:.1} | {} |",
                    p.name,
                    r.best.graph.num_kernels(),
                    r.best.cost.total_us,
                    r.stats.search_time.as_secs_f64(),
                    r.stats.states
                );
                chosen.push(format!("{}:\n{}{}", p.name, describe(&r.best.graph), r.best.cost));
                if let Err(e) = float_check(&p.graph, &r.best.graph).expect("float check runs") {
                    failures.push(format!("{}: float check: {e}", p.name));
                }
                if !fused {
                    failures.push(format!("{}: not fused: {}", p.name, unfused(&r)));
                }
            }
            Err(e) => {
                println!("| {} | no ({e}) | | | | |", p.name);
                failures.push(format!("{}: {e}", p.name));
            }
        }
    }
    println!("\nThe chosen µGraphs:\n{}", chosen.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
