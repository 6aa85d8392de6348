//! LoRA adapters in PEFT's format, over Burn's own LoRA.
//!
//! Burn attaches the adapters ([`Module::apply_lora`]): each adapted weight keeps its
//! frozen base and gains factors `a` `[in, r]` and `b` `[r, out]`, and its value becomes
//! `base + alpha / r · a b`. This module only chooses which weights, by HF module names
//! as PEFT's `target_modules` gives them, and names the factors as PEFT does in
//! `adapter_model.safetensors`: `base_model.model.<module>.lora_A.weight` `[r, in]` (the
//! transpose of `a`) and `...lora_B.weight` `[out, r]` (the transpose of `b`), beside an
//! `adapter_config.json`.
//!
//! Modules trained whole beside the adapter (PEFT's `modules_to_save`: a classifier
//! head) are written and read under their checkpoint names with the same prefix
//! (`base_model.model.classifier.weight`). What PEFT can write and this reader cannot run
//! (rsLoRA, DoRA, per-layer ranks, trained biases) is refused by name.

use std::collections::BTreeMap;

use burn::module::{
    Lora, Module, ModuleMapper, ModuleVisitor, Param, ParamGroup, QLora, Quantizer,
};
use burn::store::bridge;
use burn::tensor::quantization::Calibration;
use burn::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CheckpointError, KeyMap, PackTensor, WeightsFile};
use crate::durable::{self, partial_path};

/// `adapter_config.json`.
pub const CONFIG_FILE: &str = "adapter_config.json";
/// `adapter_model.safetensors`.
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// `id2label.json`: the class names of a classifier head that the adapter saves whole,
/// as `config.json`'s `id2label` holds them, written by the zoo beside an adapter whose
/// head is new (PEFT keeps no labels; transformers takes these as `id2label=`).
pub const LABELS_FILE: &str = "id2label.json";

/// The fields of PEFT's `adapter_config.json` that the zoo reads and writes; others are
/// kept as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterConfig {
    /// `"LORA"`.
    pub peft_type: String,
    /// PEFT's task (`CAUSAL_LM`, `SEQ_2_SEQ_LM`, ...).
    #[serde(default)]
    pub task_type: Option<String>,
    /// The rank.
    pub r: usize,
    /// The scale's numerator: the delta is `lora_alpha / r · B A`.
    pub lora_alpha: f64,
    /// HF module names (a module is adapted when its name is one of these, or ends in
    /// `.` and one of these).
    pub target_modules: Value,
    /// Dropout on the adapter's input while training (the zoo trains with 0).
    #[serde(default)]
    pub lora_dropout: f64,
    /// Which biases train: only `"none"` runs here.
    #[serde(default = "bias_none")]
    pub bias: String,
    /// Whether the adapted weights are stored `[in, out]` (GPT-2's `Conv1D`).
    #[serde(default)]
    pub fan_in_fan_out: bool,
    /// rsLoRA's `alpha / sqrt(r)` scale.
    #[serde(default)]
    pub use_rslora: bool,
    /// DoRA.
    #[serde(default)]
    pub use_dora: bool,
    /// Whole modules trained and saved beside the adapter.
    #[serde(default)]
    pub modules_to_save: Option<Value>,
    /// Per-module ranks.
    #[serde(default)]
    pub rank_pattern: Option<BTreeMap<String, Value>>,
    /// Per-module alphas.
    #[serde(default)]
    pub alpha_pattern: Option<BTreeMap<String, Value>>,
    /// Layers to adapt (all of them when absent).
    #[serde(default)]
    pub layers_to_transform: Option<Value>,
    /// The base checkpoint the adapter was trained on.
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
    /// Whether the adapter was saved for inference.
    #[serde(default)]
    pub inference_mode: bool,
    /// Every other field, kept.
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
    /// The class names of the head saved whole, by class id, kept in [`LABELS_FILE`]
    /// beside the config rather than in it.
    #[serde(skip)]
    pub labels: Option<Vec<String>>,
}

fn bias_none() -> String {
    "none".into()
}

