//! `fit`: a model, a data set and a [`TrainConfig`] in; a trained, checkpointed,
//! resumable model out, through burn-train's `SupervisedTraining`.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, InMemDataset};
use burn::grad_clipping::GradientClippingConfig;
use burn::optim::AdamWConfig;
use burn::tensor::Device;
use burn::tensor::distributed::{DistributedConfig, ReduceOperation};
use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError, KeepLastNCheckpoints};
use burn::train::metric::store::{Aggregate, Direction, Split};
use burn::train::metric::{AccuracyMetric, LearningRateMetric, LossMetric, PerplexityMetric};
use burn::train::renderer::CliMetricsRenderer;
use burn::train::{
    ExecutionStrategy, InferenceStep, Learner, LearnerModel, MetricEarlyStoppingStrategy,
    MultiDeviceOptim, SequenceOutput, StoppingCondition, SupervisedTraining, TrainStep,
};

use crate::config::{RunLength, Strategy, TrainConfig};
use crate::error::{Result, TrainError, io_err, write_atomic};
use crate::loader::{PassesDataset, RoundLoader, RoundWindow};
use crate::plot::plot_rounds;
use crate::render::{Progress, ReportRenderer, SplitReport};
use crate::schedule::WarmupCosine;
use crate::task::{
    CausalLmTask, ClassLogits, ClassificationTask, Guarded, NanGuard, Seq2SeqLogits, Seq2SeqTask,
    TokenLogits,
};

/// A task the learner can train: it knows its metrics.
pub trait Task: LearnerModel + Guarded + Sized {
    /// Registers the task's train and validation metrics.
    fn add_metrics(training: SupervisedTraining<Self>) -> SupervisedTraining<Self>;
}

/// Loss, perplexity and accuracy over the counted tokens, and the learning rate: the
/// metrics of every task whose output is a [`SequenceOutput`].
fn sequence_metrics<T>(t: SupervisedTraining<T>) -> SupervisedTraining<T>
where
    T: LearnerModel + TrainStep<Output = SequenceOutput> + InferenceStep<Output = SequenceOutput>,
{
    t.metric_train_numeric(LossMetric::new())
        .metric_valid_numeric(LossMetric::new())
        .metric_train_numeric(PerplexityMetric::new())
        .metric_valid_numeric(PerplexityMetric::new())
        .metric_train_numeric(AccuracyMetric::new())
        .metric_valid_numeric(AccuracyMetric::new())
        .metric_train_numeric(LearningRateMetric::new())
}

impl<M: TokenLogits> Task for CausalLmTask<M> {
    fn add_metrics(t: SupervisedTraining<Self>) -> SupervisedTraining<Self> {
        sequence_metrics(t)
    }
}

impl<M: Seq2SeqLogits> Task for Seq2SeqTask<M> {
    fn add_metrics(t: SupervisedTraining<Self>) -> SupervisedTraining<Self> {
        sequence_metrics(t)
    }
}

impl<M: ClassLogits> Task for ClassificationTask<M> {
    fn add_metrics(t: SupervisedTraining<Self>) -> SupervisedTraining<Self> {
        t.metric_train_numeric(LossMetric::new())
            .metric_valid_numeric(LossMetric::new())
            .metric_train_numeric(AccuracyMetric::new())
            .metric_valid_numeric(AccuracyMetric::new())
            .metric_train_numeric(LearningRateMetric::new())
    }
}

/// How to run [`fit`] beyond its config.
#[derive(Default)]
pub struct FitOptions {
    /// Continue from the last complete checkpoint in the artifact folder.
    pub resume: bool,
    /// How progress is shown.
    pub progress: Progress,
    /// With [`Progress::Lines`] (or `Auto` off a terminal), called at the end of every
    /// train and validation split; without it the report is logged.
    pub report: Option<ReportSink>,
}

/// A callback that receives each split's metrics.
pub type ReportSink = Box<dyn FnMut(&SplitReport) + Send + Sync>;

