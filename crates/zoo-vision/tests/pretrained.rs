//! HF checkpoints against `transformers`: tiny random-weight ViT models written by
//! `cargo xtask fixtures` (3 channels, 30×30 images in 6×6 patches, 4 heads of 8, 5
//! labels), with `transformers`' outputs at the trained size and, through
//! `interpolate_pos_encoding=True`, at 42×36. Outputs agree within 1e-4 on the backend
//! under test. Then the image processor against HF's, saving, the preset's parameter
//! count, and the errors of checkpoints that do not fit.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use serde::Deserialize;
use zoo_core::{CheckpointError, WeightsFile};
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices};
use zoo_fixtures::Output;
use zoo_vision::{
    DeiTForImageClassificationWithTeacher, ImageInput, ImageProcessor, ViTConfig,
    ViTForImageClassification, ViTModel, VisionError,
};

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

/// A stored `[B, C, H, W]` tensor on `device`.
fn tensor(o: &Output, device: &Device) -> Tensor<4> {
    let s = &o.shape;
    Tensor::from_data(
        TensorData::new(o.values.clone(), [s[0], s[1], s[2], s[3]]),
        device,
    )
}

#[derive(Deserialize)]
struct Expected {
    pixel_values: Output,
    pixel_values_other: Output,
    last_hidden_state: Option<Output>,
    pooler_output: Option<Output>,
    last_hidden_state_other: Option<Output>,
    pooler_output_other: Option<Output>,
    logits: Option<Output>,
    logits_other: Option<Output>,
    cls_logits: Option<Output>,
    distillation_logits: Option<Output>,
}

fn expected(name: &str) -> Expected {
    zoo_fixtures::expected(&fixture(name))
}

fn max_diff<const D: usize>(what: &str, got: Tensor<D>, want: &Output) -> f32 {
    assert_eq!(got.dims().to_vec(), want.shape, "{what} shape");
    max_abs_diff_slices(&floats(got), &want.values)
}

fn assert_matches<const D: usize>(what: &str, got: Tensor<D>, want: &Output) {
    let diff = max_diff(what, got, want);
    assert!(
        diff <= 1e-4,
        "{what}: max abs diff {diff} against transformers"
    );
}

#[test]
fn vit_model_matches_transformers_at_the_trained_size_and_interpolated() {
    let device = test_device();
    let e = expected("vit-tiny");
    let model = ViTModel::from_pretrained(fixture("vit-tiny"), &device).unwrap();
    assert!(model.pooler.is_some(), "the checkpoint has a pooler");
    let out = model
        .forward(ImageInput::new(tensor(&e.pixel_values, &device)))
        .unwrap();
    assert_matches(
        "last_hidden_state",
        out.last_hidden_state,
        e.last_hidden_state.as_ref().unwrap(),
    );
    assert_matches(
        "pooler_output",
        out.pooler_output.unwrap(),
        e.pooler_output.as_ref().unwrap(),
    );
    let other = model
        .forward(ImageInput::new(tensor(&e.pixel_values_other, &device)).interpolate_pos_encoding())
        .unwrap();
    assert_matches(
        "last_hidden_state at 42x36",
        other.last_hidden_state,
        e.last_hidden_state_other.as_ref().unwrap(),
    );
    assert_matches(
        "pooler_output at 42x36",
        other.pooler_output.unwrap(),
        e.pooler_output_other.as_ref().unwrap(),
    );
}

