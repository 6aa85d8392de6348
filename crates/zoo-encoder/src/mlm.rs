//! BERT's masked-LM recipe (Devlin et al., 2019, section 3.1): each token that is neither
//! special nor padding is chosen with probability 15%; a chosen token becomes `[MASK]`
//! 80% of the time, a random word 10% of the time, and stays itself 10% of the time. The
//! labels are the original tokens at the chosen positions; nothing else counts in the
//! loss. The result is a [`CausalLmBatch`], which `zoo-train`'s language-model task trains
//! on with the padding mask.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use rand::Rng;
use zoo_core::CausalLmBatch;

use crate::error::{EncoderError, Result};
use zoo_data::tokenizer::TokenBatch;

/// The recipe's probabilities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaskingConfig {
    /// Chance that an eligible token is chosen. BERT: 0.15.
    pub select_prob: f64,
    /// Chance that a chosen token becomes `[MASK]`. BERT: 0.8.
    pub mask_prob: f64,
    /// Chance that a chosen token becomes a random word. BERT: 0.1 (the rest, 0.1, stay).
    pub random_prob: f64,
}

impl Default for MaskingConfig {
    fn default() -> Self {
        Self {
            select_prob: 0.15,
            mask_prob: 0.8,
            random_prob: 0.1,
        }
    }
}

/// What happened to one chosen token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// Replaced by `[MASK]`.
    Mask,
    /// Replaced by a random word.
    Random,
    /// Left as it was.
    Keep,
}

/// A masked batch, on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskedBatch {
    /// `[B][T]` the model's input after corruption.
    pub inputs: Vec<Vec<u32>>,
    /// `[B][T]` the original tokens (the labels where chosen).
    pub labels: Vec<Vec<u32>>,
    /// `[B][T]` what happened at each position; `None` where the token was not chosen.
    pub chosen: Vec<Vec<Option<Corruption>>>,
    /// `[B][T]`, `true` at padding.
    pub padding: Vec<Vec<bool>>,
    /// `[B][T]` token types.
    pub type_ids: Vec<Vec<u32>>,
}

/// Masks each encoding once by the recipe, as items of `zoo-train`'s language-model
/// task: the corrupted ids as input, the original token as the target at each chosen
/// position. Encodings are padded in slices of 256, so one batch's padding stays small.
///
/// # Errors
/// As [`mask_tokens`].
pub fn masked_items(
    tok: &zoo_data::BertTokenizer,
    encodings: &[zoo_data::Encoding],
    words: &[u32],
    cfg: &MaskingConfig,
    rng: &mut impl Rng,
) -> Result<Vec<zoo_data::CausalLmItem>> {
    let mut items = Vec::with_capacity(encodings.len());
    for chunk in encodings.chunks(256) {
        let batch = tok.pad(chunk.to_vec())?;
        let m = mask_tokens(&batch, tok.mask_id(), words, cfg, rng)?;
        for (r, e) in chunk.iter().enumerate() {
            let n = e.ids.len();
            items.push(zoo_data::CausalLmItem {
                input: m.inputs[r][..n].iter().map(|&i| i as usize).collect(),
                target: (0..n)
                    .map(|t| m.chosen[r][t].map(|_| m.labels[r][t] as usize))
                    .collect(),
            });
        }
    }
    Ok(items)
}

