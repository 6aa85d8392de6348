//! The real all-MiniLM-L6-v2 against Python: its tokenizer's ids (from `tokenizer.json`
//! and from `vocab.txt`) against `transformers`' on awkward strings and a pair, and its
//! sentence embeddings against sentence-transformers'. The model (90 MB) is fetched into
//! the cache by `cargo xtask fetch minilm`, which CI runs in its setup; only the expected
//! values are committed (`tests/fixtures/minilm/expected.json`, from `cargo xtask
//! fixtures`).

use std::path::Path;

use serde::Deserialize;
use zoo_device::test_device;
use zoo_device::testing::floats;
use zoo_encoder::{BertTokenizer, SentenceEncoder};
use zoo_fixtures::minilm_dir;

#[derive(Deserialize)]
struct Case {
    text: Option<String>,
    pair: Option<Vec<String>>,
    input_ids: Vec<u32>,
    token_type_ids: Vec<u32>,
    tokens: Vec<String>,
}

#[derive(Deserialize)]
struct Expected {
    tokenizer: Vec<Case>,
    sentences: Vec<String>,
    embeddings: Vec<Vec<f32>>,
}

fn expected() -> Expected {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm/expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn check_tokenizer(name: &str, tok: &BertTokenizer, cases: &[Case]) {
    for case in cases {
        let e = match (&case.text, &case.pair) {
            (Some(text), None) => tok.encode(text).unwrap(),
            (None, Some(pair)) => tok.encode_pair(&pair[0], &pair[1]).unwrap(),
            _ => panic!("a case is a text or a pair"),
        };
        assert_eq!(e.ids, case.input_ids, "{name}: ids of {:?}", case.tokens);
        assert_eq!(
            e.type_ids, case.token_type_ids,
            "{name}: types of {:?}",
            case.tokens
        );
        assert_eq!(e.tokens, case.tokens, "{name}");
    }
}

#[test]
fn the_tokenizer_gives_pythons_ids_from_tokenizer_json_and_from_vocab_txt() {
    let dir = minilm_dir();
    let cases = expected().tokenizer;
    assert!(cases.iter().any(|c| c.pair.is_some()), "a pair is covered");
    assert!(
        cases
            .iter()
            .any(|c| c.tokens.contains(&"[UNK]".to_string())),
        "an unknown word is covered"
    );
    let from_json = BertTokenizer::from_file(dir.join("tokenizer.json"), 512).unwrap();
    check_tokenizer("tokenizer.json", &from_json, &cases);
    let from_vocab = BertTokenizer::from_vocab(dir.join("vocab.txt"), true, 512).unwrap();
    check_tokenizer("vocab.txt", &from_vocab, &cases);
    assert_eq!(from_json.vocab_size(), 30522);
    assert_eq!(
        (from_json.pad_id(), from_json.mask_id()),
        (0, 103),
        "BERT's [PAD] and [MASK]"
    );
}

#[test]
fn batches_pad_to_the_longest_and_truncate_to_max_len() {
    let tok = BertTokenizer::from_file(minilm_dir().join("tokenizer.json"), 8).unwrap();
    let b = tok
        .encode_batch(&["a man eats", "the cat sat on the mat and then it slept"])
        .unwrap();
    // The file pads every text to 128; here the batch is as long as its longest row,
    // and that row is cut to 8 tokens with its [SEP] kept. The ids are Python's:
    // tok([...], padding=True, truncation=True, max_length=8).
    assert_eq!(b.ids[0], [101, 1037, 2158, 20323, 102, 0, 0, 0]);
    assert_eq!(b.ids[1], [101, 1996, 4937, 2938, 2006, 1996, 13523, 102]);
    assert_eq!(
        b.padding[0],
        [false, false, false, false, false, true, true, true]
    );
    let pair = tok
        .encode_pair("one two three four", "five six seven")
        .unwrap();
    // Python: tok("one two three four", "five six seven", truncation=True, max_length=8)
    assert_eq!(pair.ids, [101, 2028, 2048, 2093, 102, 2274, 2416, 102]);
    assert_eq!(pair.type_ids, [0, 0, 0, 0, 0, 1, 1, 1]);
    assert!(BertTokenizer::from_file(minilm_dir().join("tokenizer.json"), 2).is_err());
}

/// Cosine similarity of two vectors.
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

#[test]
fn sentence_embeddings_match_sentence_transformers() {
    let device = test_device();
    let e = expected();
    let model = SentenceEncoder::from_pretrained(minilm_dir(), &device).unwrap();
    assert!(model.normalize, "modules.json lists Normalize");
    assert_eq!(model.tokenizer.max_len(), 256, "sentence_bert_config.json");
    let sentences: Vec<&str> = e.sentences.iter().map(String::as_str).collect();
    // Two batches of different padding, to check that padding does not leak.
    let got = floats(model.encode(&sentences, 4, &device).unwrap());
    let h = 384;
    assert_eq!(got.len(), sentences.len() * h);
    for (i, want) in e.embeddings.iter().enumerate() {
        let row = &got[i * h..(i + 1) * h];
        let cos = cosine(row, want);
        let diff = row
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            cos >= 0.9999 && diff <= 1e-4,
            "sentence {i} ({:?}): cosine {cos}, max abs diff {diff}",
            sentences[i]
        );
    }
    // Related sentences are closer than unrelated ones, as the model is known for.
    let row = |i: usize| &got[i * h..(i + 1) * h];
    assert!(cosine(row(0), row(1)) > cosine(row(0), row(2)) + 0.2);
}

