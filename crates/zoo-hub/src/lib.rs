//! # zoo-hub
//!
//! The registry of every architecture the zoo's families load, and [`AutoModel`]: give
//! it a checkpoint folder and it reads `config.json` (`model_type`, then the first of
//! `architectures`), finds the row, loads the weights, and answers what the model can
//! do. Research code and the `zoo` command line load "whatever this folder is" through
//! it, and neither names a family or an architecture.
//!
//! ```no_run
//! # fn main() -> Result<(), zoo_hub::HubError> {
//! use zoo_core::registry::{ForwardInput, IntMatrix};
//! let device = burn::tensor::Device::default();
//! let model = zoo_hub::AutoModel::from_pretrained("path/to/checkpoint", &device)?;
//! let input = ForwardInput {
//!     input_ids: Some(IntMatrix { name: "input_ids", rows: vec![vec![1, 2, 3]] }),
//!     ..ForwardInput::default()
//! };
//! // HF's output names with their values and shapes: `logits` for a causal LM.
//! let outputs = model.forward(&input, &device)?;
//! assert!(outputs.iter().all(|(_name, values, shape)| values.len() == shape.iter().product::<usize>()));
//! if let Some(lm) = model.generator() {
//!     let out = lm.generate(&[vec![1, 2, 3]], &zoo_core::GenerationConfig::greedy(8), &mut |_, _| {})?;
//!     assert!(out.tokens[0].len() <= 8);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Each family contributes its rows (`zoo_decoder::ARCHITECTURES`, ...); adding an
//! architecture adds a row there and nothing here.
#![warn(missing_docs)]

pub mod hub;
pub mod pipelines;
mod text;

pub use text::TextGeneration;

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use serde_json::Value;
use zoo_core::checkpoint::{self, CheckpointError};
use zoo_core::registry::{
    Architecture, Classifier, ForwardInput, NamedOutput, Pretrained, Task, TextGenerator,
    Translator,
};
use zoo_core::{CoreError, ModelError, QuantOptions, QuantReport};

/// What can go wrong finding or running a checkpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// The folder does not exist.
    #[error("{}: no such model folder", path.display())]
    NoFolder {
        /// The folder.
        path: PathBuf,
    },
    /// A hub id that cannot be found in the cache or fetched (see [`hub`]).
    #[error("{repo}: {message}")]
    Hub {
        /// The repository id.
        repo: String,
        /// What went wrong, and what to do about it.
        message: String,
    },
    /// A `config.json` that cannot be read, or names what no family loads.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Forward arguments the architecture does not take.
    #[error("{0}")]
    Input(String),
    /// What the family's loader or model reports.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Generation.
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = HubError> = std::result::Result<T, E>;

/// Every registered architecture, family by family: decoders, encoders, vision,
/// encoder-decoders.
pub fn architectures() -> impl Iterator<Item = &'static Architecture> {
    zoo_decoder::registry::ARCHITECTURES
        .iter()
        .chain(zoo_encoder::registry::ARCHITECTURES)
        .chain(zoo_vision::registry::ARCHITECTURES)
        .chain(zoo_seq2seq::registry::ARCHITECTURES)
}

/// The distinct `model_type`s, in registry order; with a task, those of the
/// architectures that serve it.
pub fn model_types(task: Option<Task>) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for a in architectures().filter(|a| task.is_none_or(|t| a.serves(t))) {
        if !out.contains(&a.model_type) {
            out.push(a.model_type);
        }
    }
    out
}

/// The names of the architectures that serve `task`, in registry order.
pub fn architecture_names(task: Task) -> Vec<&'static str> {
    architectures()
        .filter(|a| a.serves(task))
        .map(|a| a.name)
        .collect()
}

/// A checkpoint folder whose architecture is known, before anything is loaded.
#[derive(Debug, Clone)]
pub struct Detected {
    /// The folder.
    pub dir: PathBuf,
    /// The registry row that runs it.
    pub architecture: &'static Architecture,
}