/// Masks a tokenized batch by the recipe. `words` are the ids a random replacement is
/// drawn from, uniformly (the vocabulary without its special tokens). When no token at
/// all is chosen in the batch, one eligible token is, so the loss is never empty.
///
/// # Errors
/// Probabilities outside `[0, 1]` (or mask and random summing above 1), no words to draw
/// from, or a batch with no eligible token.
pub fn mask_tokens(
    batch: &TokenBatch,
    mask_id: u32,
    words: &[u32],
    cfg: &MaskingConfig,
    rng: &mut impl Rng,
) -> Result<MaskedBatch> {
    let bad = |m: String| Err(EncoderError::Input(m));
    for (name, p) in [
        ("select_prob", cfg.select_prob),
        ("mask_prob", cfg.mask_prob),
        ("random_prob", cfg.random_prob),
    ] {
        if !(0.0..=1.0).contains(&p) {
            return bad(format!("{name} must be in [0, 1], got {p}"));
        }
    }
    if cfg.mask_prob + cfg.random_prob > 1.0 + 1e-12 {
        return bad(format!(
            "mask_prob + random_prob must be <= 1, got {} + {}",
            cfg.mask_prob, cfg.random_prob
        ));
    }
    if words.is_empty() {
        return bad("no words to draw random replacements from".into());
    }
    let mut out = MaskedBatch {
        inputs: batch.ids.clone(),
        labels: batch.ids.clone(),
        chosen: batch.ids.iter().map(|r| vec![None; r.len()]).collect(),
        padding: batch.padding.clone(),
        type_ids: batch.type_ids.clone(),
    };
    let eligible: Vec<(usize, usize)> = batch
        .special
        .iter()
        .zip(&batch.padding)
        .enumerate()
        .flat_map(|(b, (special, pad))| {
            (0..special.len())
                .filter(move |&t| !special[t] && !pad[t])
                .map(move |t| (b, t))
        })
        .collect();
    if eligible.is_empty() {
        return bad("the batch has no token that is neither special nor padding".into());
    }
    let mut corrupt = |b: usize, t: usize, rng: &mut dyn rand::RngCore| {
        let u: f64 = rng.random();
        let what = if u < cfg.mask_prob {
            out.inputs[b][t] = mask_id;
            Corruption::Mask
        } else if u < cfg.mask_prob + cfg.random_prob {
            out.inputs[b][t] = words[rng.random_range(0..words.len())];
            Corruption::Random
        } else {
            Corruption::Keep
        };
        out.chosen[b][t] = Some(what);
    };
    let mut any = false;
    for &(b, t) in &eligible {
        if rng.random_bool(cfg.select_prob) {
            corrupt(b, t, rng);
            any = true;
        }
    }
    if !any {
        let (b, t) = eligible[rng.random_range(0..eligible.len())];
        corrupt(b, t, rng);
    }
    Ok(out)
}

fn data_2d<T: burn::tensor::Element>(rows: &[Vec<T>]) -> TensorData {
    let t = rows.first().map_or(0, Vec::len);
    TensorData::new(rows.concat(), [rows.len(), t])
}

