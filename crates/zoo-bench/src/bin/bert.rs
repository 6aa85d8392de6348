//! Times BERT-base (`bert_base_uncased()`, random weights, no pooler) forward on token
//! ids of `--batch` x `--len`, in inference mode: one warm-up, then the median of `--runs`.
//! Its PyTorch counterpart is `xtask/bench/bert.py` (HF `transformers` `BertModel`), run
//! with the same shapes and thread count.
//!
//! `cargo xtask bench bert [--batch 8] [--len 128] [--runs 5] [--threads 2] [--device flex]`

use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use zoo_bench::timed_runs;

mod cli;
use cli::{print_result, start_or_exit};
use zoo_encoder::{BertConfig, EncoderInput};

/// Times BERT-base forward.
#[derive(Debug, Parser)]
struct Args {
    /// Rows per batch.
    #[arg(long, default_value_t = 8, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    /// Tokens per row (at most 512).
    #[arg(long, default_value_t = 128, value_parser = RangedU64ValueParser::<usize>::new().range(1..=512))]
    len: usize,
    #[command(flatten)]
    common: zoo_bench::Common,
}

fn main() {
    let args = Args::parse();
    let device = start_or_exit(&args.common);
    let mut cfg = BertConfig::bert_base_uncased();
    cfg.hidden_dropout_prob = 0.0;
    cfg.attention_probs_dropout_prob = 0.0;
    device.seed(0);
    let model = cfg.init(false, &device).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1);
    });
    let (b, t) = (args.batch, args.len);
    let ids: Vec<i64> = (0..b * t)
        .map(|i| ((i * 7919) % 29000 + 1000) as i64)
        .collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &device);
    let times = timed_runs(args.common.runs, true, || {
        let out = model
            .forward(EncoderInput::new(tokens.clone()))
            .expect("a valid input");
        // Reading a value back waits for the backend to finish.
        let _ = out.hidden.slice([0..1, 0..1, 0..1]).into_data();
    });
    println!(
        "bert-base forward {b}x{t} on {}: {:.1} ms (median of {})",
        args.common.device,
        times[times.len() / 2].as_secs_f64() * 1e3,
        args.common.runs
    );
    print_result(&times, 1, &[]);
}
