//! Import of the µGraph JSON written by the original Mirage (`mirage-project/mirage`): both the
//! older op spellings (`tb_accum_nored_op`, `data_type` 921) and the newer ones
//! (`tb_forloop_accum_nored_op`, 940). Every tensor shape recorded in the file is checked against
//! the shape our IR infers, so an import also checks that the two systems agree on semantics.

use std::collections::HashMap;

use serde_json::Value;

use crate::ir::{
    AccKind, BinaryOp, BlockGraph, BlockOp, DType, GridMap, IrError, KernelGraph, Scalar, TensorDesc, TensorRef,
    UnaryOp,
};

/// Why a Mirage µGraph could not be imported.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// The text is not JSON, or not an array of candidates.
    #[error("not a Mirage µGraph file: {0}")]
    NotMirage(String),
    /// An operator could not be read or broke a rule of our IR.
    #[error("candidate {candidate}, {location}: {message}")]
    Op {
        /// Index of the µGraph in the file.
        candidate: usize,
        /// The operator (`kernel op 3 (kn_customized_op)`, `block op 2 (tb_matmul_op)`).
        location: String,
        /// What was wrong.
        message: String,
    },
}

/// Choices the file itself does not record.
#[derive(Clone, Copy, Debug)]
pub struct ImportOptions {
    /// The element type to use for Mirage's 16-bit float codes (921 in older files, 940 in newer
    /// ones). The benchmark files are f16; the qwen2.5 files were declared bf16 by their programs.
    pub half_dtype: DType,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions { half_dtype: DType::F16 }
    }
}

/// Imports every candidate of a Mirage µGraph file with default options.
pub fn import_mirage_json(json: &str) -> Result<Vec<KernelGraph>, ImportError> {
    import_mirage_json_with(json, ImportOptions::default())
}

/// Imports every candidate of a Mirage µGraph file.
pub fn import_mirage_json_with(json: &str, opts: ImportOptions) -> Result<Vec<KernelGraph>, ImportError> {
    let value: Value = serde_json::from_str(json).map_err(|e| ImportError::NotMirage(e.to_string()))?;
    let candidates =
        value.as_array().ok_or_else(|| ImportError::NotMirage("the top level is not an array of µGraphs".into()))?;
    // A file may also hold a single µGraph (an array of operators).
    if candidates.first().and_then(|c| c.get("op_type")).is_some() {
        return Ok(vec![import_graph(candidates, 0, opts)?]);
    }
    candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ops = c.as_array().ok_or_else(|| ImportError::Op {
                candidate: i,
                location: "top level".into(),
                message: "a µGraph must be an array of operators".into(),
            })?;
            import_graph(ops, i, opts)
        })
        .collect()
}

type Res<T> = Result<T, String>;

fn field<'a>(v: &'a Value, key: &str) -> Res<&'a Value> {
    v.get(key).ok_or_else(|| format!("missing field `{key}`"))
}

fn int(v: &Value, key: &str) -> Res<i64> {
    field(v, key)?.as_i64().ok_or_else(|| format!("field `{key}` is not an integer"))
}

fn dtype(code: i64, opts: ImportOptions) -> Res<DType> {
    match code {
        921 | 940 => Ok(opts.half_dtype),
        941 => Ok(DType::Bf16),
        950 => Ok(DType::F32),
        other => Err(format!("data_type {other} is not supported (f16 921/940, bf16 941, f32 950)")),
    }
}

/// A Mirage tensor record: guid, shape and element type.
struct Record {
    guid: i64,
    shape: Vec<usize>,
    dtype: DType,
}

fn record(v: &Value, opts: ImportOptions) -> Res<Record> {
    let n = int(v, "num_dims")?;
    if !(1..=4).contains(&n) {
        return Err(format!("num_dims {n} is outside 1..=4"));
    }
    let dims = field(v, "dim")?.as_array().ok_or("field `dim` is not an array")?;
    let shape = dims
        .iter()
        .take(n as usize)
        .map(|d| d.as_u64().filter(|&d| d > 0).map(|d| d as usize).ok_or_else(|| format!("bad dim entry {d}")))
        .collect::<Res<Vec<_>>>()?;
    if shape.len() != n as usize {
        return Err(format!("`dim` has fewer than num_dims = {n} entries"));
    }
    Ok(Record { guid: int(v, "guid")?, shape, dtype: dtype(int(v, "data_type")?, opts)? })
}

