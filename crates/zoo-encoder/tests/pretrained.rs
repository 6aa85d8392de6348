//! HF checkpoints against `transformers`: tiny random-weight BERT models written by
//! `cargo xtask fixtures` (5 heads of 8, eps 1e-12, a padded batch with two segments),
//! with `transformers`' outputs on the same inputs. Outputs agree within 1e-4 on the
//! backend under test. Then saving, and the errors of checkpoints that do not fit.

use std::path::{Path, PathBuf};

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::Deserialize;
use zoo_core::{CheckpointError, KeyMap, TokenLogits, WeightsFile};
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices};
use zoo_encoder::{
    BertForMaskedLm, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertModel, EncoderError, EncoderInput,
};
use zoo_fixtures::Output;

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

#[derive(Deserialize)]
struct Expected {
    input_ids: Vec<Vec<i64>>,
    token_type_ids: Option<Vec<Vec<i64>>>,
    attention_mask: Vec<Vec<i64>>,
    last_hidden_state: Option<Output>,
    pooler_output: Option<Output>,
    logits: Option<Output>,
    start_logits: Option<Output>,
    end_logits: Option<Output>,
}

fn expected(name: &str) -> Expected {
    zoo_fixtures::expected(&fixture(name))
}

fn ints(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let (b, t) = (rows.len(), rows[0].len());
    let flat: Vec<i64> = rows.concat();
    Tensor::from_data(TensorData::new(flat, [b, t]), device)
}

fn input(e: &Expected, device: &Device) -> EncoderInput {
    let pad: Vec<bool> = e.attention_mask.concat().iter().map(|m| *m == 0).collect();
    let (b, t) = (e.input_ids.len(), e.input_ids[0].len());
    let mut x = EncoderInput::new(ints(&e.input_ids, device)).padding(
        Tensor::<2, Bool>::from_data(TensorData::new(pad, [b, t]), device),
    );
    if let Some(types) = &e.token_type_ids {
        x = x.token_types(ints(types, device));
    }
    x
}

fn assert_matches<const D: usize>(what: &str, got: Tensor<D>, want: &Output) {
    assert_eq!(got.dims().to_vec(), want.shape, "{what} shape");
    let diff = max_abs_diff_slices(&floats(got), &want.values);
    assert!(
        diff <= 1e-4,
        "{what}: max abs diff {diff} against transformers"
    );
}

#[test]
fn bert_model_matches_transformers() {
    let device = test_device();
    let e = expected("bert-tiny");
    let model = BertModel::from_pretrained(fixture("bert-tiny"), &device).unwrap();
    let out = model.forward(input(&e, &device)).unwrap();
    assert_matches(
        "last_hidden_state",
        out.hidden,
        e.last_hidden_state.as_ref().unwrap(),
    );
    assert_matches(
        "pooler_output",
        out.pooled.expect("the checkpoint has a pooler"),
        e.pooler_output.as_ref().unwrap(),
    );
}

/// Negative controls: the inputs the fixtures exercise move the output far beyond the
/// 1e-4 tolerance, so the parity tests above would catch a dropped token type or mask.
#[test]
fn token_types_and_the_padding_mask_each_move_the_output_beyond_the_tolerance() {
    let device = test_device();
    let e = expected("bert-tiny");
    let want = &e.last_hidden_state.as_ref().unwrap().values;
    let model = BertModel::from_pretrained(fixture("bert-tiny"), &device).unwrap();
    let full = input(&e, &device);
    let no_types = EncoderInput::new(full.tokens.clone()).padding(full.padding.clone().unwrap());
    let got = floats(model.forward(no_types).unwrap().hidden);
    assert!(max_abs_diff_slices(&got, want) > 1e-2, "token types matter");
    let no_mask =
        EncoderInput::new(full.tokens.clone()).token_types(full.token_types.clone().unwrap());
    let got = floats(model.forward(no_mask).unwrap().hidden);
    assert!(
        max_abs_diff_slices(&got, want) > 1e-2,
        "the padding mask matters"
    );
}

