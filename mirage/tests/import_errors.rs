//! The importer of Mirage's µGraph JSON: clear errors that name the candidate, the operator and
//! the problem; both the older and the newer op spellings.
#![cfg(feature = "build")]

use mirage::import::{ImportError, ImportOptions, import_mirage_json, import_mirage_json_with};
use mirage::ir::{AccKind, BlockOp, DType, KernelGraph, KernelOp};
use mirage::testing::programs::golden_cases;
use serde_json::{Value, json};

fn golden(name: &str) -> &'static str {
    golden_cases()
        .into_iter()
        .find(|c| c.name == name)
        .map(|c| c.json)
        .unwrap_or_else(|| panic!("no golden file {name}"))
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("the golden files are JSON")
}

/// Asserts the import fails with a message containing every one of `parts`; returns it.
#[track_caller]
fn import_err(text: &str, parts: &[&str]) -> ImportError {
    let e = match import_mirage_json(text) {
        Ok(gs) => panic!("expected an error mentioning {parts:?}, imported {} graphs", gs.len()),
        Err(e) => e,
    };
    let msg = e.to_string();
    for p in parts {
        assert!(msg.contains(p), "error message {msg:?} does not contain {p:?}");
    }
    e
}

/// The first (candidate, kernel op) of `file` whose op_type is `op_type`, from candidate `from` on.
fn find_op(file: &Value, from: usize, op_type: &str) -> (usize, usize) {
    for (c, cand) in file.as_array().expect("array").iter().enumerate().skip(from) {
        for (i, op) in cand.as_array().expect("array").iter().enumerate() {
            if op["op_type"] == op_type {
                return (c, i);
            }
        }
    }
    panic!("no {op_type} from candidate {from} on");
}

/// The first block op of type `op_type` inside kernel op `i` of candidate `c`.
fn find_block_op(file: &Value, c: usize, i: usize, op_type: &str) -> usize {
    file[c][i]["bgraph"]["operators"]
        .as_array()
        .expect("array")
        .iter()
        .position(|op| op["op_type"] == op_type)
        .unwrap_or_else(|| panic!("no {op_type}"))
}

#[test]
fn the_golden_files_import() {
    for case in golden_cases() {
        let gs = case.candidates().unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert!(!gs.is_empty(), "{}", case.name);
    }
}

#[test]
fn not_json_or_not_an_array() {
    let e = import_err("this is not json", &["not a Mirage µGraph file"]);
    assert!(matches!(e, ImportError::NotMirage(_)), "{e:?}");
    let e = import_err(
        "{\"op_type\": \"kn_input_op\"}",
        &["not a Mirage µGraph file", "the top level is not an array of µGraphs"],
    );
    assert!(matches!(e, ImportError::NotMirage(_)), "{e:?}");
    import_err("42", &["not an array"]);
    let e = import_err("[[], 7]", &["candidate 1", "top level", "a µGraph must be an array of operators"]);
    assert!(matches!(e, ImportError::Op { candidate: 1, .. }), "{e:?}");
    // A truncated file.
    let lora = golden("lora");
    import_err(&lora[..lora.len() / 2], &["not a Mirage µGraph file"]);
}

#[test]
fn unknown_kernel_op() {
    let mut f = parse(golden("gated_mlp"));
    let (c, i) = find_op(&f, 1, "kn_mul_op");
    f[c][i]["op_type"] = "kn_frobnicate_op".into();
    let e = import_err(
        &f.to_string(),
        &[
            &format!("candidate {c}, kernel op {i} (kn_frobnicate_op)"),
            "operator `kn_frobnicate_op` is not supported by the importer",
        ],
    );
    assert!(matches!(e, ImportError::Op { candidate, .. } if candidate == c), "{e:?}");
}

