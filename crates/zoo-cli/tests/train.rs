//! `zoo train` as a user runs it, on the committed fixtures, on the backend under test:
//! every task learns what its data says (a sentence it then generates, labels it then
//! predicts), writes a checkpoint that the other commands load, and continues after a
//! SIGKILL with the same losses as a run never interrupted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use zoo_device::{BackendName, test_backend};

mod support;
use support::*;

/// `metrics.csv` of a run: per round, the named columns.
fn metrics(out: &Path) -> Vec<std::collections::BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(out.join("training/metrics.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(|v| v.parse::<f64>().unwrap_or(f64::NAN)))
                .collect()
        })
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `zoo train --model MODEL --task TASK --train TRAIN --output OUT ARGS` and checks
/// that it succeeded.
fn train(model: &Path, task: &str, data: &Path, out: &Path, args: &[&str]) -> Run {
    let mut all = vec![
        "train",
        "--model",
        path(model),
        "--task",
        task,
        "--train",
        path(data),
        "--output",
        path(out),
    ];
    all.extend_from_slice(args);
    ok(&all)
}

/// Checks the architecture, and the labels when given, of the checkpoint in `out`.
fn saved_as(out: &Path, architecture: &str, id2label: Option<serde_json::Value>) {
    let config = read_json(&out.join("config.json"));
    assert_eq!(config["architectures"], serde_json::json!([architecture]));
    if let Some(labels) = id2label {
        assert_eq!(config["id2label"], labels);
    }
}

/// The same sentence, as 40 documents of a text file.
fn sentences(tmp: &Path) -> PathBuf {
    let file = tmp.join("train.txt");
    std::fs::write(&file, "the cat sat on the mat.\n\n".repeat(40)).unwrap();
    file
}

/// `generate`'s arguments for 12 greedy tokens after "the cat".
const GREEDY_CAT: [&str; 6] = [
    "--prompt",
    "the cat",
    "--max-new-tokens",
    "12",
    "--temperature",
    "0",
];

/// `zoo train` of the GPT-2 fixture on [`sentences`] (written in `tmp`) into `out`.
fn train_gpt2(tmp: &Path, out: &Path, args: &[&str]) -> Run {
    train(&gpt2(), "causal-lm", &sentences(tmp), out, args)
}

#[test]
fn causal_lm_learns_a_sentence_and_generates_it() {
    let tmp = tempdir("train-causal");
    let out = tmp.join("out");
    let run = train_gpt2(
        &tmp,
        &out,
        &[
            "--steps",
            "60",
            "--eval-every",
            "20",
            "--lr",
            "1e-2",
            "--max-len",
            "16",
            "--seed",
            "3",
        ],
    );
    assert!(run.stdout.contains("checkpoint:"), "{}", run.stdout);
    let rounds = metrics(&out);
    assert_eq!(rounds.len(), 3);
    let first = rounds[0]["valid_loss"];
    let last = rounds[2]["valid_loss"];
    // From about ln(320) = 5.8 for the random fixture; the sentence is all there is.
    assert!(last < 0.5 && last < first, "valid losses {first} -> {last}");
    // The checkpoint is whole: zoo reads it, and it continues the sentence. The fixture
    // it started from does not (the negative control).
    let info = ok_on("info", &out, &[]);
    assert!(info.stdout.contains("GPT2LMHeadModel"), "{}", info.stdout);
    let args = GREEDY_CAT;
    let trained = ok_on("generate", &out, &args);
    assert!(
        trained.stdout.starts_with("the cat sat on the mat."),
        "{:?}",
        trained.stdout
    );
    let untrained = ok_on("generate", &gpt2(), &args);
    assert!(
        !untrained.stdout.contains("sat on the mat"),
        "{:?}",
        untrained.stdout
    );
    // Its tokenizer and generation config came along.
    for f in [
        "tokenizer.json",
        "generation_config.json",
        "model.safetensors",
        "config.json",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    std::fs::remove_dir_all(tmp).unwrap();
}

/// `--from-scratch`: a folder of the GPT-2 fixture's config and tokenizer alone, no
/// weights, trains from weights drawn with the seed: the same seed gives the same
/// losses, another seed other ones (the control), and the model learns the sentence.
#[test]
fn causal_lm_trains_from_scratch_from_a_config_and_a_tokenizer() {
    let tmp = tempdir("train-scratch");
    let model = tmp.join("model");
    std::fs::create_dir_all(&model).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(gpt2().join(f), model.join(f)).unwrap();
    }
    let data = sentences(&tmp);
    let run = |name: &str, seed: &str| {
        let out = tmp.join(name);
        let run = train(
            &model,
            "causal-lm",
            &data,
            &out,
            &[
                "--from-scratch",
                "--steps",
                "120",
                "--eval-every",
                "40",
                "--lr",
                "1e-2",
                "--max-len",
                "16",
                "--seed",
                seed,
            ],
        );
        assert!(
            run.stdout.contains(&format!(
                "weights:      drawn at random (--from-scratch, seed {seed})"
            )),
            "{}",
            run.stdout
        );
        metrics(&out)
            .iter()
            .map(|r| r["valid_loss"])
            .collect::<Vec<f64>>()
    };
    let (a, b, c) = (run("a", "1"), run("b", "1"), run("c", "2"));
    assert_eq!(a, b, "the same seed, other losses");
    assert_ne!(a, c, "another seed, the same losses");
    assert!(a[2] < 0.5 && a[2] < a[0], "valid losses {a:?}");
    let out = tmp.join("a");
    let generated = ok_on("generate", &out, &GREEDY_CAT);
    assert!(
        generated.stdout.starts_with("the cat sat on the mat."),
        "{:?}",
        generated.stdout
    );
    std::fs::remove_dir_all(tmp).unwrap();
}

