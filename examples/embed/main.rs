//! Sentence embeddings with all-MiniLM-L6-v2, as sentence-transformers computes them:
//! the cosine-similarity matrix of a few sentences (printed, and drawn as a heatmap
//! PNG), then a semantic search over lines of Shakespeare.
//!
//! ```sh
//! cargo xtask fetch minilm      # once: the model folder into the cache
//! cargo run --release --example embed
//! cargo run --release --example embed -- --query "a storm wrecks a ship at sea" --plays tempest,twelfth_night
//! ```

use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::Tensor;
use clap::Parser;
use zoo_encoder::SentenceEncoder;
use zoo_examples::{Error, device_or_exit, exit_on_error, require_positive};

#[derive(Parser, Debug)]
#[command(about = "MiniLM sentence embeddings: a similarity matrix and a semantic search")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, default_value = "flex")]
    device: String,
    /// A sentence-transformers folder (default: the one `cargo xtask fetch minilm` fills).
    #[arg(long)]
    model: Option<PathBuf>,
    /// What to search Shakespeare for.
    #[arg(long, default_value = "I am afraid of dying")]
    query: String,
    /// Plays (file names in datasets/shakespeare/globe, without .txt) to search.
    #[arg(long, default_value = "hamlet,macbeth,tempest")]
    plays: String,
    /// Results to show.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Where to draw the similarity heatmap.
    #[arg(long, default_value = "artifacts/embed/similarity.png")]
    png: PathBuf,
}

const SENTENCES: [&str; 6] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A woman is playing the violin.",
    "A girl plays a musical instrument.",
    "The stock market fell sharply today.",
    "Shares dropped as investors panicked.",
];

/// A tensor's values, on the host.
fn floats(t: Tensor<2>) -> Result<Vec<f32>, Error> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| format!("reading embeddings: {e:?}").into())
}

/// Rows of `[N, H]` unit vectors: their dot products are cosines.
fn rows(flat: &[f32], h: usize) -> Vec<&[f32]> {
    flat.chunks(h).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    require_positive(&[("top", args.top)])?;
    let device = device_or_exit(&args.device);
    let dir = args
        .model
        .clone()
        .unwrap_or_else(|| zoo_core::checkpoint::cache_dir().join("models/all-MiniLM-L6-v2"));
    if !dir.join("modules.json").is_file() {
        return Err(format!(
            "no sentence-transformers folder at {} (run `cargo xtask fetch minilm`, or pass --model DIR)",
            dir.display()
        )
        .into());
    }
    let model = SentenceEncoder::from_pretrained(&dir, &device)?;
    let h = model.bert.hidden_size();
    println!(
        "{}: {} layers, width {h}, pooling {:?}, normalize {}",
        dir.display(),
        model.bert.layers.len(),
        model.pooling,
        model.normalize
    );

    let emb = floats(model.encode(&SENTENCES, 32, &device)?)?;
    let e = rows(&emb, h);
    let sim: Vec<Vec<f32>> = e
        .iter()
        .map(|a| e.iter().map(|b| dot(a, b)).collect())
        .collect();
    println!("\ncosine similarity:");
    for (i, row) in sim.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|v| format!("{v:5.2}")).collect();
        println!("  [{i}] {}  {}", cells.join(" "), SENTENCES[i]);
    }
    if let Some(parent) = args.png.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let labels: Vec<String> = SENTENCES.iter().map(|s| s.to_string()).collect();
    let short: Vec<String> = (0..SENTENCES.len()).map(|i| format!("[{i}]")).collect();
    zoo_train::plot::heatmap(
        &args.png,
        &sim,
        &labels,
        &short,
        "all-MiniLM-L6-v2: cosine similarity",
    )?;
    println!("heatmap: {}", args.png.display());

    // Semantic search: every line of the chosen plays with some words in it.
    let globe = zoo_data::dataset_file("shakespeare/globe")?;
    let mut lines: Vec<(String, String)> = Vec::new();
    for play in args
        .plays
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let path = globe.join(format!("{play}.txt"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        lines.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| l.split_whitespace().count() >= 5)
                .map(|l| (play.to_string(), l.to_string())),
        );
    }
    if lines.is_empty() {
        return Err(format!("no lines to search in --plays {:?}", args.plays).into());
    }
    let started = Instant::now();
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    let corpus = floats(model.encode(&texts, 64, &device)?)?;
    let secs = started.elapsed().as_secs_f64();
    let query = floats(model.encode(&[args.query.as_str()], 1, &device)?)?;
    let mut scored: Vec<(f32, usize)> = rows(&corpus, h)
        .iter()
        .enumerate()
        .map(|(i, row)| (dot(row, &query), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!(
        "\nembedded {} lines in {secs:.1}s ({:.0} lines/s); top {} for {:?}:",
        lines.len(),
        lines.len() as f64 / secs,
        args.top,
        args.query
    );
    for (score, i) in scored.iter().take(args.top) {
        println!("  {score:.3}  [{}] {}", lines[*i].0, lines[*i].1);
    }
    Ok(())
}
