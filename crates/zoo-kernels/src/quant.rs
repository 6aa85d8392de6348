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
//!
//! Burn 0.22.1's flex keeps every quantized value in a byte of its own, so a 4-bit weight
//! weighs as an 8-bit one there. [`PackedQ4`] holds a 4-bit weight two values to a byte
//! with its scales, as a [`Reparameterization`] of the weight's parameter ([`pack_q4`]):
//! the parameter's stored base becomes one value broadcast to the weight's shape, and its
//! value (`Param::val`) is the Burn quantized tensor that the packed values stand for, so
//! whatever reads the weight reads what it read before packing. [`linear_q4`] runs the
//! products above on the packed values, unpacking one row of a panel at a time.

use burn::backend::tensor::{FloatTensor, IntTensor, QuantizedTensor};
use burn::backend::{Backend, backend_extension};
use burn::module::{Module, Param, ParamId, Reparameterization};
use burn::tensor::quantization::{
    QuantScheme, QuantStore, QuantValue, QuantizedBytes, ScaleDtype, global_scale_dtype,
};
use burn::tensor::{DType, Int, Tensor, TensorData};
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
    /// `x · W`, `[M, K] x [K, N] -> [M, N]`, for the weight `W` of [`PackedQ4`]: `values`
    /// `[K, N / 2]` bytes, two 4-bit values each, and `scales` `[K / bk, N / bn]`.
    fn packed_q4_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: FloatTensor<Self>,
    ) -> FloatTensor<Self>;
    /// `w` with its values held in memory of their own length ([`compact`]).
    fn quantized_compact(w: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
    /// The 2-D 4-bit weight `w` `[K, N]` as [`PackedQ4`] holds it: `values` `[K, N / 2]`
    /// bytes, two values each, and `scales` `[K / bk, N / bn]` f32, read from `w`'s own
    /// store ([`pack_q4`] checks the scheme first).
    fn quantized_pack_q4(w: QuantizedTensor<Self>) -> (IntTensor<Self>, FloatTensor<Self>);
}

/// `weight` with its quantized values held in an allocation of their length: the same
/// tensor, values and scales. Flex, making a quantized tensor from its data (a checkpoint
/// of quantized weights, or weights quantized as they are read), splits the scales off
/// the end of the values' vector and keeps the vector's whole capacity, 1/8 more than the
/// values for 8-bit values with blocks of 32. Other tensors, backends and autodiff are
/// returned as they are.
pub fn compact<const D: usize>(weight: Tensor<D>) -> Tensor<D> {
    if !matches!(weight.dtype(), DType::QFloat(_))
        || weight.device().is_autodiff()
        || !crate::on_flex(&weight)
    {
        return weight;
    }
    use burn::backend::Dispatch;
    Tensor::<D>::from_dispatch(Dispatch::quantized_compact(weight.into_dispatch()))
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

/// A linear weight `[K, N]` of 4-bit values held two to a byte, with its scales: the
/// [`Reparameterization`] that [`pack_q4`] attaches to the weight's parameter.
///
/// Its value is the Burn quantized tensor it was packed from ([`Self::quantized`]), the
/// same values, scales and scheme; [`linear_q4`] multiplies by it without rebuilding it.
#[derive(Module, Debug)]
pub struct PackedQ4 {
    /// `[K, N / 2]` bytes (`u8`): column `2j` in the low four bits, `2j + 1` in the high
    /// four, each a signed value in two's complement.
    pub values: Param<Tensor<2, Int>>,
    /// `[K / bk, N / bn]` f32: one scale per block of `bk` rows by `bn` columns, the
    /// blocks row-major (`bk = K`, `bn = N` for one scale per tensor; else `bk = 1`).
    pub scales: Param<Tensor<2>>,
}

thread_local! {
    static DETACHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Reparameterization for PackedQ4 {
    const NAME: &'static str = "packed_q4";

    /// The Burn quantized weight, whatever the base (a broadcast zero of its shape);
    /// the base itself inside [`detaching`].
    fn apply<const D: usize>(&self, base: Tensor<D>) -> Tensor<D> {
        if DETACHING.with(std::cell::Cell::get) {
            return base;
        }
        self.quantized().reshape(base.dims())
    }
}

/// Runs `f` with every [`PackedQ4`]'s value its base: `Module::materialize` then drops
/// the packed weights and leaves their bases, without rebuilding (and dequantizing) each
/// weight, so that a caller can put Burn's quantized tensors in their place
/// ([`PackedQ4::quantized_from`]).
pub fn detaching<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            DETACHING.with(|d| d.set(self.0));
        }
    }
    let _reset = Reset(DETACHING.with(|d| d.replace(true)));
    f()
}

