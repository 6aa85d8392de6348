//! Softmax cross-entropy over the vocabulary as one op forward and one op backward.
//!
//! Burn's `CrossEntropyLoss` is a `log_softmax` (a maximum, a subtraction, exponentials,
//! a sum, a logarithm, a subtraction: each a pass over the `[N, V]` logits), a gather and
//! a mean, and with label smoothing a one-hot matrix and a product as large as the
//! logits; under autodiff each op records a node whose backward makes another pass. Here
//! the forward is one pass per row (its maximum, `Σ exp(x - m)`, the target's logit),
//! and the backward one more, writing `(softmax(x) - target) · g / N` from the saved
//! logits, the row's statistics recomputed:
//!
//! `loss = mean_rows(lse - (1 - α) x_t - (α / V) Σ x)`, `lse = m + ln Σ exp(x - m)`;
//! `dx = (softmax(x) - (1 - α) onehot(t) - α / V) · g / N`.
//!
//! Elsewhere, in other float types, or with [`crate::enabled`] off, [`cross_entropy`] is
//! Burn's `CrossEntropyLoss` (with `smoothing`), the reference.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, backend_extension};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{DType, Int, Tensor};

/// Burn's backend extension for softmax cross-entropy with a backward of its own.
/// Implemented for flex, and for autodiff over it.
#[backend_extension(Flex: cfg(feature = "flex"), Autodiff: cfg(feature = "flex"))]
pub trait LossOps: Backend {
    /// The mean cross-entropy of `logits` `[N, V]` against `targets` `[N]`, shape `[1]`,
    /// with label smoothing `smoothing` (0 for none).
    fn fused_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        smoothing: f32,
    ) -> FloatTensor<Self>;
    /// The gradient of the logits, from the loss's gradient `grad` `[1]`.
    fn fused_cross_entropy_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        grad: FloatTensor<Self>,
        smoothing: f32,
    ) -> FloatTensor<Self>;
}

/// The mean softmax cross-entropy of `logits` `[N, V]` against class indices `targets`
/// `[N]`, with optional label smoothing `α` in [0, 1] (targets `(1 - α) onehot + α / V`),
/// as Burn's `CrossEntropyLoss`: shape `[1]`. One op forward and one backward on flex in
/// f32; Burn's loss elsewhere.
///
/// # Panics
/// When the shapes disagree, or (on flex) a target is not below `V`.
pub fn cross_entropy(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    smoothing: Option<f32>,
) -> Tensor<1> {
    let [n, _] = logits.dims();
    assert_eq!(
        targets.dims()[0],
        n,
        "cross_entropy: {} targets for {n} rows of logits",
        targets.dims()[0]
    );
    if logits.dtype() == DType::F32 && crate::enabled() && crate::on_flex(&logits) && n > 0 {
        use burn::backend::Dispatch;
        return Tensor::from_dispatch(Dispatch::fused_cross_entropy(
            logits.into_dispatch(),
            targets.into_dispatch(),
            smoothing.unwrap_or(0.0),
        ));
    }
    reference_cross_entropy(logits, targets, smoothing)
}

