//! Weight quantization through Burn's (`Tensor::quantize` with a `QuantScheme`): the
//! weights of the linear layers inside a model's layer stacks become 8- or 4-bit values
//! with f32 scales, per tensor or per block of the output dimension. Embedding tables,
//! output heads, norms and biases keep their precision, as common practice keeps the
//! first and last layers. Backends run the product on the packed weights where they can
//! (CubeCL's) and dequantize before it otherwise (flex, ndarray).
//!
//! Flex keeps Burn's quantized values one per byte, so 4-bit weights are packed two to a
//! byte there after quantizing ([`pack_q4_weights`]: `zoo_kernels::quant::PackedQ4`, a
//! reparameterization of each weight's parameter), and multiplied in that form.

use std::collections::HashMap;

use burn::module::{
    Module, ModuleMapper, ModuleVisitor, Param, ParamId, Reparameterization, Reparameterizer,
};
use burn::tensor::quantization::{
    Calibration, QuantScheme, QuantStore, QuantValue, ScaleDtype, compute_q_params, compute_range,
};
use burn::tensor::{DType, Device, Tensor};
use zoo_kernels::quant::PackedQ4;

use crate::ModelError;

/// The width of a quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantBits {
    /// 8-bit symmetric values.
    Q8,
    /// 4-bit symmetric values.
    Q4,
}

impl QuantBits {
    /// Bits per value.
    pub fn bits(self) -> u32 {
        match self {
            Self::Q8 => 8,
            Self::Q4 => 4,
        }
    }
}

impl std::str::FromStr for QuantBits {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, ModelError> {
        match s {
            "q8" => Ok(Self::Q8),
            "q4" => Ok(Self::Q4),
            other => Err(ModelError::msg(format!(
                "quantization scheme {other:?} is not supported (q8 and q4 are)"
            ))),
        }
    }
}

impl std::fmt::Display for QuantBits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Q8 => "q8",
            Self::Q4 => "q4",
        })
    }
}

/// How to quantize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantOptions {
    /// Bits per value.
    pub bits: QuantBits,
    /// Values per scale along the output dimension; `None` for one scale per tensor.
    pub block: Option<usize>,
}

impl QuantOptions {
    /// One scale per tensor.
    pub fn per_tensor(bits: QuantBits) -> Self {
        Self { bits, block: None }
    }

    /// One scale per `block` values of each row.
    pub fn per_block(bits: QuantBits, block: usize) -> Self {
        Self {
            bits,
            block: Some(block),
        }
    }

    /// Checks the block size: Burn's blocks are at most 255 values.
    ///
    /// # Errors
    /// A block of 0 or above 255, named.
    pub fn check(&self) -> Result<(), ModelError> {
        match self.block {
            Some(b) if b == 0 || b > 255 => Err(ModelError::msg(format!(
                "the quantization block must be 1 to 255 values, got {b}"
            ))),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for QuantOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.block {
            Some(b) => write!(f, "{} in blocks of {b}", self.bits),
            None => write!(f, "{} per tensor", self.bits),
        }
    }
}

/// What [`quantize_linear_weights`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantReport {
    /// Weight tensors quantized.
    pub tensors: usize,
    /// Their values.
    pub values: usize,
    /// Linear weights left in their precision because their output width is not a
    /// multiple of the block, or of the values the backend packs into one word.
    pub kept: usize,
    /// Bytes of the quantized tensors before (in their float type) and after (values
    /// and scales, as the backend stores them: see [`stored_bytes`]).
    pub bytes_before: usize,
    /// See `bytes_before`.
    pub bytes_after: usize,
}

/// Quantizes the weights of the linear layers inside the layer stacks (a `Vec` of
/// modules) of `model`, on `device`'s default scheme with `options`' values and scales.
/// Weights quantized already (by [`crate::checkpoint::quantized_while_loading`], or a
/// quantized checkpoint) are counted in the report and left as they are.
///
/// # Errors
/// A backend that cannot run quantized weights of that width (libtorch; ndarray below
/// 8 bits), or a block size out of range.
pub fn quantize_linear_weights<M: Module>(
    model: M,
    options: &QuantOptions,
    device: &Device,
) -> Result<(M, QuantReport), ModelError> {
    let scheme = scheme(options, device).map_err(ModelError::msg)?;
    // Packed weights (a packed checkpoint, or 4 bits quantized as read on flex) stay
    // packed where quantizing packs them, and are counted as quantized already; elsewhere
    // they go back to Burn's store first, where the quantizer sees them as quantized.
    let model = if has_packed_q4(&model) && !packs_q4(options, device) {
        model.materialize()
    } else {
        model
    };
    let mut mapper = LinearQuantizer {
        scheme,
        options: *options,
        path: Vec::new(),
        packed: packed_q4_bytes(&model),
        report: QuantReport::default(),
    };
    let model = model.map(&mut mapper);
    let mut report = mapper.report;
    if packs_q4(options, device) {
        let (model, saved) = pack_q4_weights(model);
        report.bytes_after -= saved;
        return Ok((model, report));
    }
    Ok((model, report))
}

/// Whether weights quantized with `options` on `device` are packed two values to a byte
/// ([`pack_q4_weights`]): 4-bit ones on flex, outside autodiff.
pub fn packs_q4(options: &QuantOptions, device: &Device) -> bool {
    options.bits == QuantBits::Q4
        && !device.is_autodiff()
        && zoo_device::BackendName::of(device) == Some(zoo_device::BackendName::Flex)
}

