//! One way for every program and test of the zoo to turn a backend name into a Burn
//! [`Device`].
//!
//! The backends are cargo features of this crate (`flex`, the default, `ndarray`, `wgpu`,
//! `tch`, `cuda`). Features only choose what is compiled in; which compiled backend runs is
//! chosen at run time with [`BackendName`] (`--device flex|ndarray|wgpu|tch|tch-cuda|cuda`
//! in the examples, with an index for the GPU backends: `cuda:1`; [`select_all`] takes a
//! list such as `cuda:0,cuda:1` for multi-device training). Asking for a backend that was
//! not compiled in, or that finds no device, is a [`DeviceError`] whose message names the
//! feature to enable.
//!
//! ```
//! use zoo_device::{BackendName, select};
//! let device = select(BackendName::Flex)?;
//! # Ok::<(), zoo_device::DeviceError>(())
//! ```
#![warn(missing_docs)]

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use burn::tensor::{Device, Tensor};

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
    let device = construct(backend, index)?;
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
    let (backend, index) = parse_spec(name)?;
    select_indexed(backend, index)
}

/// `name` or `name:index` -> backend and index.
fn parse_spec(spec: &str) -> Result<(BackendName, usize), DeviceError> {
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
fn construct(backend: BackendName, index: usize) -> Result<Device, DeviceError> {
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
fn probe_once(
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
fn first_line(msg: &str) -> String {
    let line = msg.lines().next().unwrap_or_default();
    let line = line.split("\\n").next().unwrap_or_default();
    let mut out: String = line.chars().take(200).collect();
    if out.len() < line.len() {
        out.push_str("...");
    }
    out
}

/// The device that tests run on: the backend named by the `ZOO_TEST_DEVICE` environment
/// variable, or flex when it is unset. The backend matrix sets the variable.
///
/// # Panics
/// When the variable names a backend that cannot be selected: a matrix run on a missing
/// backend must fail, not pass on another one.
pub fn test_device() -> Device {
    let backend = test_backend();
    match select(backend) {
        Ok(d) => d,
        Err(e) => panic!("ZOO_TEST_DEVICE={backend}: {e}"),
    }
}

/// The backend named by `ZOO_TEST_DEVICE` (flex when unset).
///
/// # Panics
/// When the variable holds a name the zoo does not know.
pub fn test_backend() -> BackendName {
    match std::env::var("ZOO_TEST_DEVICE") {
        Ok(name) if !name.is_empty() => name
            .parse()
            .unwrap_or_else(|e| panic!("ZOO_TEST_DEVICE: {e}")),
        _ => BackendName::Flex,
    }
}

/// Records that a test skipped its body, for the backend matrix's skip count.
///
/// The matrix sets `ZOO_SKIP_LOG` to a file; each call appends one line naming the test and
/// the reason, so `cargo xtask ci` can report skipped tests and fail when a required backend
/// was skipped. Without the variable (or with it empty) this only logs.
///
/// # Panics
/// When the file named by `ZOO_SKIP_LOG` cannot be opened or written. A skip the matrix
/// cannot count would let the test pass as if it had run, so it fails instead.
pub fn record_skip(test: &str, reason: &str) {
    log::warn!("skipped {test}: {reason}");
    if let Some(path) = std::env::var_os("ZOO_SKIP_LOG").filter(|path| !path.is_empty()) {
        append_skip(Path::new(&path), test, reason);
    }
}

/// Appends `test<TAB>reason` as one line of the skip log at `path`; line breaks and tabs
/// inside the reason become spaces, since the matrix counts one skip per line.
///
/// # Panics
/// When the file cannot be opened or written, naming the path and the error.
fn append_skip(path: &Path, test: &str, reason: &str) {
    use std::io::Write;
    let reason = reason.replace(['\n', '\r', '\t'], " ");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| writeln!(file, "{test}\t{reason}"));
    if let Err(err) = written {
        panic!(
            "cannot record the skip of {test} in ZOO_SKIP_LOG={}: {err}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in ALL_BACKENDS {
            assert_eq!(b.as_str().parse::<BackendName>(), Ok(b));
        }
        assert_eq!(
            "vulkan".parse::<BackendName>(),
            Err(DeviceError::UnknownBackend("vulkan".into()))
        );
    }

    #[test]
    fn missing_backend_names_its_feature() {
        let err = DeviceError::NotCompiled {
            backend: BackendName::Wgpu,
            feature: "wgpu",
        };
        assert_eq!(
            err.to_string(),
            "backend 'wgpu' is not compiled into this build: rebuild with `--features wgpu` \
             (a cargo option: it goes before `--`)"
        );
        for b in ALL_BACKENDS.into_iter().filter(|b| !b.is_compiled()) {
            assert!(matches!(select(b), Err(DeviceError::NotCompiled { .. })));
        }
    }

    #[test]
    fn panic_messages_are_cut_to_one_short_line() {
        let msg =
            "called `unwrap()`: Torch(\"Found no NVIDIA driver\\nException raised from x\")\nmore";
        assert_eq!(
            first_line(msg),
            "called `unwrap()`: Torch(\"Found no NVIDIA driver"
        );
        assert_eq!(first_line(&"x".repeat(300)).len(), 203);
    }

    #[test]
    fn device_lists_and_indices_parse_with_clear_errors() {
        assert_eq!(parse_spec("cuda:1"), Ok((BackendName::Cuda, 1)));
        assert_eq!(parse_spec(" tch-cuda "), Ok((BackendName::TchCuda, 0)));
        assert_eq!(
            parse_spec("cuda:x").unwrap_err().to_string(),
            "bad device 'cuda:x': the index 'x' is not a number"
        );
        assert_eq!(
            parse_spec("metal:0").unwrap_err(),
            DeviceError::UnknownBackend("metal".into())
        );
        assert_eq!(
            select_all(" , ").unwrap_err().to_string(),
            "bad device ' , ': no device named"
        );
        assert_eq!(
            select_all("flex,flex:0").unwrap_err().to_string(),
            "bad device 'flex,flex:0': 'flex:0' is listed twice"
        );
        if cfg!(feature = "flex") {
            assert_eq!(
                select_by_name("flex:1").unwrap_err().to_string(),
                "bad device 'flex:1': backend 'flex' has one device, index 0"
            );
            assert_eq!(select_all("flex").unwrap().len(), 1);
        }
    }

    #[test]
    fn flex_runs() {
        if cfg!(feature = "flex") {
            let d = select(BackendName::Flex).unwrap();
            let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &d);
            assert_eq!(x.sum().into_scalar::<f32>(), 6.0);
        }
    }

    /// What [`BackendName::of`], [`is_libtorch`] and [`has_collectives`] must say about
    /// a device of `backend`, with and without autodiff.
    fn assert_recognised(device: &Device, backend: BackendName) {
        for d in [device.clone(), device.clone().autodiff()] {
            assert_eq!(BackendName::of(&d), Some(backend), "{d:?}");
            assert_eq!(
                is_libtorch(&d),
                matches!(backend, BackendName::Tch | BackendName::TchCuda),
                "{d:?}"
            );
            assert_eq!(has_collectives(&d), backend == BackendName::Cuda, "{d:?}");
        }
    }

    #[test]
    fn the_test_device_is_recognised_as_its_backend() {
        // The backend matrix runs this once per `ZOO_TEST_DEVICE`, on the real device.
        assert_recognised(&test_device(), test_backend());
    }

    #[test]
    fn every_compiled_backend_is_recognised() {
        // `construct` makes the device value without running anything on it, so the
        // GPU backends are covered here too when their device type needs no GPU to exist
        // (`tch-cuda`); wgpu and cuda answer `NoDevice` where they find no adapter.
        let mut recognised = Vec::new();
        for backend in compiled_backends() {
            match construct(backend, 0) {
                Ok(device) => {
                    assert_recognised(&device, backend);
                    recognised.push(backend);
                }
                Err(DeviceError::NoDevice { .. }) => {}
                Err(e) => panic!("{backend}: {e}"),
            }
        }
        if cfg!(feature = "flex") {
            assert!(recognised.contains(&BackendName::Flex), "{recognised:?}");
        }
        if cfg!(feature = "tch") {
            assert!(recognised.contains(&BackendName::TchCuda), "{recognised:?}");
        }
    }

    #[cfg(feature = "tch")]
    #[test]
    #[allow(deprecated)] // burn-tch is deprecated upstream but is a backend our users run
    fn libtorch_devices_are_told_apart() {
        assert_recognised(&Device::libtorch(), BackendName::Tch);
        assert_recognised(&Device::libtorch_cuda(1), BackendName::TchCuda);
        // libtorch devices the zoo has no name for still read masks the libtorch way.
        for d in [Device::libtorch_mps(), Device::libtorch_vulkan()] {
            assert_eq!(BackendName::of(&d), None);
            assert!(is_libtorch(&d) && !has_collectives(&d));
        }
    }

    /// A CubeCL CUDA device value, made without the `cuda` feature: cubecl's device enum
    /// has every runtime's variant in every build, and making the value touches no GPU.
    #[cfg(feature = "wgpu")]
    #[test]
    fn cubecl_cuda_devices_have_collectives() {
        use burn_dispatch::devices::CubeDevice;
        let cuda = Device::new(CubeDevice::Cuda(Default::default()));
        assert_recognised(&cuda, BackendName::Cuda);
        let wgpu = Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
        assert_recognised(&wgpu, BackendName::Wgpu);
        let cpu = Device::new(CubeDevice::Cpu(Default::default()));
        assert_eq!(BackendName::of(&cpu), None);
        assert!(!has_collectives(&cpu) && !is_libtorch(&cpu));
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_devices_are_recognised_without_a_gpu() {
        assert_recognised(&Device::cuda(1), BackendName::Cuda);
    }

    #[test]
    fn each_device_is_probed_once_even_from_many_threads() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let runs = AtomicUsize::new(0);
        let no_device = DeviceError::NoDevice {
            backend: BackendName::Cuda,
            reason: "none here".into(),
        };
        // An index no other test asks for, so this test owns the cached answer.
        let index = 4097;
        std::thread::scope(|scope| {
            let callers: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        probe_once(BackendName::Cuda, index, || {
                            runs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            Err(no_device.clone())
                        })
                    })
                })
                .collect();
            for caller in callers {
                assert_eq!(caller.join().unwrap(), Err(no_device.clone()));
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(
            probe_once(BackendName::Cuda, index, || panic!("probed a second time")),
            Err(no_device.clone())
        );
        // Another index of the same backend is another device, probed on its own.
        assert_eq!(probe_once(BackendName::Cuda, index + 1, || Ok(())), Ok(()));
    }

    /// A path in the temporary folder that no other test uses.
    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("zoo-device-{}-{name}", std::process::id()))
    }

    #[test]
    fn skips_are_appended_one_line_each() {
        let path = temp_path("skips.log");
        let _ = std::fs::remove_file(&path);
        append_skip(&path, "gpu_only", "no adapter");
        append_skip(&path, "multi_line", "first\nsecond\tthird");
        let log = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            log,
            "gpu_only\tno adapter\nmulti_line\tfirst second third\n"
        );
    }

    #[test]
    fn a_skip_that_cannot_be_written_fails_the_test() {
        let path = temp_path("no-such-folder").join("skips.log");
        let panicked = std::panic::catch_unwind(|| append_skip(&path, "gpu_only", "no adapter"))
            .expect_err("a lost skip must fail the test that skipped");
        let msg = panicked.downcast_ref::<String>().unwrap();
        let io = std::fs::File::open(&path).unwrap_err();
        assert_eq!(
            *msg,
            format!(
                "cannot record the skip of gpu_only in ZOO_SKIP_LOG={}: {io}",
                path.display()
            )
        );
    }
}

