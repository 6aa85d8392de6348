//! Masked-LM pretraining of a small BERT on Shakespeare, with a WordPiece vocabulary
//! trained on the same plays. BERT's recipe (15% of the tokens chosen; 80% `[MASK]`, 10%
//! a random word, 10% kept) is drawn afresh for every pass over the passages (dynamic
//! masking), seeded. Plays are split whole: the validation plays are never trained on.
//! Reports the loss and masked-token accuracy each round beside a unigram baseline, then
//! fills masks in a few lines, and saves the model and tokenizer as an HF checkpoint
//! folder that the `genre` example fine-tunes.
//!
//! ```sh
//! cargo run --release --example bert-mlm
//! cargo run --release --example bert-mlm -- --steps 3000 --eval-every 500 --overwrite
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use clap::Parser;
use rand::SeedableRng;
use rand::rngs::StdRng;
use zoo_data::CausalLmBatcher;
use zoo_encoder::SPECIAL_TOKENS;
use zoo_encoder::{
    BertConfig, BertForMaskedLm, BertTokenizer, EncoderInput, MaskingConfig, masked_items,
};
use zoo_examples::{
    Error, device_or_exit, exit_on_error, globe, or_exit_on_earlier_run, require_positive,
};
use zoo_train::{CausalLmTask, TrainConfig, fit};

#[derive(Parser, Debug)]
#[command(about = "Pretrain a small BERT by masked LM on Shakespeare, then fill masks")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// Optimiser steps.
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Steps between validations (divides --steps).
    #[arg(long, default_value_t = 500)]
    eval_every: usize,
    /// Passages per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Dropout on the embeddings, the sub-layer outputs and the attention weights.
    #[arg(long, default_value_t = 0.1)]
    dropout: f64,
    /// Warm-up steps, as a share of --steps.
    #[arg(long, default_value_t = 0.05)]
    warmup: f64,
    /// WordPiece vocabulary size.
    #[arg(long, default_value_t = 4000)]
    vocab: usize,
    /// Longest passage in tokens.
    #[arg(long, default_value_t = 64)]
    max_len: usize,
    /// Use this `tokenizer.json` (from an earlier run's `<artifacts>/model`) instead of
    /// training a vocabulary. Training one twice on the same lines can give slightly
    /// different vocabularies, so this is how a run is repeated exactly.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Seed of the split, the masks and the weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Learner artifacts; the trained model and tokenizer go to `<artifacts>/model`.
    #[arg(long, default_value = "artifacts/bert-mlm")]
    artifacts: PathBuf,
    /// Replace an earlier run in the artifact folder.
    #[arg(long)]
    overwrite: bool,
}

/// Plays held out for validation (a comedy, a tragedy, a history); `genre` tests on them.
const VALID_PLAYS: [&str; 3] = globe::HELD_OUT_PLAYS;

const PROBES: [&str; 5] = [
    "To be, or not to [MASK]: that is the question.",
    "Now is the winter of our [MASK] made glorious summer.",
    "O Romeo, Romeo! wherefore art thou [MASK]?",
    "My lord, the [MASK] is coming.",
    "Good night, sweet [MASK].",
];

