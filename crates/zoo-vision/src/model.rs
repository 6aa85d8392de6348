//! The Vision Transformer as HF's `ViTModel` lays it out: a strided convolution cuts the
//! image into patch tokens, a CLS token and learned positions are added, a pre-norm
//! encoder (`zoo-attention`'s [`TransformerBlock`]) and a final LayerNorm follow, then an
//! optional pooler (`tanh(dense(hidden[:, 0]))`) or a classification head.
//!
//! Parameter paths: `embeddings.{cls_token, position_embeddings,
//! patch_embeddings.projection}`, `layers.N.{norm_1, self_attn, norm_2, mlp}` (HF's
//! `encoder.layer.N.{layernorm_before, attention, layernorm_after, intermediate/output}`),
//! `layernorm`, `pooler`; the mapping is in [`crate::pretrained`].

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    Dropout, DropoutConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::tensor::{Device, Tensor, TensorData};
use zoo_attention::{
    BlockInput, FeedForwardConfig, MultiHeadAttentionConfig, NormKind, NormPlacement, Pooler,
    TransformerBlock, TransformerBlockConfig,
};
use zoo_core::{ClassLogits, ModelError};

use crate::config::{Pooling, ViTConfig};
use crate::error::{Result, VisionError};
use crate::interpolate::bicubic_matrix;

/// Cuts images into non-overlapping patches and projects each to `d_model`, with one
/// convolution whose kernel and stride are the patch size (HF `patch_embeddings`).
#[derive(Module, Debug)]
pub struct PatchEmbeddings {
    /// `[d_model, C, P, P]` kernel, stride `P`.
    pub projection: Conv2d,
}

impl PatchEmbeddings {
    /// # Shapes
    /// - `pixels`: `[B, C, H, W]` with `H` and `W` multiples of the patch size
    /// - returns `[B, (H/P)·(W/P), d_model]`, patches in row-major order
    pub fn forward(&self, pixels: Tensor<4>) -> Tensor<3> {
        let x = self.projection.forward(pixels); // [B, D, H/P, W/P]
        x.flatten::<3>(2, 3).swap_dims(1, 2) // [B, N, D]
    }
}

/// The token sequence of an image: CLS, then the patches, plus learned positions.
#[derive(Module, Debug)]
pub struct ViTEmbeddings {
    /// `[1, 1, D]` the learned CLS token.
    pub cls_token: Param<Tensor<3>>,
    /// `[1, 1, D]` DeiT's learned distillation token, after the CLS token.
    pub distillation_token: Option<Param<Tensor<3>>>,
    /// `[1, P + G², D]` learned positions: the `P` prefix tokens' (CLS, and DeiT's
    /// distillation token), then a `G × G` grid.
    pub position_embeddings: Param<Tensor<3>>,
    /// The patch projection.
    pub patch_embeddings: PatchEmbeddings,
    /// Dropout on the summed embeddings.
    pub dropout: Dropout,
}

/// The input of [`ViTModel::forward`].
#[derive(Debug, Clone)]
pub struct ImageInput {
    pub(crate) pixels: Tensor<4>,
    pub(crate) interpolate: bool,
    pub(crate) need_weights: bool,
}

impl ImageInput {
    /// Images `[B, C, H, W]`, preprocessed (see [`crate::image`]), at the model's trained
    /// size.
    pub fn new(pixels: Tensor<4>) -> Self {
        Self {
            pixels,
            interpolate: false,
            need_weights: false,
        }
    }

    /// Accepts another image size: the position grid is resampled bicubically to the
    /// image's patch grid, as HF's `interpolate_pos_encoding=True`.
    pub fn interpolate_pos_encoding(mut self) -> Self {
        self.interpolate = true;
        self
    }

    /// Returns every layer's attention weights.
    pub fn with_weights(mut self) -> Self {
        self.need_weights = true;
        self
    }
}

/// The output of [`ViTModel::forward`].
#[derive(Debug, Clone)]
pub struct ViTOutput {
    /// `[B, 1 + N, D]` the final LayerNorm's output (HF `last_hidden_state`).
    pub last_hidden_state: Tensor<3>,
    /// `[B, D_pool]` `tanh(dense(last_hidden_state[:, 0]))`, when the model has a pooler.
    pub pooler_output: Option<Tensor<2>>,
    /// Per layer `[B, H, 1 + N, 1 + N]`, when asked for; empty otherwise.
    pub attentions: Vec<Tensor<4>>,
}

