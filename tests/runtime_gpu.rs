//! GPU tests of `mirage-runtime`: round trips of every element type, launches of a cubin built
//! by the root build.rs from `tests/cuda/runtime_test.cu` (with and without more than 48 KB of
//! dynamic shared memory, on the default stream and on a second stream), and the timing helper
//! checked against a separate measurement of copy bandwidth.
//!
//! All are `#[ignore = "needs a CUDA GPU"]`: run them on the GPU machine with `--ignored`.
//! They fail loudly when a GPU is present and something is wrong (or when none is present but
//! they are run anyway). Inputs are fresh random data; each test prints its seed, and
//! `MIRAGE_TEST_SEED` replays it. Computed results are compared with `mirage::testing::compare`;
//! data that is only moved must come back bit for bit.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use half::{bf16, f16};
use mirage::testing::compare::{ErrorModel, compare};
use mirage::testing::inputs::seed;
use mirage_runtime::{
    DeviceTensor, Element, Gpu, Kernel, LaunchConfig, Layout, Module, RuntimeError, Stream, time_median,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

static CUBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cuda/runtime_test.cubin"));
static MODULE: Module = Module::from_cubin("runtime_test", CUBIN);
static AXPY_F32: Kernel = Kernel::new(&MODULE, "axpy_f32");
static AXPY_F16: Kernel = Kernel::new(&MODULE, "axpy_f16");
static AXPY_BF16: Kernel = Kernel::new(&MODULE, "axpy_bf16");
static REVERSE_SMEM: Kernel = Kernel::new(&MODULE, "reverse_chunks_smem");
static GATHER_STRIDED: Kernel = Kernel::new(&MODULE, "gather_strided_f32");
static COPY_F32X4: Kernel = Kernel::new(&MODULE, "copy_f32x4");
static MISSING: Kernel = Kernel::new(&MODULE, "no_such_kernel");

/// GPU tests run one at a time, so timings are not disturbed by each other.
static GPU_LOCK: Mutex<()> = Mutex::new(());

fn open_gpu() -> (MutexGuard<'static, ()>, Gpu) {
    let guard = GPU_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let gpu = Gpu::new(0).unwrap_or_else(|e| panic!("GPU tests need a CUDA GPU of compute capability 8.0+: {e}"));
    (guard, gpu)
}

/// The test's generator: seeded by `MIRAGE_TEST_SEED` when set, else fresh (printed either way).
fn rng(test: &str) -> StdRng {
    StdRng::seed_from_u64(seed(test).unwrap_or_else(|e| panic!("{e}")))
}

trait OrFail<T> {
    fn or_fail(self, what: &str) -> T;
}

impl<T> OrFail<T> for Result<T, RuntimeError> {
    fn or_fail(self, what: &str) -> T {
        self.unwrap_or_else(|e| panic!("{what}: {e}"))
    }
}

/// Test-side conversions between the element types and f32.
trait TestElement: Element + PartialEq {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
}

impl TestElement for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl TestElement for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl TestElement for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

fn random_vec<T: TestElement>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::from_f32(rng.random_range(-4.0f32..4.0))).collect()
}

