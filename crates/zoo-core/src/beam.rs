//! Beam search (Sutskever et al., 2014; as HF `transformers` runs it), for any
//! [`CausalLm`]: a decoder-only model, or an encoder-decoder whose source is encoded.
//!
//! Each prompt keeps `num_beams` running sequences. At every step the `2 · num_beams`
//! best continuations of all of them (by summed log-probability) are ranked; those among
//! the first `num_beams` that end (a stop token, or the length limit) become finished
//! hypotheses scored `sum_logprobs / generated_len ^ length_penalty`, and the best
//! unfinished ones run on. The search stops by [`EarlyStopping`]; the best finished
//! hypothesis is the result. With one beam it is greedy decoding.

use std::time::Duration;
use web_time::Instant;

use crate::error::CoreError;
use crate::generate::{check_banned, check_ids, read_logits};
use crate::model::{CausalLm, DecodeStep};

/// When a prompt's search is over (HF's `early_stopping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlyStopping {
    /// `False` (HF's default): when no running beam can still beat the worst finished
    /// hypothesis, judged at the current length.
    Heuristic,
    /// `True`: as soon as `num_beams` hypotheses are finished.
    AllFinished,
    /// `"never"`: as the heuristic, judged at the longest possible length when the
    /// length penalty favours long sequences.
    Never,
}

/// Beam-search settings, named as HF's `generate` names them.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamConfig {
    /// Beams per prompt.
    pub num_beams: usize,
    /// Most tokens to add to each prompt.
    pub max_new_tokens: usize,
    /// Exponent of the generated length that divides a hypothesis's log-probability:
    /// above 0 favours longer sequences, below 0 shorter ones.
    pub length_penalty: f64,
    /// When the search of a prompt stops.
    pub early_stopping: EarlyStopping,
    /// No n-gram of this size appears twice in a sequence (0 is off).
    pub no_repeat_ngram_size: usize,
    /// Tokens that end a hypothesis (EOS).
    pub stop_tokens: Vec<usize>,
    /// Tokens never generated (HF's single-token `bad_words_ids`).
    pub banned_tokens: Vec<usize>,
    /// A token forced at the last position the length allows (HF's `forced_eos_token_id`).
    pub forced_eos: Option<usize>,
    /// A token forced as the first new one (HF's `forced_bos_token_id`, which forces it
    /// at length 1: after an encoder-decoder's start token).
    pub forced_bos: Option<usize>,
    /// Token that left-pads shorter prompts (masked; any valid id).
    pub pad_id: usize,
    /// Decode with the KV cache (reordered as beams move) or recompute every step.
    pub use_cache: bool,
}

impl BeamConfig {
    /// `num_beams` beams, up to `max_new_tokens` new tokens, HF's defaults otherwise
    /// (length penalty 1, the heuristic early stop).
    pub fn new(num_beams: usize, max_new_tokens: usize) -> Self {
        Self {
            num_beams,
            max_new_tokens,
            length_penalty: 1.0,
            early_stopping: EarlyStopping::Heuristic,
            no_repeat_ngram_size: 0,
            stop_tokens: Vec::new(),
            banned_tokens: Vec::new(),
            forced_eos: None,
            forced_bos: None,
            pad_id: 0,
            use_cache: true,
        }
    }

    /// The token forced as the first new one.
    pub fn with_forced_bos(mut self, token: usize) -> Self {
        self.forced_bos = Some(token);
        self
    }

    /// The stop tokens.
    pub fn with_stop_tokens(mut self, stop: Vec<usize>) -> Self {
        self.stop_tokens = stop;
        self
    }

    /// The length penalty.
    pub fn with_length_penalty(mut self, penalty: f64) -> Self {
        self.length_penalty = penalty;
        self
    }

    /// The early-stopping rule.
    pub fn with_early_stopping(mut self, rule: EarlyStopping) -> Self {
        self.early_stopping = rule;
        self
    }

    /// Bans repeated n-grams of this size.
    pub fn with_no_repeat_ngram_size(mut self, n: usize) -> Self {
        self.no_repeat_ngram_size = n;
        self
    }

