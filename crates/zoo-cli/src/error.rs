//! The command line's error: every failure is one line for a person to read.

use std::path::PathBuf;

/// What can go wrong running a command.
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
    Checkpoint(#[from] zoo_core::CheckpointError),
    /// Generation.
    #[error(transparent)]
    Core(#[from] zoo_core::CoreError),
    /// A model of any family.
    #[error(transparent)]
    Model(#[from] zoo_core::ModelError),
    /// Finding, loading or running a checkpoint.
    #[error(transparent)]
    Hub(#[from] zoo_hub::HubError),
    /// A tokenizer of any family.
    #[error(transparent)]
    Tokenizer(#[from] zoo_data::TokenizerError),
    /// The encoder family.
    #[error(transparent)]
    Encoder(#[from] zoo_encoder::EncoderError),
}

/// Shorthand for results of the command line.
pub type Result<T, E = CliError> = std::result::Result<T, E>;
