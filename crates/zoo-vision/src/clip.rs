//! CLIP (Radford et al., 2021, "Learning Transferable Visual Models From Natural Language
//! Supervision") as HF's `CLIPModel` lays it out: a text tower and a vision tower, each
//! projected into one space, and `logit_scale`, so that an image and a text compare by
//! the cosine of their embeddings times `exp(logit_scale)`.
//!
//! - The **vision tower** is ViT's patch encoder with a bias-free patch convolution, a
//!   learned class embedding, a LayerNorm before the layers (HF's `pre_layrnorm`) and one
//!   on the class token after them (`post_layernorm`).
//! - The **text tower** is a causal pre-norm encoder over token and position tables with
//!   a final LayerNorm, pooled at the end-of-text token: the first `eos_token_id` of each
//!   row, or, for the configs that still carry the old `eos_token_id` of 2, the row's
//!   largest id (CLIP's end of text is the last entry of its vocabulary).
//! - Both run `zoo-attention`'s [`TransformerBlock`] with `quick_gelu`.
//!
//! | HF name | module path |
//! |---|---|
//! | `{text,vision}_model.encoder.layers.N.layer_norm{1,2}` | `{text,vision}_model.layers.N.norm_{1,2}` |
//! | `{text,vision}_model.encoder.layers.N.self_attn.{q,k,v}_proj` | the same without `encoder.` |
//! | `{text,vision}_model.encoder.layers.N.self_attn.out_proj` | `….self_attn.o_proj` |
//! | `{text,vision}_model.encoder.layers.N.mlp.fc{1,2}` | `….mlp.{up,down}_proj` |
//! | `logit_scale` (a 0-dim tensor) | `logit_scale` (`[1]`) |
//! | everything else | the same |

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use zoo_attention::{
    BlockInput, FeedForwardConfig, HiddenAct, MultiHeadAttentionConfig, NormKind, NormPlacement,
    TransformerBlock, TransformerBlockConfig,
};
use zoo_core::checkpoint::{self, KeyMap};
use zoo_core::tokens::TokenLimits;
use zoo_core::{ConfigError, validate};

use crate::error::{Result, VisionError};
use crate::model::{ImageInput, check_pixels, resample_positions};

fn quick_gelu() -> HiddenAct {
    HiddenAct::QuickGelu
}
fn eps() -> f64 {
    1e-5
}
fn range() -> f64 {
    0.02
}

macro_rules! defaults {
    ($($name:ident: $ty:ty = $value:expr;)*) => {
        $(fn $name() -> $ty { $value })*
    };
}

defaults! {
    text_vocab: usize = 49408;
    text_width: usize = 512;
    text_ff: usize = 2048;
    twelve: usize = 12;
    text_heads: usize = 8;
    text_positions: usize = 77;
    text_eos: usize = 49407;
    vision_width: usize = 768;
    vision_ff: usize = 3072;
    three: usize = 3;
    image_size: usize = 224;
    patch_size: usize = 32;
    projection_dim: usize = 512;
    logit_scale_init: f64 = 2.6592;
}

/// CLIP's text tower, with HF's `text_config` names and defaults (openai's ViT-B/32).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipTextConfig {
    /// Vocabulary size. Default: 49408.
    #[serde(default = "text_vocab")]
    pub vocab_size: usize,
    /// Width. Default: 512.
    #[serde(default = "text_width")]
    pub hidden_size: usize,
    /// Feed-forward width. Default: 2048.
    #[serde(default = "text_ff")]
    pub intermediate_size: usize,
    /// Layers. Default: 12.
    #[serde(default = "twelve")]
    pub num_hidden_layers: usize,
    /// Attention heads. Default: 8.
    #[serde(default = "text_heads")]
    pub num_attention_heads: usize,
    /// The longest text, in tokens. Default: 77.
    #[serde(default = "text_positions")]
    pub max_position_embeddings: usize,
    /// Feed-forward activation. Default: `quick_gelu`.
    #[serde(default = "quick_gelu")]
    pub hidden_act: HiddenAct,
    /// LayerNorm epsilon. Default: 1e-5.
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    /// Dropout on the attention weights while training. Default: 0.
    #[serde(default)]
    pub attention_dropout: f64,
    /// Std of the initial weights. Default: 0.02.
    #[serde(default = "range")]
    pub initializer_range: f64,
    /// The end-of-text token the text is pooled at; 2, as older configs have it, pools
    /// at each row's largest id instead (HF's rule). Default: 49407.
    #[serde(default = "text_eos")]
    pub eos_token_id: usize,
    /// The start-of-text token, kept for the saved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<usize>,
    /// The padding token, kept for the saved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<usize>,
}