    /// Decoding with or without the cache.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// `num_beams = 0`, or a length penalty that is not a number.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.num_beams == 0 {
            return Err(CoreError::Generation(
                "num_beams must be >= 1, got 0".into(),
            ));
        }
        if !self.length_penalty.is_finite() {
            return Err(CoreError::Generation(format!(
                "length_penalty must be a finite number, got {}",
                self.length_penalty
            )));
        }
        Ok(())
    }
}

/// What [`beam_search`] produced.
#[derive(Debug, Clone)]
pub struct BeamOutput {
    /// The best hypothesis of each prompt: its new tokens, the stop token included when it
    /// ended on one.
    pub tokens: Vec<Vec<usize>>,
    /// Its score, `sum_logprobs / generated_len ^ length_penalty`.
    pub scores: Vec<f32>,
    /// Wall time of the search.
    pub elapsed: Duration,
}

/// A large negative score that marks a candidate as not eligible, as HF does.
const OUT: f32 = -1.0e9;

/// The tokens that would repeat an n-gram of `seq` (HF's `NoRepeatNGramLogitsProcessor`).
fn banned_by_ngrams(seq: &[usize], n: usize) -> Vec<usize> {
    if n == 0 || seq.len() + 1 < n {
        return Vec::new();
    }
    let prefix = &seq[seq.len() + 1 - n..];
    seq.windows(n)
        .filter(|w| &w[..n - 1] == prefix)
        .map(|w| w[n - 1])
        .collect()
}

/// Log-softmax of one row, in f32 as the models compute.
fn log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|x| (x - max).exp()).sum();
    let log_z = max + sum.ln();
    row.iter().map(|x| x - log_z).collect()
}

/// One ranked continuation of a beam.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    beam: usize,
    token: usize,
    score: f32,
}

/// A finished hypothesis slot.
#[derive(Debug, Clone)]
struct Finished {
    tokens: Vec<usize>,
    score: f32,
    done: bool,
}

