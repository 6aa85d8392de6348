//! Times BERT-base (`bert_base_uncased()`, random weights, no pooler) forward on token
//! ids of `--batch` x `--len`, in inference mode: one warm-up, then the median of `--runs`.
//! Its PyTorch counterpart is `xtask/bench/bert.py` (HF `transformers` `BertModel`), run
//! with the same shapes and thread count.
//!
//! `cargo xtask bench bert [--batch 8] [--len 128] [--runs 5] [--threads 2] [--device flex] [--dtype f32|f16|bf16] [--quantize q8|q4]`

use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;
use clap::builder::RangedU64ValueParser;

mod cli;
use cli::{or_exit, parse_and_start, report, time_outputs};
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
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let mut cfg = BertConfig::bert_base_uncased();
    cfg.hidden_dropout_prob = 0.0;
    cfg.attention_probs_dropout_prob = 0.0;
    device.seed(0);
    let model = or_exit(cfg.init(false, &device));
    let model = or_exit(args.common.quantized(model, &device));
    let weights = cli::weight_figures(&model);
    let (b, t) = (args.batch, args.len);
    let ids: Vec<i64> = (0..b * t)
        .map(|i| ((i * 7919) % 29000 + 1000) as i64)
        .collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &device);
    let times = time_outputs(args.common.runs, true, || {
        model
            .forward(EncoderInput::new(tokens.clone()))
            .expect("a valid input")
            .hidden
    });
    report(
        &args.common,
        &format!("bert-base forward {b}x{t}"),
        &times,
        1,
        "",
        &weights,
    );
}
