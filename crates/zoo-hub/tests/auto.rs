//! `AutoModel` over every family's committed `transformers` fixtures, on the backend
//! under test: each registered architecture is found from its folder's `config.json`,
//! offers exactly the capabilities its row declares, and runs through the registry's
//! type-erased path with the numbers of the family's own API.

use std::path::{Path, PathBuf};

use serde_json::Value;
use zoo_core::registry::{ForwardInput, IntMatrix, Task};
use zoo_core::{BeamConfig, GenerationConfig};
use zoo_device::test_device;
use zoo_device::testing::max_abs_diff_slices;
use zoo_hub::{AutoModel, Detected, HubError, architectures};

/// Registered architectures that no committed fixture holds yet.
const WITHOUT_FIXTURE: [&str; 0] = [];

fn fixtures() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for family in ["zoo-decoder", "zoo-encoder", "zoo-vision", "zoo-seq2seq"] {
        let root = crates.join(family).join("tests/fixtures");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("config.json").is_file())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

fn expected(dir: &Path) -> Value {
    zoo_fixtures::expected(dir)
}

fn rows(v: &Value) -> Vec<Vec<usize>> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn every_registered_architecture_is_found_and_offers_what_its_row_says() {
    let device = test_device();
    let mut seen = Vec::new();
    for dir in fixtures() {
        let detected = Detected::new(&dir).unwrap();
        let arch = detected.architecture;
        seen.push(arch.name);
        let model = detected.load(&device).unwrap();
        let name = dir.display();
        assert_eq!(model.architecture().name, arch.name);
        assert!(model.num_params() > 0, "{name}");
        assert_eq!(
            model.generator().is_some(),
            arch.serves(Task::Generate),
            "{name}"
        );
        assert_eq!(
            model.translator().is_some(),
            arch.serves(Task::Translate),
            "{name}"
        );
        assert_eq!(
            model.classifier().is_some(),
            arch.serves(Task::Classify),
            "{name}"
        );
    }
    for arch in architectures() {
        assert_eq!(
            seen.contains(&arch.name),
            !WITHOUT_FIXTURE.contains(&arch.name),
            "{} ({}) has no fixture",
            arch.name,
            arch.model_type
        );
    } // The weights were queued on the device and never read: wait for them, so that no
    // work is left queued when the test process exits (lavapipe crashes then).
    let _ = device.sync();
}

/// The registry's causal LMs decode as `transformers` does, greedy and with beams, and
/// their logits match within 1e-4; the same check on another fixture's logits fails.
#[test]
fn causal_lms_through_the_registry_match_transformers() {
    let device = test_device();
    let dirs: Vec<PathBuf> = fixtures()
        .into_iter()
        .filter(|d| {
            d.join("expected.json").is_file()
                && Detected::new(d)
                    .unwrap()
                    .architecture
                    .serves(Task::Generate)
                && expected(d)["generated"].is_array()
        })
        .collect();
    assert!(dirs.len() >= 6, "{dirs:?}");
    let mut all_logits = Vec::new();
    for dir in &dirs {
        let e = expected(dir);
        let model = AutoModel::from_pretrained(dir, &device).unwrap();
        let lm = model.generator().unwrap();
        let prompts = rows(&e["prompts"]);
        let cfg = GenerationConfig::greedy(8).with_stop_tokens(lm.stop_tokens());
        let mut streamed = vec![Vec::new(); prompts.len()];
        let out = lm
            .generate(&prompts, &cfg, &mut |row, id| streamed[row].push(id))
            .unwrap();
        assert_eq!(out.tokens, rows(&e["generated"]), "{}", dir.display());
        assert_eq!(streamed, out.tokens, "{}", dir.display());
        let beam = lm
            .beam_search(
                &prompts,
                &BeamConfig::new(4, 8).with_stop_tokens(lm.stop_tokens()),
            )
            .unwrap();
        let mut padded = beam.tokens.clone();
        for t in &mut padded {
            t.resize(8, 0);
        }
        assert_eq!(padded, rows(&e["beam"]), "{}", dir.display());

        let input = ForwardInput {
            input_ids: Some(IntMatrix {
                name: "input_ids",
                rows: serde_json::from_value(e["input_ids"].clone()).unwrap(),
            }),
            ..ForwardInput::default()
        };
        let out = model.forward(&input, &device).unwrap();
        assert_eq!(out.len(), 1);
        let (name, values, shape) = &out[0];
        assert_eq!(*name, "logits");
        let want: Vec<f32> = serde_json::from_value(e["logits"]["values"].clone()).unwrap();
        let want_shape: Vec<usize> = serde_json::from_value(e["logits"]["shape"].clone()).unwrap();
        assert_eq!(*shape, want_shape);
        let diff = max_abs_diff_slices(values, &want);
        assert!(diff <= 1e-4, "{}: {diff}", dir.display());
        all_logits.push((values.clone(), want));
    }
    // Negative control: Llama's logits against Mistral's expected ones (both [2, 10, 300])
    // differ by far more than the tolerance.
    let at = |name: &str| dirs.iter().position(|d| d.ends_with(name)).unwrap();
    let (a, _) = &all_logits[at("llama-tiny")];
    let (_, b) = &all_logits[at("mistral-tiny")];
    assert_eq!(a.len(), b.len());
    assert!(max_abs_diff_slices(a, b) > 1e-2);
}

