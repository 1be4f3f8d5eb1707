//! `mirage show`: a program, its chosen µGraph with the cost model's explanation, the top
//! candidates; pictures of the µGraph.

use std::path::Path;

use mirage::lower::Program;
use mirage::search::describe;

use crate::input::{Chosen, chosen, path_of, programs_of, select, signature, split_target};
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
    println!();
    let (how, graph) = chosen(program, opts, file, offline)?;
    match how {
        Chosen::Searched(result) => print!("{result}"),
        Chosen::Fallback(why) => {
            println!(
                "not superoptimized ({why}): the build compiles the program's own kernel graph, every operator lowered to a default block graph"
            );
        }
    }
    if dot.is_none() && svg.is_none() {
        return Ok(());
    }
    let names: Vec<String> = program.params.iter().map(|p| p.name.clone()).collect();
    let title = format!("{} — chosen µGraph", path_of(program));
    let text = mirage::dot::to_dot(&graph, &title, &names);
    if let Some(path) = dot {
        write(path, text.as_bytes())?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = svg {
        let svg = mirage::dot::render_svg(&text).map_err(|e| CliError::new(e.to_string()))?;
        write(path, svg.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes a file, creating its directory.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, bytes).map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))
}
