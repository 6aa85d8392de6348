//! The tokenizer of a checkpoint, through the `tokenizers` crate: its `tokenizer.json`
//! (GPT-2's byte-level BPE, Llama's SentencePiece-style BPE, or any other that file
//! describes), else its SentencePiece model (`spiece.model`, `tokenizer.model`), else
//! Marian's pair of them with `vocab.json`. Text streams out token by token through
//! [`TextStream`].

use std::path::Path;
use std::sync::Arc;

use super::marian::{Marian, Side};
use super::spm::{Flavour, SpmModel};
use super::{Result, tok_err};

/// A checkpoint's tokenizer.
#[derive(Clone)]
pub struct LmTokenizer {
    /// Encodes and decodes; for Marian, decodes only.
    inner: tokenizers::Tokenizer,
    /// Marian's two SentencePiece models, which encode.
    marian: Option<Arc<Marian>>,
}

impl std::fmt::Debug for LmTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmTokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl LmTokenizer {
    /// Loads a `tokenizer.json`.
    ///
    /// # Errors
    /// A missing or malformed file, named.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(tok_err(&path.display().to_string(), "no such file"));
        }
        let inner = super::read_tokenizer_json(path)?;
        Ok(Self {
            inner,
            marian: None,
        })
    }

    /// Loads the tokenizer of a checkpoint folder: `tokenizer.json`; else Marian's
    /// `source.spm`, `target.spm` and `vocab.json`; else `spiece.model` or
    /// `tokenizer.model`, converted as `transformers` converts them (T5's class for
    /// model types t5, mt5, umt5 and longt5, the SentencePiece model's own settings for
    /// the others, with `add_bos_token` / `add_eos_token` from `tokenizer_config.json`).
    ///
    /// # Errors
    /// A folder with none of these files, or a missing or malformed file, named.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let json = dir.join("tokenizer.json");
        if json.is_file() {
            return Self::from_file(json);
        }
        if dir.join("source.spm").is_file() {
            let (marian, inner) = Marian::read(dir)?;
            return Ok(Self {
                inner,
                marian: Some(Arc::new(marian)),
            });
        }
        let Some(model) = ["spiece.model", "tokenizer.model"]
            .iter()
            .map(|name| dir.join(name))
            .find(|path| path.is_file())
        else {
            return Err(tok_err(
                &dir.display().to_string(),
                "no tokenizer: neither tokenizer.json nor a SentencePiece model \
                 (spiece.model, tokenizer.model, or Marian's source.spm with vocab.json)",
            ));
        };
        let inner = SpmModel::read(&model)?.tokenizer(flavour(dir))?;
        Ok(Self {
            inner,
            marian: None,
        })
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The ids below `model_vocab` that this tokenizer has no token for: the rows a
    /// checkpoint pads its output layer with, which no text can hold.
    pub fn undecodable(&self, model_vocab: usize) -> Vec<usize> {
        (0..model_vocab)
            .filter(|&id| u32::try_from(id).map_or(true, |id| self.inner.id_to_token(id).is_none()))
            .collect()
    }

    /// The id of a token, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<usize> {
        self.inner.token_to_id(token).map(|id| id as usize)
    }

    /// Token ids of `text`, with the special tokens the tokenizer adds (Llama's `<s>`).
    ///
    /// # Errors
    /// What the tokenizer rejects.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        self.encode_ids(text, true)
    }

    /// Token ids of `text` with no special tokens added: for text that writes its own,
    /// as a rendered chat template does.
    ///
    /// # Errors
    /// What the tokenizer rejects.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<usize>> {
        self.encode_ids(text, false)
    }

    /// Token ids of `text` as a target: through Marian's `target.spm`; the same as
    /// [`Self::encode`] for every other tokenizer, whose two sides are one.
    ///
    /// # Errors
    /// What the tokenizer rejects.
    pub fn encode_target(&self, text: &str) -> Result<Vec<usize>> {
        match &self.marian {
            Some(marian) => marian.encode(Side::Target, text, true),
            None => self.encode(text),
        }
    }

    fn encode_ids(&self, text: &str, add_special_tokens: bool) -> Result<Vec<usize>> {
        if let Some(marian) = &self.marian {
            return marian.encode(Side::Source, text, add_special_tokens);
        }
        let enc = super::guarded("encode", || self.inner.encode(text, add_special_tokens))?;
        Ok(enc.get_ids().iter().map(|&id| id as usize).collect())
    }

    /// The text that `new` adds after `prompt`: the whole sequence decoded, less the
    /// prompt's own text (see [`TextStream::after`]).
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn continuation(&self, prompt: &[usize], new: &[usize]) -> Result<String> {
        let head = self.decode(prompt)?.len();
        let all = self.decode(&[prompt, new].concat())?;
        Ok(all.get(head..).unwrap_or_default().to_string())
    }

    /// `text`'s ids, tokens, character offsets and special-token mask, with the special
    /// tokens the tokenizer adds (`tokenizer.json` folders; not Marian's pair).
    ///
    /// # Errors
    /// What the tokenizer rejects; a Marian folder.
    pub fn encode_detailed(&self, text: &str) -> Result<DetailedEncoding> {
        if self.marian.is_some() {
            return Err(tok_err(
                "encode",
                "Marian's tokenizer gives ids only, not tokens and offsets",
            ));
        }
        let enc = super::guarded("encode", || self.inner.encode_char_offsets(text, true))?;
        Ok(DetailedEncoding {
            ids: enc.get_ids().iter().map(|&id| id as usize).collect(),
            tokens: enc.get_tokens().to_vec(),
            offsets: enc.get_offsets().to_vec(),
            special: enc
                .get_special_tokens_mask()
                .iter()
                .map(|&m| m == 1)
                .collect(),
        })
    }

    /// The pair `(first, second)` encoded with special tokens and cut into windows of at
    /// most `max_len` tokens, as HF's question-answering pipeline cuts a question and its
    /// context: `first` whole in each window, `second` truncated, each window repeating
    /// the last `stride` tokens of `second` from the one before. Offsets are in
    /// characters of each text. The same `tokenizers` call as HF's `truncation=
    /// "only_second"` with `return_overflowing_tokens`, so the windows are HF's.
    ///
    /// # Errors
    /// A `first` that leaves no room for `second` in a window (with its token count), a
    /// `stride` that leaves `second` no room to advance when it must be cut, a Marian
    /// folder, or what the tokenizer rejects.
    pub fn encode_pair_windows(
        &self,
        first: &str,
        second: &str,
        max_len: usize,
        stride: usize,
    ) -> Result<Vec<PairWindow>> {
        use tokenizers::{
            PostProcessor as _, TruncationDirection, TruncationParams, TruncationStrategy,
        };
        if self.marian.is_some() {
            return Err(tok_err(
                "encode",
                "Marian's tokenizer gives ids only, not windows with offsets",
            ));
        }
        let added = self
            .inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(true));
        let first_len = self.encode_ids(first, false)?.len();
        if first_len + added >= max_len {
            return Err(tok_err(
                "encode",
                format!(
                    "the first text takes {first_len} tokens and the special tokens {added}, \
                     which leaves no room for the second in a window of {max_len}"
                ),
            ));
        }
        let room = max_len - added - first_len;
        if stride >= room && first_len + added + self.encode_ids(second, false)?.len() > max_len {
            return Err(tok_err(
                "encode",
                format!(
                    "a stride of {stride} tokens leaves no room to advance: a window of \
                     {max_len} holds {room} tokens of the second text after the first text's \
                     {first_len} and {added} special tokens"
                ),
            ));
        }
        let mut tokenizer = self.inner.clone();
        tokenizer.with_padding(None);
        super::guarded("encode", || {
            tokenizer
                .with_truncation(Some(TruncationParams {
                    direction: TruncationDirection::Right,
                    max_length: max_len,
                    strategy: TruncationStrategy::OnlySecond,
                    stride,
                }))
                .map(|_| ())
        })?;
        let mut enc = super::guarded("encode", || {
            tokenizer.encode_char_offsets((first, second), true)
        })?;
        let rest = enc.take_overflowing();
        Ok(std::iter::once(enc)
            .chain(rest)
            .map(|enc| PairWindow { enc })
            .collect())
    }

    /// The token of an id, if the vocabulary has it.
    pub fn id_to_token(&self, id: usize) -> Option<String> {
        u32::try_from(id)
            .ok()
            .and_then(|id| self.inner.id_to_token(id))
    }

    /// The text of `tokens` joined as the decoder joins them (HF's
    /// `convert_tokens_to_string`).
    ///
    /// # Errors
    /// What the decoder rejects.
    pub fn tokens_to_string(&self, tokens: &[String]) -> Result<String> {
        use tokenizers::Decoder as _;
        match self.inner.get_decoder() {
            Some(decoder) => super::guarded("decode", || decoder.decode(tokens.to_vec())),
            None => Ok(tokens.concat()),
        }
    }

    /// Whether the model marks a word's later pieces with a prefix (WordPiece's `##`):
    /// then a token whose text is longer than its span is a piece of a word.
    pub fn has_subword_prefix(&self) -> bool {
        use tokenizers::models::ModelWrapper;
        match self.inner.get_model() {
            ModelWrapper::WordPiece(m) => !m.continuing_subword_prefix.is_empty(),
            ModelWrapper::BPE(m) => m
                .continuing_subword_prefix
                .as_deref()
                .is_some_and(|p| !p.is_empty()),
            ModelWrapper::WordLevel(_) | ModelWrapper::Unigram(_) => false,
        }
    }

    /// The id of the model's unknown token, if it has one.
    pub fn unk_id(&self) -> Option<usize> {
        use tokenizers::models::ModelWrapper;
        let token = match self.inner.get_model() {
            ModelWrapper::WordPiece(m) => Some(m.unk_token.clone()),
            ModelWrapper::BPE(m) => m.unk_token.clone(),
            ModelWrapper::WordLevel(m) => Some(m.unk_token.clone()),
            ModelWrapper::Unigram(_) => None,
        };
        token.and_then(|t| self.token_id(&t))
    }

    /// The text of `ids`, with the special tokens kept unless `skip_special`.
    ///
    /// # Errors
    /// An id outside the vocabulary, named.
    pub fn decode_with(&self, ids: &[usize], skip_special: bool) -> Result<String> {
        self.check_ids(ids)?;
        let ids: Vec<u32> = ids.iter().map(|&id| id as u32).collect();
        super::guarded("decode", || self.inner.decode(&ids, skip_special))
    }

    fn check_ids(&self, ids: &[usize]) -> Result<()> {
        let vocab = self.vocab_size();
        let missing =
            |id: usize| u32::try_from(id).map_or(true, |id| self.inner.id_to_token(id).is_none());
        if let Some(&id) = ids.iter().find(|&&id| id >= vocab || missing(id)) {
            return Err(tok_err(
                "decode",
                format!("token id {id} is out of range for vocab_size {vocab}"),
            ));
        }
        Ok(())
    }

    /// The text of `ids`, special tokens left out.
    ///
    /// # Errors
    /// An id outside the vocabulary, named.
    pub fn decode(&self, ids: &[usize]) -> Result<String> {
        self.decode_with(ids, true)
    }
}

