//! The crate's error type.

use zoo_core::ConfigError;

/// Everything that can go wrong when building or running an attention layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AttentionError {
    /// A layer's settings that cannot build it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A tensor had the wrong shape.
    #[error("{what}: expected shape {expected}, got {got:?}")]
    Shape {
        /// Which input.
        what: &'static str,
        /// The expected shape, in words.
        expected: String,
        /// The shape given.
        got: Vec<usize>,
    },
    /// A position past the longest sequence a table or cache was built for.
    #[error("{what}: position {position} is past the maximum length {max_len}")]
    TooLong {
        /// Which table or cache.
        what: &'static str,
        /// The first position that does not fit.
        position: usize,
        /// The maximum.
        max_len: usize,
    },
    /// A negative position.
    #[error("{what}: position {position} is negative")]
    NegativePosition {
        /// Which input.
        what: &'static str,
        /// The position given.
        position: i64,
    },
    /// An input this layer or kernel cannot run (a KV cache on the linear kernel, a window
    /// over fewer keys than queries).
    #[error("{0}")]
    Unsupported(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = AttentionError> = std::result::Result<T, E>;

/// Checks that `dims` equals `expected`, where `None` in `expected` accepts any size.
pub(crate) fn check_shape(
    what: &'static str,
    dims: &[usize],
    expected: &[Option<usize>],
) -> Result<()> {
    let ok = dims.len() == expected.len()
        && dims
            .iter()
            .zip(expected)
            .all(|(d, e)| e.is_none_or(|e| e == *d));
    if ok {
        Ok(())
    } else {
        let expected = expected
            .iter()
            .map(|e| e.map_or("_".to_string(), |e| e.to_string()))
            .collect::<Vec<_>>()
            .join(", ");
        Err(AttentionError::Shape {
            what,
            expected: format!("[{expected}]"),
            got: dims.to_vec(),
        })
    }
}
