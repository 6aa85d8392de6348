//! The BERT encoder and its heads. Parameter names follow HF's `BertModel` where the
//! shared parts allow (`word_embeddings`, `position_embeddings`, `token_type_embeddings`,
//! `pooler`); the attention and feed-forward use `zoo-attention`'s names.

use burn::module::{Module, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::tensor::{Bool, Device, Int, Tensor};
use zoo_attention::{
    AttentionInput, FeedForward, FeedForwardConfig, MultiHeadAttentionConfig, NormKind, Pooler,
    SelfAttention,
};
use zoo_core::tokens::{self, TokenLimits};
use zoo_core::{ClassLogits, ModelError, SentenceEmbedding, TokenLogits, kept_rows};

use crate::config::{BertConfig, HiddenAct};
use crate::error::{EncoderError, Result};

/// Where an encoder's position ids start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionIds {
    /// `0..T` (BERT).
    FromZero,
    /// Counted over the non-padding tokens from `pad_token_id + 1`, with every padding
    /// token at `pad_token_id` (RoBERTa; HF's `create_position_ids_from_input_ids`). The
    /// first `pad_token_id + 1` rows of the position table are then never a real
    /// token's.
    AfterPadding,
}

/// Word, position and token-type embeddings, summed, then LayerNorm and dropout.
#[derive(Module, Debug)]
pub struct BertEmbeddings {
    /// `[V, H]`
    pub word_embeddings: Embedding,
    /// `[max_position_embeddings, H]`
    pub position_embeddings: Embedding,
    /// `[type_vocab_size, H]`; none when `type_vocab_size` is 0 (DistilBERT).
    pub token_type_embeddings: Option<Embedding>,
    /// LayerNorm after the sum.
    pub layer_norm: LayerNorm,
    /// Dropout after the norm.
    pub dropout: Dropout,
}

/// One post-norm encoder layer (Vaswani et al., 2017; BERT):
/// `h = LN(x + Attn(x))`, `out = LN(h + FFN(h))`, with padding keys masked.
#[derive(Module, Debug)]
pub struct BertLayer {
    /// Bidirectional self-attention.
    pub attention: SelfAttention,
    /// LayerNorm after the attention's residual add.
    pub attention_norm: LayerNorm,
    /// Feed-forward network (its dropout included).
    pub mlp: FeedForward,
    /// LayerNorm after the feed-forward residual add.
    pub output_norm: LayerNorm,
    /// Dropout on the attention output.
    pub dropout: Dropout,
}

impl BertLayer {
    /// # Shapes
    /// - `x`: `[B, T, H]`, `padding`: `[B, T]` (`true` at padding) -> `[B, T, H]`
    ///
    /// # Errors
    /// Shapes the attention rejects.
    pub fn forward(&self, x: Tensor<3>, padding: Option<Tensor<2, Bool>>) -> Result<Tensor<3>> {
        Ok(self.forward_with(x, padding, false)?.0)
    }

    /// [`Self::forward`], and the attention weights `[B, heads, T, T]` when `need_weights`
    /// (computed by the reference path, whose output equals the fused one's).
    ///
    /// # Errors
    /// Shapes the attention rejects.
    pub fn forward_with(
        &self,
        x: Tensor<3>,
        padding: Option<Tensor<2, Bool>>,
        need_weights: bool,
    ) -> Result<(Tensor<3>, Option<Tensor<4>>)> {
        let mut input = AttentionInput::new(x.clone());
        if let Some(pad) = padding {
            input = input.key_padding(pad);
        }
        if need_weights {
            input = input.with_weights();
        }
        let out = self.attention.forward(input)?;
        let h = zoo_attention::layer_norm(
            &self.attention_norm,
            x + zoo_attention::dropout(&self.dropout, out.context),
        );
        let f = self.mlp.forward(h.clone());
        Ok((
            zoo_attention::layer_norm(&self.output_norm, h + f),
            out.weights,
        ))
    }
}

/// The input of a BERT forward pass.
#[derive(Debug, Clone)]
pub struct EncoderInput {
    /// `[B, T]` token ids.
    pub tokens: Tensor<2, Int>,
    /// `[B, T]` segment ids; all zero when absent.
    pub token_types: Option<Tensor<2, Int>>,
    /// `[B, T]`, `true` at padding, which no position attends to.
    pub padding: Option<Tensor<2, Bool>>,
    /// Return every layer's attention weights (HF's `output_attentions`).
    pub need_weights: bool,
}

impl EncoderInput {
    /// Token ids `[B, T]`, one segment, no padding.
    pub fn new(tokens: Tensor<2, Int>) -> Self {
        Self {
            tokens,
            token_types: None,
            padding: None,
            need_weights: false,
        }
    }

    /// Token ids `[B, T]` with the padding mask `[B, T]` when there is one.
    pub fn with_padding(tokens: Tensor<2, Int>, padding: Option<Tensor<2, Bool>>) -> Self {
        Self {
            padding,
            ..Self::new(tokens)
        }
    }

    /// A tokenizer's padded batch as the model's input: ids, token types and the padding
    /// mask.
    pub fn from_batch(batch: &zoo_data::TokenBatch, device: &Device) -> Self {
        Self::new(batch.ids_tensor(device))
            .token_types(batch.type_ids_tensor(device))
            .padding(batch.padding_tensor(device))
    }

