//! The cost model against measured candidates: a [`CalibrationSet`] holds, per program, the
//! µGraphs a tuning run measured with their median times; [`evaluate`] costs every one of them
//! with the current model and says per program how well the model ranks them ([`ProgramFit`]):
//! the rank correlation of predicted and measured times, whether the model's choice (the
//! cheapest predicted) is the fastest measured, how much slower than the fastest it is, and the
//! ratio of measured to predicted times.
//!
//! The model's choice here is the cheapest of the measured candidates, not of every µGraph the
//! search finds: a re-calibrated model may prefer a µGraph that was never measured, which this
//! evaluation cannot see.

use serde::Deserialize;

use super::record::{median, spearman};
use crate::cost::{Arch, CostError, estimate};
use crate::ir::KernelGraph;

/// The `format` field of a calibration set.
pub const SET_FORMAT: &str = "mirage-calibration-set";
/// The version of the calibration-set layout.
pub const SET_VERSION: u32 = 1;

/// One measured candidate.
#[derive(Clone, Debug)]
pub struct MeasuredCandidate {
    /// Its canonical hash (hex).
    pub hash: String,
    /// The median measured time, µs.
    pub measured_us: f64,
    /// The µGraph.
    pub graph: KernelGraph,
}

/// One program's measured candidates (every one ran correctly).
#[derive(Clone, Debug)]
pub struct MeasuredProgram {
    /// The `#[mugraph]` function's name.
    pub name: String,
    /// The candidates, in the record's order.
    pub candidates: Vec<MeasuredCandidate>,
}

/// Measured candidates of many programs on one GPU.
#[derive(Clone, Debug)]
pub struct CalibrationSet {
    /// The GPU's name.
    pub device: String,
    /// Where the measurements come from, in words.
    pub source: String,
    /// The programs.
    pub programs: Vec<MeasuredProgram>,
}

#[derive(Deserialize)]
struct SetJson {
    format: String,
    version: u32,
    device: String,
    source: String,
    programs: Vec<ProgramJson>,
}

#[derive(Deserialize)]
struct ProgramJson {
    name: String,
    candidates: Vec<CandidateJson>,
}

#[derive(Deserialize)]
struct CandidateJson {
    hash: String,
    measured_us: f64,
    graph: serde_json::Value,
}

impl CalibrationSet {
    /// Parses a set (`{"format": "mirage-calibration-set", "version": 1, "device", "source",
    /// "programs": [{"name", "candidates": [{"hash", "measured_us", "graph"}]}]}`, each graph in the
    /// IR's JSON), checking the format, that every time is finite and positive and that every
    /// µGraph has its recorded hash.
    pub fn from_json(text: &str) -> Result<CalibrationSet, String> {
        let raw: SetJson = serde_json::from_str(text).map_err(|e| format!("not a calibration set: {e}"))?;
        if raw.format != SET_FORMAT || raw.version != SET_VERSION {
            return Err(format!(
                "format {:?} version {}, expected {SET_FORMAT:?} version {SET_VERSION}",
                raw.format, raw.version
            ));
        }
        let mut programs = Vec::with_capacity(raw.programs.len());
        for p in raw.programs {
            let mut candidates = Vec::with_capacity(p.candidates.len());
            for c in p.candidates {
                if !(c.measured_us.is_finite() && c.measured_us > 0.0) {
                    return Err(format!("{}: candidate {} has time {}", p.name, c.hash, c.measured_us));
                }
                let graph = KernelGraph::from_json(&c.graph.to_string()).map_err(|e| format!("{}: {e}", p.name))?;
                let hash = graph.canonical_hash().to_hex();
                if hash != c.hash {
                    return Err(format!("{}: a µGraph hashes to {hash}, recorded as {}", p.name, c.hash));
                }
                candidates.push(MeasuredCandidate { hash, measured_us: c.measured_us, graph });
            }
            programs.push(MeasuredProgram { name: p.name, candidates });
        }
        Ok(CalibrationSet { device: raw.device, source: raw.source, programs })
    }
}

/// The model against one program's measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramFit {
    /// The program.
    pub name: String,
    /// The model's estimate of every candidate, µs (the set's order).
    pub predicted_us: Vec<f64>,
    /// The model's choice: the cheapest estimate (ties: the smaller canonical hash, as the search).
    pub chosen: usize,
    /// The fastest measured candidate.
    pub fastest: usize,
    /// Whether the model's choice measured as fast as the fastest.
    pub chosen_is_fastest: bool,
    /// The model's choice measured over the fastest measured (≥ 1).
    pub slowdown: f64,
    /// Rank correlation (Spearman) of estimated and measured times (`None` with fewer than two
    /// candidates or a constant sample).
    pub spearman: Option<f64>,
    /// Median of measured / estimated over the candidates.
    pub median_ratio: f64,
}

/// The model against a set of programs.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// One row per program evaluated.
    pub rows: Vec<ProgramFit>,
}

impl Evaluation {
    /// The mean of the programs' rank correlations (those with one defined; 0 for none).
    pub fn mean_spearman(&self) -> f64 {
        let s: Vec<f64> = self.rows.iter().filter_map(|r| r.spearman).collect();
        if s.is_empty() { 0.0 } else { s.iter().sum::<f64>() / s.len() as f64 }
    }

