//! The Globe Shakespeare (`datasets/shakespeare/globe`, labels in `genres.tsv`) for the
//! encoder examples: works by genre, their lines, and passages packed to a token budget.

use zoo_encoder::{BertTokenizer, Encoding};

use crate::Error;

/// Plays no encoder example trains on: the validation plays of `bert-mlm` (its vocabulary
/// and its model never see them) and the test plays of `genre`. One of each genre.
pub const HELD_OUT_PLAYS: [&str; 3] = ["twelfth_night", "macbeth", "richard_ii"];

/// `(work, genre)` for every row of `genres.tsv`.
///
/// # Errors
/// A missing file or a malformed row.
pub fn genres() -> Result<Vec<(String, String)>, Error> {
    let path = zoo_data::dataset_file("shakespeare/genres.tsv")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(
            |(i, l)| match l.split('\t').collect::<Vec<_>>().as_slice() {
                [work, genre] => Ok((work.to_string(), genre.to_string())),
                _ => Err(
                    format!("{} line {}: expected work<TAB>genre", path.display(), i + 2).into(),
                ),
            },
        )
        .collect()
}

/// The non-empty lines of a work, trimmed.
///
/// # Errors
/// A work with no file.
pub fn lines(work: &str) -> Result<Vec<String>, Error> {
    let path = zoo_data::dataset_file(&format!("shakespeare/globe/{work}.txt"))?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Consecutive lines packed into passages of at most `max_len` tokens (`[CLS]` and
/// `[SEP]` included); a line longer than the budget is cut. Each passage is an encoding
/// as the tokenizer makes it, so its special-token flags are right.
///
/// # Errors
/// A budget under 8 tokens, or the tokenizer's own failures.
pub fn passages(
    tok: &BertTokenizer,
    lines: &[String],
    max_len: usize,
) -> Result<Vec<Encoding>, Error> {
    if max_len < 8 {
        return Err(format!("passages need at least 8 tokens, got {max_len}").into());
    }
    let budget = max_len - 2;
    let mut out = Vec::new();
    let mut current: Vec<u32> = Vec::new();
    let cls = tok.token_id("[CLS]").ok_or("no [CLS]")?;
    let sep = tok.token_id("[SEP]").ok_or("no [SEP]")?;
    let mut flush = |current: &mut Vec<u32>| {
        if !current.is_empty() {
            let mut ids = vec![cls];
            ids.append(current);
            ids.push(sep);
            let n = ids.len();
            out.push(Encoding {
                tokens: ids
                    .iter()
                    .map(|&i| tok.id_token(i).unwrap_or_default())
                    .collect(),
                type_ids: vec![0; n],
                special: (0..n).map(|i| i == 0 || i == n - 1).collect(),
                ids,
            });
        }
    };
    for line in lines {
        let e = tok.encode(line)?;
        let mut pieces: Vec<u32> = e
            .ids
            .iter()
            .zip(&e.special)
            .filter(|(_, s)| !**s)
            .map(|(i, _)| *i)
            .collect();
        pieces.truncate(budget);
        if current.len() + pieces.len() > budget {
            flush(&mut current);
        }
        current.extend(pieces);
    }
    flush(&mut current);
    Ok(out)
}
