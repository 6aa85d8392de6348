//! Marian's (opus-mt's) tokenizer: two SentencePiece models, `source.spm` for the texts
//! to translate and `target.spm` for the translations, whose pieces `vocab.json` maps to
//! the model's ids. A piece that `vocab.json` lacks is `<unk>`; a language code that
//! starts the text (`>>fra<<`) is a token of its own; `</s>` ends each text. Decoding
//! joins the pieces of `vocab.json`, U+2581 as spaces, as `MarianTokenizer` does.

use std::collections::HashMap;
use std::path::Path;

use serde_json::json;

use super::spm::{Flavour, SpmModel, added};
use super::{Result, tok_err};

/// The two sides and their shared vocabulary.
#[derive(Clone)]
pub(crate) struct Marian {
    source: tokenizers::Tokenizer,
    target: tokenizers::Tokenizer,
    ids: HashMap<String, u32>,
    unk: u32,
    eos: u32,
}

/// Which SentencePiece model a text is cut with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Source,
    Target,
}

impl Marian {
    /// Reads `dir`'s `source.spm`, `target.spm` (the source's when absent) and
    /// `vocab.json`, and returns the sides and the tokenizer that decodes the ids.
    ///
    /// # Errors
    /// A missing or malformed file, named; a `vocab.json` without `<unk>` or `</s>`.
    pub(crate) fn read(dir: &Path) -> Result<(Self, tokenizers::Tokenizer)> {
        let source_path = dir.join("source.spm");
        let target_path = dir.join("target.spm");
        let vocab_path = dir.join("vocab.json");
        if dir.join("target_vocab.json").is_file() {
            return Err(tok_err(
                &dir.display().to_string(),
                "a Marian folder with separate vocabularies (target_vocab.json) is not supported",
            ));
        }
        let spm = |path: &Path| -> Result<tokenizers::Tokenizer> {
            let plain = Flavour::SentencePiece {
                add_bos: false,
                add_eos: false,
            };
            SpmModel::read(path)?.tokenizer(plain)
        };
        let source = spm(&source_path)?;
        let target = if target_path.is_file() {
            spm(&target_path)?
        } else {
            source.clone()
        };
        let what = vocab_path.display().to_string();
        let text = std::fs::read_to_string(&vocab_path).map_err(|e| tok_err(&what, e))?;
        let ids: HashMap<String, u32> = serde_json::from_str(&text)
            .map_err(|e| tok_err(&what, format!("not a JSON object of pieces to ids: {e}")))?;
        let id = |token: &str| {
            ids.get(token)
                .copied()
                .ok_or_else(|| tok_err(&what, format!("it has no {token} token")))
        };
        let (unk, eos) = (id("<unk>")?, id("</s>")?);
        let mut by_id: Vec<(&String, u32)> = ids.iter().map(|(p, &i)| (p, i)).collect();
        by_id.sort_by_key(|&(_, i)| i);
        if let Some(w) = by_id.windows(2).find(|w| w[0].1 == w[1].1) {
            return Err(tok_err(
                &what,
                format!("{:?} and {:?} share the id {}", w[0].0, w[1].0, w[0].1),
            ));
        }
        let specials: Vec<(usize, String)> = ["</s>", "<unk>", "<pad>"]
            .iter()
            .filter_map(|t| ids.get(*t).map(|&i| (i as usize, (*t).to_string())))
            .collect();
        let decoder = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added(&specials, true),
            "normalizer": null,
            "pre_tokenizer": null,
            "post_processor": null,
            "decoder": {"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "always", "split": true},
            "model": {"type": "WordLevel", "vocab": ids, "unk_token": "<unk>"},
        })
        .to_string();
        let decoder = super::guarded(&what, || decoder.parse::<tokenizers::Tokenizer>())?;
        let marian = Self {
            source,
            target,
            ids,
            unk,
            eos,
        };
        Ok((marian, decoder))
    }

    /// The ids of `text` cut by `side`'s model, `</s>` appended when `add_eos`.
    ///
    /// # Errors
    /// What the tokenizer rejects.
    pub(crate) fn encode(&self, side: Side, text: &str, add_eos: bool) -> Result<Vec<usize>> {
        let mut ids = Vec::new();
        let mut text = text;
        if let Some(rest) = text.strip_prefix(">>")
            && let Some(end) = rest.find("<<")
        {
            let code = &text[..end + 4];
            ids.push(self.ids.get(code).copied().unwrap_or(self.unk));
            text = &text[end + 4..];
        }
        let model = match side {
            Side::Source => &self.source,
            Side::Target => &self.target,
        };
        let enc = super::guarded("encode", || model.encode(text, false))?;
        ids.extend(
            enc.get_tokens()
                .iter()
                .map(|piece| self.ids.get(piece).copied().unwrap_or(self.unk)),
        );
        if add_eos {
            ids.push(self.eos);
        }
        Ok(ids.into_iter().map(|id| id as usize).collect())
    }
}
