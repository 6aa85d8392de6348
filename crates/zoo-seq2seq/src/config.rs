//! The configurations of the encoder-decoder family, with HF's `config.json` field names:
//! [`T5Config`] and [`MarianConfig`], whose post-norm model also covers the original
//! Transformer ([`MarianConfig::transformer`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zoo_attention::{FfnActivation, HiddenAct};
pub use zoo_core::checkpoint::TokenIds;
use zoo_core::{ConfigError, validate};

use crate::error::Result;

fn yes() -> bool {
    true
}

fn t5_buckets() -> usize {
    32
}
fn t5_distance() -> usize {
    128
}
fn t5_eps() -> f64 {
    1e-6
}
fn t5_ff() -> String {
    "relu".into()
}
fn t5_positions() -> usize {
    512
}

/// HF's `T5Config` (Raffel et al., 2020). Fields the zoo does not use are kept in `other`
/// and written back on saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct T5Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// Width of one head, independent of `d_model / num_heads`.
    pub d_kv: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Encoder blocks.
    pub num_layers: usize,
    /// Decoder blocks; `null` means `num_layers`.
    #[serde(default)]
    pub num_decoder_layers: Option<usize>,
    /// Heads.
    pub num_heads: usize,
    /// Relative-position buckets. Default: 32.
    #[serde(default = "t5_buckets")]
    pub relative_attention_num_buckets: usize,
    /// Distance where the last bucket starts. Default: 128.
    #[serde(default = "t5_distance")]
    pub relative_attention_max_distance: usize,
    /// RMS norm epsilon. Default: 1e-6.
    #[serde(default = "t5_eps")]
    pub layer_norm_epsilon: f64,
    /// `relu` (T5 v1.0) or `gated-gelu` (v1.1, with GELU-tanh). Default: `relu`.
    #[serde(default = "t5_ff")]
    pub feed_forward_proj: String,
    /// The LM head is the shared embedding. Default: true. (Configs written before
    /// `transformers` 5 set it false for T5 v1.1, whose checkpoints hold an `lm_head`.)
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// The decoder's output is scaled by `d_model^-0.5` before the head, as T5 v1.0 does.
    /// Default: `tie_word_embeddings` (how configs before `transformers` 5 said it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_decoder_outputs: Option<bool>,
    /// Padding token. Default: 0.
    #[serde(default)]
    pub pad_token_id: usize,
    /// End-of-sequence token(s). Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<TokenIds>,
    /// The decoder's first token. Default: `pad_token_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_start_token_id: Option<usize>,
    /// Longest decoder sequence the zoo generates (T5's relative positions have no
    /// table, so HF has no such field; `n_positions` of old configs is read). Default: 512.
    #[serde(default = "t5_positions", alias = "n_positions")]
    pub n_positions: usize,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl T5Config {
    /// The decoder's block count.
    pub fn decoder_layers(&self) -> usize {
        self.num_decoder_layers.unwrap_or(self.num_layers)
    }

    /// The feed-forward activation.
    ///
    /// # Errors
    /// A `feed_forward_proj` other than `relu` and `gated-gelu`.
    pub fn activation(&self) -> Result<FfnActivation> {
        match self.feed_forward_proj.as_str() {
            "relu" => Ok(FfnActivation::Relu),
            "gated-gelu" => Ok(FfnActivation::GeGlu),
            other => Err(ConfigError::unsupported(
                "feed_forward_proj",
                format!("{other:?}"),
                "relu and gated-gelu are",
            )
            .into()),
        }
    }

    /// Whether the decoder's output is scaled by `d_model^-0.5` before the head.
    pub fn scales_decoder_outputs(&self) -> bool {
        self.scale_decoder_outputs
            .unwrap_or(self.tie_word_embeddings)
    }

    /// End-of-sequence tokens (T5's default: 1).
    pub fn eos_ids(&self) -> Vec<usize> {
        self.eos_token_id.as_ref().map_or(vec![1], TokenIds::ids)
    }

    /// The decoder's first token.
    pub fn start_id(&self) -> usize {
        self.decoder_start_token_id.unwrap_or(self.pad_token_id)
    }

    /// Checks every size; each error names the field.
    ///
    /// # Errors
    /// A zero size, an unknown activation, bucket settings T5's scheme cannot use, or
    /// special tokens outside the vocabulary.
    pub fn validate(&self) -> Result<()> {
        validate::positive(&[
            ("vocab_size", self.vocab_size),
            ("d_model", self.d_model),
            ("d_kv", self.d_kv),
            ("d_ff", self.d_ff),
            ("num_layers", self.num_layers),
            ("num_decoder_layers", self.decoder_layers()),
            ("num_heads", self.num_heads),
            ("n_positions", self.n_positions),
        ])?;
        let layers = self.num_layers.saturating_add(self.decoder_layers());
        validate::transformer_fits(
            "T5's weights",
            self.vocab_size,
            self.d_model,
            layers,
            self.d_ff,
            self.num_heads.saturating_mul(self.d_kv),
        )?;
        validate::epsilon("layer_norm_epsilon", self.layer_norm_epsilon)?;
        self.activation()?;
        zoo_attention::position::check_bucket_settings(
            self.relative_attention_num_buckets,
            self.relative_attention_max_distance,
            true,
        )?;
        check_tokens(
            self.vocab_size,
            &[
                ("pad_token_id", self.pad_token_id),
                ("decoder_start_token_id", self.start_id()),
            ],
            &self.eos_ids(),
        )
    }
}