#[test]
fn pytorch_model_bin_loads_the_same_weights() {
    let device = test_device();
    let e = expected("bert-tiny");
    // The folder holds both files and safetensors wins, so read the pickle directly.
    let bin = WeightsFile::Pytorch(fixture("bert-tiny").join("pytorch_model.bin"));
    let safetensors = WeightsFile::Safetensors(fixture("bert-tiny").join("model.safetensors"));
    let from_bin = bin.tensors().unwrap();
    let from_st = safetensors.tensors().unwrap();
    assert_eq!(
        from_bin.keys().collect::<Vec<_>>(),
        from_st.keys().collect::<Vec<_>>()
    );
    for (name, t) in &from_bin {
        assert_eq!(
            t.to_bytes().unwrap().to_vec(),
            from_st[name].to_bytes().unwrap().to_vec(),
            "{name}"
        );
    }
    // And through the loader: a folder with only the pickle.
    let dir = tempdir("bin-only");
    std::fs::copy(fixture("bert-tiny/config.json"), dir.join("config.json")).unwrap();
    std::fs::copy(
        fixture("bert-tiny/pytorch_model.bin"),
        dir.join("pytorch_model.bin"),
    )
    .unwrap();
    let model = BertModel::from_pretrained(&dir, &device).unwrap();
    let out = model.forward(input(&e, &device)).unwrap();
    assert_matches(
        "last_hidden_state (pytorch_model.bin)",
        out.hidden,
        e.last_hidden_state.as_ref().unwrap(),
    );
}

#[test]
fn masked_lm_matches_transformers() {
    let device = test_device();
    let e = expected("bert-tiny-mlm");
    let model = BertForMaskedLm::from_pretrained(fixture("bert-tiny-mlm"), &device).unwrap();
    let logits = model.forward(input(&e, &device)).unwrap();
    assert_matches("masked-LM logits", logits, e.logits.as_ref().unwrap());
}

#[test]
fn masked_lm_logits_at_chosen_positions_are_the_full_forward_rows() {
    // What the masked-LM task trains on: the head runs only over the chosen positions,
    // and their rows must be the full forward's rows at those positions (that forward is
    // checked against transformers above).
    let device = test_device();
    let e = expected("bert-tiny-mlm");
    let model = BertForMaskedLm::from_pretrained(fixture("bert-tiny-mlm"), &device).unwrap();
    let inp = input(&e, &device);
    let (ids, padding) = (inp.tokens.clone(), inp.padding.clone());
    let full = model
        .forward(EncoderInput::new(ids.clone()).padding(padding.clone().unwrap()))
        .unwrap();
    let [b, t, v] = full.dims();
    let full = floats(full);
    let chosen = [(0, 0), (0, 4), (0, 10), (1, 2), (1, 6)];
    let mut keep = vec![false; b * t];
    for (r, c) in chosen {
        keep[r * t + c] = true;
    }
    let keep = Tensor::<2, Bool>::from_data(TensorData::new(keep, [b, t]), &device);
    let got = model
        .token_logits_at(ids.clone(), padding.clone(), keep)
        .unwrap();
    assert_eq!(got.dims(), [chosen.len(), v]);
    let want: Vec<f32> = chosen
        .iter()
        .flat_map(|(r, c)| full[(r * t + c) * v..(r * t + c + 1) * v].to_vec())
        .collect();
    let got = floats(got);
    let diff = max_abs_diff_slices(&got, &want);
    assert!(
        diff <= 1e-5,
        "kept rows differ from the full forward by {diff}"
    );
    // Negative control: the rows one position later are other rows, far beyond 1e-5.
    let next: Vec<f32> = chosen
        .iter()
        .flat_map(|(r, c)| {
            let i = r * t + (c + 1) % t;
            full[i * v..(i + 1) * v].to_vec()
        })
        .collect();
    let off = max_abs_diff_slices(&got, &next);
    assert!(off > 1e-2, "neighbouring rows differ by only {off}");
    // A mask of another shape is refused, naming both shapes.
    let wrong = Tensor::<2, Bool>::from_data(
        TensorData::new(vec![true; b * (t - 1)], [b, t - 1]),
        &device,
    );
    let err = model
        .token_logits_at(ids, padding, wrong)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("[{b}, {}]", t - 1)) && err.contains(&format!("[{b}, {t}]")),
        "{err}"
    );
}

#[test]
fn sequence_classification_matches_transformers() {
    let device = test_device();
    let e = expected("bert-tiny-cls");
    let model =
        BertForSequenceClassification::from_pretrained(fixture("bert-tiny-cls"), &device).unwrap();
    assert_eq!(
        model.bert.config().labels(),
        ["comedy", "history", "tragedy"]
    );
    let logits = model.forward(input(&e, &device)).unwrap();
    assert_matches("classification logits", logits, e.logits.as_ref().unwrap());
}

