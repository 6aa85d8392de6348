#![no_main]
//! Fuzz target: see `zoo_fuzz::tokenizer_json`.

// The zoo catches the panics of the `tokenizers` crate and returns them as errors, and
// the fuzzer's hook would abort on them before they are caught: a silent hook instead.
// A panic the zoo does not catch still aborts (libfuzzer-sys catches it and aborts).
libfuzzer_sys::fuzz_target!(init: std::panic::set_hook(Box::new(|_| {})), |data: &[u8]| {
    let _ = zoo_fuzz::tokenizer_json(data);
});
