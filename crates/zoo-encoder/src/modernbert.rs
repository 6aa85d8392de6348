//! ModernBERT (Warner et al., 2024, "Smarter, Better, Faster, Longer: A Modern
//! Bidirectional Encoder for Fast, Memory Efficient, and Long Context Finetuning and
//! Inference") as HF's `ModernBertModel` lays it out, with its four heads.
//!
//! What sets it apart from BERT, all of it built from `zoo-attention`'s parts:
//! - no position table: RoPE in every layer, with one base for the global layers and
//!   another for the local ones (`rope_parameters`, or the older `global_rope_theta` and
//!   `local_rope_theta`);
//! - global attention every `global_attn_every_n_layers`-th layer (or as `layer_types`
//!   lists them), and in between local attention that sees the keys within
//!   `local_attention / 2` positions on either side;
//! - pre-norm layers whose first attention has no norm (the embeddings' norm precedes
//!   it), LayerNorms without biases unless `norm_bias`, and no biases in the projections
//!   unless `attention_bias` / `mlp_bias`;
//! - one fused `Wqkv` projection, and a gated MLP with one fused `Wi` (`act(first half) ·
//!   second half`), exact GELU by default;
//! - heads through a prediction head (dense, activation, norm); the masked LM's decoder is
//!   tied to the token table; the sequence classifier pools the CLS token or the mean of
//!   the real tokens (`classifier_pooling`).
//!
//! HF's 5.x model computes every position with a mask, as here; padded positions whose
//! local window holds only padding see no key, and the zoo gives them zero attention
//! where HF gives them an average of padding: outputs at real tokens are the same.
//!
//! | HF name (under `model.` in the heads) | module path |
//! |---|---|
//! | `embeddings.{tok_embeddings, norm}` | the same |
//! | `layers.N.attn_norm` (absent in layer 0) | `layers.N.norm_1` |
//! | `layers.N.attn.Wqkv` | `layers.N.self_attn.qkv_proj` |
//! | `layers.N.attn.Wo` | `layers.N.self_attn.o_proj` |
//! | `layers.N.mlp_norm` | `layers.N.norm_2` |
//! | `layers.N.mlp.Wi` | `layers.N.mlp.gate_up_proj` |
//! | `layers.N.mlp.Wo` | `layers.N.mlp.down_proj` |
//! | `final_norm`, `head.{dense, norm}`, `decoder.bias`, `classifier` | the same |

use std::collections::BTreeMap;
use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::tensor::{Bool, Device, Int, Tensor};
use serde::{Deserialize, Serialize};
use zoo_attention::{
    BlockInput, FeedForwardConfig, FfnActivation, GateLayout, HiddenAct, MultiHeadAttentionConfig,
    NoNorm, Norm, NormKind, NormPlacement, TransformerBlock, TransformerBlockConfig,
};
use zoo_core::checkpoint::{self, KeyMap};
use zoo_core::tokens::TokenLimits;
use zoo_core::{ConfigError, validate};

use crate::error::{EncoderError, Result};

/// Whether a layer attends globally or within its local window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerType {
    /// Every key (`"full_attention"`).
    FullAttention,
    /// The keys within `local_attention / 2` positions (`"sliding_attention"`).
    SlidingAttention,
}

/// What the sequence classifier reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassifierPooling {
    /// The CLS token's state.
    #[default]
    Cls,
    /// The mean over the real tokens.
    Mean,
}

fn gelu() -> HiddenAct {
    HiddenAct::Gelu
}
fn positions() -> usize {
    8192
}
fn range() -> f64 {
    0.02
}
fn eps() -> f64 {
    1e-5
}
fn window() -> usize {
    128
}
fn yes() -> bool {
    true
}