/// A CSV of texts whose label is told by one word among random others.
fn labelled_csv(path: &Path, rows: usize, labels: [(&str, &str); 2], seed: usize) {
    let filler = [
        "when", "the", "lord", "of", "night", "and", "a", "fair", "day", "comes",
    ];
    let mut text = String::from("text,label\n");
    for i in 0..rows {
        let (word, label) = labels[(i * 7 + seed) % 2];
        let words: Vec<&str> = (0..5)
            .map(|k| filler[(i * 3 + k * 5 + seed) % filler.len()])
            .collect();
        text.push_str(&format!(
            "\"{} {word}, {}\",{label}\n",
            words[..3].join(" "),
            words[3..].join(" ")
        ));
    }
    std::fs::write(path, text).unwrap();
}

/// `train.csv` (120 rows) and `valid.csv` (30 rows) of [`labelled_csv`] in `tmp`.
fn labelled_split(tmp: &Path, labels: [(&str, &str); 2]) -> (PathBuf, PathBuf) {
    let (train_csv, valid_csv) = (tmp.join("train.csv"), tmp.join("valid.csv"));
    labelled_csv(&train_csv, 120, labels, 0);
    labelled_csv(&valid_csv, 30, labels, 1);
    (train_csv, valid_csv)
}

/// The text of the first row of a CSV of [`labelled_csv`] that holds `word`.
fn text_with(csv: &Path, word: &str) -> String {
    let rows = std::fs::read_to_string(csv).unwrap();
    let line = rows.lines().find(|l| l.contains(word)).unwrap();
    line.rsplit_once(',')
        .unwrap()
        .0
        .trim_matches('"')
        .to_string()
}

