//! HF checkpoints of the decoder family: `GPT2LMHeadModel`, `LlamaForCausalLM`, the
//! variants that differ from Llama only in config, `MistralForCausalLM` (a sliding window)
//! and `Qwen2ForCausalLM` (biases on Q, K and V), and [`crate::phi3`]'s
//! `Phi3ForCausalLM`, whose fused projections load through the Llama names.
//!
//! [`HfDecoderConfig::from_pretrained`] reads `config.json` with HF's field names and
//! dispatches on its `model_type`; [`DecoderLm::from_pretrained`] loads the weights
//! (`model.safetensors`, a sharded `model.safetensors.index.json`, or
//! `pytorch_model.bin`; f16 and bf16 widened to f32) through `zoo-core`'s shared loader,
//! which names every missing, unexpected and mis-shaped tensor at once;
//! [`DecoderLm::save_pretrained`] writes both back in HF's layout.
//!
//! | HF name (GPT-2, optionally under `transformer.`) | HF name (Llama family) | module path |
//! |---|---|---|
//! | `wte` | `model.embed_tokens` | `wte` |
//! | `wpe` | - | `wpe.embedding` |
//! | `h.N.ln_1` | `model.layers.N.input_layernorm` | `layers.N.norm_1` |
//! | `h.N.attn.c_attn` (`Conv1D`) | `model.layers.N.self_attn.{q,k,v}_proj` | `layers.N.self_attn.{qkv,q,k,v}_proj` |
//! | `h.N.attn.c_proj` (`Conv1D`) | `model.layers.N.self_attn.o_proj` | `layers.N.self_attn.o_proj` |
//! | `h.N.ln_2` | `model.layers.N.post_attention_layernorm` | `layers.N.norm_2` |
//! | - | `model.layers.N.mlp.gate_proj` | `layers.N.mlp.gate_proj` |
//! | `h.N.mlp.c_fc` (`Conv1D`) | `model.layers.N.mlp.up_proj` | `layers.N.mlp.up_proj` |
//! | `h.N.mlp.c_proj` (`Conv1D`) | `model.layers.N.mlp.down_proj` | `layers.N.mlp.down_proj` |
//! | `ln_f` | `model.norm` | `norm_f` |
//! | `lm_head` (absent when tied) | `lm_head` | `lm_head` |
//!
//! GPT-2's `Conv1D` stores its weight `[in, out]`, as Burn's `Linear` does, so those
//! weights are loaded and saved without the transpose that `nn.Linear` weights get.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zoo_attention::{FfnActivation, HiddenAct};
use zoo_core::ConfigError;
pub use zoo_core::checkpoint::TokenIds;
use zoo_core::checkpoint::{self, CheckpointError, KeyMap};

use crate::config::DecoderConfig;
use crate::error::Result;
use crate::gemma::{self, GemmaConfig};
use crate::gemma2::{self, Gemma2Config};
use crate::gemma3::{self, Gemma3Config};
use crate::gpt_neox::{self, GptNeoXConfig};
use crate::hf::{DecoderSpec, llama_key_map, unsupported};
pub use crate::hf::{RopeFields, RopeParameters, RotarySizes, SpecialTokens};
use crate::mixtral::{self, MixtralConfig};
use crate::model::DecoderLm;
use crate::phi3::{self, Phi3Config};
use crate::qwen3::{self, Qwen3Config};
use crate::registry::ARCHITECTURES;

fn yes() -> bool {
    true
}

fn gelu_new() -> HiddenAct {
    HiddenAct::GeluTanh
}

fn eps_1e5() -> f64 {
    1e-5
}

fn eps_1e6() -> f64 {
    1e-6
}

/// HF's `GPT2Config`, with its field names. Fields the zoo does not use are kept in
/// `other` and written back on saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpt2Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Longest sequence.
    pub n_positions: usize,
    /// Model width.
    pub n_embd: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Number of heads.
    pub n_head: usize,
    /// MLP width; `null` means 4 × `n_embd`.
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// MLP non-linearity. Default: `gelu_new`.
    #[serde(default = "gelu_new")]
    pub activation_function: HiddenAct,
    /// LayerNorm epsilon. Default: 1e-5.
    #[serde(default = "eps_1e5")]
    pub layer_norm_epsilon: f64,
    /// Scores scaled by `1 / sqrt(head_dim)`. Default: true.
    #[serde(default = "yes")]
    pub scale_attn_weights: bool,
    /// Scores also scaled by `1 / (layer + 1)`; not supported.
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    /// The LM head is the token embedding. Default: true.
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// The start and end tokens.
    #[serde(flatten)]
    pub tokens: SpecialTokens,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// HF's `LlamaConfig`, which `MistralConfig`, `Qwen2Config`, `Qwen3Config` and
