//! The traits a task or a generator needs from a model. Each family implements the ones
//! its models support; `zoo-train`'s tasks and [`crate::generate()`] are written against
//! these traits only.
//!
//! Every forward pass returns `Result`: a bad batch (a wrong shape, an id outside the
//! vocabulary) surfaces as a [`ModelError`] that the caller reports, never as a panic
//! inside a training step.

use burn::module::{Module, ModuleDisplay};
use burn::tensor::{Bool, Int, Tensor};

use crate::error::ModelError;

/// A model that maps token ids `[B, T]` to logits `[B, T, V]`: a causal LM, or a masked LM
/// whose bidirectional attention must skip the padding.
pub trait TokenLogits: Module + ModuleDisplay + 'static {
    /// # Shapes
    /// - `tokens`: `[B, T]`
    /// - `padding`: `[B, T]`, `true` at padding positions (never attended to)
    /// - returns `[B, T, V]`
    ///
    /// # Errors
    /// Whatever the model rejects: ids outside the vocabulary, sequences that are too long.
    fn token_logits(
        &self,
        tokens: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<3>, ModelError>;

    /// The logits of only the positions `keep` marks, in row-major order: `[N, V]` for
    /// `N` marked positions. A training task needs no more than that, and a masked LM,
    /// whose 15% of chosen positions are all that count, saves most of its output layer
    /// by projecting only them. The default computes every position and keeps the marked
    /// ones.
    ///
    /// # Shapes
    /// - `tokens`, `padding`, `keep`: `[B, T]`
    /// - returns `[N, V]`
    ///
    /// # Errors
    /// A `keep` whose shape is not the tokens', and whatever
    /// [`TokenLogits::token_logits`] rejects.
    fn token_logits_at(
        &self,
        tokens: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
        keep: Tensor<2, Bool>,
    ) -> Result<Tensor<2>, ModelError> {
        let rows = kept_rows(&tokens, &keep)?;
        let logits = self.token_logits(tokens, padding)?;
        let [b, t, v] = logits.dims();
        Ok(logits.reshape([b * t, v]).select(0, rows))
    }
}

/// The flattened indices (`b·T + t`) of the positions `keep` marks, `[N]`, after checking
/// that `keep` has the tokens' shape `[B, T]`.
///
/// # Errors
/// Shapes that differ, named in the message.
pub fn kept_rows(
    tokens: &Tensor<2, Int>,
    keep: &Tensor<2, Bool>,
) -> Result<Tensor<1, Int>, ModelError> {
    let [b, t] = tokens.dims();
    if keep.dims() != [b, t] {
        return Err(ModelError::msg(format!(
            "the positions to keep have shape {:?}, but the tokens have [{b}, {t}]",
            keep.dims()
        )));
    }
    let rows = keep.clone().reshape([b * t]).argwhere();
    let n = rows.dims()[0];
    Ok(rows.reshape([n]))
}

/// An encoder-decoder that maps a source and the decoder's input (teacher forcing) to
/// next-token logits.
pub trait Seq2SeqLogits: Module + ModuleDisplay + 'static {
    /// # Shapes
    /// - `src`: `[B, S]`, `src_padding`: `[B, S]` (`true` at padding), `tgt_in`: `[B, T]`
    /// - returns `[B, T, V]`
    ///
    /// # Errors
    /// Whatever the model rejects.
    fn seq2seq_logits(
        &self,
        src: Tensor<2, Int>,
        src_padding: Tensor<2, Bool>,
        tgt_in: Tensor<2, Int>,
    ) -> Result<Tensor<3>, ModelError>;
}

/// A model that maps a batch of inputs to class logits `[B, C]`.
pub trait ClassLogits: Module + ModuleDisplay + 'static {
    /// The model's input (token ids, features, images).
    type Input: Clone + Send + 'static;

    /// # Shapes
    /// - returns `[B, C]`
    ///
    /// # Errors
    /// Whatever the model rejects.
    fn class_logits(&self, input: Self::Input) -> Result<Tensor<2>, ModelError>;
}

/// A model that maps token sequences to one vector each (sentence embeddings).
pub trait SentenceEmbedding: Module + ModuleDisplay + 'static {
    /// # Shapes
    /// - `tokens`: `[B, T]`, `padding`: `[B, T]` (`true` at padding) -> `[B, D]`
    ///
    /// # Errors
    /// Whatever the model rejects.
    fn sentence_embedding(
        &self,
        tokens: Tensor<2, Int>,
        padding: Tensor<2, Bool>,
    ) -> Result<Tensor<2>, ModelError>;
}

