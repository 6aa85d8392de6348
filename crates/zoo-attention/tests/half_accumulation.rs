//! In half precision the norms and the softmax accumulate in f32, as `transformers` does,
//! and narrow their result once. Its own test binary: the device computes in bf16 (f16
//! where the backend has no bf16, as software Vulkan), a type that is set once per
//! process, before the device's first tensor.
//!
//! The LayerNorm case has a closed form: a row of 63 equal values `c` and one `c + s`,
//! where `s` is the half type's spacing at `c` (so every input is exact), normalises to
//! `-1/sqrt(63)` at the 63 and `sqrt(63)` at the last, whatever `c` and `s` are. Its mean,
//! `c + s/64`, falls between two half values: a mean rounded to the half type moves the
//! 63 values to 0. The control computes that way, the decomposition in the input's type
//! that Burn's default `layer_norm` uses on backends without a fused kernel.

use burn::nn::LayerNormConfig;
use burn::tensor::{DType, Device, Tensor, TensorData};
use zoo_attention::sdpa::safe_softmax;
use zoo_attention::{Norm, NormKind, layer_norm};
use zoo_device::testing::{floats, test_backend};
use zoo_device::{BackendName, FloatType, select_as};

/// A device of the test backend in bf16, else f16; `None` on ndarray (f32 only).
fn half_device() -> Option<(Device, FloatType)> {
    let backend = test_backend();
    for float in [FloatType::BF16, FloatType::F16] {
        if let Ok(device) = select_as(backend, 0, float) {
            return Some((device, float));
        }
    }
    assert_eq!(backend, BackendName::NdArray, "{backend} has no half type");
    None
}

/// The half type's spacing at 1024: 2^(10 - mantissa bits).
fn spacing(float: FloatType) -> f32 {
    match float {
        FloatType::BF16 => 8.0,
        _ => 1.0,
    }
}

fn row(device: &Device, float: FloatType) -> Tensor<2> {
    let mut values = vec![1024f32; 64];
    values[63] += spacing(float);
    let x = Tensor::<2>::from_data(TensorData::new(values, [1, 64]), device);
    assert_eq!(x.dtype(), DType::from(float.dtype()));
    x
}

#[test]
fn layer_norm_accumulates_in_f32() {
    let Some((device, float)) = half_device() else {
        return;
    };
    let norm = LayerNormConfig::new(64).with_epsilon(1e-6).init(&device);
    let x = row(&device, float);
    let (low, high) = (-1.0 / 63f32.sqrt(), 63f32.sqrt());
    // One rounding of the half type: 2^-8 (bf16) or 2^-11 (f16), relative.
    let ulp = match float {
        FloatType::BF16 => 1.0 / 256.0,
        _ => 1.0 / 2048.0,
    };
    for (what, got) in [
        ("layer_norm", floats(layer_norm(&norm, x.clone()))),
        (
            "Norm",
            floats(Norm::LayerNorm(norm.clone()).forward(x.clone())),
        ),
    ] {
        for (i, &g) in got.iter().enumerate() {
            let want = if i == 63 { high } else { low };
            assert!(
                (g - want).abs() <= want.abs() * ulp,
                "{float} {what}[{i}]: {g}, want {want}"
            );
        }
    }
    // Control: the same norm computed in the half type throughout rounds the mean to
    // 1024, and the 63 equal values come out 0.
    let mean = x.clone().mean_dim(1);
    let centered = x - mean;
    let var = centered.clone().square().mean_dim(1);
    let naive = floats(centered / (var + 1e-6).sqrt());
    assert!(
        (naive[0] - low).abs() > 0.1,
        "{float}: the in-type decomposition gave {} at the 63, near {low}",
        naive[0]
    );
}

#[test]
fn rms_norm_normalises_in_f32_and_scales_in_the_half_type() {
    let Some((device, float)) = half_device() else {
        return;
    };
    let norm = Norm::new(NormKind::RmsNorm, 64, 1e-6, &device);
    // Values whose squares overflow f16 (300² > 65504): in f32 the row normalises to
    // x / rms, with rms = sqrt(mean(x²)).
    let values: Vec<f32> = (0..64).map(|i| 240.0 + 4.0 * i as f32).collect();
    let rms = (values.iter().map(|v| v * v).sum::<f32>() / 64.0).sqrt();
    let x = Tensor::<2>::from_data(TensorData::new(values.clone(), [1, 64]), &device);
    let got = floats(norm.forward(x));
    for (i, (g, v)) in got.iter().zip(&values).enumerate() {
        let want = v / rms;
        assert!(
            (g - want).abs() <= want.abs() / 128.0,
            "{float} rms_norm[{i}]: {g}, want {want}"
        );
    }
}

#[test]
fn softmax_sums_in_f32() {
    let Some((device, float)) = half_device() else {
        return;
    };
    // 3000 equal scores: every weight is 1/3000; a sum of ones kept in bf16 stops
    // growing at 256 (256 + 1 rounds back to 256), f16's at 2048.
    let scores = Tensor::<4>::zeros([1, 1, 2, 3000], &device);
    let weights = safe_softmax(scores);
    assert_eq!(weights.dtype(), DType::from(float.dtype()));
    let got = floats(weights);
    for (i, &g) in got.iter().enumerate() {
        assert!(
            (g - 1.0 / 3000.0).abs() <= 1.0 / 3000.0 / 128.0,
            "{float} softmax[{i}]: {g}"
        );
    }
}
