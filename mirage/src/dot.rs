//! Pictures of µGraphs: Graphviz DOT text, and SVG through Graphviz's `dot` when it is installed.
//!
//! Every kernel is a box: a custom kernel is a cluster holding its block graph (its title gives
//! the grid, the threads per block and the for-loop range; the loop body is a nested cluster),
//! a kernel-level operator is a single box. Input iterators show their operand, grid map (`imap
//! x→0` = grid axis x splits dim 0) and for-loop dim; accumulators and output savers (with their
//! `omap`) stand out by colour; every edge is labelled with the shape of the tile or tensor it
//! carries. Program inputs and outputs are the graph's sources and sinks.
//!
//! ```
//! use mirage::ir::{DType, KernelGraph};
//! let mut g = KernelGraph::new();
//! let x = g.input(&[8, 64], DType::F16)?;
//! let w = g.input(&[64, 32], DType::F16)?;
//! let y = g.matmul(x, w)?;
//! g.output(y, None)?;
//! let dot = mirage::dot::to_dot(&g, "x @ w", &["x".into(), "w".into()]);
//! assert!(dot.starts_with("digraph mugraph {") && dot.contains("kernel k0: matmul"));
//! # Ok::<(), mirage::ir::IrError>(())
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::ir::{BlockOp, GridMap, KernelGraph, KernelOp, Phase, TensorRef};

/// The environment variable naming the Graphviz `dot` binary (default: `dot` on `PATH`).
pub const DOT_ENV: &str = "MIRAGE_DOT";

/// Why an SVG could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum DotError {
    /// Graphviz is not installed (or not where [`DOT_ENV`] says).
    #[error(
        "Graphviz `{0}` was not found: install Graphviz (`apt-get install graphviz`, which scripts/setup.sh does) or set {DOT_ENV} to its `dot` binary"
    )]
    Missing(String),
    /// `dot` ran and failed.
    #[error("Graphviz `dot` failed: {0}")]
    Failed(String),
}

/// Escapes text for a double-quoted DOT string (`\n` stays a line break).
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn fmt_map(map: &GridMap) -> String {
    let axes = ["x", "y", "z"];
    let parts: Vec<String> =
        map.iter().enumerate().filter_map(|(a, d)| d.map(|d| format!("{}→{d}", axes[a]))).collect();
    if parts.is_empty() { "replicated".into() } else { parts.join(" ") }
}

