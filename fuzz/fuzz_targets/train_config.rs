#![no_main]
//! Fuzz target: see `zoo_fuzz::train_config`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zoo_fuzz::train_config(data);
});
