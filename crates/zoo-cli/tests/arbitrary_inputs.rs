//! Property tests over every file a user hands the zoo, through the fuzz targets' entry
//! points (`fuzz/src/lib.rs`, included here so both run the same code): a few seconds per
//! entry point on stable, in CI, so what the fuzzer once found cannot come back.
//!
//! Inputs are the committed fixtures mutated two ways: byte edits (flips, insertions,
//! cuts), and, for the JSON files, keys set to hostile values (zero, negative, huge,
//! wrong types). Every input must give `Ok` or an error of one line, never a panic or an
//! abort. The minimised inputs the fuzzer found are replayed first, each a regression
//! test.

#[path = "../../../fuzz/src/lib.rs"]
mod entry;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> Vec<u8> {
    let path = repo().join(path);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An error must be one line a person reads.
fn one_line(outcome: entry::Outcome) -> Result<(), TestCaseError> {
    if let Err(m) = outcome {
        prop_assert!(!m.trim().is_empty(), "an empty error");
        prop_assert!(!m.contains('\n'), "an error of several lines: {m}");
    }
    Ok(())
}

/// `seed` with up to 8 byte edits: a flip, an insertion or a cut, each at an offset.
fn byte_edits(seed: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<Index>(), any::<u8>(), 0u8..3), 0..8).prop_map(move |edits| {
        let mut bytes = seed.clone();
        for (at, byte, kind) in edits {
            if bytes.is_empty() {
                bytes.push(byte);
                continue;
            }
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] ^= byte | 1,
                1 => bytes.insert(i, byte),
                _ => bytes.truncate(i),
            }
        }
        bytes
    })
}

/// Values that a config should refuse or survive.
fn hostile() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1)),
        Just(json!(3)),
        Just(json!(0.0)),
        Just(json!(-0.5)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!(u64::MAX)),
        Just(json!(1_000_000_000_000u64)),
        Just(json!(4_294_967_296u64)),
        Just(json!("text")),
        Just(json!(null)),
        Just(json!([])),
        Just(json!({})),
        Just(json!(true)),
        Just(json!(["x", 1])),
        Just(json!({"type": "dynamic", "factor": 0})),
    ]
}

/// Every path to a value in `v` (object keys and list indices), up to depth 3.
fn paths(v: &Value, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    if prefix.len() >= 3 {
        return;
    }
    let children: Vec<(String, &Value)> = match v {
        Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => return,
    };
    for (k, child) in children {
        let mut p = prefix.clone();
        p.push(k);
        out.push(p.clone());
        paths(child, p, out);
    }
}

fn set(v: &mut Value, path: &[String], new: Value) {
    let mut at = v;
    for key in path {
        at = match at {
            Value::Object(m) => m.entry(key.clone()).or_insert(Value::Null),
            Value::Array(a) => match key.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(x) => x,
                None => return,
            },
            _ => return,
        };
    }
    *at = new;
}

/// `seed` (JSON) with one to four of its values, or new keys, set to hostile values.
fn json_edits(
    seed: Vec<u8>,
    extra_keys: &'static [&'static str],
) -> impl Strategy<Value = Vec<u8>> {
    let value: Value = serde_json::from_slice(&seed).expect("a JSON seed");
    let mut all = Vec::new();
    paths(&value, Vec::new(), &mut all);
    all.extend(extra_keys.iter().map(|k| vec![k.to_string()]));
    prop::collection::vec((any::<Index>(), hostile()), 1..4).prop_map(move |edits| {
        let mut v = value.clone();
        for (at, new) in edits {
            set(&mut v, &all[at.index(all.len())], new);
        }
        v.to_string().into_bytes()
    })
}

/// One of the seeds, mutated either way.
fn mutations(seeds: Vec<Vec<u8>>, extra: &'static [&'static str]) -> BoxedStrategy<Vec<u8>> {
    let by_json: Vec<BoxedStrategy<Vec<u8>>> = seeds
        .iter()
        .filter(|s| serde_json::from_slice::<Value>(s).is_ok())
        .map(|s| json_edits(s.clone(), extra).boxed())
        .collect();
    let by_bytes: Vec<BoxedStrategy<Vec<u8>>> =
        seeds.into_iter().map(|s| byte_edits(s).boxed()).collect();
    let mut all = by_bytes;
    all.extend(by_json);
    prop::strategy::Union::new(all).boxed()
}