/// The ViT encoder: embeddings, pre-norm layers, a final LayerNorm and an optional pooler.
#[derive(Module, Debug)]
pub struct ViTModel {
    /// The embeddings.
    pub embeddings: ViTEmbeddings,
    /// The layers (HF `encoder.layer`).
    pub layers: Vec<TransformerBlock>,
    /// The final norm (HF `layernorm`).
    pub layernorm: LayerNorm,
    /// Dense layer of the pooler (HF `pooler.dense`), applied to the CLS token.
    pub pooler: Option<Pooler>,
    #[module(skip)]
    config: ViTConfig,
}

fn init(cfg: &ViTConfig) -> Initializer {
    Initializer::Normal {
        mean: 0.0,
        std: cfg.initializer_range,
    }
}

impl ViTConfig {
    /// The configuration of every layer.
    fn block(&self) -> TransformerBlockConfig {
        let d = self.hidden_size;
        let attention = MultiHeadAttentionConfig::new(d, self.num_attention_heads)
            .with_qkv_bias(self.qkv_bias)
            .with_dropout(self.attention_probs_dropout_prob)
            .with_initializer(init(self));
        // HF's ViT has no dropout inside the MLP; the block's residual dropout is HF's
        // `ViTSelfOutput` / `ViTOutput` dropout.
        let ffn = FeedForwardConfig::new(d, self.intermediate_size)
            .with_activation(self.hidden_act.ffn())
            .with_initializer(init(self));
        TransformerBlockConfig::new(attention, ffn)
            .with_norm(NormKind::LayerNorm)
            .with_norm_eps(self.layer_norm_eps)
            .with_placement(NormPlacement::Pre)
            .with_dropout(self.hidden_dropout_prob)
    }

    /// Trainable parameters of the encoder [`Self::init`] builds, counted from the
    /// configuration alone: the CLS token, the position table, the patch convolution, the
    /// layers, the final LayerNorm and the pooler when asked for (a classifier head adds
    /// `hidden_size · labels + labels`).
    pub fn num_params(&self, with_pooler: bool) -> usize {
        let d = self.hidden_size;
        let p = self.patch_size;
        let prefix = self.prefix_tokens();
        let positions = prefix + self.grid() * self.grid();
        prefix * d
            + positions * d
            + self.num_channels * p * p * d
            + d
            + self.num_hidden_layers * self.block().num_params()
            + NormKind::LayerNorm.num_params(d)
            + usize::from(with_pooler) * (d * self.pooler_size() + self.pooler_size())
    }

    /// Builds the encoder, with a pooler or without (as HF's `add_pooling_layer`).
    ///
    /// # Errors
    /// See [`ViTConfig::validate`].
    pub fn init(&self, with_pooler: bool, device: &Device) -> Result<ViTModel> {
        self.validate()?;
        let d = self.hidden_size;
        let p = self.patch_size;
        let block = self.block();
        let layers = (0..self.num_hidden_layers)
            .map(|_| block.init(device))
            .collect::<zoo_attention::Result<Vec<_>>>()?;
        let positions = self.prefix_tokens() + self.grid() * self.grid();
        let table = |shape: [usize; 3]| init(self).init::<3, _>(shape, device);
        Ok(ViTModel {
            embeddings: ViTEmbeddings {
                cls_token: table([1, 1, d]),
                distillation_token: self.distilled().then(|| table([1, 1, d])),
                position_embeddings: table([1, positions, d]),
                patch_embeddings: PatchEmbeddings {
                    projection: Conv2dConfig::new([self.num_channels, d], [p, p])
                        .with_stride([p, p])
                        .with_initializer(init(self))
                        .init(device),
                },
                dropout: DropoutConfig::new(self.hidden_dropout_prob).init(),
            },
            layers,
            layernorm: LayerNormConfig::new(d)
                .with_epsilon(self.layer_norm_eps)
                .init(device),
            pooler: with_pooler.then(|| Pooler::new(d, self.pooler_size(), init(self), device)),
            config: self.clone(),
        })
    }
}

impl ViTModel {
    /// The configuration the model was built from.
    pub fn config(&self) -> &ViTConfig {
        &self.config
    }

