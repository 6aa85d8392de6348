//! What the kernels' tests share: reading a tensor back, and comparing two of them.

use std::sync::{Mutex, MutexGuard};

use burn::tensor::Tensor;

/// Held by every test that draws from flex's generator, which is one for the process:
/// a test that seeds it gets its own stream while the others wait.
pub(crate) fn rng() -> MutexGuard<'static, ()> {
    static RNG: Mutex<()> = Mutex::new(());
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

/// The values of `t` as f32 on the host.
pub(crate) fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// The largest absolute difference.
pub(crate) fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// The largest difference over the largest magnitude of `b` (`a` must be finite).
pub(crate) fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert!(a.iter().all(|v| v.is_finite()), "a non-finite value");
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    max_diff(a, b) / scale
}