#[test]
fn classification_learns_labels_that_classify_then_names() {
    let tmp = tempdir("train-cls");
    let labels = [("merry", "comedy"), ("death", "tragedy")];
    let (train_csv, valid_csv) = labelled_split(&tmp, labels);
    // The fixture is a genre classifier (comedy, history, tragedy): its head and label
    // ids are kept, since they hold the data's labels.
    let out = tmp.join("out");
    let common = [
        "--epochs",
        "4",
        "--lr",
        "3e-3",
        "--batch-size",
        "8",
        "--max-len",
        "16",
    ];
    let mut args = vec!["--valid", path(&valid_csv)];
    args.extend(common);
    let run = train(
        &fixture("zoo-encoder", "roberta-tiny-cls"),
        "classification",
        &train_csv,
        &out,
        &args,
    );
    assert!(run.stdout.contains("120 train, 30 valid"), "{}", run.stdout);
    let rounds = metrics(&out);
    let accuracy = rounds.last().unwrap()["valid_accuracy"];
    assert!(accuracy >= 99.0, "valid accuracy {accuracy}");
    let id2label = serde_json::json!({"0": "comedy", "1": "history", "2": "tragedy"});
    saved_as(&out, "RobertaForSequenceClassification", Some(id2label));
    let top = |dir: &Path, text: &str| {
        let run = ok_on("classify", dir, &["--text", text, "--top", "1"]);
        run.stdout.split_whitespace().nth(1).unwrap().to_string()
    };
    // A validation row of each label.
    for (word, label) in labels {
        let text = text_with(&valid_csv, word);
        assert_eq!(top(&out, &text), label, "{text}");
    }

    // Labels the checkpoint does not have: a new head, and id2label from the data.
    let new_labels = [("merry", "pos"), ("death", "neg")];
    labelled_csv(&train_csv, 60, new_labels, 0);
    let out2 = tmp.join("out2");
    train(
        &fixture("zoo-encoder", "roberta-tiny"),
        "classification",
        &train_csv,
        &out2,
        &common,
    );
    let labels = serde_json::json!({"0": "neg", "1": "pos"});
    saved_as(&out2, "RobertaForSequenceClassification", Some(labels));
    std::fs::remove_dir_all(tmp).unwrap();
}