    /// Also return every layer's attention weights ([`EncoderOutput::attentions`]).
    pub fn with_weights(mut self) -> Self {
        self.need_weights = true;
        self
    }

    /// Segment ids `[B, T]` (sentence pairs).
    pub fn token_types(mut self, types: Tensor<2, Int>) -> Self {
        self.token_types = Some(types);
        self
    }

    /// The padding mask `[B, T]`, `true` at padding.
    pub fn padding(mut self, padding: Tensor<2, Bool>) -> Self {
        self.padding = Some(padding);
        self
    }
}

/// The output of [`BertModel::forward`].
#[derive(Debug, Clone)]
pub struct EncoderOutput {
    /// `[B, T, H]` the last layer's states.
    pub hidden: Tensor<3>,
    /// `[B, H]` the pooler's `tanh(dense(hidden[:, 0]))`, when the model has a pooler.
    pub pooled: Option<Tensor<2>>,
    /// Per layer `[B, heads, T, T]`, when asked for ([`EncoderInput::with_weights`]);
    /// rows are queries, columns keys, padding keys get 0.
    pub attentions: Vec<Tensor<4>>,
}

/// The BERT encoder: embeddings, post-norm layers, and an optional pooler.
#[derive(Module, Debug)]
pub struct BertModel {
    /// The embeddings.
    pub embeddings: BertEmbeddings,
    /// The layers (HF `encoder.layer`).
    pub layers: Vec<BertLayer>,
    /// The pooler (HF `pooler.dense`), applied to the first token.
    pub pooler: Option<Pooler>,
    #[module(skip)]
    config: BertConfig,
}

fn init(cfg: &BertConfig) -> Initializer {
    Initializer::Normal {
        mean: 0.0,
        std: cfg.initializer_range,
    }
}

fn linear(d_in: usize, d_out: usize, cfg: &BertConfig, device: &Device) -> Linear {
    LinearConfig::new(d_in, d_out)
        .with_initializer(init(cfg))
        .init(device)
}

fn layer_norm(cfg: &BertConfig, device: &Device) -> LayerNorm {
    LayerNormConfig::new(cfg.hidden_size)
        .with_epsilon(cfg.layer_norm_eps)
        .init(device)
}

impl BertConfig {
    /// The attention and feed-forward configurations of every layer.
    fn sublayers(&self) -> (MultiHeadAttentionConfig, FeedForwardConfig) {
        let h = self.hidden_size;
        let attention = MultiHeadAttentionConfig::new(h, self.num_attention_heads)
            .with_dropout(self.attention_probs_dropout_prob)
            .with_initializer(init(self));
        let ffn = FeedForwardConfig::new(h, self.intermediate_size)
            .with_activation(self.hidden_act.ffn())
            .with_dropout(self.hidden_dropout_prob)
            .with_initializer(init(self));
        (attention, ffn)
    }

