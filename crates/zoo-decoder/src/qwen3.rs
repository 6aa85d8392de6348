//! Qwen3 (Qwen Team, 2025, "Qwen3 Technical Report"), as HF's
//! `models/qwen3/modeling_qwen3.py` runs it: a Llama-style decoder (RMSNorm, RoPE,
//! SwiGLU, grouped-query attention) with two changes:
//! - QK-norm: an RMSNorm over each head's queries and keys (one weight of `head_dim` for
//!   all query heads, one for all key heads), after the projections and before RoPE;
//! - `head_dim` free of `hidden_size / num_attention_heads` (Qwen3-0.6B: 128 with width
//!   1024 and 16 heads), and no biases on Q, K and V (Qwen2 had them).
//!
//! Its checkpoint names are the Llama family's, with the two norms of each layer's
//! attention:
//!
//! | HF name | module path |
//! |---|---|
//! | `model.layers.N.self_attn.q_norm` | `layers.N.self_attn.qk_norm.q_norm` |
//! | `model.layers.N.self_attn.k_norm` | `layers.N.self_attn.qk_norm.k_norm` |
//!
//! A sliding window on some layers only (`use_sliding_window` with `max_window_layers`
//! below the depth) is refused by name; no released Qwen3 checkpoint turns it on.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zoo_attention::{FfnActivation, HiddenAct};
use zoo_core::ConfigError;
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::hf::{DecoderSpec, SpecialTokens, llama_key_map, unsupported};
use crate::pretrained::LlamaConfig;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "qwen3";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "Qwen3ForCausalLM";

/// The QK-norm's names, read before the Llama family's.
pub(crate) const QK_NORM_NAMES: (&str, &str) = (
    "model.layers.{n}.self_attn.{q|k}_norm.",
    "layers.{n}.self_attn.qk_norm.{q|k}_norm.",
);

/// HF's `Qwen3Config`: the fields of a [`LlamaConfig`] (its `head_dim` usually given and
/// free, its RMSNorm epsilon also QK-norm's), with `use_sliding_window`,
/// `sliding_window` and `max_window_layers` (kept in `other`) for the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Qwen3Config(pub LlamaConfig);

impl DecoderSpec for Qwen3Config {
    fn tokens(&self) -> &SpecialTokens {
        &self.0.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&[QK_NORM_NAMES])
    }

    /// A non-`silu` gate, or a window on some layers only, is an error.
    fn decoder(&self) -> Result<DecoderConfig> {
        let c = &self.0;
        let act = c.hidden_act.unwrap_or(HiddenAct::Silu);
        if act != HiddenAct::Silu {
            return Err(unsupported(
                "hidden_act",
                format!("{act:?}"),
                "Qwen3's gated MLP takes silu",
            ));
        }
        let layers = c.sizes.num_hidden_layers;
        let window = match (c.use_sliding_window, c.sliding_window) {
            (Some(true), Some(w)) => {
                // HF: layers from max_window_layers on slide; it defaults to all layers.
                let full = c
                    .other
                    .get("max_window_layers")
                    .and_then(Value::as_u64)
                    .map_or(layers, |n| n as usize);
                if full >= layers {
                    None
                } else if full == 0 {
                    Some(w)
                } else {
                    return Err(ConfigError::conflict(format!(
                        "use_sliding_window with max_window_layers {full} of {layers} layers \
                         (full attention below, a window above) is not supported"
                    ))
                    .into());
                }
            }
            _ => None,
        };
        Ok(c.sizes
            .llama_style(&c.rope, c.rms_norm_eps)?
            .with_activation(FfnActivation::SwiGlu)
            .with_qkv_bias(Some(c.attention_bias))
            .with_out_bias(Some(c.attention_bias))
            .with_mlp_bias(Some(c.mlp_bias))
            .with_qk_norm(true)
            .with_sliding_window(window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> Result<DecoderConfig> {
        let base = serde_json::json!({
            "model_type": "qwen3", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 16,
            "tie_word_embeddings": true,
        });
        crate::hf::decoder_of::<Qwen3Config>(base, extra)
    }

    #[test]
    fn qwen3_is_llama_with_qk_norm_and_a_free_head_size() {
        let d = config(serde_json::json!({})).unwrap();
        assert!(d.qk_norm && d.tie_embeddings);
        assert_eq!(
            (d.n_heads, d.n_kv_heads, d.head_dim),
            (4, Some(2), Some(12))
        );
        assert_eq!((d.qkv_bias, d.out_bias), (Some(false), Some(false)));
        assert_eq!(d.norm_eps, 1e-6);
        // The two norms of 12 per layer are counted.
        let plain = d.clone().with_qk_norm(false);
        assert_eq!(d.num_params(), plain.num_params() + 2 * 2 * 12);
        // A window on every layer is Mistral's; one on some layers is refused.
        let all = config(
            serde_json::json!({"use_sliding_window": true, "sliding_window": 4,
            "max_window_layers": 0}),
        )
        .unwrap();
        assert_eq!(all.sliding_window, Some(4));
        let none =
            config(serde_json::json!({"use_sliding_window": false, "sliding_window": 4})).unwrap();
        assert_eq!(none.sliding_window, None);
        let e = config(
            serde_json::json!({"use_sliding_window": true, "sliding_window": 4,
            "max_window_layers": 1}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("max_window_layers 1 of 2 layers"), "{e}");
    }
}
