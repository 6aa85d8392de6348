//! GPT-NeoX (Black et al., 2022, "GPT-NeoX-20B") and the Pythia suite (Biderman et al.,
//! 2023), as HF's `models/gpt_neox/modeling_gpt_neox.py` runs them: LayerNorm with
//! biases, exact GELU, biases on every projection, an untied head, and two layouts of its
//! own:
//! - attention and the MLP side by side (`use_parallel_residual`, the default):
//!   `x + attn(ln_1(x)) + mlp(ln_2(x))`, a [`crate::DecoderLayer::Parallel`];
//! - partial rotary: RoPE on the first `rotary_pct` of each head (Pythia: 25%), the rest
//!   passed through;
//! - one `query_key_value` projection ordered per head (`[q, k, v]` of head 0, then head
//!   1, ...), a [`zoo_attention::QkvLayout::PerHead`].
//!
//! | HF name | module path |
//! |---|---|
//! | `gpt_neox.embed_in` | `wte` |
//! | `gpt_neox.layers.N.input_layernorm` | `layers.N.norm_1` |
//! | `gpt_neox.layers.N.post_attention_layernorm` | `layers.N.norm_2` |
//! | `gpt_neox.layers.N.attention.query_key_value` | `layers.N.self_attn.qkv_proj` |
//! | `gpt_neox.layers.N.attention.dense` | `layers.N.self_attn.o_proj` |
//! | `gpt_neox.layers.N.mlp.dense_h_to_4h` | `layers.N.mlp.up_proj` |
//! | `gpt_neox.layers.N.mlp.dense_4h_to_h` | `layers.N.mlp.down_proj` |
//! | `gpt_neox.final_layer_norm` | `norm_f` |
//! | `embed_out` | `lm_head` |

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zoo_attention::{HiddenAct, QkvLayout};
use zoo_core::ConfigError;
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
#[cfg(test)]
use crate::config::PositionKind;
use crate::error::Result;
use crate::hf::{DecoderSpec, RopeFields, RotarySizes, SpecialTokens};
use crate::layer::LayerKind;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "gpt_neox";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "GPTNeoXForCausalLM";

/// HF's names and module paths.
const NAMES: [(&str, &str); 9] = [
    ("gpt_neox.embed_in.", "wte."),
    ("gpt_neox.layers.{n}.input_layernorm.", "layers.{n}.norm_1."),
    (
        "gpt_neox.layers.{n}.post_attention_layernorm.",
        "layers.{n}.norm_2.",
    ),
    (
        "gpt_neox.layers.{n}.attention.query_key_value.",
        "layers.{n}.self_attn.qkv_proj.",
    ),
    (
        "gpt_neox.layers.{n}.attention.dense.",
        "layers.{n}.self_attn.o_proj.",
    ),
    (
        "gpt_neox.layers.{n}.mlp.dense_h_to_4h.",
        "layers.{n}.mlp.up_proj.",
    ),
    (
        "gpt_neox.layers.{n}.mlp.dense_4h_to_h.",
        "layers.{n}.mlp.down_proj.",
    ),
    ("gpt_neox.final_layer_norm.", "norm_f."),
    ("embed_out.", "lm_head."),
];

/// The name map of a GPT-NeoX checkpoint: [`NAMES`], and the buffers older files keep
/// (the causal mask, RoPE's frequencies), which are not weights.
pub(crate) fn key_map() -> KeyMap {
    KeyMap::new()
        .names(&NAMES)
        .ignore(r"\.attention\.(bias|masked_bias)$")
        .ignore(r"\.rotary_emb\.inv_freq$")
}

fn gelu() -> HiddenAct {
    HiddenAct::Gelu
}

fn eps_1e5() -> f64 {
    1e-5
}

fn yes() -> bool {
    true
}

/// HF's `GPTNeoXConfig`, with its field names. Fields the zoo does not use (the
/// dropouts, `initializer_range`, ...) are kept in `other` and written back on saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GptNeoXConfig {
    /// The sizes (as many key/value heads as query heads).
    #[serde(flatten)]
    pub sizes: RotarySizes,
    /// MLP non-linearity. Default: exact `gelu`.
    #[serde(default = "gelu")]
    pub hidden_act: HiddenAct,
    /// LayerNorm epsilon. Default: 1e-5.
    #[serde(default = "eps_1e5")]
    pub layer_norm_eps: f64,
    /// Attention and the MLP side by side. Default: true.
    #[serde(default = "yes")]
    pub use_parallel_residual: bool,
    /// Biases on the attention's projections. Default: true.
    #[serde(default = "yes")]
    pub attention_bias: bool,
    /// The rotated share of each head, in older configs (recent ones put it in
    /// `rope_parameters.partial_rotary_factor`). Default: 0.25, as HF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_pct: Option<f64>,
    /// The RoPE base, in older configs. Default: 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_emb_base: Option<f64>,
    /// The RoPE base and scaling of recent configs, and the scaling of older ones.
    #[serde(flatten)]
    pub rope: RopeFields,
    /// The start and end tokens.
    #[serde(flatten)]
    pub tokens: SpecialTokens,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl GptNeoXConfig {
    /// The rotated share of each head: `rope_parameters.partial_rotary_factor`, else
    /// `rotary_pct`, else HF's default of 0.25.
    pub fn partial_rotary_factor(&self) -> f64 {
        self.rope
            .parameter("partial_rotary_factor")
            .or(self.rotary_pct)
            .unwrap_or(0.25)
    }
}

