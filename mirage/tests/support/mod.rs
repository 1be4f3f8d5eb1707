//! Helpers shared by the runtime-sized-dims tests (`dims.rs`, `dims_dsl.rs`).

use mirage::reference::HostTensor;

/// Deterministic inputs in [-1, 1) of the given shapes.
pub fn inputs(shapes: &[Vec<usize>], seed: u64) -> Vec<HostTensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: usize = s.iter().product();
            let data = (0..n)
                .map(|i| {
                    let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        ^ (seed + k as u64).wrapping_mul(0xBF58_476D);
                    ((h >> 40) % 2048) as f32 / 1024.0 - 1.0
                })
                .collect();
            HostTensor::new(s.clone(), data).expect("data fits the shape")
        })
        .collect()
}
