//! The decoder-only language model (Radford et al., 2019, GPT-2; Touvron et al., 2023,
//! Llama): token embedding, optional learned positions, a stack of pre-norm blocks, a
//! final norm and the LM head.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use zoo_attention::position::{LearnedPosition, LearnedPositionConfig};
use zoo_attention::{
    BlockInput, KvCache, LmHead, Mask, Norm, Positions, TransformerBlockConfig, recompute,
};
use zoo_core::tokens::{self, TokenError, TokenLimits};

use crate::config::{DecoderConfig, PositionKind};
use crate::error::{DecoderError, Result};
use crate::layer::{DecoderLayer, Layer};

/// A causal language model: token embeddings, a stack of layers, a final norm and the LM
/// head. The layers are the zoo's [`DecoderLayer`] by default (every HF architecture
/// that the zoo loads); any type that implements [`Layer`] can take their place, through
/// [`DecoderConfig::init_with`], and the model then trains, generates and caches as the
/// stock one does.
#[derive(Module, Debug)]
pub struct DecoderLm<L: Layer = DecoderLayer> {
    /// Token embedding `[V, d_model]` (GPT-2 `wte`, Llama `embed_tokens`).
    pub wte: Embedding,
    /// Learned positions (GPT-2 `wpe`), absent with RoPE.
    pub wpe: Option<LearnedPosition>,
    /// Embedding dropout.
    pub drop: Dropout,
    /// The layers (GPT-2 `h`, Llama `layers`).
    pub layers: Vec<L>,
    /// Final norm (GPT-2 `ln_f`, Llama `norm`).
    pub norm_f: Norm,
    /// The LM head: tied to `wte`, or its own `[d_model, V]` matrix.
    pub lm_head: LmHead,
    vocab_size: usize,
    max_len: usize,
    sliding_window: Option<usize>,
    /// Each layer's window: the model's on a sliding layer, none on a global one.
    #[module(skip)]
    layer_windows: Vec<Option<usize>>,
    /// The factor on the token embeddings (Gemma's `sqrt(d_model)`), when there is one.
    embed_scale: Option<f64>,
    /// The soft cap on the logits (Gemma 2), when there is one.
    final_softcap: Option<f64>,
    /// The length past which LongRoPE rotates with its long factors, when it does.
    #[module(skip)]
    long_rope_past: Option<usize>,
}

/// The input of a forward pass.
#[derive(Debug, Clone)]
pub struct DecoderInput {
    tokens: Tensor<2, Int>,
    /// The ids, row by row, when they were built on the host: then no read-back is
    /// needed to check them.
    host_ids: Option<Vec<i64>>,
    key_padding: Option<Tensor<2, Bool>>,
    positions: Option<Positions>,
    need_weights: bool,
}

impl DecoderInput {
    /// Token ids `[B, T]` already on the device. The forward pass reads them back once to
    /// check them against the vocabulary; [`Self::from_ids`] avoids that read.
    pub fn new(tokens: Tensor<2, Int>) -> Self {
        Self {
            tokens,
            host_ids: None,
            key_padding: None,
            positions: None,
            need_weights: false,
        }
    }

    /// Token ids from the host, one row per sequence; checked there, so the forward pass
    /// never reads the device back for them.
    ///
    /// # Errors
    /// No rows, empty rows, or rows of different lengths.
    pub fn from_ids(rows: &[Vec<usize>], device: &Device) -> Result<Self> {
        let (flat, shape) = tokens::matrix("input", rows)?;
        Ok(Self {
            host_ids: Some(flat.clone()),
            ..Self::new(Tensor::from_data(TensorData::new(flat, shape), device))
        })
    }

    /// Padding keys, `[B, Tk]`, `true` at padding (left-padded batches). With a cache,
    /// `Tk` covers the cached positions and the new ones.
    pub fn key_padding(mut self, pad: Tensor<2, Bool>) -> Self {
        self.key_padding = Some(pad);
        self
    }

    /// The position of every token, `[B, T]`; by default `0..T` (or the cache's count
    /// onwards).
    pub fn positions(mut self, positions: Positions) -> Self {
        self.positions = Some(positions);
        self
    }

    /// Returns every layer's attention weights.
    pub fn with_weights(mut self) -> Self {
        self.need_weights = true;
        self
    }
}

