//! The one check of token ids against a model, for every family: a batch that is not
//! empty, fits the model's positions, and holds only ids inside its vocabulary. The ids
//! are read from the host rows when the caller has them, or from the device once.

use burn::tensor::{Int, Tensor};

/// A batch of token ids that a model cannot take, with the place of the first fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// No rows at all.
    #[error("the {what} batch is empty")]
    Empty {
        /// Which input (`input`, `source`, `decoder input`, `prompt`).
        what: &'static str,
    },
    /// A row without a token.
    #[error("{what} {row} is empty")]
    EmptyRow {
        /// Which input.
        what: &'static str,
        /// The row.
        row: usize,
    },
    /// Rows of different lengths where the model takes a matrix.
    #[error("{what} rows must be of equal length, got lengths {lengths:?}")]
    Ragged {
        /// Which input.
        what: &'static str,
        /// Each row's length.
        lengths: Vec<usize>,
    },
    /// A sequence longer than the model's positions.
    #[error("{what} of {len} tokens is longer than {limit} {max_len}")]
    TooLong {
        /// Which input.
        what: &'static str,
        /// Its length, cached positions included.
        len: usize,
        /// The config field that bounds it (`max_len`, `max_position_embeddings`).
        limit: &'static str,
        /// The bound.
        max_len: usize,
    },
    /// An id outside the vocabulary, negative ones included.
    #[error(
        "{what} id {id} at batch row {row}, position {position} is out of range for \
         {vocab} {vocab_size}"
    )]
    OutOfRange {
        /// Which ids (`token`, `token type`).
        what: &'static str,
        /// The config field that holds the vocabulary size (`vocab_size`).
        vocab: &'static str,
        /// The id.
        id: i64,
        /// Its row.
        row: usize,
        /// Its position in the row.
        position: usize,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The device's ids could not be read back.
    #[error("cannot read the {what} ids: {message}")]
    Read {
        /// Which ids.
        what: &'static str,
        /// The backend's reason.
        message: String,
    },
}

/// The first id of a batch outside `0..vocab_size`, with its place: `(id, row, position)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outlier {
    /// The id.
    pub id: i64,
    /// Its row.
    pub row: usize,
    /// Its position in the row.
    pub position: usize,
}

/// What a model checks a batch against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLimits {
    /// The vocabulary size: ids must be below it.
    pub vocab_size: usize,
    /// The most positions, cached ones included.
    pub max_len: usize,
    /// The config field that holds `max_len`, named in the error.
    pub limit: &'static str,
    /// The config field that holds `vocab_size`, named in the error.
    pub vocab: &'static str,
}

impl TokenLimits {
    /// Ids below `vocab_size`, sequences of at most `max_len` (named `max_len`).
    pub fn new(vocab_size: usize, max_len: usize) -> Self {
        Self {
            vocab_size,
            max_len,
            limit: "max_len",
            vocab: "vocab_size",
        }
    }

    /// The config field that holds the vocabulary size (`type_vocab_size`), as the error
    /// should name it.
    pub fn vocab_named(mut self, vocab: &'static str) -> Self {
        self.vocab = vocab;
        self
    }

    /// The config field that bounds the length, as the error should name it.
    pub fn named(mut self, limit: &'static str) -> Self {
        self.limit = limit;
        self
    }