#[test]
fn bad_folders_and_inputs_are_named() {
    let device = test_device();
    let e = AutoModel::from_pretrained("/no/such/model", &device).unwrap_err();
    assert!(matches!(e, HubError::NoFolder { .. }));
    assert_eq!(e.to_string(), "/no/such/model: no such model folder");

    let dir = zoo_fixtures::tempdir("hub", "bad");
    std::fs::write(dir.join("config.json"), r#"{"model_type": "falcon"}"#).unwrap();
    let e = Detected::new(&dir).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "unknown model_type \"falcon\"; the supported model types are gpt2, llama, \
             mistral, qwen2, phi3, gpt_neox, qwen3, gemma, gemma2, gemma3_text, mixtral, bert, roberta, xlm-roberta, distilbert, modernbert, vit, deit, clip, t5, marian, bart, mbart"
        ),
        "{e}"
    );
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type": "bert", "architectures": ["BertForNextSentencePrediction"]}"#,
    )
    .unwrap();
    let e = Detected::new(&dir).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "architecture \"BertForNextSentencePrediction\" of model_type \"bert\" is not \
             supported; the supported ones are BertModel, BertForMaskedLM, \
             BertForSequenceClassification, BertForTokenClassification, \
             BertForQuestionAnswering"
        ),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // A decoder takes no pixel values; the check names what it takes.
    let gpt2 =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../zoo-decoder/tests/fixtures/gpt2-tiny");
    let detected = Detected::new(&gpt2).unwrap();
    let input = ForwardInput {
        pixel_values: Some(zoo_core::registry::Pixels {
            shape: [1, 3, 2, 2],
            values: vec![0.0; 12],
        }),
        ..ForwardInput::default()
    };
    assert_eq!(
        detected.check_input(&input).unwrap_err().to_string(),
        "pixel_values is not an input of GPT2LMHeadModel (it takes input_ids, attention_mask)"
    );
    let model = detected.load(&device).unwrap();
    let e = model
        .forward(&ForwardInput::default(), &device)
        .unwrap_err();
    assert_eq!(e.to_string(), "the model needs input_ids");
    let _ = device.sync();
}

