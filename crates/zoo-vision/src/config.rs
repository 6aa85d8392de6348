//! The ViT configuration, with HF's `config.json` field names, and its presets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
pub use zoo_attention::HiddenAct;

use zoo_core::ConfigError;

use crate::error::Result;

/// What the classification head reads from the encoder's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The CLS token's final state, as HF's `ViTForImageClassification`.
    #[default]
    Cls,
    /// The mean of the patch tokens' final states (the CLS token left out), as the
    /// global average pooling of later ViT recipes.
    Mean,
}

impl Pooling {
    fn is_cls(&self) -> bool {
        *self == Self::Cls
    }
}

fn default_act() -> HiddenAct {
    HiddenAct::Gelu
}
fn default_eps() -> f64 {
    1e-12
}
fn default_range() -> f64 {
    0.02
}
fn default_image_size() -> usize {
    224
}
fn default_patch_size() -> usize {
    16
}
fn default_channels() -> usize {
    3
}
fn default_true() -> bool {
    true
}
fn default_pooler_act() -> String {
    "tanh".into()
}

/// Configuration of a Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth
/// 16x16 Words"). The field names are HF's, so a checkpoint's `config.json` deserializes
/// directly ([`ViTConfig::from_json`]); fields HF has and the model does not use
/// (`encoder_stride`, `architectures`, ...) are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViTConfig {
    /// Model width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Feed-forward activation. Default: exact GELU.
    #[serde(default = "default_act")]
    pub hidden_act: HiddenAct,
    /// Dropout on the embeddings and sub-layer outputs while training. Default: 0, HF's.
    #[serde(default)]
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention weights while training. Default: 0, HF's.
    #[serde(default)]
    pub attention_probs_dropout_prob: f64,
    /// Std of the initial weights. Default: 0.02.
    #[serde(default = "default_range")]
    pub initializer_range: f64,
    /// LayerNorm epsilon. Default: 1e-12, HF's.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Side of the square images the position embeddings were trained for. Default: 224.
    #[serde(default = "default_image_size")]
    pub image_size: usize,
    /// Side of a square patch. Default: 16.
    #[serde(default = "default_patch_size")]
    pub patch_size: usize,
    /// Image channels. Default: 3.
    #[serde(default = "default_channels")]
    pub num_channels: usize,
    /// Biases on the query, key and value projections. Default: true.
    #[serde(default = "default_true")]
    pub qkv_bias: bool,
    /// Width of the pooler's output. Default: `hidden_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooler_output_size: Option<usize>,
    /// The pooler's activation; only `"tanh"`, HF's default, is built.
    #[serde(default = "default_pooler_act")]
    pub pooler_act: String,
    /// HF's `model_type`, `"vit"` in a ViT checkpoint; checked by [`Self::validate`]
    /// when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Class names of a classification checkpoint, by class index (`"0"`, `"1"`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    /// What the classification head reads. Not an HF field (HF's ViT reads the CLS
    /// token); written only when it is `mean`. Default: `cls`.
    #[serde(default, skip_serializing_if = "Pooling::is_cls")]
    pub pooling: Pooling,
}

impl ViTConfig {
    /// A configuration with HF's defaults for everything but the sizes.
    pub fn new(
        image_size: usize,
        patch_size: usize,
        num_channels: usize,
        hidden_size: usize,
        num_hidden_layers: usize,
        num_attention_heads: usize,
        intermediate_size: usize,
    ) -> Self {
        Self {
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size,
            hidden_act: default_act(),
            hidden_dropout_prob: 0.0,
            attention_probs_dropout_prob: 0.0,
            initializer_range: default_range(),
            layer_norm_eps: default_eps(),
            image_size,
            patch_size,
            num_channels,
            qkv_bias: true,
            pooler_output_size: None,
            pooler_act: default_pooler_act(),
            model_type: None,
            id2label: None,
            pooling: Pooling::Cls,
        }
    }

    /// `google/vit-base-patch16-224`: 224² RGB images in 16² patches, 12 layers of width
    /// 768, 12 heads.
    pub fn vit_base_patch16_224() -> Self {
        Self::new(224, 16, 3, 768, 12, 12, 3072)
    }

    /// Parses HF's `config.json` text and validates it.
    ///
    /// # Errors
    /// JSON that does not parse or lacks a size, or values [`Self::validate`] rejects.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(ConfigError::malformed)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Patches along each side of a trained-size image.
    /// Whether it is DeiT's (`model_type` `deit`): a distillation token follows the CLS
    /// token.
    pub fn distilled(&self) -> bool {
        self.model_type.as_deref() == Some("deit")
    }

    /// The tokens before the patches: CLS, and DeiT's distillation token.
    pub fn prefix_tokens(&self) -> usize {
        1 + usize::from(self.distilled())
    }

