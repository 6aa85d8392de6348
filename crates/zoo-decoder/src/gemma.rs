//! Gemma (Gemma Team, 2024, "Gemma: Open Models Based on Gemini Research and
//! Technology"), as HF's `models/gemma/modeling_gemma.py` runs it: a Llama-style decoder
//! with these differences:
//! - RMSNorm scaled by `1 + weight` ([`zoo_attention::OffsetRmsNorm`]; the stored weight
//!   starts at 0);
//! - token embeddings multiplied by `sqrt(hidden_size)` before the first layer;
//! - a GeGLU MLP with tanh-approximated GELU (`gelu_pytorch_tanh`; the legacy `gelu` of
//!   the released configs means the same, as in `transformers`);
//! - a `head_dim` free of the width (256 in the released models), multi-query attention
//!   in Gemma-2B (one key/value head), and a head tied to the embedding by default.
//!
//! Its checkpoint names are exactly the Llama family's.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zoo_attention::{FfnActivation, HiddenAct, NormKind};
use zoo_core::ConfigError;
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::hf::{DecoderSpec, SpecialTokens, llama_key_map, unsupported};
use crate::layer::LayerKind;
use crate::pretrained::LlamaConfig;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "gemma";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "GemmaForCausalLM";

/// HF's `GemmaConfig`: the fields of a [`LlamaConfig`], with a tied head unless the file
/// unties it, `hidden_act` (or `hidden_activation`, kept in `other`) defaulting to
/// `gelu_pytorch_tanh`, and `use_bidirectional_attention` (in `other`) refused when true.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GemmaConfig(pub LlamaConfig);

impl DecoderSpec for GemmaConfig {
    fn tokens(&self) -> &SpecialTokens {
        &self.0.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&[])
    }

    /// A gate non-linearity other than GELU, or bidirectional attention, is an error.
    fn decoder(&self) -> Result<DecoderConfig> {
        gemma_decoder(&self.0)
    }
}

/// The decoder of a Gemma config (and the base of Gemma 2's and 3's): a gate other than
/// GELU, or bidirectional attention, is an error.
pub(crate) fn gemma_decoder(c: &LlamaConfig) -> Result<DecoderConfig> {
    let named = c
        .other
        .get("hidden_activation")
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value::<HiddenAct>(v.clone()))
        .transpose()
        .map_err(|e| unsupported("hidden_activation", e, "a GELU is"))?;
    let act = named.or(c.hidden_act).unwrap_or(HiddenAct::GeluTanh);
    if !matches!(act, HiddenAct::GeluTanh | HiddenAct::Gelu) {
        return Err(unsupported(
            "hidden_activation",
            format!("{act:?}"),
            "Gemma's gated MLP takes gelu_pytorch_tanh (or the legacy gelu)",
        ));
    }
    if c.other.get("use_bidirectional_attention") == Some(&Value::Bool(true)) {
        return Err(unsupported(
            "use_bidirectional_attention",
            true,
            "a causal LM attends causally; only false or null is",
        ));
    }
    Ok(c.sizes
        .llama_style(&c.rope, c.rms_norm_eps)?
        .with_norm(NormKind::OffsetRmsNorm)
        .with_activation(FfnActivation::GeGlu)
        .with_qkv_bias(Some(c.attention_bias))
        .with_out_bias(Some(c.attention_bias))
        .with_mlp_bias(Some(c.mlp_bias))
        .with_scale_embeddings(true)
        .with_tie_embeddings(c.sizes.tied(true)))
}

/// The names of the four norms of a Gemma 2 or 3 layer, read before the Llama family's
/// (whose `post_attention_layernorm` is the norm before the MLP).
pub(crate) const SANDWICH_NAMES: [(&str, &str); 3] = [
    (
        "model.layers.{n}.post_attention_layernorm.",
        "layers.{n}.post_attn_norm.",
    ),
    (
        "model.layers.{n}.pre_feedforward_layernorm.",
        "layers.{n}.norm_2.",
    ),
    (
        "model.layers.{n}.post_feedforward_layernorm.",
        "layers.{n}.post_mlp_norm.",
    ),
];

/// What Gemma 2 and 3 set apart from Gemma, each with its version's default.
pub(crate) struct LaterGemma {
    /// A local layer every `pattern` layers is global (HF's layer `i` slides unless
    /// `(i + 1) % pattern == 0`), when the file has no `layer_types`.
    pub pattern: usize,
    /// `attn_logit_softcapping` when the file does not name it.
    pub attn_softcap: Option<f64>,
    /// `final_logit_softcapping` when the file does not name it.
    pub final_softcap: Option<f64>,
}

impl LaterGemma {
    /// Gemma's decoder with four norms per layer, local and global layers, the scores
    /// scaled by `query_pre_attn_scalar^-1/2` (256 by default), and the soft caps.
    ///
    /// # Errors
    /// As [`gemma_decoder`], and a layer type other than `sliding_attention` or
    /// `full_attention`, a `layer_types` of the wrong length, or a number that is not one.
    pub(crate) fn decoder(&self, c: &LlamaConfig) -> Result<DecoderConfig> {
        let scalar = number(c, "query_pre_attn_scalar")?
            .flatten()
            .unwrap_or(256.0);
        if !(scalar.is_finite() && scalar > 0.0) {
            return Err(ConfigError::range("query_pre_attn_scalar", "> 0", scalar).into());
        }
        let cap = |name: &str, default: Option<f64>| -> Result<Option<f64>> {
            Ok(number(c, name)?.unwrap_or(default))
        };
        Ok(gemma_decoder(c)?
            .with_layer(LayerKind::Sandwich)
            .with_attn_scale(Some(1.0 / scalar.sqrt()))
            .with_attn_softcap(cap("attn_logit_softcapping", self.attn_softcap)?)
            .with_final_softcap(cap("final_logit_softcapping", self.final_softcap)?)
            .with_sliding_window(c.sliding_window)
            .with_sliding_layers(self.sliding_layers(c)?))
    }

    /// Whether each layer slides: `layer_types` when the file has it, else the pattern
    /// (Gemma 3's files may give it as `sliding_window_pattern`).
    fn sliding_layers(&self, c: &LlamaConfig) -> Result<Vec<bool>> {
        let layers = c.sizes.num_hidden_layers;
        let Some(types) = c.other.get("layer_types").filter(|v| !v.is_null()) else {
            // transformers writes the pattern as `_sliding_window_pattern`.
            let pattern = ["sliding_window_pattern", "_sliding_window_pattern"]
                .iter()
                .find_map(|name| c.other.get(*name).and_then(Value::as_u64))
                .map_or(self.pattern, |p| p as usize)
                .max(1);
            return Ok((0..layers).map(|i| (i + 1) % pattern != 0).collect());
        };
        let types: Vec<String> = serde_json::from_value(types.clone())
            .map_err(|e| unsupported("layer_types", e, "a list of layer type names is"))?;
        if types.len() != layers {
            return Err(ConfigError::conflict(format!(
                "layer_types names {} layers, num_hidden_layers is {layers}",
                types.len()
            ))
            .into());
        }
        types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(unsupported(
                    "layer_types",
                    format!("{other:?}"),
                    "sliding_attention and full_attention are",
                )),
            })
            .collect()
    }
}

/// The number `name` of the file's other fields: `None` when absent, `Some(None)` when
/// `null`.
fn number(c: &LlamaConfig, name: &str) -> Result<Option<Option<f64>>> {
    match c.other.get(name) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(v) => v
            .as_f64()
            .map(|x| Some(Some(x)))
            .ok_or_else(|| unsupported(name, v, "a number or null is")),
    }
}