    /// The position table for a `gh × gw` patch grid: the trained one, or its patch part
    /// resampled bicubically with the prefix tokens' positions kept (HF's
    /// `interpolate_pos_encoding`, which also returns the table unchanged for a square
    /// grid of the trained size).
    ///
    /// # Shapes
    /// - returns `[1, P + gh·gw, D]`, `P` the prefix tokens
    pub fn positions(&self, gh: usize, gw: usize) -> Tensor<3> {
        let table = self.embeddings.position_embeddings.val();
        resample_positions(table, self.config.prefix_tokens(), gh, gw)
    }

    /// The token sequence of `input`'s images, after checking them against the model.
    fn embed(&self, pixels: Tensor<4>, interpolate: bool) -> Result<Tensor<3>> {
        let cfg = &self.config;
        let (gh, gw) = check_pixels(
            &pixels,
            cfg.num_channels,
            cfg.patch_size,
            cfg.image_size,
            interpolate,
        )?;
        let b = pixels.dims()[0];
        let e = &self.embeddings;
        let d = cfg.hidden_size;
        let patches = e.patch_embeddings.forward(pixels); // [B, N, D]
        let mut tokens = vec![e.cls_token.val().expand([b, 1, d])]; // [B, 1, D]
        if let Some(dist) = &e.distillation_token {
            tokens.push(dist.val().expand([b, 1, d]));
        }
        tokens.push(patches);
        let x = Tensor::cat(tokens, 1) + self.positions(gh, gw);
        Ok(zoo_attention::dropout(&e.dropout, x))
    }

    /// # Shapes
    /// - `input`: `[B, C, H, W]`, `H = W = image_size` unless interpolating
    /// - returns `[B, 1 + N, D]` (and `[B, D_pool]`, `[B, H, 1+N, 1+N]` per layer)
    ///
    /// # Errors
    /// An empty batch, a channel count other than the model's, a size the patches do not
    /// tile, or another size without interpolation, each naming the values.
    pub fn forward(&self, input: ImageInput) -> Result<ViTOutput> {
        let ImageInput {
            pixels,
            interpolate,
            need_weights,
        } = input;
        let mut x = self.embed(pixels, interpolate)?;
        let mut attentions = Vec::new();
        for layer in &self.layers {
            let mut block = BlockInput::new(x);
            if need_weights {
                block = block.with_weights();
            }
            let out = layer.forward(block)?;
            x = out.hidden;
            attentions.extend(out.self_weights);
        }
        let hidden = zoo_attention::layer_norm(&self.layernorm, x);
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(hidden.clone()));
        Ok(ViTOutput {
            last_hidden_state: hidden,
            pooler_output,
            attentions,
        })
    }
}

/// A learned position table `[1, P + G², D]` (`P` prefix tokens, then a `G × G` grid)
/// for a `gh × gw` patch grid: the table itself for the trained square grid, otherwise its
/// patch part resampled bicubically with the prefix tokens' positions kept (HF's
/// `interpolate_pos_encoding`, ViT's and CLIP's).
///
/// # Shapes
/// - returns `[1, P + gh·gw, D]`
pub(crate) fn resample_positions(
    table: Tensor<3>,
    prefix: usize,
    gh: usize,
    gw: usize,
) -> Tensor<3> {
    let [_, n, d] = table.dims();
    let g = ((n - prefix) as f64).sqrt().round() as usize;
    if gh == gw && gh * gw == g * g {
        return table;
    }
    let device = table.device();
    let cls = table.clone().narrow(1, 0, prefix); // [1, P, D]
    let grid = table.narrow(1, prefix, g * g).reshape([g, g * d]); // [G, G·D]
    let wh = Tensor::<2>::from_data(TensorData::new(bicubic_matrix(g, gh), [gh, g]), &device);
    let rows = wh.matmul(grid).reshape([gh, g, d]); // [gh, G, D]
    let ww = Tensor::<2>::from_data(TensorData::new(bicubic_matrix(g, gw), [gw, g]), &device)
        .unsqueeze_dim::<3>(0)
        .repeat_dim(0, gh); // [gh, gw, G]
    let patches = ww.matmul(rows).reshape([1, gh * gw, d]); // [1, gh·gw, D]
    Tensor::cat(vec![cls, patches], 1)
}

