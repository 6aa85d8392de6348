//! The `config.json` fields that many decoder architectures share, each group written
//! once with HF's names and flattened into every architecture's config:
//! - [`RotarySizes`]: the sizes of a Llama-shaped decoder;
//! - [`RopeFields`]: the RoPE base and scaling, in the old form (`rope_theta`,
//!   `rope_scaling`) and the new (`rope_parameters`);
//! - [`SpecialTokens`]: the start and end tokens.
//!
//! None of these groups flattens another: serde hands a field to one flattened group
//! only when the group is a plain struct, so each architecture's `other` map (last in
//! its struct) keeps exactly the fields that no group took.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zoo_attention::{RopeLayout, RopeScaling};
use zoo_core::ConfigError;
use zoo_core::checkpoint::{KeyMap, TokenIds};

use crate::config::{DecoderConfig, PositionKind};
use crate::error::{DecoderError, Result};

/// What the family needs of each architecture's `config.json` type: the one trait a new
/// architecture implements, beside its row in the registry.
pub trait DecoderSpec {
    /// The zoo's configuration of the same model.
    ///
    /// # Errors
    /// A setting the zoo does not implement.
    fn decoder(&self) -> Result<DecoderConfig>;
    /// The start and end tokens.
    fn tokens(&self) -> &SpecialTokens;
    /// The checkpoint's names, both ways (a tied head's copy is ignored by the caller).
    fn key_map(&self) -> KeyMap;
}

/// Llama's names and module paths, which Mistral, Qwen2/3, Phi-3 and Gemma share.
pub(crate) const LLAMA_NAMES: [(&str, &str); 5] = [
    ("model.embed_tokens.", "wte."),
    ("model.layers.{n}.input_layernorm.", "layers.{n}.norm_1."),
    (
        "model.layers.{n}.post_attention_layernorm.",
        "layers.{n}.norm_2.",
    ),
    ("model.layers.", "layers."),
    ("model.norm.", "norm_f."),
];

/// The Llama family's name map, with `first` read before [`LLAMA_NAMES`] (names that
/// its general `model.layers.` rule would map otherwise), and RoPE's cached
/// frequencies, which older files keep, ignored.
pub(crate) fn llama_key_map(first: &[(&str, &str)]) -> KeyMap {
    KeyMap::new()
        .names(first)
        .names(&LLAMA_NAMES)
        .ignore(r"\.rotary_emb\.inv_freq$")
}

/// A checkpoint setting the zoo does not implement: its name, its value, and what is.
pub(crate) fn unsupported(
    name: &str,
    value: impl std::fmt::Display,
    supported: &str,
) -> DecoderError {
    ConfigError::unsupported(name, value, supported).into()
}

/// The sizes of a Llama-shaped decoder (Llama, Mistral, Qwen2, Phi-3, GPT-NeoX).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RotarySizes {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width (each half of a fused `gate_up_proj`).
    pub intermediate_size: usize,
    /// Number of blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA); absent or `null` means as many as the query heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<usize>,
    /// Width of one head; absent or `null` means `hidden_size / num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Longest sequence.
    pub max_position_embeddings: usize,
    /// The LM head is the token embedding. Default: the architecture's (false for most;
    /// see [`Self::tied`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie_word_embeddings: Option<bool>,
}

impl RotarySizes {
    /// Whether the head is the embedding: as the config says, else `default`.
    pub fn tied(&self, default: bool) -> bool {
        self.tie_word_embeddings.unwrap_or(default)
    }

    /// A decoder of these sizes (an untied head unless the config ties it), with
    /// everything else at [`DecoderConfig::new`]'s
    /// defaults (the caller picks the blocks).
    pub fn decoder(&self) -> DecoderConfig {
        self.sized(self.base())
    }

