//! # zoo-attention
//!
//! The transformer core of the Burn Model Zoo. Every model family is built from these
//! parts and none re-implements them:
//!
//! - [`sdpa`]: scaled dot-product attention as a readable reference path, Burn's fused op,
//!   a memory-efficient blocked path with online softmax, sliding-window attention with
//!   global tokens, and linear attention;
//! - [`mha`]: multi-head self-attention (separate or fused QKV, RoPE, sliding windows, a
//!   KV cache) and cross-attention, with MHA, GQA and MQA;
//! - [`mask`]: one rule for which key a query may see ([`Visibility`]: causal, window,
//!   global tokens), padding, boolean and additive masks;
//! - [`position`]: sinusoidal, learned, rotary (half-split and interleaved), ALiBi and T5
//!   relative position bias;
//! - [`cache`]: the per-layer KV cache, bounded (written in place) or sliding, and the
//!   cross-attention cache of the encoder's keys and values;
//! - [`ffn`]: the feed-forward network as plain, gated and fused-gated variants;
//! - [`head`]: the LM head, tied or untied, and the BERT / ViT pooler;
//! - [`block`]: LayerNorm / RMSNorm, the pre- or post-norm transformer block used as
//!   encoder and decoder layer, and the block with cross-attention of encoder-decoder
//!   models.
//!
//! Everything is written once against Burn's tensor API and runs on any backend compiled
//! into the build.
#![warn(missing_docs)]

pub mod block;
pub mod cache;
mod dropout;
mod error;
pub mod ffn;
pub mod head;
pub mod mask;
pub mod mha;
pub mod position;
pub mod sdpa;

pub use block::{
    BlockInput, BlockOutput, CrossAttentionBlock, CrossAttentionBlockConfig, Memory, NoNorm, Norm,
    NormKind, NormPlacement, OffsetRmsNorm, ParallelBlock, ParallelBlockConfig, SandwichBlock,
    SandwichBlockConfig, TransformerBlock, TransformerBlockConfig, layer_norm, linear_rows,
    tied_logits,
};
pub use cache::{CrossKvCache, KvCache};
pub use dropout::dropout;
pub use error::{AttentionError, Result};
pub use ffn::{
    FeedForward, FeedForwardConfig, FfnActivation, FusedGatedFfn, GateLayout, GatedFfn, HiddenAct,
    PlainFfn, Routing, SparseMoe, gelu_tanh, load_balancing_loss,
};
pub use head::{LmHead, Pooler, PoolerActivation, TiedHead};
pub use mask::{Mask, Visibility};
pub use mha::{
    AttentionInput, AttentionKernel, AttentionOutput, CrossAttention, FusedQkv, Heads,
    MultiHeadAttentionConfig, PositionBias, QkNorm, QkNorms, QkvLayout, SelfAttention,
    SelfPositions, SeparateQkv,
};
pub use position::{Positions, RopeLayout, RopeScaling};
pub use zoo_core::ConfigError;
/// Activation checkpointing by block, for the models built on these blocks: see
/// [`recompute::checkpointed`].
pub use zoo_kernels::recompute;
