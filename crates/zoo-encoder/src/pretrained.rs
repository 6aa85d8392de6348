//! HF checkpoints of the BERT family: `from_pretrained(dir)` reads `config.json` and
//! `model.safetensors` (or `pytorch_model.bin`), `save_pretrained(dir)` writes both in HF's
//! layout. The tensor names map to the module's paths through `zoo-core`'s [`KeyMap`],
//! which runs on burn-store's key remapping.
//!
//! Both layouts load: bare (`BertModel`: `embeddings.…`, `encoder.layer.N.…`) and
//! prefixed with `bert.` (`BertForMaskedLM`, `BertForSequenceClassification`, …). A head
//! checkpoint loads into [`BertModel`] without its head, as in HF.
//!
//! Other members of the family ([`crate::roberta`]) are a [`Layout`]: their class
//! names, their position ids, and the prefixes where their checkpoint names differ from
//! BERT's, written once as pairs that serve loading and saving (`KeyMap::dialect`).
//! `config.json`'s `model_type` picks the layout.

use std::path::Path;
use std::sync::Arc;

use burn::module::Module;
use burn::tensor::Device;
use serde_json::Value;
use zoo_attention::PoolerActivation;
use zoo_core::CheckpointError;
use zoo_core::checkpoint::{self, KeyMap, WeightsFile, peft};

use crate::config::BertConfig;
use crate::error::Result;
use crate::model::{
    BertForMaskedLm, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertModel, PositionIds,
};

/// How a member of the BERT family names its checkpoints and counts its positions.
#[derive(Debug)]
pub struct Layout {
    /// `config.json`'s `model_type`.
    pub model_type: &'static str,
    /// HF's class names of the bare encoder, the masked LM, the sequence and token
    /// classifiers, and the question-answering (span) head.
    pub architectures: [&'static str; 5],
    /// `(checkpoint prefix, BERT's prefix)` where its names differ from BERT's.
    pub dialect: &'static [(&'static str, &'static str)],
    /// More such pairs, for the sequence classifier alone (tried after `dialect`).
    pub sequence_classifier: &'static [(&'static str, &'static str)],
    /// Where its position ids start.
    pub positions: PositionIds,
    /// Its layers' names under `bert.` (after the dialect): BERT's [`NAMES`] unless it
    /// names the parts of a layer otherwise.
    pub names: &'static [(&'static str, &'static str)],
    /// `(its config.json name, BERT's)` where they differ: read as BERT's, written back
    /// as its own.
    pub config_names: &'static [(&'static str, &'static str)],
    /// Whether it has token types (`token_type_ids`); without, its config gets
    /// `type_vocab_size` 0 and the model no token-type table.
    pub token_types: bool,
    /// BERT's config fields it has no use for (their values are fixed for it), left out
    /// when its config is written.
    pub config_unused: &'static [&'static str],
    /// The activation of the pooler (or the sequence classifier's dense layer on the
    /// first token).
    pub pooler: PoolerActivation,
}

/// BERT's own layout (Devlin et al., 2019; HF `models/bert/modeling_bert.py`).
pub const BERT: Layout = Layout {
    model_type: "bert",
    architectures: [
        "BertModel",
        "BertForMaskedLM",
        "BertForSequenceClassification",
        "BertForTokenClassification",
        "BertForQuestionAnswering",
    ],
    dialect: &[],
    sequence_classifier: &[],
    positions: PositionIds::FromZero,
    names: &NAMES,
    config_names: &[],
    token_types: true,
    config_unused: &[],
    pooler: PoolerActivation::Tanh,
};

/// The layout of a `config.json`'s `model_type`: BERT's unless another member's.
pub fn layout(model_type: Option<&str>) -> &'static Layout {
    [
        &crate::roberta::LAYOUT,
        &crate::roberta::XLM_LAYOUT,
        &crate::distilbert::LAYOUT,
    ]
    .into_iter()
    .find(|l| Some(l.model_type) == model_type)
    .unwrap_or(&BERT)
}

