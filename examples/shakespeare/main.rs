//! A character-level language model on `datasets/shakespeare/tiny.txt` (the classic
//! "shakespeare_char" task): a small GPT-2- or Llama-style decoder trained through the
//! shared learner in steps mode, the validation loss every `--eval-every` steps, then a
//! generated passage.
//!
//! ```sh
//! cargo run --release --example shakespeare -- --preset gpt2
//! cargo run --release --example shakespeare -- --preset llama --iters 1000 --artifacts artifacts/shakespeare-llama
//! cargo run --release --example shakespeare -- --resume   # continue an interrupted run
//! cargo run --release --example shakespeare -- --precisions   # then f16, bf16, q8, q4 too
//! cargo run --release --example shakespeare -- --evaluate q8  # the saved model, at q8
//! ```

use std::path::PathBuf;
use std::process::Command;

use burn::module::Module;
use clap::{Parser, ValueEnum};
use zoo_core::{GenerationConfig, generate};
use zoo_data::{CausalLmBatcher, CharVocab};
use zoo_decoder::DecoderConfig;
use zoo_examples::precision::Precision;
use zoo_examples::{
    Error, device_or_exit, exit_on_error, load_model, mean_nll, or_exit_on_earlier_run, save_model,
};
use zoo_train::{CausalLmTask, FitOptions, TrainConfig, fit};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    /// Learned positions, LayerNorm, GELU-tanh MLP, fused QKV, tied head.
    Gpt2,
    /// RoPE, RMSNorm, SwiGLU, grouped-query attention, untied head.
    Llama,
}

#[derive(Parser, Debug)]
#[command(about = "Train a character-level GPT on Shakespeare and generate a passage")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// Block family.
    #[arg(long, value_enum, default_value = "gpt2")]
    preset: Preset,
    /// Optimiser steps in total.
    #[arg(long, default_value_t = 2000)]
    iters: usize,
    /// Optimiser steps between validations and checkpoints (divides `--iters`).
    #[arg(long, default_value_t = 250)]
    eval_every: usize,
    /// Characters to generate.
    #[arg(long, default_value_t = 400)]
    generate: usize,
    /// Seed.
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Learner artifacts.
    #[arg(long, default_value = "artifacts/shakespeare")]
    artifacts: PathBuf,
    /// Continue from the last checkpoint in the artifact folder.
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Replace an earlier run in the artifact folder; without it (or --resume) a second
    /// run there stops with an error and leaves the first one as it was.
    #[arg(long)]
    overwrite: bool,
    /// After training, the validation loss again with the weights in f16, bf16, q8 and
    /// q4, each in a process of its own (a device's float type is set before its first
    /// tensor).
    #[arg(long)]
    precisions: bool,
    /// No training: the validation loss of the model that a finished run saved in
    /// `--artifacts` (its `model` folder), with its weights at this precision.
    #[arg(long, value_enum, conflicts_with_all = ["resume", "overwrite", "precisions"])]
    evaluate: Option<Precision>,
}

