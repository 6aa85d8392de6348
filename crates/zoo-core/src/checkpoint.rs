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
//! - [`WeightsFile`]: `model.safetensors`, a sharded `model.safetensors.index.json`, or
//!   `pytorch_model.bin` read by burn-store's pickle reader, which does not execute pickled
//!   code; f16 and bf16 tensors are widened to f32 as they are read;
//! - [`load_into`]: burn-store's key remapping and its PyTorch adapter (which transposes
//!   `Linear` weights, except those a family stores `[in, out]` already, and renames norm
//!   parameters), then one report of *every* missing,
//!   unexpected and mis-shaped tensor, by name and shape ([`TensorReport`]);
//! - [`save_safetensors`]: the same mapping backwards, written atomically;
//! - [`write_config`] and [`class_names`]: `config.json` with HF's `model_type`,
//!   `architectures` and `id2label`.
//!
//! Module paths never name an enum's variant (a `Norm::LayerNorm` inside a block is
//! `norm_1.gamma`, not `norm_1.LayerNorm.gamma`), in loading as in saving, since HF
//! checkpoints have no such level.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::{
    ApplyError, BurnToPyTorchAdapter, KeyRemapper, ModuleAdapter, ModuleContext, ModuleSnapshot,
    ModuleStore, PyTorchToBurnAdapter, PytorchStore, SafetensorsStore, bridge,
};
use burn::tensor::DType;
use serde::de::DeserializeOwned;

/// A tensor as burn-store reads it from a file.
pub type PackTensor = burn::store::burn_pack::Tensor;

/// What can go wrong reading or writing a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file that cannot be read or written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        message: String,
    },
    /// A `config.json` that does not parse or does not describe this model.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A weights file that is not a readable checkpoint.
    #[error("{}: not a readable checkpoint: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the reader said.
        message: String,
    },
    /// A folder with no weights file.
    #[error(
        "{} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin",
        dir.display()
    )]
    NoWeights {
        /// The folder.
        dir: PathBuf,
    },
    /// Tensors that do not fit the model.
    #[error("{}: {report}", path.display())]
    Tensors {
        /// The weights file.
        path: PathBuf,
        /// Every tensor that does not fit.
        report: TensorReport,
    },
}

/// Every tensor of a checkpoint that does not fit a model, found in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorReport {
    /// Tensors the model needs and the file lacks: the checkpoint name and the shape the
    /// model expects.
    pub missing: Vec<(String, Vec<usize>)>,
    /// Tensors of the file the model has no place for: the checkpoint name and its shape.
    pub unexpected: Vec<(String, Vec<usize>)>,
    /// Tensors of another shape: the checkpoint name, the model's shape, the file's shape
    /// (both in the model's layout, after a `Linear` weight's transpose).
    pub mismatched: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// Other failures, one line each (a dtype the parameter cannot take, say).
    pub other: Vec<String>,
}

impl TensorReport {
    /// Whether every tensor fits.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.mismatched.is_empty()
            && self.other.is_empty()
    }
}

impl fmt::Display for TensorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the checkpoint does not fit the model ({} missing, {} unexpected, {} mis-shaped",
            self.missing.len(),
            self.unexpected.len(),
            self.mismatched.len()
        )?;
        if !self.other.is_empty() {
            write!(f, ", {} other", self.other.len())?;
        }
        write!(f, ")")?;
        for (name, shape) in &self.missing {
            write!(f, "\n  missing:    {name} {shape:?}")?;
        }
        for (name, shape) in &self.unexpected {
            write!(f, "\n  unexpected: {name} {shape:?}")?;
        }
        for (name, expected, found) in &self.mismatched {
            write!(
                f,
                "\n  mis-shaped: {name}: the model has {expected:?}, the file {found:?}"
            )?;
        }
        for line in &self.other {
            write!(f, "\n  error:      {line}")?;
        }
        Ok(())
    }
}

