//! What gradient checkpointing saves and costs: one training step (forward, softmax
//! cross-entropy, backward; no optimiser update) of a model with random weights and no
//! dropout, on a plain autodiff device and then on one with Burn's balanced strategy
//! (`Device::gradient_checkpointing`, what `zoo train --gradient-checkpointing` uses),
//! under which every layer of the zoo keeps only its input and runs again in the
//! backward pass (`zoo_attention::recompute`):
//!
//! - `--model gpt2`: GPT-2 small (`DecoderConfig::gpt2_small()`, 124M parameters), the
//!   next-token loss over every position of `--batch 8` rows of `--len 512` ids;
//! - `--model bert`: BERT-base (`BertConfig::bert_base_uncased()`, 110M parameters) as a
//!   two-class sequence classifier, `--batch 16` rows of `--len 128` ids.
//!
//! Memory is the peak of the bytes live during the step beyond those live before it (the
//! model, the inputs), counted by the bench programs' allocator: the activations the
//! backward keeps, the logits, and the gradients. One warm-up step, then `--runs` timed
//! steps per device; the loss of the last step is printed for each, and the two must be
//! equal. Run it on flex, the backend whose memory the allocator sees.
//!
//! `cargo xtask bench checkpointing [--model gpt2|bert] [--batch N] [--len T] [--runs 3]`

use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};
use zoo_bench::{ALLOC, lm_loss};
use zoo_decoder::DecoderConfig;
use zoo_encoder::model::EncoderInput;
use zoo_encoder::{BertConfig, BertForSequenceClassification};
use zoo_kernels::loss::cross_entropy;

mod cli;
use cli::{or_exit, parse_and_start};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Model {
    /// GPT-2 small, the next-token loss.
    Gpt2,
    /// BERT-base as a two-class sequence classifier.
    Bert,
}

/// Memory and time of a training step with and without gradient checkpointing.
#[derive(Debug, Parser)]
struct Args {
    /// Which model.
    #[arg(long, value_enum, default_value_t = Model::Gpt2)]
    model: Model,
    /// Rows per batch (default: 8 for gpt2, 16 for bert).
    #[arg(long, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    batch: Option<usize>,
    /// Tokens per row (default: 512 for gpt2, 128 for bert).
    #[arg(long, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    len: Option<usize>,
    #[command(flatten)]
    common: zoo_bench::Common,
}

/// One measured configuration: the median step time, the largest extra memory, the last
/// loss.
struct Measured {
    ms: f64,
    mib: f64,
    loss: f32,
}

/// Runs `step` once to warm up, then `runs` times, each from a fresh peak.
fn measure(runs: usize, mut step: impl FnMut() -> f32) -> Measured {
    step();
    let (mut times, mut mib, mut loss) = (Vec::new(), 0f64, f32::NAN);
    for _ in 0..runs {
        let base = ALLOC.reset_peak();
        let t = Instant::now();
        loss = step();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        mib = mib.max(ALLOC.peak().saturating_sub(base) as f64 / (1024.0 * 1024.0));
    }
    times.sort_by(f64::total_cmp);
    Measured {
        ms: times[times.len() / 2],
        mib,
        loss,
    }
}

/// Ids spread over the vocabulary by a fixed formula.
fn ids(b: usize, t: usize, vocab: usize, device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = (0..b * t)
        .map(|i| ((i * 7919 + 13) % (vocab - 1000) + 1000) as i64)
        .collect();
    Tensor::from_data(TensorData::new(v, [b, t]), device)
}

fn gpt2_step(ad: &Device, b: usize, t: usize, runs: usize) -> Measured {
    let cfg = DecoderConfig::gpt2_small().with_dropout(0.0);
    ad.seed(0);
    let model = or_exit(cfg.init(ad)).train();
    let v = cfg.vocab_size;
    let tokens = ids(b, t + 1, v, ad);
    let inputs = tokens.clone().slice([0..b, 0..t]);
    let targets = tokens.slice([0..b, 1..t + 1]).reshape([b * t]);
    measure(runs, || {
        let loss = lm_loss(&model, inputs.clone(), targets.clone());
        let grads = loss.backward();
        let value = loss.into_scalar::<f32>();
        drop(grads);
        value
    })
}

fn bert_step(ad: &Device, b: usize, t: usize, runs: usize) -> Measured {
    let mut cfg = BertConfig::bert_base_uncased();
    cfg.hidden_dropout_prob = 0.0;
    cfg.attention_probs_dropout_prob = 0.0;
    ad.seed(0);
    let model = or_exit(BertForSequenceClassification::new(&cfg, 2, ad)).train();
    let tokens = ids(b, t, cfg.vocab_size, ad);
    let labels: Vec<i64> = (0..b as i64).map(|i| i % 2).collect();
    let labels = Tensor::<1, Int>::from_data(TensorData::new(labels, [b]), ad);
    measure(runs, || {
        let logits = model
            .forward(EncoderInput::new(tokens.clone()))
            .expect("a valid input");
        let loss = cross_entropy(logits, labels.clone(), None);
        let grads = loss.backward();
        let value = loss.into_scalar::<f32>();
        drop(grads);
        value
    })
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let (name, b, t) = match args.model {
        Model::Gpt2 => (
            "gpt2-small",
            args.batch.unwrap_or(8),
            args.len.unwrap_or(512),
        ),
        Model::Bert => (
            "bert-base",
            args.batch.unwrap_or(16),
            args.len.unwrap_or(128),
        ),
    };
    let step = |ad: &Device| match args.model {
        Model::Gpt2 => gpt2_step(ad, b, t, args.common.runs),
        Model::Bert => bert_step(ad, b, t, args.common.runs),
    };
    let ad = device.clone().autodiff();
    let plain = step(&ad);
    let before = zoo_kernels::recompute::reruns();
    let ckpt = step(&ad.clone().gradient_checkpointing());
    let reruns = zoo_kernels::recompute::reruns() - before;
    println!(
        "{name} training step {b}x{t} on {}: plain {:.0} ms, {:.0} MiB beyond the model, loss {:.6}",
        args.common.device, plain.ms, plain.mib, plain.loss
    );
    println!(
        "  with gradient checkpointing: {:.0} ms ({:.2}x), {:.0} MiB ({:.2}x), loss {:.6}, {reruns} layers run again",
        ckpt.ms,
        ckpt.ms / plain.ms,
        ckpt.mib,
        ckpt.mib / plain.mib,
        ckpt.loss
    );
    if plain.loss != ckpt.loss {
        eprintln!(
            "error: the checkpointed step's loss {} is not the plain step's {}",
            ckpt.loss, plain.loss
        );
        std::process::exit(1);
    }
}