/// Checks images `[B, C, H, W]` against a patch model: a batch, the model's channels, a
/// size the patches tile, and the trained size unless interpolating. Returns the patch
/// grid `(gh, gw)`.
///
/// # Errors
/// Each failed check, naming the values.
pub(crate) fn check_pixels(
    pixels: &Tensor<4>,
    channels: usize,
    p: usize,
    s: usize,
    interpolate: bool,
) -> Result<(usize, usize)> {
    let [b, c, h, w] = pixels.dims();
    if b == 0 {
        return Err(VisionError::Input("empty batch of images".into()));
    }
    if c != channels {
        return Err(VisionError::Input(format!(
            "pixel values have {c} channels, the model expects {channels}"
        )));
    }
    if h == 0 || w == 0 || !h.is_multiple_of(p) || !w.is_multiple_of(p) {
        return Err(VisionError::Input(format!(
            "image size {h}x{w} is not divisible by the patch size {p}"
        )));
    }
    if !interpolate && (h != s || w != s) {
        return Err(VisionError::Input(format!(
            "image size {h}x{w} differs from the model's {s}x{s}; resize it, or \
             interpolate the position embeddings"
        )));
    }
    Ok((h / p, w / p))
}

/// ViT with a linear classifier on the CLS token (or the mean patch token, by
/// [`ViTConfig::pooling`]), as HF's `ViTForImageClassification`.
#[derive(Module, Debug)]
pub struct ViTForImageClassification {
    /// The encoder, without a pooler (HF `vit`).
    pub vit: ViTModel,
    /// `[D, num_labels]` (HF `classifier`).
    pub classifier: Linear,
}

impl ViTForImageClassification {
    /// A freshly initialised classifier of `num_labels` classes.
    ///
    /// # Errors
    /// See [`ViTConfig::validate`], and zero labels.
    pub fn new(cfg: &ViTConfig, num_labels: usize, device: &Device) -> Result<Self> {
        if num_labels == 0 {
            return Err(zoo_core::ConfigError::zero("num_labels").into());
        }
        Ok(Self {
            vit: cfg.init(false, device)?,
            classifier: LinearConfig::new(cfg.hidden_size, num_labels)
                .with_initializer(init(cfg))
                .init(device),
        })
    }

    /// Number of classes.
    pub fn num_labels(&self) -> usize {
        self.classifier.weight.dims()[1]
    }

    /// Class logits, and the encoder's output they were read from.
    ///
    /// # Shapes
    /// - `input`: `[B, C, H, W]` -> logits `[B, num_labels]`
    ///
    /// # Errors
    /// As [`ViTModel::forward`].
    pub fn forward(&self, input: ImageInput) -> Result<(Tensor<2>, ViTOutput)> {
        let out = self.vit.forward(input)?;
        let [b, t, d] = out.last_hidden_state.dims();
        let prefix = self.vit.config().prefix_tokens();
        let pooled = match self.vit.config().pooling {
            Pooling::Cls => out.last_hidden_state.clone().narrow(1, 0, 1),
            Pooling::Mean => out
                .last_hidden_state
                .clone()
                .narrow(1, prefix, t - prefix)
                .mean_dim(1),
        }
        .reshape([b, d]);
        Ok((self.classifier.forward(pooled), out))
    }
}

impl ClassLogits for ViTForImageClassification {
    type Input = Tensor<4>;

    fn class_logits(&self, pixels: Tensor<4>) -> std::result::Result<Tensor<2>, ModelError> {
        Ok(self.forward(ImageInput::new(pixels))?.0)
    }
}

/// DeiT's classifier (Touvron et al., 2021, "Training data-efficient image transformers
/// & distillation through attention"), as HF's `DeiTForImageClassificationWithTeacher`:
/// one linear head on the CLS token, another on the distillation token, and their mean.
#[derive(Module, Debug)]
pub struct DeiTForImageClassificationWithTeacher {
    /// The encoder, without a pooler (HF `deit`).
    pub vit: ViTModel,
    /// `[D, num_labels]` on the CLS token.
    pub cls_classifier: Linear,
    /// `[D, num_labels]` on the distillation token.
    pub distillation_classifier: Linear,
}

