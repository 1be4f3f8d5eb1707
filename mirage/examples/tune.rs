//! Offline tuning (`mirage::tune::bundle`): pack candidates here, measure them on a GPU machine,
//! import the choices into the search cache.
//!
//! ```text
//! tune pack [--out DIR] [--candidates K] [--only SUBSTRING,...] [--cache DIR] FILE.rs ...
//!                                     here: searches and compiles the candidates of every
//!                                     #[mugraph] function, with the cache's current choice among
//!                                     them (default cache: .mirage at the workspace root)
//! tune measure DIR [--out RECORD.json] [--only SUBSTRING,...]   on the GPU machine
//! tune import DIR RECORD.json [--cache DIR]   here: stores each program's fastest correct candidate
//!                                             in the search cache (default: .mirage at the workspace root)
//! tune calibrate RECORD.json                  the cost model's predictions against the measurements
//! tune table RECORD.json                      the short table `measure` prints last
//! ```
//!
//! `measure` runs each program in a process of its own (`tune measure-program DIR NAME [--skip
//! I,...]`, started by `measure` itself), so a candidate that brings its process down costs only
//! that candidate.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;

use mirage::cache::Cache;
use mirage::cost::Arch;
use mirage::search::SearchConfig;
use mirage::tune::TuneRecord;
use mirage::tune::bundle::{self, Limits, PackOptions};
use mirage::tune::record::Calibration;

const USAGE: &str = "usage: tune pack [--out DIR] [--candidates K] [--only SUBSTRING,...] [--cache DIR] FILE.rs ... | tune measure DIR [--out RECORD.json] [--only SUBSTRING,...] | tune import DIR RECORD.json [--cache DIR] | tune calibrate RECORD.json | tune table RECORD.json";

/// Command-line options: positional arguments and `--name value` pairs.
struct Args {
    positional: Vec<String>,
    options: Vec<(String, String)>,
}