/// BERT's names of the base model and module paths, the same bare or under `bert.`.
pub const NAMES: [(&str, &str); 9] = [
    ("embeddings.LayerNorm.", "embeddings.layer_norm."),
    (
        "encoder.layer.{n}.attention.self.query.",
        "layers.{n}.attention.q_proj.",
    ),
    (
        "encoder.layer.{n}.attention.self.key.",
        "layers.{n}.attention.k_proj.",
    ),
    (
        "encoder.layer.{n}.attention.self.value.",
        "layers.{n}.attention.v_proj.",
    ),
    (
        "encoder.layer.{n}.attention.output.dense.",
        "layers.{n}.attention.o_proj.",
    ),
    (
        "encoder.layer.{n}.attention.output.LayerNorm.",
        "layers.{n}.attention_norm.",
    ),
    (
        "encoder.layer.{n}.intermediate.dense.",
        "layers.{n}.mlp.up_proj.",
    ),
    (
        "encoder.layer.{n}.output.dense.",
        "layers.{n}.mlp.down_proj.",
    ),
    (
        "encoder.layer.{n}.output.LayerNorm.",
        "layers.{n}.output_norm.",
    ),
];

/// The masked-LM head's names (the decoder itself is tied to the word embeddings).
const MLM_NAMES: [(&str, &str); 3] = [
    ("cls.predictions.transform.dense.", "transform."),
    ("cls.predictions.transform.LayerNorm.", "transform_norm."),
    ("cls.predictions.bias", "decoder_bias"),
];

/// Which model a checkpoint is loaded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// [`BertModel`], whose paths have no prefix.
    Base,
    MaskedLm,
    SequenceClassification,
    TokenClassification,
    QuestionAnswering,
}

impl Target {
    fn architecture(self, layout: &Layout) -> &'static str {
        layout.architectures[self as usize]
    }

    fn key_map(self, layout: &Layout) -> KeyMap {
        // The classifier's pairs come last, so that saving undoes them first, before
        // `bert.` becomes the member's prefix.
        let mut map = KeyMap::new().dialect(layout.dialect);
        if self == Self::SequenceClassification {
            map = map.dialect(layout.sequence_classifier);
        }
        let roots = ["embeddings", "encoder", "pooler"];
        let (map, under) =
            map.ignore(r"(^|\.)position_ids$")
                .base_model("bert.", self != Self::Base, &roots);
        let map = map.names_under(&under, layout.names);
        match self {
            Self::Base => map
                .ignore(r"^cls\.")
                .ignore(r"^classifier\.")
                .ignore(r"^pre_classifier\.")
                .ignore(r"^qa_outputs\."),
            Self::MaskedLm => map
                .names(&MLM_NAMES)
                // The decoder is tied to the word embeddings; NSP is another task.
                .ignore(r"^cls\.predictions\.decoder\.")
                .ignore(r"^cls\.seq_relationship\.")
                .ignore(r"^(bert\.)?pooler\."),
            Self::SequenceClassification => map.ignore(r"^cls\."),
            Self::TokenClassification | Self::QuestionAnswering => {
                map.ignore(r"^cls\.").ignore(r"^(bert\.)?pooler\.")
            }
        }
    }
}

/// `dir/config.json` in BERT's names (its layout's [`Layout::config_names`] renamed),
/// validated, with the file named in any error.
fn read_config(dir: &Path) -> Result<BertConfig> {
    parse_config(checkpoint::read_config(dir)?, &dir.join("config.json"))
}

