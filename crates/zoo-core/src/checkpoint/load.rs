//! Loading a checkpoint's tensors into a module, with one report of every tensor that
//! does not fit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use burn::module::Module;
use burn::store::burn_pack::Error as PackError;
use burn::store::{ApplyError, ModuleSnapshot};
use burn::tensor::{DType, TensorData};

use super::keymap::Direction;
use super::weights::{cast_float, repack};
use super::{CheckpointError, KeyMap, PackTensor, TensorReport, WeightsFile};
use crate::QuantOptions;

/// Loads `tensors` (by checkpoint name) into `module` through `map`.
///
/// Returns the checkpoint names that were loaded. Nothing is half-loaded silently: when
/// any tensor is missing, unexpected or mis-shaped, the error lists them all.
///
/// # Errors
/// [`CheckpointError::Tensors`], naming `path` (the file the tensors came from).
pub fn load_tensors<M: Module>(
    module: &mut M,
    tensors: BTreeMap<String, PackTensor>,
    map: &KeyMap,
    path: &Path,
) -> Result<Vec<String>, CheckpointError> {
    load(module, tensors, map, path, true)
}

/// Loads `tensors` into the parts of `module` they name, leaving the others as they are
/// (a head that an adapter saves whole); unexpected and mis-shaped tensors are errors.
///
/// # Errors
/// [`CheckpointError::Tensors`], naming `path`.
pub(crate) fn load_some<M: Module>(
    module: &mut M,
    tensors: BTreeMap<String, PackTensor>,
    map: &KeyMap,
    path: &Path,
) -> Result<Vec<String>, CheckpointError> {
    load(module, tensors, map, path, false)
}

thread_local! {
    static HEADERS_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static QUANTIZE: std::cell::Cell<Option<QuantOptions>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with every load in it on this thread ([`load_into`], [`load_tensors`])
/// quantizing the weights of the linear layers inside the layer stacks as each is read,
/// with `options`, as [`crate::quantize_linear_weights`] quantizes them after loading (the
/// same tensors, to the same values): each is read, quantized and dropped before the next
/// is read, so loading never holds those weights in float, and its peak memory is about
/// the quantized model's. Embeddings, heads, norms and biases load in their precision.
///
/// Load a model whose weights change after loading (a LoRA adapter merged into them)
/// outside it, and quantize after the merge.
pub fn quantized_while_loading<T>(options: &QuantOptions, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<QuantOptions>);
    impl Drop for Reset {
        fn drop(&mut self) {
            QUANTIZE.with(|q| q.set(self.0));
        }
    }
    let _reset = Reset(QUANTIZE.with(|q| q.replace(Some(*options))));
    f()
}

