//! Times ViT-B/16 (`vit_base_patch16_224()`, random weights, no pooler) forward on
//! `--batch` images of 224×224, in inference mode: one warm-up, then the median of
//! `--runs`. Its PyTorch counterpart is `xtask/bench/vit.py` (HF `transformers`
//! `ViTModel`), run with the same shapes and thread count.
//!
//! `cargo xtask bench vit [--batch 1] [--runs 5] [--threads 2] [--device flex] [--dtype f32|f16|bf16] [--quantize q8|q4]`

use burn::tensor::{Distribution, Tensor};
use clap::Parser;
use clap::builder::RangedU64ValueParser;

mod cli;
use cli::{or_exit, parse_and_start, report, time_outputs};
use zoo_vision::{ImageInput, ViTConfig};

/// Times ViT-B/16 forward.
#[derive(Debug, Parser)]
struct Args {
    /// Images per batch.
    #[arg(long, default_value_t = 1, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    #[command(flatten)]
    common: zoo_bench::Common,
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    device.seed(0);
    let model = or_exit(ViTConfig::vit_base_patch16_224().init(false, &device));
    let model = or_exit(args.common.quantized(model, &device));
    let weights = cli::weight_figures(&model);
    let pixels = Tensor::<4>::random(
        [args.batch, 3, 224, 224],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let times = time_outputs(args.common.runs, true, || {
        model
            .forward(ImageInput::new(pixels.clone()))
            .expect("a valid input")
            .last_hidden_state
    });
    let what = format!("vit-b/16 forward {}x3x224x224", args.batch);
    report(&args.common, &what, &times, 1, "", &weights);
}