/// The three logits of [`DeiTForImageClassificationWithTeacher`], `[B, num_labels]` each.
#[derive(Debug, Clone)]
pub struct DistilledLogits {
    /// The mean of the two heads: what the model predicts.
    pub logits: Tensor<2>,
    /// The CLS token's head.
    pub cls_logits: Tensor<2>,
    /// The distillation token's head.
    pub distillation_logits: Tensor<2>,
}

impl DeiTForImageClassificationWithTeacher {
    /// A freshly initialised classifier of `num_labels` classes.
    ///
    /// # Errors
    /// See [`ViTConfig::validate`], a config that is not DeiT's (no distillation token),
    /// and zero labels.
    pub fn new(cfg: &ViTConfig, num_labels: usize, device: &Device) -> Result<Self> {
        if num_labels == 0 {
            return Err(zoo_core::ConfigError::zero("num_labels").into());
        }
        if !cfg.distilled() {
            return Err(VisionError::Input(format!(
                "a distilled classifier needs DeiT's config (model_type \"deit\"), got {:?}",
                cfg.model_type.as_deref().unwrap_or("none")
            )));
        }
        let head = || {
            LinearConfig::new(cfg.hidden_size, num_labels)
                .with_initializer(init(cfg))
                .init(device)
        };
        Ok(Self {
            vit: cfg.init(false, device)?,
            cls_classifier: head(),
            distillation_classifier: head(),
        })
    }

    /// Number of classes.
    pub fn num_labels(&self) -> usize {
        self.cls_classifier.weight.dims()[1]
    }

    /// # Shapes
    /// - `input`: `[B, C, H, W]` -> each logits `[B, num_labels]`
    ///
    /// # Errors
    /// As [`ViTModel::forward`].
    pub fn forward(&self, input: ImageInput) -> Result<DistilledLogits> {
        let h = self.vit.forward(input)?.last_hidden_state;
        let [b, _, d] = h.dims();
        let token = |i| h.clone().narrow(1, i, 1).reshape([b, d]);
        let cls_logits = self.cls_classifier.forward(token(0));
        let distillation_logits = self.distillation_classifier.forward(token(1));
        Ok(DistilledLogits {
            logits: (cls_logits.clone() + distillation_logits.clone()) / 2.0,
            cls_logits,
            distillation_logits,
        })
    }
}

impl ClassLogits for DeiTForImageClassificationWithTeacher {
    type Input = Tensor<4>;

    fn class_logits(&self, pixels: Tensor<4>) -> std::result::Result<Tensor<2>, ModelError> {
        Ok(self.forward(ImageInput::new(pixels))?.logits)
    }
}

