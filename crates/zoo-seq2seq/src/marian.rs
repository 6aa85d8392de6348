//! The encoder-decoder Transformer of Marian (HF `MarianMTModel`), with interleaved
//! sinusoids and ReLU the original Transformer (Vaswani et al., 2017), and BART and mBART
//! (`BartForConditionalGeneration`, `MBartForConditionalGeneration`): one model whose
//! [`Frame`] is the variant's. One embedding serves source, target and output;
//! embeddings are scaled by `sqrt(d_model)` when the config says so, positions are added
//! (Marian's computed sinusoids, or BART's learned table with its LayerNorm), and the
//! logits get `final_logits_bias`. mBART's layers are pre-norm, with a LayerNorm after
//! each stack.

use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig};
use burn::tensor::{Device, Int, Tensor};
use zoo_attention::position::{sinusoidal_table, sinusoidal_table_split};
use zoo_attention::{
    CrossAttentionBlock, CrossAttentionBlockConfig, FeedForwardConfig, MultiHeadAttentionConfig,
    NormKind, NormPlacement, TransformerBlock, TransformerBlockConfig,
};

use crate::config::{MarianConfig, MarianVariant, SinusoidLayout};
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
    /// The positions and the norms around the stacks: the variant's.
    pub frame: Frame,
    #[module(skip)]
    config: MarianConfig,
}

/// What a variant adds around the shared layers. One model holds one frame, so the
/// sizes of the variants do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Frame {
    /// Marian and the original Transformer: fixed sinusoids, computed, nothing learned.
    Sinusoidal(Sinusoids),
    /// BART and mBART: learned positions and norms.
    Learned(LearnedFrame),
}

/// Fixed sinusoidal positions (the layout is the config's).
#[derive(Module, Debug, Default)]
pub struct Sinusoids;

/// BART's learned positions and embedding norms, and mBART's final norms.
#[derive(Module, Debug)]
pub struct LearnedFrame {
    /// The encoder's positions, `[max_position_embeddings + 2, d_model]`; position `p`
    /// reads row `p + 2`.
    pub encoder_positions: Embedding,
    /// The decoder's positions, laid out as the encoder's.
    pub decoder_positions: Embedding,
    /// The LayerNorm on the encoder's embeddings (HF `layernorm_embedding`).
    pub encoder_embed_norm: LayerNorm,
    /// The LayerNorm on the decoder's embeddings.
    pub decoder_embed_norm: LayerNorm,
    /// mBART's LayerNorms after the last layer: the encoder's, then the decoder's. BART
    /// has none.
    pub final_norms: Vec<LayerNorm>,
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
        let placement = match self.variant() {
            MarianVariant::MBart => NormPlacement::Pre,
            MarianVariant::Marian | MarianVariant::Bart => NormPlacement::Post,
        };
        TransformerBlockConfig::new(attn, ffn)
            .with_norm(NormKind::LayerNorm)
            .with_norm_eps(1e-5)
            .with_placement(placement)
            .with_dropout(self.dropout)
    }

    /// A decoder layer: the decoder's block with cross-attention like its own.
    fn cross_block(&self) -> CrossAttentionBlockConfig {
        let block = self.block(true);
        let cross = block.attention.clone();
        block.with_cross(cross)
    }

    /// Parameters of the model [`Self::init`] builds, counted from the configuration
    /// alone: the shared embedding, both stacks, the final logits bias (a parameter
    /// that does not train, as in HF), and BART's and mBART's positions and norms.
    pub fn num_params(&self) -> usize {
        let d = self.d_model;
        let frame = match self.variant() {
            MarianVariant::Marian => 0,
            MarianVariant::Bart => 2 * self.position_rows() * d + 2 * 2 * d,
            MarianVariant::MBart => 2 * self.position_rows() * d + 4 * 2 * d,
        };
        self.vocab_size * d
            + self.encoder_layers * self.block(false).num_params()
            + self.decoder_layers * self.cross_block().num_params()
            + self.vocab_size
            + frame
    }

    /// Rows of a learned position table: HF's offset of 2 past the positions.
    fn position_rows(&self) -> usize {
        self.max_position_embeddings + MarianVariant::POSITION_OFFSET
    }

    fn frame(&self, device: &Device) -> Frame {
        let norm = || {
            LayerNormConfig::new(self.d_model)
                .with_epsilon(1e-5)
                .init(device)
        };
        let positions = || {
            EmbeddingConfig::new(self.position_rows(), self.d_model)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device)
        };
        let final_norms = match self.variant() {
            MarianVariant::Marian => return Frame::Sinusoidal(Sinusoids),
            MarianVariant::Bart => Vec::new(),
            MarianVariant::MBart => vec![norm(), norm()],
        };
        Frame::Learned(LearnedFrame {
            encoder_positions: positions(),
            decoder_positions: positions(),
            encoder_embed_norm: norm(),
            decoder_embed_norm: norm(),
            final_norms,
        })
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
            frame: self.frame(device),
            config: self.clone(),
        })
    }
}