/// A `config.json`'s JSON (from the file at `path`) in BERT's names, validated.
fn parse_config(mut json: Value, path: &Path) -> Result<BertConfig> {
    let bad = |message: String| CheckpointError::Config {
        path: path.to_path_buf(),
        message,
    };
    let layout = layout(json.get("model_type").and_then(Value::as_str));
    if let Some(map) = json.as_object_mut() {
        for (theirs, ours) in layout.config_names {
            if let Some(v) = map.remove(*theirs) {
                map.entry(*ours).or_insert(v);
            }
        }
        if !layout.token_types {
            map.insert("type_vocab_size".into(), 0.into());
        }
        if map.get("sinusoidal_pos_embds") == Some(&Value::Bool(true)) {
            return Err(bad(
                "sinusoidal_pos_embds: true (fixed sinusoidal positions) is not supported; \
                 only learned position embeddings load"
                    .into(),
            )
            .into());
        }
    }
    let cfg: BertConfig = serde_json::from_value(json).map_err(|e| bad(e.to_string()))?;
    cfg.validate().map_err(|e| bad(e.to_string()))?;
    Ok(cfg)
}

/// The config as its layout writes it: BERT's names renamed back to its own, without
/// the fields it has no use for.
fn config_json(cfg: &BertConfig, layout: &Layout) -> Result<Value> {
    let mut json = serde_json::to_value(cfg).map_err(|e| CheckpointError::Config {
        path: "config.json".into(),
        message: e.to_string(),
    })?;
    if let Some(map) = json.as_object_mut() {
        for (theirs, ours) in layout.config_names {
            if let Some(v) = map.remove(*ours) {
                map.insert((*theirs).to_string(), v);
            }
        }
        for unused in layout.config_unused {
            map.remove(*unused);
        }
    }
    Ok(json)
}

/// A classification head model sized by the checkpoint's `id2label`, then loaded.
fn load_classifier<M: Module>(
    dir: &Path,
    device: &Device,
    target: Target,
    build: fn(&BertConfig, usize, &Device) -> Result<M>,
) -> Result<M> {
    let cfg = read_config(dir)?;
    let n = checkpoint::num_labels(dir, &cfg.labels())?;
    load(build(&cfg, n, device)?, &cfg, dir, target)
}

fn load<M: Module>(mut model: M, cfg: &BertConfig, dir: &Path, target: Target) -> Result<M> {
    let layout = layout(cfg.model_type.as_deref());
    checkpoint::load_into(&mut model, dir, &target.key_map(layout))?;
    Ok(model)
}

/// Writes `config.json` (with `model_type` and `architectures`) and `model.safetensors`.
/// A classifier of `num_labels` classes whose config names none gets HF's `LABEL_i`.
fn save<M: Module>(
    model: &M,
    cfg: &BertConfig,
    num_labels: Option<usize>,
    dir: &Path,
    target: Target,
) -> Result<()> {
    let mut cfg = cfg.clone();
    if let Some(n) = num_labels
        && cfg.labels().len() != n
    {
        cfg.id2label = Some(checkpoint::default_id2label(n));
    }
    let layout = layout(cfg.model_type.as_deref());
    let (map, arch) = (target.key_map(layout), target.architecture(layout));
    let json = config_json(&cfg, layout)?;
    checkpoint::save_pretrained(model, dir, &map, &json, layout.model_type, arch)?;
    Ok(())
}

/// Whether the checkpoint in `dir` has pooler weights (bare or prefixed), its names read
/// as BERT's.
fn has_pooler(dir: &Path, cfg: &BertConfig) -> Result<bool> {
    Ok(pooler_in(WeightsFile::find(dir)?.tensors()?.keys(), cfg))
}

/// Whether tensors of these names include pooler weights, read as in [`has_pooler`].
fn pooler_in<'a>(names: impl IntoIterator<Item = &'a String>, cfg: &BertConfig) -> bool {
    let map = KeyMap::new().dialect(layout(cfg.model_type.as_deref()).dialect);
    names
        .into_iter()
        .map(|k| map.family_name(k))
        .any(|k| k == "pooler.dense.weight" || k == "bert.pooler.dense.weight")
}

