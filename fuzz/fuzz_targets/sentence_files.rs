#![no_main]
//! Fuzz target: `modules.json` and the pooling config around a sound tiny encoder (see
//! `zoo_fuzz::sentence_files`); the bytes split at their first NUL, if any.

use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/zoo-encoder/tests/fixtures/roberta-tiny-st");
    let at = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let (modules, pooling) = data.split_at(at);
    let pooling = pooling.get(1..).unwrap_or_default();
    let _ = zoo_fuzz::sentence_files(modules, pooling, &model);
});
