//! The decoder as the model traits of `zoo-core` see it: token logits for training
//! ([`TokenLogits`]) and a causal LM with a cache for generation ([`CausalLm`]), so the
//! shared task adapters and generation loop drive it without knowing its family.

use burn::tensor::{Bool, Int, Tensor};
use zoo_attention::Positions;
use zoo_core::{CausalLm, DecodeStep, ModelError, TokenLogits};

use crate::error::DecoderError;
use crate::layer::Layer;
use crate::model::{DecoderCache, DecoderInput, DecoderLm};

impl<L: Layer> TokenLogits for DecoderLm<L> {
    /// Causal: a real position never sees a later one, so right padding needs no mask;
    /// the padding mask is still applied to the keys, which changes nothing for real
    /// positions and keeps padded rows finite.
    fn token_logits(
        &self,
        tokens: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<3>, ModelError> {
        let mut input = DecoderInput::new(tokens);
        if let Some(pad) = padding {
            input = input.key_padding(pad);
        }
        Ok(self.forward(input)?.logits)
    }
}

impl<L: Layer> CausalLm for DecoderLm<L> {
    type Cache = DecoderCache;

    fn vocab_size(&self) -> usize {
        DecoderLm::<L>::vocab_size(self)
    }

    fn max_len(&self) -> usize {
        DecoderLm::<L>::max_len(self)
    }

    /// Checks first that the keys and values of `batch` rows (prompts times beams) over
    /// the longest sequence can fit in memory: `--num-beams 100000` is an error naming
    /// the size, not an allocation that aborts the process.
    fn new_cache(&self, batch: usize) -> Result<DecoderCache, ModelError> {
        let lens = self.cache_lens();
        let per_row: f64 = self
            .layers
            .iter()
            .zip(&lens)
            .map(|(l, &len)| l.cache_floats_per_position() as f64 * len as f64)
            .sum();
        let len = lens.iter().copied().max().unwrap_or(0);
        let what = format!("a key-value cache of {batch} rows of up to {len} positions");
        // In the model's float type: half the bytes in f16 or bf16.
        let bytes = burn::module::Module::devices(self).first().map_or(4, |d| {
            burn::tensor::DType::from(d.settings().float_dtype).size()
        });
        zoo_core::validate::fits_in_memory(&what, batch as f64 * per_row, bytes as f64)
            .map_err(DecoderError::from)?;
        Ok(DecoderLm::<L>::new_cache(self))
    }

    /// LongRoPE's original context: past it every key is rotated again with the long
    /// factors, as `transformers`' Phi-3 regenerates its cache.
    fn rebuild_cache_past(&self) -> Option<usize> {
        self.long_rope_past()
    }

    fn reorder_cache(&self, cache: &mut DecoderCache, rows: &[usize]) -> Result<(), ModelError> {
        for layer in &mut cache.layers {
            layer.select_rows(rows).map_err(DecoderError::from)?;
        }
        Ok(())
    }

    fn next_logits(
        &self,
        step: DecodeStep,
        cache: Option<&mut DecoderCache>,
    ) -> Result<Tensor<2>, ModelError> {
        let device = self.wte.weight.val().device();
        let [b, t] = step.dims();
        let positions =
            Positions::from_rows(&step.positions, &device).map_err(DecoderError::from)?;
        let mut input = DecoderInput::from_ids(&step.tokens, &device)?.positions(positions);
        // Without a padded row no key is masked, and the attention needs no mask at all.
        if step.key_padding.iter().flatten().any(|&p| p) {
            let flat: Vec<bool> = step.key_padding.iter().flatten().copied().collect();
            let tk = step.key_padding.first().map_or(0, Vec::len);
            let pad =
                Tensor::<2, Bool>::from_data(burn::tensor::TensorData::new(flat, [b, tk]), &device);
            // A sliding cache holds only the last `window` positions: the padding mask
            // then covers those and the new ones.
            let pad = match &cache {
                Some(c) => {
                    let held = c.layers.first().map_or(0, zoo_attention::KvCache::len);
                    pad.slice([0..b, tk - held - t..tk])
                }
                None => pad,
            };
            input = input.key_padding(pad);
        }
        match cache {
            Some(c) => Ok(self.last_logits_cached(input, c)?),
            None => {
                let logits = self.forward(input)?.logits;
                let v = logits.dims()[2];
                // [B, T, V] -> the last position [B, V]
                Ok(logits.slice([0..b, t - 1..t, 0..v]).reshape([b, v]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DecoderConfig;
    use zoo_core::{GenerationConfig, generate};
    use zoo_device::test_device;

    fn model(cfg: DecoderConfig) -> DecoderLm {
        // Weights large enough that the model's choices depend on every position.
        cfg.with_init_std(0.3).init(&test_device()).unwrap()
    }

    fn configs() -> [DecoderConfig; 3] {
        [
            DecoderConfig::new(13, 16, 2, 4, 24),
            DecoderConfig::tiny_llama(13, 24),
            DecoderConfig::tiny_llama(13, 24).with_sliding_window(Some(3)),
        ]
    }

    #[test]
    fn cached_and_uncached_greedy_agree() {
        for cfg in configs() {
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
    fn batched_prompts_decode_as_alone() {
        for cfg in configs() {
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
    fn the_sliding_window_limits_what_the_last_position_sees() {
        // Window 3, two layers: the last position reaches back 2 positions per layer, so
        // positions 0 and 1 of 7 cannot matter to it; without the window they do.
        let seeded = |cfg: DecoderConfig| {
            test_device().seed(11);
            model(cfg)
        };
        let windowed = seeded(DecoderConfig::tiny_llama(13, 24).with_sliding_window(Some(3)));
        let full = seeded(DecoderConfig::tiny_llama(13, 24));
        let a = vec![1, 2, 3, 4, 5, 6, 7];
        let b = vec![9, 9, 3, 4, 5, 6, 7];
        let last = |m: &DecoderLm, p: &Vec<usize>, cached: bool| {
            let step = DecodeStep {
                tokens: vec![p.clone()],
                positions: vec![(0..p.len()).collect()],
                key_padding: vec![vec![false; p.len()]],
            };
            let mut cache = DecoderLm::new_cache(m);
            m.next_logits(step, cached.then_some(&mut cache)).unwrap()
        };
        use zoo_device::testing::max_abs_diff;
        for cached in [false, true] {
            let w = max_abs_diff(&last(&windowed, &a, cached), &last(&windowed, &b, cached));
            assert!(w < 1e-5, "cached {cached}: the window leaked {w}");
        }
        let f = max_abs_diff(&last(&full, &a, false), &last(&full, &b, false));
        assert!(f > 1e-3, "without the window the change must reach: {f}");
    }

    #[test]
    fn token_logits_and_generation_report_model_errors() {
        let m = model(DecoderConfig::new(13, 16, 2, 4, 24));
        let dev = test_device();
        let bad = Tensor::<1, Int>::from_ints([1, 13], &dev).reshape([1, 2]);
        let e = m.token_logits(bad, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "token id 13 at batch row 0, position 1 is out of range for vocab_size 13"
        );
        let e = generate(&m, &[vec![13]], &GenerationConfig::greedy(1), |_, _| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "token id 13 at batch row 0, position 0 is out of range for vocab_size 13"
        );
    }
}
