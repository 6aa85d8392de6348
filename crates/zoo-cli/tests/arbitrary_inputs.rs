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

const DECODERS: [&str; 11] = [
    "gpt2-tiny",
    "llama-tiny",
    "llama3-tiny",
    "mistral-tiny",
    "qwen2-tiny",
    "qwen3-tiny",
    "gemma-tiny",
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
                        &repo().join("crates/zoo-encoder/tests/fixtures/roberta-tiny-st"),
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
    let st = "crates/zoo-encoder/tests/fixtures/roberta-tiny-st";
    entry::sentence_files(
        &read(&format!("{st}/modules.json")),
        &read(&format!("{st}/1_Pooling/config.json")),
        &repo().join(st),
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

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_config_json_is_read_or_refused_in_one_line(
        bytes in mutations(
            [
                config_seeds(),
                vec![read("crates/zoo-decoder/tests/fixtures/gpt2-tiny/generation_config.json")],
            ]
            .concat(),
            &["rope_scaling", "head_dim", "sliding_window", "id2label"],
        )
    ) {
        one_line(entry::config_json(&bytes))?;
    }

    #[test]
    fn any_cli_input_is_read_or_refused_in_one_line(
        bytes in mutations(
            vec![
                br#"{"input_ids": [[1, 2, 3], [4, 5, 6]], "attention_mask": [[1, 1, 1], [0, 1, 1]]}"#.to_vec(),
                br#"{"input_ids": [[1, 2]], "decoder_input_ids": [[0, 3]], "token_type_ids": [[0, 0]]}"#.to_vec(),
                br#"{"pixel_values": [[[[0.5, 0.25], [0.0, 1.0]]]], "interpolate_pos_encoding": true}"#.to_vec(),
                br#"{"sentences": ["a", "b c"]}"#.to_vec(),
            ],
            &["input_ids", "pixel_values", "sentences"],
        )
    ) {
        one_line(entry::cli_input(&bytes))?;
    }

    #[test]
    fn any_train_config_is_read_or_refused_in_one_line(
        bytes in mutations(train_seeds(), &["length", "batch_size", "lr", "grad_clip", "devices"])
    ) {
        one_line(entry::train_config(&bytes))?;
    }
}

proptest! {
    #![proptest_config(cases(96))]

    #[test]
    fn any_safetensors_file_or_shard_index_is_read_or_refused(
        bytes in mutations(
            vec![read("crates/zoo-decoder/tests/fixtures/gpt2-tiny/model.safetensors")],
            &[],
        ),
        index in mutations(
            vec![read("crates/zoo-encoder/tests/fixtures/bert-tiny-sharded/model.safetensors.index.json")],
            &["weight_map", "metadata"],
        ),
    ) {
        // Tensor reports list a tensor per line: these errors may be several lines.
        let _ = entry::safetensors(&bytes);
        let shard = read("crates/zoo-encoder/tests/fixtures/bert-tiny-sharded/model-00001-of-00002.safetensors");
        let _ = entry::shard_index(&index, &shard);
    }

    #[test]
    fn any_tokenizer_json_is_read_or_refused(
        bytes in mutations(
            vec![
                read("crates/zoo-decoder/tests/fixtures/gpt2-tiny/tokenizer.json"),
                read("crates/zoo-encoder/tests/fixtures/roberta-tiny/tokenizer.json"),
            ],
            &["model", "added_tokens", "normalizer", "decoder"],
        )
    ) {
        let _ = entry::tokenizer_json(&bytes);
    }

    #[test]
    fn any_image_or_preprocessor_config_is_read_or_refused(
        bytes in mutations(
            vec![
                read("crates/zoo-vision/tests/fixtures/images/gradient.png"),
                read("crates/zoo-vision/tests/fixtures/images/gradient.jpg"),
                read("crates/zoo-vision/tests/fixtures/images/preprocessor_config.json"),
            ],
            &["size", "crop_size", "resample", "image_mean"],
        )
    ) {
        let _ = entry::image(&bytes);
    }
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn any_sentence_transformers_files_are_read_or_refused(
        modules in mutations(
            vec![read("crates/zoo-encoder/tests/fixtures/roberta-tiny-st/modules.json")],
            &[],
        ),
        pooling in mutations(
            vec![read("crates/zoo-encoder/tests/fixtures/roberta-tiny-st/1_Pooling/config.json")],
            &["pooling_mode_cls_token", "word_embedding_dimension"],
        ),
    ) {
        let model = repo().join("crates/zoo-encoder/tests/fixtures/roberta-tiny-st");
        one_line(entry::sentence_files(&modules, &pooling, &model))?;
    }
}