/// How a family's checkpoint names relate to its module paths.
#[derive(Debug, Clone, Default)]
pub struct KeyMap {
    /// Regexes over checkpoint names (after [`Self::dialect`]) of tensors that are not
    /// weights of this model: they are dropped before loading (a buffer, a tied copy,
    /// another head).
    pub ignore: Vec<String>,
    /// Regexes over module paths of `Linear` weights that the checkpoint already stores
    /// `[in, out]`, as Burn does (GPT-2's `Conv1D`): they are loaded and saved without the
    /// transpose that PyTorch's `nn.Linear` weights get.
    pub untransposed: Vec<String>,
    /// Literal name prefixes `(checkpoint's, family's)` of a family member whose
    /// checkpoints name what the family's names already map, differently (RoBERTa's
    /// `roberta.` and `lm_head.dense.` for BERT's `bert.` and
    /// `cls.predictions.transform.dense.`). Each pair is written once and serves both
    /// directions: loading translates a checkpoint name first (so `ignore` and `load`
    /// see the family's names), saving translates back last.
    pub dialect: Vec<(String, String)>,
    /// Name templates `(checkpoint name, module path)`, each written once and read in
    /// both directions; see [`Self::names`].
    pub names: Vec<(String, String)>,
    /// `(regex, replacement)` over checkpoint names (after the dialect, before the
    /// names) for the other layouts a checkpoint of the same names may come in, which
    /// are read but never written; see [`Self::base_model`].
    pub aliases: Vec<(String, String)>,
}

/// Marks a name a [`KeyMap::names`] pair has already mapped, so that no later pair maps
/// it again; no template starts with it, and it is stripped before any table runs.
const MAPPED: &str = "\u{1}";

/// The parts of a name template: literal text, and placeholders (`{n}` a layer number,
/// `{a|b}` one of the listed words).
fn template_parts(template: &str) -> Vec<Result<&str, &str>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .unwrap_or_else(|| panic!("name template {template:?} has an unclosed '{{'"));
        if open > 0 {
            parts.push(Ok(&rest[..open]));
        }
        parts.push(Err(&rest[open + 1..close]));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Ok(rest));
    }
    parts
}

/// One direction of a [`KeyMap::names`] pair: a regex anchored at the start of `from`,
/// and the replacement that writes `to` with the same placeholders' values.
///
/// # Panics
/// Templates whose placeholders differ: a family's table is a constant, and its tests
/// load and save through it.
fn template_rule(from: &str, to: &str) -> (String, String) {
    let (src, dst) = (template_parts(from), template_parts(to));
    let holes = |parts: &[Result<&str, &str>]| -> Vec<String> {
        parts
            .iter()
            .filter_map(|p| p.err().map(str::to_string))
            .collect()
    };
    assert_eq!(
        holes(&src),
        holes(&dst),
        "name templates {from:?} and {to:?} must have the same placeholders in the same order"
    );
    let mut pattern = String::from("^");
    for part in &src {
        match part {
            Ok(text) => pattern.push_str(&regex::escape(text)),
            Err("n") => pattern.push_str(r"(\d+)"),
            Err(words) => {
                let words: Vec<String> = words.split('|').map(regex::escape).collect();
                pattern.push_str(&format!("({})", words.join("|")));
            }
        }
    }
    let mut replacement = String::from(MAPPED);
    let mut hole = 0;
    for part in &dst {
        match part {
            Ok(text) => replacement.push_str(&text.replace('$', "$$")),
            Err(_) => {
                hole += 1;
                replacement.push_str(&format!("${{{hole}}}"));
            }
        }
    }
    (pattern, replacement)
}

