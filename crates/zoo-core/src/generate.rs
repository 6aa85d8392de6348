//! Text generation written once for every model that implements [`CausalLm`]: greedy
//! decoding and sampling (temperature, top-k, top-p, min-p), a repetition penalty, stop
//! tokens, batched prompts of unequal length, and a KV cache (on by default). Two kinds of
//! hook take a user's own rules without a change here: [`LogitsProcessor`]s change each
//! row's logits before a token is picked, and [`StoppingCriterion`]s end a row (a stop
//! string, a budget of its own).
//!
//! Prompts are left-padded to the longest; padding keys are masked and each row's
//! positions start at its first real token, so a batched prompt decodes as it would alone.
//! Every id and position is built and checked on the host; the loop reads back from the
//! device only the logits it samples from.

use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use rand::{Rng, SeedableRng};

use crate::error::CoreError;
use crate::model::{CausalLm, DecodeStep};
use crate::tokens::TokenLimits;

/// A rule that changes one row's next-token logits before a token is picked, as
/// `transformers`' `LogitsProcessor`: it runs after the repetition penalty and before the
/// temperature, top-k, top-p and min-p.
pub trait LogitsProcessor: Send + Sync + std::fmt::Debug {
    /// Changes `logits` (one per vocabulary entry) of a row whose tokens so far, the
    /// prompt's included, are `history`.
    fn process(&self, logits: &mut [f32], history: &[usize]);
}

/// A rule that ends a row's generation after a token, as `transformers`'
/// `StoppingCriteria`: a stop string, a budget of its own.
pub trait StoppingCriterion: Send + Sync + std::fmt::Debug {
    /// Whether row `row` stops now that it has generated `new_tokens` (the last one
    /// included, which stays in the output).
    fn stops(&self, row: usize, new_tokens: &[usize]) -> bool;
}

/// Hooks of one kind, in order. Two lists are equal when they hold the same hooks.
#[derive(Debug)]
pub struct Hooks<T: ?Sized>(pub Vec<Arc<T>>);

impl<T: ?Sized> Clone for Hooks<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: ?Sized> Default for Hooks<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: ?Sized> PartialEq for Hooks<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// How to pick the next tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    /// Most tokens to add to each prompt (fewer when the model's `max_len` is reached).
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f64,
    /// Keep only the `k` most likely tokens before sampling.
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches `p` (nucleus sampling,
    /// Holtzman et al., 2020).
    pub top_p: Option<f64>,
    /// Drop the tokens less likely than `min_p` times the most likely one (min-p
    /// sampling, Nguyen et al., 2024), after top-k and top-p, as `transformers` does.
    pub min_p: Option<f64>,
    /// The user's logits processors, in order.
    pub processors: Hooks<dyn LogitsProcessor>,
    /// The user's stopping criteria; a row stops when any says so.
    pub stopping: Hooks<dyn StoppingCriterion>,
    /// Penalty on tokens already in the sequence (Keskar et al., 2019): positive logits
    /// are divided by it, negative ones multiplied. 1 is off.
    pub repetition_penalty: f64,
    /// Generation of a row stops after it emits one of these.
    pub stop_tokens: Vec<usize>,
    /// Tokens never generated (HF's single-token `bad_words_ids`): ids the tokenizer
    /// cannot decode, such as the rows a checkpoint pads its embedding to, or a pad token.
    pub banned_tokens: Vec<usize>,
    /// Seed of the sampler.
    pub seed: u64,
    /// Decode with a KV cache (default) or recompute the whole sequence every step.
    pub use_cache: bool,
    /// Token used to left-pad shorter prompts (it is masked; any valid id works).
    pub pad_id: usize,
}

impl GenerationConfig {
    /// Greedy decoding of up to `max_new_tokens`.
    pub fn greedy(max_new_tokens: usize) -> Self {
        Self {
            max_new_tokens,
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            processors: Hooks::default(),
            stopping: Hooks::default(),
            repetition_penalty: 1.0,
            stop_tokens: Vec::new(),
            banned_tokens: Vec::new(),
            seed: 0,
            use_cache: true,
            pad_id: 0,
        }
    }

    /// Sampling at `temperature` with a seed.
    pub fn sampling(max_new_tokens: usize, temperature: f64, seed: u64) -> Self {
        Self {
            temperature,
            seed,
            ..Self::greedy(max_new_tokens)
        }
    }