/// The conversion a folder's SentencePiece model gets: T5's class for T5's model types
/// (by `config.json`, or `tokenizer_class` in `tokenizer_config.json`), the model's own
/// settings otherwise. A missing or unreadable file counts as empty: the model's own
/// loader reports it.
fn flavour(dir: &Path) -> Flavour {
    let read = |name: &str| -> serde_json::Value {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    };
    let (config, tokenizer) = (read("config.json"), read("tokenizer_config.json"));
    let model_type = config["model_type"].as_str().unwrap_or_default();
    let class = tokenizer["tokenizer_class"].as_str().unwrap_or_default();
    if matches!(model_type, "t5" | "mt5" | "umt5" | "longt5") || class.starts_with("T5Tokenizer") {
        let extra_ids = tokenizer["extra_ids"].as_u64().unwrap_or(100);
        return Flavour::T5 {
            extra_ids: usize::try_from(extra_ids).unwrap_or(100),
        };
    }
    Flavour::SentencePiece {
        add_bos: tokenizer["add_bos_token"].as_bool().unwrap_or(false),
        add_eos: tokenizer["add_eos_token"].as_bool().unwrap_or(false),
    }
}

/// A text's encoding with what HF's pipelines read beside the ids: the tokens, their
/// character spans in the text, and which tokens the tokenizer added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetailedEncoding {
    /// Token ids, special tokens included.
    pub ids: Vec<usize>,
    /// The tokens, as the vocabulary spells them.
    pub tokens: Vec<String>,
    /// Each token's span in the text, in characters (`(0, 0)` for an added token).
    pub offsets: Vec<(usize, usize)>,
    /// Whether each token is one the tokenizer added (`[CLS]`, `</s>`).
    pub special: Vec<bool>,
}