/// A ModernBERT `config.json`, with HF's names; fields the model does not use are
/// ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModernBertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width.
    pub hidden_size: usize,
    /// Width of the MLP's gated half (`Wi` is twice as wide).
    pub intermediate_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// The MLP's activation. Default: exact GELU.
    #[serde(default = "gelu")]
    pub hidden_activation: HiddenAct,
    /// The longest input. Default: 8192.
    #[serde(default = "positions")]
    pub max_position_embeddings: usize,
    /// Std of the initial weights. Default: 0.02.
    #[serde(default = "range")]
    pub initializer_range: f64,
    /// LayerNorm epsilon. Default: 1e-5.
    #[serde(default = "eps")]
    pub norm_eps: f64,
    /// Biases in the LayerNorms. Default: false.
    #[serde(default)]
    pub norm_bias: bool,
    /// Biases in `Wqkv` and `Wo`. Default: false.
    #[serde(default)]
    pub attention_bias: bool,
    /// Dropout on the attention weights while training. Default: 0.
    #[serde(default)]
    pub attention_dropout: f64,
    /// Each layer's attention; without it, global every
    /// `global_attn_every_n_layers`-th layer from the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<LayerType>>,
    /// The older way to lay out the layers. Default: 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_attn_every_n_layers: Option<usize>,
    /// `{"full_attention": {"rope_theta", "rope_type"}, "sliding_attention": {...}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<serde_json::Value>,
    /// The global layers' RoPE base in older configs. Default: 160000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_rope_theta: Option<f64>,
    /// The local layers' RoPE base in older configs. Default: 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rope_theta: Option<f64>,
    /// The local window: keys within half of it on either side. Default: 128.
    #[serde(default = "window")]
    pub local_attention: usize,
    /// Dropout on the embeddings while training. Default: 0.
    #[serde(default)]
    pub embedding_dropout: f64,
    /// Biases in `Wi` and the MLP's `Wo`. Default: false.
    #[serde(default)]
    pub mlp_bias: bool,
    /// Dropout in the MLP while training (after its down projection here; HF drops
    /// before it). Default: 0.
    #[serde(default)]
    pub mlp_dropout: f64,
    /// The masked LM decoder's bias. Default: true.
    #[serde(default = "yes")]
    pub decoder_bias: bool,
    /// What the sequence classifier reads. Default: the CLS token.
    #[serde(default)]
    pub classifier_pooling: ClassifierPooling,
    /// Dropout before the classifier while training. Default: 0.
    #[serde(default)]
    pub classifier_dropout: f64,
    /// A bias in the prediction head's dense layer. Default: false.
    #[serde(default)]
    pub classifier_bias: bool,
    /// The prediction head's activation. Default: exact GELU.
    #[serde(default = "gelu")]
    pub classifier_activation: HiddenAct,
    /// The padding token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<usize>,
    /// The start-of-text token, kept for the saved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<usize>,
    /// The end-of-text token, kept for the saved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<usize>,
    /// The CLS token, kept for the saved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cls_token_id: Option<usize>,
    /// The SEP token, kept for the saved config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sep_token_id: Option<usize>,
    /// HF's `model_type`, `"modernbert"`; checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Class names of a classification checkpoint, by class index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
}

fn config_error(e: ConfigError) -> EncoderError {
    EncoderError::ModernBertConfig(e)
}

impl ModernBertConfig {
    /// Parses a `config.json` and validates it.
    ///
    /// # Errors
    /// JSON that does not parse, or values [`Self::validate`] rejects.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self =
            serde_json::from_str(text).map_err(|e| config_error(ConfigError::malformed(e)))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Each layer's attention.
    pub fn layer_types(&self) -> Vec<LayerType> {
        if let Some(types) = &self.layer_types {
            return types.clone();
        }
        let every = self.global_attn_every_n_layers.unwrap_or(3).max(1);
        (0..self.num_hidden_layers)
            .map(|i| {
                if i.is_multiple_of(every) {
                    LayerType::FullAttention
                } else {
                    LayerType::SlidingAttention
                }
            })
            .collect()
    }

