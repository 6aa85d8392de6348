//! Which family a checkpoint folder belongs to, read from its `config.json`
//! (`model_type`, then `architectures`), and the loaded model of each.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde_json::Value;
use zoo_core::checkpoint::{self, CheckpointError};
use zoo_decoder::{DecoderInput, DecoderLm, HfDecoderConfig};
use zoo_encoder::{
    BertForMaskedLm, BertForSequenceClassification, BertForTokenClassification, BertModel,
    EncoderInput,
};
use zoo_seq2seq::{EncoderDecoder, MarianMtModel, Source, T5ForConditionalGeneration};
use zoo_vision::{ImageInput, ViTForImageClassification, ViTModel};

use crate::error::{CliError, Result};
use crate::json::{ForwardInput, IntMatrix, Named};

/// Every `model_type` the command line runs.
pub const MODEL_TYPES: [&str; 8] = [
    "gpt2", "llama", "mistral", "qwen2", "bert", "vit", "t5", "marian",
];

/// The architectures each family runs, by `model_type`.
fn architectures(model_type: &str) -> &'static [&'static str] {
    match model_type {
        "gpt2" => &["GPT2LMHeadModel"],
        "llama" => &["LlamaForCausalLM"],
        "mistral" => &["MistralForCausalLM"],
        "qwen2" => &["Qwen2ForCausalLM"],
        "bert" => &[
            "BertModel",
            "BertForMaskedLM",
            "BertForSequenceClassification",
            "BertForTokenClassification",
        ],
        "vit" => &["ViTModel", "ViTForImageClassification"],
        "t5" => &["T5ForConditionalGeneration"],
        "marian" => &["MarianMTModel"],
        _ => &[],
    }
}

/// A checkpoint folder, identified.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The folder.
    pub dir: PathBuf,
    /// `model_type`.
    pub model_type: String,
    /// The architecture that runs: the first of `architectures`, else the family's base.
    pub architecture: String,
}

impl Checkpoint {
    /// Reads `dir/config.json` and picks the model that runs it.
    ///
    /// # Errors
    /// A missing folder or config, malformed JSON, or a `model_type` or architecture the
    /// command line does not run (the supported ones are named).
    pub fn detect(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(CliError::File {
                path: dir.to_path_buf(),
                message: "no such model folder".into(),
            });
        }
        let config = dir.join("config.json");
        let bad = |message: String| {
            CliError::from(CheckpointError::Config {
                path: config.clone(),
                message,
            })
        };
        let (json, model_type) = checkpoint::read_model_type(dir)?;
        let known = architectures(&model_type);
        if known.is_empty() {
            return Err(bad(format!(
                "unknown model_type {model_type:?}; the supported model types are {}",
                MODEL_TYPES.join(", ")
            )));
        }
        let architecture = match json
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
        {
            Some(a) if known.contains(&a) => a.to_string(),
            Some(a) => {
                return Err(bad(format!(
                    "architecture {a:?} of model_type {model_type:?} is not supported; the \
                     supported ones are {}",
                    known.join(", ")
                )));
            }
            None => known[0].to_string(),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            model_type,
            architecture,
        })
    }

    /// The forward arguments the architecture takes.
    pub fn inputs(&self) -> &'static [&'static str] {
        match self.model_type.as_str() {
            "bert" => &["input_ids", "attention_mask", "token_type_ids"],
            "vit" => &["pixel_values", "interpolate_pos_encoding"],
            "t5" | "marian" => &["input_ids", "attention_mask", "decoder_input_ids"],
            _ => &["input_ids", "attention_mask"],
        }
    }

    /// Loads the model on `device`.
    ///
    /// # Errors
    /// What the family's loader reports.
    pub fn load(&self, device: &Device) -> Result<Loaded> {
        let dir = &self.dir;
        Ok(match self.architecture.as_str() {
            "BertModel" => Loaded::Bert(BertModel::from_pretrained(dir, device)?),
            "BertForMaskedLM" => {
                Loaded::BertMaskedLm(BertForMaskedLm::from_pretrained(dir, device)?)
            }
            "BertForSequenceClassification" => {
                Loaded::BertSequence(BertForSequenceClassification::from_pretrained(dir, device)?)
            }
            "BertForTokenClassification" => {
                Loaded::BertToken(BertForTokenClassification::from_pretrained(dir, device)?)
            }
            "ViTModel" => Loaded::Vit(ViTModel::from_pretrained(dir, device)?),
            "ViTForImageClassification" => {
                Loaded::VitClassifier(ViTForImageClassification::from_pretrained(dir, device)?)
            }
            "T5ForConditionalGeneration" => {
                Loaded::T5(T5ForConditionalGeneration::from_pretrained(dir, device)?)
            }
            "MarianMTModel" => Loaded::Marian(MarianMtModel::from_pretrained(dir, device)?),
            _ => Loaded::Decoder(
                DecoderLm::from_pretrained(dir, device)?,
                HfDecoderConfig::from_pretrained(dir)?,
            ),
        })
    }
}

