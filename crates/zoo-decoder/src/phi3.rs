//! Phi-3 (Abdin et al., 2024, "Phi-3 Technical Report"), as HF's
//! `models/phi3/modeling_phi3.py` runs it: a Llama-style pre-norm decoder (RMSNorm, RoPE,
//! SwiGLU, grouped-query attention, no biases, an untied head) whose Q, K and V come
//! from one fused `qkv_proj` (`[q | k | v]`, `H·Dh + 2·Hkv·Dh` wide) and whose MLP's gate
//! and up projections are one fused `gate_up_proj` (`[gate | up]`, `2·d_ff` wide).
//!
//! Its checkpoint names are the Llama family's, with the fused projections under their
//! own names, so it loads and saves through the Llama name table:
//!
//! | HF name | module path |
//! |---|---|
//! | `model.embed_tokens` | `wte` |
//! | `model.layers.N.input_layernorm` | `layers.N.norm_1` |
//! | `model.layers.N.self_attn.qkv_proj` | `layers.N.self_attn.qkv_proj` |
//! | `model.layers.N.self_attn.o_proj` | `layers.N.self_attn.o_proj` |
//! | `model.layers.N.post_attention_layernorm` | `layers.N.norm_2` |
//! | `model.layers.N.mlp.gate_up_proj` | `layers.N.mlp.gate_up_proj` |
//! | `model.layers.N.mlp.down_proj` | `layers.N.mlp.down_proj` |
//! | `model.norm` | `norm_f` |
//! | `lm_head` | `lm_head` |
//!
//! Not implemented, and refused by name: `partial_rotary_factor` below 1 and the
//! `longrope` scaling of the 128k-context checkpoints (`linear` and `llama3` scalings
//! load, as for every RoPE decoder).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zoo_attention::{FfnActivation, GateLayout, HiddenAct, RopeLayout};
use zoo_core::checkpoint::TokenIds;

use crate::config::{DecoderConfig, PositionKind};
use crate::error::Result;
use crate::pretrained::{RopeParameters, rope, unsupported};

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "phi3";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "Phi3ForCausalLM";

fn silu() -> HiddenAct {
    HiddenAct::Silu
}

fn eps_1e5() -> f64 {
    1e-5
}

/// HF's `Phi3Config`, with its field names. Fields the zoo does not use (the dropouts,
/// `original_max_position_embeddings`, ...) are kept in `other` and written back on
/// saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phi3Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width (each half of `gate_up_proj`).
    pub intermediate_size: usize,
    /// Number of blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA, as Phi-3-medium); `null` means as many as the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Width of one head; `null` means `hidden_size / num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Gate non-linearity. Default: `silu`.
    #[serde(default = "silu")]
    pub hidden_act: HiddenAct,
    /// Longest sequence.
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon. Default: 1e-5.
    #[serde(default = "eps_1e5")]
    pub rms_norm_eps: f64,
    /// The LM head is the token embedding. Default: false.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// The RoPE base of older configs. Default: 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// The RoPE settings of recent configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<RopeParameters>,
    /// RoPE scaling: `null`, `default`, `linear` or `llama3` (`longrope`, on the 128k
    /// checkpoints, is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<Value>,
    /// The share of each head that is rotated (older configs; recent ones put it in
    /// `rope_parameters`); only 1 is implemented. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// Each position sees this many, itself included (Phi-3-mini-4k: 2047).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Start-of-text token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<usize>,
    /// End-of-text token(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<TokenIds>,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Phi3Config {
    /// The zoo's configuration of the same model.
    ///
    /// # Errors
    /// A setting the zoo does not implement.
    pub fn decoder(&self) -> Result<DecoderConfig> {
        let partial = self
            .rope_parameters
            .as_ref()
            .and_then(|p| p.other.get("partial_rotary_factor"))
            .and_then(Value::as_f64)
            .or(self.partial_rotary_factor)
            .unwrap_or(1.0);
        if partial != 1.0 {
            return Err(unsupported(
                "partial_rotary_factor",
                partial,
                "only 1, every feature rotated, is",
            ));
        }
        if self.hidden_act != HiddenAct::Silu {
            return Err(unsupported(
                "hidden_act",
                format!("{:?}", self.hidden_act),
                "Phi-3's gated MLP takes silu",
            ));
        }
        let (theta, scaling) = rope(
            self.rope_parameters.as_ref(),
            self.rope_scaling.as_ref(),
            self.rope_theta,
        )?;
        Ok(DecoderConfig::new(
            self.vocab_size,
            self.hidden_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.max_position_embeddings,
        )
        .llama_style()
        .with_n_kv_heads(Some(
            self.num_key_value_heads.unwrap_or(self.num_attention_heads),
        ))
        .with_head_dim(self.head_dim)
        .with_d_ff(Some(self.intermediate_size))
        .with_activation(FfnActivation::SwiGlu)
        .with_gate_layout(GateLayout::Fused)
        .with_fused_qkv(true)
        .with_positions(PositionKind::Rope {
            theta,
            layout: RopeLayout::HalfSplit,
        })
        .with_norm_eps(self.rms_norm_eps)
        .with_tie_embeddings(self.tie_word_embeddings)
        .with_sliding_window(self.sliding_window)
        .with_rope_scaling(scaling))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> Result<DecoderConfig> {
        let mut json = serde_json::json!({
            "model_type": "phi3", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 16, "rope_theta": 300.0,
        });
        for (k, v) in extra.as_object().unwrap() {
            json[k] = v.clone();
        }
        serde_json::from_value::<Phi3Config>(json)
            .unwrap()
            .decoder()
    }

    #[test]
    fn phi3_is_llama_with_fused_projections() {
        let d = config(serde_json::json!({})).unwrap();
        assert!(d.fused_qkv && d.gate_layout == GateLayout::Fused);
        assert_eq!((d.n_heads, d.n_kv_heads, d.d_ff), (4, Some(2), Some(40)));
        assert_eq!(d.activation, FfnActivation::SwiGlu);
        assert!(matches!(d.positions, PositionKind::Rope { theta, .. } if theta == 300.0));
        assert!(!d.tie_embeddings && !d.bias && d.sliding_window.is_none());
        assert_eq!(d.norm_eps, 1e-5);
        let d = config(serde_json::json!({"sliding_window": 7})).unwrap();
        assert_eq!(d.sliding_window, Some(7));
    }

    #[test]
    fn what_phi3_does_not_implement_is_named() {
        let cases = [
            (
                serde_json::json!({"partial_rotary_factor": 0.5}),
                "partial_rotary_factor 0.5",
            ),
            (
                serde_json::json!({"rope_parameters": {"rope_type": "default",
                    "rope_theta": 1e4, "partial_rotary_factor": 0.75}}),
                "partial_rotary_factor 0.75",
            ),
            (
                serde_json::json!({"rope_scaling": {"type": "longrope", "short_factor": [1.0]}}),
                "rope_scaling.rope_type \"longrope\"",
            ),
            (serde_json::json!({"hidden_act": "gelu"}), "hidden_act Gelu"),
        ];
        for (extra, want) in cases {
            let e = config(extra).unwrap_err().to_string();
            assert!(e.contains("is not supported") && e.contains(want), "{e}");
        }
    }
}