impl MarianMtModel {
    /// The configuration.
    pub fn config(&self) -> &MarianConfig {
        &self.config
    }

    /// Token embeddings, scaled, plus the positions `offset..offset + T` of the
    /// encoder's or the decoder's table (BART's then normed).
    fn embed(&self, tokens: Tensor<2, Int>, offset: usize, decoder: bool) -> Result<Tensor<3>> {
        let [_, t] = tokens.dims();
        let device = tokens.device();
        let d = self.config.d_model;
        let scale = if self.config.scale_embedding {
            (d as f64).sqrt()
        } else {
            1.0
        };
        let x = self.shared.forward(tokens) * scale;
        match &self.frame {
            Frame::Sinusoidal(_) => {
                let table = match self.config.sinusoid_layout {
                    SinusoidLayout::Split => sinusoidal_table_split(offset + t, d, &device)?,
                    SinusoidLayout::Interleaved => sinusoidal_table(offset + t, d, &device)?,
                };
                let positions = table.slice([offset..offset + t, 0..d]).unsqueeze::<3>();
                Ok(x + positions)
            }
            Frame::Learned(frame) => {
                let (table, norm) = if decoder {
                    (&frame.decoder_positions, &frame.decoder_embed_norm)
                } else {
                    (&frame.encoder_positions, &frame.encoder_embed_norm)
                };
                let from = offset + MarianVariant::POSITION_OFFSET;
                let rows = table.weight.val().slice([from..from + t, 0..d]);
                Ok(zoo_attention::layer_norm(norm, x + rows.unsqueeze::<3>()))
            }
        }
    }

    /// mBART's norm after the last layer of the encoder (`0`) or the decoder (`1`).
    fn final_norm(&self, h: Tensor<3>, stack: usize) -> Tensor<3> {
        match &self.frame {
            Frame::Learned(frame) => match frame.final_norms.get(stack) {
                Some(norm) => zoo_attention::layer_norm(norm, h),
                None => h,
            },
            Frame::Sinusoidal(_) => h,
        }
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

    fn forced_bos(&self) -> Option<usize> {
        self.config.forced_bos_token_id
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
        let x = self.embed(source.tokens.clone(), 0, false)?;
        let h = run_encoder(&self.encoder, x, &source.padding, |_| None)?;
        Ok(self.final_norm(h, 0))
    }

    fn decode(&self, input: DecodeInput<'_>) -> Result<DecoderOutput> {
        let (tokens, offset) = (&input.tokens, input.offset);
        check_target(tokens, offset, self.vocab_size(), self.max_target_len())?;
        let x = self.embed(tokens.clone(), offset, true)?;
        let (h, cross_attentions) = run_decoder(&self.decoder, x, input, |_| None)?;
        let h = self.final_norm(h, 1);
        let bias = self.final_logits_bias.val().unsqueeze::<3>();
        Ok(DecoderOutput {
            logits: zoo_attention::tied_logits(h, self.shared.weight.val()) + bias,
            cross_attentions,
        })
    }
}
