#![no_main]
//! Fuzz target: see `zoo_fuzz::image`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zoo_fuzz::image(data);
});