fn tensors(op: &Value, key: &str, opts: ImportOptions) -> Res<Vec<Record>> {
    field(op, key)?
        .as_array()
        .ok_or_else(|| format!("field `{key}` is not an array"))?
        .iter()
        .map(|t| record(t, opts))
        .collect()
}

fn usize_list(v: &Value, key: &str) -> Res<Vec<usize>> {
    field(v, key)?
        .as_array()
        .ok_or_else(|| format!("field `{key}` is not an array"))?
        .iter()
        .map(|s| s.as_u64().map(|s| s as usize).ok_or_else(|| format!("bad entry {s} in `{key}`")))
        .collect()
}

fn grid_map(v: &Value, key: &str) -> Res<GridMap> {
    let m = field(v, key)?;
    let mut out = [None; 3];
    for (a, axis) in ["x", "y", "z"].iter().enumerate() {
        let d = int(m, axis)?;
        out[a] = if d < 0 { None } else { Some(d as usize) };
    }
    Ok(out)
}

fn dim3(v: &Value, key: &str) -> Res<[usize; 3]> {
    let m = field(v, key)?;
    let mut out = [1; 3];
    for (a, axis) in ["x", "y", "z"].iter().enumerate() {
        out[a] = usize::try_from(int(m, axis)?).map_err(|_| format!("negative {key}.{axis}"))?;
    }
    Ok(out)
}

/// The element-wise operator names Mirage writes that the table imports, for messages.
fn element_wise_names() -> String {
    let unary = UnaryOp::ALL.iter().filter_map(|op| op.spec().mirage.map(|(name, _)| name));
    let binary = BinaryOp::ALL.iter().filter_map(|op| op.spec().mirage);
    unary.chain(binary).collect::<Vec<_>>().join(", ")
}

/// `reduction_0`, `reduction_1_to_dimx`, ... → (dim, to-dimx?).
fn reduction(name: &str) -> Option<(usize, bool)> {
    let rest = name.strip_prefix("reduction_")?;
    let (d, tail) = rest.split_at(1);
    let dim = d.parse().ok()?;
    match tail {
        "" => Some((dim, false)),
        "_to_dimx" => Some((dim, true)),
        _ => None,
    }
}

fn accumulator(name: &str, dimx: usize) -> Option<AccKind> {
    let rest = name.strip_prefix("forloop_accum_").or_else(|| name.strip_prefix("accum_"))?;
    Some(match rest {
        "nored" => AccKind::Sum,
        "red_ld_sum" => AccKind::SumLast,
        "red_ld_rms" => AccKind::RmsLast,
        "redtox_ld_sum" => AccKind::SumTo { width: dimx },
        "max" => AccKind::Max,
        "nored_rescale" => AccKind::Rescale,
        "red_ld_sum_rescale" => AccKind::SumLastRescale,
        _ => return None,
    })
}

fn ir(e: IrError) -> String {
    e.to_string()
}

