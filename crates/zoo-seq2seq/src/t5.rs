//! T5 (Raffel et al., 2020): pre-norm blocks with T5's RMS norm, no biases and no score
//! scaling, heads of `d_kv` features whatever `d_model / num_heads` is, and a learned
//! bucketed relative-position bias computed by the first layer of each stack and shared
//! by the others. The LM head (tied to the shared embedding, or untied in v1.1 checkpoints
//! written before `transformers` 5) reads the decoder's output, scaled by `d_model^-0.5`
//! in v1.0.

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Device, Tensor};
use zoo_attention::{
    CrossAttentionBlock, CrossAttentionBlockConfig, FeedForwardConfig, LmHead,
    MultiHeadAttentionConfig, Norm, NormKind, NormPlacement, PositionBias, TransformerBlock,
    TransformerBlockConfig,
};

use crate::config::T5Config;
use crate::error::Result;
use crate::model::{
    DecodeInput, DecoderOutput, EncoderDecoder, Source, check_target, run_decoder, run_encoder,
};

/// `T5ForConditionalGeneration`.
#[derive(Module, Debug)]
pub struct T5ForConditionalGeneration {
    /// The embedding shared by encoder and decoder (HF `shared`).
    pub shared: Embedding,
    /// Encoder blocks (HF `encoder.block`).
    pub encoder: Vec<TransformerBlock>,
    /// The encoder's final RMS norm.
    pub encoder_norm: Norm,
    /// Decoder blocks (HF `decoder.block`).
    pub decoder: Vec<CrossAttentionBlock>,
    /// The decoder's final RMS norm.
    pub decoder_norm: Norm,
    /// The LM head: tied to `shared` (T5 v1.0), or its own matrix (T5 v1.1).
    pub lm_head: LmHead,
    #[module(skip)]
    config: T5Config,
}

impl T5Config {
    /// T5's attention: `d_kv`-wide heads, no score scale, no biases.
    fn attention(&self) -> MultiHeadAttentionConfig {
        MultiHeadAttentionConfig::new(self.d_model, self.num_heads)
            .with_head_dim(Some(self.d_kv))
            .with_scale(Some(1.0))
            .with_qkv_bias(false)
            .with_out_bias(false)
    }

    fn block(&self, first: bool, decoder: bool) -> Result<TransformerBlockConfig> {
        let attn = self.attention();
        let self_attn = if first {
            attn.clone().with_position_bias(PositionBias::T5 {
                num_buckets: self.relative_attention_num_buckets,
                max_distance: self.relative_attention_max_distance,
                bidirectional: !decoder,
            })
        } else {
            attn.clone()
        };
        let ffn = FeedForwardConfig::new(self.d_model, self.d_ff)
            .with_activation(self.activation()?)
            .with_bias(false);
        Ok(TransformerBlockConfig::new(self_attn, ffn)
            .with_norm(NormKind::RmsNorm)
            .with_norm_eps(self.layer_norm_epsilon)
            .with_placement(NormPlacement::Pre))
    }

    /// A decoder layer: the decoder's block with T5's attention to the encoder.
    fn cross_block(&self, first: bool) -> Result<CrossAttentionBlockConfig> {
        Ok(self.block(first, true)?.with_cross(self.attention()))
    }

    /// Trainable parameters of the model [`Self::init`] builds, counted from the
    /// configuration alone: the shared embedding, both stacks (the first block of each
    /// with its relative bias table), both final norms and an untied head.
    ///
    /// # Errors
    /// A `feed_forward_proj` the zoo does not implement.
    pub fn num_params(&self) -> Result<usize> {
        let d = self.d_model;
        let mut n = self.vocab_size * d + 2 * NormKind::RmsNorm.num_params(d);
        for i in 0..self.num_layers {
            n += self.block(i == 0, false)?.num_params();
        }
        for i in 0..self.decoder_layers() {
            n += self.cross_block(i == 0)?.num_params();
        }
        if !self.tie_word_embeddings {
            n += self.vocab_size * d;
        }
        Ok(n)
    }

