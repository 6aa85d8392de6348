//! Output layers the families share: the language-model head, tied to the token
//! embedding or a matrix of its own, and the `tanh(dense(h[:, 0]))` pooler of BERT and
//! ViT.

use burn::module::Module;
use burn::nn::{Embedding, Initializer, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};

use crate::block::{linear_rows, tied_logits};

/// The tied form of [`LmHead`]: it holds nothing, and reads the embedding's table.
#[derive(Module, Debug)]
pub struct TiedHead {}

/// The language-model head. The variant name does not appear in module paths: an untied
/// head's matrix is `lm_head.weight`, as in HF checkpoints.
#[derive(Module, Debug)]
pub enum LmHead {
    /// Logits `h · Eᵀ` against the token embedding `E` `[V, d_model]` (GPT-2, T5 v1.0).
    Tied(TiedHead),
    /// A matrix of its own, `[d_model, V]` (Llama, T5 v1.1).
    Untied(Linear),
}

impl LmHead {
    /// A tied head, or an untied `[d_model, vocab_size]` one without a bias.
    pub fn new(
        tied: bool,
        d_model: usize,
        vocab_size: usize,
        initializer: Initializer,
        device: &Device,
    ) -> Self {
        if tied {
            Self::Tied(TiedHead {})
        } else {
            Self::Untied(
                LinearConfig::new(d_model, vocab_size)
                    .with_bias(false)
                    .with_initializer(initializer)
                    .init(device),
            )
        }
    }

    /// Whether the head reads the embedding's table.
    pub fn is_tied(&self) -> bool {
        matches!(self, Self::Tied(_))
    }

    /// Logits of hidden states.
    ///
    /// # Shapes
    /// - `h`: `[B, T, d_model]`, `embedding` `[V, d_model]` -> `[B, T, V]`
    pub fn forward(&self, h: Tensor<3>, embedding: &Embedding) -> Tensor<3> {
        match self {
            Self::Tied(_) => tied_logits(h, embedding.weight.val()),
            Self::Untied(head) => linear_rows(head, h),
        }
    }
}

/// BERT's and ViT's pooler: `tanh(dense(h[:, 0]))`, the first token's state through a
/// dense layer (HF `pooler.dense`); DistilBERT's sequence classifier takes a ReLU
/// instead (its `pre_classifier`).
#[derive(Module, Debug)]
pub struct Pooler {
    /// `[d_model, d_pool]`
    pub dense: Linear,
    /// The activation after `dense`.
    #[module(skip)]
    pub activation: PoolerActivation,
}

/// The activation of a [`Pooler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolerActivation {
    /// BERT's and ViT's.
    #[default]
    Tanh,
    /// DistilBERT's.
    Relu,
}

impl Pooler {
    /// A pooler from `d_model` to `d_pool` features.
    pub fn new(d_model: usize, d_pool: usize, initializer: Initializer, device: &Device) -> Self {
        Self {
            dense: LinearConfig::new(d_model, d_pool)
                .with_initializer(initializer)
                .init(device),
            activation: PoolerActivation::Tanh,
        }
    }

    /// The same pooler with another activation.
    pub fn with_activation(mut self, activation: PoolerActivation) -> Self {
        self.activation = activation;
        self
    }

    /// Output width.
    pub fn d_pool(&self) -> usize {
        self.dense.weight.dims()[1]
    }

    /// # Shapes
    /// - `h`: `[B, T, d_model]` -> `[B, d_pool]`
    pub fn forward(&self, h: Tensor<3>) -> Tensor<2> {
        let [b, _, d] = h.dims();
        let cls = h.slice([0..b, 0..1, 0..d]).reshape([b, d]);
        let x = self.dense.forward(cls);
        match self.activation {
            PoolerActivation::Tanh => x.tanh(),
            PoolerActivation::Relu => burn::tensor::activation::relu(x),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::EmbeddingConfig;
    use burn::tensor::Distribution;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    #[test]
    fn a_tied_head_reads_the_embedding_and_an_untied_one_its_own_matrix() {
        let dev = test_device();
        let emb = EmbeddingConfig::new(7, 4).init(&dev);
        let h = Tensor::<3>::random([2, 3, 4], Distribution::Normal(0.0, 1.0), &dev);
        let tied = LmHead::new(true, 4, 7, Initializer::Zeros, &dev);
        assert!(tied.is_tied() && tied.num_params() == 0);
        let want = h.clone().matmul(emb.weight.val().transpose().unsqueeze());
        assert!(max_abs_diff(&tied.forward(h.clone(), &emb), &want) < 1e-5);
        let untied = LmHead::new(false, 4, 7, Initializer::Ones, &dev);
        assert_eq!(untied.num_params(), 28);
        // All-ones weights: each logit is the sum of the hidden features.
        let sums = h.clone().sum_dim(2).repeat_dim(2, 7);
        assert!(max_abs_diff(&untied.forward(h, &emb), &sums) < 1e-5);
    }

    #[test]
    fn the_pooler_reads_the_first_token_only() {
        let dev = test_device();
        let pooler = Pooler::new(4, 3, Initializer::Ones, &dev);
        let h = Tensor::<3>::random([2, 5, 4], Distribution::Normal(0.0, 1.0), &dev);
        let got = pooler.forward(h.clone());
        assert_eq!(got.dims(), [2, 3]);
        // Ones for the weights and the bias: tanh(sum of the first token's features + 1).
        let first = h
            .clone()
            .slice([0..2, 0..1, 0..4])
            .sum_dim(2)
            .reshape([2, 1]);
        let want = (first + 1.0).tanh().repeat_dim(1, 3);
        assert!(max_abs_diff(&got, &want) < 1e-5);
        // Changing every other token leaves it alone.
        let other = h.clone().slice_assign(
            [0..2, 1..5, 0..4],
            Tensor::random([2, 4, 4], Distribution::Normal(0.0, 1.0), &dev),
        );
        assert!(max_abs_diff(&pooler.forward(other), &got) < 1e-6);
    }
}
