//! Times and measures the peak extra memory of every attention path of `zoo-attention` on
//! flex: d_model 512, 8 heads (head size 64), batch 1, causal, at several lengths.
//!
//! `cargo xtask bench attention [--lengths 128,512,2048,8192] [--threads N]`

use burn::tensor::{Distribution, Tensor};
use zoo_attention::Mask;
use zoo_attention::sdpa::{
    attention_chunked, attention_fused, attention_linear, attention_reference,
    attention_sliding_window,
};
use zoo_bench::{CountingAlloc, median_time};

/// One attention path under test.
type Path<'a> = Box<dyn Fn() -> Tensor<4> + 'a>;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lengths: Vec<usize> = args
        .iter()
        .position(|a| a == "--lengths")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![128, 512, 2048, 8192]);
    let device = zoo_device::select(zoo_device::BackendName::Flex).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
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