impl PackedQ4 {
    /// `[K, N]`.
    pub fn dims(&self) -> [usize; 2] {
        let [k, half] = self.values.lazy_shape().dims();
        [k, 2 * half]
    }

    /// The bytes it holds: the packed values and the scales.
    pub fn bytes(&self) -> usize {
        let [k, n] = self.dims();
        let scales: usize = self.scales.lazy_shape().num_elements();
        k * n / 2 + scales * 4
    }

    /// The weight as Burn's quantized tensor, values one per byte: what it was packed
    /// from, rebuilt on the host (for the backends and cases that the kernel does not
    /// take, and for saving).
    pub fn quantized(&self) -> Tensor<2> {
        Self::quantized_from(self.values.val(), self.scales.val())
    }

    /// The scheme of a weight `[k, n]` with scales `[sk, sn]`: Burn's symmetric 4-bit
    /// values, one byte each, with f32 scales per tensor (`[1, 1]`) or per block of a row.
    pub fn scheme(dims: [usize; 2], scales: [usize; 2]) -> QuantScheme {
        let base = QuantScheme::default()
            .with_value(QuantValue::Q4S)
            .with_store(QuantStore::Native);
        match scales {
            [1, 1] => base.per_tensor(ScaleDtype::F32),
            [_, sn] => base.per_block(
                [u8::try_from(dims[1] / sn).unwrap_or(u8::MAX)],
                ScaleDtype::F32,
            ),
        }
    }

    /// [`Self::quantized`] of the packed `values` `[K, N / 2]` and `scales` of a
    /// [`PackedQ4`].
    pub fn quantized_from(values: Tensor<2, Int>, scales: Tensor<2>) -> Tensor<2> {
        let device = values.device();
        let [k, half] = values.dims();
        let n = 2 * half;
        let scheme = Self::scheme([k, n], scales.dims());
        let bytes = values
            .into_data()
            .try_into_vec::<u8>()
            .expect("packed 4-bit values are bytes");
        let mut q = vec![0i8; k * n];
        crate::math::unpack_q4(&mut q, &bytes);
        let scales = scales
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32 scales");
        let data = TensorData::quantized(q, [k, n], scheme, &scales, None);
        Tensor::from_data(data, &device)
    }
}

/// The base of a packed weight of `dims`: one zero broadcast to that shape, which holds
/// one value. Made at its rank: reshaping a broadcast view copies it whole.
pub fn packed_base<const D: usize>(dims: [usize; D], device: &burn::tensor::Device) -> Tensor<D> {
    Tensor::<D>::zeros([1; D], device).expand(dims)
}

/// `weight` packed two 4-bit values to a byte: the base to store in its parameter (one
/// zero broadcast to its shape) and the [`PackedQ4`] to attach to it. `None` when the
/// weight is not a 2-D Burn quantized tensor of 4-bit values with f32 scales, one per
/// tensor or per block of a row, or when its width is odd.
pub fn pack_q4(weight: &Tensor<2>) -> Option<(Tensor<2>, PackedQ4)> {
    let DType::QFloat(scheme) = weight.dtype() else {
        return None;
    };
    let [k, n] = weight.dims();
    let (bk, bn) = match scheme.block_size() {
        None => (k, n),
        Some(block) => match block.to_dim_vec(2)[..] {
            [1, b] => (1, usize::from(b)),
            _ => return None,
        },
    };
    if k == 0 || n % 2 != 0 || bn == 0 || n % bn != 0 {
        return None;
    }
    // Only the scheme that unpacking rebuilds: 4-bit symmetric values, f32 scales.
    if scheme != PackedQ4::scheme([k, n], [k / bk, n / bn]) || global_scale_dtype(&scheme).is_some()
    {
        return None;
    }
    let device = weight.device();
    let (values, scales) = if crate::on_flex(weight) && !device.is_autodiff() {
        // Straight from flex's store: no copy of the values one to a byte.
        use burn::backend::Dispatch;
        let (values, scales) = Dispatch::quantized_pack_q4(weight.clone().into_dispatch());
        (
            Tensor::<2, Int>::from_dispatch(values),
            Tensor::<2>::from_dispatch(scales),
        )
    } else {
        pack_q4_on_host(weight, [k / bk, n / bn])
    };
    Some((
        packed_base([k, n], &device),
        PackedQ4 {
            values: Param::initialized(ParamId::new(), values),
            scales: Param::initialized(ParamId::new(), scales),
        },
    ))
}