    /// Sets top-k.
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = Some(k);
        self
    }

    /// Sets top-p.
    pub fn with_top_p(mut self, p: f64) -> Self {
        self.top_p = Some(p);
        self
    }

    /// Sets min-p.
    pub fn with_min_p(mut self, p: f64) -> Self {
        self.min_p = Some(p);
        self
    }

    /// Adds a logits processor after those already set.
    pub fn with_processor(mut self, processor: Arc<dyn LogitsProcessor>) -> Self {
        self.processors.0.push(processor);
        self
    }

    /// Adds a stopping criterion.
    pub fn with_stopping(mut self, criterion: Arc<dyn StoppingCriterion>) -> Self {
        self.stopping.0.push(criterion);
        self
    }

    /// Sets the repetition penalty.
    pub fn with_repetition_penalty(mut self, penalty: f64) -> Self {
        self.repetition_penalty = penalty;
        self
    }

    /// Sets the stop tokens.
    pub fn with_stop_tokens(mut self, stop: Vec<usize>) -> Self {
        self.stop_tokens = stop;
        self
    }

    /// Adds tokens that are never generated.
    pub fn with_banned_tokens(mut self, banned: impl IntoIterator<Item = usize>) -> Self {
        self.banned_tokens.extend(banned);
        self
    }

    /// Turns the KV cache on or off.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// A negative temperature, `top_k = 0`, `top_p` outside `(0, 1]`, or a penalty ≤ 0.
    pub fn validate(&self) -> Result<(), CoreError> {
        let bad = |m: String| Err(CoreError::Generation(m));
        if self.temperature.is_nan() || self.temperature < 0.0 {
            return bad(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if self.top_k == Some(0) {
            return bad("top_k must be >= 1, got 0".into());
        }
        if let Some(p) = self.top_p.filter(|p| p.is_nan() || *p <= 0.0 || *p > 1.0) {
            return bad(format!("top_p must be in (0, 1], got {p}"));
        }
        if let Some(p) = self.min_p.filter(|p| p.is_nan() || *p < 0.0 || *p > 1.0) {
            return bad(format!("min_p must be in [0, 1], got {p}"));
        }
        if self.repetition_penalty.is_nan() || self.repetition_penalty <= 0.0 {
            return bad(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The new tokens of each prompt, the stop token included when one was emitted.
    pub tokens: Vec<Vec<usize>>,
    /// Whether each row ended on a stop token.
    pub stopped: Vec<bool>,
    /// Wall time of the decoding loop (prompt processing included).
    pub elapsed: Duration,
}

impl Generation {
    /// New tokens per second over all rows.
    pub fn tokens_per_second(&self) -> f64 {
        let n: usize = self.tokens.iter().map(Vec::len).sum();
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Applies the repetition penalty to the logits of tokens in `history`.
pub fn apply_repetition_penalty(logits: &mut [f32], history: &[usize], penalty: f64) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = vec![false; logits.len()];
    for &t in history {
        if t < logits.len() && !seen[t] {
            seen[t] = true;
            let l = logits[t] as f64;
            logits[t] = if l > 0.0 { l / penalty } else { l * penalty } as f32;
        }
    }
}

/// One decoding step's logits, `[rows, vocab]`, read back to the host as `rows` rows of
/// `vocab` floats, with the vocabulary size.
///
/// # Errors
/// Another number of rows than `rows`, or a NaN, named by the sequence `position` it
/// would fill, its row and token id: a greedy argmax or a sort would otherwise pick a
/// token from garbage without a word.
pub(crate) fn read_logits(
    logits: burn::tensor::Tensor<2>,
    rows: usize,
    position: usize,
) -> Result<(Vec<f32>, usize), CoreError> {
    let v = check_logit_rows(&logits, rows)?;
    logits_from_data(logits.into_data(), v, position)
}

/// The logits' vocabulary size, once their rows are `rows`.
fn check_logit_rows(logits: &burn::tensor::Tensor<2>, rows: usize) -> Result<usize, CoreError> {
    let [got, v] = logits.dims();
    if got != rows {
        return Err(CoreError::Generation(format!(
            "the model returned logits for {got} rows, expected {rows}"
        )));
    }
    Ok(v)
}

/// Logits read back (`[rows, v]`) as floats, refused with a NaN as [`read_logits`] says.
fn logits_from_data(
    data: burn::tensor::TensorData,
    v: usize,
    position: usize,
) -> Result<(Vec<f32>, usize), CoreError> {
    let all = data
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| CoreError::Generation(format!("cannot read logits: {e:?}")))?;
    if let Some(i) = all.iter().position(|x| x.is_nan()) {
        return Err(CoreError::Generation(format!(
            "the model's logits for position {position} are NaN (row {}, token id {}): \
             its weights or inputs hold non-finite values",
            i / v.max(1),
            i % v.max(1)
        )));
    }
    Ok((all, v))
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

/// The distribution that sampling draws from for one row of logits, after the repetition
/// penalty, the user's processors, the temperature, top-k, top-p and min-p: `(token,
/// probability)` pairs, most likely first, summing to 1. Greedy settings (temperature 0)
/// give the argmax with probability 1.
pub fn next_token_distribution(
    logits: &[f32],
    history: &[usize],
    cfg: &GenerationConfig,
) -> Vec<(usize, f64)> {
    let mut l = logits.to_vec();
    for &t in &cfg.banned_tokens {
        if let Some(x) = l.get_mut(t) {
            *x = f32::NEG_INFINITY;
        }
    }
    apply_repetition_penalty(&mut l, history, cfg.repetition_penalty);
    for p in &cfg.processors.0 {
        p.process(&mut l, history);
    }
    if cfg.temperature == 0.0 {
        return vec![(argmax(&l), 1.0)];
    }
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
    if let Some(k) = cfg.top_k {
        order.truncate(k.max(1));
    }
    let max = l[order[0]] as f64;
    let mut probs: Vec<f64> = order
        .iter()
        .map(|&i| ((l[i] as f64 - max) / cfg.temperature).exp())
        .collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    if let Some(top_p) = cfg.top_p {
        let mut cum = 0.0;
        let mut keep = 0;
        for p in &probs {
            keep += 1;
            cum += p;
            if cum >= top_p {
                break;
            }
        }
        order.truncate(keep);
        probs.truncate(keep);
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
    }
    if let Some(min_p) = cfg.min_p {
        // The most likely token always stays; renormalising keeps the ratios.
        let floor = min_p * probs[0];
        let keep = probs.iter().take_while(|p| **p >= floor).count().max(1);
        order.truncate(keep);
        probs.truncate(keep);
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
    }
    order.into_iter().zip(probs).collect()
}

/// Picks one token from one row of logits.
pub fn pick_token(
    logits: &[f32],
    history: &[usize],
    cfg: &GenerationConfig,
    rng: &mut impl Rng,
) -> usize {
    let dist = next_token_distribution(logits, history, cfg);
    if dist.len() == 1 {
        return dist[0].0;
    }
    let u: f64 = rng.random();
    let mut cum = 0.0;
    for &(token, p) in &dist {
        cum += p;
        if u < cum {
            return token;
        }
    }
    // Rounding can leave the cumulative sum a hair under 1.
    dist.last().map_or(0, |&(token, _)| token)
}

/// Checks prompts and settings against the model before anything runs.
fn check_prompts(
    prompts: &[Vec<usize>],
    cfg: &GenerationConfig,
    vocab_size: usize,
    max_len: usize,
) -> Result<(), CoreError> {
    cfg.validate()?;
    check_banned(&cfg.banned_tokens, vocab_size)?;
    check_ids(prompts, cfg.pad_id, vocab_size, max_len)
}

/// Banned tokens inside the vocabulary that leave at least one token to generate.
pub(crate) fn check_banned(banned: &[usize], vocab_size: usize) -> Result<(), CoreError> {
    if let Some(t) = banned.iter().find(|&&t| t >= vocab_size) {
        return Err(CoreError::Generation(format!(
            "banned token {t} is out of range for vocab_size {vocab_size}"
        )));
    }
    let mut distinct = banned.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() >= vocab_size {
        return Err(CoreError::Generation(format!(
            "every token of vocab_size {vocab_size} is banned: none is left to generate"
        )));
    }
    Ok(())
}

/// Prompts that are non-empty, within the vocabulary and the model's length, with a
/// valid padding id.
pub(crate) fn check_ids(
    prompts: &[Vec<usize>],
    pad_id: usize,
    vocab_size: usize,
    max_len: usize,
) -> Result<(), CoreError> {
    if pad_id >= vocab_size {
        return Err(CoreError::Generation(format!(
            "pad_id {pad_id} is out of range for vocab_size {vocab_size}"
        )));
    }
    Ok(TokenLimits::new(vocab_size, max_len).check_rows("prompt", prompts)?)
}

/// Generates continuations of `prompts`, calling `on_token(row, token)` for each new
/// token as it is chosen (streaming).
///
/// It runs [`generate_async`] to its end, blocking on each read of the device.
///
/// # Errors
/// Empty prompts, ids outside the vocabulary, a prompt longer than the model's `max_len`,
/// invalid settings, a failure of the model, or a backend that cannot be read
/// synchronously (WebGPU in a browser: use [`generate_async`] there).
pub fn generate<M: CausalLm>(
    model: &M,
    prompts: &[Vec<usize>],
    cfg: &GenerationConfig,
    on_token: impl FnMut(usize, usize),
) -> Result<Generation, CoreError> {
    burn::tensor::try_read_sync(generate_async(model, prompts, cfg, on_token)).unwrap_or_else(
        || {
            Err(CoreError::Generation(
                "this backend reads the device only asynchronously: use generate_async".into(),
            ))
        },
    )
}

/// [`generate`], reading each step's logits back asynchronously: the form a backend
/// that cannot block on the device needs (WebGPU in a browser). Each step runs the
/// model, waits for its logits, and picks the tokens on the host.
///
/// # Errors
/// As [`generate`], and logits the backend fails to read back.
pub async fn generate_async<M: CausalLm>(
    model: &M,
    prompts: &[Vec<usize>],
    cfg: &GenerationConfig,
    mut on_token: impl FnMut(usize, usize),
) -> Result<Generation, CoreError> {
    let mut decoding = Decoding::new(model, prompts, cfg)?;
    while let Some(logits) = decoding.next_logits()? {
        let data = logits
            .into_data_async()
            .await
            .map_err(|e| CoreError::Generation(format!("cannot read logits: {e:?}")))?;
        decoding.take(data, &mut on_token)?;
    }
    Ok(decoding.finish())
}

/// The state of one [`generate_async`] call between its steps.
struct Decoding<'a, M: CausalLm> {
    model: &'a M,
    cfg: &'a GenerationConfig,
    /// Each row's left padding.
    pads: Vec<usize>,
    /// Every row's tokens so far, left-padded.
    seqs: Vec<Vec<usize>>,
    rng: rand::rngs::StdRng,
    cache: Option<M::Cache>,
    new_tokens: Vec<Vec<usize>>,
    stopped: Vec<bool>,
    /// Positions already in the cache.
    fed: usize,
    /// Steps left before `max_new_tokens` or the model's length.
    steps_left: usize,
    /// The vocabulary size of the logits being read back.
    vocab: usize,
    start: Instant,
}

impl<'a, M: CausalLm> Decoding<'a, M> {
    fn new(
        model: &'a M,
        prompts: &[Vec<usize>],
        cfg: &'a GenerationConfig,
    ) -> Result<Self, CoreError> {
        let max_len = model.max_len();
        check_prompts(prompts, cfg, model.vocab_size(), max_len)?;
        let b = prompts.len();
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let pads: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
        let seqs = prompts
            .iter()
            .zip(&pads)
            .map(|(p, &n)| {
                std::iter::repeat_n(cfg.pad_id, n)
                    .chain(p.iter().copied())
                    .collect()
            })
            .collect();
        let start = Instant::now();
        let cache = if cfg.use_cache {
            Some(model.new_cache(b)?)
        } else {
            None
        };
        Ok(Self {
            model,
            cfg,
            pads,
            seqs,
            rng: rand::rngs::StdRng::seed_from_u64(cfg.seed),
            cache,
            new_tokens: vec![Vec::new(); b],
            stopped: vec![false; b],
            fed: 0,
            steps_left: cfg.max_new_tokens.min(max_len - longest),
            vocab: 0,
            start,
        })
    }

    /// The next step's logits `[B, V]`, still on the device, or `None` once every row
    /// has stopped or no step is left.
    fn next_logits(&mut self) -> Result<Option<burn::tensor::Tensor<2>>, CoreError> {
        if self.steps_left == 0 || self.stopped.iter().all(|s| *s) {
            return Ok(None);
        }
        self.steps_left -= 1;
        let b = self.seqs.len();
        let len = self.seqs[0].len();
        let from = crate::model::step_start(self.model, &mut self.cache, self.fed, len, b)?;
        let step = DecodeStep {
            tokens: self.seqs.iter().map(|s| s[from..len].to_vec()).collect(),
            positions: self
                .pads
                .iter()
                .map(|&p| (from..len).map(|s| s.saturating_sub(p)).collect())
                .collect(),
            key_padding: self
                .pads
                .iter()
                .map(|&p| (0..len).map(|s| s < p).collect())
                .collect(),
        };
        let logits = self.model.next_logits(step, self.cache.as_mut())?;
        self.fed = len;
        self.vocab = check_logit_rows(&logits, b)?;
        Ok(Some(logits))
    }

    /// Picks each running row's next token from the step's logits, read back.
    fn take(
        &mut self,
        logits: burn::tensor::TensorData,
        on_token: &mut impl FnMut(usize, usize),
    ) -> Result<(), CoreError> {
        let (last, v) = logits_from_data(logits, self.vocab, self.seqs[0].len())?;
        let cfg = self.cfg;
        for row in 0..self.seqs.len() {
            if self.stopped[row] {
                self.seqs[row].push(cfg.pad_id);
                continue;
            }
            let history = &self.seqs[row][self.pads[row]..];
            let tok = pick_token(&last[row * v..(row + 1) * v], history, cfg, &mut self.rng);
            self.seqs[row].push(tok);
            self.new_tokens[row].push(tok);
            on_token(row, tok);
            if cfg.stop_tokens.contains(&tok)
                || cfg
                    .stopping
                    .0
                    .iter()
                    .any(|c| c.stops(row, &self.new_tokens[row]))
            {
                self.stopped[row] = true;
            }
        }
        Ok(())
    }

    fn finish(self) -> Generation {
        Generation {
            tokens: self.new_tokens,
            stopped: self.stopped,
            elapsed: self.start.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ModelError;
    use burn::tensor::{Tensor, TensorData};
    use zoo_device::test_device;

    /// A bigram table as a model: the logits after a row are `table[last token]`. It
    /// records every step it is given, so tests can check what the loop feeds it.
    struct Bigram {
        table: Vec<Vec<f32>>,
        max_len: usize,
        steps: std::cell::RefCell<Vec<DecodeStep>>,
        rebuild_past: Option<usize>,
    }

    impl CausalLm for Bigram {
        type Cache = usize;
        fn vocab_size(&self) -> usize {
            self.table.len()
        }
        fn max_len(&self) -> usize {
            self.max_len
        }
        fn new_cache(&self, _batch: usize) -> Result<usize, ModelError> {
            Ok(0)
        }
        fn rebuild_cache_past(&self) -> Option<usize> {
            self.rebuild_past
        }
        fn next_logits(
            &self,
            step: DecodeStep,
            cache: Option<&mut usize>,
        ) -> Result<Tensor<2>, ModelError> {
            if let Some(seen) = cache {
                *seen += step.dims()[1];
            }
            let v = self.table.len();
            let flat: Vec<f32> = step
                .tokens
                .iter()
                .flat_map(|row| self.table[*row.last().unwrap()].clone())
                .collect();
            let b = step.tokens.len();
            self.steps.borrow_mut().push(step);
            Ok(Tensor::from_data(
                TensorData::new(flat, [b, v]),
                &test_device(),
            ))
        }
    }

    fn cycle(v: usize) -> Bigram {
        // After token i, token (i + 1) % v is the most likely.
        let table = (0..v)
            .map(|i| {
                (0..v)
                    .map(|j| if j == (i + 1) % v { 3.0 } else { 0.0 })
                    .collect()
            })
            .collect();
        Bigram {
            table,
            max_len: 16,
            steps: Default::default(),
            rebuild_past: None,
        }
    }

    /// Bans one token, as a user's processor would.
    #[derive(Debug)]
    struct Ban(usize);

    impl LogitsProcessor for Ban {
        fn process(&self, logits: &mut [f32], _history: &[usize]) {
            logits[self.0] = f32::NEG_INFINITY;
        }
    }

    /// Stops a row once it has `n` new tokens.
    #[derive(Debug)]
    struct Budget(usize);

    impl StoppingCriterion for Budget {
        fn stops(&self, _row: usize, new_tokens: &[usize]) -> bool {
            new_tokens.len() >= self.0
        }
    }

    #[test]
    fn min_p_keeps_the_tokens_near_the_most_likely_one() {
        // Softmax of [ln 8, ln 4, ln 2, ln 1] at temperature 1: 8/15, 4/15, 2/15, 1/15.
        let logits = [8f32.ln(), 4f32.ln(), 2f32.ln(), 0.0];
        let cfg = GenerationConfig::sampling(1, 1.0, 0).with_min_p(0.2);
        // The floor 0.2 x 8/15 lies between 2/15 and 1/15: the first three stay,
        // renormalised over 14/15.
        let d = next_token_distribution(&logits, &[], &cfg);
        let want = [(0, 8.0 / 14.0), (1, 4.0 / 14.0), (2, 2.0 / 14.0)];
        assert_eq!(d.len(), 3, "{d:?}");
        for ((t, p), (wt, wp)) in d.iter().zip(want) {
            assert_eq!(*t, wt);
            assert!((p - wp).abs() < 1e-6, "{d:?}");
        }
        // min_p 1 keeps the most likely alone; a value past 1 is refused.
        let one = GenerationConfig::sampling(1, 1.0, 0).with_min_p(1.0);
        assert_eq!(next_token_distribution(&logits, &[], &one), [(0, 1.0)]);
        let e = GenerationConfig::sampling(1, 1.0, 0)
            .with_min_p(1.5)
            .validate()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "generation: min_p must be in [0, 1], got 1.5"
        );
    }

    #[test]
    fn user_processors_and_stopping_criteria_take_part_in_generation() {
        let m = cycle(5);
        // After 1 the model wants 2; with 2 banned, greedy takes the best of the rest
        // (all tied at 0, so the first: 0), then follows the cycle.
        let cfg = GenerationConfig::greedy(4).with_processor(Arc::new(Ban(2)));
        let g = generate(&m, &[vec![1]], &cfg, |_, _| {}).unwrap();
        assert_eq!(g.tokens, vec![vec![0, 1, 0, 1]]);
        // A budget of 2 ends each row early, and says so.
        let cfg = GenerationConfig::greedy(4).with_stopping(Arc::new(Budget(2)));
        let g = generate(&m, &[vec![1], vec![3]], &cfg, |_, _| {}).unwrap();
        assert_eq!(g.tokens, vec![vec![2, 3], vec![4, 0]]);
        assert_eq!(g.stopped, vec![true, true]);
        // Hooks compare by identity.
        let ban: Arc<dyn LogitsProcessor> = Arc::new(Ban(2));
        let a = GenerationConfig::greedy(1).with_processor(ban.clone());
        assert_eq!(a, GenerationConfig::greedy(1).with_processor(ban));
        assert_ne!(
            a,
            GenerationConfig::greedy(1).with_processor(Arc::new(Ban(2)))
        );
    }

    /// Polls a future to its end on this thread (the test's executor).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park_timeout(std::time::Duration::from_millis(1));
        }
    }

    /// Polled by an executor of its own, [`generate_async`] picks the tokens that the
    /// blocking [`generate`] picks, streamed in the same order, with the same rows
    /// stopped; its errors are the same too.
    #[test]
    fn generate_async_picks_what_generate_picks() {
        // A table with no single favourite, so sampling has choices to make.
        let mut m = cycle(7);
        for (i, row) in m.table.iter_mut().enumerate() {
            row[(i + 3) % 7] = 2.5;
            row[(i * 2) % 7] += 1.0;
        }
        let prompts = [vec![1, 2, 3], vec![4], vec![0, 6]];
        let cfg = GenerationConfig::sampling(10, 1.3, 11)
            .with_top_k(4)
            .with_stop_tokens(vec![5]);
        let mut streamed = Vec::new();
        let want = generate(&m, &prompts, &cfg, |r, t| streamed.push((r, t))).unwrap();
        let mut streamed_async = Vec::new();
        let got = block_on(generate_async(&m, &prompts, &cfg, |r, t| {
            streamed_async.push((r, t))
        }))
        .unwrap();
        assert_eq!(got.tokens, want.tokens);
        assert_eq!(got.stopped, want.stopped);
        assert_eq!(streamed_async, streamed);
        // Control: the rows did stop at 5 and sample more than the argmax, and another
        // seed gives other tokens, so equal tokens are not a matter of course.
        assert!(want.stopped.iter().any(|s| *s), "{want:?}");
        let reseeded = GenerationConfig {
            seed: 12,
            ..cfg.clone()
        };
        let other = block_on(generate_async(&m, &prompts, &reseeded, |_, _| {})).unwrap();
        assert_ne!(other.tokens, want.tokens);
        // Bad input is refused as the blocking loop refuses it.
        let e = block_on(generate_async(&m, &[vec![9]], &cfg, |_, _| {})).unwrap_err();
        let blocking = generate(&m, &[vec![9]], &cfg, |_, _| {}).unwrap_err();
        assert_eq!(e.to_string(), blocking.to_string());
    }

    #[test]
    fn greedy_follows_the_model_and_feeds_only_new_tokens_with_a_cache() {
        let m = cycle(5);
        let g = generate(
            &m,
            &[vec![1, 2], vec![4]],
            &GenerationConfig::greedy(3),
            |_, _| {},
        )
        .unwrap();
        assert_eq!(g.tokens, vec![vec![3, 4, 0], vec![0, 1, 2]]);
        let steps = m.steps.borrow();
        // The prompt (left-padded), then one token per row per step.
        assert_eq!(steps[0].tokens, vec![vec![1, 2], vec![0, 4]]);
        assert_eq!(steps[0].positions, vec![vec![0, 1], vec![0, 0]]);
        assert_eq!(
            steps[0].key_padding,
            vec![vec![false, false], vec![true, false]]
        );
        assert_eq!(steps[1].tokens, vec![vec![3], vec![0]]);
        assert_eq!(steps[1].positions, vec![vec![2], vec![1]]);
        assert_eq!(
            steps[1].key_padding,
            vec![vec![false, false, false], vec![true, false, false]]
        );
    }

    /// Logits with a NaN (weights gone bad) stop greedy decoding, sampling and beam search
    /// with an error that names the position, the row and the token, instead of a token
    /// picked from garbage (a greedy argmax over NaN gave token 0).
    #[test]
    fn nan_logits_are_an_error_naming_the_position() {
        let mut m = cycle(5);
        m.table[2][3] = f32::NAN; // after token 2
        let want = "the model's logits for position 3 are NaN (row 0, token id 3): its \
                    weights or inputs hold non-finite values";
        for cfg in [
            GenerationConfig::greedy(4),
            GenerationConfig::sampling(4, 1.0, 7).with_top_k(1),
        ] {
            let e = generate(&m, &[vec![0]], &cfg, |_, _| {}).unwrap_err();
            assert_eq!(e.to_string(), format!("generation: {want}"));
        }
        let beam = crate::BeamConfig::new(2, 4).with_cache(false);
        let e = crate::beam_search(&m, &[vec![0]], &beam).unwrap_err();
        assert!(e.to_string().contains("for position 3 are NaN"), "{e}");
        // Tokens before it were decoded: the error comes at the step that meets it.
        assert_eq!(
            generate(&m, &[vec![0]], &GenerationConfig::greedy(2), |_, _| {})
                .unwrap()
                .tokens,
            vec![vec![1, 2]]
        );
    }

    /// Banned ids (the rows past a tokenizer's vocabulary) are never generated, greedy
    /// or sampled, even where the model ranks them first; banning every id, or an id past
    /// the vocabulary, is an error.
    #[test]
    fn banned_tokens_are_never_generated() {
        let m = cycle(5);
        // After 1 the model wants 2; with 2 banned every pick is 0 (the first of the ties).
        let g = generate(&m, &[vec![1]], &GenerationConfig::greedy(3), |_, _| {}).unwrap();
        assert_eq!(g.tokens, vec![vec![2, 3, 4]]);
        let banned = GenerationConfig::greedy(3).with_banned_tokens([2]);
        let g = generate(&m, &[vec![1]], &banned, |_, _| {}).unwrap();
        assert_eq!(g.tokens, vec![vec![0, 1, 0]]);
        let hot = GenerationConfig::sampling(200, 5.0, 3).with_banned_tokens([3, 4]);
        let g = generate(&m, &[vec![0]], &hot, |_, _| {}).unwrap();
        assert!(g.tokens[0].iter().all(|&t| t < 3), "{:?}", g.tokens);
        let unbanned = GenerationConfig::sampling(200, 5.0, 3);
        let g = generate(&m, &[vec![0]], &unbanned, |_, _| {}).unwrap();
        assert!(g.tokens[0].iter().any(|&t| t >= 3), "{:?}", g.tokens);
        for (cfg, want) in [
            (
                GenerationConfig::greedy(1).with_banned_tokens(0..5),
                "every token of vocab_size 5 is banned",
            ),
            (
                GenerationConfig::greedy(1).with_banned_tokens([5]),
                "banned token 5 is out of range for vocab_size 5",
            ),
        ] {
            let e = generate(&m, &[vec![0]], &cfg, |_, _| {}).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    /// A model whose encoding changes past 4 positions (LongRoPE) gets the whole sequence
    /// once, on an emptied cache, at the step that first passes 4; then single steps
    /// again.
    #[test]
    fn the_cache_is_rebuilt_once_past_the_model_s_length() {
        let m = Bigram {
            rebuild_past: Some(4),
            ..cycle(9)
        };
        let g = generate(&m, &[vec![1, 2]], &GenerationConfig::greedy(5), |_, _| {}).unwrap();
        assert_eq!(g.tokens, vec![vec![3, 4, 5, 6, 7]]);
        let steps = m.steps.borrow();
        let fed: Vec<Vec<usize>> = steps.iter().map(|s| s.tokens[0].clone()).collect();
        assert_eq!(
            fed,
            [vec![1, 2], vec![3], vec![4], vec![1, 2, 3, 4, 5], vec![6]]
        );
        assert_eq!(steps[3].positions, vec![vec![0, 1, 2, 3, 4]]);
        // Negative control: the same model without the length is fed one token a step.
        let plain = cycle(9);
        generate(
            &plain,
            &[vec![1, 2]],
            &GenerationConfig::greedy(5),
            |_, _| {},
        )
        .unwrap();
        assert_eq!(plain.steps.borrow()[3].tokens, vec![vec![5]]);
    }

    #[test]
    fn without_a_cache_every_step_holds_the_whole_sequence() {
        let m = cycle(5);
        let cfg = GenerationConfig::greedy(2).with_cache(false);
        let g = generate(&m, &[vec![1, 2]], &cfg, |_, _| {}).unwrap();
        assert_eq!(g.tokens, vec![vec![3, 4]]);
        let steps = m.steps.borrow();
        assert_eq!(steps[1].tokens, vec![vec![1, 2, 3]]);
        assert_eq!(steps[1].positions, vec![vec![0, 1, 2]]);
    }

    #[test]
    fn stops_on_the_stop_token_and_streams() {
        let m = cycle(5);
        let mut streamed = vec![];
        let cfg = GenerationConfig::greedy(8).with_stop_tokens(vec![4]);
        let g = generate(&m, &[vec![1], vec![3]], &cfg, |r, t| streamed.push((r, t))).unwrap();
        assert_eq!(g.tokens, vec![vec![2, 3, 4], vec![4]]);
        assert_eq!(g.stopped, vec![true, true]);
        assert_eq!(streamed, vec![(0, 2), (1, 4), (0, 3), (0, 4)]);
    }

    #[test]
    fn generation_stops_at_max_len() {
        let m = cycle(5);
        let g = generate(&m, &[vec![1; 14]], &GenerationConfig::greedy(10), |_, _| {}).unwrap();
        assert_eq!(g.tokens[0].len(), 2);
    }

    #[test]
    fn bad_settings_and_prompts_are_errors_naming_the_value() {
        let m = cycle(5);
        let run = |prompts: &[Vec<usize>], cfg: &GenerationConfig| {
            generate(&m, prompts, cfg, |_, _| {})
                .unwrap_err()
                .to_string()
        };
        let g = GenerationConfig::greedy(1);
        assert_eq!(
            run(&[vec![1; 17]], &g),
            "prompt of 17 tokens is longer than max_len 16"
        );
        assert_eq!(run(&[vec![]], &g), "prompt 0 is empty");
        assert_eq!(
            run(&[vec![1], vec![2, 5]], &g),
            "token id 5 at batch row 1, position 1 is out of range for vocab_size 5"
        );
        let p = GenerationConfig::sampling(1, 1.0, 0).with_top_p(1.5);
        assert_eq!(
            run(&[vec![1]], &p),
            "generation: top_p must be in (0, 1], got 1.5"
        );
        let t = GenerationConfig::sampling(1, -1.0, 0);
        assert_eq!(
            run(&[vec![1]], &t),
            "generation: temperature must be >= 0, got -1"
        );
        let k = GenerationConfig::sampling(1, 1.0, 0).with_top_k(0);
        assert_eq!(run(&[vec![1]], &k), "generation: top_k must be >= 1, got 0");
        let pad = GenerationConfig {
            pad_id: 5,
            ..GenerationConfig::greedy(1)
        };
        assert_eq!(
            run(&[vec![1]], &pad),
            "generation: pad_id 5 is out of range for vocab_size 5"
        );
        assert!(m.steps.borrow().is_empty(), "nothing ran");
    }

    #[test]
    fn repetition_penalty_as_defined() {
        let mut l = vec![2.0, -1.0, 0.5, 3.0];
        apply_repetition_penalty(&mut l, &[0, 1, 1], 2.0);
        assert_eq!(l, vec![1.0, -2.0, 0.5, 3.0]);
        // A strong enough penalty moves greedy off a repeated token.
        let cfg = GenerationConfig::greedy(1).with_repetition_penalty(4.0);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        assert_eq!(pick_token(&[3.0, 1.0], &[0], &cfg, &mut rng), 1);
    }

    const LOGITS: [f32; 5] = [2.0, 1.0, 0.5, 0.0, -1.0];

    /// softmax(LOGITS / t), computed directly.
    fn softmax_at(t: f64) -> Vec<f64> {
        let e: Vec<f64> = LOGITS.iter().map(|&l| (l as f64 / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    /// Pearson's chi-square of `n` seeded draws against `expected` (over all 5 tokens).
    fn chi_square(cfg: &GenerationConfig, expected: &[f64], n: usize) -> f64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
        let mut counts = [0usize; 5];
        for _ in 0..n {
            counts[pick_token(&LOGITS, &[], cfg, &mut rng)] += 1;
        }
        let mut chi = 0.0;
        for (c, &p) in counts.iter().zip(expected) {
            if p == 0.0 {
                assert_eq!(*c, 0, "a token outside the kept set was drawn");
                continue;
            }
            let e = p * n as f64;
            chi += (*c as f64 - e).powi(2) / e;
        }
        chi
    }

    #[test]
    fn sampling_follows_temperature_top_k_and_top_p() {
        let n = 20_000;
        // Temperature 0.7 over all tokens.
        let t = softmax_at(0.7);
        // Top-k 3 at temperature 1: the three largest, renormalised.
        let p1 = softmax_at(1.0);
        let s3: f64 = p1[..3].iter().sum();
        let k3: Vec<f64> = (0..5)
            .map(|i| if i < 3 { p1[i] / s3 } else { 0.0 })
            .collect();
        // Top-p 0.8 at temperature 1: p1 is about [0.55, 0.20, 0.12, 0.07, 0.03], so the
        // first three are the smallest set reaching 0.8, renormalised: the same as top-k 3.
        assert!(p1[0] + p1[1] < 0.8 && s3 >= 0.8, "{p1:?}");
        let cases = [
            (GenerationConfig::sampling(1, 0.7, 1), t.clone()),
            (
                GenerationConfig::sampling(1, 1.0, 2).with_top_k(3),
                k3.clone(),
            ),
            (
                GenerationConfig::sampling(1, 1.0, 3).with_top_p(0.8),
                k3.clone(),
            ),
        ];
        // 99.9% quantiles of chi-square with 4 and 2 degrees of freedom.
        let critical = [18.47, 13.82, 13.82];
        for ((cfg, expected), crit) in cases.iter().zip(critical) {
            let dist = next_token_distribution(&LOGITS, &[], cfg);
            for (token, p) in &dist {
                assert!((p - expected[*token]).abs() < 1e-9, "{cfg:?}: {dist:?}");
            }
            let chi = chi_square(cfg, expected, n);
            assert!(chi < crit, "{cfg:?}: chi-square {chi} >= {crit}");
        }
        // Negative control: draws at temperature 0.7 are far from temperature 1.
        let chi = chi_square(&cases[0].0, &p1, n);
        assert!(
            chi > 100.0,
            "the test cannot tell temperatures apart: {chi}"
        );
    }

    #[test]
    fn degenerate_settings_are_greedy() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        for cfg in [
            GenerationConfig::sampling(1, 1.0, 0).with_top_k(1),
            GenerationConfig::sampling(1, 1.0, 0).with_top_p(1e-6),
            GenerationConfig::greedy(1),
        ] {
            for _ in 0..50 {
                assert_eq!(pick_token(&LOGITS, &[], &cfg, &mut rng), 0);
            }
        }
    }
}