impl AdapterConfig {
    /// A LoRA config of rank `r` and `lora_alpha` over `target_modules`, for PEFT's
    /// `task_type`.
    pub fn lora(r: usize, lora_alpha: f64, target_modules: &[String], task_type: &str) -> Self {
        Self {
            peft_type: "LORA".into(),
            task_type: Some(task_type.into()),
            r,
            lora_alpha,
            target_modules: Value::from(target_modules.to_vec()),
            lora_dropout: 0.0,
            bias: bias_none(),
            fan_in_fan_out: false,
            use_rslora: false,
            use_dora: false,
            modules_to_save: None,
            rank_pattern: Some(BTreeMap::new()),
            alpha_pattern: Some(BTreeMap::new()),
            layers_to_transform: None,
            base_model_name_or_path: None,
            inference_mode: true,
            other: serde_json::Map::new(),
            labels: None,
        }
    }

    /// The target module names.
    ///
    /// # Errors
    /// A `target_modules` that is not a list of names (PEFT also takes a regex, or
    /// `"all-linear"`), named.
    pub fn targets(&self) -> Result<Vec<String>, String> {
        match &self.target_modules {
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| "target_modules holds a value that is not a name".to_string()),
            other => Err(format!(
                "target_modules {other} is not supported: give a list of module names"
            )),
        }
    }

    /// The modules the adapter saves whole beside its factors (PEFT's `modules_to_save`:
    /// a classifier head trained in full), by the names PEFT matches their ends with.
    ///
    /// # Errors
    /// A `modules_to_save` that is not a list of names.
    pub fn saved_modules(&self) -> Result<Vec<String>, String> {
        match &self.modules_to_save {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(names)) => names
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| format!("modules_to_save holds {v}, not a module name"))
                })
                .collect(),
            Some(other) => Err(format!(
                "modules_to_save must be a list of module names, got {other}"
            )),
        }
    }

    /// Checks that the adapter is one the zoo runs: LoRA, without rsLoRA, DoRA, per-layer
    /// settings or trained biases.
    ///
    /// # Errors
    /// The first setting that is not supported, named.
    pub fn check(&self) -> Result<(), String> {
        let unsupported = |what: &str| Err(format!("{what} is not supported"));
        if self.peft_type != "LORA" {
            return Err(format!(
                "peft_type {:?} is not supported (LORA is)",
                self.peft_type
            ));
        }
        if self.r == 0 {
            return Err("r must be > 0, got 0".into());
        }
        if !self.lora_alpha.is_finite() {
            return Err(format!(
                "lora_alpha must be finite, got {}",
                self.lora_alpha
            ));
        }
        if self.use_rslora {
            return unsupported("use_rslora");
        }
        if self.use_dora {
            return unsupported("use_dora");
        }
        if self.bias != "none" {
            return unsupported(&format!("bias {:?}", self.bias));
        }
        let set = |v: &Option<Value>| {
            v.as_ref()
                .is_some_and(|v| !v.is_null() && v != &Value::Array(vec![]))
        };
        self.saved_modules()?;
        if set(&self.layers_to_transform) {
            return unsupported("layers_to_transform");
        }
        let patterns =
            |p: &Option<BTreeMap<String, Value>>| p.as_ref().is_some_and(|p| !p.is_empty());
        if patterns(&self.rank_pattern) || patterns(&self.alpha_pattern) {
            return unsupported("rank_pattern or alpha_pattern");
        }
        // Newer fields of PEFT's LoraConfig that change what the adapter computes.
        for key in [
            "lora_bias",
            "use_qalora",
            "use_bdlora",
            "exclude_modules",
            "target_parameters",
            "trainable_token_indices",
            "layer_replication",
            "alora_invocation_tokens",
        ] {
            let on = match self.other.get(key) {
                None | Some(Value::Null | Value::Bool(false)) => false,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::Object(o)) => !o.is_empty(),
                Some(_) => true,
            };
            if on {
                return unsupported(key);
            }
        }
        self.targets().map(|_| ())
    }
}

/// Where a visitor or mapper is in the module tree: each module's name, and whether it
/// is an enum's variant. Burn's parameter groups name a parameter by the whole path;
/// checkpoints (and so the key maps) leave the variants out, as burn-store's
/// `skip_enum_variants` does.
#[derive(Default)]
struct Path {
    names: Vec<(String, bool)>,
}

impl Path {
    fn enter(&mut self, name: &str, container_type: &str) {
        self.names
            .push((name.to_string(), container_type.starts_with("Enum:")));
    }

    fn exit(&mut self) {
        self.names.pop();
    }

    /// The whole path, as parameter groups read it.
    fn full(&self) -> String {
        let names: Vec<&str> = self.names.iter().map(|(n, _)| n.as_str()).collect();
        names.join(".")
    }

