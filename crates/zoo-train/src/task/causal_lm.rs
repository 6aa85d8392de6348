//! Causal (or masked) language modelling.

use std::sync::Arc;

use burn::module::Module;
use burn::train::SequenceOutput;

use super::{CausalLmBatch, ModelError, NanGuard, TokenLogits, counted_logits};

/// Causal (or masked) language modelling over [`CausalLmBatch`]es: cross-entropy on the
/// positions the batch's target mask marks, so padding never counts. Its output feeds
/// loss, perplexity and accuracy over those positions only.
#[derive(Module, Debug)]
pub struct CausalLmTask<M: TokenLogits> {
    /// The model.
    pub model: M,
    #[module(skip)]
    pub(crate) guard: Arc<NanGuard>,
}

impl<M: TokenLogits> CausalLmTask<M> {
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
    pub fn forward(&self, batch: CausalLmBatch) -> Result<SequenceOutput, ModelError> {
        // Only the counted positions reach the output layer (all of them for a causal LM
        // but the padding; the chosen 15% for a masked LM).
        let idx = zoo_core::kept_rows(&batch.targets, &batch.target_mask)?;
        let logits =
            self.model
                .token_logits_at(batch.inputs, Some(batch.padding), batch.target_mask)?;
        Ok(counted_logits(logits, batch.targets, idx))
    }

    /// The training step's forward: the same as [`Self::forward`].
    ///
    /// # Errors
    /// The model's own.
    pub fn train_forward(&self, batch: CausalLmBatch) -> Result<SequenceOutput, ModelError> {
        self.forward(batch)
    }
}
