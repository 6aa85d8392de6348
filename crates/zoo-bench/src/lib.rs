//! Measurement helpers for the zoo's benchmarks: a counting allocator for peak memory and
//! a median timer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A global allocator that counts live bytes and their peak.
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

// Every call is forwarded to the system allocator unchanged; only the counters are
// updated. `GlobalAlloc` can only be implemented with `unsafe`, the one place the
// workspace allows it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = self.live.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
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
pub fn median_time(runs: usize, warmup: bool, mut f: impl FnMut()) -> Duration {
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
    times[times.len() / 2]
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
}

impl Common {
    /// [`start`] with these options.
    ///
    /// # Errors
    /// As [`start`].
    pub fn start(&self) -> Result<burn::tensor::Device, String> {
        start(self.threads, &self.device)
    }
}

/// The start of every bench program: sizes flex's thread pool (all cores when `threads`
/// is `None`) and opens the backend named `device`.
///
/// # Errors
/// A pool that cannot be built, or a backend that is not compiled in, as a message for
/// the program to print.
pub fn start(threads: Option<usize>, device: &str) -> Result<burn::tensor::Device, String> {
    if let Some(threads) = threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .map_err(|e| format!("cannot run on {threads} threads: {e}"))?;
    }
    zoo_device::select_by_name(device).map_err(|e| e.to_string())
}
