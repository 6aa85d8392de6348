//! BERT's WordPiece tokenizer, run by HF's `tokenizers` crate: loaded from a
//! `tokenizer.json`, built from a `vocab.txt`, or trained on a corpus. Pairs get token
//! types, batches are padded to their longest row and truncated to the model's length,
//! and [`TokenBatch`] makes the tensors a model takes (the encoder's `EncoderInput::from_batch`
//! gathers them).

use std::path::Path;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainer};
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, EncodeInput, Tokenizer};

use super::{Result, TokenizerError, tok_err};

/// BERT's special tokens, in the order a trained vocabulary numbers them.
pub const SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// One encoded text (or pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoding {
    /// Token ids, special tokens included.
    pub ids: Vec<u32>,
    /// Segment of each token: 0 for the first text, 1 for the second of a pair.
    pub type_ids: Vec<u32>,
    /// The tokens as text (`##` marks a word's continuation).
    pub tokens: Vec<String>,
    /// `true` at special tokens (`[CLS]`, `[SEP]`).
    pub special: Vec<bool>,
}

/// Encoded texts, right-padded to the longest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBatch {
    /// `[B][T]` ids, padding holds the pad id.
    pub ids: Vec<Vec<u32>>,
    /// `[B][T]` segments.
    pub type_ids: Vec<Vec<u32>>,
    /// `[B][T]`, `true` at padding.
    pub padding: Vec<Vec<bool>>,
    /// `[B][T]`, `true` at special tokens and padding: what masking must never choose.
    pub special: Vec<Vec<bool>>,
}

fn tensor_2d<T: burn::tensor::Element>(rows: &[Vec<T>]) -> TensorData {
    let t = rows.first().map_or(0, Vec::len);
    TensorData::new(rows.concat(), [rows.len(), t])
}

fn widen(rows: &[Vec<u32>]) -> Vec<Vec<i64>> {
    rows.iter()
        .map(|r| r.iter().map(|&i| i64::from(i)).collect())
        .collect()
}

impl TokenBatch {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The padding mask `[B, T]` (`true` at padding).
    pub fn padding_tensor(&self, device: &Device) -> Tensor<2, Bool> {
        Tensor::from_data(tensor_2d(&self.padding), device)
    }

    /// The ids `[B, T]`, padding included.
    pub fn ids_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(tensor_2d(&widen(&self.ids)), device)
    }

    /// The segments `[B, T]`.
    pub fn type_ids_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(tensor_2d(&widen(&self.type_ids)), device)
    }
}

/// A BERT (WordPiece) tokenizer.
#[derive(Debug, Clone)]
pub struct BertTokenizer {
    inner: Tokenizer,
    max_len: usize,
    pad_id: u32,
    mask_id: u32,
}