fn check_tokens(vocab: usize, named: &[(&str, usize)], eos: &[usize]) -> Result<()> {
    for (name, id) in named
        .iter()
        .copied()
        .chain(eos.iter().map(|&e| ("eos_token_id", e)))
    {
        if id >= vocab {
            return Err(ConfigError::range(name, format!("< vocab_size {vocab}"), id).into());
        }
    }
    Ok(())
}

/// Where the sines and cosines of a sinusoidal table sit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinusoidLayout {
    /// Marian's: all sines, then all cosines.
    #[default]
    Split,
    /// The original Transformer's: sine and cosine interleaved.
    Interleaved,
}

impl SinusoidLayout {
    fn is_split(&self) -> bool {
        *self == Self::Split
    }
}

fn marian_act() -> HiddenAct {
    HiddenAct::Gelu
}
fn marian_positions() -> usize {
    1024
}

/// HF's `MarianConfig` (Junczys-Dowmunt et al., 2018): a post-norm Transformer with
/// sinusoidal positions. With `sinusoid_layout: interleaved` and ReLU it is the original
/// Transformer (Vaswani et al., 2017). Fields the zoo does not use are kept in `other`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarianConfig {
    /// Vocabulary size (shared by source, target and output).
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// Encoder layers.
    pub encoder_layers: usize,
    /// Decoder layers.
    pub decoder_layers: usize,
    /// Encoder heads.
    pub encoder_attention_heads: usize,
    /// Decoder heads.
    pub decoder_attention_heads: usize,
    /// Encoder feed-forward width.
    pub encoder_ffn_dim: usize,
    /// Decoder feed-forward width.
    pub decoder_ffn_dim: usize,
    /// Feed-forward activation. Default: `gelu`.
    #[serde(default = "marian_act")]
    pub activation_function: HiddenAct,
    /// Longest sequence. Default: 1024.
    #[serde(default = "marian_positions")]
    pub max_position_embeddings: usize,
    /// Embeddings multiplied by `sqrt(d_model)`. Default: false.
    #[serde(default)]
    pub scale_embedding: bool,
    /// Dropout while training. Default: 0.1.
    #[serde(default = "marian_dropout")]
    pub dropout: f64,
    /// Dropout on attention weights while training. Default: 0.
    #[serde(default)]
    pub attention_dropout: f64,
    /// Padding token (also the decoder's first token by default).
    pub pad_token_id: usize,
    /// End-of-sequence token(s).
    pub eos_token_id: TokenIds,
    /// The decoder's first token. Default: `pad_token_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_start_token_id: Option<usize>,
    /// A token forced at the last position generation allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_eos_token_id: Option<usize>,
    /// A token forced as the first generated one (mBART-50's target language code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_bos_token_id: Option<usize>,
    /// Token sequences never generated; single tokens are supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad_words_ids: Option<Vec<Vec<usize>>>,
    /// A separate target vocabulary is not supported; `null` or `vocab_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_vocab_size: Option<usize>,
    /// Source and target share one embedding. Default: true.
    #[serde(default = "yes")]
    pub share_encoder_decoder_embeddings: bool,
    /// The zoo's own field: the sinusoid layout, `split` (Marian, the default) or
    /// `interleaved` (the original Transformer). Written only when interleaved.
    #[serde(default, skip_serializing_if = "SinusoidLayout::is_split")]
    pub sinusoid_layout: SinusoidLayout,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