/// A loaded model of any family.
#[derive(Debug)]
pub enum Loaded {
    /// A causal LM and its HF config.
    Decoder(DecoderLm, HfDecoderConfig),
    /// `BertModel`.
    Bert(BertModel),
    /// `BertForMaskedLM`.
    BertMaskedLm(BertForMaskedLm),
    /// `BertForSequenceClassification`.
    BertSequence(BertForSequenceClassification),
    /// `BertForTokenClassification`.
    BertToken(BertForTokenClassification),
    /// `ViTModel`.
    Vit(ViTModel),
    /// `ViTForImageClassification`.
    VitClassifier(ViTForImageClassification),
    /// `T5ForConditionalGeneration`.
    T5(T5ForConditionalGeneration),
    /// `MarianMTModel`.
    Marian(MarianMtModel),
}

/// Teacher-forced logits of an encoder-decoder: `input_ids` (with `attention_mask`) is the
/// source, `decoder_input_ids` the decoder's input.
fn seq2seq_forward<M: EncoderDecoder>(
    model: &M,
    input: &ForwardInput,
    device: &Device,
) -> Result<Vec<Named>> {
    let need = |what: &str| CliError::Input(format!("the model needs {what}"));
    let ids = input.input_ids.as_ref().ok_or_else(|| need("input_ids"))?;
    let tgt = input
        .decoder_input_ids
        .as_ref()
        .ok_or_else(|| need("decoder_input_ids"))?;
    if tgt.shape()[0] != ids.shape()[0] {
        return Err(CliError::Input(format!(
            "decoder_input_ids has {} rows, input_ids {}",
            tgt.shape()[0],
            ids.shape()[0]
        )));
    }
    let pad = match &input.attention_mask {
        Some(m) => padding(m, device),
        None => {
            let [b, s] = ids.shape();
            Tensor::from_data(TensorData::new(vec![false; b * s], [b, s]), device)
        }
    };
    let source = Source::new(ints(ids, device), pad)?;
    let out = model.forward(&source, ints(tgt, device))?;
    Ok(vec![values("logits", out.logits)?])
}

/// A tensor's values as `f32`, read back from the device.
///
/// # Errors
/// Data that does not read back as floats.
pub fn floats<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| CliError::Unsupported(format!("cannot read the output back: {e:?}")))
}

fn values<const D: usize>(name: &'static str, t: Tensor<D>) -> Result<Named> {
    let shape = t.dims().to_vec();
    Ok((name, floats(t)?, shape))
}

fn ints(m: &IntMatrix, device: &Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(m.flat(), m.shape()), device)
}

/// `true` where the mask is 0 (padding).
fn padding(mask: &IntMatrix, device: &Device) -> Tensor<2, Bool> {
    let flat: Vec<bool> = mask.flat().iter().map(|&x| x == 0).collect();
    Tensor::from_data(TensorData::new(flat, mask.shape()), device)
}

