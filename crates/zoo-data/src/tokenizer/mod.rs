//! The tokenizers of every family, each through HF's `tokenizers` crate:
//! - [`LmTokenizer`] (in `bpe`): a causal LM's `tokenizer.json`, GPT-2's byte-level BPE,
//!   Llama's SentencePiece-style BPE or any other that file describes, else a
//!   SentencePiece model file converted as `transformers` converts it (`spm`), else
//!   Marian's two SentencePiece models and `vocab.json` (`marian`), with [`TextStream`]
//!   for text that streams out token by token; the encoder-decoder family uses it for
//!   T5 and Marian too;
//! - [`BertTokenizer`] (in `wordpiece`): BERT-style WordPiece, from a `tokenizer.json`,
//!   a `vocab.txt` or trained on a corpus, with pairs and padded [`TokenBatch`]es;
//! - [`ChatTemplate`] (in `chat`): an instruct model's chat template, rendered as
//!   `transformers`' `apply_chat_template` renders it.

mod bpe;
mod chat;
mod marian;
mod spm;
mod wordpiece;

pub use bpe::{DetailedEncoding, LmTokenizer, PairWindow, TextStream};
pub use chat::ChatTemplate;
pub use wordpiece::{BertTokenizer, Encoding, SPECIAL_TOKENS, TokenBatch};

/// A tokenizer that cannot be loaded or run, with the file or the step it failed at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tokenizer: {0}")]
pub struct TokenizerError(pub String);

/// Shorthand for the tokenizers' results.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

fn tok_err(what: &str, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError(format!("{what}: {e}"))
}

/// Runs `call` into the `tokenizers` crate, turning a panic in it into an error that
/// names `what`. That crate panics on some files it accepts: a `Strip` decoder whose
/// `stop` passes a token's length underflows when it decodes (found by the fuzzer), and
/// a decoder cut short ends in its `expect("Helper")`.
fn guarded<T, E: std::fmt::Display>(
    what: &str,
    call: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(result) => result.map_err(|e| tok_err(what, e)),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(tok_err(
                what,
                format!("the tokenizers library failed on this tokenizer ({why})"),
            ))
        }
    }
}

/// Reads a `tokenizer.json` through the `tokenizers` crate, its JSON syntax checked first
/// and a panic in that crate caught, so a bad file is an error that names it.
fn read_tokenizer_json(path: &std::path::Path) -> Result<tokenizers::Tokenizer> {
    let what = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| tok_err(&what, e))?;
    parse_tokenizer_json(&what, &text)
}

/// A `tokenizer.json`'s text parsed; `what` names it in errors.
fn parse_tokenizer_json(what: &str, text: &str) -> Result<tokenizers::Tokenizer> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map_err(|e| tok_err(what, format!("not valid JSON: {e}")))?;
    guarded(what, || text.parse::<tokenizers::Tokenizer>())
}
