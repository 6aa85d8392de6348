//! Unit tests of backend names and selection.

use super::*;
use burn::tensor::{Device, Tensor};

use crate::select::{construct, first_line, parse_spec, probe_once};
use crate::testing::append_skip;

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

#[test]
fn float_types_parse_and_a_used_device_keeps_its_type() {
    for f in FloatType::ALL {
        assert_eq!(f.as_str().parse::<FloatType>(), Ok(f));
    }
    assert_eq!("bfloat16".parse::<FloatType>(), Ok(FloatType::BF16));
    assert_eq!(
        "f8".parse::<FloatType>().unwrap_err().to_string(),
        "unknown dtype 'f8': expected f32, f16 or bf16"
    );
    assert_eq!((FloatType::F32.bytes(), FloatType::BF16.bytes()), (4, 2));
    // This process computes in f32 on flex (its first tensor is the probe's): asking
    // for f32 again is fine, half precision is refused in a sentence.
    let device = select(BackendName::Flex).unwrap();
    assert_eq!(FloatType::of(&device), Some(FloatType::F32));
    assert!(select_as(BackendName::Flex, 0, FloatType::F32).is_ok());
    let e = select_as(BackendName::Flex, 0, FloatType::F16)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "backend 'flex' cannot compute in f16: this process already computes in f32 on it, \
         and a device's float type is set once, before its first tensor"
    );
}
