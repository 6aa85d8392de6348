//! GELU, exact and with the tanh approximation, and SiLU, each as one op forward and one
//! op backward.
//!
//! Composed from Burn's ops, exact GELU is a scalar `erff` call per element on the CPU
//! backends, and GELU-tanh is five element-wise passes (`x · sigmoid(x · (A + B x²))`),
//! each reading and writing the whole tensor, with the sigmoid's exponential a scalar
//! `expf` call; under autodiff each pass records a node and its backward adds as many
//! again. On flex, [`gelu`] and [`gelu_tanh`] run one pass forward and, under autodiff,
//! one pass backward (`grad · gelu'(x)`, derived by hand, from the saved input alone),
//! with the exponential and `erf` as polynomials that the compiler vectorises.
//!
//! - exact: `gelu(x) = x Φ(x)`, `Φ(x) = (1 + erf(x / √2)) / 2`; `gelu'(x) = Φ(x) + x φ(x)`,
//!   `φ(x) = exp(-x² / 2) / √(2π)`. `erf` is Abramowitz and Stegun's 7.1.26 (absolute
//!   error at most 1.5e-7, 5.3e-7 once in f32; Handbook of Mathematical Functions, 1964).
//! - tanh: `gelu(x) = x s`, `s = sigmoid(z)`, `z = x (A + B x²)`, `A = 2 √(2/π)`,
//!   `B = 0.044715 A` (Hendrycks and Gimpel, 2016; `x s` is `x (1 + tanh(z / 2)) / 2`);
//!   `gelu'(x) = s + x s (1 - s) (A + 3 B x²)`.
//! - SiLU: `silu(x) = x s`, `s = sigmoid(x)`; `silu'(x) = s (1 + x (1 - s))` (Elfwing et
//!   al., 2018). Burn's is a sigmoid op (a scalar `expf` per element) and a product, two
//!   recorded ops.
//!
//! Elsewhere, in other float types, or with [`crate::enabled`] off, the same functions
//! compose Burn's ops as before ([`reference_gelu`], [`reference_gelu_tanh`]).

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, backend_extension};
use burn::tensor::activation::{gelu as burn_gelu, sigmoid, silu as burn_silu};
use burn::tensor::{DType, Tensor};

/// `2 √(2/π)`, GELU-tanh's `A`.
pub const TANH_A: f64 = 2.0 * core::f64::consts::FRAC_2_SQRT_PI * core::f64::consts::FRAC_1_SQRT_2;
/// GELU-tanh's `B`, `0.044715 A`.
pub const TANH_B: f64 = TANH_A * 0.044715;

/// Burn's backend extension for the two GELUs and SiLU, forward and backward. Implemented for
/// flex, and for autodiff over it (the backward registered with Burn's autodiff).
#[backend_extension(Flex: cfg(feature = "flex"), Autodiff: cfg(feature = "flex"))]
pub trait GeluOps: Backend {
    /// GELU of every element: exact, or with the tanh approximation when `tanh`.
    fn fused_gelu(x: FloatTensor<Self>, tanh: bool) -> FloatTensor<Self>;
    /// `grad · gelu'(x)`, element by element.
    fn fused_gelu_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        tanh: bool,
    ) -> FloatTensor<Self>;
    /// SiLU of every element, `x · sigmoid(x)`.
    fn fused_silu(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `grad · silu'(x)`, element by element.
    fn fused_silu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// Exact GELU, `x Φ(x)` (BERT's `"gelu"`): one fused pass on flex in f32, Burn's `gelu`
/// elsewhere.
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if takes_kernel(&x) {
        return fused(x, false);
    }
    reference_gelu(x)
}

/// GELU with the tanh approximation (GPT-2's `"gelu_new"`): one fused pass on flex in
/// f32, [`reference_gelu_tanh`] elsewhere.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if takes_kernel(&x) {
        return fused(x, true);
    }
    reference_gelu_tanh(x)
}

/// SiLU, `x · sigmoid(x)` (Llama's `"silu"`, SwiGLU's gate): one fused pass on flex in
/// f32, [`reference_silu`] elsewhere.
pub fn silu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if takes_kernel(&x) {
        use burn::backend::Dispatch;
        return Tensor::from_dispatch(Dispatch::fused_silu(x.into_dispatch()));
    }
    reference_silu(x)
}

/// SiLU from Burn's ops: the reference.
pub fn reference_silu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_silu(x)
}

/// Exact GELU from Burn's ops: the reference.
pub fn reference_gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_gelu(x)
}

/// GELU-tanh from Burn's ops, `x · sigmoid(x · (A + B x²))`: the reference. The same
/// values as Burn's `gelu_approximate` (within float rounding), in cheap element-wise ops
/// where that one takes a `powf` for the cube and a `tanh`.
pub fn reference_gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let z = (x.clone() * x.clone() * TANH_B + TANH_A) * x.clone();
    x * sigmoid(z)
}