/// `model` with each of its 2-D parameters that Burn holds as 4-bit values one per byte
/// packed two to a byte (`zoo_kernels::quant::pack_q4`; others left as they are), and
/// the bytes that saved. Each weight is packed, and its byte-per-value copy dropped,
/// before the next.
pub fn pack_q4_weights<M: Module>(model: M) -> (M, usize) {
    let saved = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let packer = Packer {
        saved: saved.clone(),
    };
    let model = model.apply_reparameterization(packer);
    (model, saved.get())
}

struct Packer {
    saved: std::rc::Rc<std::cell::Cell<usize>>,
}

impl Reparameterizer for Packer {
    type Reparam = PackedQ4;

    fn reparameterize<const D: usize>(
        &mut self,
        _path: &str,
        param: Param<Tensor<D>>,
    ) -> (Param<Tensor<D>>, Option<PackedQ4>) {
        if D != 2 || !param.is_initialized() {
            return (param, None);
        }
        let weight = param.val();
        if !matches!(weight.dtype(), DType::QFloat(_)) {
            return (param, None);
        }
        let dims = weight.dims();
        // Rank 2 already: the same tensor at its static rank. (A reshape of a
        // block-quantized tensor dequantizes it and quantizes it again on flex.)
        let Some((_, packed)) = zoo_kernels::quant::pack_q4(&Tensor::<2>::from_dispatch(
            weight.clone().into_dispatch(),
        )) else {
            return (param, None);
        };
        let base = zoo_kernels::quant::packed_base(dims, &weight.device());
        let before = stored_bytes(weight.dtype(), &dims);
        self.saved
            .set(self.saved.get() + before.saturating_sub(packed.bytes()));
        drop(weight);
        (param.map(move |_| base), Some(packed))
    }
}

/// The path of each parameter of `module` that holds a [`PackedQ4`], with the bytes it
/// holds (its values, one byte for two, and its f32 scales), read from shapes only.
fn packed_q4_bytes<M: Module>(module: &M) -> HashMap<String, usize> {
    #[derive(Default)]
    struct Find {
        path: Vec<String>,
        /// The parameter whose [`PackedQ4`] is being visited.
        inside: Option<String>,
        found: HashMap<String, usize>,
    }
    impl Find {
        fn add(&mut self, bytes: usize) {
            if let Some(path) = &self.inside {
                *self.found.entry(path.clone()).or_default() += bytes;
            }
        }
    }
    impl ModuleVisitor for Find {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.inside = Some(self.path.join("."));
            }
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, name: &str, container_type: &str) {
            self.path.pop();
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.inside = None;
            }
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.add(param.lazy_shape().num_elements() * 4);
        }
        fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, burn::tensor::Int>>) {
            self.add(param.lazy_shape().num_elements());
        }
    }
    let mut find = Find::default();
    module.visit(&mut find);
    find.found
}

/// `model` with each quantized weight's values held in an allocation of their length
/// (`zoo_kernels::quant::compact`: flex keeps 1/8 more for 8-bit values made from a
/// tensor's data). Parameters not yet initialised are left alone.
pub fn compact_quantized<M: Module>(model: M) -> M {
    struct Compact;
    impl ModuleMapper for Compact {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if !param.is_initialized() || !matches!(param.val().dtype(), DType::QFloat(_)) {
                return param;
            }
            param.map(zoo_kernels::quant::compact)
        }
    }
    model.map(&mut Compact)
}

/// Whether `module` holds weights packed by [`pack_q4_weights`].
pub fn has_packed_q4<M: Module>(module: &M) -> bool {
    struct Find(bool);
    impl ModuleVisitor for Find {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.0 |= container_type == "Reparameterization" && name == PackedQ4::NAME;
        }
    }
    let mut find = Find(false);
    module.visit(&mut find);
    find.0
}

/// `module` as it is saved: packed 4-bit weights back in Burn's quantized tensors (one
/// value per byte, the same values and scales), which its stores write; `None` when it
/// holds none.
pub fn unpacked<M: Module>(module: &M) -> Option<M> {
    type Parts = (Option<Tensor<2, burn::tensor::Int>>, Option<Tensor<2>>);
    /// Each packed weight's values and scales, by the id of its parameter.
    #[derive(Default)]
    struct Collect {
        last: Option<ParamId>,
        current: Option<ParamId>,
        found: HashMap<ParamId, Parts>,
    }
    impl ModuleVisitor for Collect {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.current = self.last;
            }
        }
        fn exit_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.current = None;
            }
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            match self.current {
                Some(id) if D == 2 => {
                    let t = param.val();
                    let d = t.dims();
                    self.found.entry(id).or_default().1 = Some(t.reshape([d[0], d[1]]));
                }
                _ => self.last = Some(param.id),
            }
        }
        fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, burn::tensor::Int>>) {
            if let Some(id) = self.current.filter(|_| D == 2) {
                let t = param.val();
                let d = t.dims();
                self.found.entry(id).or_default().0 = Some(t.reshape([d[0], d[1]]));
            }
        }
    }
    struct Unpack(HashMap<ParamId, Parts>);
    impl ModuleMapper for Unpack {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            match self.0.remove(&param.id) {
                Some((Some(values), Some(scales))) => {
                    let dims = param.lazy_shape();
                    param.map(move |_| PackedQ4::quantized_from(values, scales).reshape(dims))
                }
                _ => param,
            }
        }
    }
    if !has_packed_q4(module) {
        return None;
    }
    let mut collect = Collect::default();
    module.visit(&mut collect);
    // The packed weights dropped, their bases (a broadcast zero each) left in place.
    let bare = zoo_kernels::quant::detaching(|| module.clone().materialize());
    Some(bare.map(&mut Unpack(collect.found)))
}

