//! Times and measures the peak extra memory of every attention path of `zoo-attention` on
//! flex: d_model 512, 8 heads (head size 64), batch 1, causal, at several lengths.
//!
//! `cargo xtask bench attention [--lengths 128,512,2048,8192] [--threads N]`

use burn::tensor::{Distribution, Tensor};
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use zoo_attention::Mask;
use zoo_attention::sdpa::{
    attention_chunked, attention_fused, attention_linear, attention_reference,
    attention_sliding_window,
};
use zoo_bench::{ALLOC, median_time};

/// One attention path under test.
type Path<'a> = Box<dyn Fn() -> Tensor<4> + 'a>;

/// Times every attention path of zoo-attention on flex.
#[derive(Debug, Parser)]
struct Args {
    /// Sequence lengths to time, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "128,512,2048,8192",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..)
    )]
    lengths: Vec<usize>,
    /// Threads of flex's pool (rayon's global pool); all cores when absent. Give the
    /// same number to the reference it is compared with.
    #[arg(long, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    threads: Option<usize>,
}

fn main() {
    // Unknown options and bad values end here with clap's message and exit status 2.
    let args = Args::parse();
    // Before any tensor exists, so flex has not started the default pool yet.
    let device = zoo_bench::start(args.threads, "flex").unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
    let lengths = args.lengths;
    println!("flex threads: {}", rayon::current_num_threads());
    println!();
    let (h, dh) = (8, 64);
    println!("| path | T | time (ms) | peak extra memory (MiB) |");
    println!("|---|---|---|---|");
    for &t in &lengths {
        device.seed(0);
        let q = Tensor::<4>::random([1, h, t, dh], Distribution::Normal(0.0, 1.0), &device);
        let k = Tensor::<4>::random([1, h, t, dh], Distribution::Normal(0.0, 1.0), &device);
        let v = Tensor::<4>::random([1, h, t, dh], Distribution::Normal(0.0, 1.0), &device);
        let runs = if t >= 4096 { 1 } else { 5 };
        let paths: Vec<(&str, Path<'_>)> = vec![
            (
                "reference",
                Box::new(|| {
                    attention_reference(
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        &Mask::causal(),
                        None,
                        None,
                    )
                    .unwrap()
                    .0
                }),
            ),
            (
                "fused",
                Box::new(|| {
                    attention_fused(q.clone(), k.clone(), v.clone(), &Mask::causal(), None).unwrap()
                }),
            ),
            (
                "memory-efficient (blocks 128x128)",
                Box::new(|| {
                    attention_chunked(
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        &Mask::causal(),
                        None,
                        128,
                        128,
                    )
                    .unwrap()
                }),
            ),
            (
                "sliding window 256",
                Box::new(|| {
                    attention_sliding_window(
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        256,
                        true,
                        &[],
                        None,
                        128,
                    )
                    .unwrap()
                }),
            ),
            (
                "linear (elu+1)",
                Box::new(|| {
                    attention_linear(q.clone(), k.clone(), v.clone(), true, None, 128).unwrap()
                }),
            ),
        ];
        for (name, f) in &paths {
            let time = median_time(runs, t < 4096, || {
                let out = f();
                let _ = out.into_data();
            });
            let base = ALLOC.reset_peak();
            let out = f();
            let _ = out.into_data();
            let peak = ALLOC.peak().saturating_sub(base);
            println!(
                "| {name} | {t} | {:.1} | {:.1} |",
                time.as_secs_f64() * 1e3,
                peak as f64 / (1024.0 * 1024.0)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("attention").chain(args.iter().copied()))
    }

    #[test]
    fn threads_and_lengths_are_read() {
        let args = parse(&["--threads", "2", "--lengths", "64,256"]).unwrap();
        assert_eq!(args.threads, Some(2));
        assert_eq!(args.lengths, [64, 256]);
        let args = parse(&["--threads=1"]).unwrap();
        assert_eq!(args.threads, Some(1));
        assert_eq!(args.lengths, [128, 512, 2048, 8192]);
        assert_eq!(parse(&[]).unwrap().threads, None);
    }

    #[test]
    fn unknown_options_and_bad_values_are_errors() {
        use clap::error::ErrorKind;
        let kind = |args: &[&str]| parse(args).unwrap_err().kind();
        assert_eq!(kind(&["--thread", "2"]), ErrorKind::UnknownArgument);
        assert_eq!(kind(&["4"]), ErrorKind::UnknownArgument);
        assert_eq!(kind(&["--threads"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--threads", "0"]), ErrorKind::ValueValidation);
        assert_eq!(kind(&["--threads", "two"]), ErrorKind::ValueValidation);
        // A length that does not parse is an error, not silently dropped.
        assert_eq!(kind(&["--lengths", "128,abc"]), ErrorKind::ValueValidation);
        let message = parse(&["--thread", "2"]).unwrap_err().to_string();
        assert!(message.contains("'--thread'"), "{message}");
    }
}