/// HF's token classifier over five NER tags: the logits of every token, padding
/// included, as `transformers` computes them.
#[test]
fn token_classification_matches_transformers() {
    let device = test_device();
    let e = expected("bert-tiny-ner");
    let model =
        BertForTokenClassification::from_pretrained(fixture("bert-tiny-ner"), &device).unwrap();
    assert_eq!(
        model.bert.config().labels(),
        ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    );
    assert!(model.bert.pooler.is_none());
    let logits = model.forward(input(&e, &device)).unwrap();
    assert_matches("token logits", logits, e.logits.as_ref().unwrap());
}

/// The span head's start and end logits match `transformers`; with the two swapped they
/// do not (a negative control: the split of `qa_outputs` is not symmetric).
#[test]
fn question_answering_matches_transformers() {
    let device = test_device();
    let e = expected("bert-tiny-qa");
    let model =
        BertForQuestionAnswering::from_pretrained(fixture("bert-tiny-qa"), &device).unwrap();
    let span = model.forward(input(&e, &device)).unwrap();
    let (start, end) = (e.start_logits.unwrap(), e.end_logits.unwrap());
    assert_eq!(start.shape, [2, 11]);
    let swapped = max_abs_diff_slices(&floats(span.end.clone()), &start.values);
    assert!(swapped > 0.1, "start and end differ by only {swapped}");
    assert_matches("start_logits", span.start, &start);
    assert_matches("end_logits", span.end, &end);
    // A checkpoint without the head has it reported missing, by name.
    let e = BertForQuestionAnswering::from_pretrained(fixture("bert-tiny-cls"), &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("qa_outputs"), "{e}");
}

/// DistilBERT through BERT's modules: its five classes match `transformers` within 1e-4
/// (hidden states, MLM, sequence, token and span logits); its sequence classifier's
/// ReLU matters (with BERT's tanh the logits differ), and it takes no token types.
#[test]
fn distilbert_and_its_heads_match_transformers() {
    use zoo_attention::PoolerActivation;
    let device = test_device();
    let e = expected("distilbert-tiny");
    let base = BertModel::from_pretrained(fixture("distilbert-tiny"), &device).unwrap();
    assert!(base.pooler.is_none() && base.embeddings.token_type_embeddings.is_none());
    let out = base.forward(input(&e, &device)).unwrap();
    assert_matches(
        "last_hidden_state",
        out.hidden,
        e.last_hidden_state.as_ref().unwrap(),
    );
    let typed = input(&e, &device).token_types(ints(&[vec![0; 11], vec![0; 11]], &device));
    let err = base.forward(typed).unwrap_err().to_string();
    assert_eq!(err, "distilbert takes no token types (token_type_ids)");

    let e = expected("distilbert-tiny-mlm");
    let mlm = BertForMaskedLm::from_pretrained(fixture("distilbert-tiny-mlm"), &device).unwrap();
    assert_matches(
        "MLM logits",
        mlm.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );

    let e = expected("distilbert-tiny-cls");
    let mut cls =
        BertForSequenceClassification::from_pretrained(fixture("distilbert-tiny-cls"), &device)
            .unwrap();
    assert_eq!(cls.bert.config().labels(), ["NEGATIVE", "POSITIVE"]);
    let want = e.logits.as_ref().unwrap();
    assert_matches(
        "classification logits",
        cls.forward(input(&e, &device)).unwrap(),
        want,
    );
    cls.bert.pooler.as_mut().unwrap().activation = PoolerActivation::Tanh;
    let tanh = floats(cls.forward(input(&e, &device)).unwrap());
    let diff = max_abs_diff_slices(&tanh, &want.values);
    assert!(
        diff > 1e-2,
        "tanh instead of ReLU changes the logits by only {diff}"
    );

    let e = expected("distilbert-tiny-ner");
    let ner = BertForTokenClassification::from_pretrained(fixture("distilbert-tiny-ner"), &device)
        .unwrap();
    assert_matches(
        "token logits",
        ner.forward(input(&e, &device)).unwrap(),
        e.logits.as_ref().unwrap(),
    );

    let e = expected("distilbert-tiny-qa");
    let qa =
        BertForQuestionAnswering::from_pretrained(fixture("distilbert-tiny-qa"), &device).unwrap();
    let span = qa.forward(input(&e, &device)).unwrap();
    assert_matches("start_logits", span.start, e.start_logits.as_ref().unwrap());
    assert_matches("end_logits", span.end, e.end_logits.as_ref().unwrap());
}