/// The top `k` tokens at each `[MASK]` of `text`.
fn fill(
    model: &BertForMaskedLm,
    tok: &BertTokenizer,
    text: &str,
    k: usize,
    device: &Device,
) -> Result<Vec<Vec<(String, f32)>>, Error> {
    let e = tok.encode(text)?;
    let ids: Vec<i64> = e.ids.iter().map(|&i| i64::from(i)).collect();
    let n = ids.len();
    let input = EncoderInput::new(Tensor::<2, Int>::from_data(
        TensorData::new(ids, [1, n]),
        device,
    ));
    let probs = burn::tensor::activation::softmax(model.forward(input)?, 2);
    let v = tok.vocab_size();
    let values = probs
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let mut out = Vec::new();
    for (t, &id) in e.ids.iter().enumerate() {
        if id == tok.mask_id() {
            let row = &values[t * v..(t + 1) * v];
            let mut order: Vec<usize> = (0..v).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            out.push(
                order[..k]
                    .iter()
                    .map(|&i| (tok.id_token(i as u32).unwrap_or_default(), row[i]))
                    .collect(),
            );
        }
    }
    Ok(out)
}

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    require_positive(&[
        ("steps", args.steps),
        ("batch", args.batch),
        ("eval-every", args.eval_every),
    ])?;
    if !(args.lr > 0.0 && args.lr.is_finite()) {
        return Err(format!("--lr must be a positive number, got {}", args.lr).into());
    }
    if !(0.0..1.0).contains(&args.warmup) {
        return Err(format!("--warmup must be in [0, 1), got {}", args.warmup).into());
    }
    let device = device_or_exit(&args.device);
    let started = Instant::now();

    // Every work but the validation plays trains the vocabulary and the model.
    let works = globe::genres()?;
    let mut train_lines = Vec::new();
    let mut valid_lines = Vec::new();
    for (work, _) in &works {
        let lines = globe::lines(work)?;
        if VALID_PLAYS.contains(&work.as_str()) {
            valid_lines.extend(lines);
        } else {
            train_lines.extend(lines);
        }
    }
    let tok = match &args.tokenizer {
        Some(path) => BertTokenizer::from_file(path, args.max_len)?,
        None => BertTokenizer::train(train_lines.iter(), args.vocab, 2, true, args.max_len)?,
    };
    let train = globe::passages(&tok, &train_lines, args.max_len)?;
    let valid = globe::passages(&tok, &valid_lines, args.max_len)?;
    let words: Vec<u32> = (SPECIAL_TOKENS.len() as u32..tok.vocab_size() as u32).collect();
    println!(
        "wordpiece: {} tokens {}; {} training passages, {} validation passages ({}) of at most {} tokens",
        tok.vocab_size(),
        match &args.tokenizer {
            Some(path) => format!("read from {}", path.display()),
            None => format!("trained on {} lines", train_lines.len()),
        },
        train.len(),
        valid.len(),
        VALID_PLAYS.join(", "),
        args.max_len
    );

    // Dynamic masking: a fresh draw for each pass over the passages.
    let mut rng = StdRng::seed_from_u64(args.seed);
    let needed = args.steps * args.batch;
    let mut train_items = Vec::with_capacity(needed + train.len());
    while train_items.len() < needed {
        let mut pass = masked_items(&tok, &train, &words, &MaskingConfig::default(), &mut rng)?;
        zoo_data::seeded_shuffle(&mut pass, args.seed + train_items.len() as u64);
        train_items.extend(pass);
    }
    train_items.truncate(needed);
    let valid_items = masked_items(
        &tok,
        &valid,
        &words,
        &MaskingConfig::default(),
        &mut StdRng::seed_from_u64(args.seed + 1),
    )?;

    // The unigram baseline: the training set's most frequent word, everywhere.
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for e in &train {
        for (&id, &s) in e.ids.iter().zip(&e.special) {
            if !s {
                *counts.entry(id).or_default() += 1;
            }
        }
    }
    let total: usize = counts.values().sum();
    let (&top_id, _) = counts
        .iter()
        .max_by_key(|(id, c)| (**c, std::cmp::Reverse(**id)))
        .ok_or("no training tokens")?;
    let labels: Vec<usize> = valid_items
        .iter()
        .flat_map(|i| i.target.iter().flatten().copied())
        .collect();
    let unigram_acc =
        labels.iter().filter(|&&l| l == top_id as usize).count() as f64 / labels.len() as f64;
    let unigram_loss = labels
        .iter()
        .map(|l| {
            let c = counts.get(&(*l as u32)).copied().unwrap_or(0) as f64;
            -((c + 1.0) / (total as f64 + tok.vocab_size() as f64)).ln()
        })
        .sum::<f64>()
        / labels.len() as f64;

    let mut bert = BertConfig::new(tok.vocab_size(), 128, 4, 4, 512);
    bert.max_position_embeddings = args.max_len;
    bert.hidden_dropout_prob = args.dropout;
    bert.attention_probs_dropout_prob = args.dropout;
    let mut cfg = TrainConfig::steps(args.steps, args.eval_every, &args.artifacts);
    cfg.batch_size = args.batch;
    cfg.lr = args.lr;
    cfg.min_lr = args.lr / 10.0;
    cfg.warmup_steps = (args.steps as f64 * args.warmup).round() as usize;
    cfg.weight_decay = 0.01;
    cfg.seed = args.seed;
    cfg.devices = vec![args.device.clone()];
    cfg.overwrite = args.overwrite;
    device.seed(args.seed);
    let model = BertForMaskedLm::new(&bert, &device.clone().autodiff())?;
    println!(
        "BERT: 4 layers, width 128, 4 heads: {} parameters; {} steps of {} passages",
        model.num_params(),
        args.steps,
        args.batch
    );
    let fitted = or_exit_on_earlier_run(
        fit(
            CausalLmTask::new(model),
            train_items,
            valid_items,
            CausalLmBatcher::new(tok.pad_id() as usize),
            &cfg,
            std::slice::from_ref(&device),
            zoo_examples::printing(),
        )
        .map_err(Error::from),
        "--overwrite replaces it, --artifacts chooses another folder",
    )?;
    println!(
        "\n{:>6}  {:>10}  {:>10}  {:>14}",
        "step", "train_loss", "valid_loss", "valid_accuracy"
    );
    for e in &fitted.epochs {
        let get = |k: &str| e.get(k).copied().unwrap_or(f64::NAN);
        println!(
            "{:>6}  {:>10.4}  {:>10.4}  {:>13.1}%",
            get("step"),
            get("train_loss"),
            get("valid_loss"),
            get("valid_accuracy")
        );
    }
    let last = fitted.epochs.last().ok_or("no rounds")?;
    let acc = last.get("valid_accuracy").copied().unwrap_or(f64::NAN);
    println!(
        "bert-mlm: valid_loss={:.4} masked_accuracy={acc:.1}% | unigram baseline: loss={unigram_loss:.4} accuracy={:.1}% (always {:?}) | {:.0}s",
        last.get("valid_loss").copied().unwrap_or(f64::NAN),
        100.0 * unigram_acc,
        tok.id_token(top_id).unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );

    let model: BertForMaskedLm = fitted.task.model.valid();
    let out = args.artifacts.join("model");
    model.save_pretrained(&out)?;
    tok.save(out.join("tokenizer.json"))?;
    println!("saved the model and its tokenizer to {}\n", out.display());
    for probe in PROBES {
        let guesses = fill(&model, &tok, probe, 5, &device)?;
        let shown: Vec<String> = guesses
            .first()
            .map(|g| {
                g.iter()
                    .map(|(t, p)| format!("{t} ({:.0}%)", 100.0 * p))
                    .collect()
            })
            .unwrap_or_default();
        println!("{probe}\n    -> {}", shown.join(", "));
    }
    Ok(())
}
