//! The backends the zoo knows, by name, and what a device tells of its backend.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;

use crate::DeviceError;

/// The backends the zoo knows about, by the name users type after `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendName {
    /// burn-flex, the pure-Rust CPU backend (feature `flex`, the default).
    Flex,
    /// burn-ndarray on the CPU (feature `ndarray`).
    NdArray,
    /// burn-wgpu through CubeCL: Vulkan, Metal, DX12, or lavapipe on a CPU (feature `wgpu`).
    Wgpu,
    /// libtorch on the CPU (feature `tch`).
    Tch,
    /// libtorch on CUDA device 0 (feature `tch`).
    TchCuda,
    /// CubeCL CUDA on device 0 (feature `cuda`).
    Cuda,
}

/// Every backend name, in the order the backend matrix runs them.
pub const ALL_BACKENDS: [BackendName; 6] = [
    BackendName::Flex,
    BackendName::NdArray,
    BackendName::Wgpu,
    BackendName::Tch,
    BackendName::TchCuda,
    BackendName::Cuda,
];

impl BackendName {
    /// The name as typed after `--device`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Flex => "flex",
            Self::NdArray => "ndarray",
            Self::Wgpu => "wgpu",
            Self::Tch => "tch",
            Self::TchCuda => "tch-cuda",
            Self::Cuda => "cuda",
        }
    }

    /// The cargo feature that compiles this backend in.
    pub fn feature(self) -> &'static str {
        match self {
            Self::Flex => "flex",
            Self::NdArray => "ndarray",
            Self::Wgpu => "wgpu",
            Self::Tch | Self::TchCuda => "tch",
            Self::Cuda => "cuda",
        }
    }

    /// Whether this build has the backend compiled in.
    pub fn is_compiled(self) -> bool {
        match self {
            Self::Flex => cfg!(feature = "flex"),
            Self::NdArray => cfg!(feature = "ndarray"),
            Self::Wgpu => cfg!(feature = "wgpu"),
            Self::Tch | Self::TchCuda => cfg!(feature = "tch"),
            Self::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// The backend a device runs on, read from Burn's device enum (an autodiff device
    /// answers for the device it wraps). `None` for a device the zoo has no name for:
    /// libtorch on MPS or Vulkan, CubeCL's CPU, HIP or native Metal runtimes.
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use zoo_device::BackendName;
    /// assert_eq!(BackendName::of(&Device::flex().autodiff()), Some(BackendName::Flex));
    /// ```
    pub fn of(device: &Device) -> Option<Self> {
        match runtime_of(device) {
            Runtime::Named(backend) => Some(backend),
            Runtime::OtherLibTorch | Runtime::Other => None,
        }
    }
}

/// What the zoo needs to know about the backend behind a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    /// A device that `--device <name>` selects.
    Named(BackendName),
    /// libtorch on a device the zoo has no name for (MPS, Vulkan).
    #[cfg_attr(not(feature = "tch"), allow(dead_code))] // only libtorch builds have one
    OtherLibTorch,
    /// Any other device Burn knows.
    Other,
}

/// The one place where the zoo tells backends apart. It matches on the variants of
/// burn-dispatch's `DispatchDevice`, which `Device::as_dispatch` exposes for this purpose;
/// a variant exists only when its backend is compiled in, hence the `cfg` on each arm.
#[allow(deprecated)] // burn-ndarray and burn-tch are deprecated upstream but are backends our users run
fn runtime_of(device: &Device) -> Runtime {
    use burn_dispatch::DispatchDevice;
    let device = device.clone().without_autodiff();
    match device.as_dispatch() {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => Runtime::Named(BackendName::Flex),
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => Runtime::Named(BackendName::NdArray),
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(libtorch) => {
            use burn_dispatch::devices::LibTorchDevice;
            match libtorch {
                LibTorchDevice::Cpu => Runtime::Named(BackendName::Tch),
                LibTorchDevice::Cuda(_) => Runtime::Named(BackendName::TchCuda),
                LibTorchDevice::Mps | LibTorchDevice::Vulkan => Runtime::OtherLibTorch,
            }
        }
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        DispatchDevice::Cube(cube) => {
            use burn_dispatch::devices::CubeDevice;
            match cube {
                CubeDevice::Wgpu(_) => Runtime::Named(BackendName::Wgpu),
                CubeDevice::Cuda(_) => Runtime::Named(BackendName::Cuda),
                _ => Runtime::Other,
            }
        }
        #[allow(unreachable_patterns)] // when every variant Burn compiled in is matched above
        _ => Runtime::Other,
    }
}

/// Whether the device runs on libtorch (`tch`, `tch-cuda`, or libtorch's MPS and Vulkan
/// devices), whose fused attention in burn-tch 0.22.1 reads boolean masks inverted.
pub fn is_libtorch(device: &Device) -> bool {
    matches!(
        runtime_of(device),
        Runtime::Named(BackendName::Tch | BackendName::TchCuda) | Runtime::OtherLibTorch
    )
}

/// Whether Burn 0.22.1 quantizes weights to `bits` on this device: flex and the CubeCL
/// backends (wgpu, cuda) take 8 and 4 bits; ndarray only 8; libtorch none (burn-tch's
/// quantized ops are unimplemented and would panic).
///
/// # Errors
/// The backend and the width it cannot take, in a sentence.
pub fn check_quantization(device: &Device, bits: u32) -> Result<(), String> {
    let name = BackendName::of(device).map_or("this device", BackendName::as_str);
    match runtime_of(device) {
        Runtime::Named(BackendName::Tch | BackendName::TchCuda) | Runtime::OtherLibTorch => {
            Err(format!(
                "quantized weights are not supported on {name}: libtorch has no quantized ops in Burn 0.22.1; use flex or wgpu"
            ))
        }
        Runtime::Named(BackendName::NdArray) if bits != 8 => Err(format!(
            "{bits}-bit weights are not supported on ndarray (it quantizes to 8 bits only); use q8, or flex or wgpu"
        )),
        _ => Ok(()),
    }
}

/// The most bytes one tensor may take on `device`, where its backend bounds it, else
/// `None`. wgpu holds a tensor in one storage buffer, and the adapter bounds what one
/// buffer binding can address (the smaller of `max_storage_buffer_binding_size` and
/// `max_buffer_size`); a larger tensor fails inside the runtime. flex, ndarray and
/// libtorch state no bound. Opens the device.
pub fn max_tensor_bytes(device: &Device) -> Option<u64> {
    #[cfg(feature = "wgpu")]
    {
        use burn_dispatch::DispatchDevice;
        use burn_dispatch::devices::CubeDevice;
        let device = device.clone().without_autodiff();
        if let DispatchDevice::Cube(cube @ CubeDevice::Wgpu(_)) = device.as_dispatch() {
            return Some(cube.client().properties().memory.max_page_size);
        }
    }
    let _ = device;
    None
}

/// Whether Burn 0.22.1 implements collective operations (the all-reduce of distributed
/// data-parallel training) on this device: only CubeCL CUDA does; on other devices the
/// all-reduce would panic inside a worker thread.
pub fn has_collectives(device: &Device) -> bool {
    runtime_of(device) == Runtime::Named(BackendName::Cuda)
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendName {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_BACKENDS
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| DeviceError::UnknownBackend(s.to_string()))
    }
}
