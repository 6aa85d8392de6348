//! The BERT configuration, with HF's `config.json` field names, and its presets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
pub use zoo_attention::HiddenAct;

use zoo_core::ConfigError;

use crate::error::Result;

fn default_act() -> HiddenAct {
    HiddenAct::Gelu
}
fn default_max_positions() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_dropout() -> f64 {
    0.1
}
fn default_range() -> f64 {
    0.02
}
fn default_position_type() -> String {
    "absolute".into()
}

/// Configuration of a BERT encoder. The field names are HF's, so a checkpoint's
/// `config.json` deserializes directly ([`BertConfig::from_json`]); fields HF has and the
/// model does not use (`architectures`, `model_type`, ...) are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    #[serde(alias = "dim")]
    pub hidden_size: usize,
    /// Encoder layers.
    #[serde(alias = "n_layers")]
    pub num_hidden_layers: usize,
    /// Attention heads.
    #[serde(alias = "n_heads")]
    pub num_attention_heads: usize,
    /// Feed-forward width.
    #[serde(alias = "hidden_dim")]
    pub intermediate_size: usize,
    /// Feed-forward activation. Default: exact GELU.
    #[serde(default = "default_act")]
    #[serde(alias = "activation")]
    pub hidden_act: HiddenAct,
    /// Longest input. Default: 512.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// Token types (segments). Default: 2. 0 builds no token-type table (DistilBERT).
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon. Default: 1e-12, BERT's.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Dropout on embeddings and sub-layer outputs while training. Default: 0.1.
    #[serde(default = "default_dropout")]
    #[serde(alias = "dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention weights while training. Default: 0.1.
    #[serde(default = "default_dropout")]
    #[serde(alias = "attention_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Padding id. Default: 0.
    #[serde(default)]
    pub pad_token_id: usize,
    /// Std of the initial weights. Default: 0.02.
    #[serde(default = "default_range")]
    pub initializer_range: f64,
    /// How positions enter: only `"absolute"` (learned embeddings) is built; the
    /// `relative_key` variants are rejected by [`Self::validate`].
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
    /// HF's `model_type`, `"bert"` in a BERT checkpoint; checked by [`Self::validate`]
    /// when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Class names of a classification checkpoint, by class index (`"0"`, `"1"`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
}

impl BertConfig {
    /// The activation of the pooler: tanh, or DistilBERT's ReLU.
    pub fn pooler_act(&self) -> zoo_attention::PoolerActivation {
        crate::pretrained::layout(self.model_type.as_deref()).pooler
    }

    /// A configuration with BERT's defaults for everything but the sizes.
    pub fn new(
        vocab_size: usize,
        hidden_size: usize,
        num_hidden_layers: usize,
        num_attention_heads: usize,
        intermediate_size: usize,
    ) -> Self {
        Self {
            vocab_size,
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size,
            hidden_act: default_act(),
            max_position_embeddings: default_max_positions(),
            type_vocab_size: default_type_vocab(),
            layer_norm_eps: default_eps(),
            hidden_dropout_prob: default_dropout(),
            attention_probs_dropout_prob: default_dropout(),
            pad_token_id: 0,
            initializer_range: default_range(),
            position_embedding_type: default_position_type(),
            model_type: None,
            id2label: None,
        }
    }

    /// `bert-base-uncased`: 12 layers of width 768, 12 heads, 30522 WordPiece tokens.
    pub fn bert_base_uncased() -> Self {
        Self::new(30522, 768, 12, 12, 3072)
    }

    /// `sentence-transformers/all-MiniLM-L6-v2`: 6 layers of width 384, 12 heads.
    pub fn all_minilm_l6_v2() -> Self {
        Self::new(30522, 384, 6, 12, 1536)
    }

