//! # zoo-seq2seq
//!
//! The encoder-decoder family: [`T5ForConditionalGeneration`] (Raffel et al., 2020) and
//! [`MarianMtModel`] (Junczys-Dowmunt et al., 2018), whose post-norm model with
//! interleaved sinusoids and ReLU is also the original Transformer (Vaswani et al., 2017,
//! [`MarianConfig::transformer`]), and which with learned positions is BART and mBART
//! ([`MarianVariant`], [`Frame`]). Both are composed of `zoo-attention`'s shared block,
//! load HF checkpoints ([`pretrained`]), and generate through `zoo-core`'s loop and beam
//! search with the source encoded once, cross-attention keys and values projected once
//! and a self-attention KV cache ([`Encoded`]). Cross-attention weights are returned on
//! request ([`EncoderDecoder::decode`]).
#![warn(missing_docs)]

pub mod config;
mod error;
pub mod generate;
pub mod marian;
pub mod model;
pub mod pretrained;
pub mod registry;
pub mod t5;

pub use config::{MarianConfig, MarianVariant, SinusoidLayout, T5Config, TokenIds};
pub use error::{Result, Seq2SeqError};
pub use generate::{Encoded, Seq2SeqCache, beam_from, generate_from};
pub use marian::{Frame, LearnedFrame, MarianMtModel, Sinusoids};
pub use model::{DecodeInput, DecoderOutput, EncoderDecoder, Memory, Source};
pub use t5::T5ForConditionalGeneration;
