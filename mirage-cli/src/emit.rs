//! `mirage emit`: the generated CUDA or Triton source of a program's chosen µGraph.

use std::path::Path;

use mirage::build::artifact_stem;
use mirage::codegen::{KernelOptions, generate};

use crate::input::{Chosen, chosen, one_program};
use crate::show::write;
use crate::{CliError, Result, Target};

/// Runs `mirage emit`.
pub fn run(target: &str, cuda: bool, output: Option<&Path>, offline: bool, opts: &Target) -> Result<()> {
    let (file, program) = one_program(target)?;
    let (how, graph) = chosen(&program, opts, &file, offline)?;
    if let Chosen::Fallback(why) = &how {
        eprintln!("note: not superoptimized ({why}): emitting the program's own kernel graph");
    }
    let source = if cuda {
        // Kernel names as the build gives them.
        let stem = artifact_stem(&program.name, &program.fingerprint_hash);
        let prefix: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        generate(&graph, &prefix, &KernelOptions::default()).map_err(|e| CliError::new(e.to_string()))?.source
    } else {
        let names: Vec<String> = program.params.iter().map(|p| p.name.clone()).collect();
        mirage::triton::generate(&graph, &program.name, Some(&names)).map_err(|e| CliError::new(e.to_string()))?
    };
    match output {
        Some(path) => write(path, source.as_bytes()),
        None => {
            print!("{source}");
            Ok(())
        }
    }
}
