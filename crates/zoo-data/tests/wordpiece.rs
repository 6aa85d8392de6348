//! A WordPiece vocabulary trained on Shakespeare through the `tokenizers` crate: BERT's
//! special tokens first, common words whole, rare words in pieces, and a saved
//! `tokenizer.json` that loads back to the same ids.

use std::path::Path;

use zoo_data::BertTokenizer;
use zoo_data::tokenizer::SPECIAL_TOKENS;

fn plays() -> Vec<String> {
    let globe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/shakespeare/globe");
    ["hamlet.txt", "macbeth.txt", "lear.txt"]
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(globe.join(f))
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_wordpiece_vocabulary_trains_on_shakespeare() {
    let lines = plays();
    let tok = BertTokenizer::train(lines.iter(), 2000, 2, true, 128).unwrap();
    for (id, token) in SPECIAL_TOKENS.iter().enumerate() {
        assert_eq!(tok.token_id(token), Some(id as u32), "{token}");
    }
    let v = tok.vocab_size();
    assert!(v > 1500 && v <= 2000, "vocab size {v}");
    for word in ["the", "and", "king", "lord", "hamlet"] {
        assert!(tok.token_id(word).is_some(), "{word} is one token");
    }
    let e = tok
        .encode("To be, or not to be: that is the question.")
        .unwrap();
    assert_eq!(e.tokens[..4], ["[CLS]", "to", "be", ","]);
    assert_eq!(e.tokens.last().map(String::as_str), Some("[SEP]"));
    assert_eq!(e.special.iter().filter(|s| **s).count(), 2);
    // A word the plays never use falls into pieces.
    let e = tok.encode("Photosynthesis").unwrap();
    let pieces = &e.tokens[1..e.tokens.len() - 1];
    assert!(pieces.len() > 1, "{pieces:?}");
    assert!(!pieces[0].starts_with("##") && pieces[1..].iter().all(|p| p.starts_with("##")));
    assert_eq!(tok.decode(&e.ids).unwrap(), "photosynthesis");

    let dir = std::env::temp_dir().join(format!("zoo-wordpiece-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    tok.save(&path).unwrap();
    let back = BertTokenizer::from_file(&path, 128).unwrap();
    let text = "My lord, the king is coming; O, what a noble mind is here o'erthrown!";
    assert_eq!(back.encode(text).unwrap(), tok.encode(text).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_tokenizer_input_is_an_error_naming_it() {
    let e = BertTokenizer::train(["a b c"].iter(), 3, 1, true, 16).unwrap_err();
    assert_eq!(e.to_string(), "tokenizer: vocab_size must be > 5, got 3");
    let e = BertTokenizer::from_vocab("/nonexistent/vocab.txt", true, 16).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tokenizer: /nonexistent/vocab.txt: no such file"
    );
    let e = BertTokenizer::from_pretrained("/nonexistent", 16).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tokenizer: /nonexistent has neither tokenizer.json nor vocab.txt"
    );
    let tok = BertTokenizer::train(["the cat sat on the mat"].iter(), 60, 1, true, 16).unwrap();
    assert!(tok.encode_batch(&[]).is_err());
}