const BLOCK: usize = 64;
const BATCH: usize = 12;
const VALID_WINDOWS: usize = 600;

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    let path = zoo_data::dataset_file("shakespeare/tiny.txt")?;
    let (train_text, val_text) = zoo_data::text::load_split(&path, 0.1)?;
    let vocab = CharVocab::from_text(&format!("{train_text}{val_text}"));
    let train_ids = vocab.encode(&train_text)?;
    let val_ids = vocab.encode(&val_text)?;

    // 4 layers, 4 heads, width 128, block 64, no dropout: the reference configuration.
    let base = DecoderConfig::new(vocab.len(), 128, 4, 4, BLOCK);
    let model_cfg = match args.preset {
        Preset::Gpt2 => base,
        Preset::Llama => base.llama_style(),
    };
    let val_items = zoo_data::text::random_windows(&val_ids, BLOCK, VALID_WINDOWS, args.seed + 1)?;
    let saved = args.artifacts.join("model");
    if let Some(precision) = args.evaluate {
        if !saved.join("model.json").is_file() {
            return Err(format!(
                "no trained model in {}: a finished run saves one there (train first, or pass \
                 its --artifacts)",
                saved.display()
            )
            .into());
        }
        let device = zoo_device::select_by_name_as(&args.device, precision.float())
            .map_err(|e| e.to_string())?;
        let (model, config) = load_model(&saved, &device)?;
        if config.vocab_size != vocab.len() {
            return Err(format!(
                "{}: a model over {} characters, and the text has {}",
                saved.display(),
                config.vocab_size,
                vocab.len()
            )
            .into());
        }
        let model = precision.apply(model, &device)?;
        let val = mean_nll(&model, &val_items, 64, &device)?;
        println!("shakespeare: precision={precision} val_loss={val:.4}");
        return Ok(());
    }
    // Selected after `--evaluate`'s device: the first selection fixes the float type.
    let device = device_or_exit(&args.device);
    // One random window per training example, as many as the run draws: every batch is
    // fresh, like sampling windows at each step.
    let train_items =
        zoo_data::text::random_windows(&train_ids, BLOCK, args.iters * BATCH, args.seed)?;

    let mut cfg = TrainConfig::steps(args.iters, args.eval_every, &args.artifacts);
    cfg.batch_size = BATCH;
    cfg.lr = 1e-3;
    cfg.min_lr = 1e-4;
    cfg.warmup_steps = 100;
    cfg.betas = (0.9, 0.99);
    cfg.weight_decay = 0.1;
    cfg.seed = args.seed;
    cfg.devices = vec![args.device.clone()];
    cfg.overwrite = args.overwrite;
    device.seed(args.seed);
    let model = model_cfg.init(&device.clone().autodiff())?;
    println!(
        "{:?} preset: {} parameters, {} steps of {BATCH} windows, validation every {}",
        args.preset,
        model.num_params(),
        args.iters,
        args.eval_every
    );
    let start = std::time::Instant::now();
    let fitted = fit(
        CausalLmTask::new(model),
        train_items,
        val_items.clone(),
        CausalLmBatcher::new(0),
        &cfg,
        std::slice::from_ref(&device),
        FitOptions {
            resume: args.resume,
            ..zoo_examples::printing()
        },
    )
    .map_err(Error::from);
    let fitted = or_exit_on_earlier_run(
        fitted,
        "--resume continues it, --overwrite replaces it, --artifacts chooses another folder",
    )?;
    let secs = start.elapsed().as_secs_f64();
    let model = fitted.task.model.valid().to_device(&device);
    save_model(&model, &model_cfg, &saved)?;
    for e in &fitted.epochs {
        println!(
            "step {:>5}: train_loss {:.4} valid_loss {:.4}",
            e.get("step").copied().unwrap_or(f64::NAN),
            e.get("train_loss").copied().unwrap_or(f64::NAN),
            e.get("valid_loss").copied().unwrap_or(f64::NAN)
        );
    }
    let val = mean_nll(&model, &val_items, 64, &device)?;
    println!(
        "shakespeare: preset={:?} val_loss={val:.4} time={secs:.0}s iters={}",
        args.preset, args.iters
    );
    if args.precisions {
        println!(
            "validation loss by precision (the model saved in {}):",
            saved.display()
        );
        println!("  f32   {val:.4}");
        for precision in &Precision::ALL[1..] {
            let other = evaluate_in_child(&args, *precision)?;
            println!("  {precision:<5} {other:.4} ({:+.4})", other - val);
        }
    }

    // Generate with a sliding context: each round keeps the last half block as prompt.
    let mut text: Vec<usize> = vocab.encode("\n")?;
    let mut round = 0;
    while text.len() < args.generate {
        let keep = text.len().min(BLOCK / 2);
        let prompt = text[text.len() - keep..].to_vec();
        let gen_cfg =
            GenerationConfig::sampling(BLOCK - keep, 0.8, args.seed + round).with_top_k(20);
        let out = generate(&model, &[prompt], &gen_cfg, |_, _| {})?;
        text.extend(&out.tokens[0]);
        round += 1;
    }
    println!("{}", vocab.decode(&text)?);
    Ok(())
}

/// Runs this program again with `--evaluate PRECISION` on the same data, device and
/// artifacts, and reads the validation loss it prints.
fn evaluate_in_child(args: &Args, precision: Precision) -> Result<f64, Error> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--device", &args.device, "--seed", &args.seed.to_string()])
        .args(["--evaluate", precision.name(), "--artifacts"])
        .arg(&args.artifacts)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let loss = stdout.lines().find_map(|l| {
        l.rsplit_once("val_loss=")
            .map(|(_, v)| v.trim().to_string())
    });
    match loss.and_then(|v| v.parse::<f64>().ok()) {
        Some(v) if out.status.success() => Ok(v),
        _ => Err(format!(
            "the validation loss at {precision} was not measured: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into()),
    }
}