#[test]
fn unknown_block_op() {
    let mut f = parse(golden("lora"));
    let (c, i) = find_op(&f, 2, "kn_customized_op");
    let j = find_block_op(&f, c, i, "tb_matmul_op");
    f[c][i]["bgraph"]["operators"][j]["op_type"] = "tb_magic_op".into();
    import_err(
        &f.to_string(),
        &[
            &format!("candidate {c}, kernel op {i} (kn_customized_op), block op {j} (tb_magic_op)"),
            "operator `tb_magic_op` is not supported by the importer",
        ],
    );
}

#[test]
fn unknown_data_type() {
    let mut f = parse(golden("lora"));
    f[1][0]["output_tensors"][0]["data_type"] = 999.into();
    import_err(
        &f.to_string(),
        &["candidate 1, kernel op 0 (kn_input_op)", "data_type 999 is not supported (f16 921/940, bf16 941, f32 950)"],
    );
    // Inside a block graph too.
    let mut f = parse(golden("lora"));
    let (c, i) = find_op(&f, 0, "kn_customized_op");
    let j = find_block_op(&f, c, i, "tb_matmul_op");
    f[c][i]["bgraph"]["operators"][j]["output_tensors"][0]["data_type"] = 123.into();
    import_err(
        &f.to_string(),
        &[
            &format!("candidate {c}, kernel op {i} (kn_customized_op), block op {j} (tb_matmul_op)"),
            "data_type 123 is not supported",
        ],
    );
}

#[test]
fn guid_used_before_it_is_produced() {
    let mut f = parse(golden("lora"));
    let (c, i) = find_op(&f, 3, "kn_customized_op");
    f[c][i]["input_tensors"][1]["guid"] = 4242.into();
    import_err(
        &f.to_string(),
        &[
            &format!("candidate {c}, kernel op {i} (kn_customized_op)"),
            "tensor guid 4242 is not produced by an earlier operator",
        ],
    );
    // An output that reads a tensor produced later: move the output op to the front.
    let mut f = parse(golden("lora"));
    let ops = f[0].as_array_mut().expect("array");
    let out = ops.pop().expect("an output op");
    ops.insert(0, out);
    import_err(&f.to_string(), &["candidate 0, kernel op 0 (kn_output_op)", "is not produced by an earlier operator"]);
    // A block op reading a tile nobody produced.
    let mut f = parse(golden("lora"));
    let (c, i) = find_op(&f, 0, "kn_customized_op");
    let j = find_block_op(&f, c, i, "tb_matmul_op");
    f[c][i]["bgraph"]["operators"][j]["input_tensors"][0]["guid"] = 777.into();
    import_err(
        &f.to_string(),
        &[&format!("block op {j} (tb_matmul_op)"), "tile guid 777 is not produced by an earlier operator"],
    );
}

#[test]
fn recorded_shapes_must_agree_with_our_rules() {
    // A kernel-level shape.
    let mut f = parse(golden("gated_mlp"));
    let (c, i) = find_op(&f, 0, "kn_mul_op");
    f[c][i]["output_tensors"][0]["dim"][1] = 2048.into();
    let guid = f[c][i]["output_tensors"][0]["guid"].clone();
    import_err(
        &f.to_string(),
        &[
            &format!("candidate {c}, kernel op {i} (kn_mul_op)"),
            &format!("the file records shape [8, 2048] for tensor {guid}, our shape rule gives [8, 4096]"),
        ],
    );
    // A tile shape in a block graph.
    let mut f = parse(golden("gated_mlp"));
    let (c, i) = find_op(&f, 2, "kn_customized_op");
    let j = find_block_op(&f, c, i, "tb_matmul_op");
    let d0 = f[c][i]["bgraph"]["operators"][j]["output_tensors"][0]["dim"][0].as_u64().expect("a dim");
    f[c][i]["bgraph"]["operators"][j]["output_tensors"][0]["dim"][0] = (d0 * 2).into();
    import_err(
        &f.to_string(),
        &[
            &format!("candidate {c}, kernel op {i} (kn_customized_op), block op {j} (tb_matmul_op)"),
            "the file records tile shape",
            "our shape rule gives",
        ],
    );
    // An input shape that makes the block matmul break its rule.
    let mut f = parse(golden("lora"));
    f[0][0]["output_tensors"][0]["dim"][1] = 128.into();
    let e = import_err(&f.to_string(), &["candidate 0, kernel op 4 (kn_customized_op)"]);
    let msg = e.to_string();
    assert!(msg.contains("matmul") || msg.contains("input iterator") || msg.contains("custom"), "{msg}");
    // A kernel output the custom op does not write.
    let mut f = parse(golden("lora"));
    let (c, i) = find_op(&f, 0, "kn_customized_op");
    f[c][i]["output_tensors"][0]["guid"] = 31337.into();
    import_err(
        &f.to_string(),
        &["kernel op 4 (kn_customized_op)", "output tensor 31337 is written by no output saver"],
    );
}