/// What [`fit`] returns.
#[derive(Debug)]
pub struct FitResult<T> {
    /// The trained task (its model inside), in inference mode.
    pub task: T,
    /// Per round (epoch), `split_metric` -> mean over the round's batches, from
    /// burn-train's logs, and `step` -> optimiser steps done at the round's end.
    pub epochs: Vec<BTreeMap<String, f64>>,
    /// Where the per-epoch table was written.
    pub metrics_csv: PathBuf,
    /// The PNG of the loss and metric curves (`metrics.png`), unless drawing failed
    /// (logged as a warning).
    pub plot: Option<PathBuf>,
}

/// Writes each checkpoint through a temporary file and a rename, so a kill during a
/// write never leaves a corrupt checkpoint under its final name.
pub struct AtomicFileCheckpointer {
    directory: PathBuf,
    name: String,
}

impl AtomicFileCheckpointer {
    /// Checkpoints named `{name}-{epoch}.bpk` in `directory`.
    pub fn new(directory: &Path, name: &str) -> Self {
        std::fs::create_dir_all(directory).ok();
        Self {
            directory: directory.to_path_buf(),
            name: name.to_string(),
        }
    }

    fn path(&self, epoch: usize) -> PathBuf {
        self.directory.join(format!("{}-{epoch}.bpk", self.name))
    }
}

impl<R: Checkpoint> Checkpointer<R> for AtomicFileCheckpointer {
    fn save(&self, epoch: usize, record: R) -> std::result::Result<(), CheckpointerError> {
        let path = self.path(epoch);
        let tmp = self
            .directory
            .join(format!(".{}-{epoch}.bpk.tmp", self.name));
        record.save(tmp.clone())?;
        std::fs::rename(&tmp, &path).map_err(CheckpointerError::IOError)
    }

    fn restore(&self, epoch: usize) -> std::result::Result<R, CheckpointerError> {
        R::load(self.path(epoch))
    }

    fn delete(&self, epoch: usize) -> std::result::Result<(), CheckpointerError> {
        let path = self.path(epoch);
        if path.exists() {
            std::fs::remove_file(path).map_err(CheckpointerError::IOError)?;
        }
        Ok(())
    }
}

/// Refuses to resume the run in `cfg.artifact_dir` when it was started with settings
/// that would change its batches or schedule (`config.json`) or on another number of
/// training examples (`stream.json`, on which the order of the batches depends).
fn check_resume(cfg: &TrainConfig, train_len: usize) -> Result<()> {
    let dir = &cfg.artifact_dir;
    let saved = dir.join("config.json");
    if saved.exists() {
        let previous = TrainConfig::load(&saved)?;
        if previous.length != cfg.length {
            log::warn!(
                "resuming with a new run length ({:?} -> {:?}): the learning-rate schedule \
                 is recomputed for the new end, so the rate changes at this resume",
                previous.length,
                cfg.length
            );
        }
        let conflicts = cfg.resume_conflicts(&previous);
        if !conflicts.is_empty() {
            return Err(TrainError::Config(format!(
                "cannot resume the run in {}: it was started with other settings ({}); \
                 resume with its config.json, or start a new run",
                dir.display(),
                conflicts.join(", ")
            )));
        }
    }
    let path = dir.join("stream.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let saved: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TrainError::Format(format!("{}: {e}", path.display())))?;
        let before = saved["train_examples"].as_u64();
        if before != Some(train_len as u64) {
            return Err(TrainError::Config(format!(
                "cannot resume the run in {}: it was started on {} training examples, now {train_len}; \
                 the batches would differ",
                dir.display(),
                before.map_or("an unknown number of".into(), |b| b.to_string())
            )));
        }
    }
    Ok(())
}

/// The last epoch whose model, optimiser and scheduler checkpoints all exist.
pub fn last_complete_checkpoint(artifact_dir: &Path) -> Option<usize> {
    let dir = artifact_dir.join("checkpoint");
    let entries = std::fs::read_dir(&dir).ok()?;
    let epochs = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            n.strip_prefix("model-")?
                .strip_suffix(".bpk")?
                .parse::<usize>()
                .ok()
        });
    epochs
        .filter(|e| {
            ["optim", "scheduler"]
                .iter()
                .all(|n| dir.join(format!("{n}-{e}.bpk")).exists())
        })
        .max()
}

