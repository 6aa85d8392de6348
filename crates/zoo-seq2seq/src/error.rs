//! The crate's error type.

use zoo_attention::AttentionError;

/// What can go wrong building or running an encoder-decoder model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Seq2SeqError {
    /// A configuration value that cannot work.
    #[error("invalid encoder-decoder config: {0}")]
    Config(#[from] zoo_core::ConfigError),
    /// Input the model cannot take: an empty source, an id past the vocabulary, a
    /// sequence too long, masks of another shape.
    #[error("{0}")]
    Input(String),
    /// Token ids the model cannot take: empty, too long, or outside the vocabulary.
    #[error(transparent)]
    Tokens(#[from] zoo_core::TokenError),
    /// A checkpoint that cannot be read, written, or does not fit the model.
    #[error(transparent)]
    Checkpoint(#[from] zoo_core::CheckpointError),
    /// An error from the attention core.
    #[error(transparent)]
    Attention(#[from] AttentionError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Seq2SeqError> = std::result::Result<T, E>;