    /// Patches per side at the trained image size.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// The pooler's output width.
    pub fn pooler_size(&self) -> usize {
        self.pooler_output_size.unwrap_or(self.hidden_size)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// A zero size, a width the heads do not divide, an image size the patch does not
    /// divide, a non-positive epsilon or a dropout outside `[0, 1)`, each naming the value.
    pub fn validate(&self) -> Result<()> {
        use zoo_core::validate;
        validate::positive(&[
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("image_size", self.image_size),
            ("patch_size", self.patch_size),
            ("num_channels", self.num_channels),
            ("pooler_output_size", self.pooler_size()),
        ])?;
        let side = self.image_size / self.patch_size;
        validate::transformer_fits(
            "the ViT's weights",
            // Positions, the patch projection's inputs (channels × patch²) and the
            // pooler's outputs.
            side.saturating_mul(side)
                .saturating_add(1)
                .saturating_add(
                    self.num_channels
                        .saturating_mul(self.patch_size)
                        .saturating_mul(self.patch_size),
                )
                .saturating_add(self.pooler_size()),
            self.hidden_size,
            self.num_hidden_layers,
            self.intermediate_size,
            self.hidden_size,
        )?;
        if !self.distilled() {
            validate::model_type(self.model_type.as_deref(), "vit", "ViT")?;
        }
        validate::divisible(
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
        )?;
        validate::divisible(
            ("image_size", self.image_size),
            ("patch_size", self.patch_size),
        )?;
        if self.pooler_act != "tanh" {
            return Err(ConfigError::unsupported(
                "pooler_act",
                format!("{:?}", self.pooler_act),
                "only \"tanh\"",
            )
            .into());
        }
        Ok(validate::bert_style(
            self.layer_norm_eps,
            self.hidden_dropout_prob,
            self.attention_probs_dropout_prob,
            self.id2label.as_ref(),
        )?)
    }

    /// The class names of a classification checkpoint, in class order (empty without
    /// `id2label`).
    pub fn labels(&self) -> Vec<String> {
        zoo_core::checkpoint::labels(self.id2label.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `config.json` of google/vit-base-patch16-224-in21k, as published.
    const VIT_BASE: &str = r#"{
      "architectures": ["ViTModel"],
      "attention_probs_dropout_prob": 0.0,
      "hidden_act": "gelu",
      "hidden_dropout_prob": 0.0,
      "hidden_size": 768,
      "image_size": 224,
      "initializer_range": 0.02,
      "intermediate_size": 3072,
      "layer_norm_eps": 1e-12,
      "model_type": "vit",
      "num_attention_heads": 12,
      "num_channels": 3,
      "num_hidden_layers": 12,
      "patch_size": 16,
      "qkv_bias": true,
      "transformers_version": "4.13.0.dev0"
    }"#;

    #[test]
    fn hf_config_json_reads_directly() {
        let mut expected = ViTConfig::vit_base_patch16_224();
        expected.model_type = Some("vit".into());
        assert_eq!(ViTConfig::from_json(VIT_BASE).unwrap(), expected);
        assert_eq!(expected.grid(), 14);
        let mean = VIT_BASE.replace("\"qkv_bias\"", "\"pooling\": \"mean\", \"qkv_bias\"");
        assert_eq!(ViTConfig::from_json(&mean).unwrap().pooling, Pooling::Mean);
        // `pooling` is written only when it is not HF's.
        let json = serde_json::to_string(&expected).unwrap();
        assert!(!json.contains("pooling"), "{json}");
    }

    #[test]
    fn malformed_configs_are_errors_naming_the_value() {
        let err = |text: &str| ViTConfig::from_json(text).unwrap_err().to_string();
        assert_eq!(
            err(&VIT_BASE.replace("\"patch_size\": 16", "\"patch_size\": 15")),
            "invalid ViT config: image_size 224 is not divisible by patch_size 15"
        );
        assert_eq!(
            err(&VIT_BASE.replace("\"hidden_size\": 768", "\"hidden_size\": 760")),
            "invalid ViT config: hidden_size 760 is not divisible by num_attention_heads 12"
        );
        assert_eq!(
            err(&VIT_BASE.replace("\"num_channels\": 3", "\"num_channels\": 0")),
            "invalid ViT config: num_channels must be > 0, got 0"
        );
        assert_eq!(
            err(&VIT_BASE.replace("\"vit\"", "\"bert\"")),
            "invalid ViT config: model_type \"bert\" is not a ViT model"
        );
        assert!(
            err(&VIT_BASE.replace("\"num_hidden_layers\": 12,", ""))
                .contains("missing field `num_hidden_layers`")
        );
        assert!(err(&VIT_BASE.replace("\"gelu\"", "\"tanh\"")).contains("unknown variant `tanh`"));
        let mut c = ViTConfig::vit_base_patch16_224();
        c.id2label = Some([("0".into(), "cat".into()), ("2".into(), "dog".into())].into());
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "invalid ViT config: id2label key \"2\" is not a class index below 2"
        );
        c.id2label = Some([("1".into(), "dog".into()), ("0".into(), "cat".into())].into());
        assert_eq!(c.labels(), ["cat", "dog"]);
    }
}
