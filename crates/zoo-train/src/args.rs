//! [`TrainConfig`] as command-line options: the flags of `zoo train`, and of any program
//! that flattens [`TrainArgs`] into its own. A `--config train.json` gives any subset of
//! the config's fields; flags given on the command line override it; what neither names
//! keeps the defaults of [`TrainConfig::fine_tuning`].

use std::path::{Path, PathBuf};

use serde_json::Value;
use zoo_core::ConfigError;

use crate::config::{RunLength, TrainConfig};
use crate::error::{Result, io_err};

/// The options of a training run that [`TrainConfig`] holds.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct TrainArgs {
    /// A JSON object with any of the training config's fields (`batch_size`, `lr`,
    /// `length`, ...), as the run's `config.json` writes them; flags override it.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Passes over the training data (default 3).
    #[arg(long, conflicts_with = "steps")]
    pub epochs: Option<usize>,
    /// Optimiser steps in the whole run, instead of epochs.
    #[arg(long)]
    pub steps: Option<usize>,
    /// With --steps: steps between validations and checkpoints (default: all of them,
    /// one round). It must divide --steps.
    #[arg(long, requires = "steps")]
    pub eval_every: Option<usize>,
    /// Peak learning rate (default 5e-5).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Learning rate at the end of the cosine decay (default 0).
    #[arg(long)]
    pub min_lr: Option<f64>,
    /// Optimiser steps of linear warmup (default 0).
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Examples per batch (default 8).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Batches summed into one optimiser step (default 1).
    #[arg(long)]
    pub grad_accum: Option<usize>,
    /// AdamW's decoupled weight decay (default 0).
    #[arg(long)]
    pub weight_decay: Option<f32>,
    /// Clip each parameter tensor's gradient to this norm (default 1; 0 turns it off).
    #[arg(long)]
    pub grad_clip: Option<f32>,
    /// Seed of the batch order and of dropout (default 42).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when the validation loss has not improved for this many rounds.
    #[arg(long)]
    pub patience: Option<usize>,
    /// Checkpoints kept, the most recent ones (default 2).
    #[arg(long)]
    pub keep_checkpoints: Option<usize>,
    /// Replace an earlier run in the output folder.
    #[arg(long)]
    pub overwrite: bool,
    /// Keep only each transformer layer's input and run the layer again in the backward
    /// pass (on Burn's balanced gradient checkpointing, which also recomputes the other
    /// memory-bound activations): less memory, more time; without dropout the same
    /// losses.
    #[arg(long)]
    pub gradient_checkpointing: bool,
}

impl TrainConfig {
    /// HF `Trainer`'s defaults, for fine-tuning a checkpoint: 3 epochs of batches of 8,
    /// AdamW (0.9, 0.999) at lr 5e-5 without warmup or weight decay, decaying to 0, each
    /// parameter's gradient clipped at norm 1, seed 42, two checkpoints kept.
    pub fn fine_tuning(artifact_dir: impl Into<PathBuf>) -> Self {
        Self {
            batch_size: 8,
            lr: 5e-5,
            min_lr: 0.0,
            warmup_steps: 0,
            betas: (0.9, 0.999),
            weight_decay: 0.0,
            ..Self::new(3, artifact_dir)
        }
    }

    /// `defaults` with the fields of a JSON object on top. `artifact_dir` and `devices`
    /// belong to the run, not to the file, and are refused there.
    ///
    /// # Errors
    /// Text that is not a JSON object, a field the config does not have, or a value of
    /// the wrong type, named.
    pub fn merged_json(defaults: &TrainConfig, text: &str) -> Result<Self> {
        let mut base = serde_json::to_value(defaults)
            .map_err(|e| ConfigError::malformed(format!("the defaults: {e}")))?;
        let given: Value = serde_json::from_str(text).map_err(ConfigError::malformed)?;
        let (Value::Object(given), Value::Object(fields)) = (given, &mut base) else {
            return Err(ConfigError::malformed("a JSON object of training settings").into());
        };
        for (key, value) in given {
            if matches!(key.as_str(), "artifact_dir" | "devices") {
                return Err(ConfigError::conflict(format!(
                    "{key} is set by the command (--output, --device), not in the config file"
                ))
                .into());
            }
            if !fields.contains_key(&key) {
                let known: Vec<&str> = fields
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !matches!(*k, "artifact_dir" | "devices"))
                    .collect();
                return Err(ConfigError::malformed(format!(
                    "unknown field {key:?}; the fields are {}",
                    known.join(", ")
                ))
                .into());
            }
            fields.insert(key, value);
        }
        serde_json::from_value(base).map_err(|e| ConfigError::malformed(e.to_string()).into())
    }
}