/// The committed inputs the fuzzer minimised, for `target`.
fn found(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = repo().join("fuzz/regressions").join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

const DECODERS: [&str; 14] = [
    "gpt2-tiny",
    "llama-tiny",
    "llama3-tiny",
    "mistral-tiny",
    "qwen2-tiny",
    "qwen3-tiny",
    "gemma-tiny",
    "gemma2-tiny",
    "gemma3-tiny",
    "mixtral-tiny",
    "phi3-tiny",
    "gpt-neox-tiny",
    "gpt2-tiny-bf16",
    "llama-tiny-sharded",
];

fn config_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = DECODERS
        .iter()
        .map(|d| {
            read(&format!(
                "crates/zoo-decoder/tests/fixtures/{d}/config.json"
            ))
        })
        .collect();
    for f in [
        "crates/zoo-encoder/tests/fixtures/bert-tiny-cls/config.json",
        "crates/zoo-encoder/tests/fixtures/roberta-tiny/config.json",
        "crates/zoo-vision/tests/fixtures/vit-tiny-cls/config.json",
        "crates/zoo-seq2seq/tests/fixtures/t5-tiny/config.json",
        "crates/zoo-seq2seq/tests/fixtures/marian-tiny/config.json",
    ] {
        seeds.push(read(f));
    }
    seeds
}