#[test]
fn num_dims_out_of_range() {
    for n in [0, 5, -1] {
        let mut f = parse(golden("lora"));
        f[2][1]["output_tensors"][0]["num_dims"] = n.into();
        import_err(
            &f.to_string(),
            &["candidate 2, kernel op 1 (kn_input_op)", &format!("num_dims {n} is outside 1..=4")],
        );
    }
    let mut f = parse(golden("lora"));
    f[0][0]["output_tensors"][0]["dim"] = json!([16]);
    import_err(
        &f.to_string(),
        &["candidate 0, kernel op 0 (kn_input_op)", "`dim` has fewer than num_dims = 2 entries"],
    );
    let mut f = parse(golden("lora"));
    f[0][0]["output_tensors"][0]["dim"][0] = 0.into();
    import_err(&f.to_string(), &["kernel op 0 (kn_input_op)", "bad dim entry 0"]);
    let mut f = parse(golden("lora"));
    if let Some(o) = f[0][1].as_object_mut() {
        o.remove("output_tensors");
    }
    import_err(&f.to_string(), &["kernel op 1 (kn_input_op)", "missing field `output_tensors`"]);
}

#[test]
fn old_and_new_spellings_import_to_the_same_graphs() {
    // lora is written in the older spelling; rewrite it in the newer one.
    let old = golden("lora");
    assert!(old.contains("\"tb_accum_nored_op\"") && old.contains("921"));
    let new = old
        .replace("\"tb_accum_nored_op\"", "\"tb_forloop_accum_nored_op\"")
        .replace("\"data_type\":921", "\"data_type\":940");
    assert_ne!(old, new);
    let (a, b) = (import_mirage_json(old).expect("old spelling"), import_mirage_json(&new).expect("new spelling"));
    assert_eq!(a, b);
    // A qwen file is in the newer spelling (with rms accumulators); rewrite it in the older one.
    let case = golden_cases().into_iter().find(|c| c.name == "qwen2.5_659704256b064506").expect("qwen golden");
    assert!(case.json.contains("\"tb_forloop_accum_red_ld_rms_op\""));
    let old = case.json.replace("\"tb_forloop_accum_", "\"tb_accum_").replace("\"data_type\":940", "\"data_type\":921");
    let opts = ImportOptions { half_dtype: DType::Bf16 };
    let (a, b) = (case.candidates().expect("new spelling"), import_mirage_json_with(&old, opts).expect("old spelling"));
    assert_eq!(a, b);
    assert!(a.iter().all(|g| g.inputs().iter().all(|d| d.dtype == DType::Bf16)));
    // Without the option the 16-bit code is f16.
    let f16 = import_mirage_json(&old).expect("old spelling as f16");
    assert!(f16[0].inputs().iter().all(|d| d.dtype == DType::F16));
}

fn rec(guid: i64, dims: &[usize]) -> Value {
    let mut d = dims.to_vec();
    d.resize(4, 0);
    json!({ "data_type": 950, "dim": d, "guid": guid, "layout": "DmemRowMajor", "num_dims": dims.len() })
}