impl BertTokenizer {
    fn wrap(mut inner: Tokenizer, max_len: usize) -> Result<Self> {
        if max_len < 4 {
            return Err(TokenizerError(format!(
                "max_len must be >= 4 (room for a pair's three special tokens), got {max_len}"
            )));
        }
        // A tokenizer.json may carry fixed padding and truncation (all-MiniLM-L6-v2's pads
        // every text to 128); as HF `transformers` does, this type decides both itself.
        // Truncation is longest-first over a pair, keeping the special tokens, as HF's.
        inner.with_padding(None);
        inner
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| tok_err("truncation", e))?;
        let id = |token: &str| {
            inner
                .token_to_id(token)
                .ok_or_else(|| TokenizerError(format!("the vocabulary has no {token} token")))
        };
        // BERT's special tokens, or RoBERTa's byte-level vocabulary's (`<pad>`, `<mask>`,
        // `<s>`, `</s>`, `<unk>`) when it has those and not BERT's.
        let roberta = inner.token_to_id("[PAD]").is_none() && inner.token_to_id("<pad>").is_some();
        let [pad, mask, cls, sep, unk] = if roberta {
            ["<pad>", "<mask>", "<s>", "</s>", "<unk>"]
        } else {
            ["[PAD]", "[MASK]", "[CLS]", "[SEP]", "[UNK]"]
        };
        let (pad_id, mask_id) = (id(pad)?, id(mask)?);
        for token in [cls, sep, unk] {
            id(token)?;
        }
        Ok(Self {
            inner,
            max_len,
            pad_id,
            mask_id,
        })
    }

    /// Loads a `tokenizer.json`. Texts are truncated to `max_len` tokens (the model's
    /// `max_position_embeddings`, or sentence-transformers' `max_seq_length`).
    ///
    /// # Errors
    /// A file that cannot be read or parsed, or a vocabulary without BERT's special
    /// tokens.
    pub fn from_file(path: impl AsRef<Path>, max_len: usize) -> Result<Self> {
        let path = path.as_ref();
        let inner = super::read_tokenizer_json(path)?;
        Self::wrap(inner, max_len)
    }

    /// Parses the text of a `tokenizer.json` held in memory (fetched by a web page, say);
    /// `name` stands for the file in errors. See [`BertTokenizer::from_file`].
    ///
    /// # Errors
    /// Text that does not parse, or a vocabulary without BERT's special tokens.
    pub fn from_json(name: &str, text: &str, max_len: usize) -> Result<Self> {
        Self::wrap(super::parse_tokenizer_json(name, text)?, max_len)
    }

    /// Builds BERT's tokenizer from a `vocab.txt` (one token per line, the id is the line
    /// number): BERT's normalizer (lower-casing and accent stripping when `lowercase`),
    /// its pre-tokenizer, WordPiece, and `[CLS] A [SEP] (B [SEP])`.
    ///
    /// # Errors
    /// A file that cannot be read, or a vocabulary without BERT's special tokens.
    pub fn from_vocab(path: impl AsRef<Path>, lowercase: bool, max_len: usize) -> Result<Self> {
        let path = path.as_ref();
        let name = path.display().to_string();
        if !path.is_file() {
            return Err(tok_err(&name, "no such file"));
        }
        let model = WordPiece::from_file(&name)
            .unk_token("[UNK]".into())
            .build()
            .map_err(|e| tok_err(&name, e))?;
        Self::assemble(Tokenizer::new(model), lowercase, max_len)
    }

    /// Adds BERT's normalizer, pre-tokenizer, post-processor and decoder to a WordPiece.
    fn assemble(mut inner: Tokenizer, lowercase: bool, max_len: usize) -> Result<Self> {
        inner.with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)));
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        inner.with_decoder(Some(WordPieceDecoder::default()));
        let id = |token: &str| {
            inner
                .token_to_id(token)
                .ok_or_else(|| TokenizerError(format!("the vocabulary has no {token} token")))
        };
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        let template = TemplateProcessing::builder()
            .try_single("[CLS] $A [SEP]")
            .and_then(|b| b.try_pair("[CLS] $A [SEP] $B:1 [SEP]:1"))
            .map_err(|e| tok_err("template", e))?
            .special_tokens(vec![("[CLS]", cls), ("[SEP]", sep)])
            .build()
            .map_err(|e| tok_err("template", e))?;
        inner.with_post_processor(Some(template));
        Self::wrap(inner, max_len)
    }

    /// Trains a WordPiece vocabulary of at most `vocab_size` tokens (the special tokens
    /// first, ids 0..5 in [`SPECIAL_TOKENS`] order) on `lines`, keeping pieces seen at
    /// least `min_frequency` times.
    ///
    /// # Errors
    /// A `vocab_size` too small for the special tokens, or a failed training.
    pub fn train<I, S>(
        lines: I,
        vocab_size: usize,
        min_frequency: u64,
        lowercase: bool,
        max_len: usize,
    ) -> Result<Self>
    where
        I: Iterator<Item = S> + Send,
        S: AsRef<str> + Send,
    {
        if vocab_size <= SPECIAL_TOKENS.len() {
            return Err(TokenizerError(format!(
                "vocab_size must be > {}, got {vocab_size}",
                SPECIAL_TOKENS.len()
            )));
        }
        let mut inner = Tokenizer::new(
            WordPiece::builder()
                .unk_token("[UNK]".into())
                .build()
                .map_err(|e| tok_err("wordpiece", e))?,
        );
        inner.with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)));
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        let mut trainer: TrainerWrapper = WordPieceTrainer::builder()
            .vocab_size(vocab_size)
            .min_frequency(min_frequency)
            .show_progress(false)
            .special_tokens(
                SPECIAL_TOKENS
                    .iter()
                    .map(|t| AddedToken::from(*t, true))
                    .collect(),
            )
            .build()
            .into();
        inner
            .train(&mut trainer, lines)
            .map_err(|e| tok_err("training", e))?;
        Self::assemble(inner, lowercase, max_len)
    }

    /// Loads the tokenizer of a checkpoint folder: `tokenizer.json`, else `vocab.txt`
    /// (lower-cased unless `tokenizer_config.json` says `"do_lower_case": false`).
    ///
    /// # Errors
    /// A folder with neither file, or one of them unreadable.
    pub fn from_pretrained(dir: impl AsRef<Path>, max_len: usize) -> Result<Self> {
        let dir = dir.as_ref();
        let json = dir.join("tokenizer.json");
        if json.is_file() {
            return Self::from_file(json, max_len);
        }
        let vocab = dir.join("vocab.txt");
        if !vocab.is_file() {
            return Err(TokenizerError(format!(
                "{} has neither tokenizer.json nor vocab.txt",
                dir.display()
            )));
        }
        let lowercase = std::fs::read_to_string(dir.join("tokenizer_config.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("do_lower_case").and_then(serde_json::Value::as_bool))
            .unwrap_or(true);
        Self::from_vocab(vocab, lowercase, max_len)
    }

    /// Writes the tokenizer as a `tokenizer.json`, whole or not at all.
    ///
    /// # Errors
    /// A file that cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let partial = path.with_extension("json.partial");
        self.inner
            .save(&partial, true)
            .map_err(|e| tok_err(&name, e))?;
        std::fs::rename(&partial, path).map_err(|e| tok_err(&name, e))
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The longest encoding, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// `[PAD]`'s id.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// `[MASK]`'s id.
    pub fn mask_id(&self) -> u32 {
        self.mask_id
    }

    /// The id of a token, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token of an id, if the vocabulary has it.
    pub fn id_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    fn convert(&self, e: &tokenizers::Encoding) -> Encoding {
        Encoding {
            ids: e.get_ids().to_vec(),
            type_ids: e.get_type_ids().to_vec(),
            tokens: e.get_tokens().to_vec(),
            special: e
                .get_special_tokens_mask()
                .iter()
                .map(|&m| m == 1)
                .collect(),
        }
    }

    fn run(&self, inputs: Vec<EncodeInput<'_>>) -> Result<Vec<Encoding>> {
        let encoded = super::guarded("encoding", || self.inner.encode_batch(inputs, true))?;
        Ok(encoded.iter().map(|e| self.convert(e)).collect())
    }

    /// Encodes one text: `[CLS] text [SEP]`, truncated to [`Self::max_len`].
    ///
    /// # Errors
    /// The tokenizer's own failures.
    pub fn encode(&self, text: &str) -> Result<Encoding> {
        Ok(self.run(vec![text.into()])?.remove(0))
    }

    /// Encodes one text as [`Self::encode`] does, and tells whether it was cut to
    /// [`Self::max_len`].
    ///
    /// # Errors
    /// The tokenizer's own failures.
    pub fn encode_counted(&self, text: &str) -> Result<(Encoding, bool)> {
        let e = super::guarded("encoding", || self.inner.encode(text, true))?;
        Ok((self.convert(&e), !e.get_overflowing().is_empty()))
    }

    /// Encodes a text already split into words (the `tokens` of a token-classification
    /// row), as HF's `is_split_into_words=True` does: each word is tokenized alone. Returns
    /// the encoding, the word of each token (`None` at special tokens), and whether the
    /// words were cut to [`Self::max_len`].
    ///
    /// # Errors
    /// No words, or the tokenizer's own failures.
    pub fn encode_words(&self, words: &[String]) -> Result<(Encoding, Vec<Option<usize>>, bool)> {
        if words.is_empty() {
            return Err(TokenizerError(
                "cannot encode an empty list of words".into(),
            ));
        }
        let input: Vec<&str> = words.iter().map(String::as_str).collect();
        let e = super::guarded("encoding", || {
            self.inner
                .encode(tokenizers::InputSequence::from(input), true)
        })?;
        let word_of = e
            .get_word_ids()
            .iter()
            .map(|w| w.map(|w| w as usize))
            .collect();
        Ok((self.convert(&e), word_of, !e.get_overflowing().is_empty()))
    }

    /// Encodes a pair: `[CLS] a [SEP] b [SEP]`, with token type 1 on `b [SEP]`;
    /// truncated longest-first to [`Self::max_len`].
    ///
    /// # Errors
    /// The tokenizer's own failures.
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<Encoding> {
        Ok(self.run(vec![(a, b).into()])?.remove(0))
    }

    /// Encodes texts and pads them to the longest.
    ///
    /// # Errors
    /// An empty list, or the tokenizer's own failures.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<TokenBatch> {
        self.pad(self.run(texts.iter().map(|t| (*t).into()).collect())?)
    }

    /// Encodes pairs and pads them to the longest.
    ///
    /// # Errors
    /// An empty list, or the tokenizer's own failures.
    pub fn encode_pairs(&self, pairs: &[(&str, &str)]) -> Result<TokenBatch> {
        self.pad(self.run(pairs.iter().map(|&(a, b)| (a, b).into()).collect())?)
    }

    /// Right-pads encodings to the longest: pad id, type 0.
    ///
    /// # Errors
    /// An empty list.
    pub fn pad(&self, encodings: Vec<Encoding>) -> Result<TokenBatch> {
        let t = encodings
            .iter()
            .map(|e| e.ids.len())
            .max()
            .ok_or_else(|| TokenizerError("cannot make a batch of no texts".into()))?;
        let mut batch = TokenBatch {
            ids: Vec::new(),
            type_ids: Vec::new(),
            padding: Vec::new(),
            special: Vec::new(),
        };
        for mut e in encodings {
            let n = e.ids.len();
            e.ids.resize(t, self.pad_id);
            e.type_ids.resize(t, 0);
            e.special.resize(t, true);
            batch.ids.push(e.ids);
            batch.type_ids.push(e.type_ids);
            batch.padding.push((0..t).map(|i| i >= n).collect());
            batch.special.push(e.special);
        }
        Ok(batch)
    }

    /// The text of ids, special tokens left out, word pieces joined.
    ///
    /// # Errors
    /// The tokenizer's own failures.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        super::guarded("decoding", || self.inner.decode(ids, true))
    }
}
