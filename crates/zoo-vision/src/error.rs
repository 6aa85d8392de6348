//! The crate's error type.

use zoo_attention::AttentionError;

/// What can go wrong building or running a vision model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum VisionError {
    /// A configuration value that cannot work, or a `config.json` that does not parse.
    #[error("invalid ViT config: {0}")]
    Config(#[from] zoo_core::ConfigError),
    /// An input that does not fit the model: a wrong channel count, an image size the
    /// patches do not tile.
    #[error("{0}")]
    Input(String),
    /// An image file that cannot be read or decoded, or a preprocessor configuration that
    /// cannot be used.
    #[error("{0}")]
    Image(String),
    /// A checkpoint that cannot be read, written, or does not fit the model.
    #[error(transparent)]
    Checkpoint(#[from] zoo_core::CheckpointError),
    /// An error from the attention core.
    #[error(transparent)]
    Attention(#[from] AttentionError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = VisionError> = std::result::Result<T, E>;

impl From<VisionError> for zoo_core::ModelError {
    fn from(e: VisionError) -> Self {
        zoo_core::ModelError::new(e)
    }
}
