//! Loading and saving HuggingFace checkpoints, written once for every family.
//!
//! A family describes its checkpoint layout as a [`KeyMap`]: name templates, each a pair
//! of an HF name and a module path written once and read both ways
//! ([`KeyMap::names`]), where its base model sits in its head models
//! ([`KeyMap::base_model`]), a member's differing prefixes ([`KeyMap::dialect`]), and the
//! names that are not weights of the model (buffers such as `position_ids`, another
//! head's tensors). The rest is here:
//!
//! - [`read_config`]: `config.json`, deserialized into the family's config type, with the
//!   file named in every error;
//! - [`WeightsFile`]: `model.safetensors` or a sharded `model.safetensors.index.json`,
//!   each tensor read from the file when it loads (not memory-mapped: the process holds
//!   one copy of the weights), or `pytorch_model.bin` read by burn-store's pickle reader, which does not execute pickled
//!   code; every float tensor is cast to the float type of the module it loads into
//!   as it is read (f32, or f16 / bf16 on a device selected for them);
//! - [`load_into`]: burn-store's key remapping and its PyTorch adapter (which transposes
//!   `Linear` weights, except those a family stores `[in, out]` already, and renames norm
//!   parameters), then one report of *every* missing,
//!   unexpected and mis-shaped tensor, by name and shape ([`TensorReport`]);
//! - [`save_safetensors`] and [`save_pretrained`]: the same mapping backwards, the
//!   weights and `config.json` written whole or not at all ([`crate::durable`]);
//! - [`config_text`] and [`class_names`]: `config.json` with HF's `model_type`,
//!   `architectures` and `id2label`.
//!
//! Module paths never name an enum's variant (a `Norm::LayerNorm` inside a block is
//! `norm_1.gamma`, not `norm_1.LayerNorm.gamma`), in loading as in saving, since HF
//! checkpoints have no such level.

mod config;
mod error;
mod generation;
mod keymap;
mod load;
pub(crate) mod memory;
pub mod peft;
mod safetensors_file;
pub use safetensors_file::from_bytes as safetensors_from_bytes;
mod save;
#[cfg(test)]
mod tests;
mod weights;

use std::path::{Path, PathBuf};

pub use config::*;
pub use error::*;
pub use generation::*;
pub use keymap::*;
pub use load::*;
pub use save::*;
pub use weights::*;

/// A tensor as burn-store reads it from a file.
pub type PackTensor = burn::store::burn_pack::Tensor;

/// Where the zoo keeps downloads and models: `$ZOO_CACHE`, else
/// `$HOME/.cache/burn-model-zoo` (the folder `cargo xtask` fills).
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ZOO_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    Path::new(&home).join(".cache").join("burn-model-zoo")
}
