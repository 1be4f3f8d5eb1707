#![cfg(feature = "build")]
//! The megakernel at real model scale: the decode steps of the three benchmark models
//! (`mirage::model::ModelConfig::PRESETS`) compile — tasks, dependencies, counters, the checked
//! schedule and the resident kernel's source — within the tables' limits, and a reduced-layer
//! variant of each (two layers at the real widths) passes the same checks quickly.

use std::time::Instant;

use mirage::ir::DType;
use mirage::model::ModelConfig;
use mirage::mpk::decoder::{decoder_step, step_name};
use mirage::mpk::{MpkOptions, compile, emit};

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Compiles `preset` (with `layers` layers when given) and prints what it measured.
fn compile_preset(preset: &str, layers: Option<usize>) -> R {
    let mut cfg = ModelConfig::preset(preset).ok_or("unknown preset")?.decoder_config(4096 + 64, DType::Bf16);
    if let Some(l) = layers {
        cfg.layers = l;
    }
    let t0 = Instant::now();
    let g = decoder_step(&step_name(preset, layers), &cfg)?;
    let t1 = Instant::now();
    let c = compile(&g, &MpkOptions::default())?;
    let t2 = Instant::now();
    let kernel = emit::generate(&c)?;
    let t3 = Instant::now();
    let per_worker: Vec<usize> = c.schedule.workers.iter().map(Vec::len).collect();
    println!(
        "{preset} ({} layers): {} operators, {} tasks, {} counters, {}..{} tasks per worker, source {} KiB, {} B shared; graph {:.2} s, compile {:.2} s, emit {:.2} s",
        cfg.layers,
        g.ops().len(),
        c.tasks.len(),
        c.sync.counters.len(),
        per_worker.iter().min().unwrap_or(&0),
        per_worker.iter().max().unwrap_or(&0),
        kernel.source.len() / 1024,
        kernel.smem_bytes,
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64(),
        (t3 - t2).as_secs_f64(),
    );
    Ok(())
}

#[test]
fn two_layers_at_real_widths_compile() -> R {
    for preset in ModelConfig::PRESETS {
        compile_preset(preset, Some(2))?;
    }
    Ok(())
}

#[test]
#[ignore = "compiles the full models: a minute of CPU time"]
fn the_full_models_compile() -> R {
    for preset in ModelConfig::PRESETS {
        compile_preset(preset, None)?;
    }
    Ok(())
}
