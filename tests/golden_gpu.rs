//! GPU golden test: the kernels generated for every golden µGraph (the program itself and every
//! candidate Mirage found, built by the root build.rs into one cubin per file) run on the GPU and
//! match the CPU reference interpreter on fresh random inputs; so do the coverage programs
//! (`mirage::programs::coverage_cases`: every operator, accumulator, imap/omap/forloop combination,
//! strided inputs, odd tile shapes) in f16, bf16 and f32.
//!
//! `#[ignore = "needs a CUDA GPU"]`: run on the GPU machine with `--ignored` (../shared/gpu/).

use half::{bf16, f16};
use mirage::codegen::plan::{ArgRef, LaunchPlan};
use mirage::ir::{DType, KernelGraph, TensorDesc};
use mirage::programs::{coverage_cases, golden_cases};
use mirage::reference::{run, HostTensor};
use mirage_runtime::{DeviceTensor, Element, Gpu, Kernel, LaunchConfig, Module};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

include!(concat!(env!("OUT_DIR"), "/golden/index.rs"));

/// Conversions between the 16-bit element types and f32 on the host.
trait Half: Element + Copy {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
}
impl Half for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}
impl Half for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}
impl Half for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

/// Row-major logical values → host storage of the tensor's device layout.
fn to_storage<T: Half>(desc: &TensorDesc, values: &[f32]) -> Vec<T> {
    let len = mirage::ir::storage_len(&desc.shape, &desc.strides);
    let mut out = vec![T::from_f32(0.0); len];
    let rm = mirage::ir::row_major_strides(&desc.shape);
    for (flat, &v) in values.iter().enumerate() {
        let off: usize = (0..desc.shape.len()).map(|d| (flat / rm[d]) % desc.shape[d] * desc.strides[d]).sum();
        out[off] = T::from_f32(v);
    }
    out
}

/// Runs a launch plan whose tensors all have element type `T`; outputs are poisoned with NaN
/// first so that an element no kernel writes is caught.
fn run_plan<T: Half>(gpu: &Gpu, module: &'static Module, plan: &LaunchPlan, inputs: &[DeviceTensor<T>]) -> Vec<Vec<f32>> {
    let nan = |d: &TensorDesc| -> DeviceTensor<T> {
        let n: usize = d.shape.iter().product();
        gpu.upload(&vec![T::from_f32(f32::NAN); n], &d.shape).unwrap_or_else(|e| panic!("allocating: {e}"))
    };
    let outputs: Vec<DeviceTensor<T>> = plan.outputs.iter().map(nan).collect();
    let buffers: Vec<DeviceTensor<T>> = plan.buffers.iter().map(|b| nan(&b.desc)).collect();
    for k in &plan.kernels {
        let name: &'static str = Box::leak(k.name.clone().into_boxed_str());
        let kernel: &'static Kernel<'static> = Box::leak(Box::new(Kernel::new(module, name)));
        let mut args = kernel.args(gpu.stream()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for a in &k.args {
            // One stream: kernels run in order, so passing outputs by shared reference is sound.
            match a {
                ArgRef::Input(i) => args.tensor(&inputs[*i]),
                ArgRef::Output(i) => args.tensor(&outputs[*i]),
                ArgRef::Buffer(i) => args.tensor(&buffers[*i]),
            };
        }
        let cfg = LaunchConfig {
            grid: (k.grid[0] as u32, k.grid[1] as u32, k.grid[2] as u32),
            block: (k.threads as u32, 1, 1),
            dynamic_smem_bytes: k.smem_bytes as u32,
        };
        // SAFETY: the arguments are the kernel's parameters in order (device pointers of the
        // element type the generated code declares), sized by the plan the code was generated with.
        unsafe { args.launch(cfg) }.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    gpu.synchronize().unwrap_or_else(|e| panic!("{}: {e}", plan.name));
    outputs.iter().map(|o| gpu.download(o).unwrap_or_else(|e| panic!("download: {e}")).into_iter().map(T::to_f32).collect()).collect()
}

/// ‖got − want‖ / ‖want‖, infinite when anything is NaN.
fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        if !g.is_finite() {
            return f64::INFINITY;
        }
        num += ((g - w) as f64).powi(2);
        den += (w as f64).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Runs every plan of a unit against the reference of its graph (`graphs[i]` for `plans[i]`).
fn check_unit<T: Half>(gpu: &Gpu, unit: &str, cubin: &'static [u8], plans_json: &str, graphs: &[KernelGraph], tol: f64, seed: u64) -> (usize, f64) {
    let plans: Vec<LaunchPlan> = serde_json::from_str(plans_json).unwrap_or_else(|e| panic!("{unit}: plans: {e}"));
    assert_eq!(plans.len(), graphs.len(), "{unit}: one plan per graph");
    let module: &'static Module = Box::leak(Box::new(Module::from_cubin(Box::leak(unit.to_string().into_boxed_str()), cubin)));
    let mut worst = 0.0f64;
    let mut cache: Option<(Vec<TensorDesc>, Vec<DeviceTensor<T>>, Vec<HostTensor>)> = None;
    for (plan, graph) in plans.iter().zip(graphs) {
        // Graphs with the same inputs (a program and its candidates) share inputs and reference.
        let key: Vec<TensorDesc> = graph.inputs().into_iter().cloned().collect();
        let fresh = cache.as_ref().is_none_or(|c| c.0 != key);
        if fresh {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut host_inputs = Vec::new();
            let mut dev_inputs = Vec::new();
            for d in graph.inputs() {
                let n: usize = d.shape.iter().product();
                // Values rounded to the element type, so the reference sees exactly what the GPU sees.
                let values: Vec<f32> = (0..n).map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)).to_f32()).collect();
                dev_inputs.push(gpu.upload_strided(&to_storage::<T>(d, &values), &d.shape, &d.strides).unwrap_or_else(|e| panic!("upload: {e}")));
                host_inputs.push(HostTensor::new(d.shape.clone(), values).expect("shape and data agree"));
            }
            cache = Some((key, dev_inputs, host_inputs));
        }
        let (_, dev_inputs, host_inputs) = cache.as_ref().expect("inputs prepared");
        let expected = run(graph, host_inputs).expect("reference runs");
        let got = run_plan::<T>(gpu, module, plan, dev_inputs);
        assert_eq!(got.len(), expected.len(), "{}: output count", plan.name);
        for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
            let e = rel_l2(g, &w.data);
            assert!(e <= tol, "{} output {k}: relative L2 error {e:.3e} exceeds {tol:.1e}", plan.name);
            worst = worst.max(e);
        }
    }
    (plans.len(), worst)
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 1e-2,
        DType::Bf16 => 3e-2,
    }
}

