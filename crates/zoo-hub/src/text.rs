//! Text in, text out: a causal LM checkpoint with its tokenizer, for the common path of
//! research code (prompt a model, read its continuation) without token ids.

use std::path::Path;

use burn::tensor::Device;
use zoo_core::GenerationConfig;
use zoo_core::registry::{Task, TextGenerator};
use zoo_decoder::LmTokenizer;

use crate::{AutoModel, HubError, Result};

/// A causal LM and its `tokenizer.json`, loaded from one folder.
///
/// ```no_run
/// # fn main() -> Result<(), zoo_hub::HubError> {
/// let device = burn::tensor::Device::default();
/// let lm = zoo_hub::TextGeneration::from_pretrained("path/to/gpt2", &device)?;
/// let text = lm.generate("The zoo opens at", &zoo_core::GenerationConfig::greedy(20))?;
/// assert!(text.starts_with("The zoo opens at"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TextGeneration {
    model: AutoModel,
    tokenizer: LmTokenizer,
}

impl TextGeneration {
    /// Loads the folder's model and tokenizer.
    ///
    /// # Errors
    /// What [`AutoModel::from_pretrained`] reports, a folder whose model is not a causal
    /// LM (named with what it is), or a missing or unreadable `tokenizer.json`.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let model = AutoModel::from_pretrained(dir.as_ref(), device)?;
        if model.generator().is_none() {
            let arch = model.architecture();
            return Err(HubError::Input(format!(
                "{}: {} ({}) is not a causal LM, so it does not generate text; \
                 text generation takes one of: {}",
                model.dir().display(),
                arch.name,
                arch.model_type,
                crate::architecture_names(Task::Generate).join(", ")
            )));
        }
        let tokenizer = LmTokenizer::from_pretrained(model.dir())
            .map_err(|e| HubError::Input(e.to_string()))?;
        Ok(Self { model, tokenizer })
    }

    /// The prompt followed by the model's continuation. `cfg` decides the length and the
    /// sampling; the checkpoint's end-of-text tokens are added to its stop tokens, and
    /// the ids that the tokenizer cannot decode are banned.
    ///
    /// # Errors
    /// An empty prompt, a prompt with no tokens, or what generation reports (a prompt
    /// longer than the model's context, bad settings).
    pub fn generate(&self, prompt: &str, cfg: &GenerationConfig) -> Result<String> {
        let lm = self.generator();
        let tokenizer_error = |e: zoo_data::TokenizerError| HubError::Input(e.to_string());
        if prompt.is_empty() {
            return Err(HubError::Input("the prompt is empty".into()));
        }
        let ids = self.tokenizer.encode(prompt).map_err(tokenizer_error)?;
        if ids.is_empty() {
            return Err(HubError::Input(format!(
                "the prompt {prompt:?} has no tokens"
            )));
        }
        let mut stop = cfg.stop_tokens.clone();
        stop.extend(lm.stop_tokens());
        let cfg = cfg
            .clone()
            .with_stop_tokens(stop)
            .with_banned_tokens(self.tokenizer.undecodable(lm.vocab_size()));
        let out = lm.generate(std::slice::from_ref(&ids), &cfg, &mut |_, _| {})?;
        let new = out.tokens.first().map_or(&[][..], Vec::as_slice);
        let tail = self
            .tokenizer
            .continuation(&ids, new)
            .map_err(tokenizer_error)?;
        Ok(format!("{prompt}{tail}"))
    }

    /// The model as [`AutoModel`] loaded it.
    pub fn model(&self) -> &AutoModel {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &LmTokenizer {
        &self.tokenizer
    }

    fn generator(&self) -> &dyn TextGenerator {
        self.model
            .generator()
            .expect("from_pretrained keeps only causal LMs")
    }
}