    /// The path without enum variants, as checkpoints name it.
    fn stored(&self) -> String {
        let names: Vec<&str> = self
            .names
            .iter()
            .filter(|(_, variant)| !variant)
            .map(|(n, _)| n.as_str())
            .collect();
        names.join(".")
    }
}

/// A float parameter found by [`Params`].
struct Found {
    /// Its whole path.
    full: String,
    /// Its path without enum variants.
    stored: String,
    dims: Vec<usize>,
}

/// Collects the paths of every float parameter and, when asked, the values of those whose
/// path ends in one of `read`.
#[derive(Default)]
struct Params {
    path: Path,
    found: Vec<Found>,
    read: Vec<&'static str>,
    /// By path without enum variants.
    values: BTreeMap<String, TensorData>,
}

impl ModuleVisitor for Params {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let stored = self.path.stored();
        if self.read.iter().any(|s| stored.ends_with(s)) {
            self.values.insert(stored.clone(), param.val().into_data());
        }
        self.found.push(Found {
            full: self.path.full(),
            stored,
            dims: param.lazy_shape().to_vec(),
        });
    }
}

/// Counts parameters, and those that train (require a gradient).
#[derive(Default)]
struct Counts {
    trainable: usize,
    all: usize,
}

impl ModuleVisitor for Counts {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let n = param.lazy_shape().num_elements();
        self.all += n;
        if param.val().is_require_grad() {
            self.trainable += n;
        }
    }
}

/// `(trainable, all)` parameters of `model`: with LoRA adapters attached
/// ([`apply_lora`]), the trainable ones are the adapters' factors; on a device without
/// autodiff, none.
pub fn parameter_counts<M: Module>(model: &M) -> (usize, usize) {
    let mut counts = Counts::default();
    model.visit(&mut counts);
    (counts.trainable, counts.all)
}

/// Replaces the values of the parameters at the given paths (without enum variants).
struct SetValues {
    path: Path,
    values: BTreeMap<String, TensorData>,
}

impl ModuleMapper for SetValues {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        match self.values.remove(&self.path.stored()) {
            Some(data) => param.map(|t| Tensor::from_data(data, &t.device())),
            None => param,
        }
    }
}

/// The HF module of a weight's checkpoint name (`model.layers.0.self_attn.q_proj` for
/// `model.layers.0.self_attn.q_proj.weight`).
fn module_of(checkpoint_name: &str) -> Option<&str> {
    checkpoint_name.strip_suffix(".weight")
}

/// Whether PEFT's `target` names `module`: the whole name, or its end after a `.`.
fn targets(module: &str, target: &str) -> bool {
    module == target || module.ends_with(&format!(".{target}"))
}

/// A weight that LoRA adapts: its module path, its HF module name, and Burn's
/// `[in, out]` shape.
type Adapted = (String, String, Vec<usize>);

/// The 2-D weights of `model` that `targets` name.
fn adapted<M: Module>(model: &M, map: &KeyMap, names: &[String]) -> Result<Vec<Adapted>, String> {
    let mut params = Params::default();
    model.visit(&mut params);
    let linear: Vec<Adapted> = params
        .found
        .into_iter()
        .filter(|p| p.dims.len() == 2)
        .filter_map(|p| {
            let name = map.checkpoint_name(&p.stored);
            module_of(&name).map(|m| (p.full, m.to_string(), p.dims))
        })
        .collect();
    let mut chosen = Vec::new();
    for target in names {
        let hits: Vec<_> = linear
            .iter()
            .filter(|(_, m, _)| targets(m, target))
            .cloned()
            .collect();
        if hits.is_empty() {
            let mut known: Vec<&str> = linear
                .iter()
                .map(|(_, m, _)| m.rsplit('.').next().unwrap_or(m))
                .collect();
            known.sort_unstable();
            known.dedup();
            return Err(format!(
                "no module of this model is named {target:?}; its weight matrices are in {}",
                known.join(", ")
            ));
        }
        chosen.extend(hits);
    }
    chosen.sort();
    chosen.dedup();
    Ok(chosen)
}

