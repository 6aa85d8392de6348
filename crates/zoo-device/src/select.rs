//! Turning a backend name into a device, checked with one small operation.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use burn::tensor::{Device, Tensor};

use crate::float::configure;
use crate::{ALL_BACKENDS, BackendName, FloatType};

/// Why a backend could not be turned into a device.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The name is not one the zoo knows.
    #[error("unknown backend '{0}': expected one of flex, ndarray, wgpu, tch, tch-cuda, cuda")]
    UnknownBackend(String),
    /// The backend exists but this build was compiled without it.
    #[error(
        "backend '{backend}' is not compiled into this build: rebuild with `--features {feature}` \
         (a cargo option: it goes before `--`)"
    )]
    NotCompiled {
        /// The backend asked for.
        backend: BackendName,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// A device list or `name:index` that does not parse, or an index a backend lacks.
    #[error("bad device '{spec}': {reason}")]
    BadSpec {
        /// What was typed.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend cannot compute in the float type asked for, or the process already
    /// computes in another on that device.
    #[error("backend '{backend}' cannot compute in {float}: {reason}")]
    Float {
        /// The backend asked for.
        backend: BackendName,
        /// The float type asked for.
        float: FloatType,
        /// Why not.
        reason: String,
    },
    /// The backend is compiled in but found no device to run on.
    #[error("backend '{backend}' found no device: {reason}")]
    NoDevice {
        /// The backend asked for.
        backend: BackendName,
        /// What is missing, and how to get it.
        reason: String,
    },
}

/// Turns a backend name into a ready device, checking that it was compiled in and that it
/// can run a tensor operation here.
///
/// # Errors
/// [`DeviceError::NotCompiled`] when the feature is off, [`DeviceError::NoDevice`] when the
/// backend finds no adapter, driver or library.
pub fn select(backend: BackendName) -> Result<Device, DeviceError> {
    select_indexed(backend, 0)
}

/// As [`select`], for the `index`-th device of a backend with several (`cuda`,
/// `tch-cuda`); the CPU backends and wgpu's default adapter have only index 0.
///
/// # Errors
/// As [`select`]; [`DeviceError::BadSpec`] for an index above 0 on a single-device
/// backend; [`DeviceError::NoDevice`] naming the index when a CUDA index is out of range
/// (for `tch-cuda`, the probe's error from libtorch).
pub fn select_indexed(backend: BackendName, index: usize) -> Result<Device, DeviceError> {
    select_as(backend, index, FloatType::F32)
}

/// As [`select_indexed`], with the device computing in `float`: set before the device's
/// first tensor, so every parameter and activation made on it has that type (the zoo's
/// checkpoint loading casts each stored tensor to it).
///
/// # Errors
/// As [`select_indexed`]; [`DeviceError::Float`] for a backend that does not compute in
/// `float` (ndarray has only f32), or a device this process already uses in another type.
pub fn select_as(
    backend: BackendName,
    index: usize,
    float: FloatType,
) -> Result<Device, DeviceError> {
    if !backend.is_compiled() {
        return Err(DeviceError::NotCompiled {
            backend,
            feature: backend.feature(),
        });
    }
    if index > 0 && !matches!(backend, BackendName::Cuda | BackendName::TchCuda) {
        return Err(DeviceError::BadSpec {
            spec: format!("{backend}:{index}"),
            reason: format!("backend '{backend}' has one device, index 0"),
        });
    }
    let mut device = construct(backend, index)?;
    configure(backend, &mut device, float)?;
    probe_once(backend, index, || probe(backend, &device))?;
    Ok(device)
}

/// Parses a name as typed after `--device`, optionally with a device index
/// (`cuda:1`), and selects it: see [`select_indexed`].
///
/// # Errors
/// [`DeviceError::UnknownBackend`] for a name the zoo does not know,
/// [`DeviceError::BadSpec`] for an index that is not a number, else as [`select_indexed`].
pub fn select_by_name(name: &str) -> Result<Device, DeviceError> {
    select_by_name_as(name, FloatType::F32)
}

/// [`select_by_name`] computing in `float`: see [`select_as`].
///
/// # Errors
/// As [`select_by_name`] and [`select_as`].
pub fn select_by_name_as(name: &str, float: FloatType) -> Result<Device, DeviceError> {
    let (backend, index) = parse_spec(name)?;
    select_as(backend, index, float)
}

/// `name` or `name:index` -> backend and index.
pub(crate) fn parse_spec(spec: &str) -> Result<(BackendName, usize), DeviceError> {
    let spec = spec.trim();
    match spec.split_once(':') {
        None => Ok((spec.parse()?, 0)),
        Some((name, index)) => {
            let backend = name.parse()?;
            let index = index.parse().map_err(|_| DeviceError::BadSpec {
                spec: spec.to_string(),
                reason: format!("the index '{index}' is not a number"),
            })?;
            Ok((backend, index))
        }
    }
}

/// Selects every device of a comma-separated list, e.g. `cuda:0,cuda:1` for a
/// multi-device run.
///
/// # Errors
/// An empty list or a repeated device ([`DeviceError::BadSpec`]), else the first failing
/// entry's error from [`select_by_name`].
pub fn select_all(list: &str) -> Result<Vec<Device>, DeviceError> {
    let specs: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if specs.is_empty() {
        return Err(DeviceError::BadSpec {
            spec: list.to_string(),
            reason: "no device named".into(),
        });
    }
    let mut seen = Vec::new();
    for spec in &specs {
        let parsed = parse_spec(spec)?;
        if seen.contains(&parsed) {
            return Err(DeviceError::BadSpec {
                spec: list.to_string(),
                reason: format!("'{spec}' is listed twice"),
            });
        }
        seen.push(parsed);
    }
    seen.into_iter()
        .map(|(backend, index)| select_indexed(backend, index))
        .collect()
}

/// The backends compiled into this build, whether or not they find a device.
pub fn compiled_backends() -> Vec<BackendName> {
    ALL_BACKENDS
        .into_iter()
        .filter(|b| b.is_compiled())
        .collect()
}

#[allow(deprecated)] // burn-ndarray and burn-tch are deprecated upstream but are backends our users run
pub(crate) fn construct(backend: BackendName, index: usize) -> Result<Device, DeviceError> {
    let no_device = |reason: &str| DeviceError::NoDevice {
        backend,
        reason: reason.to_string(),
    };
    match backend {
        #[cfg(feature = "flex")]
        BackendName::Flex => Ok(Device::flex()),
        #[cfg(feature = "ndarray")]
        BackendName::NdArray => Ok(Device::ndarray()),
        #[cfg(feature = "wgpu")]
        BackendName::Wgpu => {
            if burn::tensor::Device::enumerate(burn::tensor::DeviceType::Wgpu).is_empty() {
                return Err(no_device(
                    "no GPU adapter; on a CPU-only Linux machine install software Vulkan \
                     (apt-get install mesa-vulkan-drivers libvulkan1)",
                ));
            }
            Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice))
        }
        #[cfg(feature = "tch")]
        BackendName::Tch => Ok(Device::libtorch()),
        #[cfg(feature = "tch")]
        BackendName::TchCuda => Ok(Device::libtorch_cuda(index)),
        #[cfg(feature = "cuda")]
        BackendName::Cuda => {
            let found = burn::tensor::Device::enumerate(burn::tensor::DeviceType::Cuda).len();
            if found == 0 {
                return Err(no_device("no CUDA device or driver found"));
            }
            if index >= found {
                return Err(no_device(&format!(
                    "no CUDA device {index}: {found} found (indices 0 to {})",
                    found - 1
                )));
            }
            Ok(Device::cuda(index))
        }
        #[allow(unreachable_patterns)] // every arm above may be compiled out
        _ => {
            let _ = (no_device, index);
            Err(DeviceError::NotCompiled {
                backend,
                feature: backend.feature(),
            })
        }
    }
}

