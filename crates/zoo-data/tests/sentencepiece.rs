//! Folders that ship only SentencePiece files tokenize as `transformers` tokenizes them:
//! T5's `spiece.model` (Unigram, NFKC charsmap), a Llama-style `tokenizer.model` (BPE with
//! byte fallback), and Marian's `source.spm` / `target.spm` with `vocab.json`. The ids and
//! decodings come from `AutoTokenizer` and `MarianTokenizer` (`xtask/fixtures/spm.py`), on
//! texts with accents, digits, punctuation, characters the models never saw, repeated
//! spaces, tabs and newlines.

use std::path::{Path, PathBuf};

use serde_json::Value;
use zoo_data::LmTokenizer;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/spm")
        .join(name)
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(value: &Value) -> Vec<usize> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| usize::try_from(v.as_u64().unwrap()).unwrap())
        .collect()
}

/// Every case's ids equal transformers', and decoding them gives transformers' text.
fn check_cases(name: &str, tok: &LmTokenizer, cases: &Value) -> usize {
    let cases = cases.as_array().unwrap();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        assert_eq!(tok.encode(text).unwrap(), want, "{name}: ids of {text:?}");
        let decoded = case["decoded"].as_str().unwrap();
        assert_eq!(
            tok.decode(&want).unwrap(),
            decoded,
            "{name}: decoding {text:?}"
        );
    }
    cases.len()
}

#[test]
fn t5_and_llama_sentencepiece_models_tokenize_as_transformers_converts_them() {
    for name in ["t5-unigram", "llama-bpe"] {
        let tok = LmTokenizer::from_pretrained(fixture(name)).unwrap();
        let e = expected(name);
        assert_eq!(check_cases(name, &tok, &e["cases"]), 7, "{name}");
    }
    // What the conversion adds on top of the pieces: T5's 100 sentinels after its 300
    // pieces (<extra_id_0> last), its </s> after each text, and Llama's byte fallback
    // for a character no piece holds (U+2603, as its three UTF-8 bytes).
    let t5 = LmTokenizer::from_pretrained(fixture("t5-unigram")).unwrap();
    assert_eq!(t5.vocab_size(), 400);
    assert_eq!(t5.token_id("<extra_id_0>"), Some(399));
    assert_eq!(t5.token_id("<extra_id_99>"), Some(300));
    let sentinel = t5.encode("a <extra_id_0> b").unwrap();
    assert!(
        sentinel.contains(&399) && sentinel.last() == Some(&1),
        "{sentinel:?}"
    );
    let llama = LmTokenizer::from_pretrained(fixture("llama-bpe")).unwrap();
    let snow: Vec<usize> = [0xE2, 0x98, 0x83]
        .iter()
        .map(|b| llama.token_id(&format!("<0x{b:02X}>")).unwrap())
        .collect();
    let ids = llama.encode_plain("\u{2603}").unwrap();
    assert!(ids.ends_with(&snow), "{ids:?}");
    assert_eq!(llama.decode(&ids).unwrap(), "\u{2603}");
}

/// The same spiece.model read without T5's config is converted with the model's own
/// settings: no </s> appended and spaces kept as the model keeps them, so the ids differ
/// from T5's. The flavour, not only the file, decides the ids.
#[test]
fn without_t5s_config_the_same_model_gives_other_ids() {
    let dir = std::env::temp_dir().join(format!("zoo-spm-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        fixture("t5-unigram").join("spiece.model"),
        dir.join("spiece.model"),
    )
    .unwrap();
    let bare = LmTokenizer::from_pretrained(&dir).unwrap();
    let t5 = LmTokenizer::from_pretrained(fixture("t5-unigram")).unwrap();
    let text = "ROMEO: Wherefore art thou, Romeo?";
    let (b, t) = (bare.encode(text).unwrap(), t5.encode(text).unwrap());
    assert_ne!(b, t);
    assert_eq!(t.last(), Some(&1), "T5 appends </s>");
    assert_ne!(b.last(), Some(&1));
    assert_eq!(bare.vocab_size(), 300, "no sentinels");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn marian_folders_map_both_sides_through_vocab_json() {
    let tok = LmTokenizer::from_pretrained(fixture("marian")).unwrap();
    let e = expected("marian");
    // The seven texts, then one led by a language code.
    assert_eq!(check_cases("marian", &tok, &e["cases"]), 8);
    for case in e["target_cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            tok.encode_target(text).unwrap(),
            ids(&case["ids"]),
            "target {text:?}"
        );
    }
    // The sides differ: the target model, trained on lowercased text, cuts otherwise.
    let text = e["target_cases"][0]["text"].as_str().unwrap();
    assert_ne!(tok.encode(text).unwrap(), tok.encode_target(text).unwrap());
    let vocab: serde_json::Map<String, Value> = serde_json::from_str(
        &std::fs::read_to_string(fixture("marian").join("vocab.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(tok.vocab_size(), vocab.len());
    assert_eq!(tok.token_id(">>fra<<"), Some(2));
    let translate = &e["translate"];
    assert_eq!(
        tok.encode(translate["text"].as_str().unwrap()).unwrap(),
        ids(&translate["source_ids"])
    );
    assert_eq!(
        tok.decode(&ids(&translate["beam_ids"])).unwrap(),
        translate["beam_text"].as_str().unwrap()
    );
}

#[test]
fn broken_sentencepiece_folders_are_named_errors() {
    let dir = std::env::temp_dir().join(format!("zoo-spm-broken-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let err = |dir: &Path| LmTokenizer::from_pretrained(dir).unwrap_err().to_string();
    let e = err(&dir);
    assert!(
        e.contains("no tokenizer: neither tokenizer.json nor a SentencePiece model"),
        "{e}"
    );
    std::fs::write(dir.join("tokenizer.model"), b"this is not a protobuf").unwrap();
    let e = err(&dir);
    assert!(
        e.contains("tokenizer.model: not a SentencePiece model (protobuf)"),
        "{e}"
    );
    std::fs::remove_file(dir.join("tokenizer.model")).unwrap();
    // Marian: source.spm without vocab.json, then a vocab.json without <unk>.
    std::fs::copy(fixture("marian").join("source.spm"), dir.join("source.spm")).unwrap();
    let e = err(&dir);
    assert!(e.contains("vocab.json: "), "{e}");
    std::fs::write(dir.join("vocab.json"), r#"{"</s>": 0, "a": 1}"#).unwrap();
    let e = err(&dir);
    assert!(e.ends_with("vocab.json: it has no <unk> token"), "{e}");
    std::fs::write(dir.join("vocab.json"), r#"{"</s>": 0, "<unk>": 1, "a": 1}"#).unwrap();
    let e = err(&dir);
    assert!(e.contains("share the id 1"), "{e}");
    // And a good vocab.json loads.
    std::fs::write(dir.join("vocab.json"), r#"{"</s>": 0, "<unk>": 1, "a": 2}"#).unwrap();
    let tok = LmTokenizer::from_pretrained(&dir).unwrap();
    assert_eq!(tok.vocab_size(), 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
