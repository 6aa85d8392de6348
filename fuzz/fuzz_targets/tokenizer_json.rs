#![no_main]
//! Fuzz target: see `zoo_fuzz::tokenizer_json`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zoo_fuzz::tokenizer_json(data);
});
