//! The training configuration, saved as `config.json` in the artifact folder.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use zoo_core::{ConfigError, validate};

use crate::error::{Result, TrainError, io_err, write_atomic};

/// How training is spread over devices (passed through to burn-train).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    /// One device.
    SingleDevice,
    /// Several devices of one host, one replica each; gradients are summed and the
    /// optimiser runs on the first device (burn-train `MultiDevice`).
    MultiDevice,
    /// Distributed data parallel: one worker and optimiser per device, gradients
    /// all-reduced (averaged) after every backward pass (burn-train
    /// `DistributedDataParallel`).
    DistributedDataParallel,
}

/// How long a run lasts. burn-train counts in epochs; in steps mode an "epoch" is a round
/// of `eval_every` optimiser steps, each followed by validation and a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunLength {
    /// Passes over the training set, each followed by validation and a checkpoint.
    Epochs(usize),
    /// A fixed number of optimiser steps, for data sets too large to pass over or
    /// schedules stated in steps. The batches continue through seeded reshuffles of
    /// the training set, one pass after another.
    Steps {
        /// Optimiser steps in the whole run; a multiple of `eval_every`.
        steps: usize,
        /// Optimiser steps between validations (and checkpoints).
        eval_every: usize,
    },
}

/// Everything a training run needs besides the model and the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Epochs, or optimiser steps with a validation interval.
    pub length: RunLength,
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
    /// Clip each parameter tensor's gradient to this L2 norm, tensor by tensor, before
    /// AdamW uses it (burn's `GradientClippingConfig::Norm`). This is not clipping of the
    /// global norm over all parameters: a tensor whose gradient is under the bound is left
    /// as it is, whatever the others hold. With accumulation it clips the summed gradient.
    pub grad_clip: Option<f32>,
    /// Batches whose gradients are summed (not averaged) into one optimiser step. Each
    /// batch's loss is a mean over its examples, so `n` batches of `b` give `n` times the
    /// gradient of one batch of `n·b` examples.
    pub grad_accumulation: usize,
    /// Seed of the order of the training batches and of the device's random numbers from
    /// the start of training (dropout masks). It does not draw the initial weights: the
    /// model is built before `fit` is called, so seed the device before building it
    /// (`device.seed(s)`) for repeatable weights.
    pub seed: u64,
    /// Folder for checkpoints, logs, `config.json` and `metrics.csv`.
    pub artifact_dir: PathBuf,
    /// Let a new run replace an earlier run's checkpoints, logs and metrics in
    /// `artifact_dir`. Without it (and without resuming) `fit` refuses to start there.
    /// Default: false, so that no finished or interrupted run is lost by accident.
    #[serde(default)]
    pub overwrite: bool,
    /// Checkpoints kept (the most recent ones).
    pub keep_checkpoints: usize,
    /// Stop when the validation loss has not improved for this many rounds (epochs, or
    /// validations in steps mode).
    pub early_stopping_patience: Option<usize>,
    /// Data-loading worker threads. With more than one, batches arrive in the order the
    /// threads finish them, so runs are no longer bit-for-bit repeatable.
    pub num_workers: usize,
    /// The devices, as `--device` names them (`flex`, `cuda:1`): what
    /// [`TrainConfig::select_devices`] builds. `fit` trains on the devices it is handed,
    /// checks that these names select them (the first only, with
    /// [`Strategy::SingleDevice`]), and records the names of the devices it used in
    /// `config.json`.
    pub devices: Vec<String>,
    /// Device strategy.
    pub strategy: Strategy,
    /// Train on Burn's `GradientCheckpointingStrategy::Balanced`, under which the zoo's
    /// transformer layers keep only their input and run again in the backward pass
    /// (`zoo_attention::recompute`), and Burn recomputes the other memory-bound
    /// activations: less memory for more time. Without dropout the losses are the same;
    /// with it, the recomputed layers draw their masks from seeds of their own. Default:
    /// off. Build the model on [`Self::autodiff`]'s device: Burn refuses an operation
    /// between tensors of two checkpointing strategies.
    #[serde(default)]
    pub gradient_checkpointing: bool,
}