/// The output of a forward pass.
#[derive(Debug, Clone)]
pub struct DecoderOutput {
    /// `[B, T, V]`
    pub logits: Tensor<3>,
    /// Per layer `[B, H, T, Tk]`, when asked for.
    pub weights: Vec<Tensor<4>>,
    /// Per layer with a mixture of experts, its router's logits `[B T, n_experts]`:
    /// what [`zoo_attention::load_balancing_loss`] takes for training.
    pub router_logits: Vec<Tensor<2>>,
}

/// One KV cache per layer.
#[derive(Debug, Clone)]
pub struct DecoderCache {
    /// The layers' caches.
    pub layers: Vec<KvCache>,
}

impl DecoderCache {
    /// Positions seen so far.
    pub fn seen(&self) -> usize {
        self.layers.first().map_or(0, KvCache::seen)
    }
}

impl DecoderConfig {
    /// Validates and builds the model.
    ///
    /// # Errors
    /// See [`DecoderConfig::validate`].
    pub fn init(&self, device: &Device) -> Result<DecoderLm> {
        self.init_with(device, |_, block| {
            DecoderLayer::new(self.layer, block, device)
        })
    }

    /// Validates and builds the model with layers of one's own: `layer(i, block)` builds
    /// layer `i` of [`Self::n_layers`], given the configuration of the stock layer (its
    /// width, heads, positions, norm and feed-forward, which a new layer can reuse in
    /// part). The embeddings, final norm and head are the stock ones.
    ///
    /// # Errors
    /// See [`DecoderConfig::validate`], and the errors of `layer`.
    pub fn init_with<L: Layer>(
        &self,
        device: &Device,
        mut layer: impl FnMut(usize, &TransformerBlockConfig) -> Result<L>,
    ) -> Result<DecoderLm<L>> {
        self.validate()?;
        let init = Initializer::Normal {
            mean: 0.0,
            std: self.init_std,
        };
        let layers = (0..self.n_layers)
            .map(|i| layer(i, &self.block_for(i)))
            .collect::<Result<Vec<_>>>()?;
        Ok(DecoderLm {
            wte: EmbeddingConfig::new(self.vocab_size, self.d_model)
                .with_initializer(init.clone())
                .init(device),
            wpe: (self.positions == PositionKind::Learned).then(|| {
                LearnedPositionConfig::new(self.max_len, self.d_model)
                    .with_initializer(init.clone())
                    .init(device)
            }),
            drop: DropoutConfig::new(self.dropout).init(),
            layers,
            norm_f: Norm::new(self.norm, self.d_model, self.norm_eps, device),
            lm_head: LmHead::new(
                self.tie_embeddings,
                self.d_model,
                self.vocab_size,
                init,
                device,
            ),
            vocab_size: self.vocab_size,
            max_len: self.max_len,
            sliding_window: self.sliding_window,
            layer_windows: (0..self.n_layers)
                .map(|i| self.sliding_window.filter(|_| self.slides(i)))
                .collect(),
            embed_scale: self.scale_embeddings.then(|| (self.d_model as f64).sqrt()),
            final_softcap: self.final_softcap,
            long_rope_past: match &self.rope_scaling {
                zoo_attention::RopeScaling::LongRope {
                    original_max_position_embeddings: n,
                    ..
                } if *n < self.max_len => Some(*n),
                _ => None,
            },
        })
    }
}

impl<L: Layer> DecoderLm<L> {
    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Longest sequence.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The sliding window, if the model has one (on some or all of its layers).
    pub fn sliding_window(&self) -> Option<usize> {
        self.sliding_window
    }

    /// The length past which the model rotates positions with LongRoPE's long factors,
    /// when it has them: a generation that passes it rebuilds its cache once.
    pub fn long_rope_past(&self) -> Option<usize> {
        self.long_rope_past
    }

    /// The positions each layer's cache keeps: its window on a sliding layer, else the
    /// model's `max_len`.
    pub fn cache_lens(&self) -> Vec<usize> {
        (0..self.layers.len())
            .map(|i| {
                let window = self.layer_windows.get(i).copied().flatten();
                window.map_or(self.max_len, |w| w.min(self.max_len))
            })
            .collect()
    }

    /// An empty cache for every layer: bounded by the model's positions, or a rolling
    /// cache of the window's size on a sliding layer.
    pub fn new_cache(&self) -> DecoderCache {
        let layers = (0..self.layers.len())
            .map(|i| match self.layer_windows.get(i).copied().flatten() {
                Some(w) => KvCache::sliding(w).unwrap_or_else(|_| KvCache::new(self.max_len)),
                None => KvCache::new(self.max_len),
            })
            .collect();
        DecoderCache { layers }
    }