/// `--lora-rank` on a classifier: over RoBERTa's base fixture, which has no head, the
/// adapter on `query` and `value` trains with a new head beside it (PEFT's
/// `modules_to_save`: `classifier`, which is RoBERTa's `dense` and `out_proj`), and is
/// written alone with the data's label names. `classify --adapter` over the base reads
/// it and labels the validation rows; `zoo merge` folds it into a whole classifier whose
/// logits equal the adapter's.
#[test]
fn classification_lora_trains_an_adapter_and_its_head() {
    let tmp = tempdir("train-cls-lora");
    let labels = [("merry", "pos"), ("death", "neg")];
    let (train_csv, valid_csv) = labelled_split(&tmp, labels);
    let base = fixture("zoo-encoder", "roberta-tiny");
    let adapter = tmp.join("adapter");
    let run = train(
        &base,
        "classification",
        &train_csv,
        &adapter,
        &[
            "--valid",
            path(&valid_csv),
            "--epochs",
            "4",
            "--lr",
            "1e-2",
            "--batch-size",
            "8",
            "--max-len",
            "16",
            "--lora-rank",
            "4",
        ],
    );
    // Rank 4 on two 40 x 40 matrices in each of two layers, and the head whole:
    // dense 40 x 40 + 40, out_proj 40 x 2 + 2.
    let (trained, all) = trained_of(&run.stdout);
    assert_eq!(
        trained,
        2 * 2 * 4 * (40 + 40) + (40 * 40 + 40) + (40 * 2 + 2)
    );
    assert!(all > 10 * trained, "{trained} of {all}");
    let accuracy = metrics(&adapter).last().unwrap()["valid_accuracy"];
    assert!(accuracy >= 90.0, "valid accuracy {accuracy}");
    let config = read_json(&adapter.join("adapter_config.json"));
    assert_eq!(config["task_type"], "SEQ_CLS");
    assert_eq!(config["modules_to_save"], serde_json::json!(["classifier"]));
    assert_eq!(
        config["target_modules"],
        serde_json::json!(["query", "value"])
    );
    assert_eq!(
        read_json(&adapter.join("id2label.json")),
        serde_json::json!({"0": "neg", "1": "pos"})
    );
    assert!(!adapter.join("config.json").exists());

    let top = |args: &[&str], text: &str| {
        let mut argv = vec!["classify"];
        argv.extend(args);
        argv.extend(["--text", text, "--top", "1"]);
        let run = ok(&argv);
        run.stdout.split_whitespace().nth(1).unwrap().to_string()
    };
    let merged = tmp.join("merged");
    merge(&base, &adapter, &merged);
    saved_as(
        &merged,
        "RobertaForSequenceClassification",
        Some(serde_json::json!({"0": "neg", "1": "pos"})),
    );
    let adapted = ["--model", path(&base), "--adapter", path(&adapter)];
    for (word, label) in labels {
        let text = text_with(&valid_csv, word);
        assert_eq!(top(&adapted, &text), label, "{text}");
        assert_eq!(top(&["--model", path(&merged)], &text), label, "{text}");
    }
    let input = tmp.join("in.json");
    std::fs::write(&input, r#"{"input_ids": [[0, 5, 6, 7, 8, 2]]}"#).unwrap();
    let a = forward_logits(&input, &tmp.join("a.json"), &adapted);
    let m = forward_logits(&input, &tmp.join("m.json"), &["--model", path(&merged)]);
    assert_eq!(a.len(), 2);
    let d = max_diff(&a, &m);
    assert!(d < 1e-4, "adapter and merged logits differ by {d}");
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn token_classification_tags_each_word() {
    let tmp = tempdir("train-tokens");
    let data = tmp.join("train.jsonl");
    let words = ["fair", "lord", "night", "day", "sweet"];
    let mut lines = String::new();
    for i in 0..80 {
        let row: Vec<String> = (0..4)
            .map(|k| {
                if (i + k) % 3 == 0 {
                    format!("{}", (i * 7 + k) % 100)
                } else {
                    words[(i + k * 2) % words.len()].to_string()
                }
            })
            .collect();
        let tags: Vec<&str> = row
            .iter()
            .map(|w| {
                if w.parse::<u32>().is_ok() {
                    "NUM"
                } else {
                    "WORD"
                }
            })
            .collect();
        lines.push_str(&serde_json::json!({"tokens": row, "tags": tags}).to_string());
        lines.push('\n');
    }
    std::fs::write(&data, lines).unwrap();
    let out = tmp.join("out");
    train(
        &fixture("zoo-encoder", "roberta-tiny"),
        "token-classification",
        &data,
        &out,
        &["--epochs", "4", "--lr", "3e-3", "--max-len", "24"],
    );
    let accuracy = metrics(&out).last().unwrap()["valid_accuracy"];
    assert!(accuracy >= 95.0, "valid accuracy {accuracy}");
    let labels = serde_json::json!({"0": "NUM", "1": "WORD"});
    saved_as(&out, "RobertaForTokenClassification", Some(labels));
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn masked_lm_and_seq2seq_lower_their_validation_loss() {
    let tmp = tempdir("train-mlm-s2s");
    let out = tmp.join("mlm");
    train(
        &fixture("zoo-encoder", "roberta-tiny-mlm"),
        "masked-lm",
        &sentences(&tmp),
        &out,
        &["--epochs", "3", "--lr", "5e-3", "--batch-size", "4"],
    );
    let rounds = metrics(&out);
    assert!(
        rounds[2]["valid_loss"] < rounds[0]["valid_loss"],
        "{rounds:?}"
    );
    saved_as(&out, "RobertaForMaskedLM", None);

    let pairs = tmp.join("pairs.tsv");
    let mut text = String::from("source\ttarget\n");
    for i in 0..48 {
        let w = ["cat", "dog", "mat", "sun"][i % 4];
        text.push_str(&format!("the {w}\t{w} the\n"));
    }
    std::fs::write(&pairs, text).unwrap();
    let out = tmp.join("t5");
    train(
        &fixture("zoo-seq2seq", "t5-tiny"),
        "seq2seq",
        &pairs,
        &out,
        &["--epochs", "6", "--lr", "1e-2", "--batch-size", "8"],
    );
    let rounds = metrics(&out);
    let (first, last) = (rounds[0]["valid_loss"], rounds[5]["valid_loss"]);
    assert!(last < 0.9 * first, "valid losses {first} -> {last}");
    let translated = ok_on("translate", &out, &["--text", "the sun"]);
    assert_eq!(translated.stdout.trim(), "sun the");

    // From scratch: T5's config and tokenizer alone, the weights drawn with the seed.
    let scratch = tmp.join("t5-config");
    std::fs::create_dir_all(&scratch).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(fixture("zoo-seq2seq", "t5-tiny").join(f), scratch.join(f)).unwrap();
    }
    let out = tmp.join("t5-scratch");
    let run = train(
        &scratch,
        "seq2seq",
        &pairs,
        &out,
        &[
            "--from-scratch",
            "--epochs",
            "6",
            "--lr",
            "1e-2",
            "--batch-size",
            "8",
        ],
    );
    assert!(
        run.stdout.contains("weights:      drawn at random"),
        "{}",
        run.stdout
    );
    let rounds = metrics(&out);
    let (first, last) = (rounds[0]["valid_loss"], rounds[5]["valid_loss"]);
    assert!(
        last < 0.9 * first,
        "from scratch: valid losses {first} -> {last}"
    );
    saved_as(&out, "T5ForConditionalGeneration", None);

    // BART fine-tunes the same way (learned positions and embedding norms trained) and
    // is saved as BART.
    let out = tmp.join("bart");
    train(
        &fixture("zoo-seq2seq", "bart-tiny"),
        "seq2seq",
        &pairs,
        &out,
        &["--epochs", "12", "--lr", "1e-2", "--batch-size", "8"],
    );
    let rounds = metrics(&out);
    let (first, last) = (rounds[0]["valid_loss"], rounds[11]["valid_loss"]);
    assert!(last < 0.5 * first, "BART's valid losses {first} -> {last}");
    saved_as(&out, "BartForConditionalGeneration", None);
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn a_killed_run_resumes_with_the_losses_of_an_uninterrupted_one() {
    let tmp = tempdir("train-kill");
    let data = sentences(&tmp);
    let args = |out: &Path| -> Vec<String> {
        [
            "train",
            "--model",
            path(&gpt2()),
            "--task",
            "causal-lm",
            "--train",
            path(&data),
            "--output",
            path(out),
            "--steps",
            "120",
            "--eval-every",
            "30",
            "--lr",
            "1e-3",
            "--max-len",
            "16",
            "--batch-size",
            "4",
            "--device",
            test_backend().as_str(),
        ]
        .map(String::from)
        .to_vec()
    };
    let whole = tmp.join("whole");
    let run = Command::new(env!("CARGO_BIN_EXE_zoo"))
        .args(args(&whole))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let cut = tmp.join("cut");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zoo"))
        .args(args(&cut))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed as soon as the first round's checkpoint is complete (its checksum written).
    let first = cut.join("training/checkpoint/model-1.bpk.crc32");
    let started = Instant::now();
    while !first.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no checkpoint"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before a checkpoint"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !cut.join("config.json").exists(),
        "the run finished before it was killed: make its rounds longer"
    );
    let mut resume = args(&cut);
    resume.push("--resume".into());
    let run = Command::new(env!("CARGO_BIN_EXE_zoo"))
        .args(&resume)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let (a, b) = (metrics(&whole), metrics(&cut));
    assert_eq!(a.len(), 4);
    // The losses fall round by round, so a resume that started over would show.
    assert!(a[3]["valid_loss"] < a[0]["valid_loss"] - 0.1, "{a:?}");
    for (ra, rb) in a.iter().zip(&b) {
        for key in ["train_loss", "valid_loss"] {
            assert!((ra[key] - rb[key]).abs() < 1e-6, "{key}: {ra:?} vs {rb:?}");
        }
    }
    // The two checkpoints hold the same weights, to float rounding.
    let weights = |d: &Path| {
        zoo_core::WeightsFile::Safetensors(d.join("model.safetensors"))
            .contents()
            .unwrap()
    };
    let (wa, wb) = (weights(&whole), weights(&cut));
    assert_eq!(wa.len(), wb.len());
    let mut worst = 0f32;
    for ((na, sa, ba), (nb, sb, bb)) in wa.iter().zip(&wb) {
        assert_eq!((na, sa), (nb, sb));
        for (x, y) in ba.chunks(4).zip(bb.chunks(4)) {
            let f = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
            worst = worst.max((f(x) - f(y)).abs());
        }
    }
    assert!(worst < 1e-5, "the resumed weights differ by up to {worst}");
    std::fs::remove_dir_all(tmp).unwrap();
}

/// The trained and total parameter counts of a run's summary line
/// `parameters:   N trained of M (P%)`.
fn trained_of(stdout: &str) -> (usize, usize) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("parameters:"))
        .unwrap();
    let n: Vec<usize> = line
        .split_whitespace()
        .filter_map(|w| w.replace(',', "").parse().ok())
        .collect();
    (n[0], n[1])
}

