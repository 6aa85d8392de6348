//! Weight quantization through Burn's (`Tensor::quantize` with a `QuantScheme`): the
//! weights of the linear layers inside a model's layer stacks become 8- or 4-bit values
//! with f32 scales, per tensor or per block of the output dimension. Embedding tables,
//! output heads, norms and biases keep their precision, as common practice keeps the
//! first and last layers. Backends run the product on the packed weights where they can
//! (CubeCL's) and dequantize before it otherwise (flex, ndarray).

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::quantization::{
    Calibration, QuantScheme, QuantValue, ScaleDtype, compute_q_params, compute_range,
};
use burn::tensor::{Device, Tensor};

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
    /// multiple of the block.
    pub kept: usize,
    /// Bytes of the quantized tensors before (in their float type) and after (values
    /// and scales).
    pub bytes_before: usize,
    /// See `bytes_before`.
    pub bytes_after: usize,
}

/// Quantizes the weights of the linear layers inside the layer stacks (a `Vec` of
/// modules) of `model`, on `device`'s default scheme with `options`' values and scales.
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
    let mut mapper = LinearQuantizer {
        scheme,
        options: *options,
        path: Vec::new(),
        report: QuantReport::default(),
    };
    let model = model.map(&mut mapper);
    Ok((model, mapper.report))
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

struct LinearQuantizer {
    scheme: QuantScheme,
    options: QuantOptions,
    /// (field, the type that holds it) from the model down.
    path: Vec<(String, String)>,
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
        let dims = param.val().dims();
        let values: usize = dims.iter().product();
        if let Some(b) = self.options.block
            && !dims[D - 1].is_multiple_of(b)
        {
            self.report.kept += 1;
            return param;
        }
        let scales = self.options.block.map_or(1, |b| values / b);
        self.report.tensors += 1;
        self.report.values += values;
        self.report.bytes_before += values * param.val().dtype().size();
        self.report.bytes_after +=
            (values * self.options.bits.bits() as usize).div_ceil(8) + scales * 4;
        let scheme = self.scheme;
        param.map(move |tensor| {
            let range = compute_range(&scheme, &tensor, &Calibration::MinMax);
            let qparams = compute_q_params(&scheme, range);
            tensor.quantize(&scheme, qparams)
        })
    }
}
