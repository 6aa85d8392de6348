//! CLIP through the registry and the zero-shot image classification pipeline, against
//! `transformers` (`xtask/fixtures/clip.py`): `AutoModel`'s `forward` gives `CLIPModel`'s
//! outputs, and on the pixel values HF's processor made, the pipeline's labels and scores
//! are HF's within 1e-4. (From image files, the scores also carry the small difference
//! between PIL's resizing and decoding and the zoo's; `zoo-cli`'s test bounds that.)

use std::path::{Path, PathBuf};

use burn::tensor::{Tensor, TensorData};
use serde_json::Value;
use zoo_core::registry::{ForwardInput, IntMatrix, Pixels};
use zoo_data::LmTokenizer;
use zoo_device::test_device;
use zoo_device::testing::max_abs_diff_slices;
use zoo_hub::AutoModel;
use zoo_hub::pipelines::{DEFAULT_TEMPLATE, zero_shot_image, zero_shot_pixels};

fn clip() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../zoo-vision/tests/fixtures/clip-tiny")
}

fn floats(v: &Value) -> (Vec<f32>, Vec<usize>) {
    let values = v["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    (values, serde_json::from_value(v["shape"].clone()).unwrap())
}

fn matrix(name: &'static str, v: &Value) -> IntMatrix {
    IntMatrix {
        name,
        rows: serde_json::from_value(v.clone()).unwrap(),
    }
}

#[test]
fn clip_through_the_registry_gives_hfs_named_outputs() {
    let device = test_device();
    let e = zoo_fixtures::expected::<Value>(&clip());
    let model = AutoModel::from_pretrained(clip(), &device).unwrap();
    assert_eq!(model.architecture().name, "CLIPModel");
    let (values, shape) = floats(&e["pixel_values"]);
    let input = ForwardInput {
        input_ids: Some(matrix("input_ids", &e["input_ids"])),
        attention_mask: Some(matrix("attention_mask", &e["attention_mask"])),
        pixel_values: Some(Pixels {
            shape: [shape[0], shape[1], shape[2], shape[3]],
            values,
        }),
        ..ForwardInput::default()
    };
    let outputs = model.forward(&input, &device).unwrap();
    let names: Vec<&str> = outputs.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(
        names,
        [
            "logits_per_image",
            "logits_per_text",
            "text_embeds",
            "image_embeds"
        ]
    );
    for (name, got, shape) in outputs {
        let (want, want_shape) = floats(&e[name]);
        assert_eq!(shape, want_shape, "{name}");
        let d = max_abs_diff_slices(&got, &want);
        assert!(d <= 1e-4, "{name}: max abs diff {d}");
    }
    let no_pixels = ForwardInput {
        pixel_values: None,
        ..input
    };
    assert_eq!(
        model.forward(&no_pixels, &device).unwrap_err().to_string(),
        "the model needs pixel_values"
    );
}

#[test]
fn zero_shot_on_hfs_pixel_values_gives_the_pipelines_labels_and_scores() {
    let device = test_device();
    let e = zoo_fixtures::expected::<Value>(&clip());
    let model = AutoModel::from_pretrained(clip(), &device).unwrap();
    let tokenizer = LmTokenizer::from_pretrained(clip()).unwrap();
    for case in e["zero_shot"].as_array().unwrap() {
        let file = case["file"].as_str().unwrap();
        let processed = e["processor"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["file"] == file)
            .unwrap();
        let (values, s) = floats(&processed["pixel_values"]);
        let pixels =
            Tensor::<4>::from_data(TensorData::new(values, [s[0], s[1], s[2], s[3]]), &device);
        let labels: Vec<String> = serde_json::from_value(case["labels"].clone()).unwrap();
        let template = case["template"].as_str().unwrap_or(DEFAULT_TEMPLATE);
        let got = zero_shot_pixels(&model, &tokenizer, pixels, &labels, template, &device).unwrap();
        let want = case["result"].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.label, w["label"].as_str().unwrap(), "{file}: {got:?}");
            let d = (f64::from(g.score) - w["score"].as_f64().unwrap()).abs();
            assert!(d <= 1e-4, "{file} {}: score differs by {d}", g.label);
        }
    }
    // The checks come before the image is read: a missing file is not what is named.
    let missing = Path::new("no-such-image.png");
    let err = |labels: &[String], template: &str| {
        zero_shot_image(&model, &tokenizer, missing, labels, template, &device)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(&[], DEFAULT_TEMPLATE),
        "zero-shot image classification needs at least one candidate label"
    );
    assert_eq!(
        err(&["cat".into()], "{} and {}"),
        "the template \"{} and {}\" must hold exactly one {}, where each label goes"
    );
    assert!(
        err(&["cat".into()], DEFAULT_TEMPLATE).contains("no-such-image.png"),
        "a missing image is named"
    );
}