#[test]
fn lora_trains_an_adapter_that_generate_forward_and_merge_read() {
    let tmp = tempdir("train-lora");
    let adapter = tmp.join("adapter");
    let run = train_gpt2(
        &tmp,
        &adapter,
        &[
            "--steps",
            "200",
            "--eval-every",
            "50",
            "--lr",
            "2e-2",
            "--max-len",
            "16",
            "--seed",
            "3",
            "--lora-rank",
            "8",
            "--lora-targets",
            "c_attn,c_proj,c_fc",
        ],
    );
    // Rank 8 over six matrices: (24 + 72) + 2 (24 + 24) + (24 + 40) per layer, times 8.
    let (trained, all) = trained_of(&run.stdout);
    assert_eq!(
        trained,
        2 * 8 * ((24 + 72) + (24 + 24) + (24 + 40) + (40 + 24))
    );
    assert!(all > trained);
    assert!(adapter.join("adapter_config.json").is_file());
    assert!(adapter.join("adapter_model.safetensors").is_file());
    assert!(!adapter.join("config.json").exists());
    let rounds = metrics(&adapter);
    assert!(
        rounds[3]["valid_loss"] < rounds[0]["valid_loss"],
        "{rounds:?}"
    );

    let base = gpt2();
    let args = GREEDY_CAT;
    let mut with: Vec<&str> = vec![
        "generate",
        "--model",
        path(&base),
        "--adapter",
        path(&adapter),
    ];
    with.extend(args);
    let adapted = ok(&with);
    assert!(
        adapted.stdout.starts_with("the cat sat on the mat."),
        "{:?}",
        adapted.stdout
    );

    // Merged: the same text, and the logits of the adapter within 1e-4.
    let merged = tmp.join("merged");
    merge(&base, &adapter, &merged);
    assert_eq!(ok_on("generate", &merged, &args).stdout, adapted.stdout);
    let input = tmp.join("in.json");
    std::fs::write(&input, r#"{"input_ids": [[5, 6, 7, 8, 9, 10]]}"#).unwrap();
    let logits = |model: &Path, extra: &[&str], name: &str| {
        let mut argv = vec!["--model", path(model)];
        argv.extend(extra);
        forward_logits(&input, &tmp.join(name), &argv)
    };
    let a = logits(&base, &["--adapter", path(&adapter)], "a.json");
    let m = logits(&merged, &[], "m.json");
    let b = logits(&base, &[], "b.json");
    assert!(max_diff(&a, &m) < 1e-4, "{}", max_diff(&a, &m));
    assert!(max_diff(&a, &b) > 1e-2, "the adapter changed nothing");
    std::fs::remove_dir_all(tmp).unwrap();
}

/// QLoRA (`--qlora`, Burn's `apply_qlora`): the adapted weights of the GPT-2 fixture are
/// quantized (q4 in blocks of 8; q8 on ndarray, which takes no 4 bits) and frozen, the
/// adapters train beside them, the validation loss falls by more than 10% over 200
/// steps (2.14 to 1.79 measured at q4 on flex), and the adapter alone is written in PEFT's format, which `generate
/// --adapter` reads over the f32 base. libtorch refuses in one line.
#[test]
fn qlora_trains_an_adapter_over_quantized_weights() {
    let tmp = tempdir("train-qlora");
    let adapter = tmp.join("adapter");
    let base = gpt2();
    let data = sentences(&tmp);
    let bits = if test_backend() == BackendName::NdArray {
        "q8"
    } else {
        "q4"
    };
    let args = [
        "--steps",
        "200",
        "--eval-every",
        "50",
        "--lr",
        "2e-2",
        "--max-len",
        "16",
        "--seed",
        "3",
        "--lora-rank",
        "8",
        "--lora-targets",
        "c_attn,c_proj,c_fc",
        "--qlora",
        bits,
        "--qlora-block",
        "8",
    ];
    if matches!(test_backend(), BackendName::Tch | BackendName::TchCuda) {
        let mut all = vec!["train", "--model", path(&base), "--task", "causal-lm"];
        all.extend(["--train", path(&data), "--output", path(&adapter)]);
        all.extend(args);
        let run = zoo(&all);
        assert_eq!(run.status, Some(1));
        assert!(
            run.stderr
                .contains("quantized weights are not supported on tch"),
            "{}",
            run.stderr
        );
        return;
    }
    let run = train_gpt2(&tmp, &adapter, &args);
    let (trained, _) = trained_of(&run.stdout);
    assert_eq!(
        trained,
        2 * 8 * ((24 + 72) + (24 + 24) + (24 + 40) + (40 + 24))
    );
    assert!(adapter.join("adapter_model.safetensors").is_file());
    let rounds = metrics(&adapter);
    let (first, last) = (rounds[0]["valid_loss"], rounds[3]["valid_loss"]);
    assert!(last < 0.9 * first, "valid losses {first} -> {last}");
    let generated = ok(&[
        "generate",
        "--model",
        path(&base),
        "--adapter",
        path(&adapter),
        "--prompt",
        "the cat",
        "--max-new-tokens",
        "4",
        "--temperature",
        "0",
    ]);
    assert!(
        generated.stdout.starts_with("the cat"),
        "{}",
        generated.stdout
    );
    // A block that does not divide a width is named with the module.
    let bad = zoo(&[
        &["train", "--model", path(&gpt2()), "--task", "causal-lm"][..],
        &[
            "--train",
            path(&sentences(&tmp)),
            "--output",
            path(&tmp.join("bad")),
        ],
        &[
            "--lora-rank",
            "4",
            "--qlora",
            bits,
            "--qlora-block",
            "7",
            "--steps",
            "1",
        ],
    ]
    .concat());
    assert_eq!(bad.status, Some(1));
    assert!(
        bad.stderr
            .contains("has 72 outputs, not a multiple of the quantization block 7"),
        "{}",
        bad.stderr
    );
    std::fs::remove_dir_all(tmp).unwrap();
}

/// `zoo merge` of `adapter` over `base`, written to `out`.
fn merge(base: &Path, adapter: &Path, out: &Path) {
    ok(&[
        "merge",
        "--model",
        path(base),
        "--adapter",
        path(adapter),
        "--output",
        path(out),
    ]);
}

/// The logits `zoo forward MODEL_ARGS --input INPUT --output OUT` writes, flattened.
fn forward_logits(input: &Path, out: &Path, model_args: &[&str]) -> Vec<f32> {
    let mut argv = vec!["forward", "--input", path(input), "--output", path(out)];
    argv.extend(model_args);
    ok(&argv);
    flat(&read_json(out)["logits"])
}

/// The largest difference between two equally long lists.
fn max_diff(x: &[f32], y: &[f32]) -> f32 {
    x.iter()
        .zip(y)
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max)
}