    /// The RoPE base of a layer type.
    ///
    /// # Errors
    /// A `rope_parameters` entry whose `rope_type` is not `"default"`, or whose
    /// `rope_theta` is not a positive number.
    pub fn rope_theta(&self, kind: LayerType) -> Result<f64> {
        let (key, older, default) = match kind {
            LayerType::FullAttention => ("full_attention", self.global_rope_theta, 160_000.0),
            LayerType::SlidingAttention => ("sliding_attention", self.local_rope_theta, 10_000.0),
        };
        let entry = self.rope_parameters.as_ref().and_then(|p| p.get(key));
        if let Some(kind) = entry.and_then(|e| e.get("rope_type"))
            && kind.as_str() != Some("default")
        {
            return Err(config_error(ConfigError::unsupported(
                format!("rope_parameters.{key}.rope_type"),
                kind.to_string(),
                "only \"default\"",
            )));
        }
        let theta = match entry.and_then(|e| e.get("rope_theta")) {
            Some(v) => v.as_f64().ok_or_else(|| {
                config_error(ConfigError::malformed(format!(
                    "rope_parameters.{key}.rope_theta is {v}, not a number"
                )))
            })?,
            None => older.unwrap_or(default),
        };
        validate::positive_number(&format!("{key} rope_theta"), theta).map_err(config_error)?;
        Ok(theta)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// A zero size, a width the heads do not divide, an odd head width (RoPE rotates
    /// pairs), `layer_types` of another length than the layers, an unsupported RoPE or
    /// activation, a non-positive epsilon, a dropout outside `[0, 1)`, weights that cannot
    /// fit in memory, or a `model_type` other than `modernbert`, each naming the value.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(config_error)?;
        for kind in [LayerType::FullAttention, LayerType::SlidingAttention] {
            self.rope_theta(kind)?;
        }
        self.gated()?;
        Ok(())
    }

    fn check(&self) -> validate::Result {
        validate::model_type(self.model_type.as_deref(), "modernbert", "ModernBERT")?;
        validate::positive(&[
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
            ("local_attention", self.local_attention),
        ])?;
        validate::divisible(
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
        )?;
        let head = self.hidden_size / self.num_attention_heads;
        if !head.is_multiple_of(2) {
            return Err(ConfigError::range(
                "hidden_size / num_attention_heads",
                "even (RoPE rotates pairs of features)",
                head,
            ));
        }
        let types = self.layer_types();
        if types.len() != self.num_hidden_layers {
            return Err(ConfigError::conflict(format!(
                "layer_types lists {} layers, num_hidden_layers is {}",
                types.len(),
                self.num_hidden_layers
            )));
        }
        validate::epsilon("norm_eps", self.norm_eps)?;
        validate::probabilities(&[
            ("attention_dropout", self.attention_dropout),
            ("embedding_dropout", self.embedding_dropout),
            ("mlp_dropout", self.mlp_dropout),
            ("classifier_dropout", self.classifier_dropout),
        ])?;
        validate::transformer_fits(
            "ModernBERT's weights",
            // The token table, and RoPE's cosine and sine tables of `max_position_embeddings`
            // rows of one head's width, counted in rows of the model's width.
            self.vocab_size.saturating_add(
                self.max_position_embeddings.saturating_mul(2) / self.num_attention_heads,
            ),
            self.hidden_size,
            self.num_hidden_layers,
            self.intermediate_size.saturating_mul(3) / 2,
            self.hidden_size.saturating_mul(2),
        )?;
        if let Some(labels) = &self.id2label {
            checkpoint::class_names(labels)?;
        }
        Ok(())
    }

    /// The MLP's gated activation.
    fn gated(&self) -> Result<FfnActivation> {
        Ok(match self.hidden_activation {
            HiddenAct::Gelu => FfnActivation::GeGluExact,
            HiddenAct::GeluTanh => FfnActivation::GeGlu,
            HiddenAct::Silu => FfnActivation::SwiGlu,
            other => {
                return Err(config_error(ConfigError::unsupported(
                    "hidden_activation",
                    format!("{other:?}"),
                    "a gated MLP takes gelu, gelu_pytorch_tanh or silu",
                )));
            }
        })
    }

    fn init_weights(&self) -> Initializer {
        Initializer::Normal {
            mean: 0.0,
            std: self.initializer_range,
        }
    }

    fn norm(&self, device: &Device) -> LayerNorm {
        LayerNormConfig::new(self.hidden_size)
            .with_epsilon(self.norm_eps)
            .with_bias(self.norm_bias)
            .init(device)
    }

