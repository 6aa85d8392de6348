//! Times one causal attention path of `zoo-attention` on `[1, 8, T, 64]` random queries,
//! keys and values, and measures the most memory it holds beyond its inputs (counted by
//! this program's allocator, so host backends only):
//!
//! - `reference`: scores, mask and softmax as separate tensors;
//! - `fused`: the backend's fused attention;
//! - `chunked`: the memory-efficient path, blocks of 128 queries × 128 keys.
//!
//! One warm-up, then `--runs` timed calls. Its PyTorch counterpart is
//! `xtask/bench/sdpa.py` (`scaled_dot_product_attention(..., is_causal=True)`).
//!
//! `cargo xtask bench sdpa [--path fused] [--len 512] [--runs 5] [--threads 2] [--device flex]`

use burn::tensor::{Distribution, Tensor};
use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};
use zoo_attention::Mask;
use zoo_attention::sdpa::{attention_chunked, attention_fused, attention_reference};
use zoo_bench::ALLOC;

mod cli;
use cli::{or_exit, parse_and_start, read_one, report, time_outputs};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AttentionPath {
    /// Scores, mask and softmax as separate tensors.
    Reference,
    /// The backend's fused attention.
    Fused,
    /// Blocks of 128 × 128 with an online softmax.
    Chunked,
}

/// Times one attention path.
#[derive(Debug, Parser)]
struct Args {
    /// The path.
    #[arg(long, value_enum, default_value_t = AttentionPath::Fused)]
    path: AttentionPath,
    /// Sequence length T.
    #[arg(long, default_value_t = 512, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    len: usize,
    #[command(flatten)]
    common: zoo_bench::Common,
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let (h, dh, t) = (8, 64, args.len);
    device.seed(0);
    let qkv = || Tensor::<4>::random([1, h, t, dh], Distribution::Normal(0.0, 1.0), &device);
    let (q, k, v) = (qkv(), qkv(), qkv());
    let run = || -> Tensor<4> {
        let (q, k, v) = (q.clone(), k.clone(), v.clone());
        let out = match args.path {
            AttentionPath::Reference => {
                attention_reference(q, k, v, &Mask::causal(), None, None).map(|(o, _)| o)
            }
            AttentionPath::Fused => attention_fused(q, k, v, &Mask::causal(), None),
            AttentionPath::Chunked => attention_chunked(q, k, v, &Mask::causal(), None, 128, 128),
        };
        or_exit(out)
    };
    // The first call, alone, measures the memory held beyond the inputs.
    let base = ALLOC.reset_peak();
    read_one(run());
    let extra_mib = ALLOC.peak().saturating_sub(base) as f64 / (1024.0 * 1024.0);
    let times = time_outputs(args.common.runs, false, run);
    report(
        &args.common,
        &format!("{:?} causal attention, 8 heads x 64, T = {t}", args.path),
        &times,
        1,
        &format!(", {extra_mib:.1} MiB beyond the inputs"),
        &[("peak_extra_mib", extra_mib)],
    );
}