fn flat(v: &serde_json::Value) -> Vec<f32> {
    match v {
        serde_json::Value::Array(items) => items.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().unwrap() as f32],
    }
}

/// 20 steps at lr 1e-2 on rows of at most 16 tokens, validated every 10.
const TWENTY_STEPS: [&str; 8] = [
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--lr",
    "1e-2",
    "--max-len",
    "16",
];

#[test]
fn gradient_checkpointing_keeps_the_losses() {
    let tmp = tempdir("train-checkpointing");
    let args = TWENTY_STEPS;
    // Dropout off: recomputed blocks draw their masks from seeds of their own, so with
    // dropout on the two runs' masks differ (zoo-kernels' recompute tests compare
    // gradients under the same masks).
    let off = serde_json::Value::from(0.0);
    let model = zoo_fixtures::edited_copy(
        "cli",
        "gpt2-no-dropout",
        &gpt2(),
        &[
            ("attn_pdrop", off.clone()),
            ("embd_pdrop", off.clone()),
            ("resid_pdrop", off),
        ],
    );
    let data = sentences(&tmp);
    let (plain, recomputed) = (tmp.join("plain"), tmp.join("recomputed"));
    train(&model, "causal-lm", &data, &plain, &args);
    let mut with = args.to_vec();
    with.push("--gradient-checkpointing");
    train(&model, "causal-lm", &data, &recomputed, &with);
    let (a, b) = (metrics(&plain), metrics(&recomputed));
    assert_eq!(a.len(), 2);
    for (ra, rb) in a.iter().zip(&b) {
        for key in ["train_loss", "valid_loss"] {
            assert!((ra[key] - rb[key]).abs() < 1e-4, "{key}: {ra:?} vs {rb:?}");
        }
    }
    let config = read_json(&recomputed.join("training/config.json"));
    assert_eq!(config["gradient_checkpointing"], true);
    // The negative control: another learning rate moves the losses beyond the tolerance.
    let other = tmp.join("other");
    let mut faster = args.to_vec();
    faster[5] = "3e-2";
    train(&model, "causal-lm", &data, &other, &faster);
    let c = metrics(&other);
    let moved = (a[1]["train_loss"] - c[1]["train_loss"]).abs();
    assert!(moved > 1e-3, "another lr moved the loss by only {moved}");
    std::fs::remove_dir_all(tmp).unwrap();
    std::fs::remove_dir_all(model).unwrap();
}