impl KeyMap {
    /// An empty map: names are module paths.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds [`Self::names`] pairs with `prefix` before both templates: a family's base
    /// model inside a head model (`bert.`), or `""` for the base model itself.
    pub fn names_under(self, prefix: &str, pairs: &[(&str, &str)]) -> Self {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(theirs, ours)| (format!("{prefix}{theirs}"), format!("{prefix}{ours}")))
            .collect();
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        self.names(&pairs)
    }

    /// Where a family's base model sits: bare in the base model (HF `BertModel`,
    /// `ViTModel`), under `prefix` in its head models (`bert.`, `vit.`), as in HF. Either
    /// layout loads into either model: a head checkpoint's base into the base model (the
    /// prefix read away), a bare checkpoint, whose names start with one of `roots`, into
    /// a head model (the prefix read in). Saving writes the model's own layout. Returns
    /// the prefix the base model's [`Self::names_under`] take.
    pub fn base_model(mut self, prefix: &str, head: bool, roots: &[&str]) -> (Self, String) {
        let alias = if head {
            let roots: Vec<String> = roots.iter().map(|r| regex::escape(r)).collect();
            (
                format!(r"^({})\.", roots.join("|")),
                format!("{prefix}${{1}}."),
            )
        } else {
            (format!("^{}", regex::escape(prefix)), String::new())
        };
        self.aliases.push(alias);
        let under = if head {
            prefix.to_string()
        } else {
            String::new()
        };
        (self, under)
    }

    /// Adds name templates `(checkpoint name, module path)`, each written once for
    /// loading and saving. A template is a name's prefix with placeholders, `{n}` for a
    /// layer number and `{a|b}` for one of the listed words, the same on both sides:
    /// `("model.layers.{n}.input_layernorm.", "layers.{n}.norm_1.")`. The first pair
    /// whose template starts a name maps it, and no other pair does, so a more specific
    /// pair goes before a more general one (`model.layers.{n}.input_layernorm.` before
    /// `model.layers.`), in both columns alike.
    pub fn names(mut self, pairs: &[(&str, &str)]) -> Self {
        for (theirs, ours) in pairs {
            // Checked now, so that a bad template fails where the table is built.
            template_rule(theirs, ours);
            self.names.push((theirs.to_string(), ours.to_string()));
        }
        self
    }

    /// The rules of [`Self::names`] in one direction, with the marker stripped last.
    fn name_rules(&self, load: bool) -> Vec<(String, String)> {
        if self.names.is_empty() {
            return Vec::new();
        }
        self.names
            .iter()
            .map(|(theirs, ours)| {
                if load {
                    template_rule(theirs, ours)
                } else {
                    template_rule(ours, theirs)
                }
            })
            .chain([(format!("^{MAPPED}"), String::new())])
            .collect()
    }

    /// Adds [`Self::dialect`] pairs `(checkpoint prefix, family prefix)`, tried in order
    /// when loading and in reverse order when saving, so that saving undoes loading.
    pub fn dialect(mut self, pairs: &[(&str, &str)]) -> Self {
        self.dialect
            .extend(pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())));
        self
    }

    /// The load patterns: the dialect's, the aliases, then [`Self::names`].
    fn load_patterns(&self) -> Vec<(String, String)> {
        self.dialect
            .iter()
            .map(|(theirs, ours)| (format!("^{}", regex::escape(theirs)), ours.clone()))
            .chain(self.aliases.iter().cloned())
            .chain(self.name_rules(true))
            .collect()
    }

    /// The save patterns: [`Self::names`], Burn's norm parameters under PyTorch's names
    /// (`gamma` and `beta` are `weight` and `bias`), then the dialect's backwards.
    fn save_patterns(&self) -> Vec<(String, String)> {
        let norms = [
            (r"\.gamma$".to_string(), ".weight".to_string()),
            (r"\.beta$".to_string(), ".bias".to_string()),
        ];
        let back = self
            .dialect
            .iter()
            .rev()
            .map(|(theirs, ours)| (format!("^{}", regex::escape(ours)), theirs.clone()));
        self.name_rules(false)
            .into_iter()
            .chain(norms)
            .chain(back)
            .collect()
    }

    /// A checkpoint name in the family's names: the dialect applied, nothing else.
    pub fn family_name(&self, checkpoint_name: &str) -> String {
        let pairs: Vec<(String, String)> = self
            .dialect
            .iter()
            .map(|(theirs, ours)| (format!("^{}", regex::escape(theirs)), ours.clone()))
            .collect();
        rename(&Self::remapper(&pairs), checkpoint_name)
    }

    /// Drops checkpoint tensors whose names match `pattern`.
    pub fn ignore(mut self, pattern: &str) -> Self {
        self.ignore.push(pattern.into());
        self
    }

    /// Loads and saves the `Linear` weights whose module paths match `pattern` as stored,
    /// `[in, out]`, without a transpose.
    pub fn untransposed(mut self, pattern: &str) -> Self {
        self.untransposed.push(pattern.into());
        self
    }

    fn adapter(&self, direction: Direction) -> HfAdapter {
        HfAdapter {
            untransposed: self
                .untransposed
                .iter()
                .map(|p| regex::Regex::new(p).expect("a family's key map has a bad regex"))
                .collect(),
            direction,
        }
    }

    fn remapper(pairs: &[(String, String)]) -> KeyRemapper {
        // The patterns are the family's own constants: a bad one is a bug, caught by its
        // tests.
        KeyRemapper::from_patterns(pairs.to_vec()).expect("a family's key map has a bad regex")
    }

    /// The checkpoint name of a module path.
    pub fn checkpoint_name(&self, module_path: &str) -> String {
        rename(&Self::remapper(&self.save_patterns()), module_path)
    }

    /// The module path of a checkpoint name.
    pub fn module_path(&self, checkpoint_name: &str) -> String {
        rename(&Self::remapper(&self.load_patterns()), checkpoint_name)
    }
}

