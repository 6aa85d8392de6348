//! RoBERTa checkpoints against `transformers`: tiny random-weight `RobertaModel` (with its
//! pooler), `RobertaForMaskedLM` and `RobertaForSequenceClassification` written by
//! `cargo xtask fixtures` (5 heads of 8, `pad_token_id` 1, a right-padded batch), with a
//! byte-level tokenizer whose special tokens are RoBERTa's. Outputs agree within 1e-4 on
//! the backend under test; counting positions BERT's way moves them far beyond that.
//! Then the tokenizer's ids, saving bit for bit, and a checkpoint that does not fit.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::Deserialize;
use zoo_core::WeightsFile;
use zoo_core::checkpoint::peft;
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices};
use zoo_encoder::roberta::{
    RobertaForMaskedLm, RobertaForQuestionAnswering, RobertaForSequenceClassification,
    RobertaForTokenClassification, RobertaModel,
};
use zoo_encoder::{BertTokenizer, EncoderInput, PositionIds};
use zoo_fixtures::Output;

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

#[derive(Deserialize)]
struct Sample {
    text: String,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct Expected {
    texts: Vec<String>,
    input_ids: Vec<Vec<i64>>,
    attention_mask: Vec<Vec<i64>>,
    tokenizer: Vec<Sample>,
    last_hidden_state: Option<Output>,
    pooler_output: Option<Output>,
    logits: Option<Output>,
    start_logits: Option<Output>,
    end_logits: Option<Output>,
}

fn tempdir(name: &str) -> PathBuf {
    zoo_fixtures::tempdir("encoder", name)
}

fn expected(name: &str) -> Expected {
    zoo_fixtures::expected(&fixture(name))
}

fn input(e: &Expected, device: &Device) -> EncoderInput {
    let flat: Vec<i64> = e.input_ids.iter().flatten().copied().collect();
    let shape = [e.input_ids.len(), e.input_ids[0].len()];
    let pad: Vec<bool> = e.attention_mask.iter().flatten().map(|&m| m == 0).collect();
    EncoderInput::new(Tensor::<2, Int>::from_data(
        TensorData::new(flat, shape),
        device,
    ))
    .padding(Tensor::from_data(TensorData::new(pad, shape), device))
}

fn diff<const D: usize>(got: Tensor<D>, want: &Output) -> f32 {
    assert_eq!(got.dims().to_vec(), want.shape);
    max_abs_diff_slices(&floats(got), &want.values)
}

#[test]
fn roberta_models_match_transformers() {
    let device = test_device();
    let e = expected("roberta-tiny");
    let model = RobertaModel::from_pretrained(fixture("roberta-tiny"), &device).unwrap();
    assert_eq!(model.position_ids(), PositionIds::AfterPadding);
    assert_eq!(model.max_len(), 30);
    let out = model.forward(input(&e, &device)).unwrap();
    let d = diff(out.hidden, e.last_hidden_state.as_ref().unwrap());
    assert!(d <= 1e-4, "last_hidden_state: {d}");
    let d = diff(out.pooled.unwrap(), e.pooler_output.as_ref().unwrap());
    assert!(d <= 1e-4, "pooler_output: {d}");

    let e = expected("roberta-tiny-mlm");
    let mlm = RobertaForMaskedLm::from_pretrained(fixture("roberta-tiny-mlm"), &device).unwrap();
    let d = diff(
        mlm.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );
    assert!(d <= 1e-4, "masked LM: {d}");

    let e = expected("roberta-tiny-cls");
    let cls =
        RobertaForSequenceClassification::from_pretrained(fixture("roberta-tiny-cls"), &device)
            .unwrap();
    assert_eq!(cls.bert.config().labels(), ["comedy", "history", "tragedy"]);
    let d = diff(
        cls.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );
    assert!(d <= 1e-4, "sequence classification: {d}");
}

/// Negative control: the same weights with positions counted from 0 (the config read
/// as BERT's) give hidden states far from `transformers`'.
#[test]
fn bert_positions_on_roberta_weights_miss_by_far_more_than_the_tolerance() {
    let device = test_device();
    let dir = tempdir("roberta-as-bert");
    let src = fixture("roberta-tiny");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["model_type"] = "bert".into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let bert = zoo_encoder::BertModel::from_pretrained(&dir, &device).unwrap();
    assert_eq!(bert.position_ids(), PositionIds::FromZero);
    let e = expected("roberta-tiny");
    let out = bert.forward(input(&e, &device)).unwrap();
    let d = diff(out.hidden, e.last_hidden_state.as_ref().unwrap());
    assert!(d > 1e-2, "BERT's positions moved the output by only {d}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_tokenizer_has_roberta_s_special_tokens_and_python_s_ids() {
    let e = expected("roberta-tiny");
    let tok = BertTokenizer::from_pretrained(fixture("roberta-tiny"), 30).unwrap();
    assert_eq!((tok.pad_id(), tok.mask_id()), (1, 4));
    for s in &e.tokenizer {
        assert_eq!(tok.encode(&s.text).unwrap().ids, s.ids, "{:?}", s.text);
    }
    // The fixture's batch is these texts, right-padded with <pad>.
    let texts: Vec<&str> = e.texts.iter().map(String::as_str).collect();
    let batch = tok.encode_batch(&texts).unwrap();
    let ids: Vec<Vec<i64>> = batch
        .ids
        .iter()
        .map(|r| r.iter().map(|&x| i64::from(x)).collect())
        .collect();
    assert_eq!(ids, e.input_ids);
}

#[test]
fn saving_writes_roberta_names_that_load_back_bit_for_bit() {
    let device = test_device();
    let contents = |dir: &Path| WeightsFile::find(dir).unwrap().contents().unwrap();
    for name in ["roberta-tiny", "roberta-tiny-mlm", "roberta-tiny-cls"] {
        let src = fixture(name);
        let out = tempdir(name);
        std::fs::remove_dir(&out).unwrap();
        match name {
            "roberta-tiny" => RobertaModel::from_pretrained(&src, &device)
                .unwrap()
                .save_pretrained(&out),
            "roberta-tiny-mlm" => RobertaForMaskedLm::from_pretrained(&src, &device)
                .unwrap()
                .save_pretrained(&out),
            _ => RobertaForSequenceClassification::from_pretrained(&src, &device)
                .unwrap()
                .save_pretrained(&out),
        }
        .unwrap();
        assert_eq!(contents(&out), contents(&src), "{name}");
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap())
                .unwrap();
        let src_cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(cfg["model_type"], "roberta");
        assert_eq!(cfg["architectures"], src_cfg["architectures"], "{name}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}

#[test]
fn a_roberta_checkpoint_that_does_not_fit_names_tensors_as_roberta_does() {
    let device = test_device();
    let dir = tempdir("roberta-misfit");
    let src = fixture("roberta-tiny-cls");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["num_hidden_layers"] = 3.into();
    cfg["intermediate_size"] = 48.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = RobertaForSequenceClassification::from_pretrained(&dir, &device)
        .unwrap_err()
        .to_string();
    for want in [
        "missing:    roberta.encoder.layer.2.attention.self.query.weight [40, 40]",
        "mis-shaped: roberta.encoder.layer.0.intermediate.dense.weight: the model has",
    ] {
        assert!(e.contains(want), "{want:?} not in:\n{e}");
    }
    // Every name is the checkpoint's own, none BERT's.
    assert!(
        !e.contains("bert.encoder") && !e.contains("bert.layers"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// XLM-RoBERTa: RoBERTa's modules under its own classes and `model_type`. The base model
/// (with its pooler) and the sequence classifier match `transformers` within 1e-4; its
/// SentencePiece-style Unigram tokenizer (Metaspace, `<mask>` last) gives Python's ids;
/// and a saved folder keeps `xlm-roberta` with the same tensors, bit for bit.
#[test]
fn xlm_roberta_matches_transformers_and_its_tokenizer_python() {
    let device = test_device();
    let e = expected("xlm-roberta-tiny");
    let model = RobertaModel::from_pretrained(fixture("xlm-roberta-tiny"), &device).unwrap();
    assert_eq!(model.position_ids(), PositionIds::AfterPadding);
    let out = model.forward(input(&e, &device)).unwrap();
    let d = diff(out.hidden, e.last_hidden_state.as_ref().unwrap());
    assert!(d <= 1e-4, "last_hidden_state: {d}");
    let d = diff(out.pooled.unwrap(), e.pooler_output.as_ref().unwrap());
    assert!(d <= 1e-4, "pooler_output: {d}");

    let tok = BertTokenizer::from_pretrained(fixture("xlm-roberta-tiny"), 30).unwrap();
    assert_eq!(tok.pad_id(), 1);
    assert_eq!(
        tok.mask_id() as usize,
        tok.vocab_size() - 1,
        "<mask> is the last id"
    );
    for s in &e.tokenizer {
        assert_eq!(tok.encode(&s.text).unwrap().ids, s.ids, "{:?}", s.text);
    }
    let texts: Vec<&str> = e.texts.iter().map(String::as_str).collect();
    let ids: Vec<Vec<i64>> = tok
        .encode_batch(&texts)
        .unwrap()
        .ids
        .iter()
        .map(|r| r.iter().map(|&x| i64::from(x)).collect())
        .collect();
    assert_eq!(ids, e.input_ids);

    let src = fixture("xlm-roberta-tiny-cls");
    let e = expected("xlm-roberta-tiny-cls");
    let cls = RobertaForSequenceClassification::from_pretrained(&src, &device).unwrap();
    assert_eq!(
        cls.bert.config().labels(),
        ["negative", "neutral", "positive"]
    );
    let d = diff(
        cls.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );
    assert!(d <= 1e-4, "sequence classification: {d}");
    let out = tempdir("xlm-roberta-save");
    cls.save_pretrained(&out).unwrap();
    let contents = |dir: &Path| WeightsFile::find(dir).unwrap().contents().unwrap();
    assert_eq!(contents(&out), contents(&src));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "xlm-roberta");
    assert_eq!(
        cfg["architectures"][0],
        "XLMRobertaForSequenceClassification"
    );
}

/// RoBERTa's token classifier and span head (the class of deepset/roberta-base-squad2),
/// and XLM-RoBERTa's masked LM, match `transformers` within 1e-4.
#[test]
fn roberta_token_and_span_heads_and_xlm_roberta_mlm_match_transformers() {
    let device = test_device();
    let e = expected("roberta-tiny-ner");
    let ner = RobertaForTokenClassification::from_pretrained(fixture("roberta-tiny-ner"), &device)
        .unwrap();
    assert_eq!(ner.bert.config().labels()[1], "B-PER");
    let d = diff(
        ner.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );
    assert!(d <= 1e-4, "token classification: {d}");

    let e = expected("roberta-tiny-qa");
    let qa =
        RobertaForQuestionAnswering::from_pretrained(fixture("roberta-tiny-qa"), &device).unwrap();
    let span = qa.forward(input(&e, &device)).unwrap();
    let d = diff(span.start, e.start_logits.as_ref().unwrap());
    assert!(d <= 1e-4, "start_logits: {d}");
    let d = diff(span.end, e.end_logits.as_ref().unwrap());
    assert!(d <= 1e-4, "end_logits: {d}");

    let e = expected("xlm-roberta-tiny-mlm");
    let mlm =
        RobertaForMaskedLm::from_pretrained(fixture("xlm-roberta-tiny-mlm"), &device).unwrap();
    let d = diff(
        mlm.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );
    assert!(d <= 1e-4, "XLM-R masked LM: {d}");

    // XLM-RoBERTa's token classifier and span head: RoBERTa's, under its class names.
    let e = expected("xlm-roberta-tiny-ner");
    let ner =
        RobertaForTokenClassification::from_pretrained(fixture("xlm-roberta-tiny-ner"), &device)
            .unwrap();
    assert_eq!(ner.bert.config().labels()[1], "B-ORG");
    let d = diff(
        ner.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );
    assert!(d <= 1e-4, "XLM-R token classification: {d}");
    let e = expected("xlm-roberta-tiny-qa");
    let qa = RobertaForQuestionAnswering::from_pretrained(fixture("xlm-roberta-tiny-qa"), &device)
        .unwrap();
    let span = qa.forward(input(&e, &device)).unwrap();
    let d = diff(span.start, e.start_logits.as_ref().unwrap());
    assert!(d <= 1e-4, "XLM-R start_logits: {d}");
    let d = diff(span.end, e.end_logits.as_ref().unwrap());
    assert!(d <= 1e-4, "XLM-R end_logits: {d}");
}

/// What Python `peft` wrote over `roberta-tiny-cls`: the adapted logits, the merged
/// ones, and the base's.
#[derive(Deserialize)]
struct AdapterExpected {
    input_ids: Vec<Vec<i64>>,
    attention_mask: Vec<Vec<i64>>,
    logits: Output,
    merged_logits: Output,
    base_logits: Output,
}

/// A PEFT LoRA adapter for sequence classification, which saves the classifier head
/// whole (`modules_to_save`), folds into RoBERTa's classifier and gives peft's logits;
/// the base alone gives the base's, which differ (a negative control); and an adapter
/// whose config drops `modules_to_save` is refused, naming the head's tensors.
#[test]
fn a_peft_classification_adapter_with_its_saved_head_matches_peft() {
    let device = test_device();
    let adapter = fixture("roberta-tiny-cls-lora");
    let e: AdapterExpected = zoo_fixtures::expected(&adapter);
    let x = Expected {
        texts: Vec::new(),
        input_ids: e.input_ids.clone(),
        attention_mask: e.attention_mask.clone(),
        tokenizer: Vec::new(),
        last_hidden_state: None,
        pooler_output: None,
        logits: None,
        start_logits: None,
        end_logits: None,
    };
    let base =
        RobertaForSequenceClassification::from_pretrained(fixture("roberta-tiny-cls"), &device)
            .unwrap();
    let d = diff(base.forward(input(&x, &device)).unwrap(), &e.base_logits);
    assert!(d <= 1e-4, "base logits: {d}");
    let d = diff(base.forward(input(&x, &device)).unwrap(), &e.logits);
    assert!(d > 1e-2, "the adapter changes the logits: {d}");
    let adapted = base.with_adapter(&adapter).unwrap();
    let d = diff(adapted.forward(input(&x, &device)).unwrap(), &e.logits);
    assert!(d <= 1e-4, "adapted logits: {d}");
    let d = diff(
        adapted.forward(input(&x, &device)).unwrap(),
        &e.merged_logits,
    );
    assert!(d <= 1e-4, "merged logits: {d}");

    // Written back with the adapter attached: the factors and the saved head under
    // peft's names, shapes and values, bit for bit (its `modules_to_save` also lists
    // `score`, which RoBERTa lacks and PEFT skips).
    let base =
        RobertaForSequenceClassification::from_pretrained(fixture("roberta-tiny-cls"), &device)
            .unwrap();
    let map = base.key_map();
    let attached = peft::load_adapter(base, &map, &adapter).unwrap();
    let cfg = peft::read_adapter_config(&adapter).unwrap();
    let out = tempdir("cls-lora-saved");
    peft::save_adapter(&attached, &map, &cfg, &out).unwrap();
    let contents = |d: &Path| {
        WeightsFile::Safetensors(d.join(peft::WEIGHTS_FILE))
            .contents()
            .unwrap()
    };
    let (saved, written) = (contents(&out), contents(&adapter));
    assert_eq!(saved.len(), 12);
    assert!(saved == written, "the saved adapter differs from peft's");
    // Without its head in modules_to_save, the head is not written (a control).
    let mut bare = cfg.clone();
    bare.modules_to_save = None;
    peft::save_adapter(&attached, &map, &bare, &out).unwrap();
    assert_eq!(contents(&out).len(), 8);
    // A list that names nothing of the model is refused.
    bare.modules_to_save = Some(serde_json::json!(["score"]));
    let e = peft::save_adapter(&attached, &map, &bare, &out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("none of which is a module of this model"), "{e}");
    std::fs::remove_dir_all(out).unwrap();

    let dir = tempdir("cls-lora-no-head");
    std::fs::copy(
        adapter.join("adapter_model.safetensors"),
        dir.join("adapter_model.safetensors"),
    )
    .unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    config["modules_to_save"] = serde_json::Value::Null;
    std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
    let base =
        RobertaForSequenceClassification::from_pretrained(fixture("roberta-tiny-cls"), &device)
            .unwrap();
    let e = base.with_adapter(&dir).unwrap_err().to_string();
    assert!(
        e.contains("base_model.model.classifier.") && e.contains("belongs to no module"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
