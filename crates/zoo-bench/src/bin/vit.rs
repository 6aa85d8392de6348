//! Times ViT-B/16 (`vit_base_patch16_224()`, random weights, no pooler) forward on
//! `--batch` images of 224×224, in inference mode: one warm-up, then the median of
//! `--runs`. Its PyTorch counterpart is `xtask/bench/vit.py` (HF `transformers`
//! `ViTModel`), run with the same shapes and thread count.
//!
//! `cargo xtask bench vit [--batch 1] [--runs 5] [--threads 2] [--device flex]`

use burn::tensor::{Distribution, Tensor};
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use zoo_bench::timed_runs;

mod cli;
use cli::{print_result, start_or_exit};
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
    let args = Args::parse();
    let device = start_or_exit(&args.common);
    device.seed(0);
    let model = ViTConfig::vit_base_patch16_224()
        .init(false, &device)
        .unwrap_or_else(|e| {
            eprintln!("error: {e}");
            std::process::exit(1);
        });
    let pixels = Tensor::<4>::random(
        [args.batch, 3, 224, 224],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let times = timed_runs(args.common.runs, true, || {
        let out = model
            .forward(ImageInput::new(pixels.clone()))
            .expect("a valid input");
        // Reading a value back waits for the backend to finish.
        let _ = out.last_hidden_state.slice([0..1, 0..1, 0..1]).into_data();
    });
    println!(
        "vit-b/16 forward {}x3x224x224 on {}: {:.1} ms (median of {})",
        args.batch,
        args.common.device,
        times[times.len() / 2].as_secs_f64() * 1e3,
        args.common.runs
    );
    print_result(&times, 1, &[]);
}
