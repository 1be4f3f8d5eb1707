//! Tuning records: what a GPU measured for each candidate ([`TuneRecord`], the JSON `tune measure`
//! writes), the choice made from it ([`select`]) and the cost model's calibration against it
//! ([`Calibration`]). Pure data and arithmetic: everything here is tested without a GPU.

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

/// The `format` field of a tuning record.
pub const RECORD_FORMAT: &str = "mirage-tune-record";
/// The version of the record layout.
pub const RECORD_VERSION: u32 = 1;

/// What was measured for one candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateTiming {
    /// The candidate µGraph's canonical hash (hex).
    pub hash: String,
    /// Its number of kernels.
    pub kernels: usize,
    /// The cost model's estimate, µs.
    pub predicted_us: f64,
    /// Relative L2 error of its outputs against the CPU reference (the worst output).
    pub rel_l2: Option<f64>,
    /// Why it is unusable (failed launch, wrong result, crash), if it is.
    pub error: Option<String>,
    /// The median of each timing round, µs.
    pub rounds_us: Vec<f64>,
    /// The fastest launch seen in any round, µs.
    pub min_us: Option<f64>,
    /// The median of the rounds' medians, µs (`None` when not timed).
    pub measured_us: Option<f64>,
}

impl CandidateTiming {
    /// A candidate not measured yet.
    pub fn new(hash: String, kernels: usize, predicted_us: f64) -> CandidateTiming {
        CandidateTiming {
            hash,
            kernels,
            predicted_us,
            rel_l2: None,
            error: None,
            rounds_us: Vec::new(),
            min_us: None,
            measured_us: None,
        }
    }

    /// Whether it may be chosen: checked against the reference without error and timed.
    pub fn usable(&self) -> bool {
        self.error.is_none() && self.rel_l2.is_some() && self.measured_us.is_some_and(f64::is_finite)
    }

    /// Sets [`CandidateTiming::measured_us`] from the rounds.
    pub fn summarize(&mut self) {
        self.measured_us = median(&self.rounds_us);
    }
}

/// The median of `xs` (`None` when empty or not all finite).
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// The candidate to keep: the usable one with the smallest measured time; ties go to the smaller
/// estimate, then to the earlier candidate. `None` when none is usable.
pub fn select(timings: &[CandidateTiming]) -> Option<usize> {
    timings
        .iter()
        .enumerate()
        .filter(|(_, t)| t.usable())
        .min_by(|(i, a), (j, b)| {
            let (ma, mb) = (a.measured_us.unwrap_or(f64::INFINITY), b.measured_us.unwrap_or(f64::INFINITY));
            ma.total_cmp(&mb).then(a.predicted_us.total_cmp(&b.predicted_us)).then(i.cmp(j))
        })
        .map(|(i, _)| i)
}

/// What was measured for one program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramTiming {
    /// The `#[mugraph]` function's name.
    pub name: String,
    /// The program's canonical hash (hex).
    pub program_hash: String,
    /// Bytes of the program's inputs and outputs (each read or written once: the memory floor).
    pub io_bytes: usize,
    /// Every candidate, the model's choice first.
    pub candidates: Vec<CandidateTiming>,
    /// Seconds the CPU reference took.
    pub reference_s: Option<f64>,
}

impl ProgramTiming {
    /// The index of the chosen candidate ([`select`]).
    pub fn chosen(&self) -> Option<usize> {
        select(&self.candidates)
    }
}

/// The measurements of one tuning run on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneRecord {
    /// [`RECORD_FORMAT`].
    pub format: String,
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The GPU's name.
    pub device: String,
    /// The GPU in words (SMs, memory, ...).
    pub device_info: String,
    /// Device-to-device copy bandwidth measured in the same run (bytes read plus written), bytes
    /// per µs.
    pub copy_bytes_per_us: Option<f64>,
    /// The commit of the bundle, as the bundle recorded it.
    pub commit: String,
    /// Every program measured.
    pub programs: Vec<ProgramTiming>,
}

