#![cfg(feature = "build")]
//! The decoder's streamed projections against the plain kernel graphs they replace, on the CPU
//! reference of the megakernel's step graph: the RMSNorm folded into the projections that
//! consume it (`rms_norm(x)·g·W = ((x∘g)·W) / sqrt(mean(x²) + eps)`), the gated MLP with its
//! norm folded, and the output projection with its residual, at tilings of 64, 32 and 16
//! columns per task, with the weights row-major and stored tile by tile — within f32 rounding
//! in f32 and within bf16 rounding in bf16. Also the
//! tiling rule itself: enough tasks for every worker where the width allows.

use mirage::ir::{DType, KernelGraph};
use mirage::mpk::decoder::{
    DecoderConfig, PROJECTION_TASKS, ProjectionTiling, WeightStorage, gated_mlp, gated_mlp_of_parts, grouped_tilings,
    grouped_tilings_in, lm_head_tiling, lm_head_width, norm_projections, projection_residual, projection_tiling,
    projection_tiling_in, streamed_gated_mlp, streamed_gated_mlp_of_parts, streamed_norm_projection,
    streamed_norm_projections, streamed_projection_residual,
};
use mirage::mpk::exec::{HostTensors, reference_step};
use mirage::mpk::{MpkOptions, StepGraph, TensorId, compile};