#[test]
fn image_classification_matches_transformers_and_positions_matter() {
    let device = test_device();
    let e = expected("vit-tiny-cls");
    let model =
        ViTForImageClassification::from_pretrained(fixture("vit-tiny-cls"), &device).unwrap();
    assert_eq!(
        model.vit.config().labels(),
        ["circle", "square", "star", "triangle", "wave"]
    );
    let (logits, _) = model
        .forward(ImageInput::new(tensor(&e.pixel_values, &device)))
        .unwrap();
    assert_matches("logits", logits, e.logits.as_ref().unwrap());
    let other =
        || ImageInput::new(tensor(&e.pixel_values_other, &device)).interpolate_pos_encoding();
    let (logits, _) = model.forward(other()).unwrap();
    assert_matches("logits at 42x36", logits, e.logits_other.as_ref().unwrap());

    // Negative control: resampling the grid with nearest rows instead of bicubic moves
    // the logits far beyond the tolerance, so the check above sees the interpolation.
    let mut shifted = model.clone();
    let table = shifted.vit.embeddings.position_embeddings.val();
    let [_, n, d] = table.dims();
    let g = 5;
    let patches = table.clone().narrow(1, 1, n - 1).reshape([g, g, d]);
    let rolled = Tensor::cat(
        vec![patches.clone().narrow(0, 1, g - 1), patches.narrow(0, 0, 1)],
        0,
    )
    .reshape([1, g * g, d]);
    shifted.vit.embeddings.position_embeddings =
        burn::module::Param::from_tensor(Tensor::cat(vec![table.narrow(1, 0, 1), rolled], 1));
    let (logits, _) = shifted.forward(other()).unwrap();
    let moved = max_diff("shifted", logits, e.logits_other.as_ref().unwrap());
    assert!(
        moved > 1e-2,
        "rolled positions moved the logits by only {moved}"
    );
}

#[test]
fn the_image_processor_matches_hf_on_png_and_jpeg_files() {
    let device = test_device();
    let dir = fixture("images");
    let processor = ImageProcessor::from_pretrained(&dir).unwrap();
    assert_eq!(
        processor.resize,
        Some(zoo_vision::image::Resize::Exact(30, 30))
    );
    #[derive(Deserialize)]
    struct Case {
        file: String,
        pixel_values: Output,
    }
    #[derive(Deserialize)]
    struct Cases {
        cases: Vec<Case>,
    }
    let cases: Cases =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    for case in &cases.cases {
        let got = processor.load(&[dir.join(&case.file)], &device).unwrap();
        let diff = max_diff(&case.file, got.clone(), &case.pixel_values);
        let mean_diff = floats(got)
            .iter()
            .zip(&case.pixel_values.values)
            .map(|(a, b)| (a - b).abs())
            .sum::<f32>()
            / case.pixel_values.values.len() as f32;
        eprintln!("{}: max abs diff {diff}, mean {mean_diff}", case.file);
        // One 8-bit level is 2/255 = 0.0078 after normalising by std 0.5.
        let level = 2.0 / 255.0;
        if case.file == "same-size.png" {
            // No resizing: decode, rescale and normalise are exact.
            assert!(diff < 1e-6, "{}: {diff}", case.file);
        } else {
            assert!(diff <= 2.0 * level + 1e-6, "{}: max {diff}", case.file);
            assert!(mean_diff <= 0.5 * level, "{}: mean {mean_diff}", case.file);
        }
    }
}

#[test]
fn the_vit_base_preset_has_hf_parameter_count() {
    #[derive(Deserialize)]
    struct Count {
        num_labels: usize,
        parameters: usize,
    }
    let count: Count = serde_json::from_str(
        &std::fs::read_to_string(fixture("vit-base-patch16-224.json")).unwrap(),
    )
    .unwrap();
    let device = Device::flex();
    let model = ViTForImageClassification::new(
        &ViTConfig::vit_base_patch16_224(),
        count.num_labels,
        &device,
    )
    .unwrap();
    // transformers 5.24 counts 86,567,656.
    assert_eq!(model.num_params(), count.parameters);
}

fn tempdir(name: &str) -> PathBuf {
    zoo_fixtures::tempdir("vision", name)
}

fn tensors_of(dir: &Path) -> Vec<zoo_core::checkpoint::StoredTensor> {
    WeightsFile::find(dir).unwrap().contents().unwrap()
}