impl TuneRecord {
    /// An empty record for `device`.
    pub fn new(device: String, device_info: String, commit: String) -> TuneRecord {
        TuneRecord {
            format: RECORD_FORMAT.into(),
            version: RECORD_VERSION,
            device,
            device_info,
            copy_bytes_per_us: None,
            commit,
            programs: Vec::new(),
        }
    }

    /// Parses a record, checking its format and version.
    pub fn from_json(text: &str) -> Result<TuneRecord, String> {
        let r: TuneRecord = serde_json::from_str(text).map_err(|e| format!("not a tuning record: {e}"))?;
        if r.format != RECORD_FORMAT || r.version != RECORD_VERSION {
            return Err(format!(
                "format {:?} version {}, expected {RECORD_FORMAT:?} version {RECORD_VERSION}",
                r.format, r.version
            ));
        }
        Ok(r)
    }

    /// The record as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The memory floor of a program: its input and output bytes at the copy bandwidth, µs.
    pub fn floor_us(&self, p: &ProgramTiming) -> Option<f64> {
        self.copy_bytes_per_us.filter(|bw| *bw > 0.0).map(|bw| p.io_bytes as f64 / bw)
    }

    /// The short table: per program, the model's choice and the tuned choice measured, the floor
    /// and the tuned time over it.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| program | ok / candidates | model's choice µs (predicted) | tuned µs | tuned kernels | floor µs | tuned / floor |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
        for p in &self.programs {
            let ok = p.candidates.iter().filter(|c| c.usable()).count();
            let model = p.candidates.first();
            let tuned = p.chosen().and_then(|i| p.candidates.get(i));
            let floor = self.floor_us(p);
            let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            let _ = writeln!(
                s,
                "| {} | {ok} / {} | {} ({}) | {} | {} | {} | {} |",
                p.name,
                p.candidates.len(),
                us(model.and_then(|m| m.measured_us)),
                us(model.map(|m| m.predicted_us)),
                us(tuned.and_then(|t| t.measured_us)),
                tuned.map_or("-".to_string(), |t| t.kernels.to_string()),
                us(floor),
                match (tuned.and_then(|t| t.measured_us), floor) {
                    (Some(t), Some(f)) => format!("{:.2}", t / f),
                    _ => "-".into(),
                }
            );
        }
        s
    }
}

/// Spearman's rank correlation of two equally long samples (average ranks for ties); `None` for
/// fewer than two points or a constant sample.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let mean = (a.len() as f64 + 1.0) / 2.0;
    let (mut num, mut da, mut db) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        num += (x - mean) * (y - mean);
        da += (x - mean) * (x - mean);
        db += (y - mean) * (y - mean);
    }
    (da > 0.0 && db > 0.0).then(|| num / (da * db).sqrt())
}

/// 1-based ranks, ties sharing their average rank.
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|&i, &j| xs[i].total_cmp(&xs[j]));
    let mut r = vec![0.0; xs.len()];
    let mut k = 0;
    while k < idx.len() {
        let mut end = k;
        while end + 1 < idx.len() && xs[idx[end + 1]] == xs[idx[k]] {
            end += 1;
        }
        let avg = (k + end) as f64 / 2.0 + 1.0;
        for &i in &idx[k..=end] {
            r[i] = avg;
        }
        k = end + 1;
    }
    r
}

/// The cost model against one program's measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationRow {
    /// The program.
    pub name: String,
    /// The model's choice: predicted and measured µs.
    pub model: (f64, Option<f64>),
    /// The fastest measured candidate: predicted and measured µs, and its rank by the model
    /// (0: the model's choice).
    pub tuned: Option<(f64, f64, usize)>,
    /// Rank correlation of predicted and measured times over the usable candidates.
    pub spearman: Option<f64>,
    /// Usable candidates.
    pub usable: usize,
}

/// The cost model against a whole record: per program rows, the median of measured / predicted
/// over every usable candidate and the mean rank correlation.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// One row per program.
    pub rows: Vec<CalibrationRow>,
    /// Median of measured / predicted over every usable candidate of every program.
    pub median_ratio: Option<f64>,
    /// Mean of the programs' rank correlations (programs with one defined).
    pub mean_spearman: Option<f64>,
    /// Programs where the model's choice was the fastest, of those with a measured choice.
    pub model_right: (usize, usize),
}