    /// Trainable parameters of the encoder [`Self::init`] builds, counted from the
    /// configuration alone: the three embedding tables and their LayerNorm, every layer
    /// (attention, feed-forward, two LayerNorms) and the pooler when asked for.
    pub fn num_params(&self, with_pooler: bool) -> usize {
        let h = self.hidden_size;
        let (attention, ffn) = self.sublayers();
        let layer =
            attention.num_params() + ffn.num_params() + 2 * NormKind::LayerNorm.num_params(h);
        (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h
            + NormKind::LayerNorm.num_params(h)
            + self.num_hidden_layers * layer
            + usize::from(with_pooler) * (h * h + h)
    }

    /// Builds the encoder, with a pooler or without (as HF's `add_pooling_layer`).
    ///
    /// # Errors
    /// See [`BertConfig::validate`].
    pub fn init(&self, with_pooler: bool, device: &Device) -> Result<BertModel> {
        self.validate()?;
        let h = self.hidden_size;
        let embedding = |n| {
            EmbeddingConfig::new(n, h)
                .with_initializer(init(self))
                .init(device)
        };
        let (attention, ffn) = self.sublayers();
        let layers = (0..self.num_hidden_layers)
            .map(|_| {
                Ok(BertLayer {
                    attention: attention.init(device)?,
                    attention_norm: layer_norm(self, device),
                    mlp: ffn.init(device)?,
                    output_norm: layer_norm(self, device),
                    dropout: DropoutConfig::new(self.hidden_dropout_prob).init(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(BertModel {
            embeddings: BertEmbeddings {
                word_embeddings: embedding(self.vocab_size),
                position_embeddings: embedding(self.max_position_embeddings),
                token_type_embeddings: (self.type_vocab_size > 0)
                    .then(|| embedding(self.type_vocab_size)),
                layer_norm: layer_norm(self, device),
                dropout: DropoutConfig::new(self.hidden_dropout_prob).init(),
            },
            layers,
            pooler: with_pooler
                .then(|| Pooler::new(h, h, init(self), device).with_activation(self.pooler_act())),
            config: self.clone(),
        })
    }
}

impl BertModel {
    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    /// The configuration it was built from (with its `id2label`, when loaded from a
    /// classification checkpoint).
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Names the classes of a head put on this encoder, by class id: `config.json`'s
    /// `id2label` when the model is saved.
    pub fn set_labels(&mut self, names: &[String]) {
        self.config.id2label = Some(zoo_core::checkpoint::id2label(names));
    }

    /// How its position ids are counted (from its `model_type`'s layout).
    pub fn position_ids(&self) -> PositionIds {
        crate::pretrained::layout(self.config.model_type.as_deref()).positions
    }

    /// The position id of every token, `[B, T]` -> `[B, T]`, as [`Self::position_ids`]
    /// counts them.
    pub fn positions(&self, tokens: &Tensor<2, Int>) -> Tensor<2, Int> {
        let [b, t] = tokens.dims();
        match self.position_ids() {
            PositionIds::FromZero => Tensor::<1, Int>::arange(0..t as i64, &tokens.device())
                .reshape([1, t])
                .expand([b, t]),
            PositionIds::AfterPadding => {
                let pad = self.config.pad_token_id as i64;
                let real = tokens.clone().not_equal_elem(pad).int(); // [B, T]
                real.clone().cumsum(1) * real + pad
            }
        }
    }

    /// Longest input: the position table's rows, less those that no real token takes.
    pub fn max_len(&self) -> usize {
        let rows = self.embeddings.position_embeddings.weight.dims()[0];
        match self.position_ids() {
            PositionIds::FromZero => rows,
            PositionIds::AfterPadding => rows.saturating_sub(self.config.pad_token_id + 1),
        }
    }

    /// Model width.
    pub fn hidden_size(&self) -> usize {
        self.embeddings.word_embeddings.weight.dims()[1]
    }

    /// Checks a device input: its shapes, then its ids and mask, read back once each.
    fn check(&self, input: &EncoderInput) -> Result<()> {
        let [b, t] = input.tokens.dims();
        if b == 0 {
            return Err(zoo_core::TokenError::Empty { what: "sequence" }.into());
        }
        self.limits().check_len("sequence", 0, t)?;
        let ids = tokens::read_ids(&input.tokens, "token")?;
        let types = match &input.token_types {
            Some(types) if types.dims() != [b, t] => {
                return Err(EncoderError::Input(format!(
                    "token types have shape {:?}, the tokens [{b}, {t}]",
                    types.dims()
                )));
            }
            Some(types) => Some(tokens::read_ids(types, "token type")?),
            None => None,
        };
        let real = match &input.padding {
            Some(pad) if pad.dims() != [b, t] => {
                return Err(EncoderError::Input(format!(
                    "padding mask has shape {:?}, the tokens [{b}, {t}]",
                    pad.dims()
                )));
            }
            Some(pad) => Some(
                pad.clone()
                    .bool_not()
                    .int()
                    .sum_dim(1)
                    .into_data()
                    .convert::<i64>()
                    .try_to_vec::<i64>()
                    .map_err(|e| {
                        EncoderError::Input(format!("cannot read the padding mask: {e:?}"))
                    })?,
            ),
            None => None,
        };
        self.check_host(&ids, t, types.as_deref(), real.as_deref())
    }

    fn limits(&self) -> TokenLimits {
        TokenLimits::new(self.config.vocab_size, self.max_len()).named("max_position_embeddings")
    }

    /// Checks ids on the host: `t` per row, the token types when there are any, and the
    /// real (unpadded) positions of each row when there is a padding mask.
    fn check_host(
        &self,
        ids: &[i64],
        t: usize,
        types: Option<&[i64]>,
        real: Option<&[i64]>,
    ) -> Result<()> {
        self.limits().check_ids("token", ids, t)?;
        if let Some(types) = types {
            if self.config.type_vocab_size == 0 {
                return Err(EncoderError::Input(format!(
                    "{} takes no token types (token_type_ids)",
                    self.config.model_type.as_deref().unwrap_or("this model")
                )));
            }
            TokenLimits::new(self.config.type_vocab_size, t)
                .vocab_named("type_vocab_size")
                .check_ids("token type", types, t)?;
        }
        // A row with no real token has nothing to attend to. In practice it is a mask of
        // the wrong polarity: HF's `attention_mask` is 1 at real tokens, this one is true
        // at padding, and the longest row of a batch has no padding.
        if let Some(row) = real.and_then(|r| r.iter().position(|&n| n == 0)) {
            return Err(EncoderError::Input(format!(
                "padding mask row {row} marks all {t} positions as padding; the mask is \
                 true at padding (HF's attention_mask is the opposite: pass its negation)"
            )));
        }
        Ok(())
    }

    /// [`Self::forward`] on a tokenizer's padded batch, checked on the host: it reads
    /// nothing back from the device, so it also runs where reading back must wait
    /// (WebGPU in a browser).
    ///
    /// # Errors
    /// As [`Self::forward`].
    pub fn forward_batch(
        &self,
        batch: &zoo_data::TokenBatch,
        device: &Device,
    ) -> Result<EncoderOutput> {
        if batch.is_empty() {
            return Err(zoo_core::TokenError::Empty { what: "sequence" }.into());
        }
        let t = batch.ids.first().map_or(0, Vec::len);
        self.limits().check_len("sequence", 0, t)?;
        let flat = |rows: &[Vec<u32>]| -> Vec<i64> {
            rows.iter().flatten().map(|&i| i64::from(i)).collect()
        };
        let real: Vec<i64> = batch
            .padding
            .iter()
            .map(|row| row.iter().filter(|p| !**p).count() as i64)
            .collect();
        self.check_host(
            &flat(&batch.ids),
            t,
            Some(&flat(&batch.type_ids)),
            Some(&real),
        )?;
        self.run(EncoderInput::from_batch(batch, device))
    }

    /// # Shapes
    /// - tokens, token types, padding: `[B, T]` -> hidden `[B, T, H]`, pooled `[B, H]`
    ///
    /// # Errors
    /// Ids outside the vocabulary or the token types, an input longer than
    /// `max_position_embeddings`, or masks of another shape than the tokens.
    pub fn forward(&self, input: EncoderInput) -> Result<EncoderOutput> {
        self.check(&input)?;
        self.run(input)
    }

    /// The forward pass of an input already checked.
    fn run(&self, input: EncoderInput) -> Result<EncoderOutput> {
        let [b, t] = input.tokens.dims();
        let device = input.tokens.device();
        let e = &self.embeddings;
        let positions = self.positions(&input.tokens);
        let mut x =
            e.word_embeddings.forward(input.tokens) + e.position_embeddings.forward(positions);
        if let Some(table) = &e.token_type_embeddings {
            let types = input
                .token_types
                .unwrap_or_else(|| Tensor::zeros([b, t], &device));
            x = x + table.forward(types);
        }
        let mut h = zoo_attention::dropout(&e.dropout, zoo_attention::layer_norm(&e.layer_norm, x));
        let mut attentions = Vec::new();
        for layer in &self.layers {
            // Under Burn's balanced checkpointing strategy, each layer keeps only its
            // input and runs again in the backward pass.
            if !input.need_weights && zoo_attention::recompute::applies(&h) {
                let padding = input.padding.clone();
                h = zoo_attention::recompute::checkpointed(layer, h, true, move |layer, h| {
                    layer
                        .forward_with(h, padding.clone(), false)
                        .map(|(h, _)| h)
                })?;
                continue;
            }
            let (next, weights) =
                layer.forward_with(h, input.padding.clone(), input.need_weights)?;
            h = next;
            attentions.extend(weights);
        }
        let pooled = self.pooler.as_ref().map(|p| p.forward(h.clone()));
        Ok(EncoderOutput {
            hidden: h,
            pooled,
            attentions,
        })
    }
}

/// Mean of the hidden states over the real (unpadded) positions, as sentence-transformers'
/// mean pooling.
///
/// # Shapes
/// - `hidden`: `[B, T, H]`, `padding`: `[B, T]` -> `[B, H]`
pub fn mean_pool(hidden: Tensor<3>, padding: Tensor<2, Bool>) -> Tensor<2> {
    let [b, t, _] = hidden.dims();
    let keep = padding.bool_not().float().reshape([b, t, 1]); // [B, T, 1]
    let sum = (hidden * keep.clone()).sum_dim(1).squeeze_dim::<2>(1); // [B, H]
    let count = keep.sum_dim(1).squeeze_dim::<2>(1).clamp_min(1e-9); // [B, 1]
    sum / count
}

impl SentenceEmbedding for BertModel {
    fn sentence_embedding(
        &self,
        tokens: Tensor<2, Int>,
        padding: Tensor<2, Bool>,
    ) -> std::result::Result<Tensor<2>, ModelError> {
        let out = self.forward(EncoderInput::new(tokens).padding(padding.clone()))?;
        Ok(mean_pool(out.hidden, padding))
    }
}

/// BERT with the masked-LM head: `LN(act(dense(h)))`, then a decoder tied to the word
/// embeddings, plus a bias (HF `cls.predictions`).
#[derive(Module, Debug)]
pub struct BertForMaskedLm {
    /// The encoder, without a pooler.
    pub bert: BertModel,
    /// The transform's dense layer (`cls.predictions.transform.dense`).
    pub transform: Linear,
    /// The transform's LayerNorm.
    pub transform_norm: LayerNorm,
    /// The decoder's bias `[V]`; its weight is the word embedding.
    pub decoder_bias: Param<Tensor<1>>,
    #[module(skip)]
    act: HiddenAct,
}

impl BertForMaskedLm {
    /// Builds the model.
    ///
    /// # Errors
    /// See [`BertConfig::validate`].
    pub fn new(cfg: &BertConfig, device: &Device) -> Result<Self> {
        Ok(Self {
            bert: cfg.init(false, device)?,
            transform: linear(cfg.hidden_size, cfg.hidden_size, cfg, device),
            transform_norm: layer_norm(cfg, device),
            decoder_bias: Param::from_tensor(Tensor::zeros([cfg.vocab_size], device)),
            act: cfg.hidden_act,
        })
    }

    /// # Shapes
    /// - input `[B, T]` -> logits `[B, T, V]`
    ///
    /// # Errors
    /// As [`BertModel::forward`].
    pub fn forward(&self, input: EncoderInput) -> Result<Tensor<3>> {
        let h = self.bert.forward(input)?.hidden;
        let [b, t, d] = h.dims();
        let v = self.bert.vocab_size();
        Ok(self.head(h.reshape([b * t, d])).reshape([b, t, v]))
    }

    /// The masked-LM head on hidden states `[N, H]`: transform, then the decoder tied to
    /// the word embedding, plus its bias: `[N, V]`.
    fn head(&self, h: Tensor<2>) -> Tensor<2> {
        let h = zoo_attention::layer_norm(
            &self.transform_norm,
            self.act.apply(self.transform.forward(h)),
        );
        // [N, H] x [H, V], the word embedding's transposed view (no copy of the table).
        let w = self.bert.embeddings.word_embeddings.weight.val();
        let v = self.bert.vocab_size();
        h.matmul(w.transpose()) + self.decoder_bias.val().reshape([1, v])
    }
}

impl TokenLogits for BertForMaskedLm {
    fn token_logits(
        &self,
        tokens: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> std::result::Result<Tensor<3>, ModelError> {
        let input = EncoderInput::with_padding(tokens, padding);
        Ok(self.forward(input)?)
    }

    /// Runs the encoder over every position, but the head only over the kept ones.
    fn token_logits_at(
        &self,
        tokens: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
        keep: Tensor<2, Bool>,
    ) -> std::result::Result<Tensor<2>, ModelError> {
        let rows = kept_rows(&tokens, &keep)?;
        let input = EncoderInput::with_padding(tokens, padding);
        let h = self.bert.forward(input)?.hidden;
        let [b, t, d] = h.dims();
        Ok(self.head(h.reshape([b * t, d]).select(0, rows)))
    }
}

/// The dropout and `[H, num_labels]` classifier that both classification heads put on
/// the encoder.
fn classifier_head(
    cfg: &BertConfig,
    num_labels: usize,
    device: &Device,
) -> Result<(Dropout, Linear)> {
    if num_labels == 0 {
        return Err(zoo_core::ConfigError::zero("num_labels").into());
    }
    Ok((
        DropoutConfig::new(cfg.hidden_dropout_prob).init(),
        linear(cfg.hidden_size, num_labels, cfg, device),
    ))
}

/// BERT with a classifier on the pooled first token (HF `BertForSequenceClassification`).
#[derive(Module, Debug)]
pub struct BertForSequenceClassification {
    /// The encoder, with its pooler.
    pub bert: BertModel,
    /// Dropout before the classifier.
    pub dropout: Dropout,
    /// `[H, num_labels]`
    pub classifier: Linear,
}

impl BertForSequenceClassification {
    /// Builds the model for `num_labels` classes.
    ///
    /// # Errors
    /// See [`BertConfig::validate`], and zero labels.
    pub fn new(cfg: &BertConfig, num_labels: usize, device: &Device) -> Result<Self> {
        let (dropout, classifier) = classifier_head(cfg, num_labels, device)?;
        Ok(Self {
            bert: cfg.init(true, device)?,
            dropout,
            classifier,
        })
    }

    /// Puts a new classifier on an encoder (a pretrained one, say). An encoder without
    /// a pooler (from a masked-LM checkpoint) gets a freshly initialised one.
    ///
    /// # Errors
    /// `num_labels` of 0.
    pub fn from_encoder(mut bert: BertModel, num_labels: usize, device: &Device) -> Result<Self> {
        let cfg = bert.config().clone();
        let (dropout, classifier) = classifier_head(&cfg, num_labels, device)?;
        if bert.pooler.is_none() {
            let h = cfg.hidden_size;
            bert.pooler =
                Some(Pooler::new(h, h, init(&cfg), device).with_activation(cfg.pooler_act()));
        }
        Ok(Self {
            bert,
            dropout,
            classifier,
        })
    }

    /// # Shapes
    /// - input `[B, T]` -> logits `[B, num_labels]`
    ///
    /// # Errors
    /// As [`BertModel::forward`].
    pub fn forward(&self, input: EncoderInput) -> Result<Tensor<2>> {
        let pooled = self
            .bert
            .forward(input)?
            .pooled
            .ok_or_else(|| EncoderError::Input("the encoder has no pooler".into()))?;
        Ok(self
            .classifier
            .forward(zoo_attention::dropout(&self.dropout, pooled)))
    }
}

impl BertForSequenceClassification {
    /// The most likely class of each row.
    ///
    /// # Errors
    /// As [`Self::forward`], and predictions that cannot be read back.
    pub fn predict(&self, input: EncoderInput) -> Result<Vec<usize>> {
        let classes = self
            .forward(input)?
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .map_err(|e| EncoderError::Input(format!("cannot read the predictions back: {e:?}")))?;
        Ok(classes.into_iter().map(|c| c as usize).collect())
    }
}

impl ClassLogits for BertForSequenceClassification {
    type Input = EncoderInput;

    fn class_logits(&self, input: EncoderInput) -> std::result::Result<Tensor<2>, ModelError> {
        Ok(self.forward(input)?)
    }
}

/// BERT with a classifier on every token (HF `BertForTokenClassification`).
#[derive(Module, Debug)]
pub struct BertForTokenClassification {
    /// The encoder, without a pooler.
    pub bert: BertModel,
    /// Dropout before the classifier.
    pub dropout: Dropout,
    /// `[H, num_labels]`
    pub classifier: Linear,
}

impl BertForTokenClassification {
    /// Builds the model for `num_labels` tags.
    ///
    /// # Errors
    /// See [`BertConfig::validate`], and zero labels.
    pub fn new(cfg: &BertConfig, num_labels: usize, device: &Device) -> Result<Self> {
        let (dropout, classifier) = classifier_head(cfg, num_labels, device)?;
        Ok(Self {
            bert: cfg.init(false, device)?,
            dropout,
            classifier,
        })
    }

    /// # Shapes
    /// - input `[B, T]` -> logits `[B, T, num_labels]`
    ///
    /// # Errors
    /// As [`BertModel::forward`].
    pub fn forward(&self, input: EncoderInput) -> Result<Tensor<3>> {
        let h = self.bert.forward(input)?.hidden;
        Ok(self
            .classifier
            .forward(zoo_attention::dropout(&self.dropout, h)))
    }
}

/// BERT with a span head (HF `BertForQuestionAnswering`): one linear layer from each
/// token's hidden state to two scores, where the answer starts and where it ends.
#[derive(Module, Debug)]
pub struct BertForQuestionAnswering {
    /// The encoder, without a pooler.
    pub bert: BertModel,
    /// `[H, 2]`: the start and end scores of each token.
    pub qa_outputs: Linear,
}

/// The start and end scores of every token, `[B, T]` each.
#[derive(Debug, Clone)]
pub struct SpanLogits {
    /// Where the answer starts.
    pub start: Tensor<2>,
    /// Where the answer ends.
    pub end: Tensor<2>,
}

impl BertForQuestionAnswering {
    /// Builds the model.
    ///
    /// # Errors
    /// See [`BertConfig::validate`].
    pub fn new(cfg: &BertConfig, device: &Device) -> Result<Self> {
        Ok(Self {
            bert: cfg.init(false, device)?,
            qa_outputs: linear(cfg.hidden_size, 2, cfg, device),
        })
    }

    /// # Shapes
    /// - input `[B, T]` -> start and end logits `[B, T]` each
    ///
    /// # Errors
    /// As [`BertModel::forward`].
    pub fn forward(&self, input: EncoderInput) -> Result<SpanLogits> {
        let h = self.bert.forward(input)?.hidden;
        let [b, t, _] = h.dims();
        let scores = self.qa_outputs.forward(h);
        let start = scores.clone().narrow(2, 0, 1).reshape([b, t]);
        let end = scores.narrow(2, 1, 1).reshape([b, t]);
        Ok(SpanLogits { start, end })
    }
}

/// Tags per token for `zoo-train`'s token task: the masked cross-entropy of
/// [`zoo_core::TokenLogits`] over the tag of each word's first token.
impl TokenLogits for BertForTokenClassification {
    fn token_logits(
        &self,
        tokens: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> std::result::Result<Tensor<3>, ModelError> {
        let input = EncoderInput::with_padding(tokens, padding);
        Ok(self.forward(input)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    fn tiny() -> BertConfig {
        let mut c = BertConfig::new(40, 16, 2, 4, 32);
        c.max_position_embeddings = 12;
        c.initializer_range = 0.3; // attention far from uniform: masks show
        c
    }

    fn ids(rows: &[&[i64]]) -> Tensor<2, Int> {
        let t = rows[0].len();
        let flat: Vec<i64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_data(TensorData::new(flat, [rows.len(), t]), &test_device())
    }

    fn pad(rows: &[&[bool]]) -> Tensor<2, Bool> {
        let t = rows[0].len();
        let flat: Vec<bool> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_data(TensorData::new(flat, [rows.len(), t]), &test_device())
    }

    #[test]
    fn presets_have_hf_parameter_counts() {
        // HF BertModel (with its pooler): bert-base-uncased 109,482,240 and
        // all-MiniLM-L6-v2 22,713,216 parameters.
        let dev = test_device();
        let base = BertConfig::bert_base_uncased().init(true, &dev).unwrap();
        assert_eq!(base.num_params(), 109_482_240);
        let mini = BertConfig::all_minilm_l6_v2().init(true, &dev).unwrap();
        assert_eq!(mini.num_params(), 22_713_216);
        let no_pooler = BertConfig::all_minilm_l6_v2().init(false, &dev).unwrap();
        assert_eq!(no_pooler.num_params(), 22_713_216 - 384 * 384 - 384);
        // The configuration's own count, without building the model.
        assert_eq!(
            BertConfig::bert_base_uncased().num_params(true),
            109_482_240
        );
        assert_eq!(BertConfig::all_minilm_l6_v2().num_params(true), 22_713_216);
        assert_eq!(
            BertConfig::all_minilm_l6_v2().num_params(false),
            no_pooler.num_params()
        );
    }

    #[test]
    fn the_layer_is_post_norm_from_the_shared_parts() {
        let m = tiny().init(true, &test_device()).unwrap();
        let input = EncoderInput::new(ids(&[&[2, 7, 9, 1]]));
        let got = m.forward(input).unwrap();
        // By hand: embeddings, then each layer's two residual adds, each followed by LN.
        let dev = test_device();
        let e = &m.embeddings;
        let pos = Tensor::<1, Int>::arange(0..4, &dev).reshape([1, 4]);
        let mut h = e.layer_norm.forward(
            e.word_embeddings.forward(ids(&[&[2, 7, 9, 1]]))
                + e.position_embeddings.forward(pos)
                + e.token_type_embeddings
                    .as_ref()
                    .unwrap()
                    .forward(Tensor::zeros([1, 4], &dev)),
        );
        for l in &m.layers {
            let a = l
                .attention
                .forward(AttentionInput::new(h.clone()))
                .unwrap()
                .context;
            let x = l.attention_norm.forward(h + a);
            h = l.output_norm.forward(x.clone() + l.mlp.forward(x));
        }
        assert!(max_abs_diff(&got.hidden, &h) < 1e-5);
        // Negative control: the pre-norm order (`x + Attn(LN(x))`) gives other states.
        let l = &m.layers[1];
        let x = m
            .forward(EncoderInput::new(ids(&[&[2, 7, 9, 1]])))
            .unwrap()
            .hidden;
        let post = l.forward(x.clone(), None).unwrap();
        let a = l
            .attention
            .forward(AttentionInput::new(l.attention_norm.forward(x.clone())))
            .unwrap()
            .context;
        let y = x + a;
        let pre = y.clone() + l.mlp.forward(l.output_norm.forward(y));
        assert!(max_abs_diff(&post, &pre) > 1e-2);
        let first = h.slice([0..1, 0..1, 0..16]).reshape([1, 16]);
        let pooled = m.pooler.as_ref().unwrap().dense.forward(first).tanh();
        assert!(max_abs_diff(&got.pooled.unwrap(), &pooled) < 1e-6);
    }

    /// A tokenizer's batch checked on the host gives the states that the device input
    /// gives, and every fault the device check names, in the same words.
    #[test]
    fn forward_batch_equals_forward_and_refuses_what_it_refuses() {
        let dev = test_device();
        let m = tiny().init(true, &dev).unwrap();
        let batch = |ids: Vec<Vec<u32>>, types: Vec<Vec<u32>>, padding: Vec<Vec<bool>>| {
            zoo_data::TokenBatch {
                special: padding.clone(),
                ids,
                type_ids: types,
                padding,
            }
        };
        let good = batch(
            vec![vec![2, 7, 9, 1, 5], vec![3, 4, 0, 0, 0]],
            vec![vec![0, 0, 1, 1, 1], vec![0, 1, 0, 0, 0]],
            vec![vec![false; 5], vec![false, false, true, true, true]],
        );
        let host = m.forward_batch(&good, &dev).unwrap();
        let device = m.forward(EncoderInput::from_batch(&good, &dev)).unwrap();
        assert!(max_abs_diff(&host.hidden, &device.hidden) < 1e-6);
        assert!(max_abs_diff(&host.pooled.unwrap(), &device.pooled.unwrap()) < 1e-6);
        // Control: the token types reach the states (all-zero types give others).
        let untyped = batch(good.ids.clone(), vec![vec![0; 5]; 2], good.padding.clone());
        let other = m.forward_batch(&untyped, &dev).unwrap();
        assert!(max_abs_diff(&other.hidden, &host.hidden) > 1e-3);
        let bad = [
            // An id past the vocabulary, a token type past type_vocab_size, a row all
            // padding, a batch longer than max_position_embeddings.
            batch(vec![vec![2, 40]], vec![vec![0, 0]], vec![vec![false; 2]]),
            batch(vec![vec![2, 3]], vec![vec![0, 2]], vec![vec![false; 2]]),
            batch(
                vec![vec![2, 3], vec![0, 0]],
                vec![vec![0; 2]; 2],
                vec![vec![false; 2], vec![true; 2]],
            ),
            batch(vec![vec![1; 13]], vec![vec![0; 13]], vec![vec![false; 13]]),
        ];
        for b in &bad {
            let host = m.forward_batch(b, &dev).unwrap_err().to_string();
            let device = m
                .forward(EncoderInput::from_batch(b, &dev))
                .unwrap_err()
                .to_string();
            assert_eq!(host, device);
        }
        let e = m.forward_batch(&bad[0], &dev).unwrap_err().to_string();
        assert!(e.contains("token id 40 at batch row 0, position 1"), "{e}");
        let e = m.forward_batch(&bad[2], &dev).unwrap_err().to_string();
        assert!(
            e.contains("padding mask row 1 marks all 2 positions"),
            "{e}"
        );
    }

    #[test]
    fn padding_is_never_attended_to() {
        let m = tiny().init(false, &test_device()).unwrap();
        let mask = pad(&[&[false, false, false, true, true]]);
        let run = |rows: &[&[i64]], with_mask: bool| {
            let mut input = EncoderInput::new(ids(rows));
            if with_mask {
                input = input.padding(mask.clone());
            }
            m.forward(input).unwrap().hidden.slice([0..1, 0..3, 0..16])
        };
        let a = run(&[&[5, 6, 7, 0, 0]], true);
        let b = run(&[&[5, 6, 7, 30, 12]], true);
        assert!(
            max_abs_diff(&a, &b) < 1e-5,
            "padding leaked into real positions"
        );
        // Negative control: without the mask, the same change reaches every position.
        let c = run(&[&[5, 6, 7, 0, 0]], false);
        let d = run(&[&[5, 6, 7, 30, 12]], false);
        assert!(max_abs_diff(&c, &d) > 1e-3);
        // And the padded sequence equals the unpadded one on its real positions.
        let alone = run(&[&[5, 6, 7]], false);
        assert!(max_abs_diff(&a, &alone) < 1e-5);
    }

    #[test]
    fn attention_weights_are_returned_per_layer_without_changing_the_states() {
        let m = tiny().init(false, &test_device()).unwrap();
        let mask = pad(&[&[false, false, true], &[false, false, false]]);
        let input = EncoderInput::new(ids(&[&[4, 5, 0], &[4, 5, 6]])).padding(mask);
        let plain = m.forward(input.clone()).unwrap();
        assert!(plain.attentions.is_empty());
        let out = m.forward(input.with_weights()).unwrap();
        assert!(max_abs_diff(&plain.hidden, &out.hidden) < 1e-5);
        assert_eq!(out.attentions.len(), 2);
        for w in &out.attentions {
            assert_eq!(w.dims(), [2, 4, 3, 3]);
            // Each query's row sums to 1, and no query looks at row 0's padded key.
            let sums = w.clone().sum_dim(3);
            assert!(max_abs_diff(&sums, &Tensor::ones([2, 4, 3, 1], &test_device())) < 1e-5);
            let to_pad = w.clone().slice([0..1, 0..4, 0..3, 2..3]).abs().max();
            assert_eq!(to_pad.into_scalar::<f32>(), 0.0);
            // Row 1 has no padding: its last key gets weight.
            assert!(
                w.clone()
                    .slice([1..2, 0..4, 0..3, 2..3])
                    .min()
                    .into_scalar::<f32>()
                    > 0.0
            );
        }
        // The layers differ: the weights are each layer's own.
        assert!(max_abs_diff(&out.attentions[0], &out.attentions[1]) > 1e-3);
    }

    #[test]
    fn token_types_change_the_states() {
        let m = tiny().init(false, &test_device()).unwrap();
        let toks = ids(&[&[3, 4, 5, 6]]);
        let a = m.forward(EncoderInput::new(toks.clone())).unwrap().hidden;
        let b = m
            .forward(EncoderInput::new(toks).token_types(ids(&[&[0, 0, 1, 1]])))
            .unwrap()
            .hidden;
        assert!(max_abs_diff(&a, &b) > 1e-3);
    }

    #[test]
    fn the_mlm_decoder_is_tied_to_the_word_embeddings() {
        let dev = test_device();
        let mut m = BertForMaskedLm::new(&tiny(), &dev).unwrap();
        m.decoder_bias = Param::from_tensor(Tensor::<1, Int>::arange(0..40, &dev).float() * 0.01);
        let input = EncoderInput::new(ids(&[&[2, 7, 9]]));
        let got = m.forward(input.clone()).unwrap();
        assert_eq!(got.dims(), [1, 3, 40]);
        let h = m.bert.forward(input).unwrap().hidden;
        let t = m
            .transform_norm
            .forward(burn::tensor::activation::gelu(m.transform.forward(h)));
        let w = m.bert.embeddings.word_embeddings.weight.val(); // [V, H]
        let want =
            t.matmul(w.transpose().unsqueeze::<3>()) + m.decoder_bias.val().reshape([1, 1, 40]);
        assert!(max_abs_diff(&got, &want) < 1e-5);
    }

    #[test]
    fn mean_pooling_skips_padding() {
        let m = tiny().init(false, &test_device()).unwrap();
        let mask = pad(&[&[false, false, true], &[false, false, false]]);
        let toks = ids(&[&[4, 5, 0], &[4, 5, 6]]);
        let e = m.sentence_embedding(toks.clone(), mask.clone()).unwrap();
        let h = m
            .forward(EncoderInput::new(toks).padding(mask))
            .unwrap()
            .hidden;
        let h_all = h.clone();
        let row0 = h
            .clone()
            .slice([0..1, 0..2, 0..16])
            .mean_dim(1)
            .reshape([1, 16]);
        let row1 = h.slice([1..2, 0..3, 0..16]).mean_dim(1).reshape([1, 16]);
        assert!(max_abs_diff(&e, &Tensor::cat(vec![row0, row1], 0)) < 1e-5);
        // Negative control: a mean that counts the padded position differs.
        let with_pad = h_all
            .slice([0..1, 0..3, 0..16])
            .mean_dim(1)
            .reshape([1, 16]);
        assert!(max_abs_diff(&e.slice([0..1, 0..16]), &with_pad) > 1e-3);
    }

    #[test]
    fn classification_heads_have_their_shapes_and_bad_inputs_are_errors() {
        let dev = test_device();
        let seq = BertForSequenceClassification::new(&tiny(), 3, &dev).unwrap();
        let logits = seq
            .class_logits(EncoderInput::new(ids(&[&[1, 2], &[3, 4]])))
            .unwrap();
        assert_eq!(logits.dims(), [2, 3]);
        let tok = BertForTokenClassification::new(&tiny(), 5, &dev).unwrap();
        assert_eq!(
            tok.forward(EncoderInput::new(ids(&[&[1, 2, 3]])))
                .unwrap()
                .dims(),
            [1, 3, 5]
        );
        let m = &seq.bert;
        let err = |input| m.forward(input).unwrap_err().to_string();
        assert_eq!(
            err(EncoderInput::new(ids(&[&[1, 40]]))),
            "token id 40 at batch row 0, position 1 is out of range for vocab_size 40"
        );
        assert_eq!(
            err(EncoderInput::new(ids(&[&[1; 13]]))),
            "sequence of 13 tokens is longer than max_position_embeddings 12"
        );
        assert_eq!(
            err(EncoderInput::new(ids(&[&[1, 2]])).token_types(ids(&[&[0, 2]]))),
            "token type id 2 at batch row 0, position 1 is out of range for type_vocab_size 2"
        );
        assert_eq!(
            err(EncoderInput::new(ids(&[&[1, 2]])).padding(pad(&[&[false, false, true]]))),
            "padding mask has shape [1, 3], the tokens [1, 2]"
        );
        assert_eq!(
            err(EncoderInput::new(ids(&[&[1, -3]]))),
            "token id -3 at batch row 0, position 1 is out of range for vocab_size 40"
        );
        assert!(BertForSequenceClassification::new(&tiny(), 0, &dev).is_err());
    }
}