/// How one run splits into the rounds burn-train calls epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPlan {
    /// Rounds (burn-train epochs), each ending in validation and a checkpoint.
    pub rounds: usize,
    /// Training examples drawn per round, over all replicas.
    pub items_per_round: usize,
    /// Batches per round on each replica (on the busiest one, when shares differ).
    pub batches_per_round: usize,
    /// Optimiser steps per round (a partial accumulation at a round's end is a step).
    pub steps_per_round: usize,
}

impl RunPlan {
    /// Optimiser steps in the whole run.
    pub fn total_steps(&self) -> usize {
        self.rounds * self.steps_per_round
    }

    /// Training examples drawn in the whole run.
    pub fn total_items(&self) -> usize {
        self.rounds * self.items_per_round
    }
}

impl TrainConfig {
    /// Defaults for a small model: AdamW (0.9, 0.95), weight decay 0.1, lr 1e-3 with 100
    /// warmup steps decaying to 1e-4, clipping at norm 1, batch 32, the `flex` device, no
    /// overwriting.
    pub fn new(epochs: usize, artifact_dir: impl Into<PathBuf>) -> Self {
        Self {
            length: RunLength::Epochs(epochs),
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
            overwrite: false,
            keep_checkpoints: 2,
            early_stopping_patience: None,
            num_workers: 1,
            devices: vec!["flex".into()],
            strategy: Strategy::SingleDevice,
            gradient_checkpointing: false,
        }
    }

    /// The autodiff device the run trains on for `device`: with
    /// [`Self::gradient_checkpointing`], Burn's balanced checkpointing strategy.
    pub fn autodiff(&self, device: &burn::tensor::Device) -> burn::tensor::Device {
        let ad = device.clone().autodiff();
        if self.gradient_checkpointing {
            ad.gradient_checkpointing()
        } else {
            ad
        }
    }

    /// The same defaults for a run of `steps` optimiser steps, validated and checkpointed
    /// every `eval_every` steps.
    pub fn steps(steps: usize, eval_every: usize, artifact_dir: impl Into<PathBuf>) -> Self {
        Self {
            length: RunLength::Steps { steps, eval_every },
            ..Self::new(1, artifact_dir)
        }
    }

    /// Model replicas training side by side: one, or one per device with the
    /// multi-device strategies.
    pub fn replicas(&self) -> usize {
        match self.strategy {
            Strategy::SingleDevice => 1,
            Strategy::MultiDevice | Strategy::DistributedDataParallel => self.devices.len().max(1),
        }
    }

    /// How a run over `train_len` training examples splits into rounds. With several
    /// replicas each round is shared out among them (burn-train gives each device an
    /// equal slice, the last one the remainder) and one optimiser step takes a batch
    /// from each.
    pub fn plan(&self, train_len: usize) -> RunPlan {
        let batch = self.batch_size.max(1);
        let accum = self.grad_accumulation.max(1);
        let replicas = self.replicas();
        let items_per_round = match self.length {
            RunLength::Epochs(_) => train_len,
            RunLength::Steps { eval_every, .. } => eval_every * accum * batch * replicas,
        };
        // The largest share: the last device's.
        let share = items_per_round - (replicas - 1) * (items_per_round / replicas);
        let batches = share.div_ceil(batch);
        RunPlan {
            rounds: match self.length {
                RunLength::Epochs(epochs) => epochs,
                RunLength::Steps { steps, eval_every } => steps / eval_every.max(1),
            },
            items_per_round,
            batches_per_round: batches,
            steps_per_round: batches.div_ceil(accum),
        }
    }

    /// Optimiser steps in the whole run for `train_len` training examples.
    pub fn total_steps(&self, train_len: usize) -> usize {
        self.plan(train_len).total_steps()
    }