/// One window of [`LmTokenizer::encode_pair_windows`].
#[derive(Debug, Clone)]
pub struct PairWindow {
    enc: tokenizers::Encoding,
}

impl PairWindow {
    /// Token ids, special tokens included.
    pub fn ids(&self) -> Vec<usize> {
        self.enc.get_ids().iter().map(|&id| id as usize).collect()
    }

    /// Token type ids (0 for the first text, 1 for the second, where the tokenizer
    /// marks them).
    pub fn type_ids(&self) -> Vec<usize> {
        self.enc
            .get_type_ids()
            .iter()
            .map(|&t| t as usize)
            .collect()
    }

    /// Which text each token comes from (0 or 1), `None` for a special token.
    pub fn sequence_ids(&self) -> Vec<Option<usize>> {
        self.enc.get_sequence_ids()
    }

    /// Each token's span in characters of its own text.
    pub fn offsets(&self) -> &[(usize, usize)] {
        self.enc.get_offsets()
    }

    /// The characters of the word that holds `token`, within text `sequence`: from its
    /// first token's start to its last token's end. `None` for a token in no word.
    pub fn word_chars(&self, token: usize, sequence: usize) -> Option<(usize, usize)> {
        let (_, word) = self.enc.token_to_word(token)?;
        self.enc.word_to_chars(word, sequence)
    }
}

