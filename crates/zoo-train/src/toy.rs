//! Small tasks for exercising the learner: Gaussian blobs around class centres and an
//! MLP to separate them (the `zoo-train-toy` program), a copy task for an
//! encoder-decoder, and the 8×8 handwritten digits with a small convolutional network
//! for image classification. Used by the tests.

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};

use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Embedding, EmbeddingConfig};
use burn::tensor::Bool;
use zoo_attention::position::{LearnedPosition, LearnedPositionConfig};
use zoo_attention::{
    BlockInput, FeedForwardConfig, Mask, MultiHeadAttentionConfig, TransformerBlock,
    TransformerBlockConfig,
};
use zoo_data::Seq2SeqItem;
use zoo_data::digits::{CLASSES, DigitImage, SIDE};

use crate::task::{ClassLogits, ClassificationBatch, ModelError, Seq2SeqLogits};

/// One example: features and a class.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobItem {
    /// Features.
    pub x: Vec<f32>,
    /// Class id.
    pub y: usize,
}

/// `n` examples of `classes` blobs in `dim` dimensions: centre `c` has a 3 in coordinate
/// `c % dim` (and a -3 in the next), noise N(0, 1) per coordinate. Items whose index is
/// in `nan_at` get NaN features (for the NaN guard test).
pub fn blobs(n: usize, classes: usize, dim: usize, seed: u64, nan_at: &[usize]) -> Vec<BlobItem> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let y = rng.random_range(0..classes);
            let x = (0..dim)
                .map(|d| {
                    // Box-Muller for a standard normal draw.
                    let u1: f32 = rng.random::<f32>().max(1e-7);
                    let u2: f32 = rng.random();
                    let noise = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
                    let centre = if d == y % dim {
                        3.0
                    } else if d == (y + 1) % dim {
                        -3.0
                    } else {
                        0.0
                    };
                    if nan_at.contains(&i) {
                        f32::NAN
                    } else {
                        centre + noise
                    }
                })
                .collect();
            BlobItem { x, y }
        })
        .collect()
}

/// Stacks blob items.
#[derive(Debug, Clone, Default)]
pub struct BlobBatcher;

impl Batcher<BlobItem, ClassificationBatch<Tensor<2>>> for BlobBatcher {
    fn batch(&self, items: Vec<BlobItem>, device: &Device) -> ClassificationBatch<Tensor<2>> {
        let dim = items.first().map_or(0, |i| i.x.len());
        let x: Vec<f32> = items.iter().flat_map(|i| i.x.iter().copied()).collect();
        let y: Vec<i64> = items.iter().map(|i| i.y as i64).collect();
        ClassificationBatch {
            inputs: Tensor::from_data(TensorData::new(x, [items.len(), dim]), device),
            targets: Tensor::<1, Int>::from_data(TensorData::new(y, [items.len()]), device),
        }
    }
}

/// A two-layer perceptron.
#[derive(Module, Debug)]
pub struct Mlp {
    /// Hidden layer.
    pub fc1: Linear,
    /// Output layer.
    pub fc2: Linear,
}

impl Mlp {
    /// An MLP `dim -> hidden -> classes`.
    pub fn new(dim: usize, hidden: usize, classes: usize, device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(dim, hidden).init(device),
            fc2: LinearConfig::new(hidden, classes).init(device),
        }
    }
}

impl ClassLogits for Mlp {
    type Input = Tensor<2>;

    fn class_logits(&self, x: Tensor<2>) -> Result<Tensor<2>, ModelError> {
        Ok(self.fc2.forward(relu(self.fc1.forward(x))))
    }
}

/// Batches digits as `[B, 1, 8, 8]` images with their labels.
#[derive(Debug, Clone, Default)]
pub struct DigitBatcher;

impl Batcher<DigitImage, ClassificationBatch<Tensor<4>>> for DigitBatcher {
    fn batch(&self, items: Vec<DigitImage>, device: &Device) -> ClassificationBatch<Tensor<4>> {
        let n = items.len();
        let x: Vec<f32> = items
            .iter()
            .flat_map(|i| i.pixels.iter().copied())
            .collect();
        let y: Vec<i64> = items.iter().map(|i| i.label as i64).collect();
        ClassificationBatch {
            inputs: Tensor::from_data(TensorData::new(x, [n, 1, SIDE, SIDE]), device),
            targets: Tensor::<1, Int>::from_data(TensorData::new(y, [n]), device),
        }
    }
}

/// Two 3×3 convolutions (8 and 16 channels, ReLU), a 2×2 max-pool, a linear classifier.
#[derive(Module, Debug)]
pub struct DigitCnn {
    /// `1 -> 8` channels, 8×8.
    pub conv1: Conv2d,
    /// `8 -> 16` channels, 8×8.
    pub conv2: Conv2d,
    /// 8×8 -> 4×4.
    pub pool: MaxPool2d,
    /// `16·4·4 -> 10`.
    pub head: Linear,
}

impl DigitCnn {
    /// A freshly initialised network.
    pub fn new(device: &Device) -> Self {
        let conv = |c_in, c_out| {
            Conv2dConfig::new([c_in, c_out], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .init(device)
        };
        Self {
            conv1: conv(1, 8),
            conv2: conv(8, 16),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            head: LinearConfig::new(16 * 4 * 4, CLASSES).init(device),
        }
    }
}

impl ClassLogits for DigitCnn {
    type Input = Tensor<4>;

    fn class_logits(&self, x: Tensor<4>) -> Result<Tensor<2>, ModelError> {
        let x = relu(self.conv1.forward(x));
        let x = self.pool.forward(relu(self.conv2.forward(x)));
        Ok(self.head.forward(x.flatten(1, 3)))
    }
}

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
    pub decoder: TransformerBlock,
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
                .with_cross_attention(Some(attn))
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
                BlockInput::new(y)
                    .mask(Mask::causal())
                    .memory(memory, memory_mask),
            )
            .map_err(ModelError::new)?
            .hidden;
        Ok(self.out.forward(h))
    }
}