/// CLIP's vision tower, with HF's `vision_config` names and defaults (ViT-B/32).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipVisionConfig {
    /// Width. Default: 768.
    #[serde(default = "vision_width")]
    pub hidden_size: usize,
    /// Feed-forward width. Default: 3072.
    #[serde(default = "vision_ff")]
    pub intermediate_size: usize,
    /// Layers. Default: 12.
    #[serde(default = "twelve")]
    pub num_hidden_layers: usize,
    /// Attention heads. Default: 12.
    #[serde(default = "twelve")]
    pub num_attention_heads: usize,
    /// Image channels. Default: 3.
    #[serde(default = "three")]
    pub num_channels: usize,
    /// Side of the square images the positions were trained for. Default: 224.
    #[serde(default = "image_size")]
    pub image_size: usize,
    /// Side of a square patch. Default: 32.
    #[serde(default = "patch_size")]
    pub patch_size: usize,
    /// Feed-forward activation. Default: `quick_gelu`.
    #[serde(default = "quick_gelu")]
    pub hidden_act: HiddenAct,
    /// LayerNorm epsilon. Default: 1e-5.
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    /// Dropout on the attention weights while training. Default: 0.
    #[serde(default)]
    pub attention_dropout: f64,
    /// Std of the initial weights. Default: 0.02.
    #[serde(default = "range")]
    pub initializer_range: f64,
}

/// A `CLIPModel`'s `config.json`: the two towers, the width of the shared space and the
/// initial `logit_scale`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipConfig {
    /// The text tower.
    #[serde(default = "ClipTextConfig::openai")]
    pub text_config: ClipTextConfig,
    /// The vision tower.
    #[serde(default = "ClipVisionConfig::openai")]
    pub vision_config: ClipVisionConfig,
    /// Width of the shared space. Default: 512.
    #[serde(default = "projection_dim")]
    pub projection_dim: usize,
    /// `logit_scale` of a new model. Default: 2.6592 (ln 1/0.07).
    #[serde(default = "logit_scale_init")]
    pub logit_scale_init_value: f64,
    /// HF's `model_type`, `"clip"`; checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
}

impl ClipTextConfig {
    /// HF's defaults, openai's ViT-B/32 text tower.
    pub fn openai() -> Self {
        Self {
            vocab_size: text_vocab(),
            hidden_size: text_width(),
            intermediate_size: text_ff(),
            num_hidden_layers: twelve(),
            num_attention_heads: text_heads(),
            max_position_embeddings: text_positions(),
            hidden_act: quick_gelu(),
            layer_norm_eps: eps(),
            attention_dropout: 0.0,
            initializer_range: range(),
            eos_token_id: text_eos(),
            bos_token_id: None,
            pad_token_id: None,
        }
    }
}

impl ClipVisionConfig {
    /// HF's defaults, openai's ViT-B/32 vision tower.
    pub fn openai() -> Self {
        Self {
            hidden_size: vision_width(),
            intermediate_size: vision_ff(),
            num_hidden_layers: twelve(),
            num_attention_heads: twelve(),
            num_channels: three(),
            image_size: image_size(),
            patch_size: patch_size(),
            hidden_act: quick_gelu(),
            layer_norm_eps: eps(),
            attention_dropout: 0.0,
            initializer_range: range(),
        }
    }

    /// Patches per side at the trained image size.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }
}