#[derive(Debug, Clone, Copy)]
enum Direction {
    ToBurn,
    ToPytorch,
}

/// burn-store's PyTorch adapters (a `Linear` weight transposed, norm parameters renamed),
/// except for the weights a [`KeyMap`] names as stored `[in, out]` already.
#[derive(Debug, Clone)]
struct HfAdapter {
    untransposed: Vec<regex::Regex>,
    direction: Direction,
}

impl ModuleAdapter for HfAdapter {
    fn adapt(&self, tensor: PackTensor, ctx: ModuleContext<'_>) -> PackTensor {
        // `tensor.name` is the module path here.
        if self.untransposed.iter().any(|re| re.is_match(&tensor.name)) {
            return tensor;
        }
        match self.direction {
            Direction::ToBurn => PyTorchToBurnAdapter.adapt(tensor, ctx),
            Direction::ToPytorch => BurnToPyTorchAdapter.adapt(tensor, ctx),
        }
    }

    fn get_alternative_param_name(&self, param_name: &str, container_type: &str) -> Option<String> {
        match self.direction {
            Direction::ToBurn => {
                PyTorchToBurnAdapter.get_alternative_param_name(param_name, container_type)
            }
            Direction::ToPytorch => {
                BurnToPyTorchAdapter.get_alternative_param_name(param_name, container_type)
            }
        }
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(self.clone())
    }
}

fn rename(remapper: &KeyRemapper, name: &str) -> String {
    let mut out = name.to_string();
    for (re, replacement) in remapper.to_regex_pairs() {
        out = re.replace_all(&out, replacement.as_str()).into_owned();
    }
    out
}

/// Reads `dir/config.json` into a family's config type.
///
/// # Errors
/// A missing or unreadable file, or JSON that does not fit `T`, naming the file.
pub fn read_config<T: DeserializeOwned>(dir: &Path) -> Result<T, CheckpointError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| CheckpointError::Io {
        path: path.clone(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::Config {
        path,
        message: e.to_string(),
    })
}

/// Reads `dir/config.json` as JSON, with its `model_type`: what a program that serves
/// several families reads first, to choose one.
///
/// # Errors
/// As [`read_config`], and a config without a `model_type` string.
pub fn read_model_type(dir: &Path) -> Result<(serde_json::Value, String), CheckpointError> {
    let json: serde_json::Value = read_config(dir)?;
    let model_type = json
        .get("model_type")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| CheckpointError::Config {
            path: dir.join("config.json"),
            message: "no model_type".into(),
        })?
        .to_string();
    Ok((json, model_type))
}

/// Reads `dir/config.json` as [`read_config`] does, then runs the family's `validate` on
/// it; a rejection names the file.
///
/// # Errors
/// As [`read_config`], and what `validate` rejects.
pub fn read_valid_config<T: DeserializeOwned, E: fmt::Display>(
    dir: &Path,
    validate: impl FnOnce(&T) -> Result<(), E>,
) -> Result<T, CheckpointError> {
    let cfg: T = read_config(dir)?;
    validate(&cfg).map_err(|e| CheckpointError::Config {
        path: dir.join("config.json"),
        message: e.to_string(),
    })?;
    Ok(cfg)
}

/// The class count of a classification checkpoint in `dir`: the length of its
/// `id2label` names.
///
/// # Errors
/// No names, which leave the classifier's size unknown.
pub fn num_labels(dir: &Path, labels: &[String]) -> Result<usize, CheckpointError> {
    if labels.is_empty() {
        return Err(CheckpointError::Config {
            path: dir.join("config.json"),
            message: "a classification checkpoint needs id2label to size its classifier".into(),
        });
    }
    Ok(labels.len())
}

/// The weights file of a checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsFile {
    /// `model.safetensors`.
    Safetensors(PathBuf),
    /// `model.safetensors.index.json`, whose `weight_map` names the shard of each tensor.
    Sharded(PathBuf),
    /// `pytorch_model.bin`, a pickled `state_dict`.
    Pytorch(PathBuf),
}

