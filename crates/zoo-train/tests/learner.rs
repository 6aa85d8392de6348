//! The learner end to end: learning (classification, sequence-to-sequence), resume after
//! SIGKILL, the NaN guard, determinism.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use burn::data::dataset::InMemDataset;
use burn::data::dataset::transform::{Mapper, MapperDataset};
use burn::module::Module;
use burn::tensor::Device;
use support::seq2seq::{ToySeq2Seq, copy_items};
use support::toy::{BlobBatcher, BlobItem, Mlp, blobs};
use zoo_data::Seq2SeqBatcher;
use zoo_train::{
    ClassificationTask, FitOptions, FitResult, Seq2SeqTask, Strategy, TrainConfig, TrainError, fit,
    last_complete_checkpoint,
};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zoo-train-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

/// The toy's optimiser settings on `cfg`, keeping every checkpoint.
fn toy_settings(mut cfg: TrainConfig) -> TrainConfig {
    cfg.batch_size = 16;
    cfg.warmup_steps = 10;
    cfg.lr = 1e-2;
    cfg.min_lr = 1e-3;
    cfg.keep_checkpoints = 100;
    cfg
}

fn toy_config(epochs: usize, dir: &Path) -> TrainConfig {
    toy_settings(TrainConfig::new(epochs, dir))
}

/// Trains a freshly initialised toy classifier (16 features, 4 classes) on blobs.
fn fit_blobs(
    cfg: &TrainConfig,
    train: Vec<BlobItem>,
    valid: Vec<BlobItem>,
    devices: &[Device],
    options: FitOptions,
) -> zoo_train::Result<FitResult<ClassificationTask<Mlp>>> {
    let model = Mlp::new(16, 64, 4, &devices[0].clone().autodiff());
    let task = ClassificationTask::new(model);
    fit(task, train, valid, BlobBatcher, cfg, devices, options)
}

