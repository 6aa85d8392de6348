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
use serde_json::{Map, Value};
use zoo_attention::{FfnActivation, HiddenAct, NormKind};

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::hf::{DecoderSpec, RopeFields, RotarySizes, SpecialTokens, llama_key_map, unsupported};
use zoo_core::checkpoint::KeyMap;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "gemma";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "GemmaForCausalLM";

fn eps_1e6() -> f64 {
    1e-6
}

/// HF's `GemmaConfig`, with its field names. Fields the zoo does not use are kept in
/// `other` and written back on saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmaConfig {
    /// The sizes; `tie_word_embeddings` defaults to true for Gemma.
    #[serde(flatten)]
    pub sizes: RotarySizes,
    /// The MLP's gate non-linearity. Default: `gelu_pytorch_tanh`; `gelu` is read as it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_act: Option<HiddenAct>,
    /// The same, under the name some configs use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_activation: Option<HiddenAct>,
    /// RMSNorm epsilon. Default: 1e-6.
    #[serde(default = "eps_1e6")]
    pub rms_norm_eps: f64,
    /// The RoPE base and scaling.
    #[serde(flatten)]
    pub rope: RopeFields,
    /// Biases on Q, K, V and O. Default: false.
    #[serde(default)]
    pub attention_bias: bool,
    /// The start and end tokens.
    #[serde(flatten)]
    pub tokens: SpecialTokens,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl DecoderSpec for GemmaConfig {
    fn tokens(&self) -> &SpecialTokens {
        &self.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&[])
    }

    /// A gate non-linearity other than GELU is an error.
    fn decoder(&self) -> Result<DecoderConfig> {
        let act = self
            .hidden_activation
            .or(self.hidden_act)
            .unwrap_or(HiddenAct::GeluTanh);
        if !matches!(act, HiddenAct::GeluTanh | HiddenAct::Gelu) {
            return Err(unsupported(
                "hidden_activation",
                format!("{act:?}"),
                "Gemma's gated MLP takes gelu_pytorch_tanh (or the legacy gelu)",
            ));
        }
        if self.other.get("use_bidirectional_attention") == Some(&Value::Bool(true)) {
            return Err(unsupported(
                "use_bidirectional_attention",
                true,
                "a causal LM attends causally; only false or null is",
            ));
        }
        Ok(self
            .sizes
            .llama_style(&self.rope, self.rms_norm_eps)?
            .with_norm(NormKind::OffsetRmsNorm)
            .with_activation(FfnActivation::GeGlu)
            .with_qkv_bias(Some(self.attention_bias))
            .with_out_bias(Some(self.attention_bias))
            .with_scale_embeddings(true)
            .with_tie_embeddings(self.sizes.tied(true)))
    }
}