    /// A decoder of these sizes with the Llama family's blocks
    /// ([`DecoderConfig::llama_style`]: RMSNorm of epsilon `eps`, SwiGLU, no biases) and
    /// `rope`'s rotary positions.
    ///
    /// # Errors
    /// As [`RopeFields::resolve`].
    pub fn llama_style(&self, rope: &RopeFields, eps: f64) -> Result<DecoderConfig> {
        let cfg = self.sized(self.base().llama_style()).with_norm_eps(eps);
        rope.apply(cfg, None)
    }

    fn base(&self) -> DecoderConfig {
        DecoderConfig::new(
            self.vocab_size,
            self.hidden_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.max_position_embeddings,
        )
    }

    /// `cfg` with the sizes that its constructor does not take.
    fn sized(&self, cfg: DecoderConfig) -> DecoderConfig {
        cfg.with_n_kv_heads(Some(
            self.num_key_value_heads.unwrap_or(self.num_attention_heads),
        ))
        .with_head_dim(self.head_dim)
        .with_d_ff(Some(self.intermediate_size))
        .with_tie_embeddings(self.tied(false))
    }
}

/// The `rope_parameters` object of recent `transformers` configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeParameters {
    /// `default`, `linear`, `dynamic`, `llama3`, `yarn` or `longrope`; other types are
    /// refused by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_type: Option<String>,
    /// The frequency base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// Every other field.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The RoPE fields of a `config.json`, old and new.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RopeFields {
    /// The RoPE base of older configs. Default: 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// The RoPE settings of recent configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<RopeParameters>,
    /// RoPE scaling of older configs: `null` or a type and its settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<Value>,
    /// The context of pretraining, beside the RoPE settings (Phi-3 keeps it there); it
    /// takes precedence over the one inside them, as in `transformers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<usize>,
}

impl RopeFields {
    /// A number of `rope_parameters` other than its type and base
    /// (`partial_rotary_factor`, ...).
    pub fn parameter(&self, name: &str) -> Option<f64> {
        self.rope_parameters
            .as_ref()
            .and_then(|p| p.other.get(name))
            .and_then(Value::as_f64)
    }

    /// The RoPE base and scaling: the type and its settings from `rope_parameters`
    /// (recent configs) or `rope_scaling` (older ones); the base from `rope_parameters`,
    /// else `rope_theta`, else `old_theta` (an architecture's own older name for it),
    /// else 10000. `max_positions` is the config's `max_position_embeddings`, which
    /// stands for an original context that the settings do not name (and for YaRN's and
    /// LongRoPE's factor when they give none), as `transformers` reads them.
    ///
    /// # Errors
    /// A RoPE type the zoo does not implement (it implements `default`, `linear`,
    /// `dynamic`, `llama3`, `yarn` and `longrope`), or a scaling without its settings or
    /// with settings out of range.
    pub fn resolve(
        &self,
        old_theta: Option<f64>,
        max_positions: usize,
    ) -> Result<(f64, RopeScaling)> {
        let parameters = self.rope_parameters.as_ref();
        let spec = match parameters.and_then(|p| named(p.rope_type.as_deref())) {
            Some(kind) => Some(("rope_parameters", kind, parameters.map(|p| &p.other))),
            None => self
                .rope_scaling
                .as_ref()
                .and_then(Value::as_object)
                .and_then(|s| {
                    let kind = s.get("rope_type").or_else(|| s.get("type"))?.as_str();
                    named(kind).map(|k| ("rope_scaling", k, Some(s)))
                }),
        };
        let scaling = match spec {
            None => RopeScaling::None,
            Some((place, kind, fields)) => {
                let settings = Settings {
                    place,
                    kind,
                    fields,
                    original: self.original_max_position_embeddings,
                    max_positions,
                };
                settings.scaling()?
            }
        };
        scaling.validate()?;
        let theta = parameters
            .and_then(|p| p.rope_theta)
            .or(self.rope_theta)
            .or(old_theta)
            .unwrap_or(10000.0);
        Ok((theta, scaling))
    }

