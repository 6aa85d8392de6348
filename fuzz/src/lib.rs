//! Every file a user hands the zoo, read from arbitrary bytes as the zoo reads it: the
//! entry points of the fuzz targets (`fuzz_targets/`, run with `cargo +nightly fuzz`)
//! and of the property tests that CI runs on stable (`crates/zoo-cli/tests/
//! arbitrary_inputs.rs`, which includes this file).
//!
//! Each entry point writes the bytes where the zoo expects the file, in a scratch folder
//! of its own thread, and runs the zoo's reader and checks on it. An error is a correct
//! answer; a panic, an abort, a hang or an allocation past the fuzzer's limit is a
//! finding. Each returns the error's message, so callers can check that it is one line.

#![allow(dead_code)] // each test or target uses some of the entry points

use std::path::{Path, PathBuf};

/// The scratch folder of this thread, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zoo-fuzz-{}-{:?}-{name}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).expect("the scratch folder can be made");
    dir
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("the scratch folder can be written");
    }
    std::fs::write(path, bytes).expect("the scratch folder can be written");
}

/// Copies the files of `from` into `to`, folders included.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("the scratch folder can be made");
    for entry in std::fs::read_dir(from).expect("the fixture is readable") {
        let path = entry.expect("the fixture is readable").path();
        let target = to.join(path.file_name().expect("a named entry"));
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("the fixture is readable");
        }
    }
}

/// The outcome of an entry point: `Ok` or the error's message.
pub type Outcome = Result<(), String>;

