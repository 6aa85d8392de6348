//! `fit`: a model, a data set and a [`TrainConfig`] in; a trained, checkpointed,
//! resumable model out, through burn-train's `SupervisedTraining`.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, InMemDataset};
use burn::grad_clipping::GradientClippingConfig;
use burn::optim::AdamWConfig;
use burn::tensor::Device;
use burn::tensor::distributed::{DistributedConfig, ReduceOperation};
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::metric::store::{Aggregate, Direction, Split};
use burn::train::metric::{AccuracyMetric, LearningRateMetric, LossMetric, PerplexityMetric};
use burn::train::renderer::{CliMetricsRenderer, MetricsRenderer, default_renderer};
use burn::train::{
    ExecutionStrategy, InferenceStep, Learner, LearnerModel, MetricEarlyStoppingStrategy,
    MultiDeviceOptim, SequenceOutput, StoppingCondition, SupervisedTraining, TrainStep,
};

use crate::checkpoint::{AtomicFileCheckpointer, last_complete_checkpoint, remove_partial_writes};
use crate::config::{RunLength, Strategy, TrainConfig};
use crate::error::{Result, TrainError, io_err, write_atomic};
use crate::loader::{PassesDataset, RoundLoader, RoundWindow};
use crate::lock::{RunLock, lock_run};
use crate::plot::plot_rounds;
use crate::render::{Progress, Recorded, ReportRenderer, RoundMetrics, RoundRecorder, SplitReport};
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
    /// Per round (epoch), `split_metric` -> burn-train's value over the whole round (the
    /// mean over its batches for the loss), as its event stream delivered it, and `step`
    /// -> optimiser steps done at the round's end. Every round has `train_loss` and
    /// `valid_loss`. A resumed run has the rounds before the resume too, from the
    /// `metrics.csv` of the run it continues.
    pub epochs: Vec<RoundMetrics>,
    /// Where the per-epoch table was written.
    pub metrics_csv: PathBuf,
    /// The PNG of the loss and metric curves (`metrics.png`), unless drawing failed
    /// (logged as a warning).
    pub plot: Option<PathBuf>,
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
            return Err(TrainError::config(format!(
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
            return Err(TrainError::config(format!(
                "cannot resume the run in {}: it was started on {} training examples, now {train_len}; \
                 the batches would differ",
                dir.display(),
                before.map_or("an unknown number of".into(), |b| b.to_string())
            )));
        }
    }
    Ok(())
}

/// Whether `dir` holds an earlier run: anything in its `checkpoint` folder.
fn holds_a_run(dir: &Path) -> bool {
    std::fs::read_dir(dir.join("checkpoint")).is_ok_and(|mut entries| entries.next().is_some())
}

