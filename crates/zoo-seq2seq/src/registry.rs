//! The encoder-decoder family's rows in the registry (`zoo_hub::AutoModel` reads them),
//! and its checkpoints as `zoo-core`'s [`Pretrained`] with a [`Translator`].

use std::path::Path;

use burn::tensor::{Bool, Device, Tensor, TensorData};
use zoo_core::registry::{
    Architecture, ForwardInput, NamedOutput, Pretrained, Task, Translator, named, needs,
};
use zoo_core::{BeamConfig, BeamOutput, Generation, GenerationConfig, ModelError};

use crate::generate::{beam_from, generate_from};
use crate::marian::MarianMtModel;
use crate::model::{EncoderDecoder, Source};
use crate::t5::T5ForConditionalGeneration;

const INPUTS: &[&str] = &["input_ids", "attention_mask", "decoder_input_ids"];
const TASKS: &[Task] = &[Task::Translate];

/// Every architecture the family loads.
pub const ARCHITECTURES: &[Architecture] = &[
    Architecture {
        model_type: "t5",
        name: "T5ForConditionalGeneration",
        inputs: INPUTS,
        tasks: TASKS,
        load: |dir, device| {
            Ok(Box::new(
                T5ForConditionalGeneration::from_pretrained(dir, device)
                    .map_err(ModelError::new)?,
            ))
        },
        load_adapted: None,
    },
    marian_row("marian", "MarianMTModel"),
    marian_row("bart", "BartForConditionalGeneration"),
    marian_row("mbart", "MBartForConditionalGeneration"),
];

/// A row of Marian's model, whose variant `config.json`'s `model_type` picks.
const fn marian_row(model_type: &'static str, name: &'static str) -> Architecture {
    Architecture {
        model_type,
        name,
        inputs: INPUTS,
        tasks: TASKS,
        load: |dir, device| {
            Ok(Box::new(
                MarianMtModel::from_pretrained(dir, device).map_err(ModelError::new)?,
            ))
        },
        load_adapted: None,
    }
}

/// Teacher-forced logits: `input_ids` (with `attention_mask`) is the source,
/// `decoder_input_ids` the decoder's input.
fn forward<M: EncoderDecoder>(
    model: &M,
    input: &ForwardInput,
    device: &Device,
) -> Result<Vec<NamedOutput>, ModelError> {
    let ids = input.ids()?;
    let tgt = input
        .decoder_input_ids
        .as_ref()
        .ok_or_else(|| needs("decoder_input_ids"))?;
    if tgt.shape()[0] != ids.shape()[0] {
        return Err(ModelError::msg(format!(
            "decoder_input_ids has {} rows, input_ids {}",
            tgt.shape()[0],
            ids.shape()[0]
        )));
    }
    let pad = match &input.attention_mask {
        Some(m) => m.to_padding(device),
        None => {
            let [b, s] = ids.shape();
            Tensor::<2, Bool>::from_data(TensorData::new(vec![false; b * s], [b, s]), device)
        }
    };
    let source = Source::new(ids.to_tensor(device), pad).map_err(ModelError::new)?;
    let out = model
        .forward(&source, tgt.to_tensor(device))
        .map_err(ModelError::new)?;
    Ok(vec![named("logits", out.logits)?])
}

/// Each encoder-decoder model is a [`Pretrained`] and a [`Translator`].
macro_rules! translator {
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
                forward(self, input, device)
            }

            fn translator(&self) -> Option<&dyn Translator> {
                Some(self)
            }
        }

        impl Translator for $model {
            fn sample(
                &self,
                sources: &[Vec<usize>],
                cfg: &GenerationConfig,
            ) -> Result<Generation, ModelError> {
                generate_from(self, sources, cfg).map_err(ModelError::new)
            }

            fn beam_search(
                &self,
                sources: &[Vec<usize>],
                cfg: &BeamConfig,
            ) -> Result<BeamOutput, ModelError> {
                beam_from(self, sources, cfg).map_err(ModelError::new)
            }
        }
    )*};
}

translator!(T5ForConditionalGeneration, MarianMtModel);
