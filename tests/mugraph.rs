//! The `#[mugraph]` pipeline end to end, as a user meets it: the kernels of `tests/kernels/mod.rs`
//! (one per operator) are built by the root build.rs with `mirage::build::compile` and expand to
//! typed launchers. Without a GPU: the launchers' signatures, their artifacts (plan, µGraph,
//! fingerprint) and the shape/dtype/strides checks that run before any CUDA call. With one
//! (`--ignored`): every launcher against the CPU reference interpreter.

mod kernels;

use mirage::codegen::default_blocks::lower_to_blocks;
use mirage::fingerprint::{Verdict, VerifyConfig, verify};
use mirage::ir::KernelGraph;
use mirage::lower::{Program as Lowered, lower_source};
use mirage::prelude::*;
use mirage::testing::compare::{ErrorModel, compare, reduction_len};
use mirage::testing::inputs::{random_inputs, seed};
use mirage::{AnyViewMut, DType, TensorDesc, WorkspaceLayout};
use std::collections::BTreeMap;

const SOURCE: &str = include_str!("kernels/mod.rs");

fn lowered(name: &str) -> Lowered {
    let programs = lower_source(SOURCE).unwrap_or_else(|e| panic!("{e}"));
    programs.into_iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no #[mugraph] fn {name}"))
}

/// Every built program with its name, as the launchers' modules expose them.
fn programs() -> Vec<&'static Program> {
    use kernels::*;
    vec![
        &op_matmul::PROGRAM,
        &op_matmul_batched::PROGRAM,
        &op_matmul_strided::PROGRAM,
        &op_exp::PROGRAM,
        &op_square::PROGRAM,
        &op_sqrt::PROGRAM,
        &op_silu::PROGRAM,
        &op_gelu::PROGRAM,
        &op_relu::PROGRAM,
        &op_neg::PROGRAM,
        &op_recip::PROGRAM,
        &op_clamp::PROGRAM,
        &op_scalar::PROGRAM,
        &op_add::PROGRAM,
        &op_sub::PROGRAM,
        &op_mul::PROGRAM,
        &op_div::PROGRAM,
        &op_pow::PROGRAM,
        &op_broadcast::PROGRAM,
        &op_sum::PROGRAM,
        &op_max::PROGRAM,
        &op_rms_norm::PROGRAM,
        &op_rms_norm_weighted::PROGRAM,
        &op_concat::PROGRAM,
        &op_softmax::PROGRAM,
        &op_gather::PROGRAM,
        &op_argmax::PROGRAM,
        &op_bf16::PROGRAM,
        &op_f32::PROGRAM,
        &op_mixed::PROGRAM,
        &nested::op_nested::PROGRAM,
        &op_residual::PROGRAM,
        &op_down_residual_r1::PROGRAM,
        &op_down_residual_r16::PROGRAM,
        &op_gated_mlp_over_b::PROGRAM,
        &op_attention_over_s::PROGRAM,
    ]
}

#[test]
fn launchers_have_typed_signatures() {
    type F16 = DeviceTensor<f16>;
    type Bf16 = DeviceTensor<bf16>;
    type F32 = DeviceTensor<f32>;
    type I32 = DeviceTensor<i32>;
    type R<T> = Result<T, RuntimeError>;
    type Binary<A, B, O> = fn(&Gpu, &A, &B) -> R<O>;
    let _: Binary<F16, F16, F16> = kernels::op_matmul;
    let _: fn(&Stream, &F16, &F16) -> R<F16> = kernels::op_matmul_on;
    let _: fn(&Gpu, &F16) -> R<(F16, F16)> = kernels::op_neg;
    let _: Binary<Bf16, Bf16, Bf16> = kernels::op_bf16;
    let _: Binary<F32, F32, F32> = kernels::op_f32;
    let _: Binary<Bf16, F32, (Bf16, F32)> = kernels::op_mixed;
    let _: Binary<F16, F16, F16> = kernels::nested::op_nested;
    // `i32` ids in, `i32` indices out.
    let _: Binary<F16, I32, F16> = kernels::op_gather;
    let _: fn(&Stream, &F16, &I32) -> R<F16> = kernels::op_gather_on;
    let _: fn(&Gpu, &F16) -> R<I32> = kernels::op_argmax;
}

#[test]
fn i32_parameters_and_results_are_checked() {
    let gather = &kernels::op_gather::PROGRAM;
    let table = TensorDesc::new(&[64, 32], DType::F16);
    gather.check_inputs(&[table.clone(), TensorDesc::new(&[8], DType::I32)]).expect("the signature's tensors");
    let e = gather.check_inputs(&[table.clone(), TensorDesc::new(&[8], DType::F32)]).expect_err("f32 ids");
    assert_eq!(e.to_string(), "`op_gather`: parameter `ids`: expected element type i32, found f32");
    let e = gather.check_inputs(&[table, TensorDesc::new(&[9], DType::I32)]).expect_err("9 ids");
    assert_eq!(e.to_string(), "`op_gather`: parameter `ids`: expected shape [8], found shape [9]");
    let plan = kernels::op_argmax::PROGRAM.plan().expect("a plan");
    assert_eq!(plan.outputs, vec![TensorDesc::new(&[16, 1], DType::I32)]);
}