fn marian_dropout() -> f64 {
    0.1
}

/// The architectures [`MarianConfig`] describes, told apart by `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarianVariant {
    /// Marian (`marian`), or the original Transformer: computed sinusoids, post-norm.
    Marian,
    /// BART (`bart`, Lewis et al., 2019): learned positions offset by 2, a LayerNorm on
    /// the embeddings of each stack, post-norm layers.
    Bart,
    /// mBART (`mbart`, Liu et al., 2020): BART's embeddings, pre-norm layers, and a
    /// LayerNorm after the last layer of each stack.
    MBart,
}

impl MarianVariant {
    /// HF's `model_type` of the variant.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Marian => "marian",
            Self::Bart => "bart",
            Self::MBart => "mbart",
        }
    }

    /// HF's class of the variant with its language-model head.
    pub fn architecture(self) -> &'static str {
        match self {
            Self::Marian => "MarianMTModel",
            Self::Bart => "BartForConditionalGeneration",
            Self::MBart => "MBartForConditionalGeneration",
        }
    }

    /// Learned positions: the table's rows start at this offset (HF's
    /// `BartLearnedPositionalEmbedding`), and it has `max_position_embeddings + 2` rows.
    pub const POSITION_OFFSET: usize = 2;
}

impl MarianConfig {
    /// Which architecture this is, by `model_type` (Marian when it names none).
    pub fn variant(&self) -> MarianVariant {
        match self.other.get("model_type").and_then(Value::as_str) {
            Some("bart") => MarianVariant::Bart,
            Some("mbart") => MarianVariant::MBart,
            _ => MarianVariant::Marian,
        }
    }

    /// The original Transformer (Vaswani et al., 2017): post-norm, ReLU, interleaved
    /// sinusoidal positions, one embedding shared by source, target and output and scaled
    /// by `sqrt(d_model)`. Tokens: `pad` is also the decoder's first token.
    #[allow(clippy::too_many_arguments)]
    pub fn transformer(
        vocab_size: usize,
        d_model: usize,
        layers: usize,
        heads: usize,
        d_ff: usize,
        max_len: usize,
        pad: usize,
        eos: usize,
    ) -> Self {
        Self {
            vocab_size,
            d_model,
            encoder_layers: layers,
            decoder_layers: layers,
            encoder_attention_heads: heads,
            decoder_attention_heads: heads,
            encoder_ffn_dim: d_ff,
            decoder_ffn_dim: d_ff,
            activation_function: HiddenAct::Relu,
            max_position_embeddings: max_len,
            scale_embedding: true,
            dropout: 0.1,
            attention_dropout: 0.0,
            pad_token_id: pad,
            eos_token_id: TokenIds::One(eos),
            decoder_start_token_id: None,
            forced_eos_token_id: None,
            forced_bos_token_id: None,
            bad_words_ids: None,
            decoder_vocab_size: None,
            share_encoder_decoder_embeddings: true,
            sinusoid_layout: SinusoidLayout::Interleaved,
            other: Map::new(),
        }
    }

    /// The decoder's first token.
    pub fn start_id(&self) -> usize {
        self.decoder_start_token_id.unwrap_or(self.pad_token_id)
    }

    /// Tokens never generated: the single-token entries of `bad_words_ids`.
    pub fn banned_tokens(&self) -> Vec<usize> {
        self.bad_words_ids
            .iter()
            .flatten()
            .filter(|w| w.len() == 1)
            .map(|w| w[0])
            .collect()
    }

