//! `mirage show`: a program, its chosen µGraph with the cost model's explanation, the top
//! candidates; pictures of the µGraph. A program of runtime-sized dims shows the µGraph the build
//! chooses over its ranges, for each of its size buckets.

use std::path::{Path, PathBuf};

use mirage::lower::Program;
use mirage::search::describe;
use mirage::search::ranges::fmt_vars;

use crate::input::{Chosen, bucket_builds, chosen, path_of, programs_of, select, signature, split_target};
use crate::{CliError, Result, Target};

/// Runs `mirage show`.
pub fn run(target: &str, dot: Option<&Path>, svg: Option<&Path>, offline: bool, opts: &Target) -> Result<()> {
    let (file, function) = split_target(target);
    let programs = programs_of(&file)?;
    let programs = match function {
        Some(name) => vec![select(programs, &file, &name)?],
        None => programs,
    };
    if programs.len() > 1 && (dot.is_some() || svg.is_some()) {
        return Err(CliError::new(format!(
            "{} has {} #[mugraph] functions: name one as {}::NAME to draw its µGraph",
            file.display(),
            programs.len(),
            file.display()
        )));
    }
    for (i, program) in programs.iter().enumerate() {
        if i > 0 {
            println!();
        }
        show_one(&file, program, dot, svg, offline, opts)?;
    }
    Ok(())
}

fn show_one(
    file: &Path,
    program: &Program,
    dot: Option<&Path>,
    svg: Option<&Path>,
    offline: bool,
    opts: &Target,
) -> Result<()> {
    println!("program `{}` ({})", path_of(program), file.display());
    println!("  inputs: {}", signature(program));
    let outs: Vec<String> = program.outputs.iter().map(|d| format!("{:?} {}", d.shape, d.dtype)).collect();
    println!("  outputs: {}", outs.join(", "));
    print!("{}", describe(&program.graph));
    // A program of runtime-sized dims built as size buckets: each bucket's µGraph, as built.
    let builds = bucket_builds(program);
    let several = builds.len() > 1;
    let names: Vec<String> = program.params.iter().map(|p| p.name.clone()).collect();
    for (i, (label, built)) in builds.iter().enumerate() {
        println!();
        if several {
            println!("size{label}: {}", fmt_vars(&built.dims));
        }
        let (how, graph) = chosen(built, opts, file, offline)?;
        match how {
            Chosen::Searched(result) => print!("{result}"),
            Chosen::Fallback(why) => {
                println!(
                    "not superoptimized ({why}): the build compiles the program's own kernel graph, every operator lowered to a default block graph"
                );
            }
        }
        if dot.is_none() && svg.is_none() {
            continue;
        }
        let title = format!("{}{label} — chosen µGraph", path_of(program));
        let text = mirage::dot::to_dot(&graph, &title, &names);
        // One file per bucket: `attn-b0.dot`, `attn-b1.dot`, ...
        let named = |path: &Path| if several { per_bucket(path, i) } else { path.to_path_buf() };
        if let Some(path) = dot {
            write(&named(path), text.as_bytes())?;
            println!("wrote {}", named(path).display());
        }
        if let Some(path) = svg {
            let svg = mirage::dot::render_svg(&text).map_err(|e| CliError::new(e.to_string()))?;
            write(&named(path), svg.as_bytes())?;
            println!("wrote {}", named(path).display());
        }
    }
    Ok(())
}

/// `path` with `-b{bucket}` before its extension.
fn per_bucket(path: &Path, bucket: usize) -> PathBuf {
    let stem = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-b{bucket}.{}", ext.to_string_lossy()),
        None => format!("{stem}-b{bucket}"),
    };
    path.with_file_name(name)
}

/// Writes a file, creating its directory.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, bytes).map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))
}