    fn check_tokens(&self, input: &DecoderInput, offset: usize) -> Result<()> {
        let limits = TokenLimits::new(self.vocab_size, self.max_len);
        let [_, t] = input.tokens.dims();
        limits.check_len("sequence", offset, t)?;
        match &input.host_ids {
            Some(ids) => limits.check_ids("token", ids, t)?,
            None => limits.check_ids("token", &tokens::read_ids(&input.tokens, "token")?, t)?,
        }
        Ok(())
    }

    fn embed(
        &self,
        tokens: Tensor<2, Int>,
        positions: Option<&Positions>,
        offset: usize,
    ) -> Result<Tensor<3>> {
        let [b, t] = tokens.dims();
        let device = tokens.device();
        if let Some(p) = positions {
            if p.dims() != [b, t] {
                return Err(DecoderError::Generation(format!(
                    "positions have shape {:?}, the tokens [{b}, {t}]",
                    p.dims()
                )));
            }
            // Checked on the host: no read-back.
            if p.max() >= self.max_len {
                return Err(TokenError::TooLong {
                    what: "sequence",
                    len: p.max() + 1,
                    limit: "max_len",
                    max_len: self.max_len,
                }
                .into());
            }
        }
        let mut x = self.wte.forward(tokens);
        if let Some(scale) = self.embed_scale {
            // HF rounds the factor to the activations' dtype first, f32 here.
            x = x * (scale as f32);
        }
        if let Some(wpe) = &self.wpe {
            x = match positions {
                Some(p) => x + wpe.embedding.forward(p.tensor().clone()),
                None => x + wpe.forward(t, offset, &device)?,
            };
        }
        Ok(zoo_attention::dropout(&self.drop, x))
    }

    /// The LM head: the tied embedding's transpose, or the untied projection, then the
    /// soft cap on the logits when the model has one.
    ///
    /// # Shapes
    /// - `h`: `[B, T, d_model]` -> `[B, T, V]`
    pub fn head(&self, h: Tensor<3>) -> Tensor<3> {
        let logits = self.lm_head.forward(h, &self.wte);
        match self.final_softcap {
            Some(cap) => (logits / cap).tanh() * cap,
            None => logits,
        }
    }

    /// Logits for every position of a whole sequence, causally masked.
    ///
    /// # Shapes
    /// - tokens `[B, T]` -> logits `[B, T, V]`
    ///
    /// # Errors
    /// A token id outside the vocabulary, or `T > max_len`.
    pub fn forward(&self, input: DecoderInput) -> Result<DecoderOutput> {
        self.check_tokens(&input, 0)?;
        let mut h = self.embed(input.tokens, input.positions.as_ref(), 0)?;
        let mut mask = Mask::causal();
        if let Some(pad) = input.key_padding {
            mask = mask.with_key_padding(pad);
        }
        let mut weights = Vec::new();
        let mut router_logits = Vec::new();
        for layer in &self.layers {
            // Under Burn's balanced checkpointing strategy, each layer keeps only its
            // input and runs again in the backward pass.
            if !input.need_weights && recompute::applies(&h) && layer.recomputable() {
                let (mask, positions) = (mask.clone(), input.positions.clone());
                h = recompute::checkpointed(layer, h, true, move |layer, h| {
                    let mut bi = BlockInput::new(h).mask(mask.clone());
                    if let Some(p) = &positions {
                        bi = bi.with_positions(p.clone());
                    }
                    layer.forward(bi).map(|out| out.hidden)
                })?;
                continue;
            }
            let mut bi = BlockInput::new(h).mask(mask.clone());
            if let Some(p) = &input.positions {
                bi = bi.with_positions(p.clone());
            }
            if input.need_weights {
                bi = bi.with_weights();
            }
            let out = layer.forward(bi)?;
            h = out.hidden;
            weights.extend(out.self_weights);
            router_logits.extend(out.router_logits);
        }
        Ok(DecoderOutput {
            logits: self.head(self.norm_f.forward(h)),
            weights,
            router_logits,
        })
    }

