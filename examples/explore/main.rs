//! The tutorials' explorations as measured programs, one subcommand each, computed with
//! the zoo's own code on any backend:
//!
//! - `positions`: the sinusoidal table as a heatmap, how distinct its rows are, the
//!   similarity of position 0 with later ones, RoPE's relative-offset property, and the
//!   learned table of a trained names GPT;
//! - `permutation`: "Dog bites man." against "Man bites dog." through one attention
//!   layer, without and with positions;
//! - `attention`: all-MiniLM-L6-v2's attention on the tutorials' two Winograd sentences,
//!   a PNG per layer;
//! - `rnn`: Burn's LSTM stepped over T against one parallel self-attention layer;
//! - `memory`: the memory wall, computed and measured for the reference and the
//!   memory-efficient attention paths;
//! - `scaling`: parameters, FLOPs and Chinchilla's tokens from configs;
//! - `classifier`: the tutorials' tiny attention classifier on a task that needs
//!   attention, against mean-pooled embeddings.
//!
//! ```sh
//! cargo run --release --example explore -- positions
//! cargo run --release --example explore -- scaling --config path/to/config.json
//! ```

mod attention;
mod classifier;
mod memory;
mod permutation;
mod positions;
mod rnn;
mod scaling;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use zoo_examples::{Error, device_or_exit, exit_on_error};

#[derive(Parser, Debug)]
#[command(about = "The tutorials' explorations, measured with the zoo's own code")]
struct Args {
    #[command(subcommand)]
    what: What,
    /// Backend: flex, ndarray, wgpu, tch, tch-cuda or cuda.
    #[arg(long, global = true, default_value = "flex")]
    device: String,
    /// Folder for the PNGs.
    #[arg(long, global = true, default_value = "artifacts/explore")]
    out: PathBuf,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Sinusoidal and rotary encodings, and a trained model's learned table.
    Positions {
        /// Epochs of the names GPT whose learned table is drawn (0: skip it).
        #[arg(long, default_value_t = 10)]
        names_epochs: usize,
    },
    /// Word order through one attention layer, without and with positions.
    Permutation,
    /// All-MiniLM-L6-v2's attention on the two Winograd sentences.
    Attention {
        /// The sentence-transformers folder (`cargo xtask fetch minilm` puts it in the
        /// cache); default: the cache's copy.
        #[arg(long)]
        model: Option<PathBuf>,
    },
    /// LSTM steps against one parallel self-attention layer, over T.
    Rnn {
        /// Longest sequence timed (powers of 4 from 16).
        #[arg(long, default_value_t = 4096)]
        max_len: usize,
    },
    /// The attention matrix's memory, computed and measured.
    Memory {
        /// Longest sequence run (the longer rows are computed only).
        #[arg(long, default_value_t = 8192)]
        max_len: usize,
        /// Internal: measure one path at one length in this process, and print it.
        #[arg(long, hide = true, num_args = 2, value_names = ["PATH", "T"])]
        one: Option<Vec<String>>,
    },
    /// Parameters, FLOPs and compute-optimal tokens.
    Scaling {
        /// HF `config.json` files to add to the table.
        #[arg(long)]
        config: Vec<PathBuf>,
        /// Training tokens for the FLOPs column (default: Chinchilla's 20 per parameter).
        #[arg(long)]
        tokens: Option<f64>,
    },
    /// The tiny attention classifier against mean pooling.
    Classifier {
        /// Training epochs of each model.
        #[arg(long, default_value_t = 12)]
        epochs: usize,
    },
}

fn main() {
    exit_on_error(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Error> {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    match args.what {
        What::Scaling { config, tokens } => scaling::run(&config, tokens),
        What::Memory { max_len, one } => {
            let device = device_or_exit(&args.device);
            match one {
                Some(one) => memory::run_one(&one, &device),
                None => memory::run(max_len, &args.device, &device),
            }
        }
        other => {
            let device = device_or_exit(&args.device);
            match other {
                What::Positions { names_epochs } => {
                    positions::run(names_epochs, &args.device, &device, &args.out)
                }
                What::Permutation => permutation::run(&device),
                What::Attention { model } => attention::run(model, &device, &args.out),
                What::Rnn { max_len } => rnn::run(max_len, &device, &args.out),
                What::Classifier { epochs } => {
                    classifier::run(epochs, &args.device, &device, &args.out)
                }
                What::Scaling { .. } | What::Memory { .. } => unreachable!("handled above"),
            }
        }
    }
}
