//! Gemma 2 (Gemma Team, 2024, "Gemma 2: Improving Open Language Models at a Practical
//! Size"), as HF's `models/gemma2/modeling_gemma2.py` runs it: [`crate::gemma`]'s decoder
//! with these differences:
//! - four norms per layer, one before and one after each sub-layer
//!   ([`zoo_attention::SandwichBlock`]);
//! - local layers (a sliding window) and global ones, as `layer_types` lists them; by
//!   default every other layer, from the first, is local;
//! - soft caps, `cap · tanh(s / cap)`, on the attention scores (`attn_logit_softcapping`,
//!   50 by default) and on the logits (`final_logit_softcapping`, 30 by default);
//! - scores scaled by `query_pre_attn_scalar^-1/2` (256 by default) rather than by the
//!   head width.
//!
//! Its checkpoint names are the Llama family's, with the four norms of each layer:
//!
//! | HF name | module path |
//! |---|---|
//! | `model.layers.N.input_layernorm` | `layers.N.norm_1` |
//! | `model.layers.N.post_attention_layernorm` | `layers.N.post_attn_norm` |
//! | `model.layers.N.pre_feedforward_layernorm` | `layers.N.norm_2` |
//! | `model.layers.N.post_feedforward_layernorm` | `layers.N.post_mlp_norm` |

use serde::{Deserialize, Serialize};
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::gemma::{LaterGemma, SANDWICH_NAMES};
use crate::hf::{DecoderSpec, SpecialTokens, llama_key_map};
use crate::pretrained::LlamaConfig;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "gemma2";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "Gemma2ForCausalLM";

/// HF's `Gemma2Config`: the fields of a [`LlamaConfig`] (its `sliding_window` the local
/// layers' window), with `query_pre_attn_scalar`, `layer_types`,
/// `attn_logit_softcapping` and `final_logit_softcapping` (kept in `other`; `null` turns
/// a cap off).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Gemma2Config(pub LlamaConfig);

impl DecoderSpec for Gemma2Config {
    fn tokens(&self) -> &SpecialTokens {
        &self.0.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&SANDWICH_NAMES)
    }

    /// As Gemma's, and a layer type other than local and global, or a cap or scalar that
    /// is not a positive number.
    fn decoder(&self) -> Result<DecoderConfig> {
        LaterGemma {
            pattern: 2,
            attn_softcap: Some(50.0),
            final_softcap: Some(30.0),
        }
        .decoder(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::LayerKind;
    use serde_json::{Value, json};

    fn config(extra: Value) -> Result<DecoderConfig> {
        let base = json!({
            "model_type": "gemma2", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
            "sliding_window": 8,
        });
        crate::hf::decoder_of::<Gemma2Config>(base, extra)
    }

    #[test]
    fn gemma2_alternates_local_and_global_layers_and_caps_by_default() {
        let d = config(json!({})).unwrap();
        assert_eq!(d.layer, LayerKind::Sandwich);
        // HF's default: layer i slides unless (i + 1) is even.
        assert_eq!(d.sliding_layers, [true, false, true, false]);
        assert_eq!((d.attn_softcap, d.final_softcap), (Some(50.0), Some(30.0)));
        assert_eq!(d.attn_scale, Some(1.0 / 16.0));
        assert!(d.block_for(0).attention.window == Some(8));
        assert!(d.block_for(1).attention.window.is_none());
        // Four norms of 32 per layer: two more than Gemma's.
        let plain = d.clone().with_layer(LayerKind::Sequential);
        assert_eq!(d.num_params(), plain.num_params() + 4 * 2 * 32);
        // The file's own settings, and null turning a cap off.
        let own = config(json!({
            "query_pre_attn_scalar": 24, "attn_logit_softcapping": null,
            "final_logit_softcapping": 5.0,
            "layer_types": ["full_attention", "full_attention", "sliding_attention",
                            "full_attention"],
        }))
        .unwrap();
        assert_eq!(own.sliding_layers, [false, false, true, false]);
        assert_eq!((own.attn_softcap, own.final_softcap), (None, Some(5.0)));
        assert!((own.attn_scale.unwrap() - 24f64.powf(-0.5)).abs() < 1e-15);
    }

    #[test]
    fn bad_gemma2_settings_are_named() {
        for (extra, want) in [
            (
                json!({"layer_types": ["sliding_attention", "full_attention"]}),
                "layer_types names 2 layers, num_hidden_layers is 4",
            ),
            (
                json!({"layer_types": ["sliding_attention", "chunked_attention",
                                       "sliding_attention", "full_attention"]}),
                "\"chunked_attention\"",
            ),
            (json!({"attn_logit_softcapping": 0.0}), "softcap"),
            (json!({"final_logit_softcapping": -1.0}), "final_softcap"),
            (
                json!({"query_pre_attn_scalar": "big"}),
                "query_pre_attn_scalar",
            ),
            (json!({"hidden_activation": "silu"}), "hidden_activation"),
        ] {
            let e = config(extra.clone())
                .and_then(|d| d.validate().map(|()| d))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
    }
}