thread_local! {
    static BY_PARTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many weights this thread has quantized as read a part at a time: what tests read
/// to tell that a weight's f32 values were not read whole.
#[cfg(test)]
pub(super) fn quantized_by_parts() -> usize {
    BY_PARTS.with(std::cell::Cell::get)
}

/// The family's adapter, then the linear weights of the layer stacks quantized as they
/// are read (see [`quantized_while_loading`]).
#[derive(Clone)]
struct QuantizeOnLoad {
    inner: super::keymap::HfAdapter,
    options: QuantOptions,
    scheme: burn::tensor::quantization::QuantScheme,
    /// The type a quantized tensor of `scheme` has on `device`.
    dtype: DType,
    device: burn::tensor::Device,
}

impl QuantizeOnLoad {
    fn new(
        inner: super::keymap::HfAdapter,
        options: QuantOptions,
        device: &burn::tensor::Device,
    ) -> Result<Self, String> {
        let scheme = crate::quant::scheme(&options, device)?;
        // The type the backend gives a quantized tensor (its store), from a probe whose
        // width is whole blocks and whole `u32` words (wgpu packs values into them).
        let width = options.block.map_or(32, |b| b * 8);
        let probe = burn::tensor::Tensor::<2>::ones([1, width], device);
        let dtype = crate::quant::quantize_tensor(probe, &scheme).dtype();
        Ok(Self {
            inner,
            options,
            scheme,
            dtype,
            device: device.clone(),
        })
    }

    /// The values and stored bytes of the weights of `shapes` that it quantizes.
    fn bytes_of(&self, shapes: &[Vec<usize>]) -> (usize, usize) {
        shapes
            .iter()
            .filter(|shape| crate::quant::takes_block(shape, &self.options, &self.scheme))
            .fold((0, 0), |(values, bytes), shape| {
                (
                    values + shape.iter().product::<usize>(),
                    bytes + crate::quant::stored_bytes(self.dtype, shape),
                )
            })
    }

    /// A float `[in, out]` weight of a `Linear` inside a layer stack (a path through a
    /// `Vec`, whose items are numbered), whose width the block divides: what
    /// [`crate::quantize_linear_weights`] quantizes.
    fn takes(&self, tensor: &PackTensor, ctx: &burn::store::ModuleContext<'_>) -> bool {
        let float = matches!(tensor.dtype, DType::F32 | DType::F16 | DType::BF16);
        float
            && in_stack(&tensor.name)
            && tensor.name.ends_with(".weight")
            && ctx.module_type() == Some("Struct:Linear")
            && tensor.shape.num_dims() == 2
            && crate::quant::takes_block(&tensor.shape, &self.options, &self.scheme)
    }
}

impl burn::store::ModuleAdapter for QuantizeOnLoad {
    fn adapt(&self, tensor: PackTensor, ctx: burn::store::ModuleContext<'_>) -> PackTensor {
        let transposed = self.inner.transposes_linear_weight(&tensor, &ctx);
        let tensor = self.inner.adapt(tensor, ctx);
        if !self.takes(&tensor, &ctx) {
            return tensor;
        }
        let (name, shape, id) = (tensor.name.clone(), tensor.shape.clone(), tensor.param_id);
        let (scheme, device) = (self.scheme, self.device.clone());
        // On flex, quantized on the host to flex's own values and scales, a block at a
        // time (`quantize_f32_as_flex`); its spare capacity goes once it is applied
        // (`apply_by_layer`).
        let on_flex = match self.dtype {
            DType::QFloat(target)
                if !device.is_autodiff()
                    && zoo_device::BackendName::of(&device)
                        == Some(zoo_device::BackendName::Flex) =>
            {
                Some(target)
            }
            _ => None,
        };
        burn::store::bridge::deferred(name, self.dtype, shape.clone(), id, move || {
            let draw = || burn::store::bridge::to_data(&tensor);
            let data = match on_flex {
                // The f32 values of a safetensors file read a part at a time, so that
                // the weight's f32 values are never held whole.
                Some(target) if tensor.dtype == DType::F32 => {
                    match super::safetensors_file::read_raw(draw)? {
                        Ok(data) => data,
                        Err(raw) => {
                            let stored: Vec<usize> = if transposed {
                                shape.iter().rev().copied().collect()
                            } else {
                                shape.to_vec()
                            };
                            let quantized = (raw.shape == stored)
                                .then(|| {
                                    crate::quant::quantize_f32_as_flex_by_parts(
                                        &shape.to_vec(),
                                        &target,
                                        transposed,
                                        crate::quant::PART_VALUES,
                                        |start, out| raw.read(start, out),
                                    )
                                })
                                .transpose()
                                .map_err(|e| PackError::IoError(e.to_string()))?
                                .flatten();
                            match quantized {
                                Some(quantized) => {
                                    BY_PARTS.with(|n| n.set(n.get() + 1));
                                    return Ok(quantized);
                                }
                                // A value that is not finite, or a layout not foreseen: read
                                // whole, as any other file is.
                                None => draw()?,
                            }
                        }
                    }
                }
                _ => draw()?,
            };
            if let Some(target) = on_flex
                && let Ok(values) = data.as_slice::<f32>()
                && let Some(quantized) =
                    crate::quant::quantize_f32_as_flex(values, &data.shape().to_vec(), &target)
            {
                return Ok(quantized);
            }
            let weight = burn::tensor::Tensor::<2>::from_data(data, &device);
            let data = crate::quant::quantize_tensor(weight, &scheme).into_data();
            // Burn appends the scales to the values' vector, which doubles its capacity,
            // and flex keeps that vector as the tensor's storage: held at its length, a
            // q8 GPT-2 took 1.34 × its weights' bytes after loading instead of 1.0 ×.
            let (shape, dtype) = (data.shape().clone(), data.dtype());
            let bytes = super::memory::copy_of(&data.into_bytes());
            Ok(TensorData::from_bytes(bytes, shape, dtype))
        })
    }

    fn get_alternative_param_name(&self, param_name: &str, container_type: &str) -> Option<String> {
        self.inner
            .get_alternative_param_name(param_name, container_type)
    }

    fn clone_box(&self) -> Box<dyn burn::store::ModuleAdapter> {
        Box::new(self.clone())
    }
}

/// Runs `f` with every load in it on this thread ([`load_into`], [`load_tensors`]) reading
/// the weights file's headers only: each tensor's name and shape are checked against the
/// model as loading checks them, with the same report of every tensor that does not fit,
/// but no tensor is read, and the model's parameters stay uninitialised, allocating
/// nothing. A model loaded this way is good for its architecture and parameter count
/// (`num_params`) and nothing else: running it would initialise random weights.
///
/// This is how `zoo info` describes a checkpoint of any size without loading it.
pub fn headers_only<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            HEADERS_ONLY.with(|h| h.set(self.0));
        }
    }
    let _reset = Reset(HEADERS_ONLY.with(|h| h.replace(true)));
    f()
}

