//! # zoo-data
//!
//! Readers for the data sets shipped in `datasets/` (found at run time through
//! [`locate`]: an explicit folder, `$ZOO_DATA`, the cache, the source tree), the user's own training files
//! ([`records`]: plain text, JSON Lines, CSV and TSV, every row with its file and line),
//! the character vocabularies of the seeds, the subword tokenizers of every family
//! ([`tokenizer`]: `tokenizer.json`, WordPiece, BPE), and Burn batchers for the zoo's
//! tasks. Knows no models.
//!
//! Readers return Burn datasets (`InMemDataset`), batchers implement Burn's `Batcher`, so
//! loaders come from Burn's `DataLoaderBuilder` as usual.
#![warn(missing_docs)]

pub mod batch;
pub mod cmudict;
pub mod digits;
mod error;
pub mod locate;
pub mod names;
pub mod records;
pub mod text;
pub mod tokenizer;
pub mod vocab;

pub use batch::{
    CausalLmBatch, CausalLmBatcher, CausalLmItem, Seq2SeqBatch, Seq2SeqBatcher, Seq2SeqItem,
};
pub use error::{DataError, Result};
pub use locate::{dataset_file, dataset_file_in};
pub use records::{Format, Labels, Records, Row, Value};
pub use tokenizer::{
    BertTokenizer, ChatTemplate, DetailedEncoding, Encoding, LmTokenizer, PairWindow, TextStream,
    TokenBatch, TokenizerError,
};
pub use vocab::CharVocab;

/// Shuffles `items` in place with a fixed seed (Fisher-Yates over a seeded `StdRng`), so
/// splits are the same on every machine.
pub fn seeded_shuffle<T>(items: &mut [T], seed: u64) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in (1..items.len()).rev() {
        let j = rng.random_range(0..=i);
        items.swap(i, j);
    }
}