impl BertModel {
    /// Loads an HF BERT checkpoint folder (`config.json` and `model.safetensors` or
    /// `pytorch_model.bin`), bare or from a head model, whose head is left out. The pooler
    /// is built when the checkpoint has one.
    ///
    /// # Errors
    /// A missing or invalid `config.json`, no weights file, or tensors that do not fit,
    /// all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = read_config(dir)?;
        load(
            cfg.init(has_pooler(dir, &cfg)?, device)?,
            &cfg,
            dir,
            Target::Base,
        )
    }

    /// Loads an HF BERT checkpoint held in memory (fetched by a web page, say): the text of
    /// its `config.json` and the bytes of its `model.safetensors`, as
    /// [`BertModel::from_pretrained`] reads them from a folder.
    ///
    /// # Errors
    /// An invalid config, a malformed safetensors file, or tensors that do not fit, named
    /// as `config.json` and `model.safetensors`.
    pub fn from_memory(config_json: &str, weights: Arc<[u8]>, device: &Device) -> Result<Self> {
        let path = Path::new("config.json");
        let json: Value =
            serde_json::from_str(config_json).map_err(|e| CheckpointError::Config {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let cfg = parse_config(json, path)?;
        let name = Path::new("model.safetensors");
        let tensors = checkpoint::safetensors_from_bytes(name, weights)?;
        let mut model = cfg.init(pooler_in(tensors.keys(), &cfg), device)?;
        let map = Target::Base.key_map(layout(cfg.model_type.as_deref()));
        checkpoint::load_tensors(&mut model, tensors, &map, name)?;
        Ok(model)
    }

    /// Writes the model as an HF `BertModel` checkpoint folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        save(self, self.config(), None, dir.as_ref(), Target::Base)
    }
}

impl BertForMaskedLm {
    /// Loads an HF `BertForMaskedLM` (or `BertForPreTraining`) checkpoint folder.
    ///
    /// # Errors
    /// As [`BertModel::from_pretrained`]; a checkpoint without the masked-LM head has
    /// its head tensors reported missing.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = read_config(dir)?;
        load(Self::new(&cfg, device)?, &cfg, dir, Target::MaskedLm)
    }

    /// Writes the model as an HF `BertForMaskedLM` checkpoint folder. The decoder weight
    /// is tied to the word embeddings and is not written, as HF does.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        save(
            self,
            self.bert.config(),
            None,
            dir.as_ref(),
            Target::MaskedLm,
        )
    }
}

impl BertForQuestionAnswering {
    /// Loads an HF `BertForQuestionAnswering` checkpoint folder.
    ///
    /// # Errors
    /// As [`BertModel::from_pretrained`]; a checkpoint without `qa_outputs` has it
    /// reported missing.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = read_config(dir)?;
        load(
            Self::new(&cfg, device)?,
            &cfg,
            dir,
            Target::QuestionAnswering,
        )
    }

    /// Writes the model as an HF `BertForQuestionAnswering` checkpoint folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let target = Target::QuestionAnswering;
        save(self, self.bert.config(), None, dir.as_ref(), target)
    }
}

/// Loading and saving of the classifier heads, whose class count comes from `id2label`.
macro_rules! classifier_checkpoint {
    ($($model:ident => $target:ident),*) => {$(
        impl $model {
            #[doc = concat!(
                "Loads an HF `", stringify!($model), "` checkpoint folder; the class count \
                 and names come from its `id2label`.\n\n# Errors\nAs \
                 [`BertModel::from_pretrained`], and a `config.json` without `id2label`."
            )]
            pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
                load_classifier(dir.as_ref(), device, Target::$target, Self::new)
            }

            #[doc = concat!(
                "Writes the model as an HF `", stringify!($model), "` checkpoint folder.\n\n\
                 # Errors\nA folder that cannot be written."
            )]
            pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
                let classes = Some(self.classifier.weight.dims()[1]);
                save(self, self.bert.config(), classes, dir.as_ref(), Target::$target)
            }

            /// The model with the PEFT LoRA adapter of `adapter` folded into its weights
            /// (Burn's LoRA, then `materialize`), and the head that the adapter saves
            /// whole (`modules_to_save`) in place of this one's.
            ///
            /// # Errors
            /// What [`zoo_core::checkpoint::peft::load_adapter`] reports.
            pub fn with_adapter(self, adapter: &Path) -> std::result::Result<Self, zoo_core::ModelError> {
                let map = Target::$target.key_map(layout(self.bert.config().model_type.as_deref()));
                let adapted = zoo_core::checkpoint::peft::load_adapter(self, &map, adapter)
                    .map_err(zoo_core::ModelError::new)?;
                Ok(burn::module::Module::materialize(adapted))
            }
        }
    )*};
}