impl Loaded {
    /// Parameters of the model.
    pub fn num_params(&self) -> usize {
        match self {
            Self::Decoder(m, _) => m.num_params(),
            Self::Bert(m) => m.num_params(),
            Self::BertMaskedLm(m) => m.num_params(),
            Self::BertSequence(m) => m.num_params(),
            Self::BertToken(m) => m.num_params(),
            Self::Vit(m) => m.num_params(),
            Self::VitClassifier(m) => m.num_params(),
            Self::T5(m) => m.num_params(),
            Self::Marian(m) => m.num_params(),
        }
    }

    /// The outputs of one forward pass, named as HF names them.
    ///
    /// # Errors
    /// Inputs the model rejects (ids past the vocabulary, a sequence too long, shapes
    /// that disagree).
    pub fn forward(&self, input: &ForwardInput, device: &Device) -> Result<Vec<Named>> {
        if let Some(mask) = &input.attention_mask {
            let ids = input.input_ids.as_ref().ok_or_else(|| {
                CliError::Input("attention_mask needs input_ids beside it".into())
            })?;
            mask.check_shape(ids)?;
        }
        if let (Some(types), Some(ids)) = (&input.token_type_ids, &input.input_ids) {
            types.check_shape(ids)?;
        }
        let need = |what: &str| CliError::Input(format!("the model needs {what}"));
        let bert_input = || -> Result<EncoderInput> {
            let ids = input.input_ids.as_ref().ok_or_else(|| need("input_ids"))?;
            let mut x = EncoderInput::new(ints(ids, device));
            if let Some(t) = &input.token_type_ids {
                x = x.token_types(ints(t, device));
            }
            if let Some(m) = &input.attention_mask {
                x = x.padding(padding(m, device));
            }
            Ok(x)
        };
        let image_input = || -> Result<ImageInput> {
            let px = input
                .pixel_values
                .as_ref()
                .ok_or_else(|| need("pixel_values"))?;
            let t = Tensor::<4>::from_data(TensorData::new(px.values.clone(), px.shape), device);
            let x = ImageInput::new(t);
            Ok(if input.interpolate_pos_encoding {
                x.interpolate_pos_encoding()
            } else {
                x
            })
        };
        Ok(match self {
            Self::Decoder(model, _) => {
                let ids = input.input_ids.as_ref().ok_or_else(|| need("input_ids"))?;
                let rows: Vec<Vec<usize>> = ids
                    .rows
                    .iter()
                    .map(|r| r.iter().map(|&x| x as usize).collect())
                    .collect();
                let mut x = DecoderInput::from_ids(&rows, device)?;
                if let Some(m) = &input.attention_mask {
                    x = x.key_padding(padding(m, device));
                }
                vec![values("logits", model.forward(x)?.logits)?]
            }
            Self::Bert(model) => {
                let out = model.forward(bert_input()?)?;
                let mut v = vec![values("last_hidden_state", out.hidden)?];
                if let Some(p) = out.pooled {
                    v.push(values("pooler_output", p)?);
                }
                v
            }
            Self::BertMaskedLm(model) => vec![values("logits", model.forward(bert_input()?)?)?],
            Self::BertSequence(model) => vec![values("logits", model.forward(bert_input()?)?)?],
            Self::BertToken(model) => vec![values("logits", model.forward(bert_input()?)?)?],
            Self::Vit(model) => {
                let out = model.forward(image_input()?)?;
                let mut v = vec![values("last_hidden_state", out.last_hidden_state)?];
                if let Some(p) = out.pooler_output {
                    v.push(values("pooler_output", p)?);
                }
                v
            }
            Self::VitClassifier(model) => {
                vec![values("logits", model.forward(image_input()?)?.0)?]
            }
            Self::T5(model) => seq2seq_forward(model, input, device)?,
            Self::Marian(model) => seq2seq_forward(model, input, device)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_type_has_its_architectures() {
        assert_eq!(
            MODEL_TYPES.join(", "),
            "gpt2, llama, mistral, qwen2, bert, vit, t5, marian"
        );
        for t in MODEL_TYPES {
            assert!(!architectures(t).is_empty(), "{t}");
        }
        assert!(architectures("bart").is_empty());
    }
}