/// Trains `task` on `train`, validating on `valid` after every round (an epoch, or
/// `eval_every` steps in steps mode).
///
/// Writes `config.json`, checkpoints (atomically), burn-train's logs, `metrics.csv` and
/// `metrics.png` to the artifact folder. With `options.resume` it continues from the last
/// complete checkpoint there, with the model, optimiser and schedule state, and with the
/// batches the run would have seen had it not stopped.
///
/// # Errors
/// An invalid config, too few or unsuitable devices for the strategy, an unwritable
/// folder, a resume whose settings conflict with the run's `config.json`, or a NaN /
/// infinite loss (named with its batch; the model's weights are then those before that
/// batch's update).
pub fn fit<T, I, B>(
    task: T,
    train: Vec<I>,
    valid: Vec<I>,
    batcher: B,
    cfg: &TrainConfig,
    devices: &[Device],
    options: FitOptions,
) -> Result<FitResult<T>>
where
    T: Task,
    I: Clone + Send + Sync + core::fmt::Debug + 'static,
    B: Batcher<I, <T as TrainStep>::Input> + Clone + 'static,
    T: InferenceStep<Input = <T as TrainStep>::Input>,
    <T as TrainStep>::Input: Clone + core::fmt::Debug + Send + Sync,
{
    let (train, valid) = (InMemDataset::new(train), InMemDataset::new(valid));
    fit_datasets(task, train, valid, batcher, cfg, devices, options)
}

