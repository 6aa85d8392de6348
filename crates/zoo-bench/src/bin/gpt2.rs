//! Times GPT-2 small (`DecoderConfig::gpt2_small()`, random weights) in inference mode,
//! or with `--model llama-100m` a Llama of 100M parameters built from a config (width
//! 768, 12 layers, 12 heads over 4 KV heads, SwiGLU of 2048, vocabulary 32000, tied
//! head: [`llama_100m`]):
//!
//! - `--mode forward`: the logits of every position of `--batch` rows of `--len` token
//!   ids, in ms per forward pass;
//! - `--mode generate`: greedy decoding with the KV cache, `--new` tokens after a
//!   `--prompt`-token prompt, in ms per new token (the prompt's pass included).
//!
//! One warm-up, then `--runs` timed calls. Its PyTorch counterpart is
//! `xtask/bench/gpt2.py` (HF `transformers` `GPT2LMHeadModel`), run with the same shapes
//! and thread count.
//!
//! `cargo xtask bench gpt2 [--model gpt2|llama-100m] [--mode forward|generate] [--batch 1] [--len 128] [--prompt 16] [--new 64] [--runs 5] [--threads 2] [--device flex] [--dtype f32|f16|bf16] [--quantize q8|q4]`

use burn::tensor::{Int, Tensor, TensorData};
use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};
use zoo_bench::timed_runs;

mod cli;
use cli::{or_exit, parse_and_start, report, time_outputs};
use zoo_core::{GenerationConfig, generate};
use zoo_decoder::{DecoderConfig, DecoderInput};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// One forward pass over every position.
    Forward,
    /// Greedy generation with the KV cache.
    Generate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Model {
    /// GPT-2 small, 124M parameters.
    Gpt2,
    /// A Llama of 100M parameters ([`llama_100m`]).
    #[value(name = "llama-100m")]
    Llama100m,
}

impl Model {
    fn name(self) -> &'static str {
        match self {
            Self::Gpt2 => "gpt2-small",
            Self::Llama100m => "llama-100m",
        }
    }

    /// How many ids the prompts are drawn from (from 100 up), inside the vocabulary.
    fn span(self) -> usize {
        match self {
            Self::Gpt2 => 50000,
            Self::Llama100m => 31000,
        }
    }
}

/// The Llama of `--model llama-100m`: 100,092,672 parameters, as `xtask/bench/gpt2.py
/// --model llama-100m` builds with `transformers`' `LlamaConfig`.
fn llama_100m() -> DecoderConfig {
    DecoderConfig::new(32000, 768, 12, 12, 2048)
        .llama_style()
        .with_d_ff(Some(2048))
        .with_n_kv_heads(Some(4))
        .with_tie_embeddings(true)
}

/// Times GPT-2 small, or a Llama of 100M parameters.
#[derive(Debug, Parser)]
struct Args {
    /// Which model.
    #[arg(long, value_enum, default_value_t = Model::Gpt2)]
    model: Model,
    /// What to time.
    #[arg(long, value_enum, default_value_t = Mode::Forward)]
    mode: Mode,
    /// Rows per batch (forward).
    #[arg(long, default_value_t = 1, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    /// Tokens per row (forward; at most 1024).
    #[arg(long, default_value_t = 128, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    len: usize,
    /// Prompt tokens (generate).
    #[arg(long, default_value_t = 16, value_parser = RangedU64ValueParser::<usize>::new().range(1..=512))]
    prompt: usize,
    /// New tokens (generate).
    #[arg(long, default_value_t = 64, value_parser = RangedU64ValueParser::<usize>::new().range(1..=512))]
    new: usize,
    #[command(flatten)]
    common: zoo_bench::Common,
}

/// Deterministic ids spread over the vocabulary, the same formula as the PyTorch script.
fn ids(n: usize, span: usize) -> Vec<usize> {
    (0..n).map(|i| (i * 7919) % span + 100).collect()
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    device.seed(0);
    let config = match args.model {
        Model::Gpt2 => DecoderConfig::gpt2_small(),
        Model::Llama100m => llama_100m(),
    };
    let model = or_exit(config.init(&device));
    let (name, span) = (args.model.name(), args.model.span());
    let model = or_exit(args.common.quantized(model, &device));
    let weights = cli::weight_figures(&model);
    let runs = args.common.runs;
    match args.mode {
        Mode::Forward => {
            let (b, t) = (args.batch, args.len);
            let data: Vec<i64> = ids(b * t, span).into_iter().map(|i| i as i64).collect();
            let tokens = Tensor::<2, Int>::from_data(TensorData::new(data, [b, t]), &device);
            let times = time_outputs(runs, true, || {
                model
                    .forward(DecoderInput::new(tokens.clone()))
                    .expect("a valid input")
                    .logits
            });
            report(
                &args.common,
                &format!("{name} forward {b}x{t}"),
                &times,
                1,
                "",
                &weights,
            );
        }
        Mode::Generate => {
            let prompt = ids(args.prompt, span);
            let cfg = GenerationConfig::greedy(args.new);
            let mut produced = 0;
            let times = timed_runs(runs, true, || {
                let out = generate(&model, std::slice::from_ref(&prompt), &cfg, |_, _| {})
                    .expect("a valid prompt");
                produced = out.tokens[0].len();
            });
            if produced != args.new {
                eprintln!(
                    "error: generated {produced} tokens, not the {} asked for",
                    args.new
                );
                std::process::exit(1);
            }
            let what = format!(
                "{name} greedy generation, prompt {} + {} new",
                args.prompt, args.new
            );
            report(&args.common, &what, &times, args.new, "", &weights);
        }
    }
}
