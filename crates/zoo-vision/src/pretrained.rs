//! HF checkpoints of ViT: `from_pretrained(dir)` reads `config.json` and
//! `model.safetensors` (or `pytorch_model.bin`), `save_pretrained(dir)` writes both in HF's
//! layout, through `zoo-core`'s shared loader, which names every missing, unexpected and
//! mis-shaped tensor.
//!
//! | HF name (inside `vit.` for the classifier) | module path |
//! |---|---|
//! | `embeddings.{cls_token, position_embeddings}` | same |
//! | `embeddings.patch_embeddings.projection` | same |
//! | `encoder.layer.N.layernorm_before` | `layers.N.norm_1` |
//! | `encoder.layer.N.attention.attention.{query,key,value}` | `layers.N.self_attn.{q,k,v}_proj` |
//! | `encoder.layer.N.attention.output.dense` | `layers.N.self_attn.o_proj` |
//! | `encoder.layer.N.layernorm_after` | `layers.N.norm_2` |
//! | `encoder.layer.N.intermediate.dense` | `layers.N.mlp.up_proj` |
//! | `encoder.layer.N.output.dense` | `layers.N.mlp.down_proj` |
//! | `layernorm`, `pooler.dense`, `classifier` | the same |

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use zoo_core::checkpoint::{self, CheckpointError, KeyMap, WeightsFile};

use crate::config::ViTConfig;
use crate::error::Result;
use crate::model::{ViTForImageClassification, ViTModel};

/// HF names to module paths, the same inside the `vit.` prefix or bare.
const LOAD: [(&str, &str); 8] = [
    (
        r"encoder\.layer\.(\d+)\.attention\.attention\.query\.",
        "layers.${1}.self_attn.q_proj.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.attention\.key\.",
        "layers.${1}.self_attn.k_proj.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.attention\.value\.",
        "layers.${1}.self_attn.v_proj.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.output\.dense\.",
        "layers.${1}.self_attn.o_proj.",
    ),
    (
        r"encoder\.layer\.(\d+)\.layernorm_before\.",
        "layers.${1}.norm_1.",
    ),
    (
        r"encoder\.layer\.(\d+)\.layernorm_after\.",
        "layers.${1}.norm_2.",
    ),
    (
        r"encoder\.layer\.(\d+)\.intermediate\.dense\.",
        "layers.${1}.mlp.up_proj.",
    ),
    (
        r"encoder\.layer\.(\d+)\.output\.dense\.",
        "layers.${1}.mlp.down_proj.",
    ),
];

/// Module paths to HF names: [`LOAD`] backwards, plus the norm parameters.
const SAVE: [(&str, &str); 10] = [
    (
        r"layers\.(\d+)\.self_attn\.q_proj\.",
        "encoder.layer.${1}.attention.attention.query.",
    ),
    (
        r"layers\.(\d+)\.self_attn\.k_proj\.",
        "encoder.layer.${1}.attention.attention.key.",
    ),
    (
        r"layers\.(\d+)\.self_attn\.v_proj\.",
        "encoder.layer.${1}.attention.attention.value.",
    ),
    (
        r"layers\.(\d+)\.self_attn\.o_proj\.",
        "encoder.layer.${1}.attention.output.dense.",
    ),
    (
        r"layers\.(\d+)\.norm_1\.",
        "encoder.layer.${1}.layernorm_before.",
    ),
    (
        r"layers\.(\d+)\.norm_2\.",
        "encoder.layer.${1}.layernorm_after.",
    ),
    (
        r"layers\.(\d+)\.mlp\.up_proj\.",
        "encoder.layer.${1}.intermediate.dense.",
    ),
    (
        r"layers\.(\d+)\.mlp\.down_proj\.",
        "encoder.layer.${1}.output.dense.",
    ),
    (r"\.gamma$", ".weight"),
    (r"\.beta$", ".bias"),
];

/// Which model a checkpoint is loaded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// [`ViTModel`], whose paths have no prefix.
    Base,
    ImageClassification,
}

impl Target {
    fn architecture(self) -> &'static str {
        match self {
            Self::Base => "ViTModel",
            Self::ImageClassification => "ViTForImageClassification",
        }
    }

    fn key_map(self) -> KeyMap {
        // `mask_token` belongs to masked image modelling, another task.
        let mut map = KeyMap::new().ignore(r"(^|\.)embeddings\.mask_token$");
        map.load.push(match self {
            Self::Base => (r"^vit\.".into(), String::new()),
            Self::ImageClassification => (
                r"^(embeddings|encoder|layernorm|pooler)\.".into(),
                "vit.${1}.".into(),
            ),
        });
        let map = map.tables(&LOAD, &SAVE);
        match self {
            Self::Base => map.ignore(r"^classifier\."),
            // HF's classifier is built without the pooler.
            Self::ImageClassification => map.ignore(r"^(vit\.)?pooler\."),
        }
    }
}

/// `dir/config.json`, validated, with the file named in any error.
fn read_config(dir: &Path) -> Result<ViTConfig> {
    Ok(checkpoint::read_valid_config(dir, ViTConfig::validate)?)
}

fn save<M: Module>(model: &M, cfg: &ViTConfig, dir: &Path, target: Target) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::Io {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    checkpoint::save_safetensors(model, &dir.join("model.safetensors"), &target.key_map())?;
    checkpoint::write_config(dir, cfg, "vit", target.architecture())?;
    Ok(())
}

impl ViTModel {
    /// Loads an HF ViT checkpoint folder (`config.json` and `model.safetensors` or
    /// `pytorch_model.bin`), bare or from `ViTForImageClassification`, whose head is left
    /// out. The pooler is built when the checkpoint has one.
    ///
    /// # Errors
    /// A missing or invalid `config.json`, no weights file, or tensors that do not fit,
    /// all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = read_config(dir)?;
        let has_pooler = WeightsFile::find(dir)?
            .tensors()?
            .keys()
            .any(|k| k == "pooler.dense.weight" || k == "vit.pooler.dense.weight");
        let mut model = cfg.init(has_pooler, device)?;
        checkpoint::load_into(&mut model, dir, &Target::Base.key_map())?;
        Ok(model)
    }

    /// Writes the model as an HF `ViTModel` checkpoint folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        save(self, self.config(), dir.as_ref(), Target::Base)
    }
}

impl ViTForImageClassification {
    /// Loads an HF `ViTForImageClassification` checkpoint folder; the class count and
    /// names come from its `id2label`.
    ///
    /// # Errors
    /// As [`ViTModel::from_pretrained`], and a `config.json` without `id2label`.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = read_config(dir)?;
        let n = checkpoint::num_labels(dir, &cfg.labels())?;
        let mut model = Self::new(&cfg, n, device)?;
        checkpoint::load_into(&mut model, dir, &Target::ImageClassification.key_map())?;
        Ok(model)
    }

    /// Writes the model as an HF `ViTForImageClassification` checkpoint folder; a config
    /// without class names gets HF's `LABEL_i`.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let mut cfg = self.vit.config().clone();
        if cfg.labels().len() != self.num_labels() {
            cfg.id2label = Some(checkpoint::default_id2label(self.num_labels()));
        }
        save(self, &cfg, dir.as_ref(), Target::ImageClassification)
    }
}
