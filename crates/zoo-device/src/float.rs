//! The float type a device computes in: f32, Burn's default, or half precision (f16,
//! bf16), set on the device before its first tensor.

use std::fmt;
use std::str::FromStr;

use burn::tensor::{Device, FloatDType};

use crate::{BackendName, DeviceError};

/// The float type of a model's weights and activations on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum FloatType {
    /// 32-bit IEEE floats, Burn's default and the only type of ndarray.
    #[default]
    F32,
    /// 16-bit IEEE floats: 10 bits of mantissa, largest value 65504.
    F16,
    /// bfloat16: f32's exponent range with 7 bits of mantissa.
    BF16,
}

impl FloatType {
    /// Every float type, in the order of `--dtype`'s help.
    pub const ALL: [FloatType; 3] = [FloatType::F32, FloatType::F16, FloatType::BF16];

    /// The name as typed after `--dtype`.
    pub fn as_str(self) -> &'static str {
        match self {
            FloatType::F32 => "f32",
            FloatType::F16 => "f16",
            FloatType::BF16 => "bf16",
        }
    }

    /// Burn's float dtype.
    pub fn dtype(self) -> FloatDType {
        match self {
            FloatType::F32 => FloatDType::F32,
            FloatType::F16 => FloatDType::F16,
            FloatType::BF16 => FloatDType::BF16,
        }
    }

    /// Bytes per value.
    pub fn bytes(self) -> usize {
        match self {
            FloatType::F32 => 4,
            FloatType::F16 | FloatType::BF16 => 2,
        }
    }

    /// The float type `device` makes its float tensors in (its default, whether set or
    /// not yet locked), if it is one of the zoo's.
    pub fn of(device: &Device) -> Option<Self> {
        match device.settings().float_dtype {
            FloatDType::F32 => Some(FloatType::F32),
            FloatDType::F16 => Some(FloatType::F16),
            FloatDType::BF16 => Some(FloatType::BF16),
            _ => None,
        }
    }
}

impl fmt::Display for FloatType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--dtype` that is not one of the zoo's float types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype '{0}': expected f32, f16 or bf16")]
pub struct UnknownFloatType(pub String);

impl FromStr for FloatType {
    type Err = UnknownFloatType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(FloatType::F32),
            "f16" | "float16" | "fp16" | "half" => Ok(FloatType::F16),
            "bf16" | "bfloat16" => Ok(FloatType::BF16),
            _ => Err(UnknownFloatType(s.to_string())),
        }
    }
}

/// Makes `float` the default float type of `device` (every parameter and activation
/// made on it), before its first tensor. Asking for the type it already has is a no-op.
///
/// # Errors
/// [`DeviceError::Float`] when the backend does not compute in `float` (ndarray has f32
/// only), or when this process already made tensors on the device in another type.
pub(crate) fn configure(
    backend: BackendName,
    device: &mut Device,
    float: FloatType,
) -> Result<(), DeviceError> {
    if FloatType::of(device) == Some(float) && float == FloatType::F32 {
        // Burn's default: nothing to set, and nothing to lock.
        return Ok(());
    }
    match device.configure(float.dtype()) {
        Ok(()) => Ok(()),
        Err(_) if FloatType::of(device) == Some(float) => Ok(()),
        Err(burn::tensor::DeviceError::UnsupportedDType { .. }) => Err(DeviceError::Float {
            backend,
            float,
            reason: format!(
                "it has no {float} kernels here (f16 runs on flex, wgpu, tch and cuda; bf16 on \
                 flex, tch and cuda, and on wgpu where the GPU has it); use f32 on it"
            ),
        }),
        Err(_) => Err(DeviceError::Float {
            backend,
            float,
            reason: format!(
                "this process already computes in {} on it, and a device's float type is set \
                 once, before its first tensor",
                FloatType::of(device).map_or("another type", FloatType::as_str)
            ),
        }),
    }
}