/// `TrainConfig` files as the learner writes them, in epochs and in steps.
fn train_seeds() -> Vec<Vec<u8>> {
    let dir = std::env::temp_dir().join("zoo-prop-train");
    [
        zoo_train::TrainConfig::new(3, &dir),
        zoo_train::TrainConfig::steps(100, 10, &dir),
    ]
    .into_iter()
    .map(|mut c| {
        c.warmup_steps = 10;
        serde_json::to_vec(&c).unwrap()
    })
    .collect()
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[test]
fn found_inputs_stay_fixed() {
    for target in [
        "config_json",
        "safetensors",
        "tokenizer_json",
        "sentence_files",
        "cli_input",
        "image",
        "train_config",
    ] {
        for (path, bytes) in found(target) {
            let outcome = match target {
                "config_json" => entry::config_json(&bytes),
                "safetensors" => {
                    let (index, shard) = bytes.split_at(bytes.len() / 2);
                    entry::shard_index(index, shard).and(entry::safetensors(&bytes))
                }
                "tokenizer_json" => entry::tokenizer_json(&bytes),
                "sentence_files" => {
                    let at = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                    let (modules, pooling) = bytes.split_at(at);
                    entry::sentence_files(
                        modules,
                        pooling.get(1..).unwrap_or_default(),
                        &repo().join(ST),
                    )
                }
                "cli_input" => entry::cli_input(&bytes),
                "image" => entry::image(&bytes),
                _ => entry::train_config(&bytes),
            };
            // Reaching here is the test: the input once crashed its target.
            println!("{}: {outcome:?}", path.display());
        }
    }
}

/// The seeds themselves are sound: every hostile edit below starts from a working file,
/// so an `Err` there is the edit's doing (a negative control of the generators).
#[test]
fn the_seeds_are_accepted() {
    for seed in config_seeds() {
        entry::config_json(&seed).unwrap();
    }
    entry::safetensors(&read(
        "crates/zoo-decoder/tests/fixtures/gpt2-tiny/model.safetensors",
    ))
    .unwrap();
    entry::tokenizer_json(&read(
        "crates/zoo-decoder/tests/fixtures/gpt2-tiny/tokenizer.json",
    ))
    .unwrap();
    entry::cli_input(br#"{"input_ids": [[1, 2]], "attention_mask": [[1, 1]]}"#).unwrap();
    entry::sentence_files(
        &read(&format!("{ST}/modules.json")),
        &read(&format!("{ST}/1_Pooling/config.json")),
        &repo().join(ST),
    )
    .unwrap();
    entry::image(&read(
        "crates/zoo-vision/tests/fixtures/images/gradient.png",
    ))
    .unwrap();
    for seed in train_seeds() {
        entry::train_config(&seed).unwrap();
    }
    // And a hostile edit is refused, not waved through.
    let mut cfg: Value = serde_json::from_slice(&read(
        "crates/zoo-decoder/tests/fixtures/gpt2-tiny/config.json",
    ))
    .unwrap();
    cfg["n_head"] = json!(0);
    assert!(entry::config_json(cfg.to_string().as_bytes()).is_err());
}

/// Runs `entry` on `cases` inputs drawn from `inputs`; with `one_line_errors`, every
/// error must be one line (tensor reports list a tensor per line, so the weights' may
/// not be).
fn check<S: Strategy>(
    inputs: S,
    cases_: u32,
    one_line_errors: bool,
    entry: impl Fn(S::Value) -> entry::Outcome,
) {
    let mut runner = proptest::test_runner::TestRunner::new(cases(cases_));
    let outcome = runner.run(&inputs, |input| {
        let outcome = entry(input);
        if one_line_errors {
            one_line(outcome)?;
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

const ST: &str = "crates/zoo-encoder/tests/fixtures/roberta-tiny-st";
const SHARDED: &str = "crates/zoo-encoder/tests/fixtures/bert-tiny-sharded";

#[test]
fn any_config_json_is_read_or_refused_in_one_line() {
    let seeds = [
        config_seeds(),
        vec![read(
            "crates/zoo-decoder/tests/fixtures/gpt2-tiny/generation_config.json",
        )],
    ]
    .concat();
    let extra = &["rope_scaling", "head_dim", "sliding_window", "id2label"];
    check(mutations(seeds, extra), 256, true, |b| {
        entry::config_json(&b)
    });
}

#[test]
fn any_cli_input_is_read_or_refused_in_one_line() {
    let seeds = [
        r#"{"input_ids": [[1, 2, 3], [4, 5, 6]], "attention_mask": [[1, 1, 1], [0, 1, 1]]}"#,
        r#"{"input_ids": [[1, 2]], "decoder_input_ids": [[0, 3]], "token_type_ids": [[0, 0]]}"#,
        r#"{"pixel_values": [[[[0.5, 0.25], [0.0, 1.0]]]], "interpolate_pos_encoding": true}"#,
        r#"{"sentences": ["a", "b c"]}"#,
    ];
    let seeds = seeds.iter().map(|s| s.as_bytes().to_vec()).collect();
    let extra = &["input_ids", "pixel_values", "sentences"];
    check(mutations(seeds, extra), 256, true, |b| entry::cli_input(&b));
}

#[test]
fn any_train_config_is_read_or_refused_in_one_line() {
    let extra = &["length", "batch_size", "lr", "grad_clip", "devices"];
    check(mutations(train_seeds(), extra), 256, true, |b| {
        entry::train_config(&b)
    });
}

#[test]
fn any_safetensors_file_or_shard_index_is_read_or_refused() {
    let weights = read("crates/zoo-decoder/tests/fixtures/gpt2-tiny/model.safetensors");
    let index = read(&format!("{SHARDED}/model.safetensors.index.json"));
    let shard = read(&format!("{SHARDED}/model-00001-of-00002.safetensors"));
    let inputs = (
        mutations(vec![weights], &[]),
        mutations(vec![index], &["weight_map", "metadata"]),
    );
    check(inputs, 96, false, |(weights, index)| {
        entry::safetensors(&weights).and(entry::shard_index(&index, &shard))
    });
}

#[test]
fn any_tokenizer_json_is_read_or_refused() {
    let seeds = vec![
        read("crates/zoo-decoder/tests/fixtures/gpt2-tiny/tokenizer.json"),
        read("crates/zoo-encoder/tests/fixtures/roberta-tiny/tokenizer.json"),
    ];
    let extra = &["model", "added_tokens", "normalizer", "decoder"];
    check(mutations(seeds, extra), 96, false, |b| {
        entry::tokenizer_json(&b)
    });
}

#[test]
fn any_sentencepiece_model_is_read_or_refused() {
    let seed = read("crates/zoo-data/tests/fixtures/spm/llama-bpe/tokenizer.model");
    entry::sentencepiece_model(&seed).unwrap();
    check(mutations(vec![seed], &[]), 96, false, |b| {
        entry::sentencepiece_model(&b)
    });
}

#[test]
fn any_image_or_preprocessor_config_is_read_or_refused() {
    let seeds = ["gradient.png", "gradient.jpg", "preprocessor_config.json"]
        .iter()
        .map(|f| read(&format!("crates/zoo-vision/tests/fixtures/images/{f}")))
        .collect();
    let extra = &["size", "crop_size", "resample", "image_mean"];
    check(mutations(seeds, extra), 96, false, |b| entry::image(&b));
}

#[test]
fn any_sentence_transformers_files_are_read_or_refused() {
    let inputs = (
        mutations(vec![read(&format!("{ST}/modules.json"))], &[]),
        mutations(
            vec![read(&format!("{ST}/1_Pooling/config.json"))],
            &["pooling_mode_cls_token", "word_embedding_dimension"],
        ),
    );
    let model = repo().join(ST);
    check(inputs, 24, true, |(modules, pooling)| {
        entry::sentence_files(&modules, &pooling, &model)
    });
}
