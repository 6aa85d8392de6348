//! Plain-text corpora for character language models (`datasets/shakespeare/tiny.txt`).

use std::path::Path;

use crate::batch::CausalLmItem;
use crate::error::{DataError, Result, read_to_string};

/// Reads a corpus and splits it: the last `val_fraction` of its characters is validation.
///
/// # Errors
/// An unreadable or empty file, or a fraction outside `(0, 1)`.
pub fn load_split(path: &Path, val_fraction: f64) -> Result<(String, String)> {
    if !(val_fraction > 0.0 && val_fraction < 1.0) {
        return Err(DataError::Invalid(format!(
            "val_fraction must be in (0, 1), got {val_fraction}"
        )));
    }
    let text = read_to_string(path)?;
    if text.is_empty() {
        return Err(DataError::Invalid(format!("{} is empty", path.display())));
    }
    let chars: Vec<char> = text.chars().collect();
    let cut = chars.len() - ((chars.len() as f64) * val_fraction).round() as usize;
    Ok((chars[..cut].iter().collect(), chars[cut..].iter().collect()))
}

/// `n` windows of `block + 1` ids at seeded random offsets, each a full-sequence item of
/// length `block` (the nanoGPT `get_batch` sampling, fixed in advance so an epoch is a
/// data set).
///
/// # Errors
/// When the corpus is shorter than one window.
pub fn random_windows(
    ids: &[usize],
    block: usize,
    n: usize,
    seed: u64,
) -> Result<Vec<CausalLmItem>> {
    use rand::{Rng, SeedableRng};
    if ids.len() <= block {
        return Err(DataError::Invalid(format!(
            "corpus of {} tokens is shorter than one window of {}",
            ids.len(),
            block + 1
        )));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Ok((0..n)
        .map(|_| {
            let start = rng.random_range(0..ids.len() - block);
            CausalLmItem::full(&ids[start..start + block + 1])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_shifted_pairs() {
        let ids: Vec<usize> = (0..100).collect();
        let items = random_windows(&ids, 8, 5, 1).unwrap();
        for it in items {
            assert_eq!(it.input.len(), 8);
            assert_eq!(it.target[0], Some(it.input[0] + 1));
        }
        assert!(random_windows(&ids[..5], 8, 1, 1).is_err());
    }

    #[test]
    fn shakespeare_split_is_last_tenth() {
        let (train, val) =
            load_split(&crate::dataset_file("shakespeare/tiny.txt").unwrap(), 0.1).unwrap();
        let total = train.chars().count() + val.chars().count();
        assert!(total > 1_000_000);
        assert_eq!(val.chars().count(), (total as f64 * 0.1).round() as usize);
    }
}