/// One tower's layer: pre-norm, biased projections, the tower's activation.
fn block(
    d: usize,
    heads: usize,
    d_ff: usize,
    act: HiddenAct,
    eps: f64,
    dropout: f64,
    init: Initializer,
) -> TransformerBlockConfig {
    let attention = MultiHeadAttentionConfig::new(d, heads)
        .with_qkv_bias(true)
        .with_dropout(dropout)
        .with_initializer(init.clone());
    let ffn = FeedForwardConfig::new(d, d_ff)
        .with_activation(act.ffn())
        .with_initializer(init);
    TransformerBlockConfig::new(attention, ffn)
        .with_norm(NormKind::LayerNorm)
        .with_norm_eps(eps)
        .with_placement(NormPlacement::Pre)
}

fn normal(std: f64) -> Initializer {
    Initializer::Normal { mean: 0.0, std }
}

impl ClipConfig {
    /// Parses a `config.json` and validates it.
    ///
    /// # Errors
    /// JSON that does not parse, or values [`Self::validate`] rejects.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text)
            .map_err(|e| VisionError::ClipConfig(ConfigError::malformed(e)))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// A zero size, a width the heads do not divide, an image size the patch does not
    /// divide, a non-positive epsilon, a dropout outside `[0, 1)`, weights that cannot fit
    /// in memory, or a `model_type` other than `clip`, each naming the value.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(VisionError::ClipConfig)
    }

    fn check(&self) -> zoo_core::validate::Result {
        let (t, v) = (&self.text_config, &self.vision_config);
        validate::model_type(self.model_type.as_deref(), "clip", "CLIP")?;
        validate::positive(&[
            ("text_config.vocab_size", t.vocab_size),
            ("text_config.hidden_size", t.hidden_size),
            ("text_config.intermediate_size", t.intermediate_size),
            ("text_config.num_hidden_layers", t.num_hidden_layers),
            ("text_config.num_attention_heads", t.num_attention_heads),
            (
                "text_config.max_position_embeddings",
                t.max_position_embeddings,
            ),
            ("vision_config.hidden_size", v.hidden_size),
            ("vision_config.intermediate_size", v.intermediate_size),
            ("vision_config.num_hidden_layers", v.num_hidden_layers),
            ("vision_config.num_attention_heads", v.num_attention_heads),
            ("vision_config.num_channels", v.num_channels),
            ("vision_config.image_size", v.image_size),
            ("vision_config.patch_size", v.patch_size),
            ("projection_dim", self.projection_dim),
        ])?;
        validate::divisible(
            ("text_config.hidden_size", t.hidden_size),
            ("text_config.num_attention_heads", t.num_attention_heads),
        )?;
        validate::divisible(
            ("vision_config.hidden_size", v.hidden_size),
            ("vision_config.num_attention_heads", v.num_attention_heads),
        )?;
        validate::divisible(
            ("vision_config.image_size", v.image_size),
            ("vision_config.patch_size", v.patch_size),
        )?;
        validate::epsilon("text_config.layer_norm_eps", t.layer_norm_eps)?;
        validate::epsilon("vision_config.layer_norm_eps", v.layer_norm_eps)?;
        validate::probabilities(&[
            ("text_config.attention_dropout", t.attention_dropout),
            ("vision_config.attention_dropout", v.attention_dropout),
        ])?;
        validate::transformer_fits(
            "CLIP's text tower",
            t.vocab_size
                .saturating_add(t.max_position_embeddings)
                .saturating_add(self.projection_dim),
            t.hidden_size,
            t.num_hidden_layers,
            t.intermediate_size,
            t.hidden_size,
        )?;
        let grid = v.grid();
        validate::transformer_fits(
            "CLIP's vision tower",
            grid.saturating_mul(grid)
                .saturating_add(2)
                .saturating_add(
                    v.num_channels
                        .saturating_mul(v.patch_size.saturating_pow(2)),
                )
                .saturating_add(self.projection_dim),
            v.hidden_size,
            v.num_hidden_layers,
            v.intermediate_size,
            v.hidden_size,
        )
    }

    /// Builds a freshly initialised model.
    ///
    /// # Errors
    /// See [`Self::validate`].
    pub fn init(&self, device: &Device) -> Result<ClipModel> {
        self.validate()?;
        let (t, v) = (&self.text_config, &self.vision_config);
        let layers = |cfg: TransformerBlockConfig, n: usize| {
            (0..n)
                .map(|_| cfg.init(device))
                .collect::<zoo_attention::Result<Vec<_>>>()
        };
        let norm = |d: usize, eps: f64| LayerNormConfig::new(d).with_epsilon(eps).init(device);
        let table = |rows: usize, d: usize, std: f64| {
            EmbeddingConfig::new(rows, d)
                .with_initializer(normal(std))
                .init(device)
        };
        let text_block = block(
            t.hidden_size,
            t.num_attention_heads,
            t.intermediate_size,
            t.hidden_act,
            t.layer_norm_eps,
            t.attention_dropout,
            normal(t.initializer_range),
        );
        let vision_block = block(
            v.hidden_size,
            v.num_attention_heads,
            v.intermediate_size,
            v.hidden_act,
            v.layer_norm_eps,
            v.attention_dropout,
            normal(v.initializer_range),
        );
        let p = v.patch_size;
        let grid = v.grid();
        let projection = |d: usize, std: f64| {
            LinearConfig::new(d, self.projection_dim)
                .with_bias(false)
                .with_initializer(normal(std))
                .init(device)
        };
        Ok(ClipModel {
            text_model: ClipTextTransformer {
                embeddings: ClipTextEmbeddings {
                    token_embedding: table(t.vocab_size, t.hidden_size, t.initializer_range),
                    position_embedding: table(
                        t.max_position_embeddings,
                        t.hidden_size,
                        t.initializer_range,
                    ),
                },
                layers: layers(text_block, t.num_hidden_layers)?,
                final_layer_norm: norm(t.hidden_size, t.layer_norm_eps),
                config: t.clone(),
            },
            vision_model: ClipVisionTransformer {
                embeddings: ClipVisionEmbeddings {
                    class_embedding: normal(v.initializer_range).init([v.hidden_size], device),
                    patch_embedding: Conv2dConfig::new([v.num_channels, v.hidden_size], [p, p])
                        .with_stride([p, p])
                        .with_bias(false)
                        .with_initializer(normal(v.initializer_range))
                        .init(device),
                    position_embedding: table(1 + grid * grid, v.hidden_size, v.initializer_range),
                },
                pre_layrnorm: norm(v.hidden_size, v.layer_norm_eps),
                layers: layers(vision_block, v.num_hidden_layers)?,
                post_layernorm: norm(v.hidden_size, v.layer_norm_eps),
                config: v.clone(),
            },
            visual_projection: projection(v.hidden_size, v.initializer_range),
            text_projection: projection(t.hidden_size, t.initializer_range),
            logit_scale: Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![self.logit_scale_init_value as f32], [1]),
                device,
            )),
            config: self.clone(),
        })
    }
}

