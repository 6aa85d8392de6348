#![no_main]
//! Fuzz target: `modules.json` and the pooling config around a sound tiny encoder (see
//! `zoo_fuzz::sentence_files`); the bytes split at their first NUL, if any.

use std::path::Path;

// The zoo catches the panics of the `tokenizers` crate and returns them as errors, and
// the fuzzer's hook would abort on them before they are caught: a silent hook instead.
// A panic the zoo does not catch still aborts (libfuzzer-sys catches it and aborts).
libfuzzer_sys::fuzz_target!(init: std::panic::set_hook(Box::new(|_| {})), |data: &[u8]| {
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/zoo-encoder/tests/fixtures/roberta-tiny-st");
    let at = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let (modules, pooling) = data.split_at(at);
    let pooling = pooling.get(1..).unwrap_or_default();
    let _ = zoo_fuzz::sentence_files(modules, pooling, &model);
});