#[test]
fn saving_writes_hf_layout_that_loads_back_bit_for_bit() {
    let device = test_device();
    let dir = tempdir("save-base");
    ViTModel::from_pretrained(fixture("vit-tiny"), &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    assert_eq!(tensors_of(&dir), tensors_of(&fixture("vit-tiny")));
    let dir = tempdir("save-cls");
    ViTForImageClassification::from_pretrained(fixture("vit-tiny-cls"), &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    assert_eq!(tensors_of(&dir), tensors_of(&fixture("vit-tiny-cls")));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "ViTForImageClassification");
    assert_eq!(config["model_type"], "vit");
    assert_eq!(config["id2label"]["3"], "triangle");
    assert_eq!(config["patch_size"], 6);

    // A classifier built without names saves HF's default ones, so it loads back.
    let dir = tempdir("unnamed");
    ViTForImageClassification::new(&ViTConfig::new(8, 4, 1, 8, 1, 2, 16), 3, &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    let back = ViTForImageClassification::from_pretrained(&dir, &device).unwrap();
    assert_eq!(
        back.vit.config().labels(),
        ["LABEL_0", "LABEL_1", "LABEL_2"]
    );
    assert_eq!(back.vit.config().num_channels, 1);
}

fn tensors_error(e: VisionError) -> zoo_core::TensorReport {
    match e {
        VisionError::Checkpoint(CheckpointError::Tensors { report, .. }) => report,
        other => panic!("expected a tensor report, got {other}"),
    }
}

#[test]
fn a_checkpoint_that_does_not_fit_names_every_tensor_with_its_shapes() {
    let device = test_device();
    // The bare checkpoint has no classifier.
    let weights = fixture("vit-tiny/model.safetensors");
    let cls = std::fs::read_to_string(fixture("vit-tiny-cls/config.json")).unwrap();
    let dir = zoo_fixtures::checkpoint_folder("vision", "no-head", &weights, &cls);
    let e = ViTForImageClassification::from_pretrained(&dir, &device).unwrap_err();
    let text = e.to_string();
    let report = tensors_error(e);
    assert_eq!(
        report.missing,
        [
            ("classifier.bias".to_string(), vec![5]),
            ("classifier.weight".to_string(), vec![32, 5])
        ]
    );
    assert!(report.unexpected.is_empty() && report.mismatched.is_empty());
    assert!(text.contains("classifier.weight [32, 5]"), "{text}");

    // A config whose patch size disagrees with the weights: the projection and the
    // position table are both named, with both shapes.
    let config = std::fs::read_to_string(fixture("vit-tiny/config.json"))
        .unwrap()
        .replace("\"patch_size\": 6", "\"patch_size\": 5");
    let dir = zoo_fixtures::checkpoint_folder("vision", "wrong-patch", &weights, &config);
    let report = tensors_error(ViTModel::from_pretrained(&dir, &device).unwrap_err());
    assert_eq!(
        report.mismatched,
        [
            (
                "embeddings.patch_embeddings.projection.weight".to_string(),
                vec![32, 3, 5, 5],
                vec![32, 3, 6, 6]
            ),
            (
                "embeddings.position_embeddings".to_string(),
                vec![1, 37, 32],
                vec![1, 26, 32]
            ),
        ]
    );

    // A bad config is named with its file.
    let config = std::fs::read_to_string(fixture("vit-tiny/config.json"))
        .unwrap()
        .replace("\"patch_size\": 6", "\"patch_size\": 7");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let e = ViTModel::from_pretrained(&dir, &device)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: invalid ViT config: image_size 30 is not divisible by patch_size 7",
            dir.join("config.json").display()
        )
    );
}