#[test]
fn artifacts_belong_to_their_programs() {
    for program in programs() {
        let name = program.name();
        let source = lowered(name);
        let plan = program.plan().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(plan.fingerprint, source.fingerprint_hash, "{name}");
        assert_eq!(program.artifacts().fingerprint, source.fingerprint_hash, "{name}: the macro and the build agree");
        assert_eq!(plan.input_names, source.params.iter().map(|p| p.name.clone()).collect::<Vec<_>>(), "{name}");
        let specs: Vec<TensorDesc> = source.params.iter().map(|p| p.desc.clone()).collect();
        assert_eq!(plan.inputs, specs, "{name}");
        program.check_inputs(&specs).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The chosen µGraph is the superoptimizer's (fingerprint-equivalent to the program), or
        // the program's own kernel graph with default block graphs; the plan says which.
        let mugraph = KernelGraph::from_json(program.mugraph_json()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let report = plan
            .search_report
            .as_deref()
            .unwrap_or_else(|| panic!("{name}: the plan records how its µGraph was chosen"));
        if report.contains("chosen µGraph") {
            let verdict =
                verify(&source.graph, &mugraph, &VerifyConfig::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(verdict, Verdict::Equivalent, "{name}: the searched µGraph computes the program");
        } else {
            assert!(report.starts_with("not superoptimized ("), "{name}: {report}");
            let expected = lower_to_blocks(&source.graph).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(mugraph.canonical_hash(), expected.canonical_hash(), "{name}");
        }
        assert_eq!(plan.kernels.len(), mugraph.num_kernels(), "{name}");
        let archs =
            mirage::image_archs(program.artifacts().cubin).unwrap_or_else(|| panic!("{name}: a cubin or fatbin"));
        if std::env::var_os(mirage::nvcc::ARCH_ENV).is_none() && std::env::var_os(mirage::nvcc::ARCHS_ENV).is_none() {
            // The default build: a fatbin with code for sm_80 (A100, L40S) and sm_90a (H100/H200).
            let names: Vec<String> = archs.iter().map(ToString::to_string).collect();
            assert_eq!(names, ["sm_80", "sm_90a"], "{name}");
            let a100 = mirage::select_arch(mirage::ComputeCapability::new(8, 0), &archs);
            assert_eq!(a100.map(|a| a.to_string()).as_deref(), Some("sm_80"), "{name}: an A100 runs the sm_80 code");
        }
    }
}

#[test]
fn bad_tensors_are_errors_naming_the_parameter() {
    let p = &kernels::op_matmul_strided::PROGRAM;
    let x = TensorDesc::new(&[16, 64], DType::F16);
    let w = TensorDesc { shape: vec![64, 32], strides: vec![1, 64], dtype: DType::F16 };
    p.check_inputs(&[x.clone(), w.clone()]).expect("the signature's tensors");

    let e = p.check_inputs(&[TensorDesc::new(&[16, 65], DType::F16), w.clone()]).expect_err("shape");
    assert_eq!(e.to_string(), "`op_matmul_strided`: parameter `x`: expected shape [16, 64], found shape [16, 65]");
    let e = p.check_inputs(&[x.clone(), TensorDesc::new(&[64, 32], DType::F16)]).expect_err("strides");
    assert_eq!(
        e.to_string(),
        "`op_matmul_strided`: parameter `w`: expected strides [1, 64] for shape [64, 32], found strides [32, 1]"
    );
    let e = p.check_inputs(&[TensorDesc::new(&[16, 64], DType::F32), w.clone()]).expect_err("dtype");
    assert_eq!(e.to_string(), "`op_matmul_strided`: parameter `x`: expected element type f16, found f32");
    let e = p.check_inputs(&[x]).expect_err("arity");
    assert!(e.to_string().contains("expected 2 (x, w), found 1"), "{e}");

    let mixed = &kernels::op_mixed::PROGRAM;
    let e = mixed
        .check_inputs(&[TensorDesc::new(&[16, 64], DType::Bf16), TensorDesc::new(&[8, 32], DType::Bf16)])
        .expect_err("dtype");
    assert_eq!(e.to_string(), "`op_mixed`: parameter `b`: expected element type f32, found bf16");
}

#[test]
fn without_a_gpu_launching_is_an_error_not_a_panic() {
    // A launcher needs a `Gpu`; opening one that is not there is an `Err` naming what is missing.
    match Gpu::new(0) {
        // A GPU here: an ordinal past the last device is the missing one.
        Ok(gpu) => {
            let count = mirage::device_count().unwrap_or_else(|e| panic!("{} is open: {e}", gpu.info()));
            match Gpu::new(count) {
                Err(RuntimeError::NoDevice { ordinal, count: c }) => assert_eq!((ordinal, c), (count, count)),
                other => panic!("expected NoDevice for ordinal {count}, found {other:?}"),
            }
        }
        Err(e @ RuntimeError::NoDriver) => {
            assert!(e.to_string().contains("no CUDA driver library (libcuda) found"), "{e}")
        }
        Err(e @ RuntimeError::NoDevice { ordinal: 0, .. }) => assert!(e.to_string().contains("ordinal 0"), "{e}"),
        Err(e) => panic!("expected NoDriver or NoDevice, found {e:?}"),
    }
}

/// NaN-filled tensors of the given specs: outputs and buffers an unwritten element shows in.
fn poisoned(gpu: &Gpu, specs: &[TensorDesc]) -> Vec<AnyTensor> {
    specs
        .iter()
        .map(|s| {
            AnyTensor::upload_f32(gpu.stream(), s, &vec![f32::NAN; s.num_elements()])
                .unwrap_or_else(|e| panic!("poisoning: {e}"))
        })
        .collect()
}

/// With a GPU: every launcher on random inputs (uniform in [-1, 1): `op_clamp`'s bounds ±0.5 are
/// active on both sides) against the CPU reference of its program, element by element
/// (`mirage::testing::compare`), with outputs and intermediate buffers NaN-poisoned; the
/// executor's own allocation (`Program::run`, what the typed launchers call) gives the same bits.
#[test]
#[ignore = "needs a CUDA GPU"]
fn launchers_match_the_reference_on_the_gpu() {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed("launchers_match_the_reference_on_the_gpu").unwrap_or_else(|e| panic!("{e}"));
    let mut worst: BTreeMap<&'static str, (f64, String)> = BTreeMap::new();
    let mut failures = Vec::new();
    for program in programs() {
        let name = program.name();
        let source = lowered(name);
        let plan = program.plan().unwrap_or_else(|e| panic!("{name}: {e}"));
        let host = random_inputs(&plan.inputs, seed, |_| -1.0..1.0);
        let device: Vec<AnyTensor> = plan
            .inputs
            .iter()
            .zip(&host)
            .map(|(s, h)| AnyTensor::upload_f32(gpu.stream(), s, &h.data).unwrap_or_else(|e| panic!("{name}: {e}")))
            .collect();
        let args: Vec<TensorArg<'_>> = device.iter().map(AnyTensor::as_arg).collect();
        let mut outputs = poisoned(&gpu, &plan.outputs);
        let buffer_specs: Vec<TensorDesc> = plan.buffers.iter().map(|b| b.desc.clone()).collect();
        let mut buffers = poisoned(&gpu, &buffer_specs);
        program.launch(gpu.stream(), &args, &mut outputs, &mut buffers).unwrap_or_else(|e| panic!("{name}: {e}"));
        let unpoisoned = program.run(gpu.stream(), &args).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = mirage::reference::run(&source.graph, &host).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(outputs.len(), want.len(), "{name}");
        let k_len = reduction_len(plan.inputs.iter().map(|s| s.shape.as_slice()));
        for (k, ((g, again), w)) in outputs.iter().zip(&unpoisoned).zip(&want).enumerate() {
            let g = g.to_host_f32().unwrap_or_else(|e| panic!("{name}: {e}"));
            let again = again.to_host_f32().unwrap_or_else(|e| panic!("{name}: {e}"));
            let model = ErrorModel::new(plan.outputs[k].dtype, k_len);
            let c = compare(&g, &w.data, &w.shape, model).unwrap_or_else(|e| panic!("{name} output {k}: {e}"));
            let ratio = c.worst.as_ref().map_or(0.0, |e| e.ratio());
            let entry = worst.entry(model.dtype.name()).or_insert((-1.0, String::new()));
            if ratio > entry.0 {
                *entry = (ratio, format!("{name} output {k}: {c}"));
            }
            if let Err(e) = c.check(&format!("{name} output {k}")) {
                failures.push(e);
            }
            let same = g.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                failures.push(format!("{name} output {k}: Program::run gives other bits than the poisoned launch"));
            }
        }
    }
    println!("worst element error per element type (error / tolerance, ≤ 1 passes):");
    for (dtype, (ratio, what)) in &worst {
        println!("  {dtype}: {ratio:.3} — {what}");
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    // The typed launchers too.
    let x = gpu.upload(&vec![f16::from_f32(0.5); 16 * 64], &[16, 64]).expect("upload");
    let w = gpu.upload(&vec![f16::from_f32(0.25); 64 * 32], &[64, 32]).expect("upload");
    let y = kernels::op_matmul(&gpu, &x, &w).expect("launch");
    let y = gpu.download(&y).expect("download");
    assert!(y.iter().all(|v| v.to_f32() == 8.0), "{:?}", &y[..4]);
    // The i32 launchers: ids in (the last one addresses no row: zeros), indices out (ties to the
    // lowest index).
    let table: Vec<f16> = (0..64 * 32).map(|i| f16::from_f32((i / 32) as f32 + (i % 32) as f32 / 32.0)).collect();
    let table = gpu.upload(&table, &[64, 32]).expect("upload");
    let ids = gpu.upload(&[5i32, 0, 63, 5, 17, 1, 40, 64], &[8]).expect("upload");
    let rows = gpu.download(&kernels::op_gather(&gpu, &table, &ids).expect("launch")).expect("download");
    for (r, id) in [5i32, 0, 63, 5, 17, 1, 40, 64].into_iter().enumerate() {
        for c in 0..32 {
            let want = if id < 64 { id as f32 + c as f32 / 32.0 } else { 0.0 };
            assert_eq!(rows[r * 32 + c].to_f32(), want, "row {r} (id {id}), column {c}");
        }
    }
    // Row r peaks at column (7·r) mod 64, twice in the odd rows (there also at column 63, later).
    let x: Vec<f16> = (0..16 * 64)
        .map(|i| {
            let (r, c) = (i / 64, i % 64);
            let peak = c == (7 * r) % 64 || (r % 2 == 1 && c == 63);
            f16::from_f32(if peak { 2.0 } else { (c as f32 - 32.0) / 64.0 })
        })
        .collect();
    let x = gpu.upload(&x, &[16, 64]).expect("upload");
    let idx = gpu.download(&kernels::op_argmax(&gpu, &x).expect("launch")).expect("download");
    assert_eq!(idx, (0..16i32).map(|r| (7 * r) % 64).collect::<Vec<_>>());
    // Bad shapes are errors naming the parameter, before any launch.
    let e = kernels::op_matmul(&gpu, &w, &w).expect_err("bad shape");
    assert!(e.to_string().contains("parameter `x`: expected shape [16, 64], found shape [64, 32]"), "{e}");
}

/// With a GPU: the typed `_into` form on an engine's own cudarc buffers (borrowed as views) and a
/// reusable workspace, captured in a CUDA graph on a caller's stream and replayed on new input
/// data written into the same buffers, each replay against the CPU reference; then the `_into`
/// form's checks (a wrong output shape, a workspace too small for a program that needs one).
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_into_launch_is_captured_in_a_cuda_graph_and_replayed() {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed("an_into_launch_is_captured_in_a_cuda_graph_and_replayed").unwrap_or_else(|e| panic!("{e}"));
    // A capture isolates its stream: cudarc's cross-stream event tracking would make the captured
    // launch wait on events recorded before the capture, which invalidates it. One stream orders
    // everything here, so tracking is off.
    // SAFETY: every buffer below is used on `stream` only.
    unsafe { gpu.context().disable_event_tracking() };
    // The engine's stream, wrapped (capture needs a stream other than the legacy default one).
    let engine_stream = gpu.context().new_stream().unwrap_or_else(|e| panic!("new stream: {e}"));
    let stream = Stream::from_raw(engine_stream.clone());
    let program = &kernels::op_matmul::PROGRAM;
    let source = lowered("op_matmul");
    let plan = program.plan().unwrap_or_else(|e| panic!("{e}"));
    let mut x = engine_stream.alloc_zeros::<f16>(16 * 64).unwrap_or_else(|e| panic!("alloc: {e}"));
    let mut w = engine_stream.alloc_zeros::<f16>(64 * 32).unwrap_or_else(|e| panic!("alloc: {e}"));
    let mut y = stream.zeros::<f16>(&[16, 32]).unwrap_or_else(|e| panic!("alloc: {e}"));
    let mut workspace = program.workspace(&stream).unwrap_or_else(|e| panic!("workspace: {e}"));
    let launch = |x: &mirage::cudarc::driver::CudaSlice<f16>,
                  w: &mirage::cudarc::driver::CudaSlice<f16>,
                  y: &mut DeviceTensor<f16>,
                  workspace: &mut Workspace| {
        let xv = TensorView::from_cudarc(x, &[16, 64])?;
        let wv = TensorView::from_cudarc(w, &[64, 32])?;
        kernels::op_matmul_into(&stream, workspace, xv, wv, y)
    };
    // The first launch loads the module (not allowed during a capture).
    launch(&x, &w, &mut y, &mut workspace).unwrap_or_else(|e| panic!("first launch: {e}"));
    stream.synchronize().unwrap_or_else(|e| panic!("{e}"));
    stream.begin_capture().unwrap_or_else(|e| panic!("begin capture: {e}"));
    let captured = launch(&x, &w, &mut y, &mut workspace);
    let graph = stream.end_capture().unwrap_or_else(|e| panic!("end capture: {e}"));
    captured.unwrap_or_else(|e| panic!("the captured launch: {e}"));
    let to_f16 = |v: &[f32]| v.iter().map(|&a| f16::from_f32(a)).collect::<Vec<_>>();
    for round in 0..3u64 {
        let host = random_inputs(&plan.inputs, seed.wrapping_add(round), |_| -1.0..1.0);
        engine_stream.memcpy_htod(&to_f16(&host[0].data), &mut x).unwrap_or_else(|e| panic!("{e}"));
        engine_stream.memcpy_htod(&to_f16(&host[1].data), &mut w).unwrap_or_else(|e| panic!("{e}"));
        engine_stream.memcpy_htod(&vec![f16::NAN; 16 * 32], y.as_slice_mut()).unwrap_or_else(|e| panic!("{e}"));
        graph.launch().unwrap_or_else(|e| panic!("replay {round}: {e}"));
        let got: Vec<f32> =
            stream.download(&y).unwrap_or_else(|e| panic!("{e}")).into_iter().map(f16::to_f32).collect();
        let want = mirage::reference::run(&source.graph, &host).unwrap_or_else(|e| panic!("{e}"));
        let c = compare(&got, &want[0].data, &want[0].shape, ErrorModel::new(DType::F16, 64))
            .unwrap_or_else(|e| panic!("replay {round}: {e}"));
        println!("replay {round}: {c}");
        c.check(&format!("replay {round} of the captured op_matmul_into")).unwrap_or_else(|e| panic!("{e}"));
    }
    drop(graph);
    // Checked before any launch: an output of the wrong shape, a workspace too small.
    let mut wrong = stream.zeros::<f16>(&[16, 33]).unwrap_or_else(|e| panic!("alloc: {e}"));
    let e = launch(&x, &w, &mut wrong, &mut workspace).expect_err("wrong output shape");
    assert_eq!(e.to_string(), "`op_matmul`: parameter `output 0`: expected shape [16, 32], found shape [16, 33]");
    let e = TensorView::from_cudarc(&x, &[16, 65]).expect_err("a buffer too short for the shape");
    assert!(e.to_string().contains("expected at least 1040 elements, found 1024"), "{e}");
    // A plan with an intermediate buffer (op_matmul's, with the product kept in a buffer first):
    // its workspace size is checked before the module is loaded.
    let mut with_buffer = plan.clone();
    with_buffer
        .buffers
        .push(mirage_runtime::plan::Buffer { desc: TensorDesc::new(&[16, 32], DType::F32), dims: vec![] });
    let needed = WorkspaceLayout::of(&with_buffer).unwrap_or_else(|e| panic!("{e}")).bytes;
    assert_eq!(needed, 16 * 32 * 4);
    let p: &'static Program = Box::leak(Box::new(
        Program::with_plan("op_matmul_buffered", program.artifacts().cubin, with_buffer)
            .unwrap_or_else(|e| panic!("{e}")),
    ));
    let mut small = Workspace::new(&stream, needed - 1).unwrap_or_else(|e| panic!("{e}"));
    let xv = TensorView::from_cudarc(&x, &[16, 64]).unwrap_or_else(|e| panic!("{e}"));
    let wv = TensorView::from_cudarc(&w, &[64, 32]).unwrap_or_else(|e| panic!("{e}"));
    let e = p
        .launch_views(&stream, &[xv.erase(), wv.erase()], &mut [AnyViewMut::from(&mut y)], &mut small)
        .expect_err("workspace too small");
    assert_eq!(
        e.to_string(),
        format!(
            "`op_matmul_buffered`: parameter `workspace`: expected at least {needed} bytes (1 intermediate buffer), \
             found {} bytes",
            needed - 1
        )
    );
}