    /// Programs whose model's choice is the fastest measured.
    pub fn fastest_chosen(&self) -> usize {
        self.rows.iter().filter(|r| r.chosen_is_fastest).count()
    }

    /// The geometric mean over the programs of the model's choice's slowdown (1 for no program).
    pub fn geomean_slowdown(&self) -> f64 {
        if self.rows.is_empty() {
            return 1.0;
        }
        (self.rows.iter().map(|r| r.slowdown.ln()).sum::<f64>() / self.rows.len() as f64).exp()
    }

    /// The worst slowdown of a model's choice (1 for no program).
    pub fn worst_slowdown(&self) -> f64 {
        self.rows.iter().map(|r| r.slowdown).fold(1.0, f64::max)
    }

    /// The median over the programs of their median measured / estimated ratio.
    pub fn median_ratio(&self) -> Option<f64> {
        median(&self.rows.iter().map(|r| r.median_ratio).collect::<Vec<_>>())
    }

    /// One line: mean Spearman, the fastest chosen, the geometric-mean and worst slowdowns and the
    /// median measured / estimated.
    pub fn summary(&self) -> String {
        format!(
            "{} programs: mean Spearman {:.2}; the model's choice is the fastest in {}; slowdown of its choice: geomean {:.3}, worst {:.2}; measured / estimated median {}",
            self.rows.len(),
            self.mean_spearman(),
            self.fastest_chosen(),
            self.geomean_slowdown(),
            self.worst_slowdown(),
            self.median_ratio().map_or("-".into(), |r| format!("{r:.2}"))
        )
    }
}

impl std::fmt::Display for Evaluation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "| program | Spearman | choice is fastest | slowdown of the choice | measured / estimated |")?;
        writeln!(f, "|---|---:|---:|---:|---:|")?;
        for r in &self.rows {
            writeln!(
                f,
                "| {} | {} | {} | {:.2} | {:.2} |",
                r.name,
                r.spearman.map_or("-".into(), |s| format!("{s:.2}")),
                if r.chosen_is_fastest { "yes" } else { "no" },
                r.slowdown,
                r.median_ratio
            )?;
        }
        writeln!(f, "\n{}", self.summary())
    }
}

/// Costs every candidate of the programs of `set` that `keep` accepts (by name) on `arch` and
/// compares the estimates with the measurements. Programs without candidates are left out.
pub fn evaluate(set: &CalibrationSet, arch: &Arch, keep: impl Fn(&str) -> bool) -> Result<Evaluation, CostError> {
    let mut rows = Vec::new();
    for p in set.programs.iter().filter(|p| keep(&p.name) && !p.candidates.is_empty()) {
        let predicted_us =
            p.candidates.iter().map(|c| estimate(&c.graph, arch).map(|r| r.total_us)).collect::<Result<Vec<_>, _>>()?;
        let measured: Vec<f64> = p.candidates.iter().map(|c| c.measured_us).collect();
        let argmin = |xs: &[f64], tie: &dyn Fn(usize, usize) -> std::cmp::Ordering| {
            (0..xs.len()).min_by(|&i, &j| xs[i].total_cmp(&xs[j]).then(tie(i, j))).unwrap_or(0)
        };
        let chosen = argmin(&predicted_us, &|i, j| p.candidates[i].hash.cmp(&p.candidates[j].hash));
        let fastest = argmin(&measured, &|i, j| i.cmp(&j));
        let ratios: Vec<f64> = measured.iter().zip(&predicted_us).map(|(m, e)| m / e).collect();
        rows.push(ProgramFit {
            name: p.name.clone(),
            chosen,
            fastest,
            chosen_is_fastest: measured[chosen] <= measured[fastest],
            slowdown: measured[chosen] / measured[fastest],
            spearman: spearman(&predicted_us, &measured),
            median_ratio: median(&ratios).unwrap_or(f64::NAN),
            predicted_us,
        });
    }
    Ok(Evaluation { rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_of_another_format_or_with_a_wrong_hash_is_refused() {
        let e = CalibrationSet::from_json(r#"{"format":"x","version":1,"device":"d","source":"s","programs":[]}"#)
            .expect_err("wrong format");
        assert!(e.contains("mirage-calibration-set"), "{e}");
        assert!(CalibrationSet::from_json("[]").is_err());
        let mut g = KernelGraph::new();
        let x = g.input(&[4, 8], crate::ir::DType::F16).expect("input");
        let y = g.exp(x).expect("exp");
        g.output(y, None).expect("output");
        let text = |hash: &str, us: f64| {
            format!(
                r#"{{"format":"mirage-calibration-set","version":1,"device":"d","source":"s","programs":[{{"name":"p","candidates":[{{"hash":"{hash}","measured_us":{us},"graph":{}}}]}}]}}"#,
                g.to_json()
            )
        };
        let hash = g.canonical_hash().to_hex();
        let set = CalibrationSet::from_json(&text(&hash, 3.0)).expect("a valid set");
        assert_eq!(set.programs[0].candidates[0].hash, hash);
        let e = CalibrationSet::from_json(&text("00", 3.0)).expect_err("wrong hash");
        assert!(e.contains("recorded as 00"), "{e}");
        let e = CalibrationSet::from_json(&text(&hash, -1.0)).expect_err("negative time");
        assert!(e.contains("time -1"), "{e}");
    }
}
