//! Dropout with a cheaper mask on the CPU backends.
//!
//! Burn's [`Dropout`] draws its mask through `Tensor::random_like`, which on the CPU
//! backends samples one element at a time through a ChaCha generator and a distribution
//! object: in a profile of `bert-mlm`'s training step (width 128, dropout 0.1) that was
//! about 15% of the step. [`dropout`] keeps Burn's module (its probability and training
//! flag, so checkpoints and module trees do not change) and, on flex and ndarray, fills the
//! mask from a SplitMix64 stream seeded from the device's own generator, so
//! `device.seed(..)` still fixes every mask. The mask already carries the `1 / keep`
//! scale, so applying it is one multiplication. On the other devices (libtorch, whose
//! kernels draw masks fast, and the GPUs) it is Burn's dropout.

use burn::nn::Dropout;
use burn::tensor::{Tensor, TensorData};
use zoo_device::BackendName;

/// Applies `module` to `x`: in training mode on an autodiff device, zeroes each element
/// with probability `module.prob` and scales the rest by `1 / (1 - prob)`; otherwise
/// returns `x` unchanged, as Burn's [`Dropout::forward`] does.
pub fn dropout<const D: usize>(module: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !module.training.is_enabled() || !device.is_autodiff() || module.prob == 0.0 {
        return x;
    }
    // libtorch draws its masks with its own vectorised kernels; GPUs draw on the device.
    if !matches!(
        BackendName::of(&device),
        Some(BackendName::Flex | BackendName::NdArray)
    ) {
        return module.forward(x);
    }
    let shape = x.shape();
    let mask = host_mask(shape.num_elements(), module.prob, seed_from(&device));
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// A seed drawn from the device's generator.
pub(crate) fn seed_from(device: &burn::tensor::Device) -> u64 {
    zoo_kernels::recompute::seed_from(device)
}

/// `n` mask values: `0` with probability `prob`, else `1 / (1 - prob)`. Each value uses 32
/// bits of a SplitMix64 stream (Steele, Lea and Flood, 2014) started at `seed`.
fn host_mask(n: usize, prob: f64, seed: u64) -> Vec<f32> {
    let keep = 1.0 - prob;
    let scale = (1.0 / keep) as f32;
    // A draw u of 32 bits keeps its element when u < keep · 2³².
    let threshold = (keep * 4_294_967_296.0).min(4_294_967_295.0) as u64;
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = next();
        for u in [r & 0xFFFF_FFFF, r >> 32] {
            if out.len() < n {
                out.push(if u < threshold { scale } else { 0.0 });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Module;
    use burn::nn::DropoutConfig;
    use zoo_device::test_device;
    use zoo_device::testing::floats;

    #[test]
    fn the_mask_keeps_the_right_share_and_scales_the_rest() {
        let n = 1_000_000;
        for prob in [0.1f64, 0.5] {
            let mask = host_mask(n, prob, 42);
            let scale = (1.0 / (1.0 - prob)) as f32;
            assert!(mask.iter().all(|&m| m == 0.0 || m == scale));
            let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64;
            // Within 4 standard deviations of the binomial's mean.
            let sd = (n as f64 * prob * (1.0 - prob)).sqrt();
            assert!(
                (dropped - n as f64 * prob).abs() < 4.0 * sd,
                "{dropped} dropped of {n} at p = {prob}"
            );
            // Neighbours are not correlated: pairs (drop, drop) as often as p².
            let both = mask
                .windows(2)
                .filter(|w| w[0] == 0.0 && w[1] == 0.0)
                .count() as f64;
            let want = (n - 1) as f64 * prob * prob;
            let sd2 = (want * (1.0 - prob * prob)).sqrt();
            assert!(
                (both - want).abs() < 4.0 * sd2,
                "{both} adjacent pairs dropped, want {want}"
            );
        }
        assert_ne!(host_mask(64, 0.5, 1), host_mask(64, 0.5, 2));
        assert_eq!(host_mask(64, 0.5, 1), host_mask(64, 0.5, 1));
    }

    #[test]
    fn training_drops_and_rescales_and_inference_passes_through() {
        let dev = test_device();
        let ad = dev.clone().autodiff();
        let d = DropoutConfig::new(0.25).init();
        let x = Tensor::<2>::ones([64, 64], &ad) * 3.0;
        let y = floats(dropout(&d, x.clone()));
        let kept = y.iter().filter(|&&v| v != 0.0).count();
        assert!(
            y.iter().all(|&v| v == 0.0 || (v - 4.0).abs() < 1e-6),
            "kept values are 3 / 0.75"
        );
        assert!(
            (2900..3250).contains(&kept),
            "{kept} of 4096 kept at p = 0.25"
        );
        // Two calls draw two masks (that reseeding repeats them is tested alone, in
        // tests/dropout_seed.rs: libtorch's generator is global to the process, and the
        // tests running beside this one draw from it).
        let a = floats(dropout(&d, x.clone()));
        let b = floats(dropout(&d, x.clone()));
        assert_ne!(a, b);
        // Gradients flow through the kept elements only, scaled.
        let xr = Tensor::<2>::ones([8, 8], &ad).require_grad();
        let out = dropout(&d, xr.clone());
        let kept_mask = floats(out.clone());
        let grads = out.sum().backward();
        let g = floats(xr.grad(&grads).expect("a gradient"));
        assert_eq!(g, kept_mask, "d(sum)/dx is the mask itself");
        // A frozen module, a plain device and p = 0 leave the input as it is.
        assert!(
            floats(dropout(&d.clone().freeze(), x.clone()))
                .iter()
                .all(|&v| v == 3.0)
        );
        let x3 = Tensor::<2>::ones([4, 4], &dev) * 3.0;
        assert!(floats(dropout(&d, x3)).iter().all(|&v| v == 3.0));
        let off = DropoutConfig::new(0.0).init();
        assert!(floats(dropout(&off, x.clone())).iter().all(|&v| v == 3.0));
    }
}
