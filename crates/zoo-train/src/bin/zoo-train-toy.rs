//! Trains the synthetic blob classifier through `zoo_train::fit`: a small program for
//! trying the learner (and for the resume and determinism tests, which kill and rerun it,
//! on each backend of the test matrix).
//!
//! `zoo-train-toy <artifact_dir> [--device NAME] [--epochs N | --steps N --eval-every K]
//! [--items N] [--resume | --overwrite] [--seed S]`

// The blobs and the MLP are test support, not library API; the program borrows them.
#[path = "../../tests/support/toy.rs"]
mod toy;

use toy::{BlobBatcher, Mlp, blobs};
use zoo_train::{ClassificationTask, FitOptions, TrainConfig, TrainError, fit};

const USAGE: &str = "usage: zoo-train-toy <artifact_dir> [--device NAME] \
                     [--epochs N | --steps N --eval-every K] [--items N] \
                     [--resume | --overwrite] [--seed S]";

/// Prints `message` and the usage line, and exits with status 2.
fn usage_error(message: &str) -> ! {
    eprintln!("error: {message}\n{USAGE}");
    std::process::exit(2);
}

/// The value after `name`; `None` when the flag is absent; exit 2 when it has no value.
fn value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1) {
        Some(v) if !v.starts_with("--") => Some(v.as_str()),
        _ => usage_error(&format!("{name} needs a value")),
    }
}

/// The number after `name`, `default` when the flag is absent; exit 2 when it does not
/// parse.
fn number<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match value(args, name).map(|v| (v, v.parse())) {
        None => default,
        Some((_, Ok(v))) => v,
        Some((v, Err(_))) => usage_error(&format!("{name} expects a number, got '{v}'")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1).filter(|a| !a.starts_with("--")) else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let has = |flag: &str| args.iter().any(|a| a == flag);
    if has("--steps") && has("--epochs") || has("--eval-every") && !has("--steps") {
        usage_error("use --epochs, or --steps with --eval-every");
    }
    if has("--resume") && has("--overwrite") {
        usage_error("use --resume or --overwrite, not both");
    }
    let epochs = number(&args, "--epochs", 6usize);
    let steps = number(&args, "--steps", 0usize);
    let items = number(&args, "--items", 2000usize);
    let seed = number(&args, "--seed", 7u64);
    let device_name = value(&args, "--device").unwrap_or("flex");
    let device = zoo_device::select_by_name(device_name).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
    let resume = has("--resume");
    let mut cfg = if steps > 0 {
        TrainConfig::steps(steps, number(&args, "--eval-every", steps), dir)
    } else {
        TrainConfig::new(epochs, dir)
    };
    cfg.batch_size = 16;
    cfg.warmup_steps = 10;
    cfg.lr = 1e-2;
    cfg.min_lr = 1e-3;
    cfg.seed = seed;
    cfg.keep_checkpoints = cfg.plan(items).rounds;
    cfg.devices = vec![device_name.to_string()];
    cfg.overwrite = has("--overwrite");
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
        Err(e @ TrainError::EarlierRun { .. }) => {
            eprintln!("error: {e}\n(--resume continues it, --overwrite replaces it)");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
