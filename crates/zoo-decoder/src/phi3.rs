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
//! The 128k-context checkpoints' `longrope` scaling loads, with the
//! `original_max_position_embeddings` that Phi-3 keeps beside the RoPE settings, as every
//! RoPE type of [`crate::hf::RopeFields`] does. Not implemented, and refused by name:
//! `partial_rotary_factor` below 1.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zoo_attention::{FfnActivation, GateLayout, HiddenAct};

use crate::config::DecoderConfig;
#[cfg(test)]
use crate::config::PositionKind;
use crate::error::Result;
use crate::hf::{DecoderSpec, RopeFields, RotarySizes, SpecialTokens, llama_key_map, unsupported};
use zoo_core::checkpoint::KeyMap;

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
/// ...) are kept in `other` and written back on saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phi3Config {
    /// The sizes (`intermediate_size` is each half of `gate_up_proj`).
    #[serde(flatten)]
    pub sizes: RotarySizes,
    /// Gate non-linearity. Default: `silu`.
    #[serde(default = "silu")]
    pub hidden_act: HiddenAct,
    /// RMSNorm epsilon. Default: 1e-5.
    #[serde(default = "eps_1e5")]
    pub rms_norm_eps: f64,
    /// The RoPE base and scaling (`longrope` on the 128k checkpoints), and the original
    /// context.
    #[serde(flatten)]
    pub rope: RopeFields,
    /// The share of each head that is rotated (older configs; recent ones put it in
    /// `rope_parameters`); only 1 is implemented. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// Each position sees this many, itself included (Phi-3-mini-4k: 2047).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// The start and end tokens.
    #[serde(flatten)]
    pub tokens: SpecialTokens,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl DecoderSpec for Phi3Config {
    fn tokens(&self) -> &SpecialTokens {
        &self.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&[])
    }

    fn decoder(&self) -> Result<DecoderConfig> {
        let partial = self
            .rope
            .parameter("partial_rotary_factor")
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
        Ok(self
            .sizes
            .llama_style(&self.rope, self.rms_norm_eps)?
            .with_activation(FfnActivation::SwiGlu)
            .with_gate_layout(GateLayout::Fused)
            .with_fused_qkv(true)
            .with_sliding_window(self.sliding_window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> Result<DecoderConfig> {
        let base = serde_json::json!({
            "model_type": "phi3", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 16, "rope_theta": 300.0,
        });
        crate::hf::decoder_of::<Phi3Config>(base, extra)
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

    /// Phi-3's 128k checkpoints: `longrope` with the original context beside the RoPE
    /// settings, which wins over one inside them; the attention factor defaults to
    /// `sqrt(1 + ln(16 / 4) / ln(4))`.
    #[test]
    fn phi3_128k_reads_longrope_with_its_original_context() {
        let d = config(serde_json::json!({
            "original_max_position_embeddings": 4,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.0, 2.0, 4.0],
                "long_factor": [1.0, 2.0, 4.0, 8.0], "original_max_position_embeddings": 8},
        }))
        .unwrap();
        let zoo_attention::RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings,
            attention_factor,
        } = d.rope_scaling
        else {
            panic!("not longrope: {:?}", d.rope_scaling)
        };
        assert_eq!(short_factor, [1.0, 1.0, 2.0, 4.0]);
        assert_eq!(long_factor, [1.0, 2.0, 4.0, 8.0]);
        assert_eq!(original_max_position_embeddings, 4);
        assert!((attention_factor - 2f64.sqrt()).abs() < 1e-12);
        // One divisor per rotated pair: 8-wide heads have 4.
        let e = config(serde_json::json!({
            "rope_scaling": {"type": "longrope", "short_factor": [1.0],
                "long_factor": [1.0, 2.0, 4.0, 8.0]},
        }))
        .unwrap();
        let e = e.validate().unwrap_err().to_string();
        assert!(
            e.contains("rope_scaling.short_factor has 1 numbers; 8 rotated features need 4"),
            "{e}"
        );
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
                serde_json::json!({"rope_scaling": {"type": "proportional", "factor": 2.0}}),
                "rope_scaling.rope_type \"proportional\"",
            ),
            (serde_json::json!({"hidden_act": "gelu"}), "hidden_act Gelu"),
        ];
        for (extra, want) in cases {
            let e = config(extra).unwrap_err().to_string();
            assert!(e.contains("is not supported") && e.contains(want), "{e}");
        }
    }
}
