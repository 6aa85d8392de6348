//! RoBERTa (Liu et al., 2019, "RoBERTa: A Robustly Optimized BERT Pretraining
//! Approach"), as HF's `models/roberta/modeling_roberta.py` runs it: BERT's encoder, with
//! position ids counted from `pad_token_id + 1` over the non-padding tokens (padding sits
//! at `pad_token_id`), one token type, and a byte-level BPE vocabulary whose special
//! tokens are `<s>`, `</s>`, `<pad>`, `<unk>` and `<mask>`.
//!
//! Its heads are BERT's under other names. The masked-LM head is the same transform,
//! norm, tied decoder and bias. The sequence classifier's `dense` + tanh on the first
//! token is BERT's pooler, and its `out_proj` is BERT's classifier; RoBERTa only drops
//! out once more, before `dense`, while training.
//!
//! | HF name | BERT's name |
//! |---|---|
//! | `roberta.…` | `bert.…` |
//! | `lm_head.dense` | `cls.predictions.transform.dense` |
//! | `lm_head.layer_norm` | `cls.predictions.transform.LayerNorm` |
//! | `lm_head.bias` | `cls.predictions.bias` |
//! | `lm_head.decoder` (tied) | `cls.predictions.decoder` |
//! | `classifier.dense` (sequence classifier) | `bert.pooler.dense` |
//! | `classifier.out_proj` (sequence classifier) | `classifier` |

use crate::model::{
    BertForMaskedLm, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertModel, PositionIds,
};
use crate::pretrained::Layout;

/// RoBERTa's names, counting and classes.
pub const LAYOUT: Layout = Layout {
    model_type: "roberta",
    architectures: [
        "RobertaModel",
        "RobertaForMaskedLM",
        "RobertaForSequenceClassification",
        "RobertaForTokenClassification",
        "RobertaForQuestionAnswering",
    ],
    dialect: &[
        ("roberta.", "bert."),
        ("lm_head.dense.", "cls.predictions.transform.dense."),
        (
            "lm_head.layer_norm.",
            "cls.predictions.transform.LayerNorm.",
        ),
        ("lm_head.bias", "cls.predictions.bias"),
        ("lm_head.decoder.", "cls.predictions.decoder."),
    ],
    sequence_classifier: &[
        ("classifier.dense.", "bert.pooler.dense."),
        ("classifier.out_proj.", "classifier."),
    ],
    positions: PositionIds::AfterPadding,
    names: &crate::pretrained::NAMES,
    config_names: &[],
    token_types: true,
    config_unused: &[],
    pooler: zoo_attention::PoolerActivation::Tanh,
};

/// XLM-RoBERTa (Conneau et al., 2020, "Unsupervised Cross-lingual Representation
/// Learning at Scale"): RoBERTa's modules and names (`roberta.…`) under HF's
/// `XLMRoberta*` classes and `model_type` `xlm-roberta`. Its tokenizer is SentencePiece's
/// Unigram model, which the folder's `tokenizer.json` holds.
pub const XLM_LAYOUT: Layout = Layout {
    model_type: "xlm-roberta",
    architectures: [
        "XLMRobertaModel",
        "XLMRobertaForMaskedLM",
        "XLMRobertaForSequenceClassification",
        "XLMRobertaForTokenClassification",
        "XLMRobertaForQuestionAnswering",
    ],
    ..LAYOUT
};

/// HF's `RobertaModel`: the encoder, with its pooler when the checkpoint has one.
pub type RobertaModel = BertModel;
/// HF's `RobertaForMaskedLM`.
pub type RobertaForMaskedLm = BertForMaskedLm;
/// HF's `RobertaForSequenceClassification`.
pub type RobertaForSequenceClassification = BertForSequenceClassification;
/// HF's `RobertaForTokenClassification`.
pub type RobertaForTokenClassification = BertForTokenClassification;
/// HF's `RobertaForQuestionAnswering`.
pub type RobertaForQuestionAnswering = BertForQuestionAnswering;

#[cfg(test)]
mod tests {
    use burn::tensor::{Int, Tensor, TensorData};
    use zoo_device::test_device;

    use super::*;
    use crate::config::BertConfig;
    use crate::model::EncoderInput;

    fn tiny(model_type: &str) -> BertConfig {
        let mut c = BertConfig::new(30, 8, 1, 2, 16);
        c.max_position_embeddings = 8;
        c.pad_token_id = 1;
        c.model_type = Some(model_type.into());
        c
    }

    /// RoBERTa's positions: `pad + 1` onwards over real tokens, `pad` at padding, so a
    /// sequence of `max_position_embeddings - pad - 1` tokens is the longest; the same
    /// weights as BERT differ in output because the positions differ.
    #[test]
    fn positions_start_after_the_padding_id_and_skip_padding() {
        let device = test_device();
        let roberta = tiny("roberta").init(false, &device).unwrap();
        assert_eq!(roberta.position_ids(), PositionIds::AfterPadding);
        assert_eq!(roberta.max_len(), 6);
        // Row 0 is real tokens; row 1 ends in two pads (id 1).
        let tokens = |rows: &[[i64; 4]]| {
            Tensor::<2, Int>::from_data(TensorData::new(rows.concat(), [rows.len(), 4]), &device)
        };
        let ids = tokens(&[[5, 6, 7, 8], [5, 6, 1, 1]]);
        let positions = roberta
            .positions(&ids)
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        assert_eq!(positions, [2, 3, 4, 5, 2, 3, 1, 1]);
        let bert_positions = tiny("bert").init(false, &device).unwrap().positions(&ids);
        assert_eq!(
            bert_positions
                .into_data()
                .convert::<i64>()
                .try_to_vec::<i64>()
                .unwrap(),
            [0, 1, 2, 3, 0, 1, 2, 3]
        );
        let out = roberta.forward(EncoderInput::new(ids.clone())).unwrap();
        assert_eq!(out.hidden.dims(), [2, 4, 8]);
        // The same weights counted BERT's way give other outputs.
        let mut bert = tiny("bert").init(false, &device).unwrap();
        bert.embeddings = roberta.embeddings.clone();
        bert.layers = roberta.layers.clone();
        let other = bert.forward(EncoderInput::new(ids.clone())).unwrap();
        let diff = zoo_device::testing::max_abs_diff(&out.hidden, &other.hidden);
        assert!(diff > 1e-3, "positions made no difference: {diff}");
        // Seven tokens do not fit; six do.
        let long = Tensor::<2, Int>::from_data(TensorData::new(vec![5i64; 7], [1, 7]), &device);
        let e = roberta
            .forward(EncoderInput::new(long))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sequence of 7 tokens is longer than max_position_embeddings 6"),
            "{e}"
        );
        let six = Tensor::<2, Int>::from_data(TensorData::new(vec![5i64; 6], [1, 6]), &device);
        let out = roberta.forward(EncoderInput::new(six)).unwrap();
        // Read back, so no work is left queued on the device when the test ends.
        assert!(
            zoo_device::testing::floats(out.hidden)
                .iter()
                .all(|v| v.is_finite())
        );
    }

    #[test]
    fn a_position_table_with_no_room_after_the_padding_id_is_refused() {
        let mut c = tiny("roberta");
        c.max_position_embeddings = 2;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("max_position_embeddings 2 leaves no position for a token"),
            "{e}"
        );
        c.model_type = Some("bert".into());
        c.validate().unwrap();
    }
}
