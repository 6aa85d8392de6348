//! DistilBERT (Sanh et al., 2019, "DistilBERT, a distilled version of BERT"), as HF's
//! `models/distilbert/modeling_distilbert.py` runs it: BERT's post-norm encoder with
//! word and position embeddings and no token types, under its own names, and heads of
//! its own shape.
//!
//! The sequence classifier puts its first token through `pre_classifier` and a ReLU,
//! which is BERT's pooler with another activation; the masked-LM head is BERT's
//! transform, norm and tied decoder.
//!
//! | HF name | BERT's name |
//! |---|---|
//! | `distilbert.…` | `bert.…` |
//! | `transformer.layer.N.attention.{q,k,v}_lin` | `encoder.layer.N.attention.self.{query,key,value}` |
//! | `transformer.layer.N.attention.out_lin` | `encoder.layer.N.attention.output.dense` |
//! | `transformer.layer.N.sa_layer_norm` | `encoder.layer.N.attention.output.LayerNorm` |
//! | `transformer.layer.N.ffn.lin1`, `lin2` | `encoder.layer.N.intermediate.dense`, `output.dense` |
//! | `transformer.layer.N.output_layer_norm` | `encoder.layer.N.output.LayerNorm` |
//! | `vocab_transform`, `vocab_layer_norm` | `cls.predictions.transform.dense`, `.LayerNorm` |
//! | `vocab_projector` (tied; its bias) | `cls.predictions.decoder` (`cls.predictions.bias`) |
//! | `pre_classifier` (sequence classifier) | `bert.pooler.dense` |
//!
//! | `config.json` | BERT's |
//! |---|---|
//! | `dim`, `n_layers`, `n_heads`, `hidden_dim` | `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size` |
//! | `activation`, `dropout`, `attention_dropout` | `hidden_act`, `hidden_dropout_prob`, `attention_probs_dropout_prob` |

use zoo_attention::PoolerActivation;

use crate::model::{
    BertForMaskedLm, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertModel, PositionIds,
};
use crate::pretrained::Layout;

/// DistilBERT's layers under BERT's prefixes (`bert.encoder.layer.N.`, after the
/// dialect), with the module paths they load into.
const NAMES: [(&str, &str); 9] = [
    ("embeddings.LayerNorm.", "embeddings.layer_norm."),
    (
        "encoder.layer.{n}.attention.q_lin.",
        "layers.{n}.attention.q_proj.",
    ),
    (
        "encoder.layer.{n}.attention.k_lin.",
        "layers.{n}.attention.k_proj.",
    ),
    (
        "encoder.layer.{n}.attention.v_lin.",
        "layers.{n}.attention.v_proj.",
    ),
    (
        "encoder.layer.{n}.attention.out_lin.",
        "layers.{n}.attention.o_proj.",
    ),
    (
        "encoder.layer.{n}.sa_layer_norm.",
        "layers.{n}.attention_norm.",
    ),
    ("encoder.layer.{n}.ffn.lin1.", "layers.{n}.mlp.up_proj."),
    ("encoder.layer.{n}.ffn.lin2.", "layers.{n}.mlp.down_proj."),
    (
        "encoder.layer.{n}.output_layer_norm.",
        "layers.{n}.output_norm.",
    ),
];

/// DistilBERT's names, config names and classes.
pub const LAYOUT: Layout = Layout {
    model_type: "distilbert",
    architectures: [
        "DistilBertModel",
        "DistilBertForMaskedLM",
        "DistilBertForSequenceClassification",
        "DistilBertForTokenClassification",
        "DistilBertForQuestionAnswering",
    ],
    // In this order, so that saving (which runs them backwards) turns `bert.encoder.`
    // into `bert.transformer.` before `bert.` becomes `distilbert.`.
    dialect: &[
        ("distilbert.", "bert."),
        ("bert.transformer.", "bert.encoder."),
        ("transformer.", "encoder."),
        ("vocab_transform.", "cls.predictions.transform.dense."),
        ("vocab_layer_norm.", "cls.predictions.transform.LayerNorm."),
        ("vocab_projector.bias", "cls.predictions.bias"),
        ("vocab_projector.weight", "cls.predictions.decoder.weight"),
    ],
    sequence_classifier: &[("pre_classifier.", "bert.pooler.dense.")],
    positions: PositionIds::FromZero,
    names: &NAMES,
    config_names: &[
        ("dim", "hidden_size"),
        ("n_layers", "num_hidden_layers"),
        ("n_heads", "num_attention_heads"),
        ("hidden_dim", "intermediate_size"),
        ("activation", "hidden_act"),
        ("dropout", "hidden_dropout_prob"),
        ("attention_dropout", "attention_probs_dropout_prob"),
    ],
    token_types: false,
    // Its LayerNorms' epsilon is fixed at 1e-12, BERT's default, and its positions are
    // learned.
    config_unused: &[
        "type_vocab_size",
        "layer_norm_eps",
        "position_embedding_type",
    ],
    pooler: PoolerActivation::Relu,
};

/// HF's `DistilBertModel`: the encoder, without a pooler.
pub type DistilBertModel = BertModel;
/// HF's `DistilBertForMaskedLM`.
pub type DistilBertForMaskedLm = BertForMaskedLm;
/// HF's `DistilBertForSequenceClassification`: `pre_classifier` is the pooler, with a
/// ReLU.
pub type DistilBertForSequenceClassification = BertForSequenceClassification;
/// HF's `DistilBertForTokenClassification`.
pub type DistilBertForTokenClassification = BertForTokenClassification;
/// HF's `DistilBertForQuestionAnswering`.
pub type DistilBertForQuestionAnswering = BertForQuestionAnswering;
