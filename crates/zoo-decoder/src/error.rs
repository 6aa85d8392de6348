//! The crate's error type.

use zoo_attention::AttentionError;

/// What can go wrong building or running a decoder.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DecoderError {
    /// A configuration value that cannot work.
    #[error("invalid decoder config: {0}")]
    Config(#[from] zoo_core::ConfigError),
    /// Token ids the model cannot take: empty, too long, or outside the vocabulary.
    #[error(transparent)]
    Tokens(#[from] zoo_core::TokenError),
    /// Bad generation settings or prompts.
    #[error("generation: {0}")]
    Generation(String),
    /// A checkpoint that cannot be read, written, or does not fit the model.
    #[error(transparent)]
    Checkpoint(#[from] zoo_core::CheckpointError),
    /// A tokenizer that cannot be loaded or run.
    #[error(transparent)]
    Tokenizer(#[from] zoo_data::TokenizerError),
    /// An error from the attention core.
    #[error(transparent)]
    Attention(#[from] AttentionError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = DecoderError> = std::result::Result<T, E>;