/// The DOT text of `graph`. `input_names` names the program inputs (`input k` where missing).
pub fn to_dot(graph: &KernelGraph, title: &str, input_names: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph mugraph {{");
    let _ = writeln!(
        s,
        "  graph [label=\"{}\", labelloc=t, fontsize=18, fontname=\"Helvetica\", rankdir=TB, compound=true, nodesep=0.3, ranksep=0.45];",
        esc(title)
    );
    let _ = writeln!(
        s,
        "  node [fontname=\"Helvetica\", fontsize=11, shape=box, style=\"rounded,filled\", fillcolor=white];"
    );
    let _ = writeln!(s, "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\"];");

    // Where each kernel tensor comes from (a DOT node), and the kernel numbering.
    let mut source: HashMap<TensorRef, String> = HashMap::new();
    let mut input_k = 0;
    let mut output_k = 0;
    let mut kernel_k = 0;
    let mut edges = String::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let tensor_label =
            |t: &TensorRef| graph.desc(*t).map(|d| format!("{:?} {}", d.shape, d.dtype)).unwrap_or_else(|_| "?".into());
        match &node.op {
            KernelOp::Input { desc } => {
                let name = input_names.get(input_k).cloned().unwrap_or_else(|| format!("input {input_k}"));
                let layout = if desc.is_row_major() { String::new() } else { format!("\nstrides {:?}", desc.strides) };
                let _ = writeln!(
                    s,
                    "  in{input_k} [label=\"{}\", shape=box, style=\"filled\", fillcolor=\"#dbe9f6\"];",
                    esc(&format!("{name}\n{:?} {}{layout}", desc.shape, desc.dtype))
                );
                source.insert(TensorRef::new(i), format!("in{input_k}"));
                input_k += 1;
            }
            KernelOp::Output { .. } => {
                let t = node.inputs[0];
                let _ = writeln!(
                    s,
                    "  out{output_k} [label=\"{}\", shape=box, style=\"filled\", fillcolor=\"#d9f0d3\"];",
                    esc(&format!("output {output_k}\n{}", tensor_label(&t)))
                );
                if let Some(from) = source.get(&t) {
                    let _ = writeln!(edges, "  {from} -> out{output_k} [label=\"{}\"];", esc(&tensor_label(&t)));
                }
                output_k += 1;
            }
            KernelOp::Custom { block } => {
                let k = kernel_k;
                kernel_k += 1;
                let g = block.grid();
                let _ = writeln!(s, "  subgraph cluster_k{k} {{");
                let _ = writeln!(
                    s,
                    "    label=\"{}\"; style=\"rounded,filled\"; fillcolor=\"#f4f4f4\"; color=\"#888888\"; fontsize=13;",
                    esc(&format!(
                        "kernel k{k}: grid ({}, {}, {}) · {} threads · for-loop × {}",
                        g[0],
                        g[1],
                        g[2],
                        block.threads(),
                        block.forloop_range()
                    ))
                );
                let id = |b: usize| format!("k{k}_n{b}");
                let bnodes = block.nodes();
                let label_of = |b: usize| -> (String, &'static str) {
                    let n = &bnodes[b];
                    let tile = n.outputs.first().map(|t| format!("\n{:?}", t.shape)).unwrap_or_default();
                    match &n.op {
                        BlockOp::Input { input, imap, forloop_dim } => (
                            format!(
                                "iterator: operand {input}\nimap {}\n{}{tile}",
                                fmt_map(imap),
                                forloop_dim.map_or("loaded once".to_string(), |d| format!("for-loop over dim {d}"))
                            ),
                            "#dbe9f6",
                        ),
                        BlockOp::Output { omap, store } => {
                            let k = bnodes[..b].iter().filter(|m| matches!(m.op, BlockOp::Output { .. })).count();
                            let stored = store.map(|d| format!("\nstored as {d}")).unwrap_or_default();
                            (format!("saver: output {k}\nomap {}{stored}", fmt_map(omap)), "#d9f0d3")
                        }
                        BlockOp::Accum { acc } => (format!("{}{tile}", acc.name()), "#fde0c5"),
                        BlockOp::RunningMax { .. } => (format!("{}{tile}", n.op.name()), "#fde0c5"),
                        op => (format!("{}{tile}", op.name()), "white"),
                    }
                };
                // The loop body, then the rest (accumulators, epilogue, savers).
                let in_loop = |b: usize| {
                    !matches!(bnodes[b].op, BlockOp::Accum { .. } | BlockOp::Output { .. })
                        && bnodes[b].outputs.first().is_some_and(|t| t.phase == Phase::InLoop)
                };
                let _ = writeln!(s, "    subgraph cluster_k{k}_loop {{");
                let _ = writeln!(
                    s,
                    "      label=\"{}\"; style=\"dashed,rounded\"; color=\"#999999\"; fontsize=11;",
                    esc(&format!("loop body × {}", block.forloop_range()))
                );
                for b in (0..bnodes.len()).filter(|&b| in_loop(b)) {
                    let (label, fill) = label_of(b);
                    let _ = writeln!(s, "      {} [label=\"{}\", fillcolor=\"{fill}\"];", id(b), esc(&label));
                }
                let _ = writeln!(s, "    }}");
                for b in (0..bnodes.len()).filter(|&b| !in_loop(b)) {
                    let (label, fill) = label_of(b);
                    let _ = writeln!(s, "    {} [label=\"{}\", fillcolor=\"{fill}\"];", id(b), esc(&label));
                }
                for (b, n) in bnodes.iter().enumerate() {
                    for t in &n.inputs {
                        let shape = block.tile(*t).map(|d| format!("{:?}", d.shape)).unwrap_or_default();
                        let port = if t.port > 0 { format!(" (out {})", t.port) } else { String::new() };
                        let _ = writeln!(
                            s,
                            "    {} -> {} [label=\"{}\"];",
                            id(t.node),
                            id(b),
                            esc(&format!("{shape}{port}"))
                        );
                    }
                }
                let _ = writeln!(s, "  }}");
                // Kernel operands into the iterators that read them.
                for (p, t) in node.inputs.iter().enumerate() {
                    let Some(from) = source.get(t) else { continue };
                    for (b, n) in bnodes.iter().enumerate() {
                        if matches!(n.op, BlockOp::Input { input, .. } if input == p) {
                            let _ = writeln!(edges, "  {from} -> {} [label=\"{}\"];", id(b), esc(&tensor_label(t)));
                        }
                    }
                }
                // Kernel outputs come from the savers, in order.
                let savers = bnodes.iter().enumerate().filter(|(_, n)| matches!(n.op, BlockOp::Output { .. }));
                for (port, (b, _)) in savers.enumerate() {
                    source.insert(TensorRef { node: i, port }, id(b));
                }
            }
            op => {
                let k = kernel_k;
                kernel_k += 1;
                let out = node.outputs.first().map(|d| format!("\n{:?} {}", d.shape, d.dtype)).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  k{k} [label=\"{}\", shape=box, style=\"rounded,filled\", fillcolor=\"#eeeeee\", penwidth=2];",
                    esc(&format!("kernel k{k}: {}\n(library operator){out}", op.name()))
                );
                for t in &node.inputs {
                    if let Some(from) = source.get(t) {
                        let _ = writeln!(edges, "  {from} -> k{k} [label=\"{}\"];", esc(&tensor_label(t)));
                    }
                }
                for port in 0..node.outputs.len() {
                    source.insert(TensorRef { node: i, port }, format!("k{k}"));
                }
            }
        }
    }
    s.push_str(&edges);
    if input_k > 1 {
        // Program inputs side by side, in parameter order.
        let chain: Vec<String> = (0..input_k).map(|k| format!("in{k}")).collect();
        let _ = writeln!(s, "  {{ rank=same; {} [style=invis]; }}", chain.join(" -> "));
    }
    s.push_str("}\n");
    s
}

/// The `dot` binary: [`DOT_ENV`] when set, `dot` otherwise (found on `PATH` when run).
pub fn dot_command() -> PathBuf {
    std::env::var_os(DOT_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("dot"))
}

/// Renders DOT text to SVG with Graphviz.
pub fn render_svg(dot: &str) -> Result<String, DotError> {
    let bin = dot_command();
    let mut child = Command::new(&bin)
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => DotError::Missing(bin.display().to_string()),
            _ => DotError::Failed(format!("starting {}: {e}", bin.display())),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(dot.as_bytes()).map_err(|e| DotError::Failed(format!("writing to dot: {e}")))?;
    }
    let out = child.wait_with_output().map_err(|e| DotError::Failed(format!("waiting for dot: {e}")))?;
    if !out.status.success() {
        return Err(DotError::Failed(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim())));
    }
    String::from_utf8(out.stdout).map_err(|e| DotError::Failed(format!("its output is not UTF-8: {e}")))
}