/// Test results: any error fails the test with its message.
type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Deterministic values in `[-1, 1)` (a 64-bit LCG), `scale` times that.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            scale * (((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect()
}

/// A step graph running `plain` and `streamed` (two kernel graphs of the same inputs and
/// outputs) side by side on the same inputs of `shapes`; the reference's outputs of both, per
/// output.
fn both(
    plain: &KernelGraph,
    streamed: &KernelGraph,
    shapes: &[Vec<usize>],
    dtype: DType,
) -> R<Vec<(Vec<f32>, Vec<f32>)>> {
    let mut g = StepGraph::new("fold")?;
    let inputs: Vec<TensorId> =
        shapes.iter().enumerate().map(|(i, s)| g.input(&format!("in{i}"), s, dtype)).collect::<Result<_, _>>()?;
    // The streamed graph's own inputs where it stores a weight otherwise (tile by tile).
    let mut stored = Vec::new();
    let mut streamed_inputs = Vec::new();
    for (i, (s, d)) in shapes.iter().zip(streamed.inputs()).enumerate() {
        if &d.shape == s {
            streamed_inputs.push(inputs[i]);
        } else {
            let storage = WeightStorage::of_shape(s[0], s[1], &d.shape).ok_or("not a storage of the weight")?;
            let t = g.input(&format!("in{i}_stored"), &d.shape, dtype)?;
            streamed_inputs.push(t);
            stored.push((i, storage, t));
        }
    }
    let a = g.mugraph("plain", plain, &inputs)?;
    let b = g.mugraph("streamed", streamed, &streamed_inputs)?;
    // The streamed operators compile as megakernel tasks (regions, dependencies, schedule).
    compile(&g, &MpkOptions { workers: 8, ..MpkOptions::default() })?;
    let mut host = HostTensors::zeros(&g);
    for (i, (&t, s)) in inputs.iter().zip(shapes).enumerate() {
        let n: usize = s.iter().product();
        // x and gains near 1 in size, weights as 1/√fan_in.
        let scale = if s[0] == 1 { 1.0 } else { 1.0 / (s[0] as f32).sqrt() };
        let mut v = values(n, 17 + i as u64, scale);
        if i == 1 && s[0] == 1 {
            v.iter_mut().for_each(|g| *g += 1.0); // a gain around 1
        }
        host.set(t, &v)?;
    }
    for (i, storage, t) in stored {
        let v = storage.store(shapes[i][0], shapes[i][1], host.get(inputs[i])).ok_or("values of the weight")?;
        host.set(t, &v)?;
    }
    reference_step(&g, &mut host, &[])?;
    Ok(a.iter().zip(&b).map(|(&a, &b)| (host.get(a).to_vec(), host.get(b).to_vec())).collect())
}

/// The largest difference over the largest magnitude of `want`.
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

fn cfg(hidden: usize, intermediate: usize, dtype: DType) -> DecoderConfig {
    DecoderConfig { hidden, intermediate, dtype, eps: 1e-5, ..DecoderConfig::toy() }
}

/// The decoder configurations of a test: weights row-major, and stored tile by tile wherever
/// a task takes fewer than 129 columns (every tiling here but an output of one task).
fn storages(c: DecoderConfig) -> [DecoderConfig; 2] {
    [DecoderConfig { contiguous_below: 0, ..c.clone() }, DecoderConfig { contiguous_below: 129, ..c }]
}

/// (hidden, intermediate, projection widths): the toy's widths (16 columns per task); hidden
/// 512 with a gate/up of 8192 (64 columns) and a 2048-wide q (16 columns); hidden 1024 with
/// 4096-wide outputs (32 columns); an LM head of 16 384 outputs (128 columns); 8B's gate/up
/// width, 14 336 (112 columns), with a 3072-wide output (32 columns).
const CASES: [(usize, usize, &[usize]); 5] = [
    (256, 512, &[256, 128, 128]),
    (512, 8192, &[2048, 512]),
    (1024, 4096, &[4096]),
    (256, 512, &[16_384]),
    (128, 14_336, &[3072]),
];

#[test]
fn the_lm_head_in_one_round_of_wide_tasks_equals_the_norm_then_the_projection() -> R {
    // The LM head's tilings of Llama-3's and Qwen3's vocabularies (976 and 1152 columns per
    // task, 122 and 144 lanes of 8 columns) over a shallow hidden size of 64, and a vocabulary
    // whose padded head has a partial last lane group (1001 words: 63 tasks of 16).
    for (vocab, cols) in [(128_256, 976), (151_936, 1152), (1001, 16)] {
        for dtype in [DType::F32, DType::Bf16] {
            let tol = if dtype == DType::F32 { 5e-6 } else { 2e-2 };
            let (hidden, width) = (64, lm_head_width(vocab));
            let c = cfg(hidden, 512, dtype);
            let tiling = lm_head_tiling(hidden, vocab);
            assert_eq!(tiling.cols, cols, "{vocab}");
            let shapes = vec![vec![1, hidden], vec![1, hidden], vec![hidden, width]];
            let outs =
                both(&norm_projections(&c, &[width])?, &streamed_norm_projection(&c, width, tiling)?, &shapes, dtype)?;
            let (plain, streamed) = &outs[0];
            let e = rel_err(streamed, plain);
            assert!(e <= tol, "{dtype}, vocabulary {vocab}: error {e} > {tol}");
            assert!(plain.iter().any(|v| v.abs() > 0.1), "{dtype}: the outputs are not all small");
        }
    }
    Ok(())
}

#[test]
fn the_folded_norm_projections_equal_the_norm_then_the_projections() -> R {
    for dtype in [DType::F32, DType::Bf16] {
        let tol = if dtype == DType::F32 { 5e-6 } else { 2e-2 };
        for ((hidden, _, widths), c) in CASES.into_iter().flat_map(|k| storages(cfg(k.0, 512, dtype)).map(|c| (k, c))) {
            let mut shapes = vec![vec![1, hidden], vec![1, hidden]];
            shapes.extend(widths.iter().map(|&n| vec![hidden, n]));
            let outs = both(&norm_projections(&c, widths)?, &streamed_norm_projections(&c, widths)?, &shapes, dtype)?;
            assert_eq!(outs.len(), widths.len());
            for (k, (plain, streamed)) in outs.iter().enumerate() {
                let e = rel_err(streamed, plain);
                let below = c.contiguous_below;
                assert!(
                    e <= tol,
                    "{dtype}, hidden {hidden}, output {k} of width {}, tiles below {below}: error {e} > {tol}",
                    widths[k]
                );
                assert!(plain.iter().any(|v| v.abs() > 0.1), "{dtype}: the outputs are not all small");
            }
        }
    }
    Ok(())
}

#[test]
fn the_streamed_mlp_of_parts_equals_the_plain_graph() -> R {
    // The gated MLP of the residual plus the output projection's per-group partial sums
    // (`grouped_output`): 8 parts (Qwen3's and the Llamas' KV heads) and 2 (the toy's).
    for dtype in [DType::F32, DType::Bf16] {
        let tol = if dtype == DType::F32 { 5e-6 } else { 2e-2 };
        for (parts, (hidden, inter, _)) in [(8, CASES[0]), (2, CASES[1]), (8, CASES[4])] {
            for c in storages(cfg(hidden, inter, dtype)) {
                let below = c.contiguous_below;
                let shapes = [
                    vec![1, hidden],
                    vec![parts, hidden],
                    vec![1, hidden],
                    vec![hidden, inter],
                    vec![hidden, inter],
                    vec![inter, hidden],
                ];
                let outs =
                    both(&gated_mlp_of_parts(&c, parts)?, &streamed_gated_mlp_of_parts(&c, parts)?, &shapes, dtype)?;
                let e = rel_err(&outs[0].1, &outs[0].0);
                assert!(
                    e <= tol,
                    "{dtype}, mlp {hidden}x{inter} of {parts} parts, tiles below {below}: error {e} > {tol}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn the_streamed_mlp_and_output_projection_equal_the_plain_graphs() -> R {
    for dtype in [DType::F32, DType::Bf16] {
        let tol = if dtype == DType::F32 { 5e-6 } else { 2e-2 };
        for ((hidden, inter, _), c) in CASES.into_iter().flat_map(|k| storages(cfg(k.0, k.1, dtype)).map(|c| (k, c))) {
            let below = c.contiguous_below;
            let shapes =
                [vec![1, hidden], vec![1, hidden], vec![hidden, inter], vec![hidden, inter], vec![inter, hidden]];
            let outs = both(&gated_mlp(&c)?, &streamed_gated_mlp(&c)?, &shapes, dtype)?;
            let e = rel_err(&outs[0].1, &outs[0].0);
            assert!(e <= tol, "{dtype}, mlp {hidden}x{inter}, tiles below {below}: error {e} > {tol}");
            let width = 2 * hidden;
            let shapes = [vec![1, width], vec![width, hidden], vec![1, hidden]];
            let outs =
                both(&projection_residual(&c, width)?, &streamed_projection_residual(&c, width)?, &shapes, dtype)?;
            let e = rel_err(&outs[0].1, &outs[0].0);
            assert!(e <= tol, "{dtype}, o_proj {width}x{hidden}, tiles below {below}: error {e} > {tol}");
        }
    }
    Ok(())
}

#[test]
fn the_tiling_gives_every_worker_a_task_where_the_width_allows() {
    let t = |cols, step| ProjectionTiling { cols, step };
    // Llama-3.2-1B: q and o_proj/down (2048 outputs) at 16 columns, gate/up (8192) at 64, the
    // head (128 256) at 128; 16 KiB of a bf16 weight per iteration at every width.
    assert_eq!(projection_tiling(2048, 2048), t(16, 512));
    assert_eq!(projection_tiling(8192, 2048), t(16, 512));
    assert_eq!(projection_tiling(2048, 8192), t(64, 128));
    assert_eq!(projection_tiling(2048, 128_256), t(128, 64));
    // The LM heads of Qwen3-0.6B and Llama-3.1-8B at 128 columns too (1187 and 1002 tasks).
    assert_eq!(projection_tiling(1024, 151_936), t(128, 64));
    assert_eq!(projection_tiling(4096, 128_256), t(128, 64));
    // 8B's gate/up at 112 columns: 128 tasks in one round (64 columns made 224, two rounds);
    // 64 rows of 112 columns per iteration (14 KiB).
    assert_eq!(projection_tiling(4096, 14_336), t(112, 64));
    // Llama-3.1-8B: 4096 outputs at 32 columns (128 tasks), down's 14 336 inputs in steps of 256.
    assert_eq!(projection_tiling(14_336, 4096), t(32, 256));
    // k and v at 1B (512 outputs): the narrowest, 32 tasks.
    assert_eq!(projection_tiling(2048, 512), t(16, 512));
    // Qwen3-0.6B's gate/up (3072) at 32 columns: 96 tasks in one round (16 made 192); its down
    // in steps of 512.
    assert_eq!(projection_tiling(1024, 3072), t(32, 256));
    assert_eq!(projection_tiling(3072, 1024), t(16, 512));
    // Widths no tile divides: whole; reduced dims without a large divisor: the largest one.
    assert_eq!(projection_tiling(100, 24), t(24, 100));
    assert_eq!(projection_tiling(2 * 389, 64), t(16, 389));
    // q, k and v side by side in one round of tasks (at most 128): 1B q widens to 32 columns;
    // Qwen3-0.6B's three to 32 each (64 + 32 + 32); 8B's q to 64, k and v to 32 (64 + 32 + 32).
    let cols = |k, widths: &[usize]| grouped_tilings(k, widths).iter().map(|t| t.cols).collect::<Vec<_>>();
    assert_eq!(cols(2048, &[2048, 512, 512]), [32, 16, 16]);
    assert_eq!(cols(1024, &[2048, 1024, 1024]), [32, 32, 32]);
    assert_eq!(cols(4096, &[4096, 1024, 1024]), [64, 32, 32]);
    assert_eq!(grouped_tilings(4096, &[4096, 1024, 1024])[0], t(64, 128));
    // the toy's (32 tasks) and a projection alone keep their own tilings
    assert_eq!(cols(256, &[256, 128, 128]), [16, 16, 16]);
    assert_eq!(grouped_tilings(2048, &[128_256]), [projection_tiling(2048, 128_256)]);
    // One round of exactly PROJECTION_TASKS tasks where a width gives it.
    for (k, n) in [(2048, 2048), (2048, 8192), (4096, 4096), (4096, 14_336)] {
        assert_eq!(n / projection_tiling(k, n).cols, PROJECTION_TASKS, "{k}x{n}");
    }
    // One round never wider than needed: no narrower width of 16·j divides n into ≤ 128 tasks.
    for n in [512, 1024, 2048, 3072, 4096, 5120, 8192, 11_008, 14_336] {
        let c = projection_tiling(4096, n).cols;
        assert!(n / c <= PROJECTION_TASKS, "{n}: {c}");
        assert!((16..c).step_by(16).all(|d| !n.is_multiple_of(d) || n / d > PROJECTION_TASKS), "{n}: {c}");
    }
    // 11 008 (2^8 · 43): 86 tasks of 128 columns, one round. 18 944 (2^9 · 37): no tile of at
    // most 128 columns serves it in one round: at least PROJECTION_TASKS tasks, as an LM head.
    assert_eq!(projection_tiling(4096, 11_008), t(128, 64));
    assert_eq!(projection_tiling(4096, 18_944), t(128, 64));
}

#[test]
fn contiguous_tiles_of_eight_columns_give_qwen3_one_full_round() {
    let t = |cols, step| ProjectionTiling { cols, step };
    let cols =
        |unit, k, widths: &[usize]| grouped_tilings_in(unit, k, widths).iter().map(|t| t.cols).collect::<Vec<_>>();
    // Qwen3-0.6B with 8-column tiles (contiguous storage): o_proj and down 128 tasks of 8
    // columns (16 gave 64), gate/up 128 of 24 (32 gave 96, 12 KiB per iteration); q/k/v stay.
    assert_eq!(projection_tiling_in(8, 2048, 1024), t(8, 1024));
    assert_eq!(projection_tiling_in(8, 3072, 1024), t(8, 1024));
    assert_eq!(projection_tiling_in(8, 1024, 3072), t(24, 256));
    assert_eq!(cols(8, 1024, &[2048, 1024, 1024]), [32, 32, 32]);
    // Llama-3.2-1B and Llama-3.1-8B keep every tiling: no width of 8 columns gives one round
    // where 16 did not.
    for (k, n) in [(2048, 2048), (8192, 2048), (2048, 8192), (2048, 128_256), (4096, 14_336), (14_336, 4096)] {
        assert_eq!(projection_tiling_in(8, k, n), projection_tiling(k, n), "{k}x{n}");
    }
    assert_eq!(cols(8, 2048, &[2048, 512, 512]), cols(16, 2048, &[2048, 512, 512]));
    assert_eq!(cols(8, 4096, &[4096, 1024, 1024]), cols(16, 4096, &[4096, 1024, 1024]));
    // The unit follows the storage: 8 only where tiles of 8 columns lie contiguously.
    let c = DecoderConfig::toy();
    assert_eq!(c.tile_unit(), 16);
    assert_eq!(DecoderConfig { contiguous_below: 9, ..c.clone() }.tile_unit(), 8);
    assert_eq!(DecoderConfig { contiguous_below: 8, ..c }.tile_unit(), 16);
}

#[test]
fn only_a_small_gate_up_task_walks_double_steps() -> R {
    use mirage::ir::KernelOp;
    use mirage::model::ModelConfig;
    // Qwen3-0.6B's gate/up task (2 × 1024 × 24 bf16 = 96 KiB) in 2 iterations of 512 rows; the
    // 1B's (64 columns, 512 KiB) and the 8B's (112 columns) keep 16 of 128 rows and 64 of 64.
    for (model, iterations) in [("qwen3-0.6b", 2), ("llama-3.2-1b", 16), ("llama-3.1-8b", 64)] {
        let cfg = ModelConfig::preset(model).ok_or("a preset")?.decoder_config(64, DType::Bf16);
        let kg = streamed_gated_mlp(&cfg)?;
        let loops: Vec<usize> = kg
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                KernelOp::Custom { block } => Some(block.forloop_range()),
                _ => None,
            })
            .collect();
        assert_eq!(loops[0], iterations, "{model}: {loops:?}");
    }
    Ok(())
}