/// Attention rollout (Abnar & Zuidema, 2020, "Quantifying Attention Flow in
/// Transformers"): each layer's head-averaged attention, mixed half and half with the
/// identity for the residual path and renormalised, multiplied from the first layer up.
/// Row 0 is how much the CLS token's final state draws on each input token.
///
/// # Shapes
/// - `attentions`: per layer `[B, H, T, T]` -> `[B, T, T]`
///
/// # Errors
/// No layers, or layers whose shapes differ.
pub fn attention_rollout(attentions: &[Tensor<4>]) -> Result<Tensor<3>> {
    let first = attentions
        .first()
        .ok_or_else(|| VisionError::Input("attention rollout needs at least one layer".into()))?;
    let [b, _, t, _] = first.dims();
    let eye = Tensor::<2>::eye(t, &first.device()).unsqueeze_dim::<3>(0); // [1, T, T]
    let mut rollout = eye.clone().repeat_dim(0, b); // [B, T, T]
    for (i, a) in attentions.iter().enumerate() {
        let dims = a.dims();
        if dims[0] != b || dims[2] != t || dims[3] != t {
            return Err(VisionError::Input(format!(
                "layer {i}'s attention has shape {dims:?}, layer 0's [{b}, _, {t}, {t}]"
            )));
        }
        let mixed = a.clone().mean_dim(1).reshape([b, t, t]) * 0.5 + eye.clone() * 0.5;
        let mixed = mixed.clone() / mixed.sum_dim(2); // rows sum to 1
        rollout = mixed.matmul(rollout);
    }
    Ok(rollout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Tolerance;

    fn tiny() -> ViTConfig {
        let mut c = ViTConfig::new(12, 4, 3, 16, 2, 4, 24);
        c.initializer_range = 0.3;
        c
    }

    #[test]
    fn preset_and_tiny_parameter_counts() {
        let dev = zoo_device::test_device();
        let m = tiny().init(true, &dev).unwrap();
        // cls 16 + positions 10·16 + conv 16·3·4·4 + 16, two layers of (4·(16·16 + 16) +
        // 2·2·16 + 16·24 + 24 + 24·16 + 16), final norm 32, pooler 16·16 + 16.
        let layer = 4 * (16 * 16 + 16) + 4 * 16 + 16 * 24 + 24 + 24 * 16 + 16;
        let expected = 16 + 10 * 16 + 16 * 3 * 16 + 16 + 2 * layer + 32 + 16 * 16 + 16;
        assert_eq!(m.num_params(), expected);
        assert_eq!(tiny().num_params(true), expected);
        assert_eq!(tiny().num_params(false), expected - 16 * 16 - 16);
        let base = ViTConfig::vit_base_patch16_224();
        assert_eq!(
            base.num_params(false),
            base.init(false, &dev).unwrap().num_params()
        );
    }

    #[test]
    fn patches_are_the_strided_convolution_in_row_major_order() {
        let dev = zoo_device::test_device();
        let m = tiny().init(false, &dev).unwrap();
        let x = Tensor::<4>::random(
            [2, 3, 12, 12],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &dev,
        );
        let patches = m.embeddings.patch_embeddings.forward(x.clone()); // [2, 9, 16]
        assert_eq!(patches.dims(), [2, 9, 16]);
        // Patch (row 1, column 2) is token 5: the kernel's dot product with pixels
        // 4..8 × 8..12, plus the bias.
        let w = m.embeddings.patch_embeddings.projection.weight.val(); // [16, 3, 4, 4]
        let bias = m
            .embeddings
            .patch_embeddings
            .projection
            .bias
            .as_ref()
            .unwrap()
            .val();
        let window = x.slice([0..2, 0..3, 4..8, 8..12]).reshape([2, 48]);
        let manual = window.matmul(w.reshape([16, 48]).transpose()) + bias.unsqueeze_dim(0);
        patches
            .narrow(1, 5, 1)
            .reshape([2, 16])
            .into_data()
            .assert_approx_eq::<f32>(&manual.into_data(), Tolerance::absolute(1e-5));
    }

    #[test]
    fn bad_images_are_errors_naming_the_value() {
        let dev = zoo_device::test_device();
        let m = tiny().init(false, &dev).unwrap();
        let run = |shape: [usize; 4], interpolate: bool| {
            let mut input = ImageInput::new(Tensor::zeros(shape, &dev));
            if interpolate {
                input = input.interpolate_pos_encoding();
            }
            m.forward(input).map(|_| ()).unwrap_err().to_string()
        };
        assert_eq!(
            run([1, 1, 12, 12], false),
            "pixel values have 1 channels, the model expects 3"
        );
        assert_eq!(
            run([1, 3, 14, 12], true),
            "image size 14x12 is not divisible by the patch size 4"
        );
        assert_eq!(
            run([1, 3, 13, 12], false),
            "image size 13x12 is not divisible by the patch size 4"
        );
        assert_eq!(
            run([1, 3, 16, 16], false),
            "image size 16x16 differs from the model's 12x12; resize it, or interpolate the \
             position embeddings"
        );
        assert_eq!(run([0, 3, 12, 12], false), "empty batch of images");
        // The same 16×16 image runs when interpolating: 4×4 patches and the CLS token.
        let out = m
            .forward(
                ImageInput::new(Tensor::zeros([1, 3, 16, 12], &dev)).interpolate_pos_encoding(),
            )
            .unwrap();
        assert_eq!(out.last_hidden_state.dims(), [1, 1 + 4 * 3, 16]);
    }

    #[test]
    fn interpolating_to_the_trained_grid_keeps_the_table_and_other_grids_resample_it() {
        let dev = zoo_device::test_device();
        let m = tiny().init(false, &dev).unwrap();
        let table = m.embeddings.position_embeddings.val();
        m.positions(3, 3)
            .into_data()
            .assert_eq(&table.clone().into_data(), true);
        // A 6×3 grid: the CLS position is kept, and row i of the patches is the
        // bicubic combination of the trained rows (columns 3 -> 3 is the identity).
        let p = m.positions(6, 3);
        assert_eq!(p.dims(), [1, 1 + 18, 16]);
        p.clone()
            .narrow(1, 0, 1)
            .into_data()
            .assert_eq(&table.clone().narrow(1, 0, 1).into_data(), true);
        let wh = bicubic_matrix(3, 6);
        let grid = table.narrow(1, 1, 9).reshape([3, 3, 16]);
        let mut row2 = grid.clone().narrow(0, 0, 1) * wh[2 * 3];
        for k in 1..3 {
            row2 = row2 + grid.clone().narrow(0, k, 1) * wh[2 * 3 + k];
        }
        p.narrow(1, 1 + 2 * 3, 3)
            .reshape([1, 3, 16])
            .into_data()
            .assert_approx_eq::<f32>(&row2.into_data(), Tolerance::absolute(1e-5));
    }

    #[test]
    fn the_classifier_reads_the_cls_token_or_the_patch_mean() {
        let dev = zoo_device::test_device();
        let x = Tensor::<4>::random(
            [2, 3, 12, 12],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &dev,
        );
        let m = ViTForImageClassification::new(&tiny(), 5, &dev).unwrap();
        let (logits, out) = m.forward(ImageInput::new(x.clone())).unwrap();
        let cls = out
            .last_hidden_state
            .clone()
            .narrow(1, 0, 1)
            .reshape([2, 16]);
        logits.into_data().assert_approx_eq::<f32>(
            &m.classifier.forward(cls).into_data(),
            Tolerance::absolute(1e-6),
        );
        let mut cfg = tiny();
        cfg.pooling = Pooling::Mean;
        let mut mean = ViTForImageClassification::new(&cfg, 5, &dev).unwrap();
        mean = mean.load_record(m.clone().into_record());
        let (logits, out) = mean.forward(ImageInput::new(x)).unwrap();
        let pooled = out
            .last_hidden_state
            .narrow(1, 1, 9)
            .mean_dim(1)
            .reshape([2, 16]);
        logits.into_data().assert_approx_eq::<f32>(
            &m.classifier.forward(pooled).into_data(),
            Tolerance::absolute(1e-6),
        );
        assert!(
            ViTForImageClassification::new(&tiny(), 0, &dev).is_err(),
            "zero labels"
        );
    }

    #[test]
    fn each_image_is_classified_alone_whatever_the_batch() {
        let dev = zoo_device::test_device();
        for pooling in [Pooling::Cls, Pooling::Mean] {
            let mut cfg = tiny();
            cfg.pooling = pooling;
            let m = ViTForImageClassification::new(&cfg, 5, &dev).unwrap();
            let x = Tensor::<4>::random(
                [70, 3, 12, 12],
                burn::tensor::Distribution::Normal(0.0, 1.0),
                &dev,
            );
            let (all, _) = m.forward(ImageInput::new(x.clone())).unwrap();
            let mut parts = Vec::new();
            for (start, len) in [(0, 32), (32, 32), (64, 6)] {
                parts.push(
                    m.forward(ImageInput::new(x.clone().narrow(0, start, len)))
                        .unwrap()
                        .0,
                );
            }
            all.into_data().assert_approx_eq::<f32>(
                &Tensor::cat(parts, 0).into_data(),
                Tolerance::absolute(1e-5),
            );
        }
    }

    #[test]
    fn rollout_of_identity_attention_is_the_identity_and_rows_stay_distributions() {
        let dev = zoo_device::test_device();
        let eye = Tensor::<2>::eye(4, &dev)
            .reshape([1, 1, 4, 4])
            .repeat_dim(1, 2);
        let r = attention_rollout(&[eye.clone(), eye]).unwrap();
        r.into_data().assert_approx_eq::<f32>(
            &Tensor::<2>::eye(4, &dev).reshape([1, 4, 4]).into_data(),
            Tolerance::absolute(1e-6),
        );
        // Uniform attention, one layer: 0.5·I + 0.5·(1/4), rows summing to 1.
        let uniform = Tensor::<4>::full([1, 3, 4, 4], 0.25, &dev);
        let r = attention_rollout(&[uniform]).unwrap();
        let v = r.into_data().try_to_vec::<f32>().unwrap();
        assert!(
            (v[0] - 0.625).abs() < 1e-6 && (v[1] - 0.125).abs() < 1e-6,
            "{v:?}"
        );
        assert!(attention_rollout(&[]).is_err());
    }
}
