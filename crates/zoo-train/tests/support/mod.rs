//! Models and data for the learner's tests: small tasks whose outcome is known.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

pub mod digits;
pub mod seq2seq;
pub mod toy;