    /// Layer `i`, its first norm the identity in layer 0.
    fn layer(&self, i: usize, kind: LayerType, device: &Device) -> Result<TransformerBlock> {
        let (d, init) = (self.hidden_size, self.init_weights());
        let mut attention = MultiHeadAttentionConfig::new(d, self.num_attention_heads)
            .with_fused_qkv(true)
            .with_qkv_bias(self.attention_bias)
            .with_out_bias(self.attention_bias)
            .with_dropout(self.attention_dropout)
            .with_rope_max_len(Some(self.max_position_embeddings))
            .with_rope_theta(self.rope_theta(kind)?)
            .with_initializer(init.clone());
        if kind == LayerType::SlidingAttention {
            // HF's rule is |i - j| <= local_attention / 2; the window counts keys closer
            // than it.
            attention = attention.with_window(Some(self.local_attention / 2 + 1));
        }
        let ffn = FeedForwardConfig::new(d, self.intermediate_size)
            .with_activation(self.gated()?)
            .with_gate_layout(GateLayout::Fused)
            .with_bias(self.mlp_bias)
            .with_dropout(self.mlp_dropout)
            .with_initializer(init);
        let norm = if self.norm_bias {
            NormKind::LayerNorm
        } else {
            NormKind::BiasFreeLayerNorm
        };
        let mut block = TransformerBlockConfig::new(attention, ffn)
            .with_norm(norm)
            .with_norm_eps(self.norm_eps)
            .with_placement(NormPlacement::Pre)
            .init(device)?;
        if i == 0 {
            block.norm_1 = Norm::Identity(NoNorm);
        }
        Ok(block)
    }

    /// Builds the bare model, freshly initialised.
    ///
    /// # Errors
    /// See [`Self::validate`].
    pub fn init(&self, device: &Device) -> Result<ModernBertModel> {
        self.validate()?;
        let layers = self
            .layer_types()
            .into_iter()
            .enumerate()
            .map(|(i, kind)| self.layer(i, kind, device))
            .collect::<Result<Vec<_>>>()?;
        Ok(ModernBertModel {
            embeddings: ModernBertEmbeddings {
                tok_embeddings: EmbeddingConfig::new(self.vocab_size, self.hidden_size)
                    .with_initializer(self.init_weights())
                    .init(device),
                norm: self.norm(device),
                drop: DropoutConfig::new(self.embedding_dropout).init(),
            },
            layers,
            final_norm: self.norm(device),
            config: self.clone(),
        })
    }

    /// The class names of a classification checkpoint, in class order.
    pub fn labels(&self) -> Vec<String> {
        checkpoint::labels(self.id2label.as_ref())
    }
}

/// The token table and its norm.
#[derive(Module, Debug)]
pub struct ModernBertEmbeddings {
    /// `[vocab_size, D]`.
    pub tok_embeddings: Embedding,
    /// The norm of the embeddings.
    pub norm: LayerNorm,
    /// Dropout while training.
    pub drop: Dropout,
}

/// The bare encoder (HF's `ModernBertModel`).
#[derive(Module, Debug)]
pub struct ModernBertModel {
    /// The embeddings.
    pub embeddings: ModernBertEmbeddings,
    /// The layers.
    pub layers: Vec<TransformerBlock>,
    /// The final norm.
    pub final_norm: LayerNorm,
    #[module(skip)]
    config: ModernBertConfig,
}

impl ModernBertModel {
    /// The configuration the model was built from.
    pub fn config(&self) -> &ModernBertConfig {
        &self.config
    }

    /// # Shapes
    /// - `ids`: `[B, T]`; `padding`: `[B, T]`, `true` at padding -> `[B, T, D]`
    ///
    /// # Errors
    /// An empty batch, an input longer than `max_position_embeddings`, or an id outside
    /// the vocabulary, each named.
    pub fn forward(
        &self,
        ids: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<3>> {
        let cfg = &self.config;
        TokenLimits::new(cfg.vocab_size, cfg.max_position_embeddings)
            .named("max_position_embeddings")
            .check_tensor("input_ids", &ids, 0)?;
        let e = &self.embeddings;
        let x = zoo_attention::layer_norm(&e.norm, e.tok_embeddings.forward(ids));
        let mut x = zoo_attention::dropout(&e.drop, x);
        let mut input = BlockInput::new(x.clone());
        if let Some(pad) = padding {
            input = input.key_padding(pad);
        }
        for layer in &self.layers {
            x = layer.forward(input.over(x))?.hidden;
        }
        Ok(zoo_attention::layer_norm(&self.final_norm, x))
    }
}

/// Dense, activation, norm: what every head reads (HF's `ModernBertPredictionHead`).
#[derive(Module, Debug)]
pub struct PredictionHead {
    /// `[D, D]`.
    pub dense: Linear,
    /// The norm.
    pub norm: LayerNorm,
    #[module(skip)]
    act: HiddenAct,
}

impl PredictionHead {
    fn new(cfg: &ModernBertConfig, device: &Device) -> Self {
        Self {
            dense: LinearConfig::new(cfg.hidden_size, cfg.hidden_size)
                .with_bias(cfg.classifier_bias)
                .with_initializer(cfg.init_weights())
                .init(device),
            norm: cfg.norm(device),
            act: cfg.classifier_activation,
        }
    }

    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        zoo_attention::layer_norm(&self.norm, self.act.apply(self.dense.forward(x)))
    }
}

