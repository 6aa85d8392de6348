//! `generation_config.json`: the generation settings a checkpoint ships with, as
//! `transformers`' `GenerationConfig` writes them. Llama 3 Instruct names its end-of-turn
//! token there, and instruct models their sampling settings.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{CheckpointError, TokenIds};
use crate::generate::GenerationConfig;

/// The file's name in a checkpoint folder.
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// `transformers`' default `top_k` when a config samples without naming one.
pub const HF_DEFAULT_TOP_K: usize = 50;

/// The fields of `generation_config.json` the zoo applies; the rest is kept in `other`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationDefaults {
    /// Start-of-text token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<usize>,
    /// End-of-text token(s); generation stops at any of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<TokenIds>,
    /// Padding token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<usize>,
    /// Sample (true) or decode greedily (false, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_sample: Option<bool>,
    /// Sampling temperature. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Sample among the k most likely tokens. Default: 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Sample among the most likely tokens whose probabilities reach p. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Penalty on tokens already in the text. Default: 1 (off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// Most new tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// Beams of beam search. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_beams: Option<usize>,
    /// Every other field of the file.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl GenerationDefaults {
    /// Reads `dir/generation_config.json`; `None` when the folder has none.
    ///
    /// # Errors
    /// A file that cannot be read, or whose JSON does not fit, naming the file.
    pub fn from_pretrained(dir: &Path) -> Result<Option<Self>, CheckpointError> {
        let path = dir.join(GENERATION_CONFIG);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(CheckpointError::Io {
                    path,
                    message: e.to_string(),
                });
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| CheckpointError::Config {
                path,
                message: e.to_string(),
            })
    }

    /// The end-of-text ids the file names (none when it names none).
    pub fn eos_ids(&self) -> Vec<usize> {
        self.eos_token_id
            .as_ref()
            .map(TokenIds::ids)
            .unwrap_or_default()
    }

    /// Whether the file asks for sampling.
    pub fn samples(&self) -> bool {
        self.do_sample == Some(true)
    }

    /// The sampling or greedy settings the file describes, for `max_new_tokens` new
    /// tokens and the sampler's `seed`, as `transformers` reads it: greedy unless
    /// `do_sample`; sampling at the file's temperature (default 1), among its `top_k`
    /// (default [`HF_DEFAULT_TOP_K`]) and `top_p`; its repetition penalty either way.
    pub fn generation(&self, max_new_tokens: usize, seed: u64) -> GenerationConfig {
        let mut cfg = if self.samples() {
            let cfg =
                GenerationConfig::sampling(max_new_tokens, self.temperature.unwrap_or(1.0), seed)
                    .with_top_k(self.top_k.unwrap_or(HF_DEFAULT_TOP_K));
            match self.top_p {
                Some(p) if p < 1.0 => cfg.with_top_p(p),
                _ => cfg,
            }
        } else {
            GenerationConfig::greedy(max_new_tokens)
        };
        if let Some(r) = self.repetition_penalty {
            cfg = cfg.with_repetition_penalty(r);
        }
        // The seed is kept for a caller that turns sampling on after.
        cfg.seed = seed;
        cfg.with_stop_tokens(self.eos_ids())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> GenerationDefaults {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn llama3_instruct_stops_at_each_end_and_samples_as_its_file_says() {
        // The fields of Llama-3.2-1B-Instruct's generation_config.json.
        let g = parse(
            r#"{"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008,
            128009], "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.45.0.dev0"}"#,
        );
        assert_eq!(g.eos_ids(), [128001, 128008, 128009]);
        assert!(g.samples());
        let cfg = g.generation(20, 7);
        assert_eq!(cfg.temperature, 0.6);
        assert_eq!((cfg.top_k, cfg.top_p), (Some(HF_DEFAULT_TOP_K), Some(0.9)));
        assert_eq!(cfg.stop_tokens, [128001, 128008, 128009]);
        assert_eq!((cfg.max_new_tokens, cfg.seed), (20, 7));
        assert_eq!(g.other.keys().collect::<Vec<_>>(), ["transformers_version"]);
    }

    #[test]
    fn a_file_without_do_sample_decodes_greedily() {
        let g = parse(r#"{"eos_token_id": 2, "temperature": 0.7, "repetition_penalty": 1.3}"#);
        let cfg = g.generation(5, 3);
        assert_eq!(cfg.temperature, 0.0, "greedy");
        assert_eq!(cfg.seed, 3);
        assert_eq!((cfg.top_k, cfg.top_p), (None, None));
        assert_eq!(cfg.repetition_penalty, 1.3);
        assert_eq!(cfg.stop_tokens, [2]);
    }

    #[test]
    fn a_missing_file_is_none_and_a_broken_one_names_itself() {
        let dir = std::env::temp_dir().join(format!("zoo-genconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(GenerationDefaults::from_pretrained(&dir).unwrap(), None);
        std::fs::write(dir.join(GENERATION_CONFIG), r#"{"eos_token_id": "x"}"#).unwrap();
        let e = GenerationDefaults::from_pretrained(&dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("generation_config.json"), "{e}");
        std::fs::write(dir.join(GENERATION_CONFIG), r#"{"eos_token_id": 3}"#).unwrap();
        let g = GenerationDefaults::from_pretrained(&dir).unwrap().unwrap();
        assert_eq!(g.eos_ids(), [3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
