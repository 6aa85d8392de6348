//! A trained decoder's weights at another precision: what half precision and quantized
//! weights cost in validation loss, measured on the same windows as the f32 model.

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{DType, Device, Tensor};
use zoo_core::{QuantBits, QuantOptions, quantize_linear_weights};
use zoo_decoder::DecoderLm;
use zoo_device::FloatType;

use crate::Error;

/// Values per scale of the quantized precisions.
pub const QUANT_BLOCK: usize = 32;

/// A precision of a model's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Precision {
    /// 32-bit floats, as trained.
    F32,
    /// Every float parameter, and so every activation, in f16.
    F16,
    /// Every float parameter, and so every activation, in bfloat16.
    Bf16,
    /// The layers' linear weights as Burn's 8-bit symmetric values with one f32 scale per
    /// 32 values (a row not a multiple of 32 stays f32); embeddings, head and norms f32.
    Q8,
    /// As `q8`, with 4-bit values.
    Q4,
}

impl Precision {
    /// Every precision, f32 first.
    pub const ALL: [Precision; 5] = [
        Precision::F32,
        Precision::F16,
        Precision::Bf16,
        Precision::Q8,
        Precision::Q4,
    ];

    /// The name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::Q8 => "q8",
            Precision::Q4 => "q4",
        }
    }

    /// The float type the device must compute in, set before its first tensor.
    pub fn float(self) -> FloatType {
        match self {
            Precision::F16 => FloatType::F16,
            Precision::Bf16 => FloatType::BF16,
            Precision::F32 | Precision::Q8 | Precision::Q4 => FloatType::F32,
        }
    }

    /// `model`, loaded on `device` (whose float type is [`Self::float`]), at this
    /// precision: its float parameters cast, or its layers' linear weights quantized.
    ///
    /// # Errors
    /// A backend that cannot hold quantized weights of that width, or a model with no
    /// linear weight that the block divides (nothing would be quantized).
    pub fn apply(self, model: DecoderLm, device: &Device) -> Result<DecoderLm, Error> {
        let bits = match self {
            Precision::F32 => return Ok(model),
            Precision::F16 | Precision::Bf16 => {
                let dtype: DType = self.float().dtype().into();
                return Ok(model.map(&mut CastFloats(dtype)));
            }
            Precision::Q8 => QuantBits::Q8,
            Precision::Q4 => QuantBits::Q4,
        };
        let options = QuantOptions::per_block(bits, QUANT_BLOCK);
        let (model, report) = quantize_linear_weights(model, &options, device)?;
        if report.tensors == 0 {
            return Err(format!(
                "no linear weight of the model has rows that blocks of {QUANT_BLOCK} divide; \
                 nothing to quantize"
            )
            .into());
        }
        Ok(model)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Casts every float parameter to one dtype.
struct CastFloats(DType);

impl ModuleMapper for CastFloats {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dtype = self.0;
        param.map(move |t| t.cast(dtype))
    }
}
