//! A copy task for an encoder-decoder, and a one-layer encoder-decoder built from
//! zoo-attention's blocks to learn it.

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Int, Tensor};
use rand::{Rng, SeedableRng};
use zoo_attention::position::{LearnedPosition, LearnedPositionConfig};
use zoo_attention::{
    BlockInput, CrossAttentionBlock, FeedForwardConfig, Mask, Memory, MultiHeadAttentionConfig,
    TransformerBlock, TransformerBlockConfig,
};
use zoo_data::Seq2SeqItem;
use zoo_train::{ModelError, Seq2SeqLogits};

/// Ids of the copy task: 0 padding, 1 BOS, 2 EOS, then the symbols.
pub const COPY_SYMBOLS: std::ops::Range<usize> = 3..13;

/// `n` copy-task pairs: a random string of 3 to 6 symbols and the same string.
pub fn copy_items(n: usize, seed: u64) -> Vec<Seq2SeqItem> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let len = rng.random_range(3..=6);
            let src: Vec<usize> = (0..len).map(|_| rng.random_range(COPY_SYMBOLS)).collect();
            Seq2SeqItem {
                tgt: src.clone(),
                src,
            }
        })
        .collect()
}

/// A one-layer encoder-decoder built from the core's blocks: learned positions, a
/// post-norm encoder block, a decoder block with cross-attention, an output projection.
#[derive(Module, Debug)]
pub struct ToySeq2Seq {
    /// Source embedding.
    pub src_emb: Embedding,
    /// Target embedding.
    pub tgt_emb: Embedding,
    /// Source positions.
    pub src_pos: LearnedPosition,
    /// Target positions.
    pub tgt_pos: LearnedPosition,
    /// Encoder layer.
    pub encoder: TransformerBlock,
    /// Decoder layer with cross-attention.
    pub decoder: CrossAttentionBlock,
    /// Output projection.
    pub out: Linear,
}

impl ToySeq2Seq {
    /// A model of width `d` over `vocab` ids and up to `max_len` positions.
    ///
    /// # Panics
    /// When `d` is not a multiple of 4 (4 heads).
    pub fn new(vocab: usize, d: usize, max_len: usize, device: &Device) -> Self {
        let attn = MultiHeadAttentionConfig::new(d, 4).with_dropout(0.0);
        let ffn = FeedForwardConfig::new(d, 4 * d);
        Self {
            src_emb: EmbeddingConfig::new(vocab, d).init(device),
            tgt_emb: EmbeddingConfig::new(vocab, d).init(device),
            src_pos: LearnedPositionConfig::new(max_len, d).init(device),
            tgt_pos: LearnedPositionConfig::new(max_len, d).init(device),
            encoder: TransformerBlockConfig::new(attn.clone(), ffn.clone())
                .init(device)
                .expect("valid encoder config"),
            decoder: TransformerBlockConfig::new(attn.clone(), ffn)
                .with_cross(attn)
                .init(device)
                .expect("valid decoder config"),
            out: LinearConfig::new(d, vocab).init(device),
        }
    }
}

impl Seq2SeqLogits for ToySeq2Seq {
    fn seq2seq_logits(
        &self,
        src: Tensor<2, Int>,
        src_padding: Tensor<2, Bool>,
        tgt_in: Tensor<2, Int>,
    ) -> Result<Tensor<3>, ModelError> {
        let device = src.device();
        let [_, s] = src.dims();
        let [_, t] = tgt_in.dims();
        let x = self.src_emb.forward(src)
            + self
                .src_pos
                .forward(s, 0, &device)
                .map_err(ModelError::new)?;
        let memory_mask = Mask::none().with_key_padding(src_padding);
        let memory = self
            .encoder
            .forward(BlockInput::new(x).mask(memory_mask.clone()))
            .map_err(ModelError::new)?
            .hidden;
        let y = self.tgt_emb.forward(tgt_in)
            + self
                .tgt_pos
                .forward(t, 0, &device)
                .map_err(ModelError::new)?;
        let h = self
            .decoder
            .forward(
                BlockInput::new(y).mask(Mask::causal()),
                Memory::States(&memory),
                memory_mask,
            )
            .map_err(ModelError::new)?
            .hidden;
        Ok(self.out.forward(h))
    }
}
