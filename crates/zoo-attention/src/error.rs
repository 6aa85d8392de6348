//! The crate's error type.

/// Everything that can go wrong when building or running an attention layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AttentionError {
    /// `d_model` does not split into `n_heads` equal heads.
    #[error("d_model {d_model} is not divisible by n_heads {n_heads}")]
    HeadsDoNotDivideModel {
        /// Model width.
        d_model: usize,
        /// Number of query heads.
        n_heads: usize,
    },
    /// Grouped-query attention needs every KV head to serve the same number of query heads.
    #[error("n_heads {n_heads} is not divisible by n_kv_heads {n_kv_heads}")]
    KvHeadsDoNotDivideHeads {
        /// Number of query heads.
        n_heads: usize,
        /// Number of key/value heads.
        n_kv_heads: usize,
    },
    /// RoPE rotates pairs of features, so the head dimension must be even.
    #[error("rotary embeddings need an even head dimension, got {head_dim}")]
    OddRopeDim {
        /// Size of one head.
        head_dim: usize,
    },
    /// A size that must be positive was zero.
    #[error("{name} must be > 0, got 0")]
    Zero {
        /// Which size.
        name: &'static str,
    },
    /// A probability outside `[0, 1)`.
    #[error("{name} must be in [0, 1), got {value}")]
    BadProbability {
        /// Which probability.
        name: &'static str,
        /// The value given.
        value: f64,
    },
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
    /// A setting outside the range where it means something.
    #[error("{name} must be {bound}, got {value}")]
    OutOfRange {
        /// Which setting.
        name: &'static str,
        /// The range, in words (`>= 4`, `> 0`).
        bound: &'static str,
        /// The value given.
        value: String,
    },
    /// Two settings that cannot be used together.
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