/// With a GPU: one static program serves two CUDA contexts of one device (the primary one and a
/// second created with cuCtxCreate): its module is loaded once per context, each launch runs on
/// its own context's tensors, and both give the same bits.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_program_loads_once_per_cuda_context() {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let second = mirage::cudarc::driver::CudaContext::new_non_primary(0, 0)
        .unwrap_or_else(|e| panic!("creating a second context on device 0: {e}"));
    let other = Stream::from_raw(second.default_stream());
    let x_host: Vec<f16> = (0..16 * 64).map(|i| f16::from_f32(((i % 7) as f32 - 3.0) / 4.0)).collect();
    let w_host: Vec<f16> = (0..64 * 32).map(|i| f16::from_f32(((i % 5) as f32 - 2.0) / 8.0)).collect();
    let mut results = Vec::new();
    for stream in [gpu.stream(), &other] {
        let x = stream.upload(&x_host, &[16, 64]).unwrap_or_else(|e| panic!("{e}"));
        let w = stream.upload(&w_host, &[64, 32]).unwrap_or_else(|e| panic!("{e}"));
        let y = kernels::op_matmul_on(stream, &x, &w).unwrap_or_else(|e| panic!("launch: {e}"));
        results.push(stream.download(&y).unwrap_or_else(|e| panic!("{e}")));
    }
    assert_eq!(results[0], results[1], "the two contexts give the same bits");
    let want: Vec<f32> = (0..16 * 32)
        .map(|o| (0..64).map(|k| x_host[o / 32 * 64 + k].to_f32() * w_host[k * 32 + o % 32].to_f32()).sum())
        .collect();
    let got: Vec<f32> = results[0].iter().map(|v| v.to_f32()).collect();
    compare(&got, &want, &[16, 32], ErrorModel::new(DType::F16, 64))
        .unwrap_or_else(|e| panic!("{e}"))
        .check("op_matmul on two contexts")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(kernels::op_matmul::PROGRAM.loaded_contexts() >= 2, "loaded on both contexts");
}

