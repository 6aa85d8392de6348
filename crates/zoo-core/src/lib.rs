//! # zoo-core
//!
//! What a training task or a text generator needs from a model, and nothing of any
//! particular family. Every family crate implements these traits for its models;
//! `zoo-train` and the generation loop are written against them only, so a research model
//! trains and generates by implementing one trait.
//!
//! - [`model`]: the model traits: token logits with a padding mask ([`TokenLogits`]),
//!   classification ([`ClassLogits`]), sequence-to-sequence ([`Seq2SeqLogits`]), sentence
//!   embeddings ([`SentenceEmbedding`]) and a causal LM with a cache ([`CausalLm`]);
//! - [`batch`]: the batch types the tasks consume;
//! - [`checkpoint`]: HF checkpoints for every family: `config.json`, safetensors or
//!   `pytorch_model.bin`, key maps, one report of every tensor that does not fit, saving;
//!   and LoRA adapters in PEFT's format over Burn's own LoRA ([`checkpoint::peft`]);
//! - [`durable`]: files written whole or not at all, synced to the disk;
//! - [`registry`]: the rows each family registers its architectures with, and what a
//!   loaded checkpoint of any family offers ([`Pretrained`]);
//! - [`generate`](mod@generate): logits processors, sampling and the decoding loop, and [`beam`]: beam
//!   search, both shared by decoder-only and encoder-decoder models.
//!
//! The crate depends on Burn's tensor API only, not on burn-train.
#![warn(missing_docs)]

pub mod batch;
pub mod beam;
pub mod checkpoint;
pub mod durable;
mod error;
pub mod generate;
pub mod model;
pub mod quant;
pub mod registry;
pub mod tokens;
pub mod validate;

pub use batch::{CausalLmBatch, ClassificationBatch, Seq2SeqBatch};
pub use beam::{BeamConfig, BeamOutput, EarlyStopping, beam_search};
pub use checkpoint::{CheckpointError, KeyMap, TensorReport, WeightsFile};
pub use error::{CoreError, ModelError};
pub use generate::{
    Generation, GenerationConfig, Hooks, LogitsProcessor, StoppingCriterion, generate,
    generate_async,
};
pub use model::{
    CausalLm, ClassLogits, DecodeStep, SentenceEmbedding, Seq2SeqLogits, TokenLogits, kept_rows,
};
pub use quant::{QuantBits, QuantOptions, QuantReport, quantize_linear_weights};
pub use registry::{
    Architecture, Classes, Classifier, ClassifyInput, ForwardInput, Modality, NamedOutput,
    Pretrained, Task, TextGenerator, Translator, thousands,
};
pub use tokens::{TokenError, TokenLimits};
pub use validate::ConfigError;