fn import_graph(ops: &[Value], candidate: usize, opts: ImportOptions) -> Result<KernelGraph, ImportError> {
    let mut g = KernelGraph::new();
    let mut by_guid: HashMap<i64, TensorRef> = HashMap::new();
    let mut consumed: Vec<TensorRef> = Vec::new();
    let mut produced: Vec<TensorRef> = Vec::new();
    let mut has_output = false;
    for (i, op) in ops.iter().enumerate() {
        let op_type = op.get("op_type").and_then(Value::as_str).unwrap_or("?");
        let err =
            |message: String| ImportError::Op { candidate, location: format!("kernel op {i} ({op_type})"), message };
        let lookup = |guid: i64, by_guid: &HashMap<i64, TensorRef>| {
            by_guid
                .get(&guid)
                .copied()
                .ok_or_else(|| format!("tensor guid {guid} is not produced by an earlier operator"))
        };
        let ins = tensors(op, "input_tensors", opts).map_err(err)?;
        let in_refs = ins.iter().map(|r| lookup(r.guid, &by_guid)).collect::<Res<Vec<_>>>().map_err(err)?;
        consumed.extend(&in_refs);
        let outs = tensors(op, "output_tensors", opts).map_err(err)?;
        let name = op_type.strip_prefix("kn_").and_then(|n| n.strip_suffix("_op")).unwrap_or(op_type);
        let results: Vec<TensorRef> = match name {
            "input" => {
                let out = outs.first().ok_or_else(|| err("an input has no output tensor".into()))?;
                let strides = match op.get("input_strides") {
                    Some(_) => usize_list(op, "input_strides").map_err(err)?,
                    None => crate::ir::row_major_strides(&out.shape),
                };
                vec![g.input_strided(&out.shape, &strides, out.dtype).map_err(|e| err(ir(e)))?]
            }
            "output" => {
                has_output = true;
                let strides = match op.get("output_strides") {
                    Some(_) => Some(usize_list(op, "output_strides").map_err(err)?).filter(|s| !s.is_empty()),
                    None => None,
                };
                let t = *in_refs.first().ok_or_else(|| err("an output has no operand".into()))?;
                g.output(t, strides).map_err(|e| err(ir(e)))?;
                vec![]
            }
            "customized" => {
                let bgraph = field(op, "bgraph").map_err(err)?;
                let descs = in_refs
                    .iter()
                    .map(|&t| g.desc(t).cloned())
                    .collect::<Result<Vec<TensorDesc>, _>>()
                    .map_err(|e| err(ir(e)))?;
                let (block, saver_guids) = import_block(bgraph, &ins, descs, opts).map_err(|(loc, m)| {
                    ImportError::Op { candidate, location: format!("kernel op {i} ({op_type}), {loc}"), message: m }
                })?;
                let refs = g.custom(&in_refs, block).map_err(|e| err(ir(e)))?;
                // Kernel outputs are the savers' tensors: order them as the savers are.
                let mut ordered = Vec::new();
                for out in &outs {
                    let port = saver_guids
                        .iter()
                        .position(|&s| s == out.guid)
                        .ok_or_else(|| err(format!("output tensor {} is written by no output saver", out.guid)))?;
                    ordered.push(refs[port]);
                }
                ordered
            }
            "matmul" => vec![
                g.matmul(in_refs[0], *in_refs.get(1).ok_or_else(|| err("matmul needs 2 operands".into()))?)
                    .map_err(|e| err(ir(e)))?,
            ],
            "rms_norm" => vec![g.rms_norm(in_refs[0], 0.0, None).map_err(|e| err(ir(e)))?],
            other => {
                let result = if let Some(u) = UnaryOp::from_mirage(other) {
                    g.unary(u, *in_refs.first().ok_or_else(|| err("missing operand".into()))?)
                } else if let Some(b) = BinaryOp::from_mirage(other) {
                    if in_refs.len() != 2 {
                        return Err(err(format!("{other} needs 2 operands, found {}", in_refs.len())));
                    }
                    g.binary(b, in_refs[0], in_refs[1])
                } else if let Some((dim, false)) = reduction(other) {
                    g.reduce_sum(*in_refs.first().ok_or_else(|| err("missing operand".into()))?, dim)
                } else {
                    return Err(err(format!(
                        "operator `{op_type}` is not supported by the importer (supported kernel ops: input, output, customized, matmul, rms_norm, {}, reduction_N)",
                        element_wise_names()
                    )));
                };
                vec![result.map_err(|e| err(ir(e)))?]
            }
        };
        if results.len() != outs.len() {
            return Err(err(format!(
                "the file records {} outputs, our operator produces {}",
                outs.len(),
                results.len()
            )));
        }
        for (r, out) in results.iter().zip(&outs) {
            let desc = g.desc(*r).map_err(|e| err(ir(e)))?;
            if desc.shape != out.shape {
                return Err(err(format!(
                    "the file records shape {:?} for tensor {}, our shape rule gives {:?}",
                    out.shape, out.guid, desc.shape
                )));
            }
            by_guid.insert(out.guid, *r);
        }
        produced.extend(&results);
    }
    if !has_output {
        // Older files may leave outputs implicit: every tensor nobody consumes.
        for t in produced.iter().filter(|t| !consumed.contains(t)) {
            g.output(*t, None).map_err(|e| ImportError::Op {
                candidate,
                location: "implicit outputs".into(),
                message: ir(e),
            })?;
        }
    }
    Ok(g)
}