/// The text tower's token and position tables.
#[derive(Module, Debug)]
pub struct ClipTextEmbeddings {
    /// `[vocab_size, D]`.
    pub token_embedding: Embedding,
    /// `[max_position_embeddings, D]`.
    pub position_embedding: Embedding,
}

/// The text tower (HF's `CLIPTextTransformer`).
#[derive(Module, Debug)]
pub struct ClipTextTransformer {
    /// The tables.
    pub embeddings: ClipTextEmbeddings,
    /// The causal layers (HF `encoder.layers`).
    pub layers: Vec<TransformerBlock>,
    /// The final norm.
    pub final_layer_norm: LayerNorm,
    #[module(skip)]
    config: ClipTextConfig,
}

/// A tower's output: every position's state, and the pooled one.
#[derive(Debug, Clone)]
pub struct TowerOutput {
    /// `[B, T, D]` (HF `last_hidden_state`).
    pub last_hidden_state: Tensor<3>,
    /// `[B, D]` (HF `pooler_output`): the end-of-text token's state, or the class token's
    /// after `post_layernorm`.
    pub pooler_output: Tensor<2>,
}

/// Where each row of `ids` (`t` per row) is pooled: its first `eos` token, or with the
/// old `eos_token_id` of 2 its largest id, the first where several tie (HF's rule; a row
/// without `eos` pools at 0, as HF's `argmax` of all zeros does).
pub fn eos_positions(ids: &[i64], t: usize, eos: usize) -> Vec<usize> {
    ids.chunks(t)
        .map(|row| {
            if eos == 2 {
                let mut best = 0;
                for (i, &id) in row.iter().enumerate() {
                    if id > row[best] {
                        best = i;
                    }
                }
                best
            } else {
                row.iter()
                    .position(|&id| id == eos as i64)
                    .unwrap_or_default()
            }
        })
        .collect()
}

