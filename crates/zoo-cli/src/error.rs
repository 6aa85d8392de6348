//! The command line's error: every failure is one line for a person to read.

use std::path::PathBuf;

/// What can go wrong running a command. The other crates' errors are boxed, so a
/// `Result` of the command line stays small.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file that cannot be read or written, or does not parse.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Input that the command cannot use.
    #[error("{0}")]
    Input(String),
    /// The folder's model cannot do what the command asks.
    #[error("{0}")]
    Unsupported(String),
    /// The device.
    #[error(transparent)]
    Device(#[from] zoo_device::DeviceError),
    /// A checkpoint that cannot be read.
    #[error(transparent)]
    Checkpoint(Box<zoo_core::CheckpointError>),
    /// Generation.
    #[error(transparent)]
    Core(Box<zoo_core::CoreError>),
    /// A model of any family.
    #[error(transparent)]
    Model(Box<zoo_core::ModelError>),
    /// Finding, loading or running a checkpoint.
    #[error(transparent)]
    Hub(Box<zoo_hub::HubError>),
    /// A tokenizer of any family.
    #[error(transparent)]
    Tokenizer(Box<zoo_data::TokenizerError>),
    /// The encoder family.
    #[error(transparent)]
    Encoder(Box<zoo_encoder::EncoderError>),
}

/// `From` for each boxed variant, so `?` converts as `#[from]` would.
macro_rules! boxed_from {
    ($($variant:ident: $error:ty),* $(,)?) => {$(
        impl From<$error> for CliError {
            fn from(e: $error) -> Self {
                Self::$variant(Box::new(e))
            }
        }
    )*};
}

boxed_from!(
    Checkpoint: zoo_core::CheckpointError,
    Core: zoo_core::CoreError,
    Model: zoo_core::ModelError,
    Hub: zoo_hub::HubError,
    Tokenizer: zoo_data::TokenizerError,
    Encoder: zoo_encoder::EncoderError,
);

/// Shorthand for results of the command line.
pub type Result<T, E = CliError> = std::result::Result<T, E>;
