//! Text generation: greedy decoding and sampling (temperature, top-k, top-p), a repetition
//! penalty, stop tokens, batched prompts of unequal length, and a KV cache (on by default).
//!
//! Prompts are left-padded to the longest; padding keys are masked and each row's
//! positions start at its first real token, so a batched prompt decodes as it would alone.

use std::time::{Duration, Instant};

use burn::tensor::{Bool, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};

use crate::error::{DecoderError, Result};
use crate::model::{DecoderInput, DecoderLm};

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
    /// Penalty on tokens already in the sequence (Keskar et al., 2019): positive logits
    /// are divided by it, negative ones multiplied. 1 is off.
    pub repetition_penalty: f64,
    /// Generation of a row stops after it emits one of these.
    pub stop_tokens: Vec<usize>,
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
            repetition_penalty: 1.0,
            stop_tokens: Vec::new(),
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

    /// Turns the KV cache on or off.
    pub fn with_cache(mut self, use_cache: bool) -> Self {
        self.use_cache = use_cache;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// A negative temperature, `top_k = 0`, `top_p` outside `(0, 1]`, or a penalty ≤ 0.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(DecoderError::Generation(m));
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

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

/// Picks one token from one row of logits.
pub fn pick_token(
    logits: &[f32],
    history: &[usize],
    cfg: &GenerationConfig,
    rng: &mut impl Rng,
) -> usize {
    let mut l = logits.to_vec();
    apply_repetition_penalty(&mut l, history, cfg.repetition_penalty);
    if cfg.temperature == 0.0 {
        return argmax(&l);
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
    let u: f64 = rng.random();
    let mut cum = 0.0;
    for (i, p) in order.iter().zip(&probs) {
        cum += p;
        if u < cum {
            return *i;
        }
    }
    *order.last().expect("at least one token is kept")
}

/// Generates continuations of `prompts`, calling `on_token(row, token)` for each new
/// token as it is chosen (streaming).
///
/// # Errors
/// Empty prompts, ids outside the vocabulary, a prompt longer than the model's `max_len`,
/// or invalid settings.
pub fn generate(
    model: &DecoderLm,
    prompts: &[Vec<usize>],
    cfg: &GenerationConfig,
    mut on_token: impl FnMut(usize, usize),
) -> Result<Generation> {
    cfg.validate()?;
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(DecoderError::Generation(
            "every prompt needs at least one token".into(),
        ));
    }
    if cfg.pad_id >= model.vocab_size() {
        return Err(DecoderError::Generation(format!(
            "pad_id {} is out of range for vocab_size {}",
            cfg.pad_id,
            model.vocab_size()
        )));
    }
    let device = model.wte.weight.val().device();
    let b = prompts.len();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    if longest > model.max_len() {
        return Err(DecoderError::TooLong {
            len: longest,
            max_len: model.max_len(),
        });
    }
    let pads: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
    let max_new = cfg.max_new_tokens.min(model.max_len() - longest);
    // Every row's tokens so far, left-padded.
    let mut seqs: Vec<Vec<usize>> = prompts
        .iter()
        .zip(&pads)
        .map(|(p, &n)| {
            std::iter::repeat_n(cfg.pad_id, n)
                .chain(p.iter().copied())
                .collect()
        })
        .collect();
    let int_tensor = |rows: &[Vec<i64>]| {
        let t = rows[0].len();
        let flat: Vec<i64> = rows.iter().flatten().copied().collect();
        Tensor::<2, Int>::from_data(TensorData::new(flat, [rows.len(), t]), &device)
    };
    let pad_mask = |len: usize| {
        let flat: Vec<bool> = pads
            .iter()
            .flat_map(|&p| (0..len).map(move |s| s < p))
            .collect();
        Tensor::<2, Bool>::from_data(TensorData::new(flat, [b, len]), &device)
    };
    let positions = |from: usize, to: usize| -> Vec<Vec<i64>> {
        pads.iter()
            .map(|&p| (from..to).map(|s| s.saturating_sub(p) as i64).collect())
            .collect()
    };
    let start = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut cache = cfg.use_cache.then(|| model.new_cache());
    let mut new_tokens: Vec<Vec<usize>> = vec![Vec::new(); b];
    let mut stopped = vec![false; b];
    let mut fed = 0; // positions already in the cache
    for _ in 0..max_new {
        let len = seqs[0].len();
        let (tokens, pos) = match &cache {
            Some(_) => {
                let rows: Vec<Vec<i64>> = seqs
                    .iter()
                    .map(|s| s[fed..].iter().map(|&t| t as i64).collect())
                    .collect();
                (int_tensor(&rows), int_tensor(&positions(fed, len)))
            }
            None => {
                let rows: Vec<Vec<i64>> = seqs
                    .iter()
                    .map(|s| s.iter().map(|&t| t as i64).collect())
                    .collect();
                (int_tensor(&rows), int_tensor(&positions(0, len)))
            }
        };
        let input = DecoderInput::new(tokens)
            .positions(pos)
            .key_padding(pad_mask(len));
        let logits = match cache.as_mut() {
            Some(c) => model.forward_cached(input, c)?.logits,
            None => model.forward(input)?.logits,
        };
        fed = len;
        let [_, t, v] = logits.dims();
        // [B, T, V] -> last position [B, V]
        let last = logits
            .slice([0..b, t - 1..t, 0..v])
            .reshape([b, v])
            .into_data()
            .try_to_vec::<f32>()
            .map_err(|e| DecoderError::Generation(format!("cannot read logits: {e:?}")))?;
        for row in 0..b {
            if stopped[row] {
                seqs[row].push(cfg.pad_id);
                continue;
            }
            let history = &seqs[row][pads[row]..];
            let tok = pick_token(&last[row * v..(row + 1) * v], history, cfg, &mut rng);
            seqs[row].push(tok);
            new_tokens[row].push(tok);
            on_token(row, tok);
            if cfg.stop_tokens.contains(&tok) {
                stopped[row] = true;
            }
        }
        if stopped.iter().all(|s| *s) {
            break;
        }
    }
    Ok(Generation {
        tokens: new_tokens,
        stopped,
        elapsed: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DecoderConfig;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    fn model(cfg: DecoderConfig) -> DecoderLm {
        cfg.init(&test_device()).unwrap()
    }

    #[test]
    fn cached_and_uncached_greedy_agree() {
        for cfg in [
            DecoderConfig::new(13, 16, 2, 4, 24),
            DecoderConfig::tiny_llama(13, 24),
        ] {
            let m = model(cfg);
            let prompts = vec![vec![1, 2, 3, 4], vec![5, 6]];
            let a = generate(&m, &prompts, &GenerationConfig::greedy(10), |_, _| {}).unwrap();
            let b = generate(
                &m,
                &prompts,
                &GenerationConfig::greedy(10).with_cache(false),
                |_, _| {},
            )
            .unwrap();
            assert_eq!(a.tokens, b.tokens);
            assert_eq!(a.tokens[0].len(), 10);
            assert!(a.tokens_per_second() > 0.0);
        }
    }

    #[test]
    fn cached_and_uncached_logits_agree() {
        let m = model(DecoderConfig::tiny_llama(13, 24));
        let toks = Tensor::<1, Int>::from_ints([1, 2, 3, 4, 5, 6], &test_device()).reshape([1, 6]);
        let full = m.forward(DecoderInput::new(toks.clone())).unwrap().logits;
        let mut cache = m.new_cache();
        let mut steps = vec![];
        for i in 0..6 {
            steps.push(
                m.forward_cached(
                    DecoderInput::new(toks.clone().slice([0..1, i..i + 1])),
                    &mut cache,
                )
                .unwrap()
                .logits,
            );
        }
        assert!(max_abs_diff(&full, &Tensor::cat(steps, 1)) < 1e-4);
    }

    #[test]
    fn batched_prompts_decode_as_alone() {
        for cfg in [
            DecoderConfig::new(13, 16, 2, 4, 24),
            DecoderConfig::tiny_llama(13, 24),
        ] {
            let m = model(cfg);
            let prompts = vec![vec![1, 2, 3, 4, 5], vec![7, 8]];
            let batched = generate(&m, &prompts, &GenerationConfig::greedy(6), |_, _| {}).unwrap();
            for (i, p) in prompts.iter().enumerate() {
                let alone = generate(
                    &m,
                    std::slice::from_ref(p),
                    &GenerationConfig::greedy(6),
                    |_, _| {},
                )
                .unwrap();
                assert_eq!(batched.tokens[i], alone.tokens[0], "row {i}");
            }
        }
    }

    #[test]
    fn stops_on_the_stop_token_and_streams() {
        let m = model(DecoderConfig::new(13, 16, 2, 4, 24));
        let free = generate(&m, &[vec![1, 2]], &GenerationConfig::greedy(8), |_, _| {}).unwrap();
        let stop = free.tokens[0][2];
        let mut streamed = vec![];
        let cfg = GenerationConfig::greedy(8).with_stop_tokens(vec![stop]);
        let g = generate(&m, &[vec![1, 2]], &cfg, |_, t| streamed.push(t)).unwrap();
        let first = free.tokens[0].iter().position(|&t| t == stop).unwrap();
        assert_eq!(g.tokens[0], free.tokens[0][..=first].to_vec());
        assert!(g.stopped[0]);
        assert_eq!(streamed, g.tokens[0]);
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        let m = model(DecoderConfig::new(13, 16, 2, 4, 24));
        let prompts = vec![vec![3, 1, 4]];
        let greedy = generate(&m, &prompts, &GenerationConfig::greedy(8), |_, _| {}).unwrap();
        for seed in 0..3 {
            let k1 = GenerationConfig::sampling(8, 1.0, seed).with_top_k(1);
            assert_eq!(
                generate(&m, &prompts, &k1, |_, _| {}).unwrap().tokens,
                greedy.tokens
            );
            let p = GenerationConfig::sampling(8, 1.0, seed).with_top_p(1e-6);
            assert_eq!(
                generate(&m, &prompts, &p, |_, _| {}).unwrap().tokens,
                greedy.tokens
            );
        }
    }

    #[test]
    fn sampling_is_seeded() {
        let m = model(DecoderConfig::new(13, 16, 2, 4, 24));
        let cfg = GenerationConfig::sampling(12, 1.0, 5);
        let a = generate(&m, &[vec![1]], &cfg, |_, _| {}).unwrap();
        let b = generate(&m, &[vec![1]], &cfg, |_, _| {}).unwrap();
        assert_eq!(a.tokens, b.tokens);
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

    #[test]
    fn bad_settings_and_prompts_are_errors() {
        let m = model(DecoderConfig::new(13, 16, 2, 4, 8));
        let e = generate(&m, &[vec![1; 9]], &GenerationConfig::greedy(1), |_, _| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "sequence of 9 tokens is longer than max_len 8"
        );
        let e = generate(&m, &[vec![]], &GenerationConfig::greedy(1), |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("at least one token"));
        let e = generate(
            &m,
            &[vec![1]],
            &GenerationConfig::sampling(1, 1.0, 0).with_top_p(1.5),
            |_, _| {},
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "generation: top_p must be in (0, 1], got 1.5"
        );
        let e = generate(&m, &[vec![13]], &GenerationConfig::greedy(1), |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("token id 13"), "{e}");
        // Generation stops at max_len.
        let g = generate(&m, &[vec![1; 5]], &GenerationConfig::greedy(10), |_, _| {}).unwrap();
        assert_eq!(g.tokens[0].len(), 3);
    }
}