/// The `[B, D]` rows of `hidden` `[B, T, D]` at one position per batch row.
fn gather_rows(hidden: Tensor<3>, positions: &[usize]) -> Tensor<2> {
    let [b, t, d] = hidden.dims();
    let index: Vec<i64> = positions
        .iter()
        .enumerate()
        .map(|(row, p)| (row * t + p) as i64)
        .collect();
    let index = Tensor::<1, Int>::from_data(TensorData::new(index, [b]), &hidden.device());
    hidden.reshape([b * t, d]).select(0, index)
}

impl ClipTextTransformer {
    /// The configuration the tower was built from.
    pub fn config(&self) -> &ClipTextConfig {
        &self.config
    }

    /// # Shapes
    /// - `ids`: `[B, T]`; `padding`: `[B, T]`, `true` at padding
    /// - returns `[B, T, D]` and `[B, D]`
    ///
    /// # Errors
    /// An empty batch, a text longer than `max_position_embeddings`, or an id outside the
    /// vocabulary, each named.
    pub fn forward(
        &self,
        ids: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<TowerOutput> {
        let cfg = &self.config;
        let [b, t] = ids.dims();
        let limits = TokenLimits::new(cfg.vocab_size, cfg.max_position_embeddings)
            .named("max_position_embeddings");
        if b == 0 {
            return Err(zoo_core::TokenError::Empty { what: "input_ids" }.into());
        }
        limits.check_len("input_ids", 0, t)?;
        let host: Vec<i64> = ids
            .to_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .map_err(|e| VisionError::Input(format!("cannot read input_ids: {e:?}")))?;
        limits.check_ids("input_ids", &host, t)?;
        let device = ids.device();
        let positions = Tensor::<1, Int>::arange(0..t as i64, &device).reshape([1, t]);
        let e = &self.embeddings;
        let mut x = e.token_embedding.forward(ids) + e.position_embedding.forward(positions);
        let mut input = BlockInput::new(x.clone()).causal();
        if let Some(pad) = padding {
            input = input.key_padding(pad);
        }
        for layer in &self.layers {
            x = layer.forward(input.over(x))?.hidden;
        }
        let hidden = zoo_attention::layer_norm(&self.final_layer_norm, x);
        let pooled = gather_rows(hidden.clone(), &eos_positions(&host, t, cfg.eos_token_id));
        Ok(TowerOutput {
            last_hidden_state: hidden,
            pooler_output: pooled,
        })
    }
}

/// The vision tower's class token, patch projection and positions.
#[derive(Module, Debug)]
pub struct ClipVisionEmbeddings {
    /// `[D]` the learned class token.
    pub class_embedding: Param<Tensor<1>>,
    /// `[D, C, P, P]`, stride `P`, no bias.
    pub patch_embedding: Conv2d,
    /// `[1 + G², D]`: the class token's position, then a `G × G` grid.
    pub position_embedding: Embedding,
}

/// The vision tower (HF's `CLIPVisionTransformer`).
#[derive(Module, Debug)]
pub struct ClipVisionTransformer {
    /// The embeddings.
    pub embeddings: ClipVisionEmbeddings,
    /// The norm before the layers (HF's spelling).
    pub pre_layrnorm: LayerNorm,
    /// The layers (HF `encoder.layers`).
    pub layers: Vec<TransformerBlock>,
    /// The norm of the pooled class token.
    pub post_layernorm: LayerNorm,
    #[module(skip)]
    config: ClipVisionConfig,
}

impl ClipVisionTransformer {
    /// The configuration the tower was built from.
    pub fn config(&self) -> &ClipVisionConfig {
        &self.config
    }

