//! Trains the synthetic blob classifier through `zoo_train::fit`: a small program for
//! trying the learner (and for the resume and determinism tests, which kill and rerun it).
//!
//! `zoo-train-toy <artifact_dir> [--epochs N] [--items N] [--resume] [--seed S]`

use zoo_train::toy::{BlobBatcher, Mlp, blobs};
use zoo_train::{ClassificationTask, FitOptions, TrainConfig, fit};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1).filter(|a| !a.starts_with("--")) else {
        eprintln!(
            "usage: zoo-train-toy <artifact_dir> [--epochs N] [--items N] [--resume] [--seed S]"
        );
        std::process::exit(2);
    };
    let epochs = arg(&args, "--epochs", 6usize);
    let items = arg(&args, "--items", 2000usize);
    let seed = arg(&args, "--seed", 7u64);
    let resume = args.iter().any(|a| a == "--resume");
    let device = zoo_device::select(zoo_device::BackendName::Flex).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
    let mut cfg = TrainConfig::new(epochs, dir);
    cfg.batch_size = 16;
    cfg.warmup_steps = 10;
    cfg.lr = 1e-2;
    cfg.min_lr = 1e-3;
    cfg.seed = seed;
    cfg.keep_checkpoints = epochs;
    device.seed(seed);
    let model = Mlp::new(16, 64, 4, &device.clone().autodiff());
    let options = FitOptions {
        resume,
        report: Some(Box::new(|r| {
            println!("epoch {} {} {:?}", r.epoch, r.split, r.values.get("Loss"));
        })),
    };
    let start = zoo_train::last_complete_checkpoint(std::path::Path::new(dir)).filter(|_| resume);
    println!("starting after checkpoint {start:?}");
    match fit(
        ClassificationTask::new(model),
        blobs(items, 4, 16, seed, &[]),
        blobs(400, 4, 16, seed + 1, &[]),
        BlobBatcher,
        &cfg,
        &[device],
        options,
    ) {
        Ok(r) => println!(
            "done: {} epochs in {}",
            r.epochs.len(),
            r.metrics_csv.display()
        ),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