/// DeiT: the distillation token after CLS (its position kept, with CLS's, when the grid
/// is resampled), the base model with its pooler, and the two heads and their mean, all
/// within 1e-4 of `transformers` at the trained size and at 42×36. Negative control: the
/// CLS head alone is not the prediction. Saving writes DeiT's names, bit for bit.
#[test]
fn deit_matches_transformers_with_its_distillation_token_and_two_heads() {
    let device = test_device();
    let e = expected("deit-tiny");
    let base = ViTModel::from_pretrained(fixture("deit-tiny"), &device).unwrap();
    assert!(base.embeddings.distillation_token.is_some());
    let out = base
        .forward(ImageInput::new(tensor(&e.pixel_values, &device)))
        .unwrap();
    assert_matches(
        "last_hidden_state",
        out.last_hidden_state,
        e.last_hidden_state.as_ref().unwrap(),
    );
    assert_matches(
        "pooler_output",
        out.pooler_output.unwrap(),
        e.pooler_output.as_ref().unwrap(),
    );
    let other = base
        .forward(ImageInput::new(tensor(&e.pixel_values_other, &device)).interpolate_pos_encoding())
        .unwrap();
    assert_matches(
        "last_hidden_state at 42x36",
        other.last_hidden_state,
        e.last_hidden_state_other.as_ref().unwrap(),
    );

    let src = fixture("deit-tiny-distilled");
    let e = expected("deit-tiny-distilled");
    let model = DeiTForImageClassificationWithTeacher::from_pretrained(&src, &device).unwrap();
    let out = model
        .forward(ImageInput::new(tensor(&e.pixel_values, &device)))
        .unwrap();
    let want = e.logits.as_ref().unwrap();
    assert!(max_diff("cls_logits as logits", out.cls_logits.clone(), want) > 1e-2);
    assert_matches("logits", out.logits, want);
    assert_matches("cls_logits", out.cls_logits, e.cls_logits.as_ref().unwrap());
    assert_matches(
        "distillation_logits",
        out.distillation_logits,
        e.distillation_logits.as_ref().unwrap(),
    );
    let other = model
        .forward(ImageInput::new(tensor(&e.pixel_values_other, &device)).interpolate_pos_encoding())
        .unwrap();
    assert_matches(
        "logits at 42x36",
        other.logits,
        e.logits_other.as_ref().unwrap(),
    );

    let dir = zoo_fixtures::tempdir("vision", "deit-save");
    model.save_pretrained(&dir).unwrap();
    let contents = |d: &Path| WeightsFile::find(d).unwrap().contents().unwrap();
    assert_eq!(contents(&dir), contents(&src));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "deit");
    assert_eq!(
        cfg["architectures"][0],
        "DeiTForImageClassificationWithTeacher"
    );
    // DeiT's single-head classifier: ViT's classifier over DeiT's embeddings (the
    // distillation token embedded, the CLS token's head read), saved under DeiT's names.
    let src = fixture("deit-tiny-cls");
    let e = expected("deit-tiny-cls");
    let single = ViTForImageClassification::from_pretrained(&src, &device).unwrap();
    assert!(single.vit.config().distilled());
    let (out, _) = single
        .forward(ImageInput::new(tensor(&e.pixel_values, &device)))
        .unwrap();
    assert_matches("DeiT's single head", out, e.logits.as_ref().unwrap());
    let (other, _) = single
        .forward(ImageInput::new(tensor(&e.pixel_values_other, &device)).interpolate_pos_encoding())
        .unwrap();
    assert_matches(
        "DeiT's single head at 42x36",
        other,
        e.logits_other.as_ref().unwrap(),
    );
    let dir = zoo_fixtures::tempdir("vision", "deit-cls-save");
    single.save_pretrained(&dir).unwrap();
    assert_eq!(contents(&dir), contents(&src));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"][0], "DeiTForImageClassification");
    // A ViT config is refused for the distilled classifier, by name.
    let e =
        DeiTForImageClassificationWithTeacher::from_pretrained(fixture("vit-tiny-cls"), &device)
            .unwrap_err()
            .to_string();
    assert!(e.contains("model_type \"deit\""), "{e}");
}
