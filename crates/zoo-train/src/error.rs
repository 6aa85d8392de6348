//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong setting up or running a training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A configuration value that cannot work.
    #[error("invalid train config: {0}")]
    Config(#[from] zoo_core::ConfigError),
    /// The loss became NaN or infinite; the model kept is the last one before that step.
    #[error(
        "loss is {value} at epoch {epoch}, batch {batch}; training stopped, the last good weights are kept"
    )]
    NonFiniteLoss {
        /// The epoch, or round in steps mode (1-based).
        epoch: usize,
        /// The training batch within the run (1-based, counting the rounds before a
        /// resume, and every replica's batches).
        batch: usize,
        /// The loss value.
        value: f32,
    },
    /// The model's forward pass failed on a batch; the weights kept are the last good ones.
    #[error("the model failed at batch {batch}: {message}; training stopped")]
    Model {
        /// The training batch within this process's run (1-based).
        batch: usize,
        /// The model's error.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A checkpoint or config could not be (de)serialised.
    #[error("{0}")]
    Format(String),
    /// The artifact folder holds an earlier run's checkpoints, and the new run was asked
    /// neither to resume that run nor to overwrite it. Nothing was written.
    #[error(
        "{} holds the checkpoints of an earlier run; resume it, or set overwrite to replace it",
        dir.display()
    )]
    EarlierRun {
        /// The artifact folder.
        dir: PathBuf,
    },
    /// Another run holds the artifact folder (its `.lock`). Nothing was read or written.
    #[error(
        "{} is in use by another run (process {holder}); wait for it to end, or choose \
         another folder",
        dir.display()
    )]
    Busy {
        /// The artifact folder.
        dir: PathBuf,
        /// What the holder wrote in the lock file: its process id.
        holder: String,
    },
    /// burn-train stopped the run on an error (a failed checkpoint write, a data set
    /// error, a metric that could not be computed, a failed worker).
    #[error("training stopped on an error: {0}")]
    Training(String),
    /// The learner's event stream did not deliver a round's metrics, so `metrics.csv`
    /// would be incomplete.
    #[error("missing metrics: {0}")]
    MissingMetrics(String),
}

impl TrainError {
    /// Settings that cannot be used together, in a sentence.
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::Config(zoo_core::ConfigError::conflict(message))
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` through a temporary file that is synced to the disk, renamed
/// over `path`, and its folder synced ([`zoo_core::durable::write_atomic`]), so neither a
/// crash nor a power cut leaves a half-written file under the final name.
///
/// # Errors
/// A file or folder that cannot be written or synced, named.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    zoo_core::durable::write_atomic(path, bytes).map_err(|e| TrainError::Io {
        path: e.path,
        source: e.source,
    })
}
