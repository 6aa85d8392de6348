//! SentencePiece model files (`spiece.model`, `tokenizer.model`, Marian's `source.spm` and
//! `target.spm`) turned into `tokenizers` tokenizers, as `transformers` converts them when
//! a folder has no `tokenizer.json`:
//! - [`Flavour::SentencePiece`]: the model's own settings, so that it encodes as the
//!   SentencePiece library does (its normalizer spec: the charsmap, extra spaces removed,
//!   spaces escaped as U+2581, the dummy prefix; BPE merges ranked by piece score;
//!   user-defined pieces kept whole). This is what `AutoTokenizer` builds for a model
//!   type with no class of its own (Llama's `tokenizer.model` among them);
//! - [`Flavour::T5`]: T5's tokenizer class, which splits on whitespace before the
//!   SentencePiece model, appends `</s>`, and adds the sentinel `<extra_id_N>` tokens.
//!
//! The file is read as the protobuf it is, through `prost`; the tokenizer is assembled as
//! a `tokenizer.json` would describe it and parsed by the `tokenizers` crate, which runs
//! every algorithm.

use std::path::Path;

use prost::Message;
use serde_json::{Value, json};

use super::{Result, tok_err};

/// The SentencePiece model protobuf (`sentencepiece_model.proto`): only the fields the
/// conversion reads. Unknown fields are skipped, as protobuf does.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ModelProto {
        #[prost(message, repeated, tag = "1")]
        pub pieces: Vec<Piece>,
        #[prost(message, optional, tag = "2")]
        pub trainer_spec: Option<TrainerSpec>,
        #[prost(message, optional, tag = "3")]
        pub normalizer_spec: Option<NormalizerSpec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Piece {
        #[prost(string, optional, tag = "1")]
        pub piece: Option<String>,
        #[prost(float, optional, tag = "2")]
        pub score: Option<f32>,
        /// NORMAL 1 (the default), UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.
        #[prost(int32, optional, tag = "3")]
        pub kind: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TrainerSpec {
        /// UNIGRAM 1 (the default), BPE 2, WORD 3, CHAR 4.
        #[prost(int32, optional, tag = "3")]
        pub model_type: Option<i32>,
        #[prost(bool, optional, tag = "24")]
        pub treat_whitespace_as_suffix: Option<bool>,
        #[prost(bool, optional, tag = "35")]
        pub byte_fallback: Option<bool>,
        #[prost(int32, optional, tag = "40")]
        pub unk_id: Option<i32>,
        #[prost(string, optional, tag = "45")]
        pub unk_piece: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct NormalizerSpec {
        #[prost(bytes = "vec", optional, tag = "2")]
        pub precompiled_charsmap: Option<Vec<u8>>,
        #[prost(bool, optional, tag = "3")]
        pub add_dummy_prefix: Option<bool>,
        #[prost(bool, optional, tag = "4")]
        pub remove_extra_whitespaces: Option<bool>,
        #[prost(bool, optional, tag = "5")]
        pub escape_whitespaces: Option<bool>,
    }
}

const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const SPACE: &str = "\u{2581}";

/// A SentencePiece model, read and checked.
#[derive(Debug, Clone)]
pub(crate) struct SpmModel {
    /// Each piece, its score and its type, in id order.
    pieces: Vec<(String, f32, i32)>,
    bpe: bool,
    byte_fallback: bool,
    unk_id: usize,
    charsmap: Vec<u8>,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
}

/// How a SentencePiece model becomes a tokenizer: see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    /// The model's own settings; `<s>` before and `</s>` after each text when asked
    /// (`add_bos_token` and `add_eos_token` in `tokenizer_config.json`).
    SentencePiece { add_bos: bool, add_eos: bool },
    /// T5's class, with this many sentinel tokens (`extra_ids`, 100 by default).
    T5 { extra_ids: usize },
}

