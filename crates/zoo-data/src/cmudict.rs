//! The CMU Pronouncing Dictionary (`datasets/cmudict`) for grapheme-to-phoneme: words of
//! letters only, lower-cased, with every pronunciation as ARPAbet phonemes without stress
//! digits (the 39 phonemes of `cmudict.phones`), split by word so that all of a word's
//! pronunciations land in one split.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{DataError, Result};

/// A word and all its pronunciations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Lower-case letters.
    pub word: String,
    /// Each pronunciation, phonemes without stress digits.
    pub pronunciations: Vec<Vec<String>>,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The phoneme inventory of `cmudict.phones` (`AA\tvowel` lines), in file order.
///
/// # Errors
/// A missing file or an empty one.
pub fn load_phones(path: &Path) -> Result<Vec<String>> {
    let phones: Vec<String> = read(path)?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect();
    if phones.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no phonemes",
            path.display()
        )));
    }
    Ok(phones)
}

/// Every word of letters only in `cmudict.dict`, in alphabetical order, with its
/// pronunciations in file order (`word`, `word(2)`, ...). Comments (`# ...`) are dropped,
/// stress digits removed, and every phoneme must be one of `phones`.
///
/// # Errors
/// A missing file, or a phoneme outside `phones`, named with its line.
pub fn load(path: &Path, phones: &[String]) -> Result<Vec<Entry>> {
    let text = read(path)?;
    let mut words: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let mut parts = line.split_whitespace();
        let Some(head) = parts.next() else {
            continue;
        };
        // `word(2)` is the word's second pronunciation.
        let word = head.split('(').next().unwrap_or(head).to_lowercase();
        if !word.chars().all(|c| c.is_ascii_lowercase()) || word.is_empty() {
            continue;
        }
        let pron = parts
            .map(|p| {
                let bare: String = p.chars().filter(|c| !c.is_ascii_digit()).collect();
                if phones.contains(&bare) {
                    Ok(bare)
                } else {
                    Err(DataError::Invalid(format!(
                        "{} line {}: phoneme {p:?} is not in the inventory",
                        path.display(),
                        n + 1
                    )))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if pron.is_empty() {
            return Err(DataError::Invalid(format!(
                "{} line {}: {head} has no phonemes",
                path.display(),
                n + 1
            )));
        }
        let prons = words.entry(word).or_default();
        if !prons.contains(&pron) {
            prons.push(pron);
        }
    }
    Ok(words
        .into_iter()
        .map(|(word, pronunciations)| Entry {
            word,
            pronunciations,
        })
        .collect())
}

/// Splits entries by word into train, validation and test sets of about 90%, 5% and 5%,
/// shuffled with `seed`.
pub fn split(entries: &[Entry], seed: u64) -> (Vec<Entry>, Vec<Entry>, Vec<Entry>) {
    let mut all = entries.to_vec();
    crate::seeded_shuffle(&mut all, seed);
    let n = all.len();
    let (n_valid, n_test) = (n / 20, n / 20);
    let test = all.split_off(n - n_test);
    let valid = all.split_off(n - n_test - n_valid);
    (all, valid, test)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> (Vec<String>, Vec<Entry>) {
        let dir = crate::dataset_file("cmudict").unwrap();
        let phones = load_phones(&dir.join("cmudict.phones")).unwrap();
        let entries = load(&dir.join("cmudict.dict"), &phones).unwrap();
        (phones, entries)
    }

    #[test]
    fn words_are_letters_and_phonemes_have_no_stress() {
        let (phones, entries) = shipped();
        assert_eq!(phones.len(), 39);
        assert!(entries.len() > 100_000, "{}", entries.len());
        let get = |w: &str| entries.iter().find(|e| e.word == w).unwrap();
        // "tomato" has two pronunciations in the dictionary: T AH0 M EY1 T OW2 and
        // T AH0 M AA1 T OW2.
        let tomato = get("tomato");
        assert_eq!(
            tomato.pronunciations,
            vec![
                "T AH M EY T OW"
                    .split(' ')
                    .map(String::from)
                    .collect::<Vec<_>>(),
                "T AH M AA T OW"
                    .split(' ')
                    .map(String::from)
                    .collect::<Vec<_>>(),
            ]
        );
        assert!(
            entries
                .iter()
                .all(|e| e.word.chars().all(|c| c.is_ascii_lowercase()))
        );
        assert!(
            !entries
                .iter()
                .any(|e| e.word == "'bout" || e.word == "bout'")
        );
    }

    #[test]
    fn the_split_is_by_word_and_seeded() {
        let (_, entries) = shipped();
        let (train, valid, test) = split(&entries, 7);
        assert_eq!(train.len() + valid.len() + test.len(), entries.len());
        assert_eq!(test.len(), entries.len() / 20);
        let words = |s: &[Entry]| {
            s.iter()
                .map(|e| e.word.clone())
                .collect::<std::collections::HashSet<_>>()
        };
        assert!(words(&train).is_disjoint(&words(&test)));
        assert!(words(&valid).is_disjoint(&words(&test)));
        assert_eq!(split(&entries, 7).2, test);
        assert_ne!(split(&entries, 8).2, test);
    }
}