impl Args {
    fn parse(args: impl Iterator<Item = String>, known: &[&str]) -> Result<Args, String> {
        let mut a = Args { positional: Vec::new(), options: Vec::new() };
        let mut it = args;
        while let Some(arg) = it.next() {
            if let Some(name) = arg.strip_prefix("--") {
                if !known.contains(&name) {
                    return Err(format!("unknown option --{name}; expected one of --{}\n{USAGE}", known.join(", --")));
                }
                let value = it.next().ok_or_else(|| format!("--{name} needs a value\n{USAGE}"))?;
                a.options.push((name.to_string(), value));
            } else {
                a.positional.push(arg);
            }
        }
        Ok(a)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.options.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn list(&self, name: &str) -> Vec<String> {
        self.get(name)
            .map_or_else(Vec::new, |v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
    }

    fn one(&self, what: &str) -> Result<&str, String> {
        match self.positional.as_slice() {
            [one] => Ok(one),
            _ => Err(format!("expected {what}, found {} arguments\n{USAGE}", self.positional.len())),
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let command = args.next().ok_or(USAGE)?;
    match command.as_str() {
        "pack" => pack(Args::parse(args, &["out", "candidates", "only", "cache"])?),
        "measure" => measure(Args::parse(args, &["out", "only"])?),
        "measure-program" => {
            let a = Args::parse(args, &["skip"])?;
            let [dir, name] = a.positional.as_slice() else { return Err(format!("expected DIR NAME\n{USAGE}").into()) };
            let skip = a.list("skip").iter().map(|s| s.parse::<usize>()).collect::<Result<Vec<_>, _>>()?;
            Ok(bundle::child_main(Path::new(dir), name, &skip)?)
        }
        "import" => import(Args::parse(args, &["cache"])?),
        "calibrate" => {
            let record = read_record(Args::parse(args, &[])?.one("RECORD.json")?)?;
            println!("{}", Calibration::of(&record));
            Ok(())
        }
        "table" => {
            let record = read_record(Args::parse(args, &[])?.one("RECORD.json")?)?;
            println!("{}", record.table());
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}").into()),
    }
}

fn read_record(path: &str) -> Result<TuneRecord, Box<dyn Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    Ok(TuneRecord::from_json(&text).map_err(|e| format!("{path}: {e}"))?)
}

/// The commit of the working tree (with `+uncommitted` when it has changes), or "unknown".
fn commit() -> String {
    let git = |args: &[&str]| Command::new("git").args(args).output().ok().filter(|o| o.status.success());
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".into() };
    let mut c = String::from_utf8_lossy(&head.stdout).trim().to_string();
    if git(&["diff", "--quiet", "HEAD", "--", "."]).is_none() {
        c += "+uncommitted";
    }
    c
}

fn pack(a: Args) -> Result<(), Box<dyn Error>> {
    if a.positional.is_empty() {
        return Err(format!("expected the files of #[mugraph] functions\n{USAGE}").into());
    }
    let out = PathBuf::from(a.get("out").unwrap_or(".tune/bundle"));
    let only = a.list("only");
    let mut programs = Vec::new();
    for file in &a.positional {
        for p in mirage::lower::lower_file(Path::new(file))? {
            if only.is_empty() || only.iter().any(|o| p.name.contains(o.as_str())) {
                programs.push((p.name, p.graph));
            }
        }
    }
    if let Some(missing) = only.iter().find(|o| !programs.iter().any(|(p, _)| p.contains(o.as_str()))) {
        return Err(format!("no #[mugraph] function's name contains {missing:?} in {}", a.positional.join(", ")).into());
    }
    let mut tune = mirage::tune::TuneConfig::default();
    if let Some(k) = a.get("candidates") {
        tune.candidates = k.parse().map_err(|e| format!("--candidates {k}: {e}"))?;
    }
    let arch = mirage::nvcc::resolve_arch(None, std::env::var(mirage::nvcc::ARCH_ENV).ok().as_deref())?;
    let opts = PackOptions {
        search: SearchConfig::for_arch(Arch::from_name(&arch).unwrap_or_default()),
        tune,
        kernel: Default::default(),
        nvcc: Default::default(),
        commit: commit(),
        cache: Some(match a.get("cache") {
            Some(dir) => Cache::new(dir),
            None => Cache::at_workspace(mirage::build::workspace_root()),
        }),
    };
    println!(
        "packing {} programs into {} ({} candidates each, {arch})",
        programs.len(),
        out.display(),
        opts.tune.candidates
    );
    let manifest = bundle::pack(&out, &programs, &opts, &mut |line| println!("  {line}"))?;
    let bytes = dir_bytes(&out);
    let cubins = dir_bytes(&out.join("cubins"));
    println!(
        "packed {} programs, {} candidates: {:.1} MiB ({:.1} MiB of cubins) in {}",
        manifest.programs.len(),
        manifest.programs.iter().map(|p| p.candidates.len()).sum::<usize>(),
        bytes as f64 / (1 << 20) as f64,
        cubins as f64 / (1 << 20) as f64,
        out.display()
    );
    Ok(())
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => dir_bytes(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    })
}

fn measure(a: Args) -> Result<(), Box<dyn Error>> {
    let dir = PathBuf::from(a.one("the bundle folder")?);
    let out = a.get("out").map(PathBuf::from);
    let exe = std::env::current_exe()?;
    let spawn = |program: &str, skip: &[usize]| {
        let mut c = Command::new(&exe);
        c.arg("measure-program").arg(&dir).arg(program);
        if !skip.is_empty() {
            c.arg("--skip").arg(skip.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        }
        c
    };
    let record = bundle::measure_bundle(&dir, &a.list("only"), &spawn, Limits::default(), &mut |l| eprintln!("{l}"))?;
    if let Some(out) = &out {
        std::fs::write(out, record.to_json()).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("wrote {}", out.display());
    }
    println!("{}", Calibration::of(&record));
    println!("{}: {}", record.device_info, record.commit);
    println!("{}", record.table());
    Ok(())
}

fn import(a: Args) -> Result<(), Box<dyn Error>> {
    let [dir, record] = a.positional.as_slice() else {
        return Err(format!("expected DIR RECORD.json\n{USAGE}").into());
    };
    let record = read_record(record)?;
    let cache = match a.get("cache") {
        Some(dir) => Cache::new(dir),
        None => Cache::at_workspace(mirage::build::workspace_root()),
    };
    let mut failed = 0;
    for imported in bundle::import(Path::new(dir), &record, &cache)? {
        match imported.outcome {
            Ok(path) => println!("{}: {}", imported.name, path.display()),
            Err(why) => {
                failed += 1;
                println!("{}: not imported: {why}", imported.name);
            }
        }
    }
    println!("measured on {}; {failed} program(s) not imported", record.device);
    Ok(())
}