/// Attaches Burn's LoRA adapters of rank `r` and `alpha` to the weights of the HF
/// modules that `target_modules` names (PEFT's matching), freezing every other
/// parameter. Returns the model and the adapted modules' HF names.
///
/// # Errors
/// A target that names no weight matrix of the model (its modules are listed), or a rank
/// of 0.
pub fn apply_lora<M: Module>(
    model: M,
    map: &KeyMap,
    r: usize,
    alpha: f64,
    target_modules: &[String],
) -> Result<(M, Vec<String>), String> {
    let (chosen, lora) = lora_targets(&model, map, r, alpha, target_modules)?;
    let model = model.apply_lora(lora);
    Ok((model, chosen.into_iter().map(|(_, m, _)| m).collect()))
}

/// The weights `target_modules` names and Burn's LoRA settings for them.
fn lora_targets<M: Module>(
    model: &M,
    map: &KeyMap,
    r: usize,
    alpha: f64,
    target_modules: &[String],
) -> Result<(Vec<Adapted>, Lora), String> {
    if r == 0 {
        return Err("the LoRA rank must be > 0, got 0".into());
    }
    if target_modules.is_empty() {
        return Err("no LoRA target modules given".into());
    }
    let chosen = adapted(model, map, target_modules)?;
    let group =
        ParamGroup::from_paths(chosen.iter().map(|(p, _, _)| p.clone()).collect::<Vec<_>>());
    Ok((chosen, Lora::new(r, alpha).set_param_group(group)))
}

/// [`apply_lora`] over a quantized base (QLoRA, Burn's `apply_qlora`): the adapted
/// weights are quantized as `quant` says ([`crate::quant`]'s schemes) and frozen, and
/// the adapters train in full precision beside them.
///
/// # Errors
/// As [`apply_lora`]; a backend that cannot run quantized weights of that width; a
/// block that does not divide an adapted weight's output width (the module and its
/// width named).
pub fn apply_qlora<M: Module>(
    model: M,
    map: &KeyMap,
    r: usize,
    alpha: f64,
    target_modules: &[String],
    quant: &crate::QuantOptions,
    device: &burn::tensor::Device,
) -> Result<(M, Vec<String>), String> {
    let (chosen, lora) = lora_targets(&model, map, r, alpha, target_modules)?;
    quant.check().map_err(|e| e.to_string())?;
    if let Some(block) = quant.block
        && let Some((_, module, dims)) = chosen.iter().find(|(_, _, d)| d[1] % block != 0)
    {
        return Err(format!(
            "{module} has {} outputs, not a multiple of the quantization block {block}",
            dims[1]
        ));
    }
    let scheme = crate::quant::scheme(quant, device)?;
    let mut quantizer = Quantizer::new(Calibration::MinMax, scheme);
    quantizer.set_param_group(ParamGroup::from_paths(
        chosen.iter().map(|(p, _, _)| p.clone()).collect::<Vec<_>>(),
    ));
    let model = model.apply_qlora(QLora::new(lora, quantizer));
    Ok((model, chosen.into_iter().map(|(_, m, _)| m).collect()))
}

/// Whether the tensor `name` (a checkpoint name) lies in a module that `entry` of
/// `modules_to_save` names: a module whose name is `entry` or ends in it, by components.
fn saved_by(name: &str, entry: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    (1..parts.len()).any(|n| targets(&parts[..n].join("."), entry))
}

/// PEFT's name of a factor of `module`.
fn peft_key(module: &str, factor: &str) -> String {
    format!("base_model.model.{module}.lora_{factor}.weight")
}

fn transposed(data: TensorData) -> Result<(Vec<f32>, [usize; 2]), String> {
    let dims = data.shape().to_vec();
    let [rows, cols] = dims[..] else {
        return Err(format!("a factor of shape {dims:?} is not a matrix"));
    };
    let values: Vec<f32> = data
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| format!("cannot read a factor back: {e:?}"))?;
    let mut out = vec![0.0; values.len()];
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = values[i * cols + j];
        }
    }
    Ok((out, [cols, rows]))
}

