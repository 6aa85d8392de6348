//! The learner end to end: learning (classification, sequence-to-sequence), resume after
//! SIGKILL, the NaN guard, determinism.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use burn::module::Module;
use zoo_data::Seq2SeqBatcher;
use zoo_train::toy::{BlobBatcher, Mlp, ToySeq2Seq, blobs, copy_items};
use zoo_train::{
    ClassificationTask, FitOptions, Seq2SeqTask, TrainConfig, TrainError, fit,
    last_complete_checkpoint,
};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zoo-train-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

fn toy_config(epochs: usize, dir: &Path) -> TrainConfig {
    let mut cfg = TrainConfig::new(epochs, dir);
    cfg.batch_size = 16;
    cfg.warmup_steps = 10;
    cfg.lr = 1e-2;
    cfg.min_lr = 1e-3;
    cfg.keep_checkpoints = epochs;
    cfg
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
    let model = Mlp::new(16, 64, 4, &device.clone().autodiff());
    let out = fit(
        ClassificationTask::new(model),
        blobs(2000, 4, 16, 1, &[]),
        blobs(400, 4, 16, 2, &[]),
        BlobBatcher,
        &cfg,
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
fn nan_loss_stops_with_the_step_and_keeps_good_checkpoints() {
    let device = zoo_device::test_device();
    let dir = temp_dir("nan");
    let cfg = toy_config(2, &dir);
    let model = Mlp::new(16, 64, 4, &device.clone().autodiff());
    // Two clean epochs with checkpoints.
    fit(
        ClassificationTask::new(model),
        blobs(400, 4, 16, 3, &[]),
        blobs(100, 4, 16, 4, &[]),
        BlobBatcher,
        &cfg,
        std::slice::from_ref(&device),
        FitOptions::default(),
    )
    .unwrap();
    // Resume for a third epoch on data where one example is NaN.
    let cfg3 = toy_config(3, &dir);
    // A freshly built model, as a resumed program would have.
    let fresh = Mlp::new(16, 64, 4, &device.clone().autodiff());
    let err = fit(
        ClassificationTask::new(fresh),
        blobs(400, 4, 16, 3, &[7]),
        blobs(100, 4, 16, 4, &[]),
        BlobBatcher,
        &cfg3,
        std::slice::from_ref(&device),
        FitOptions {
            resume: true,
            report: None,
        },
    )
    .unwrap_err();
    match err {
        TrainError::NonFiniteLoss { epoch, step, value } => {
            assert_eq!(epoch, 3, "{err:?}");
            assert!((1..=25).contains(&step), "step {step} of a 25-step epoch");
            assert!(value.is_nan());
            assert!(err.to_string().contains(&format!("step {step}")));
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

#[test]
fn resume_after_sigkill_finishes_the_run() {
    let dir = temp_dir("resume");
    let mut child = toy()
        .arg(&dir)
        .args(["--epochs", "8", "--items", "6000"])
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
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    let killed_at = last_complete_checkpoint(&dir).unwrap();
    assert!(killed_at < 8, "the run finished before the kill");
    let out = toy()
        .arg(&dir)
        .args(["--epochs", "8", "--items", "6000", "--resume"])
        .output()
        .unwrap();
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
    std::fs::remove_dir_all(dir).ok();
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
