//! The question-answering pipeline against transformers 4.57's
//! (`xtask/fixtures/qa.py`, `pipelines/qa.json`): on BERT with a WordPiece tokenizer and
//! token types, DistilBERT, and RoBERTa with byte-level BPE, over contexts cut into ten
//! to forty windows, the answers' texts and character spans are HF's and their scores
//! within 1e-5, with the window from the arguments or from `model_max_length`, several
//! answers, spans of the same text added up, the empty answer, and spans kept to tokens.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use zoo_data::LmTokenizer;
use zoo_device::test_device;
use zoo_hub::AutoModel;
use zoo_hub::pipelines::{Answer, QaOptions, question_answering};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../zoo-encoder/tests/fixtures")
}

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join("pipelines/qa.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    all["cases"].as_array().unwrap().clone()
}

/// The folder the fixture script gave the pipeline: the checkpoint, the tokenizer.json
/// and the tokenizer_config.json of the case.
fn folder(case: &Value) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "zoo-qa-{}-{}-{}",
        case["name"].as_str().unwrap(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let model = fixtures().join(case["model"].as_str().unwrap());
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(model.join(file), dir.join(file)).unwrap();
    }
    std::fs::copy(
        fixtures().join(case["tokenizer"].as_str().unwrap()),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        case["tokenizer_config"].to_string(),
    )
    .unwrap();
    dir
}

fn options(args: &Value) -> QaOptions {
    let n = |key: &str| args[key].as_u64().map(|v| v as usize);
    let defaults = QaOptions::default();
    QaOptions {
        top_k: n("top_k").unwrap_or(defaults.top_k),
        max_answer_len: n("max_answer_len").unwrap_or(defaults.max_answer_len),
        max_seq_len: n("max_seq_len"),
        doc_stride: n("doc_stride"),
        handle_impossible_answer: args["handle_impossible_answer"].as_bool().unwrap_or(false),
        align_to_words: args["align_to_words"].as_bool().unwrap_or(true),
    }
}

fn run(case: &Value, options: &QaOptions) -> Vec<Answer> {
    let device = test_device();
    let dir = folder(case);
    let model = AutoModel::from_pretrained(&dir, &device).unwrap();
    let tokenizer = LmTokenizer::from_pretrained(&dir).unwrap();
    let answers = question_answering(
        &model,
        &tokenizer,
        case["question"].as_str().unwrap(),
        case["context"].as_str().unwrap(),
        options,
        &device,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    answers.unwrap()
}

fn assert_hf(name: &str, got: &[Answer], want: &Value) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{name}: {got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.answer, w["answer"].as_str().unwrap(), "{name}: {got:?}");
        assert_eq!(g.start, w["start"].as_u64().unwrap() as usize, "{name}");
        assert_eq!(g.end, w["end"].as_u64().unwrap() as usize, "{name}");
        let score = w["score"].as_f64().unwrap();
        assert!(
            (g.score - score).abs() < 1e-5,
            "{name}: score {} vs HF {score}",
            g.score
        );
    }
}

#[test]
fn answers_equal_transformers_pipeline() {
    let cases = cases();
    assert_eq!(cases.len(), 5);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        assert!(case["windows"].as_u64().unwrap() >= 10, "{name}");
        let got = run(case, &options(&case["args"]));
        assert_hf(name, &got, &case["expected"]);
    }
}

#[test]
fn the_answers_move_with_the_options() {
    let cases = cases();
    let find = |name: &str| cases.iter().find(|c| c["name"] == name).unwrap().clone();
    // Spans kept to tokens cut words ("and Mar"); widened to words, they do not.
    let unaligned = find("bert-impossible-unaligned");
    let mut widened = options(&unaligned["args"]);
    widened.align_to_words = true;
    let got = run(&unaligned, &widened);
    assert_ne!(
        got[0].answer,
        unaligned["expected"][0]["answer"].as_str().unwrap()
    );
    assert!(got.iter().all(|a| a.answer != "and Mar"), "{got:?}");
    // The empty answer competes only when asked for, with the least null score.
    let mut impossible = options(&unaligned["args"]);
    impossible.top_k = 1000;
    let all = run(&unaligned, &impossible);
    // (Spans at the first token score 0 and have no text, here as in HF's pipeline.)
    let empty: Vec<&Answer> = all
        .iter()
        .filter(|a| a.answer.is_empty() && a.score > 0.0)
        .collect();
    assert_eq!(empty.len(), 1);
    assert!(empty[0].score > 0.0 && empty[0].score < 1.0);
    impossible.handle_impossible_answer = false;
    assert!(
        run(&unaligned, &impossible)
            .iter()
            .all(|a| !a.answer.is_empty() || a.score == 0.0)
    );
    // More answers keep the best first.
    let windows = find("bert-wordpiece-windows");
    let mut three = options(&windows["args"]);
    three.top_k = 3;
    let got = run(&windows, &three);
    assert_eq!(got.len(), 3);
    // The same best span; its score can only grow, as more spans of each window (2 k + 10)
    // add to those of the same text.
    let best = &windows["expected"][0];
    assert_eq!(got[0].answer, best["answer"].as_str().unwrap());
    assert!(got[0].score >= best["score"].as_f64().unwrap() - 1e-6);
    assert!(got.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn bad_questions_and_options_are_refused_by_name() {
    let cases = cases();
    let case = &cases[0];
    let device = test_device();
    let dir = folder(case);
    let model = AutoModel::from_pretrained(&dir, &device).unwrap();
    let tokenizer = LmTokenizer::from_pretrained(&dir).unwrap();
    let context = case["context"].as_str().unwrap();
    let base = options(&case["args"]);
    let ask = |question: &str, change: &dyn Fn(&mut QaOptions)| {
        let mut options = base.clone();
        change(&mut options);
        question_answering(&model, &tokenizer, question, context, &options, &device)
            .map_err(|e| e.to_string())
    };
    let err = |question: &str, change: &dyn Fn(&mut QaOptions)| ask(question, change).unwrap_err();
    assert!(err(" ", &|_| {}).contains("the question is empty"));
    assert!(err("Who?", &|o| o.top_k = 0).contains("top_k must be > 0, got 0"));
    let e = err("Who?", &|o| o.max_answer_len = 0);
    assert!(e.contains("max_answer_len must be > 0, got 0"), "{e}");
    let e = err("Who?", &|o| o.doc_stride = Some(30));
    assert!(
        e.contains("doc_stride (30) is larger than max_seq_len (24)"),
        "{e}"
    );
    let e = err("Who is the chief enemy of the people?", &|_| {});
    assert!(
        e.contains("the first text takes") && e.contains("window of 24"),
        "{e}"
    );
    // [CLS] question [SEP] context [SEP]: the context's room in a window of 24.
    let room = 24 - 3 - tokenizer.encode_plain("Who?").unwrap().len();
    let e = err("Who?", &|o| o.doc_stride = Some(room));
    assert!(
        e.contains(&format!("a stride of {room} tokens leaves no room")),
        "{e}"
    );
    ask("Who?", &|o| o.doc_stride = Some(room - 1)).unwrap();
    // A window longer than the model's 24 positions reaches the model, which names it.
    let e = err("Who?", &|o| o.max_seq_len = Some(40));
    assert!(e.contains("longer than max_position_embeddings 24"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // A model without a span head.
    let ner = fixtures().join("bert-tiny-ner");
    let model = AutoModel::from_pretrained(&ner, &device).unwrap();
    let options = QaOptions::default();
    let e = question_answering(&model, &tokenizer, "Who?", context, &options, &device)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs a model with a ForQuestionAnswering head"),
        "{e}"
    );
}