    /// Validates and builds the model, with N(0, 1) embeddings and N(0, 0.05) weights
    /// (a checkpoint overwrites them).
    ///
    /// # Errors
    /// See [`T5Config::validate`].
    pub fn init(&self, device: &Device) -> Result<T5ForConditionalGeneration> {
        self.validate()?;
        let encoder = (0..self.num_layers)
            .map(|i| Ok(self.block(i == 0, false)?.init(device)?))
            .collect::<Result<_>>()?;
        let decoder = (0..self.decoder_layers())
            .map(|i| Ok(self.cross_block(i == 0)?.init(device)?))
            .collect::<Result<_>>()?;
        Ok(T5ForConditionalGeneration {
            shared: EmbeddingConfig::new(self.vocab_size, self.d_model).init(device),
            encoder,
            encoder_norm: Norm::new(
                NormKind::RmsNorm,
                self.d_model,
                self.layer_norm_epsilon,
                device,
            ),
            decoder,
            decoder_norm: Norm::new(
                NormKind::RmsNorm,
                self.d_model,
                self.layer_norm_epsilon,
                device,
            ),
            lm_head: LmHead::new(
                self.tie_word_embeddings,
                self.d_model,
                self.vocab_size,
                Initializer::Normal {
                    mean: 0.0,
                    std: 0.05,
                },
                device,
            ),
            config: self.clone(),
        })
    }
}

impl T5ForConditionalGeneration {
    /// The configuration.
    pub fn config(&self) -> &T5Config {
        &self.config
    }
}

impl EncoderDecoder for T5ForConditionalGeneration {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_target_len(&self) -> usize {
        self.config.n_positions
    }

    fn max_source_len(&self) -> usize {
        // Relative positions have no table to run past.
        usize::MAX
    }

    fn start_id(&self) -> usize {
        self.config.start_id()
    }

    fn eos_ids(&self) -> Vec<usize> {
        self.config.eos_ids()
    }

    fn pad_id(&self) -> usize {
        self.config.pad_token_id
    }

    fn decoder_layers(&self) -> &[CrossAttentionBlock] {
        &self.decoder
    }

    fn device(&self) -> Device {
        self.shared.weight.val().device()
    }

    fn encode(&self, source: &Source) -> Result<Tensor<3>> {
        source.check(self.vocab_size(), self.max_source_len())?;
        let [_, s] = source.tokens.dims();
        let device = source.tokens.device();
        let x = self.shared.forward(source.tokens.clone());
        let first = &self.encoder[0].self_attn;
        let shared_bias = first.position_bias(0..s, 0..s, &device);
        let h = run_encoder(&self.encoder, x, &source.padding, |i| {
            (i > 0).then(|| shared_bias.clone()).flatten()
        })?;
        Ok(self.encoder_norm.forward(h))
    }

    fn decode(&self, input: DecodeInput<'_>) -> Result<DecoderOutput> {
        let (tokens, offset) = (&input.tokens, input.offset);
        check_target(tokens, offset, self.vocab_size(), self.max_target_len())?;
        let [_, t] = tokens.dims();
        let device = tokens.device();
        let x = self.shared.forward(tokens.clone());
        let first = &self.decoder[0].self_attn;
        // The first layer adds its bias itself; the others take it from there.
        let shared_bias = first.position_bias(offset..offset + t, 0..offset + t, &device);
        let (h, cross_attentions) = run_decoder(&self.decoder, x, input, |i| {
            (i > 0).then(|| shared_bias.clone()).flatten()
        })?;
        let mut h = self.decoder_norm.forward(h);
        if self.config.scales_decoder_outputs() {
            h = h * (self.config.d_model as f64).powf(-0.5);
        }
        let logits = self.lm_head.forward(h, &self.shared);
        Ok(DecoderOutput {
            logits,
            cross_attentions,
        })
    }
}
