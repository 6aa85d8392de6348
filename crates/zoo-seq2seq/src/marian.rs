//! The post-norm encoder-decoder Transformer: Marian (HF `MarianMTModel`), and with
//! interleaved sinusoids and ReLU the original Transformer (Vaswani et al., 2017). One
//! embedding serves source, target and output; embeddings are scaled by `sqrt(d_model)`
//! when the config says so, fixed sinusoidal positions are added, and the logits get
//! Marian's `final_logits_bias`.

use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Device, Int, Tensor};
use zoo_attention::position::{sinusoidal_table, sinusoidal_table_split};
use zoo_attention::{
    CrossAttentionBlock, CrossAttentionBlockConfig, FeedForwardConfig, MultiHeadAttentionConfig,
    NormKind, NormPlacement, TransformerBlock, TransformerBlockConfig,
};

use crate::config::{MarianConfig, SinusoidLayout};
use crate::error::Result;
use crate::model::{
    DecodeInput, DecoderOutput, EncoderDecoder, Source, check_target, run_decoder, run_encoder,
};

/// Marian, or the original Transformer.
#[derive(Module, Debug)]
pub struct MarianMtModel {
    /// The embedding of source, target and output (HF `model.shared`).
    pub shared: Embedding,
    /// Encoder layers.
    pub encoder: Vec<TransformerBlock>,
    /// Decoder layers.
    pub decoder: Vec<CrossAttentionBlock>,
    /// Added to the logits, `[1, V]` (a buffer in HF; zero unless a checkpoint sets it).
    pub final_logits_bias: Param<Tensor<2>>,
    #[module(skip)]
    config: MarianConfig,
}

impl MarianConfig {
    fn block(&self, decoder: bool) -> TransformerBlockConfig {
        let (heads, ffn) = if decoder {
            (self.decoder_attention_heads, self.decoder_ffn_dim)
        } else {
            (self.encoder_attention_heads, self.encoder_ffn_dim)
        };
        let init = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let attn = MultiHeadAttentionConfig::new(self.d_model, heads)
            .with_dropout(self.attention_dropout)
            .with_initializer(init.clone());
        let ffn = FeedForwardConfig::new(self.d_model, ffn)
            .with_activation(self.activation_function.ffn())
            .with_initializer(init)
            .with_dropout(self.dropout);
        TransformerBlockConfig::new(attn, ffn)
            .with_norm(NormKind::LayerNorm)
            .with_norm_eps(1e-5)
            .with_placement(NormPlacement::Post)
            .with_dropout(self.dropout)
    }

    /// A decoder layer: the decoder's block with cross-attention like its own.
    fn cross_block(&self) -> CrossAttentionBlockConfig {
        let block = self.block(true);
        let cross = block.attention.clone();
        block.with_cross(cross)
    }

    /// Parameters of the model [`Self::init`] builds, counted from the configuration
    /// alone: the shared embedding, both stacks, and the final logits bias (a parameter
    /// that does not train, as in HF).
    pub fn num_params(&self) -> usize {
        self.vocab_size * self.d_model
            + self.encoder_layers * self.block(false).num_params()
            + self.decoder_layers * self.cross_block().num_params()
            + self.vocab_size
    }

    /// Validates and builds the model with N(0, 0.02) weights.
    ///
    /// # Errors
    /// See [`MarianConfig::validate`].
    pub fn init(&self, device: &Device) -> Result<MarianMtModel> {
        self.validate()?;
        let encoder = (0..self.encoder_layers)
            .map(|_| self.block(false).init(device))
            .collect::<std::result::Result<_, _>>()?;
        let decoder = (0..self.decoder_layers)
            .map(|_| self.cross_block().init(device))
            .collect::<std::result::Result<_, _>>()?;
        let v = self.vocab_size;
        Ok(MarianMtModel {
            shared: EmbeddingConfig::new(v, self.d_model)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device),
            encoder,
            decoder,
            final_logits_bias: Param::from_tensor(Tensor::zeros([1, v], device))
                .set_require_grad(false),
            config: self.clone(),
        })
    }
}

impl MarianMtModel {
    /// The configuration.
    pub fn config(&self) -> &MarianConfig {
        &self.config
    }

    /// Token embeddings, scaled, plus the positions `offset..offset + T`.
    fn embed(&self, tokens: Tensor<2, Int>, offset: usize) -> Result<Tensor<3>> {
        let [_, t] = tokens.dims();
        let device = tokens.device();
        let d = self.config.d_model;
        let table = match self.config.sinusoid_layout {
            SinusoidLayout::Split => sinusoidal_table_split(offset + t, d, &device)?,
            SinusoidLayout::Interleaved => sinusoidal_table(offset + t, d, &device)?,
        };
        let positions = table.slice([offset..offset + t, 0..d]).unsqueeze::<3>();
        let scale = if self.config.scale_embedding {
            (d as f64).sqrt()
        } else {
            1.0
        };
        Ok(self.shared.forward(tokens) * scale + positions)
    }
}

impl EncoderDecoder for MarianMtModel {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_target_len(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn max_source_len(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn start_id(&self) -> usize {
        self.config.start_id()
    }

    fn eos_ids(&self) -> Vec<usize> {
        self.config.eos_token_id.ids()
    }

    fn pad_id(&self) -> usize {
        self.config.pad_token_id
    }

    fn forced_eos(&self) -> Option<usize> {
        self.config.forced_eos_token_id
    }

    fn banned_tokens(&self) -> Vec<usize> {
        self.config.banned_tokens()
    }

    fn decoder_layers(&self) -> &[CrossAttentionBlock] {
        &self.decoder
    }

    fn device(&self) -> Device {
        self.shared.weight.val().device()
    }

    fn encode(&self, source: &Source) -> Result<Tensor<3>> {
        source.check(self.vocab_size(), self.max_source_len())?;
        let x = self.embed(source.tokens.clone(), 0)?;
        run_encoder(&self.encoder, x, &source.padding, |_| None)
    }

    fn decode(&self, input: DecodeInput<'_>) -> Result<DecoderOutput> {
        let (tokens, offset) = (&input.tokens, input.offset);
        check_target(tokens, offset, self.vocab_size(), self.max_target_len())?;
        let x = self.embed(tokens.clone(), offset)?;
        let (h, cross_attentions) = run_decoder(&self.decoder, x, input, |_| None)?;
        let bias = self.final_logits_bias.val().unsqueeze::<3>();
        Ok(DecoderOutput {
            logits: zoo_attention::tied_logits(h, self.shared.weight.val()) + bias,
            cross_attentions,
        })
    }
}