/// Small helpers for tests that compare tensors, shared by every crate's tests.
///
/// Every comparison here fails on a NaN in either input and on a shape or length
/// mismatch: a NaN compares false with everything, so a check written as
/// `max_abs_diff(a, b) < tol` or `> tol` fails whichever way it is written.
pub mod testing {
    use burn::tensor::{Bool, Int, Tensor};

    use super::{BackendName, compiled_backends, record_skip, select, test_backend};

    /// The backends a parity test compares with flex: the matrix's backend when
    /// `ZOO_TEST_DEVICE` names one; otherwise every other compiled CPU backend, and the GPU
    /// backends that find a device. When that leaves none, a skip is recorded under `test`,
    /// so a build without a second backend does not count as a pass.
    pub fn parity_backends(test: &str) -> Vec<BackendName> {
        let target = test_backend();
        if target != BackendName::Flex {
            return vec![target];
        }
        let gpu = |b: &BackendName| matches!(b, BackendName::TchCuda | BackendName::Cuda);
        let others: Vec<BackendName> = compiled_backends()
            .into_iter()
            .filter(|b| *b != BackendName::Flex)
            .filter(|b| !gpu(b) || select(*b).is_ok())
            .collect();
        if others.is_empty() {
            record_skip(test, "no second backend is compiled into this build");
        }
        others
    }