/// The masked LM decoder's bias; its weight is the token table.
#[derive(Module, Debug)]
pub struct DecoderBias {
    /// `[vocab_size]`.
    pub bias: Param<Tensor<1>>,
}

/// The masked LM (HF's `ModernBertForMaskedLM`).
#[derive(Module, Debug)]
pub struct ModernBertForMaskedLm {
    /// The encoder (HF `model`).
    pub model: ModernBertModel,
    /// The prediction head.
    pub head: PredictionHead,
    /// The decoder's bias, when `decoder_bias`.
    pub decoder: Option<DecoderBias>,
}

/// A linear head on the encoder's states through the prediction head: sequence or token
/// classification, or the span head (two outputs).
#[derive(Module, Debug)]
pub struct ModernBertForClassification {
    /// The encoder (HF `model`).
    pub model: ModernBertModel,
    /// The prediction head.
    pub head: PredictionHead,
    /// Dropout before the classifier while training (HF `drop`).
    pub drop: Dropout,
    /// `[D, outputs]`.
    pub classifier: Linear,
    #[module(skip)]
    kind: HeadKind,
}

/// Which of HF's heads a [`ModernBertForClassification`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadKind {
    /// `ModernBertForSequenceClassification`: one row of logits per text.
    Sequence,
    /// `ModernBertForTokenClassification`: one row per token.
    Token,
    /// `ModernBertForQuestionAnswering`: start and end logits per token.
    Span,
}

impl HeadKind {
    /// HF's class name.
    pub fn architecture(self) -> &'static str {
        match self {
            Self::Sequence => "ModernBertForSequenceClassification",
            Self::Token => "ModernBertForTokenClassification",
            Self::Span => "ModernBertForQuestionAnswering",
        }
    }
}

impl ModernBertForMaskedLm {
    /// A freshly initialised masked LM.
    ///
    /// # Errors
    /// See [`ModernBertConfig::validate`].
    pub fn new(cfg: &ModernBertConfig, device: &Device) -> Result<Self> {
        Ok(Self {
            model: cfg.init(device)?,
            head: PredictionHead::new(cfg, device),
            decoder: cfg.decoder_bias.then(|| DecoderBias {
                bias: Initializer::Zeros.init([cfg.vocab_size], device),
            }),
        })
    }

    /// # Shapes
    /// - `ids`, `padding`: `[B, T]` -> logits `[B, T, vocab_size]`
    ///
    /// # Errors
    /// As [`ModernBertModel::forward`].
    pub fn forward(
        &self,
        ids: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<3>> {
        let h = self.head.forward(self.model.forward(ids, padding)?);
        let table = self.model.embeddings.tok_embeddings.weight.val();
        let logits = zoo_attention::tied_logits(h, table);
        Ok(match &self.decoder {
            Some(d) => logits + d.bias.val().unsqueeze::<3>(),
            None => logits,
        })
    }
}

impl ModernBertForClassification {
    /// A freshly initialised head of `outputs` classes (2 for the span head).
    ///
    /// # Errors
    /// See [`ModernBertConfig::validate`], and zero outputs.
    pub fn new(
        cfg: &ModernBertConfig,
        kind: HeadKind,
        outputs: usize,
        device: &Device,
    ) -> Result<Self> {
        if outputs == 0 {
            return Err(config_error(ConfigError::zero("num_labels")));
        }
        Ok(Self {
            model: cfg.init(device)?,
            head: PredictionHead::new(cfg, device),
            drop: DropoutConfig::new(cfg.classifier_dropout).init(),
            classifier: LinearConfig::new(cfg.hidden_size, outputs)
                .with_initializer(cfg.init_weights())
                .init(device),
            kind,
        })
    }