impl TrainArgs {
    /// The config these options describe, over `defaults`: the `--config` file first,
    /// then each flag given. `artifact_dir`, `devices` and `overwrite` are the caller's.
    ///
    /// # Errors
    /// A config file that cannot be read or does not fit (named), or `--eval-every`
    /// without a run length in steps.
    pub fn apply(&self, defaults: TrainConfig) -> Result<TrainConfig> {
        let mut cfg = match &self.config {
            Some(path) => read_merged(&defaults, path)?,
            None => defaults.clone(),
        };
        cfg.artifact_dir = defaults.artifact_dir;
        cfg.devices = defaults.devices;
        if let Some(e) = self.epochs {
            cfg.length = RunLength::Epochs(e);
        }
        if let Some(steps) = self.steps {
            cfg.length = RunLength::Steps {
                steps,
                eval_every: self.eval_every.unwrap_or(steps),
            };
        }
        set(&mut cfg.lr, self.lr);
        set(&mut cfg.min_lr, self.min_lr);
        set(&mut cfg.warmup_steps, self.warmup);
        set(&mut cfg.batch_size, self.batch_size);
        set(&mut cfg.grad_accumulation, self.grad_accum);
        set(&mut cfg.weight_decay, self.weight_decay);
        set(&mut cfg.seed, self.seed);
        set(&mut cfg.keep_checkpoints, self.keep_checkpoints);
        if let Some(clip) = self.grad_clip {
            cfg.grad_clip = (clip != 0.0).then_some(clip);
        }
        if self.patience.is_some() {
            cfg.early_stopping_patience = self.patience;
        }
        cfg.overwrite |= self.overwrite;
        cfg.gradient_checkpointing |= self.gradient_checkpointing;
        Ok(cfg)
    }
}

/// `slot` takes `value` when there is one.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

fn read_merged(defaults: &TrainConfig, path: &Path) -> Result<TrainConfig> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    TrainConfig::merged_json(defaults, &text).map_err(|e| match e {
        crate::TrainError::Config(c) => {
            ConfigError::malformed(format!("{}: {c}", path.display())).into()
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_the_defaults() {
        let dir = std::env::temp_dir().join(format!("zoo-train-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("train.json");
        std::fs::write(
            &file,
            r#"{"lr": 0.001, "batch_size": 4, "length": {"epochs": 7}}"#,
        )
        .unwrap();
        let defaults = TrainConfig::fine_tuning(dir.join("run"));
        let args = TrainArgs {
            config: Some(file.clone()),
            batch_size: Some(16),
            grad_clip: Some(0.0),
            ..TrainArgs::default()
        };
        let cfg = args.apply(defaults.clone()).unwrap();
        assert_eq!(cfg.lr, 0.001);
        assert_eq!(cfg.batch_size, 16);
        assert_eq!(cfg.length, RunLength::Epochs(7));
        assert_eq!(cfg.grad_clip, None);
        assert_eq!(cfg.betas, (0.9, 0.999));
        assert_eq!(cfg.artifact_dir, dir.join("run"));
        let steps = TrainArgs {
            steps: Some(30),
            eval_every: Some(10),
            ..TrainArgs::default()
        };
        assert_eq!(
            steps.apply(defaults.clone()).unwrap().length,
            RunLength::Steps {
                steps: 30,
                eval_every: 10
            }
        );
        // Nothing given: the defaults.
        assert_eq!(
            TrainArgs::default().apply(defaults.clone()).unwrap(),
            defaults
        );

        std::fs::write(&file, r#"{"learning_rate": 0.1}"#).unwrap();
        let e = args.apply(defaults.clone()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "invalid train config: {}: unknown field \"learning_rate\"; the fields are batch_size, betas, early_stopping_patience,",
                file.display()
            )),
            "{e}"
        );
        std::fs::write(&file, r#"{"batch_size": "eight"}"#).unwrap();
        let e = args.apply(defaults.clone()).unwrap_err().to_string();
        assert!(e.contains("invalid type: string \"eight\""), "{e}");
        std::fs::write(&file, r#"{"artifact_dir": "/elsewhere"}"#).unwrap();
        let e = args.apply(defaults.clone()).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "artifact_dir is set by the command (--output, --device), not in the config file"
            ),
            "{e}"
        );
        std::fs::write(&file, "[1]").unwrap();
        assert!(args.apply(defaults).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
