//! Generation for the encoder-decoder models through `zoo-core`'s shared loop and beam
//! search: the source is encoded once, each decoder layer's cross-attention keys and
//! values are projected once, and the decoder's self-attention runs on a KV cache.
//! [`Encoded`] is the encoded source seen as a [`CausalLm`] whose prompt is the decoder's
//! start token.

use std::cell::Cell;

use burn::tensor::{Bool, Int, Tensor, TensorData};
use zoo_attention::{CrossKvCache, KvCache};
use zoo_core::{
    BeamConfig, BeamOutput, CausalLm, DecodeStep, Generation, GenerationConfig, ModelError,
    Seq2SeqLogits, beam_search, generate,
};

use crate::error::{Result, Seq2SeqError};
use crate::model::{DecodeInput, EncoderDecoder, Memory, Source};

/// Teacher-forced logits for `zoo-train`'s sequence-to-sequence task.
fn seq2seq_logits<M: EncoderDecoder>(
    model: &M,
    src: Tensor<2, Int>,
    src_padding: Tensor<2, Bool>,
    tgt_in: Tensor<2, Int>,
) -> Result<Tensor<3>, ModelError> {
    let source = Source::new(src, src_padding)?;
    Ok(model.forward(&source, tgt_in)?.logits)
}

macro_rules! seq2seq_logits_for {
    ($($model:ty),*) => {$(
        impl Seq2SeqLogits for $model {
            fn seq2seq_logits(
                &self,
                src: Tensor<2, Int>,
                src_padding: Tensor<2, Bool>,
                tgt_in: Tensor<2, Int>,
            ) -> Result<Tensor<3>, ModelError> {
                seq2seq_logits(self, src, src_padding, tgt_in)
            }
        }
    )*};
}

seq2seq_logits_for!(crate::MarianMtModel, crate::T5ForConditionalGeneration);

fn core(e: zoo_core::CoreError) -> Seq2SeqError {
    Seq2SeqError::Input(e.to_string())
}

/// A source batch encoded once, ready to decode from.
#[derive(Debug)]
pub struct Encoded<'a, M: EncoderDecoder> {
    model: &'a M,
    hidden: Tensor<3>,
    padding: Tensor<2, Bool>,
    cross: Vec<CrossKvCache>,
    projections: Cell<usize>,
}

/// The decoder's state while generating: each layer's self-attention cache, the
/// cross-attention keys and values of each row's source, and that source's padding.
#[derive(Debug, Clone)]
pub struct Seq2SeqCache {
    /// Self-attention, one per decoder layer.
    pub self_kv: Vec<KvCache>,
    /// Cross-attention keys and values, one per decoder layer.
    pub cross: Vec<CrossKvCache>,
    /// `[rows, S]`, `true` at source padding.
    pub padding: Tensor<2, Bool>,
}

fn rows_tensor(rows: &[usize], like: &Tensor<2, Bool>) -> Tensor<1, Int> {
    let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    Tensor::from_data(TensorData::new(ids, [rows.len()]), &like.device())
}

impl<'a, M: EncoderDecoder> Encoded<'a, M> {
    /// Encodes `source` and projects every decoder layer's cross-attention keys and values.
    ///
    /// # Errors
    /// What the encoder rejects (an empty source, ids past the vocabulary).
    pub fn new(model: &'a M, source: &Source) -> Result<Self> {
        let hidden = model.encode(source)?;
        let cross = model.cross_kv(&hidden)?;
        Ok(Self {
            model,
            hidden,
            padding: source.padding.clone(),
            cross,
            projections: Cell::new(1),
        })
    }

    /// How many times the cross-attention keys and values were projected from the
    /// encoder's output: once per [`Encoded::new`], and once per step without a cache.
    pub fn cross_projections(&self) -> usize {
        self.projections.get()
    }

    /// The encoder's output `[B, S, d_model]`.
    pub fn hidden(&self) -> &Tensor<3> {
        &self.hidden
    }

    /// Which source row each of `batch` decoding rows reads: `batch` is a multiple of the
    /// sources (beams), row `r` reading source `r / (batch / sources)`.
    fn source_rows(&self, batch: usize) -> Result<Vec<usize>> {
        let b = self.hidden.dims()[0];
        if batch == 0 || !batch.is_multiple_of(b) {
            return Err(Seq2SeqError::Input(format!(
                "{batch} decoding rows for {b} sources: expected a multiple"
            )));
        }
        let per = batch / b;
        Ok((0..batch).map(|r| r / per).collect())
    }
}

