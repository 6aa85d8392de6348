//! Character-level name generation, the seeds' motivating example, end to end: a bigram
//! baseline, a small GPT trained through the shared learner, and sampled names.
//!
//! ```sh
//! cargo run --release --example names
//! cargo run --release --example names -- --overwrite   # again, replacing the first run
//! cargo run --release --example names --features wgpu -- --device wgpu
//! cargo run --release --example names -- --checkpoint artifacts/names-model
//! cargo run --release --example names -- --checkpoint artifacts/names-model --sample-only
//! ```

use std::path::PathBuf;

use clap::Parser;
use zoo_examples::names::{NamesSettings, novelty, sample, train};
use zoo_examples::{
    Error, device_or_exit, exit_on_error, load_model, or_exit_on_earlier_run, save_model,
};

#[derive(Parser, Debug)]
#[command(about = "Train a character-level GPT on first names and sample new ones")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// Training epochs.
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    /// Save the trained model here (or load it from here with --sample-only).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Skip training: load the model from --checkpoint and sample.
    #[arg(long)]
    sample_only: bool,
    /// Names to sample.
    #[arg(long, default_value_t = 20)]
    samples: usize,
    /// Sample names that begin with these letters.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample among the k likeliest letters only.
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Seed of the split, the model and the sampler.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Laplace smoothing of the bigram baseline.
    #[arg(long, default_value_t = 1.0)]
    alpha: f64,
    /// Learner artifacts (checkpoints, logs, metrics.csv).
    #[arg(long, default_value = "artifacts/names")]
    artifacts: PathBuf,
    /// Replace an earlier run in the artifact folder; without it a second run there stops
    /// with an error and leaves the first one as it was.
    #[arg(long)]
    overwrite: bool,
}

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    let device = device_or_exit(&args.device);
    if args.sample_only {
        let dir = args
            .checkpoint
            .as_ref()
            .ok_or("--sample-only needs --checkpoint DIR")?;
        let (model, _) = load_model(dir, &device)?;
        for name in sample(
            &model,
            &args.prefix,
            args.samples,
            args.temperature,
            args.top_k,
            args.seed,
        )? {
            println!("{name}");
        }
        return Ok(());
    }
    let mut settings = NamesSettings::seeds(args.epochs, &args.artifacts);
    settings.seed = args.seed;
    settings.alpha = args.alpha;
    settings.device = args.device.clone();
    settings.overwrite = args.overwrite;
    let start = std::time::Instant::now();
    let out = or_exit_on_earlier_run(
        train(&settings, &device, Some(Box::new(|r| println!("{r}")))),
        "--overwrite replaces it, or choose another folder with --artifacts",
    )?;
    let secs = start.elapsed().as_secs_f64();
    for (i, e) in out.epochs.iter().enumerate() {
        println!(
            "epoch {:>3}: train_loss {:.4} valid_loss {:.4}",
            i + 1,
            e.get("train_loss").copied().unwrap_or(f64::NAN),
            e.get("valid_loss").copied().unwrap_or(f64::NAN)
        );
    }
    if let Some(dir) = &args.checkpoint {
        save_model(&out.model, &settings.model, dir)?;
        println!("saved the model to {}", dir.display());
    }
    let names = sample(
        &out.model,
        &args.prefix,
        args.samples,
        args.temperature,
        args.top_k,
        args.seed,
    )?;
    let novel = novelty(&names, &out.train_names);
    println!(
        "trained {} epochs in {secs:.1} s on {}",
        args.epochs, args.device
    );
    println!(
        "names: val_nll={:.4} bigram_nll={:.4} novel={novel:.0}%",
        out.val_nll, out.bigram_nll
    );
    for name in names {
        println!("{name}");
    }
    Ok(())
}
