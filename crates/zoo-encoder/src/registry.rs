//! The encoder family's rows in the registry, BERT's and RoBERTa's (`zoo_hub::AutoModel`
//! reads them), and its checkpoints as `zoo-core`'s [`Pretrained`]; the sequence
//! classifier is also a [`Classifier`] of texts, through the folder's tokenizer.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Bool, Device, Int, Tensor};
use zoo_core::ModelError;
use zoo_core::registry::{
    AdapterLoader, Architecture, Classes, Classifier, ClassifyInput, ForwardInput, Loader,
    Modality, NamedOutput, Pretrained, Task, encoder_outputs, named,
};

use crate::model::{
    BertForMaskedLm, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertModel, EncoderInput,
};
use crate::modernbert::{
    HeadKind, HeadLogits, ModernBertForClassification, ModernBertForMaskedLm, ModernBertModel,
};
use crate::pretrained::{BERT, Layout};
use crate::{distilbert, roberta};
use zoo_data::TokenBatch;
use zoo_data::tokenizer::BertTokenizer;

const INPUTS: &[&str] = &["input_ids", "attention_mask", "token_type_ids"];
/// A member without token types takes no `token_type_ids` (HF's DistilBERT).
const INPUTS_WITHOUT_TYPES: &[&str] = &["input_ids", "attention_mask"];

/// The rows of one member of the family: the bare encoder, the masked LM, the sequence
/// classifier, the token classifier and the question-answering head. The loaders are BERT's for every member: they
/// read `config.json`'s `model_type` and take its [`Layout`].
const fn rows(layout: &'static Layout) -> [Architecture; 5] {
    const fn row(
        layout: &'static Layout,
        index: usize,
        tasks: &'static [Task],
        load: Loader,
        load_adapted: Option<AdapterLoader>,
    ) -> Architecture {
        Architecture {
            model_type: layout.model_type,
            name: layout.architectures[index],
            inputs: if layout.token_types {
                INPUTS
            } else {
                INPUTS_WITHOUT_TYPES
            },
            tasks,
            load,
            load_adapted,
        }
    }
    let adapted: Option<AdapterLoader> = Some(load_adapted_sequence_classifier);
    [
        row(layout, 0, &[], load_base, None),
        row(layout, 1, &[], load_masked_lm, None),
        row(
            layout,
            2,
            &[Task::Classify],
            load_sequence_classifier,
            adapted,
        ),
        row(layout, 3, &[], load_token_classifier, None),
        row(layout, 4, &[], load_question_answering, None),
    ]
}

/// Every architecture the family loads; the first of a `model_type` is what a
/// `config.json` without `architectures` gets.
pub const ARCHITECTURES: &[Architecture] = &{
    let [b0, b1, b2, b3, b4] = rows(&BERT);
    let [r0, r1, r2, r3, r4] = rows(&roberta::LAYOUT);
    let [x0, x1, x2, x3, x4] = rows(&roberta::XLM_LAYOUT);
    let [d0, d1, d2, d3, d4] = rows(&distilbert::LAYOUT);
    let [m0, m1, m2, m3, m4] = MODERNBERT;
    [
        b0, b1, b2, b3, b4, r0, r1, r2, r3, r4, x0, x1, x2, x3, x4, d0, d1, d2, d3, d4, m0, m1, m2,
        m3, m4,
    ]
};

/// ModernBERT's rows: its own modules, so its own loaders.
const MODERNBERT: [Architecture; 5] = {
    const fn row(name: &'static str, load: Loader) -> Architecture {
        Architecture {
            model_type: "modernbert",
            name,
            inputs: INPUTS_WITHOUT_TYPES,
            tasks: &[],
            load,
            load_adapted: None,
        }
    }
    [
        row("ModernBertModel", |dir, device| {
            boxed(ModernBertModel::from_pretrained(dir, device))
        }),
        row("ModernBertForMaskedLM", |dir, device| {
            boxed(ModernBertForMaskedLm::from_pretrained(dir, device))
        }),
        Architecture {
            tasks: &[Task::Classify],
            ..row("ModernBertForSequenceClassification", |dir, device| {
                let model =
                    ModernBertForClassification::from_pretrained(dir, HeadKind::Sequence, device)
                        .map_err(ModelError::new)?;
                Ok(Box::new(ModernTextClassifier {
                    model,
                    dir: dir.to_path_buf(),
                }))
            })
        },
        row("ModernBertForTokenClassification", |dir, device| {
            boxed(ModernBertForClassification::from_pretrained(
                dir,
                HeadKind::Token,
                device,
            ))
        }),
        row("ModernBertForQuestionAnswering", |dir, device| {
            boxed(ModernBertForClassification::from_pretrained(
                dir,
                HeadKind::Span,
                device,
            ))
        }),
    ]
};

