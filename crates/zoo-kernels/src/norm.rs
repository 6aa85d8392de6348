//! LayerNorm and RMSNorm as one op forward and one op backward.
//!
//! Burn 0.22.1 runs LayerNorm as one backend op (`layer_norm`), which flex computes in one
//! pass; but its autodiff backend has no backward for it, so in training it falls back to
//! the op's composition: two means, a subtraction, a square, a square root, a division,
//! the scale and the shift, eight recorded ops whose backward passes add as many again,
//! each reading and writing the whole activation. Here the forward is flex's own fused
//! op, and the backward one pass over the rows, derived by hand and recomputing the
//! row's statistics from the saved input:
//!
//! `x̂ = (x - mean) r`, `r = 1 / √(var + ε)` (biased variance), `y = x̂ γ + β`;
//! `dx = r (g γ - mean(g γ) - x̂ mean(g γ x̂))`, `dγ = Σ_rows g x̂`, `dβ = Σ_rows g`.
//!
//! RMSNorm (Burn's `RmsNorm`) is composed of six ops, forward and backward, in inference
//! as in training; [`rms_norm`] is one pass each way on flex:
//!
//! `x̂ = x r`, `r = 1 / √(mean(x²) + ε)`, `y = x̂ γ`; `dx = r (g γ - x̂ mean(g γ x̂))`,
//! `dγ = Σ_rows g x̂`.
//!
//! Elsewhere, in other float types, or with [`crate::enabled`] off, they are Burn's:
//! [`layer_norm`] (also without a shift `β`) is [`burn::tensor::module::layer_norm`],
//! [`rms_norm`] is [`reference_rms_norm`], the same ops as Burn's `RmsNorm`.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, backend_extension};
use burn::tensor::module::layer_norm as burn_layer_norm;
use burn::tensor::{DType, Tensor};

/// Burn's backend extension for LayerNorm with a backward of its own. Implemented for
/// flex, and for autodiff over it (the backward registered with Burn's autodiff).
#[backend_extension(Flex: cfg(feature = "flex"), Autodiff: cfg(feature = "flex"))]
pub trait NormOps: Backend {
    /// LayerNorm over the last axis: `(x - mean) / √(var + epsilon) · gamma + beta`.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
    /// The gradients of `x`, `gamma` and `beta`, from the output's gradient `grad`.
    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
    /// RMSNorm over the last axis: `x / √(mean(x²) + epsilon) · gamma`.
    fn fused_rms_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
    /// The gradients of `x` and `gamma`, from the output's gradient `grad`.
    fn fused_rms_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// RMSNorm over the last axis of `x`: one op forward and one backward on flex in f32,
/// [`reference_rms_norm`] elsewhere.
///
/// # Panics
/// When `gamma` is not as wide as the last axis of `x`.
pub fn rms_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, epsilon: f64) -> Tensor<D> {
    let width = x.dims()[D - 1];
    assert_eq!(
        gamma.dims()[0],
        width,
        "rms_norm: gamma has {} values for rows of {width}",
        gamma.dims()[0]
    );
    if x.dtype() == DType::F32
        && gamma.dtype() == DType::F32
        && crate::enabled()
        && crate::on_flex(&x)
    {
        use burn::backend::Dispatch;
        return Tensor::from_dispatch(Dispatch::fused_rms_norm(
            x.into_dispatch(),
            gamma.into_dispatch(),
            epsilon,
        ));
    }
    reference_rms_norm(x, gamma, epsilon)
}

/// RMSNorm from Burn's ops, as Burn's `RmsNorm` computes it (the mean square in f32):
/// the reference.
pub fn reference_rms_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    epsilon: f64,
) -> Tensor<D> {
    let dtype = x.dtype();
    let rms = (x.clone().cast(DType::F32).square().mean_dim(D - 1) + epsilon).sqrt();
    (x / rms.cast(dtype)) * gamma.unsqueeze()
}