fn check<T: Half>(gpu: &Gpu, unit: &str, cubin: &'static [u8], plans: &str, graphs: &[KernelGraph], dtype: DType, seed: u64) -> usize {
    let (n, worst) = check_unit::<T>(gpu, unit, cubin, plans, graphs, tolerance(dtype), seed);
    println!("{unit}: {n} µGraphs match the reference ({}), worst relative L2 error {worst:.2e}", dtype.name());
    n
}

fn dispatch(gpu: &Gpu, unit: &str, cubin: &'static [u8], plans: &str, graphs: &[KernelGraph], dtype: DType, seed: u64) -> usize {
    match dtype {
        DType::F16 => check::<f16>(gpu, unit, cubin, plans, graphs, dtype, seed),
        DType::Bf16 => check::<bf16>(gpu, unit, cubin, plans, graphs, dtype, seed),
        DType::F32 => check::<f32>(gpu, unit, cubin, plans, graphs, dtype, seed),
    }
}

fn open() -> (Gpu, u64) {
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("needs a CUDA GPU: {e}"));
    let seed: u64 = rand::random();
    println!("seed {seed}, {}", gpu.info());
    (gpu, seed)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn golden_kernels_match_the_reference_on_the_gpu() {
    let (gpu, seed) = open();
    let mut total = 0;
    for case in golden_cases() {
        let (_, cubin, plans) = GOLDEN_UNITS.iter().find(|u| u.0 == case.name).unwrap_or_else(|| panic!("no unit for {}", case.name));
        let graphs: Vec<KernelGraph> = case.named_graphs().unwrap_or_else(|e| panic!("{e}")).into_iter().map(|(_, g)| g).collect();
        total += dispatch(&gpu, case.name, cubin, plans, &graphs, case.dtype, seed);
    }
    println!("golden: {total} µGraphs (9 programs + 181 Mirage candidates) passed on the GPU");
    assert_eq!(total, 181 + 9);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn coverage_kernels_match_the_reference_on_the_gpu() {
    let (gpu, seed) = open();
    let mut total = 0;
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let unit = format!("coverage_{}", dtype.name());
        let (_, cubin, plans) = GOLDEN_UNITS.iter().find(|u| u.0 == unit).unwrap_or_else(|| panic!("no unit {unit}"));
        let graphs: Vec<KernelGraph> = coverage_cases(dtype).unwrap_or_else(|e| panic!("{e}")).into_iter().map(|(_, g)| g).collect();
        total += dispatch(&gpu, &unit, cubin, plans, &graphs, dtype, seed);
    }
    println!("coverage: {total} generated programs passed on the GPU");
}