/// A one-kernel µGraph: X [4, 8] (and R [4, 2] for the rescaling ones), loop of 2 over the last
/// dim, one accumulator `acc_op` producing `tile`, saved.
fn synthetic(acc_op: &str, tile: &[usize]) -> String {
    let rescale = acc_op.contains("rescale");
    let none = json!({ "x": -1, "y": -1, "z": -1 });
    let mut kernel_ins = vec![rec(1, &[4, 8])];
    let mut block_ops = vec![
        json!({ "op_type": "tb_input_op", "dtensor": rec(1, &[4, 8]), "input_map": none, "forloop_dim": 1, "input_tensors": [], "output_tensors": [rec(101, &[4, 4])] }),
    ];
    let mut acc_ins = vec![rec(101, &[4, 4])];
    if rescale {
        kernel_ins.push(rec(3, &[4, 2]));
        block_ops.push(json!({ "op_type": "tb_input_op", "dtensor": rec(3, &[4, 2]), "input_map": none, "forloop_dim": 1, "input_tensors": [], "output_tensors": [rec(103, &[4, 1])] }));
        acc_ins.push(rec(103, &[4, 1]));
    }
    block_ops.push(json!({ "op_type": acc_op, "input_tensors": acc_ins, "output_tensors": [rec(102, tile)] }));
    block_ops.push(json!({ "op_type": "tb_output_op", "dtensor": rec(2, tile), "output_map": none, "input_tensors": [rec(102, tile)], "output_tensors": [] }));
    let mut ops: Vec<Value> = kernel_ins
        .iter()
        .map(|r| json!({ "op_type": "kn_input_op", "input_tensors": [], "output_tensors": [r] }))
        .collect();
    ops.push(json!({
        "op_type": "kn_customized_op",
        "input_tensors": kernel_ins,
        "output_tensors": [rec(2, tile)],
        "bgraph": {
            "grid_dim": { "x": 1, "y": 1, "z": 1 },
            "block_dim": { "x": 128, "y": 1, "z": 1 },
            "forloop_range": 2,
            "reduction_dimx": 2,
            "operators": block_ops,
        }
    }));
    ops.push(json!({ "op_type": "kn_output_op", "input_tensors": [rec(2, tile)], "output_tensors": [] }));
    json!([ops]).to_string()
}

fn accumulator_of(g: &KernelGraph) -> Option<AccKind> {
    g.nodes().iter().find_map(|n| match &n.op {
        KernelOp::Custom { block } => block.nodes().iter().find_map(|b| match b.op {
            BlockOp::Accum { acc } => Some(acc),
            _ => None,
        }),
        _ => None,
    })
}

#[test]
fn every_accumulator_in_both_spellings() {
    let cases: [(&str, AccKind, &[usize]); 7] = [
        ("nored", AccKind::Sum, &[4, 4]),
        ("red_ld_sum", AccKind::SumLast, &[4, 1]),
        ("red_ld_rms", AccKind::RmsLast, &[4, 1]),
        ("redtox_ld_sum", AccKind::SumTo { width: 2 }, &[4, 2]),
        ("max", AccKind::Max, &[4, 4]),
        ("nored_rescale", AccKind::Rescale, &[4, 4]),
        ("red_ld_sum_rescale", AccKind::SumLastRescale, &[4, 1]),
    ];
    for (suffix, acc, tile) in cases {
        for prefix in ["tb_accum_", "tb_forloop_accum_"] {
            let name = format!("{prefix}{suffix}_op");
            let gs = import_mirage_json(&synthetic(&name, tile)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(gs.len(), 1);
            assert_eq!(accumulator_of(&gs[0]), Some(acc), "{name}");
            assert_eq!(gs[0].outputs().len(), 1);
        }
        // A wrong recorded tile shape is caught for every accumulator.
        let name = format!("tb_accum_{suffix}_op");
        import_err(&synthetic(&name, &[4, 3]), &["block op", &format!("({name})")]);
    }
    import_err(
        &synthetic("tb_accum_sideways_op", &[4, 4]),
        &["(tb_accum_sideways_op)", "is not supported by the importer"],
    );
}