/// Removes what an earlier run left in `dir` that a new run would mix with: checkpoints,
/// burn-train's logs, the metrics and the data-stream record.
fn clear_earlier_run(dir: &Path) -> Result<()> {
    for sub in ["checkpoint", "train", "valid"] {
        let p = dir.join(sub);
        if p.exists() {
            std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
        }
    }
    for file in ["metrics.csv", "metrics.png", "stream.json"] {
        let p = dir.join(file);
        if p.exists() {
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
    }
    Ok(())
}

/// The `--device` names of the devices the run trains on, for `config.json`: the
/// config's names, each checked against the device fit was handed (with
/// [`Strategy::SingleDevice`] only the first is used, so only the first is recorded).
fn recorded_devices(cfg: &TrainConfig, devices: &[Device]) -> Result<Vec<String>> {
    let used = match cfg.strategy {
        Strategy::SingleDevice => &devices[..devices.len().min(1)],
        Strategy::MultiDevice | Strategy::DistributedDataParallel => devices,
    };
    if cfg.devices.len() < used.len() {
        return Err(TrainError::config(format!(
            "fit trains on {} device(s) but the config names {} ({:?}); name each device \
             passed to fit in TrainConfig::devices",
            used.len(),
            cfg.devices.len(),
            cfg.devices
        )));
    }
    used.iter()
        .zip(&cfg.devices)
        .map(|(device, name)| {
            let named = zoo_device::select_by_name(name)
                .map_err(|e| TrainError::config(format!("the config's device '{name}': {e}")))?;
            if named != *device {
                return Err(TrainError::config(format!(
                    "the config names device '{name}' but fit was given {device:?}; name the \
                     devices passed to fit in TrainConfig::devices, so that config.json \
                     records where the run trained"
                )));
            }
            Ok(name.trim().to_string())
        })
        .collect()
}

/// Trains `task` on `train`, validating on `valid` after every round (an epoch, or
/// `eval_every` steps in steps mode).
///
/// Writes `config.json` (with the names of the devices used), checkpoints (atomically),
/// burn-train's logs, `metrics.csv` (rewritten after every round) and `metrics.png` to the
/// artifact folder. With `options.resume` it continues from the last complete checkpoint
/// there, with the model, optimiser and schedule state, and with the batches the run
/// would have seen had it not stopped. A folder that holds an earlier run is left alone
/// unless the run resumes it or `cfg.overwrite` is set.
///
/// # Errors
/// An invalid config, too few or unsuitable devices for the strategy, device names in
/// the config that do not select the devices given, an artifact folder holding an
/// earlier run ([`TrainError::EarlierRun`]; nothing is written then), both `resume` and
/// `overwrite`, an unwritable folder, a resume whose settings conflict with the run's
/// `config.json`, a NaN / infinite loss (named with its batch; the model's weights are
/// then those before that batch's update), an error that stopped burn-train, or a round
/// whose metrics the learner did not report.
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
        return Err(TrainError::config("the validation set is empty"));
    }
    let (device, strategy) = execution_strategy(cfg, devices)?;
    let RunStart {
        start_epoch,
        earlier,
        metrics_csv,
        lock: _lock, // held until the run returns
    } = start_run(cfg, devices, options.resume, train.len())?;
    let dir = cfg.artifact_dir.clone();
    device.seed(cfg.seed);
    let ad = cfg.autodiff(&device);

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
    let shown = renderer(&mut options, training.interrupter(), start_epoch);
    // metrics.csv is rewritten at the end of every round, before the round's checkpoint,
    // so a resumed run finds the rounds before it there.
    let write_failure: Arc<Mutex<Option<TrainError>>> = Arc::default();
    let on_round = {
        let (earlier, path) = (earlier.clone(), metrics_csv.clone());
        let (start, steps) = (start_epoch.unwrap_or(0), plan.steps_per_round);
        let failure = write_failure.clone();
        move |recorded: &BTreeMap<usize, RoundMetrics>| {
            let written = run_rounds(&earlier, recorded, start, steps)
                .and_then(|rows| write_atomic(&path, metrics_table(&rows).as_bytes()));
            if let Err(e) = written {
                let mut slot = failure.lock().unwrap_or_else(PoisonError::into_inner);
                slot.get_or_insert(e);
            }
        }
    };
    let (recorder, recorded): (RoundRecorder, Recorded) = RoundRecorder::new(shown, on_round);
    training = training.renderer(Box::new(recorder));
    let guard = NanGuard::new(training.interrupter());
    // `fork` keeps the gradient tracking of weights that already hold values (loaded, or
    // set with `Param::from_tensor`), which `to_device` to the same autodiff device drops;
    // `train` then tracks every parameter that is meant to train (a model built on the
    // plain device included) and leaves frozen ones frozen.
    let task = task.guarded(guard.clone()).fork(&ad).train();

    let optim = optimizer(cfg);
    let schedule = WarmupCosine::new(cfg.lr, cfg.min_lr, cfg.warmup_steps, plan.total_steps());
    let result = training.launch(Learner::new(task, optim.init(), schedule));

    stopped_by(&guard, &result, &write_failure, &plan, cfg, start_epoch)?;
    let recorded = recorded
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let epochs = run_rounds(
        &earlier,
        &recorded,
        start_epoch.unwrap_or(0),
        plan.steps_per_round,
    )?;
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