impl SpmModel {
    /// Reads a `.model` / `.spm` file.
    ///
    /// # Errors
    /// A missing file, bytes that are not a SentencePiece model, or one that the
    /// conversion cannot represent (a word or char model, suffix whitespace, an unknown
    /// piece out of range), each naming the file.
    pub(crate) fn read(path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| tok_err(&what, e))?;
        Self::from_bytes(&bytes).map_err(|e| tok_err(&what, e))
    }

    fn from_bytes(bytes: &[u8]) -> std::result::Result<Self, String> {
        let model = proto::ModelProto::decode(bytes)
            .map_err(|e| format!("not a SentencePiece model (protobuf): {e}"))?;
        let trainer = model.trainer_spec.unwrap_or_default();
        let norm = model.normalizer_spec.unwrap_or_default();
        if model.pieces.is_empty() {
            return Err("not a SentencePiece model: it has no pieces".into());
        }
        let mut seen = std::collections::HashSet::new();
        let mut pieces = Vec::with_capacity(model.pieces.len());
        for (id, p) in model.pieces.into_iter().enumerate() {
            let piece = p.piece.unwrap_or_default();
            if piece.is_empty() {
                return Err(format!("piece {id} is empty"));
            }
            if !seen.insert(piece.clone()) {
                return Err(format!("piece {piece:?} (id {id}) appears twice"));
            }
            pieces.push((piece, p.score.unwrap_or(0.0), p.kind.unwrap_or(NORMAL)));
        }
        let bpe =
            match trainer.model_type.unwrap_or(1) {
                1 => false,
                2 => true,
                3 => return Err(
                    "its model type is WORD, which only UNIGRAM and BPE models are converted from"
                        .into(),
                ),
                4 => return Err(
                    "its model type is CHAR, which only UNIGRAM and BPE models are converted from"
                        .into(),
                ),
                other => return Err(format!("unknown model type {other}")),
            };
        if trainer.treat_whitespace_as_suffix.unwrap_or(false) {
            return Err(
                "it treats whitespace as a suffix, which the conversion does not support".into(),
            );
        }
        let unk = trainer.unk_id.unwrap_or(0);
        let unk_id = usize::try_from(unk)
            .ok()
            .filter(|&id| id < pieces.len())
            .ok_or_else(|| format!("unk_id {unk} is out of range for {} pieces", pieces.len()))?;
        if let Some(name) = trainer.unk_piece.as_deref()
            && pieces[unk_id].0 != name
        {
            return Err(format!(
                "unk_id {unk_id} holds {:?}, not its unk_piece {name:?}",
                pieces[unk_id].0
            ));
        }
        Ok(Self {
            pieces,
            bpe,
            byte_fallback: trainer.byte_fallback.unwrap_or(false),
            unk_id,
            charsmap: norm.precompiled_charsmap.unwrap_or_default(),
            add_dummy_prefix: norm.add_dummy_prefix.unwrap_or(true),
            remove_extra_whitespaces: norm.remove_extra_whitespaces.unwrap_or(true),
            escape_whitespaces: norm.escape_whitespaces.unwrap_or(true),
        })
    }

    /// The pieces, in id order.
    pub(crate) fn pieces(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().map(|(piece, _, _)| piece.as_str())
    }

    /// The id of `piece`, if the model has it.
    fn id(&self, piece: &str) -> Option<usize> {
        self.pieces.iter().position(|(p, _, _)| p == piece)
    }

    /// The tokenizer of this model in `flavour`.
    ///
    /// # Errors
    /// What the `tokenizers` crate refuses in the assembled description.
    pub(crate) fn tokenizer(&self, flavour: Flavour) -> Result<tokenizers::Tokenizer> {
        let description = match flavour {
            Flavour::SentencePiece { add_bos, add_eos } => self.sentencepiece(add_bos, add_eos),
            Flavour::T5 { extra_ids } => self.t5(extra_ids),
        };
        let text = description.to_string();
        super::guarded("SentencePiece model", || {
            text.parse::<tokenizers::Tokenizer>()
        })
    }

    fn charsmap(&self) -> Option<Value> {
        use base64::Engine as _;
        (!self.charsmap.is_empty()).then(|| {
            json!({
                "type": "Precompiled",
                "precompiled_charsmap": base64::engine::general_purpose::STANDARD.encode(&self.charsmap),
            })
        })
    }

    /// The model as SentencePiece runs it.
    fn sentencepiece(&self, add_bos: bool, add_eos: bool) -> Value {
        let user_defined: Vec<&str> = self
            .pieces
            .iter()
            .filter(|(_, _, kind)| *kind == USER_DEFINED)
            .map(|(p, _, _)| p.as_str())
            .collect();
        let model = if self.bpe {
            self.bpe_model(!user_defined.is_empty())
        } else {
            self.unigram_model(Vec::new())
        };
        // The normalizer spec, in SentencePiece's order; only spaces count as the
        // whitespace it trims and squeezes.
        let mut normalizers: Vec<Value> = self.charsmap().into_iter().collect();
        if self.remove_extra_whitespaces {
            normalizers.push(replace_regex(r"\A +| +\z", ""));
            normalizers.push(replace_regex(" {2,}", " "));
        }
        if self.escape_whitespaces {
            normalizers.push(replace_string(" ", SPACE));
        }
        if self.add_dummy_prefix {
            // The Metaspace pre-tokenizer adds no prefix to a text that already starts
            // with U+2581; SentencePiece adds one regardless.
            normalizers.push(replace_regex(
                &format!(r"\A{SPACE}"),
                &format!("{SPACE}{SPACE}"),
            ));
        }
        let mut pre = Vec::new();
        if self.add_dummy_prefix {
            pre.push(metaspace(false));
        }
        if !user_defined.is_empty() {
            // SentencePiece emits a user-defined piece whole and never merges across it.
            let mut sorted = user_defined.clone();
            sorted.sort_by_key(|p| std::cmp::Reverse(p.chars().count()));
            let pattern = sorted
                .iter()
                .map(|p| regex::escape(p))
                .collect::<Vec<_>>()
                .join("|");
            pre.push(json!({
                "type": "Split",
                "pattern": {"Regex": pattern},
                "behavior": "Isolated",
                "invert": false,
            }));
        }
        let mut decoders = vec![json!({
            "type": "Replace", "pattern": {"String": SPACE}, "content": " ",
        })];
        if self.byte_fallback {
            decoders.push(json!({"type": "ByteFallback"}));
        }
        if self.add_dummy_prefix {
            decoders.push(json!({"type": "Fuse"}));
            decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
        } else if self.byte_fallback {
            decoders.push(json!({"type": "Fuse"}));
        }
        let specials = self.special_pieces();
        let find = |kind: &str| {
            specials
                .iter()
                .find(|(_, piece)| piece.as_str() == kind)
                .map(|(id, piece)| (piece.clone(), *id))
        };
        let bos = add_bos.then(|| find("<s>")).flatten();
        let eos = add_eos.then(|| find("</s>")).flatten();
        let post = (bos.is_some() || eos.is_some()).then(|| template(bos, eos));
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added(&specials, true),
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": if pre.is_empty() { Value::Null } else { json!({"type": "Sequence", "pretokenizers": pre}) },
            "post_processor": post,
            "decoder": {"type": "Sequence", "decoders": decoders},
            "model": model,
        })
    }

    /// T5's tokenizer class over the model: whitespace split, then the model; `</s>` after
    /// each sequence; `extra_ids` sentinels after the pieces, `<extra_id_0>` last.
    fn t5(&self, extra_ids: usize) -> Value {
        let has_sentinels = self.pieces().any(|p| p.starts_with("<extra_id_"));
        let sentinels: Vec<String> = if has_sentinels {
            Vec::new()
        } else {
            (0..extra_ids)
                .rev()
                .map(|i| format!("<extra_id_{i}>"))
                .collect()
        };
        let mut specials = self.special_pieces();
        let first = self.pieces.len();
        specials.extend(
            sentinels
                .iter()
                .enumerate()
                .map(|(i, s)| (first + i, s.clone())),
        );
        let mut added_tokens = added(&specials, true);
        // Pieces the model keeps whole are added tokens too, though not special ones.
        let user: Vec<(usize, String)> = self
            .pieces
            .iter()
            .enumerate()
            .filter(|(_, (_, _, kind))| *kind == USER_DEFINED)
            .map(|(id, (p, _, _))| (id, p.clone()))
            .collect();
        added_tokens.extend(added(&user, false));
        let eos = self.id("</s>").map(|id| ("</s>".to_string(), id));
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added_tokens,
            "normalizer": self.charsmap(),
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace(true)]},
            "post_processor": eos.is_some().then(|| template(None, eos)),
            "decoder": metaspace(true),
            "model": self.unigram_model(sentinels),
        })
    }

    /// The unknown and control pieces, with their ids: the tokens matched whole in text
    /// and skipped when decoding.
    fn special_pieces(&self) -> Vec<(usize, String)> {
        self.pieces
            .iter()
            .enumerate()
            .filter(|(_, (_, _, kind))| matches!(*kind, UNKNOWN | CONTROL))
            .map(|(id, (p, _, _))| (id, p.clone()))
            .collect()
    }

    fn unigram_model(&self, extra: Vec<String>) -> Value {
        let vocab: Vec<Value> = self
            .pieces
            .iter()
            .map(|(p, score, _)| json!([p, f64::from(*score)]))
            .chain(extra.into_iter().map(|p| json!([p, 0.0])))
            .collect();
        json!({
            "type": "Unigram",
            "unk_id": self.unk_id,
            "vocab": vocab,
            "byte_fallback": self.byte_fallback,
        })
    }

    /// BPE with the merges SentencePiece implies: each normal piece that two normal
    /// pieces join to make, ranked by the joined piece's score (then its id).
    fn bpe_model(&self, ignore_merges: bool) -> Value {
        let normal: std::collections::HashMap<&str, (f32, usize)> = self
            .pieces
            .iter()
            .enumerate()
            .filter(|(_, (_, _, kind))| *kind == NORMAL)
            .map(|(id, (p, score, _))| (p.as_str(), (*score, id)))
            .collect();
        let mut ranked: Vec<(f32, usize, &str, &str)> = Vec::new();
        for (&piece, &(score, id)) in &normal {
            for (split, _) in piece.char_indices().skip(1) {
                let (left, right) = piece.split_at(split);
                if normal.contains_key(left) && normal.contains_key(right) {
                    ranked.push((score, id, left, right));
                }
            }
        }
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(b.2))
                .then(a.3.cmp(b.3))
        });
        let merges: Vec<Value> = ranked.iter().map(|(_, _, l, r)| json!([l, r])).collect();
        let vocab: serde_json::Map<String, Value> = self
            .pieces
            .iter()
            .enumerate()
            .map(|(id, (p, _, _))| (p.clone(), json!(id)))
            .collect();
        json!({
            "type": "BPE",
            "dropout": null,
            "unk_token": self.pieces[self.unk_id].0,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": true,
            "byte_fallback": self.byte_fallback,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": merges,
        })
    }
}

