//! Trains the synthetic blob classifier through `zoo_train::fit`: a small program for
//! trying the learner (and for the resume and determinism tests, which kill and rerun it).
//!
//! `zoo-train-toy <artifact_dir> [--epochs N | --steps N --eval-every K] [--items N]
//! [--resume] [--seed S]`

// The blobs and the MLP are test support, not library API; the program borrows them.
#[path = "../../tests/support/toy.rs"]
mod toy;

use toy::{BlobBatcher, Mlp, blobs};
use zoo_train::{ClassificationTask, FitOptions, TrainConfig, fit};

const USAGE: &str = "usage: zoo-train-toy <artifact_dir> [--epochs N | --steps N --eval-every K] \
                     [--items N] [--resume] [--seed S]";

/// The value after `name`, parsed; `default` when the flag is absent; exit 2 when the
/// value is missing or does not parse.
fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    let Some(i) = args.iter().position(|a| a == name) else {
        return default;
    };
    match args.get(i + 1).map(|v| (v, v.parse())) {
        Some((_, Ok(v))) => v,
        Some((v, Err(_))) => {
            eprintln!("error: {name} expects a number, got '{v}'\n{USAGE}");
            std::process::exit(2);
        }
        None => {
            eprintln!("error: {name} needs a value\n{USAGE}");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1).filter(|a| !a.starts_with("--")) else {
        eprintln!("{USAGE}");
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
    let steps = arg(&args, "--steps", 0usize);
    let has = |flag: &str| args.iter().any(|a| a == flag);
    if has("--steps") && has("--epochs") || has("--eval-every") && !has("--steps") {
        eprintln!("error: use --epochs, or --steps with --eval-every\n{USAGE}");
        std::process::exit(2);
    }
    let mut cfg = if steps > 0 {
        TrainConfig::steps(steps, arg(&args, "--eval-every", steps), dir)
    } else {
        TrainConfig::new(epochs, dir)
    };
    cfg.batch_size = 16;
    cfg.warmup_steps = 10;
    cfg.lr = 1e-2;
    cfg.min_lr = 1e-3;
    cfg.seed = seed;
    cfg.keep_checkpoints = cfg.plan(items).rounds;
    device.seed(seed);
    let model = Mlp::new(16, 64, 4, &device.clone().autodiff());
    let options = FitOptions {
        resume,
        report: Some(Box::new(|r| println!("{r}"))),
        ..FitOptions::default()
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
