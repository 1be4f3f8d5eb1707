//! mirage programs on candle tensors. The first tests need no GPU (errors found before any CUDA
//! call); the `#[ignore]`d ones run on a CUDA GPU (`cargo test --release -- --ignored`, from
//! `scripts/candle-pack.sh`'s bundle on the H200).

use candle_core::{DType, Device, IndexOp, Tensor};
use mirage_candle::MirageOp;
use mirage_candle_kernels::{gated_mlp, gated_mlp_rows};

fn cpu_zeros(rows: usize, cols: usize) -> Tensor {
    Tensor::zeros((rows, cols), DType::BF16, &Device::Cpu).expect("a CPU tensor")
}

#[test]
fn cpu_tensors_are_an_error_naming_the_parameter() {
    let (x, w) = (cpu_zeros(16, 2048), cpu_zeros(2048, 8) /* shapes are checked later */);
    let err = mirage_candle::run(&gated_mlp::PROGRAM, &[&x, &w, &w]).expect_err("CPU tensors must be refused");
    let msg = err.to_string();
    assert!(msg.contains("gated_mlp") && msg.contains("parameter `x`"), "{msg}");
    assert!(msg.contains("CUDA devices only") && msg.contains("Cpu"), "{msg}");
}

#[test]
fn the_custom_op_on_cpu_tensors_is_an_error() {
    let (x, w) = (cpu_zeros(16, 2048), cpu_zeros(2048, 8192));
    let err = x.apply_op3(&w, &w, MirageOp::new(&gated_mlp::PROGRAM)).expect_err("CPU tensors must be refused");
    let msg = err.to_string();
    assert!(msg.contains("gated_mlp") && msg.contains("CUDA devices only"), "{msg}");
}

#[test]
fn no_inputs_is_an_error() {
    let err = mirage_candle::run(&gated_mlp::PROGRAM, &[]).expect_err("no inputs must be refused");
    assert!(err.to_string().contains("no inputs"), "{err}");
}

/// The GPU's inputs: x [16, 2048] taken from row 16 on of a larger tensor (a non-zero start
/// offset), and the two weights.
fn gpu_inputs(dev: &Device) -> (Tensor, Tensor, Tensor) {
    let big = Tensor::randn(0f32, 1.0, (48, 2048), dev).and_then(|t| t.to_dtype(DType::BF16)).expect("x");
    let x = big.i(16..32).expect("rows 16..32");
    let w = || Tensor::randn(0f32, 0.02, (2048, 8192), dev).and_then(|t| t.to_dtype(DType::BF16)).expect("w");
    (x, w(), w())
}

/// The gated MLP by candle's ops, in f32 from the same bf16 inputs (the reference).
fn reference(x: &Tensor, wg: &Tensor, wu: &Tensor) -> Vec<f32> {
    let f = |t: &Tensor| t.to_dtype(DType::F32).expect("f32");
    let (x, wg, wu) = (f(x), f(wg), f(wu));
    let h = (x.matmul(&wg).and_then(|g| g.silu()).expect("gate") * x.matmul(&wu).expect("up")).expect("product");
    h.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("to host")
}

fn worst_relative(got: &Tensor, want: &[f32]) -> f32 {
    let got = got.to_dtype(DType::F32).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("to host");
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f32::max)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn run_and_the_custom_op_match_candle_on_the_gpu() {
    let dev = Device::new_cuda(0).expect("a CUDA device");
    let (x, wg, wu) = gpu_inputs(&dev);
    let want = reference(&x, &wg, &wu);
    let outs = mirage_candle::run(&gated_mlp::PROGRAM, &[&x, &wg, &wu]).expect("run");
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].dims(), &[16, 8192]);
    assert_eq!(outs[0].dtype(), DType::BF16);
    let by_run = worst_relative(&outs[0], &want);
    let op = x.apply_op3(&wg, &wu, MirageOp::new(&gated_mlp::PROGRAM)).expect("custom op");
    let by_op = worst_relative(&op, &want);
    println!("largest relative error: run {by_run:.2e}, custom op {by_op:.2e}");
    // bf16 output of an f32-accumulated product of 2048 terms: within a few bf16 ulps.
    assert!(by_run < 2e-2 && by_op < 2e-2, "run {by_run}, custom op {by_op}");
    // The custom op's output takes part in candle's ops like any tensor.
    let y = op.matmul(&Tensor::ones((8192, 4), DType::BF16, &dev).expect("ones")).expect("matmul");
    assert_eq!(y.dims(), &[16, 4]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn wrong_layouts_and_types_are_errors_on_the_gpu() {
    let dev = Device::new_cuda(0).expect("a CUDA device");
    let (x, wg, wu) = gpu_inputs(&dev);
    // A transposed view of the right shape: strides the program was not built for.
    let wt = Tensor::zeros((8192, 2048), DType::BF16, &dev).and_then(|t| t.t()).expect("transposed");
    let err = mirage_candle::run(&gated_mlp::PROGRAM, &[&x, &wt, &wu]).expect_err("strides");
    assert!(err.to_string().contains("wg"), "{err}");
    // f32 where the program takes bf16.
    let x32 = x.to_dtype(DType::F32).expect("f32");
    let err = mirage_candle::run(&gated_mlp::PROGRAM, &[&x32, &wg, &wu]).expect_err("dtype");
    assert!(err.to_string().contains('x'), "{err}");
    // f64: an element type mirage does not take at all.
    let x64 = x.to_dtype(DType::F64).expect("f64");
    let err = mirage_candle::run(&gated_mlp::PROGRAM, &[&x64, &wg, &wu]).expect_err("f64");
    assert!(err.to_string().contains("element type"), "{err}");
    // A wrong row count.
    let x8 = x.i(0..8).expect("8 rows");
    assert!(mirage_candle::run(&gated_mlp::PROGRAM, &[&x8, &wg, &wu]).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_runtime_sized_batch_runs_at_every_size_on_the_gpu() {
    let dev = Device::new_cuda(0).expect("a CUDA device");
    let (_, wg, wu) = gpu_inputs(&dev);
    let op = MirageOp::new(&gated_mlp_rows::PROGRAM);
    for rows in [1, 3, 8, 16, 17, 33, 64] {
        let x = Tensor::randn(0f32, 1.0, (rows, 2048), &dev).and_then(|t| t.to_dtype(DType::BF16)).expect("x");
        let h = x.apply_op3(&wg, &wu, op).expect("custom op");
        assert_eq!(h.dims(), &[rows, 8192]);
        let worst = worst_relative(&h, &reference(&x, &wg, &wu));
        println!("B = {rows}: largest relative error {worst:.2e}");
        assert!(worst < 2e-2, "B = {rows}: {worst}");
    }
    // Outside the declared range: an error naming the dim, no launch.
    let x = Tensor::zeros((65, 2048), DType::BF16, &dev).expect("x");
    let err = x.apply_op3(&wg, &wu, op).expect_err("65 rows is outside 1..=64");
    assert!(err.to_string().contains('B'), "{err}");
}