/// ModernBERT's `input_ids` and padding from `attention_mask`.
fn ids_and_padding(
    input: &ForwardInput,
    device: &Device,
) -> Result<(Tensor<2, Int>, Option<Tensor<2, Bool>>), ModelError> {
    let ids = input.ids()?.to_tensor(device);
    let padding = input.attention_mask.as_ref().map(|m| m.to_padding(device));
    Ok((ids, padding))
}

impl Pretrained for ModernBertModel {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let (ids, padding) = ids_and_padding(input, device)?;
        let hidden = ModernBertModel::forward(self, ids, padding).map_err(ModelError::new)?;
        encoder_outputs(hidden, None)
    }
}

impl Pretrained for ModernBertForMaskedLm {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let (ids, padding) = ids_and_padding(input, device)?;
        let logits = ModernBertForMaskedLm::forward(self, ids, padding).map_err(ModelError::new)?;
        Ok(vec![named("logits", logits)?])
    }
}

/// `logits`, or the span head's `start_logits` and `end_logits`.
impl Pretrained for ModernBertForClassification {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let (ids, padding) = ids_and_padding(input, device)?;
        let out =
            ModernBertForClassification::forward(self, ids, padding).map_err(ModelError::new)?;
        match (self.kind(), out) {
            (HeadKind::Span, HeadLogits::PerToken(logits)) => {
                let [b, t, _] = logits.dims();
                let side = |i| logits.clone().narrow(2, i, 1).reshape([b, t]);
                Ok(vec![
                    named("start_logits", side(0))?,
                    named("end_logits", side(1))?,
                ])
            }
            (_, HeadLogits::PerToken(logits)) => Ok(vec![named("logits", logits)?]),
            (_, HeadLogits::PerText(logits)) => Ok(vec![named("logits", logits)?]),
        }
    }
}

fn load_base(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    boxed(BertModel::from_pretrained(dir, device))
}

fn load_masked_lm(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    boxed(BertForMaskedLm::from_pretrained(dir, device))
}

fn load_sequence_classifier(
    dir: &Path,
    device: &Device,
) -> Result<Box<dyn Pretrained>, ModelError> {
    let model =
        BertForSequenceClassification::from_pretrained(dir, device).map_err(ModelError::new)?;
    Ok(Box::new(TextClassifier {
        model,
        dir: dir.to_path_buf(),
    }))
}

/// A sequence classifier with a PEFT LoRA adapter folded in, and the head it saves.
fn load_adapted_sequence_classifier(
    dir: &Path,
    adapter: &Path,
    device: &Device,
) -> Result<Box<dyn Pretrained>, ModelError> {
    let model = BertForSequenceClassification::from_pretrained_adapted(dir, adapter, device)?;
    Ok(Box::new(TextClassifier {
        model,
        dir: dir.to_path_buf(),
    }))
}

fn load_token_classifier(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    boxed(BertForTokenClassification::from_pretrained(dir, device))
}

fn load_question_answering(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    boxed(BertForQuestionAnswering::from_pretrained(dir, device))
}

fn boxed<M: Pretrained + 'static>(
    model: crate::Result<M>,
) -> Result<Box<dyn Pretrained>, ModelError> {
    Ok(Box::new(model.map_err(ModelError::new)?))
}

/// HF's BERT arguments as the zoo's input.
fn encoder_input(input: &ForwardInput, device: &Device) -> Result<EncoderInput, ModelError> {
    let mut x = EncoderInput::new(input.ids()?.to_tensor(device));
    if let Some(t) = &input.token_type_ids {
        x = x.token_types(t.to_tensor(device));
    }
    if let Some(m) = &input.attention_mask {
        x = x.padding(m.to_padding(device));
    }
    Ok(x)
}

impl Pretrained for BertModel {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let out =
            BertModel::forward(self, encoder_input(input, device)?).map_err(ModelError::new)?;
        encoder_outputs(out.hidden, out.pooled)
    }
}