    /// The values of a boolean tensor, whatever the backend stores booleans as.
    pub fn bools<const D: usize>(t: Tensor<D, Bool>) -> Vec<bool> {
        ints(t.int()).into_iter().map(|v| v != 0).collect()
    }

    /// The values of an integer tensor as `i64`, whatever the backend's integer type.
    pub fn ints<const D: usize>(t: Tensor<D, Int>) -> Vec<i64> {
        t.into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .expect("converted to i64")
    }

    /// The values of a float tensor as `f32`, whatever the backend's float type.
    pub fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("converted to f32")
    }

    /// Largest absolute difference between two tensors of the same shape, on any
    /// devices; NaN when either holds a NaN (see [`max_abs_diff_slices`]).
    ///
    /// # Panics
    /// When the shapes differ.
    pub fn max_abs_diff<const D: usize>(a: &Tensor<D>, b: &Tensor<D>) -> f32 {
        let (da, db) = (a.dims(), b.dims());
        assert_eq!(da, db, "max_abs_diff: shapes differ: {da:?} vs {db:?}");
        max_abs_diff_slices(&floats(a.clone()), &floats(b.clone()))
    }

    /// Largest absolute difference between two slices of the same length. NaN when
    /// either holds a NaN; equal infinities agree, and an infinity against anything else
    /// differs by infinity.
    ///
    /// # Panics
    /// When the lengths differ.
    pub fn max_abs_diff_slices(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(
            a.len(),
            b.len(),
            "max_abs_diff: lengths differ: {} vs {}",
            a.len(),
            b.len()
        );
        let mut worst = 0.0f32;
        for (&x, &y) in a.iter().zip(b) {
            if x.is_nan() || y.is_nan() {
                return f32::NAN;
            }
            if x != y {
                worst = worst.max((x - y).abs());
            }
        }
        worst
    }

    /// Largest `|want - got| / (atol + rtol * |want|)` over two slices of the same length:
    /// at most 1 when every value agrees within `atol + rtol * |want|`. NaN when either
    /// holds a NaN; equal infinities agree.
    ///
    /// # Panics
    /// When the lengths differ.
    pub fn max_scaled_diff(want: &[f32], got: &[f32], atol: f32, rtol: f32) -> f32 {
        assert_eq!(
            want.len(),
            got.len(),
            "max_scaled_diff: lengths differ: {} vs {}",
            want.len(),
            got.len()
        );
        let mut worst = 0.0f32;
        for (&w, &g) in want.iter().zip(got) {
            if w.is_nan() || g.is_nan() {
                return f32::NAN;
            }
            if w != g {
                worst = worst.max((w - g).abs() / (atol + rtol * w.abs()));
            }
        }
        worst
    }

    /// Asserts that two tensors of the same shape agree within `tol`, absolute.
    ///
    /// # Panics
    /// When they do not, when either holds a NaN, or when the shapes differ.
    pub fn assert_close<const D: usize>(a: &Tensor<D>, b: &Tensor<D>, tol: f32) {
        let d = max_abs_diff(a, b);
        assert!(
            !d.is_nan(),
            "a NaN in the compared tensors of shape {:?}",
            a.dims()
        );
        assert!(d <= tol, "max abs difference {d} > {tol}");
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use burn::tensor::Device;

        fn device() -> Device {
            crate::test_device()
        }

        #[test]
        fn max_abs_diff_is_the_largest_gap() {
            let d = device();
            let a = Tensor::<2>::from_floats([[1.0, -2.0], [3.0, 4.0]], &d);
            let b = Tensor::<2>::from_floats([[1.5, -2.0], [0.5, 4.25]], &d);
            assert_eq!(max_abs_diff(&a, &b), 2.5);
            assert_eq!(max_abs_diff(&a, &a), 0.0);
        }

        #[test]
        fn a_nan_in_either_tensor_is_neither_close_nor_far() {
            let d = device();
            let clean = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &d);
            let dirty = Tensor::<1>::from_floats([1.0, f32::NAN, 3.0], &d);
            for (a, b) in [(&clean, &dirty), (&dirty, &clean), (&dirty, &dirty)] {
                let diff = max_abs_diff(a, b);
                assert!(diff.is_nan(), "{diff}");
                // Both ways a test may be written fail.
                let (close, far) = (diff < 1.0, diff > 1e-3);
                assert!(!close && !far);
            }
            assert!(max_abs_diff_slices(&[0.0, f32::NAN], &[0.0, 0.0]).is_nan());
            assert!(max_abs_diff_slices(&[f32::NAN], &[f32::NAN]).is_nan());
        }

        #[test]
        #[should_panic(expected = "a NaN in the compared tensors of shape [3]")]
        fn assert_close_fails_on_nan() {
            let d = device();
            let a = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &d);
            let b = Tensor::<1>::from_floats([1.0, 2.0, f32::NAN], &d);
            assert_close(&a, &b, 1e-3);
        }

        #[test]
        #[should_panic(expected = "max abs difference 0.5 > 0.1")]
        fn assert_close_fails_beyond_the_tolerance() {
            let d = device();
            let a = Tensor::<1>::from_floats([1.0, 2.0], &d);
            let b = Tensor::<1>::from_floats([1.0, 2.5], &d);
            assert_close(&a, &b, 0.1);
        }

        #[test]
        #[should_panic(expected = "max_abs_diff: shapes differ: [2, 3] vs [3, 2]")]
        fn tensors_of_other_shapes_are_not_compared() {
            let d = device();
            let a = Tensor::<2>::zeros([2, 3], &d);
            let b = Tensor::<2>::zeros([3, 2], &d);
            max_abs_diff(&a, &b);
        }

        #[test]
        #[should_panic(expected = "max_abs_diff: lengths differ: 3 vs 2")]
        fn slices_of_other_lengths_are_not_compared() {
            // A zip would compare the first two values and call them equal.
            max_abs_diff_slices(&[1.0, 2.0, 3.0], &[1.0, 2.0]);
        }

        #[test]
        #[should_panic(expected = "max_scaled_diff: lengths differ: 1 vs 2")]
        fn scaled_slices_of_other_lengths_are_not_compared() {
            max_scaled_diff(&[1.0], &[1.0, 2.0], 1e-5, 1e-4);
        }

        #[test]
        fn infinities_agree_only_with_themselves() {
            let inf = f32::INFINITY;
            assert_eq!(max_abs_diff_slices(&[inf, -inf], &[inf, -inf]), 0.0);
            assert_eq!(max_abs_diff_slices(&[inf], &[1.0]), inf);
            assert_eq!(max_abs_diff_slices(&[inf], &[-inf]), inf);
        }

        #[test]
        fn scaled_difference_uses_the_reference_magnitude() {
            // 0.02 / (0.01 + 0.001 * 100) = 0.18 at the large value,
            // 0.005 / (0.01 + 0.001 * 0) = 0.5 at zero: the worst.
            let got = max_scaled_diff(&[100.0, 0.0], &[100.02, 0.005], 0.01, 0.001);
            assert!((got - 0.5).abs() < 1e-4, "{got}");
            let got = max_scaled_diff(&[100.0], &[100.02], 0.01, 0.001);
            assert!((got - 0.02 / 0.11).abs() < 1e-3, "{got}");
            assert!(max_scaled_diff(&[1.0, f32::NAN], &[1.0, 1.0], 0.01, 0.001).is_nan());
        }
    }
}