fn csv_column(path: &Path, column: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let i = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("no {column} in {header:?}"));
    lines
        .map(|l| l.split(',').nth(i).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn learning_classification_reaches_high_accuracy() {
    let device = zoo_device::test_device();
    let dir = temp_dir("learn");
    let cfg = toy_config(3, &dir);
    let out = fit_blobs(
        &cfg,
        blobs(2000, 4, 16, 1, &[]),
        blobs(400, 4, 16, 2, &[]),
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    let acc = out.epochs.last().unwrap()["valid_accuracy"];
    // Accuracy is logged in percent; the blobs are separable up to noise.
    assert!(acc > 90.0, "valid accuracy {acc}");
    assert_eq!(csv_column(&out.metrics_csv, "valid_loss").len(), 3);
    assert!(dir.join("config.json").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn learning_seq2seq_copies_with_teacher_forcing() {
    let device = zoo_device::test_device();
    let dir = temp_dir("seq2seq");
    let mut cfg = toy_config(20, &dir);
    cfg.batch_size = 32;
    cfg.lr = 3e-3;
    cfg.min_lr = 3e-4;
    cfg.warmup_steps = 20;
    let model = ToySeq2Seq::new(13, 32, 8, &device.clone().autodiff());
    let out = fit(
        Seq2SeqTask::new(model),
        copy_items(2000, 5),
        copy_items(200, 6),
        Seq2SeqBatcher {
            pad_id: 0,
            bos_id: 1,
            eos_id: 2,
        },
        &cfg,
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    let first = &out.epochs[0];
    let last = out.epochs.last().unwrap();
    eprintln!("seq2seq first {first:?}\nlast {last:?}");
    // Token accuracy (percent) over target tokens and EOS; chance is 1 in 13.
    assert!(
        last["valid_accuracy"] > 90.0,
        "valid accuracy {}",
        last["valid_accuracy"]
    );
    assert!(last["valid_loss"] < first["valid_loss"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn nan_loss_stops_with_the_batch_and_keeps_good_checkpoints() {
    let device = zoo_device::test_device();
    let dir = temp_dir("nan");
    let cfg = toy_config(2, &dir);
    // Two clean epochs with checkpoints.
    fit_blobs(
        &cfg,
        blobs(400, 4, 16, 3, &[]),
        blobs(100, 4, 16, 4, &[]),
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    // Resume for a third epoch on data where one example is NaN, with a freshly built
    // model, as a resumed program would have.
    let cfg3 = toy_config(3, &dir);
    let err = fit_blobs(
        &cfg3,
        blobs(400, 4, 16, 3, &[7]),
        blobs(100, 4, 16, 4, &[]),
        std::slice::from_ref(&device),
        FitOptions {
            resume: true,
            ..FitOptions::default()
        },
    )
    .unwrap_err();
    match err {
        TrainError::NonFiniteLoss {
            epoch,
            batch,
            value,
        } => {
            assert_eq!(epoch, 3, "{err:?}");
            // Batches count through the run: epoch 3 holds batches 51..=75.
            assert!((51..=75).contains(&batch), "batch {batch} outside epoch 3");
            assert!(value.is_nan());
            assert!(err.to_string().contains(&format!("batch {batch}")));
        }
        other => panic!("expected a NaN error, got {other}"),
    }
    // Every checkpoint left loads and holds finite weights.
    let last = last_complete_checkpoint(&dir).unwrap();
    assert!(last >= 2);
    for epoch in 1..=last {
        let path = dir.join(format!("checkpoint/model-{epoch}.bpk"));
        if !path.exists() {
            continue;
        }
        let task = ClassificationTask::new(Mlp::new(16, 64, 4, &device)).load_file(&path);
        let w = task
            .model
            .fc1
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert!(
            w.iter().all(|v| v.is_finite()),
            "checkpoint {epoch} holds non-finite weights"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

fn toy() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zoo-train-toy"))
}

/// Runs the toy with `args` (8 rounds), SIGKILLs it after 2 complete checkpoints,
/// resumes it to the end, and checks the resumed run against an uninterrupted one.
fn kill_and_resume(name: &str, args: &[&str]) {
    let dir = temp_dir(name);
    let mut child = toy()
        .arg(&dir)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for two complete checkpoints, then kill without warning.
    let start = Instant::now();
    while last_complete_checkpoint(&dir).unwrap_or(0) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no checkpoints after 300 s"
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended before it could be killed: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    let killed_at = last_complete_checkpoint(&dir).unwrap();
    assert!(killed_at < 8, "the run finished before the kill");
    let out = toy().arg(&dir).args(args).arg("--resume").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "resume failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("starting after checkpoint Some({killed_at})")),
        "{stdout}"
    );
    assert!(stdout.contains("done: 8 epochs"), "{stdout}");
    assert_eq!(last_complete_checkpoint(&dir), Some(8));
    // Resuming with another seed would change the batches: refused, naming the values.
    let out = toy()
        .arg(&dir)
        .args(args)
        .args(["--resume", "--seed", "8"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("started with other settings (seed 7 -> 8)"),
        "{stderr}"
    );
    // So would another training set size.
    let mut other_size: Vec<&str> = args.to_vec();
    let i = other_size.iter().position(|a| *a == "--items").unwrap();
    other_size[i + 1] = "999";
    let out = toy()
        .arg(&dir)
        .args(&other_size)
        .arg("--resume")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "it was started on {} training examples, now 999",
            args[i + 1]
        )),
        "{stderr}"
    );
    // The resumed run saw the batches, schedule and optimiser state the uninterrupted
    // run saw, so every round after the kill ends with the same losses.
    let whole = temp_dir(&format!("{name}-whole"));
    let out = toy().arg(&whole).args(args).output().unwrap();
    assert!(out.status.success());
    for column in ["train_loss", "valid_loss"] {
        let resumed = csv_column(&dir.join("metrics.csv"), column);
        let straight = csv_column(&whole.join("metrics.csv"), column);
        assert_eq!(resumed.len(), 8);
        for round in killed_at..8 {
            let (a, b) = (resumed[round], straight[round]);
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{column} of round {}: resumed {a}, uninterrupted {b}",
                round + 1
            );
        }
    }
    std::fs::remove_dir_all(dir).ok();
    std::fs::remove_dir_all(whole).ok();
}

#[test]
fn resume_after_sigkill_finishes_the_run_as_if_uninterrupted() {
    kill_and_resume("resume", &["--epochs", "8", "--items", "6000"]);
}

#[test]
fn resume_after_sigkill_in_steps_mode() {
    // 8 rounds of 40 steps over 1000 examples: rounds cross passes.
    kill_and_resume(
        "resume-steps",
        &["--steps", "320", "--eval-every", "40", "--items", "1000"],
    );
}

#[test]
fn same_seed_same_losses() {
    let dirs = [temp_dir("det-a"), temp_dir("det-b")];
    for d in &dirs {
        let out = toy()
            .arg(d)
            .args(["--epochs", "2", "--items", "400"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let a = csv_column(&dirs[0].join("metrics.csv"), "train_loss");
    let b = csv_column(&dirs[1].join("metrics.csv"), "train_loss");
    assert_eq!(a, b);
    for d in dirs {
        std::fs::remove_dir_all(d).ok();
    }
}

#[test]
fn learning_in_steps_mode_validates_every_eval_every_steps() {
    let device = zoo_device::test_device();
    let dir = temp_dir("steps");
    // 300 examples of batch 16 is 19 batches an epoch; 60 steps cross three passes.
    let cfg = toy_settings(TrainConfig::steps(60, 20, &dir));
    // Any Burn dataset will do: here the features are halved lazily, as they are read.
    struct Halve;
    impl Mapper<BlobItem, BlobItem> for Halve {
        fn map(&self, item: &BlobItem) -> BlobItem {
            let x = item.x.iter().map(|v| v / 2.0).collect();
            BlobItem { x, y: item.y }
        }
    }
    let lazy = |items| MapperDataset::new(InMemDataset::new(items), Halve);
    let model = Mlp::new(16, 64, 4, &device.clone().autodiff());
    let out = zoo_train::fit_datasets(
        ClassificationTask::new(model),
        lazy(blobs(300, 4, 16, 5, &[])),
        lazy(blobs(200, 4, 16, 6, &[])),
        BlobBatcher,
        &cfg,
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    assert_eq!(csv_column(&out.metrics_csv, "step"), [20.0, 40.0, 60.0]);
    assert_eq!(last_complete_checkpoint(&dir), Some(3));
    // Each round trained on exactly 20 batches of 16.
    for round in 1..=3 {
        let batches = batch_log(&dir, "train", round, "Loss").len();
        assert_eq!(batches, 20, "round {round}");
    }
    let acc = out.epochs.last().unwrap()["valid_accuracy"];
    assert!(acc > 90.0, "valid accuracy {acc}");
    let png = std::fs::read(out.plot.unwrap()).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    std::fs::remove_dir_all(dir).ok();
}

/// Trains the toy classifier on two copies of the test device with `strategy`, on a
/// watchdog: a strategy that hangs fails the test instead of the suite. Returns the
/// rounds' metrics and the run's folder.
fn two_device_run(
    strategy: Strategy,
    name: &str,
) -> (Vec<std::collections::BTreeMap<String, f64>>, PathBuf) {
    let device = zoo_device::test_device();
    let dir = temp_dir(name);
    let mut cfg = toy_config(2, &dir);
    cfg.strategy = strategy;
    cfg.devices = vec![zoo_device::test_backend().to_string(); 2];
    let (tx, rx) = std::sync::mpsc::channel();
    let run_dir = dir.clone();
    std::thread::spawn(move || {
        let out = fit_blobs(
            &cfg,
            blobs(800, 4, 16, 9, &[]),
            blobs(200, 4, 16, 10, &[]),
            &[device.clone(), device],
            FitOptions::default(),
        );
        tx.send(out.map(|o| o.epochs)).ok();
    });
    let rounds = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("no result after 300 s")
        .unwrap();
    assert_eq!(last_complete_checkpoint(&run_dir), Some(2));
    (rounds, run_dir)
}

#[test]
fn learning_on_two_devices_with_multi_device() {
    let (rounds, dir) = two_device_run(Strategy::MultiDevice, "multi");
    assert!(rounds[1]["valid_accuracy"] > 90.0, "{rounds:?}");
    // 800 examples split over 2 devices: 25 batches of 16 each, one step per pair.
    let steps: Vec<f64> = rounds.iter().map(|r| r["step"]).collect();
    assert_eq!(steps, [25.0, 50.0]);
    // The schedule was planned for those 50 steps: it ends at min_lr.
    let lr = batch_log(&dir, "train", 2, "Learning_Rate");
    assert!((lr.last().unwrap() - 1e-3).abs() < 1e-9, "{lr:?}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn ddp_outside_cuda_is_a_clear_error() {
    let device = zoo_device::test_device();
    if format!("{device:?}").contains("Cuda") {
        zoo_device::record_skip("ddp_outside_cuda_is_a_clear_error", "a CUDA device");
        return;
    }
    let mut cfg = toy_config(2, &temp_dir("ddp"));
    cfg.strategy = Strategy::DistributedDataParallel;
    cfg.devices = vec![zoo_device::test_backend().to_string(); 2];
    let err = fit_blobs(
        &cfg,
        blobs(400, 4, 16, 1, &[]),
        blobs(20, 4, 16, 2, &[]),
        &[device.clone(), device.clone()],
        FitOptions::default(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("needs CUDA devices") && msg.contains(&format!("{device:?}")),
        "{msg}"
    );
}

#[test]
fn several_devices_are_required_by_multi_device_strategies() {
    let device = zoo_device::test_device();
    let mut cfg = toy_config(2, &temp_dir("one-device"));
    cfg.strategy = Strategy::DistributedDataParallel;
    let err = fit_blobs(
        &cfg,
        blobs(100, 4, 16, 1, &[]),
        blobs(20, 4, 16, 2, &[]),
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid train config: the DistributedDataParallel strategy needs at least 2 devices, \
         got 1 ([\"flex\"])"
    );
}

#[test]
fn learning_image_classification_on_digits() {
    use support::digits::{DigitBatcher, DigitCnn};
    let device = zoo_device::test_device();
    let dir = temp_dir("digits");
    let mut images =
        zoo_data::digits::load_digits(&zoo_data::datasets_dir().join("digits/digits.csv.gz"))
            .unwrap();
    zoo_data::seeded_shuffle(&mut images, 11);
    let valid = images.split_off(1437); // 1,437 train, 360 validation
    let mut cfg = toy_config(8, &dir);
    cfg.lr = 3e-3;
    cfg.min_lr = 3e-4;
    cfg.weight_decay = 1e-4;
    let out = fit(
        ClassificationTask::new(DigitCnn::new(&device.clone().autodiff())),
        images,
        valid,
        DigitBatcher,
        &cfg,
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    let acc: Vec<f64> = out.epochs.iter().map(|e| e["valid_accuracy"]).collect();
    eprintln!("digits: validation accuracy per epoch {acc:?}");
    // Chance is 10%; classical classifiers reach about 98%. This run reached 96.9%.
    assert!(acc[7] > 94.0, "validation accuracy {acc:?}");
    std::fs::remove_dir_all(dir).ok();
}

/// The numbers of one of burn-train's per-batch logs, without its closing aggregate.
fn batch_log(dir: &Path, split: &str, round: usize, metric: &str) -> Vec<f64> {
    let path = dir.join(format!("{split}/epoch-{round}/{metric}.log"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.ends_with(",final"))
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn gradient_accumulation_steps_once_per_group_of_batches() {
    let device = zoo_device::test_device();
    let dir = temp_dir("accumulation");
    let mut cfg = toy_config(1, &dir);
    cfg.grad_accumulation = 3;
    cfg.warmup_steps = 3;
    // 160 examples of batch 16: 10 batches, so 4 optimiser steps (3 + 3 + 3 + 1).
    assert_eq!(cfg.total_steps(160), 4);
    fit_blobs(
        &cfg,
        blobs(160, 4, 16, 21, &[]),
        blobs(40, 4, 16, 22, &[]),
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    // burn-train logs the learning rate after each batch, and the schedule advances at
    // each optimiser step: after batches 3, 6 and 9 (groups of 3) and 10 (the partial
    // group at the end of the epoch). Warmup over 3 steps gives lr/3, 2lr/3 and lr; the
    // last step is the end of the cosine, min_lr. Before the first step it is 0.
    let lr = batch_log(&dir, "train", 1, "Learning_Rate");
    let (a, b, c, d) = (cfg.lr / 3.0, 2.0 * cfg.lr / 3.0, cfg.lr, cfg.min_lr);
    let expected = [0.0, 0.0, a, a, a, b, b, b, c, d];
    assert_eq!(lr.len(), expected.len(), "{lr:?}");
    for (i, (got, want)) in lr.iter().zip(expected).enumerate() {
        assert!(
            (got - want).abs() < 1e-9,
            "batch {}: learning rates {lr:?}, expected {expected:?}",
            i + 1
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn early_stopping_ends_the_run_after_patience_rounds_without_progress() {
    use rand::{Rng, SeedableRng};
    let device = zoo_device::test_device();
    let dir = temp_dir("early-stop");
    let mut cfg = toy_config(30, &dir);
    cfg.early_stopping_patience = Some(2);
    // Labels drawn at random: the model can only memorise, so validation loss soon
    // stops improving.
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut noise = |mut items: Vec<BlobItem>| {
        for it in &mut items {
            it.y = rng.random_range(0..4);
        }
        items
    };
    let train = noise(blobs(200, 4, 16, 23, &[]));
    let valid = noise(blobs(200, 4, 16, 24, &[]));
    let out = fit_blobs(
        &cfg,
        train,
        valid,
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    let losses: Vec<f64> = out.epochs.iter().map(|e| e["valid_loss"]).collect();
    let best = losses
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert!(losses.len() < 30, "no early stop: {losses:?}");
    assert_eq!(
        losses.len(),
        best + 1 + 2,
        "stopped 2 rounds after the best one? {losses:?}"
    );
    std::fs::remove_dir_all(dir).ok();
}