/// Imports a block graph; returns it and, per output saver, the guid of the device tensor it writes.
fn import_block(
    bgraph: &Value,
    kernel_inputs: &[Record],
    descs: Vec<TensorDesc>,
    opts: ImportOptions,
) -> Result<(BlockGraph, Vec<i64>), (String, String)> {
    let top = |m: String| ("bgraph".to_string(), m);
    let grid = dim3(bgraph, "grid_dim").map_err(top)?;
    let block = dim3(bgraph, "block_dim").map_err(top)?;
    let frange = usize::try_from(int(bgraph, "forloop_range").map_err(top)?)
        .map_err(|_| top("negative forloop_range".into()))?;
    let dimx = bgraph.get("reduction_dimx").and_then(Value::as_u64).unwrap_or(64) as usize;
    let mut bg = BlockGraph::new(descs, grid, block.iter().product(), frange).map_err(|e| top(ir(e)))?;
    let ops =
        field(bgraph, "operators").map_err(top)?.as_array().ok_or_else(|| top("`operators` is not an array".into()))?;
    let mut by_guid: HashMap<i64, TensorRef> = HashMap::new();
    let mut savers = Vec::new();
    for (j, op) in ops.iter().enumerate() {
        let op_type = op.get("op_type").and_then(Value::as_str).unwrap_or("?");
        let loc = format!("block op {j} ({op_type})");
        let err = |m: String| (loc.clone(), m);
        let ins = tensors(op, "input_tensors", opts).map_err(err)?;
        let in_refs = ins
            .iter()
            .map(|r| {
                by_guid
                    .get(&r.guid)
                    .copied()
                    .ok_or_else(|| format!("tile guid {} is not produced by an earlier operator", r.guid))
            })
            .collect::<Res<Vec<_>>>()
            .map_err(err)?;
        let outs = tensors(op, "output_tensors", opts).map_err(err)?;
        let name = op_type.strip_prefix("tb_").and_then(|n| n.strip_suffix("_op")).unwrap_or(op_type);
        let one = |i: usize| in_refs.get(i).copied().ok_or_else(|| err(format!("missing operand {i}")));
        let result: Vec<TensorRef> = match name {
            "input" => {
                let dt = record(field(op, "dtensor").map_err(err)?, opts).map_err(err)?;
                let input = kernel_inputs
                    .iter()
                    .position(|r| r.guid == dt.guid)
                    .ok_or_else(|| err(format!("device tensor {} is not an operand of the kernel", dt.guid)))?;
                let imap = grid_map(op, "input_map").map_err(err)?;
                let fdim = int(op, "forloop_dim").map_err(err)?;
                let fdim = if fdim < 0 { None } else { Some(fdim as usize) };
                vec![bg.input(input, imap, fdim).map_err(|e| err(ir(e)))?]
            }
            "output" => {
                let dt = record(field(op, "dtensor").map_err(err)?, opts).map_err(err)?;
                let omap = grid_map(op, "output_map").map_err(err)?;
                bg.output(one(0)?, omap).map_err(|e| err(ir(e)))?;
                savers.push(dt.guid);
                vec![]
            }
            "matmul" => vec![bg.matmul(one(0)?, one(1)?).map_err(|e| err(ir(e)))?],
            "rms_norm" => vec![bg.op(BlockOp::RmsNorm { eps: Scalar(0.0) }, &[one(0)?]).map_err(|e| err(ir(e)))?],
            other => {
                let r = if let Some(u) = UnaryOp::from_mirage(other) {
                    bg.unary(u, one(0)?)
                } else if let Some(b) = BinaryOp::from_mirage(other) {
                    bg.binary(b, one(0)?, one(1)?)
                } else if let Some((dim, to_dimx)) = reduction(other) {
                    let op =
                        if to_dimx { BlockOp::ReduceSumTo { dim, width: dimx } } else { BlockOp::ReduceSum { dim } };
                    bg.op(op, &[one(0)?])
                } else if let Some(acc) = accumulator(other, dimx) {
                    bg.accum(acc, &in_refs)
                } else if let Some(d) = other.strip_prefix("concat_").and_then(|d| d.parse().ok()) {
                    bg.op(BlockOp::Concat { dim: d }, &[one(0)?, one(1)?])
                } else {
                    return Err(err(format!(
                        "operator `{op_type}` is not supported by the importer (supported block ops: input, output, matmul, rms_norm, {}, reduction_N[_to_dimx], concat_N, the accumulators nored / red_ld_sum / red_ld_rms / redtox_ld_sum / max / nored_rescale / red_ld_sum_rescale in both spellings)",
                        element_wise_names()
                    )));
                };
                vec![r.map_err(|e| err(ir(e)))?]
            }
        };
        for (r, out) in result.iter().zip(&outs) {
            let tile = bg.tile(*r).map_err(|e| err(ir(e)))?;
            if tile.shape != out.shape {
                return Err(err(format!(
                    "the file records tile shape {:?} for {}, our shape rule gives {:?}",
                    out.shape, out.guid, tile.shape
                )));
            }
            by_guid.insert(out.guid, *r);
        }
    }
    Ok((bg, savers))
}
