//! The crate's error type.

use zoo_attention::AttentionError;

/// What can go wrong building or running an encoder.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EncoderError {
    /// A configuration value that cannot work, or a `config.json` that does not parse.
    #[error("invalid BERT config: {0}")]
    Config(#[from] zoo_core::ConfigError),
    /// An input that does not fit the model.
    #[error("{0}")]
    Input(String),
    /// Token ids the model cannot take: empty, too long, or outside the vocabulary.
    #[error(transparent)]
    Tokens(#[from] zoo_core::TokenError),
    /// A checkpoint that cannot be read, written, or does not fit the model.
    #[error(transparent)]
    Checkpoint(#[from] zoo_core::CheckpointError),
    /// A tokenizer that cannot be loaded, trained or run.
    #[error(transparent)]
    Tokenizer(#[from] zoo_data::TokenizerError),
    /// An error from the attention core.
    #[error(transparent)]
    Attention(#[from] AttentionError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = EncoderError> = std::result::Result<T, E>;

impl From<EncoderError> for zoo_core::ModelError {
    fn from(e: EncoderError) -> Self {
        zoo_core::ModelError::new(e)
    }
}