/// The heads whose one output is `logits`.
macro_rules! logits_head {
    ($($model:ty),*) => {$(
        impl Pretrained for $model {
            fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
                <$model>::save_pretrained(self, dir).map_err(ModelError::new)
            }

            fn forward(
                &self,
                input: &ForwardInput,
                device: &Device,
            ) -> Result<Vec<NamedOutput>, ModelError> {
                let logits = <$model>::forward(self, encoder_input(input, device)?)
                    .map_err(ModelError::new)?;
                Ok(vec![named("logits", logits)?])
            }
        }
    )*};
}

logits_head!(
    BertForMaskedLm,
    BertForSequenceClassification,
    BertForTokenClassification
);

/// HF's two outputs of a span head: `start_logits` and `end_logits`.
impl Pretrained for BertForQuestionAnswering {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let span = BertForQuestionAnswering::forward(self, encoder_input(input, device)?)
            .map_err(ModelError::new)?;
        Ok(vec![
            named("start_logits", span.start)?,
            named("end_logits", span.end)?,
        ])
    }
}

/// A sequence classifier (BERT's or RoBERTa's) with the folder its tokenizer is read
/// from.
#[derive(Module, Debug)]
pub struct TextClassifier {
    /// The model.
    pub model: BertForSequenceClassification,
    /// The checkpoint folder.
    #[module(skip)]
    pub dir: PathBuf,
}

impl Pretrained for TextClassifier {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        self.model.save_pretrained(dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        Pretrained::forward(&self.model, input, device)
    }

    fn classifier(&self) -> Option<&dyn Classifier> {
        Some(self)
    }
}

impl Classifier for TextClassifier {
    fn modality(&self) -> Modality {
        Modality::Text
    }

    fn classify(&self, input: ClassifyInput<'_>, device: &Device) -> Result<Classes, ModelError> {
        let ClassifyInput::Text(text) = input else {
            return Err(ModelError::msg(
                "a sequence classifier classifies text, not images",
            ));
        };
        let bert = &self.model.bert;
        let batch = encode_text(&self.dir, bert.max_len(), text)?;
        let mut input = EncoderInput::from_batch(&batch, device);
        if bert.config().type_vocab_size == 0 {
            input.token_types = None; // DistilBERT has none
        }
        let logits = self.model.forward(input).map_err(ModelError::new)?;
        Ok(Classes {
            logits,
            labels: bert.config().labels(),
        })
    }
}

/// `text` through the folder's tokenizer, cut at `max_len` tokens.
fn encode_text(dir: &Path, max_len: usize, text: &str) -> Result<TokenBatch, ModelError> {
    let tokenizer = BertTokenizer::from_pretrained(dir, max_len).map_err(ModelError::new)?;
    tokenizer.encode_batch(&[text]).map_err(ModelError::new)
}

/// ModernBERT's sequence classifier with the folder its tokenizer is read from.
#[derive(Module, Debug)]
pub struct ModernTextClassifier {
    /// The model.
    pub model: ModernBertForClassification,
    /// The checkpoint folder.
    #[module(skip)]
    pub dir: PathBuf,
}

impl Pretrained for ModernTextClassifier {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        self.model.save_pretrained(dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        Pretrained::forward(&self.model, input, device)
    }

    fn classifier(&self) -> Option<&dyn Classifier> {
        Some(self)
    }
}

impl Classifier for ModernTextClassifier {
    fn modality(&self) -> Modality {
        Modality::Text
    }

    fn classify(&self, input: ClassifyInput<'_>, device: &Device) -> Result<Classes, ModelError> {
        let ClassifyInput::Text(text) = input else {
            return Err(ModelError::msg(
                "a sequence classifier classifies text, not images",
            ));
        };
        let config = self.model.model.config();
        let batch = encode_text(&self.dir, config.max_position_embeddings, text)?;
        let logits = self
            .model
            .forward(batch.ids_tensor(device), Some(batch.padding_tensor(device)))
            .map_err(ModelError::new)?;
        let HeadLogits::PerText(logits) = logits else {
            return Err(ModelError::msg(
                "this ModernBERT head gives no logits per text",
            ));
        };
        Ok(Classes {
            logits,
            labels: config.labels(),
        })
    }
}
