//! A research project on the Burn Model Zoo: does a gate on the attention output help a
//! small character-level model of first names?
//!
//! The variant is the output gate of "Gated Attention for Large Language Models" (Qiu et
//! al., 2025): the attention's output is multiplied, element by element, by
//! `sigmoid(x W_g)` of the layer's normed input before it joins the residual stream.
//! Everything else is the zoo's: the attention, norms, feed-forward network, embeddings,
//! head, data, learner and generation. The layer plugs into the stock decoder through
//! `decoder::Layer`, so both models train under the same learner, on the same batches,
//! from the same seed, and the program prints both validation losses.
//!
//! ```sh
//! cargo run --release                  # 600 optimiser steps of each model
//! cargo run --release -- --steps 20    # a quick look
//! ```

use std::path::PathBuf;

// The derive of `Module` writes paths that start at `burn::`.
use burn_model_zoo::burn;

use burn::module::Module;
use burn::nn::{Dropout, Linear, LinearConfig};
use burn::tensor::Tensor;
use burn::tensor::activation::sigmoid;
use burn_model_zoo::attention::{
    BlockInput, BlockOutput, FeedForward, KvCache, Norm, SelfAttention, dropout,
};
use burn_model_zoo::data::{CausalLmBatcher, CharVocab, dataset_file, names};
use burn_model_zoo::decoder::{DecoderConfig, DecoderLm, Layer, Result as DecoderResult};
use burn_model_zoo::device::{BackendName, select};
use burn_model_zoo::model::{GenerationConfig, generate};
use burn_model_zoo::train::{CausalLmTask, FitOptions, Progress, TrainConfig, fit};

/// A pre-norm layer whose attention output passes through a sigmoid gate.
#[derive(Module, Debug)]
pub struct GatedAttentionLayer {
    norm_1: Norm,
    attn: SelfAttention,
    /// `W_g`, `[d_model, d_model]`: one gate per output channel and position.
    gate: Linear,
    norm_2: Norm,
    mlp: FeedForward,
    dropout: Dropout,
}

impl GatedAttentionLayer {
    fn run(&self, input: BlockInput, cache: Option<&mut KvCache>) -> DecoderResult<BlockOutput> {
        let x = input.hidden().clone();
        let h = self.norm_1.forward(x.clone());
        let attn_input = input.over(h.clone());
        let attn = match cache {
            Some(c) => self.attn.forward_cached(attn_input, c)?,
            None => self.attn.forward(attn_input)?,
        };
        // [B, T, d] * sigmoid([B, T, d] W_g)
        let gated: Tensor<3> = attn.context * sigmoid(self.gate.forward(h));
        let x = x + dropout(&self.dropout, gated);
        let out = self.mlp.forward(self.norm_2.forward(x.clone()));
        Ok(BlockOutput {
            self_weights: attn.weights,
            ..BlockOutput::of(x + dropout(&self.dropout, out))
        })
    }
}

impl Layer for GatedAttentionLayer {
    fn forward(&self, input: BlockInput) -> DecoderResult<BlockOutput> {
        self.run(input, None)
    }

    fn forward_cached(&self, input: BlockInput, cache: &mut KvCache) -> DecoderResult<BlockOutput> {
        self.run(input, Some(cache))
    }

    fn cache_floats_per_position(&self) -> usize {
        2 * self.attn.n_kv_heads() * self.attn.head_dim()
    }
}

/// Builds the gated model from the stock configuration: the same widths, heads, norms
/// and feed-forward network, layer for layer.
fn gated_model(
    cfg: &DecoderConfig,
    device: &burn::tensor::Device,
) -> DecoderResult<DecoderLm<GatedAttentionLayer>> {
    cfg.init_with(device, |_, block| {
        let d = block.attention.d_model;
        Ok(GatedAttentionLayer {
            norm_1: block.norm(device),
            attn: block.attention.init(device)?,
            gate: LinearConfig::new(d, d).init(device),
            norm_2: block.norm(device),
            mlp: block.ffn.init(device)?,
            dropout: burn::nn::DropoutConfig::new(block.dropout).init(),
        })
    })
}

