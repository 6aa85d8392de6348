//! Character vocabularies.

use std::collections::BTreeMap;

use crate::error::{DataError, Result};

/// A character vocabulary: id `i` is the `i`-th character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharVocab {
    chars: Vec<char>,
    index: BTreeMap<char, usize>,
}

impl CharVocab {
    /// The seeds' names vocabulary: `'$'` (start and end of a name) as id 0, then
    /// `'a'..='z'` as ids 1..=26.
    pub fn names() -> Self {
        Self::from_chars(std::iter::once('$').chain('a'..='z'))
    }

    /// A vocabulary of the distinct characters of `text`, sorted (the nanoGPT
    /// `shakespeare_char` convention).
    pub fn from_text(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Self::from_chars(chars)
    }

    /// A vocabulary of the given characters, in order; repeats keep their first id.
    pub fn from_chars(chars: impl IntoIterator<Item = char>) -> Self {
        let mut list = Vec::new();
        let mut index = BTreeMap::new();
        for c in chars {
            if let std::collections::btree_map::Entry::Vacant(e) = index.entry(c) {
                e.insert(list.len());
                list.push(c);
            }
        }
        Self { chars: list, index }
    }

    /// Number of characters.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The id of `c`.
    pub fn id(&self, c: char) -> Option<usize> {
        self.index.get(&c).copied()
    }

    /// Encodes text.
    ///
    /// # Errors
    /// A character outside the vocabulary, named with its position.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        text.chars()
            .enumerate()
            .map(|(i, c)| {
                self.id(c).ok_or_else(|| DataError::UnknownChar {
                    ch: c,
                    context: format!("position {i} of {text:?}"),
                })
            })
            .collect()
    }

    /// Decodes ids.
    ///
    /// # Errors
    /// An id outside the vocabulary.
    pub fn decode(&self, ids: &[usize]) -> Result<String> {
        ids.iter()
            .map(|&id| {
                self.chars.get(id).copied().ok_or(DataError::UnknownId {
                    id,
                    vocab_size: self.len(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_vocab() {
        let v = CharVocab::names();
        assert_eq!(v.len(), 27);
        assert_eq!(v.encode("$ab$").unwrap(), vec![0, 1, 2, 0]);
        assert_eq!(v.decode(&[26, 0]).unwrap(), "z$");
        let e = v.encode("aB").unwrap_err();
        assert_eq!(
            e.to_string(),
            "character 'B' is not in the vocabulary (position 1 of \"aB\")"
        );
        assert_eq!(
            v.decode(&[27]).unwrap_err().to_string(),
            "token id 27 is out of range for a vocabulary of 27"
        );
    }

    #[test]
    fn text_vocab_is_sorted_and_distinct() {
        let v = CharVocab::from_text("hello world");
        assert_eq!(
            v.decode(&(0..v.len()).collect::<Vec<_>>()).unwrap(),
            " dehlorw"
        );
    }
}
