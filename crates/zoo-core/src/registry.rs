//! What a registry row is, and what a loaded checkpoint of any family can be asked.
//!
//! Each family crate lists its architectures as [`Architecture`] rows (`model_type`, HF's
//! class name, the forward inputs it takes, the tasks it serves, its loader). `zoo-hub`
//! gathers the rows and reads a folder's `config.json` to pick one, so research code and
//! the command line load "whatever this folder is" without naming a family. A loaded
//! model is a [`Pretrained`]: it runs HF's forward arguments, and hands out the
//! capabilities it has ([`TextGenerator`], [`Translator`], [`Classifier`]).

use std::path::Path;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

use crate::beam::{BeamConfig, BeamOutput};
use crate::error::{CoreError, ModelError};
use crate::generate::{Generation, GenerationConfig};

/// What an architecture can be used for beyond its forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Continues a prompt: a causal LM ([`Pretrained::generator`]).
    Generate,
    /// Maps a source text to a target text: an encoder-decoder
    /// ([`Pretrained::translator`]).
    Translate,
    /// Labels a text or an image ([`Pretrained::classifier`]).
    Classify,
}

/// Loads one architecture's checkpoint folder onto a device.
pub type Loader = fn(&Path, &Device) -> Result<Box<dyn Pretrained>, ModelError>;

/// Loads one architecture's checkpoint folder (the first path) with the PEFT LoRA adapter
/// of the second folded into its weights.
pub type AdapterLoader = fn(&Path, &Path, &Device) -> Result<Box<dyn Pretrained>, ModelError>;

/// One row of the registry: an HF architecture that a family loads.
#[derive(Clone, Copy)]
pub struct Architecture {
    /// `config.json`'s `model_type` (`"llama"`).
    pub model_type: &'static str,
    /// HF's class name, as `config.json`'s `architectures` lists it (`"LlamaForCausalLM"`).
    pub name: &'static str,
    /// The forward arguments it takes, as HF names them.
    pub inputs: &'static [&'static str],
    /// What it serves beyond the forward pass.
    pub tasks: &'static [Task],
    /// Its loader.
    pub load: Loader,
    /// Its loader with a PEFT LoRA adapter, where the family reads adapters.
    pub load_adapted: Option<AdapterLoader>,
}

impl std::fmt::Debug for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Architecture")
            .field("model_type", &self.model_type)
            .field("name", &self.name)
            .field("inputs", &self.inputs)
            .field("tasks", &self.tasks)
            .finish_non_exhaustive()
    }
}

impl Architecture {
    /// Whether it serves `task`.
    pub fn serves(&self, task: Task) -> bool {
        self.tasks.contains(&task)
    }
}

/// The forward arguments [`ForwardInput`] can hold, in this order.
pub const INPUT_KEYS: [&str; 6] = [
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "decoder_input_ids",
    "pixel_values",
    "interpolate_pos_encoding",
];

/// A `[batch][length]` integer argument.
#[derive(Debug, Clone, PartialEq)]
pub struct IntMatrix {
    /// Its HF name.
    pub name: &'static str,
    /// The rows, all of one length (at least one row).
    pub rows: Vec<Vec<i64>>,
}

impl IntMatrix {
    /// `[batch, length]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows.len(), self.rows.first().map_or(0, Vec::len)]
    }

    /// The values, row after row.
    pub fn flat(&self) -> Vec<i64> {
        self.rows.iter().flatten().copied().collect()
    }

    /// The same shape as `other`, or an error naming both.
    ///
    /// # Errors
    /// Shapes that differ.
    pub fn check_shape(&self, other: &IntMatrix) -> Result<(), ModelError> {
        if self.shape() != other.shape() {
            return Err(ModelError::msg(format!(
                "{} has shape {:?}, {} {:?}",
                self.name,
                self.shape(),
                other.name,
                other.shape()
            )));
        }
        Ok(())
    }

    /// The values as token ids, row by row.
    ///
    /// # Errors
    /// A negative value, named with its place.
    pub fn to_ids(&self) -> Result<Vec<Vec<usize>>, ModelError> {
        let id = |r: usize, c: usize, x: i64| {
            usize::try_from(x).map_err(|_| {
                ModelError::msg(format!(
                    "{}[{r}][{c}] is a negative token id, {x}",
                    self.name
                ))
            })
        };
        self.rows
            .iter()
            .enumerate()
            .map(|(r, row)| row.iter().enumerate().map(|(c, &x)| id(r, c, x)).collect())
            .collect()
    }

    /// The values as an integer tensor `[B, T]`.
    pub fn to_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(TensorData::new(self.flat(), self.shape()), device)
    }

    /// An attention mask (1 at a token, 0 at padding) as HF passes it, turned into the
    /// zoo's padding mask `[B, T]`: `true` where the mask is 0.
    pub fn to_padding(&self, device: &Device) -> Tensor<2, Bool> {
        let flat: Vec<bool> = self.flat().iter().map(|&x| x == 0).collect();
        Tensor::from_data(TensorData::new(flat, self.shape()), device)
    }
}