impl Detected {
    /// Reads `dir/config.json` and picks the row: its `model_type`, then the first of its
    /// `architectures` (or the `model_type`'s first row when it lists none).
    ///
    /// # Errors
    /// A missing folder or config, malformed JSON, or a `model_type` or architecture no
    /// family loads (the supported ones are named).
    pub fn new(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(HubError::NoFolder {
                path: dir.to_path_buf(),
            });
        }
        let config = dir.join("config.json");
        let bad = |message: String| {
            HubError::from(CheckpointError::Config {
                path: config.clone(),
                message,
            })
        };
        let (json, model_type) = checkpoint::read_model_type(dir)?;
        let rows: Vec<&'static Architecture> = architectures()
            .filter(|a| a.model_type == model_type)
            .collect();
        let Some(first) = rows.first() else {
            return Err(bad(format!(
                "unknown model_type {model_type:?}; the supported model types are {}",
                model_types(None).join(", ")
            )));
        };
        let named = json
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str);
        let architecture = match named {
            None => first,
            Some(name) => rows.iter().find(|a| a.name == name).ok_or_else(|| {
                let known: Vec<&str> = rows.iter().map(|a| a.name).collect();
                bad(format!(
                    "architecture {name:?} of model_type {model_type:?} is not supported; the \
                     supported ones are {}",
                    known.join(", ")
                ))
            })?,
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            architecture,
        })
    }

    /// Checks that the architecture takes every argument `input` holds, and that the
    /// arguments fit together.
    ///
    /// # Errors
    /// The first argument it does not take, with those it does; or shapes that differ.
    pub fn check_input(&self, input: &ForwardInput) -> Result<()> {
        let takes = self.architecture.inputs;
        if let Some(key) = input.keys().into_iter().find(|k| !takes.contains(k)) {
            return Err(HubError::Input(format!(
                "{key} is not an input of {} (it takes {})",
                self.architecture.name,
                takes.join(", ")
            )));
        }
        Ok(input.check()?)
    }

    /// The model's parameter count, with its weights file checked against the
    /// architecture from the file's headers alone ([`checkpoint::headers_only`]): every
    /// tensor's name and shape as loading checks them, and the same errors, but nothing is
    /// read and no weight is allocated, so a checkpoint of any size is described in
    /// milliseconds (`zoo info`). The size check against the machine's memory, which
    /// loading makes, is left out: describing a model does not need it to fit.
    ///
    /// # Errors
    /// What [`Self::load`] reports before reading a weight.
    pub fn inspect(&self, device: &Device) -> Result<usize> {
        let model = checkpoint::headers_only(|| (self.architecture.load)(&self.dir, device))?;
        Ok(model.param_count())
    }

    /// Loads the weights onto `device`.
    ///
    /// # Errors
    /// What the family's loader reports: a config it cannot run, no weights file, or
    /// tensors that do not fit, all of them named.
    pub fn load(self, device: &Device) -> Result<AutoModel> {
        let model = (self.architecture.load)(&self.dir, device)?;
        Ok(AutoModel {
            detected: self,
            model,
        })
    }

    /// Loads the weights onto `device` with the PEFT LoRA adapter of the folder `adapter`
    /// folded into them, as PEFT's `merge_and_unload` does. A sequence-classification
    /// adapter (`task_type` `SEQ_CLS`) over a base checkpoint runs on its `model_type`'s
    /// sequence classifier, as PEFT runs it on the classifier class a user picks.
    ///
    /// # Errors
    /// An architecture whose family does not read adapters (those that do are named), a
    /// missing adapter folder, and what [`Self::load`] and the adapter's reader report.
    pub fn load_adapted(mut self, adapter: &Path, device: &Device) -> Result<AutoModel> {
        if !adapter.is_dir() {
            return Err(HubError::Input(format!(
                "{}: no such adapter folder",
                adapter.display()
            )));
        }
        let task = checkpoint::peft::read_adapter_config(adapter)
            .ok()
            .and_then(|c| c.task_type);
        if self.architecture.load_adapted.is_none()
            && task.as_deref() == Some("SEQ_CLS")
            && let Some(row) = architectures().find(|a| {
                a.model_type == self.architecture.model_type
                    && a.serves(Task::Classify)
                    && a.load_adapted.is_some()
            })
        {
            self.architecture = row;
        }
        let Some(load) = self.architecture.load_adapted else {
            // The causal LMs by model type; the other architectures by name.
            let mut lms: Vec<&str> = Vec::new();
            let mut others: Vec<&str> = Vec::new();
            for a in architectures().filter(|a| a.load_adapted.is_some()) {
                let (list, name) = if a.tasks.contains(&Task::Generate) {
                    (&mut lms, a.model_type)
                } else {
                    (&mut others, a.name)
                };
                if !list.contains(&name) {
                    list.push(name);
                }
            }
            return Err(HubError::Input(format!(
                "{} cannot take a LoRA adapter yet; the causal LMs of {} can, and {}",
                self.architecture.name,
                lms.join(", "),
                others.join(", ")
            )));
        };
        let model = load(&self.dir, adapter, device)?;
        Ok(AutoModel {
            detected: self,
            model,
        })
    }
}