    /// `cfg` with half-split rotary positions of [`Self::resolve`]'s base and scaling
    /// (`cfg.max_len` the config's `max_position_embeddings`).
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub fn apply(&self, cfg: DecoderConfig, old_theta: Option<f64>) -> Result<DecoderConfig> {
        let (theta, scaling) = self.resolve(old_theta, cfg.max_len)?;
        Ok(cfg
            .with_positions(PositionKind::Rope {
                theta,
                layout: RopeLayout::HalfSplit,
            })
            .with_rope_scaling(scaling))
    }
}

/// A RoPE type other than the default.
fn named(kind: Option<&str>) -> Option<&str> {
    kind.filter(|t| *t != "default")
}

/// The settings of one RoPE scaling, where they were read, and the config's lengths.
struct Settings<'a> {
    /// `rope_parameters` or `rope_scaling`, for errors.
    place: &'a str,
    kind: &'a str,
    fields: Option<&'a Map<String, Value>>,
    /// The original context named beside the settings.
    original: Option<usize>,
    max_positions: usize,
}

impl Settings<'_> {
    fn field(&self, name: &str) -> Option<&Value> {
        self.fields
            .and_then(|f| f.get(name))
            .filter(|v| !v.is_null())
    }

    fn missing(&self, name: &str, what: &str) -> DecoderError {
        ConfigError::conflict(format!(
            "{} of type {:?} has no {what} {name}",
            self.place, self.kind
        ))
        .into()
    }

    /// A number that may be absent (or `null`).
    fn optional(&self, name: &str) -> Result<Option<f64>> {
        self.field(name)
            .map(|v| v.as_f64().ok_or_else(|| self.missing(name, "number")))
            .transpose()
    }

    fn number(&self, name: &str) -> Result<f64> {
        self.optional(name)?
            .ok_or_else(|| self.missing(name, "number"))
    }

    fn list(&self, name: &str) -> Result<Vec<f64>> {
        self.field(name)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| self.missing(name, "list of numbers"))
    }

    /// The original context: beside the settings, else inside them, else
    /// `max_position_embeddings`.
    fn original(&self) -> Result<usize> {
        let inside = self.optional("original_max_position_embeddings")?;
        Ok(self
            .original
            .or(inside.map(|n| n as usize))
            .unwrap_or(self.max_positions))
    }

    /// The stretch of YaRN and LongRoPE: the settings', else the ratio of the context to
    /// the original one.
    fn factor_or_ratio(&self, original: usize) -> Result<f64> {
        Ok(self
            .optional("factor")?
            .unwrap_or(self.max_positions as f64 / original.max(1) as f64))
    }

    fn scaling(&self) -> Result<RopeScaling> {
        Ok(match self.kind {
            "linear" => RopeScaling::Linear {
                factor: self.number("factor")?,
            },
            "dynamic" => RopeScaling::Dynamic {
                factor: self.number("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: self.number("factor")?,
                low_freq_factor: self.number("low_freq_factor")?,
                high_freq_factor: self.number("high_freq_factor")?,
                original_max_position_embeddings: self.original()?,
            },
            "yarn" => {
                let original = self.original()?;
                let factor = self.factor_or_ratio(original)?;
                // HF's default: 0.1 ln(s) + 1 (1 for s <= 1), or the ratio of two such
                // terms scaled by mscale and mscale_all_dim when both are given.
                let mscale = |scale: f64, m: f64| {
                    if scale <= 1.0 {
                        1.0
                    } else {
                        0.1 * m * scale.ln() + 1.0
                    }
                };
                let given = |name: &str| -> Result<Option<f64>> {
                    Ok(self.optional(name)?.filter(|&v| v != 0.0))
                };
                let attention_factor = match self.optional("attention_factor")? {
                    Some(a) => a,
                    None => match (given("mscale")?, given("mscale_all_dim")?) {
                        (Some(m), Some(all)) => mscale(factor, m) / mscale(factor, all),
                        _ => mscale(factor, 1.0),
                    },
                };
                let truncate = match self.field("truncate") {
                    None => true,
                    Some(v) => v
                        .as_bool()
                        .ok_or_else(|| self.missing("truncate", "true or false"))?,
                };
                RopeScaling::Yarn {
                    factor,
                    original_max_position_embeddings: original,
                    beta_fast: given("beta_fast")?.unwrap_or(32.0),
                    beta_slow: given("beta_slow")?.unwrap_or(1.0),
                    truncate,
                    attention_factor,
                }
            }
            "longrope" => {
                let original = self.original()?;
                let factor = self.factor_or_ratio(original)?;
                let attention_factor = match self.optional("attention_factor")? {
                    Some(a) => a,
                    None if factor <= 1.0 => 1.0,
                    None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
                };
                RopeScaling::LongRope {
                    short_factor: self.list("short_factor")?,
                    long_factor: self.list("long_factor")?,
                    original_max_position_embeddings: original,
                    attention_factor,
                }
            }
            other => {
                return Err(unsupported(
                    &format!("{}.rope_type", self.place),
                    format!("{other:?}"),
                    "default, linear, dynamic, llama3, yarn and longrope are",
                ));
            }
        })
    }
}

