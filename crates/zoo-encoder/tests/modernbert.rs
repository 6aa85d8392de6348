//! ModernBERT against `transformers`: tiny random-weight checkpoints written by `cargo
//! xtask fixtures` (`xtask/fixtures/modernbert.py`: 4 layers, global attention in 0 and
//! 3, a local window of ±2 in 1 and 2, RoPE bases 160000 and 10000, 4 heads of 8, a
//! right-padded batch of 13 tokens; the masked LM and the token classifier carry a
//! byte-level BPE tokenizer, which `zoo-cli`'s pipeline test runs). Every head's outputs
//! agree within 1e-4 at the real tokens on the backend under test (padded positions
//! whose window holds only padding are undefined: HF averages padding there, the zoo
//! gives zero attention); every checkpoint saves bit for bit.

use std::path::PathBuf;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::Deserialize;
use zoo_core::WeightsFile;
use zoo_device::test_device;
use zoo_device::testing::floats;
use zoo_encoder::{
    HeadKind, HeadLogits, ModernBertForClassification, ModernBertForMaskedLm, ModernBertModel,
};
use zoo_fixtures::Output;

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

#[derive(Deserialize)]
struct Expected {
    input_ids: Vec<Vec<i64>>,
    attention_mask: Vec<Vec<i64>>,
    last_hidden_state: Option<Output>,
    logits: Option<Output>,
    start_logits: Option<Output>,
    end_logits: Option<Output>,
}

fn expected(name: &str) -> Expected {
    zoo_fixtures::expected(&fixture(name))
}

fn ints(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let (b, t) = (rows.len(), rows[0].len());
    Tensor::from_data(TensorData::new(rows.concat(), [b, t]), device)
}

fn inputs(e: &Expected, device: &Device) -> (Tensor<2, Int>, Option<Tensor<2, Bool>>) {
    let padding = ints(&e.attention_mask, device).equal_elem(0);
    (ints(&e.input_ids, device), Some(padding))
}

/// The largest difference at real tokens: `got` and `want` hold `[B, T, ...]` values,
/// `per` per token.
fn diff_at_real_tokens(got: &[f32], want: &Output, mask: &[Vec<i64>]) -> f32 {
    let per = want.values.len() / (mask.len() * mask[0].len());
    assert_eq!(got.len(), want.values.len());
    let real = mask.concat();
    got.chunks(per)
        .zip(want.values.chunks(per))
        .zip(real)
        .filter(|(_, r)| *r == 1)
        .flat_map(|((g, w), _)| g.iter().zip(w).map(|(a, b)| (a - b).abs()))
        .fold(0.0, f32::max)
}

fn assert_close(what: &str, got: Vec<f32>, want: &Output, mask: &[Vec<i64>]) {
    let d = diff_at_real_tokens(&got, want, mask);
    assert!(d <= 1e-4, "{what}: max abs diff {d} at real tokens");
}

#[test]
fn the_bare_model_matches_transformers_and_its_window_and_mask_matter() {
    let device = test_device();
    let e = expected("modernbert-tiny");
    let model = ModernBertModel::from_pretrained(fixture("modernbert-tiny"), &device).unwrap();
    let (ids, padding) = inputs(&e, &device);
    let want = e.last_hidden_state.as_ref().unwrap();
    let hidden = model.forward(ids.clone(), padding.clone()).unwrap();
    assert_eq!(hidden.dims(), [2, 13, 32]);
    assert_close("last_hidden_state", floats(hidden), want, &e.attention_mask);

    // Negative controls: without the padding mask, and with every layer global, the real
    // tokens' states move far beyond the tolerance.
    let unmasked = floats(model.forward(ids.clone(), None).unwrap());
    let moved = diff_at_real_tokens(&unmasked, want, &e.attention_mask);
    assert!(
        moved > 1e-2,
        "the padding mask moved states by only {moved}"
    );
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("modernbert-tiny/config.json")).unwrap(),
    )
    .unwrap();
    config["layer_types"] = serde_json::json!(vec!["full_attention"; 4]);
    let global = zoo_fixtures::checkpoint_folder(
        "encoder",
        "modernbert-all-global",
        &fixture("modernbert-tiny/model.safetensors"),
        &config.to_string(),
    );
    let global = ModernBertModel::from_pretrained(&global, &device).unwrap();
    let all_global = floats(global.forward(ids, padding).unwrap());
    let moved = diff_at_real_tokens(&all_global, want, &e.attention_mask);
    assert!(
        moved > 1e-2,
        "the local window moved states by only {moved}"
    );
}

