//! Every family in f16 (`select_as(.., FloatType::F16)`, what `--dtype f16` does) against
//! transformers in f16, on one fixture each: GPT-2, Llama, Mixtral, BERT, ModernBERT, T5,
//! BART, Marian, ViT and CLIP.
//!
//! The bound: each output within 40 units of f16's roundoff (u = 2^-11) of the output's
//! largest magnitude, 0.0195. Two half-precision runs round differently at every
//! product and sum, and the differences grow through the layers: measured, 0.0009 to
//! 0.015 on flex, tch and wgpu, the largest on T5 (whose attention is unscaled).
//! Controls: every output is further than 4e-4 from transformers' f32 output (four times
//! the 1e-4 at which the zoo matches it in f32), so the model did not quietly compute in
//! f32; and the coarser bf16 reference falls outside the bound, so the bound tells the
//! types apart.

mod common;

use zoo_device::FloatType;

const BOUND: f32 = 40.0 / 2048.0;

#[test]
fn f16_matches_transformers_in_f16() {
    let Some(errors) = common::half::check(FloatType::F16, BOUND) else {
        return;
    };
    let furthest = errors.iter().map(|e| e.other).fold(0f32, f32::max);
    assert!(furthest > BOUND, "bf16 within {BOUND}: {furthest}");
}
