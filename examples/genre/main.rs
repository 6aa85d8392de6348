//! Genre classification: is a passage of Shakespeare from a comedy, a tragedy or a
//! history? Works are split whole, so no play is in two splits: the test plays are
//! `globe::HELD_OUT_PLAYS` (which `bert-mlm` never trains on), one validation play per
//! genre is drawn from the rest with the seed, and the others train. The model
//! fine-tunes the `bert-mlm` checkpoint when there is one, else trains from scratch with
//! a WordPiece vocabulary trained on the training plays. Prints the test accuracy beside
//! the majority-class baseline, and the confusion matrix.
//!
//! ```sh
//! cargo run --release --example bert-mlm     # optional: the pretrained checkpoint
//! cargo run --release --example genre
//! cargo run --release --example genre -- --write-csv artifacts/genre-csv   # for zoo train
//! ```

use std::path::PathBuf;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::tensor::Device;
use clap::Parser;
use zoo_core::ClassificationBatch;
use zoo_encoder::{
    BertConfig, BertForSequenceClassification, BertModel, BertTokenizer, EncoderInput, Encoding,
};
use zoo_examples::{
    Error, device_or_exit, exit_on_error, globe, or_exit_on_earlier_run, require_positive,
};
use zoo_train::{ClassificationTask, TrainConfig, fit};

#[derive(Parser, Debug)]
#[command(about = "Classify Shakespeare passages as comedy, tragedy or history")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// The pretrained checkpoint folder (config.json, model.safetensors, tokenizer.json);
    /// when it is missing the model trains from scratch.
    #[arg(long, default_value = "artifacts/bert-mlm/model")]
    pretrained: PathBuf,
    /// Epochs.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Passages per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Training passages per play at most, spread evenly over the play (0: all).
    #[arg(long, default_value_t = 150)]
    per_play: usize,
    /// Longest passage in tokens.
    #[arg(long, default_value_t = 64)]
    max_len: usize,
    /// Seed of the split and the weights.
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// Learner artifacts.
    #[arg(long, default_value = "artifacts/genre")]
    artifacts: PathBuf,
    /// Replace an earlier run in the artifact folder.
    #[arg(long)]
    overwrite: bool,
    /// Write the split's passages as DIR/train.csv, valid.csv and test.csv (columns
    /// text, label) for `zoo train --task classification`, and stop.
    #[arg(long, value_name = "DIR")]
    write_csv: Option<PathBuf>,
}

const GENRES: [&str; 3] = ["comedy", "history", "tragedy"];

#[derive(Debug, Clone)]
struct Item {
    passage: Encoding,
    label: usize,
}

#[derive(Debug, Clone)]
struct GenreBatcher {
    tok: BertTokenizer,
}

impl Batcher<Item, ClassificationBatch<EncoderInput>> for GenreBatcher {
    fn batch(&self, items: Vec<Item>, device: &Device) -> ClassificationBatch<EncoderInput> {
        let labels: Vec<i64> = items.iter().map(|i| i.label as i64).collect();
        let n = labels.len();
        let batch = self
            .tok
            .pad(items.into_iter().map(|i| i.passage).collect())
            .expect("the loader never makes an empty batch");
        ClassificationBatch::new(
            EncoderInput::from_batch(&batch, device),
            burn::tensor::Tensor::from_data(burn::tensor::TensorData::new(labels, [n]), device),
        )
    }
}