/// The parameters of `module`, each weight packed by [`pack_q4_weights`] counted once,
/// by its shape (Burn's `num_params` adds the packed values and scales to it).
pub fn param_count<M: Module>(module: &M) -> usize {
    #[derive(Default)]
    struct Count {
        total: usize,
        /// Inside a packed weight's reparameterization: its tensors are not counted.
        packed: usize,
    }
    impl ModuleVisitor for Count {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.packed += 1;
            }
        }
        fn exit_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.packed -= 1;
            }
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.packed == 0 {
                self.total += param.lazy_shape().num_elements();
            }
        }
        fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, burn::tensor::Int>>) {
            if self.packed == 0 {
                self.total += param.lazy_shape().num_elements();
            }
        }
        fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, burn::tensor::Bool>>) {
            if self.packed == 0 {
                self.total += param.lazy_shape().num_elements();
            }
        }
    }
    let mut count = Count::default();
    module.visit(&mut count);
    count.total
}

/// Whether `device` runs weights quantized with `options`: checked before a model is
/// loaded to be quantized, so that a backend without them is refused first, in one
/// sentence.
///
/// # Errors
/// As [`scheme`].
pub fn check_device(options: &QuantOptions, device: &Device) -> Result<(), ModelError> {
    scheme(options, device).map(|_| ()).map_err(ModelError::msg)
}

/// Burn's scheme for `options` on `device`: the device's default storage, symmetric
/// values of the width asked, f32 scales per tensor or per block.
///
/// # Errors
/// A backend that cannot run quantized weights of that width, or a block out of range,
/// in a sentence.
pub fn scheme(options: &QuantOptions, device: &Device) -> Result<QuantScheme, String> {
    zoo_device::check_quantization(device, options.bits.bits())?;
    options.check().map_err(|e| e.to_string())?;
    let value = match options.bits {
        QuantBits::Q8 => QuantValue::Q8S,
        QuantBits::Q4 => QuantValue::Q4S,
    };
    let base = device.settings().quantization.scheme.with_value(value);
    Ok(match options.block {
        Some(b) => base.per_block([b as u8], ScaleDtype::F32),
        None => base.per_tensor(ScaleDtype::F32),
    })
}

/// Whether the weight of a linear layer of `dims` `[in, out]` takes `options` on a
/// backend whose scheme is `scheme`: the output width is a multiple of the block (always,
/// per tensor), and of the values that the backend packs into one word (wgpu and cuda
/// pack four 8-bit or eight 4-bit values into a `u32` along that width, and cannot store
/// a width that leaves a word part-filled).
pub(crate) fn takes_block(dims: &[usize], options: &QuantOptions, scheme: &QuantScheme) -> bool {
    let Some(&width) = dims.last() else {
        return false;
    };
    let packed = match scheme.store {
        QuantStore::PackedU32(_) | QuantStore::PackedNative(_) => scheme.num_quants(),
        QuantStore::Native => 1,
    };
    options.block.is_none_or(|b| width.is_multiple_of(b)) && width.is_multiple_of(packed.max(1))
}

/// `tensor` quantized with `scheme`: its range by min-max over each block (or the whole
/// tensor), then Burn's symmetric values and scales. Loading and [`quantize_linear_weights`]
/// both quantize through it, so a weight quantized as it is read equals one quantized after.
pub(crate) fn quantize_tensor<const D: usize>(
    tensor: Tensor<D>,
    scheme: &QuantScheme,
) -> Tensor<D> {
    let range = compute_range(scheme, &tensor, &Calibration::MinMax);
    let qparams = compute_q_params(scheme, range);
    tensor.quantize(scheme, qparams)
}

/// `values`, f32 row-major of `shape`, quantized with `scheme` to the values and scales
/// that [`quantize_tensor`] gives on flex: min-max over each block (runs of the last
/// dimension, or the whole tensor), `scale = 2 · max(|min|, |max|) / (b − a)` over the
/// value range `[a, b]` (a smallest positive f32 where that is 0), each value
/// `round(x · (1 / scale))` clamped to `[a, b]`: the arithmetic of Burn 0.22.1's
/// `compute_q_params` and flex's `quantize`, in the same f32 operations. Computed a block
/// at a time, with no per-value block lookup: loading GPT-2 small with its layers
/// quantized to 8 bits took 1.7 s through Burn's path.
///
/// `None` for what it does not reproduce: a store other than one value per byte, a scale
/// not in f32 or in two levels, a value type other than Q8S and Q4S, blocks that are not
/// runs of the last dimension dividing it, or a value that is not finite.
pub(crate) fn quantize_f32_as_flex(
    values: &[f32],
    shape: &[usize],
    scheme: &QuantScheme,
) -> Option<burn::tensor::TensorData> {
    if values.len() != shape.iter().product::<usize>() {
        return None;
    }
    let read = |start: usize, out: &mut [f32]| {
        out.copy_from_slice(&values[start..start + out.len()]);
        Ok::<(), std::convert::Infallible>(())
    };
    match quantize_f32_as_flex_by_parts(shape, scheme, false, PART_VALUES, read) {
        Ok(quantized) => quantized,
        Err(never) => match never {},
    }
}

/// The f32 values that [`quantize_f32_as_flex_by_parts`] reads at a time, at most: 1 MiB
/// (one row, or when transposed one block of rows, where that is more).
pub(crate) const PART_VALUES: usize = 1 << 18;

