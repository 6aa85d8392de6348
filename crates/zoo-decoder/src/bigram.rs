//! The seeds' bigram baseline: next-token probabilities from counts of adjacent pairs,
//! with Laplace (add-alpha) smoothing.

use zoo_core::{ConfigError, TokenError};

use crate::error::Result;

/// A count-based bigram model over a vocabulary of `vocab_size` ids.
#[derive(Debug, Clone, PartialEq)]
pub struct BigramModel {
    vocab_size: usize,
    /// `log P(next | prev)`, row-major `[prev, next]`.
    log_probs: Vec<f64>,
}

impl BigramModel {
    /// Counts the pairs of every sequence and normalises each row with add-`alpha`
    /// smoothing: `P(j | i) = (N[i, j] + alpha) / (N[i, ·] + alpha · V)`.
    ///
    /// # Errors
    /// A non-positive `alpha`, a zero vocabulary, or an id outside it.
    pub fn fit(sequences: &[Vec<usize>], vocab_size: usize, alpha: f64) -> Result<Self> {
        if alpha.is_nan() || alpha <= 0.0 {
            return Err(ConfigError::range("bigram alpha", "> 0", alpha).into());
        }
        if vocab_size == 0 {
            return Err(ConfigError::zero("bigram vocab_size").into());
        }
        let mut counts = vec![0f64; vocab_size * vocab_size];
        for (row, seq) in sequences.iter().enumerate() {
            if let Some(position) = seq.iter().position(|&t| t >= vocab_size) {
                return Err(TokenError::OutOfRange {
                    what: "token",
                    vocab: "vocab_size",
                    id: i64::try_from(seq[position]).unwrap_or(i64::MAX),
                    row,
                    position,
                    vocab_size,
                }
                .into());
            }
            for w in seq.windows(2) {
                counts[w[0] * vocab_size + w[1]] += 1.0;
            }
        }
        let mut log_probs = vec![0f64; vocab_size * vocab_size];
        for i in 0..vocab_size {
            let row = &counts[i * vocab_size..(i + 1) * vocab_size];
            let total: f64 = row.iter().sum::<f64>() + alpha * vocab_size as f64;
            for j in 0..vocab_size {
                log_probs[i * vocab_size + j] = ((row[j] + alpha) / total).ln();
            }
        }
        Ok(Self {
            vocab_size,
            log_probs,
        })
    }

    /// `log P(next | prev)`.
    pub fn log_prob(&self, prev: usize, next: usize) -> f64 {
        self.log_probs[prev * self.vocab_size + next]
    }

    /// Mean negative log-likelihood per predicted token (nats) over the pairs of every
    /// sequence.
    pub fn nll(&self, sequences: &[Vec<usize>]) -> f64 {
        let mut total = 0.0;
        let mut n = 0usize;
        for seq in sequences {
            for w in seq.windows(2) {
                total -= self.log_prob(w[0], w[1]);
                n += 1;
            }
        }
        total / n.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laplace_smoothing_by_hand() {
        // Vocabulary {0, 1}; pairs 0->1 twice, 1->0 once.
        let m = BigramModel::fit(&[vec![0, 1, 0, 1]], 2, 1.0).unwrap();
        assert!((m.log_prob(0, 1) - (3.0f64 / 4.0).ln()).abs() < 1e-12);
        assert!((m.log_prob(0, 0) - (1.0f64 / 4.0).ln()).abs() < 1e-12);
        assert!((m.log_prob(1, 0) - (2.0f64 / 3.0).ln()).abs() < 1e-12);
        let nll = m.nll(&[vec![0, 1]]);
        assert!((nll + (3.0f64 / 4.0).ln()).abs() < 1e-12);
        assert!(BigramModel::fit(&[], 2, 0.0).is_err());
    }
}
