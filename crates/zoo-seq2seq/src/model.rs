//! What the family's models share: their inputs and outputs, the checks on token ids, and
//! the decoder stack run over the encoder's output or over its keys and values projected
//! once ([`Memory`]), with or without a self-attention cache.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use zoo_attention::{
    BlockInput, CrossAttentionBlock, CrossKvCache, KvCache, Mask, Memory as BlockMemory,
    TransformerBlock,
};

use zoo_core::tokens::{self, TokenLimits};

use crate::error::{Result, Seq2SeqError};

/// A source batch: token ids and their padding, built on the host so that ids are checked
/// there.
#[derive(Debug, Clone)]
pub struct Source {
    /// `[B, S]`
    pub tokens: Tensor<2, Int>,
    /// `[B, S]`, `true` at padding.
    pub padding: Tensor<2, Bool>,
    /// The ids, row by row (padding included), as checked against the model.
    ids: Vec<i64>,
}

impl Source {
    /// Right-pads `rows` with `pad_id` into one batch.
    ///
    /// # Errors
    /// No rows, or an empty row.
    pub fn from_ids(rows: &[Vec<usize>], pad_id: usize, device: &Device) -> Result<Self> {
        tokens::non_empty("source", rows)?;
        let s = rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(rows.len() * s);
        let mut pad = Vec::with_capacity(rows.len() * s);
        for row in rows {
            for i in 0..s {
                ids.push(row.get(i).copied().unwrap_or(pad_id) as i64);
                pad.push(i >= row.len());
            }
        }
        Ok(Self {
            tokens: Tensor::from_data(TensorData::new(ids.clone(), [rows.len(), s]), device),
            padding: Tensor::from_data(TensorData::new(pad, [rows.len(), s]), device),
            ids,
        })
    }

    /// Ids and padding already on the device (training batches); ids are checked by one
    /// read-back.
    ///
    /// # Errors
    /// Shapes that differ, or an empty source.
    pub fn new(tokens: Tensor<2, Int>, padding: Tensor<2, Bool>) -> Result<Self> {
        if tokens.dims() != padding.dims() {
            return Err(Seq2SeqError::Input(format!(
                "source padding has shape {:?}, the source {:?}",
                padding.dims(),
                tokens.dims()
            )));
        }
        let ids = tokens::read_ids(&tokens, "source token")?;
        Ok(Self {
            tokens,
            padding,
            ids,
        })
    }

    /// Checks the ids against a vocabulary and the length against `max_len`.
    pub(crate) fn check(&self, vocab_size: usize, max_len: usize) -> Result<()> {
        let [_, s] = self.tokens.dims();
        let limits = TokenLimits::new(vocab_size, max_len);
        limits.check_len("source", 0, s)?;
        Ok(limits.check_ids("source token", &self.ids, s)?)
    }
}

/// Checks target ids `[B, T]` starting at `offset` against the model (one read-back).
pub(crate) fn check_target(
    tokens: &Tensor<2, Int>,
    offset: usize,
    vocab_size: usize,
    max_len: usize,
) -> Result<()> {
    Ok(TokenLimits::new(vocab_size, max_len).check_tensor("decoder input", tokens, offset)?)
}

/// What the decoder's cross-attention reads.
// One value per decoder pass, never stored in bulk: the size of a tensor handle is fine.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Memory {
    /// The encoder's output `[B, S, d_model]`; every call projects its keys and values.
    States(Tensor<3>),
    /// Each decoder layer's keys and values of the encoder's output, projected once.
    Cached(Vec<CrossKvCache>),
}

/// The output of a decoder pass.
#[derive(Debug, Clone)]
pub struct DecoderOutput {
    /// `[B, T, V]`
    pub logits: Tensor<3>,
    /// Per decoder layer, the cross-attention weights `[B, H, T, S]`, when asked for.
    pub cross_attentions: Vec<Tensor<4>>,
}

/// One decoder pass: target tokens `[B, T]` at positions `offset..offset + T`, reading
/// the encoder's memory under the source padding, through each layer's self-attention
/// cache when there are caches.
#[derive(Debug)]
pub struct DecodeInput<'a> {
    /// Target tokens `[B, T]`.
    pub tokens: Tensor<2, Int>,
    /// Position of the first token.
    pub offset: usize,
    /// What cross-attention reads.
    pub memory: &'a Memory,
    /// The source padding `[B, S]`, `true` at padding.
    pub src_padding: &'a Tensor<2, Bool>,
    /// One self-attention cache per decoder layer, extended by the new positions.
    pub caches: Option<&'a mut [KvCache]>,
    /// Whether to return each layer's cross-attention weights.
    pub need_weights: bool,
}

impl<'a> DecodeInput<'a> {
    /// The whole target from position 0, without caches or weights.
    pub fn new(
        tokens: Tensor<2, Int>,
        memory: &'a Memory,
        src_padding: &'a Tensor<2, Bool>,
    ) -> Self {
        Self {
            tokens,
            offset: 0,
            memory,
            src_padding,
            caches: None,
            need_weights: false,
        }
    }

    /// New positions from `offset` on, extending `caches`.
    pub fn cached(mut self, offset: usize, caches: &'a mut [KvCache]) -> Self {
        self.offset = offset;
        self.caches = Some(caches);
        self
    }

    /// Returns the cross-attention weights.
    pub fn with_weights(mut self) -> Self {
        self.need_weights = true;
        self
    }
}