impl DecoderSpec for GptNeoXConfig {
    fn tokens(&self) -> &SpecialTokens {
        &self.tokens
    }

    fn key_map(&self) -> KeyMap {
        key_map()
    }

    /// A rotated share that leaves an odd or empty number of features, or a RoPE type the
    /// zoo does not implement, is an error.
    fn decoder(&self) -> Result<DecoderConfig> {
        let heads = self.sizes.num_attention_heads.max(1);
        let head_dim = self.sizes.hidden_size / heads;
        let factor = self.partial_rotary_factor();
        // HF truncates: `int(head_dim * partial_rotary_factor)`.
        let rope_dim = (head_dim as f64 * factor) as usize;
        if !(factor > 0.0 && factor <= 1.0) || rope_dim == 0 || !rope_dim.is_multiple_of(2) {
            return Err(ConfigError::range(
                "partial_rotary_factor",
                format!("in (0, 1] and rotate an even number of the {head_dim} features per head"),
                factor,
            )
            .into());
        }
        let layer = if self.use_parallel_residual {
            LayerKind::Parallel
        } else {
            LayerKind::Sequential
        };
        let cfg = self
            .sizes
            .decoder()
            .with_activation(self.hidden_act.ffn())
            .with_norm_eps(self.layer_norm_eps)
            .with_rope_dim((rope_dim < head_dim).then_some(rope_dim))
            .with_qkv_layout(QkvLayout::PerHead)
            .with_qkv_bias(Some(self.attention_bias))
            .with_out_bias(Some(self.attention_bias))
            .with_mlp_bias(Some(true))
            .with_layer(layer);
        self.rope.apply(cfg, self.rotary_emb_base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> Result<DecoderConfig> {
        let base = serde_json::json!({
            "model_type": "gpt_neox", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
            "max_position_embeddings": 16,
        });
        crate::hf::decoder_of::<GptNeoXConfig>(base, extra)
    }

    #[test]
    fn pythia_defaults_are_parallel_with_a_quarter_rotated() {
        let d = config(serde_json::json!({})).unwrap();
        assert_eq!(d.layer, LayerKind::Parallel);
        assert_eq!(d.qkv_layout, QkvLayout::PerHead);
        // 8 features per head, a quarter rotated.
        assert_eq!(d.rope_dim, Some(2));
        assert!(matches!(d.positions, PositionKind::Rope { theta, .. } if theta == 10000.0));
        assert!(d.fused_qkv && !d.tie_embeddings);
        let old = config(
            serde_json::json!({"rotary_pct": 0.5, "rotary_emb_base": 500.0,
            "use_parallel_residual": false}),
        )
        .unwrap();
        assert_eq!((old.rope_dim, old.layer), (Some(4), LayerKind::Sequential));
        assert!(matches!(old.positions, PositionKind::Rope { theta, .. } if theta == 500.0));
        let new = config(
            serde_json::json!({"rope_parameters": {"rope_type": "default",
            "rope_theta": 700.0, "partial_rotary_factor": 1.0}}),
        )
        .unwrap();
        assert_eq!(new.rope_dim, None, "the whole head is rotated");
        assert!(matches!(new.positions, PositionKind::Rope { theta, .. } if theta == 700.0));
    }

    #[test]
    fn a_rotated_share_that_does_not_fit_is_named() {
        for (pct, want) in [
            (0.1, "partial_rotary_factor must be in (0, 1]"),
            (1.5, "got 1.5"),
        ] {
            let e = config(serde_json::json!({ "rotary_pct": pct }))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        let e =
            config(serde_json::json!({"rope_scaling": {"type": "proportional", "factor": 2.0}}))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("rope_scaling.rope_type \"proportional\" is not supported"),
            "{e}"
        );
        // Linear scaling is one the zoo implements.
        let linear =
            config(serde_json::json!({"rope_scaling": {"type": "linear", "factor": 2.0}})).unwrap();
        assert_eq!(
            linear.rope_scaling,
            zoo_attention::RopeScaling::Linear { factor: 2.0 }
        );
    }
}
