//! The layers a decoder stacks: one enum of the real layer types, so one [`DecoderLm`]
//! holds any of them and a checkpoint's names stay `layers.N.*` (Burn leaves variant
//! names out of module paths).
//!
//! - [`DecoderLayer::Sequential`]: attention, then the MLP, each `x + f(norm(x))`
//!   (GPT-2, Llama, Mistral, Qwen2, Phi-3);
//! - [`DecoderLayer::Parallel`]: attention and the MLP on the same input,
//!   `x + attn(norm_1(x)) + mlp(norm_2(x))` (GPT-NeoX / Pythia);
//! - [`DecoderLayer::Sandwich`]: as the sequential layer, with a norm after each
//!   sub-layer too, `x + post_norm(f(norm(x)))` (Gemma 2 and 3).
//!
//! A layer of one's own (another attention, another block) runs in the same model through
//! the [`Layer`] trait: [`DecoderConfig::init_with`] builds the model around layers of
//! that type.
//!
//! [`DecoderLm`]: crate::DecoderLm
//! [`DecoderConfig::init_with`]: crate::DecoderConfig::init_with

use burn::module::{Module, ModuleDisplay};
use serde::{Deserialize, Serialize};
use zoo_attention::{
    BlockInput, BlockOutput, FeedForward, KvCache, Norm, ParallelBlock, SandwichBlock,
    SelfAttention, TransformerBlock, TransformerBlockConfig,
};

use crate::error::Result;

/// What a [`crate::DecoderLm`] needs of each layer it stacks: the one trait a layer of
/// one's own implements. The model embeds the tokens, runs every layer in order, then the
/// final norm and the head; the layer gets the hidden states, the mask (causal, with the
/// padding keys) and the positions in a [`BlockInput`], and returns the new hidden
/// states.
pub trait Layer: Module + ModuleDisplay + 'static {
    /// Runs the layer over a whole sequence.
    ///
    /// # Shapes
    /// - `input.hidden`: `[B, T, d_model]` -> hidden `[B, T, d_model]`
    ///
    /// # Errors
    /// Input shapes the layer rejects.
    fn forward(&self, input: BlockInput) -> Result<BlockOutput>;

    /// Runs the layer over new positions, reading and extending `cache` (the keys and
    /// values of the positions seen so far).
    ///
    /// # Errors
    /// As [`Self::forward`], and a full cache.
    fn forward_cached(&self, input: BlockInput, cache: &mut KvCache) -> Result<BlockOutput>;

    /// The floats that one position of one sequence adds to this layer's cache (keys and
    /// values together): what the model checks against the machine's memory before it
    /// allocates a cache.
    fn cache_floats_per_position(&self) -> usize;

    /// Whether training may keep only this layer's input and run the layer again in the
    /// backward pass (activation checkpointing by block, [`zoo_attention::recompute`]): its
    /// hidden states are all that a loss takes of it. A mixture of experts is not: the
    /// load-balancing loss takes its router's logits.
    fn recomputable(&self) -> bool {
        true
    }
}

/// Which layer a [`crate::DecoderConfig`] stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LayerKind {
    /// Attention, then the MLP.
    #[default]
    Sequential,
    /// Attention and the MLP side by side, one residual.
    Parallel,
    /// Attention, then the MLP, each with a norm before and after.
    Sandwich,
}

/// One layer of a decoder-only model.
// The sandwich layer's two extra norms make it the largest variant; a model holds its
// layers once, in a `Vec`, so the unused space costs a few kilobytes per layer and no
// indirection is worth it.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum DecoderLayer {
    /// Attention, then the MLP.
    Sequential(TransformerBlock),
    /// Attention and the MLP side by side.
    Parallel(ParallelBlock),
    /// Attention, then the MLP, each with a norm before and after.
    Sandwich(SandwichBlock),
}

impl DecoderLayer {
    /// Builds a layer of `kind` from the shared parts.
    ///
    /// # Errors
    /// The parts' configuration errors.
    pub fn new(
        kind: LayerKind,
        block: &TransformerBlockConfig,
        device: &burn::tensor::Device,
    ) -> Result<Self> {
        Ok(match kind {
            LayerKind::Sequential => Self::Sequential(block.init(device)?),
            LayerKind::Parallel => Self::Parallel(block.clone().parallel().init(device)?),
            LayerKind::Sandwich => Self::Sandwich(block.clone().sandwich().init(device)?),
        })
    }

    /// The layer's self-attention.
    pub fn self_attn(&self) -> &SelfAttention {
        match self {
            Self::Sequential(b) => &b.self_attn,
            Self::Parallel(b) => &b.self_attn,
            Self::Sandwich(b) => &b.self_attn,
        }
    }

    /// The norm before self-attention.
    pub fn norm_1(&self) -> &Norm {
        match self {
            Self::Sequential(b) => &b.norm_1,
            Self::Parallel(b) => &b.norm_1,
            Self::Sandwich(b) => &b.norm_1,
        }
    }

    /// The norm before the feed-forward network.
    pub fn norm_2(&self) -> &Norm {
        match self {
            Self::Sequential(b) => &b.norm_2,
            Self::Parallel(b) => &b.norm_2,
            Self::Sandwich(b) => &b.norm_2,
        }
    }

    /// The layer's feed-forward network.
    pub fn mlp(&self) -> &FeedForward {
        match self {
            Self::Sequential(b) => &b.mlp,
            Self::Parallel(b) => &b.mlp,
            Self::Sandwich(b) => &b.mlp,
        }
    }
}

impl Layer for DecoderLayer {
    fn forward(&self, input: BlockInput) -> Result<BlockOutput> {
        Ok(match self {
            Self::Sequential(b) => b.forward(input)?,
            Self::Parallel(b) => b.forward(input)?,
            Self::Sandwich(b) => b.forward(input)?,
        })
    }

    fn forward_cached(&self, input: BlockInput, cache: &mut KvCache) -> Result<BlockOutput> {
        Ok(match self {
            Self::Sequential(b) => b.forward_cached(input, cache)?,
            Self::Parallel(b) => b.forward_cached(input, cache)?,
            Self::Sandwich(b) => b.forward_cached(input, cache)?,
        })
    }

    fn cache_floats_per_position(&self) -> usize {
        let attn = self.self_attn();
        2 * attn.n_kv_heads() * attn.head_dim()
    }

    fn recomputable(&self) -> bool {
        let mlp = match self {
            Self::Sequential(b) => &b.mlp,
            Self::Parallel(b) => &b.mlp,
            Self::Sandwich(b) => &b.mlp,
        };
        !matches!(mlp, FeedForward::Experts(_))
    }
}