/// What the adapter of a headers-only load saw: each parameter's path and the shape of
/// the file's tensor for it, in the model's layout.
type Seen = std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<usize>>>>;

/// The family's adapter, then a record of the adapted shape and a tensor whose data is
/// never read (its provider fails, and the applier leaves the parameter as it was).
#[derive(Clone)]
struct HeadersOnly {
    inner: super::keymap::HfAdapter,
    seen: Seen,
}

/// The message a headers-only tensor gives when read: the applier files it under its
/// load errors, which a headers-only load drops.
const NOT_READ: &str = "headers only: not read";

impl burn::store::ModuleAdapter for HeadersOnly {
    fn adapt(&self, tensor: PackTensor, ctx: burn::store::ModuleContext<'_>) -> PackTensor {
        let tensor = self.inner.adapt(tensor, ctx);
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(tensor.name.clone(), tensor.shape.to_vec());
        }
        burn::store::bridge::deferred(
            tensor.name.clone(),
            tensor.dtype,
            tensor.shape.clone(),
            tensor.param_id,
            || {
                Err(burn::store::burn_pack::Error::ValidationError(
                    NOT_READ.into(),
                ))
            },
        )
    }

    fn get_alternative_param_name(&self, param_name: &str, container_type: &str) -> Option<String> {
        self.inner
            .get_alternative_param_name(param_name, container_type)
    }

    fn clone_box(&self) -> Box<dyn burn::store::ModuleAdapter> {
        Box::new(self.clone())
    }
}