fn message(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `config.json` (and the same bytes as `generation_config.json`) of any registered
/// architecture: the registry's choice of a row, then that family's reader and
/// validation, which bound every size before anything is allocated. No model is built.
pub fn config_json(bytes: &[u8]) -> Outcome {
    use zoo_core::checkpoint;
    let dir = scratch("config");
    write(&dir, "config.json", bytes);
    write(&dir, "generation_config.json", bytes);
    checkpoint::GenerationDefaults::from_pretrained(&dir).map_err(message)?;
    let detected = zoo_hub::Detected::new(&dir).map_err(message)?;
    // A classifier's head is sized by its labels.
    let classifier = detected.architecture.name.ends_with("Classification");
    let labels = match detected.architecture.model_type {
        "bert" | "roberta" => {
            checkpoint::read_valid_config(&dir, zoo_encoder::BertConfig::validate)
                .map(|c: zoo_encoder::BertConfig| c.labels())
        }
        "vit" => checkpoint::read_valid_config(&dir, zoo_vision::ViTConfig::validate)
            .map(|c: zoo_vision::ViTConfig| c.labels()),
        _ => Ok(Vec::new()),
    }
    .map_err(message)?;
    if classifier {
        checkpoint::num_labels(&dir, &labels).map_err(message)?;
    }
    match detected.architecture.model_type {
        "bert" | "roberta" | "vit" => {}
        "t5" => {
            checkpoint::read_valid_config(&dir, zoo_seq2seq::T5Config::validate)
                .map_err(message)?;
        }
        "marian" => {
            checkpoint::read_valid_config(&dir, zoo_seq2seq::MarianConfig::validate)
                .map_err(message)?;
        }
        _ => {
            let hf = zoo_decoder::HfDecoderConfig::from_pretrained(&dir).map_err(message)?;
            hf.decoder().map_err(message)?;
        }
    }
    Ok(())
}

/// `model.safetensors`: its header, every tensor's bytes, and the scan for NaN that
/// `zoo info --check` runs.
pub fn safetensors(bytes: &[u8]) -> Outcome {
    let dir = scratch("weights");
    write(&dir, "model.safetensors", bytes);
    weights_in(&dir)
}

/// `model.safetensors.index.json` beside one sound shard, `model-00001-of-00002.
/// safetensors`, which the index may or may not name (`shard` holds its bytes).
pub fn shard_index(bytes: &[u8], shard: &[u8]) -> Outcome {
    let dir = scratch("index");
    write(&dir, "model.safetensors.index.json", bytes);
    write(&dir, "model-00001-of-00002.safetensors", shard);
    weights_in(&dir)
}

/// The weights of `dir` as `zoo info --check` reads them.
fn weights_in(dir: &Path) -> Outcome {
    let file = zoo_core::WeightsFile::find(dir).map_err(message)?;
    file.contents().map_err(message)?;
    file.non_finite().map_err(message)?;
    Ok(())
}

/// `tokenizer.json`, as a causal LM's tokenizer (encode, decode, the ids it lacks) and
/// as BERT's.
pub fn tokenizer_json(bytes: &[u8]) -> Outcome {
    let dir = scratch("tokenizer");
    write(&dir, "tokenizer.json", bytes);
    let lm = zoo_data::LmTokenizer::from_pretrained(&dir).and_then(|tok| {
        for text in ["Hello, world", "ROMEO: Wherefore art thou", "é字 🦀", ""] {
            let ids = tok.encode(text)?;
            tok.decode(&ids)?;
        }
        let _ = tok.undecodable(tok.vocab_size().min(1 << 16));
        Ok(())
    });
    // The same file as BERT's tokenizer, which needs its special tokens.
    let bert = zoo_data::BertTokenizer::from_pretrained(&dir, 16)
        .and_then(|tok| tok.encode("Hello, world").map(|_| ()));
    lm.or(bert).map_err(message)
}

/// A SentencePiece model file (`tokenizer.model`), converted into a tokenizer with the
/// model's own settings, then encoding and decoding; and the same bytes as Marian's
/// `source.spm` beside a small `vocab.json`.
pub fn sentencepiece_model(bytes: &[u8]) -> Outcome {
    let run = |dir: &Path| {
        zoo_data::LmTokenizer::from_pretrained(dir).and_then(|tok| {
            for text in [
                "Hello, world",
                ">>fra<< ROMEO: Wherefore art thou",
                "é字 🦀  \t",
                "",
            ] {
                let ids = tok.encode(text)?;
                tok.decode(&ids)?;
            }
            Ok(())
        })
    };
    let dir = scratch("sentencepiece");
    write(&dir, "tokenizer.model", bytes);
    let plain = run(&dir);
    let marian = scratch("sentencepiece-marian");
    write(&marian, "source.spm", bytes);
    write(
        &marian,
        "vocab.json",
        br#"{"</s>": 0, "<unk>": 1, "\u2581the": 2, ">>fra<<": 3}"#,
    );
    plain.and(run(&marian)).map_err(message)
}

/// The sentence-transformers files around a sound tiny encoder: `modules.json` from
/// `modules`, and the pooling module's `config.json` from `pooling`.
pub fn sentence_files(modules: &[u8], pooling: &[u8], model: &Path) -> Outcome {
    let dir = scratch("sentence");
    copy_tree(model, &dir);
    write(&dir, "modules.json", modules);
    write(&dir, "1_Pooling/config.json", pooling);
    let device = zoo_device::select_by_name("flex").map_err(message)?;
    let encoder = zoo_encoder::SentenceEncoder::from_pretrained(&dir, &device).map_err(message)?;
    encoder
        .encode(&["a sentence", "another one"], 2, &device)
        .map_err(message)?;
    Ok(())
}

/// The JSON of `zoo forward --input` and `zoo embed --input`, read as the command reads
/// them.
pub fn cli_input(bytes: &[u8]) -> Outcome {
    let dir = scratch("input");
    write(&dir, "in.json", bytes);
    let value = zoo_cli::json::read(&dir.join("in.json")).map_err(message)?;
    let forward = zoo_cli::json::forward_input(&value).map(|input| input.check());
    let sentences = zoo_cli::json::sentences(&value);
    match (forward, sentences) {
        (Ok(Ok(())), _) | (_, Ok(_)) => Ok(()),
        (Ok(Err(e)), Err(_)) => Err(message(e)),
        (Err(e), Err(_)) => Err(message(e)),
    }
}

/// An image file, decoded and preprocessed as ViT's processor does, and the same bytes
/// as a `preprocessor_config.json`.
pub fn image(bytes: &[u8]) -> Outcome {
    let dir = scratch("image");
    write(&dir, "image", bytes);
    if let Ok(processor) = zoo_vision::ImageProcessor::from_json(&String::from_utf8_lossy(bytes)) {
        let tiny = ::image::DynamicImage::new_rgb8(3, 2);
        // A clear error (a crop larger than the image) is a fine outcome; a panic is not.
        let _ = processor.preprocess(&tiny);
    }
    let img = zoo_vision::image::open(&dir.join("image")).map_err(message)?;
    zoo_vision::ImageProcessor::vit(16)
        .preprocess(&img)
        .map_err(message)?;
    Ok(())
}

/// A `TrainConfig` JSON file, loaded and checked against a training set of 1000 examples.
pub fn train_config(bytes: &[u8]) -> Outcome {
    let dir = scratch("train");
    write(&dir, "config.json", bytes);
    let cfg = zoo_train::TrainConfig::load(&dir.join("config.json")).map_err(message)?;
    cfg.validate(1000).map_err(message)?;
    let plan = cfg.plan(1000);
    let _ = plan.total_items();
    Ok(())
}
