#![no_main]
//! Fuzz target: see `zoo_fuzz::sentencepiece_model`.

// As for tokenizer_json: the zoo catches the `tokenizers` crate's panics, so a silent
// hook, and a panic the zoo does not catch still aborts.
libfuzzer_sys::fuzz_target!(init: std::panic::set_hook(Box::new(|_| {})), |data: &[u8]| {
    let _ = zoo_fuzz::sentencepiece_model(data);
});