/// Runs `probe` for a device the first time it is asked for, and gives every later call
/// (from any thread) the first answer. A backend that found no device will not find one
/// later in the same process, and a probe can be slow (a GPU context, libtorch loading).
pub(crate) fn probe_once(
    backend: BackendName,
    index: usize,
    probe: impl FnOnce() -> Result<(), DeviceError>,
) -> Result<(), DeviceError> {
    type Answer = Arc<OnceLock<Result<(), DeviceError>>>;
    static ANSWERS: Mutex<Vec<((BackendName, usize), Answer)>> = Mutex::new(Vec::new());
    let answer = {
        // The list is only ever pushed to, so it is whole even if a holder panicked.
        let mut answers = ANSWERS.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (backend, index);
        match answers.iter().find(|(k, _)| *k == key) {
            Some((_, answer)) => Arc::clone(answer),
            None => {
                let answer = Answer::default();
                answers.push((key, Arc::clone(&answer)));
                answer
            }
        }
    };
    // Callers that arrive while the probe runs wait for its answer.
    answer.get_or_init(probe).clone()
}

/// Runs one small operation so that a backend with no usable device fails here, with a
/// message, rather than later inside a kernel.
///
/// The process's panic hook is left alone: swapping it here raced with every other thread
/// (tests run in parallel), and could leave the hook silenced for good. A backend that
/// panics on its first operation therefore prints its panic message once, on stderr,
/// before the error returned here says the same in one line.
fn probe(backend: BackendName, device: &Device) -> Result<(), DeviceError> {
    let device = device.clone();
    let result = std::panic::catch_unwind(move || {
        let x = Tensor::<1>::from_floats([1.0, 2.0], &device);
        x.sum().into_scalar::<f32>()
    });
    match result {
        Ok(v) if (v - 3.0).abs() < 1e-6 => Ok(()),
        Ok(v) => Err(DeviceError::NoDevice {
            backend,
            reason: format!("a test sum gave {v} instead of 3"),
        }),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("the backend panicked on its first operation");
            Err(DeviceError::NoDevice {
                backend,
                reason: first_line(msg),
            })
        }
    }
}

/// The first line of a backend's panic message, short enough for one line of output.
/// Messages that carry a whole C++ backtrace in a Debug-escaped string are cut at the
/// first escaped newline too.
pub(crate) fn first_line(msg: &str) -> String {
    let line = msg.lines().next().unwrap_or_default();
    let line = line.split("\\n").next().unwrap_or_default();
    let mut out: String = line.chars().take(200).collect();
    if out.len() < line.len() {
        out.push_str("...");
    }
    out
}
