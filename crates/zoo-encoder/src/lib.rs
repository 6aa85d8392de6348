//! # zoo-encoder
//!
//! Encoder-only models: the BERT family (Devlin et al., 2019, "BERT: Pre-training of Deep
//! Bidirectional Transformers for Language Understanding"), as HF's `BertModel` lays it
//! out, with presets for `bert-base-uncased` and `all-MiniLM-L6-v2`.
//!
//! - [`BertConfig`] reads HF's `config.json` field names directly and validates them;
//! - [`BertModel`]: word, position and token-type embeddings, a post-norm encoder whose
//!   layers are composed here from `zoo-attention`'s parts, and the pooler;
//! - heads: [`BertForMaskedLm`] (the transform and a decoder tied to the word embeddings),
//!   [`BertForSequenceClassification`], [`BertForTokenClassification`], and the span head
//!   of extractive question answering, [`BertForQuestionAnswering`] (start and end
//!   logits, [`SpanLogits`]);
//! - [`distilbert`]: DistilBERT, BERT's modules without token types under its own
//!   checkpoint and config names, its sequence classifier's ReLU (a [`pretrained::Layout`]);
//! - [`roberta`]: RoBERTa, the same modules with positions after the padding id and its
//!   own checkpoint names (a [`pretrained::Layout`]);
//! - [`modernbert`]: ModernBERT, its own modules from `zoo-attention`'s parts (RoPE,
//!   alternating global and local attention, a fused gated MLP, bias-free norms) with
//!   the masked LM, sequence, token and span heads;
//! - [`registry`]: the family's rows for `zoo-hub`'s `AutoModel`;
//! - [`pretrained`]: `from_pretrained(dir)` / `save_pretrained(dir)` for HF checkpoints
//!   (`config.json` with `model.safetensors` or `pytorch_model.bin`, bare `BertModel` keys or
//!   `bert.`-prefixed head keys), through `zoo-core`'s shared loader, which names every
//!   missing, unexpected and mis-shaped tensor;
//! - [`BertTokenizer`]: BERT's WordPiece tokenizer, from `zoo-data` (where every family's
//!   tokenizer lives), re-exported here; [`EncoderInput::from_batch`] turns its padded
//!   batches into the model's input;
//! - [`sentence`]: sentence-transformers folders (`modules.json`, pooling, normalization);
//! - [`mlm`]: BERT's masked-LM recipe, as batches for `zoo-train`'s language-model task;
//! - `zoo-core`'s traits: masked-LM logits ([`zoo_core::TokenLogits`]), classification
//!   ([`zoo_core::ClassLogits`]) and mean-pooled sentence embeddings
//!   ([`zoo_core::SentenceEmbedding`]).
#![warn(missing_docs)]

pub mod config;
pub mod distilbert;
mod error;
pub mod mlm;
pub mod model;
pub mod modernbert;
pub mod pretrained;
pub mod registry;
pub mod roberta;
pub mod sentence;

pub use config::{BertConfig, HiddenAct};
pub use error::{EncoderError, Result};
pub use mlm::{MaskedBatch, MaskingConfig, mask_tokens, masked_items};
pub use model::{
    BertEmbeddings, BertForMaskedLm, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertLayer, BertModel, EncoderInput, EncoderOutput, PositionIds,
    SpanLogits,
};
pub use modernbert::{
    HeadKind, HeadLogits, ModernBertConfig, ModernBertForClassification, ModernBertForMaskedLm,
    ModernBertModel,
};
pub use sentence::{Pooling, PoolingConfig, PoolingModes, SentenceEncoder};
/// BERT's WordPiece tokenizer, which lives in `zoo-data` with every family's.
pub use zoo_data::tokenizer::{BertTokenizer, Encoding, SPECIAL_TOKENS, TokenBatch};