    /// # Shapes
    /// - `input`: `[B, C, H, W]`, the trained size unless interpolating
    /// - returns `[B, 1 + N, D]` and `[B, D]`
    ///
    /// # Errors
    /// As [`crate::ViTModel::forward`].
    pub fn forward(&self, input: ImageInput) -> Result<TowerOutput> {
        let cfg = &self.config;
        let (pixels, interpolate) = (input.pixels, input.interpolate);
        let (gh, gw) = check_pixels(
            &pixels,
            cfg.num_channels,
            cfg.patch_size,
            cfg.image_size,
            interpolate,
        )?;
        let (b, d) = (pixels.dims()[0], cfg.hidden_size);
        let e = &self.embeddings;
        let patches = e
            .patch_embedding
            .forward(pixels)
            .flatten::<3>(2, 3)
            .swap_dims(1, 2); // [B, N, D]
        let class = e.class_embedding.val().reshape([1, 1, d]).expand([b, 1, d]);
        let table = e.position_embedding.weight.val().unsqueeze_dim::<3>(0);
        let x = Tensor::cat(vec![class, patches], 1) + resample_positions(table, 1, gh, gw);
        let mut x = zoo_attention::layer_norm(&self.pre_layrnorm, x);
        for layer in &self.layers {
            x = layer.forward(BlockInput::new(x))?.hidden;
        }
        let pooled = zoo_attention::layer_norm(
            &self.post_layernorm,
            x.clone().narrow(1, 0, 1).reshape([b, d]),
        );
        Ok(TowerOutput {
            last_hidden_state: x,
            pooler_output: pooled,
        })
    }
}

/// HF's `CLIPModel`: both towers, their projections and `logit_scale`.
#[derive(Module, Debug)]
pub struct ClipModel {
    /// The text tower.
    pub text_model: ClipTextTransformer,
    /// The vision tower.
    pub vision_model: ClipVisionTransformer,
    /// `[D_vision, projection_dim]`, no bias.
    pub visual_projection: Linear,
    /// `[D_text, projection_dim]`, no bias.
    pub text_projection: Linear,
    /// `[1]` the log of the similarity's temperature.
    pub logit_scale: Param<Tensor<1>>,
    #[module(skip)]
    config: ClipConfig,
}

/// What [`ClipModel::forward`] gives, as HF names it.
#[derive(Debug, Clone)]
pub struct ClipOutput {
    /// `[B_images, B_texts]`: `exp(logit_scale)` times the cosine of each pair.
    pub logits_per_image: Tensor<2>,
    /// `[B_texts, B_images]`, the transpose.
    pub logits_per_text: Tensor<2>,
    /// `[B_texts, projection_dim]`, unit length.
    pub text_embeds: Tensor<2>,
    /// `[B_images, projection_dim]`, unit length.
    pub image_embeds: Tensor<2>,
}

/// Each row divided by its Euclidean norm.
fn unit(x: Tensor<2>) -> Tensor<2> {
    let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt();
    x / norm
}

/// CLIP's names and module paths of one layer, for both towers.
const NAMES: [(&str, &str); 8] = [
    (
        "{text|vision}_model.encoder.layers.{n}.self_attn.q_proj.",
        "{text|vision}_model.layers.{n}.self_attn.q_proj.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.self_attn.k_proj.",
        "{text|vision}_model.layers.{n}.self_attn.k_proj.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.self_attn.v_proj.",
        "{text|vision}_model.layers.{n}.self_attn.v_proj.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.self_attn.out_proj.",
        "{text|vision}_model.layers.{n}.self_attn.o_proj.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.layer_norm1.",
        "{text|vision}_model.layers.{n}.norm_1.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.layer_norm2.",
        "{text|vision}_model.layers.{n}.norm_2.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.mlp.fc1.",
        "{text|vision}_model.layers.{n}.mlp.up_proj.",
    ),
    (
        "{text|vision}_model.encoder.layers.{n}.mlp.fc2.",
        "{text|vision}_model.layers.{n}.mlp.down_proj.",
    ),
];

fn key_map() -> KeyMap {
    // Older checkpoints store the `position_ids` buffers.
    KeyMap::new()
        .names(&NAMES)
        .scalars("^logit_scale$")
        .ignore(r"\.position_ids$")
}

impl ClipModel {
    /// The configuration the model was built from.
    pub fn config(&self) -> &ClipConfig {
        &self.config
    }