fn load<M: Module>(
    module: &mut M,
    tensors: BTreeMap<String, PackTensor>,
    map: &KeyMap,
    path: &Path,
    whole: bool,
) -> Result<Vec<String>, CheckpointError> {
    let headers_only = HEADERS_ONLY.with(std::cell::Cell::get);
    let ignore: Vec<regex::Regex> = map
        .ignore
        .iter()
        .map(|p| regex::Regex::new(p).expect("a family's key map has a bad regex"))
        .collect();
    // Quantized weights (a `model.bpk` that `zoo quantize` wrote) on a backend that cannot
    // run them would panic in their first product: refuse them here, in a sentence.
    let bits: BTreeSet<usize> = tensors
        .values()
        .filter_map(|t| match t.dtype {
            DType::QFloat(scheme) => Some(scheme.size_bits_value()),
            _ => None,
        })
        .collect();
    let devices = module.devices();
    for device in &devices {
        for &b in &bits {
            zoo_device::check_quantization(device, b as u32).map_err(|message| {
                CheckpointError::Format {
                    path: path.to_path_buf(),
                    message,
                }
            })?;
        }
    }
    // The parameters' paths and shapes, read without initialising them: a model built
    // for loading holds no random weights, so loading takes one copy of the weights.
    let shapes = LazyShapes::of(module);
    let target = float_target(&devices);
    let kept: Vec<PackTensor> = tensors
        .into_values()
        .filter(|t| {
            let name = map.family_name(&t.name);
            !ignore.iter().any(|re| re.is_match(&name))
        })
        .map(|t| cast_float(t, target))
        .map(|t| match devices.first() {
            Some(device) => repack(t, device.settings().quantization.scheme.store),
            None => t,
        })
        .collect();
    // A tensor larger than the backend's one-buffer bound (wgpu) would fail inside the
    // runtime once uploaded: name it here instead, before anything is read.
    if !headers_only
        && let Some(device) = devices.first()
        && let Some(limit) = zoo_device::max_tensor_bytes(device)
    {
        let backend = zoo_device::BackendName::of(device).map_or("this backend", |b| b.as_str());
        let sizes = kept
            .iter()
            .map(|t| (t.name.as_str(), t.shape.to_vec(), t.dtype));
        check_tensor_bytes(sizes, limit, backend).map_err(|message| CheckpointError::TooLarge {
            path: path.to_path_buf(),
            message,
        })?;
    }
    let file_shapes: BTreeMap<String, Vec<usize>> = kept
        .iter()
        .map(|t| (t.name.clone(), t.shape.to_vec()))
        .collect();
    let (renamed, names) = KeyMap::remapper(&map.load_patterns()).remap(kept);
    // module path -> checkpoint name
    let original: BTreeMap<String, String> = names.into_iter().collect();
    let checkpoint_name = |module_path: &str| {
        original
            .get(module_path)
            .cloned()
            .unwrap_or_else(|| map.checkpoint_name(module_path))
    };
    let model_shapes = shapes.shapes;

    let adapter = map.adapter(Direction::ToBurn);
    let quantizer = match (QUANTIZE.with(std::cell::Cell::get), devices.first()) {
        (Some(options), Some(device)) if !headers_only => Some(
            QuantizeOnLoad::new(adapter.clone(), options, device).map_err(|message| {
                CheckpointError::Format {
                    path: path.to_path_buf(),
                    message,
                }
            })?,
        ),
        _ => None,
    };
    if whole
        && !headers_only
        && let Some(float) = devices.first().and_then(zoo_device::FloatType::of)
    {
        let params = module.num_params();
        let fits = match &quantizer {
            None => crate::validate::model_fits(params, float.as_str(), float.bytes()),
            Some(q) => {
                let (values, bytes) = q.bytes_of(&shapes.stack_linear_weights);
                crate::validate::fits_in_memory(
                    &format!(
                        "the model's {} parameters in {float}, {} of them quantized {},",
                        crate::thousands(params),
                        crate::thousands(values),
                        q.options
                    ),
                    ((params - values) * float.bytes() + bytes) as f64,
                    1.0,
                )
            }
        };
        fits.map_err(|e| CheckpointError::TooLarge {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    }
    // Quantized weights on flex (quantized as read, or a quantized folder) are read one
    // at a time, each held at its length and at 4 bits packed two to a byte before the
    // next is read (`apply_by_layer`).
    let by_layer = !headers_only
        && devices.first().is_some_and(|d| {
            !d.is_autodiff()
                && zoo_device::BackendName::of(d) == Some(zoo_device::BackendName::Flex)
        })
        && (!bits.is_empty() || quantizer.is_some());
    let packs = by_layer
        && (bits.contains(&4)
            || quantizer
                .as_ref()
                .is_some_and(|q| q.options.bits == crate::QuantBits::Q4));
    let seen = Seen::default();
    let adapter: Box<dyn burn::store::ModuleAdapter> = match quantizer {
        _ if headers_only => Box::new(HeadersOnly {
            inner: adapter,
            seen: seen.clone(),
        }),
        Some(q) => Box::new(q),
        None => Box::new(adapter),
    };
    // Each tensor is read now: mapped apart and given back when freed (`memory.rs`).
    let reading = super::memory::Reading::start();
    let mut result = if by_layer {
        apply_by_layer(module, renamed, adapter.as_ref(), packs)
    } else {
        module.apply(renamed, None, Some(adapter), true)
    };
    drop(reading);
    if headers_only {
        // Nothing was read: every tensor found is a load error of its own making, and a
        // shape is checked here as the applier checks it once it has read the data.
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        result.errors.retain(
            |e| !matches!(e, ApplyError::LoadError { message, .. } if message.contains(NOT_READ)),
        );
        for (module_path, found) in seen {
            let expected = model_shapes.get(&module_path).cloned().unwrap_or_default();
            if expected == found {
                result.applied.push(module_path);
            } else {
                result.errors.push(ApplyError::ShapeMismatch {
                    path: module_path,
                    expected: expected.into(),
                    found: found.into(),
                });
            }
        }
    }

    let mut report = TensorReport::default();
    for (module_path, _) in result.missing.iter().filter(|_| whole) {
        let shape = model_shapes.get(module_path).cloned().unwrap_or_default();
        report
            .missing
            .push((map.checkpoint_name(module_path), shape));
    }
    for module_path in &result.unused {
        let name = checkpoint_name(module_path);
        let shape = file_shapes.get(&name).cloned().unwrap_or_default();
        report.unexpected.push((name, shape));
    }
    for error in &result.errors {
        match error {
            ApplyError::ShapeMismatch {
                path,
                expected,
                found,
            } => report
                .mismatched
                .push((checkpoint_name(path), expected.to_vec(), found.to_vec())),
            other => report.other.push(other.to_string()),
        }
    }
    report.missing.sort();
    report.unexpected.sort();
    report.mismatched.sort();
    if report.is_empty() {
        let applied: BTreeSet<String> = result.applied.iter().map(|p| checkpoint_name(p)).collect();
        Ok(applied.into_iter().collect())
    } else {
        Err(CheckpointError::Tensors {
            path: path.to_path_buf(),
            report,
        })
    }
}

/// Applies `tensors` to `module` one tensor of a layer stack at a time (the others
/// together, first). After each, its quantized weight is held at its length
/// ([`crate::quant::compact_quantized`]) and, with `packs`, at 4 bits packed two to a byte
/// ([`crate::quant::pack_q4_weights`]), before the next is read. Loading then holds the
/// spare bytes and the unpacked values of one tensor at a time, not of the whole model:
/// a GPT-2 small quantized as it was read allocated 1.30 × (4 bits) and 1.08 × (8 bits)
/// its weights' bytes when it was applied whole and packed after, and 1.06 × at both
/// this way.
///
/// The result is the one applying them all at once gives: what each applied, left unused
/// or refused, and as missing what none supplied.
fn apply_by_layer<M: Module>(
    module: &mut M,
    tensors: Vec<PackTensor>,
    adapter: &dyn burn::store::ModuleAdapter,
    packs: bool,
) -> burn::store::ApplyResult {
    let mut groups: BTreeMap<&str, Vec<PackTensor>> = BTreeMap::new();
    let names: Vec<String> = tensors.iter().map(|t| t.name.clone()).collect();
    for (tensor, name) in tensors.into_iter().zip(&names) {
        let key = if in_stack(name) { name.as_str() } else { "" };
        groups.entry(key).or_default().push(tensor);
    }
    if groups.is_empty() {
        groups.insert("", Vec::new());
    }
    let mut merged: Option<burn::store::ApplyResult> = None;
    for (_, group) in groups {
        let result = module.apply(group, None, Some(adapter.clone_box()), true);
        let mut next = crate::quant::compact_quantized(module.clone());
        if packs {
            next = crate::quant::pack_q4_weights(next).0;
        }
        *module = next;
        merged = Some(match merged {
            None => result,
            Some(mut all) => {
                let missing: BTreeSet<&String> = result.missing.iter().map(|(p, _)| p).collect();
                all.missing.retain(|(p, _)| missing.contains(p));
                all.applied.extend(result.applied);
                all.skipped.extend(result.skipped);
                all.unused.extend(result.unused);
                all.errors.extend(result.errors);
                all
            }
        });
    }
    merged.expect("at least one group is applied")
}

/// Whether a module path runs through a layer stack: one of its parts is a number (an
/// item of a `Vec`).
fn in_stack(path: &str) -> bool {
    path.split('.')
        .any(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// The first of `tensors` (name, shape, type as loaded) that takes more than `limit`
/// bytes, the most one tensor may take on `backend`, as a sentence naming it. Quantized
/// tensors are not counted: their blocks are stored apart from their scales.
fn check_tensor_bytes<'a>(
    tensors: impl IntoIterator<Item = (&'a str, Vec<usize>, DType)>,
    limit: u64,
    backend: &str,
) -> Result<(), String> {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    for (name, shape, dtype) in tensors {
        if matches!(dtype, DType::QFloat(_)) {
            continue;
        }
        let bytes = shape
            .iter()
            .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d as u64))
            .unwrap_or(u64::MAX);
        if bytes > limit {
            let half = dtype.size() > 2 && bytes / dtype.size() as u64 * 2 <= limit;
            return Err(format!(
                "tensor {name} {shape:?} takes {:.1} MiB in {}, more than the {:.1} MiB that \
                 one buffer holds on {backend} with this adapter; load it {}on flex, tch or \
                 cuda",
                mib(bytes),
                format!("{dtype:?}").to_lowercase(),
                mib(limit),
                if half { "in half precision, or " } else { "" }
            ));
        }
    }
    Ok(())
}

/// Every parameter's path (enum variants left out, as the loader names them) and shape,
/// from `Param::lazy_shape`: nothing is initialised or read.
#[derive(Default)]
struct LazyShapes {
    shapes: BTreeMap<String, Vec<usize>>,
    path: Vec<String>,
    /// The type holding each level of `path`, enum variants included.
    holders: Vec<String>,
    /// The shapes of the weights of the linear layers inside layer stacks (under a `Vec`),
    /// the ones that quantizing takes.
    stack_linear_weights: Vec<Vec<usize>>,
}

impl LazyShapes {
    fn of<M: Module>(module: &M) -> Self {
        let mut shapes = Self::default();
        module.visit(&mut shapes);
        shapes
    }

    fn add(&mut self, shape: burn::tensor::Shape) {
        self.shapes.insert(self.path.join("."), shape.to_vec());
    }
}

impl burn::module::ModuleVisitor for LazyShapes {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.holders.push(container_type.to_string());
        if !container_type.starts_with("Enum:") {
            self.path.push(name.to_string());
        }
    }

    fn exit_module(&mut self, _name: &str, container_type: &str) {
        self.holders.pop();
        if !container_type.starts_with("Enum:") {
            self.path.pop();
        }
    }

    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        let shape = param.lazy_shape();
        if D == 2
            && self.path.last().is_some_and(|p| p == "weight")
            && self.holders.last().is_some_and(|h| h == "Struct:Linear")
            && self.holders.iter().any(|h| h == "Vec")
        {
            self.stack_linear_weights.push(shape.to_vec());
        }
        self.add(shape);
    }

    fn visit_int<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D, burn::tensor::Int>>,
    ) {
        self.add(param.lazy_shape());
    }

    fn visit_bool<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D, burn::tensor::Bool>>,
    ) {
        self.add(param.lazy_shape());
    }
}