/// `TextGeneration` gives the prompt and what Python's `tokenizer.decode` makes of the
/// whole sequence `transformers` generates greedily (`stream.json`), on byte-level and
/// SentencePiece-style tokenizers alike.
#[test]
fn text_generation_gives_python_s_text() {
    let device = test_device();
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for name in zoo_fixtures::DECODER_FIXTURES {
        let dir = crates.join("zoo-decoder/tests/fixtures").join(name);
        let want: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("stream.json")).unwrap())
                .unwrap();
        let lm = zoo_hub::TextGeneration::from_pretrained(&dir, &device).unwrap();
        let prompt = want["prompt"].as_str().unwrap();
        let text = lm.generate(prompt, &GenerationConfig::greedy(8)).unwrap();
        assert_eq!(text, want["text"].as_str().unwrap(), "{name}");
        // Negative control: one token fewer is a shorter text.
        let shorter = lm.generate(prompt, &GenerationConfig::greedy(7)).unwrap();
        assert_ne!(shorter, text, "{name}");
    }
    // Not a causal LM, and an empty prompt: errors that say so.
    let bert = crates.join("zoo-encoder/tests/fixtures/bert-tiny");
    let e = zoo_hub::TextGeneration::from_pretrained(&bert, &device).unwrap_err();
    assert!(e.to_string().contains("is not a causal LM"), "{e}");
    let gpt2 = crates.join("zoo-decoder/tests/fixtures/gpt2-tiny");
    let lm = zoo_hub::TextGeneration::from_pretrained(&gpt2, &device).unwrap();
    let e = lm.generate("", &GenerationConfig::greedy(8)).unwrap_err();
    assert_eq!(e.to_string(), "the prompt is empty");
}

/// Every integer of every architecture's config, set to 10^12 one at a time: the folder
/// either loads (the value sizes nothing, like an end-of-text id) or is refused with one
/// line, before anything of that size is allocated (once, a RoPE table, a token-type
/// table, the heads' width, a Marian feed-forward and ViT's channels were allocated
/// first, and the process aborted). The fields that size the weights must be refused.
#[test]
fn every_config_integer_at_10_to_the_12_loads_or_is_refused_in_one_line() {
    if zoo_core::validate::memory_limit().is_none() {
        return; // no /proc/meminfo: the sizes have nothing to be compared with
    }
    const SIZES: [&str; 14] = [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "max_position_embeddings",
        "n_embd",
        "n_layer",
        "n_positions",
        "d_model",
        "d_ff",
        "num_layers",
        "type_vocab_size",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
    ];
    fn integers(v: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    path.push(k.clone());
                    integers(x, path, out);
                    path.pop();
                }
            }
            Value::Number(n) if n.as_u64().is_some_and(|n| n > 1) => out.push(path.clone()),
            _ => {}
        }
    }
    let device = test_device();
    let tmp = zoo_fixtures::tempdir("hub", "huge-config");
    let mut model_types = Vec::new();
    let (mut refused, mut loaded) = (0, 0);
    for dir in fixtures() {
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        let model_type = config["model_type"].as_str().unwrap().to_string();
        if model_types.contains(&model_type) || !dir.join("model.safetensors").is_file() {
            continue;
        }
        model_types.push(model_type.clone());
        let case = tmp.join(&model_type);
        std::fs::create_dir_all(&case).unwrap();
        std::fs::copy(
            dir.join("model.safetensors"),
            case.join("model.safetensors"),
        )
        .unwrap();
        let mut paths = Vec::new();
        integers(&config, &mut Vec::new(), &mut paths);
        for path in paths {
            let mut edited = config.clone();
            let mut slot = &mut edited;
            for key in &path {
                slot = &mut slot[key.as_str()];
            }
            *slot = 1_000_000_000_000u64.into();
            std::fs::write(case.join("config.json"), edited.to_string()).unwrap();
            let name = format!("{model_type}: {}", path.join("."));
            match AutoModel::from_pretrained(&case, &device) {
                Ok(_) => {
                    assert!(
                        !(path.len() == 1 && SIZES.contains(&path[0].as_str())),
                        "{name} at 10^12 loaded"
                    );
                    loaded += 1;
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(!e.is_empty() && !e.contains('\n'), "{name}: {e:?}");
                    refused += 1;
                }
            }
        }
    }
    assert!(model_types.len() >= 16, "{model_types:?}");
    assert!(
        refused >= 100 && loaded > 0,
        "{refused} refused, {loaded} loaded"
    );
}