/// Runs beam search from each prompt.
///
/// # Errors
/// Empty prompts, ids outside the vocabulary, a prompt longer than the model's `max_len`,
/// invalid settings, or a model that cannot reorder its cache.
pub fn beam_search<M: CausalLm>(
    model: &M,
    prompts: &[Vec<usize>],
    cfg: &BeamConfig,
) -> Result<BeamOutput, CoreError> {
    cfg.validate()?;
    let max_len = model.max_len();
    let vocab = model.vocab_size();
    check_ids(prompts, cfg.pad_id, vocab, max_len)?;
    check_banned(&cfg.banned_tokens, vocab)?;
    for (what, token) in [
        ("forced_bos", cfg.forced_bos),
        ("forced_eos", cfg.forced_eos),
    ] {
        if let Some(t) = token.filter(|&t| t >= vocab) {
            return Err(CoreError::Generation(format!(
                "{what} token {t} is out of range for vocab_size {vocab}"
            )));
        }
    }
    if let Some(t) = cfg.stop_tokens.iter().find(|&&t| t >= vocab) {
        return Err(CoreError::Generation(format!(
            "stop token {t} is out of range for vocab_size {vocab}"
        )));
    }
    let (b, k) = (prompts.len(), cfg.num_beams);
    // Every step reads back a row of logits per beam: a count of beams past what memory
    // holds is an error here, not an allocation that aborts the process.
    let what = format!("beam search's logits for {b} prompts × {k} beams of {vocab} tokens");
    crate::validate::fits_in_memory(&what, b as f64 * k as f64 * vocab as f64, 4.0)
        .map_err(|e| CoreError::Generation(e.to_string()))?;
    let mut cache = if cfg.use_cache {
        Some(model.new_cache(b * k)?)
    } else {
        None
    };
    let start = Instant::now();
    let prompt_len = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let pads: Vec<usize> = prompts.iter().map(|p| prompt_len - p.len()).collect();
    let max_length = (prompt_len + cfg.max_new_tokens).min(max_len);
    // Row b * k + j is beam j of prompt b.
    let mut seqs: Vec<Vec<usize>> = (0..b * k)
        .map(|r| {
            std::iter::repeat_n(cfg.pad_id, pads[r / k])
                .chain(prompts[r / k].iter().copied())
                .collect()
        })
        .collect();
    let mut running: Vec<f32> = (0..b * k)
        .map(|r| if r % k == 0 { 0.0 } else { OUT })
        .collect();
    let mut finished: Vec<Vec<Finished>> = (0..b)
        .map(|_| {
            vec![
                Finished {
                    tokens: Vec::new(),
                    score: OUT,
                    done: false,
                };
                k
            ]
        })
        .collect();
    let mut unsatisfied = vec![true; b];
    let keep = 2.max(1 + cfg.stop_tokens.len()) * k;
    let mut fed = 0;
    let mut cur_len = prompt_len;
    while cur_len < max_length {
        let from = crate::model::step_start(model, &mut cache, fed, cur_len, b * k)?;
        let step = DecodeStep {
            tokens: seqs.iter().map(|s| s[from..cur_len].to_vec()).collect(),
            positions: (0..b * k)
                .map(|r| {
                    (from..cur_len)
                        .map(|s| s.saturating_sub(pads[r / k]))
                        .collect()
                })
                .collect(),
            key_padding: (0..b * k)
                .map(|r| (0..cur_len).map(|s| s < pads[r / k]).collect())
                .collect(),
        };
        let logits = model.next_logits(step, cache.as_mut())?;
        fed = cur_len;
        let (all, v) = read_logits(logits, b * k, cur_len)?;
        let last_step = cur_len + 1 >= max_length;
        let mut next_rows = Vec::with_capacity(b * k);
        let mut next_tokens = Vec::with_capacity(b * k);
        let mut next_scores = Vec::with_capacity(b * k);
        let mut all_hit = true;
        for p in 0..b {
            let mut scores = Vec::with_capacity(k * v);
            for j in 0..k {
                let r = p * k + j;
                let mut lp = log_softmax(&all[r * v..(r + 1) * v]);
                for t in banned_by_ngrams(&seqs[r], cfg.no_repeat_ngram_size)
                    .into_iter()
                    .chain(cfg.banned_tokens.iter().copied())
                {
                    lp[t] = f32::NEG_INFINITY;
                }
                // HF's order: the forced BOS at length 1, then the forced EOS at the
                // last step, which wins where both apply.
                let forced = match (cfg.forced_eos, cfg.forced_bos) {
                    (Some(eos), _) if last_step => Some(eos),
                    (_, Some(bos)) if cur_len == 1 => Some(bos),
                    _ => None,
                };
                if let Some(forced) = forced {
                    // As HF's processors: the forced token costs nothing, all others are out.
                    for (t, x) in lp.iter_mut().enumerate() {
                        *x = if t == forced { 0.0 } else { f32::NEG_INFINITY };
                    }
                }
                scores.extend(lp.into_iter().map(|x| x + running[r]));
            }
            // The best `keep` continuations over all beams, best first.
            let mut order: Vec<usize> = (0..k * v).collect();
            order.sort_by(|&x, &y| scores[y].total_cmp(&scores[x]).then(x.cmp(&y)));
            let top: Vec<Candidate> = order[..keep.min(k * v)]
                .iter()
                .map(|&i| Candidate {
                    beam: i / v,
                    token: i % v,
                    score: scores[i],
                })
                .collect();
            let hits: Vec<bool> = top
                .iter()
                .map(|c| last_step || cfg.stop_tokens.contains(&c.token))
                .collect();
            all_hit &= hits.iter().all(|h| *h);
            // The running beams of the next step: the best that did not end.
            let mut ranked: Vec<(usize, f32)> = top
                .iter()
                .zip(&hits)
                .enumerate()
                .map(|(i, (c, &h))| (i, c.score + if h { OUT } else { 0.0 }))
                .collect();
            ranked.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            for &(i, score) in ranked.iter().take(k) {
                next_rows.push(p * k + top[i].beam);
                next_tokens.push(top[i].token);
                next_scores.push(score);
            }
            // Finished hypotheses: only among the first `k` candidates.
            let generated = (cur_len + 1 - prompt_len) as f32;
            let full = finished[p].iter().all(|f| f.done)
                && cfg.early_stopping == EarlyStopping::AllFinished;
            let mut merged = finished[p].clone();
            for (i, c) in top.iter().enumerate() {
                let just = hits[i] && i < k;
                let mut score = c.score / generated.powf(cfg.length_penalty as f32);
                if full {
                    score += OUT;
                }
                if !unsatisfied[p] {
                    score += OUT;
                }
                if !just {
                    score += OUT;
                }
                let mut tokens = seqs[p * k + c.beam][prompt_len..].to_vec();
                tokens.push(c.token);
                merged.push(Finished {
                    tokens,
                    score,
                    done: just,
                });
            }
            let mut idx: Vec<usize> = (0..merged.len()).collect();
            idx.sort_by(|&x, &y| merged[y].score.total_cmp(&merged[x].score).then(x.cmp(&y)));
            finished[p] = idx[..k].iter().map(|&i| merged[i].clone()).collect();
        }
        // Move the beams: sequences, scores and the cache follow their origin rows.
        seqs = next_rows
            .iter()
            .zip(&next_tokens)
            .map(|(&r, &t)| {
                let mut s = seqs[r].clone();
                s.push(t);
                s
            })
            .collect();
        running = next_scores;
        if let Some(c) = cache.as_mut() {
            model.reorder_cache(c, &next_rows)?;
        }
        cur_len += 1;
        // Can a running beam still beat the worst finished hypothesis?
        let best_len = if cfg.early_stopping == EarlyStopping::Never && cfg.length_penalty > 0.0 {
            max_length - prompt_len
        } else {
            cur_len - prompt_len
        } as f32;
        for p in 0..b {
            let best_possible = running[p * k] / best_len.powf(cfg.length_penalty as f32);
            let worst = finished[p]
                .iter()
                .map(|f| f.score)
                .fold(f32::INFINITY, f32::min);
            let can_improve = finished[p]
                .iter()
                .any(|f| best_possible > if f.done { worst } else { OUT });
            unsatisfied[p] &= can_improve;
        }
        let open = !(cfg.early_stopping == EarlyStopping::AllFinished
            && finished.iter().flatten().all(|f| f.done));
        if !unsatisfied.iter().any(|u| *u) || !open || all_hit {
            break;
        }
    }
    Ok(BeamOutput {
        tokens: finished.iter().map(|f| f[0].tokens.clone()).collect(),
        scores: finished.iter().map(|f| f[0].score).collect(),
        elapsed: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ModelError;
    use crate::generate::{GenerationConfig, generate};
    use burn::tensor::{Tensor, TensorData};
    use zoo_device::test_device;

    /// A model whose next-token log-probabilities depend on the whole sequence so far,
    /// through a table keyed by it (a default row otherwise). Its "cache" counts the
    /// positions fed and records each reorder, so tests see what the search does to it.
    struct Table {
        vocab: usize,
        rows: Vec<(Vec<usize>, Vec<f32>)>,
        default: Vec<f32>,
        max_len: usize,
    }

    #[derive(Debug, Default)]
    struct Seen {
        seqs: Vec<Vec<usize>>,
        reorders: usize,
    }

    impl CausalLm for Table {
        type Cache = Seen;
        fn vocab_size(&self) -> usize {
            self.vocab
        }
        fn max_len(&self) -> usize {
            self.max_len
        }
        fn new_cache(&self, batch: usize) -> Result<Seen, ModelError> {
            Ok(Seen {
                seqs: vec![Vec::new(); batch],
                reorders: 0,
            })
        }
        fn next_logits(
            &self,
            step: DecodeStep,
            cache: Option<&mut Seen>,
        ) -> Result<Tensor<2>, ModelError> {
            let seqs: Vec<Vec<usize>> = match cache {
                Some(c) => {
                    for (s, new) in c.seqs.iter_mut().zip(&step.tokens) {
                        s.extend(new);
                    }
                    c.seqs.clone()
                }
                None => step.tokens.clone(),
            };
            let flat: Vec<f32> = seqs
                .iter()
                .flat_map(|s| {
                    self.rows
                        .iter()
                        .find(|(k, _)| k == s)
                        .map_or_else(|| self.default.clone(), |(_, v)| v.clone())
                        .into_iter()
                        .map(f32::ln)
                })
                .collect();
            Ok(Tensor::from_data(
                TensorData::new(flat, [seqs.len(), self.vocab]),
                &test_device(),
            ))
        }
        fn reorder_cache(&self, cache: &mut Seen, rows: &[usize]) -> Result<(), ModelError> {
            cache.seqs = rows.iter().map(|&r| cache.seqs[r].clone()).collect();
            cache.reorders += 1;
            Ok(())
        }
    }

    /// Tokens 0 (EOS), 1, 2, 3 after the prompt [3]. Greedy takes 1 (p 0.5) and then
    /// finds only p 0.3 tokens; 2 (p 0.4) is followed by 0 with p 0.9, so the sequence
    /// [2, 0] (0.36) beats every continuation of [1] (at most 0.15).
    fn trap() -> Table {
        Table {
            vocab: 4,
            rows: vec![
                (vec![3], vec![0.05, 0.5, 0.4, 0.05]),
                (vec![3, 1], vec![0.3, 0.3, 0.3, 0.1]),
                (vec![3, 2], vec![0.9, 0.04, 0.03, 0.03]),
            ],
            default: vec![0.25; 4],
            max_len: 10,
        }
    }

    #[test]
    fn beam_finds_the_more_probable_sequence_greedy_misses() {
        let m = trap();
        let greedy = generate(
            &m,
            &[vec![3]],
            &GenerationConfig::greedy(2).with_stop_tokens(vec![0]),
            |_, _| {},
        )
        .unwrap();
        assert_eq!(greedy.tokens, vec![vec![1, 0]]);
        let cfg = BeamConfig::new(2, 2).with_stop_tokens(vec![0]);
        let out = beam_search(&m, &[vec![3]], &cfg).unwrap();
        assert_eq!(out.tokens, vec![vec![2, 0]]);
        // Its score is log(0.4 · 0.9) over 2 generated tokens.
        let want = (0.4f32.ln() + 0.9f32.ln()) / 2.0;
        assert!((out.scores[0] - want).abs() < 1e-5, "{}", out.scores[0]);
        // Without the cache, the same.
        let out = beam_search(&m, &[vec![3]], &cfg.clone().with_cache(false)).unwrap();
        assert_eq!(out.tokens, vec![vec![2, 0]]);
    }

    #[test]
    fn one_beam_is_greedy() {
        let m = Table {
            vocab: 5,
            rows: vec![
                (vec![1], vec![0.1, 0.1, 0.6, 0.1, 0.1]),
                (vec![1, 2], vec![0.1, 0.1, 0.1, 0.1, 0.6]),
                (vec![1, 2, 4], vec![0.1, 0.5, 0.2, 0.1, 0.1]),
                (vec![4], vec![0.1, 0.1, 0.1, 0.6, 0.1]),
            ],
            default: vec![0.3, 0.1, 0.2, 0.25, 0.15],
            max_len: 12,
        };
        for prompt in [vec![1], vec![4], vec![2, 2]] {
            let g = generate(
                &m,
                std::slice::from_ref(&prompt),
                &GenerationConfig::greedy(6).with_stop_tokens(vec![0]),
                |_, _| {},
            )
            .unwrap();
            let b = beam_search(
                &m,
                std::slice::from_ref(&prompt),
                &BeamConfig::new(1, 6).with_stop_tokens(vec![0]),
            )
            .unwrap();
            assert_eq!(b.tokens, g.tokens, "{prompt:?}");
        }
    }

    #[test]
    fn the_length_penalty_changes_the_ranking_as_defined() {
        // After [3]: EOS at once (p 0.4), or token 1 (p 0.6) then EOS (p 0.6): the short
        // hypothesis has log 0.4 = -0.92, the long one log 0.36 = -1.02 in total.
        let m = Table {
            vocab: 4,
            rows: vec![
                (vec![3], vec![0.4, 0.6, 0.0, 0.0]),
                (vec![3, 1], vec![0.6, 0.2, 0.2, 0.0]),
            ],
            default: vec![1.0, 0.0, 0.0, 0.0],
            max_len: 10,
        };
        let run = |lp: f64| {
            let cfg = BeamConfig::new(2, 3)
                .with_stop_tokens(vec![0])
                .with_length_penalty(lp)
                .with_early_stopping(EarlyStopping::Never);
            beam_search(&m, &[vec![3]], &cfg).unwrap()
        };
        // Penalty 0: the summed log-probability alone, so the short one wins.
        let short = run(0.0);
        assert_eq!(short.tokens, vec![vec![0]]);
        assert!((short.scores[0] - 0.4f32.ln()).abs() < 1e-5);
        // Penalty 1: divided by the length, -0.92 / 1 against -1.02 / 2: the long one.
        let long = run(1.0);
        assert_eq!(long.tokens, vec![vec![1, 0]]);
        assert!((long.scores[0] - 0.36f32.ln() / 2.0).abs() < 1e-5);
    }

    #[test]
    fn no_repeat_ngrams_and_bad_settings() {
        assert_eq!(banned_by_ngrams(&[1, 2, 3, 1], 2), vec![2]);
        assert_eq!(banned_by_ngrams(&[1, 2, 1, 2, 1], 3), vec![2]);
        assert!(banned_by_ngrams(&[1], 3).is_empty());
        // A model that always prefers token 1 cannot say "1 1" twice with n = 2.
        let m = Table {
            vocab: 3,
            rows: Vec::new(),
            default: vec![0.1, 0.6, 0.3],
            max_len: 10,
        };
        let out = beam_search(
            &m,
            &[vec![2]],
            &BeamConfig::new(2, 4).with_no_repeat_ngram_size(2),
        )
        .unwrap();
        let seq: Vec<usize> = std::iter::once(2).chain(out.tokens[0].clone()).collect();
        let pairs: Vec<&[usize]> = seq.windows(2).collect();
        for (i, p) in pairs.iter().enumerate() {
            assert!(!pairs[i + 1..].contains(p), "{seq:?} repeats {p:?}");
        }
        let e = beam_search(&m, &[vec![2]], &BeamConfig::new(0, 4)).unwrap_err();
        assert_eq!(e.to_string(), "generation: num_beams must be >= 1, got 0");
        let e = beam_search(&m, &[vec![]], &BeamConfig::new(2, 4)).unwrap_err();
        assert_eq!(e.to_string(), "prompt 0 is empty");
        let e = beam_search(&m, &[vec![3]], &BeamConfig::new(2, 4)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "token id 3 at batch row 0, position 0 is out of range for vocab_size 3"
        );
    }

    #[test]
    fn the_cache_follows_the_beams() {
        // After step 2 the beams swap rows: [3, 2, 1] continues from row 1 and [3, 1, 1]
        // from row 0. Only the reordered cache shows the model [3, 2, 1], after which EOS
        // has p 0.9; a cache left in place would show [3, 1, 1], where the default row
        // prefers token 3.
        let m = Table {
            vocab: 4,
            rows: vec![
                (vec![3], vec![0.05, 0.5, 0.4, 0.05]),
                (vec![3, 1], vec![0.3, 0.3, 0.3, 0.1]),
                (vec![3, 2], vec![0.02, 0.9, 0.04, 0.04]),
                (vec![3, 2, 1], vec![0.9, 0.04, 0.03, 0.03]),
            ],
            default: vec![0.1, 0.2, 0.3, 0.4],
            max_len: 10,
        };
        let cfg = BeamConfig::new(2, 3).with_stop_tokens(vec![0]);
        let cached = beam_search(&m, &[vec![3]], &cfg).unwrap();
        assert_eq!(cached.tokens, vec![vec![2, 1, 0]]);
        let uncached = beam_search(&m, &[vec![3]], &cfg.with_cache(false)).unwrap();
        assert_eq!(uncached.tokens, cached.tokens);
        assert_eq!(uncached.scores, cached.scores);
    }
}