/// [`fit`] over any Burn datasets (read from disk, memory-mapped, transformed), not only
/// vectors in memory. The training set is read by index in a seeded order, pass after
/// pass.
///
/// # Errors
/// As [`fit`].
pub fn fit_datasets<T, I, B, DT, DV>(
    task: T,
    train: DT,
    valid: DV,
    batcher: B,
    cfg: &TrainConfig,
    devices: &[Device],
    mut options: FitOptions,
) -> Result<FitResult<T>>
where
    T: Task,
    I: Clone + Send + Sync + core::fmt::Debug + 'static,
    DT: Dataset<I> + 'static,
    DV: Dataset<I> + 'static,
    B: Batcher<I, <T as TrainStep>::Input> + Clone + 'static,
    T: InferenceStep<Input = <T as TrainStep>::Input>,
    <T as TrainStep>::Input: Clone + core::fmt::Debug + Send + Sync,
{
    cfg.validate(train.len())?;
    if valid.is_empty() {
        return Err(TrainError::Config("the validation set is empty".into()));
    }
    let device = devices
        .first()
        .ok_or_else(|| TrainError::Config("no device given".into()))?
        .clone();
    let strategy = match cfg.strategy {
        Strategy::SingleDevice => ExecutionStrategy::SingleDevice(device.clone().autodiff()),
        Strategy::MultiDevice | Strategy::DistributedDataParallel => {
            if devices.len() != cfg.devices.len() {
                return Err(TrainError::Config(format!(
                    "the config names {} devices ({}) but fit was given {}",
                    cfg.devices.len(),
                    cfg.devices.join(", "),
                    devices.len()
                )));
            }
            if cfg.strategy == Strategy::DistributedDataParallel
                && let Some(d) = devices.iter().find(|d| !zoo_device::has_collectives(d))
            {
                return Err(TrainError::Config(format!(
                    "the DistributedDataParallel strategy needs CUDA devices (Burn 0.22.1 \
                     implements its all-reduce only there), got {d:?}; use MultiDevice"
                )));
            }
            let devices = devices.iter().map(|d| d.clone().autodiff()).collect();
            if cfg.strategy == Strategy::MultiDevice {
                ExecutionStrategy::MultiDevice(devices, MultiDeviceOptim::OptimMainDevice)
            } else {
                ExecutionStrategy::ddp(
                    devices,
                    DistributedConfig {
                        all_reduce_op: ReduceOperation::Mean,
                    },
                )
            }
        }
    };
    let dir = cfg.artifact_dir.clone();
    if !options.resume && dir.join("checkpoint").exists() {
        // A fresh run must not mix with an old one's checkpoints and logs.
        for sub in ["checkpoint", "train", "valid"] {
            let p = dir.join(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
            }
        }
    }
    let start_epoch = if options.resume {
        last_complete_checkpoint(&dir)
    } else {
        None
    };
    if start_epoch.is_some() {
        check_resume(cfg, train.len())?;
    } else if options.resume {
        log::info!("nothing to resume in {}: starting a new run", dir.display());
    }
    cfg.save()?;
    let stream_record = serde_json::json!({ "train_examples": train.len() });
    write_atomic(
        &dir.join("stream.json"),
        stream_record.to_string().as_bytes(),
    )?;
    device.seed(cfg.seed);
    let ad = device.clone().autodiff();

    let plan = cfg.plan(train.len());
    // One seeded stream of examples for the whole run, seen through a window that moves
    // one round at a time; no loader-side shuffling, so a resumed run continues the
    // stream exactly.
    let n = train.len();
    let stream = PassesDataset::new(
        train,
        cfg.seed,
        plan.total_items(),
        plan.items_per_round.div_ceil(n) + 2,
    );
    let (window, window_start) = RoundWindow::new(stream, plan.items_per_round);
    let inner = DataLoaderBuilder::new(batcher.clone())
        .batch_size(cfg.batch_size)
        .num_workers(cfg.num_workers)
        .set_device(ad.clone())
        .build(window);
    let loader_train: Arc<dyn burn::data::dataloader::DataLoader<_>> = Arc::new(RoundLoader::new(
        inner,
        window_start,
        plan.items_per_round,
        plan.rounds,
        start_epoch.unwrap_or(0),
    ));
    let loader_valid = DataLoaderBuilder::new(batcher)
        .batch_size(cfg.batch_size)
        .num_workers(cfg.num_workers)
        .set_device(device.clone())
        .build(valid);

    let ckpt = dir.join("checkpoint");
    let mut training = SupervisedTraining::new(&dir, loader_train, loader_valid)
        .with_custom_checkpointers(
            AtomicFileCheckpointer::new(&ckpt, "model"),
            AtomicFileCheckpointer::new(&ckpt, "optim"),
            AtomicFileCheckpointer::new(&ckpt, "scheduler"),
        )
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(cfg.keep_checkpoints))
        .with_training_strategy(strategy.into())
        .num_epochs(plan.rounds);
    training = T::add_metrics(training);
    if cfg.grad_accumulation > 1 {
        training = training.grads_accumulation(cfg.grad_accumulation);
    }
    if let Some(n) = cfg.early_stopping_patience {
        training = training.early_stopping(MetricEarlyStoppingStrategy::new(
            &LossMetric::new(),
            Aggregate::Mean,
            Direction::Lowest,
            Split::Valid,
            StoppingCondition::NoImprovementSince { n_epochs: n },
        ));
    }
    if let Some(epoch) = start_epoch {
        training = training.checkpoint(epoch);
    }
    match options.progress {
        Progress::Auto if std::io::stdout().is_terminal() => {} // burn-train's TUI
        Progress::BurnCli => {
            training = training.renderer(Box::new(CliMetricsRenderer::new()));
        }
        Progress::Auto | Progress::Lines => {
            let sink = options
                .report
                .take()
                .unwrap_or_else(|| Box::new(|r: &SplitReport| log::info!("{r}")));
            training = training.renderer(Box::new(ReportRenderer::new(sink)));
        }
    }
    let guard = NanGuard::new(training.interrupter());
    let task = task.guarded(guard.clone()).to_device(&ad);

    let mut optim = AdamWConfig::new()
        .with_beta_1(cfg.betas.0)
        .with_beta_2(cfg.betas.1)
        .with_weight_decay(cfg.weight_decay);
    if let Some(c) = cfg.grad_clip {
        optim = optim.with_grad_clipping(Some(GradientClippingConfig::Norm(c)));
    }
    let schedule = WarmupCosine::new(cfg.lr, cfg.min_lr, cfg.warmup_steps, plan.total_steps());
    let result = training.launch(Learner::new(task, optim.init(), schedule));

    if let Some((batch, value)) = guard.tripped() {
        // The guard counts the batches of this process, on every replica.
        let per_round = plan.batches_per_round.max(1) * cfg.replicas();
        let batch = start_epoch.unwrap_or(0) * per_round + batch;
        return Err(TrainError::NonFiniteLoss {
            epoch: (batch - 1) / per_round + 1,
            batch,
            value,
        });
    }
    let mut epochs = read_epoch_means(&dir)?;
    for (i, e) in epochs.iter_mut().enumerate() {
        e.insert("step".into(), ((i + 1) * plan.steps_per_round) as f64);
    }
    let metrics_csv = dir.join("metrics.csv");
    write_atomic(&metrics_csv, metrics_table(&epochs).as_bytes())?;
    let x_axis = match cfg.length {
        RunLength::Epochs(_) => "epoch",
        RunLength::Steps { .. } => "step",
    };
    // The run is done and saved: a plot that cannot be drawn costs a warning, not the run.
    let plot = match plot_rounds(&epochs, x_axis, &dir) {
        Ok(p) => Some(p),
        Err(e) => {
            log::warn!("no metrics.png: {e}");
            None
        }
    };
    Ok(FitResult {
        task: result.model,
        epochs,
        metrics_csv,
        plot,
    })
}