/// `pixel_values`: `[batch][channels][height][width]` floats.
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    /// `[B, C, H, W]`.
    pub shape: [usize; 4],
    /// The values in that order.
    pub values: Vec<f32>,
}

/// HF's forward arguments, as `model(**inputs)` takes them.
#[derive(Debug, Clone, Default)]
pub struct ForwardInput {
    /// `input_ids`.
    pub input_ids: Option<IntMatrix>,
    /// `attention_mask`: 1 for a real token, 0 for padding.
    pub attention_mask: Option<IntMatrix>,
    /// `token_type_ids`.
    pub token_type_ids: Option<IntMatrix>,
    /// `decoder_input_ids`.
    pub decoder_input_ids: Option<IntMatrix>,
    /// `pixel_values`.
    pub pixel_values: Option<Pixels>,
    /// `interpolate_pos_encoding`.
    pub interpolate_pos_encoding: bool,
}

impl ForwardInput {
    /// The keys present, in [`INPUT_KEYS`] order.
    pub fn keys(&self) -> Vec<&'static str> {
        let present = [
            self.input_ids.is_some(),
            self.attention_mask.is_some(),
            self.token_type_ids.is_some(),
            self.decoder_input_ids.is_some(),
            self.pixel_values.is_some(),
            self.interpolate_pos_encoding,
        ];
        INPUT_KEYS
            .iter()
            .zip(present)
            .filter_map(|(k, p)| p.then_some(*k))
            .collect()
    }

    /// Checks what holds for every architecture: an `attention_mask` comes with
    /// `input_ids` of its shape, and so do `token_type_ids`.
    ///
    /// # Errors
    /// A mask without ids, or shapes that differ, named.
    pub fn check(&self) -> Result<(), ModelError> {
        if let Some(mask) = &self.attention_mask {
            let ids = self
                .input_ids
                .as_ref()
                .ok_or_else(|| ModelError::msg("attention_mask needs input_ids beside it"))?;
            mask.check_shape(ids)?;
        }
        if let (Some(types), Some(ids)) = (&self.token_type_ids, &self.input_ids) {
            types.check_shape(ids)?;
        }
        Ok(())
    }

    /// `input_ids`, which the model needs.
    ///
    /// # Errors
    /// They are absent.
    pub fn ids(&self) -> Result<&IntMatrix, ModelError> {
        self.input_ids.as_ref().ok_or_else(|| needs("input_ids"))
    }
}

/// The error of a model given no `what`: "the model needs decoder_input_ids".
pub fn needs(what: &str) -> ModelError {
    ModelError::msg(format!("the model needs {what}"))
}

/// One output of a forward pass: HF's name, the values read back as `f32`, the shape.
pub type NamedOutput = (&'static str, Vec<f32>, Vec<usize>);

/// A tensor's values as `f32`, read back from the device.
///
/// # Errors
/// Data that does not read back as floats.
pub fn floats<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>, ModelError> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| ModelError::msg(format!("cannot read the output back: {e:?}")))
}

/// A tensor read back as a [`NamedOutput`].
///
/// # Errors
/// See [`floats`].
pub fn named<const D: usize>(name: &'static str, t: Tensor<D>) -> Result<NamedOutput, ModelError> {
    let shape = t.dims().to_vec();
    Ok((name, floats(t)?, shape))
}