impl WeightsFile {
    /// The weights file of `dir`: `model.safetensors` when present, else the index of a
    /// sharded one (`model.safetensors.index.json`), else `pytorch_model.bin`.
    ///
    /// # Errors
    /// [`CheckpointError::NoWeights`] when there is none of them.
    pub fn find(dir: &Path) -> Result<Self, CheckpointError> {
        let safetensors = dir.join("model.safetensors");
        if safetensors.is_file() {
            return Ok(Self::Safetensors(safetensors));
        }
        let index = dir.join("model.safetensors.index.json");
        if index.is_file() {
            return Ok(Self::Sharded(index));
        }
        let bin = dir.join("pytorch_model.bin");
        if bin.is_file() {
            return Ok(Self::Pytorch(bin));
        }
        Err(CheckpointError::NoWeights {
            dir: dir.to_path_buf(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        match self {
            Self::Safetensors(p) | Self::Sharded(p) | Self::Pytorch(p) => p,
        }
    }

    /// Every tensor of the file, by its checkpoint name. Data is read lazily.
    ///
    /// # Errors
    /// [`CheckpointError::Format`] for a file the reader rejects.
    pub fn tensors(&self) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
        let format = |message: String| CheckpointError::Format {
            path: self.path().to_path_buf(),
            message,
        };
        if !self.path().is_file() {
            return Err(CheckpointError::Io {
                path: self.path().to_path_buf(),
                message: "no such file".into(),
            });
        }
        match self {
            Self::Safetensors(p) => SafetensorsStore::from_file(p)
                .get_all_tensors()
                .cloned()
                .map_err(|e| format(e.to_string())),
            Self::Pytorch(p) => PytorchStore::from_file(p)
                .get_all_tensors()
                .cloned()
                .map_err(|e| format(e.to_string())),
            Self::Sharded(index) => sharded_tensors(index),
        }
    }
}

/// A tensor of a checkpoint file: its name, shape and stored little-endian bytes.
pub type StoredTensor = (String, Vec<usize>, Vec<u8>);

impl WeightsFile {
    /// Every tensor as its name, shape and stored bytes (in the file's own dtype), sorted
    /// by name: what a bit-for-bit comparison of two checkpoints needs.
    ///
    /// # Errors
    /// As [`Self::tensors`], and a tensor whose bytes cannot be read.
    pub fn contents(&self) -> Result<Vec<StoredTensor>, CheckpointError> {
        self.tensors()?
            .into_iter()
            .map(|(name, t)| {
                let bytes = t.to_bytes().map_err(|e| CheckpointError::Format {
                    path: self.path().to_path_buf(),
                    message: format!("{name}: {e}"),
                })?;
                Ok((name, t.shape.to_vec(), bytes.to_vec()))
            })
            .collect()
    }
}

/// The tensors of a sharded safetensors checkpoint: every shard the index's `weight_map`
/// names is read once, and every tensor it lists must be in its shard.
fn sharded_tensors(index: &Path) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: BTreeMap<String, String>,
    }
    let format = |message: String| CheckpointError::Format {
        path: index.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(index).map_err(|e| CheckpointError::Io {
        path: index.to_path_buf(),
        message: e.to_string(),
    })?;
    let parsed: Index = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, shard) in &parsed.weight_map {
        by_shard.entry(shard).or_default().push(name);
    }
    if by_shard.is_empty() {
        return Err(format("its weight_map names no tensors".into()));
    }
    let mut out = BTreeMap::new();
    for (shard, names) in by_shard {
        if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
            return Err(format(format!(
                "shard {shard:?} is not a file of this folder"
            )));
        }
        let mut tensors = WeightsFile::Safetensors(dir.join(shard)).tensors()?;
        for name in names {
            let tensor = tensors
                .remove(name)
                .ok_or_else(|| format(format!("{name} is not in its shard {shard}")))?;
            out.insert(name.to_string(), tensor);
        }
    }
    Ok(out)
}

/// An f16 or bf16 tensor as f32, converted when it is read: the zoo's models compute in
/// f32, and burn-store would otherwise keep the file's float type in the parameter.
fn widen(tensor: PackTensor) -> PackTensor {
    if !matches!(tensor.dtype, DType::F16 | DType::BF16) {
        return tensor;
    }
    let (name, shape, id) = (tensor.name.clone(), tensor.shape.clone(), tensor.param_id);
    bridge::deferred(name, DType::F32, shape, id, move || {
        Ok(bridge::to_data(&tensor)?.convert::<f32>())
    })
}

