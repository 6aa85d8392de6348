//! What every bench program prints, kept out of the library: the `bench-result` line and
//! `error: ...` exits. Each program includes this file as its `cli` module.

#![allow(dead_code)] // each program uses a part

use std::time::Duration;

/// Prints [`zoo_bench::result_line`].
pub fn print_result(times: &[Duration], per: usize, extra: &[(&str, f64)]) {
    println!("{}", zoo_bench::result_line(times, per, extra));
}

/// Exits with status 1 after printing `error: {e}`, for the programs' set-up.
pub fn or_exit<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1);
    })
}

/// [`zoo_bench::Common::start`], or `error: ...` on stderr and exit status 2.
pub fn start_or_exit(common: &zoo_bench::Common) -> burn::tensor::Device {
    common.start().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    })
}
