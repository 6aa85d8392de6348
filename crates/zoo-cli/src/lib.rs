//! The parts of the `zoo` command line that other programs use too: its error, and the
//! readers of the JSON files it takes (`forward`'s and `embed`'s inputs), which the fuzz
//! targets and property tests call as the command does.

pub mod error;
pub mod json;
