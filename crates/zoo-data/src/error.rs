//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong reading or encoding data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A character outside the vocabulary.
    #[error("character {ch:?} is not in the vocabulary ({context})")]
    UnknownChar {
        /// The character.
        ch: char,
        /// Where it was found.
        context: String,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab_size}")]
    UnknownId {
        /// The id.
        id: usize,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// Input that is empty or malformed.
    #[error("{0}")]
    Invalid(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = DataError> = std::result::Result<T, E>;

pub(crate) fn read_to_string(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}
