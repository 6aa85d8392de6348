//! The crate's error types.

/// An error raised by a model's forward pass, whatever its family: the family's own error,
/// boxed, so traits over many families share one error type.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ModelError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl ModelError {
    /// Wraps a family's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }

    /// An error described by a message alone.
    pub fn msg(message: impl Into<String>) -> Self {
        Self(message.into().into())
    }

    /// The wrapped error, to downcast to a family's own type.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.0.as_ref()
    }
}

/// What can go wrong generating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// Bad generation settings or prompts.
    #[error("generation: {0}")]
    Generation(String),
    /// Prompts the model cannot take: empty, too long, or with an id outside its
    /// vocabulary.
    #[error(transparent)]
    Tokens(#[from] crate::tokens::TokenError),
    /// The model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}