/// A launcher with a runtime-sized dim (`B` in 1..=64) takes any size in the range, checked
/// without a GPU: the output follows `B`; a size out of range, or two uses of `B` that disagree
/// (here the plan's inputs at other sizes), is an error naming the dim, the parameter and the
/// sizes found.
#[test]
fn a_sized_launcher_takes_any_size_in_its_range() {
    let p = &kernels::op_gated_mlp_over_b::PROGRAM;
    let plan = p.plan().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.dims.len(), 1);
    assert_eq!((plan.dims[0].name.as_str(), plan.dims[0].lo, plan.dims[0].hi), ("B", 1, 64));
    let at = |b: usize| {
        vec![
            TensorDesc::new(&[b, 256], DType::F16),
            TensorDesc::new(&[256, 512], DType::F16),
            TensorDesc::new(&[256, 512], DType::F16),
        ]
    };
    for b in [1, 3, 17, 63, 64] {
        p.check_inputs(&at(b)).unwrap_or_else(|e| panic!("B = {b}: {e}"));
        assert_eq!(plan.outputs_at(&[b]), vec![TensorDesc::new(&[b, 512], DType::F16)]);
    }
    let e = p.check_inputs(&at(65)).expect_err("B = 65").to_string();
    assert_eq!(
        e,
        "`op_gated_mlp_over_b`: parameter `x`: expected B in 1..=64, found B = 65 (dim 0 of shape [65, 256])"
    );
    let mut wrong = at(8);
    wrong[1] = TensorDesc::new(&[255, 512], DType::F16);
    let e = p.check_inputs(&wrong).expect_err("w1's rows").to_string();
    assert!(e.contains("parameter `w1`") && e.contains("[256, 512]"), "{e}");
}

