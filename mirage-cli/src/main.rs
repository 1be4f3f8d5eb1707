//! `mirage`: look at and steer the superoptimizer from the command line.
//!
//! - `mirage show FILE[::FN]` — the program, its chosen µGraph with the cost model's explanation
//!   per kernel and the top candidates (from the search cache, or searched); `--dot`/`--svg OUT`.
//! - `mirage search FILE::FN` — a fresh search with its limits as flags, live progress, a table.
//! - `mirage verify PROGRAM CANDIDATE` — equivalent, or a witness that it is not.
//! - `mirage import MIRAGE.json --program FILE::FN` — Mirage's µGraphs, verified and costed.
//! - `mirage prepare [--check]` — fill (or check) the committed `.mirage/` cache of a package.
//! - `mirage emit --cuda|--triton FILE::FN` — the generated source.
//!
//! Exit status: 0 on success, 1 when a verification or check says no, 2 on an error (bad input,
//! unreadable files, a search that fails).

mod emit;
mod input;
mod prepare;
mod progress;
mod search;
mod show;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// What went wrong, and the exit status it gives.
#[derive(Debug)]
pub struct CliError {
    /// The message, printed after `error: `.
    pub message: String,
    /// 1: a negative answer (not equivalent, check failed); 2: an error.
    pub code: u8,
}

impl CliError {
    /// An error (exit status 2).
    pub fn new(message: impl Into<String>) -> Self {
        CliError { message: message.into(), code: 2 }
    }

    /// A negative answer (exit status 1).
    pub fn no(message: impl Into<String>) -> Self {
        CliError { message: message.into(), code: 1 }
    }
}

/// The result of a command.
pub type Result<T> = std::result::Result<T, CliError>;

#[derive(Parser)]
#[command(name = "mirage", version, about = "Look at and steer the mirage superoptimizer", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Settings that choose the cache entry and the cost model.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// Target architecture (default: MIRAGE_CUDA_ARCH, or sm_90a): picks the cost model and the cache entry.
    #[arg(long)]
    pub arch: Option<String>,
    /// The search cache directory (default: `.mirage` at the workspace root above the file).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Show a program, its chosen µGraph with the cost model's explanation and the top candidates.
    Show {
        /// A Rust file with `#[mugraph]` functions, optionally `::` and one function's name or path.
        #[arg(value_name = "FILE[::FN]")]
        target: String,
        /// Write the chosen µGraph as Graphviz DOT here.
        #[arg(long, value_name = "OUT")]
        dot: Option<PathBuf>,
        /// Write the chosen µGraph as SVG here (needs Graphviz's `dot`).
        #[arg(long, value_name = "OUT")]
        svg: Option<PathBuf>,
        /// Only read the cache: a missing entry is an error instead of a search.
        #[arg(long)]
        offline: bool,
        #[command(flatten)]
        target_opts: Target,
    },
    /// Search µGraphs for a program now (the cache is neither read nor written).
    Search(search::SearchArgs),
    /// Check that a candidate µGraph computes a program (fingerprints; `--float-check` adds f32).
    Verify {
        /// The program: `FILE.rs::FN`, or a µGraph JSON file of ours.
        program: String,
        /// The candidate: our µGraph JSON, a search cache entry, or Mirage's µGraph JSON (every candidate in it).
        candidate: PathBuf,
        /// Independent fingerprint trials.
        #[arg(long, default_value_t = 2)]
        trials: usize,
        /// Also compare the f32 reference outputs on random inputs.
        #[arg(long)]
        float_check: bool,
    },
    /// Import Mirage's µGraphs for a program: verify each and say what the cost model thinks of it.
    Import {
        /// Mirage's µGraph JSON (one µGraph or an array of them).
        mirage_json: PathBuf,
        /// The program they were found for: `FILE.rs::FN`.
        #[arg(long, value_name = "FILE::FN")]
        program: String,
        /// Target architecture of the cost model (default: MIRAGE_CUDA_ARCH, or sm_90a).
        #[arg(long)]
        arch: Option<String>,
    },
    /// Fill the search cache for every `#[mugraph]` function of a package, or check it (`--check`).
    Prepare(prepare::PrepareArgs),
    /// Print the generated source of a program's chosen µGraph.
    Emit {
        /// CUDA: the translation unit nvcc compiles.
        #[arg(long, conflicts_with = "triton", required_unless_present = "triton")]
        cuda: bool,
        /// Triton: a Python module with one @triton.jit kernel per kernel and `launch(...)`.
        #[arg(long)]
        triton: bool,
        /// The program: `FILE.rs::FN`.
        #[arg(value_name = "FILE::FN")]
        target: String,
        /// Write here instead of standard output.
        #[arg(short, long, value_name = "OUT")]
        output: Option<PathBuf>,
        /// Only read the cache: a missing entry is an error instead of a search.
        #[arg(long)]
        offline: bool,
        #[command(flatten)]
        target_opts: Target,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Show { target, dot, svg, offline, target_opts } => {
            show::run(&target, dot.as_deref(), svg.as_deref(), offline, &target_opts)
        }
        Command::Search(args) => search::run(&args),
        Command::Verify { program, candidate, trials, float_check } => {
            verify::verify(&program, &candidate, trials, float_check)
        }
        Command::Import { mirage_json, program, arch } => verify::import(&mirage_json, &program, arch.as_deref()),
        Command::Prepare(args) => prepare::run(&args),
        Command::Emit { cuda, triton: _, target, output, offline, target_opts } => {
            emit::run(&target, cuda, output.as_deref(), offline, &target_opts)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
