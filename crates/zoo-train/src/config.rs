//! The training configuration, saved as `config.json` in the artifact folder.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError, io_err, write_atomic};

/// How training is spread over devices (passed through to burn-train).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    /// One device.
    SingleDevice,
    /// Several devices of one host, one replica each (burn-train `MultiDevice`).
    MultiDevice,
}

/// Everything a training run needs besides the model and the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Passes over the training set.
    pub epochs: usize,
    /// Examples per batch.
    pub batch_size: usize,
    /// Peak learning rate, reached at the end of the warmup.
    pub lr: f64,
    /// Learning rate at the end of the cosine decay.
    pub min_lr: f64,
    /// Optimiser steps of linear warmup from 0 to `lr`.
    pub warmup_steps: usize,
    /// AdamW betas.
    pub betas: (f32, f32),
    /// AdamW decoupled weight decay.
    pub weight_decay: f32,
    /// Clip gradients to this global norm.
    pub grad_clip: Option<f32>,
    /// Batches whose gradients are summed per optimiser step.
    pub grad_accumulation: usize,
    /// Seed of weight init, shuffling and dropout.
    pub seed: u64,
    /// Folder for checkpoints, logs, `config.json` and `metrics.csv`.
    pub artifact_dir: PathBuf,
    /// Checkpoints kept (the most recent ones).
    pub keep_checkpoints: usize,
    /// Stop when the validation loss has not improved for this many epochs.
    pub early_stopping_patience: Option<usize>,
    /// Data-loading worker threads.
    pub num_workers: usize,
    /// Device strategy.
    pub strategy: Strategy,
}

impl TrainConfig {
    /// Defaults for a small model: AdamW (0.9, 0.95), weight decay 0.1, lr 1e-3 with 100
    /// warmup steps decaying to 1e-4, clipping at norm 1, batch 32.
    pub fn new(epochs: usize, artifact_dir: impl Into<PathBuf>) -> Self {
        Self {
            epochs,
            batch_size: 32,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 100,
            betas: (0.9, 0.95),
            weight_decay: 0.1,
            grad_clip: Some(1.0),
            grad_accumulation: 1,
            seed: 42,
            artifact_dir: artifact_dir.into(),
            keep_checkpoints: 2,
            early_stopping_patience: None,
            num_workers: 1,
            strategy: Strategy::SingleDevice,
        }
    }

    /// Optimiser steps in the whole run for `train_len` training examples.
    pub fn total_steps(&self, train_len: usize) -> usize {
        let batches = train_len.div_ceil(self.batch_size.max(1));
        (batches / self.grad_accumulation.max(1)).max(1) * self.epochs
    }

    /// Checks the configuration against the training set size.
    ///
    /// # Errors
    /// Zero epochs, batch size, accumulation or kept checkpoints; a non-positive or
    /// non-finite learning rate; `min_lr > lr`; betas outside `[0, 1)`; or a warmup at
    /// least as long as the run.
    pub fn validate(&self, train_len: usize) -> Result<()> {
        let bad = |m: String| Err(TrainError::Config(m));
        for (name, v) in [
            ("epochs", self.epochs),
            ("batch_size", self.batch_size),
            ("grad_accumulation", self.grad_accumulation),
            ("keep_checkpoints", self.keep_checkpoints),
        ] {
            if v == 0 {
                return bad(format!("{name} must be > 0, got 0"));
            }
        }
        if !self.lr.is_finite() || self.lr <= 0.0 {
            return bad(format!("lr must be finite and > 0, got {}", self.lr));
        }
        if self.min_lr.is_nan() || self.min_lr < 0.0 || self.min_lr > self.lr {
            return bad(format!(
                "min_lr must be in [0, lr = {}], got {}",
                self.lr, self.min_lr
            ));
        }
        for (name, b) in [("beta1", self.betas.0), ("beta2", self.betas.1)] {
            if !(0.0..1.0).contains(&b) {
                return bad(format!("{name} must be in [0, 1), got {b}"));
            }
        }
        if train_len == 0 {
            return bad("the training set is empty".into());
        }
        let total = self.total_steps(train_len);
        if self.warmup_steps >= total {
            return bad(format!(
                "warmup_steps {} is not shorter than the run ({total} optimiser steps)",
                self.warmup_steps
            ));
        }
        if let Some(c) = self.grad_clip.filter(|c| c.is_nan() || *c <= 0.0) {
            return bad(format!("grad_clip must be > 0, got {c}"));
        }
        Ok(())
    }

    /// Writes the config as pretty JSON to `artifact_dir/config.json`.
    ///
    /// # Errors
    /// When the folder or file cannot be written.
    pub fn save(&self) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.artifact_dir).map_err(io_err(&self.artifact_dir))?;
        let path = self.artifact_dir.join("config.json");
        let json =
            serde_json::to_string_pretty(self).map_err(|e| TrainError::Format(e.to_string()))?;
        write_atomic(&path, json.as_bytes())?;
        Ok(path)
    }

    /// Reads a config written by [`TrainConfig::save`].
    ///
    /// # Errors
    /// An unreadable or malformed file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        serde_json::from_str(&text)
            .map_err(|e| TrainError::Format(format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip() {
        let dir = std::env::temp_dir().join(format!("zoo-train-cfg-{}", std::process::id()));
        let mut cfg = TrainConfig::new(3, &dir);
        cfg.early_stopping_patience = Some(2);
        cfg.betas = (0.8, 0.99);
        let path = cfg.save().unwrap();
        assert_eq!(TrainConfig::load(&path).unwrap(), cfg);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_configs_are_rejected_with_the_value() {
        let mut cfg = TrainConfig::new(2, "unused");
        cfg.batch_size = 0;
        assert_eq!(
            cfg.validate(100).unwrap_err().to_string(),
            "invalid train config: batch_size must be > 0, got 0"
        );
        let mut cfg = TrainConfig::new(2, "unused");
        cfg.batch_size = 10;
        cfg.warmup_steps = 20; // 100 examples, 2 epochs -> 20 steps
        assert_eq!(
            cfg.validate(100).unwrap_err().to_string(),
            "invalid train config: warmup_steps 20 is not shorter than the run (20 optimiser steps)"
        );
        cfg.warmup_steps = 19;
        assert!(cfg.validate(100).is_ok());
        cfg.min_lr = 1.0;
        assert!(
            cfg.validate(100)
                .unwrap_err()
                .to_string()
                .contains("min_lr")
        );
    }
}
