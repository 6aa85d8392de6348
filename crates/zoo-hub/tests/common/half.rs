//! The half-precision check shared by the `f16` and `bf16` tests (each its own process,
//! since a device's float type is set once, before its first tensor).

use std::path::Path;

use serde_json::Value;
use zoo_device::testing::test_backend;
use zoo_device::{BackendName, FloatType, select_as};
use zoo_hub::AutoModel;

use super::{dir, input, relative_error};

fn values(v: &Value) -> Vec<f32> {
    v["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// One output of one case: its largest difference from transformers' output, over that
/// output's largest magnitude, with transformers computing in the same float type
/// (`same`), in f32 (`full`) and in the other half type (`other`).
pub struct Errors {
    pub what: String,
    pub same: f32,
    pub full: f32,
    pub other: f32,
}

/// Runs every case of `half.json` (transformers 5 on the CPU, weights cast with
/// `model.to(dtype)`) with the test backend's device computing in `float`; `None` where
/// the backend refuses that type, as it should.
pub fn errors(float: FloatType) -> Option<Vec<Errors>> {
    let backend = test_backend();
    let device = match select_as(backend, 0, float) {
        Ok(device) => device,
        // ndarray has f32 only; software Vulkan (lavapipe) has no bf16.
        Err(e)
            if backend == BackendName::NdArray
                || (backend == BackendName::Wgpu && float == FloatType::BF16) =>
        {
            let e = e.to_string();
            assert!(
                e.starts_with(&format!(
                    "backend '{backend}' cannot compute in {float}: it has no {float} kernels here"
                )),
                "{e}"
            );
            return None;
        }
        Err(e) => panic!("{backend} in {float}: {e}"),
    };
    assert_eq!(FloatType::of(&device), Some(float));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/half.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for case in fixture["cases"].as_array().unwrap() {
        let (family, name) = (
            case["family"].as_str().unwrap(),
            case["name"].as_str().unwrap(),
        );
        let dir = dir(family, name);
        let input = input(&zoo_fixtures::expected::<Value>(&dir));
        let model = AutoModel::from_pretrained(&dir, &device).unwrap();
        let got = model.forward(&input, &device).unwrap();
        assert!(!got.is_empty(), "{name}");
        for (output, values_got, _) in &got {
            let other = match float {
                FloatType::F16 => "bf16",
                _ => "f16",
            };
            let reference = |dtype: &str| {
                let want = &case["outputs"][dtype][output];
                assert!(want.is_object(), "{name}: transformers gave no {output}");
                relative_error(&values(want), values_got)
            };
            out.push(Errors {
                what: format!("{name} {output}"),
                same: reference(float.as_str()),
                full: reference("f32"),
                other: reference(other),
            });
        }
    }
    Some(out)
}

/// [`errors`], checked: all 15 outputs of the ten cases, each within `bound` of
/// transformers in `float` and further than 4e-4 from transformers in f32 (four times
/// the 1e-4 at which the zoo matches it in f32: the control that the model did not
/// quietly compute in f32). Returns the errors for further checks.
pub fn check(float: FloatType, bound: f32) -> Option<Vec<Errors>> {
    let errors = errors(float)?;
    assert_eq!(errors.len(), 15, "every output of the ten cases");
    for e in &errors {
        eprintln!(
            "{}: to {float} {:.5}, to f32 {:.5}, to the other half type {:.5}",
            e.what, e.same, e.full, e.other
        );
        assert!(e.same <= bound, "{}: {} from {float}", e.what, e.same);
        assert!(e.full > 4e-4, "{}: {} from f32", e.what, e.full);
    }
    Some(errors)
}