/// An encoder's outputs as HF's base models name them: `last_hidden_state`, and
/// `pooler_output` when the model has a pooler.
///
/// # Errors
/// See [`floats`].
pub fn encoder_outputs(
    last_hidden_state: Tensor<3>,
    pooler_output: Option<Tensor<2>>,
) -> Result<Vec<NamedOutput>, ModelError> {
    let mut out = vec![named("last_hidden_state", last_hidden_state)?];
    if let Some(p) = pooler_output {
        out.push(named("pooler_output", p)?);
    }
    Ok(out)
}

/// A model's parameter count, as every Burn module has it: [`Pretrained`] asks for it
/// through this trait, which every module implements, so no family writes it again.
pub trait ParamCount {
    /// Parameters of the model.
    fn param_count(&self) -> usize;

    /// The bytes its parameters take as the backend holds them
    /// ([`crate::quant::weight_bytes`]).
    fn weight_bytes(&self) -> crate::quant::WeightBytes;
}

impl<M: burn::module::Module> ParamCount for M {
    fn param_count(&self) -> usize {
        crate::quant::param_count(self)
    }

    fn weight_bytes(&self) -> crate::quant::WeightBytes {
        crate::quant::weight_bytes(self)
    }
}

/// A parameter count as people read it: `124439808` as `124,439,808`.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A model whose linear weights can be quantized, as every Burn module that is a
/// [`Pretrained`] can: [`Pretrained`] asks for it through this trait, so no family
/// writes it.
pub trait Quantize {
    /// The model with the linear weights of its layer stacks quantized
    /// ([`crate::quantize_linear_weights`]), and what was done.
    ///
    /// # Errors
    /// A block size out of range.
    fn quantized(
        self: Box<Self>,
        options: &crate::QuantOptions,
        device: &Device,
    ) -> Result<(Box<dyn Pretrained>, crate::QuantReport), ModelError>;
}

impl<M: burn::module::Module + Pretrained + 'static> Quantize for M {
    fn quantized(
        self: Box<Self>,
        options: &crate::QuantOptions,
        device: &Device,
    ) -> Result<(Box<dyn Pretrained>, crate::QuantReport), ModelError> {
        let (model, report) = crate::quantize_linear_weights(*self, options, device)?;
        Ok((Box::new(model), report))
    }
}

/// A loaded checkpoint of any family.
pub trait Pretrained: ParamCount + Quantize {
    /// The outputs of one forward pass, named as HF names them (`logits`, or
    /// `last_hidden_state` and `pooler_output`).
    ///
    /// # Errors
    /// Inputs the model rejects: an argument it needs and was not given, ids past the
    /// vocabulary, a sequence too long, shapes that disagree.
    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError>;

    /// Writes the model as a checkpoint folder that its family loads back: `config.json`
    /// and the weights under HF's names, as `model.safetensors`, or as `model.bpk` when
    /// its weights are quantized ([`crate::checkpoint::save_pretrained`]).
    ///
    /// # Errors
    /// A folder that cannot be written.
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError>;

    /// The model as a text generator, when it is a causal LM.
    fn generator(&self) -> Option<&dyn TextGenerator> {
        None
    }

    /// The model as a translator, when it is an encoder-decoder.
    fn translator(&self) -> Option<&dyn Translator> {
        None
    }

    /// The model as a classifier, when it has a classification head.
    fn classifier(&self) -> Option<&dyn Classifier> {
        None
    }
}

/// A causal LM, as a loaded checkpoint offers it: [`crate::generate()`] and
/// [`crate::beam_search`] over it, with the checkpoint's own end-of-text tokens.
pub trait TextGenerator {
    /// Rows of the model's output layer: its token ids run from 0 to this, which may pass
    /// the tokenizer's (a checkpoint pads its embedding to a multiple of 64).
    fn vocab_size(&self) -> usize;

    /// The end-of-text tokens the checkpoint names: its `generation_config.json`'s, else
    /// its `config.json`'s.
    fn stop_tokens(&self) -> Vec<usize>;

    /// The checkpoint's `generation_config.json`, when it has one.
    fn generation_defaults(&self) -> Option<&crate::checkpoint::GenerationDefaults> {
        None
    }

