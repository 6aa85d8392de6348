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
use zoo_core::checkpoint::{self, KeyMap, WeightsFile};

use crate::config::ViTConfig;
use crate::error::Result;
use crate::model::{DeiTForImageClassificationWithTeacher, ViTForImageClassification, ViTModel};

/// ViT's names of the base model and module paths, the same bare or under `vit.`.
const NAMES: [(&str, &str); 8] = [
    (
        "encoder.layer.{n}.attention.attention.query.",
        "layers.{n}.self_attn.q_proj.",
    ),
    (
        "encoder.layer.{n}.attention.attention.key.",
        "layers.{n}.self_attn.k_proj.",
    ),
    (
        "encoder.layer.{n}.attention.attention.value.",
        "layers.{n}.self_attn.v_proj.",
    ),
    (
        "encoder.layer.{n}.attention.output.dense.",
        "layers.{n}.self_attn.o_proj.",
    ),
    ("encoder.layer.{n}.layernorm_before.", "layers.{n}.norm_1."),
    ("encoder.layer.{n}.layernorm_after.", "layers.{n}.norm_2."),
    (
        "encoder.layer.{n}.intermediate.dense.",
        "layers.{n}.mlp.up_proj.",
    ),
    (
        "encoder.layer.{n}.output.dense.",
        "layers.{n}.mlp.down_proj.",
    ),
];

/// Which model a checkpoint is loaded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// [`ViTModel`], whose paths have no prefix.
    Base,
    ImageClassification,
    /// DeiT's two heads.
    DistilledClassification,
}

impl Target {
    fn architecture(self, cfg: &ViTConfig) -> &'static str {
        match (self, cfg.distilled()) {
            (Self::Base, false) => "ViTModel",
            (Self::Base, true) => "DeiTModel",
            (Self::ImageClassification, false) => "ViTForImageClassification",
            (Self::ImageClassification, true) => "DeiTForImageClassification",
            (Self::DistilledClassification, _) => "DeiTForImageClassificationWithTeacher",
        }
    }

    /// The names of ViT's checkpoints, or DeiT's (`deit.` where ViT has `vit.`).
    fn key_map(self, cfg: &ViTConfig) -> KeyMap {
        let dialect: &[(&str, &str)] = if cfg.distilled() {
            &[("deit.", "vit.")]
        } else {
            &[]
        };
        // `mask_token` belongs to masked image modelling, another task.
        let roots = ["embeddings", "encoder", "layernorm", "pooler"];
        let (map, under) = KeyMap::new()
            .dialect(dialect)
            .ignore(r"(^|\.)embeddings\.mask_token$")
            .base_model("vit.", self != Self::Base, &roots);
        let map = map.names_under(&under, &NAMES);
        match self {
            Self::Base => map
                .ignore(r"^classifier\.")
                .ignore(r"^(cls|distillation)_classifier\."),
            // HF's classifiers are built without the pooler.
            Self::ImageClassification | Self::DistilledClassification => {
                map.ignore(r"^(vit\.)?pooler\.")
            }
        }
    }
}

/// `dir/config.json`, validated, with the file named in any error.
fn read_config(dir: &Path) -> Result<ViTConfig> {
    Ok(checkpoint::read_valid_config(dir, ViTConfig::validate)?)
}

fn save<M: Module>(model: &M, cfg: &ViTConfig, dir: &Path, target: Target) -> Result<()> {
    let map = target.key_map(cfg);
    let model_type = if cfg.distilled() { "deit" } else { "vit" };
    Ok(checkpoint::save_pretrained(
        model,
        dir,
        &map,
        cfg,
        model_type,
        target.architecture(cfg),
    )?)
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
        checkpoint::load_into(&mut model, dir, &Target::Base.key_map(&cfg))?;
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

/// A classifier of the class count and names of `dir`'s `id2label`, built by `build`,
/// then loaded under `target`'s names.
fn load_classifier<M: Module>(
    dir: &Path,
    device: &Device,
    target: Target,
    build: fn(&ViTConfig, usize, &Device) -> Result<M>,
) -> Result<M> {
    let cfg = read_config(dir)?;
    let n = checkpoint::num_labels(dir, &cfg.labels())?;
    let mut model = build(&cfg, n, device)?;
    checkpoint::load_into(&mut model, dir, &target.key_map(&cfg))?;
    Ok(model)
}

/// Writes a classifier of `num_labels` classes; a config without class names gets HF's
/// `LABEL_i`.
fn save_classifier<M: Module>(
    model: &M,
    cfg: &ViTConfig,
    num_labels: usize,
    dir: &Path,
    target: Target,
) -> Result<()> {
    let mut cfg = cfg.clone();
    if cfg.labels().len() != num_labels {
        cfg.id2label = Some(checkpoint::default_id2label(num_labels));
    }
    save(model, &cfg, dir, target)
}

impl ViTForImageClassification {
    /// Loads an HF `ViTForImageClassification` checkpoint folder; the class count and
    /// names come from its `id2label`.
    ///
    /// # Errors
    /// As [`ViTModel::from_pretrained`], and a `config.json` without `id2label`.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        load_classifier(dir.as_ref(), device, Target::ImageClassification, Self::new)
    }

    /// Writes the model as an HF `ViTForImageClassification` checkpoint folder; a config
    /// without class names gets HF's `LABEL_i`.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let (cfg, n) = (self.vit.config(), self.num_labels());
        save_classifier(self, cfg, n, dir.as_ref(), Target::ImageClassification)
    }
}

impl DeiTForImageClassificationWithTeacher {
    /// Loads an HF `DeiTForImageClassificationWithTeacher` checkpoint folder; the class
    /// count and names come from its `id2label`.
    ///
    /// # Errors
    /// As [`ViTModel::from_pretrained`], a config that is not DeiT's, and a
    /// `config.json` without `id2label`.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let target = Target::DistilledClassification;
        load_classifier(dir.as_ref(), device, target, Self::new)
    }

    /// Writes the model as an HF `DeiTForImageClassificationWithTeacher` folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let (cfg, n) = (self.vit.config(), self.num_labels());
        save_classifier(self, cfg, n, dir.as_ref(), Target::DistilledClassification)
    }
}
