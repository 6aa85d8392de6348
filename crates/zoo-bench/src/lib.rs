//! Measurement helpers for the zoo's benchmarks: a counting allocator for peak memory and
//! a median timer.
//!
//! Every bench program runs on [`ALLOC`]: mimalloc, the allocator of the zoo's programs,
//! with live bytes counted.

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// The global allocator of every bench program: mimalloc, counted.
#[global_allocator]
pub static ALLOC: CountingAlloc = CountingAlloc::new();
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A global allocator (mimalloc underneath) that counts live bytes and their peak.
#[derive(Debug)]
pub struct CountingAlloc {
    live: AtomicUsize,
    peak: AtomicUsize,
}

impl CountingAlloc {
    /// A new counter (use as `#[global_allocator] static A: CountingAlloc = CountingAlloc::new();`).
    pub const fn new() -> Self {
        Self {
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Bytes allocated now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Resets the peak to the current live bytes and returns that baseline.
    pub fn reset_peak(&self) -> usize {
        let live = self.live();
        self.peak.store(live, Ordering::Relaxed);
        live
    }

    /// Highest live bytes since the last reset.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// Every call is forwarded to mimalloc unchanged; only the counters are
// updated. `GlobalAlloc` can only be implemented with `unsafe`, the one place the
// workspace allows it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { MiMalloc.alloc(layout) };
        if !p.is_null() {
            let now = self.live.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { MiMalloc.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = self
                    .live
                    .fetch_add(new_size - layout.size(), Ordering::Relaxed)
                    + new_size
                    - layout.size();
                self.peak.fetch_max(now, Ordering::Relaxed);
            } else {
                self.live
                    .fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

/// Median wall time of `runs` calls of `f` (after one warm-up call when `warmup`).
pub fn median_time(runs: usize, warmup: bool, f: impl FnMut()) -> Duration {
    let times = timed_runs(runs, warmup, f);
    times[times.len() / 2]
}

/// Wall times of `runs` calls of `f` (after one warm-up call when `warmup`), sorted.
pub fn timed_runs(runs: usize, warmup: bool, mut f: impl FnMut()) -> Vec<Duration> {
    if warmup {
        f();
    }
    let mut times: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times
}

/// Times a training step that returns its loss: three warm-up steps (the optimiser's
/// state is created on the first), then `runs` timed ones. Returns the sorted times and
/// the last loss.
///
/// # Errors
/// A last loss that is not finite, named in the message.
pub fn timed_training_steps(
    runs: usize,
    mut step: impl FnMut() -> f32,
) -> Result<(Vec<Duration>, f32), String> {
    let mut last = f32::NAN;
    let times = {
        let mut run = || last = step();
        run();
        run();
        timed_runs(runs, true, &mut run)
    };
    if !last.is_finite() {
        return Err(format!("the loss is {last}"));
    }
    Ok((times, last))
}

/// A decoder's next-token loss over a batch: the forward of `inputs` (`[B, T]` ids) and
/// the cross-entropy of its logits against `targets` (the `B T` next ids, flattened).
pub fn lm_loss(
    model: &zoo_decoder::DecoderLm,
    inputs: burn::tensor::Tensor<2, burn::tensor::Int>,
    targets: burn::tensor::Tensor<1, burn::tensor::Int>,
) -> burn::tensor::Tensor<1> {
    let logits = model
        .forward(zoo_decoder::DecoderInput::new(inputs))
        .expect("a valid input")
        .logits;
    let [b, t, v] = logits.dims();
    zoo_kernels::loss::cross_entropy(logits.reshape([b * t, v]), targets, None)
}

/// The process's peak resident memory (`VmHWM` of `/proc/self/status`) in MiB, the figure
/// the PyTorch scripts read as `ru_maxrss`; `None` where the file is missing.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The line `cargo xtask bench` reads from every bench program and PyTorch script:
/// `bench-result {"unit": ..., "median": ..., "runs": [...], "peak_rss_mib": ...}`, the
/// runs in `unit` per `per` (milliseconds per call, or per token when `per` is the tokens
/// of a call), sorted, and any `extra` figures by name.
pub fn result_line(times: &[Duration], per: usize, extra: &[(&str, f64)]) -> String {
    let mut runs: Vec<f64> = times
        .iter()
        .map(|t| t.as_secs_f64() * 1e3 / per.max(1) as f64)
        .collect();
    runs.sort_by(f64::total_cmp);
    let median = runs.get(runs.len() / 2).copied().unwrap_or(f64::NAN);
    let list: Vec<String> = runs.iter().map(|r| format!("{r:.3}")).collect();
    let peak = peak_rss_mib().map_or_else(|| "null".to_string(), |p| format!("{p:.1}"));
    let extra: String = extra
        .iter()
        .map(|(k, v)| format!(", \"{k}\": {v:.3}"))
        .collect();
    format!(
        "bench-result {{\"unit\": \"ms\", \"median\": {median:.3}, \"runs\": [{}], \"peak_rss_mib\": {peak}{extra}}}",
        list.join(", ")
    )
}

/// The options of the model bench programs: timed runs, flex's threads and the backend.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Timed runs; the median is printed.
    #[arg(long, default_value_t = 5, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub runs: usize,
    /// Threads of flex's pool; all cores when absent.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub threads: Option<usize>,
    /// Backend.
    #[arg(long, default_value = "flex")]
    pub device: String,
    /// Float type the model computes in: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Quantize the linear weights of the layer stacks to q8 or q4 (blocks of 32), as
    /// `zoo --quantize` does, in the programs that time a model (gpt2, bert).
    #[arg(long, value_name = "q8|q4")]
    pub quantize: Option<String>,
    /// Turn the zoo's kernels off (zoo-kernels: the product with quantized weights on
    /// flex), so that every op takes Burn's own path, for comparison.
    #[arg(long)]
    pub no_kernels: bool,
}

impl Common {
    /// [`start`] with these options.
    ///
    /// # Errors
    /// As [`start`].
    pub fn start(&self) -> Result<burn::tensor::Device, String> {
        if self.no_kernels {
            zoo_kernels::set_enabled(false);
        }
        let float: zoo_device::FloatType = self.dtype.parse().map_err(|e| format!("{e}"))?;
        start_as(self.threads, &self.device, float)
    }

    /// The quantization `--quantize` asks for (blocks of 32), if any.
    ///
    /// # Errors
    /// An unknown scheme.
    pub fn quant_options(&self) -> Result<Option<zoo_core::QuantOptions>, String> {
        let Some(bits) = &self.quantize else {
            return Ok(None);
        };
        let bits: zoo_core::QuantBits = bits.parse().map_err(|e| format!("{e}"))?;
        Ok(Some(zoo_core::QuantOptions::per_block(bits, 32)))
    }

    /// `model` with its layer stacks' linear weights quantized when `--quantize` asks.
    ///
    /// # Errors
    /// An unknown scheme, or a backend that cannot run it.
    pub fn quantized<M: burn::module::Module>(
        &self,
        model: M,
        device: &burn::tensor::Device,
    ) -> Result<M, String> {
        let Some(options) = self.quant_options()? else {
            return Ok(model);
        };
        zoo_core::quantize_linear_weights(model, &options, device)
            .map(|(model, _)| model)
            .map_err(|e| e.to_string())
    }
}

/// The start of every bench program: sizes flex's thread pool (all cores when `threads`
/// is `None`) and opens the backend named `device`.
///
/// # Errors
/// A pool that cannot be built, or a backend that is not compiled in, as a message for
/// the program to print.
pub fn start(threads: Option<usize>, device: &str) -> Result<burn::tensor::Device, String> {
    start_as(threads, device, zoo_device::FloatType::F32)
}

/// [`start`] with the device computing in `float`.
///
/// # Errors
/// As [`start`], and a backend without that float type.
pub fn start_as(
    threads: Option<usize>,
    device: &str,
    float: zoo_device::FloatType,
) -> Result<burn::tensor::Device, String> {
    if let Some(threads) = threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .map_err(|e| format!("cannot run on {threads} threads: {e}"))?;
    }
    zoo_device::select_by_name_as(device, float).map_err(|e| e.to_string())
}
