//! `mirage search`: a fresh search with its limits as flags, live progress and a summary table.

use std::time::Duration;

use clap::Args;
use mirage::search::{SearchConfig, describe, superoptimize};

use crate::input::{arch, bucket_builds, one_program, path_of};
use crate::{CliError, Result, progress};

/// The flags of `mirage search` (defaults: the build's limits).
#[derive(Args, Debug)]
pub struct SearchArgs {
    /// The program: `FILE.rs::FN`.
    #[arg(value_name = "FILE::FN")]
    target: String,
    /// Target architecture of the cost model (default: MIRAGE_CUDA_ARCH, or sm_90a).
    #[arg(long)]
    arch: Option<String>,
    /// Most kernels in a µGraph.
    #[arg(long)]
    max_kernels: Option<usize>,
    /// Most operators in a block graph (input iterators and output savers not counted).
    #[arg(long)]
    max_block_ops: Option<usize>,
    /// Most kernel tensors one block graph reads.
    #[arg(long)]
    max_block_inputs: Option<usize>,
    /// Most tensors one block graph writes.
    #[arg(long)]
    max_block_outputs: Option<usize>,
    /// Most blocks in a grid.
    #[arg(long)]
    max_blocks: Option<usize>,
    /// Candidate for-loop ranges, comma-separated (1, no loop, is always tried).
    #[arg(long, value_delimiter = ',')]
    forloop_ranges: Option<Vec<usize>>,
    /// Candidate threads per block, comma-separated.
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Wall-clock budget of the enumeration, seconds.
    #[arg(long, value_name = "SECONDS")]
    budget: Option<f64>,
    /// Candidates listed.
    #[arg(long)]
    top: Option<usize>,
    /// How many of the cheapest candidates to verify for the table (the winner always is).
    #[arg(long)]
    verify_top: Option<usize>,
    /// Turn off abstract-expression pruning (for ablations: much slower).
    #[arg(long)]
    no_pruning: bool,
}

/// Runs `mirage search`.
pub fn run(a: &SearchArgs) -> Result<()> {
    let (_, program) = one_program(&a.target)?;
    let (arch_name, model) = arch(a.arch.as_deref())?;
    let mut cfg = SearchConfig::for_arch(model);
    let set = |slot: &mut usize, v: Option<usize>, what: &str| -> Result<()> {
        match v {
            Some(0) => Err(CliError::new(format!("--{what} must be at least 1"))),
            Some(v) => {
                *slot = v;
                Ok(())
            }
            None => Ok(()),
        }
    };
    set(&mut cfg.max_kernels, a.max_kernels, "max-kernels")?;
    set(&mut cfg.max_block_ops, a.max_block_ops, "max-block-ops")?;
    set(&mut cfg.max_block_inputs, a.max_block_inputs, "max-block-inputs")?;
    set(&mut cfg.max_block_outputs, a.max_block_outputs, "max-block-outputs")?;
    set(&mut cfg.max_blocks, a.max_blocks, "max-blocks")?;
    set(&mut cfg.top_k, a.top, "top")?;
    set(&mut cfg.verify_top, a.verify_top, "verify-top")?;
    if let Some(r) = &a.forloop_ranges {
        if r.contains(&0) {
            return Err(CliError::new("--forloop-ranges: every range must be at least 1"));
        }
        cfg.forloop_ranges = r.clone();
    }
    if let Some(t) = &a.threads {
        if let Some(bad) = t.iter().find(|&&t| t == 0 || t > 1024 || t % 32 != 0) {
            return Err(CliError::new(format!("--threads: {bad} is not a multiple of 32 in 32..=1024")));
        }
        cfg.threads = t.clone();
    }
    if let Some(b) = a.budget {
        if !(b.is_finite() && b > 0.0) {
            return Err(CliError::new(format!("--budget must be a positive number of seconds, found {b}")));
        }
        cfg.budget = Duration::from_secs_f64(b);
    }
    cfg.pruning = !a.no_pruning;
    cfg.offline = Some(false);

    // A program of runtime-sized dims is searched as the build searches it: over its declared
    // ranges, one search per size bucket.
    for (label, built) in bucket_builds(&program) {
        let sized = SearchConfig { dims: built.dims.clone(), ..cfg.clone() };
        search_one(&built, &format!("{}{label}", path_of(&program)), &arch_name, &sized)?;
    }
    Ok(())
}

/// Searches one program (or one size bucket of one) and prints the summary.
fn search_one(program: &mirage::lower::Program, name: &str, arch_name: &str, cfg: &SearchConfig) -> Result<()> {
    let what = format!("searching `{name}` for {arch_name}");
    let result = progress::timed(&what, cfg.budget, || superoptimize(&program.graph, cfg, None))
        .map_err(|e| CliError::new(format!("`{name}`: {e}")))?;
    let s = &result.stats;
    println!("search of `{name}` for {arch_name} (cost model of the {}):", cfg.arch.gpu);
    println!("| states | pruned | bounded | candidates | verified | rejected | search s | verify s |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} | {:.2}{} | {:.2} |",
        s.states,
        s.pruned,
        s.bounded,
        s.candidates,
        s.verified,
        s.rejected,
        s.search_time.as_secs_f64(),
        if s.timed_out { " (budget ran out)" } else { "" },
        s.verify_time.as_secs_f64()
    );
    println!();
    println!("| # | kernels | estimated µs | verdict | hash |");
    println!("|---|---|---|---|---|");
    for (i, c) in result.top.iter().enumerate() {
        let verdict = match c.verified {
            Some(true) => "equivalent",
            Some(false) => "rejected",
            None => "not verified",
        };
        let chosen = if c.hash == result.best.hash { " (chosen)" } else { "" };
        println!(
            "| {i} | {} | {:.2} | {verdict}{chosen} | {} |",
            c.graph.num_kernels(),
            c.cost.total_us,
            &c.hash.to_hex()[..16]
        );
    }
    println!();
    println!("chosen µGraph ({} kernel(s)):", result.best.graph.num_kernels());
    print!("{}", describe(&result.best.graph));
    print!("cost: {}", result.best.cost);
    for n in &result.notes {
        println!("note: {n}");
    }
    println!("(not stored: `mirage prepare` fills the search cache with the build's limits)");
    Ok(())
}