/// Quantized through Burn, the real MiniLM keeps its embeddings: at 8 and 4 bits in blocks
/// of 32, each sentence's cosine to sentence-transformers' f32 embedding stays above the
/// bars the zoo states (0.995 at 8 bits, 0.95 at 4); one scale per tensor at 8 bits and
/// 4 bits per value fall further (the controls that quantization happened and that
/// blocks matter).
#[test]
fn quantized_embeddings_keep_their_cosine_to_sentence_transformers() {
    use zoo_core::{QuantBits, QuantOptions};
    use zoo_device::BackendName;
    let device = test_device();
    let backend = zoo_device::testing::test_backend();
    let e = expected();
    let sentences: Vec<&str> = e.sentences.iter().map(String::as_str).collect();
    let cosines = |options: QuantOptions| -> Option<Vec<f32>> {
        let encoder = SentenceEncoder::from_pretrained(minilm_dir(), &device).unwrap();
        let (encoder, report) = match encoder.quantize(&options, &device) {
            Ok(done) => done,
            Err(err) => {
                let unsupported = matches!(backend, BackendName::Tch | BackendName::TchCuda)
                    || (backend == BackendName::NdArray && options.bits == QuantBits::Q4);
                assert!(unsupported, "{err}");
                assert!(err.to_string().contains("not supported on"), "{err}");
                return None;
            }
        };
        assert_eq!(
            (report.tensors, report.kept),
            (36, 0),
            "6 layers of 6 linear weights"
        );
        let got = floats(encoder.encode(&sentences, 4, &device).unwrap());
        Some(
            e.embeddings
                .iter()
                .enumerate()
                .map(|(i, want)| {
                    let row = &got[i * want.len()..(i + 1) * want.len()];
                    let dot: f32 = row.iter().zip(want).map(|(a, b)| a * b).sum();
                    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    dot / (norm(row) * norm(want))
                })
                .collect(),
        )
    };
    let min = |c: &[f32]| c.iter().copied().fold(1f32, f32::min);
    let Some(q8) = cosines(QuantOptions::per_tensor(QuantBits::Q8)) else {
        return;
    };
    let q8b = cosines(QuantOptions::per_block(QuantBits::Q8, 32)).unwrap();
    eprintln!(
        "MiniLM cosine to f32: q8 {:.5}, q8/32 {:.5}",
        min(&q8),
        min(&q8b)
    );
    // One scale per tensor loses to BERT's outlier weights (0.9587 measured); one per 32
    // values keeps the bar, which is why blocks of 32 are the CLI's default.
    assert!(min(&q8b) >= 0.995, "{q8b:?}");
    assert!(min(&q8) >= 0.95 && min(&q8) < min(&q8b), "{q8:?}");
    if let Some(q4) = cosines(QuantOptions::per_block(QuantBits::Q4, 32)) {
        eprintln!("MiniLM cosine to f32: q4/32 {:.5}", min(&q4));
        assert!(min(&q4) >= 0.95 && min(&q4) < min(&q8b), "{q4:?}");
    }
}