/// `GemmaConfig` extend, with HF's field names. Fields the zoo does not use are kept in
/// `other` and written back on saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// `llama`, `mistral`, `qwen2` (or `qwen3`, `gemma` inside their own types).
    pub model_type: String,
    /// The sizes.
    #[serde(flatten)]
    pub sizes: RotarySizes,
    /// Gate non-linearity. Default: the architecture's (`silu`, SwiGLU, for Llama).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_act: Option<HiddenAct>,
    /// RMSNorm epsilon. Default: 1e-6.
    #[serde(default = "eps_1e6")]
    pub rms_norm_eps: f64,
    /// The RoPE base and scaling.
    #[serde(flatten)]
    pub rope: RopeFields,
    /// Biases on Q, K, V and O (Llama). Qwen2 always has Q, K and V biases.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases in the MLP.
    #[serde(default)]
    pub mlp_bias: bool,
    /// Mistral's window: each position sees this many, itself included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Qwen2 uses its window only when this is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_sliding_window: Option<bool>,
    /// The start and end tokens.
    #[serde(flatten)]
    pub tokens: SpecialTokens,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A decoder checkpoint's `config.json`, by its `model_type`.
#[derive(Debug, Clone, PartialEq)]
pub enum HfDecoderConfig {
    /// `gpt2`.
    Gpt2(Gpt2Config),
    /// `llama`, `mistral` or `qwen2`.
    Llama(LlamaConfig),
    /// `phi3`.
    Phi3(Phi3Config),
    /// `gpt_neox`.
    GptNeoX(GptNeoXConfig),
    /// `qwen3`.
    Qwen3(Qwen3Config),
    /// `gemma`.
    Gemma(GemmaConfig),
    /// `gemma2`.
    Gemma2(Gemma2Config),
    /// `gemma3_text`.
    Gemma3(Gemma3Config),
    /// `mixtral`.
    Mixtral(MixtralConfig),
}

