//! # zoo-decoder
//!
//! Decoder-only language models: one model whose [`DecoderConfig`] covers the GPT-2
//! family (learned positions, LayerNorm, GELU-tanh MLP, fused QKV with biases, tied head)
//! and the Llama family (RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases,
//! optional untied head, and Mistral's sliding window by config), and the seeds'
//! Laplace-smoothed bigram baseline ([`bigram`]). The model implements `zoo-core`'s
//! [`zoo_core::TokenLogits`] for training and [`zoo_core::CausalLm`] for generation with a
//! KV cache through [`zoo_core::generate()`].
//!
//! HF checkpoints (`GPT2LMHeadModel`, `LlamaForCausalLM`, `MistralForCausalLM`,
//! `Qwen2ForCausalLM`, [`phi3`]'s `Phi3ForCausalLM` with fused QKV and gate-up
//! projections, [`gpt_neox`]'s `GPTNeoXForCausalLM` with parallel layers and partial
//! rotary, [`qwen3`]'s `Qwen3ForCausalLM` with QK-norm, and the Gemma family:
//! [`gemma`]'s `GemmaForCausalLM`, [`gemma2`]'s `Gemma2ForCausalLM` with four norms per
//! layer, local and global layers and soft caps, and [`gemma3`]'s `Gemma3ForCausalLM`
//! with QK-norm and a RoPE base per layer type), and [`mixtral`]'s `MixtralForCausalLM`
//! with a sparse mixture of experts) load and save through [`pretrained`], and their
//! `tokenizer.json` through [`LmTokenizer`]. [`registry`] lists them as rows for `zoo-hub`'s `AutoModel`.
#![warn(missing_docs)]

pub mod bigram;
pub mod config;
mod error;
pub mod gemma;
pub mod gemma2;
pub mod gemma3;
pub mod gpt_neox;
pub mod hf;
pub mod layer;
mod lm;
pub mod mixtral;
pub mod model;
pub mod phi3;
pub mod pretrained;
pub mod qwen3;
pub mod registry;

pub use config::{DecoderConfig, PositionKind};
pub use error::{DecoderError, Result};
pub use gemma::GemmaConfig;
pub use gemma2::Gemma2Config;
pub use gemma3::Gemma3Config;
pub use gpt_neox::GptNeoXConfig;
pub use hf::DecoderSpec;
pub use layer::{DecoderLayer, Layer, LayerKind};
pub use mixtral::MixtralConfig;
pub use model::{DecoderCache, DecoderInput, DecoderLm, DecoderOutput};
pub use phi3::Phi3Config;
pub use pretrained::{Gpt2Config, HfDecoderConfig, LlamaConfig, TokenIds};
pub use qwen3::Qwen3Config;
pub use registry::{ARCHITECTURES, PretrainedLm};
/// The causal LMs' tokenizer, which lives in `zoo-data` with every family's.
pub use zoo_data::tokenizer::{LmTokenizer, TextStream};
