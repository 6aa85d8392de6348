//! CLIP against `transformers`: a tiny random-weight `CLIPModel` written by `cargo xtask
//! fixtures` (`xtask/fixtures/clip.py`: a text tower of width 32 over a 602-token
//! byte-level BPE, a vision tower of width 24 on 30×30 images in 6×6 patches, both
//! projected to 16). The embeddings and logits agree within 1e-4 on the backend under
//! test; CLIP's image processor (shortest-edge resize, centre crop) agrees with HF's on the
//! committed images; the checkpoint saves bit for bit.

use std::path::PathBuf;

use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::Deserialize;
use zoo_core::WeightsFile;
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices};
use zoo_fixtures::Output;
use zoo_vision::{ClipModel, ImageInput, ImageProcessor, Resize};

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

#[derive(Deserialize)]
struct Case {
    file: String,
    pixel_values: Output,
}

#[derive(Deserialize)]
struct Expected {
    input_ids: Vec<Vec<i64>>,
    attention_mask: Vec<Vec<i64>>,
    pixel_values: Output,
    text_embeds: Output,
    image_embeds: Output,
    logits_per_image: Output,
    logits_per_text: Output,
    vision_last_hidden_state: Output,
    vision_pooler_output: Output,
    raw_input_ids: Vec<Vec<i64>>,
    raw_text_features: Output,
    raw_text_last_hidden_state: Output,
    processor: Vec<Case>,
}

fn expected() -> Expected {
    zoo_fixtures::expected(&fixture("clip-tiny"))
}

fn ids(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let (b, t) = (rows.len(), rows[0].len());
    Tensor::from_data(TensorData::new(rows.concat(), [b, t]), device)
}

fn pixels(o: &Output, device: &Device) -> Tensor<4> {
    let s = &o.shape;
    Tensor::from_data(
        TensorData::new(o.values.clone(), [s[0], s[1], s[2], s[3]]),
        device,
    )
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
fn clip_matches_transformers_on_padded_texts_and_images() {
    let device = test_device();
    let e = expected();
    let model = ClipModel::from_pretrained(fixture("clip-tiny"), &device).unwrap();
    let padding = ids(&e.attention_mask, &device).equal_elem(0);
    let out = model
        .forward(
            ids(&e.input_ids, &device),
            Some(padding.clone()),
            ImageInput::new(pixels(&e.pixel_values, &device)),
        )
        .unwrap();
    assert_matches(
        "logits_per_image",
        out.logits_per_image,
        &e.logits_per_image,
    );
    assert_matches("logits_per_text", out.logits_per_text, &e.logits_per_text);
    assert_matches("text_embeds", out.text_embeds, &e.text_embeds);
    assert_matches("image_embeds", out.image_embeds, &e.image_embeds);
    let vision = model
        .vision_model
        .forward(ImageInput::new(pixels(&e.pixel_values, &device)))
        .unwrap();
    assert_matches(
        "vision last_hidden_state",
        vision.last_hidden_state,
        &e.vision_last_hidden_state,
    );
    assert_matches(
        "vision pooler_output",
        vision.pooler_output,
        &e.vision_pooler_output,
    );
}

/// Ids with an end-of-text token inside the second row: the text is pooled at the first
/// one, as HF pools. Negative control: the same weights with `eos_token_id` 7 pool at
/// another position (row 0's last token, row 1's first), and the features move far
/// beyond the tolerance. (The old `eos_token_id` of 2, pooling at the largest id, is
/// `eos_positions`' unit test: here the largest id is the end of text.)
#[test]
fn text_features_are_pooled_at_the_first_end_of_text() {
    let device = test_device();
    let e = expected();
    let model = ClipModel::from_pretrained(fixture("clip-tiny"), &device).unwrap();
    let raw = || ids(&e.raw_input_ids, &device);
    assert_matches(
        "text last_hidden_state",
        model
            .text_model
            .forward(raw(), None)
            .unwrap()
            .last_hidden_state,
        &e.raw_text_last_hidden_state,
    );
    assert_matches(
        "text features",
        model.text_features(raw(), None).unwrap(),
        &e.raw_text_features,
    );
    let mut config = model.config().clone();
    config.text_config.eos_token_id = 7;
    let old = zoo_fixtures::checkpoint_folder(
        "vision",
        "clip-other-eos",
        &fixture("clip-tiny/model.safetensors"),
        &serde_json::to_string(&config).unwrap(),
    );
    let old = ClipModel::from_pretrained(&old, &device).unwrap();
    let moved = max_diff(
        "eos 7",
        old.text_features(raw(), None).unwrap(),
        &e.raw_text_features,
    );
    assert!(
        moved > 1e-2,
        "pooling elsewhere moved the features by only {moved}"
    );
}

#[test]
fn bad_texts_are_errors_naming_the_value() {
    let device = test_device();
    let model = ClipModel::from_pretrained(fixture("clip-tiny"), &device).unwrap();
    let run = |rows: Vec<Vec<i64>>| {
        model
            .text_features(ids(&rows, &device), None)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = run(vec![vec![600, 602, 601]]);
    assert!(e.contains("602") && e.contains("vocab_size 602"), "{e}");
    let e = run(vec![vec![5; 25]]);
    assert!(
        e.contains("25") && e.contains("max_position_embeddings 24"),
        "{e}"
    );
}

#[test]
fn clips_image_processor_matches_hf_with_its_shortest_edge_and_crop() {
    let device = test_device();
    let e = expected();
    let processor = ImageProcessor::from_pretrained(fixture("clip-tiny")).unwrap();
    assert_eq!(processor.resize, Some(Resize::ShortestEdge(30)));
    assert_eq!(processor.center_crop, Some((30, 30)));
    let images = fixture("images");
    for case in &e.processor {
        let got = processor.load(&[images.join(&case.file)], &device).unwrap();
        let diff = max_diff(&case.file, got.clone(), &case.pixel_values);
        let mean = floats(got)
            .iter()
            .zip(&case.pixel_values.values)
            .map(|(a, b)| (a - b).abs())
            .sum::<f32>()
            / case.pixel_values.values.len() as f32;
        // One 8-bit level is 1/255 / std, at most 0.0152 for CLIP's smallest std (0.2613);
        // resizing agrees with PIL's to about a level, as for ViT's processor.
        let level = 1.0 / 255.0 / 0.2613;
        if case.file == "same-size.png" {
            assert!(diff < 1e-5, "{}: {diff}", case.file);
        } else {
            assert!(diff <= 2.0 * level + 1e-5, "{}: max {diff}", case.file);
            assert!(mean <= 0.5 * level, "{}: mean {mean}", case.file);
        }
    }
}

#[test]
fn clip_saves_hf_layout_bit_for_bit() {
    let device = test_device();
    let dir = zoo_fixtures::tempdir("vision", "clip-save");
    ClipModel::from_pretrained(fixture("clip-tiny"), &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    let stored = |d: &std::path::Path| WeightsFile::find(d).unwrap().contents().unwrap();
    assert_eq!(stored(&dir), stored(&fixture("clip-tiny")));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "CLIPModel");
    assert_eq!(config["text_config"]["eos_token_id"], 601);
    assert_eq!(config["vision_config"]["patch_size"], 6);
}
