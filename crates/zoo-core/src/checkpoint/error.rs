//! What can go wrong with a checkpoint, and the report of tensors that do not fit.

use std::fmt;
use std::path::PathBuf;

/// What can go wrong reading or writing a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file that cannot be read or written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        message: String,
    },
    /// A `config.json` that does not parse or does not describe this model.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A weights file that is not a readable checkpoint.
    #[error("{}: not a readable checkpoint: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the reader said.
        message: String,
    },
    /// A folder with no weights file.
    #[error(
        "{} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin",
        dir.display()
    )]
    NoWeights {
        /// The folder.
        dir: PathBuf,
    },
    /// A model whose weights cannot fit in this machine's memory in the chosen float
    /// type, found before they are allocated.
    #[error("{}: {message}", path.display())]
    TooLarge {
        /// The weights file.
        path: PathBuf,
        /// The parameters, the bytes, and the memory there is.
        message: String,
    },
    /// Tensors that do not fit the model.
    #[error("{}: {report}", path.display())]
    Tensors {
        /// The weights file.
        path: PathBuf,
        /// Every tensor that does not fit.
        report: TensorReport,
    },
}

impl CheckpointError {
    /// A file or folder that cannot be read or written, with what the system said.
    pub fn io(path: &std::path::Path, error: impl fmt::Display) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            message: error.to_string(),
        }
    }
}

impl From<crate::durable::FileError> for CheckpointError {
    fn from(e: crate::durable::FileError) -> Self {
        Self::io(&e.path, e.source)
    }
}

/// Every tensor of a checkpoint that does not fit a model, found in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorReport {
    /// Tensors the model needs and the file lacks: the checkpoint name and the shape the
    /// model expects.
    pub missing: Vec<(String, Vec<usize>)>,
    /// Tensors of the file the model has no place for: the checkpoint name and its shape.
    pub unexpected: Vec<(String, Vec<usize>)>,
    /// Tensors of another shape: the checkpoint name, the model's shape, the file's shape
    /// (both in the model's layout, after a `Linear` weight's transpose).
    pub mismatched: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// Other failures, one line each (a dtype the parameter cannot take, say).
    pub other: Vec<String>,
}

impl TensorReport {
    /// Whether every tensor fits.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.mismatched.is_empty()
            && self.other.is_empty()
    }
}

impl fmt::Display for TensorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the checkpoint does not fit the model ({} missing, {} unexpected, {} mis-shaped",
            self.missing.len(),
            self.unexpected.len(),
            self.mismatched.len()
        )?;
        if !self.other.is_empty() {
            write!(f, ", {} other", self.other.len())?;
        }
        write!(f, ")")?;
        for (name, shape) in &self.missing {
            write!(f, "\n  missing:    {name} {shape:?}")?;
        }
        for (name, shape) in &self.unexpected {
            write!(f, "\n  unexpected: {name} {shape:?}")?;
        }
        for (name, expected, found) in &self.mismatched {
            write!(
                f,
                "\n  mis-shaped: {name}: the model has {expected:?}, the file {found:?}"
            )?;
        }
        for line in &self.other {
            write!(f, "\n  error:      {line}")?;
        }
        Ok(())
    }
}