impl MaskedBatch {
    /// The batch for `zoo-train`'s language-model task: the corrupted inputs, the padding
    /// mask, the original tokens as targets, counted only where chosen.
    pub fn to_lm_batch(&self, device: &Device) -> CausalLmBatch {
        let ids = |rows: &[Vec<u32>]| -> Tensor<2, Int> {
            let rows: Vec<Vec<i64>> = rows
                .iter()
                .map(|r| r.iter().map(|&i| i64::from(i)).collect())
                .collect();
            Tensor::from_data(data_2d(&rows), device)
        };
        let chosen: Vec<Vec<bool>> = self
            .chosen
            .iter()
            .map(|r| r.iter().map(Option::is_some).collect())
            .collect();
        CausalLmBatch {
            inputs: ids(&self.inputs),
            padding: Tensor::<2, Bool>::from_data(data_2d(&self.padding), device),
            targets: ids(&self.labels),
            target_mask: Tensor::<2, Bool>::from_data(data_2d(&chosen), device),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MASK: u32 = 4;

    /// `rows` rows of up to 256 tokens: `[CLS]` (2), words 5..1000, `[SEP]` (3), then
    /// padding (0) to the longest.
    fn batch(rows: usize, rng: &mut StdRng) -> TokenBatch {
        let t = 256;
        let mut b = TokenBatch {
            ids: vec![],
            type_ids: vec![],
            padding: vec![],
            special: vec![],
        };
        for _ in 0..rows {
            let n = rng.random_range(3..=t);
            let ids: Vec<u32> = (0..t)
                .map(|i| match i {
                    0 => 2,
                    i if i == n - 1 => 3,
                    i if i >= n => 0,
                    _ => rng.random_range(5..1000),
                })
                .collect();
            b.special
                .push((0..t).map(|i| i == 0 || i >= n - 1).collect());
            b.padding.push((0..t).map(|i| i >= n).collect());
            b.type_ids.push(vec![0; t]);
            b.ids.push(ids);
        }
        b
    }

    /// `|observed - p| <= 4 sd` of a binomial fraction over `n` trials.
    fn within_4_sd(what: &str, count: usize, n: usize, p: f64) {
        let observed = count as f64 / n as f64;
        let sd = (p * (1.0 - p) / n as f64).sqrt();
        assert!(
            (observed - p).abs() <= 4.0 * sd,
            "{what}: {observed:.5} over {n}, expected {p} ± {:.5}",
            4.0 * sd
        );
    }

    #[test]
    fn the_recipe_holds_over_100k_tokens_and_never_touches_special_or_padding() {
        let mut rng = StdRng::seed_from_u64(10);
        let b = batch(1000, &mut rng);
        let words: Vec<u32> = (5..1000).collect();
        let m = mask_tokens(&b, MASK, &words, &MaskingConfig::default(), &mut rng).unwrap();
        let (mut eligible, mut chosen, mut masked, mut random, mut kept) = (0, 0, 0, 0, 0);
        for r in 0..b.len() {
            for t in 0..b.ids[r].len() {
                let protected = b.special[r][t] || b.padding[r][t];
                if !protected {
                    eligible += 1;
                }
                assert_eq!(m.labels[r][t], b.ids[r][t], "labels keep the original");
                match m.chosen[r][t] {
                    None => assert_eq!(m.inputs[r][t], b.ids[r][t], "unchosen stay"),
                    Some(what) => {
                        assert!(
                            !protected,
                            "row {r} pos {t}: a special or pad token was chosen"
                        );
                        chosen += 1;
                        match what {
                            Corruption::Mask => {
                                assert_eq!(m.inputs[r][t], MASK);
                                masked += 1;
                            }
                            Corruption::Random => {
                                assert!(words.contains(&m.inputs[r][t]));
                                random += 1;
                            }
                            Corruption::Keep => {
                                assert_eq!(m.inputs[r][t], b.ids[r][t]);
                                kept += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(eligible >= 100_000, "only {eligible} eligible tokens");
        within_4_sd("chosen", chosen, eligible, 0.15);
        within_4_sd("[MASK]", masked, chosen, 0.8);
        within_4_sd("random", random, chosen, 0.1);
        within_4_sd("kept", kept, chosen, 0.1);
        // The same seed gives the same masks.
        let mut again = StdRng::seed_from_u64(10);
        let b2 = batch(1000, &mut again);
        let m2 = mask_tokens(&b2, MASK, &words, &MaskingConfig::default(), &mut again).unwrap();
        assert_eq!(m, m2);
    }

    #[test]
    fn a_recipe_that_cannot_work_is_an_error() {
        let mut rng = StdRng::seed_from_u64(1);
        let b = batch(2, &mut rng);
        let cfg = MaskingConfig {
            mask_prob: 0.95,
            ..Default::default()
        };
        let e = mask_tokens(&b, MASK, &[5], &cfg, &mut rng).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mask_prob + random_prob must be <= 1, got 0.95 + 0.1"
        );
        let e = mask_tokens(&b, MASK, &[], &MaskingConfig::default(), &mut rng).unwrap_err();
        assert_eq!(e.to_string(), "no words to draw random replacements from");
        let mut only_special = b.clone();
        only_special.special = b.special.iter().map(|r| vec![true; r.len()]).collect();
        let e = mask_tokens(
            &only_special,
            MASK,
            &[5],
            &MaskingConfig::default(),
            &mut rng,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no token that is neither"), "{e}");
    }

    #[test]
    fn a_batch_always_has_a_target_and_becomes_an_lm_batch() {
        let mut rng = StdRng::seed_from_u64(2);
        let b = batch(1, &mut rng);
        let cfg = MaskingConfig {
            select_prob: 0.0,
            ..Default::default()
        };
        let m = mask_tokens(&b, MASK, &[5], &cfg, &mut rng).unwrap();
        let n: usize = m.chosen.iter().flatten().filter(|c| c.is_some()).count();
        assert_eq!(n, 1, "one token is chosen when the draw chose none");
        let device = zoo_device::test_device();
        let lm = m.to_lm_batch(&device);
        let mask: Vec<bool> = zoo_device::testing::bools(lm.target_mask);
        assert_eq!(mask.iter().filter(|x| **x).count(), 1);
        let pad: Vec<bool> = zoo_device::testing::bools(lm.padding);
        assert_eq!(pad, m.padding.concat());
    }
}