    /// Samples or decodes greedily; `on_token(row, id)` is called for each new token.
    ///
    /// # Errors
    /// See [`crate::generate()`].
    fn generate(
        &self,
        prompts: &[Vec<usize>],
        cfg: &GenerationConfig,
        on_token: &mut dyn FnMut(usize, usize),
    ) -> Result<Generation, CoreError>;

    /// Beam search.
    ///
    /// # Errors
    /// See [`crate::beam_search`].
    fn beam_search(
        &self,
        prompts: &[Vec<usize>],
        cfg: &BeamConfig,
    ) -> Result<BeamOutput, CoreError>;
}

/// An encoder-decoder, as a loaded checkpoint offers it: the source's token ids in, the
/// target's out.
pub trait Translator {
    /// Sampled (or greedy) decoding of each source.
    ///
    /// # Errors
    /// Bad settings or sources, or what the model rejects.
    fn sample(
        &self,
        sources: &[Vec<usize>],
        cfg: &GenerationConfig,
    ) -> Result<Generation, ModelError>;

    /// Beam search from each source.
    ///
    /// # Errors
    /// Bad settings or sources, or what the model rejects.
    fn beam_search(
        &self,
        sources: &[Vec<usize>],
        cfg: &BeamConfig,
    ) -> Result<BeamOutput, ModelError>;
}

/// What a classifier reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modality {
    /// A text, through the checkpoint's tokenizer.
    Text,
    /// An image file, through the checkpoint's image processor.
    Image,
}

/// One input to classify.
#[derive(Debug, Clone, Copy)]
pub enum ClassifyInput<'a> {
    /// A text.
    Text(&'a str),
    /// An image file.
    Image(&'a Path),
}

/// The class logits of a batch, with the checkpoint's label names.
#[derive(Debug, Clone)]
pub struct Classes {
    /// `[B, C]`
    pub logits: Tensor<2>,
    /// `id2label`, by class id (`LABEL_i` where the config names none).
    pub labels: Vec<String>,
}

/// A model with a classification head, with its checkpoint's preprocessing.
pub trait Classifier {
    /// What it reads.
    fn modality(&self) -> Modality;

    /// The class logits of one input.
    ///
    /// # Errors
    /// An input of the other modality, a file that cannot be read, or what the model
    /// rejects.
    fn classify(&self, input: ClassifyInput<'_>, device: &Device) -> Result<Classes, ModelError>;
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(124_439_808), "124,439,808");
    }

    use super::*;

    fn m(name: &'static str, rows: &[&[i64]]) -> IntMatrix {
        IntMatrix {
            name,
            rows: rows.iter().map(|r| r.to_vec()).collect(),
        }
    }

    #[test]
    fn inputs_are_checked_and_named() {
        let mut input = ForwardInput {
            attention_mask: Some(m("attention_mask", &[&[1, 1]])),
            ..ForwardInput::default()
        };
        assert_eq!(
            input.check().unwrap_err().to_string(),
            "attention_mask needs input_ids beside it"
        );
        assert_eq!(
            input.ids().unwrap_err().to_string(),
            "the model needs input_ids"
        );
        input.input_ids = Some(m("input_ids", &[&[3, 4, 5]]));
        assert_eq!(
            input.check().unwrap_err().to_string(),
            "attention_mask has shape [1, 2], input_ids [1, 3]"
        );
        input.attention_mask = Some(m("attention_mask", &[&[1, 1, 0]]));
        assert_eq!(input.ids().unwrap().to_ids().unwrap(), [[3, 4, 5]]);
        assert_eq!(
            m("input_ids", &[&[1], &[-2]])
                .to_ids()
                .unwrap_err()
                .to_string(),
            "input_ids[1][0] is a negative token id, -2"
        );
        input.check().unwrap();
        assert_eq!(input.keys(), ["input_ids", "attention_mask"]);
        let device = zoo_device::test_device();
        let pad = input.attention_mask.as_ref().unwrap().to_padding(&device);
        assert_eq!(zoo_device::testing::bools(pad), [false, false, true]);
        let ids = input.ids().unwrap().to_tensor(&device);
        assert_eq!(zoo_device::testing::ints(ids), [3, 4, 5]);
    }
}