#[test]
fn the_heads_match_transformers() {
    let device = test_device();
    let e = expected("modernbert-tiny-mlm");
    let mlm =
        ModernBertForMaskedLm::from_pretrained(fixture("modernbert-tiny-mlm"), &device).unwrap();
    let (ids, padding) = inputs(&e, &device);
    let logits = mlm.forward(ids, padding).unwrap();
    assert_eq!(logits.dims(), [2, 13, 300]);
    assert_close(
        "mlm logits",
        floats(logits),
        e.logits.as_ref().unwrap(),
        &e.attention_mask,
    );

    let e = expected("modernbert-tiny-cls");
    let cls = ModernBertForClassification::from_pretrained(
        fixture("modernbert-tiny-cls"),
        HeadKind::Sequence,
        &device,
    )
    .unwrap();
    assert_eq!(
        cls.model.config().labels(),
        ["negative", "neutral", "positive"]
    );
    let (ids, padding) = inputs(&e, &device);
    let HeadLogits::PerText(logits) = cls.forward(ids, padding).unwrap() else {
        panic!("a sequence classifier gives one row per text")
    };
    assert_eq!(logits.dims(), [2, 3]);
    let want = e.logits.as_ref().unwrap();
    let d = zoo_device::testing::max_abs_diff_slices(&floats(logits), &want.values);
    assert!(d <= 1e-4, "sequence logits: max abs diff {d}");

    let e = expected("modernbert-tiny-ner");
    let ner = ModernBertForClassification::from_pretrained(
        fixture("modernbert-tiny-ner"),
        HeadKind::Token,
        &device,
    )
    .unwrap();
    let (ids, padding) = inputs(&e, &device);
    let HeadLogits::PerToken(logits) = ner.forward(ids, padding).unwrap() else {
        panic!("a token classifier gives one row per token")
    };
    assert_eq!(logits.dims(), [2, 13, 5]);
    assert_close(
        "token logits",
        floats(logits),
        e.logits.as_ref().unwrap(),
        &e.attention_mask,
    );

    let e = expected("modernbert-tiny-qa");
    let qa = ModernBertForClassification::from_pretrained(
        fixture("modernbert-tiny-qa"),
        HeadKind::Span,
        &device,
    )
    .unwrap();
    let (ids, padding) = inputs(&e, &device);
    let HeadLogits::PerToken(logits) = qa.forward(ids, padding).unwrap() else {
        panic!("the span head gives one pair per token")
    };
    let [b, t, _] = logits.dims();
    let side = |i| floats(logits.clone().narrow(2, i, 1).reshape([b, t]));
    assert_close(
        "start_logits",
        side(0),
        e.start_logits.as_ref().unwrap(),
        &e.attention_mask,
    );
    assert_close(
        "end_logits",
        side(1),
        e.end_logits.as_ref().unwrap(),
        &e.attention_mask,
    );
}

#[test]
fn every_modernbert_checkpoint_saves_bit_for_bit() {
    let device = test_device();
    let stored = |d: &std::path::Path| WeightsFile::find(d).unwrap().contents().unwrap();
    let dir = zoo_fixtures::tempdir("encoder", "modernbert-save");
    ModernBertModel::from_pretrained(fixture("modernbert-tiny"), &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    assert_eq!(stored(&dir), stored(&fixture("modernbert-tiny")));
    let dir = zoo_fixtures::tempdir("encoder", "modernbert-mlm-save");
    ModernBertForMaskedLm::from_pretrained(fixture("modernbert-tiny-mlm"), &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    assert_eq!(stored(&dir), stored(&fixture("modernbert-tiny-mlm")));
    for (name, kind) in [
        ("modernbert-tiny-cls", HeadKind::Sequence),
        ("modernbert-tiny-ner", HeadKind::Token),
        ("modernbert-tiny-qa", HeadKind::Span),
    ] {
        let dir = zoo_fixtures::tempdir("encoder", &format!("{name}-save"));
        ModernBertForClassification::from_pretrained(fixture(name), kind, &device)
            .unwrap()
            .save_pretrained(&dir)
            .unwrap();
        assert_eq!(stored(&dir), stored(&fixture(name)), "{name}");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["architectures"][0], kind.architecture());
        assert_eq!(config["model_type"], "modernbert");
        // The special tokens are kept, so transformers reads the same config back.
        assert_eq!(
            [
                &config["pad_token_id"],
                &config["cls_token_id"],
                &config["sep_token_id"]
            ],
            [0, 2, 3]
        );
        assert_eq!(config["layer_types"][1], "sliding_attention");
    }
}

#[test]
fn bad_inputs_are_errors_naming_the_value() {
    let device = test_device();
    let model = ModernBertModel::from_pretrained(fixture("modernbert-tiny"), &device).unwrap();
    let run = |rows: Vec<Vec<i64>>| {
        model
            .forward(ints(&rows, &device), None)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = run(vec![vec![2, 300, 3]]);
    assert!(e.contains("300") && e.contains("vocab_size 300"), "{e}");
    let e = run(vec![vec![5; 65]]);
    assert!(
        e.contains("65") && e.contains("max_position_embeddings 64"),
        "{e}"
    );
}