fn fused<const D: usize>(x: Tensor<D>, tanh: bool) -> Tensor<D> {
    use burn::backend::Dispatch;
    Tensor::from_dispatch(Dispatch::fused_gelu(x.into_dispatch(), tanh))
}

/// An f32 tensor on flex, tracked by autodiff or not, while the kernels are on.
fn takes_kernel<const D: usize>(x: &Tensor<D>) -> bool {
    x.dtype() == DType::F32 && crate::enabled() && crate::on_flex(x)
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::TensorMetadata;
    use burn::backend::flex::{Flex, FlexTensor, Layout};
    use burn::tensor::{Bytes, DType};
    use rayon::prelude::*;

    use super::GeluOps;
    use crate::flex_contiguous as contiguous;
    use crate::math;

    /// Elements per parallel task.
    const CHUNK: usize = 1 << 14;

    fn output(values: Vec<f32>, like: &FlexTensor) -> FlexTensor {
        FlexTensor::new(
            Bytes::from_elems(values),
            Layout::contiguous(like.shape()),
            DType::F32,
        )
    }

    impl GeluOps for Flex {
        fn fused_gelu(x: FlexTensor, tanh: bool) -> FlexTensor {
            let x = contiguous(x);
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let mut out = vec![0.0f32; xs.len()];
            out.par_chunks_mut(CHUNK)
                .zip(xs.par_chunks(CHUNK))
                .for_each(|(o, x)| {
                    if tanh {
                        math::gelu_tanh(x, o);
                    } else {
                        math::gelu_exact(x, o);
                    }
                });
            output(out, &x)
        }

        fn fused_gelu_backward(x: FlexTensor, grad: FlexTensor, tanh: bool) -> FlexTensor {
            let (x, grad) = (contiguous(x), contiguous(grad));
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let gs = grad.as_slice::<f32>().expect("a contiguous f32 tensor");
            assert_eq!(xs.len(), gs.len(), "GELU's gradient has the input's shape");
            let mut out = vec![0.0f32; xs.len()];
            out.par_chunks_mut(CHUNK)
                .zip(xs.par_chunks(CHUNK).zip(gs.par_chunks(CHUNK)))
                .for_each(|(o, (x, g))| {
                    if tanh {
                        math::gelu_tanh_backward(x, g, o);
                    } else {
                        math::gelu_exact_backward(x, g, o);
                    }
                });
            output(out, &x)
        }

        fn fused_silu(x: FlexTensor) -> FlexTensor {
            let x = contiguous(x);
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let mut out = vec![0.0f32; xs.len()];
            out.par_chunks_mut(CHUNK)
                .zip(xs.par_chunks(CHUNK))
                .for_each(|(o, x)| math::silu(x, o));
            output(out, &x)
        }

        fn fused_silu_backward(x: FlexTensor, grad: FlexTensor) -> FlexTensor {
            let (x, grad) = (contiguous(x), contiguous(grad));
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            let gs = grad.as_slice::<f32>().expect("a contiguous f32 tensor");
            assert_eq!(xs.len(), gs.len(), "SiLU's gradient has the input's shape");
            let mut out = vec![0.0f32; xs.len()];
            out.par_chunks_mut(CHUNK)
                .zip(xs.par_chunks(CHUNK).zip(gs.par_chunks(CHUNK)))
                .for_each(|(o, (x, g))| math::silu_backward(x, g, o));
            output(out, &x)
        }
    }

    mod autodiff {
        use burn::backend::Backend;
        use burn::backend::autodiff::Autodiff;
        use burn::backend::autodiff::checkpoint::base::Checkpointer;
        use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
        use burn::backend::autodiff::grads::Gradients;
        use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
        use burn::backend::tensor::FloatTensor;

        use super::super::GeluOps;

        /// Which activation a recorded op was.
        #[derive(Debug, Clone, Copy)]
        enum Act {
            Gelu,
            GeluTanh,
            Silu,
        }

        #[derive(Debug)]
        struct ActBackward {
            act: Act,
        }

        impl<B: Backend + GeluOps> Backward<B, 1> for ActBackward {
            /// The input, all the derivative needs.
            type State = FloatTensor<B>;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let x = ops.state;
                let act = self.act;
                unary::<B, _>(ops.parents, ops.node, grads, |grad| match act {
                    Act::Gelu => B::fused_gelu_backward(x, grad, false),
                    Act::GeluTanh => B::fused_gelu_backward(x, grad, true),
                    Act::Silu => B::fused_silu_backward(x, grad),
                });
            }
        }

        fn record<B: Backend + GeluOps, C: CheckpointStrategy>(
            x: FloatTensor<Autodiff<B, C>>,
            act: Act,
        ) -> FloatTensor<Autodiff<B, C>> {
            let forward = |x: FloatTensor<B>| match act {
                Act::Gelu => B::fused_gelu(x, false),
                Act::GeluTanh => B::fused_gelu(x, true),
                Act::Silu => B::fused_silu(x),
            };
            match (ActBackward { act })
                .prepare::<C>([x.node()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => {
                    let input = x.primitive().clone();
                    let out = forward(input.clone());
                    prep.finish(input, out)
                }
                OpsKind::UnTracked(prep) => prep.finish(forward(x.into_primitive())),
            }
        }

        impl<B: Backend + GeluOps, C: CheckpointStrategy> GeluOps for Autodiff<B, C> {
            fn fused_gelu(x: FloatTensor<Self>, tanh: bool) -> FloatTensor<Self> {
                record::<B, C>(x, if tanh { Act::GeluTanh } else { Act::Gelu })
            }

            fn fused_silu(x: FloatTensor<Self>) -> FloatTensor<Self> {
                record::<B, C>(x, Act::Silu)
            }

            fn fused_silu_backward(
                _x: FloatTensor<Self>,
                _grad: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                unreachable!("the backward runs on the inner backend, inside autodiff's backward")
            }

            fn fused_gelu_backward(
                _x: FloatTensor<Self>,
                _grad: FloatTensor<Self>,
                _tanh: bool,
            ) -> FloatTensor<Self> {
                unreachable!("the backward runs on the inner backend, inside autodiff's backward")
            }
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use crate::testing::{host, max_diff};
    use burn::tensor::{Device, Distribution, Tensor, TensorData};

    use super::{
        gelu, gelu_tanh, reference_gelu, reference_gelu_tanh, reference_silu, silu, takes_kernel,
    };

    /// Values over the whole range that matters, the tails and zero included.
    fn inputs(device: &Device) -> Tensor<2> {
        let mut v: Vec<f32> = (-1200..=1200).map(|i| i as f32 * 0.01).collect();
        v.extend([-100.0, -30.0, -9.5, 9.5, 30.0, 100.0, 0.0, -0.0]);
        // An odd shape: 3 rows of 803.
        let n = v.len();
        Tensor::<1>::from_data(TensorData::new(v, [n]), device).reshape([3, n / 3])
    }

    /// The fused GELUs and SiLU against Burn's composition, forward and gradient, within
    /// 2e-6 (the polynomial `erf`'s and `exp`'s error, scaled by `x`, and f32 rounding); and
    /// the two GELUs differ by far more (0.00047 at its largest), so a kernel that mixed
    /// them up would fail.
    #[test]
    fn fused_activations_equal_burns_composition_forward_and_backward() {
        let _rng = crate::testing::rng();
        let d = Device::flex();
        let x = inputs(&d);
        assert!(takes_kernel(&x));
        type Activation = fn(Tensor<2>) -> Tensor<2>;
        let pairs: [(&str, Activation, Activation); 3] = [
            ("exact", gelu, reference_gelu),
            ("tanh", gelu_tanh, reference_gelu_tanh),
            ("silu", silu, reference_silu),
        ];
        for (name, ours, reference) in pairs {
            let err = max_diff(&host(ours(x.clone())), &host(reference(x.clone())));
            assert!(err < 2e-6, "{name} forward: {err:e}");
            // Gradients through autodiff: d(sum(gelu(x) · w))/dx = gelu'(x) · w.
            let ad = d.clone().autodiff();
            assert!(takes_kernel(&Tensor::<2>::from_data(x.to_data(), &ad)));
            let w = Tensor::<2>::random(x.dims(), Distribution::Normal(0.0, 1.0), &ad);
            let grad = |f: Activation| {
                let xa = Tensor::<2>::from_data(x.to_data(), &ad).require_grad();
                let loss = (f(xa.clone()) * w.clone()).sum();
                let grads = loss.backward();
                host(xa.grad(&grads).unwrap())
            };
            let (g_ours, g_ref) = (grad(ours), grad(reference));
            let err = max_diff(&g_ours, &g_ref);
            assert!(err < 2e-6, "{name} gradient: {err:e}");
            assert!(
                g_ours.iter().all(|g| g.is_finite()),
                "{name}: a gradient overflowed"
            );
        }
        // Negative control: the two GELUs apart.
        let apart = max_diff(&host(gelu(x.clone())), &host(gelu_tanh(x.clone())));
        assert!(apart > 1e-4, "exact and tanh GELU: {apart}");
    }

    /// A non-contiguous input (a transposed view) gives the same values as its copy.
    #[test]
    fn a_transposed_view_is_read_in_its_order() {
        let _rng = crate::testing::rng();
        let d = Device::flex();
        let x = Tensor::<2>::random([7, 5], Distribution::Normal(0.0, 2.0), &d);
        let view = x.clone().transpose();
        let copy = Tensor::<2>::from_data(view.to_data(), &d);
        assert_eq!(host(gelu(view)), host(gelu(copy)));
    }
}