/// [`quantize_f32_as_flex`] of a weight of `shape` whose f32 values are read a part at a
/// time, about `part` values each, so that its f32 values are never held whole: a weight
/// quantized as it is read from a file holds its quantized bytes and one part.
///
/// `read(start, out)` fills `out` with the stored values from flat index `start` on. They
/// are stored row-major in `shape`, or, when `transposed` (a 2-D weight `[k, n]` stored
/// `[n, k]`, as PyTorch's `nn.Linear` stores it), row-major in the reversed shape; each
/// part is then whole blocks of stored rows, turned in memory. A scheme of one scale per
/// tensor reads the values twice, its range first.
///
/// # Errors
/// What `read` returns.
pub(crate) fn quantize_f32_as_flex_by_parts<E>(
    shape: &[usize],
    scheme: &QuantScheme,
    transposed: bool,
    part: usize,
    mut read: impl FnMut(usize, &mut [f32]) -> Result<(), E>,
) -> Result<Option<burn::tensor::TensorData>, E> {
    let total: usize = shape.iter().product();
    if scheme.store != QuantStore::Native
        || scheme.scale_dtype() != ScaleDtype::F32
        || burn::tensor::quantization::global_scale_dtype(scheme).is_some()
        || !matches!(scheme.value, QuantValue::Q8S | QuantValue::Q4S)
        || total == 0
        || (transposed && shape.len() != 2)
    {
        return Ok(None);
    }
    let Some(&cols) = shape.last() else {
        return Ok(None);
    };
    let rows = total / cols;
    // Values per scale along a row; `None`: one scale for the tensor.
    let run = match scheme.block_size() {
        None => None,
        Some(block) => {
            let dims = block.to_dim_vec(shape.len());
            let Some((&last, outer)) = dims.split_last() else {
                return Ok(None);
            };
            let last = usize::from(last);
            if outer.iter().any(|&d| d != 1) || last == 0 || cols % last != 0 {
                return Ok(None);
            }
            Some(last)
        }
    };
    let (a, b) = scheme.value.range();
    // The stored layout, and its rows read at a time: whole blocks of them when each
    // stored row is a column of the weight.
    let (stored_rows, stored_cols) = if transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let unit = match (transposed, run) {
        (true, Some(block)) => block,
        _ => 1,
    };
    let per_part = (part / stored_cols / unit).max(1) * unit;
    let mut buf = vec![0f32; per_part.min(stored_rows) * stored_cols];
    let parts = (0..stored_rows).step_by(per_part);
    // One scale per tensor: its range first, over every part.
    let tensor_scale = if run.is_none() {
        let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
        for r0 in parts.clone() {
            let values = &mut buf[..(per_part.min(stored_rows - r0)) * stored_cols];
            read(r0 * stored_cols, values)?;
            if !min_max(values, &mut min, &mut max) {
                return Ok(None);
            }
        }
        Some(flex_scale(min, max, a, b))
    } else {
        None
    };
    let dtype = DType::QFloat(*scheme);
    let len = burn::tensor::quantization::quantized_data_len(
        scheme,
        &burn::tensor::Shape::from(shape.to_vec()),
    );
    let blocks = run.map_or(1, |r| total / r);
    let scales_at = len - 4 * blocks;
    let mut bytes = crate::checkpoint::memory::buffer(len);
    let (values_out, scales_out) = bytes.split_at_mut(scales_at);
    let mut turned = if transposed { buf.clone() } else { Vec::new() };
    for r0 in parts {
        let n_rows = per_part.min(stored_rows - r0);
        let values = &mut buf[..n_rows * stored_cols];
        read(r0 * stored_cols, values)?;
        // As segments of the weight's rows: (values, flat index of the first).
        let ok = if transposed {
            // Stored rows r0.. are the weight's columns r0..: turned to `[rows, n_rows]`.
            let turned = &mut turned[..n_rows * rows];
            for (c, column) in values.chunks_exact(rows).enumerate() {
                for (r, &x) in column.iter().enumerate() {
                    turned[r * n_rows + c] = x;
                }
            }
            turned.chunks_exact(n_rows).enumerate().all(|(r, segment)| {
                quantize_segment(
                    segment,
                    r * cols + r0,
                    run,
                    tensor_scale,
                    (a, b),
                    values_out,
                    scales_out,
                )
            })
        } else {
            quantize_segment(
                values,
                r0 * cols,
                run,
                tensor_scale,
                (a, b),
                values_out,
                scales_out,
            )
        };
        if !ok {
            return Ok(None);
        }
    }
    if let Some(scale) = tensor_scale {
        scales_out[..4].copy_from_slice(&scale.to_ne_bytes());
    }
    drop(turned);
    drop(buf);
    Ok(Some(burn::tensor::TensorData::from_bytes(
        bytes,
        shape.to_vec(),
        dtype,
    )))
}

/// Folds `values` into the running `min` and `max`; `false` at a value that is not finite.
fn min_max(values: &[f32], min: &mut f32, max: &mut f32) -> bool {
    for &x in values {
        if !x.is_finite() {
            return false;
        }
        *min = min.min(x);
        *max = max.max(x);
    }
    true
}

/// Flex's symmetric scale of a range `[min, max]` over the values `[a, b]`.
fn flex_scale(min: f32, max: f32, a: f32, b: f32) -> f32 {
    let (min_abs, max_abs) = (min.abs(), max.abs());
    let alpha = if min_abs < max_abs { max_abs } else { min_abs };
    let scale = alpha * 2.0 / (b - a);
    if scale > 0.0 && scale.is_finite() {
        scale
    } else {
        f32::MIN_POSITIVE
    }
}

