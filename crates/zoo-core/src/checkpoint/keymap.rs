//! How a family's checkpoint names relate to its module paths: name templates read
//! both ways, the base model's prefix, a member's dialect, and the weights stored
//! `[in, out]` already.

use burn::store::{
    BurnToPyTorchAdapter, KeyRemapper, ModuleAdapter, ModuleContext, PyTorchToBurnAdapter, bridge,
};
use burn::tensor::{Shape, TensorData};

use super::PackTensor;

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
    /// Regexes over module paths of parameters that the checkpoint stores as 0-dim
    /// tensors (CLIP's `logit_scale`): Burn holds them as `[1]`, so they are reshaped on
    /// the way in and back on the way out.
    pub scalars: Vec<String>,
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
    pub(super) fn load_patterns(&self) -> Vec<(String, String)> {
        self.dialect
            .iter()
            .map(|(theirs, ours)| (format!("^{}", regex::escape(theirs)), ours.clone()))
            .chain(self.aliases.iter().cloned())
            .chain(self.name_rules(true))
            .collect()
    }

    /// The save patterns: [`Self::names`], Burn's norm parameters under PyTorch's names
    /// (`gamma` and `beta` are `weight` and `bias`), then the dialect's backwards.
    pub(super) fn save_patterns(&self) -> Vec<(String, String)> {
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

    /// Holds the 0-dim tensors whose module paths match `pattern` as `[1]`.
    pub fn scalars(mut self, pattern: &str) -> Self {
        self.scalars.push(pattern.into());
        self
    }

    pub(super) fn adapter(&self, direction: Direction) -> HfAdapter {
        let regexes = |patterns: &[String]| {
            patterns
                .iter()
                .map(|p| regex::Regex::new(p).expect("a family's key map has a bad regex"))
                .collect()
        };
        HfAdapter {
            untransposed: regexes(&self.untransposed),
            scalars: regexes(&self.scalars),
            direction,
        }
    }

    pub(super) fn remapper(pairs: &[(String, String)]) -> KeyRemapper {
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
pub(super) enum Direction {
    ToBurn,
    ToPytorch,
}

/// burn-store's PyTorch adapters (a `Linear` weight transposed, norm parameters renamed),
/// except for the weights a [`KeyMap`] names as stored `[in, out]` already.
#[derive(Debug, Clone)]
pub(super) struct HfAdapter {
    untransposed: Vec<regex::Regex>,
    scalars: Vec<regex::Regex>,
    direction: Direction,
}

impl HfAdapter {
    /// Whether it transposes `tensor`, a `Linear` weight in `ctx` as it comes from the
    /// file: loading, for a weight that the key map does not name as stored `[in, out]`.
    pub(super) fn transposes_linear_weight(
        &self,
        tensor: &PackTensor,
        ctx: &ModuleContext<'_>,
    ) -> bool {
        matches!(self.direction, Direction::ToBurn)
            && ctx.module_type() == Some("Struct:Linear")
            && tensor.name.ends_with(".weight")
            && tensor.shape.num_dims() == 2
            && !self.scalars.iter().any(|re| re.is_match(&tensor.name))
            && !self.untransposed.iter().any(|re| re.is_match(&tensor.name))
    }
}

impl ModuleAdapter for HfAdapter {
    fn adapt(&self, tensor: PackTensor, ctx: ModuleContext<'_>) -> PackTensor {
        // `tensor.name` is the module path here.
        if self.scalars.iter().any(|re| re.is_match(&tensor.name)) {
            let (from, to): (&[usize], &[usize]) = match self.direction {
                Direction::ToBurn => (&[], &[1]),
                Direction::ToPytorch => (&[1], &[]),
            };
            if tensor.shape.to_vec() != from {
                return tensor;
            }
            let (name, dtype, shape) =
                (tensor.name.clone(), tensor.dtype, Shape::from(to.to_vec()));
            let target = to.to_vec();
            return bridge::map_data(tensor, name, dtype, shape, move |data: TensorData| {
                TensorData::from_bytes_vec(data.as_bytes().to_vec(), target.clone(), data.dtype())
            });
        }
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