/// Turns tokens into text as they come: each [`TextStream::push`] returns the text that
/// the new token completes. A token that ends inside a multi-byte character holds its
/// text back until the character is whole.
#[derive(Debug, Clone)]
pub struct TextStream<'a> {
    tokenizer: &'a LmTokenizer,
    ids: Vec<usize>,
    shown: usize,
}

impl<'a> TextStream<'a> {
    /// An empty stream.
    pub fn new(tokenizer: &'a LmTokenizer) -> Self {
        Self {
            tokenizer,
            ids: Vec::new(),
            shown: 0,
        }
    }

    /// A stream that continues `prompt`: each push returns what the new token adds to the
    /// text of the whole sequence, as HF's `TextStreamer` does. Decoding the new tokens
    /// on their own loses what depends on what comes before them: a SentencePiece
    /// decoder strips the first token's space (`"art" + "▁thou"` would give `artthou`).
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn after(tokenizer: &'a LmTokenizer, prompt: &[usize]) -> Result<Self> {
        let shown = tokenizer.decode(prompt)?.len();
        Ok(Self {
            tokenizer,
            ids: prompt.to_vec(),
            shown,
        })
    }

    /// Adds a token and returns the new text, possibly empty.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn push(&mut self, id: usize) -> Result<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        // An incomplete byte sequence decodes to U+FFFD: wait for the rest.
        if text.ends_with('\u{FFFD}') || text.len() < self.shown {
            return Ok(String::new());
        }
        let new = text.get(self.shown..).unwrap_or_default().to_string();
        self.shown = text.len();
        Ok(new)
    }

    /// The text not returned yet: what an unfinished character held back, decoded as
    /// it stands (with U+FFFD for the missing bytes).
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn finish(&mut self) -> Result<String> {
        let text = self.tokenizer.decode(&self.ids)?;
        let rest = text.get(self.shown..).unwrap_or_default().to_string();
        self.shown = text.len();
        Ok(rest)
    }

    /// Everything decoded so far.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn text(&self) -> Result<String> {
        self.tokenizer.decode(&self.ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fuzz_input(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/regressions/tokenizer_json")
            .join(name)
    }

    /// Two files the fuzzer found: the `tokenizers` crate panics on each, and the zoo
    /// returns an error that names the file or the step instead.
    #[test]
    fn files_that_crash_the_tokenizers_crate_are_errors() {
        let cut = fuzz_input("decoder-cut-short.json");
        let e = LmTokenizer::from_file(&cut).unwrap_err().to_string();
        assert!(
            e.contains("decoder-cut-short.json: not valid JSON: EOF while parsing"),
            "{e}"
        );
        // A Strip decoder that strips 5 characters from the end of each token: a token
        // of fewer characters, all of them the stripped one, underflows in `tokenizers`.
        let tok = LmTokenizer::from_file(fuzz_input("strip-stop-past-token.json")).unwrap();
        let space = tok.encode_plain(" ").unwrap();
        let e = tok.decode(&space).unwrap_err().to_string();
        assert!(
            e.starts_with("tokenizer: decode: the tokenizers library failed on this tokenizer"),
            "{e}"
        );
    }
}