/// [`pack_q4`]'s values and scales (`[sk, sn]`) through the weight's data, for the
/// backends other than flex.
fn pack_q4_on_host(weight: &Tensor<2>, [sk, sn]: [usize; 2]) -> (Tensor<2, Int>, Tensor<2>) {
    let DType::QFloat(scheme) = weight.dtype() else {
        unreachable!("pack_q4 takes quantized weights only");
    };
    let [k, n] = weight.dims();
    let device = weight.device();
    let data = weight.to_data();
    let shape = data.shape().clone();
    let (q, scales) = QuantizedBytes {
        bytes: data.into_bytes(),
        scheme,
        shape,
    }
    .into_vec_i8();
    let mut packed = vec![0u8; k * n / 2];
    crate::math::pack_q4(&mut packed, &q);
    let values =
        Tensor::<2, Int>::from_data(TensorData::new(packed, [k, n / 2]), (&device, DType::U8));
    let scales = Tensor::<2>::from_data(
        TensorData::new(scales.block, [sk, sn]),
        (&device, DType::F32),
    );
    (values, scales)
}

/// `x · W + bias` for the packed weight `W` of `packed`, `x` `[M, K]`: [`linear`] on the
/// packed values. On flex with `x` in f32 outside autodiff it takes the kernel; everywhere
/// else Burn's product with [`PackedQ4::quantized`].
///
/// # Panics
/// When `x`'s last dimension is not the weight's first.
pub fn linear_q4(x: Tensor<2>, packed: &PackedQ4, bias: Option<Tensor<1>>) -> Tensor<2> {
    let [_, k] = x.dims();
    let [k_w, _] = packed.dims();
    assert_eq!(
        k, k_w,
        "a linear layer of {k_w} inputs was given rows of {k} values"
    );
    let values = packed.values.val();
    if x.dtype() == DType::F32 && crate::enabled() && on_flex(&x) {
        use burn::backend::Dispatch;
        CALLS.fetch_add(1, Ordering::Relaxed);
        let y = Tensor::<2>::from_dispatch(Dispatch::packed_q4_matmul(
            x.into_dispatch(),
            values.into_dispatch(),
            packed.scales.val().into_dispatch(),
        ));
        return match bias {
            Some(b) => y + b.unsqueeze(),
            None => y,
        };
    }
    burn::tensor::module::linear(x, packed.quantized(), bias)
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
                    packed.matmul(x)
                }
                // A layout the kernel does not take: Burn's own path.
                _ => {
                    let w = <Flex as QTensorOps<Flex>>::dequantize(w, FloatDType::F32);
                    <Flex as FloatTensorOps<Flex>>::float_matmul(x, w)
                }
            }
        }

        fn packed_q4_matmul(x: FlexTensor, values: FlexTensor, scales: FlexTensor) -> FlexTensor {
            let (k, n) = (values.shape()[0], 2 * values.shape()[1]);
            let (sk, sn) = (scales.shape()[0], scales.shape()[1]);
            let scales = contiguous(scales);
            let values = if values.as_slice::<u8>().is_some() {
                values
            } else {
                values.to_contiguous()
            };
            let packed = Packed {
                values,
                nibbles: true,
                scales: scales.as_slice::<f32>().expect("f32 scales"),
                k,
                n,
                bk: k / sk,
                bn: n / sn,
            };
            packed.matmul(x)
        }

        fn quantized_compact(w: FlexQTensor) -> FlexQTensor {
            compact_values(w)
        }

        fn quantized_pack_q4(w: FlexQTensor) -> (FlexTensor, FlexTensor) {
            let weight = Packed::of(&w).expect("pack_q4 checked the weight's scheme");
            let (k, n) = (weight.k, weight.n);
            let q = weight
                .values
                .as_slice::<i8>()
                .expect("contiguous i8 values");
            // Allocated at its length: a byte for two values.
            let mut packed = vec![0u8; k * n / 2];
            crate::math::pack_q4(&mut packed, q);
            let values = FlexTensor::new(
                Bytes::from_elems(packed),
                Layout::contiguous(Shape::new([k, n / 2])),
                DType::U8,
            );
            let scales = FlexTensor::new(
                Bytes::from_elems(weight.scales.to_vec()),
                Layout::contiguous(Shape::new([k / weight.bk, n / weight.bn])),
                DType::F32,
            );
            (values, scales)
        }
    }

    /// See [`super::compact`]. Two-level schemes (whose per-tensor scale flex does not
    /// show) and values held to their length already are returned as they are.
    fn compact_values(w: FlexQTensor) -> FlexQTensor {
        let DType::QFloat(scheme) = w.dtype() else {
            return w;
        };
        let data = w.tensor().data_arc();
        if global_scale_dtype(&scheme).is_some() || data.capacity() <= data.len() {
            return w;
        }
        let mut exact = Bytes::from_elems(Vec::<u128>::with_capacity(data.len().div_ceil(16)));
        exact.extend_from_byte_slice_aligned(&data, 16);
        let values = FlexTensor::new(exact, w.tensor().layout().clone(), DType::I8);
        FlexQTensor::new(values, scheme, w.scales().to_vec(), None)
    }

    /// A 2-D quantized weight as the kernel reads it: the values row-major `[k, n]`, and
    /// one scale per block of `bk` rows by `bn` columns, the blocks row-major.
    pub(super) struct Packed<'a> {
        values: FlexTensor,
        /// Two 4-bit values to a byte (`u8`, [`super::PackedQ4`]) rather than one value
        /// to a byte (`i8`, Burn's store).
        nibbles: bool,
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
                nibbles: false,
                scales,
                k,
                n,
                bk,
                bn,
            })
        }

        /// Columns `c0..c1` of row `r` of the values, one `i8` each: a slice of the
        /// store, or, for packed 4-bit values (`c0`, `c1` and the width even), unpacked
        /// into `buf`.
        fn row<'b>(&'b self, r: usize, c0: usize, c1: usize, buf: &'b mut Vec<i8>) -> &'b [i8] {
            let (start, end) = (r * self.n + c0, r * self.n + c1);
            if self.nibbles {
                let bytes = self.values.as_slice::<u8>().expect("contiguous u8 values");
                buf.resize(end - start, 0);
                crate::math::unpack_q4(buf, &bytes[start / 2..end / 2]);
                let unpacked: &'b [i8] = buf;
                unpacked
            } else {
                &self.values.as_slice::<i8>().expect("contiguous i8 values")[start..end]
            }
        }

        /// `x` `[m, k]` (f32) times the weight: the fused product up to
        /// [`FUSED_MAX_ROWS`] rows, the dequantized weight through flex's product above.
        fn matmul(&self, x: FlexTensor) -> FlexTensor {
            let [m, k] = [x.shape()[0], x.shape()[1]];
            assert_eq!(k, self.k, "[{m}, {k}] x [{}, {}]", self.k, self.n);
            let x = contiguous(x);
            let xs = x.as_slice::<f32>().expect("a contiguous f32 tensor");
            if m <= FUSED_MAX_ROWS {
                FlexTensor::new(
                    Bytes::from_elems(self.fused(xs, m)),
                    Layout::contiguous(Shape::new([m, self.n])),
                    DType::F32,
                )
            } else {
                let w = FlexTensor::new(
                    Bytes::from_elems(self.dequantize()),
                    Layout::contiguous(Shape::new([self.k, self.n])),
                    DType::F32,
                );
                <Flex as FloatTensorOps<Flex>>::float_matmul(x, w)
            }
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
            // Panels of whole blocks, about 256 columns, at least one block; an even
            // number of columns where two values share a byte.
            let unit = if self.nibbles && bn % 2 == 1 {
                2 * bn
            } else {
                bn
            };
            let per_panel = (256 / unit).max(1) * unit;
            let panels: Vec<(usize, usize)> = (0..n)
                .step_by(per_panel)
                .map(|c0| (c0, (c0 + per_panel).min(n)))
                .collect();
            let parts: Vec<Vec<f32>> = panels
                .par_iter()
                .map(|&(c0, c1)| {
                    let w = c1 - c0;
                    let mut acc = vec![0.0f32; m * w];
                    let mut buf = Vec::new();
                    for r in 0..k {
                        let q_row = self.row(r, c0, c1, &mut buf);
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
            let mut out = vec![0.0f32; self.k * n];
            out.par_chunks_mut(n)
                .enumerate()
                .for_each_init(Vec::new, |buf, (r, row)| {
                    crate::math::scale_blocks(row, self.row(r, 0, n, buf), self.row_scales(r), bn);
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

    use super::{FUSED_MAX_ROWS, kernel_calls, linear, linear_q4, pack_q4, takes_kernel};

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

    /// The bytes behind a flex quantized tensor's values: (length, capacity).
    fn values_store(t: &Tensor<2>) -> (usize, usize) {
        use burn::backend::{BackendTensor, DispatchTensorKind};
        #[allow(unreachable_patterns)]
        match t.clone().into_dispatch().kind {
            DispatchTensorKind::Flex(BackendTensor::Quantized(q)) => {
                let data = q.tensor().data_arc();
                (data.len(), data.capacity())
            }
            _ => panic!("a flex quantized tensor"),
        }
    }

    /// A quantized tensor made from its data keeps its values' spare capacity on flex
    /// (the scales split off the end, 1/8 of the values at 8 bits in blocks of 32);
    /// `compact` drops it and keeps every value and scale.
    #[test]
    fn compact_drops_the_spare_capacity_and_keeps_the_values() {
        let _rng = crate::testing::rng();
        let d = device();
        let w = Tensor::<2>::random([64, 96], Distribution::Normal(0.0, 1.0), &d);
        let q = quantize(&w, QuantValue::Q8S, Some(32));
        let data = q.into_data();
        let loaded = Tensor::<2>::from_data(data.clone(), &d);
        let (len, capacity) = values_store(&loaded);
        assert_eq!(len, 64 * 96);
        assert_eq!(
            capacity,
            64 * 96 + 64 * 3 * 4,
            "the scales' bytes stay as spare room"
        );
        let compact = super::compact(loaded);
        assert_eq!(values_store(&compact), (64 * 96, 64 * 96));
        assert_eq!(compact.into_data().as_bytes(), data.as_bytes());
        // Float tensors pass as they are.
        let same = super::compact(w.clone());
        assert_eq!(host(same), host(w));
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

    /// 4-bit weights packed two to a byte: the packed form gives back Burn's quantized
    /// tensor bit for bit, holds half a byte a value with its f32 scales, and its product
    /// (the fused one and the dequantizing one, through the kernel) equals Burn's on the
    /// unpacked weight; blocks of an odd width (panels of two blocks) and one scale per
    /// tensor included. Negative controls: the float weight's product is further away,
    /// and what cannot be packed is refused.
    #[test]
    fn packed_q4_equals_burns_product_on_flex() {
        let _rng = crate::testing::rng();
        let d = device();
        // (k, n, block): n even and a multiple of the block.
        let cases = [
            (40, 96, Some(32)),
            (24, 30, Some(5)),
            (40, 72, None),
            (8, 520, Some(8)),
        ];
        for (k, n, block) in cases {
            let w = Tensor::<2>::random([k, n], Distribution::Normal(0.0, 0.5), &d);
            let b = Tensor::<1>::random([n], Distribution::Normal(0.0, 0.5), &d);
            let wq = quantize(&w, QuantValue::Q4S, block);
            let (base, packed) = pack_q4(&wq).expect("a 4-bit weight packs");
            assert_eq!(base.dims(), [k, n]);
            assert_eq!(packed.dims(), [k, n]);
            let scales = block.map_or(1, |b| k * n / usize::from(b));
            assert_eq!(
                packed.bytes(),
                k * n / 2 + 4 * scales,
                "{k} x {n} {block:?}"
            );
            // Flex packs from its own store; the host path, through the data, agrees.
            let (values, scales) = super::pack_q4_on_host(&wq, packed.scales.val().dims());
            assert_eq!(
                packed.values.val().into_data().as_bytes(),
                values.into_data().as_bytes(),
                "{k} x {n} {block:?}: the packed values"
            );
            assert_eq!(host(packed.scales.val()), host(scales));
            let back = packed.quantized();
            assert_eq!(back.dtype(), wq.dtype());
            assert_eq!(back.to_data().as_bytes(), wq.to_data().as_bytes());
            for m in [1, 3, FUSED_MAX_ROWS, FUSED_MAX_ROWS + 1, 37] {
                let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), &d);
                let before = kernel_calls();
                let got = host(linear_q4(x.clone(), &packed, Some(b.clone())));
                assert_eq!(kernel_calls(), before + 1, "the kernel ran");
                let want = host(x.clone().matmul(wq.clone()) + b.clone().unsqueeze());
                let err = rel_diff(&got, &want);
                assert!(err < 1e-5, "block {block:?}, {m} x {k} x {n}: {err:e}");
                let float = host(x.matmul(w.clone()) + b.clone().unsqueeze());
                assert!(rel_diff(&got, &float) > 1e-3, "block {block:?}, {m} rows");
            }
        }
        // Not packed: 8 bits, a float weight, an odd width.
        let w = Tensor::<2>::random([8, 6], Distribution::Normal(0.0, 0.5), &d);
        assert!(pack_q4(&quantize(&w, QuantValue::Q8S, None)).is_none());
        assert!(pack_q4(&w).is_none());
        let odd = Tensor::<2>::random([8, 5], Distribution::Normal(0.0, 0.5), &d);
        assert!(pack_q4(&quantize(&odd, QuantValue::Q4S, None)).is_none());
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
