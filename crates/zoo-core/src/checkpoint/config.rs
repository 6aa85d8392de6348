//! `config.json`: reading it into a family's config type, and writing it with HF's
//! `model_type`, `architectures` and `id2label`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::CheckpointError;

/// Reads `dir/config.json` into a family's config type.
///
/// # Errors
/// A missing or unreadable file, or JSON that does not fit `T`, naming the file.
pub fn read_config<T: DeserializeOwned>(dir: &Path) -> Result<T, CheckpointError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| CheckpointError::Io {
        path: path.clone(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::Config {
        path,
        message: e.to_string(),
    })
}

/// Reads `dir/config.json` as JSON, with its `model_type`: what a program that serves
/// several families reads first, to choose one.
///
/// # Errors
/// As [`read_config`], and a config without a `model_type` string.
pub fn read_model_type(dir: &Path) -> Result<(serde_json::Value, String), CheckpointError> {
    let json: serde_json::Value = read_config(dir)?;
    let model_type = json
        .get("model_type")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| CheckpointError::Config {
            path: dir.join("config.json"),
            message: "no model_type".into(),
        })?
        .to_string();
    Ok((json, model_type))
}

/// Reads `dir/config.json` as [`read_config`] does, then runs the family's `validate` on
/// it; a rejection names the file.
///
/// # Errors
/// As [`read_config`], and what `validate` rejects.
pub fn read_valid_config<T: DeserializeOwned, E: fmt::Display>(
    dir: &Path,
    validate: impl FnOnce(&T) -> Result<(), E>,
) -> Result<T, CheckpointError> {
    let cfg: T = read_config(dir)?;
    validate(&cfg).map_err(|e| CheckpointError::Config {
        path: dir.join("config.json"),
        message: e.to_string(),
    })?;
    Ok(cfg)
}

/// The class count of a classification checkpoint in `dir`: the length of its
/// `id2label` names.
///
/// # Errors
/// No names, which leave the classifier's size unknown.
pub fn num_labels(dir: &Path, labels: &[String]) -> Result<usize, CheckpointError> {
    if labels.is_empty() {
        return Err(CheckpointError::Config {
            path: dir.join("config.json"),
            message: "a classification checkpoint needs id2label to size its classifier".into(),
        });
    }
    Ok(labels.len())
}

/// A token id in a `config.json`, or several (`eos_token_id` is either, depending on the
/// checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// One id.
    One(usize),
    /// Several ids.
    Many(Vec<usize>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn ids(&self) -> Vec<usize> {
        match self {
            Self::One(id) => vec![*id],
            Self::Many(ids) => ids.clone(),
        }
    }
}

/// The class names of a classification checkpoint's `id2label`, in class order: empty
/// without one, or with one that [`class_names`] refuses (its config's validation names
/// the fault).
pub fn labels(id2label: Option<&BTreeMap<String, String>>) -> Vec<String> {
    id2label
        .and_then(|l| class_names(l).ok())
        .unwrap_or_default()
}

/// The class names of HF's `id2label` (`{"0": "cat", "1": "dog"}`), in class order.
///
/// # Errors
/// A key that is not a class index below the number of entries, named.
pub fn class_names(
    id2label: &BTreeMap<String, String>,
) -> Result<Vec<String>, crate::validate::ConfigError> {
    let mut out = vec![None; id2label.len()];
    for (key, name) in id2label {
        let index = key
            .parse::<usize>()
            .ok()
            .filter(|i| *i < id2label.len())
            .ok_or_else(|| {
                crate::validate::ConfigError::conflict(format!(
                    "id2label key {key:?} is not a class index below {}",
                    id2label.len()
                ))
            })?;
        out[index] = Some(name.clone());
    }
    Ok(out.into_iter().map(Option::unwrap_or_default).collect())
}

/// HF's default `id2label` for `n` classes: `LABEL_0`, `LABEL_1`, ...
pub fn default_id2label(n: usize) -> BTreeMap<String, String> {
    id2label(&(0..n).map(|i| format!("LABEL_{i}")).collect::<Vec<_>>())
}

/// HF's `id2label` of class names given in class order: `{"0": names[0], ...}`.
pub fn id2label(names: &[String]) -> BTreeMap<String, String> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| (i.to_string(), name.clone()))
        .collect()
}

/// `config` serialized as `config.json`'s text, with HF's `model_type` and
/// `architectures` set.
///
/// # Errors
/// A config that does not serialize to a JSON object, in words.
pub fn config_text<T: serde::Serialize>(
    config: &T,
    model_type: &str,
    architecture: &str,
) -> Result<String, String> {
    let mut json = serde_json::to_value(config).map_err(|e| e.to_string())?;
    let obj = json
        .as_object_mut()
        .ok_or("the config is not a JSON object")?;
    obj.insert("model_type".into(), model_type.into());
    obj.insert("architectures".into(), vec![architecture].into());
    serde_json::to_string_pretty(&json).map_err(|e| e.to_string())
}
