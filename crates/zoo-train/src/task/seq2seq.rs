//! Sequence-to-sequence training with teacher forcing.

use std::sync::Arc;

use burn::module::Module;
use burn::train::SequenceOutput;

use super::{ModelError, NanGuard, Seq2SeqBatch, Seq2SeqLogits, counted_positions};

/// Sequence-to-sequence training with teacher forcing: cross-entropy, token accuracy and
/// perplexity over the real target tokens (EOS included, padding excluded).
#[derive(Module, Debug)]
pub struct Seq2SeqTask<M: Seq2SeqLogits> {
    /// The model.
    pub model: M,
    #[module(skip)]
    pub(crate) guard: Arc<NanGuard>,
}

impl<M: Seq2SeqLogits> Seq2SeqTask<M> {
    /// Wraps a model.
    pub fn new(model: M) -> Self {
        Self {
            model,
            guard: Arc::default(),
        }
    }

    /// Loss and the counted positions' logits and targets.
    ///
    /// # Errors
    /// The model's own.
    pub fn forward(&self, batch: Seq2SeqBatch) -> Result<SequenceOutput, ModelError> {
        let logits = self
            .model
            .seq2seq_logits(batch.src, batch.src_padding, batch.tgt_in)?;
        Ok(counted_positions(logits, batch.tgt_out, batch.tgt_mask))
    }

    /// The training step's forward: the same as [`Self::forward`].
    ///
    /// # Errors
    /// The model's own.
    pub fn train_forward(&self, batch: Seq2SeqBatch) -> Result<SequenceOutput, ModelError> {
        self.forward(batch)
    }
}
