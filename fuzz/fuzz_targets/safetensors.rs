#![no_main]
//! Fuzz target: `model.safetensors` alone (`zoo_fuzz::safetensors`) and, from the first
//! half of the bytes, a shard index beside a sound shard made of the second half
//! (`zoo_fuzz::shard_index`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zoo_fuzz::safetensors(data);
    let (index, shard) = data.split_at(data.len() / 2);
    let _ = zoo_fuzz::shard_index(index, shard);
});
