//! Code generation for runtime-sized dims: the kernels take the sizes as `int` parameters after
//! their pointers, predicate loads (zero fill) and stores on them, and the launch plan records
//! the ranges, the dims they size, the grid axes of `ceil(n / tile)` blocks and the size
//! arguments; what the kernels cannot do at a runtime size yet is rejected with a reason; the
//! generated code compiles with nvcc for sm_90a.
#![cfg(feature = "build")]

mod support;
use support::gated_mlp;

use mirage::codegen::{CodegenError, KernelOptions, generate_sized};
use mirage::dims::{DimVar, Dims};
use mirage::ir::{AccKind, BlockGraph, DType, KernelGraph, TensorDesc};
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage_runtime::plan::{GridDim, LaunchPlan, PlanDim};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `B = 1..=64` sizing dim 0 of input 0.
fn over_b(inputs: usize) -> Dims {
    let mut marks = vec![vec![None, None]; inputs];
    marks[0][0] = Some(0);
    Dims { vars: vec![DimVar { name: "B".into(), lo: 1, hi: 64 }], inputs: marks }
}

#[test]
fn the_gated_mlp_over_b_takes_its_size_at_launch() -> TestResult {
    // The gated MLP as the search picks it at B = 64 (x `[B, 128]`): one kernel, grid `[4, 32]`
    // (16 rows of B by 8 columns per block).
    let g = generate_sized(&gated_mlp(8, 256)?, &over_b(3), "gmlp", &KernelOptions::default())?;
    let plan = &g.plan;
    assert_eq!(plan.dims, vec![PlanDim { name: "B".into(), lo: 1, hi: 64 }]);
    assert_eq!(plan.input_dims, vec![vec![Some(0), None], vec![None, None], vec![None, None]]);
    assert_eq!(plan.output_dims, vec![vec![Some(0), None]]);
    let k = &plan.kernels[0];
    assert_eq!(k.grid, [4, 32, 1]);
    assert_eq!(k.grid_dims, vec![Some(GridDim { dim: 0, tile: 16 }), None, None]);
    assert_eq!(k.size_args, vec![0]);
    // The plan reads back and gives the launch at B = 17: 2 blocks of rows.
    let plan = LaunchPlan::from_json(&plan.to_json())?;
    let found = [
        TensorDesc::new(&[17, 128], DType::F16),
        TensorDesc::new(&[128, 256], DType::F16),
        TensorDesc::new(&[128, 256], DType::F16),
    ];
    let sizes = mirage_runtime::check_tensors_sized(&plan, &found)?;
    assert_eq!(sizes, vec![17]);
    assert_eq!(plan.outputs_at(&sizes), vec![TensorDesc::new(&[17, 256], DType::F16)]);
    assert_eq!(plan.kernels[0].config_at(&sizes)?.grid, (2, 32, 1));
    // The kernel: the size after the pointers, loads of x zero-filled and stores cut at n0.
    let src = &g.kernels_source;
    assert!(src.contains("__half* __restrict__ out0, const int n0)"), "{src}");
    assert!(src.contains(") < n0) mirage::cp_async"), "{src}");
    assert!(src.contains("if ((bx*16 + "), "{src}");
    insta::assert_snapshot!(g.kernels_source);
    Ok(())
}

#[test]
fn the_sized_gated_mlp_compiles_for_sm90a() -> TestResult {
    let g = generate_sized(&gated_mlp(8, 256)?, &over_b(3), "gmlp_sized", &KernelOptions::default())?;
    let opts = CompileOptions { arch: Some("sm_90a".to_string()), ..Default::default() };
    let cubin = compile_cubin(&g.source, "gmlp_sized", &opts)?;
    assert!(cubin.bytes.starts_with(b"\x7fELF"), "an ELF cubin");
    Ok(())
}

#[test]
fn a_loop_over_b_and_b_at_dim_1_take_the_size_and_an_rms_over_b_is_rejected() -> TestResult {
    // Σ_B x with a for-loop walking B: a runtime trip count, the last tile's rows zero-filled.
    let mut g = KernelGraph::new();
    let x = g.input(&[64, 32], DType::F32)?;
    let mut bg = BlockGraph::new(vec![TensorDesc::new(&[64, 32], DType::F32)], [1, 1, 1], 128, 4)?;
    let t = bg.input(0, [None; 3], Some(0))?;
    let a = bg.accum(AccKind::Sum, &[t])?;
    let r = bg.op(mirage::ir::BlockOp::ReduceSum { dim: 0 }, &[a])?;
    bg.output(r, [None; 3])?;
    let y = g.custom(&[x], bg)?[0];
    g.output(y, None)?;
    let k = generate_sized(&g, &over_b(1), "loop", &KernelOptions::default())?;
    let src = &k.kernels_source;
    assert!(src.contains("const int iters = min(4, (max(n0, 0) + 15) / 16);"), "{src}");
    assert!(src.contains("for (int it = 0; it < iters; ++it) {"), "{src}");
    // The accumulator holds rows 0..16 wherever an iteration had one: the sum after the loop
    // masks from the first iteration's offset.
    assert!(src.contains("if (((0)*16 + r) < n0)"), "{src}");
    // A runtime-sized dim that is not dim 0: x[32, B], strides follow the size.
    let mut p = KernelGraph::new();
    let x = p.input(&[32, 64], DType::F16)?;
    let e2 = p.exp(x)?;
    p.output(e2, None)?;
    let dims = Dims { vars: over_b(1).vars, inputs: vec![vec![None, Some(0)]] };
    let k = generate_sized(&p, &dims, "cols", &KernelOptions::default())?;
    assert_eq!(k.plan.input_dims, vec![vec![None, Some(0)]]);
    assert_eq!(k.plan.output_dims, vec![vec![None, Some(0)]]);
    assert!(k.kernels_source.contains("*n0 + (long long)("), "{}", k.kernels_source);
    // rms_norm over x[32, B]: its mean is not masked.
    let mut p = KernelGraph::new();
    let x = p.input(&[32, 64], DType::F32)?;
    let r = p.rms_norm(x, 1e-6, None)?;
    p.output(r, None)?;
    let e = generate_sized(&p, &dims, "rms", &KernelOptions::default()).expect_err("an RMS over B");
    assert!(matches!(e, CodegenError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("rms_norm over [B]"), "{e}");
    Ok(())
}