/// Writes the LoRA factors of `model` (after [`apply_lora`]) in PEFT's format to `dir`:
/// `adapter_model.safetensors` and `adapter_config.json` from `config`. The modules
/// that `config.modules_to_save` names (a classifier head trained whole) are written
/// beside the factors, in HF's layout under their checkpoint names with PEFT's prefix.
/// Both files are written under temporary names, synced, then renamed into place.
///
/// # Errors
/// A model without adapters, a `modules_to_save` of which no entry names a module of
/// the model, or a folder that cannot be written.
pub fn save_adapter<M: Module>(
    model: &M,
    map: &KeyMap,
    config: &AdapterConfig,
    dir: &std::path::Path,
) -> Result<(), CheckpointError> {
    let config_path = dir.join(CONFIG_FILE);
    let bad = |message: String| CheckpointError::Config {
        path: config_path.clone(),
        message,
    };
    let mut params = Params {
        read: vec![".lora.a", ".lora.b"],
        ..Params::default()
    };
    model.visit(&mut params);
    if params.values.is_empty() {
        return Err(bad("the model has no LoRA adapters to save".into()));
    }
    let mut tensors: Vec<Named> = Vec::new();
    for (path, data) in params.values {
        let (base, factor) = path.rsplit_once(".lora.").unwrap_or((&path, ""));
        let name = map.checkpoint_name(base);
        let module = module_of(&name).ok_or_else(|| bad(format!("{name} is not a weight")))?;
        let (values, shape) = transposed(data).map_err(bad)?;
        let factor = if factor == "a" { "A" } else { "B" };
        tensors.push((peft_key(module, factor), values, shape.to_vec()));
    }
    tensors.extend(saved_tensors(model, map, &config.saved_modules().map_err(bad)?).map_err(bad)?);
    let bytes = safetensors_bytes(&tensors);
    let text = serde_json::to_string_pretty(config).map_err(|e| bad(e.to_string()))?;
    let mut contents = vec![
        (dir.join(WEIGHTS_FILE), bytes),
        (config_path.clone(), text.into_bytes()),
    ];
    if let Some(names) = &config.labels {
        let id2label = super::id2label(names);
        let text = serde_json::to_string_pretty(&id2label).map_err(|e| bad(e.to_string()))?;
        contents.push((dir.join(LABELS_FILE), text.into_bytes()));
    }
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, e))?;
    let partials: Vec<_> = contents.iter().map(|(f, _)| partial_path(f)).collect();
    let written = contents
        .iter()
        .zip(&partials)
        .try_for_each(|((_, bytes), partial)| durable::write_synced(partial, bytes))
        .and_then(|()| {
            let renames: Vec<_> = partials
                .iter()
                .cloned()
                .zip(contents.iter().map(|(f, _)| f.clone()))
                .collect();
            durable::commit(&renames)
        });
    if let Err(e) = written {
        for p in &partials {
            std::fs::remove_file(p).ok();
        }
        return Err(CheckpointError::io(&e.path, e.source));
    }
    Ok(())
}

/// The tensors of the modules that `saved` names (`modules_to_save`), in HF's layout
/// (as [`super::save_safetensors`] writes them) under PEFT's names.
fn saved_tensors<M: Module>(
    model: &M,
    map: &KeyMap,
    saved: &[String],
) -> Result<Vec<Named>, String> {
    if saved.is_empty() {
        return Ok(Vec::new());
    }
    let snapshots = burn::store::ModuleSnapshot::collect(
        model,
        None,
        Some(Box::new(map.adapter(super::keymap::Direction::ToPytorch))),
        true,
    );
    let (named, _) = KeyMap::remapper(&map.save_patterns()).remap(snapshots);
    let mut out = Vec::new();
    for snapshot in named {
        let name = snapshot.name.clone();
        if !saved.iter().any(|entry| saved_by(&name, entry)) {
            continue;
        }
        let data = bridge::to_data(&snapshot).map_err(|e| format!("cannot read {name}: {e}"))?;
        let shape = data.shape().to_vec();
        let values = data
            .convert::<f32>()
            .try_into_vec::<f32>()
            .map_err(|e| format!("cannot read {name}: {e:?}"))?;
        out.push((format!("base_model.model.{name}"), values, shape));
    }
    // PEFT lists names for every architecture of a task (`classifier`, `score`) and
    // skips those a model lacks; a list of which none is in the model saves nothing.
    if out.is_empty() {
        return Err(format!(
            "modules_to_save names {}, none of which is a module of this model",
            saved.join(", ")
        ));
    }
    Ok(out)
}