    /// `len` tokens (after `offset` cached ones) fit; an empty input does not.
    ///
    /// # Errors
    /// [`TokenError::Empty`] or [`TokenError::TooLong`].
    pub fn check_len(
        &self,
        what: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<(), TokenError> {
        if len == 0 {
            return Err(TokenError::EmptyRow { what, row: 0 });
        }
        if offset + len > self.max_len {
            return Err(TokenError::TooLong {
                what,
                len: offset + len,
                limit: self.limit,
                max_len: self.max_len,
            });
        }
        Ok(())
    }

    /// The first id of `ids` (read row by row, `t` per row) outside the vocabulary.
    ///
    /// # Errors
    /// [`TokenError::OutOfRange`], naming the id and its place.
    pub fn check_ids(&self, what: &'static str, ids: &[i64], t: usize) -> Result<(), TokenError> {
        match first_outlier(ids, t, self.vocab_size) {
            Some(o) => Err(TokenError::OutOfRange {
                what,
                vocab: self.vocab,
                id: o.id,
                row: o.row,
                position: o.position,
                vocab_size: self.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// Host rows of possibly different lengths (prompts): none empty, the longest within
    /// `max_len`, every id inside the vocabulary.
    ///
    /// # Errors
    /// The first fault, as [`TokenError`].
    pub fn check_rows(&self, what: &'static str, rows: &[Vec<usize>]) -> Result<(), TokenError> {
        non_empty(what, rows)?;
        for (row, ids) in rows.iter().enumerate() {
            if let Some((position, &id)) = ids
                .iter()
                .enumerate()
                .find(|(_, id)| **id >= self.vocab_size)
            {
                return Err(TokenError::OutOfRange {
                    what: "token",
                    vocab: self.vocab,
                    id: i64::try_from(id).unwrap_or(i64::MAX),
                    row,
                    position,
                    vocab_size: self.vocab_size,
                });
            }
        }
        let longest = rows.iter().map(Vec::len).max().unwrap_or(0);
        self.check_len(what, 0, longest)
    }

    /// A device batch `[B, T]` after `offset` cached positions: its length, then its ids,
    /// read back once.
    ///
    /// # Errors
    /// The first fault, as [`TokenError`].
    pub fn check_tensor(
        &self,
        what: &'static str,
        tokens: &Tensor<2, Int>,
        offset: usize,
    ) -> Result<(), TokenError> {
        let [b, t] = tokens.dims();
        if b == 0 {
            return Err(TokenError::Empty { what });
        }
        self.check_len(what, offset, t)?;
        self.check_ids("token", &read_ids(tokens, "token")?, t)
    }
}

/// The first id of `ids` (`t` per row) that is negative or at least `vocab_size`.
pub fn first_outlier(ids: &[i64], t: usize, vocab_size: usize) -> Option<Outlier> {
    let vocab = i64::try_from(vocab_size).unwrap_or(i64::MAX);
    ids.iter()
        .position(|&id| id < 0 || id >= vocab)
        .map(|i| Outlier {
            id: ids[i],
            row: i / t.max(1),
            position: i % t.max(1),
        })
}

/// Host rows as one matrix of ids, checked to be non-empty and of equal length.
///
/// # Errors
/// [`TokenError::Empty`] or [`TokenError::Ragged`].
pub fn matrix(
    what: &'static str,
    rows: &[Vec<usize>],
) -> Result<(Vec<i64>, [usize; 2]), TokenError> {
    non_empty(what, rows)?;
    let t = rows[0].len();
    if rows.iter().any(|r| r.len() != t) {
        return Err(TokenError::Ragged {
            what,
            lengths: rows.iter().map(Vec::len).collect(),
        });
    }
    let flat = rows
        .iter()
        .flatten()
        .map(|&id| i64::try_from(id).unwrap_or(i64::MAX))
        .collect();
    Ok((flat, [rows.len(), t]))
}

/// At least one row, and a token in every row.
///
/// # Errors
/// [`TokenError::Empty`] or [`TokenError::EmptyRow`], naming the first empty row.
pub fn non_empty(what: &'static str, rows: &[Vec<usize>]) -> Result<(), TokenError> {
    if rows.is_empty() {
        return Err(TokenError::Empty { what });
    }
    match rows.iter().position(Vec::is_empty) {
        Some(row) => Err(TokenError::EmptyRow { what, row }),
        None => Ok(()),
    }
}

/// The ids of a device tensor, read back once.
///
/// # Errors
/// [`TokenError::Read`] when the backend cannot.
pub fn read_ids(tokens: &Tensor<2, Int>, what: &'static str) -> Result<Vec<i64>, TokenError> {
    tokens
        .to_data()
        .convert::<i64>()
        .try_into_vec::<i64>()
        .map_err(|e| TokenError::Read {
            what,
            message: format!("{e:?}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    #[test]
    fn each_fault_is_named_with_its_place() {
        let limits = TokenLimits::new(10, 4);
        assert!(limits.check_rows("prompt", &[vec![1, 9], vec![0]]).is_ok());
        assert_eq!(
            limits
                .check_rows("prompt", &[vec![1], vec![]])
                .unwrap_err()
                .to_string(),
            "prompt 1 is empty"
        );
        assert_eq!(
            limits
                .check_rows("prompt", &[vec![1], vec![2, 10]])
                .unwrap_err()
                .to_string(),
            "token id 10 at batch row 1, position 1 is out of range for vocab_size 10"
        );
        assert_eq!(
            limits
                .check_rows("prompt", &[vec![1; 5]])
                .unwrap_err()
                .to_string(),
            "prompt of 5 tokens is longer than max_len 4"
        );
        assert_eq!(
            limits
                .named("max_position_embeddings")
                .check_len("sequence", 2, 3)
                .unwrap_err()
                .to_string(),
            "sequence of 5 tokens is longer than max_position_embeddings 4"
        );
        assert!(limits.check_len("sequence", 1, 3).is_ok());
        assert_eq!(
            limits.check_rows("prompt", &[]).unwrap_err().to_string(),
            "the prompt batch is empty"
        );
        // The first outlier in row order, a negative id included.
        assert_eq!(
            first_outlier(&[1, 2, -3, 11], 2, 10),
            Some(Outlier {
                id: -3,
                row: 1,
                position: 0
            })
        );
        assert_eq!(first_outlier(&[0, 9, 9, 0], 2, 10), None);
        assert_eq!(
            matrix("input", &[vec![1, 2], vec![3]])
                .unwrap_err()
                .to_string(),
            "input rows must be of equal length, got lengths [2, 1]"
        );
        assert_eq!(
            matrix("input", &[vec![1, 2]]).unwrap(),
            (vec![1, 2], [1, 2])
        );
    }

    #[test]
    fn a_device_batch_is_read_back_and_checked() {
        let device = zoo_device::testing::test_device();
        let tokens =
            Tensor::<2, Int>::from_data(TensorData::new(vec![0i64, 3, 7, 2], [2, 2]), &device);
        let limits = TokenLimits::new(7, 8);
        assert_eq!(
            limits
                .check_tensor("input", &tokens, 0)
                .unwrap_err()
                .to_string(),
            "token id 7 at batch row 1, position 0 is out of range for vocab_size 7"
        );
        assert!(
            TokenLimits::new(8, 8)
                .check_tensor("input", &tokens, 6)
                .is_ok()
        );
        assert_eq!(
            TokenLimits::new(8, 8)
                .check_tensor("input", &tokens, 7)
                .unwrap_err()
                .to_string(),
            "input of 9 tokens is longer than max_len 8"
        );
    }
}