/// Burn's `CrossEntropyLoss` over logits, with `smoothing`: the reference.
pub fn reference_cross_entropy(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    smoothing: Option<f32>,
) -> Tensor<1> {
    CrossEntropyLossConfig::new()
        .with_smoothing(smoothing)
        .init(&logits.device())
        .forward(logits, targets)
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::TensorMetadata;
    use burn::backend::flex::{Flex, FlexTensor, Layout};
    use burn::tensor::{Bytes, DType, Shape};
    use rayon::prelude::*;

    use super::LossOps;
    use crate::flex_contiguous as contiguous;
    use crate::math;

    /// Logits per parallel task, at least one row.
    const CHUNK: usize = 1 << 15;

    /// The logits `[N, V]` as a slice, and the targets checked to lie below `V`.
    fn rows(logits: &FlexTensor, targets: &FlexTensor) -> (usize, Vec<usize>) {
        let shape = logits.shape();
        let v = shape[1];
        let targets = if targets.is_contiguous() {
            targets.clone()
        } else {
            targets.to_contiguous()
        };
        let ids: Vec<i64> = match targets.dtype() {
            DType::I64 => targets.as_slice::<i64>().expect("contiguous").to_vec(),
            DType::I32 => targets
                .as_slice::<i32>()
                .expect("contiguous")
                .iter()
                .map(|&t| i64::from(t))
                .collect(),
            dtype => panic!("cross_entropy: targets of {dtype:?}, expected integers"),
        };
        let ids = ids
            .into_iter()
            .map(|t| match usize::try_from(t) {
                Ok(t) if t < v => t,
                _ => panic!("cross_entropy: target {t} is outside the {v} classes"),
            })
            .collect();
        (v, ids)
    }

    fn rows_per_task(v: usize) -> usize {
        (CHUNK / v.max(1)).max(1)
    }

    impl LossOps for Flex {
        fn fused_cross_entropy(
            logits: FlexTensor,
            targets: FlexTensor,
            smoothing: f32,
        ) -> FlexTensor {
            let logits = contiguous(logits);
            let (v, ids) = rows(&logits, &targets);
            let xs = logits.as_slice::<f32>().expect("a contiguous f32 tensor");
            let n = ids.len();
            let mut losses = vec![0.0f32; n];
            let r = rows_per_task(v);
            losses
                .par_chunks_mut(r)
                .zip(xs.par_chunks(r * v).zip(ids.par_chunks(r)))
                .for_each(|(l, (x, t))| math::cross_entropy(x, v, t, smoothing, l));
            // The mean in f64, in order: the same bits at every run.
            let mean = losses.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64;
            FlexTensor::new(
                Bytes::from_elems(vec![mean as f32]),
                Layout::contiguous(Shape::new([1])),
                DType::F32,
            )
        }

        fn fused_cross_entropy_backward(
            logits: FlexTensor,
            targets: FlexTensor,
            grad: FlexTensor,
            smoothing: f32,
        ) -> FlexTensor {
            let logits = contiguous(logits);
            let (v, ids) = rows(&logits, &targets);
            let xs = logits.as_slice::<f32>().expect("a contiguous f32 tensor");
            let g = contiguous(grad)
                .as_slice::<f32>()
                .expect("a contiguous f32 tensor")[0];
            let scale = g / ids.len() as f32;
            let mut out = vec![0.0f32; xs.len()];
            let r = rows_per_task(v);
            out.par_chunks_mut(r * v)
                .zip(xs.par_chunks(r * v).zip(ids.par_chunks(r)))
                .for_each(|(o, (x, t))| math::cross_entropy_backward(x, v, t, smoothing, scale, o));
            FlexTensor::new(
                Bytes::from_elems(out),
                Layout::contiguous(logits.shape()),
                DType::F32,
            )
        }
    }

    mod autodiff {
        use burn::backend::Backend;
        use burn::backend::autodiff::Autodiff;
        use burn::backend::autodiff::checkpoint::base::Checkpointer;
        use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
        use burn::backend::autodiff::grads::Gradients;
        use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
        use burn::backend::tensor::{FloatTensor, IntTensor};

        use super::super::LossOps;

        #[derive(Debug)]
        struct CrossEntropyBackward {
            smoothing: f32,
        }

        impl<B: Backend + LossOps> Backward<B, 1> for CrossEntropyBackward {
            /// The logits and the targets.
            type State = (FloatTensor<B>, IntTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let (logits, targets) = ops.state;
                let smoothing = self.smoothing;
                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    B::fused_cross_entropy_backward(logits, targets, grad, smoothing)
                });
            }
        }

        impl<B: Backend + LossOps, C: CheckpointStrategy> LossOps for Autodiff<B, C> {
            fn fused_cross_entropy(
                logits: FloatTensor<Self>,
                targets: IntTensor<Self>,
                smoothing: f32,
            ) -> FloatTensor<Self> {
                match (CrossEntropyBackward { smoothing })
                    .prepare::<C>([logits.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => {
                        let x = logits.primitive().clone();
                        let out = B::fused_cross_entropy(x.clone(), targets.clone(), smoothing);
                        prep.finish((x, targets), out)
                    }
                    OpsKind::UnTracked(prep) => prep.finish(B::fused_cross_entropy(
                        logits.into_primitive(),
                        targets,
                        smoothing,
                    )),
                }
            }

            fn fused_cross_entropy_backward(
                _logits: FloatTensor<Self>,
                _targets: IntTensor<Self>,
                _grad: FloatTensor<Self>,
                _smoothing: f32,
            ) -> FloatTensor<Self> {
                unreachable!("the backward runs on the inner backend, inside autodiff's backward")
            }
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use crate::testing::{host, max_diff};
    use burn::tensor::{Device, Int, Tensor, TensorData};

    use super::{cross_entropy, reference_cross_entropy};

    /// The loss and its gradient in f64 on the host, `3 · loss`'s gradient as the tests
    /// take it: the exact reference.
    fn exact(x: &[f32], ids: &[i64], v: usize, alpha: f64) -> (f64, Vec<f64>) {
        let n = ids.len();
        let (mut loss, mut grad) = (0.0, vec![0.0; x.len()]);
        for (r, &t) in ids.iter().enumerate() {
            let row: Vec<f64> = x[r * v..(r + 1) * v]
                .iter()
                .map(|&a| f64::from(a))
                .collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|a| (a - m).exp()).sum();
            let lse = m + s.ln();
            let target =
                |j: usize| if j == t as usize { 1.0 - alpha } else { 0.0 } + alpha / v as f64;
            loss += (0..v).map(|j| target(j) * (lse - row[j])).sum::<f64>() / n as f64;
            for j in 0..v {
                grad[r * v + j] = 3.0 / n as f64 * ((row[j] - m).exp() / s - target(j));
            }
        }
        (loss, grad)
    }

    /// The loss and the logits' gradient, with and without label smoothing, on 37 rows of
    /// 1013 classes (neither a multiple of the lanes nor of a task), fixed logits spread
    /// over ±8 around offsets up to ±30: against the exact values, the loss within 1e-6 relative
    /// and the gradient within 2e-7 (1.9e-8 seen on random logits; its values reach 3/37 ≈ 0.08; the polynomial
    /// exponential's error and f32 rounding); against Burn's `CrossEntropyLoss` under
    /// autodiff, the loss within 1e-5 and the gradient within 3e-6 (Burn sums the smoothed
    /// targets in f32, which shifted its gradient by up to 1.2e-6 on random logits; 3.3e-8 on
    /// these). Negative control:
    /// smoothing moves the loss by far more than the tolerance.
    #[test]
    fn fused_cross_entropy_equals_the_exact_loss_and_burns_forward_and_backward() {
        let ad = Device::flex().autodiff();
        let (n, v) = (37, 1013);
        // Fixed values (a hash, not the device's generator, which other tests draw from
        // at the same time): uniform in [-8, 8) around row offsets in [-30, 30).
        let unit = |i: u64| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29) ^ 0xD1B5_4A32_D192_ED03;
            (h.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let values: Vec<f32> = (0..n * v)
            .map(|i| 8.0 * unit(i as u64) + 30.0 * unit(1_000_000 + (i / v) as u64))
            .collect();
        let x0 = Tensor::<2>::from_data(TensorData::new(values, [n, v]), &ad);
        let ids: Vec<i64> = (0..n as i64).map(|i| (i * 389 + 7) % v as i64).collect();
        let t = Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [n]), &ad);
        let run = |fused: bool, smoothing: Option<f32>| {
            let x = Tensor::<2>::from_data(x0.to_data(), &ad).require_grad();
            let loss = if fused {
                cross_entropy(x.clone(), t.clone(), smoothing)
            } else {
                reference_cross_entropy(x.clone(), t.clone(), smoothing)
            };
            assert_eq!(loss.dims(), [1]);
            let grads = (loss.clone() * 3.0).backward();
            (host(loss)[0], host(x.grad(&grads).unwrap()))
        };
        let x_host = host(x0.clone());
        for smoothing in [None, Some(0.1)] {
            let (l, g) = run(true, smoothing);
            let (l_exact, g_exact) = exact(&x_host, &ids, v, smoothing.map_or(0.0, f64::from));
            assert!(
                ((f64::from(l) - l_exact) / l_exact).abs() < 1e-6,
                "{smoothing:?}: {l} vs {l_exact}"
            );
            let err = g
                .iter()
                .zip(&g_exact)
                .fold(0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
            assert!(
                err < 2e-7,
                "{smoothing:?}: gradient {err:e} from the exact one"
            );
            let (l_ref, g_ref) = run(false, smoothing);
            assert!(
                ((l - l_ref) / l_ref).abs() < 1e-5,
                "{smoothing:?}: {l} vs Burn's {l_ref}"
            );
            let err = max_diff(&g, &g_ref);
            assert!(err < 3e-6, "{smoothing:?}: gradient {err:e} from Burn's");
        }
        // Smoothing moves the loss by far more than the tolerance: 1e-6 relative.
        let (plain, _) = run(true, None);
        let (smoothed, _) = run(true, Some(0.1));
        assert!(
            ((plain - smoothed) / plain).abs() > 1e-3,
            "{plain} vs {smoothed}"
        );
    }

    /// A target outside the classes is named.
    #[test]
    #[should_panic(expected = "target 5 is outside the 5 classes")]
    fn a_target_outside_the_classes_is_named() {
        let d = Device::flex();
        let x = Tensor::<2>::zeros([2, 5], &d);
        let t = Tensor::<1, Int>::from_data(TensorData::new(vec![1i64, 5], [2]), &d);
        let _ = cross_entropy(x, t, None).into_data();
    }
}