    /// Logits for `T` new tokens, reading and extending `cache`.
    ///
    /// # Shapes
    /// - tokens `[B, T]` -> logits `[B, T, V]`
    ///
    /// # Errors
    /// A token id outside the vocabulary, or the cache passing `max_len`.
    pub fn forward_cached(
        &self,
        input: DecoderInput,
        cache: &mut DecoderCache,
    ) -> Result<DecoderOutput> {
        let (h, weights, router_logits) = self.cached_hidden(input, cache)?;
        Ok(DecoderOutput {
            logits: self.head(self.norm_f.forward(h)),
            weights,
            router_logits,
        })
    }

    /// The logits of the last position only, `[B, V]`, extending `cache`: what one
    /// decoding step needs, without the vocabulary projection of the earlier positions
    /// (a prompt's, on the first step).
    ///
    /// # Errors
    /// As [`Self::forward_cached`].
    pub fn last_logits_cached(
        &self,
        input: DecoderInput,
        cache: &mut DecoderCache,
    ) -> Result<Tensor<2>> {
        let (h, _, _) = self.cached_hidden(input, cache)?;
        let [b, t, d] = h.dims();
        let last = h.slice([0..b, t - 1..t, 0..d]);
        let logits = self.head(self.norm_f.forward(last));
        let v = logits.dims()[2];
        Ok(logits.reshape([b, v]))
    }

    /// The last block's states for `T` new tokens, the attention weights when asked for
    /// and the routers' logits, reading and extending `cache`.
    #[allow(clippy::type_complexity)]
    fn cached_hidden(
        &self,
        input: DecoderInput,
        cache: &mut DecoderCache,
    ) -> Result<(Tensor<3>, Vec<Tensor<4>>, Vec<Tensor<2>>)> {
        let offset = cache.seen();
        self.check_tokens(&input, offset)?;
        if cache.layers.len() != self.layers.len() {
            return Err(DecoderError::Generation(format!(
                "cache has {} layers, the model {}",
                cache.layers.len(),
                self.layers.len()
            )));
        }
        let mut h = self.embed(input.tokens, input.positions.as_ref(), offset)?;
        let mask = match input.key_padding {
            Some(pad) => Mask::none().with_key_padding(pad),
            None => Mask::none(),
        };
        let mut weights = Vec::new();
        let mut router_logits = Vec::new();
        for (layer, c) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let mut bi = BlockInput::new(h).mask(mask.clone());
            if let Some(p) = &input.positions {
                bi = bi.with_positions(p.clone());
            }
            if input.need_weights {
                bi = bi.with_weights();
            }
            let out = layer.forward_cached(bi, c)?;
            h = out.hidden;
            weights.extend(out.self_weights);
            router_logits.extend(out.router_logits);
        }
        Ok((h, weights, router_logits))
    }
}