struct Args {
    steps: usize,
    eval_every: usize,
    out: PathBuf,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        steps: 600,
        eval_every: 0,
        out: PathBuf::from("runs"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let count = |name: &str, v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or(format!("{name} must be a whole number > 0, got {v:?}"))
        };
        match flag.as_str() {
            "--steps" => args.steps = count("--steps", value("--steps")?)?,
            "--eval-every" => args.eval_every = count("--eval-every", value("--eval-every")?)?,
            "--out" => args.out = PathBuf::from(value("--out")?),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; takes --steps N, --eval-every N, --out DIR"
                ));
            }
        }
    }
    if args.eval_every == 0 {
        // Five validations, or one per step for very short runs.
        args.eval_every = (args.steps / 5).max(1);
    }
    if !args.steps.is_multiple_of(args.eval_every) {
        return Err(format!(
            "--steps {} must be a multiple of --eval-every {}",
            args.steps, args.eval_every
        ));
    }
    Ok(args)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let device = select(BackendName::Flex)?;
    let vocab = CharVocab::names();
    let all = names::load_names(&dataset_file("names/first_names.txt")?)?;
    let (train_names, valid_names) = names::split(all, 0.1, 42);
    let train = names::sequence_items(&vocab, &train_names)?;
    let valid = names::sequence_items(&vocab, &valid_names)?;
    let cfg = DecoderConfig::char_gpt(vocab.len());

    let train_config = |name: &str| {
        let mut c = TrainConfig::steps(args.steps, args.eval_every, args.out.join(name));
        c.batch_size = 64;
        c.lr = 3e-3;
        c.min_lr = 3e-4;
        c.warmup_steps = (args.steps / 10).min(50);
        c.overwrite = true;
        c
    };
    let options = || FitOptions {
        progress: Progress::Lines,
        ..FitOptions::default()
    };

    // The same seed before each model is built: the stock layers' weights are drawn the
    // same way in both, and the batches come in the same order.
    device.seed(42);
    let stock = cfg.init(&device.clone().autodiff())?;
    let stock = fit(
        CausalLmTask::new(stock),
        train.clone(),
        valid.clone(),
        CausalLmBatcher::new(0),
        &train_config("stock"),
        std::slice::from_ref(&device),
        options(),
    )?;
    device.seed(42);
    let gated = gated_model(&cfg, &device.clone().autodiff())?;
    let gated = fit(
        CausalLmTask::new(gated),
        train,
        valid,
        CausalLmBatcher::new(0),
        &train_config("gated"),
        std::slice::from_ref(&device),
        options(),
    )?;

    let last = |epochs: &[std::collections::BTreeMap<String, f64>]| {
        epochs.last().and_then(|m| m.get("valid_loss")).copied()
    };
    let (Some(stock_loss), Some(gated_loss)) = (last(&stock.epochs), last(&gated.epochs)) else {
        return Err("a run recorded no validation loss".into());
    };
    let stock_params = stock.task.model.num_params();
    let gated_params = gated.task.model.num_params();
    println!(
        "after {} steps, validation loss (nats per character):",
        args.steps
    );
    println!("  stock attention: {stock_loss:.4}  ({stock_params} parameters)");
    println!("  gated attention: {gated_loss:.4}  ({gated_params} parameters)");

    // The gated model generates through the zoo's KV-cached loop like the stock one.
    let model = gated.task.model.valid().to_device(&device);
    let start = vocab.id('$').ok_or("no '$' in the names vocabulary")?;
    let sampling = GenerationConfig::sampling(model.max_len() - 1, 0.8, 7)
        .with_top_k(10)
        .with_stop_tokens(vec![start]);
    let out = generate(&model, &vec![vec![start]; 5], &sampling, |_, _| {})?;
    let samples: Vec<String> = out
        .tokens
        .iter()
        .map(|t| {
            let body: Vec<usize> = t.iter().copied().take_while(|&c| c != start).collect();
            vocab.decode(&body)
        })
        .collect::<Result<_, _>>()?;
    println!("  gated samples: {}", samples.join(", "));
    Ok(())
}
