//! `mirage emit`: the generated CUDA or Triton source of a program's chosen µGraph. A program of
//! runtime-sized dims gets the CUDA the build compiles: kernels taking the sizes at launch, one
//! translation unit per size bucket.

use std::path::Path;

use mirage::build::{artifact_stem, bucket_stem};
use mirage::codegen::{KernelOptions, generate_sized};
use mirage::search::ranges::fmt_vars;

use crate::input::{Chosen, bucket_builds, chosen, one_program};
use crate::show::write;
use crate::{CliError, Result, Target};

/// Runs `mirage emit`.
pub fn run(target: &str, cuda: bool, output: Option<&Path>, offline: bool, opts: &Target) -> Result<()> {
    let (file, program) = one_program(target)?;
    if !cuda && !program.dims.is_static() {
        return Err(CliError::new(format!(
            "`{}` has runtime-sized dims ({}): the Triton emitter writes static programs only; `--cuda` gives the kernels the build compiles",
            program.name,
            fmt_vars(&program.dims)
        )));
    }
    let builds = bucket_builds(&program);
    let several = builds.len() > 1;
    // Kernel names as the build gives them (a bucket's: its own stem).
    let stem = artifact_stem(&program.name, &program.fingerprint_hash);
    let mut source = String::new();
    for (i, (_, built)) in builds.iter().enumerate() {
        let (how, graph) = chosen(built, opts, &file, offline)?;
        if let Chosen::Fallback(why) = &how {
            eprintln!("note: not superoptimized ({why}): emitting the program's own kernel graph");
        }
        if cuda {
            let stem = if several { bucket_stem(&stem, i) } else { stem.clone() };
            let prefix: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            if several {
                source.push_str(&format!("// size bucket {i}: {}\n", fmt_vars(&built.dims)));
            }
            let g = generate_sized(&graph, &built.dims, &prefix, &KernelOptions::default())
                .map_err(|e| CliError::new(e.to_string()))?;
            source.push_str(&g.source);
        } else {
            let names: Vec<String> = program.params.iter().map(|p| p.name.clone()).collect();
            source = mirage::triton::generate(&graph, &program.name, Some(&names))
                .map_err(|e| CliError::new(e.to_string()))?;
        }
    }
    match output {
        Some(path) => write(path, source.as_bytes()),
        None => {
            print!("{source}");
            Ok(())
        }
    }
}