impl Calibration {
    /// Calibrates against `record`.
    pub fn of(record: &TuneRecord) -> Calibration {
        let mut rows = Vec::new();
        let mut ratios = Vec::new();
        for p in &record.programs {
            let usable: Vec<(usize, &CandidateTiming)> =
                p.candidates.iter().enumerate().filter(|(_, c)| c.usable()).collect();
            let pred: Vec<f64> = usable.iter().map(|(_, c)| c.predicted_us).collect();
            let meas: Vec<f64> = usable.iter().filter_map(|(_, c)| c.measured_us).collect();
            ratios.extend(pred.iter().zip(&meas).filter(|(p, _)| **p > 0.0).map(|(p, m)| m / p));
            let by_model =
                |i: usize| p.candidates.iter().filter(|c| c.predicted_us < p.candidates[i].predicted_us).count();
            let tuned = p.chosen().and_then(|i| {
                let c = &p.candidates[i];
                c.measured_us.map(|m| (c.predicted_us, m, by_model(i)))
            });
            let model = p.candidates.first().map_or((f64::NAN, None), |c| (c.predicted_us, c.measured_us));
            rows.push(CalibrationRow {
                name: p.name.clone(),
                model,
                tuned,
                spearman: spearman(&pred, &meas),
                usable: usable.len(),
            });
        }
        let spearmans: Vec<f64> = rows.iter().filter_map(|r| r.spearman).collect();
        let mean_spearman = (!spearmans.is_empty()).then(|| spearmans.iter().sum::<f64>() / spearmans.len() as f64);
        let measured: Vec<&ProgramTiming> = record.programs.iter().filter(|p| p.chosen().is_some()).collect();
        let right = measured.iter().filter(|p| p.chosen() == Some(0)).count();
        Calibration { rows, median_ratio: median(&ratios), mean_spearman, model_right: (right, measured.len()) }
    }
}