    /// Checks every size; each error names the field.
    ///
    /// # Errors
    /// A zero size, widths that the heads do not divide, dropouts outside `[0, 1)`,
    /// special tokens outside the vocabulary, or a separate target vocabulary.
    pub fn validate(&self) -> Result<()> {
        validate::positive(&[
            ("vocab_size", self.vocab_size),
            ("d_model", self.d_model),
            ("encoder_layers", self.encoder_layers),
            ("decoder_layers", self.decoder_layers),
            ("encoder_ffn_dim", self.encoder_ffn_dim),
            ("decoder_ffn_dim", self.decoder_ffn_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ])?;
        // Each stack on its own (the larger one alone must fit), then both together
        // at the narrower feed-forward.
        let rows = self.vocab_size.saturating_add(self.max_position_embeddings);
        for (layers, d_ff) in [
            (self.encoder_layers, self.encoder_ffn_dim),
            (self.decoder_layers, self.decoder_ffn_dim),
            (
                self.encoder_layers.saturating_add(self.decoder_layers),
                self.encoder_ffn_dim.min(self.decoder_ffn_dim),
            ),
        ] {
            validate::transformer_fits(
                "Marian's weights",
                rows,
                self.d_model,
                layers,
                d_ff,
                self.d_model,
            )?;
        }
        for heads in [
            ("encoder_attention_heads", self.encoder_attention_heads),
            ("decoder_attention_heads", self.decoder_attention_heads),
        ] {
            validate::divisible(("d_model", self.d_model), heads)?;
        }
        validate::probabilities(&[
            ("dropout", self.dropout),
            ("attention_dropout", self.attention_dropout),
        ])?;
        if let Some(v) = self.decoder_vocab_size.filter(|v| *v != self.vocab_size) {
            return Err(ConfigError::conflict(format!(
                "decoder_vocab_size {v} differs from vocab_size {}: separate target \
                 vocabularies are not supported",
                self.vocab_size
            ))
            .into());
        }
        if !self.share_encoder_decoder_embeddings {
            return Err(ConfigError::unsupported(
                "share_encoder_decoder_embeddings",
                false,
                "only shared embeddings are",
            )
            .into());
        }
        let mut named = vec![
            ("pad_token_id", self.pad_token_id),
            ("decoder_start_token_id", self.start_id()),
        ];
        named.extend(self.forced_eos_token_id.map(|t| ("forced_eos_token_id", t)));
        named.extend(self.forced_bos_token_id.map(|t| ("forced_bos_token_id", t)));
        named.extend(
            self.banned_tokens()
                .into_iter()
                .map(|t| ("bad_words_ids", t)),
        );
        check_tokens(self.vocab_size, &named, &self.eos_token_id.ids())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t5() -> T5Config {
        serde_json::from_value(serde_json::json!({
            "vocab_size": 100, "d_model": 16, "d_kv": 6, "d_ff": 24, "num_layers": 2,
            "num_heads": 3, "feed_forward_proj": "gated-gelu", "model_type": "t5",
        }))
        .unwrap()
    }

    #[test]
    fn t5_defaults_are_hf_s() {
        let c = t5();
        assert_eq!(c.decoder_layers(), 2);
        assert_eq!(c.eos_ids(), vec![1]);
        assert_eq!(c.start_id(), 0);
        assert_eq!(c.activation().unwrap(), FfnActivation::GeGlu);
        assert!(c.tie_word_embeddings);
        assert_eq!(c.other.get("model_type").unwrap(), "t5");
        c.validate().unwrap();
    }

    #[test]
    fn bad_configs_name_the_field() {
        let mut c = t5();
        c.feed_forward_proj = "gated-swish".into();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "invalid encoder-decoder config: feed_forward_proj \"gated-swish\" is not supported \
             (relu and gated-gelu are)"
        );
        let mut c = t5();
        c.num_heads = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .ends_with("num_heads must be > 0, got 0")
        );
        let mut c = t5();
        c.pad_token_id = 100;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .ends_with("pad_token_id must be < vocab_size 100, got 100")
        );
        let mut m = MarianConfig::transformer(50, 30, 2, 4, 64, 32, 0, 1);
        assert_eq!(
            m.validate().unwrap_err().to_string(),
            "invalid encoder-decoder config: d_model 30 is not divisible by encoder_attention_heads 4"
        );
        m.d_model = 32;
        m.validate().unwrap();
        m.decoder_vocab_size = Some(60);
        assert!(
            m.validate()
                .unwrap_err()
                .to_string()
                .contains("decoder_vocab_size 60")
        );
    }
}
