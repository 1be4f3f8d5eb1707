//! RoPE's inverse frequencies of a model, with Llama 3's frequency scaling (as transformers'
//! `_compute_llama3_parameters`): wavelengths shorter than `original / high_freq_factor` keep
//! their frequency, those longer than `original / low_freq_factor` are divided by `factor`, and
//! those between interpolate smoothly between the two.

use std::f64::consts::PI;

use super::ModelConfig;

impl ModelConfig {
    /// The `head_dim / 2` inverse frequencies `rope_theta^(-2i / head_dim)`, scaled by
    /// `rope_scaling` where the model has one (computed in f64, rounded to f32): the decoder's
    /// `inv_freq` input.
    pub fn inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim as f64;
        (0..self.head_dim / 2)
            .map(|i| {
                let f = self.rope_theta.powf(-2.0 * i as f64 / d);
                let Some(s) = &self.rope_scaling else { return f as f32 };
                let original = s.original_max_positions as f64;
                let wavelength = 2.0 * PI / f;
                let scaled = if wavelength < original / s.high_freq_factor {
                    f
                } else if wavelength > original / s.low_freq_factor {
                    f / s.factor
                } else {
                    let smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                    (1.0 - smooth) * f / s.factor + smooth * f
                };
                scaled as f32
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed independently with numpy (float64, rounded to float32) from the formula of
    /// transformers' `_compute_llama3_parameters`.
    fn check(name: &str, expected: &[(usize, f32)]) {
        let inv = ModelConfig::preset(name).expect("a preset").inv_freq();
        for &(i, want) in expected {
            let rel = ((inv[i] - want) / want).abs();
            assert!(rel < 1e-6, "{name} inv_freq[{i}] = {}, expected {want}", inv[i]);
        }
    }

    #[test]
    fn llama3_scaling_matches_numpy() {
        // Llama-3.2-1B: factor 32, bands at wavelengths 2048..8192 (indices 15..17 interpolate).
        check(
            "llama-3.2-1b",
            &[
                (0, 1.0),
                (14, 0.003_211_446),
                (15, 0.001_290_547_9),
                (16, 0.000_429_556_8),
                (17, 9.708_288e-5),
                (18, 1.946_163_9e-5),
                (31, 9.418_306_5e-8),
            ],
        );
        // Llama-3.1-8B: factor 8, head_dim 128 (indices 29..34 interpolate).
        check(
            "llama-3.1-8b",
            &[
                (0, 1.0),
                (28, 0.003_211_446),
                (29, 0.002_166_570_9),
                (30, 0.001_371_893_6),
                (31, 0.000_856_751_4),
                (32, 0.000_524_846_14),
                (33, 0.000_312_693_74),
                (34, 0.000_178_507_8),
                (35, 9.556_212e-5),
                (63, 3.068_926e-7),
            ],
        );
    }

    #[test]
    fn unscaled_frequencies_match_numpy_and_the_decoder() {
        check("qwen3-0.6b", &[(0, 1.0), (1, 0.805_842_16), (63, 1.240_937_8e-6)]);
        let c = ModelConfig::preset("qwen3-0.6b").expect("a preset");
        let d = c.decoder_config(16, crate::ir::DType::Bf16);
        assert_eq!(c.inv_freq(), d.inv_freq(c.rope_theta));
    }
}