    /// Checks the configuration against the training set size.
    ///
    /// # Errors
    /// Zero epochs, steps, batch size, accumulation or kept checkpoints; steps that are
    /// not a multiple of `eval_every`; a non-positive or non-finite learning rate;
    /// `min_lr > lr`; betas outside `[0, 1)`; an empty training set; a warmup at least as
    /// long as the run; a `grad_clip` that is not positive; or a multi-device strategy
    /// with fewer than 2 devices named.
    pub fn validate(&self, train_len: usize) -> Result<()> {
        let bad = |m: String| Err(ConfigError::conflict(m).into());
        let length = match self.length {
            RunLength::Epochs(e) => vec![("epochs", e)],
            RunLength::Steps { steps, eval_every } => {
                vec![("steps", steps), ("eval_every", eval_every)]
            }
        };
        let sizes: Vec<_> = length
            .into_iter()
            .chain([
                ("batch_size", self.batch_size),
                ("grad_accumulation", self.grad_accumulation),
                ("keep_checkpoints", self.keep_checkpoints),
            ])
            .collect();
        validate::positive(&sizes)?;
        if let RunLength::Steps { steps, eval_every } = self.length
            && !steps.is_multiple_of(eval_every)
        {
            return bad(format!(
                "steps {steps} is not a multiple of eval_every {eval_every}"
            ));
        }
        if !self.lr.is_finite() || self.lr <= 0.0 {
            return Err(ConfigError::range("lr", "finite and > 0", self.lr).into());
        }
        if self.min_lr.is_nan() || self.min_lr < 0.0 || self.min_lr > self.lr {
            return Err(ConfigError::range(
                "min_lr",
                format!("in [0, lr = {}]", self.lr),
                self.min_lr,
            )
            .into());
        }
        validate::probabilities(&[
            ("beta1", f64::from(self.betas.0)),
            ("beta2", f64::from(self.betas.1)),
        ])?;
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
            return Err(ConfigError::range("grad_clip", "> 0", c).into());
        }
        if self.strategy != Strategy::SingleDevice && self.devices.len() < 2 {
            return bad(format!(
                "the {:?} strategy needs at least 2 devices, got {} ({:?})",
                self.strategy,
                self.devices.len(),
                self.devices
            ));
        }
        Ok(())
    }

    /// Builds the devices named in `devices`, checking each can run (see
    /// [`zoo_device::select_all`]).
    ///
    /// # Errors
    /// An empty list, an unknown or repeated name, a backend not compiled in, or no device.
    pub fn select_devices(&self) -> Result<Vec<burn::tensor::Device>> {
        zoo_device::select_all(&self.devices.join(","))
            .map_err(|e| ConfigError::malformed(e).into())
    }

    /// The settings a resumed run must share with the run it continues, as
    /// `name old -> new` for each that differs from `saved`: the batch size,
    /// accumulation, seed and round size (epochs, or `eval_every` steps) fix the stream
    /// of batches, and the learning-rate settings the schedule whose state the checkpoint
    /// holds. The number of rounds may change: a run can be extended.
    pub fn resume_conflicts(&self, saved: &TrainConfig) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, old: String, new: String| {
            if old != new {
                out.push(format!("{name} {old} -> {new}"));
            }
        };
        let round = |length: RunLength| match length {
            RunLength::Epochs(_) => "an epoch".to_string(),
            RunLength::Steps { eval_every, .. } => format!("{eval_every} steps"),
        };
        check("round", round(saved.length), round(self.length));
        check(
            "batch_size",
            saved.batch_size.to_string(),
            self.batch_size.to_string(),
        );
        check(
            "grad_accumulation",
            saved.grad_accumulation.to_string(),
            self.grad_accumulation.to_string(),
        );
        check("seed", saved.seed.to_string(), self.seed.to_string());
        check(
            "replicas",
            saved.replicas().to_string(),
            self.replicas().to_string(),
        );
        check("lr", saved.lr.to_string(), self.lr.to_string());
        check("min_lr", saved.min_lr.to_string(), self.min_lr.to_string());
        check(
            "warmup_steps",
            saved.warmup_steps.to_string(),
            self.warmup_steps.to_string(),
        );
        out
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
        cfg.devices = vec!["cuda:0".into(), "cuda:1".into()];
        cfg.strategy = Strategy::DistributedDataParallel;
        cfg.overwrite = true;
        let path = cfg.save().unwrap();
        assert_eq!(TrainConfig::load(&path).unwrap(), cfg);
        // A config.json written before `overwrite` existed loads, with overwriting off.
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        json.as_object_mut().unwrap().remove("overwrite");
        std::fs::write(&path, json.to_string()).unwrap();
        assert!(!TrainConfig::load(&path).unwrap().overwrite);
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
        cfg.grad_accumulation = 3; // 10 batches an epoch -> 4 steps, the last one partial
        assert_eq!(cfg.total_steps(100), 8);
        cfg.grad_accumulation = 1;
        cfg.min_lr = 1.0;
        assert!(
            cfg.validate(100)
                .unwrap_err()
                .to_string()
                .contains("min_lr")
        );
    }

    #[test]
    fn steps_mode_plans_rounds_of_eval_every_steps() {
        let mut cfg = TrainConfig::steps(600, 200, "unused");
        cfg.batch_size = 8;
        cfg.grad_accumulation = 2;
        let plan = cfg.plan(50);
        assert_eq!(
            plan,
            RunPlan {
                rounds: 3,
                items_per_round: 200 * 2 * 8,
                batches_per_round: 400,
                steps_per_round: 200,
            }
        );
        assert_eq!(plan.total_steps(), 600);
        assert_eq!(plan.total_items(), 9600);
        assert!(cfg.validate(50).is_ok());
        for (eval_every, why) in [
            (200, "steps 500 is not a multiple of eval_every 200"),
            (0, "eval_every must be > 0, got 0"),
        ] {
            cfg.length = RunLength::Steps {
                steps: 500,
                eval_every,
            };
            let err = cfg.validate(50).unwrap_err().to_string();
            assert_eq!(err, format!("invalid train config: {why}"));
        }
    }

    #[test]
    fn resume_conflicts_name_old_and_new_values() {
        let saved = TrainConfig::new(8, "unused");
        let mut cfg = saved.clone();
        cfg.num_workers = 2; // free to change
        cfg.keep_checkpoints = 5;
        assert!(cfg.resume_conflicts(&saved).is_empty());
        cfg.length = RunLength::Epochs(10); // extending the run is fine
        assert!(cfg.resume_conflicts(&saved).is_empty());
        cfg.batch_size = 64;
        cfg.length = RunLength::Steps {
            steps: 100,
            eval_every: 10,
        };
        assert_eq!(
            cfg.resume_conflicts(&saved),
            ["round an epoch -> 10 steps", "batch_size 32 -> 64"]
        );
    }

    #[test]
    fn devices_are_selected_by_name() {
        let mut cfg = TrainConfig::new(1, "unused");
        if cfg!(feature = "flex") {
            assert_eq!(cfg.select_devices().unwrap().len(), 1);
        }
        cfg.devices = vec!["flex".into(), "metal".into()];
        assert_eq!(
            cfg.select_devices().unwrap_err().to_string(),
            "invalid train config: unknown backend 'metal': expected one of flex, ndarray, \
             wgpu, tch, tch-cuda, cuda"
        );
    }

    #[test]
    fn replicas_share_each_round() {
        let mut cfg = TrainConfig::new(1, "unused");
        cfg.batch_size = 10;
        cfg.strategy = Strategy::MultiDevice;
        cfg.devices = vec!["cuda:0".into(), "cuda:1".into()];
        // 105 examples over 2 devices: 52 and 53, so 6 batches of 10 on the busiest.
        let plan = cfg.plan(105);
        assert_eq!((plan.batches_per_round, plan.steps_per_round), (6, 6));
        // Steps mode draws a full batch per device per step.
        cfg.length = RunLength::Steps {
            steps: 40,
            eval_every: 20,
        };
        let plan = cfg.plan(105);
        assert_eq!(plan.items_per_round, 20 * 10 * 2);
        assert_eq!((plan.batches_per_round, plan.steps_per_round), (20, 20));
        assert_eq!(plan.total_steps(), 40);
        cfg.devices.pop();
        cfg.warmup_steps = 5;
        assert_eq!(
            cfg.validate(105).unwrap_err().to_string(),
            "invalid train config: the MultiDevice strategy needs at least 2 devices, \
             got 1 ([\"cuda:0\"])"
        );
    }

    #[test]
    fn run_length_is_readable_json() {
        let cfg = TrainConfig::steps(600, 200, "unused");
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(
            json.contains(r#""length":{"steps":{"steps":600,"eval_every":200}}"#),
            "{json}"
        );
        let json = serde_json::to_string(&TrainConfig::new(4, "unused")).unwrap();
        assert!(json.contains(r#""length":{"epochs":4}"#), "{json}");
    }
}