/// Reads burn-train's per-epoch metric logs (`{split}/epoch-{n}/{Metric}.log`, one
/// batch value a line as `value` or `value,count`, then `value,final`) into per-epoch
/// values: the `final` aggregate where present, else the count-weighted mean.
pub fn read_epoch_means(dir: &Path) -> Result<Vec<BTreeMap<String, f64>>> {
    let mut epochs: BTreeMap<usize, BTreeMap<String, f64>> = BTreeMap::new();
    for split in ["train", "valid"] {
        let Ok(entries) = std::fs::read_dir(dir.join(split)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(epoch) = name
                .strip_prefix("epoch-")
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            for f in std::fs::read_dir(e.path())
                .map_err(io_err(&e.path()))?
                .flatten()
            {
                let fname = f.file_name().to_string_lossy().to_string();
                let Some(metric) = fname.strip_suffix(".log") else {
                    continue;
                };
                let text = std::fs::read_to_string(f.path()).map_err(io_err(&f.path()))?;
                let (mut sum, mut n) = (0.0, 0.0);
                let mut last_final = None;
                for line in text.lines() {
                    let mut parts = line.split(',');
                    let Some(v) = parts.next().and_then(|v| v.trim().parse::<f64>().ok()) else {
                        continue;
                    };
                    match parts.next().map(str::trim) {
                        // burn-train's own aggregate of the epoch closes the file.
                        Some("final") => last_final = Some(v),
                        count => {
                            let w = count.and_then(|c| c.parse::<f64>().ok()).unwrap_or(1.0);
                            sum += v * w;
                            n += w;
                        }
                    }
                }
                if let Some(v) = last_final {
                    (sum, n) = (v, 1.0);
                }
                if n > 0.0 {
                    let key = format!("{split}_{}", metric.to_lowercase());
                    epochs.entry(epoch).or_default().insert(key, sum / n);
                }
            }
        }
    }
    let last = epochs.keys().max().copied().unwrap_or(0);
    Ok((1..=last)
        .map(|e| epochs.remove(&e).unwrap_or_default())
        .collect())
}

/// The per-epoch table as CSV: `epoch` then one column per `split_metric`.
pub fn metrics_table(epochs: &[BTreeMap<String, f64>]) -> String {
    let mut columns: Vec<&String> = epochs.iter().flat_map(|e| e.keys()).collect();
    // `step` first, then the metrics in name order.
    columns.sort_by_key(|c| (c.as_str() != "step", c.as_str()));
    columns.dedup();
    let mut out = String::from("epoch");
    for c in &columns {
        out.push(',');
        out.push_str(c);
    }
    out.push('\n');
    for (i, e) in epochs.iter().enumerate() {
        out.push_str(&(i + 1).to_string());
        for c in &columns {
            out.push(',');
            if let Some(v) = e.get(*c) {
                out.push_str(&format!("{v}"));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_a_column_per_metric() {
        let mut a = BTreeMap::new();
        a.insert("train_loss".to_string(), 2.0);
        a.insert("valid_loss".to_string(), 2.5);
        a.insert("step".to_string(), 10.0);
        let mut b = BTreeMap::new();
        b.insert("train_loss".to_string(), 1.0);
        b.insert("step".to_string(), 20.0);
        assert_eq!(
            metrics_table(&[a, b]),
            "epoch,step,train_loss,valid_loss\n1,10,2,2.5\n2,20,1,\n"
        );
    }
}