/// Without a GPU: the bucketed launcher's dispatcher sends every `B` of 1..=64 to the bucket
/// holding it (the default buckets 1, 2..=8, 9..=16, 17..=32, 33..=64), checks sizes against the
/// declared range, and its plan describes the whole range.
#[test]
fn a_bucketed_launcher_dispatches_every_size_to_its_bucket() {
    let p = &kernels::op_gated_mlp_over_b_buckets::PROGRAM;
    let ranges: Vec<(usize, usize)> = p.buckets().iter().map(|b| b.ranges[0]).collect();
    assert_eq!(ranges, vec![(1, 1), (2, 8), (9, 16), (17, 32), (33, 64)]);
    let plan = p.plan().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((plan.dims[0].name.as_str(), plan.dims[0].lo, plan.dims[0].hi), ("B", 1, 64));
    for b in 1..=64 {
        let i = p.bucket_of(&[b]).unwrap_or_else(|e| panic!("B = {b}: {e}")).expect("bucketed");
        assert!(ranges[i].0 <= b && b <= ranges[i].1, "B = {b} went to bucket {i} {:?}", ranges[i]);
        let bucket_plan = p.buckets()[i].program.plan().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((bucket_plan.dims[0].lo, bucket_plan.dims[0].hi), ranges[i], "bucket {i}'s plan");
        let at = [
            TensorDesc::new(&[b, 256], DType::F16),
            TensorDesc::new(&[256, 512], DType::F16),
            TensorDesc::new(&[256, 512], DType::F16),
        ];
        p.check_inputs(&at).unwrap_or_else(|e| panic!("B = {b}: {e}"));
    }
    let e = p.bucket_of(&[65]).expect_err("B = 65").to_string();
    assert!(e.contains("B in 1..=64") && e.contains("B = 65"), "{e}");
    assert_eq!(kernels::op_gated_mlp_over_b::PROGRAM.bucket_of(&[8]).expect("one build"), None);
}

type GatedMlp = fn(
    &Gpu,
    &DeviceTensor<f16>,
    &DeviceTensor<f16>,
    &DeviceTensor<f16>,
) -> Result<DeviceTensor<f16>, mirage::RuntimeError>;

/// With a GPU: the typed launcher of `op_gated_mlp_over_b` at 12 sizes of `B` (1, 3, 17, 63 and
/// 64 among them) against the CPU reference of the program at that size (element by element,
/// `mirage::testing::compare`), the output of `B` rows each time; `B = 65` is an error before
/// any launch. Run under compute-sanitizer's memcheck by scripts/gpu-run-all.sh.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_sized_launcher_matches_the_reference_at_twelve_sizes() {
    sized_launcher_matches("op_gated_mlp_over_b", kernels::op_gated_mlp_over_b, &kernels::op_gated_mlp_over_b::PROGRAM);
}

