//! Times one AdamW training step (forward, cross-entropy over every position, backward,
//! optimiser update, and the loss read back as a training loop reads it) of a small
//! character-level decoder with random weights on random ids of a 65-character
//! vocabulary:
//!
//! - `--preset char`: the tutorials' character GPT (`DecoderConfig::char_gpt`: width 64,
//!   4 heads, 4 layers, block 16, exact GELU, dropout 0.1), batch 64;
//! - `--preset gpt2` and `--preset llama`: the Shakespeare example's configuration (4
//!   layers, 4 heads, width 128, block 64, no dropout), GPT-2 style or Llama style
//!   (`llama_style()`), batch 12.
//!
//! Three warm-up steps, then the median of `--runs` steps. Its PyTorch counterpart is
//! `xtask/bench/train.py` (HF `transformers` `GPT2LMHeadModel` / `LlamaForCausalLM` of
//! the same shapes, `torch.optim.AdamW`).
//!
//! `cargo xtask bench train [--preset char|gpt2|llama] [--runs 5] [--threads 2] [--device flex]`

use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Int, Tensor, TensorData};
use clap::{Parser, ValueEnum};

mod cli;
use cli::{or_exit, parse_and_start, time_training};
use zoo_bench::lm_loss;
use zoo_decoder::DecoderConfig;

/// Characters in the Shakespeare text's vocabulary.
const VOCAB: usize = 65;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// The tutorials' character GPT, batch 64 × 16.
    Char,
    /// The Shakespeare configuration, GPT-2 style, batch 12 × 64.
    Gpt2,
    /// The Shakespeare configuration, Llama style, batch 12 × 64.
    Llama,
}

/// Times one training step.
#[derive(Debug, Parser)]
struct Args {
    /// Which model and batch.
    #[arg(long, value_enum, default_value_t = Preset::Char)]
    preset: Preset,
    #[command(flatten)]
    common: zoo_bench::Common,
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let (cfg, batch) = match args.preset {
        Preset::Char => (DecoderConfig::char_gpt(VOCAB), 64),
        Preset::Gpt2 => (DecoderConfig::new(VOCAB, 128, 4, 4, 64), 12),
        Preset::Llama => (DecoderConfig::new(VOCAB, 128, 4, 4, 64).llama_style(), 12),
    };
    let block = cfg.max_len;
    let ad = device.clone().autodiff();
    ad.seed(0);
    let mut model = or_exit(cfg.init(&ad)).train();
    let mut optim = AdamWConfig::new().with_weight_decay(0.01).init();
    // Random ids, the same formula as the PyTorch script; targets are the next ids.
    let ids: Vec<i64> = (0..batch * (block + 1))
        .map(|i| ((i * 7919 + 13) % VOCAB) as i64)
        .collect();
    let rows = |offset: usize| -> Tensor<2, Int> {
        let data: Vec<i64> = (0..batch)
            .flat_map(|r| ids[r * (block + 1) + offset..r * (block + 1) + offset + block].to_vec())
            .collect();
        Tensor::from_data(TensorData::new(data, [batch, block]), &ad)
    };
    let (inputs, targets) = (rows(0), rows(1));
    let what = format!(
        "{:?} training step ({} parameters, batch {batch} x {block})",
        args.preset,
        model.valid().num_params()
    );
    let step = || {
        let loss = lm_loss(
            &model,
            inputs.clone(),
            targets.clone().reshape([batch * block]),
        );
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model.clone(), grads);
        loss.into_scalar::<f32>()
    };
    time_training(&args.common, &what, step);
}
