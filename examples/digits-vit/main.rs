//! A Vision Transformer on the 1,797 handwritten 8×8 digits shipped in `datasets/digits`:
//! 4×4 patches become 4 tokens (plus CLS), four pre-norm layers of width 128 attend over
//! them, and the mean patch token is classified. The split is stratified (80% train, 20%
//! test, fixed seed), and a quarter of the training reads are shifted by a pixel at
//! random. The small CNN of `zoo-train`'s tests trains first, on the same split with the
//! same schedule: it is the comparison, and the ViT's teacher (knowledge distillation,
//! half of the ViT's loss). Prints the test accuracy of both after each epoch, saves the
//! ViT as an HF checkpoint, and draws the attention rollout of one test image of each
//! digit.
//!
//! ```sh
//! cargo run --release --example digits-vit
//! ```

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use zoo_examples::digits::{DigitsSettings, attention_png, evaluate, split, train_cnn, train_vit};
use zoo_examples::{
    Error, device_or_exit, exit_on_error, or_exit_on_earlier_run, require_positive,
};
use zoo_train::Distillation;
use zoo_vision::Pooling;

#[derive(Parser, Debug)]
#[command(about = "Train a Vision Transformer on the 8x8 handwritten digits")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// Epochs.
    #[arg(long, default_value_t = 80)]
    epochs: usize,
    /// Images per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Dropout on the embeddings and sub-layer outputs.
    #[arg(long, default_value_t = 0.2)]
    dropout: f64,
    /// Label smoothing of the ViT's training loss, in [0, 1) (0: none).
    #[arg(long, default_value_t = 0.0)]
    label_smoothing: f32,
    /// Distil the ViT from the CNN, which trains first (Hinton et al., 2015): the share of
    /// the loss given to matching the CNN's softened outputs, in [0, 1] (0: the labels
    /// alone).
    #[arg(long, default_value_t = 0.5)]
    distill: f32,
    /// Temperature of the distillation's softmaxes.
    #[arg(long, default_value_t = 4.0)]
    distill_temperature: f32,
    /// Patch side in pixels: 1, 2, 4 or 8.
    #[arg(long, default_value_t = 4)]
    patch: usize,
    /// Model width.
    #[arg(long, default_value_t = 128)]
    width: usize,
    /// Encoder layers.
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Largest random shift of a training image, in pixels (0: no augmentation).
    #[arg(long, default_value_t = 1)]
    max_shift: usize,
    /// What the classifier reads: `cls` (the CLS token) or `mean` (the mean patch token).
    #[arg(long, default_value = "mean", value_parser = ["cls", "mean"])]
    pooling: String,
    /// Share of training reads that are shifted.
    #[arg(long, default_value_t = 0.25)]
    shift_probability: f64,
    /// Seed of the split, the weights and the augmentation.
    #[arg(long, default_value_t = 5)]
    seed: u64,
    /// Skip the CNN baseline.
    #[arg(long)]
    no_cnn: bool,
    /// Learner artifacts; the ViT checkpoint goes to `<artifacts>/model`.
    #[arg(long, default_value = "artifacts/digits-vit")]
    artifacts: PathBuf,
    /// Replace an earlier run in the artifact folder.
    #[arg(long)]
    overwrite: bool,
}

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    require_positive(&[
        ("epochs", args.epochs),
        ("batch", args.batch),
        ("patch", args.patch),
        ("width", args.width),
        ("layers", args.layers),
    ])?;
    if !8usize.is_multiple_of(args.patch) {
        return Err(format!("--patch must divide 8, got {}", args.patch).into());
    }
    if args.distill > 0.0 && args.no_cnn {
        return Err(
            "--no-cnn leaves the ViT without its teacher: add --distill 0 to train on the labels alone"
                .into(),
        );
    }
    if !(0.0..=1.0).contains(&args.distill) {
        return Err(format!("--distill must be in [0, 1], got {}", args.distill).into());
    }
    let device = device_or_exit(&args.device);
    let started = Instant::now();
    let (train, test) = split(args.seed)?;
    println!(
        "digits: {} train, {} test (stratified 80/20, seed {})",
        train.len(),
        test.len(),
        args.seed
    );
    let mut s = DigitsSettings::new(args.epochs, &args.artifacts);
    s.batch = args.batch;
    s.lr = args.lr;
    s.dropout = args.dropout;
    s.label_smoothing = args.label_smoothing;
    s.distillation = (args.distill > 0.0).then_some(Distillation {
        weight: args.distill,
        temperature: args.distill_temperature,
    });
    s.patch = args.patch;
    s.width = args.width;
    s.layers = args.layers;
    s.max_shift = args.max_shift;
    s.shift_probability = args.shift_probability;
    s.pooling = if args.pooling == "cls" {
        Pooling::Cls
    } else {
        Pooling::Mean
    };
    s.seed = args.seed;
    s.device = args.device.clone();
    s.overwrite = args.overwrite;
    let cfg = s.vit_config();
    println!(
        "ViT: {} patches of {}x{} px, width {}, {} layers, {} heads, {:?} pooling",
        cfg.grid() * cfg.grid(),
        cfg.patch_size,
        cfg.patch_size,
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.pooling
    );

    // The CNN first: it is the comparison, and under --distill the ViT's teacher.
    let cnn_started = Instant::now();
    let (cnn, cnn_acc) = if args.no_cnn {
        (None, Vec::new())
    } else {
        let (cnn, acc) = train_cnn(&s, &train, &test, &device)?;
        (Some(cnn), acc)
    };
    let cnn_seconds = cnn_started.elapsed().as_secs_f64();
    let vit_started = Instant::now();
    let (model, vit_acc) = or_exit_on_earlier_run(
        train_vit(
            &s,
            &train,
            &test,
            cnn.as_ref(),
            &device,
            zoo_examples::printing(),
        ),
        "--overwrite replaces it, --artifacts chooses another folder",
    )?;
    let vit_seconds = vit_started.elapsed().as_secs_f64();

    println!("\ntest accuracy per epoch:");
    println!("{:>6} {:>8} {:>8}", "epoch", "ViT", "CNN");
    for (i, v) in vit_acc.iter().enumerate() {
        let c = cnn_acc
            .get(i)
            .map_or_else(|| "-".to_string(), |c| format!("{c:.1}%"));
        println!("{:>6} {:>7.1}% {:>8}", i + 1, v, c);
    }

    let (acc, wrong) = evaluate(&model, &test, &device)?;
    let mut pairs = std::collections::BTreeMap::new();
    for (im, p) in &wrong {
        *pairs.entry((im.label, *p)).or_insert(0usize) += 1;
    }
    let pairs: Vec<String> = pairs
        .iter()
        .map(|((t, p), n)| format!("{t} as {p}: {n}"))
        .collect();
    println!(
        "\nmisclassified test digits (true as predicted: count): {}",
        if pairs.is_empty() {
            "none".into()
        } else {
            pairs.join(", ")
        }
    );

    let dir = args.artifacts.join("model");
    model.save_pretrained(&dir)?;
    // The first test image of each digit, 0 to 9.
    let examples: Vec<_> = (0..10)
        .filter_map(|d| test.iter().find(|im| im.label == d).cloned())
        .collect();
    let png = args.artifacts.join("attention.png");
    attention_png(&model, &examples, &device, &png)?;
    println!(
        "checkpoint: {}\nattention rollout: {}",
        dir.display(),
        png.display()
    );
    println!(
        "digits-vit: test_accuracy={acc:.1}% ({} of {} wrong) | cnn {} | ViT {:.0}s, CNN {:.0}s, total {:.0}s",
        wrong.len(),
        test.len(),
        cnn_acc
            .last()
            .map_or_else(|| "skipped".to_string(), |c| format!("{c:.1}%")),
        vit_seconds,
        cnn_seconds,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