/// LayerNorm over the last axis of `x`, with the biased variance (as torch and Burn):
/// one op forward and one backward on flex in f32 with a shift `beta`; Burn's
/// `layer_norm` elsewhere.
///
/// # Panics
/// When `gamma` or `beta` is not as wide as the last axis of `x`.
pub fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Option<Tensor<1>>,
    epsilon: f64,
) -> Tensor<D> {
    let width = x.dims()[D - 1];
    assert_eq!(
        gamma.dims()[0],
        width,
        "layer_norm: gamma has {} values for rows of {width}",
        gamma.dims()[0]
    );
    match beta {
        Some(beta)
            if x.dtype() == DType::F32
                && gamma.dtype() == DType::F32
                && beta.dtype() == DType::F32
                && crate::enabled()
                && crate::on_flex(&x) =>
        {
            assert_eq!(
                beta.dims()[0],
                width,
                "layer_norm: beta has {} values for rows of {width}",
                beta.dims()[0]
            );
            use burn::backend::Dispatch;
            Tensor::from_dispatch(Dispatch::fused_layer_norm(
                x.into_dispatch(),
                gamma.into_dispatch(),
                beta.into_dispatch(),
                epsilon,
            ))
        }
        beta => burn_layer_norm(x, gamma, beta, epsilon),
    }
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::TensorMetadata;
    use burn::backend::flex::{Flex, FlexTensor, Layout};
    use burn::backend::ops::ModuleOps;
    use burn::tensor::{Bytes, DType};
    use rayon::prelude::*;

    use super::NormOps;
    use crate::flex_contiguous as contiguous;
    use crate::math;

    /// Rows per parallel task.
    const ROWS: usize = 32;

    fn tensor(values: Vec<f32>, shape: burn::tensor::Shape) -> FlexTensor {
        FlexTensor::new(
            Bytes::from_elems(values),
            Layout::contiguous(shape),
            DType::F32,
        )
    }

    impl NormOps for Flex {
        fn fused_layer_norm(
            x: FlexTensor,
            gamma: FlexTensor,
            beta: FlexTensor,
            epsilon: f64,
        ) -> FlexTensor {
            Flex::layer_norm(x, gamma, Some(beta), epsilon)
        }

        fn fused_layer_norm_backward(
            x: FlexTensor,
            gamma: FlexTensor,
            grad: FlexTensor,
            epsilon: f64,
        ) -> (FlexTensor, FlexTensor, FlexTensor) {
            let (x, gamma, grad) = (contiguous(x), contiguous(gamma), contiguous(grad));
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let gs = grad.as_slice::<f32>().expect("a contiguous f32 tensor");
            let w = gamma.as_slice::<f32>().expect("a contiguous f32 tensor");
            let d = w.len();
            assert_eq!(
                xs.len(),
                gs.len(),
                "LayerNorm's gradient has the input's shape"
            );
            assert!(d > 0 && xs.len() % d == 0, "rows of {d} values");
            let mut dx = vec![0.0f32; xs.len()];
            // One partial sum of dγ and dβ per task, added in order: the same bits at
            // every run, whatever the threads' timing.
            let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
                .par_chunks_mut(ROWS * d)
                .zip(xs.par_chunks(ROWS * d).zip(gs.par_chunks(ROWS * d)))
                .map(|(dx, (x, g))| {
                    let (mut dg, mut db) = (vec![0.0f32; d], vec![0.0f32; d]);
                    math::layer_norm_backward(x, g, w, epsilon as f32, dx, &mut dg, &mut db);
                    (dg, db)
                })
                .collect();
            let (mut dgamma, mut dbeta) = (vec![0.0f32; d], vec![0.0f32; d]);
            for (dg, db) in &partials {
                for (a, b) in dgamma.iter_mut().zip(dg) {
                    *a += b;
                }
                for (a, b) in dbeta.iter_mut().zip(db) {
                    *a += b;
                }
            }
            (
                tensor(dx, x.shape()),
                tensor(dgamma, gamma.shape()),
                tensor(dbeta, gamma.shape()),
            )
        }

        fn fused_rms_norm(x: FlexTensor, gamma: FlexTensor, epsilon: f64) -> FlexTensor {
            let (x, gamma) = (contiguous(x), contiguous(gamma));
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let w = gamma.as_slice::<f32>().expect("a contiguous f32 tensor");
            let d = w.len();
            assert!(d > 0 && xs.len() % d == 0, "rows of {d} values");
            let mut out = vec![0.0f32; xs.len()];
            out.par_chunks_mut(ROWS * d)
                .zip(xs.par_chunks(ROWS * d))
                .for_each(|(o, x)| math::rms_norm(x, w, epsilon as f32, o));
            tensor(out, x.shape())
        }

        fn fused_rms_norm_backward(
            x: FlexTensor,
            gamma: FlexTensor,
            grad: FlexTensor,
            epsilon: f64,
        ) -> (FlexTensor, FlexTensor) {
            let (x, gamma, grad) = (contiguous(x), contiguous(gamma), contiguous(grad));
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let gs = grad.as_slice::<f32>().expect("a contiguous f32 tensor");
            let w = gamma.as_slice::<f32>().expect("a contiguous f32 tensor");
            let d = w.len();
            assert_eq!(
                xs.len(),
                gs.len(),
                "RMSNorm's gradient has the input's shape"
            );
            assert!(d > 0 && xs.len() % d == 0, "rows of {d} values");
            let mut dx = vec![0.0f32; xs.len()];
            let partials: Vec<Vec<f32>> = dx
                .par_chunks_mut(ROWS * d)
                .zip(xs.par_chunks(ROWS * d).zip(gs.par_chunks(ROWS * d)))
                .map(|(dx, (x, g))| {
                    let mut dg = vec![0.0f32; d];
                    math::rms_norm_backward(x, g, w, epsilon as f32, dx, &mut dg);
                    dg
                })
                .collect();
            let mut dgamma = vec![0.0f32; d];
            for dg in &partials {
                for (a, b) in dgamma.iter_mut().zip(dg) {
                    *a += b;
                }
            }
            (tensor(dx, x.shape()), tensor(dgamma, gamma.shape()))
        }
    }

    mod autodiff {
        use burn::backend::Backend;
        use burn::backend::autodiff::Autodiff;
        use burn::backend::autodiff::checkpoint::base::Checkpointer;
        use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
        use burn::backend::autodiff::grads::Gradients;
        use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
        use burn::backend::tensor::FloatTensor;

        use super::super::NormOps;

        #[derive(Debug)]
        struct LayerNormBackward {
            epsilon: f64,
        }

        impl<B: Backend + NormOps> Backward<B, 3> for LayerNormBackward {
            /// The input and the scale: the statistics are recomputed from them.
            type State = (FloatTensor<B>, FloatTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let (x, gamma) = ops.state;
                let grad = grads.consume::<B>(&ops.node);
                let (dx, dgamma, dbeta) =
                    B::fused_layer_norm_backward(x, gamma, grad, self.epsilon);
                let [node_x, node_gamma, node_beta] = ops.parents;
                for (node, g) in [(node_x, dx), (node_gamma, dgamma), (node_beta, dbeta)] {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }

        #[derive(Debug)]
        struct RmsNormBackward {
            epsilon: f64,
        }

        impl<B: Backend + NormOps> Backward<B, 2> for RmsNormBackward {
            /// The input and the scale.
            type State = (FloatTensor<B>, FloatTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 2>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let (x, gamma) = ops.state;
                let grad = grads.consume::<B>(&ops.node);
                let (dx, dgamma) = B::fused_rms_norm_backward(x, gamma, grad, self.epsilon);
                let [node_x, node_gamma] = ops.parents;
                for (node, g) in [(node_x, dx), (node_gamma, dgamma)] {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }

        impl<B: Backend + NormOps, C: CheckpointStrategy> NormOps for Autodiff<B, C> {
            fn fused_rms_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                epsilon: f64,
            ) -> FloatTensor<Self> {
                match (RmsNormBackward { epsilon })
                    .prepare::<C>([x.node(), gamma.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => {
                        let (xp, gp) = (x.primitive().clone(), gamma.primitive().clone());
                        let out = B::fused_rms_norm(xp.clone(), gp.clone(), epsilon);
                        prep.finish((xp, gp), out)
                    }
                    OpsKind::UnTracked(prep) => prep.finish(B::fused_rms_norm(
                        x.into_primitive(),
                        gamma.into_primitive(),
                        epsilon,
                    )),
                }
            }

            fn fused_rms_norm_backward(
                _x: FloatTensor<Self>,
                _gamma: FloatTensor<Self>,
                _grad: FloatTensor<Self>,
                _epsilon: f64,
            ) -> (FloatTensor<Self>, FloatTensor<Self>) {
                unreachable!("the backward runs on the inner backend, inside autodiff's backward")
            }

            fn fused_layer_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                beta: FloatTensor<Self>,
                epsilon: f64,
            ) -> FloatTensor<Self> {
                match (LayerNormBackward { epsilon })
                    .prepare::<C>([x.node(), gamma.node(), beta.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => {
                        let (xp, gp) = (x.primitive().clone(), gamma.primitive().clone());
                        let out = B::fused_layer_norm(
                            xp.clone(),
                            gp.clone(),
                            beta.into_primitive(),
                            epsilon,
                        );
                        prep.finish((xp, gp), out)
                    }
                    OpsKind::UnTracked(prep) => prep.finish(B::fused_layer_norm(
                        x.into_primitive(),
                        gamma.into_primitive(),
                        beta.into_primitive(),
                        epsilon,
                    )),
                }
            }

            fn fused_layer_norm_backward(
                _x: FloatTensor<Self>,
                _gamma: FloatTensor<Self>,
                _grad: FloatTensor<Self>,
                _epsilon: f64,
            ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
                unreachable!("the backward runs on the inner backend, inside autodiff's backward")
            }
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use crate::testing::{host, max_rel};
    use burn::tensor::module::layer_norm as burn_layer_norm;
    use burn::tensor::{Device, Distribution, Tensor};

    use super::{layer_norm, reference_rms_norm, rms_norm};

    /// Values, and the gradients of the input, the scale and the shift, against Burn's
    /// composition under autodiff, on an odd shape (3 · 37 rows of 75, not a multiple of
    /// the tasks' rows nor of the vector lanes), rows with an offset far larger than their
    /// spread included: within 2e-5 of the largest value (f32 rounding of the means over
    /// 75 and 111 values). Negative control: another epsilon moves the gradient by more.
    #[test]
    fn fused_layer_norm_equals_burns_composition_forward_and_backward() {
        let _rng = crate::testing::rng();
        let ad = Device::flex().autodiff();
        let shape = [3, 37, 75];
        let x0 = Tensor::<3>::random(shape, Distribution::Normal(0.0, 2.0), &ad)
            + Tensor::<3>::random([3, 37, 1], Distribution::Uniform(-50.0, 50.0), &ad);
        let g0 = Tensor::<1>::random([75], Distribution::Normal(1.0, 0.5), &ad);
        let b0 = Tensor::<1>::random([75], Distribution::Normal(0.0, 0.5), &ad);
        let w = Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), &ad);
        let run = |fused: bool, eps: f64| {
            let x = Tensor::<3>::from_data(x0.to_data(), &ad).require_grad();
            let g = Tensor::<1>::from_data(g0.to_data(), &ad).require_grad();
            let b = Tensor::<1>::from_data(b0.to_data(), &ad).require_grad();
            let y = if fused {
                layer_norm(x.clone(), g.clone(), Some(b.clone()), eps)
            } else {
                burn_layer_norm(x.clone(), g.clone(), Some(b.clone()), eps)
            };
            let grads = (y.clone() * w.clone()).sum().backward();
            [
                host(y),
                host(x.grad(&grads).unwrap()),
                host(g.grad(&grads).unwrap()),
                host(b.grad(&grads).unwrap()),
            ]
        };
        let ours = run(true, 1e-5);
        let reference = run(false, 1e-5);
        for (name, (a, b)) in ["y", "dx", "dgamma", "dbeta"]
            .iter()
            .zip(ours.iter().zip(&reference))
        {
            let err = max_rel(a, b);
            assert!(err < 2e-5, "{name}: {err:e}");
        }
        // A row of spread 2 and epsilon 1 against 1e-5: the normalised values move by
        // a fifth, the gradient with them.
        let other = run(true, 1.0);
        assert!(max_rel(&other[1], &reference[1]) > 1e-2);
    }

    /// Only the input tracked (a frozen scale and shift, as under LoRA): the input's
    /// gradient as Burn's; and without autodiff, the values as Burn's.
    #[test]
    fn untracked_parameters_and_plain_flex() {
        let _rng = crate::testing::rng();
        let d = Device::flex();
        let x = Tensor::<2>::random([5, 9], Distribution::Normal(0.0, 1.0), &d);
        let g = Tensor::<1>::random([9], Distribution::Normal(1.0, 0.5), &d);
        let b = Tensor::<1>::random([9], Distribution::Normal(0.0, 0.5), &d);
        let plain = host(layer_norm(x.clone(), g.clone(), Some(b.clone()), 1e-6));
        let want = host(burn_layer_norm(x.clone(), g.clone(), Some(b.clone()), 1e-6));
        assert!(max_rel(&plain, &want) < 1e-6);
        let ad = d.autodiff();
        let w = Tensor::<2>::random([5, 9], Distribution::Normal(0.0, 1.0), &ad);
        let dx = |fused: bool| {
            let xa = Tensor::<2>::from_data(x.to_data(), &ad).require_grad();
            let ga = Tensor::<1>::from_data(g.to_data(), &ad);
            let ba = Tensor::<1>::from_data(b.to_data(), &ad);
            let y = if fused {
                layer_norm(xa.clone(), ga, Some(ba), 1e-6)
            } else {
                burn_layer_norm(xa.clone(), ga, Some(ba), 1e-6)
            };
            let grads = (y * w.clone()).sum().backward();
            host(xa.grad(&grads).unwrap())
        };
        let (ours, reference) = (dx(true), dx(false));
        assert!(
            max_rel(&ours, &reference) < 2e-5,
            "{ours:?} vs {reference:?}"
        );
    }

    /// RMSNorm's values and the gradients of its input and scale against Burn's
    /// composition, on an odd shape, within 2e-5 of the largest value; and, as a negative
    /// control, another epsilon moves the input's gradient by more.
    #[test]
    fn fused_rms_norm_equals_burns_composition_forward_and_backward() {
        let _rng = crate::testing::rng();
        let ad = Device::flex().autodiff();
        let shape = [2, 41, 67];
        let x0 = Tensor::<3>::random(shape, Distribution::Normal(0.5, 2.0), &ad);
        let g0 = Tensor::<1>::random([67], Distribution::Normal(1.0, 0.5), &ad);
        let w = Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), &ad);
        let run = |fused: bool, eps: f64| {
            let x = Tensor::<3>::from_data(x0.to_data(), &ad).require_grad();
            let g = Tensor::<1>::from_data(g0.to_data(), &ad).require_grad();
            let y = if fused {
                rms_norm(x.clone(), g.clone(), eps)
            } else {
                reference_rms_norm(x.clone(), g.clone(), eps)
            };
            let grads = (y.clone() * w.clone()).sum().backward();
            [
                host(y),
                host(x.grad(&grads).unwrap()),
                host(g.grad(&grads).unwrap()),
            ]
        };
        let ours = run(true, 1e-6);
        let reference = run(false, 1e-6);
        for (name, (a, b)) in ["y", "dx", "dgamma"]
            .iter()
            .zip(ours.iter().zip(&reference))
        {
            let err = max_rel(a, b);
            assert!(err < 2e-5, "{name}: {err:e}");
        }
        let other = run(true, 1.0);
        assert!(max_rel(&other[1], &reference[1]) > 1e-2);
        // Without autodiff: the same values.
        let d = Device::flex();
        let x = Tensor::<3>::from_data(x0.to_data(), &d);
        let g = Tensor::<1>::from_data(g0.to_data(), &d);
        let plain = host(rms_norm(x.clone(), g.clone(), 1e-6));
        assert!(max_rel(&plain, &host(reference_rms_norm(x, g, 1e-6))) < 2e-6);
    }
}