/// A checkpoint that `zoo train` writes loads in `transformers`: the committed
/// `gpt2-tiny-trained` folder, written by the command in `xtask/fixtures/trained.py`,
/// gives in the zoo the logits that `transformers` computed from it (within 1e-4) and the
/// same greedy continuation. And that command, run now, writes that folder again: the same
/// config, the same tensors (names, shapes, types), and on flex the same values within
/// 1e-4. Negative control: the fixture before training is far from those logits.
#[test]
fn what_zoo_train_writes_loads_in_transformers() {
    let committed = fixture("zoo-decoder", "gpt2-tiny-trained");
    let expected = read_json(&committed.join("expected.json"));
    let tmp = tempdir("train-transformers");
    let input = tmp.join("in.json");
    let ids = serde_json::json!({ "input_ids": expected["input_ids"] });
    std::fs::write(&input, ids.to_string()).unwrap();
    let want = flat(&expected["logits"]["values"]);
    let ours = forward_logits(&input, &tmp.join("a.json"), &["--model", path(&committed)]);
    let diff = max_diff(&ours, &want);
    assert!(
        ours.len() == want.len() && diff < 1e-4,
        "{diff} over {} logits",
        want.len()
    );
    let before = forward_logits(&input, &tmp.join("b.json"), &["--model", path(&gpt2())]);
    assert!(max_diff(&before, &want) > 1e-1, "training changed nothing");
    let run = ok_on("generate", &committed, &GREEDY_CAT);
    let text = expected["greedy_text"].as_str().unwrap();
    assert_eq!(run.stdout.trim_end(), text);

    let out = tmp.join("out");
    train_gpt2(&tmp, &out, &[&TWENTY_STEPS[..], &["--seed", "3"]].concat());
    assert_eq!(
        read_json(&out.join("config.json")),
        read_json(&committed.join("config.json"))
    );
    let (fresh, kept) = (
        zoo_core::WeightsFile::find(&out)
            .unwrap()
            .contents()
            .unwrap(),
        zoo_core::WeightsFile::find(&committed)
            .unwrap()
            .contents()
            .unwrap(),
    );
    let layout = |t: &[zoo_core::checkpoint::StoredTensor]| {
        t.iter()
            .map(|(name, shape, bytes)| (name.clone(), shape.clone(), bytes.len()))
            .collect::<Vec<_>>()
    };
    assert_eq!(layout(&fresh), layout(&kept));
    if test_backend() == BackendName::Flex {
        for ((name, _, a), (_, _, b)) in fresh.iter().zip(&kept) {
            let f32s = |b: &[u8]| -> Vec<f32> {
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            };
            let diff = max_diff(&f32s(a), &f32s(b));
            assert!(diff < 1e-4, "{name}: {diff}");
        }
    }
    std::fs::remove_dir_all(tmp).unwrap();
}
