#![no_main]
//! Fuzz target: see `zoo_fuzz::config_json`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zoo_fuzz::config_json(data);
});