/// The input of one decoding step, built on the host so that every id and position is
/// checked there, before any tensor exists (no device read-back inside the loop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeStep {
    /// The new token ids of each row; every row has the same length.
    pub tokens: Vec<Vec<usize>>,
    /// The position of each new token (rows of a left-padded batch count from their first
    /// real token).
    pub positions: Vec<Vec<usize>>,
    /// `true` at padding keys, per row, over every position the keys span: those already
    /// in the cache followed by the new ones (without a cache, the new ones alone).
    pub key_padding: Vec<Vec<bool>>,
}

impl DecodeStep {
    /// Rows and new positions per row.
    pub fn dims(&self) -> [usize; 2] {
        [self.tokens.len(), self.tokens.first().map_or(0, Vec::len)]
    }

    /// The largest id, if any.
    pub fn max_token(&self) -> Option<usize> {
        self.tokens.iter().flatten().copied().max()
    }

    /// The largest position, if any.
    pub fn max_position(&self) -> Option<usize> {
        self.positions.iter().flatten().copied().max()
    }
}

/// A language model that decodes left to right with a cache: a decoder-only model, or an
/// encoder-decoder whose source has been encoded already (its cache then also holds the
/// encoder's keys and values). [`crate::generate()`] drives any such model.
pub trait CausalLm {
    /// Per-layer keys and values of the positions decoded so far.
    type Cache;

    /// Vocabulary size: every id below it is valid.
    fn vocab_size(&self) -> usize;

    /// Most positions a sequence may hold, prompt included.
    fn max_len(&self) -> usize;

    /// An empty cache for a batch of `batch` rows.
    ///
    /// # Errors
    /// Whatever the model rejects.
    fn new_cache(&self, batch: usize) -> Result<Self::Cache, ModelError>;

    /// The next-token logits after the last new position of every row: with a cache, the
    /// step holds only the positions not yet cached and extends the cache; without one it
    /// holds the whole sequence.
    ///
    /// # Shapes
    /// - returns `[B, V]`
    ///
    /// # Errors
    /// Whatever the model rejects (the cache full, ids out of range).
    fn next_logits(
        &self,
        step: DecodeStep,
        cache: Option<&mut Self::Cache>,
    ) -> Result<Tensor<2>, ModelError>;

    /// The sequence length past which a cache filled before must be rebuilt from the whole
    /// sequence, once: a model that encodes positions differently once a sequence is
    /// longer than some length (LongRoPE's long factors, Phi-3's 128k models) recomputes
    /// every key with the new encoding the first time a sequence passes it, as
    /// `transformers`' Phi-3 does when it generates. Default: never.
    fn rebuild_cache_past(&self) -> Option<usize> {
        None
    }

    /// Rebuilds the cache so that its row `i` holds what row `rows[i]` held: beam search
    /// moves beams between rows. Models that cannot do it refuse beam search with a cache.
    ///
    /// # Errors
    /// A model without the operation, or rows outside the cache.
    fn reorder_cache(&self, cache: &mut Self::Cache, rows: &[usize]) -> Result<(), ModelError> {
        let _ = (cache, rows);
        Err(ModelError::msg(
            "this model cannot reorder its cache, so it has no beam search with a cache",
        ))
    }
}

/// Where the next step of a decoding loop starts: at `fed`, the positions already cached,
/// or at 0 without a cache, or at 0 with an emptied cache when the sequence (now `len`
/// long, over `rows` rows) first passes the model's
/// [`CausalLm::rebuild_cache_past`] length.
///
/// # Errors
/// A new cache the model refuses.
pub(crate) fn step_start<M: CausalLm + ?Sized>(
    model: &M,
    cache: &mut Option<M::Cache>,
    fed: usize,
    len: usize,
    rows: usize,
) -> Result<usize, ModelError> {
    let Some(c) = cache.as_mut() else {
        return Ok(0);
    };
    match model.rebuild_cache_past() {
        Some(limit) if fed > 0 && fed <= limit && len > limit => {
            *c = model.new_cache(rows)?;
            Ok(0)
        }
        _ => Ok(fed),
    }
}
