//! `mirage verify` and `mirage import`: candidate µGraphs checked against a program.

use std::path::Path;

use mirage::cost::estimate;
use mirage::fingerprint::{FingerprintContext, Verdict, VerifyConfig};
use mirage::ir::KernelGraph;
use mirage::search::float_check;

use crate::input::{arch, candidates, half_dtype, program_graph};
use crate::{CliError, Result, progress};

/// The fingerprint verdict of every candidate (in order), with a progress bar.
fn verdicts(program: &KernelGraph, cands: &[(String, KernelGraph)], trials: usize) -> Result<Vec<Verdict>> {
    let cfg = VerifyConfig { trials: trials.max(2), ..VerifyConfig::default() };
    let bar = progress::steps(cands.len(), "verifying");
    let ctx = FingerprintContext::new(program, &cfg).map_err(|e| CliError::new(e.to_string()))?;
    let mut out = Vec::new();
    for (name, g) in cands {
        out.push(ctx.check(g).map_err(|e| CliError::new(format!("{name}: {e}")))?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Runs `mirage verify`.
pub fn verify(program: &str, candidate: &Path, trials: usize, float: bool) -> Result<()> {
    let (pname, pgraph) = program_graph(program)?;
    let cands = candidates(candidate, half_dtype(&pgraph))?;
    let verdicts = verdicts(&pgraph, &cands, trials)?;
    let mut failed = 0;
    for ((name, g), v) in cands.iter().zip(verdicts) {
        match v {
            Verdict::Equivalent => {
                let float_note = if float {
                    match float_check(&pgraph, g).map_err(|e| CliError::new(format!("{name}: float check: {e}")))? {
                        Ok(()) => ", and the f32 reference agrees".to_string(),
                        Err(why) => {
                            failed += 1;
                            format!(", but the f32 reference disagrees: {why}")
                        }
                    }
                } else {
                    String::new()
                };
                println!("{name}: equivalent to `{pname}` (fingerprints, {} trials){float_note}", trials.max(2));
            }
            Verdict::NotEquivalent { witness } => {
                failed += 1;
                println!("{name}: NOT equivalent to `{pname}`: {witness}");
            }
        }
    }
    if failed > 0 {
        return Err(CliError::no(format!("{failed} of {} candidate(s) do not compute `{pname}`", cands.len())));
    }
    Ok(())
}

/// Runs `mirage import`.
pub fn import(mirage_json: &Path, program: &str, arch_name: Option<&str>) -> Result<()> {
    let (pname, pgraph) = program_graph(program)?;
    let (arch_name, model) = arch(arch_name)?;
    let cands = candidates(mirage_json, half_dtype(&pgraph))?;
    let verdicts = verdicts(&pgraph, &cands, 2)?;
    println!("{} µGraph(s) from {} for `{pname}`, costed for {arch_name}:", cands.len(), mirage_json.display());
    println!("| # | kernels | verdict | estimated µs |");
    println!("|---|---|---|---|");
    let mut best: Option<(usize, f64)> = None;
    for (i, ((_, g), v)) in cands.iter().zip(&verdicts).enumerate() {
        let cost = estimate(g, &model).map_err(|e| CliError::new(format!("candidate {i}: {e}")))?;
        let verdict = match v {
            Verdict::Equivalent => {
                if best.is_none_or(|(_, c)| cost.total_us < c) {
                    best = Some((i, cost.total_us));
                }
                "equivalent".to_string()
            }
            Verdict::NotEquivalent { witness } => format!("NOT equivalent: {witness}"),
        };
        println!("| {i} | {} | {verdict} | {:.2} |", g.num_kernels(), cost.total_us);
    }
    let equivalent = verdicts.iter().filter(|v| v.is_equivalent()).count();
    match best {
        Some((i, us)) => {
            println!("{equivalent} equivalent; the cheapest by the cost model is #{i} ({us:.2} µs)");
            Ok(())
        }
        None => Err(CliError::no(format!("none of the {} µGraph(s) computes `{pname}`", cands.len()))),
    }
}