/// DistilBERT's config names, read and written back: a saved folder's config has
/// `dim`, `n_layers`, `hidden_dim`... and no BERT names or `type_vocab_size`, and fixed
/// sinusoidal positions are refused by name.
#[test]
fn distilbert_config_names_round_trip() {
    let device = test_device();
    let dir = tempdir("distilbert-config");
    BertForSequenceClassification::from_pretrained(fixture("distilbert-tiny-cls"), &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    for (key, value) in [
        ("dim", 40),
        ("n_layers", 2),
        ("n_heads", 5),
        ("hidden_dim", 56),
    ] {
        assert_eq!(saved[key], value, "{key}");
    }
    assert_eq!(saved["activation"], "gelu");
    for bert_name in [
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "type_vocab_size",
    ] {
        assert!(saved.get(bert_name).is_none(), "{bert_name} in {saved}");
    }
    let mut config = saved.clone();
    config["sinusoidal_pos_embds"] = true.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let e = BertModel::from_pretrained(&dir, &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sinusoidal_pos_embds: true"), "{e}");
}

#[test]
fn a_head_checkpoint_loads_into_the_bare_model_without_its_head() {
    let device = test_device();
    let e = expected("bert-tiny-mlm");
    let base = BertModel::from_pretrained(fixture("bert-tiny-mlm"), &device).unwrap();
    assert!(base.pooler.is_none(), "the MLM checkpoint has no pooler");
    let mlm = BertForMaskedLm::from_pretrained(fixture("bert-tiny-mlm"), &device).unwrap();
    let a = base.forward(input(&e, &device)).unwrap().hidden;
    let b = mlm.bert.forward(input(&e, &device)).unwrap().hidden;
    assert_eq!(floats(a), floats(b));
    // The prefixed classification checkpoint keeps its pooler in the bare model.
    let base = BertModel::from_pretrained(fixture("bert-tiny-cls"), &device).unwrap();
    assert!(base.pooler.is_some());
}

fn tempdir(name: &str) -> PathBuf {
    zoo_fixtures::tempdir("encoder", name)
}

fn tensors_of(dir: &Path) -> Vec<zoo_core::checkpoint::StoredTensor> {
    WeightsFile::find(dir).unwrap().contents().unwrap()
}

#[test]
fn saving_writes_hf_layout_that_loads_back_bit_for_bit() {
    let device = test_device();
    for (name, save) in [
        (
            "bert-tiny",
            Box::new(|dir: &Path, device: &Device| {
                BertModel::from_pretrained(fixture("bert-tiny"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }) as Box<dyn Fn(&Path, &Device)>,
        ),
        (
            "bert-tiny-mlm",
            Box::new(|dir: &Path, device: &Device| {
                BertForMaskedLm::from_pretrained(fixture("bert-tiny-mlm"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
        (
            "bert-tiny-cls",
            Box::new(|dir: &Path, device: &Device| {
                BertForSequenceClassification::from_pretrained(fixture("bert-tiny-cls"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
        (
            "bert-tiny-ner",
            Box::new(|dir: &Path, device: &Device| {
                BertForTokenClassification::from_pretrained(fixture("bert-tiny-ner"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
        (
            "bert-tiny-qa",
            Box::new(|dir: &Path, device: &Device| {
                BertForQuestionAnswering::from_pretrained(fixture("bert-tiny-qa"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
        (
            "distilbert-tiny",
            Box::new(|dir: &Path, device: &Device| {
                BertModel::from_pretrained(fixture("distilbert-tiny"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
        (
            "distilbert-tiny-mlm",
            Box::new(|dir: &Path, device: &Device| {
                BertForMaskedLm::from_pretrained(fixture("distilbert-tiny-mlm"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
        (
            "distilbert-tiny-cls",
            Box::new(|dir: &Path, device: &Device| {
                BertForSequenceClassification::from_pretrained(
                    fixture("distilbert-tiny-cls"),
                    device,
                )
                .unwrap()
                .save_pretrained(dir)
                .unwrap()
            }),
        ),
        (
            "distilbert-tiny-qa",
            Box::new(|dir: &Path, device: &Device| {
                BertForQuestionAnswering::from_pretrained(fixture("distilbert-tiny-qa"), device)
                    .unwrap()
                    .save_pretrained(dir)
                    .unwrap()
            }),
        ),
    ] {
        let dir = tempdir(&format!("save-{name}"));
        save(&dir, &device);
        // Every tensor of HF's file, under HF's name and shape, with the same bytes.
        assert_eq!(tensors_of(&dir), tensors_of(&fixture(name)), "{name}");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        let original: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture(name).join("config.json")).unwrap(),
        )
        .unwrap();
        for key in [
            "architectures",
            "model_type",
            "hidden_size",
            "num_attention_heads",
            "layer_norm_eps",
            "id2label",
        ] {
            assert_eq!(config.get(key), original.get(key), "{name}: {key}");
        }
        assert!(
            !dir.join(".config.json.partial").exists(),
            "no partial file is left"
        );
    }
    // A classifier built without names saves HF's default ones, so it loads back.
    let cfg = zoo_encoder::BertConfig::new(30, 16, 1, 2, 32);
    let dir = tempdir("token-cls");
    BertForTokenClassification::new(&cfg, 4, &device)
        .unwrap()
        .save_pretrained(&dir)
        .unwrap();
    let back = BertForTokenClassification::from_pretrained(&dir, &device).unwrap();
    assert_eq!(
        back.bert.config().labels(),
        ["LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3"]
    );
}

#[test]
fn sharded_and_half_precision_checkpoints_load() {
    let device = test_device();
    // Sharded: the index names several files, and they hold exactly the single file's
    // tensors, which give transformers' outputs.
    let sharded = fixture("bert-tiny-sharded");
    let shards = std::fs::read_dir(&sharded)
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".safetensors")
        })
        .count();
    assert!(shards >= 2, "{shards} shard(s)");
    assert!(matches!(
        WeightsFile::find(&sharded).unwrap(),
        WeightsFile::Sharded(_)
    ));
    assert_eq!(tensors_of(&sharded), tensors_of(&fixture("bert-tiny")));
    let e = expected("bert-tiny");
    let model = BertModel::from_pretrained(&sharded, &device).unwrap();
    assert_matches(
        "sharded last_hidden_state",
        model.forward(input(&e, &device)).unwrap().hidden,
        e.last_hidden_state.as_ref().unwrap(),
    );

    // f16 and bf16 files load as f32 weights, and agree with the rounded weights run in
    // f32 by transformers.
    for name in ["bert-tiny-f16", "bert-tiny-bf16"] {
        let e = expected(name);
        let model = BertModel::from_pretrained(fixture(name), &device).unwrap();
        assert_eq!(
            model.embeddings.word_embeddings.weight.val().dtype(),
            burn::tensor::DType::F32,
            "{name}"
        );
        assert_matches(
            name,
            model.forward(input(&e, &device)).unwrap().hidden,
            e.last_hidden_state.as_ref().unwrap(),
        );
    }

    // Negative control: rounding to half precision moves the reference beyond the
    // tolerance, so the checks above tell the rounded weights from the f32 ones.
    let full = &expected("bert-tiny").last_hidden_state.unwrap().values;
    for name in ["bert-tiny-f16", "bert-tiny-bf16"] {
        let rounded = &expected(name).last_hidden_state.unwrap().values;
        let moved = max_abs_diff_slices(rounded, full);
        assert!(
            moved > 1e-3,
            "{name}: rounding moved the output by only {moved}"
        );
    }

    // An index that sends a tensor to the wrong shard is named, with the shard.
    let dir = tempdir("bad-index");
    for f in std::fs::read_dir(&sharded).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    let index_path = dir.join("model.safetensors.index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let map = index["weight_map"].as_object_mut().unwrap();
    let (name, shard) = map
        .iter()
        .find(|(_, s)| s.as_str().unwrap().starts_with("model-00001"))
        .map(|(n, s)| (n.clone(), s.as_str().unwrap().to_string()))
        .unwrap();
    let other = map
        .values()
        .map(|s| s.as_str().unwrap().to_string())
        .find(|s| *s != shard)
        .unwrap();
    map.insert(name.clone(), other.clone().into());
    std::fs::write(&index_path, index.to_string()).unwrap();
    let err = BertModel::from_pretrained(&dir, &device)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}: not a readable checkpoint: {name} is not in its shard {other}",
            index_path.display()
        )
    );
}

fn tensors_error(e: EncoderError) -> zoo_core::TensorReport {
    match e {
        EncoderError::Checkpoint(CheckpointError::Tensors { report, .. }) => report,
        other => panic!("expected a tensor report, got {other}"),
    }
}

#[test]
fn a_checkpoint_that_does_not_fit_names_every_tensor_with_its_shapes() {
    let device = test_device();
    // A bare checkpoint has no classifier: missing, with the shape the model expects.
    let weights = fixture("bert-tiny/model.safetensors");
    let cls = std::fs::read_to_string(fixture("bert-tiny-cls/config.json")).unwrap();
    let dir = zoo_fixtures::checkpoint_folder("encoder", "no-head", &weights, &cls);
    let e = BertForSequenceClassification::from_pretrained(&dir, &device).unwrap_err();
    let text = e.to_string();
    let report = tensors_error(e);
    assert_eq!(
        report.missing,
        [
            ("classifier.bias".to_string(), vec![3]),
            ("classifier.weight".to_string(), vec![40, 3])
        ]
    );
    assert!(report.unexpected.is_empty() && report.mismatched.is_empty());
    assert!(
        text.contains("missing:    classifier.weight [40, 3]"),
        "{text}"
    );

    // A config that disagrees with the weights: every mis-shaped tensor at once.
    let config = std::fs::read_to_string(fixture("bert-tiny/config.json"))
        .unwrap()
        .replace("\"intermediate_size\": 56", "\"intermediate_size\": 64");
    let dir = zoo_fixtures::checkpoint_folder("encoder", "wrong-shape", &weights, &config);
    let report = tensors_error(BertModel::from_pretrained(&dir, &device).unwrap_err());
    let names: Vec<&str> = report.mismatched.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "encoder.layer.0.intermediate.dense.bias",
            "encoder.layer.0.intermediate.dense.weight",
            "encoder.layer.0.output.dense.weight",
            "encoder.layer.1.intermediate.dense.bias",
            "encoder.layer.1.intermediate.dense.weight",
            "encoder.layer.1.output.dense.weight",
        ]
    );
    let (_, model, file) = &report.mismatched[1];
    assert_eq!(
        (model.as_slice(), file.as_slice()),
        ([40, 64].as_slice(), [40, 56].as_slice())
    );

    // Fewer layers in the config than in the file: the extra layer is unexpected.
    let config = std::fs::read_to_string(fixture("bert-tiny/config.json"))
        .unwrap()
        .replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let report = tensors_error(BertModel::from_pretrained(&dir, &device).unwrap_err());
    assert_eq!(report.unexpected.len(), 16, "{:?}", report.unexpected);
    assert!(
        report.unexpected.contains(&(
            "encoder.layer.1.attention.self.query.weight".into(),
            vec![40, 40]
        )),
        "{:?}",
        report.unexpected
    );
    assert!(report.missing.is_empty());
}

#[test]
fn bad_folders_and_configs_are_errors_naming_the_file() {
    let device = test_device();
    let dir = tempdir("empty");
    let e = BertModel::from_pretrained(&dir, &device).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("config.json: No such file or directory (os error 2)"),
        "{e}"
    );
    std::fs::copy(fixture("bert-tiny/config.json"), dir.join("config.json")).unwrap();
    let e = BertModel::from_pretrained(&dir, &device).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin",
            dir.display()
        )
    );
    std::fs::write(dir.join("model.safetensors"), b"not a checkpoint").unwrap();
    let e = BertModel::from_pretrained(&dir, &device).unwrap_err();
    assert!(
        e.to_string()
            .contains("model.safetensors: not a readable checkpoint"),
        "{e}"
    );
    let config = std::fs::read_to_string(fixture("bert-tiny/config.json"))
        .unwrap()
        .replace("\"num_attention_heads\": 5", "\"num_attention_heads\": 6");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let e = BertModel::from_pretrained(&dir, &device).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: invalid BERT config: hidden_size 40 is not divisible by num_attention_heads 6",
            dir.join("config.json").display()
        )
    );
    // A classification config without labels cannot size its classifier.
    let dir = tempdir("no-labels");
    std::fs::copy(fixture("bert-tiny/config.json"), dir.join("config.json")).unwrap();
    let e = BertForSequenceClassification::from_pretrained(&dir, &device).unwrap_err();
    assert!(e.to_string().contains("needs id2label"), "{e}");
}

#[test]
fn key_maps_name_tensors_both_ways() {
    let map = KeyMap::new().names(&[("a.", "x.")]);
    assert_eq!(map.module_path("a.b"), "x.b");
    assert_eq!(map.checkpoint_name("x.b"), "a.b");
}
