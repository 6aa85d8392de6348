#![no_main]
//! Fuzz target: see `zoo_fuzz::cli_input`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zoo_fuzz::cli_input(data);
});
