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
//! With `--train`, each call is a training step of the attention alone: queries, keys and
//! values tracked by autodiff, the forward, and the backward of `Σ out ∘ w` to the
//! gradients of all three; the memory figure is then the step's peak beyond its inputs
//! (what the backward keeps, and what it allocates).
//!
//! `cargo xtask bench sdpa [--path fused] [--len 512] [--runs 5] [--threads 2] [--device flex] [--train]`

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
    /// Time forward and backward under autodiff, not the forward alone.
    #[arg(long)]
    train: bool,
    #[command(flatten)]
    common: zoo_bench::Common,
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let (h, dh, t) = (8, 64, args.len);
    let device = if args.train {
        device.autodiff()
    } else {
        device
    };
    device.seed(0);
    let qkv = || Tensor::<4>::random([1, h, t, dh], Distribution::Normal(0.0, 1.0), &device);
    let (q, k, v) = (qkv(), qkv(), qkv());
    let w = args.train.then(qkv);
    let attend = |q: Tensor<4>, k: Tensor<4>, v: Tensor<4>| -> Tensor<4> {
        let out = match args.path {
            AttentionPath::Reference => {
                attention_reference(q, k, v, &Mask::causal(), None, None).map(|(o, _)| o)
            }
            AttentionPath::Fused => attention_fused(q, k, v, &Mask::causal(), None),
            AttentionPath::Chunked => attention_chunked(q, k, v, &Mask::causal(), None, 128, 128),
        };
        or_exit(out)
    };
    let run = || -> Tensor<4> {
        let (q, k, v) = (q.clone(), k.clone(), v.clone());
        match &w {
            None => attend(q, k, v),
            Some(w) => {
                let (q, k, v) = (q.require_grad(), k.require_grad(), v.require_grad());
                let out = attend(q.clone(), k.clone(), v.clone());
                let grads = (out * w.clone()).sum().backward();
                let dq = q.grad(&grads).expect("the queries are tracked");
                let dk = k.grad(&grads).expect("the keys are tracked");
                let dv = v.grad(&grads).expect("the values are tracked");
                dq + dk + dv
            }
        }
    };
    // The first call, alone, measures the memory held beyond the inputs.
    let base = ALLOC.reset_peak();
    read_one(run());
    let extra_mib = ALLOC.peak().saturating_sub(base) as f64 / (1024.0 * 1024.0);
    let times = time_outputs(args.common.runs, false, run);
    let what = if args.train {
        "training step (forward and backward) of"
    } else {
        ""
    };
    report(
        &args.common,
        &format!(
            "{:?} {what} causal attention, 8 heads x 64, T = {t}",
            args.path
        )
        .replace("  ", " "),
        &times,
        1,
        &format!(", {extra_mib:.1} MiB beyond the inputs"),
        &[("peak_extra_mib", extra_mib)],
    );
}