/// `segment`, the weight's values from flat index `at` on, quantized into `values` (one
/// byte each, at their flat index) with, per block of `run` (whole blocks), a scale of
/// its own written into `scales` (f32 bytes, at the block's index), or `tensor_scale`.
/// `false` at a value that is not finite.
fn quantize_segment(
    segment: &[f32],
    at: usize,
    run: Option<usize>,
    tensor_scale: Option<f32>,
    (a, b): (f32, f32),
    values: &mut [u8],
    scales: &mut [u8],
) -> bool {
    let quantize = |block: &[f32], out: &mut [u8], scale: f32| {
        let inv_scale = 1.0 / scale;
        for (o, &x) in out.iter_mut().zip(block) {
            *o = (x * inv_scale).round().clamp(a, b) as i8 as u8;
        }
    };
    let out = &mut values[at..at + segment.len()];
    match (run, tensor_scale) {
        (Some(run), _) => {
            for (j, (block, out)) in segment
                .chunks_exact(run)
                .zip(out.chunks_exact_mut(run))
                .enumerate()
            {
                let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
                if !min_max(block, &mut min, &mut max) {
                    return false;
                }
                let scale = flex_scale(min, max, a, b);
                quantize(block, out, scale);
                let index = at / run + j;
                scales[4 * index..4 * index + 4].copy_from_slice(&scale.to_ne_bytes());
            }
        }
        (None, Some(scale)) => quantize(segment, out, scale),
        (None, None) => unreachable!("one scale per tensor is computed first"),
    }
    true
}

/// The bytes a tensor of `dtype` and `shape` takes as its backend stores it.
///
/// A float tensor takes its type's width per value. A quantized one takes its values as
/// its store packs them, plus its scales: [`QuantStore::Native`] holds one value per byte
/// even below 8 bits (flex and ndarray keep 4-bit values as `i8`), `PackedU32` packs
/// `32 / bits` values into each `u32` word along the innermost dimension, each line
/// starting a word (wgpu and cuda), and `PackedNative` packs sub-byte values two to a byte.
pub fn stored_bytes(dtype: DType, shape: &[usize]) -> usize {
    let values: usize = shape.iter().product();
    let DType::QFloat(scheme) = dtype else {
        return values * dtype.size();
    };
    let bits = scheme.size_bits_value();
    let data = match scheme.store {
        QuantStore::Native => values * bits.div_ceil(8),
        QuantStore::PackedU32(_) => {
            let line = shape.last().copied().unwrap_or(1).max(1);
            let per_word = 32 / bits;
            (values / line) * line.div_ceil(per_word) * 4
        }
        QuantStore::PackedNative(_) => (values * bits).div_ceil(8),
    };
    let scale_bytes = |dtype: ScaleDtype| match dtype {
        ScaleDtype::F32 => 4,
        ScaleDtype::F16 | ScaleDtype::BF16 => 2,
        ScaleDtype::UE8M0 | ScaleDtype::UE4M3 => 1,
    };
    let blocks = match scheme.block_size() {
        Some(block) => values / block.num_elements().max(1),
        None => 1,
    };
    let global = burn::tensor::quantization::global_scale_dtype(&scheme).map_or(0, scale_bytes);
    data + blocks * scale_bytes(scheme.scale_dtype()) + global
}

/// The bytes a model's parameters take as its backend holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightBytes {
    /// Every parameter, float or quantized ([`stored_bytes`] each).
    pub total: usize,
    /// The quantized parameters alone.
    pub quantized: usize,
    /// The values of the quantized parameters.
    pub quantized_values: usize,
}

/// What `model`'s parameters take in memory: each tensor's [`stored_bytes`], read from
/// its type and shape (nothing is read back from the device).
pub fn weight_bytes<M: Module>(model: &M) -> WeightBytes {
    #[derive(Default)]
    struct Count {
        bytes: WeightBytes,
        /// The bytes and values of the last float parameter counted: the base of a
        /// packed weight when its reparameterization follows.
        last: (usize, usize),
        /// Inside a packed weight: its values and scales are its quantized bytes.
        packed: bool,
    }
    impl ModuleVisitor for Count {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                // The base (a zero broadcast to the weight's shape) holds nothing.
                let (bytes, values) = self.last;
                self.bytes.total -= bytes;
                self.bytes.quantized_values += values;
                self.packed = true;
            }
        }
        fn exit_module(&mut self, name: &str, container_type: &str) {
            if container_type == "Reparameterization" && name == PackedQ4::NAME {
                self.packed = false;
            }
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let t = param.val();
            let (dtype, dims) = (t.dtype(), t.dims());
            let bytes = stored_bytes(dtype, &dims);
            self.bytes.total += bytes;
            self.last = (bytes, dims.iter().product());
            if self.packed {
                self.bytes.quantized += bytes;
            } else if matches!(dtype, DType::QFloat(_)) {
                self.bytes.quantized += bytes;
                self.bytes.quantized_values += dims.iter().product::<usize>();
            }
        }
        fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, burn::tensor::Int>>) {
            let t = param.val();
            let bytes = stored_bytes(t.dtype(), &t.dims());
            self.bytes.total += bytes;
            if self.packed {
                self.bytes.quantized += bytes;
            }
        }
    }
    let mut count = Count::default();
    model.visit(&mut count);
    count.bytes
}

struct LinearQuantizer {
    scheme: QuantScheme,
    options: QuantOptions,
    /// (field, the type that holds it) from the model down.
    path: Vec<(String, String)>,
    /// The weights packed already, by path, with their bytes ([`packed_q4_bytes`]).
    packed: HashMap<String, usize>,
    report: QuantReport,
}