fn replace_regex(pattern: &str, content: &str) -> Value {
    json!({"type": "Replace", "pattern": {"Regex": pattern}, "content": content})
}

fn replace_string(pattern: &str, content: &str) -> Value {
    json!({"type": "Replace", "pattern": {"String": pattern}, "content": content})
}

/// U+2581 for spaces, prepended to the text.
fn metaspace(split: bool) -> Value {
    json!({"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": split})
}

/// `tokens` as `tokenizer.json`'s added tokens, matched on the raw text.
pub(crate) fn added(tokens: &[(usize, String)], special: bool) -> Vec<Value> {
    tokens
        .iter()
        .map(|(id, content)| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special,
            })
        })
        .collect()
}

/// A post-processor that puts `bos` before and `eos` after each sequence.
fn template(bos: Option<(String, usize)>, eos: Option<(String, usize)>) -> Value {
    let special = |(token, _): &(String, usize), type_id: u32| json!({"SpecialToken": {"id": token, "type_id": type_id}});
    let sequence = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    let wrap = |id: &str, type_id: u32| {
        let mut out = Vec::new();
        out.extend(bos.iter().map(|b| special(b, type_id)));
        out.push(sequence(id, type_id));
        out.extend(eos.iter().map(|e| special(e, type_id)));
        out
    };
    let single = wrap("A", 0);
    let pair = [wrap("A", 0), wrap("B", 1)].concat();
    let tokens: serde_json::Map<String, Value> = bos
        .iter()
        .chain(eos.iter())
        .map(|(token, id)| {
            (
                token.clone(),
                json!({"id": token, "ids": [id], "tokens": [token]}),
            )
        })
        .collect();
    json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": tokens})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(piece: &str, score: f32, kind: i32) -> proto::Piece {
        proto::Piece {
            piece: Some(piece.into()),
            score: Some(score),
            kind: Some(kind),
        }
    }

    fn encoded(model: proto::ModelProto) -> Vec<u8> {
        model.encode_to_vec()
    }

    #[test]
    fn files_that_are_not_models_are_named_errors() {
        let e = SpmModel::from_bytes(b"\xff\xff\xff").unwrap_err();
        assert!(e.starts_with("not a SentencePiece model (protobuf)"), "{e}");
        let empty = SpmModel::from_bytes(&[]).unwrap_err();
        assert_eq!(empty, "not a SentencePiece model: it has no pieces");
        let pieces = vec![piece("<unk>", 0.0, UNKNOWN), piece("a", -1.0, NORMAL)];
        let word = proto::ModelProto {
            pieces: pieces.clone(),
            trainer_spec: Some(proto::TrainerSpec {
                model_type: Some(3),
                ..Default::default()
            }),
            normalizer_spec: None,
        };
        let e = SpmModel::from_bytes(&encoded(word)).unwrap_err();
        assert!(e.contains("WORD"), "{e}");
        let unk = proto::ModelProto {
            pieces: pieces.clone(),
            trainer_spec: Some(proto::TrainerSpec {
                unk_id: Some(7),
                ..Default::default()
            }),
            normalizer_spec: None,
        };
        let e = SpmModel::from_bytes(&encoded(unk)).unwrap_err();
        assert_eq!(e, "unk_id 7 is out of range for 2 pieces");
        let twice = proto::ModelProto {
            pieces: vec![
                piece("<unk>", 0.0, UNKNOWN),
                piece("a", -1.0, NORMAL),
                piece("a", -2.0, NORMAL),
            ],
            trainer_spec: None,
            normalizer_spec: None,
        };
        let e = SpmModel::from_bytes(&encoded(twice)).unwrap_err();
        assert_eq!(e, "piece \"a\" (id 2) appears twice");
        // A good one, for contrast: the defaults (unigram, unk 0) apply.
        let good = proto::ModelProto {
            pieces,
            trainer_spec: None,
            normalizer_spec: None,
        };
        let model = SpmModel::from_bytes(&encoded(good)).unwrap();
        assert!(!model.bpe && model.unk_id == 0 && model.add_dummy_prefix);
    }

    /// The BPE merges rank by the joined piece's score, whatever the ids' order.
    #[test]
    fn bpe_merges_follow_the_scores_of_the_pieces_they_make() {
        let model = SpmModel {
            pieces: vec![
                ("<unk>".into(), 0.0, UNKNOWN),
                ("a".into(), -1.0, NORMAL),
                ("b".into(), -1.0, NORMAL),
                ("ab".into(), -5.0, NORMAL),
                ("ba".into(), -2.0, NORMAL),
                ("aba".into(), -3.0, NORMAL),
            ],
            bpe: true,
            byte_fallback: false,
            unk_id: 0,
            charsmap: Vec::new(),
            add_dummy_prefix: false,
            remove_extra_whitespaces: false,
            escape_whitespaces: false,
        };
        let merges = model.bpe_model(false)["merges"].clone();
        assert_eq!(
            merges,
            json!([["b", "a"], ["a", "ba"], ["ab", "a"], ["a", "b"]])
        );
        let tok = model
            .tokenizer(Flavour::SentencePiece {
                add_bos: false,
                add_eos: false,
            })
            .unwrap();
        let ids = tok.encode("abab", false).unwrap().get_ids().to_vec();
        // "ba" merges first (score -2): a [ba] b, then "a"+"ba" (-3): [aba] b.
        assert_eq!(ids, [5, 2]);
    }
}
