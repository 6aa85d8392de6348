//! The batch types that the training tasks consume. Batchers that build them live in
//! `zoo-data`; models never see them, only the tensors inside.

use burn::tensor::{Bool, Int, Tensor};

/// A batch of token sequences for causal or masked language modelling, right-padded to
/// the longest.
#[derive(Debug, Clone)]
pub struct CausalLmBatch {
    /// `[B, T]` input ids (padding holds the batcher's `pad_id`).
    pub inputs: Tensor<2, Int>,
    /// `[B, T]`, `true` at padding positions of `inputs`. A bidirectional model must not
    /// attend to them; a causal one never reaches them from a real position.
    pub padding: Tensor<2, Bool>,
    /// `[B, T]` target ids (0 where nothing is predicted).
    pub targets: Tensor<2, Int>,
    /// `[B, T]`, `true` where a target counts in the loss.
    pub target_mask: Tensor<2, Bool>,
}

/// A batch for teacher forcing: the decoder reads `BOS + target` and predicts
/// `target + EOS`.
#[derive(Debug, Clone)]
pub struct Seq2SeqBatch {
    /// `[B, S]` source ids, right-padded.
    pub src: Tensor<2, Int>,
    /// `[B, S]`, `true` at source padding.
    pub src_padding: Tensor<2, Bool>,
    /// `[B, T]` decoder input: BOS then the target, right-padded.
    pub tgt_in: Tensor<2, Int>,
    /// `[B, T]` decoder targets: the target then EOS (0 at padding).
    pub tgt_out: Tensor<2, Int>,
    /// `[B, T]`, `true` where a target counts.
    pub tgt_mask: Tensor<2, Bool>,
}

/// A batch for classification: the model's input and one class per example.
#[derive(Debug, Clone)]
pub struct ClassificationBatch<X> {
    /// The model's input (token ids, features, images).
    pub inputs: X,
    /// `[B]` class ids.
    pub targets: Tensor<1, Int>,
    /// `[B, K]` a teacher's logits on the same inputs, for knowledge distillation (`None`
    /// for plain training).
    pub teacher_logits: Option<Tensor<2>>,
}

impl<X> ClassificationBatch<X> {
    /// A batch of inputs and their classes, with no teacher.
    pub fn new(inputs: X, targets: Tensor<1, Int>) -> Self {
        Self {
            inputs,
            targets,
            teacher_logits: None,
        }
    }

    /// The same batch with a teacher's logits `[B, K]`.
    #[must_use]
    pub fn with_teacher_logits(mut self, logits: Tensor<2>) -> Self {
        self.teacher_logits = Some(logits);
        self
    }
}
