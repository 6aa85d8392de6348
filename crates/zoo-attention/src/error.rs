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

/// Declares a model family's error enum with the variants every family shares, then the
/// family's own, the crate's `Result`, and the conversion into [`zoo_core::ModelError`]
/// that the registry's traits return. `$family` names the family in a config error
/// (`invalid decoder config: hidden_size must be > 0, got 0`).
///
/// A family's own variants cannot be `#[error(transparent)]`: thiserror does not take
/// that keyword from tokens passed through a `macro_rules!` (it reads it as a value), so
/// a wrapped error of the family's own is shown with `#[error("{0}")]`, which prints the
/// same text.
///
/// The shared variants: `Config` (a value that cannot work, or a `config.json` that does
/// not parse), `Tokens` (ids that are empty, too long or outside the vocabulary), `Input`
/// (an input that does not fit the model), `Checkpoint` (a checkpoint that cannot be
/// read, written, or does not fit the model) and `Attention` (the attention core).
#[macro_export]
macro_rules! family_error {
    (
        $(#[$meta:meta])*
        pub enum $name:ident($family:literal) {
            $($own:tt)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, thiserror::Error)]
        #[non_exhaustive]
        pub enum $name {
            /// A configuration value that cannot work, or a `config.json` that does not
            /// parse.
            #[error("invalid {family} config: {0}", family = $family)]
            Config(#[from] zoo_core::ConfigError),
            /// Token ids the model cannot take: empty, too long, or outside the vocabulary.
            #[error(transparent)]
            Tokens(#[from] zoo_core::TokenError),
            /// An input that does not fit the model.
            #[error("{0}")]
            Input(String),
            /// A checkpoint that cannot be read, written, or does not fit the model.
            #[error(transparent)]
            Checkpoint(#[from] zoo_core::CheckpointError),
            /// An error from the attention core.
            #[error(transparent)]
            Attention(#[from] $crate::AttentionError),
            $($own)*
        }

        /// Shorthand for results of this crate.
        pub type Result<T, E = $name> = std::result::Result<T, E>;

        impl From<$name> for zoo_core::ModelError {
            fn from(e: $name) -> Self {
                zoo_core::ModelError::new(e)
            }
        }
    };
}
