//! Measures loading a checkpoint folder with `AutoModel::from_pretrained`, as every `zoo`
//! command does, in the float type `--dtype` sets:
//!
//! - the weights' bytes in that type (parameters × bytes each), as the backend holds them:
//!   with `--quantize q8|q4`, the layer stacks' linear weights are quantized as they are
//!   read (`AutoModel::from_pretrained_quantized`) and count at their stored size;
//! - the process's resident memory added while loading, at its peak (`VmHWM` after,
//!   less `VmRSS` before): the tensors made, any copy on the way, and what the program
//!   pages in to do it (the safetensors file is read, not memory-mapped, so its pages are
//!   not the process's);
//! - the bytes the program allocated above what it held before, at their peak (its
//!   counting allocator: the tensors and any copy made on the way, not the mapped file);
//! - the time.
//!
//! Its PyTorch counterpart is `xtask/bench/load.py` (`from_pretrained` with `dtype=`).
//!
//! `cargo xtask bench load --model DIR [--dtype f32|f16|bf16] [--quantize q8|q4] [--device flex]`

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use zoo_bench::ALLOC;
use zoo_device::FloatType;
use zoo_hub::AutoModel;

mod cli;
use cli::{or_exit, parse_and_start};

/// Measures loading a checkpoint.
#[derive(Debug, Parser)]
struct Args {
    /// The checkpoint folder.
    #[arg(long)]
    model: PathBuf,
    #[command(flatten)]
    common: zoo_bench::Common,
}

/// `VmRSS` of `/proc/self/status`, in MiB.
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let mib = |bytes: usize| bytes as f64 / f64::from(1u32 << 20);
    let before = rss_mib().unwrap_or(f64::NAN);
    let base = ALLOC.reset_peak();
    let started = Instant::now();
    let model = match args.common.quant_options() {
        Ok(None) => or_exit(AutoModel::from_pretrained(&args.model, &device)),
        Ok(Some(options)) => {
            or_exit(AutoModel::from_pretrained_quantized(
                &args.model,
                &options,
                &device,
            ))
            .0
        }
        Err(e) => or_exit(Err(e)),
    };
    let elapsed = started.elapsed();
    let allocated = mib(ALLOC.peak().saturating_sub(base));
    let peak = zoo_bench::peak_rss_mib().unwrap_or(f64::NAN);
    let float = FloatType::of(&device).unwrap_or_default();
    let float = match &args.common.quantize {
        Some(q) => format!("{float} with {q} layers"),
        None => float.to_string(),
    };
    // What the parameters take as the backend holds them, quantized ones included.
    let weights = mib(model.weight_bytes().total);
    let added = peak - before;
    println!(
        "load {} ({} parameters) as {float} on {}: {:.0} ms; weights {weights:.1} MiB; \
         resident memory +{added:.1} MiB at its peak ({:.2} × the weights; {before:.1} MiB \
         before); allocated +{allocated:.1} MiB at its peak ({:.2} × the weights)",
        args.model.display(),
        zoo_core::thousands(model.num_params()),
        args.common.device,
        elapsed.as_secs_f64() * 1e3,
        added / weights,
        allocated / weights,
    );
    println!(
        "{}",
        zoo_bench::result_line(
            &[elapsed],
            1,
            &[
                ("weights_mib", weights),
                ("rss_added_mib", added),
                ("rss_added_over_weights", added / weights),
                ("allocated_mib", allocated),
                ("allocated_over_weights", allocated / weights),
            ],
        )
    );
}