/// The start and end tokens of a `config.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecialTokens {
    /// Start-of-text token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<usize>,
    /// End-of-text token(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<TokenIds>,
}

/// The decoder of a `T` config read from `base` with `extra`'s fields set over it: what
/// each architecture's tests build their cases from.
#[cfg(test)]
pub(crate) fn decoder_of<T: DecoderSpec + serde::de::DeserializeOwned>(
    mut base: Value,
    extra: Value,
) -> Result<DecoderConfig> {
    for (k, v) in extra.as_object().expect("extra fields are an object") {
        base[k] = v.clone();
    }
    serde_json::from_value::<T>(base)
        .expect("a test config parses")
        .decoder()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize)]
    struct Flat {
        #[serde(flatten)]
        sizes: RotarySizes,
        #[serde(flatten)]
        rope: RopeFields,
        #[serde(flatten)]
        tokens: SpecialTokens,
        #[serde(flatten)]
        other: Map<String, Value>,
    }

    #[test]
    fn each_field_lands_in_one_group_and_saves_once() {
        let json = serde_json::json!({
            "vocab_size": 50, "hidden_size": 32, "intermediate_size": 40,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 16, "rope_theta": 300.0, "eos_token_id": [1, 2],
            "initializer_range": 0.02,
        });
        let flat: Flat = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(flat.sizes.num_key_value_heads, Some(2));
        assert_eq!(flat.rope.rope_theta, Some(300.0));
        assert_eq!(
            flat.tokens.eos_token_id.as_ref().map(TokenIds::ids),
            Some(vec![1, 2])
        );
        assert_eq!(flat.other.keys().collect::<Vec<_>>(), ["initializer_range"]);
        assert_eq!(serde_json::to_value(&flat).unwrap(), json);
    }

    #[test]
    fn the_base_comes_from_the_newest_place() {
        let fields = |json: Value| serde_json::from_value::<RopeFields>(json).unwrap();
        let theta = |f: RopeFields, old| f.resolve(old, 16).unwrap().0;
        assert_eq!(theta(fields(serde_json::json!({})), None), 10000.0);
        assert_eq!(theta(fields(serde_json::json!({})), Some(500.0)), 500.0);
        let both = fields(serde_json::json!({"rope_theta": 300.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 700.0}}));
        assert_eq!(theta(both.clone(), Some(500.0)), 700.0);
        assert_eq!(both.parameter("partial_rotary_factor"), None);
        let e = fields(serde_json::json!({"rope_scaling": {"type": "linear"}}))
            .resolve(None, 16)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rope_scaling of type \"linear\" has no number factor"),
            "{e}"
        );
    }
}
