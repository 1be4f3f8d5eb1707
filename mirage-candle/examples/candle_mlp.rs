//! A candle MLP block (Llama-3.2-1B's, 16 rows, bf16) with its gate and up projections swapped
//! for mirage's gated MLP: compares the output and the time with candle's own ops.
//!
//! ```text
//! cargo run --release --example candle_mlp            # on a CUDA GPU
//! cargo run --release --example candle_mlp -- --iters 500
//! ```
//!
//! Both variants read the same candle tensors (weights `[in, out]`, as the `#[mugraph]` program
//! takes them); the down projection is candle's matmul in both. Times are medians over repeats of
//! back-to-back iterations on the device's stream, bracketed by synchronizations.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use mirage_candle::MirageOp;
use mirage_candle_kernels::{gated_mlp, gated_mlp_rows};

/// Llama-3.2-1B's MLP block, weights `[in, out]`.
struct Mlp {
    wg: Tensor,
    wu: Tensor,
    wd: Tensor,
}

impl Mlp {
    fn random(dev: &Device) -> candle_core::Result<Mlp> {
        let w = |rows, cols| Tensor::randn(0f32, 0.02, (rows, cols), dev)?.to_dtype(DType::BF16);
        Ok(Mlp { wg: w(2048, 8192)?, wu: w(2048, 8192)?, wd: w(8192, 2048)? })
    }

    /// candle's ops: `(silu(x @ Wg) * (x @ Wu)) @ Wd`.
    fn forward_candle(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = (candle_core::Tensor::silu(&x.matmul(&self.wg)?)? * x.matmul(&self.wu)?)?;
        h.matmul(&self.wd)
    }

    /// The gate and up projections by mirage (one custom op), the down projection by candle.
    fn forward_mirage(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = x.apply_op3(&self.wg, &self.wu, MirageOp::new(&gated_mlp::PROGRAM))?;
        h.matmul(&self.wd)
    }
}

fn median_us(
    dev: &Device,
    iters: usize,
    mut f: impl FnMut() -> candle_core::Result<Tensor>,
) -> candle_core::Result<f64> {
    for _ in 0..10 {
        f()?;
    }
    let mut samples = Vec::new();
    for _ in 0..15 {
        dev.synchronize()?;
        let start = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        dev.synchronize()?;
        samples.push(start.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// Largest `|a - b| / (1 + |b|)` over the elements, in f32.
fn worst_relative(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    let a = a.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let b = b.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f32::max))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut iters = 200usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => {
                iters = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--iters takes a positive count")?
            }
            other => return Err(format!("unknown argument `{other}` (takes --iters N)").into()),
        }
    }
    let plan = gated_mlp::PROGRAM.plan()?;
    println!("gated_mlp: {} kernel(s) chosen by mirage", plan.kernels.len());
    let dev = match Device::new_cuda(0) {
        Ok(dev) => dev,
        Err(e) => {
            // candle's errors carry a backtrace after their first line.
            let e = e.to_string();
            println!("no CUDA device here ({}): built, not run", e.lines().next().unwrap_or_default());
            return Ok(());
        }
    };
    let mlp = Mlp::random(&dev)?;
    let x = Tensor::randn(0f32, 1.0, (16, 2048), &dev)?.to_dtype(DType::BF16)?;

    // The gated part alone, then the whole block.
    let h_candle = (x.matmul(&mlp.wg)?.silu()? * x.matmul(&mlp.wu)?)?;
    let h_mirage = mirage_candle::run(&gated_mlp::PROGRAM, &[&x, &mlp.wg, &mlp.wu])?.remove(0);
    let y_candle = mlp.forward_candle(&x)?;
    let y_mirage = mlp.forward_mirage(&x)?;
    let (err_h, err_y) = (worst_relative(&h_mirage, &h_candle)?, worst_relative(&y_mirage, &y_candle)?);
    println!("largest relative difference to candle: gated part {err_h:.2e}, block output {err_y:.2e}");

    let t_h_candle = median_us(&dev, iters, || x.matmul(&mlp.wg)?.silu()? * x.matmul(&mlp.wu)?)?;
    let t_h_mirage = median_us(&dev, iters, || x.apply_op3(&mlp.wg, &mlp.wu, MirageOp::new(&gated_mlp::PROGRAM)))?;
    let t_y_candle = median_us(&dev, iters, || mlp.forward_candle(&x))?;
    let t_y_mirage = median_us(&dev, iters, || mlp.forward_mirage(&x))?;
    println!("median µs per call ({iters} back-to-back calls, 15 repeats):");
    println!("  gated part  candle {t_h_candle:8.1}  mirage {t_h_mirage:8.1}  ({:.2}x)", t_h_candle / t_h_mirage);
    println!("  MLP block   candle {t_y_candle:8.1}  mirage {t_y_mirage:8.1}  ({:.2}x)", t_y_candle / t_y_mirage);
    // The batch chosen at launch (one program over B = 1..=64, size buckets): decoding one row,
    // and a batch of 5.
    for rows in [1usize, 5] {
        let x = Tensor::randn(0f32, 1.0, (rows, 2048), &dev)?.to_dtype(DType::BF16)?;
        let op = MirageOp::new(&gated_mlp_rows::PROGRAM);
        let want = (x.matmul(&mlp.wg)?.silu()? * x.matmul(&mlp.wu)?)?;
        let err = worst_relative(&x.apply_op3(&mlp.wg, &mlp.wu, op)?, &want)?;
        let t_candle = median_us(&dev, iters, || x.matmul(&mlp.wg)?.silu()? * x.matmul(&mlp.wu)?)?;
        let t_mirage = median_us(&dev, iters, || x.apply_op3(&mlp.wg, &mlp.wu, op))?;
        println!(
            "  gated, B = {rows} (runtime-sized)  candle {t_candle:8.1}  mirage {t_mirage:8.1}  ({:.2}x; difference {err:.2e})",
            t_candle / t_mirage
        );
        if err > 3e-2 {
            return Err(format!("mirage's gated MLP at B = {rows} differs from candle's: {err:.2e}").into());
        }
    }
    // bf16 products of 2048 terms, rounded differently (candle rounds each matmul to bf16 before
    // the SiLU and the product): a few bf16 ulps of relative difference.
    if err_h > 3e-2 || err_y > 3e-2 {
        return Err(format!("mirage's block differs from candle's: gated {err_h:.2e}, output {err_y:.2e}").into());
    }
    Ok(())
}