/// Mean cross-entropy over the positions where `mask` is true: padding and unpredicted
/// positions do not count. Returns `[1]`.
///
/// # Shapes
/// - `logits`: `[B, T, V]`, `targets`: `[B, T]`, `mask`: `[B, T]`
pub fn masked_cross_entropy(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    mask: Tensor<2, Bool>,
) -> Tensor<1> {
    let [b, t, v] = logits.dims();
    // Over f32 logits whatever the model's precision, as `transformers` takes its loss.
    let logits = match logits.dtype() {
        burn::tensor::DType::F32 => logits,
        _ => logits.cast(burn::tensor::DType::F32),
    };
    let logp = burn::tensor::activation::log_softmax(logits.reshape([b * t, v]), 1);
    // [B T, V] gather [B T, 1] -> [B T]
    let picked = logp.gather(1, targets.reshape([b * t, 1])).reshape([b * t]);
    let weight = mask.reshape([b * t]).float().cast(burn::tensor::DType::F32);
    let count = weight.clone().sum().clamp_min(1.0);
    -(picked * weight).sum() / count
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Param;
    use zoo_attention::BlockOutput;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    fn tokens(rows: &[&[i64]]) -> Tensor<2, Int> {
        let t = rows[0].len();
        let flat: Vec<i64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::<1, Int>::from_ints(flat.as_slice(), &test_device()).reshape([rows.len(), t])
    }

    fn tiny_gpt() -> DecoderLm {
        DecoderConfig::new(11, 16, 2, 4, 12)
            .init(&test_device())
            .unwrap()
    }

    /// A layer of one's own: the stock layer, or nothing at all (the identity).
    #[derive(Module, Debug)]
    struct Mine {
        inner: DecoderLayer,
        skip: bool,
    }

    impl Layer for Mine {
        fn forward(&self, input: BlockInput) -> Result<BlockOutput> {
            if self.skip {
                return Ok(BlockOutput::of(input.hidden().clone()));
            }
            self.inner.forward(input)
        }

        fn forward_cached(&self, input: BlockInput, cache: &mut KvCache) -> Result<BlockOutput> {
            if self.skip {
                return self.forward(input);
            }
            self.inner.forward_cached(input, cache)
        }

        fn cache_floats_per_position(&self) -> usize {
            self.inner.cache_floats_per_position()
        }
    }

    #[test]
    fn a_layer_of_one_s_own_runs_in_the_stock_model() {
        let dev = test_device();
        let cfg = DecoderConfig::tiny_llama(11, 12).with_init_std(0.3);
        let stock = cfg.init(&dev).unwrap();
        let mine = |skip: bool| -> DecoderLm<Mine> {
            let mut layers = stock.layers.clone().into_iter();
            let mut m = cfg
                .init_with(&dev, |_, _| {
                    Ok(Mine {
                        inner: layers.next().unwrap(),
                        skip,
                    })
                })
                .unwrap();
            // The stock model's embedding, norm and head, so only the layers differ.
            m.wte = stock.wte.clone();
            m.norm_f = stock.norm_f.clone();
            m.lm_head = stock.lm_head.clone();
            m
        };
        let rows: [&[i64]; 2] = [&[1, 2, 3, 4], &[5, 6, 7, 8]];
        let want = stock
            .forward(DecoderInput::new(tokens(&rows)))
            .unwrap()
            .logits;
        let same = mine(false);
        let got = same
            .forward(DecoderInput::new(tokens(&rows)))
            .unwrap()
            .logits;
        // The same computation: equal up to a GPU backend's choice of kernels.
        assert!(max_abs_diff(&got, &want) < 1e-5);
        // Cached decoding and generation go through the same trait.
        let mut cache = same.new_cache();
        let first = same
            .forward_cached(
                DecoderInput::new(tokens(&rows).slice([0..2, 0..3])),
                &mut cache,
            )
            .unwrap()
            .logits;
        let part = |t: Tensor<3>| t.slice([0..2, 0..3, 0..11]);
        assert!(max_abs_diff(&first, &part(want.clone())) < 1e-5);
        let cfg_gen = zoo_core::GenerationConfig::greedy(4);
        let a = zoo_core::generate(&stock, &[vec![1, 2]], &cfg_gen, |_, _| {}).unwrap();
        let b = zoo_core::generate(&same, &[vec![1, 2]], &cfg_gen, |_, _| {}).unwrap();
        assert_eq!(a.tokens, b.tokens);
        // Negative control: with the layers skipped, the logits are the head of the
        // normed embeddings, far from the stock model's.
        let skipped = mine(true);
        let got = skipped
            .forward(DecoderInput::new(tokens(&rows)))
            .unwrap()
            .logits;
        let by_hand = stock.head(stock.norm_f.forward(stock.wte.forward(tokens(&rows))));
        assert!(max_abs_diff(&got, &by_hand) < 1e-5);
        assert!(max_abs_diff(&got, &want) > 1e-2);
    }

    #[test]
    fn gpt2_small_has_124m_parameters() {
        let m = DecoderConfig::gpt2_small().init(&test_device()).unwrap();
        // 124,439,808 in HF's GPT2LMHeadModel (tied head counted once).
        assert_eq!(m.num_params(), 124_439_808);
        assert_eq!(DecoderConfig::gpt2_small().num_params(), 124_439_808);
    }

    #[test]
    fn the_config_counts_the_parameters_the_model_has() {
        // Every preset and option that changes the count: learned or rotary positions,
        // tied or untied head, GQA, fused or separate QKV, biases, gated MLPs, RMSNorm,
        // an explicit head size.
        let configs = [
            DecoderConfig::char_gpt(27),
            DecoderConfig::tiny_llama(32, 64),
            DecoderConfig::new(65, 128, 4, 4, 64),
            DecoderConfig::new(65, 128, 4, 4, 64).llama_style(),
            DecoderConfig::new(50, 48, 2, 6, 20)
                .llama_style()
                .with_qkv_bias(Some(true))
                .with_tie_embeddings(true),
            DecoderConfig::new(50, 48, 2, 6, 20)
                .with_head_dim(Some(4))
                .with_fused_qkv(false)
                .with_out_bias(Some(false))
                .with_activation(zoo_attention::FfnActivation::GeGlu),
        ];
        for cfg in configs {
            let m = cfg.init(&test_device()).unwrap();
            assert_eq!(cfg.num_params(), m.num_params(), "{cfg}");
        }
        // A tied head counts once, an untied one adds vocab x d.
        let tied = DecoderConfig::new(50, 48, 2, 6, 20);
        let untied = tied.clone().with_tie_embeddings(false);
        assert_eq!(untied.num_params() - tied.num_params(), 50 * 48);
    }

    #[test]
    fn char_model_has_the_seeds_size() {
        // wte 27x64 + wpe 16x64 + 4 blocks of 49,984 + ln_f 128
        let m = DecoderConfig::char_gpt(27).init(&test_device()).unwrap();
        assert_eq!(m.num_params(), 202_816);
    }

    #[test]
    fn llama_preset_has_the_llama_parts() {
        let m = DecoderConfig::tiny_llama(32, 64)
            .init(&test_device())
            .unwrap();
        assert!(m.wpe.is_none() && !m.lm_head.is_tied());
        let attn = &m.layers[0].self_attn();
        assert_eq!((attn.n_heads(), attn.n_kv_heads()), (4, 2));
        let zoo_attention::SelfAttention::Separate(attn) = attn else {
            panic!("llama's attention has separate projections")
        };
        assert!(attn.q_proj.bias.is_none());
        assert!(matches!(
            m.layers[0].mlp(),
            zoo_attention::FeedForward::Gated(_)
        ));
        assert!(matches!(m.norm_f, Norm::RmsNorm(_)));
        let out = m.forward(DecoderInput::new(tokens(&[&[1, 2, 3]]))).unwrap();
        assert_eq!(out.logits.dims(), [1, 3, 32]);
    }

    #[test]
    fn tiny_model_values_follow_the_definition() {
        // One layer computed by hand from the model's own parts: embedding plus learned
        // position, the pre-norm block's two sub-layers, the final norm, the tied head.
        let m = DecoderConfig::new(11, 16, 1, 4, 12)
            .init(&test_device())
            .unwrap();
        let toks = tokens(&[&[1, 2, 5]]);
        let got = m.forward(DecoderInput::new(toks.clone())).unwrap().logits;
        let dev = test_device();
        let pos = Tensor::<1, Int>::arange(0..3, &dev).reshape([1, 3]);
        let x = m.wte.forward(toks) + m.wpe.as_ref().unwrap().embedding.forward(pos);
        let layer = &m.layers[0];
        let attn = layer
            .self_attn()
            .forward(zoo_attention::AttentionInput::new(layer.norm_1().forward(x.clone())).causal())
            .unwrap()
            .context;
        let h = x + attn;
        let h = h.clone() + layer.mlp().forward(layer.norm_2().forward(h));
        let w = m.wte.weight.val().transpose().unsqueeze::<3>(); // [1, D, V]
        let want = m.norm_f.forward(h).matmul(w);
        assert!(
            max_abs_diff(&got, &want) < 1e-5,
            "{}",
            max_abs_diff(&got, &want)
        );
        // The logits are not trivially small: the check above compares real values.
        let spread = got.clone().max().into_scalar::<f32>() - got.min().into_scalar::<f32>();
        assert!(spread > 1e-2, "{spread}");
    }

    #[test]
    fn host_ids_and_positions_are_checked_without_reading_the_device() {
        let m = tiny_gpt();
        let dev = test_device();
        let e = m
            .forward(DecoderInput::from_ids(&[vec![1, 2], vec![3, 11]], &dev).unwrap())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "token id 11 at batch row 1, position 1 is out of range for vocab_size 11"
        );
        let p = Positions::from_rows(&[vec![10, 12]], &dev).unwrap();
        let e = m
            .forward(
                DecoderInput::from_ids(&[vec![1, 2]], &dev)
                    .unwrap()
                    .positions(p),
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "sequence of 13 tokens is longer than max_len 12"
        );
        let a = m
            .forward(DecoderInput::from_ids(&[vec![1, 2, 3]], &dev).unwrap())
            .unwrap()
            .logits;
        let b = m
            .forward(DecoderInput::new(tokens(&[&[1, 2, 3]])))
            .unwrap()
            .logits;
        assert!(max_abs_diff(&a, &b) == 0.0);
    }

    #[test]
    fn tied_head_shares_the_embedding() {
        let mut m = tiny_gpt();
        assert!(m.lm_head.is_tied());
        let input = DecoderInput::new(tokens(&[&[1, 2, 3]]));
        let before = m.forward(input.clone()).unwrap().logits;
        // Change the embedding row of token 7 only: inputs do not use it, so only the
        // head's column 7 can change.
        let dev = test_device();
        let w = m.wte.weight.val();
        let row = Tensor::<2>::ones([1, 16], &dev);
        m.wte.weight = Param::from_tensor(w.slice_assign([7..8, 0..16], row));
        let after = m.forward(input).unwrap().logits;
        let col = |t: Tensor<3>, c: usize| t.slice([0..1, 0..3, c..c + 1]);
        assert!(max_abs_diff(&col(before.clone(), 3), &col(after.clone(), 3)) < 1e-6);
        assert!(max_abs_diff(&col(before, 7), &col(after, 7)) > 1e-3);
    }

    #[test]
    fn bad_tokens_and_lengths_are_clear_errors() {
        let m = tiny_gpt();
        let e = m
            .forward(DecoderInput::new(tokens(&[&[1, 11]])))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "token id 11 at batch row 0, position 1 is out of range for vocab_size 11"
        );
        let long: Vec<i64> = vec![1; 13];
        let e = m.forward(DecoderInput::new(tokens(&[&long]))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "sequence of 13 tokens is longer than max_len 12"
        );
    }

    #[test]
    fn loss_ignores_padding() {
        let dev = test_device();
        let m = tiny_gpt();
        let logits = m
            .forward(DecoderInput::new(tokens(&[&[1, 2, 3, 4]])))
            .unwrap()
            .logits;
        let targets = tokens(&[&[2, 3, 4, 5]]);
        let mask = Tensor::<2, Bool>::from_data(
            burn::tensor::TensorData::new(vec![true, true, false, false], [1, 4]),
            &dev,
        );
        let loss = masked_cross_entropy(logits.clone(), targets.clone(), mask.clone())
            .into_scalar::<f32>();
        // Changing the padded targets changes nothing.
        let other = tokens(&[&[2, 3, 9, 0]]);
        let loss2 = masked_cross_entropy(logits.clone(), other, mask).into_scalar::<f32>();
        assert_eq!(loss, loss2);
        // And it equals the mean NLL of the two counted positions, computed by hand.
        let logp = burn::tensor::activation::log_softmax(logits, 2)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let expected = -(logp[2] + logp[11 + 3]) / 2.0;
        assert!((loss - expected).abs() < 1e-5);
    }

    #[test]
    fn cached_forward_equals_full_forward() {
        for cfg in [
            DecoderConfig::new(11, 16, 2, 4, 12),
            DecoderConfig::tiny_llama(11, 12),
            DecoderConfig::tiny_llama(11, 12).with_sliding_window(Some(3)),
        ] {
            // Weights of std 0.3: attention is far from uniform, so a wrong mask shows.
            let m = cfg.with_init_std(0.3).init(&test_device()).unwrap();
            let cached = |rows: &[&[i64]]| {
                let toks = tokens(rows);
                let mut cache = m.new_cache();
                let parts = [(0, 3), (3, 4), (4, 5)].map(|(a, b)| {
                    m.forward_cached(
                        DecoderInput::new(toks.clone().slice([0..2, a..b])),
                        &mut cache,
                    )
                    .unwrap()
                    .logits
                });
                Tensor::cat(parts.to_vec(), 1)
            };
            let rows: [&[i64]; 2] = [&[1, 2, 3, 4, 5], &[6, 7, 8, 9, 10]];
            let full = m.forward(DecoderInput::new(tokens(&rows))).unwrap().logits;
            let got = cached(&rows);
            assert!(
                max_abs_diff(&full, &got) < 1e-4,
                "{}",
                max_abs_diff(&full, &got)
            );
            // Negative control: changing token 3 leaves positions 0..3 within the
            // tolerance and moves positions 3.. by far more.
            let other = cached(&[&[1, 2, 3, 9, 5], &[6, 7, 8, 1, 10]]);
            let part = |t: &Tensor<3>, r: std::ops::Range<usize>| t.clone().slice([0..2, r, 0..11]);
            assert!(max_abs_diff(&part(&got, 0..3), &part(&other, 0..3)) < 1e-4);
            assert!(max_abs_diff(&part(&got, 3..5), &part(&other, 3..5)) > 1e-2);
        }
    }
}