/// The passages of `plays`, at most `per_play` of each (every k-th), 0 meaning all.
fn items(
    tok: &BertTokenizer,
    plays: &[(String, usize)],
    max_len: usize,
    per_play: usize,
) -> Result<Vec<Item>, Error> {
    let mut out = Vec::new();
    for (play, label) in plays {
        let all = globe::passages(tok, &globe::lines(play)?, max_len)?;
        let stride = if per_play == 0 {
            1
        } else {
            all.len().div_ceil(per_play).max(1)
        };
        for passage in all.into_iter().step_by(stride) {
            out.push(Item {
                passage,
                label: *label,
            });
        }
    }
    Ok(out)
}

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    require_positive(&[("epochs", args.epochs), ("batch", args.batch)])?;
    let device = device_or_exit(&args.device);
    let started = Instant::now();

    // The split, by play.
    let mut test = Vec::new();
    let mut rest: Vec<Vec<String>> = vec![Vec::new(); GENRES.len()];
    for (work, genre) in globe::genres()? {
        let Some(label) = GENRES.iter().position(|g| *g == genre) else {
            continue; // romance and poems are not among the three classes
        };
        if globe::HELD_OUT_PLAYS.contains(&work.as_str()) {
            test.push((work, label));
        } else {
            rest[label].push(work);
        }
    }
    let (mut train, mut valid) = (Vec::new(), Vec::new());
    for (label, plays) in rest.iter_mut().enumerate() {
        zoo_data::seeded_shuffle(plays, args.seed + label as u64);
        valid.push((plays[0].clone(), label));
        train.extend(plays[1..].iter().map(|p| (p.clone(), label)));
    }
    println!(
        "plays: {} train, valid {:?}, test {:?}",
        train.len(),
        valid.iter().map(|p| &p.0).collect::<Vec<_>>(),
        test.iter().map(|p| &p.0).collect::<Vec<_>>()
    );

    // The model: the pretrained encoder when there is one.
    let ad = device.clone().autodiff();
    device.seed(args.seed);
    let pretrained = args.pretrained.join("config.json").is_file();
    let (tok, model) = if pretrained {
        let tok = BertTokenizer::from_file(args.pretrained.join("tokenizer.json"), args.max_len)?;
        let bert = BertModel::from_pretrained(&args.pretrained, &ad)?;
        let model = BertForSequenceClassification::from_encoder(bert, GENRES.len(), &ad)?;
        println!("fine-tuning {}", args.pretrained.display());
        (tok, model)
    } else {
        let mut lines = Vec::new();
        for (play, _) in &train {
            lines.extend(globe::lines(play)?);
        }
        let tok = BertTokenizer::train(lines.iter(), 4000, 2, true, args.max_len)?;
        let mut cfg = BertConfig::new(tok.vocab_size(), 128, 4, 4, 512);
        cfg.max_position_embeddings = args.max_len;
        println!(
            "no checkpoint at {}: training from scratch",
            args.pretrained.display()
        );
        (
            tok,
            BertForSequenceClassification::new(&cfg, GENRES.len(), &ad)?,
        )
    };
    let train_items = items(&tok, &train, args.max_len, args.per_play)?;
    let valid_items = items(&tok, &valid, args.max_len, 0)?;
    let test_items = items(&tok, &test, args.max_len, 0)?;
    println!(
        "passages of at most {} tokens: {} train, {} valid, {} test; {} parameters",
        args.max_len,
        train_items.len(),
        valid_items.len(),
        test_items.len(),
        model.num_params()
    );

    if let Some(dir) = &args.write_csv {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, items) in [
            ("train", &train_items),
            ("valid", &valid_items),
            ("test", &test_items),
        ] {
            let path = dir.join(format!("{name}.csv"));
            let mut csv = String::from("text,label\n");
            for item in items.iter() {
                let text = tok.decode(&item.passage.ids)?.replace('"', "\"\"");
                csv.push_str(&format!("\"{text}\",{}\n", GENRES[item.label]));
            }
            zoo_train::write_atomic(&path, csv.as_bytes())?;
            println!("wrote {} ({} passages)", path.display(), items.len());
        }
        return Ok(());
    }

    let mut cfg = TrainConfig::new(args.epochs, &args.artifacts);
    cfg.batch_size = args.batch;
    cfg.lr = if pretrained { 2e-4 } else { 5e-4 };
    cfg.min_lr = cfg.lr / 10.0;
    cfg.warmup_steps = 50;
    cfg.weight_decay = 0.01;
    cfg.seed = args.seed;
    cfg.devices = vec![args.device.clone()];
    cfg.overwrite = args.overwrite;
    let batcher = GenreBatcher { tok: tok.clone() };
    let fitted = or_exit_on_earlier_run(
        fit(
            ClassificationTask::new(model),
            train_items.clone(),
            valid_items,
            batcher.clone(),
            &cfg,
            std::slice::from_ref(&device),
            zoo_examples::printing(),
        )
        .map_err(Error::from),
        "--overwrite replaces it, --artifacts chooses another folder",
    )?;
    for (i, e) in fitted.epochs.iter().enumerate() {
        let get = |k: &str| e.get(k).copied().unwrap_or(f64::NAN);
        println!(
            "epoch {}: train_loss {:.4} valid_loss {:.4} valid_accuracy {:.1}%",
            i + 1,
            get("train_loss"),
            get("valid_loss"),
            get("valid_accuracy")
        );
    }

    // Test: the trained model on the held-out plays.
    let model: BertForSequenceClassification = fitted.task.model.valid();
    let mut confusion = [[0usize; 3]; 3];
    for chunk in test_items.chunks(64) {
        let batch = batcher.batch(chunk.to_vec(), &device);
        for (item, p) in chunk.iter().zip(model.predict(batch.inputs)?) {
            confusion[item.label][p] += 1;
        }
    }
    let n = test_items.len();
    let right: usize = (0..3).map(|i| confusion[i][i]).sum();
    let accuracy = 100.0 * right as f64 / n as f64;
    // The majority baseline, at its strictest: always the genre with the most *test*
    // passages (the best any single-genre guess can do on this test set).
    let majority = (0..3)
        .max_by_key(|&g| confusion[g].iter().sum::<usize>())
        .unwrap_or(0);
    let baseline = 100.0 * confusion[majority].iter().sum::<usize>() as f64 / n as f64;
    println!("\nconfusion matrix (rows: true genre, columns: predicted):");
    println!(
        "{:>10} {:>8} {:>8} {:>8}",
        "", GENRES[0], GENRES[1], GENRES[2]
    );
    for (g, row) in confusion.iter().enumerate() {
        println!(
            "{:>10} {:>8} {:>8} {:>8}",
            GENRES[g], row[0], row[1], row[2]
        );
    }
    println!(
        "genre: test_accuracy={accuracy:.1}% majority_baseline={baseline:.1}% (always {}) over {n} passages | {} | {:.0}s",
        GENRES[majority],
        if pretrained {
            "fine-tuned from bert-mlm"
        } else {
            "from scratch"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