/// A loaded checkpoint of any registered architecture.
pub struct AutoModel {
    detected: Detected,
    model: Box<dyn Pretrained>,
}

impl std::fmt::Debug for AutoModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoModel")
            .field("detected", &self.detected)
            .finish_non_exhaustive()
    }
}

impl AutoModel {
    /// Reads `dir/config.json`, picks the architecture and loads it onto `device`.
    /// `dir` is a checkpoint folder, or a hub id (`org/name`) found in the HF cache or
    /// downloaded into it with the environment's settings ([`hub::locate`],
    /// [`hub::HubOptions::from_env`]).
    ///
    /// # Errors
    /// See [`hub::locate`], [`Detected::new`] and [`Detected::load`].
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = hub::locate(dir, &hub::HubOptions::from_env())?;
        Detected::new(dir)?.load(device)
    }

    /// [`Self::from_pretrained`] with the linear weights of the layer stacks quantized as
    /// they are read ([`zoo_core::checkpoint::quantized_while_loading`]), so that loading
    /// never holds them in float: the model and report of [`Self::quantize`] after
    /// [`Self::from_pretrained`], at about the quantized model's peak memory.
    ///
    /// # Errors
    /// As [`Self::from_pretrained`] and [`Self::quantize`].
    pub fn from_pretrained_quantized(
        dir: impl AsRef<Path>,
        options: &QuantOptions,
        device: &Device,
    ) -> Result<(Self, QuantReport)> {
        options.check()?;
        zoo_core::quant::check_device(options, device)?;
        zoo_core::checkpoint::quantized_while_loading(options, || {
            Self::from_pretrained(dir, device)
        })?
        .quantize(options, device)
    }

    /// [`Self::from_pretrained`] (a folder or a hub id), with the PEFT LoRA adapter of `adapter` folded into the
    /// weights when one is given.
    ///
    /// # Errors
    /// See [`Detected::new`] and [`Detected::load_adapted`].
    pub fn from_pretrained_adapted(
        dir: impl AsRef<Path>,
        adapter: Option<&Path>,
        device: &Device,
    ) -> Result<Self> {
        let detected = Detected::new(hub::locate(dir, &hub::HubOptions::from_env())?)?;
        match adapter {
            Some(a) => detected.load_adapted(a, device),
            None => detected.load(device),
        }
    }

    /// The folder it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.detected.dir
    }

    /// Its registry row: `model_type`, architecture name, inputs, tasks.
    pub fn architecture(&self) -> &'static Architecture {
        self.detected.architecture
    }

    /// Parameters of the model.
    pub fn num_params(&self) -> usize {
        self.model.param_count()
    }

    /// The bytes its parameters take as the backend holds them, quantized ones included.
    pub fn weight_bytes(&self) -> zoo_core::quant::WeightBytes {
        self.model.weight_bytes()
    }

    /// The outputs of one forward pass, named as HF names them, after checking that the
    /// architecture takes every argument given.
    ///
    /// # Errors
    /// See [`Detected::check_input`] and [`Pretrained::forward`].
    pub fn forward(&self, input: &ForwardInput, device: &Device) -> Result<Vec<NamedOutput>> {
        self.detected.check_input(input)?;
        Ok(self.model.forward(input, device)?)
    }

    /// The model as a text generator, when it is a causal LM.
    pub fn generator(&self) -> Option<&dyn TextGenerator> {
        self.model.generator()
    }

    /// The model as a translator, when it is an encoder-decoder.
    pub fn translator(&self) -> Option<&dyn Translator> {
        self.model.translator()
    }

    /// The model as a classifier, when it has a classification head.
    pub fn classifier(&self) -> Option<&dyn Classifier> {
        self.model.classifier()
    }

    /// The model itself.
    pub fn model(&self) -> &dyn Pretrained {
        self.model.as_ref()
    }

    /// The model with the linear weights of its layer stacks quantized through Burn
    /// ([`zoo_core::quantize_linear_weights`]: embeddings, heads, norms and biases keep
    /// their precision), and what was quantized.
    ///
    /// # Errors
    /// A backend that cannot run quantized weights of that width (libtorch; ndarray
    /// below 8 bits), a block size out of range, or a model with no linear weight to
    /// quantize.
    pub fn quantize(self, options: &QuantOptions, device: &Device) -> Result<(Self, QuantReport)> {
        let (model, report) = self.model.quantized(options, device)?;
        if report.tensors == 0 {
            return Err(HubError::Input(format!(
                "{}: no linear weight of {} can be quantized {options} ({} kept: their \
                 widths are not multiples of the block, or of the values the backend packs \
                 into one word)",
                self.detected.dir.display(),
                self.detected.architecture.name,
                report.kept
            )));
        }
        let detected = self.detected;
        Ok((Self { detected, model }, report))
    }

    /// Writes the model as a checkpoint folder that the zoo loads back, with every
    /// family's own names: `config.json`, and `model.safetensors`, or `model.bpk` (Burn's
    /// format, which stores the packed values and scales) when its weights are quantized.
    /// Only the model's own files: the tokenizer and the other files of the folder it was
    /// loaded from are the caller's to copy.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        Ok(self.model.save_pretrained(dir.as_ref())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_contributes_its_rows() {
        assert_eq!(
            model_types(None).join(", "),
            "gpt2, llama, mistral, qwen2, phi3, gpt_neox, qwen3, gemma, gemma2, gemma3_text, mixtral, bert, roberta, xlm-roberta, distilbert, modernbert, vit, deit, clip, t5, marian, bart, mbart"
        );
        assert_eq!(
            model_types(Some(Task::Generate)).join(", "),
            "gpt2, llama, mistral, qwen2, phi3, gpt_neox, qwen3, gemma, gemma2, gemma3_text, mixtral"
        );
        assert_eq!(
            model_types(Some(Task::Translate)).join(", "),
            "t5, marian, bart, mbart"
        );
        assert_eq!(
            architecture_names(Task::Classify).join(", "),
            "BertForSequenceClassification, RobertaForSequenceClassification, \
             XLMRobertaForSequenceClassification, DistilBertForSequenceClassification, \
             ModernBertForSequenceClassification, ViTForImageClassification, \
             DeiTForImageClassification, \
             DeiTForImageClassificationWithTeacher"
        );
        // No architecture is registered twice.
        let names: Vec<&str> = architectures().map(|a| a.name).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }
}