/// The device the run's examples and checks live on (the first), and the learner's
/// strategy over `devices`.
fn execution_strategy(
    cfg: &TrainConfig,
    devices: &[Device],
) -> Result<(Device, ExecutionStrategy)> {
    let device = devices
        .first()
        .ok_or_else(|| TrainError::config("no device given"))?
        .clone();
    let strategy = match cfg.strategy {
        Strategy::SingleDevice => ExecutionStrategy::SingleDevice(cfg.autodiff(&device)),
        Strategy::MultiDevice | Strategy::DistributedDataParallel => {
            if devices.len() != cfg.devices.len() {
                return Err(TrainError::config(format!(
                    "the config names {} devices ({}) but fit was given {}",
                    cfg.devices.len(),
                    cfg.devices.join(", "),
                    devices.len()
                )));
            }
            if cfg.strategy == Strategy::DistributedDataParallel
                && let Some(d) = devices.iter().find(|d| !zoo_device::has_collectives(d))
            {
                return Err(TrainError::config(format!(
                    "the DistributedDataParallel strategy needs CUDA devices (Burn 0.22.1 \
                     implements its all-reduce only there), got {d:?}; use MultiDevice"
                )));
            }
            let devices = devices.iter().map(|d| cfg.autodiff(d)).collect();
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
    Ok((device, strategy))
}

/// Where a run starts, once its folder is ready.
struct RunStart {
    /// The last complete round of the run being resumed, if any.
    start_epoch: Option<usize>,
    /// Its rounds, from its `metrics.csv`.
    earlier: Vec<RoundMetrics>,
    /// `metrics.csv`.
    metrics_csv: PathBuf,
    /// The folder's lock, held for the run.
    lock: RunLock,
}

/// Prepares the artifact folder: finds what a resumed run continues (and checks that its
/// settings allow it), or clears an earlier run when overwriting, then records the
/// config, the devices and the size of the training set.
fn start_run(
    cfg: &TrainConfig,
    devices: &[Device],
    resume: bool,
    train_len: usize,
) -> Result<RunStart> {
    let used_devices = recorded_devices(cfg, devices)?;
    let dir = cfg.artifact_dir.clone();
    if resume && cfg.overwrite {
        return Err(TrainError::config(format!(
            "both resume and overwrite are set for the run in {}: choose one",
            dir.display()
        )));
    }
    let lock = lock_run(&dir)?;
    let cut_short = remove_partial_writes(&dir);
    if cut_short > 0 {
        log::info!(
            "removed {cut_short} file(s) of writes cut short in {}",
            dir.display()
        );
    }
    let start_epoch = if resume {
        last_complete_checkpoint(&dir)
    } else {
        None
    };
    let metrics_csv = dir.join("metrics.csv");
    let earlier = match start_epoch {
        Some(k) => {
            check_resume(cfg, train_len)?;
            earlier_rounds(&metrics_csv, k)?
        }
        None => {
            if resume {
                log::info!(
                    "nothing complete to resume in {}: starting the run again",
                    dir.display()
                );
            } else if holds_a_run(&dir) && !cfg.overwrite {
                return Err(TrainError::EarlierRun { dir });
            }
            // A fresh run must not mix with an old one's checkpoints, logs and metrics.
            clear_earlier_run(&dir)?;
            Vec::new()
        }
    };
    let mut record = cfg.clone();
    record.devices = used_devices;
    record.save()?;
    let stream_record = serde_json::json!({ "train_examples": train_len });
    write_atomic(
        &dir.join("stream.json"),
        stream_record.to_string().as_bytes(),
    )?;
    Ok(RunStart {
        start_epoch,
        earlier,
        metrics_csv,
        lock,
    })
}

/// What shows the run: burn-train's terminal UI on a terminal, its plain renderer, or
/// one line per split and round to `options.report`.
fn renderer(
    options: &mut FitOptions,
    interrupter: burn::train::Interrupter,
    start_epoch: Option<usize>,
) -> Box<dyn MetricsRenderer> {
    match options.progress {
        Progress::Auto if std::io::stdout().is_terminal() => {
            default_renderer(interrupter, start_epoch) // burn-train's TUI
        }
        Progress::BurnCli => Box::new(CliMetricsRenderer::new()),
        Progress::Auto | Progress::Lines => {
            let sink = options
                .report
                .take()
                .unwrap_or_else(|| Box::new(|r: &SplitReport| log::info!("{r}")));
            Box::new(ReportRenderer::new(sink))
        }
    }
}

/// AdamW with the config's betas, weight decay and gradient clipping.
fn optimizer(cfg: &TrainConfig) -> AdamWConfig {
    let mut optim = AdamWConfig::new()
        .with_beta_1(cfg.betas.0)
        .with_beta_2(cfg.betas.1)
        .with_weight_decay(cfg.weight_decay);
    if let Some(c) = cfg.grad_clip {
        optim = optim.with_grad_clipping(Some(GradientClippingConfig::Norm(c)));
    }
    optim
}

/// Why the learner stopped, when it was not the end of the run: a failed batch, a
/// non-finite loss (with its round and batch counted over the whole run), an error of
/// the learner, or a `metrics.csv` that could not be written.
fn stopped_by<M>(
    guard: &NanGuard,
    result: &burn::train::LearningResult<M>,
    write_failure: &Mutex<Option<TrainError>>,
    plan: &crate::config::RunPlan,
    cfg: &TrainConfig,
    start_epoch: Option<usize>,
) -> Result<()> {
    if let Some((batch, message)) = guard.failed() {
        return Err(TrainError::Model { batch, message });
    }
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
    if let Some(e) = &result.error {
        return Err(TrainError::Training(e.to_string()));
    }
    if let Some(e) = write_failure
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        return Err(e);
    }
    Ok(())
}

/// The run's rounds: the `earlier` ones (of the run being resumed after round `start`),
/// then those `recorded` from this process's event stream, each with its `step`.
///
/// # Errors
/// [`TrainError::MissingMetrics`] when there is no round at all, when the recorded rounds
/// do not follow on from `start` one by one, or when a round lacks its training or
/// validation loss.
pub(crate) fn run_rounds(
    earlier: &[RoundMetrics],
    recorded: &BTreeMap<usize, RoundMetrics>,
    start: usize,
    steps_per_round: usize,
) -> Result<Vec<RoundMetrics>> {
    let missing = |m: String| Err(TrainError::MissingMetrics(m));
    let mut rows = earlier.to_vec();
    for (i, (&round, metrics)) in recorded.iter().enumerate() {
        if round != start + i + 1 {
            return missing(format!(
                "the learner reported round {round} where round {} was due",
                start + i + 1
            ));
        }
        let mut row = metrics.clone();
        row.insert("step".into(), (round * steps_per_round) as f64);
        rows.push(row);
    }
    if rows.is_empty() {
        return missing("the learner reported no round".into());
    }
    for (i, row) in rows.iter().enumerate() {
        for key in ["train_loss", "valid_loss"] {
            if !row.contains_key(key) {
                return missing(format!("round {} has no {key}", i + 1));
            }
        }
    }
    Ok(rows)
}

/// The first `rounds` rounds of `metrics.csv` at `path`, written by the run being resumed.
fn earlier_rounds(path: &Path, rounds: usize) -> Result<Vec<RoundMetrics>> {
    let mut rows = read_metrics_table(path)?;
    if rows.len() < rounds {
        return Err(TrainError::MissingMetrics(format!(
            "{} holds {} round(s), but the run resumes after round {rounds}",
            path.display(),
            rows.len()
        )));
    }
    rows.truncate(rounds);
    Ok(rows)
}

/// Reads a table written by [`metrics_table`]: per round, column -> value (empty cells
/// are absent).
///
/// # Errors
/// An unreadable file, or one that is not such a table (the line is named).
pub fn read_metrics_table(path: &Path) -> Result<Vec<RoundMetrics>> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let bad = |line: usize, why: String| {
        Err(TrainError::Format(format!(
            "{}, line {line}: {why}",
            path.display()
        )))
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    if header.first() != Some(&"epoch") {
        return bad(1, "the header does not start with 'epoch'".into());
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != header.len() {
            return bad(
                i + 2,
                format!("{} cells under {} columns", cells.len(), header.len()),
            );
        }
        if cells[0] != (i + 1).to_string() {
            return bad(
                i + 2,
                format!("round '{}' where {} was due", cells[0], i + 1),
            );
        }
        let mut row = RoundMetrics::new();
        for (name, cell) in header.iter().zip(&cells).skip(1) {
            if cell.is_empty() {
                continue;
            }
            match cell.parse::<f64>() {
                Ok(v) => row.insert((*name).to_string(), v),
                Err(_) => return bad(i + 2, format!("'{cell}' in column {name} is not a number")),
            };
        }
        rows.push(row);
    }
    Ok(rows)
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

    fn round(train: f64, valid: f64) -> RoundMetrics {
        RoundMetrics::from([("train_loss".into(), train), ("valid_loss".into(), valid)])
    }

    #[test]
    fn rounds_follow_the_earlier_ones_with_their_steps() {
        let earlier = vec![{
            let mut r = round(2.0, 2.5);
            r.insert("step".into(), 10.0);
            r
        }];
        let recorded = BTreeMap::from([(2, round(1.0, 1.5)), (3, round(0.5, 1.25))]);
        let rows = run_rounds(&earlier, &recorded, 1, 10).unwrap();
        let steps: Vec<f64> = rows.iter().map(|r| r["step"]).collect();
        let valid: Vec<f64> = rows.iter().map(|r| r["valid_loss"]).collect();
        assert_eq!(steps, [10.0, 20.0, 30.0]);
        assert_eq!(valid, [2.5, 1.5, 1.25]);
    }

    #[test]
    fn missing_rounds_and_losses_are_errors() {
        let msg = |r: Result<Vec<RoundMetrics>>| r.unwrap_err().to_string();
        assert_eq!(
            msg(run_rounds(&[], &BTreeMap::new(), 0, 10)),
            "missing metrics: the learner reported no round"
        );
        let gap = BTreeMap::from([(1, round(1.0, 1.0)), (3, round(1.0, 1.0))]);
        assert_eq!(
            msg(run_rounds(&[], &gap, 0, 10)),
            "missing metrics: the learner reported round 3 where round 2 was due"
        );
        let mut no_valid = round(1.0, 1.0);
        no_valid.remove("valid_loss");
        let rows = BTreeMap::from([(1, round(1.0, 1.0)), (2, no_valid)]);
        assert_eq!(
            msg(run_rounds(&[], &rows, 0, 10)),
            "missing metrics: round 2 has no valid_loss"
        );
    }

    #[test]
    fn the_table_reads_back() {
        let dir = std::env::temp_dir().join(format!("zoo-train-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.csv");
        let mut second = round(0.125, f64::NAN);
        second.remove("valid_loss");
        let rows = vec![round(2.0, 2.5), second];
        std::fs::write(&path, metrics_table(&rows)).unwrap();
        assert_eq!(read_metrics_table(&path).unwrap(), rows);
        std::fs::write(&path, "epoch,train_loss\n1,0.5\n3,0.25\n").unwrap();
        assert_eq!(
            read_metrics_table(&path).unwrap_err().to_string(),
            format!("{}, line 3: round '3' where 2 was due", path.display())
        );
        std::fs::write(&path, "epoch,train_loss\n1,lots\n").unwrap();
        assert!(
            read_metrics_table(&path)
                .unwrap_err()
                .to_string()
                .ends_with("line 2: 'lots' in column train_loss is not a number")
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