impl LinearQuantizer {
    /// A `weight` field of a `Linear`, under a `Vec` of layers.
    fn in_stack_linear_weight(&self) -> bool {
        matches!(self.path.last(), Some((field, holder)) if field == "weight" && holder == "Struct:Linear")
            && self.path.iter().any(|(_, holder)| holder == "Vec")
    }
}

impl ModuleMapper for LinearQuantizer {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path
            .push((name.to_string(), container_type.to_string()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if D != 2 || !self.in_stack_linear_weight() {
            return param;
        }
        let path: Vec<&str> = self.path.iter().map(|(field, _)| field.as_str()).collect();
        if let Some(&bytes) = self.packed.get(&path.join(".")) {
            // Packed as it was read; its base is a placeholder, never to be quantized.
            let values = param.lazy_shape().num_elements();
            let float = zoo_device::FloatType::of(&param.lazy_device()).unwrap_or_default();
            self.report.tensors += 1;
            self.report.values += values;
            self.report.bytes_before += values * float.bytes();
            self.report.bytes_after += bytes;
            return param;
        }
        let (dims, dtype) = (param.lazy_shape().to_vec(), param.val().dtype());
        if !takes_block(&dims, &self.options, &self.scheme) {
            self.report.kept += 1;
            return param;
        }
        let values: usize = dims.iter().product();
        self.report.tensors += 1;
        self.report.values += values;
        if let DType::QFloat(_) = dtype {
            // Quantized as it was read: the float type it was read in is the device's.
            let float = zoo_device::FloatType::of(&param.lazy_device()).unwrap_or_default();
            self.report.bytes_before += values * float.bytes();
            self.report.bytes_after += stored_bytes(dtype, &dims);
            return param;
        }
        self.report.bytes_before += values * dtype.size();
        self.report.bytes_after += stored_bytes(DType::QFloat(self.scheme), &dims);
        let scheme = self.scheme;
        param.map(move |tensor| quantize_tensor(tensor, &scheme))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::LinearConfig;
    use zoo_device::test_device;

    /// Linear layers in a `Vec`: a layer stack, whose weights quantizing takes.
    #[derive(Module, Debug)]
    struct Stack {
        layers: Vec<burn::nn::Linear>,
    }

    impl Stack {
        fn of(dims: &[(usize, usize)], device: &Device) -> Self {
            let layers = dims
                .iter()
                .map(|&(d_in, d_out)| LinearConfig::new(d_in, d_out).init(device))
                .collect();
            Self { layers }
        }
    }

    fn q(value: QuantValue, store: QuantStore, block: Option<u8>) -> DType {
        let base = QuantScheme::default().with_value(value).with_store(store);
        DType::QFloat(match block {
            Some(b) => base.per_block([b], ScaleDtype::F32),
            None => base.per_tensor(ScaleDtype::F32),
        })
    }

    /// The host quantizer gives the bytes of Burn's on flex (values and scales, to the
    /// bit) for 8 and 4 bits, per tensor and per block, on values with ties, zeroes, a
    /// block of zeroes and one of a single large value; and refuses what it does not
    /// reproduce.
    #[test]
    fn the_host_quantizer_gives_flexs_bytes() {
        // Flex on every backend's run: the host code reproduces flex's quantization.
        let device = Device::flex();
        let (k, n) = (6, 64);
        let mut values: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 97.0)
            .collect();
        values[32..64].fill(0.0);
        values[64..96].fill(0.0);
        values[70] = 1e30;
        values[100] = 0.5;
        values[101] = -0.5;
        let base = QuantScheme::default().with_store(QuantStore::Native);
        for value in [QuantValue::Q8S, QuantValue::Q4S] {
            for block in [None, Some(32), Some(64)] {
                let scheme = match block {
                    Some(b) => base.with_value(value).per_block([b], ScaleDtype::F32),
                    None => base.with_value(value).per_tensor(ScaleDtype::F32),
                };
                let tensor = Tensor::<2>::from_data(
                    burn::tensor::TensorData::new(values.clone(), [k, n]),
                    &device,
                );
                let burn = quantize_tensor(tensor, &scheme).into_data();
                let host = quantize_f32_as_flex(&values, &[k, n], &scheme).unwrap();
                assert_eq!(host.dtype(), burn.dtype(), "{value:?} {block:?}");
                assert_eq!(host.as_bytes(), burn.as_bytes(), "{value:?} {block:?}");
            }
        }
        let tensor_scale = base.per_tensor(ScaleDtype::F16);
        assert!(quantize_f32_as_flex(&values, &[k, n], &tensor_scale).is_none());
        let odd = base.per_block([48], ScaleDtype::F32);
        assert!(quantize_f32_as_flex(&values, &[k, n], &odd).is_none());
        let packed = base
            .with_store(QuantStore::PackedU32(0))
            .per_block([32], ScaleDtype::F32);
        assert!(quantize_f32_as_flex(&values, &[k, n], &packed).is_none());
        let mut nan = values.clone();
        nan[3] = f32::NAN;
        let q8 = base.per_block([32], ScaleDtype::F32);
        assert!(quantize_f32_as_flex(&nan, &[k, n], &q8).is_none());
    }

    /// A weight quantized a part at a time equals it quantized whole, byte for byte:
    /// stored as it is, and stored transposed (each part turned in memory), in parts of
    /// one row or block to more than the whole, per block and per tensor (its range read
    /// first, over every part). A value that is not finite gives `None`, as it does whole,
    /// and a failed read is passed on.
    #[test]
    fn quantizing_by_parts_equals_quantizing_whole() {
        let (k, n) = (6, 64);
        let values: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 97.0)
            .collect();
        // Stored `[n, k]`.
        let turned: Vec<f32> = (0..n * k).map(|i| values[(i % k) * n + i / k]).collect();
        let base = QuantScheme::default().with_store(QuantStore::Native);
        let by_parts = |stored: &[f32], scheme: &QuantScheme, transposed: bool, part: usize| {
            let mut reads = 0;
            let quantized = quantize_f32_as_flex_by_parts(
                &[k, n],
                scheme,
                transposed,
                part,
                |start: usize, out: &mut [f32]| {
                    reads += 1;
                    out.copy_from_slice(&stored[start..start + out.len()]);
                    Ok::<(), String>(())
                },
            );
            (quantized.unwrap(), reads)
        };
        for value in [QuantValue::Q8S, QuantValue::Q4S] {
            for block in [None, Some(16), Some(32)] {
                let scheme = match block {
                    Some(b) => base.with_value(value).per_block([b], ScaleDtype::F32),
                    None => base.with_value(value).per_tensor(ScaleDtype::F32),
                };
                let whole = quantize_f32_as_flex(&values, &[k, n], &scheme).unwrap();
                for part in [1, 70, 200, 1 << 20] {
                    for (stored, transposed) in [(&values, false), (&turned, true)] {
                        let (got, reads) = by_parts(stored, &scheme, transposed, part);
                        let got = got.unwrap();
                        assert_eq!(got.dtype(), whole.dtype());
                        assert_eq!(
                            got.as_bytes(),
                            whole.as_bytes(),
                            "{value:?} {block:?} parts of {part}, transposed {transposed}"
                        );
                        // Parts of a row (or a block of stored rows) at the least.
                        let stored_rows = if transposed { n } else { k };
                        let unit = if transposed {
                            block.map_or(1, usize::from)
                        } else {
                            1
                        };
                        let per_part = (part / (k * n / stored_rows) / unit).max(1) * unit;
                        let passes = if block.is_none() { 2 } else { 1 };
                        assert_eq!(
                            reads,
                            passes * stored_rows.div_ceil(per_part),
                            "{value:?} {block:?} {part} {transposed}"
                        );
                    }
                }
            }
        }
        let q8 = base
            .with_value(QuantValue::Q8S)
            .per_block([32], ScaleDtype::F32);
        assert!(by_parts(&turned, &q8, true, 64).0.is_some());
        // Negative control: the transposed store read as if it were not gives other bytes.
        let whole = quantize_f32_as_flex(&values, &[k, n], &q8).unwrap();
        let misread = by_parts(&turned, &q8, false, 64).0.unwrap();
        assert_ne!(misread.as_bytes(), whole.as_bytes());
        let mut nan = turned.clone();
        nan[77] = f32::NAN;
        assert!(by_parts(&nan, &q8, true, 64).0.is_none());
        let failed = quantize_f32_as_flex_by_parts(&[k, n], &q8, false, 64, |_, _| {
            Err("disk gone".to_string())
        });
        assert_eq!(failed.unwrap_err(), "disk gone");
    }

