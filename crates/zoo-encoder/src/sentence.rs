//! Sentence embeddings as sentence-transformers computes them: a folder's `modules.json`
//! lists a Transformer (the BERT checkpoint), a Pooling (`1_Pooling/config.json`) and
//! optionally a Normalize module; [`SentenceEncoder`] runs them in that order.

use std::path::{Component, Path, PathBuf};

use burn::tensor::{Bool, Device, Tensor};
use serde::Deserialize;
use zoo_core::{CheckpointError, ConfigError};

use crate::error::{EncoderError, Result};
use crate::model::{BertModel, mean_pool};
use zoo_data::tokenizer::{BertTokenizer, TokenBatch};

/// One pooling of token states into a sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's state (`[CLS]`).
    Cls,
    /// The element-wise maximum over real tokens.
    Max,
    /// The mean over real tokens (padding excluded).
    Mean,
    /// The sum over real tokens divided by the square root of their count.
    MeanSqrtLen,
}

/// The `pooling_mode` of recent sentence-transformers (6.x): one mode's name or several.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PoolingModes {
    /// `"mean"`.
    One(String),
    /// `["cls", "mean"]`, concatenated in this order.
    Many(Vec<String>),
}

/// `1_Pooling/config.json`, with sentence-transformers' field names: the boolean
/// `pooling_mode_*` keys of older releases, or `pooling_mode` and `embedding_dimension`
/// as 6.x writes them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PoolingConfig {
    /// Width of the token states (6.x: `embedding_dimension`).
    #[serde(alias = "embedding_dimension")]
    pub word_embedding_dimension: usize,
    /// The modes by name (6.x); when present, the boolean keys are not read.
    #[serde(default)]
    pub pooling_mode: Option<PoolingModes>,
    /// `[CLS]` pooling.
    #[serde(default)]
    pub pooling_mode_cls_token: bool,
    /// Mean pooling.
    #[serde(default)]
    pub pooling_mode_mean_tokens: bool,
    /// Max pooling.
    #[serde(default)]
    pub pooling_mode_max_tokens: bool,
    /// Mean-sqrt-len pooling.
    #[serde(default)]
    pub pooling_mode_mean_sqrt_len_tokens: bool,
    /// Position-weighted mean: not built, rejected.
    #[serde(default)]
    pub pooling_mode_weightedmean_tokens: bool,
    /// Last-token pooling: not built, rejected.
    #[serde(default)]
    pub pooling_mode_lasttoken: bool,
}

impl PoolingConfig {
    /// The modes that are on, in the order sentence-transformers concatenates them.
    ///
    /// # Errors
    /// No mode, or a mode this crate does not build.
    pub fn modes(&self) -> Result<Vec<Pooling>> {
        if let Some(named) = &self.pooling_mode {
            let names = match named {
                PoolingModes::One(name) => std::slice::from_ref(name),
                PoolingModes::Many(names) => names.as_slice(),
            };
            if names.is_empty() {
                return Err(ConfigError::conflict("no pooling mode is on").into());
            }
            return names
                .iter()
                .map(|name| match name.as_str() {
                    "cls" => Ok(Pooling::Cls),
                    "max" => Ok(Pooling::Max),
                    "mean" => Ok(Pooling::Mean),
                    "mean_sqrt_len_tokens" => Ok(Pooling::MeanSqrtLen),
                    other => Err(ConfigError::unsupported(
                        "pooling mode",
                        format!("{other:?}"),
                        "cls, max, mean and mean_sqrt_len_tokens are",
                    )
                    .into()),
                })
                .collect();
        }
        for (on, name) in [
            (self.pooling_mode_weightedmean_tokens, "weightedmean_tokens"),
            (self.pooling_mode_lasttoken, "lasttoken"),
        ] {
            if on {
                return Err(ConfigError::unsupported(
                    "pooling mode",
                    name,
                    "cls_token, max_tokens, mean_tokens and mean_sqrt_len_tokens are",
                )
                .into());
            }
        }
        let modes: Vec<Pooling> = [
            (self.pooling_mode_cls_token, Pooling::Cls),
            (self.pooling_mode_max_tokens, Pooling::Max),
            (self.pooling_mode_mean_tokens, Pooling::Mean),
            (self.pooling_mode_mean_sqrt_len_tokens, Pooling::MeanSqrtLen),
        ]
        .into_iter()
        .filter_map(|(on, mode)| on.then_some(mode))
        .collect();
        if modes.is_empty() {
            return Err(ConfigError::conflict("no pooling mode is on").into());
        }
        Ok(modes)
    }
}

