//! The decoder family's rows in the registry (`zoo_hub::AutoModel` reads them), and its
//! checkpoints as `zoo-core`'s [`Pretrained`] with a [`TextGenerator`].

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use zoo_core::checkpoint::GenerationDefaults;
use zoo_core::registry::{ForwardInput, NamedOutput, Pretrained, Task, TextGenerator, named};
use zoo_core::{Architecture, BeamConfig, BeamOutput, CoreError, Generation, GenerationConfig};
use zoo_core::{ModelError, beam_search, generate};

use crate::model::{DecoderInput, DecoderLm};
use crate::pretrained::HfDecoderConfig;

/// The forward arguments a causal LM takes.
pub(crate) const INPUTS: &[&str] = &["input_ids", "attention_mask"];
/// A causal LM generates.
pub(crate) const TASKS: &[Task] = &[Task::Generate];

const fn causal_lm(model_type: &'static str, name: &'static str) -> Architecture {
    Architecture {
        model_type,
        name,
        inputs: INPUTS,
        tasks: TASKS,
        load: load_causal_lm,
        load_adapted: Some(load_adapted_causal_lm),
    }
}

/// Every architecture the family loads, in the order the supported ones are listed.
pub const ARCHITECTURES: &[Architecture] = &[
    causal_lm("gpt2", "GPT2LMHeadModel"),
    causal_lm("llama", "LlamaForCausalLM"),
    causal_lm("mistral", "MistralForCausalLM"),
    causal_lm("qwen2", "Qwen2ForCausalLM"),
    causal_lm(crate::phi3::MODEL_TYPE, crate::phi3::ARCHITECTURE),
    causal_lm(crate::gpt_neox::MODEL_TYPE, crate::gpt_neox::ARCHITECTURE),
    causal_lm(crate::qwen3::MODEL_TYPE, crate::qwen3::ARCHITECTURE),
    causal_lm(crate::gemma::MODEL_TYPE, crate::gemma::ARCHITECTURE),
    causal_lm(crate::gemma2::MODEL_TYPE, crate::gemma2::ARCHITECTURE),
    causal_lm(crate::gemma3::MODEL_TYPE, crate::gemma3::ARCHITECTURE),
    causal_lm(crate::mixtral::MODEL_TYPE, crate::mixtral::ARCHITECTURE),
];

/// A causal-LM checkpoint with its HF config.
#[derive(Module, Debug)]
pub struct PretrainedLm {
    /// The model.
    pub model: DecoderLm,
    /// Its `config.json`.
    #[module(skip)]
    pub config: HfDecoderConfig,
    /// Its `generation_config.json`, when it has one.
    #[module(skip)]
    pub generation: Option<GenerationDefaults>,
}

impl PretrainedLm {
    /// Loads a causal-LM folder, with its `generation_config.json` when there is one.
    ///
    /// # Errors
    /// See [`DecoderLm::from_pretrained`], and a `generation_config.json` that does not
    /// parse.
    pub fn from_pretrained(dir: &Path, device: &Device) -> crate::Result<Self> {
        Ok(Self {
            config: HfDecoderConfig::from_pretrained(dir)?,
            generation: GenerationDefaults::from_pretrained(dir)?,
            model: DecoderLm::from_pretrained(dir, device)?,
        })
    }
}

fn load_causal_lm(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    Ok(Box::new(
        PretrainedLm::from_pretrained(dir, device).map_err(ModelError::new)?,
    ))
}

/// A causal LM with a PEFT LoRA adapter folded into its weights (Burn's LoRA, then
/// `materialize`).
fn load_adapted_causal_lm(
    dir: &Path,
    adapter: &Path,
    device: &Device,
) -> Result<Box<dyn Pretrained>, ModelError> {
    let mut lm = PretrainedLm::from_pretrained(dir, device).map_err(ModelError::new)?;
    lm.model = lm.model.with_adapter(adapter, &lm.config)?;
    Ok(Box::new(lm))
}

impl Pretrained for PretrainedLm {
    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let rows = input.ids()?.to_ids()?;
        let mut x = DecoderInput::from_ids(&rows, device).map_err(ModelError::new)?;
        if let Some(m) = &input.attention_mask {
            x = x.key_padding(m.to_padding(device));
        }
        let out = self.model.forward(x).map_err(ModelError::new)?;
        Ok(vec![named("logits", out.logits)?])
    }

    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        self.model
            .save_pretrained(dir, &self.config)
            .map_err(ModelError::new)
    }

    fn generator(&self) -> Option<&dyn TextGenerator> {
        Some(self)
    }
}

impl TextGenerator for PretrainedLm {
    fn vocab_size(&self) -> usize {
        zoo_core::CausalLm::vocab_size(&self.model)
    }

    fn stop_tokens(&self) -> Vec<usize> {
        match &self.generation {
            Some(g) if g.eos_token_id.is_some() => g.eos_ids(),
            _ => self.config.eos_token_ids(),
        }
    }

    fn generation_defaults(&self) -> Option<&GenerationDefaults> {
        self.generation.as_ref()
    }

    fn generate(
        &self,
        prompts: &[Vec<usize>],
        cfg: &GenerationConfig,
        on_token: &mut dyn FnMut(usize, usize),
    ) -> Result<Generation, CoreError> {
        generate(&self.model, prompts, cfg, on_token)
    }

    fn beam_search(
        &self,
        prompts: &[Vec<usize>],
        cfg: &BeamConfig,
    ) -> Result<BeamOutput, CoreError> {
        beam_search(&self.model, prompts, cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_names_a_model_type_the_config_reader_takes() {
        let types: Vec<&str> = ARCHITECTURES.iter().map(|a| a.model_type).collect();
        assert_eq!(
            types,
            [
                "gpt2",
                "llama",
                "mistral",
                "qwen2",
                "phi3",
                "gpt_neox",
                "qwen3",
                "gemma",
                "gemma2",
                "gemma3_text",
                "mixtral"
            ]
        );
        for a in ARCHITECTURES {
            assert!(
                a.serves(Task::Generate) && !a.serves(Task::Classify),
                "{a:?}"
            );
            assert_eq!(HfDecoderConfig::architecture_of(a.model_type), Some(a.name));
        }
        assert_eq!(HfDecoderConfig::architecture_of("bert"), None);
    }
}