    /// Each store's bytes, worked by hand: 64 x 96 values, blocks of 32 (192 f32 scales,
    /// 768 bytes); a `u32` word holds four 8-bit or eight 4-bit values, and each line of
    /// 96 starts a word.
    #[test]
    fn stored_bytes_follow_each_store() {
        let shape = [64, 96];
        assert_eq!(stored_bytes(DType::F32, &shape), 64 * 96 * 4);
        assert_eq!(stored_bytes(DType::F16, &shape), 64 * 96 * 2);
        let native8 = q(QuantValue::Q8S, QuantStore::Native, Some(32));
        assert_eq!(stored_bytes(native8, &shape), 6144 + 768);
        // One value per byte below 8 bits too, as flex and ndarray keep them.
        let native4 = q(QuantValue::Q4S, QuantStore::Native, Some(32));
        assert_eq!(stored_bytes(native4, &shape), 6144 + 768);
        let packed8 = q(QuantValue::Q8S, QuantStore::PackedU32(0), Some(32));
        assert_eq!(stored_bytes(packed8, &shape), 64 * 24 * 4 + 768);
        let packed4 = q(QuantValue::Q4S, QuantStore::PackedU32(0), Some(32));
        assert_eq!(stored_bytes(packed4, &shape), 64 * 12 * 4 + 768);
        // A line of 100 4-bit values takes 13 words; one f32 scale per tensor.
        let tensor4 = q(QuantValue::Q4S, QuantStore::PackedU32(0), None);
        assert_eq!(stored_bytes(tensor4, &[3, 100]), 3 * 13 * 4 + 4);
    }

    /// A model's weight bytes as quantizing leaves them: inside a `Vec` the linear
    /// weights are quantized and counted at their stored size, and the report's bytes
    /// after are theirs; the biases and the weight outside the `Vec` stay f32.
    #[test]
    fn weight_bytes_count_what_quantizing_left() {
        #[derive(Module, Debug)]
        struct Net {
            layers: Vec<burn::nn::Linear>,
            head: burn::nn::Linear,
        }
        let device = test_device();
        let net = Net {
            layers: vec![LinearConfig::new(32, 64).init(&device)],
            head: LinearConfig::new(64, 8).init(&device),
        };
        let f32_bytes = (32 * 64 + 64 + 64 * 8 + 8) * 4;
        assert_eq!(
            weight_bytes(&net),
            WeightBytes {
                total: f32_bytes,
                quantized: 0,
                quantized_values: 0
            }
        );
        let options = QuantOptions::per_block(QuantBits::Q8, 32);
        let Ok((net, report)) = quantize_linear_weights(net, &options, &device) else {
            return; // a backend without quantized weights (libtorch)
        };
        let w = weight_bytes(&net);
        assert_eq!(report.tensors, 1);
        assert_eq!(w.quantized_values, 32 * 64);
        assert_eq!(w.quantized, report.bytes_after);
        assert_eq!(report.bytes_before, 32 * 64 * 4);
        assert_eq!(
            w.total,
            f32_bytes - report.bytes_before + report.bytes_after
        );
        // 8 bits and one f32 scale per 32 values: 1.125 bytes a value on flex and ndarray,
        // packed into words elsewhere, the same 1.125.
        assert_eq!(w.quantized, 32 * 64 + 64 * 4);
    }