impl BertForSequenceClassification {
    /// The checkpoint names of this classifier's parameters (its layout's), as adapters
    /// and checkpoints name them.
    pub fn key_map(&self) -> KeyMap {
        Target::SequenceClassification.key_map(layout(self.bert.config().model_type.as_deref()))
    }

    /// Loads `dir` with the PEFT adapter of `adapter` folded in. A classifier checkpoint
    /// whose class count is the adapter head's loads as it is; an encoder without such a
    /// head (a base checkpoint, or a classifier of other labels) gets a new one of the
    /// size of the head that the adapter saves whole, named by the adapter's
    /// [`peft::LABELS_FILE`] or, without one, HF's `LABEL_i`.
    ///
    /// # Errors
    /// What loading `dir` or the adapter reports; an adapter that saves no head over a
    /// base that has none.
    pub fn from_pretrained_adapted(
        dir: impl AsRef<Path>,
        adapter: &Path,
        device: &Device,
    ) -> std::result::Result<Self, zoo_core::ModelError> {
        let dir = dir.as_ref();
        let head = saved_head(adapter).map_err(zoo_core::ModelError::new)?;
        let model = match Self::from_pretrained(dir, device) {
            Ok(m)
                if head
                    .as_ref()
                    .is_none_or(|(n, _)| *n == m.classifier.weight.dims()[1]) =>
            {
                m
            }
            whole => {
                let base =
                    BertModel::from_pretrained(dir, device).map_err(zoo_core::ModelError::new)?;
                let Some((n, names)) = head else {
                    let e = whole
                        .err()
                        .map_or_else(|| "its head does not fit".to_string(), |e| e.to_string());
                    return Err(zoo_core::ModelError::new(CheckpointError::Config {
                        path: adapter.join(peft::CONFIG_FILE),
                        message: format!(
                            "the adapter saves no classifier head and {} is no classifier \
                             to put it on ({e})",
                            dir.display()
                        ),
                    }));
                };
                let mut model =
                    Self::from_encoder(base, n, device).map_err(zoo_core::ModelError::new)?;
                model.bert.set_labels(&names);
                model
            }
        };
        model.with_adapter(adapter)
    }
}

/// The class count and names of the classifier head that the adapter in `dir` saves
/// whole: its `id2label.json`, or, without one, the rows of its `classifier.weight`
/// (RoBERTa's `classifier.out_proj.weight`), named `LABEL_i`. `None` when it saves no
/// head.
fn saved_head(dir: &Path) -> std::result::Result<Option<(usize, Vec<String>)>, CheckpointError> {
    let config = peft::read_adapter_config(dir)?;
    if let Some(names) = config.labels {
        return Ok(Some((names.len(), names)));
    }
    if config.saved_modules().map_or(true, |m| m.is_empty()) {
        return Ok(None);
    }
    let tensors = WeightsFile::Safetensors(dir.join(peft::WEIGHTS_FILE)).tensors()?;
    let out = ["classifier.weight", "classifier.out_proj.weight"]
        .iter()
        .find_map(|name| tensors.get(&format!("base_model.model.{name}")))
        .map(|t| t.shape[0]);
    Ok(out.map(|n| {
        let names = checkpoint::labels(Some(&checkpoint::default_id2label(n)));
        (n, names)
    }))
}

classifier_checkpoint!(
    BertForSequenceClassification => SequenceClassification,
    BertForTokenClassification => TokenClassification
);