/// Loads `tensors` (by checkpoint name) into `module` through `map`.
///
/// Returns the checkpoint names that were loaded. Nothing is half-loaded silently: when
/// any tensor is missing, unexpected or mis-shaped, the error lists them all.
///
/// # Errors
/// [`CheckpointError::Tensors`], naming `path` (the file the tensors came from).
pub fn load_tensors<M: Module>(
    module: &mut M,
    tensors: BTreeMap<String, PackTensor>,
    map: &KeyMap,
    path: &Path,
) -> Result<Vec<String>, CheckpointError> {
    let ignore: Vec<regex::Regex> = map
        .ignore
        .iter()
        .map(|p| regex::Regex::new(p).expect("a family's key map has a bad regex"))
        .collect();
    let kept: Vec<PackTensor> = tensors
        .into_values()
        .filter(|t| {
            let name = map.family_name(&t.name);
            !ignore.iter().any(|re| re.is_match(&name))
        })
        .map(widen)
        .collect();
    let file_shapes: BTreeMap<String, Vec<usize>> = kept
        .iter()
        .map(|t| (t.name.clone(), t.shape.to_vec()))
        .collect();
    let (renamed, names) = KeyMap::remapper(&map.load_patterns()).remap(kept);
    // module path -> checkpoint name
    let original: BTreeMap<String, String> = names.into_iter().collect();
    let checkpoint_name = |module_path: &str| {
        original
            .get(module_path)
            .cloned()
            .unwrap_or_else(|| map.checkpoint_name(module_path))
    };
    let model_shapes: BTreeMap<String, Vec<usize>> = module
        .collect(None, None, true)
        .into_iter()
        .map(|t| (t.name.clone(), t.shape.to_vec()))
        .collect();

    let adapter = map.adapter(Direction::ToBurn);
    let result = module.apply(renamed, None, Some(Box::new(adapter)), true);

    let mut report = TensorReport::default();
    for (module_path, _) in &result.missing {
        let shape = model_shapes.get(module_path).cloned().unwrap_or_default();
        report
            .missing
            .push((map.checkpoint_name(module_path), shape));
    }
    for module_path in &result.unused {
        let name = checkpoint_name(module_path);
        let shape = file_shapes.get(&name).cloned().unwrap_or_default();
        report.unexpected.push((name, shape));
    }
    for error in &result.errors {
        match error {
            ApplyError::ShapeMismatch {
                path,
                expected,
                found,
            } => report
                .mismatched
                .push((checkpoint_name(path), expected.to_vec(), found.to_vec())),
            other => report.other.push(other.to_string()),
        }
    }
    report.missing.sort();
    report.unexpected.sort();
    report.mismatched.sort();
    if report.is_empty() {
        let applied: BTreeSet<String> = result.applied.iter().map(|p| checkpoint_name(p)).collect();
        Ok(applied.into_iter().collect())
    } else {
        Err(CheckpointError::Tensors {
            path: path.to_path_buf(),
            report,
        })
    }
}

/// Loads the weights file of `dir` into `module` through `map`; see [`load_tensors`].
///
/// # Errors
/// No weights file, an unreadable one, or tensors that do not fit.
pub fn load_into<M: Module>(
    module: &mut M,
    dir: &Path,
    map: &KeyMap,
) -> Result<Vec<String>, CheckpointError> {
    let file = WeightsFile::find(dir)?;
    let tensors = file.tensors()?;
    load_tensors(module, tensors, map, file.path())
}