/// With a GPU: the same for the bucketed launcher `op_gated_mlp_over_b_buckets`: the 12 sizes
/// run in all five buckets (both ends of each among them).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_bucketed_launcher_matches_the_reference_at_twelve_sizes() {
    let p = &kernels::op_gated_mlp_over_b_buckets::PROGRAM;
    sized_launcher_matches("op_gated_mlp_over_b_buckets", kernels::op_gated_mlp_over_b_buckets, p);
    // The `_into` form, one workspace for every bucket: the same output as the typed launcher.
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let stream = gpu.stream();
    let mut workspace = p.workspace(stream).unwrap_or_else(|e| panic!("workspace: {e}"));
    for b in [1, 8, 17, 64] {
        let specs = p.plan().unwrap_or_else(|e| panic!("{e}")).inputs_at(&[b]);
        let host = random_inputs(&specs, 7 + b as u64, |_| -1.0..1.0);
        let up = |i: usize| {
            let v: Vec<f16> = host[i].data.iter().map(|&x| f16::from_f32(x)).collect();
            gpu.upload(&v, &specs[i].shape).unwrap_or_else(|e| panic!("B = {b}: {e}"))
        };
        let (x, w1, w2) = (up(0), up(1), up(2));
        let want = kernels::op_gated_mlp_over_b_buckets(&gpu, &x, &w1, &w2).unwrap_or_else(|e| panic!("B = {b}: {e}"));
        let mut y = stream.zeros::<f16>(&[b, 512]).unwrap_or_else(|e| panic!("alloc: {e}"));
        kernels::op_gated_mlp_over_b_buckets_into(stream, &mut workspace, &x, &w1, &w2, &mut y)
            .unwrap_or_else(|e| panic!("B = {b}: {e}"));
        let (got, want) = (gpu.download(&y).expect("download"), gpu.download(&want).expect("download"));
        assert!(got == want, "B = {b}: the _into form differs from the typed launcher");
    }
}

/// With a GPU: the decode attention over a runtime key length `op_attention_over_s` (S in
/// 1..=8192, one build at 8192) at 12 key lengths — 1, 3, 17, 255, 4097, both range ends and sizes
/// that are not multiples of any tile among them — against the CPU reference of the program at
/// that length (`mirage::testing::compare`); `S = 8193` and K and V of different lengths are
/// errors before any launch. Run under compute-sanitizer's memcheck by scripts/gpu-run-all.sh.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_s_sized_attention_matches_the_reference_at_twelve_sizes() {
    use mirage::dims::DimPlan;
    use mirage::eval::evaluate_at;
    let name = "op_attention_over_s";
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed("an_s_sized_attention_matches_the_reference_at_twelve_sizes").unwrap_or_else(|e| panic!("{e}"));
    let source = lowered(name);
    let dplan = DimPlan::analyze(&source.graph, &source.dims).unwrap_or_else(|e| panic!("{e}"));
    let plan = kernels::op_attention_over_s::PROGRAM.plan().unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    for n in [1, 2, 3, 17, 64, 255, 256, 1000, 2049, 4097, 8191, 8192] {
        let specs = plan.inputs_at(&[n]);
        // Scores up to ±8: the maximum's subtraction matters.
        let host = random_inputs(&specs, seed + n as u64, |i| if i == 0 { -8.0..8.0 } else { -1.0..1.0 });
        let up = |i: usize| {
            let v: Vec<bf16> = host[i].data.iter().map(|&x| bf16::from_f32(x)).collect();
            gpu.upload(&v, &specs[i].shape).unwrap_or_else(|e| panic!("S = {n}: {e}"))
        };
        let (q, k, v) = (up(0), up(1), up(2));
        let y = kernels::op_attention_over_s(&gpu, &q, &k, &v).unwrap_or_else(|e| panic!("S = {n}: {e}"));
        assert_eq!(y.shape(), &[4, 1, 64], "S = {n}");
        let got: Vec<f32> = gpu.download(&y).unwrap_or_else(|e| panic!("{e}")).iter().map(|v| v.to_f32()).collect();
        let run = dplan.run_shapes(&source.graph, &[n]).unwrap_or_else(|e| panic!("S = {n}: {e}"));
        let want = evaluate_at(&source.graph, &mirage::reference::F32, &host, &run).unwrap_or_else(|e| panic!("{e}"));
        let model = ErrorModel::new(DType::Bf16, n.max(64));
        let c = compare(&got, &want[0].data, &want[0].shape, model).unwrap_or_else(|e| panic!("S = {n}: {e}"));
        println!("{name} S = {n:4}: {c}");
        if let Err(e) = c.check(&format!("{name} S = {n}")) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    // Out of range, and K and V disagreeing: errors naming S, before any launch.
    let q = gpu.upload(&vec![bf16::from_f32(0.0); 4 * 64], &[4, 1, 64]).expect("upload");
    let k = gpu.upload(&vec![bf16::from_f32(0.0); 4 * 64 * 8193], &[4, 64, 8193]).expect("upload");
    let v = gpu.upload(&vec![bf16::from_f32(0.0); 4 * 8193 * 64], &[4, 8193, 64]).expect("upload");
    let e = kernels::op_attention_over_s(&gpu, &q, &k, &v).expect_err("S = 8193").to_string();
    assert!(e.contains("S in 1..=8192") && e.contains("S = 8193"), "{e}");
    let k = gpu.upload(&vec![bf16::from_f32(0.0); 4 * 64 * 17], &[4, 64, 17]).expect("upload");
    let v = gpu.upload(&vec![bf16::from_f32(0.0); 4 * 18 * 64], &[4, 18, 64]).expect("upload");
    let e = kernels::op_attention_over_s(&gpu, &q, &k, &v).expect_err("S = 17 and 18").to_string();
    assert!(e.contains("S = 17") && e.contains("S = 18"), "{e}");
}