    /// 4-bit weights on flex are packed two to a byte: half a byte a value and one f32
    /// scale per block, counted so in the report and in the weight bytes; the parameter
    /// count is the float model's; the outputs are the unpacked model's (Burn's quantized
    /// tensors, bit for bit: `Linear::forward` reads the weight through `Param::val`); and
    /// saving sees Burn's tensors again. Elsewhere nothing is packed.
    #[test]
    fn q4_weights_are_packed_two_to_a_byte_on_flex() {
        let device = test_device();
        let net = Stack::of(&[(32, 64), (64, 16)], &device);
        let params = param_count(&net);
        assert_eq!(params, 32 * 64 + 64 + 64 * 16 + 16);
        let options = QuantOptions::per_block(QuantBits::Q4, 8);
        let Ok((net, report)) = quantize_linear_weights(net, &options, &device) else {
            return; // a backend without 4-bit weights (libtorch, ndarray)
        };
        let flex = zoo_device::BackendName::of(&device) == Some(zoo_device::BackendName::Flex);
        assert_eq!(has_packed_q4(&net), flex);
        assert_eq!(packs_q4(&options, &device), flex);
        assert_eq!(param_count(&net), params);
        let w = weight_bytes(&net);
        let values = 32 * 64 + 64 * 16;
        assert_eq!(w.quantized_values, values);
        assert_eq!(w.quantized, report.bytes_after, "{report:?}");
        assert_eq!(w.total, (64 + 16) * 4 + w.quantized);
        if !flex {
            return;
        }
        // Half a byte a value, and a 4-byte scale per 8 values.
        assert_eq!(w.quantized, values / 2 + values / 8 * 4);
        let x = Tensor::<2>::random(
            [3, 32],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &device,
        );
        let run = |n: &Stack| {
            let y = n.layers[1].forward(n.layers[0].forward(x.clone()));
            y.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
        };
        let unpacked = unpacked(&net).expect("the packed weights, unpacked");
        assert!(!has_packed_q4(&unpacked));
        assert!(matches!(
            unpacked.layers[0].weight.val().dtype(),
            DType::QFloat(s) if s.value == QuantValue::Q4S
        ));
        assert_eq!(weight_bytes(&unpacked).quantized, values + values / 8 * 4);
        assert_eq!(run(&net), run(&unpacked));
        assert!(crate::checkpoint::is_quantized(&net));
        // Packed again: the same bytes as the first packing.
        let (again, saved) = pack_q4_weights(unpacked);
        assert_eq!(saved, values / 2);
        assert_eq!(weight_bytes(&again), w);
        assert_eq!(run(&again), run(&net));
    }

    /// A layer whose width leaves a `u32` word part-filled is kept in float where the
    /// backend packs values into words (wgpu, cuda: it panicked inside the backend
    /// before), and quantized where it stores one value per byte (flex, ndarray); the
    /// model runs either way, and the layer beside it, whose width fills whole words, is
    /// quantized on every backend.
    #[test]
    fn widths_a_packed_store_cannot_hold_are_kept_in_float() {
        let device = test_device();
        let net = Stack::of(&[(16, 6), (6, 16)], &device);
        let options = QuantOptions::per_tensor(QuantBits::Q8);
        let Ok(tensor_scheme) = scheme(&options, &device) else {
            return; // a backend without quantized weights (libtorch)
        };
        let packed = !matches!(tensor_scheme.store, QuantStore::Native);
        assert_eq!(takes_block(&[16, 6], &options, &tensor_scheme), !packed);
        assert!(takes_block(&[6, 16], &options, &tensor_scheme));
        let x = Tensor::<2>::ones([2, 16], &device);
        let (net, report) = quantize_linear_weights(net, &options, &device).unwrap();
        assert_eq!(report.kept, usize::from(packed), "{report:?}");
        assert_eq!(report.tensors, 2 - usize::from(packed), "{report:?}");
        let first = net.layers[0].weight.val().dtype();
        assert_eq!(matches!(first, DType::QFloat(_)), !packed, "{first:?}");
        assert!(matches!(
            net.layers[1].weight.val().dtype(),
            DType::QFloat(_)
        ));
        let y = net.layers[1].forward(net.layers[0].forward(x));
        assert_eq!(y.dims(), [2, 16]);
        let values = y.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        assert!(values.iter().all(|v| v.is_finite()), "{values:?}");
        // Blocks of 4 fill whole words at 8 bits (four values a word) but not at 4
        // bits (eight): a width of 12 takes the first and not the second, where packed.
        let q8 = QuantOptions::per_block(QuantBits::Q8, 4);
        let q4 = QuantOptions::per_block(QuantBits::Q4, 4);
        if let (Ok(s8), Ok(s4)) = (scheme(&q8, &device), scheme(&q4, &device)) {
            assert!(takes_block(&[4, 12], &q8, &s8));
            assert_eq!(takes_block(&[4, 12], &q4, &s4), !packed);
            assert!(takes_block(&[4, 16], &q4, &s4));
        }
    }
}