impl HfDecoderConfig {
    /// Reads and checks `dir/config.json`.
    ///
    /// # Errors
    /// A missing or malformed file, a `model_type` this crate does not load (the
    /// supported ones are named), or settings the zoo does not implement; each names the
    /// file.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let path = dir.join("config.json");
        let bad = |message: String| CheckpointError::Config {
            path: path.clone(),
            message,
        };
        let (json, model_type) = checkpoint::read_model_type(dir)?;
        let cfg = match model_type.as_str() {
            "gpt2" => serde_json::from_value(json).map(Self::Gpt2),
            "llama" | "mistral" | "qwen2" => serde_json::from_value(json).map(Self::Llama),
            phi3::MODEL_TYPE => serde_json::from_value(json).map(Self::Phi3),
            gpt_neox::MODEL_TYPE => serde_json::from_value(json).map(Self::GptNeoX),
            qwen3::MODEL_TYPE => serde_json::from_value(json).map(Self::Qwen3),
            gemma::MODEL_TYPE => serde_json::from_value(json).map(Self::Gemma),
            gemma2::MODEL_TYPE => serde_json::from_value(json).map(Self::Gemma2),
            gemma3::MODEL_TYPE => serde_json::from_value(json).map(Self::Gemma3),
            mixtral::MODEL_TYPE => serde_json::from_value(json).map(Self::Mixtral),
            other => {
                let known: Vec<&str> = ARCHITECTURES.iter().map(|a| a.model_type).collect();
                return Err(bad(format!(
                    "model_type {other:?} is not a decoder this crate loads; it loads {}",
                    known.join(", ")
                ))
                .into());
            }
        }
        .map_err(|e| bad(e.to_string()))?;
        cfg.decoder().map_err(|e| bad(e.to_string()))?;
        Ok(cfg)
    }

    /// HF's `model_type`.
    pub fn model_type(&self) -> &str {
        match self {
            Self::Gpt2(_) => "gpt2",
            Self::Llama(c) => &c.model_type,
            Self::Phi3(_) => phi3::MODEL_TYPE,
            Self::GptNeoX(_) => gpt_neox::MODEL_TYPE,
            Self::Qwen3(_) => qwen3::MODEL_TYPE,
            Self::Gemma(_) => gemma::MODEL_TYPE,
            Self::Gemma2(_) => gemma2::MODEL_TYPE,
            Self::Gemma3(_) => gemma3::MODEL_TYPE,
            Self::Mixtral(_) => mixtral::MODEL_TYPE,
        }
    }

    /// The architecture's own config, behind the family's one trait.
    fn spec(&self) -> &dyn DecoderSpec {
        match self {
            Self::Gpt2(c) => c,
            Self::Llama(c) => c,
            Self::Phi3(c) => c,
            Self::GptNeoX(c) => c,
            Self::Qwen3(c) => c,
            Self::Gemma(c) => c,
            Self::Gemma2(c) => c,
            Self::Gemma3(c) => c,
            Self::Mixtral(c) => c,
        }
    }

    /// The config as `config.json` holds it, every field the file had included.
    fn to_json(&self) -> Result<Value> {
        match self {
            Self::Gpt2(c) => serde_json::to_value(c),
            Self::Llama(c) => serde_json::to_value(c),
            Self::Phi3(c) => serde_json::to_value(c),
            Self::GptNeoX(c) => serde_json::to_value(c),
            Self::Qwen3(c) => serde_json::to_value(c),
            Self::Gemma(c) => serde_json::to_value(c),
            Self::Gemma2(c) => serde_json::to_value(c),
            Self::Gemma3(c) => serde_json::to_value(c),
            Self::Mixtral(c) => serde_json::to_value(c),
        }
        .map_err(|e| ConfigError::malformed(format!("config.json: {e}")).into())
    }

    /// HF's architecture name of the causal LM.
    pub fn architecture(&self) -> &'static str {
        Self::architecture_of(self.model_type()).unwrap_or("LlamaForCausalLM")
    }

    /// HF's architecture name of a `model_type`'s causal LM, from the family's registry
    /// rows.
    pub fn architecture_of(model_type: &str) -> Option<&'static str> {
        ARCHITECTURES
            .iter()
            .find(|a| a.model_type == model_type)
            .map(|a| a.name)
    }

    /// The end-of-text tokens, where the config names them.
    pub fn eos_token_ids(&self) -> Vec<usize> {
        let tokens = self.spec().tokens();
        tokens
            .eos_token_id
            .as_ref()
            .map(TokenIds::ids)
            .unwrap_or_default()
    }

    /// Whether the head is the embedding, as the zoo builds the model.
    fn tied(&self) -> bool {
        self.decoder().is_ok_and(|d| d.tie_embeddings)
    }

    /// The zoo's configuration of the same model (no dropout: checkpoints are loaded for
    /// inference or fine-tuning, where the caller sets it).
    ///
    /// # Errors
    /// A setting the zoo does not implement, or sizes that do not fit together.
    pub fn decoder(&self) -> Result<DecoderConfig> {
        let cfg = self.spec().decoder()?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The checkpoint names of this config's architecture, both ways.
    pub fn key_map(&self) -> KeyMap {
        let map = self.spec().key_map();
        if self.tied() {
            // A tied head is the embedding; a copy in the file is not another weight.
            map.ignore(r"^lm_head\.weight$")
        } else {
            map
        }
    }
}

impl DecoderSpec for Gpt2Config {
    fn decoder(&self) -> Result<DecoderConfig> {
        gpt2_decoder(self)
    }

    fn tokens(&self) -> &SpecialTokens {
        &self.tokens
    }

    fn key_map(&self) -> KeyMap {
        KeyMap::new()
            .dialect(&GPT2_PREFIX)
            .names(&GPT2_NAMES)
            // Old checkpoints keep the causal mask as a buffer.
            .ignore(r"\.attn\.(bias|masked_bias)$")
            .untransposed(r"^layers\.\d+\.(self_attn|mlp)\.[a-z_]+\.weight$")
    }
}

impl DecoderSpec for LlamaConfig {
    fn decoder(&self) -> Result<DecoderConfig> {
        llama_decoder(self)
    }

    fn tokens(&self) -> &SpecialTokens {
        &self.tokens
    }

    fn key_map(&self) -> KeyMap {
        llama_key_map(&[])
    }
}

fn gpt2_decoder(c: &Gpt2Config) -> Result<DecoderConfig> {
    if c.scale_attn_by_inverse_layer_idx {
        return Err(unsupported(
            "scale_attn_by_inverse_layer_idx",
            true,
            "only false is",
        ));
    }
    Ok(
        DecoderConfig::new(c.vocab_size, c.n_embd, c.n_layer, c.n_head, c.n_positions)
            .with_d_ff(Some(c.n_inner.unwrap_or(c.n_embd.saturating_mul(4))))
            .with_activation(c.activation_function.ffn())
            .with_norm_eps(c.layer_norm_epsilon)
            .with_tie_embeddings(c.tie_word_embeddings)
            .with_attn_scale((!c.scale_attn_weights).then_some(1.0)),
    )
}