/// Writes `module` as HF-layout safetensors at `path`, through `map`'s names: `Linear`
/// weights transposed back to `[out, in]`, norm parameters named `weight` and `bias`.
/// The file appears whole or not at all.
///
/// # Errors
/// A folder that cannot be written.
pub fn save_safetensors<M: Module>(
    module: &M,
    path: &Path,
    map: &KeyMap,
) -> Result<(), CheckpointError> {
    let mut store = SafetensorsStore::from_file(path)
        .with_to_adapter(map.adapter(Direction::ToPytorch))
        .remap(KeyMap::remapper(&map.save_patterns()))
        .skip_enum_variants(true)
        .metadata("format", "pt")
        .overwrite(true);
    module
        .save_into(&mut store)
        .map_err(|e| CheckpointError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// A token id in a `config.json`, or several (`eos_token_id` is either, depending on the
/// checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// One id.
    One(usize),
    /// Several ids.
    Many(Vec<usize>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn ids(&self) -> Vec<usize> {
        match self {
            Self::One(id) => vec![*id],
            Self::Many(ids) => ids.clone(),
        }
    }
}

/// The class names of HF's `id2label` (`{"0": "cat", "1": "dog"}`), in class order.
///
/// # Errors
/// A key that is not a class index below the number of entries, named.
pub fn class_names(id2label: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut out = vec![None; id2label.len()];
    for (key, name) in id2label {
        let index = key
            .parse::<usize>()
            .ok()
            .filter(|i| *i < id2label.len())
            .ok_or_else(|| {
                format!(
                    "id2label key {key:?} is not a class index below {}",
                    id2label.len()
                )
            })?;
        out[index] = Some(name.clone());
    }
    Ok(out.into_iter().map(Option::unwrap_or_default).collect())
}

/// HF's default `id2label` for `n` classes: `LABEL_0`, `LABEL_1`, ...
pub fn default_id2label(n: usize) -> BTreeMap<String, String> {
    (0..n)
        .map(|i| (i.to_string(), format!("LABEL_{i}")))
        .collect()
}

/// Writes `dir/config.json`: `config` serialized, with HF's `model_type` and
/// `architectures` set. The file is written beside its final name and renamed, so a
/// crash leaves the old file or none, never half of one.
///
/// # Errors
/// A folder that cannot be written, or a config that does not serialize to an object.
pub fn write_config<T: serde::Serialize>(
    dir: &Path,
    config: &T,
    model_type: &str,
    architecture: &str,
) -> Result<(), CheckpointError> {
    let path = dir.join("config.json");
    let bad = |message: String| CheckpointError::Config {
        path: path.clone(),
        message,
    };
    let io = |p: &Path, e: std::io::Error| CheckpointError::Io {
        path: p.to_path_buf(),
        message: e.to_string(),
    };
    let mut json = serde_json::to_value(config).map_err(|e| bad(e.to_string()))?;
    let obj = json
        .as_object_mut()
        .ok_or_else(|| bad("the config is not a JSON object".into()))?;
    obj.insert("model_type".into(), model_type.into());
    obj.insert("architectures".into(), vec![architecture].into());
    let text = serde_json::to_string_pretty(&json).map_err(|e| bad(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let partial = dir.join(".config.json.partial");
    std::fs::write(&partial, text).map_err(|e| io(&partial, e))?;
    std::fs::rename(&partial, &path).map_err(|e| io(&path, e))
}

/// Where the zoo keeps downloads and models: `$ZOO_CACHE`, else
/// `$HOME/.cache/burn-model-zoo` (the folder `cargo xtask` fills).
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ZOO_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    Path::new(&home).join(".cache").join("burn-model-zoo")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A family's names with a member's dialect on top: every name maps to its module
    /// path and back to itself, and the dialect's pairs that share a prefix
    /// (`classifier.` inside `classifier.dense.`) do not capture each other's names.
    #[test]
    fn a_dialect_round_trips_through_the_family_names() {
        let names = [
            ("bert.pooler.dense.", "bert.pooler."),
            ("bert.embeddings.LayerNorm.", "bert.embeddings.norm."),
        ];
        let map = KeyMap::new().names(&names).dialect(&[
            ("roberta.", "bert."),
            ("classifier.dense.", "bert.pooler.dense."),
            ("classifier.out_proj.", "classifier."),
        ]);
        for (name, path) in [
            (
                "roberta.embeddings.LayerNorm.weight",
                "bert.embeddings.norm.weight",
            ),
            ("classifier.dense.weight", "bert.pooler.weight"),
            ("classifier.out_proj.bias", "classifier.bias"),
        ] {
            assert_eq!(map.module_path(name), path);
            assert_eq!(map.checkpoint_name(path), name);
        }
        assert_eq!(
            map.family_name("classifier.dense.bias"),
            "bert.pooler.dense.bias"
        );
        // Without the dialect the family's own names pass through unchanged.
        let plain = KeyMap::new().names(&names);
        assert_eq!(plain.family_name("roberta.x"), "roberta.x");
        assert_eq!(
            plain.module_path("bert.embeddings.LayerNorm.w"),
            "bert.embeddings.norm.w"
        );
    }

    /// A base model reads a head checkpoint's base, a head model a bare checkpoint, and
    /// each saves its own layout.
    #[test]
    fn either_layout_loads_into_either_model() {
        let names = [(
            "encoder.layer.{n}.output.dense.",
            "layers.{n}.mlp.down_proj.",
        )];
        let roots = ["embeddings", "encoder", "pooler"];
        let (base, under) = KeyMap::new().base_model("bert.", false, &roots);
        let base = base.names_under(&under, &names);
        let (head, under) = KeyMap::new().base_model("bert.", true, &roots);
        let head = head.names_under(&under, &names);
        for name in [
            "encoder.layer.2.output.dense.weight",
            "bert.encoder.layer.2.output.dense.weight",
        ] {
            assert_eq!(base.module_path(name), "layers.2.mlp.down_proj.weight");
            assert_eq!(head.module_path(name), "bert.layers.2.mlp.down_proj.weight");
        }
        assert_eq!(
            base.checkpoint_name("layers.2.mlp.down_proj.weight"),
            "encoder.layer.2.output.dense.weight"
        );
        assert_eq!(
            head.checkpoint_name("bert.layers.2.mlp.down_proj.weight"),
            "bert.encoder.layer.2.output.dense.weight"
        );
        // A head's own names are not the base model's: `cls.` is left alone.
        assert_eq!(
            head.module_path("cls.predictions.bias"),
            "cls.predictions.bias"
        );
    }

    /// Name templates: each name maps by the first pair that starts it, placeholders
    /// carry over, and saving gives back the checkpoint's name, norm parameters included.
    #[test]
    fn name_templates_round_trip_and_the_first_match_wins() {
        let map = KeyMap::new().names(&[
            ("model.layers.{n}.input_layernorm.", "layers.{n}.norm_1."),
            (
                "{encoder|decoder}.block.{n}.layer.0.SelfAttention.{q|k|v|o}.",
                "{encoder|decoder}.{n}.self_attn.{q|k|v|o}_proj.",
            ),
            ("model.layers.", "layers."),
            ("model.norm.", "norm_f."),
        ]);
        for (name, path, saved) in [
            (
                "model.layers.12.input_layernorm.weight",
                "layers.12.norm_1.weight",
                "model.layers.12.input_layernorm.weight",
            ),
            (
                "model.layers.3.self_attn.q_proj.weight",
                "layers.3.self_attn.q_proj.weight",
                "model.layers.3.self_attn.q_proj.weight",
            ),
            (
                "decoder.block.1.layer.0.SelfAttention.v.weight",
                "decoder.1.self_attn.v_proj.weight",
                "decoder.block.1.layer.0.SelfAttention.v.weight",
            ),
            ("model.norm.weight", "norm_f.weight", "model.norm.weight"),
            ("lm_head.weight", "lm_head.weight", "lm_head.weight"),
        ] {
            assert_eq!(map.module_path(name), path, "{name}");
            assert_eq!(map.checkpoint_name(path), saved, "{path}");
        }
        // Burn's norm parameters are saved under PyTorch's names.
        assert_eq!(
            map.checkpoint_name("layers.0.norm_1.gamma"),
            "model.layers.0.input_layernorm.weight"
        );
        assert_eq!(map.checkpoint_name("norm_f.beta"), "model.norm.bias");
        // A name the placeholders do not fit is left alone.
        assert_eq!(
            map.module_path("middle.block.1.layer.0.SelfAttention.v.weight"),
            "middle.block.1.layer.0.SelfAttention.v.weight"
        );
    }

    /// A pair's output is never read by a later pair: `layers.` maps to `model.layers.`
    /// once, though the general pair `layers.` would match it again.
    #[test]
    fn a_mapped_name_is_not_mapped_twice() {
        let map = KeyMap::new().names(&[("layers.", "layers.layers.")]);
        assert_eq!(map.module_path("layers.0.w"), "layers.layers.0.w");
        assert_eq!(map.checkpoint_name("layers.layers.0.w"), "layers.0.w");
    }

    #[test]
    #[should_panic(expected = "must have the same placeholders in the same order")]
    fn templates_with_other_placeholders_are_refused() {
        let _ = KeyMap::new().names(&[("h.{n}.ln_1.", "layers.norm_1.")]);
    }
}