/// With a GPU: attention over `S` with K a view one element into its buffer (its base 2 bytes past
/// 16-byte alignment, its end at the buffer's end), so K's rows go through window copies
/// (`mirage::window_copy`) and the units that need the tensor's first or last 16-byte chunk
/// through element copies — at sizes that are not multiples of 8 and at multiples of 8 (8, 16,
/// 4096: there the kernels' guard sees K's base misaligned and takes the windows too, where a
/// 16-byte `cp.async` would fault); against the CPU reference. Under compute-sanitizer's memcheck a
/// 16-byte load of the last chunk would read past the allocation. V misaligned the same way is an
/// error naming `v` before any launch (its vectors are not guarded).
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_s_sized_attention_reads_a_misaligned_key_view_through_windows() {
    use mirage::dims::DimPlan;
    use mirage::eval::evaluate_at;
    let name = "op_attention_over_s";
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed =
        seed("an_s_sized_attention_reads_a_misaligned_key_view_through_windows").unwrap_or_else(|e| panic!("{e}"));
    let engine_stream = gpu.context().new_stream().unwrap_or_else(|e| panic!("new stream: {e}"));
    let stream = Stream::from_raw(engine_stream.clone());
    let program = &kernels::op_attention_over_s::PROGRAM;
    let source = lowered(name);
    let dplan = DimPlan::analyze(&source.graph, &source.dims).unwrap_or_else(|e| panic!("{e}"));
    let plan = program.plan().unwrap_or_else(|e| panic!("{e}"));
    let mut workspace = program.workspace(&stream).unwrap_or_else(|e| panic!("workspace: {e}"));
    let mut failures = Vec::new();
    for n in [1, 3, 8, 16, 17, 255, 4096, 4097] {
        let specs = plan.inputs_at(&[n]);
        let host = random_inputs(&specs, seed + n as u64, |i| if i == 0 { -8.0..8.0 } else { -1.0..1.0 });
        let to_bf16 = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
        let upload = |data: Vec<bf16>| {
            let mut b = engine_stream.alloc_zeros::<bf16>(data.len()).unwrap_or_else(|e| panic!("alloc: {e}"));
            engine_stream.memcpy_htod(&data, &mut b).unwrap_or_else(|e| panic!("upload: {e}"));
            b
        };
        let (q, v) = (upload(to_bf16(&host[0].data)), upload(to_bf16(&host[2].data)));
        // K one element into a buffer of one more element: misaligned base, end at the buffer's.
        let mut kdata = vec![bf16::from_f32(0.0)];
        kdata.extend(to_bf16(&host[1].data));
        let k = upload(kdata);
        let kview = k.slice(1..);
        let layout = |i: usize| mirage::Layout::row_major(&specs[i].shape).unwrap_or_else(|e| panic!("{e}"));
        let qv = TensorView::from_cudarc(&q, &specs[0].shape).unwrap_or_else(|e| panic!("{e}"));
        let kv = TensorView::from_cudarc_view(&kview, layout(1)).unwrap_or_else(|e| panic!("{e}"));
        let vv = TensorView::from_cudarc(&v, &specs[2].shape).unwrap_or_else(|e| panic!("{e}"));
        let mut y = stream.zeros::<bf16>(&[4, 1, 64]).unwrap_or_else(|e| panic!("alloc: {e}"));
        program
            .launch_views(
                &stream,
                &[qv.erase(), kv.erase(), vv.erase()],
                &mut [AnyViewMut::from(&mut y)],
                &mut workspace,
            )
            .unwrap_or_else(|e| panic!("S = {n}: {e}"));
        // V the same way: an error, no launch.
        let mut vdata = vec![bf16::from_f32(0.0)];
        vdata.extend(to_bf16(&host[2].data));
        let vbuf = upload(vdata);
        let vview = vbuf.slice(1..);
        let vmis = TensorView::from_cudarc_view(&vview, layout(2)).unwrap_or_else(|e| panic!("{e}"));
        let e = program
            .launch_views(
                &stream,
                &[qv.erase(), kv.erase(), vmis.erase()],
                &mut [AnyViewMut::from(&mut y)],
                &mut workspace,
            )
            .expect_err("V misaligned");
        assert!(e.to_string().contains("parameter `v`: expected a device pointer aligned to 16 bytes"), "S = {n}: {e}");
        let got: Vec<f32> = stream.download(&y).unwrap_or_else(|e| panic!("{e}")).iter().map(|v| v.to_f32()).collect();
        let run = dplan.run_shapes(&source.graph, &[n]).unwrap_or_else(|e| panic!("S = {n}: {e}"));
        let want = evaluate_at(&source.graph, &mirage::reference::F32, &host, &run).unwrap_or_else(|e| panic!("{e}"));
        let c = compare(&got, &want[0].data, &want[0].shape, ErrorModel::new(DType::Bf16, n.max(64)))
            .unwrap_or_else(|e| panic!("S = {n}: {e}"));
        println!("{name} with K misaligned, S = {n:4}: {c}");
        if let Err(e) = c.check(&format!("{name} with K misaligned, S = {n}")) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

/// The alignment program `program`'s kernels need of its input `i` (the widest over its uses).
fn input_align(program: &Program, i: usize) -> usize {
    let plan = program.plan().unwrap_or_else(|e| panic!("{e}"));
    let uses = plan.kernels.iter().flat_map(|k| {
        k.args.iter().enumerate().filter(|(_, a)| **a == mirage::plan::ArgRef::Input(i)).map(|(j, _)| k.align_of_arg(j))
    });
    uses.max().unwrap_or_else(|| panic!("{}: input {i} is read by no kernel", program.name()))
}

/// Without a GPU: the plans of the built programs record the pointer alignment their kernels
/// need — `op_matmul`'s `x` (copied in 16-byte vectors) 16 bytes; the S-sized attention's K
/// (copied in vectors only when S is a multiple of 8 and K's base is 16-byte aligned, through
/// windows otherwise) its element's 2 bytes, its q and V 16.
#[test]
fn the_plans_record_the_pointer_alignment_of_every_parameter() {
    assert_eq!(input_align(&kernels::op_matmul::PROGRAM, 0), 16);
    let attention = &kernels::op_attention_over_s::PROGRAM;
    assert_eq!([0, 1, 2].map(|i| input_align(attention, i)), [16, 2, 16]);
}

/// With a GPU: `op_matmul` given an `x` view 2 bytes past a 16-byte boundary (one element into
/// its buffer) is an error naming `x` and both alignments, through `launch_views` and through the
/// typed `_into` launcher, before any kernel runs; the context is not poisoned: the stream
/// synchronizes, and a launch on a view 16 bytes into the same buffer (aligned enough) matches the
/// CPU reference.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_misaligned_view_is_an_error_and_the_context_still_works() {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed("a_misaligned_view_is_an_error_and_the_context_still_works").unwrap_or_else(|e| panic!("{e}"));
    let engine_stream = gpu.context().new_stream().unwrap_or_else(|e| panic!("new stream: {e}"));
    let stream = Stream::from_raw(engine_stream.clone());
    let program = &kernels::op_matmul::PROGRAM;
    assert_eq!(input_align(program, 0), 16, "x is copied in 16-byte vectors: the test needs that");
    let source = lowered("op_matmul");
    let plan = program.plan().unwrap_or_else(|e| panic!("{e}"));
    let host = random_inputs(&plan.inputs, seed, |_| -1.0..1.0);
    let to_f16 = |v: &[f32]| v.iter().map(|&a| f16::from_f32(a)).collect::<Vec<_>>();
    // x at element 1 and at element 8 of one buffer of 8 + 16·64 elements (base 256-aligned).
    let mut xdata = vec![f16::ZERO; 8];
    xdata.extend(to_f16(&host[0].data));
    let mut xbuf = engine_stream.alloc_zeros::<f16>(xdata.len()).unwrap_or_else(|e| panic!("alloc: {e}"));
    let mut w = engine_stream.alloc_zeros::<f16>(64 * 32).unwrap_or_else(|e| panic!("alloc: {e}"));
    let mut y = stream.zeros::<f16>(&[16, 32]).unwrap_or_else(|e| panic!("alloc: {e}"));
    let mut workspace = program.workspace(&stream).unwrap_or_else(|e| panic!("workspace: {e}"));
    let x_layout = mirage::Layout::row_major(&[16, 64]).unwrap_or_else(|e| panic!("{e}"));
    for shift in [1, 8] {
        // The 16·64 elements of x from element `shift` (the buffer holds x's values from 8).
        let mut data = vec![f16::ZERO; 8 + 16 * 64];
        data[shift..shift + 16 * 64].copy_from_slice(&xdata[8..]);
        engine_stream.memcpy_htod(&data, &mut xbuf).unwrap_or_else(|e| panic!("upload: {e}"));
        engine_stream.memcpy_htod(&to_f16(&host[1].data), &mut w).unwrap_or_else(|e| panic!("upload: {e}"));
        let xview = xbuf.slice(shift..shift + 16 * 64);
        let xv = TensorView::from_cudarc_view(&xview, x_layout).unwrap_or_else(|e| panic!("{e}"));
        let wv = TensorView::from_cudarc(&w, &[64, 32]).unwrap_or_else(|e| panic!("{e}"));
        let launched =
            program.launch_views(&stream, &[xv.erase(), wv.erase()], &mut [AnyViewMut::from(&mut y)], &mut workspace);
        if shift == 1 {
            let e = launched.expect_err("x 2 bytes past alignment").to_string();
            assert!(e.contains("parameter `x`: expected a device pointer aligned to 16 bytes"), "{e}");
            assert!(e.contains(", aligned to 2 bytes: copy the tensor into a fresh allocation"), "{e}");
            let e = kernels::op_matmul_into(&stream, &mut workspace, xv, wv, &mut y).expect_err("typed launcher");
            assert!(e.to_string().contains("parameter `x`: expected a device pointer aligned to 16 bytes"), "{e}");
            // No kernel ran: the context is healthy.
            stream.synchronize().unwrap_or_else(|e| panic!("after the refused launch: {e}"));
            continue;
        }
        launched.unwrap_or_else(|e| panic!("x 16 bytes into its buffer: {e}"));
        let got: Vec<f32> = stream.download(&y).unwrap_or_else(|e| panic!("{e}")).iter().map(|v| v.to_f32()).collect();
        let want = mirage::reference::run(&source.graph, &host).unwrap_or_else(|e| panic!("{e}"));
        compare(&got, &want[0].data, &want[0].shape, ErrorModel::new(DType::F16, 64))
            .unwrap_or_else(|e| panic!("{e}"))
            .check("op_matmul after a refused misaligned launch")
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn sized_launcher_matches(name: &str, launcher: GatedMlp, program: &'static mirage::Program) {
    use mirage::dims::DimPlan;
    use mirage::eval::evaluate_at;
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed = seed("a_sized_launcher_matches_the_reference_at_twelve_sizes").unwrap_or_else(|e| panic!("{e}"));
    let source = lowered(name);
    let dplan = DimPlan::analyze(&source.graph, &source.dims).unwrap_or_else(|e| panic!("{e}"));
    let plan = program.plan().unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    for b in [1, 2, 3, 5, 8, 9, 16, 17, 32, 33, 63, 64] {
        let specs = plan.inputs_at(&[b]);
        let host = random_inputs(&specs, seed + b as u64, |_| -1.0..1.0);
        let up = |i: usize| {
            let v: Vec<f16> = host[i].data.iter().map(|&x| f16::from_f32(x)).collect();
            gpu.upload(&v, &specs[i].shape).unwrap_or_else(|e| panic!("B = {b}: {e}"))
        };
        let (x, w1, w2) = (up(0), up(1), up(2));
        let y = launcher(&gpu, &x, &w1, &w2).unwrap_or_else(|e| panic!("B = {b}: {e}"));
        assert_eq!(y.shape(), &[b, 512], "B = {b}: the output follows B");
        let got: Vec<f32> = gpu.download(&y).unwrap_or_else(|e| panic!("{e}")).iter().map(|v| v.to_f32()).collect();
        let run = dplan.run_shapes(&source.graph, &[b]).unwrap_or_else(|e| panic!("B = {b}: {e}"));
        let want = evaluate_at(&source.graph, &mirage::reference::F32, &host, &run).unwrap_or_else(|e| panic!("{e}"));
        let model = ErrorModel::new(DType::F16, 256);
        let c = compare(&got, &want[0].data, &want[0].shape, model).unwrap_or_else(|e| panic!("B = {b}: {e}"));
        let bucket = program.bucket_of(&[b]).unwrap_or_else(|e| panic!("{e}"));
        println!("{name} B = {b:2} (bucket {bucket:?}): {c}");
        if let Err(e) = c.check(&format!("{name} B = {b}")) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    // Out of range: an error naming B and the parameter, before any launch.
    let x = gpu.upload(&vec![f16::from_f32(0.0); 65 * 256], &[65, 256]).expect("upload");
    let w = gpu.upload(&vec![f16::from_f32(0.0); 256 * 512], &[256, 512]).expect("upload");
    let e = launcher(&gpu, &x, &w, &w).expect_err("B = 65").to_string();
    assert!(e.contains("parameter `x`") && e.contains("B in 1..=64") && e.contains("B = 65"), "{e}");
}
