//! # zoo-vision
//!
//! Vision models: the Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth
//! 16x16 Words: Transformers for Image Recognition at Scale"), as HF's `ViTModel` lays it
//! out, with the `vit_base_patch16_224()` preset.
//!
//! - [`ViTConfig`] reads HF's `config.json` field names directly and validates them;
//! - [`ViTModel`]: patch embedding by a strided convolution, a CLS token, learned
//!   positions (resampled bicubically for other image sizes, as HF's
//!   `interpolate_pos_encoding`), a pre-norm encoder built from `zoo-attention`'s
//!   [`zoo_attention::TransformerBlock`], a final LayerNorm and an optional pooler;
//! - [`ViTForImageClassification`]: a linear head on the CLS token, or on the mean patch
//!   token ([`Pooling`]), implementing [`zoo_core::ClassLogits`] so that `zoo-train`
//!   trains it;
//! - DeiT (`model_type` `deit`): the same modules with a distillation token after the
//!   CLS token, under `deit.`; [`DeiTForImageClassificationWithTeacher`] averages a head
//!   on each of the two tokens;
//! - CLIP ([`ClipModel`], `model_type` `clip`): a causal text tower and a vision tower
//!   projected into one space, compared by cosine times `exp(logit_scale)`, as HF's
//!   `CLIPModel`; zero-shot image classification runs over it (`zoo_hub::pipelines`);
//! - [`attention_rollout`]: where the CLS token's answer comes from, per input patch;
//! - [`image`]: PNG and JPEG files to `[B, C, H, W]` pixel values as HF's ViT and CLIP
//!   image processors prepare them (`preprocessor_config.json`: exact or shortest-edge
//!   resizing, centre crop);
//! - [`pretrained`]: `from_pretrained(dir)` / `save_pretrained(dir)` for HF checkpoints.
#![warn(missing_docs)]

pub mod clip;
pub mod config;
mod error;
pub mod image;
pub mod interpolate;
pub mod model;
pub mod pretrained;
pub mod registry;

pub use clip::{
    ClipConfig, ClipModel, ClipOutput, ClipTextConfig, ClipTextTransformer, ClipVisionConfig,
    ClipVisionTransformer, TowerOutput,
};
pub use config::{Pooling, ViTConfig};
pub use error::{Result, VisionError};
pub use image::{ImageProcessor, Resample, Resize};
pub use model::{
    DeiTForImageClassificationWithTeacher, DistilledLogits, ImageInput, PatchEmbeddings,
    ViTEmbeddings, ViTForImageClassification, ViTModel, ViTOutput, attention_rollout,
};