impl<M: EncoderDecoder> CausalLm for Encoded<'_, M> {
    type Cache = Seq2SeqCache;

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn max_len(&self) -> usize {
        self.model.max_target_len()
    }

    fn new_cache(&self, batch: usize) -> Result<Seq2SeqCache, ModelError> {
        let rows = self.source_rows(batch)?;
        let cross = self
            .cross
            .iter()
            .map(|c| c.select_rows(&rows))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(Seq2SeqError::from)?;
        let layers = self.model.decoder_layers().len();
        Ok(Seq2SeqCache {
            self_kv: vec![KvCache::new(self.model.max_target_len()); layers],
            cross,
            padding: self
                .padding
                .clone()
                .select(0, rows_tensor(&rows, &self.padding)),
        })
    }

    fn next_logits(
        &self,
        step: DecodeStep,
        cache: Option<&mut Seq2SeqCache>,
    ) -> Result<Tensor<2>, ModelError> {
        if step.key_padding.iter().flatten().any(|p| *p) {
            return Err(ModelError::msg(
                "decoder prompts of different lengths are not supported",
            ));
        }
        let [b, t] = step.dims();
        let device = self.hidden.device();
        let flat: Vec<i64> = step.tokens.iter().flatten().map(|&x| x as i64).collect();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(flat, [b, t]), &device);
        let out = match cache {
            Some(c) => {
                let offset = c.self_kv.first().map_or(0, KvCache::seen);
                let memory = Memory::Cached(c.cross.clone());
                let padding = c.padding.clone();
                self.model.decode(
                    DecodeInput::new(tokens, &memory, &padding).cached(offset, &mut c.self_kv),
                )?
            }
            None => {
                let rows = self.source_rows(b)?;
                let idx = rows_tensor(&rows, &self.padding);
                let memory = Memory::States(self.hidden.clone().select(0, idx.clone()));
                self.projections.set(self.projections.get() + 1);
                let padding = self.padding.clone().select(0, idx);
                self.model
                    .decode(DecodeInput::new(tokens, &memory, &padding))?
            }
        };
        let v = out.logits.dims()[2];
        // [B, T, V] -> the last position [B, V]
        Ok(out.logits.slice([0..b, t - 1..t, 0..v]).reshape([b, v]))
    }

    fn reorder_cache(&self, cache: &mut Seq2SeqCache, rows: &[usize]) -> Result<(), ModelError> {
        for layer in &mut cache.self_kv {
            layer.select_rows(rows).map_err(Seq2SeqError::from)?;
        }
        cache.cross = cache
            .cross
            .iter()
            .map(|c| c.select_rows(rows))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(Seq2SeqError::from)?;
        cache.padding = cache
            .padding
            .clone()
            .select(0, rows_tensor(rows, &cache.padding));
        Ok(())
    }
}

/// The sources encoded, and each decoder's prompt: the start token.
fn start<'a, M: EncoderDecoder>(
    model: &'a M,
    sources: &[Vec<usize>],
) -> Result<(Encoded<'a, M>, Vec<Vec<usize>>)> {
    let source = Source::from_ids(sources, model.pad_id(), &model.device())?;
    let encoded = Encoded::new(model, &source)?;
    Ok((encoded, vec![vec![model.start_id()]; sources.len()]))
}

/// Greedy or sampled generation from each source: the decoder starts from the model's
/// start token and stops at its end tokens (added to `cfg`'s).
///
/// # Errors
/// Empty sources, ids past the vocabulary, invalid settings.
pub fn generate_from<M: EncoderDecoder>(
    model: &M,
    sources: &[Vec<usize>],
    cfg: &GenerationConfig,
) -> Result<Generation> {
    let (encoded, prompts) = start(model, sources)?;
    let mut cfg = cfg.clone();
    cfg.stop_tokens.extend(model.eos_ids());
    generate(&encoded, &prompts, &cfg, |_, _| {}).map_err(core)
}

/// Beam search from each source, as [`generate_from`] starts and stops, with the
/// model's forced first and end tokens and banned tokens (Marian's) added to `cfg`'s.
///
/// # Errors
/// As [`generate_from`], and `num_beams = 0`.
pub fn beam_from<M: EncoderDecoder>(
    model: &M,
    sources: &[Vec<usize>],
    cfg: &BeamConfig,
) -> Result<BeamOutput> {
    let (encoded, prompts) = start(model, sources)?;
    let mut cfg = cfg.clone();
    cfg.stop_tokens.extend(model.eos_ids());
    cfg.banned_tokens.extend(model.banned_tokens());
    cfg.forced_eos = cfg.forced_eos.or(model.forced_eos());
    cfg.forced_bos = cfg.forced_bos.or(model.forced_bos());
    cfg.pad_id = model.pad_id();
    beam_search(&encoded, &prompts, &cfg).map_err(core)
}
