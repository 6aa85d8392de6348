//! Mixtral (Jiang et al., 2024, "Mixtral of Experts"), as HF's
//! `models/mixtral/modeling_mixtral.py` runs it: Mistral's decoder whose MLP is a sparse
//! mixture of SwiGLU experts ([`zoo_attention::SparseMoe`]): a linear router scores the
//! `num_local_experts` experts, each token runs the `num_experts_per_tok` most probable
//! (the softmax over all of them, the chosen probabilities renormalised), and their
//! outputs are summed with those weights. The router's logits come out of every forward
//! pass ([`crate::DecoderOutput::router_logits`]) for the load-balancing loss
//! ([`zoo_attention::load_balancing_loss`], HF's `router_aux_loss_coef` times it is the
//! term its training adds).
//!
//! Its checkpoint names are the Llama family's, with the mixture's:
//!
//! | HF name | module path |
//! |---|---|
//! | `model.layers.N.block_sparse_moe.gate` | `layers.N.mlp.router` |
//! | `model.layers.N.block_sparse_moe.experts.M.w1` | `layers.N.mlp.experts.M.gate_proj` |
//! | `model.layers.N.block_sparse_moe.experts.M.w3` | `layers.N.mlp.experts.M.up_proj` |
//! | `model.layers.N.block_sparse_moe.experts.M.w2` | `layers.N.mlp.experts.M.down_proj` |
//!
//! `router_jitter_noise` (multiplicative noise on the router's input while training) is
//! not applied; a value above 0 is kept in the config and noted here only.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zoo_attention::{FfnActivation, HiddenAct, Routing};
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::hf::{DecoderSpec, SpecialTokens, llama_key_map, unsupported};
use crate::pretrained::LlamaConfig;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "mixtral";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "MixtralForCausalLM";

/// The mixture's names, read before the Llama family's.
const MOE_NAMES: [(&str, &str); 4] = [
    (
        "model.layers.{n}.block_sparse_moe.gate.",
        "layers.{n}.mlp.router.",
    ),
    (
        "model.layers.{n}.block_sparse_moe.experts.{n}.w1.",
        "layers.{n}.mlp.experts.{n}.gate_proj.",
    ),
    (
        "model.layers.{n}.block_sparse_moe.experts.{n}.w3.",
        "layers.{n}.mlp.experts.{n}.up_proj.",
    ),
    (
        "model.layers.{n}.block_sparse_moe.experts.{n}.w2.",
        "layers.{n}.mlp.experts.{n}.down_proj.",
    ),
];

/// HF's `MixtralConfig`: the fields of a [`LlamaConfig`] (its `sliding_window` Mistral's),
/// with `num_local_experts` and `num_experts_per_tok` (kept in `other`, as the router's
/// training settings are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MixtralConfig(pub LlamaConfig);

impl DecoderSpec for MixtralConfig {
    fn tokens(&self) -> &SpecialTokens {
        &self.0.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&MOE_NAMES)
    }

    /// A non-`silu` gate, or expert counts that are missing, zero, or that do not fit.
    fn decoder(&self) -> Result<DecoderConfig> {
        let c = &self.0;
        let act = c.hidden_act.unwrap_or(HiddenAct::Silu);
        if act != HiddenAct::Silu {
            return Err(unsupported(
                "hidden_act",
                format!("{act:?}"),
                "Mixtral's experts take silu",
            ));
        }
        // HF's defaults: 8 experts, 2 per token.
        let count = |name: &str, default: usize| -> Result<usize> {
            match c.other.get(name) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| unsupported(name, v, "a whole number is")),
            }
        };
        let experts = Routing::TopK {
            n_experts: count("num_local_experts", 8)?,
            top_k: count("num_experts_per_tok", 2)?,
        };
        Ok(c.sizes
            .llama_style(&c.rope, c.rms_norm_eps)?
            .with_activation(FfnActivation::SwiGlu)
            .with_qkv_bias(Some(c.attention_bias))
            .with_out_bias(Some(c.attention_bias))
            .with_mlp_bias(Some(false))
            .with_sliding_window(c.sliding_window)
            .with_experts(experts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: Value) -> Result<DecoderConfig> {
        let base = json!({
            "model_type": "mixtral", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 16,
            "num_local_experts": 4, "num_experts_per_tok": 2,
        });
        crate::hf::decoder_of::<MixtralConfig>(base, extra)
    }

    /// Mixtral-8x7B's published sizes give transformers' parameter count (46,702,792,704,
    /// `MixtralForCausalLM` on the meta device); the tiny config counts each expert.
    #[test]
    fn mixtral_counts_every_expert() {
        let d = config(json!({})).unwrap();
        assert_eq!(
            d.experts,
            Routing::TopK {
                n_experts: 4,
                top_k: 2
            }
        );
        let dense = d.clone().with_experts(Routing::Dense);
        // Per layer: three more SwiGLU MLPs of 3 · 32 · 40, and the router's 32 · 4.
        assert_eq!(
            d.num_params(),
            dense.num_params() + 2 * (3 * 3 * 32 * 40 + 32 * 4)
        );
        let big = config(json!({"vocab_size": 32000, "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "max_position_embeddings": 32768,
            "num_local_experts": 8}))
        .unwrap();
        assert_eq!(big.num_params(), 46_702_792_704);
        for (extra, want) in [
            (json!({"num_local_experts": 0}), "n_experts"),
            (json!({"num_experts_per_tok": 5}), "top_k"),
            (json!({"num_experts_per_tok": "two"}), "num_experts_per_tok"),
            (json!({"hidden_act": "gelu"}), "hidden_act"),
        ] {
            let e = config(extra.clone())
                .and_then(|d| d.validate())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
    }
}
