//! Grapheme-to-phoneme on the CMU Pronouncing Dictionary with the original Transformer:
//! trained through the shared learner, decoded greedily with the KV cache, scored by word
//! and phoneme error rate on a held-out split of words, with pronunciations of words the
//! dictionary does not have and a cross-attention alignment picture.
//!
//! ```sh
//! cargo run --release --example g2p
//! cargo run --release --example g2p -- --epochs 30 --d-model 256 --d-ff 1024   # longer
//! cargo run --release --example g2p --features wgpu -- --device wgpu
//! cargo run --release --example g2p -- --write-tsv artifacts/g2p-tsv   # for zoo train
//! ```

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use zoo_examples::g2p::{G2pSettings, alignment_png, data, predict, score, train, write_tsv};
use zoo_examples::{
    Error, device_or_exit, exit_on_error, or_exit_on_earlier_run, require_positive,
};
use zoo_train::FitOptions;

#[derive(Parser, Debug)]
#[command(about = "Train a Transformer to pronounce English words (CMUdict) and score it")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// Passes over the training words.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Pronunciations per batch.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Model width.
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    /// Encoder layers, and as many decoder layers.
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Feed-forward width.
    #[arg(long, default_value_t = 512)]
    d_ff: usize,
    /// Seed of the split, the model and the batch order.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Train on only this many words (all by default).
    #[arg(long)]
    train_words: Option<usize>,
    /// Learner artifacts, the alignment PNG and the trained model.
    #[arg(long, default_value = "artifacts/g2p")]
    artifacts: PathBuf,
    /// Replace an earlier run in the artifact folder.
    #[arg(long)]
    overwrite: bool,
    /// Write the split as TSV files and a starting folder (config and tokenizer) for
    /// `zoo train --from-scratch --task seq2seq` into this folder, and stop.
    #[arg(long)]
    write_tsv: Option<PathBuf>,
}

/// Words to pronounce that the dictionary does not have (any it has are left out).
const NEW_WORDS: [&str; 8] = [
    "tokenizer",
    "rustacean",
    "grok",
    "pytorch",
    "emoji",
    "dataloader",
    "huggingface",
    "backprop",
];

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    require_positive(&[
        ("epochs", args.epochs),
        ("batch", args.batch),
        ("d-model", args.d_model),
        ("layers", args.layers),
        ("heads", args.heads),
        ("d-ff", args.d_ff),
    ])?;
    let device = device_or_exit(&args.device);
    let started = Instant::now();
    let mut s = G2pSettings::new(args.epochs, &args.artifacts);
    s.batch = args.batch;
    s.lr = args.lr;
    s.d_model = args.d_model;
    s.layers = args.layers;
    s.heads = args.heads;
    s.d_ff = args.d_ff;
    s.seed = args.seed;
    s.train_words = args.train_words;
    s.device = args.device.clone();
    s.overwrite = args.overwrite;
    let d = data(s.seed)?;
    if let Some(dir) = &args.write_tsv {
        for path in write_tsv(&d, &s, dir)? {
            println!("wrote {}", path.display());
        }
        return Ok(());
    }
    let (vocab, train_set, valid, test) = (&d.vocab, &d.train, &d.valid, &d.test);
    println!(
        "CMUdict: {} train, {} validation ({} read each epoch), {} test words (split by word, \
         seed {}); {} phonemes",
        train_set.len(),
        valid.len(),
        s.valid_words.min(valid.len()),
        test.len(),
        s.seed,
        vocab.phones.len()
    );
    println!(
        "model: Transformer, {} + {} layers, width {}, {} heads, feed-forward {}; batch {}, lr {}, {} epochs",
        s.layers, s.layers, s.d_model, s.heads, s.d_ff, s.batch, s.lr, s.epochs
    );
    let (model, epochs) = or_exit_on_earlier_run(
        train(&s, &d, &device, FitOptions::default()),
        "--overwrite replaces it",
    )?;
    for (i, e) in epochs.iter().enumerate() {
        println!(
            "epoch {:>2}: train loss {:.4}, validation loss {:.4}",
            i + 1,
            e.get("train_loss").copied().unwrap_or(f64::NAN),
            e.get("valid_loss").copied().unwrap_or(f64::NAN)
        );
    }
    let trained = started.elapsed();
    let words: Vec<String> = test.iter().map(|e| e.word.clone()).collect();
    let predictions = predict(&model, vocab, &words, 512)?;
    let (wer, per) = score(test, &predictions);
    println!(
        "test ({} words, greedy): WER {wer:.1}%, PER {per:.2}% (trained in {:.0} s, scored in {:.0} s)",
        test.len(),
        trained.as_secs_f64(),
        (started.elapsed() - trained).as_secs_f64()
    );
    println!("some test words:");
    for (e, p) in test.iter().zip(&predictions).take(8) {
        let refs: Vec<String> = e.pronunciations.iter().map(|r| r.join(" ")).collect();
        println!(
            "  {:<14} {:<24} reference {}",
            e.word,
            p.join(" "),
            refs.join(" | ")
        );
    }
    let known: std::collections::HashSet<&str> = train_set
        .iter()
        .chain(valid)
        .chain(test)
        .map(|e| e.word.as_str())
        .collect();
    let new: Vec<String> = NEW_WORDS
        .iter()
        .filter(|w| !known.contains(*w))
        .map(|w| w.to_string())
        .collect();
    println!("words the dictionary does not have:");
    for (w, p) in new.iter().zip(predict(&model, vocab, &new, 16)?) {
        println!("  {w:<14} {}", p.join(" "));
    }
    std::fs::create_dir_all(&args.artifacts)?;
    let png = alignment_png(
        &model,
        vocab,
        "transformers",
        &args.artifacts.join("alignment.png"),
    )?;
    println!("cross-attention alignment: {}", png.display());
    let dir = args.artifacts.join("model");
    model.save_pretrained(&dir)?;
    println!("model: {} (an HF MarianMTModel folder)", dir.display());
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