/// Pools `hidden` `[B, T, H]` over the real tokens (`padding` `[B, T]`, `true` at padding)
/// with each mode, concatenated: `[B, H * modes]`.
pub fn pool(hidden: Tensor<3>, padding: Tensor<2, Bool>, modes: &[Pooling]) -> Tensor<2> {
    let [b, t, h] = hidden.dims();
    let outputs: Vec<Tensor<2>> = modes
        .iter()
        .map(|mode| match mode {
            Pooling::Cls => hidden.clone().slice([0..b, 0..1, 0..h]).reshape([b, h]),
            Pooling::Max => {
                // Padding set to -1e9 first, as sentence-transformers does.
                let pad = padding.clone().reshape([b, t, 1]).expand([b, t, h]);
                hidden
                    .clone()
                    .mask_fill(pad, -1e9)
                    .max_dim(1)
                    .reshape([b, h])
            }
            Pooling::Mean => mean_pool(hidden.clone(), padding.clone()),
            Pooling::MeanSqrtLen => {
                let keep = padding.clone().bool_not().float().reshape([b, t, 1]);
                let sum = (hidden.clone() * keep.clone()).sum_dim(1).reshape([b, h]);
                let count = keep.sum_dim(1).reshape([b, 1]).clamp_min(1e-9);
                sum / count.sqrt()
            }
        })
        .collect();
    Tensor::cat(outputs, 1)
}

/// Rows scaled to unit L2 norm (`x / max(|x|, 1e-12)`, as `torch.nn.functional.normalize`).
pub fn normalize(x: Tensor<2>) -> Tensor<2> {
    let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}

#[derive(Debug, Deserialize)]
struct ModuleEntry {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

impl ModuleEntry {
    /// The module's folder: its `path` inside `dir`. A path that leaves the folder, being
    /// absolute or stepping up through `..`, is refused before anything is read from it,
    /// as the shard index refuses such shards.
    fn folder(&self, dir: &Path) -> Result<PathBuf> {
        let path = Path::new(&self.path);
        let inside = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(CheckpointError::Config {
                path: dir.join("modules.json"),
                message: format!(
                    "module path {:?} is not a folder inside the model's folder",
                    self.path
                ),
            }
            .into());
        }
        Ok(dir.join(path))
    }
}

#[derive(Debug, Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| CheckpointError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| {
        CheckpointError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
        .into()
    })
}

/// A sentence-transformers model: BERT, its tokenizer, pooling and normalization.
#[derive(Debug)]
pub struct SentenceEncoder {
    /// The encoder.
    pub bert: BertModel,
    /// Its tokenizer, truncating to the folder's `max_seq_length`.
    pub tokenizer: BertTokenizer,
    /// The pooling modes, concatenated in this order.
    pub pooling: Vec<Pooling>,
    /// Whether embeddings are scaled to unit length.
    pub normalize: bool,
}

