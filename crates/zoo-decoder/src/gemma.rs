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
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::hf::{DecoderSpec, SpecialTokens, llama_key_map, unsupported};
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
        let c = &self.0;
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
}