    /// Which head it is.
    pub fn kind(&self) -> HeadKind {
        self.kind
    }

    /// The logits: `[B, outputs]` for a sequence classifier, `[B, T, outputs]` otherwise.
    ///
    /// # Errors
    /// As [`ModernBertModel::forward`].
    pub fn forward(
        &self,
        ids: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<HeadLogits> {
        let h = self.model.forward(ids, padding.clone())?;
        let [b, t, d] = h.dims();
        let classify = |x| {
            self.classifier
                .forward(zoo_attention::dropout(&self.drop, self.head.forward(x)))
        };
        if self.kind != HeadKind::Sequence {
            return Ok(HeadLogits::PerToken(classify(h)));
        }
        let pooled = match self.model.config().classifier_pooling {
            ClassifierPooling::Cls => h.narrow(1, 0, 1).reshape([b, d]),
            ClassifierPooling::Mean => {
                let keep = match padding {
                    Some(pad) => pad.bool_not().float(),
                    None => Tensor::ones([b, t], &h.device()),
                }
                .unsqueeze_dim::<3>(2); // [B, T, 1]
                let count = keep.clone().sum_dim(1).reshape([b, 1]);
                (h * keep).sum_dim(1).reshape([b, d]) / count
            }
        };
        Ok(HeadLogits::PerText(
            classify(pooled.unsqueeze_dim::<3>(1)).reshape([b, self.classifier.weight.dims()[1]]),
        ))
    }
}

/// A classification head's logits.
#[derive(Debug, Clone)]
pub enum HeadLogits {
    /// `[B, classes]`.
    PerText(Tensor<2>),
    /// `[B, T, outputs]`.
    PerToken(Tensor<3>),
}

/// ModernBERT's names and module paths of one layer.
const NAMES: [(&str, &str); 6] = [
    ("layers.{n}.attn_norm.", "layers.{n}.norm_1."),
    ("layers.{n}.mlp_norm.", "layers.{n}.norm_2."),
    ("layers.{n}.attn.Wqkv.", "layers.{n}.self_attn.qkv_proj."),
    ("layers.{n}.attn.Wo.", "layers.{n}.self_attn.o_proj."),
    ("layers.{n}.mlp.Wi.", "layers.{n}.mlp.gate_up_proj."),
    ("layers.{n}.mlp.Wo.", "layers.{n}.mlp.down_proj."),
];

fn key_map(head: bool) -> KeyMap {
    let (map, under) =
        KeyMap::new().base_model("model.", head, &["embeddings", "layers", "final_norm"]);
    let map = map.names_under(&under, &NAMES);
    if head {
        // The masked LM's decoder weight is the token table, tied.
        map.ignore(r"^decoder\.weight$")
    } else {
        map.ignore(r"^(head|decoder|classifier)\.")
    }
}

fn read_config(dir: &Path) -> Result<ModernBertConfig> {
    Ok(checkpoint::read_valid_config(
        dir,
        ModernBertConfig::validate,
    )?)
}

fn save<M: Module>(
    model: &M,
    cfg: &ModernBertConfig,
    dir: &Path,
    architecture: &str,
) -> Result<()> {
    let head = architecture != "ModernBertModel";
    Ok(checkpoint::save_pretrained(
        model,
        dir,
        &key_map(head),
        cfg,
        "modernbert",
        architecture,
    )?)
}

impl ModernBertModel {
    /// Loads an HF ModernBERT checkpoint folder, bare or from a head model (whose head is
    /// left out).
    ///
    /// # Errors
    /// A missing or invalid `config.json`, no weights file, or tensors that do not fit,
    /// all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let mut model = read_config(dir)?.init(device)?;
        checkpoint::load_into(&mut model, dir, &key_map(false))?;
        Ok(model)
    }

    /// Writes the model as an HF `ModernBertModel` folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        save(self, self.config(), dir.as_ref(), "ModernBertModel")
    }
}

impl ModernBertForMaskedLm {
    /// Loads an HF `ModernBertForMaskedLM` folder.
    ///
    /// # Errors
    /// As [`ModernBertModel::from_pretrained`].
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let mut model = Self::new(&read_config(dir)?, device)?;
        checkpoint::load_into(&mut model, dir, &key_map(true))?;
        Ok(model)
    }

    /// Writes the model as an HF `ModernBertForMaskedLM` folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        save(
            self,
            self.model.config(),
            dir.as_ref(),
            "ModernBertForMaskedLM",
        )
    }
}

