//! What every bench program does around its measurement, kept out of the library: the
//! start (options, backend), the timing of calls that return a tensor, the printed lines
//! and `error: ...` exits. Each program includes this file as its `cli` module.

#![allow(dead_code)] // each program uses a part

use std::time::Duration;

use burn::tensor::{Device, Tensor};

/// Parses the program's options (clap's message and exit status 2 on a bad one), then
/// opens the backend that the options' [`zoo_bench::Common`] name, or prints `error: ...`
/// and exits with status 2.
pub fn parse_and_start<A: clap::Parser>(common: fn(&A) -> &zoo_bench::Common) -> (A, Device) {
    let args = A::parse();
    let device = start_or_exit(common(&args));
    (args, device)
}

/// [`zoo_bench::Common::start`], or `error: ...` on stderr and exit status 2.
pub fn start_or_exit(common: &zoo_bench::Common) -> Device {
    common.start().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    })
}

/// Exits with status 1 after printing `error: {e}`, for the programs' set-up.
pub fn or_exit<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1);
    })
}

/// Sorted wall times of `runs` calls of `f` (after one warm-up call when `warmup`), each
/// waiting for the backend by reading one value of the tensor it returns.
pub fn time_outputs<const D: usize>(
    runs: usize,
    warmup: bool,
    mut f: impl FnMut() -> Tensor<D>,
) -> Vec<Duration> {
    zoo_bench::timed_runs(runs, warmup, || read_one(f()))
}

/// The figures of what `model`'s weights take in memory, for [`report`]'s `extra`: all of
/// them in MiB (`weights_mib`), and the bytes per value of the quantized ones, scales
/// included (`quantized_bytes_per_value`; 0 when none is quantized).
pub fn weight_figures(model: &impl burn::module::Module) -> [(&'static str, f64); 2] {
    let w = zoo_core::quant::weight_bytes(model);
    let per_value = if w.quantized_values == 0 {
        0.0
    } else {
        w.quantized as f64 / w.quantized_values as f64
    };
    [
        ("weights_mib", w.total as f64 / f64::from(1u32 << 20)),
        ("quantized_bytes_per_value", per_value),
    ]
}

/// Reads the first value of `t` back, which waits for the backend to finish it.
pub fn read_one<const D: usize>(t: Tensor<D>) {
    let first: [std::ops::Range<usize>; D] = std::array::from_fn(|_| 0..1);
    let _ = t.slice(first).into_data();
}

/// Prints the line for a person, `{what} on {device}: {median} ms[ per token] (median of
/// {runs}){after}`, then [`zoo_bench::result_line`], both in milliseconds per `per`
/// (the tokens of a call, or 1).
pub fn report(
    common: &zoo_bench::Common,
    what: &str,
    times: &[Duration],
    per: usize,
    after: &str,
    extra: &[(&str, f64)],
) {
    let median = times[times.len() / 2].as_secs_f64() * 1e3 / per.max(1) as f64;
    let unit = if per > 1 { "ms per token" } else { "ms" };
    println!(
        "{what} on {}: {median:.2} {unit} (median of {}){after}",
        common.device, common.runs
    );
    println!("{}", zoo_bench::result_line(times, per, extra));
}

/// Times a training step that returns its loss ([`zoo_bench::timed_training_steps`]) and
/// [`report`]s it with the last loss; a loss that is not finite ends the program.
pub fn time_training(common: &zoo_bench::Common, what: &str, step: impl FnMut() -> f32) {
    let (times, last) = or_exit(zoo_bench::timed_training_steps(common.runs, step));
    report(
        common,
        what,
        &times,
        1,
        &format!(", last loss {last:.3}"),
        &[],
    );
}
