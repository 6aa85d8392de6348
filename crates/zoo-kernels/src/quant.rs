//! The product of f32 activations with a weight that Burn quantized.
//!
//! [`linear`] is `x · W + b` for a weight `W` `[K, N]` of any kind. When `W` holds Burn's
//! quantized values on flex, and `x` is an f32 tensor outside autodiff, the product runs
//! through [`QuantLinearOps::quantized_matmul`]:
//!
//! - up to [`FUSED_MAX_ROWS`] rows (a decoding step): each row of `W` is read once, as
//!   its 8-bit values, and multiplied in with its scales, `y[m, n] += x[m, k] · s · q[k,
//!   n]`, over column panels in parallel; no f32 copy of `W` is made.
//! - more rows (a prompt, a batch): `W` is dequantized in one vectorised pass, one block
//!   of values per scale, then multiplied by flex's own matrix product.
//!
//! Both equal Burn's dequantize-then-multiply (`Tensor::matmul` on the quantized weight,
//! the reference, and the path everywhere else) up to the order of the f32 additions.

use burn::backend::tensor::{FloatTensor, QuantizedTensor};
use burn::backend::{Backend, backend_extension};
use burn::tensor::{DType, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most rows that take the fused product; more take the dequantizing one.
pub const FUSED_MAX_ROWS: usize = 8;

/// Burn's backend extension: the product of `x` `[M, K]` (f32) with the quantized `w`
/// `[K, N]`, `[M, N]` in f32. Implemented for flex; on the other backends [`linear`]
/// keeps Burn's own product and never calls it.
#[backend_extension(Flex: cfg(feature = "flex"))]
pub trait QuantLinearOps: Backend {
    /// `x · dequantize(w)`, `[M, K] x [K, N] -> [M, N]`.
    fn quantized_matmul(x: FloatTensor<Self>, w: QuantizedTensor<Self>) -> FloatTensor<Self>;
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// How many products [`linear`] has sent to the kernel in this process: what tests and
/// benchmarks read to tell that it ran.
pub fn kernel_calls() -> usize {
    CALLS.load(Ordering::Relaxed)
}

/// `x · weight + bias` for `x` `[M, K]` and `weight` `[K, N]`: a linear layer.
///
/// A quantized weight on flex takes the zoo's product (this module's documentation);
/// every other case, and every case while [`crate::enabled`] is off, takes Burn's
/// `linear`.
///
/// # Panics
/// When `x`'s last dimension is not `weight`'s first, as Burn's `Linear` does.
pub fn linear(x: Tensor<2>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<2> {
    let [_, k] = x.dims();
    let [k_w, _] = weight.dims();
    assert_eq!(
        k, k_w,
        "a linear layer of {k_w} inputs was given rows of {k} values"
    );
    if takes_kernel(&x, &weight) {
        use burn::backend::Dispatch;
        CALLS.fetch_add(1, Ordering::Relaxed);
        let y = Tensor::<2>::from_dispatch(Dispatch::quantized_matmul(
            x.into_dispatch(),
            weight.into_dispatch(),
        ));
        return match bias {
            Some(b) => y + b.unsqueeze(),
            None => y,
        };
    }
    burn::tensor::module::linear(x, weight, bias)
}

/// Whether `weight` is quantized, and both tensors are flex tensors outside autodiff with
/// `x` in f32.
fn takes_kernel(x: &Tensor<2>, weight: &Tensor<2>) -> bool {
    if !matches!(weight.dtype(), DType::QFloat(_)) || x.dtype() != DType::F32 {
        return false;
    }
    if !crate::enabled() {
        return false;
    }
    on_flex(x) && on_flex(weight)
}

/// A flex tensor outside autodiff.
fn on_flex(t: &Tensor<2>) -> bool {
    crate::on_flex(t) && !t.device().is_autodiff()
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::TensorMetadata;
    use burn::backend::flex::{Flex, FlexQTensor, FlexTensor, Layout};
    use burn::backend::ops::{FloatTensorOps, QTensorOps};
    use burn::tensor::quantization::global_scale_dtype;
    use burn::tensor::{Bytes, DType, FloatDType, Shape};
    use rayon::prelude::*;

    use super::{FUSED_MAX_ROWS, QuantLinearOps};
    use crate::flex_contiguous as contiguous;

    impl QuantLinearOps for Flex {
        fn quantized_matmul(x: FlexTensor, w: FlexQTensor) -> FlexTensor {
            match Packed::of(&w) {
                Some(packed) if x.dtype() == DType::F32 && x.shape().num_dims() == 2 => {
                    let [m, k] = [x.shape()[0], x.shape()[1]];
                    assert_eq!(k, packed.k, "[{m}, {k}] x [{}, {}]", packed.k, packed.n);
                    let x = contiguous(x);
                    let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
                    if m <= FUSED_MAX_ROWS {
                        let y = packed.fused(xs, m);
                        FlexTensor::new(
                            Bytes::from_elems(y),
                            Layout::contiguous(Shape::new([m, packed.n])),
                            DType::F32,
                        )
                    } else {
                        let w = FlexTensor::new(
                            Bytes::from_elems(packed.dequantize()),
                            Layout::contiguous(Shape::new([packed.k, packed.n])),
                            DType::F32,
                        );
                        <Flex as FloatTensorOps<Flex>>::float_matmul(x, w)
                    }
                }
                // A layout the kernel does not take: Burn's own path.
                _ => {
                    let w = <Flex as QTensorOps<Flex>>::dequantize(w, FloatDType::F32);
                    <Flex as FloatTensorOps<Flex>>::float_matmul(x, w)
                }
            }
        }
    }

    /// A 2-D quantized weight as the kernel reads it: the values row-major `[k, n]`, and
    /// one scale per block of `bk` rows by `bn` columns, the blocks row-major.
    pub(super) struct Packed<'a> {
        values: FlexTensor,
        scales: &'a [f32],
        pub(super) k: usize,
        pub(super) n: usize,
        bk: usize,
        bn: usize,
    }

    impl<'a> Packed<'a> {
        /// `None` for what the kernel does not take: not 2-D, a two-level scheme (a
        /// per-tensor scale over block scales), or blocks that do not tile the tensor.
        pub(super) fn of(w: &'a FlexQTensor) -> Option<Self> {
            let DType::QFloat(scheme) = w.dtype() else {
                return None;
            };
            let shape = w.shape();
            if shape.num_dims() != 2 || global_scale_dtype(&scheme).is_some() {
                return None;
            }
            let (k, n) = (shape[0], shape[1]);
            let (bk, bn) = match scheme.block_size() {
                None => (k, n),
                Some(block) => {
                    let dims = block.to_dim_vec(2);
                    (usize::from(dims[0]), usize::from(dims[1]))
                }
            };
            if bk == 0 || bn == 0 || k % bk != 0 || n % bn != 0 {
                return None;
            }
            let blocks = (k / bk) * (n / bn);
            let scales = w.scales();
            if scales.len() != blocks {
                return None;
            }
            let values = w.tensor().clone();
            let values = if values.as_slice::<i8>().is_some() {
                values
            } else {
                values.to_contiguous()
            };
            Some(Self {
                values,
                scales,
                k,
                n,
                bk,
                bn,
            })
        }

        fn q(&self) -> &[i8] {
            self.values.as_slice::<i8>().expect("contiguous i8 values")
        }

        /// The scales of row `r`, one per `bn` columns.
        fn row_scales(&self, r: usize) -> &[f32] {
            let nb = self.n / self.bn;
            let start = (r / self.bk) * nb;
            &self.scales[start..start + nb]
        }

        /// `x` `[m, k]` times the weight, by rows of the weight, over column panels in
        /// parallel: `[m, n]`.
        pub(super) fn fused(&self, x: &[f32], m: usize) -> Vec<f32> {
            let (k, n, bn) = (self.k, self.n, self.bn);
            let q = self.q();
            // Panels of whole blocks, about 256 columns, at least one block.
            let per_panel = (256 / bn).max(1) * bn;
            let panels: Vec<(usize, usize)> = (0..n)
                .step_by(per_panel)
                .map(|c0| (c0, (c0 + per_panel).min(n)))
                .collect();
            let parts: Vec<Vec<f32>> = panels
                .par_iter()
                .map(|&(c0, c1)| {
                    let w = c1 - c0;
                    let mut acc = vec![0.0f32; m * w];
                    for r in 0..k {
                        let q_row = &q[r * n + c0..r * n + c1];
                        let s_row = &self.row_scales(r)[c0 / bn..c1 / bn];
                        for (mi, out) in acc.chunks_exact_mut(w).enumerate() {
                            let xv = x[mi * k + r];
                            if xv == 0.0 {
                                continue;
                            }
                            crate::math::axpy_blocks(out, q_row, s_row, xv, bn);
                        }
                    }
                    acc
                })
                .collect();
            let mut y = vec![0.0f32; m * n];
            for (&(c0, c1), part) in panels.iter().zip(&parts) {
                let w = c1 - c0;
                for mi in 0..m {
                    y[mi * n + c0..mi * n + c1].copy_from_slice(&part[mi * w..(mi + 1) * w]);
                }
            }
            y
        }

        /// The weight in f32, `[k, n]`, rows in parallel.
        pub(super) fn dequantize(&self) -> Vec<f32> {
            let (n, bn) = (self.n, self.bn);
            let q = self.q();
            let mut out = vec![0.0f32; self.k * n];
            out.par_chunks_mut(n).enumerate().for_each(|(r, row)| {
                crate::math::scale_blocks(row, &q[r * n..(r + 1) * n], self.row_scales(r), bn);
            });
            out
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::tensor::quantization::{
        Calibration, QuantScheme, QuantValue, ScaleDtype, compute_q_params, compute_range,
    };
    use burn::tensor::{Device, Distribution, Tensor};

    use super::{FUSED_MAX_ROWS, linear, takes_kernel};

    fn device() -> Device {
        Device::flex()
    }

    fn quantize(w: &Tensor<2>, value: QuantValue, block: Option<u8>) -> Tensor<2> {
        let base = QuantScheme::default().with_value(value);
        let scheme = match block {
            Some(b) => base.per_block([b], ScaleDtype::F32),
            None => base.per_tensor(ScaleDtype::F32),
        };
        let range = compute_range(&scheme, w, &Calibration::MinMax);
        w.clone()
            .quantize(&scheme, compute_q_params(&scheme, range))
    }

    fn host(t: Tensor<2>) -> Vec<f32> {
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    }

    /// Largest difference over the largest magnitude of `want`.
    fn rel_diff(got: &[f32], want: &[f32]) -> f32 {
        assert_eq!(got.len(), want.len());
        let peak = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        diff / peak
    }

    /// Both products of the kernel (the fused one up to `FUSED_MAX_ROWS` rows, the
    /// dequantizing one above) against Burn's dequantize-then-multiply, on odd shapes,
    /// 8- and 4-bit values, blocks and one scale per tensor.
    #[test]
    fn equals_burns_product_on_flex() {
        let _rng = crate::testing::rng();
        let d = device();
        // (k, n, block): n a multiple of the block; 40 inputs, odd row counts.
        let cases = [(40, 96, Some(32)), (24, 40, Some(8)), (40, 72, None)];
        for (k, n, block) in cases {
            let w = Tensor::<2>::random([k, n], Distribution::Normal(0.0, 0.5), &d);
            let b = Tensor::<1>::random([n], Distribution::Normal(0.0, 0.5), &d);
            for value in [QuantValue::Q8S, QuantValue::Q4S] {
                let wq = quantize(&w, value, block);
                for m in [1, 3, FUSED_MAX_ROWS, FUSED_MAX_ROWS + 1, 37] {
                    let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), &d);
                    assert!(takes_kernel(&x, &wq), "the kernel applies to {m} x {k}");
                    let got = host(linear(x.clone(), wq.clone(), Some(b.clone())));
                    let want = host(x.clone().matmul(wq.clone()) + b.clone().unsqueeze());
                    let err = rel_diff(&got, &want);
                    assert!(
                        err < 1e-5,
                        "{value:?} block {block:?}, {m} x {k} x {n}: {err:e} from Burn's product"
                    );
                    // Negative control: the float weight's product differs by far more,
                    // so the comparison above sees quantized values, not the float ones.
                    let float = host(x.matmul(w.clone()) + b.clone().unsqueeze());
                    assert!(
                        rel_diff(&got, &float) > 1e-3,
                        "{value:?} block {block:?}, {m} rows: the quantized product equals the float one"
                    );
                }
            }
        }
    }

    /// A float weight, an autodiff input and the switch off all keep Burn's own product.
    #[test]
    fn other_cases_keep_burns_product() {
        let _rng = crate::testing::rng();
        let d = device();
        let w = Tensor::<2>::random([16, 32], Distribution::Normal(0.0, 0.5), &d);
        let x = Tensor::<2>::random([2, 16], Distribution::Normal(0.0, 1.0), &d);
        assert!(!takes_kernel(&x, &w), "a float weight");
        let wq = quantize(&w, QuantValue::Q8S, Some(32));
        let ad = d.clone().autodiff();
        let x_ad = Tensor::<2>::from_data(x.to_data(), &ad).require_grad();
        let wq_ad = Tensor::<2>::from_data(wq.to_data(), &ad);
        assert!(!takes_kernel(&x_ad, &wq_ad), "an autodiff input");
        let got = host(linear(x_ad.clone(), wq_ad, None));
        let want = host(x.matmul(wq));
        assert!(rel_diff(&got, &want) < 1e-6);
    }

    #[test]
    #[should_panic(expected = "a linear layer of 16 inputs was given rows of 8 values")]
    fn a_wrong_width_is_named() {
        let d = device();
        let w = Tensor::<2>::zeros([16, 32], &d);
        let _ = linear(Tensor::<2>::zeros([2, 8], &d), w, None);
    }
}