impl ModernBertForClassification {
    /// Loads an HF folder of the `kind` head: the class count and names from
    /// `id2label` (two outputs for the span head).
    ///
    /// # Errors
    /// As [`ModernBertModel::from_pretrained`], and a classifier's `config.json` without
    /// `id2label`.
    pub fn from_pretrained(dir: impl AsRef<Path>, kind: HeadKind, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg = read_config(dir)?;
        let outputs = match kind {
            HeadKind::Span => 2,
            _ => checkpoint::num_labels(dir, &cfg.labels())?,
        };
        let mut model = Self::new(&cfg, kind, outputs, device)?;
        checkpoint::load_into(&mut model, dir, &key_map(true))?;
        Ok(model)
    }

    /// Writes the model as an HF folder of its head; a classifier without class names
    /// gets HF's `LABEL_i`.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let mut cfg = self.model.config().clone();
        let n = self.classifier.weight.dims()[1];
        if self.kind != HeadKind::Span && cfg.labels().len() != n {
            cfg.id2label = Some(checkpoint::default_id2label(n));
        }
        save(self, &cfg, dir.as_ref(), self.kind.architecture())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"{"model_type": "modernbert", "vocab_size": 50368, "hidden_size": 768,
        "intermediate_size": 1152, "num_hidden_layers": 22, "num_attention_heads": 12,
        "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0, "local_attention": 128}"#;

    #[test]
    fn older_and_newer_config_fields_give_the_layout_and_rope_bases() {
        let cfg = ModernBertConfig::from_json(BASE).unwrap();
        let types = cfg.layer_types();
        assert_eq!(types.len(), 22);
        assert_eq!(types[0], LayerType::FullAttention);
        assert_eq!(types[1], LayerType::SlidingAttention);
        assert_eq!(types[3], LayerType::FullAttention);
        assert_eq!(types[21], LayerType::FullAttention);
        assert_eq!(cfg.rope_theta(LayerType::FullAttention).unwrap(), 160_000.0);
        assert_eq!(
            cfg.rope_theta(LayerType::SlidingAttention).unwrap(),
            10_000.0
        );
        let newer = BASE.replace(
            "\"local_attention\": 128",
            r#""local_attention": 128, "rope_parameters": {"full_attention":
               {"rope_theta": 80000.0, "rope_type": "default"}, "sliding_attention":
               {"rope_theta": 5000.0, "rope_type": "default"}}"#,
        );
        let cfg = ModernBertConfig::from_json(&newer).unwrap();
        assert_eq!(cfg.rope_theta(LayerType::FullAttention).unwrap(), 80_000.0);
        assert_eq!(
            cfg.rope_theta(LayerType::SlidingAttention).unwrap(),
            5_000.0
        );
    }

    #[test]
    fn bad_configs_are_named() {
        let err = |text: &str| ModernBertConfig::from_json(text).unwrap_err().to_string();
        assert_eq!(
            err(&BASE.replace(
                "\"num_hidden_layers\": 22",
                "\"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\"]"
            )),
            "invalid ModernBERT config: layer_types lists 1 layers, num_hidden_layers is 2"
        );
        assert_eq!(
            err(&BASE.replace("\"hidden_size\": 768", "\"hidden_size\": 780")),
            "invalid ModernBERT config: hidden_size / num_attention_heads must be even (RoPE \
             rotates pairs of features), got 65"
        );
        assert!(
            err(&BASE.replace(
                "\"local_attention\": 128",
                "\"local_attention\": 128, \"hidden_activation\": \"relu\""
            ))
            .contains("a gated MLP takes gelu, gelu_pytorch_tanh or silu"),
        );
        assert!(
            err(&BASE.replace(
                "\"local_attention\": 128",
                r#""local_attention": 128, "rope_parameters": {"full_attention": {"rope_type": "yarn"}}"#
            ))
            .contains("rope_parameters.full_attention.rope_type"),
        );
        assert_eq!(
            err(&BASE.replace("\"modernbert\"", "\"bert\"")),
            "invalid ModernBERT config: model_type \"bert\" is not a ModernBERT model"
        );
    }
}