/// Runs a decoder stack over `x` `[B, T, d_model]`, the embedded tokens of `input`.
/// `bias(layer)` is the self-attention bias a layer takes from outside (T5's relative
/// positions, computed by the first layer).
pub(crate) fn run_decoder(
    layers: &[CrossAttentionBlock],
    mut x: Tensor<3>,
    input: DecodeInput<'_>,
    bias: impl Fn(usize) -> Option<Tensor<4>>,
) -> Result<(Tensor<3>, Vec<Tensor<4>>)> {
    let DecodeInput {
        memory,
        src_padding,
        mut caches,
        need_weights,
        ..
    } = input;
    if let Some(c) = &caches
        && c.len() != layers.len()
    {
        return Err(Seq2SeqError::Input(format!(
            "the cache has {} layers, the decoder {}",
            c.len(),
            layers.len()
        )));
    }
    if let Memory::Cached(kv) = memory
        && kv.len() != layers.len()
    {
        return Err(Seq2SeqError::Input(format!(
            "the cross-attention cache has {} layers, the decoder {}",
            kv.len(),
            layers.len()
        )));
    }
    let cross_mask = Mask::none().with_key_padding(src_padding.clone());
    let mut weights = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let mut mask = if caches.is_some() {
            Mask::none()
        } else {
            Mask::causal()
        };
        if let Some(b) = bias(i) {
            mask = mask.with_bias(b);
        }
        let mut input = BlockInput::new(x).mask(mask);
        let layer_memory = match memory {
            Memory::States(h) => BlockMemory::States(h),
            Memory::Cached(kv) => BlockMemory::Cached(&kv[i]),
        };
        if need_weights {
            input = input.with_weights();
        }
        let cross_mask = cross_mask.clone();
        let out = match caches.as_deref_mut() {
            Some(c) => layer.forward_cached(input, &mut c[i], layer_memory, cross_mask)?,
            None => layer.forward(input, layer_memory, cross_mask)?,
        };
        x = out.hidden;
        weights.extend(out.cross_weights);
    }
    Ok((x, weights))
}

/// Runs an encoder stack over `x` `[B, S, d_model]` with the source padding.
pub(crate) fn run_encoder(
    layers: &[TransformerBlock],
    mut x: Tensor<3>,
    padding: &Tensor<2, Bool>,
    bias: impl Fn(usize) -> Option<Tensor<4>>,
) -> Result<Tensor<3>> {
    for (i, layer) in layers.iter().enumerate() {
        let mut mask = Mask::none().with_key_padding(padding.clone());
        if let Some(b) = bias(i) {
            mask = mask.with_bias(b);
        }
        x = layer.forward(BlockInput::new(x).mask(mask))?.hidden;
    }
    Ok(x)
}

/// The encoder-decoder models as generation and training see them.
pub trait EncoderDecoder {
    /// Vocabulary size.
    fn vocab_size(&self) -> usize;
    /// Most decoder positions.
    fn max_target_len(&self) -> usize;
    /// Most source positions.
    fn max_source_len(&self) -> usize;
    /// The decoder's first token.
    fn start_id(&self) -> usize;
    /// End-of-sequence tokens.
    fn eos_ids(&self) -> Vec<usize>;
    /// The padding token.
    fn pad_id(&self) -> usize;
    /// A token generation forces at the last position the length allows (HF's
    /// `forced_eos_token_id`).
    fn forced_eos(&self) -> Option<usize> {
        None
    }
    /// A token generation forces as the first new one (HF's `forced_bos_token_id`:
    /// mBART-50's target language).
    fn forced_bos(&self) -> Option<usize> {
        None
    }
    /// Tokens generation never picks (HF's single-token `bad_words_ids`).
    fn banned_tokens(&self) -> Vec<usize> {
        Vec::new()
    }
    /// Decoder layers.
    fn decoder_layers(&self) -> &[CrossAttentionBlock];
    /// The device the weights live on.
    fn device(&self) -> Device;

    /// The encoder's output `[B, S, d_model]`.
    ///
    /// # Errors
    /// An empty or too long source, or ids past the vocabulary.
    fn encode(&self, source: &Source) -> Result<Tensor<3>>;

    /// Logits `[B, T, V]` for decoder tokens `[B, T]` at positions `offset..offset + T`.
    ///
    /// # Errors
    /// Ids past the vocabulary, a sequence past the positions, or caches that do not fit.
    fn decode(&self, input: DecodeInput<'_>) -> Result<DecoderOutput>;

    /// Teacher-forced logits `[B, T, V]`: the source encoded, then the decoder over
    /// `tgt_in` in one pass.
    ///
    /// # Errors
    /// As [`Self::encode`] and [`Self::decode`].
    fn forward(&self, source: &Source, tgt_in: Tensor<2, Int>) -> Result<DecoderOutput> {
        let memory = Memory::States(self.encode(source)?);
        self.decode(DecodeInput::new(tgt_in, &memory, &source.padding))
    }

    /// Each decoder layer's cross-attention keys and values of `encoded`, projected once.
    ///
    /// # Errors
    /// An encoder output of the wrong width.
    fn cross_kv(&self, encoded: &Tensor<3>) -> Result<Vec<CrossKvCache>> {
        self.decoder_layers()
            .iter()
            .map(|l| Ok(l.cross_attn.cross_kv(encoded.clone())?))
            .collect()
    }
}