fn llama_decoder(c: &LlamaConfig) -> Result<DecoderConfig> {
    let activation = match c.hidden_act.unwrap_or(HiddenAct::Silu) {
        HiddenAct::Silu => FfnActivation::SwiGlu,
        HiddenAct::GeluTanh => FfnActivation::GeGlu,
        other => {
            return Err(unsupported(
                "hidden_act",
                format!("{other:?}"),
                "a gated MLP takes silu or gelu_pytorch_tanh",
            ));
        }
    };
    let window = match c.model_type.as_str() {
        "mistral" => c.sliding_window,
        "qwen2" if c.use_sliding_window == Some(true) => {
            let layers = c.other.get("layer_types").and_then(Value::as_array);
            let mixed = layers.is_some_and(|l| l.iter().any(|t| t != "sliding_attention"));
            if mixed {
                return Err(ConfigError::conflict(
                    "use_sliding_window with full-attention layers among sliding ones is not \
                     supported",
                )
                .into());
            }
            c.sliding_window
        }
        _ => None,
    };
    let qkv_bias = c.attention_bias || c.model_type == "qwen2";
    Ok(c.sizes
        .llama_style(&c.rope, c.rms_norm_eps)?
        .with_activation(activation)
        .with_qkv_bias(Some(qkv_bias))
        .with_out_bias(Some(c.attention_bias))
        .with_mlp_bias(Some(c.mlp_bias))
        .with_sliding_window(window))
}

/// GPT-2's names without the `transformer.` prefix, and module paths.
const GPT2_NAMES: [(&str, &str); 8] = [
    ("h.{n}.ln_1.", "layers.{n}.norm_1."),
    ("h.{n}.ln_2.", "layers.{n}.norm_2."),
    ("h.{n}.attn.c_attn.", "layers.{n}.self_attn.qkv_proj."),
    ("h.{n}.attn.c_proj.", "layers.{n}.self_attn.o_proj."),
    ("h.{n}.mlp.c_fc.", "layers.{n}.mlp.up_proj."),
    ("h.{n}.mlp.c_proj.", "layers.{n}.mlp.down_proj."),
    ("wpe.", "wpe.embedding."),
    ("ln_f.", "norm_f."),
];

/// `GPT2LMHeadModel`'s prefix, which bare `GPT2Model` checkpoints do not have: read with
/// it or without, written with it.
const GPT2_PREFIX: [(&str, &str); 4] = [
    ("transformer.h.", "h."),
    ("transformer.wte.", "wte."),
    ("transformer.wpe.", "wpe."),
    ("transformer.ln_f.", "ln_f."),
];

impl DecoderLm {
    /// Loads an HF causal-LM checkpoint folder: `config.json` (`model_type` gpt2, llama,
    /// mistral or qwen2) and its weights.
    ///
    /// # Errors
    /// A missing or invalid `config.json`, an unsupported setting, no weights file, or
    /// tensors that do not fit, all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &burn::tensor::Device) -> Result<Self> {
        let dir = dir.as_ref();
        let hf = HfDecoderConfig::from_pretrained(dir)?;
        let mut model = hf.decoder()?.init(device)?;
        checkpoint::load_into(&mut model, dir, &hf.key_map())?;
        Ok(model)
    }

    /// Writes the model as an HF checkpoint folder of `config`'s architecture:
    /// `model.safetensors` in HF's layout and `config.json`. Each file appears whole or
    /// not at all.
    ///
    /// # Errors
    /// A config that does not describe this model's sizes, or a folder that cannot be
    /// written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>, config: &HfDecoderConfig) -> Result<()> {
        let dir = dir.as_ref();
        let want = config.decoder()?;
        let fits = want.vocab_size == self.vocab_size()
            && want.max_len == self.max_len()
            && want.n_layers == self.layers.len()
            && want.tie_embeddings == self.lm_head.is_tied()
            && want.sliding_window == self.sliding_window();
        if !fits {
            return Err(ConfigError::conflict(format!(
                "the {} config does not describe this model (vocab_size {}, max_len {}, {} layers, \
                 tied head {}, sliding window {:?})",
                config.model_type(),
                self.vocab_size(),
                self.max_len(),
                self.layers.len(),
                self.lm_head.is_tied(),
                self.sliding_window()
            ))
            .into());
        }
        let (map, arch) = (config.key_map(), config.architecture());
        let model_type = config.model_type();
        let json = config.to_json()?;
        checkpoint::save_pretrained(self, dir, &map, &json, model_type, arch)?;
        Ok(())
    }
}