fn round_trip<T: TestElement>(gpu: &Gpu, rng: &mut StdRng) {
    let name = T::DTYPE.name();
    for shape in [&[7][..], &[3, 5], &[2, 3, 4], &[2, 3, 4, 5], &[1024, 1000]] {
        let n: usize = shape.iter().product();
        let host = random_vec::<T>(rng, n);
        let dev = gpu.upload(&host, shape).or_fail(&format!("uploading {name} {shape:?}"));
        assert_eq!(dev.shape(), shape);
        assert_eq!(dev.dtype(), T::DTYPE);
        assert_eq!(dev.num_bytes(), n * T::DTYPE.size_bytes());
        let back = gpu.download(&dev).or_fail(&format!("downloading {name} {shape:?}"));
        assert!(back == host, "{name} {shape:?}: downloaded data differs from uploaded data");
        assert!(dev.to_host().or_fail("to_host") == host, "{name}: to_host differs");
        // A length that does not match is refused.
        let err = gpu.upload(&host[..n - 1], shape).expect_err("short host data must be refused");
        assert!(matches!(err, RuntimeError::Length { .. }), "{err}");
    }
    // Column-major storage round-trips as storage.
    let (rows, cols) = (33, 17);
    let host = random_vec::<T>(rng, rows * cols);
    let dev = gpu.upload_strided(&host, &[rows, cols], &[1, rows]).or_fail("strided upload");
    assert_eq!(dev.strides(), &[1, rows]);
    assert!(gpu.download(&dev).or_fail("strided download") == host, "{name}: strided storage differs");
    // Zeros are zeros, a second stream round-trips too.
    let zeros = gpu.zeros::<T>(&[3, 300]).or_fail("zeros");
    assert!(gpu.download(&zeros).or_fail("download zeros").iter().all(|v| v.to_f32() == 0.0));
    let stream = gpu.new_stream().or_fail("new stream");
    let host = random_vec::<T>(rng, 4096);
    let dev = stream.upload(&host, &[64, 64]).or_fail("upload on a second stream");
    assert!(stream.download(&dev).or_fail("download on a second stream") == host);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_info_is_plausible() {
    let (_lock, gpu) = open_gpu();
    let info = gpu.info();
    println!("{info}");
    assert!(info.compute_capability >= Gpu::MIN_COMPUTE_CAPABILITY);
    assert!(info.sm_count > 0);
    assert!(info.max_shared_memory_per_block_optin >= 48 * 1024, "{info}");
    assert!(info.l2_cache_bytes > 0);
    assert!(info.free_memory_bytes <= info.total_memory_bytes);
    let count = mirage_runtime::device_count().or_fail("device count");
    match Gpu::new(count) {
        Err(RuntimeError::NoDevice { ordinal, count: c }) => {
            assert_eq!((ordinal, c), (count, count))
        }
        other => panic!("expected NoDevice for ordinal {count}, found {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn round_trip_every_element_type() {
    let (_lock, gpu) = open_gpu();
    let mut rng = rng("round_trip_every_element_type");
    round_trip::<f32>(&gpu, &mut rng);
    round_trip::<f16>(&gpu, &mut rng);
    round_trip::<bf16>(&gpu, &mut rng);
}

/// Launches `kernel` (an axpy of element type T) on `stream` and compares with the host.
/// `inputs_on` is the stream the inputs are uploaded on (possibly a different one).
fn check_axpy<T: TestElement>(kernel: &Kernel<'static>, inputs_on: &Stream, stream: &Stream, rng: &mut StdRng) {
    let n = (1usize << 20) + 123;
    let a: f32 = rng.random_range(-2.0..2.0);
    let x_host = random_vec::<T>(rng, n);
    let y_host = random_vec::<T>(rng, n);
    let x = inputs_on.upload(&x_host, &[n]).or_fail("upload x");
    let y = inputs_on.upload(&y_host, &[n]).or_fail("upload y");
    // The output starts as NaN, so an element the kernel misses is caught.
    let mut out = stream.upload(&vec![T::from_f32(f32::NAN); n], &[n]).or_fail("upload out");
    let n_u32 = u32::try_from(n).or_fail_msg("n fits in u32");
    let cfg = LaunchConfig::new((n_u32.div_ceil(256), 1, 1), (256, 1, 1), 0);
    {
        let mut args = kernel.args(stream).or_fail("loading the axpy kernel");
        args.scalar(&a).tensor(&x).tensor(&y).tensor_mut(&mut out).scalar(&n_u32);
        // SAFETY: axpy_<T>(float a, const T* x, const T* y, T* out, unsigned n) touches elements
        // [0, n) of each tensor, all of which have n elements.
        unsafe { args.launch(cfg) }.or_fail("launching axpy");
    }
    stream.synchronize().or_fail("synchronizing after axpy");
    let got: Vec<f32> = stream.download(&out).or_fail("download out").into_iter().map(TestElement::to_f32).collect();
    let want: Vec<f32> = x_host.iter().zip(&y_host).map(|(x, y)| a.mul_add(x.to_f32(), y.to_f32())).collect();
    let c = compare(&got, &want, &[n], ErrorModel::new(T::DTYPE, 1)).or_fail_msg("comparing");
    println!("axpy {} on n={n} (a={a}): {c}", T::DTYPE);
    assert!(c.passed(), "{} axpy: {c}", T::DTYPE);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cubin_kernels_on_default_and_second_stream() {
    let (_lock, gpu) = open_gpu();
    let mut rng = rng("cubin_kernels_on_default_and_second_stream");
    let second = gpu.new_stream().or_fail("creating a second stream");
    for (label, stream) in [("default stream", gpu.stream().clone()), ("second stream", second.clone())] {
        println!("-- {label}");
        check_axpy::<f32>(&AXPY_F32, &stream, &stream, &mut rng);
        check_axpy::<f16>(&AXPY_F16, &stream, &stream, &mut rng);
        check_axpy::<bf16>(&AXPY_BF16, &stream, &stream, &mut rng);
    }
    // Inputs uploaded on the default stream, consumed on the second one.
    check_axpy::<f32>(&AXPY_F32, gpu.stream(), &second, &mut rng);
    check_axpy::<f16>(&AXPY_F16, &second, gpu.stream(), &mut rng);
    let info = AXPY_F32.load(gpu.stream()).or_fail("kernel info");
    println!("axpy_f32: {info:?}");
    assert!(info.num_regs > 0 && info.max_threads_per_block >= 256);
}

fn check_reverse_smem(stream: &Stream, chunk: u32, rng: &mut StdRng) {
    let blocks = 96u32;
    let n = (blocks * chunk) as usize;
    let x_host = random_vec::<f32>(rng, n);
    let x = stream.upload(&x_host, &[blocks as usize, chunk as usize]).or_fail("upload x");
    let mut out = stream.upload(&random_vec::<f32>(rng, n), &[blocks as usize, chunk as usize]).or_fail("upload out");
    let scale: f32 = rng.random_range(0.5..2.0);
    let smem = chunk * 4;
    let cfg = LaunchConfig::new((blocks, 1, 1), (256, 1, 1), smem);
    {
        let mut args = REVERSE_SMEM.args(stream).or_fail("loading reverse_chunks_smem");
        args.tensor(&x).tensor_mut(&mut out).scalar(&chunk).scalar(&scale);
        // SAFETY: reverse_chunks_smem(const float* x, float* out, unsigned chunk, float scale)
        // touches [0, gridDim.x * chunk) of both tensors and `chunk` floats of shared memory,
        // which is what is configured.
        unsafe { args.launch(cfg) }.or_fail(&format!("launching with {smem} bytes of dynamic shared memory"));
    }
    let got = stream.download(&out).or_fail("download");
    for b in 0..blocks as usize {
        let c = chunk as usize;
        for i in 0..c {
            let expected = scale * x_host[b * c + c - 1 - i];
            assert_eq!(got[b * c + i], expected, "block {b} element {i} with {smem} bytes of shared memory");
        }
    }
    println!("reverse_chunks_smem with {} KiB of dynamic shared memory: ok", smem / 1024);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dynamic_shared_memory_above_48k() {
    let (_lock, gpu) = open_gpu();
    let mut rng = rng("dynamic_shared_memory_above_48k");
    let optin = gpu.info().max_shared_memory_per_block_optin;
    let second = gpu.new_stream().or_fail("second stream");
    for stream in [gpu.stream().clone(), second] {
        check_reverse_smem(&stream, 4 * 1024, &mut rng); // 16 KiB: no opt-in
        check_reverse_smem(&stream, 25 * 1024, &mut rng); // 100 KiB: opt-in
        if optin >= 200 * 1024 {
            check_reverse_smem(&stream, 50 * 1024, &mut rng); // 200 KiB
        }
        check_reverse_smem(&stream, 25 * 1024, &mut rng); // back to 100 KiB
    }
    // More than the device allows is refused before the launch, naming the kernel.
    let x = gpu.upload(&random_vec::<f32>(&mut rng, 1024), &[1024]).or_fail("upload");
    let mut out = gpu.zeros::<f32>(&[1024]).or_fail("zeros");
    let chunk = 1024u32;
    let scale = 1.0f32;
    let mut args = REVERSE_SMEM.args(gpu.stream()).or_fail("args");
    args.tensor(&x).tensor_mut(&mut out).scalar(&chunk).scalar(&scale);
    // SAFETY: the launch is refused before reaching the driver (shared memory above the limit).
    let err = unsafe { args.launch(LaunchConfig::new((1, 1, 1), (256, 1, 1), optin + 1)) }
        .expect_err("more shared memory than the opt-in limit must be refused");
    assert!(matches!(err, RuntimeError::SharedMemory { .. }), "{err}");
    assert!(err.to_string().contains("reverse_chunks_smem"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn strided_tensor_read_by_a_kernel() {
    let (_lock, gpu) = open_gpu();
    let mut rng = rng("strided_tensor_read_by_a_kernel");
    let (rows, cols) = (300usize, 517usize);
    // Column-major [rows, cols] plus padding: strides [1, rows + 3].
    let strides = [1usize, rows + 3];
    let layout = Layout::strided(&[rows, cols], &strides).or_fail("layout");
    let storage = random_vec::<f32>(&mut rng, layout.storage_len());
    let x = gpu.upload_strided(&storage, &[rows, cols], &strides).or_fail("strided upload");
    let mut out = gpu.upload(&random_vec::<f32>(&mut rng, rows * cols), &[rows, cols]).or_fail("out");
    let (s0, s1) = (strides[0] as u64, strides[1] as u64);
    let (r, c) = (rows as u32, cols as u32);
    {
        let mut args = GATHER_STRIDED.args(gpu.stream()).or_fail("args");
        args.tensor(&x).scalar(&s0).scalar(&s1).tensor_mut(&mut out).scalar(&r).scalar(&c);
        // SAFETY: gather_strided_f32(const float*, u64 s0, u64 s1, float* out, unsigned rows,
        // unsigned cols) reads offsets of `layout` (within the storage) and writes rows*cols.
        unsafe { args.launch(LaunchConfig::new((c.div_ceil(128), r, 1), (128, 1, 1), 0)) }.or_fail("launch");
    }
    let got = gpu.download(&out).or_fail("download");
    for i in 0..rows {
        for j in 0..cols {
            let off = layout.offset(&[i, j]).unwrap_or_else(|| panic!("offset of [{i}, {j}]"));
            assert_eq!(got[i * cols + j], storage[off], "element [{i}, {j}]");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_errors_name_the_kernel() {
    let (_lock, gpu) = open_gpu();
    let err = MISSING.args(gpu.stream()).expect_err("no such kernel in the cubin");
    assert!(err.to_string().contains("no_such_kernel"), "{err}");
    let x = gpu.zeros::<f32>(&[16]).or_fail("zeros");
    let mut args = AXPY_F32.args(gpu.stream()).or_fail("args");
    args.tensor(&x);
    // SAFETY: the configuration is invalid, so nothing reaches the driver.
    let err = unsafe { args.launch(LaunchConfig::new((1, 1, 1), (2048, 1, 1), 0)) }.expect_err("2048 threads");
    let msg = err.to_string();
    assert!(msg.contains("axpy_f32") && msg.contains("block (2048, 1, 1)"), "{msg}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn timing_matches_measured_copy_bandwidth() {
    let (_lock, gpu) = open_gpu();
    let stream = gpu.stream().clone();
    const BYTES: usize = 1 << 30;
    let n = BYTES / 4;
    let src: DeviceTensor<f32> = gpu.zeros(&[n]).or_fail("allocating 1 GiB");
    let mut dst: DeviceTensor<f32> = gpu.zeros(&[n]).or_fail("allocating 1 GiB");
    let traffic = 2.0 * BYTES as f64; // read + write

    let stats = time_median(&stream, 3, 20, true, || stream.copy(&src, &mut dst)).or_fail("timing the copy");
    let bw_timed = traffic / (stats.median_us * 1e-6);

    // A separate measurement: 10 back-to-back copies, by wall clock and by one event pair.
    let reps = 10;
    stream.synchronize().or_fail("sync");
    let wall = Instant::now();
    let start = stream.record_timing_event().or_fail("event");
    for _ in 0..reps {
        stream.copy(&src, &mut dst).or_fail("copy");
    }
    let end = stream.record_timing_event().or_fail("event");
    stream.synchronize().or_fail("sync");
    let wall_us = wall.elapsed().as_secs_f64() * 1e6 / reps as f64;
    let event_us = start.elapsed_us(&end).or_fail("elapsed") / reps as f64;
    let bw_wall = traffic / (wall_us * 1e-6);
    let bw_events = traffic / (event_us * 1e-6);

    // The copy kernel, timed by the helper too.
    let n4 = (n / 4) as u64;
    let sms = gpu.info().sm_count;
    let mut args = COPY_F32X4.args(&stream).or_fail("copy kernel");
    args.tensor(&src).tensor_mut(&mut dst).scalar(&n4);
    let cfg = LaunchConfig::new((sms * 8, 1, 1), (512, 1, 1), 0);
    // SAFETY: copy_f32x4(const float4*, float4*, size_t n) touches n float4 = 1 GiB of each.
    let kernel_stats =
        time_median(&stream, 3, 20, true, || unsafe { args.launch(cfg) }).or_fail("timing the copy kernel");
    let bw_kernel = traffic / (kernel_stats.median_us * 1e-6);

    let tb = |bw: f64| bw / 1e12;
    println!(
        "1 GiB device copy: time_median {:.1} us (min {:.1}, max {:.1}, {} samples) = {:.2} TB/s; \
         wall clock {:.1} us = {:.2} TB/s; event pair {:.1} us = {:.2} TB/s; copy kernel {:.1} us = {:.2} TB/s",
        stats.median_us,
        stats.min_us,
        stats.max_us,
        stats.samples,
        tb(bw_timed),
        wall_us,
        tb(bw_wall),
        event_us,
        tb(bw_events),
        kernel_stats.median_us,
        tb(bw_kernel)
    );
    assert_eq!(stats.samples, 20);
    assert!(stats.min_us <= stats.median_us && stats.median_us <= stats.max_us);
    let ratio = bw_timed / bw_wall;
    assert!((0.5..=2.0).contains(&ratio), "time_median bandwidth is {ratio:.2}x the wall-clock one");
    let ratio = bw_timed / bw_events;
    assert!((0.5..=2.0).contains(&ratio), "time_median bandwidth is {ratio:.2}x the event-pair one");
    let ratio = bw_kernel / bw_timed;
    assert!((0.5..=2.0).contains(&ratio), "copy kernel bandwidth is {ratio:.2}x the memcpy one");
    assert!((1e11..2e13).contains(&bw_timed), "implausible copy bandwidth {:.3} TB/s", tb(bw_timed));
}

trait OrFailMsg<T> {
    fn or_fail_msg(self, what: &str) -> T;
}

impl<T, E: std::fmt::Display> OrFailMsg<T> for Result<T, E> {
    fn or_fail_msg(self, what: &str) -> T {
        self.unwrap_or_else(|e| panic!("{what}: {e}"))
    }
}