/// Loads the weights file of `dir` into `module` through `map`; see [`load_tensors`].
///
/// # Errors
/// No weights file, an unreadable one, or tensors that do not fit.
pub fn load_into<M: Module>(
    module: &mut M,
    dir: &Path,
    map: &KeyMap,
) -> Result<Vec<String>, CheckpointError> {
    let file = WeightsFile::find(dir)?;
    // An f32 file for a half-precision model is narrowed as it is read.
    let tensors = file.tensors_as(Some(float_target(&module.devices())))?;
    // 4-bit weights come out packed two to a byte on flex, as quantizing packs them
    // (`apply_packing`).
    load_tensors(module, tensors, map, file.path())
}

/// The float type a module on `devices` makes its parameters in: the first device's
/// default (f32 when there is none).
fn float_target(devices: &[burn::tensor::Device]) -> DType {
    devices
        .first()
        .and_then(zoo_device::FloatType::of)
        .map_or(DType::F32, |f| f.dtype().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::LinearConfig;
    use zoo_device::test_device;
    use zoo_device::testing::floats;

    #[test]
    fn a_tensor_over_the_backends_bound_is_named() {
        let tensors = [
            ("wpe", vec![1024, 64], DType::F32),
            ("wte", vec![50_257, 1024], DType::F32),
            ("head", vec![50_257, 1024, 1 << 40, 1 << 30], DType::F32),
        ];
        let limit = 128 << 20;
        let err = check_tensor_bytes(tensors.clone(), limit, "wgpu").unwrap_err();
        assert_eq!(
            err,
            "tensor wte [50257, 1024] takes 196.3 MiB in f32, more than the 128.0 MiB that one \
             buffer holds on wgpu with this adapter; load it in half precision, or on flex, tch \
             or cuda"
        );
        // In half precision it fits; a product that overflows still counts as too large.
        let half = [("wte", vec![50_257, 1024], DType::F16)];
        assert!(check_tensor_bytes(half, limit, "wgpu").is_ok());
        let err = check_tensor_bytes(tensors.into_iter().skip(2), limit, "wgpu").unwrap_err();
        assert!(err.starts_with("tensor head "), "{err}");
        assert!(err.ends_with("; load it on flex, tch or cuda"), "{err}");
        assert!(
            check_tensor_bytes([("wte", vec![50_257, 1024], DType::F32)], 1 << 30, "wgpu").is_ok()
        );
    }

    /// Loading reads the model's shapes without initialising its parameters, so a model
    /// built for loading never holds random weights beside the loaded ones; Burn's
    /// snapshot (`collect`), the control, initialises them.
    #[test]
    fn loading_reads_shapes_without_initialising_parameters() {
        let device = test_device();
        let mut model = LinearConfig::new(3, 2).init(&device);
        let shapes = LazyShapes::of(&model);
        assert_eq!(
            shapes.shapes,
            BTreeMap::from([
                ("bias".to_string(), vec![2]),
                ("weight".to_string(), vec![3, 2]),
            ])
        );
        assert!(!model.weight.is_initialized());
        let source = LinearConfig::new(3, 2).init(&device);
        let map = KeyMap::new();
        let to_hf = map.adapter(Direction::ToPytorch);
        let tensors: BTreeMap<String, PackTensor> = source
            .collect(None, Some(Box::new(to_hf)), true)
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        assert!(source.weight.is_initialized(), "collect initialises");
        let loaded = load_tensors(&mut model, tensors, &map, Path::new("m")).unwrap();
        assert_eq!(loaded, ["bias", "weight"]);
        assert_eq!(floats(model.weight.val()), floats(source.weight.val()));
        assert_eq!(
            floats(model.bias.unwrap().val()),
            floats(source.bias.unwrap().val())
        );
    }
}
