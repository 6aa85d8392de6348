//! Gemma 3's text decoder (Gemma Team, 2025, "Gemma 3 Technical Report"), as HF's
//! `models/gemma3/modeling_gemma3.py` runs `Gemma3ForCausalLM`: [`crate::gemma2`]'s
//! layers with these differences:
//! - QK-norm: Gemma's offset RMSNorm over each head's queries and keys, before RoPE;
//! - five local layers to one global by default (`sliding_window_pattern` 6), or as
//!   `layer_types` lists them;
//! - a RoPE base for the local layers (10000 by default) and another, with the RoPE
//!   scaling, for the global ones (1000000 by default): `rope_parameters` keyed by layer
//!   type in recent files, `rope_local_base_freq`, `rope_theta` and `rope_scaling` in
//!   older ones;
//! - no soft caps unless the file sets them.
//!
//! Its checkpoint names are Gemma 2's, with Qwen3's QK-norm names.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zoo_core::checkpoint::KeyMap;

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::gemma::{LaterGemma, SANDWICH_NAMES};
use crate::hf::{DecoderSpec, RopeFields, SpecialTokens, llama_key_map, unsupported};
use crate::pretrained::LlamaConfig;
use crate::qwen3::QK_NORM_NAMES;

/// `config.json`'s `model_type`.
pub const MODEL_TYPE: &str = "gemma3_text";
/// HF's class name of the causal LM.
pub const ARCHITECTURE: &str = "Gemma3ForCausalLM";

/// The global layers' RoPE base when the file names none.
const GLOBAL_THETA: f64 = 1_000_000.0;
/// The local layers' RoPE base when the file names none.
const LOCAL_THETA: f64 = 10_000.0;

/// HF's `Gemma3TextConfig`: Gemma 2's fields, its RoPE settings per layer type, and
/// `sliding_window_pattern` (kept in `other`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Gemma3Config(pub LlamaConfig);

impl DecoderSpec for Gemma3Config {
    fn tokens(&self) -> &SpecialTokens {
        &self.0.tokens
    }

    fn key_map(&self) -> KeyMap {
        let mut names = SANDWICH_NAMES.to_vec();
        names.push(QK_NORM_NAMES);
        llama_key_map(&names)
    }

    /// As Gemma 2's, and a RoPE type other than the default on the local layers.
    fn decoder(&self) -> Result<DecoderConfig> {
        let c = &self.0;
        let cfg = LaterGemma {
            pattern: 6,
            attn_softcap: None,
            final_softcap: None,
        }
        .decoder(c)?
        .with_qk_norm(true);
        let by_type = c
            .rope
            .rope_parameters
            .as_ref()
            .map(|p| &p.other)
            .filter(|p| p.contains_key("full_attention") || p.contains_key("sliding_attention"));
        let (global, local) = match by_type {
            Some(params) => {
                let of = |name: &str| -> Result<RopeFields> {
                    let fields = match params.get(name) {
                        Some(v) if !v.is_null() => serde_json::from_value(v.clone())
                            .map_err(|e| unsupported(name, e, "RoPE parameters are"))?,
                        _ => None,
                    };
                    Ok(RopeFields {
                        rope_parameters: fields,
                        ..RopeFields::default()
                    })
                };
                (of("full_attention")?, of("sliding_attention")?)
            }
            None => {
                let local_theta = c.other.get("rope_local_base_freq").and_then(Value::as_f64);
                let global = c.rope.clone();
                let local = RopeFields {
                    rope_theta: Some(local_theta.unwrap_or(LOCAL_THETA)),
                    ..RopeFields::default()
                };
                (global, local)
            }
        };
        let (local_theta, local_scaling) =
            local.resolve(Some(LOCAL_THETA), c.sizes.max_position_embeddings)?;
        if local_scaling != zoo_attention::RopeScaling::None {
            return Err(unsupported(
                "rope_parameters.sliding_attention.rope_type",
                format!("{local_scaling:?}"),
                "the local layers take the default RoPE; only default is",
            ));
        }
        Ok(global
            .apply(cfg, Some(GLOBAL_THETA))?
            .with_local_rope_theta(Some(local_theta)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PositionKind;
    use serde_json::json;
    use zoo_attention::{QkNorm, RopeScaling};

    fn config(extra: Value) -> Result<DecoderConfig> {
        let base = json!({
            "model_type": "gemma3_text", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 7, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 64,
            "sliding_window": 8,
        });
        crate::hf::decoder_of::<Gemma3Config>(base, extra)
    }

    fn theta(d: &DecoderConfig) -> f64 {
        match d.positions {
            PositionKind::Rope { theta, .. } => theta,
            PositionKind::Learned => panic!("no RoPE"),
        }
    }

    /// Gemma 3 1B's published `config.json` writes the old fields: `rope_theta`
    /// 1000000, `rope_local_base_freq` 10000, `rope_scaling` null, and
    /// `sliding_window_pattern` 6; the 4B model adds a linear scaling of 8 on the global
    /// layers.
    #[test]
    fn gemma3_reads_old_and_new_rope_settings_per_layer_type() {
        let old = config(
            json!({"rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "sliding_window_pattern": 6}),
        )
        .unwrap();
        assert_eq!(
            old.sliding_layers,
            [true, true, true, true, true, false, true]
        );
        assert_eq!(theta(&old), 1_000_000.0);
        assert_eq!(old.rope_scaling, RopeScaling::Linear { factor: 8.0 });
        assert_eq!(old.local_rope_theta, Some(10_000.0));
        let local = old.block_for(0).attention;
        let global = old.block_for(5).attention;
        assert_eq!(
            (local.rope_theta, local.rope_scaling),
            (10_000.0, RopeScaling::None)
        );
        assert_eq!(
            (global.rope_theta, global.rope_scaling, global.window),
            (1_000_000.0, RopeScaling::Linear { factor: 8.0 }, None)
        );
        assert_eq!(local.window, Some(8));
        assert!(matches!(local.qk_norm, QkNorm::PerHead { .. }));
        assert_eq!((old.attn_softcap, old.final_softcap), (None, None));
        // The new form, as transformers writes it.
        let new = config(json!({"rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 8000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}}))
        .unwrap();
        assert_eq!((theta(&new), new.local_rope_theta), (8000.0, Some(500.0)));
        // Defaults: 1000000 and 10000.
        let bare = config(json!({})).unwrap();
        assert_eq!((theta(&bare), bare.local_rope_theta), (1e6, Some(1e4)));
        // A scaled local RoPE is refused by name.
        let e = config(json!({"rope_parameters": {
            "sliding_attention": {"rope_type": "linear", "factor": 2.0}}}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("sliding_attention"), "{e}");
    }
}