impl SentenceEncoder {
    /// Loads a sentence-transformers folder: `modules.json`, the Transformer module's
    /// checkpoint and tokenizer, `1_Pooling/config.json` (or the Pooling module's
    /// folder), and `sentence_bert_config.json`'s `max_seq_length` when present.
    ///
    /// # Errors
    /// A missing or malformed file, a module type other than Transformer, Pooling and
    /// Normalize, or a checkpoint that does not load.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let modules: Vec<ModuleEntry> = read_json(&dir.join("modules.json"))?;
        let mut transformer: Option<PathBuf> = None;
        let mut pooling_dir: Option<PathBuf> = None;
        let mut normalize = false;
        for m in &modules {
            let kind = m.kind.rsplit('.').next().unwrap_or(&m.kind);
            match kind {
                "Transformer" => transformer = Some(m.folder(dir)?),
                "Pooling" => pooling_dir = Some(m.folder(dir)?),
                "Normalize" => normalize = true,
                _ => {
                    return Err(CheckpointError::Config {
                        path: dir.join("modules.json"),
                        message: format!(
                            "module type {} is not supported (Transformer, Pooling and Normalize are)",
                            m.kind
                        ),
                    }
                    .into());
                }
            }
        }
        let missing = |what: &str| {
            EncoderError::from(CheckpointError::Config {
                path: dir.join("modules.json"),
                message: format!("lists no {what} module"),
            })
        };
        let transformer = transformer.ok_or_else(|| missing("Transformer"))?;
        let pooling_dir = pooling_dir.ok_or_else(|| missing("Pooling"))?;
        let pooling_cfg: PoolingConfig = read_json(&pooling_dir.join("config.json"))?;
        let bert = BertModel::from_pretrained(&transformer, device)?;
        if pooling_cfg.word_embedding_dimension != bert.hidden_size() {
            return Err(CheckpointError::Config {
                path: pooling_dir.join("config.json"),
                message: format!(
                    "word_embedding_dimension {} differs from the model's hidden_size {}",
                    pooling_cfg.word_embedding_dimension,
                    bert.hidden_size()
                ),
            }
            .into());
        }
        let st_config = transformer.join("sentence_bert_config.json");
        let max_len = if st_config.is_file() {
            read_json::<SentenceBertConfig>(&st_config)?.max_seq_length
        } else {
            None
        }
        .unwrap_or(bert.max_len())
        .min(bert.max_len());
        let tokenizer = BertTokenizer::from_pretrained(&transformer, max_len)?;
        Ok(Self {
            bert,
            tokenizer,
            pooling: pooling_cfg.modes()?,
            normalize,
        })
    }

    /// The encoder with the linear weights of its layers quantized
    /// ([`zoo_core::quantize_linear_weights`]; the embeddings keep their precision), and
    /// what was quantized.
    ///
    /// # Errors
    /// See [`zoo_core::quantize_linear_weights`].
    pub fn quantize(
        self,
        options: &zoo_core::QuantOptions,
        device: &Device,
    ) -> std::result::Result<(Self, zoo_core::QuantReport), zoo_core::ModelError> {
        let (bert, report) = zoo_core::quantize_linear_weights(self.bert, options, device)?;
        Ok((Self { bert, ..self }, report))
    }

    /// Embeds a tokenized batch: `[B, H * modes]`.
    ///
    /// # Errors
    /// Ids the model rejects.
    pub fn embed_batch(&self, batch: &TokenBatch, device: &Device) -> Result<Tensor<2>> {
        let padding = batch.padding_tensor(device);
        let hidden = self.bert.forward_batch(batch, device)?.hidden;
        let pooled = pool(hidden, padding, &self.pooling);
        Ok(if self.normalize {
            normalize(pooled)
        } else {
            pooled
        })
    }

    /// Embeds sentences, `batch_size` at a time: `[N, H * modes]`.
    ///
    /// # Errors
    /// No sentences, a zero batch size, or the model's own errors.
    pub fn encode(
        &self,
        sentences: &[&str],
        batch_size: usize,
        device: &Device,
    ) -> Result<Tensor<2>> {
        if sentences.is_empty() || batch_size == 0 {
            return Err(EncoderError::Input(format!(
                "need sentences and a batch size > 0, got {} sentences and batch size {batch_size}",
                sentences.len()
            )));
        }
        let parts = sentences
            .chunks(batch_size)
            .map(|chunk| self.embed_batch(&self.tokenizer.encode_batch(chunk)?, device))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(parts, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Module paths that climb out of the folder are refused, naming the path; the
    /// paths sentence-transformers writes (the folder itself, `1_Pooling`) are kept.
    #[test]
    fn module_paths_outside_the_folder_are_refused() {
        let dir = Path::new("/models/minilm");
        let entry = |path: &str| ModuleEntry {
            path: path.into(),
            kind: "sentence_transformers.models.Pooling".into(),
        };
        for bad in ["../secrets", "1_Pooling/../../x", "/etc", "a/../../b"] {
            let e = entry(bad).folder(dir).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "/models/minilm/modules.json: module path {bad:?} is not a folder inside \
                     the model's folder"
                )
            );
        }
        assert_eq!(entry("").folder(dir).unwrap(), dir);
        assert_eq!(
            entry("1_Pooling").folder(dir).unwrap(),
            dir.join("1_Pooling")
        );
        assert_eq!(entry("./2_Dense").folder(dir).unwrap(), dir.join("2_Dense"));
    }

    fn modes(json: &str) -> Result<Vec<Pooling>> {
        serde_json::from_str::<PoolingConfig>(json).unwrap().modes()
    }

    /// Both layouts of `1_Pooling/config.json`: the boolean keys (all-MiniLM-L6-v2's) and
    /// 6.x's `pooling_mode` by name, in the order given.
    #[test]
    fn pooling_configs_of_old_and_new_sentence_transformers_read_alike() {
        let old = r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": true,
            "pooling_mode_mean_tokens": true}"#;
        assert_eq!(modes(old).unwrap(), [Pooling::Cls, Pooling::Mean]);
        let new = r#"{"embedding_dimension": 8, "pooling_mode": "mean", "include_prompt": true}"#;
        let cfg: PoolingConfig = serde_json::from_str(new).unwrap();
        assert_eq!(cfg.word_embedding_dimension, 8);
        assert_eq!(cfg.modes().unwrap(), [Pooling::Mean]);
        let two = r#"{"embedding_dimension": 8, "pooling_mode": ["max", "cls"]}"#;
        assert_eq!(modes(two).unwrap(), [Pooling::Max, Pooling::Cls]);
        let e = modes(r#"{"embedding_dimension": 8, "pooling_mode": "lasttoken"}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("pooling mode \"lasttoken\" is not supported"),
            "{e}"
        );
        let e = modes(r#"{"embedding_dimension": 8, "pooling_mode": []}"#).unwrap_err();
        assert!(e.to_string().contains("no pooling mode is on"), "{e}");
    }
}