/// Makes the parameters of the modules that `saved` names (PEFT's `modules_to_save`,
/// matched as PEFT matches them, by the ends of their checkpoint names) train again
/// after [`apply_lora`] froze them: a classifier head trained whole beside the adapter.
///
/// # Errors
/// An entry that names no module of the model, or a module that LoRA adapts (PEFT
/// adapts a module or saves it, not both).
pub fn train_saved_modules<M: Module>(
    model: M,
    map: &KeyMap,
    saved: &[String],
) -> Result<M, String> {
    let mut params = Params::default();
    model.visit(&mut params);
    let mut paths = Vec::new();
    for entry in saved {
        let mut hit = false;
        for p in &params.found {
            let name = map.checkpoint_name(&p.stored);
            if saved_by(&name, entry) {
                if p.full.contains(".lora.") {
                    return Err(format!(
                        "{entry} is adapted by LoRA and cannot also be trained whole"
                    ));
                }
                hit = true;
                paths.push(p.full.clone());
            }
        }
        if !hit {
            return Err(format!(
                "no module of this model is named {entry:?} to train whole"
            ));
        }
    }
    Ok(model.set_require_grad_group(ParamGroup::from_paths(paths), true))
}

/// A named f32 tensor to write: its name, values and shape.
type Named = (String, Vec<f32>, Vec<usize>);