    /// Parses HF's `config.json` text and validates it.
    ///
    /// # Errors
    /// JSON that does not parse or lacks a size, or values [`Self::validate`] rejects.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(ConfigError::malformed)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// A zero size, a width the heads do not divide, a pad id outside the vocabulary, a
    /// non-positive epsilon or a dropout outside `[0, 1)`, each naming the value.
    pub fn validate(&self) -> Result<()> {
        use zoo_core::validate;
        validate::positive(&[
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ])?;
        validate::transformer_fits(
            "the encoder's weights",
            self.vocab_size
                .saturating_add(self.max_position_embeddings)
                .saturating_add(self.type_vocab_size),
            self.hidden_size,
            self.num_hidden_layers,
            self.intermediate_size,
            self.hidden_size,
        )?;
        if self.position_embedding_type != "absolute" {
            return Err(ConfigError::unsupported(
                "position_embedding_type",
                format!("{:?}", self.position_embedding_type),
                "only \"absolute\"",
            )
            .into());
        }
        let layout = crate::pretrained::layout(self.model_type.as_deref());
        validate::model_type(self.model_type.as_deref(), layout.model_type, "BERT")?;
        validate::divisible(
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
        )?;
        if self.pad_token_id >= self.vocab_size {
            return Err(ConfigError::range(
                "pad_token_id",
                format!("< vocab_size {}", self.vocab_size),
                self.pad_token_id,
            )
            .into());
        }
        if layout.positions == crate::model::PositionIds::AfterPadding
            && self.pad_token_id + 1 >= self.max_position_embeddings
        {
            return Err(ConfigError::conflict(format!(
                "max_position_embeddings {} leaves no position for a token: positions \
                 start after pad_token_id {}",
                self.max_position_embeddings, self.pad_token_id
            ))
            .into());
        }
        Ok(validate::bert_style(
            self.layer_norm_eps,
            self.hidden_dropout_prob,
            self.attention_probs_dropout_prob,
            self.id2label.as_ref(),
        )?)
    }

    /// The class names of a classification checkpoint, in class order (empty without
    /// `id2label`).
    pub fn labels(&self) -> Vec<String> {
        zoo_core::checkpoint::labels(self.id2label.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `config.json` of all-MiniLM-L6-v2, as published with the model.
    const MINILM: &str = r#"{
      "_name_or_path": "nreimers/MiniLM-L6-H384-uncased",
      "architectures": ["BertModel"],
      "attention_probs_dropout_prob": 0.1,
      "gradient_checkpointing": false,
      "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1,
      "hidden_size": 384,
      "initializer_range": 0.02,
      "intermediate_size": 1536,
      "layer_norm_eps": 1e-12,
      "max_position_embeddings": 512,
      "model_type": "bert",
      "num_attention_heads": 12,
      "num_hidden_layers": 6,
      "pad_token_id": 0,
      "position_embedding_type": "absolute",
      "transformers_version": "4.8.2",
      "type_vocab_size": 2,
      "use_cache": true,
      "vocab_size": 30522
    }"#;

    #[test]
    fn hf_config_json_reads_directly() {
        let mut expected = BertConfig::all_minilm_l6_v2();
        expected.model_type = Some("bert".into());
        assert_eq!(BertConfig::from_json(MINILM).unwrap(), expected);
        let tanh = MINILM.replace("\"gelu\"", "\"gelu_new\"");
        assert_eq!(
            BertConfig::from_json(&tanh).unwrap().hidden_act,
            HiddenAct::GeluTanh
        );
    }

    #[test]
    fn malformed_configs_are_errors_naming_the_value() {
        let e = BertConfig::from_json(&MINILM.replace("384,", "380,")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid BERT config: hidden_size 380 is not divisible by num_attention_heads 12"
        );
        let e = BertConfig::from_json(
            &MINILM.replace("\"pad_token_id\": 0", "\"pad_token_id\": 30522"),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid BERT config: pad_token_id must be < vocab_size 30522, got 30522"
        );
        let e = BertConfig::from_json(&MINILM.replace("\"gelu\"", "\"tanh\"")).unwrap_err();
        assert!(e.to_string().contains("unknown variant `tanh`"), "{e}");
        let e =
            BertConfig::from_json(&MINILM.replace("\"num_hidden_layers\": 6,", "")).unwrap_err();
        assert!(
            e.to_string().contains("missing field `num_hidden_layers`"),
            "{e}"
        );
        let e =
            BertConfig::from_json(&MINILM.replace("\"absolute\"", "\"relative_key\"")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid BERT config: position_embedding_type \"relative_key\" is not supported (only \"absolute\")"
        );
        let e = BertConfig::from_json(&MINILM.replace("\"bert\"", "\"gpt2\"")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid BERT config: model_type \"gpt2\" is not a BERT model"
        );
        let e = BertConfig::from_json("{").unwrap_err();
        assert!(e.to_string().starts_with("invalid BERT config: "), "{e}");
        let mut c = BertConfig::all_minilm_l6_v2();
        c.hidden_dropout_prob = 1.0;
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "invalid BERT config: hidden_dropout_prob must be in [0, 1), got 1"
        );
    }
}