impl DecoderLm {
    /// This model with the PEFT LoRA adapter of `adapter` folded into its weights: what
    /// PEFT's `merge_and_unload` gives.
    ///
    /// # Errors
    /// An adapter that cannot be read or does not fit this model (named).
    pub fn with_adapter(
        self,
        adapter: &Path,
        config: &HfDecoderConfig,
    ) -> std::result::Result<Self, zoo_core::ModelError> {
        let adapted = zoo_core::checkpoint::peft::load_adapter(self, &config.key_map(), adapter)
            .map_err(zoo_core::ModelError::new)?;
        Ok(burn::module::Module::materialize(adapted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PositionKind;
    use zoo_attention::RopeLayout;

    fn llama_json() -> Value {
        serde_json::json!({
            "model_type": "llama", "vocab_size": 50, "hidden_size": 32,
            "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 16,
            "rope_parameters": {"rope_theta": 500.0, "rope_type": "default"},
        })
    }

    fn parse(json: Value) -> Result<HfDecoderConfig> {
        let dir = std::env::temp_dir().join(format!(
            "zoo-decoder-config-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), json.to_string()).unwrap();
        let out = HfDecoderConfig::from_pretrained(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        out
    }

    #[test]
    fn llama_fields_become_the_decoder_config() {
        let cfg = parse(llama_json()).unwrap();
        let d = cfg.decoder().unwrap();
        assert_eq!((d.n_heads, d.n_kv_heads, d.d_ff), (4, Some(2), Some(48)));
        assert_eq!(
            d.positions,
            PositionKind::Rope {
                theta: 500.0,
                layout: RopeLayout::HalfSplit
            }
        );
        assert!(!d.tie_embeddings && d.sliding_window.is_none());
        assert_eq!(d.qkv_bias, Some(false));
        // The older top-level rope_theta is read too.
        let mut old = llama_json();
        old.as_object_mut().unwrap().remove("rope_parameters");
        old["rope_theta"] = 1234.0.into();
        let d = parse(old).unwrap().decoder().unwrap();
        assert!(matches!(d.positions, PositionKind::Rope { theta, .. } if theta == 1234.0));
        // Qwen2 has Q, K, V biases and no output bias; its window is off unless asked.
        let mut qwen = llama_json();
        qwen["model_type"] = "qwen2".into();
        qwen["sliding_window"] = 4.into();
        let d = parse(qwen).unwrap().decoder().unwrap();
        assert_eq!((d.qkv_bias, d.out_bias), (Some(true), Some(false)));
        assert_eq!(d.sliding_window, None);
        let mut mistral = llama_json();
        mistral["model_type"] = "mistral".into();
        mistral["sliding_window"] = 4.into();
        let d = parse(mistral).unwrap().decoder().unwrap();
        assert_eq!(d.sliding_window, Some(4));
    }

    #[test]
    fn unsupported_settings_are_named() {
        let cases: [(&str, Value, &str); 8] = [
            (
                "model_type",
                serde_json::json!("bert"),
                "model_type \"bert\" is not a decoder this crate loads; it loads gpt2, llama, \
                 mistral, qwen2",
            ),
            (
                "rope_parameters",
                serde_json::json!({"rope_type": "proportional", "rope_theta": 1.0}),
                "rope_type \"proportional\"",
            ),
            (
                "rope_parameters",
                serde_json::json!({"rope_type": "yarn", "factor": "four"}),
                "rope_parameters of type \"yarn\" has no number factor",
            ),
            (
                "rope_parameters",
                serde_json::json!({"rope_type": "longrope", "short_factor": [1.0, 1.0]}),
                "rope_parameters of type \"longrope\" has no list of numbers long_factor",
            ),
            ("hidden_act", serde_json::json!("relu"), "hidden_act Relu"),
            (
                "rope_scaling",
                serde_json::json!({"rope_type": "llama3", "factor": 8.0}),
                "rope_scaling of type \"llama3\" has no number low_freq_factor",
            ),
            (
                "num_key_value_heads",
                serde_json::json!(3),
                "n_heads 4 is not divisible by n_kv_heads 3",
            ),
            (
                "vocab_size",
                serde_json::json!(-1),
                "invalid value: integer `-1`",
            ),
        ];
        for (field, value, want) in cases {
            let mut json = llama_json();
            json[field] = value;
            let e = parse(json).unwrap_err().to_string();
            assert!(e.contains("config.json: "), "{e}");
            assert!(e.contains(want), "{field}: {e}");
        }
    }
}