/// A safetensors file of f32 tensors, named and shaped, in name order.
fn safetensors_bytes(tensors: &[Named]) -> Vec<u8> {
    let mut sorted: Vec<&Named> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut offset = 0;
    for (name, values, shape) in &sorted {
        let end = offset + values.len() * 4;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut json = Value::Object(header).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + offset);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    for (_, values, _) in sorted {
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Reads a PEFT adapter folder's config.
///
/// # Errors
/// A missing or malformed `adapter_config.json`, or an adapter the zoo cannot run
/// ([`AdapterConfig::check`]).
pub fn read_adapter_config(dir: &std::path::Path) -> Result<AdapterConfig, CheckpointError> {
    let path = dir.join(CONFIG_FILE);
    let bad = |message: String| CheckpointError::Config {
        path: path.clone(),
        message,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| CheckpointError::io(&path, e))?;
    let mut config: AdapterConfig = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    config.check().map_err(bad)?;
    let labels = dir.join(LABELS_FILE);
    if labels.is_file() {
        let text = std::fs::read_to_string(&labels).map_err(|e| CheckpointError::io(&labels, e))?;
        let id2label: BTreeMap<String, String> =
            serde_json::from_str(&text).map_err(|e| CheckpointError::Config {
                path: labels.clone(),
                message: format!("not a map of class ids to names: {e}"),
            })?;
        let names = super::class_names(&id2label).map_err(|e| CheckpointError::Config {
            path: labels.clone(),
            message: e.to_string(),
        })?;
        config.labels = Some(names);
    }
    Ok(config)
}

/// Attaches the PEFT adapter of `dir` to `model`: the weights of the modules it saves
/// whole (`modules_to_save`) in place of the model's, then Burn's LoRA on the modules
/// its config names, with the factors of its `adapter_model.safetensors`. Call
/// [`Module::materialize`] on the result to fold the adapter into the weights.
///
/// # Errors
/// See [`read_adapter_config`]; a target that names no module of the model; a weights
/// file that is missing, unreadable, lacks a factor or holds one of the wrong shape, or
/// holds tensors of no adapted module (all named).
pub fn load_adapter<M: Module>(
    model: M,
    map: &KeyMap,
    dir: &std::path::Path,
) -> Result<M, CheckpointError> {
    let config = read_adapter_config(dir)?;
    let weights = dir.join(WEIGHTS_FILE);
    let bad = |message: String| CheckpointError::Format {
        path: weights.clone(),
        message,
    };
    let targets = config.targets().map_err(|m| CheckpointError::Config {
        path: dir.join(CONFIG_FILE),
        message: m,
    })?;
    if !weights.is_file() {
        return Err(CheckpointError::io(&weights, "no such file"));
    }
    // The tensors of the modules saved whole (a classifier head) go into the base first,
    // replacing its weights.
    let saved = config
        .saved_modules()
        .map_err(|m| CheckpointError::Config {
            path: dir.join(CONFIG_FILE),
            message: m,
        })?;
    let is_saved = |key: &str| {
        key.strip_prefix("base_model.model.")
            .is_some_and(|name| saved.iter().any(|entry| saved_by(name, entry)))
    };
    let mut model = model;
    if !saved.is_empty() {
        let whole: BTreeMap<String, PackTensor> = WeightsFile::Safetensors(weights.clone())
            .tensors()?
            .into_iter()
            .filter(|(key, _)| is_saved(key))
            .map(|(key, mut tensor)| {
                let name = key["base_model.model.".len()..].to_string();
                tensor.name.clone_from(&name);
                (name, tensor)
            })
            .collect();
        if !whole.is_empty() {
            super::load::load_some(&mut model, whole, map, &weights)?;
        }
    }
    let (model, _) =
        apply_lora(model, map, config.r, config.lora_alpha, &targets).map_err(|m| {
            CheckpointError::Config {
                path: dir.join(CONFIG_FILE),
                message: m,
            }
        })?;
    let mut stored = WeightsFile::Safetensors(weights.clone()).tensors()?;
    // The factors the model now has, by path, with their shapes.
    let mut params = Params::default();
    model.visit(&mut params);
    let mut values = BTreeMap::new();
    for Found {
        stored: path, dims, ..
    } in params.found
    {
        let Some((base, factor)) = path.rsplit_once(".lora.") else {
            continue;
        };
        let name = map.checkpoint_name(base);
        let module = module_of(&name).unwrap_or(&name).to_string();
        let key = peft_key(&module, if factor == "a" { "A" } else { "B" });
        let tensor = stored
            .remove(&key)
            .ok_or_else(|| bad(format!("no tensor {key}, which the config's targets need")))?;
        let want = [dims[1], dims[0]];
        if tensor.shape.to_vec() != want {
            return Err(bad(format!(
                "{key} has shape {:?}; rank {} over this module needs {want:?}",
                tensor.shape.to_vec(),
                config.r
            )));
        }
        let data = bridge::to_data(&tensor).map_err(|e| bad(format!("{key}: {e}")))?;
        let (flat, shape) = transposed(data).map_err(bad)?;
        values.insert(path, TensorData::new(flat, shape));
    }
    stored.retain(|key, _| !is_saved(key));
    if let Some(extra) = stored.keys().next() {
        return Err(bad(format!(
            "{extra} belongs to no module the config's target_modules name ({} tensors left \
             over)",
            stored.len()
        )));
    }
    Ok(model.map(&mut SetValues {
        path: Path::default(),
        values,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_bytes_read_back_through_burn_store() {
        let dir = std::env::temp_dir().join(format!("zoo-peft-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.safetensors");
        let bytes = safetensors_bytes(&[
            ("z".into(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![2, 3]),
            ("a".into(), vec![7.0, 8.0], vec![2]),
        ]);
        std::fs::write(&path, bytes).unwrap();
        let mut store = burn::store::SafetensorsStore::from_file(&path);
        let tensors = burn::store::ModuleStore::get_all_tensors(&mut store).unwrap();
        let z = bridge::to_data(&tensors["z"]).unwrap();
        assert_eq!(z.shape().to_vec(), [2, 3]);
        assert_eq!(
            z.try_to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        let a = bridge::to_data(&tensors["a"]).unwrap();
        assert_eq!(a.shape().to_vec(), [2]);
        assert_eq!(a.try_to_vec::<f32>().unwrap(), [7.0, 8.0]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn transposes_factors() {
        let (v, s) = transposed(TensorData::new(vec![1f32, 2., 3., 4., 5., 6.], [2, 3])).unwrap();
        assert_eq!(s, [3, 2]);
        assert_eq!(v, [1., 4., 2., 5., 3., 6.]);
    }

    #[test]
    fn targets_match_whole_names_or_their_ends() {
        assert!(targets("model.layers.0.self_attn.q_proj", "q_proj"));
        assert!(targets("q_proj", "q_proj"));
        assert!(!targets("model.layers.0.self_attn.xq_proj", "q_proj"));
        assert!(targets(
            "model.layers.0.self_attn.q_proj",
            "self_attn.q_proj"
        ));
    }

    #[test]
    fn unsupported_settings_are_named() {
        let mut c = AdapterConfig::lora(4, 8.0, &["q_proj".into()], "CAUSAL_LM");
        assert!(c.check().is_ok());
        c.use_dora = true;
        assert_eq!(c.check().unwrap_err(), "use_dora is not supported");
        c.use_dora = false;
        c.target_modules = Value::from("all-linear");
        assert_eq!(
            c.check().unwrap_err(),
            "target_modules \"all-linear\" is not supported: give a list of module names"
        );
        let json = r#"{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["c_attn"],
            "layers_to_transform": null, "rank_pattern": {}, "modules_to_save": null,
            "revision": null, "megatron_config": null}"#;
        let c: AdapterConfig = serde_json::from_str(json).unwrap();
        assert!(c.check().is_ok());
        assert!(c.other.contains_key("revision"));
    }
}
