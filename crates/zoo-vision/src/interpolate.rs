//! Bicubic resampling of the position-embedding grid, as PyTorch's
//! `interpolate(mode="bicubic", align_corners=False)` computes it (which HF's
//! `interpolate_pos_encoding` calls).
//!
//! Bicubic resampling is separable and linear, so it is a matrix per axis, built here on
//! the host: `out = Wh · grid · Wwᵀ`. Two matrix products then run on any backend, and
//! gradients flow through them to the learned table.
//!
//! The kernel is Keys' cubic convolution with `A = -0.75` (Keys, 1981, "Cubic
//! convolution interpolation for digital image processing"; PyTorch's choice). Source
//! coordinates are `(dst + 0.5) · in / out - 0.5`, and the four taps are clamped to the
//! border.

/// PyTorch's cubic coefficient.
const A: f64 = -0.75;

/// `|x| <= 1` branch of the cubic convolution kernel.
fn near(x: f64) -> f64 {
    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
}

/// `1 < |x| < 2` branch.
fn far(x: f64) -> f64 {
    ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
}

/// The `[n_out, n_in]` row-major matrix that resamples a signal of `n_in` samples to
/// `n_out` samples.
///
/// # Panics
/// Never for `n_in > 0`; an empty input gives an all-zero matrix.
pub fn bicubic_matrix(n_in: usize, n_out: usize) -> Vec<f32> {
    let mut w = vec![0.0f64; n_out * n_in];
    if n_in == 0 {
        return vec![0.0; n_out * n_in];
    }
    let scale = n_in as f64 / n_out as f64;
    for dst in 0..n_out {
        let src = (dst as f64 + 0.5) * scale - 0.5;
        let base = src.floor();
        let t = src - base;
        let taps = [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)];
        for (k, coeff) in taps.into_iter().enumerate() {
            let index = (base as i64 - 1 + k as i64).clamp(0, n_in as i64 - 1) as usize;
            w[dst * n_in + index] += coeff;
        }
    }
    w.into_iter().map(|v| v as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_size_is_the_identity() {
        let w = bicubic_matrix(5, 5);
        for i in 0..5 {
            for j in 0..5 {
                assert_eq!(w[i * 5 + j], f32::from(i == j), "({i}, {j})");
            }
        }
    }

    #[test]
    fn rows_sum_to_one_and_upsampling_by_two_has_keys_weights() {
        let w = bicubic_matrix(4, 8);
        for row in w.chunks(4) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{row:?}");
        }
        // Output 3 samples the input at 1.25: t = 0.25 between samples 1 and 2, taps at
        // 0..=3. The weights are those of torch.nn.functional.interpolate(eye(4),
        // size=8, mode="bicubic", align_corners=False), torch 2.9.
        let expected = [-0.105_468_75, 0.878_906_25, 0.261_718_75, -0.035_156_25];
        for (got, want) in w[3 * 4..4 * 4].iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{:?}", &w[12..16]);
        }
    }

    #[test]
    fn border_taps_are_clamped() {
        // Output 0 of 4 -> 8 samples at -0.25: taps -2, -1, 0, 1, the first three
        // clamped to 0, so sample 0 collects three weights.
        // torch gives the row [1.1055, -0.1055, 0, 0].
        let w = bicubic_matrix(4, 8);
        let t: f64 = 0.75;
        let first = far(t + 1.0) + near(t) + near(1.0 - t);
        assert!((f64::from(w[0]) - first).abs() < 1e-6, "{:?}", &w[..4]);
        assert!((f64::from(w[1]) - far(2.0 - t)).abs() < 1e-6);
    }
}
