//! The first-names data set (`datasets/names/first_names.txt`) in the two forms of the
//! seeds: prefix/target pairs and full sequences.

use std::path::Path;

use crate::batch::CausalLmItem;
use crate::error::{DataError, Result, read_to_string};
use crate::vocab::CharVocab;

/// Reads one lower-case name a line; blank lines are skipped.
///
/// # Errors
/// An unreadable file, no names, or a name with a character outside `'a'..='z'` (named
/// with its line).
pub fn load_names(path: &Path) -> Result<Vec<String>> {
    let text = read_to_string(path)?;
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let name = line.trim();
        if name.is_empty() {
            continue;
        }
        if let Some(c) = name.chars().find(|c| !c.is_ascii_lowercase()) {
            return Err(DataError::UnknownChar {
                ch: c,
                context: format!("{} line {}", path.display(), i + 1),
            });
        }
        names.push(name.to_string());
    }
    if names.is_empty() {
        return Err(DataError::Invalid(format!(
            "{} holds no names",
            path.display()
        )));
    }
    Ok(names)
}

/// Splits names into train and validation sets after a seeded shuffle; `val_fraction` of
/// them (rounded) go to validation.
pub fn split(mut names: Vec<String>, val_fraction: f64, seed: u64) -> (Vec<String>, Vec<String>) {
    crate::seeded_shuffle(&mut names, seed);
    let n_val = ((names.len() as f64) * val_fraction).round() as usize;
    let val = names.split_off(names.len() - n_val.min(names.len()));
    (names, val)
}

/// `$name$` as ids with the names vocabulary.
///
/// # Errors
/// A character outside the vocabulary.
pub fn encode_name(vocab: &CharVocab, name: &str) -> Result<Vec<usize>> {
    vocab.encode(&format!("${name}$"))
}

/// The prompt of a name that begins with `prefix` (empty for any name): `$prefix` as ids.
///
/// # Errors
/// A character outside the vocabulary (the lower-case letters), named.
pub fn name_prompt(vocab: &CharVocab, prefix: &str) -> Result<Vec<usize>> {
    vocab.encode(&format!("${prefix}"))
}

/// The name that `prefix` and the tokens sampled after it spell: the tokens up to the
/// first end symbol `$`.
///
/// # Errors
/// An id outside the vocabulary.
pub fn sampled_name(vocab: &CharVocab, prefix: &str, sampled: &[usize]) -> Result<String> {
    let end = vocab.id('$');
    let body: Vec<usize> = sampled
        .iter()
        .copied()
        .take_while(|&c| Some(c) != end)
        .collect();
    Ok(format!("{prefix}{}", vocab.decode(&body)?))
}

/// The full-sequence form: one item per name, input `$name`, targets `name$`.
///
/// # Errors
/// A character outside the vocabulary.
pub fn sequence_items(vocab: &CharVocab, names: &[String]) -> Result<Vec<CausalLmItem>> {
    names
        .iter()
        .map(|n| Ok(CausalLmItem::full(&encode_name(vocab, n)?)))
        .collect()
}

/// The seed's prefix form: one item per character to predict, its context the `block`
/// characters before it, left-padded with `'$'`; only the last position has a target.
///
/// # Errors
/// A character outside the vocabulary, or a zero block.
pub fn prefix_items(
    vocab: &CharVocab,
    names: &[String],
    block: usize,
) -> Result<Vec<CausalLmItem>> {
    if block == 0 {
        return Err(DataError::Invalid("block size must be > 0".into()));
    }
    let pad = vocab.id('$').ok_or(DataError::UnknownChar {
        ch: '$',
        context: "the names vocabulary needs '$'".into(),
    })?;
    let mut items = Vec::new();
    for name in names {
        let ids = encode_name(vocab, name)?;
        for end in 1..ids.len() {
            let start = end.saturating_sub(block);
            let mut input = vec![pad; block - (end - start)];
            input.extend_from_slice(&ids[start..end]);
            let mut target = vec![None; block];
            target[block - 1] = Some(ids[end]);
            items.push(CausalLmItem { input, target });
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_sampled_names() {
        let v = CharVocab::names();
        assert_eq!(name_prompt(&v, "").unwrap(), vec![0]);
        assert_eq!(name_prompt(&v, "mb").unwrap(), vec![0, 13, 2]);
        let err = name_prompt(&v, "Ma").unwrap_err().to_string();
        assert!(err.contains('M'), "{err}");
        // Tokens after the first end symbol are not part of the name.
        assert_eq!(sampled_name(&v, "ma", &[18, 11, 0, 1, 2]).unwrap(), "mark");
        assert_eq!(sampled_name(&v, "", &[1, 2]).unwrap(), "ab");
        assert!(sampled_name(&v, "", &[27]).is_err());
    }

    #[test]
    fn both_forms() {
        let v = CharVocab::names();
        let names = vec!["ab".to_string()];
        let seq = sequence_items(&v, &names).unwrap();
        assert_eq!(seq[0].input, vec![0, 1, 2]);
        assert_eq!(seq[0].target, vec![Some(1), Some(2), Some(0)]);
        let pre = prefix_items(&v, &names, 2).unwrap();
        assert_eq!(pre.len(), 3);
        assert_eq!(pre[0].input, vec![0, 0]); // "$" left-padded with "$"
        assert_eq!(pre[0].target, vec![None, Some(1)]);
        assert_eq!(pre[2].input, vec![1, 2]); // "ab" -> "$"
        assert_eq!(pre[2].target, vec![None, Some(0)]);
    }

    #[test]
    fn shipped_names_load_and_split_reproducibly() {
        let names = load_names(&crate::dataset_file("names/first_names.txt").unwrap()).unwrap();
        assert_eq!(names.len(), 5163);
        let (a_train, a_val) = split(names.clone(), 0.1, 42);
        let (b_train, b_val) = split(names, 0.1, 42);
        assert_eq!(a_val.len(), 516);
        assert_eq!(a_train.len() + a_val.len(), 5163);
        assert_eq!((a_train, a_val), (b_train, b_val));
    }

    #[test]
    fn bad_names_are_named() {
        let dir = std::env::temp_dir().join(format!("zoo-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.txt");
        std::fs::write(&p, "anna\nBob\n").unwrap();
        let e = load_names(&p).unwrap_err().to_string();
        assert!(e.contains("'B'") && e.contains("line 2"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