    /// Each text's projected embedding (HF's `get_text_features`), not normalised.
    ///
    /// # Shapes
    /// - `ids`, `padding`: `[B, T]` -> `[B, projection_dim]`
    ///
    /// # Errors
    /// As [`ClipTextTransformer::forward`].
    pub fn text_features(
        &self,
        ids: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<2>> {
        let pooled = self.text_model.forward(ids, padding)?.pooler_output;
        Ok(self.text_projection.forward(pooled))
    }

    /// Each image's projected embedding (HF's `get_image_features`), not normalised.
    ///
    /// # Shapes
    /// - `input`: `[B, C, H, W]` -> `[B, projection_dim]`
    ///
    /// # Errors
    /// As [`ClipVisionTransformer::forward`].
    pub fn image_features(&self, input: ImageInput) -> Result<Tensor<2>> {
        let pooled = self.vision_model.forward(input)?.pooler_output;
        Ok(self.visual_projection.forward(pooled))
    }

    /// Every image against every text.
    ///
    /// # Shapes
    /// - `ids`, `padding`: `[Bt, T]`; `images`: `[Bi, C, H, W]`
    ///
    /// # Errors
    /// As the two towers'.
    pub fn forward(
        &self,
        ids: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
        images: ImageInput,
    ) -> Result<ClipOutput> {
        let image_embeds = unit(self.image_features(images)?);
        let text_embeds = unit(self.text_features(ids, padding)?);
        let scale = self.logit_scale.val().exp().reshape([1, 1]);
        let logits_per_text = text_embeds.clone().matmul(image_embeds.clone().transpose()) * scale;
        Ok(ClipOutput {
            logits_per_image: logits_per_text.clone().transpose(),
            logits_per_text,
            text_embeds,
            image_embeds,
        })
    }

    /// Loads an HF `CLIPModel` checkpoint folder.
    ///
    /// # Errors
    /// A missing or invalid `config.json`, no weights file, or tensors that do not fit,
    /// all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg: ClipConfig = checkpoint::read_valid_config(dir, ClipConfig::validate)?;
        let mut model = cfg.init(device)?;
        checkpoint::load_into(&mut model, dir, &key_map())?;
        Ok(model)
    }

    /// Writes the model as an HF `CLIPModel` checkpoint folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        Ok(checkpoint::save_pretrained(
            self,
            dir.as_ref(),
            &key_map(),
            &self.config,
            "clip",
            "CLIPModel",
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_pooled_at_the_first_end_of_text_or_the_largest_id_for_old_configs() {
        let ids = [5, 9, 7, 9, 1, 3, 8, 2, 8, 8];
        // eos 9: the first 9 of row 0 (position 1); row 1 has none, so position 0.
        assert_eq!(eos_positions(&ids, 5, 9), [1, 0]);
        // The old eos 2: each row's largest id, the first of a tie (row 1's 8 at 1, 3, 4),
        // whether or not a 2 is there.
        assert_eq!(eos_positions(&ids, 5, 2), [1, 1]);
    }

    #[test]
    fn hf_defaults_and_bad_configs_are_named() {
        let cfg = ClipConfig::from_json(r#"{"model_type": "clip"}"#).unwrap();
        assert_eq!(cfg.text_config, ClipTextConfig::openai());
        assert_eq!(cfg.vision_config.grid(), 7);
        assert_eq!(cfg.projection_dim, 512);
        let err = |text: &str| ClipConfig::from_json(text).unwrap_err().to_string();
        assert_eq!(
            err(r#"{"vision_config": {"patch_size": 30}}"#),
            "invalid CLIP config: vision_config.image_size 224 is not divisible by \
             vision_config.patch_size 30"
        );
        assert_eq!(
            err(r#"{"text_config": {"num_attention_heads": 0}}"#),
            "invalid CLIP config: text_config.num_attention_heads must be > 0, got 0"
        );
        assert_eq!(
            err(r#"{"model_type": "siglip"}"#),
            "invalid CLIP config: model_type \"siglip\" is not a CLIP model"
        );
        assert!(err(r#"{"text_config": {"hidden_act": "tanh"}}"#).contains("unknown variant"));
        assert!(
            err(r#"{"text_config": {"vocab_size": 1000000000000}}"#).contains("CLIP's text tower"),
        );
    }
}