impl fmt::Display for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| program | model's choice predicted / measured µs | fastest predicted / measured µs (model rank) | Spearman | usable |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|")?;
        let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        for r in &self.rows {
            writeln!(
                f,
                "| {} | {:.1} / {} | {} | {} | {} |",
                r.name,
                r.model.0,
                us(r.model.1),
                r.tuned.map_or("-".to_string(), |(p, m, k)| format!("{p:.1} / {m:.1} (#{k})")),
                r.spearman.map_or("-".to_string(), |s| format!("{s:.2}")),
                r.usable
            )?;
        }
        writeln!(
            f,
            "\nmeasured / predicted over every usable candidate: median {}; mean rank correlation {}; the model's choice was the fastest in {} of {} programs",
            self.median_ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
            self.mean_spearman.map_or("-".to_string(), |s| format!("{s:.2}")),
            self.model_right.0,
            self.model_right.1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(predicted: f64, measured: Option<f64>, error: Option<&str>) -> CandidateTiming {
        CandidateTiming {
            rel_l2: Some(1e-3),
            error: error.map(str::to_string),
            rounds_us: measured.into_iter().collect(),
            min_us: measured,
            measured_us: measured,
            ..CandidateTiming::new(format!("{predicted:016}"), 1, predicted)
        }
    }

    /// Recorded timings of the H200 run: the fastest correct candidate wins; a faster one that
    /// mismatched the reference or failed is never chosen.
    #[test]
    fn the_fastest_correct_candidate_is_chosen() {
        let t = vec![
            timing(25.0, Some(30.1), None),
            timing(27.0, Some(19.4), Some("relative L2 error 3.1e-1 exceeds 1.0e-2")),
            timing(28.0, Some(21.7), None),
            timing(29.0, None, Some("launch failed: an illegal memory access")),
            timing(26.0, Some(24.9), None),
        ];
        assert_eq!(select(&t), Some(2));
        assert_eq!(select(&t[..1]), Some(0));
        assert_eq!(select(&[timing(1.0, None, Some("crashed"))]), None);
        assert_eq!(select(&[]), None);
        // Ties: the smaller estimate, then the earlier candidate.
        assert_eq!(select(&[timing(30.0, Some(20.0), None), timing(28.0, Some(20.0), None)]), Some(1));
        assert_eq!(select(&[timing(28.0, Some(20.0), None), timing(28.0, Some(20.0), None)]), Some(0));
    }

    #[test]
    fn a_candidate_without_a_reference_check_is_not_usable() {
        let mut t = timing(25.0, Some(20.0), None);
        t.rel_l2 = None;
        assert!(!t.usable());
        assert_eq!(select(&[t, timing(25.0, Some(40.0), None)]), Some(1));
    }

    #[test]
    fn rounds_summarize_to_their_median() {
        let mut t = CandidateTiming::new("h".into(), 1, 1.0);
        t.rounds_us = vec![21.0, 19.0, 20.5];
        t.summarize();
        assert_eq!(t.measured_us, Some(20.5));
        t.rounds_us = vec![f64::NAN];
        t.summarize();
        assert_eq!(t.measured_us, None);
    }

    #[test]
    fn spearman_of_known_samples() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[30.0, 20.0, 10.0]), Some(-1.0));
        let s = spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).expect("defined");
        assert!((s - 0.8).abs() < 1e-12, "{s}");
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
        assert_eq!(ranks(&[3.0, 1.0, 3.0]), vec![2.5, 1.0, 2.5]);
    }

    fn record() -> TuneRecord {
        let mut r = TuneRecord::new("NVIDIA H200".into(), "132 SMs".into(), "abc".into());
        r.copy_bytes_per_us = Some(4.25e6);
        r.programs.push(ProgramTiming {
            name: "gated_mlp_bs1".into(),
            program_hash: "00".into(),
            io_bytes: 67_125_248,
            candidates: vec![
                timing(25.3, Some(29.8), None),
                timing(27.2, Some(19.9), None),
                timing(28.7, Some(21.0), None),
            ],
            reference_s: Some(0.5),
        });
        r.programs.push(ProgramTiming {
            name: "lora".into(),
            program_hash: "01".into(),
            io_bytes: 2_000_000,
            candidates: vec![timing(5.0, Some(8.0), None), timing(6.0, Some(9.0), None)],
            reference_s: None,
        });
        r
    }

    #[test]
    fn the_calibration_compares_predictions_with_measurements() {
        let c = Calibration::of(&record());
        assert_eq!(c.rows.len(), 2);
        let g = &c.rows[0];
        assert_eq!(g.model, (25.3, Some(29.8)));
        assert_eq!(g.tuned, Some((27.2, 19.9, 1)));
        assert_eq!(g.spearman, Some(-0.5));
        assert_eq!(c.rows[1].spearman, Some(1.0));
        assert_eq!(c.mean_spearman, Some(0.25));
        assert_eq!(c.model_right, (1, 2));
        // ratios 29.8/25.3, 19.9/27.2, 21/28.7, 8/5, 9/6: the median is 29.8/25.3
        assert!((c.median_ratio.expect("ratios") - 29.8 / 25.3).abs() < 1e-12);
        let text = c.to_string();
        assert!(text.contains("| gated_mlp_bs1 | 25.3 / 29.8 | 27.2 / 19.9 (#1) | -0.50 | 3 |"), "{text}");
    }

    #[test]
    fn records_round_trip_and_print_a_table() {
        let r = record();
        let back = TuneRecord::from_json(&r.to_json()).expect("parses");
        assert_eq!(back, r);
        let t = r.table();
        // floor 67125248 B / 4.25e6 B/µs = 15.8 µs; tuned 19.9 µs: 1.26
        assert!(t.contains("| gated_mlp_bs1 | 3 / 3 | 29.8 (25.3) | 19.9 | 1 | 15.8 | 1.26 |"), "{t}");
        assert!(TuneRecord::from_json("{}").is_err());
        let mut other = r.clone();
        other.version = 99;
        assert!(TuneRecord::from_json(&other.to_json()).expect_err("wrong version").contains("version 99"));
    }
}
