//! Multi-head attention: self and cross, MHA / GQA / MQA, separate or fused QKV, RoPE,
//! sliding windows, a KV cache, and optional per-head weights.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Int, Tensor};
use serde::{Deserialize, Serialize};

use crate::cache::KvCache;
use crate::error::{AttentionError, Result, check_shape};
use crate::mask::Mask;
use crate::position::{RopeLayout, RotaryEncoding, RotaryEncodingConfig};
use crate::sdpa::{attention_chunked, attention_fused, attention_reference, repeat_kv};

/// Which kernel computes attention when no weights are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttentionKernel {
    /// Burn's fused op (flash kernels where the backend has them).
    Fused,
    /// The memory-efficient blocked path with online softmax; block sizes in positions.
    Chunked {
        /// Query rows per block.
        block_q: usize,
        /// Keys per block.
        block_k: usize,
    },
    /// The readable reference path, always.
    Reference,
}

/// Configuration of [`MultiHeadAttention`].
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// Model width: the size of the queries' input and of the output.
    pub d_model: usize,
    /// Number of query heads.
    pub n_heads: usize,
    /// Number of key/value heads: `n_heads` for MHA, fewer for GQA, 1 for MQA.
    /// Default: `n_heads`.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// Width of the keys' and values' source in cross-attention (an encoder's output).
    /// Default: `d_model`.
    #[config(default = "None")]
    pub d_context: Option<usize>,
    /// One `[d_model, (H + 2 Hkv) Dh]` projection for Q, K and V (GPT-2's `c_attn`) instead
    /// of three. Self-attention only. Default: false.
    #[config(default = false)]
    pub fused_qkv: bool,
    /// Biases on the Q, K, V projections. Default: true (GPT-2, BERT); Llama has none.
    #[config(default = true)]
    pub qkv_bias: bool,
    /// Bias on the output projection. Default: true.
    #[config(default = true)]
    pub out_bias: bool,
    /// Dropout on the attention weights while training. Default: 0.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Rotary embeddings on Q and K, covering this many positions. Default: none.
    #[config(default = "None")]
    pub rope_max_len: Option<usize>,
    /// RoPE base. Default: 10000.
    #[config(default = 10000.0)]
    pub rope_theta: f64,
    /// RoPE feature pairing. Default: half-split, as HF Llama.
    #[config(default = "RopeLayout::HalfSplit")]
    pub rope_layout: RopeLayout,
    /// Self-attention sees only the last `window` positions (itself included). Default: none.
    #[config(default = "None")]
    pub window: Option<usize>,
    /// Kernel used when no weights are asked for. Default: fused.
    #[config(default = "AttentionKernel::Fused")]
    pub kernel: AttentionKernel,
    /// Initial projection weights. Default: N(0, 0.02), as GPT-2, BERT and Llama.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

impl MultiHeadAttentionConfig {
    /// Number of KV heads after the default is applied.
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// Size of one head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// Zero sizes, `d_model % n_heads != 0`, `n_heads % n_kv_heads != 0`, an odd head size
    /// with RoPE, a zero window, a dropout outside `[0, 1)`, or fused QKV with a context.
    pub fn validate(&self) -> Result<()> {
        if self.d_model == 0 {
            return Err(AttentionError::Zero { name: "d_model" });
        }
        if self.n_heads == 0 {
            return Err(AttentionError::Zero { name: "n_heads" });
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(AttentionError::HeadsDoNotDivideModel {
                d_model: self.d_model,
                n_heads: self.n_heads,
            });
        }
        let kv = self.kv_heads();
        if kv == 0 {
            return Err(AttentionError::Zero { name: "n_kv_heads" });
        }
        if !self.n_heads.is_multiple_of(kv) {
            return Err(AttentionError::KvHeadsDoNotDivideHeads {
                n_heads: self.n_heads,
                n_kv_heads: kv,
            });
        }
        if self.rope_max_len.is_some() && !self.head_dim().is_multiple_of(2) {
            return Err(AttentionError::OddRopeDim {
                head_dim: self.head_dim(),
            });
        }
        if self.rope_max_len == Some(0) {
            return Err(AttentionError::Zero {
                name: "rope_max_len",
            });
        }
        if self.window == Some(0) {
            return Err(AttentionError::Zero { name: "window" });
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(AttentionError::BadProbability {
                name: "dropout",
                value: self.dropout,
            });
        }
        if self.fused_qkv && self.d_context.is_some() {
            return Err(AttentionError::Unsupported(
                "fused_qkv projects one input and cannot take a separate d_context".into(),
            ));
        }
        if let AttentionKernel::Chunked { block_q, block_k } = self.kernel
            && (block_q == 0 || block_k == 0)
        {
            return Err(AttentionError::Zero {
                name: "kernel block size",
            });
        }
        Ok(())
    }

    /// Validates and builds the layer.
    ///
    /// # Errors
    /// See [`MultiHeadAttentionConfig::validate`].
    pub fn init(&self, device: &Device) -> Result<MultiHeadAttention> {
        self.validate()?;
        let hd = self.head_dim();
        let kv = self.kv_heads();
        let d_ctx = self.d_context.unwrap_or(self.d_model);
        let linear = |d_in, d_out, bias| {
            LinearConfig::new(d_in, d_out)
                .with_bias(bias)
                .with_initializer(self.initializer.clone())
                .init(device)
        };
        let (q_proj, k_proj, v_proj, qkv_proj) = if self.fused_qkv {
            let width = (self.n_heads + 2 * kv) * hd;
            (
                None,
                None,
                None,
                Some(linear(self.d_model, width, self.qkv_bias)),
            )
        } else {
            (
                Some(linear(self.d_model, self.n_heads * hd, self.qkv_bias)),
                Some(linear(d_ctx, kv * hd, self.qkv_bias)),
                Some(linear(d_ctx, kv * hd, self.qkv_bias)),
                None,
            )
        };
        let rope = match self.rope_max_len {
            Some(max_len) => Some(
                RotaryEncodingConfig::new(hd, max_len)
                    .with_theta(self.rope_theta)
                    .with_layout(self.rope_layout)
                    .init(device)?,
            ),
            None => None,
        };
        Ok(MultiHeadAttention {
            q_proj,
            k_proj,
            v_proj,
            qkv_proj,
            o_proj: linear(self.n_heads * hd, self.d_model, self.out_bias),
            dropout: DropoutConfig::new(self.dropout).init(),
            rope,
            n_heads: self.n_heads,
            n_kv_heads: kv,
            head_dim: hd,
            window: self.window,
            kernel: self.kernel,
        })
    }
}

/// Multi-head attention (Vaswani et al., 2017, section 3.2.2), with grouped KV heads
/// (Ainslie et al., 2023) and rotary positions.
///
/// Parameter names follow HF Llama (`q_proj`, `k_proj`, `v_proj`, `o_proj`); the fused
/// projection `qkv_proj` holds GPT-2's `c_attn`, with Q, K and V side by side.
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// Query projection `[d_model, H Dh]`.
    pub q_proj: Option<Linear>,
    /// Key projection `[d_context, Hkv Dh]`.
    pub k_proj: Option<Linear>,
    /// Value projection `[d_context, Hkv Dh]`.
    pub v_proj: Option<Linear>,
    /// Fused Q, K, V projection `[d_model, (H + 2 Hkv) Dh]`.
    pub qkv_proj: Option<Linear>,
    /// Output projection `[H Dh, d_model]`.
    pub o_proj: Linear,
    /// Dropout on the attention weights.
    pub dropout: Dropout,
    /// Rotary tables, when RoPE is on.
    pub rope: Option<RotaryEncoding>,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
    #[module(skip)]
    kernel: AttentionKernel,
}

/// The input of one attention call.
#[derive(Debug, Clone)]
pub struct AttentionInput {
    x: Tensor<3>,
    context: Option<Tensor<3>>,
    mask: Mask,
    need_weights: bool,
    position: usize,
    positions: Option<Tensor<2, Int>>,
}

impl AttentionInput {
    /// Self-attention over `x`, `[B, T, d_model]`.
    pub fn self_attn(x: Tensor<3>) -> Self {
        Self {
            x,
            context: None,
            mask: Mask::none(),
            need_weights: false,
            position: 0,
            positions: None,
        }
    }

    /// Cross-attention from `x` `[B, Tq, d_model]` to `context` `[B, Tk, d_context]`.
    pub fn cross_attn(x: Tensor<3>, context: Tensor<3>) -> Self {
        Self {
            context: Some(context),
            ..Self::self_attn(x)
        }
    }

    /// Causal masking (self-attention).
    pub fn causal(mut self) -> Self {
        self.mask = self.mask.with_causal();
        self
    }

    /// Masks padding keys: `pad` is `[B, Tk]`, `true` at padding.
    pub fn key_padding(mut self, pad: Tensor<2, Bool>) -> Self {
        self.mask = self.mask.with_key_padding(pad);
        self
    }

    /// Adds any mask or bias (see [`Mask`]).
    pub fn mask(mut self, mask: Mask) -> Self {
        if let Some(m) = mask.masked {
            self.mask = self.mask.with_bool(m);
        }
        if let Some(b) = mask.bias {
            self.mask = self.mask.with_bias(b);
        }
        if mask.causal {
            self.mask = self.mask.with_causal_offset(mask.causal_offset);
        }
        self
    }

    /// Returns the per-head attention weights `[B, H, Tq, Tk]` (takes the reference path).
    pub fn with_weights(mut self) -> Self {
        self.need_weights = true;
        self
    }

    /// The absolute position of the first query, for RoPE without a cache.
    pub fn at_position(mut self, position: usize) -> Self {
        self.position = position;
        self
    }

    /// A RoPE position for every row and query, `[B, Tq]` (left-padded batches). Takes
    /// precedence over [`Self::at_position`] and over the cache's count.
    pub fn with_positions(mut self, positions: Tensor<2, Int>) -> Self {
        self.positions = Some(positions);
        self
    }
}

/// The output of one attention call.
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[B, Tq, d_model]`
    pub context: Tensor<3>,
    /// `[B, H, Tq, Tk]`, when asked for.
    pub weights: Option<Tensor<4>>,
}

impl MultiHeadAttention {
    /// Number of query heads.
    pub fn n_heads(&self) -> usize {
        self.n_heads
    }

    /// Number of key/value heads.
    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    /// Size of one head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The same layer computing attention with another kernel.
    pub fn with_kernel(mut self, kernel: AttentionKernel) -> Self {
        self.kernel = kernel;
        self
    }

    fn d_model(&self) -> usize {
        self.o_proj.weight.dims()[1]
    }

    /// `[B, T, H Dh]` -> `[B, H, T, Dh]`
    fn split_heads(x: Tensor<3>, heads: usize, hd: usize) -> Tensor<4> {
        let [b, t, _] = x.dims();
        x.reshape([b, t, heads, hd]).swap_dims(1, 2)
    }

    fn project(
        &self,
        x: Tensor<3>,
        context: Option<Tensor<3>>,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let (h, kv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let (q, k, v) = match (&self.qkv_proj, context) {
            (Some(qkv), _) => {
                let [b, t, _] = x.dims();
                let all = qkv.forward(x); // [B, T, (H + 2 Hkv) Dh]
                let q = all.clone().slice([0..b, 0..t, 0..h * hd]);
                let k = all.clone().slice([0..b, 0..t, h * hd..(h + kv) * hd]);
                let v = all.slice([0..b, 0..t, (h + kv) * hd..(h + 2 * kv) * hd]);
                (q, k, v)
            }
            (None, ctx) => {
                let src = ctx.unwrap_or_else(|| x.clone());
                let q = self
                    .q_proj
                    .as_ref()
                    .expect("separate projections")
                    .forward(x);
                let k = self
                    .k_proj
                    .as_ref()
                    .expect("separate projections")
                    .forward(src.clone());
                let v = self
                    .v_proj
                    .as_ref()
                    .expect("separate projections")
                    .forward(src);
                (q, k, v)
            }
        };
        (
            Self::split_heads(q, h, hd),
            Self::split_heads(k, kv, hd),
            Self::split_heads(v, kv, hd),
        )
    }

    fn check_input(&self, input: &AttentionInput) -> Result<()> {
        check_shape(
            "attention input",
            &input.x.dims(),
            &[None, None, Some(self.d_model())],
        )?;
        if let Some(ctx) = &input.context {
            if self.qkv_proj.is_some() {
                return Err(AttentionError::Unsupported(
                    "a fused-QKV layer cannot do cross-attention".into(),
                ));
            }
            let d_ctx = self.k_proj.as_ref().map(|k| k.weight.dims()[0]);
            check_shape(
                "attention context",
                &ctx.dims(),
                &[Some(input.x.dims()[0]), None, d_ctx],
            )?;
        }
        Ok(())
    }

    fn attend(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        mask: &Mask,
        need_weights: bool,
    ) -> (Tensor<4>, Option<Tensor<4>>) {
        let n_rep = self.n_heads / self.n_kv_heads;
        let k = repeat_kv(k, n_rep);
        let v = repeat_kv(v, n_rep);
        let dropout_on = self.dropout.prob > 0.0
            && self.dropout.training.is_enabled()
            && q.device().is_autodiff();
        if need_weights || dropout_on || self.kernel == AttentionKernel::Reference {
            let (out, w) = attention_reference(q, k, v, mask, None, Some(&self.dropout));
            return (out, need_weights.then_some(w));
        }
        match self.kernel {
            AttentionKernel::Chunked { block_q, block_k } => (
                attention_chunked(q, k, v, mask, None, block_q, block_k),
                None,
            ),
            _ => (attention_fused(q, k, v, mask, None), None),
        }
    }

    fn finish(&self, out: Tensor<4>, weights: Option<Tensor<4>>) -> AttentionOutput {
        let [b, h, t, hd] = out.dims();
        // [B, H, T, Dh] -> [B, T, H, Dh] -> [B, T, H Dh]
        let merged = out.swap_dims(1, 2).reshape([b, t, h * hd]);
        AttentionOutput {
            context: self.o_proj.forward(merged),
            weights,
        }
    }

    /// Attention over a whole sequence, without a cache.
    ///
    /// # Shapes
    /// - input `x`: `[B, Tq, d_model]`; cross-attention `context`: `[B, Tk, d_context]`
    /// - output `context`: `[B, Tq, d_model]`; `weights`: `[B, H, Tq, Tk]`
    ///
    /// # Errors
    /// Wrong input widths or batch sizes, or positions past the RoPE table.
    pub fn forward(&self, input: AttentionInput) -> Result<AttentionOutput> {
        self.check_input(&input)?;
        let is_self = input.context.is_none();
        let t = input.x.dims()[1];
        let device = input.x.device();
        let (q, k, v) = self.project(input.x, input.context);
        let (q, k) = match (&self.rope, is_self) {
            (Some(rope), true) => rotate_qk(rope, q, k, input.positions, input.position)?,
            _ => (q, k),
        };
        let mut mask = input.mask;
        if let (Some(w), true) = (self.window, is_self) {
            mask = mask.with_bool(window_mask(0, t, 0, t, w, &device));
        }
        let (out, weights) = self.attend(q, k, v, &mask, input.need_weights);
        Ok(self.finish(out, weights))
    }

    /// Self-attention over `T` new positions, reading and extending `cache`. The new
    /// queries see every cached position (or the last `window` of them) and are causally
    /// masked among themselves, so decoding token by token equals [`Self::forward`] with
    /// [`AttentionInput::causal`].
    ///
    /// A key padding mask, if given, covers every position the keys span: the positions
    /// held in the cache before this call followed by the new ones, `[B, len + T]`.
    ///
    /// # Shapes
    /// - input `x`: `[B, T, d_model]` -> output `context`: `[B, T, d_model]`
    ///
    /// # Errors
    /// A cross-attention input, a full cache, or a wrong input width.
    pub fn forward_cached(
        &self,
        input: AttentionInput,
        cache: &mut KvCache,
    ) -> Result<AttentionOutput> {
        self.check_input(&input)?;
        if input.context.is_some() {
            return Err(AttentionError::Unsupported(
                "the KV cache is for self-attention; compute cross-attention keys once".into(),
            ));
        }
        let t = input.x.dims()[1];
        cache.check_room(t)?;
        if let (Some(rope), None) = (&self.rope, &input.positions)
            && cache.seen() + t > rope.max_len()
        {
            return Err(AttentionError::TooLong {
                what: "rotary encoding",
                position: cache.seen() + t - 1,
                max_len: rope.max_len(),
            });
        }
        let device = input.x.device();
        let offset = cache.seen();
        let first = cache.first_position();
        let (q, k, v) = self.project(input.x, None);
        let (q, k) = match &self.rope {
            Some(rope) => rotate_qk(rope, q, k, input.positions, offset)?,
            None => (q, k),
        };
        let (k, v) = cache.append(k, v)?;
        let tk = k.dims()[2];
        // Extra masks from the caller (padding); causal and window masks come from positions.
        let user = Mask {
            causal: false,
            causal_offset: 0,
            ..input.mask
        };
        let window = self.window.or(cache.window());
        let mask = match window {
            Some(w) => user.with_bool(window_mask(offset, t, first, tk, w, &device)),
            None if t > 1 => user.with_causal_offset(offset),
            None => user, // one new query may see every cached key
        };
        let (out, weights) = self.attend(q, k, v, &mask, input.need_weights);
        Ok(self.finish(out, weights))
    }
}

fn rotate_qk(
    rope: &RotaryEncoding,
    q: Tensor<4>,
    k: Tensor<4>,
    positions: Option<Tensor<2, Int>>,
    offset: usize,
) -> Result<(Tensor<4>, Tensor<4>)> {
    Ok(match positions {
        Some(p) => (rope.forward_at(q, p.clone())?, rope.forward_at(k, p)?),
        None => (rope.forward(q, offset)?, rope.forward(k, offset)?),
    })
}

/// Causal sliding-window mask `[1, 1, Tq, Tk]` (`true` = masked) for queries at absolute
/// positions `q0..q0 + tq` and keys at `k0..k0 + tk`: key `j` is visible to query `i` when
/// `i - window < j <= i`.
fn window_mask(
    q0: usize,
    tq: usize,
    k0: usize,
    tk: usize,
    window: usize,
    device: &Device,
) -> Tensor<4, Bool> {
    let q = Tensor::<1, Int>::arange(q0 as i64..(q0 + tq) as i64, device)
        .reshape([tq, 1])
        .expand([tq, tk]);
    let k = Tensor::<1, Int>::arange(k0 as i64..(k0 + tk) as i64, device)
        .reshape([1, tk])
        .expand([tq, tk]);
    let future = k.clone().greater(q.clone());
    let too_old = (k + window as i64).lower_equal(q);
    future.bool_or(too_old).reshape([1, 1, tq, tk])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::padding_mask_from_lengths;
    use crate::position::sinusoidal_table;
    use burn::tensor::Distribution;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    fn x(b: usize, t: usize, d: usize, seed: u64) -> Tensor<3> {
        let dev = test_device();
        dev.seed(seed);
        Tensor::random([b, t, d], Distribution::Normal(0.0, 1.0), &dev)
    }

    fn mha(cfg: MultiHeadAttentionConfig) -> MultiHeadAttention {
        // Weights large enough that positional effects are far above rounding.
        cfg.with_initializer(Initializer::Normal {
            mean: 0.0,
            std: 0.3,
        })
        .init(&test_device())
        .unwrap()
    }

    #[test]
    fn config_errors_name_the_values() {
        let dev = test_device();
        let e = MultiHeadAttentionConfig::new(10, 3).init(&dev).unwrap_err();
        assert_eq!(e.to_string(), "d_model 10 is not divisible by n_heads 3");
        let e = MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(3))
            .init(&dev)
            .unwrap_err();
        assert_eq!(e.to_string(), "n_heads 4 is not divisible by n_kv_heads 3");
        let e = MultiHeadAttentionConfig::new(12, 4)
            .with_rope_max_len(Some(8))
            .init(&dev)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "rotary embeddings need an even head dimension, got 3"
        );
        let e = MultiHeadAttentionConfig::new(16, 4)
            .with_window(Some(0))
            .init(&dev)
            .unwrap_err();
        assert_eq!(e.to_string(), "window must be > 0, got 0");
    }

    #[test]
    fn wrong_input_width_is_an_error() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4));
        let e = m
            .forward(AttentionInput::self_attn(x(1, 3, 8, 0)))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "attention input: expected shape [_, _, 16], got [1, 3, 8]"
        );
    }

    #[test]
    fn causality() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(32)));
        let a = x(2, 8, 16, 1);
        // Change everything after position 4.
        let b = Tensor::cat(
            vec![a.clone().slice([0..2, 0..5, 0..16]), x(2, 3, 16, 2)],
            1,
        );
        let oa = m
            .forward(AttentionInput::self_attn(a).causal())
            .unwrap()
            .context;
        let ob = m
            .forward(AttentionInput::self_attn(b).causal())
            .unwrap()
            .context;
        let head = |t: Tensor<3>| t.slice([0..2, 0..5, 0..16]);
        assert!(max_abs_diff(&head(oa.clone()), &head(ob.clone())) < 1e-6);
        let tail = |t: Tensor<3>| t.slice([0..2, 5..8, 0..16]);
        assert!(
            max_abs_diff(&tail(oa), &tail(ob)) > 1e-3,
            "the future must matter after it"
        );
    }

    #[test]
    fn padding_does_not_change_real_positions() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4));
        let real = x(1, 5, 16, 3);
        let plain = m
            .forward(AttentionInput::self_attn(real.clone()))
            .unwrap()
            .context;
        for seed in [4, 5] {
            let padded = Tensor::cat(vec![real.clone(), x(1, 3, 16, seed)], 1);
            let pad = padding_mask_from_lengths(&[5], 8, &padded.device());
            let out = m
                .forward(AttentionInput::self_attn(padded).key_padding(pad))
                .unwrap()
                .context
                .slice([0..1, 0..5, 0..16]);
            assert!(max_abs_diff(&out, &plain) < 1e-5);
        }
    }

    #[test]
    fn permutation_equivariant_without_positions_only() {
        let dev = test_device();
        let perm = Tensor::<1, Int>::from_ints([3, 0, 4, 1, 2], &dev);
        let input = x(1, 5, 16, 6);
        let m = mha(MultiHeadAttentionConfig::new(16, 4));
        let out = m
            .forward(AttentionInput::self_attn(input.clone()))
            .unwrap()
            .context;
        let out_p = m
            .forward(AttentionInput::self_attn(
                input.clone().select(1, perm.clone()),
            ))
            .unwrap()
            .context;
        assert!(max_abs_diff(&out.clone().select(1, perm.clone()), &out_p) < 1e-5);
        // With sinusoidal positions added, permuting the tokens changes the result.
        let pe = sinusoidal_table(5, 16, &dev).unwrap().unsqueeze::<3>();
        let with_pe = m
            .forward(AttentionInput::self_attn(input.clone() + pe.clone()))
            .unwrap()
            .context;
        let with_pe_p = m
            .forward(AttentionInput::self_attn(
                input.select(1, perm.clone()) + pe,
            ))
            .unwrap()
            .context;
        assert!(max_abs_diff(&with_pe.select(1, perm.clone()), &with_pe_p) > 1e-3);
        // So does RoPE.
        let r = mha(MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(8)));
        let a = r
            .forward(AttentionInput::self_attn(x(1, 5, 16, 6)))
            .unwrap()
            .context;
        let b = r
            .forward(AttentionInput::self_attn(
                x(1, 5, 16, 6).select(1, perm.clone()),
            ))
            .unwrap()
            .context;
        assert!(max_abs_diff(&a.select(1, perm), &b) > 1e-3);
    }

    #[test]
    fn gqa_with_all_heads_equals_mha_and_mqa_runs() {
        let mha_layer = mha(MultiHeadAttentionConfig::new(16, 4));
        let mut gqa = mha(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(4)));
        // The same weights in both layers.
        gqa.q_proj = mha_layer.q_proj.clone();
        gqa.k_proj = mha_layer.k_proj.clone();
        gqa.v_proj = mha_layer.v_proj.clone();
        gqa.o_proj = mha_layer.o_proj.clone();
        let input = x(2, 6, 16, 8);
        let a = mha_layer
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let b = gqa
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&a, &b) < 1e-6);
        let mqa = mha(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(1)));
        assert_eq!(mqa.k_proj.as_ref().unwrap().weight.dims(), [16, 4]);
        let out = mqa
            .forward(AttentionInput::self_attn(input).causal().with_weights())
            .unwrap();
        assert_eq!(out.context.dims(), [2, 6, 16]);
        // Weights are distributions over the visible keys.
        let sums = out
            .weights
            .unwrap()
            .sum_dim(3)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5));
    }

    #[test]
    fn fused_qkv_equals_separate_projections_with_the_same_weights() {
        let sep = mha(MultiHeadAttentionConfig::new(8, 2).with_n_kv_heads(Some(1)));
        let mut fused = mha(MultiHeadAttentionConfig::new(8, 2)
            .with_n_kv_heads(Some(1))
            .with_fused_qkv(true));
        let w = Tensor::cat(
            vec![
                sep.q_proj.as_ref().unwrap().weight.val(),
                sep.k_proj.as_ref().unwrap().weight.val(),
                sep.v_proj.as_ref().unwrap().weight.val(),
            ],
            1,
        );
        let bias = Tensor::cat(
            vec![
                sep.q_proj.as_ref().unwrap().bias.as_ref().unwrap().val(),
                sep.k_proj.as_ref().unwrap().bias.as_ref().unwrap().val(),
                sep.v_proj.as_ref().unwrap().bias.as_ref().unwrap().val(),
            ],
            0,
        );
        let qkv = fused.qkv_proj.as_mut().unwrap();
        qkv.weight = burn::module::Param::from_tensor(w);
        qkv.bias = Some(burn::module::Param::from_tensor(bias));
        fused.o_proj = sep.o_proj.clone();
        let input = x(1, 4, 8, 9);
        let a = sep
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let b = fused
            .forward(AttentionInput::self_attn(input).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&a, &b) < 1e-6);
    }

    #[test]
    fn weights_path_equals_fast_path() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(2))
            .with_rope_max_len(Some(16)));
        let input = x(2, 7, 16, 10);
        let fast = m
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap();
        let slow = m
            .forward(AttentionInput::self_attn(input).causal().with_weights())
            .unwrap();
        assert!(fast.weights.is_none());
        assert!(max_abs_diff(&fast.context, &slow.context) < 1e-5);
        let w = slow.weights.unwrap();
        assert_eq!(w.dims(), [2, 4, 7, 7]);
        // Causal: weight on the future is exactly zero.
        let upper = w
            .slice([0..2, 0..4, 0..1, 1..7])
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert!(upper.iter().all(|v| *v == 0.0));
    }

    #[test]
    fn cross_attention_reads_the_context() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4).with_d_context(Some(8)));
        let q = x(2, 3, 16, 12);
        let ctx = x(2, 5, 8, 13);
        let out = m
            .forward(AttentionInput::cross_attn(q.clone(), ctx.clone()).with_weights())
            .unwrap();
        assert_eq!(out.weights.unwrap().dims(), [2, 4, 3, 5]);
        let other = m.forward(AttentionInput::cross_attn(q, ctx * 2.0)).unwrap();
        assert!(max_abs_diff(&out.context, &other.context) > 1e-3);
        let bad = m.forward(AttentionInput::cross_attn(x(2, 3, 16, 1), x(3, 5, 8, 1)));
        assert!(matches!(
            bad,
            Err(AttentionError::Shape {
                what: "attention context",
                ..
            })
        ));
    }

    fn decode_step_by_step(
        m: &MultiHeadAttention,
        input: &Tensor<3>,
        mut cache: KvCache,
    ) -> Tensor<3> {
        let [b, t, d] = input.dims();
        let mut outs = Vec::new();
        // A prompt of 3, then one token at a time.
        let prompt = input.clone().slice([0..b, 0..3, 0..d]);
        outs.push(
            m.forward_cached(AttentionInput::self_attn(prompt), &mut cache)
                .unwrap()
                .context,
        );
        for i in 3..t {
            let step = input.clone().slice([0..b, i..i + 1, 0..d]);
            outs.push(
                m.forward_cached(AttentionInput::self_attn(step), &mut cache)
                    .unwrap()
                    .context,
            );
        }
        Tensor::cat(outs, 1)
    }

    #[test]
    fn cache_equals_full_forward() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(2))
            .with_rope_max_len(Some(32)));
        let input = x(2, 9, 16, 14);
        let full = m
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let cached = decode_step_by_step(&m, &input, KvCache::new(32));
        assert!(
            max_abs_diff(&full, &cached) < 1e-5,
            "{}",
            max_abs_diff(&full, &cached)
        );
    }

    #[test]
    fn sliding_window_cache_equals_windowed_forward() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4)
            .with_rope_max_len(Some(32))
            .with_window(Some(3)));
        let input = x(1, 9, 16, 15);
        let full = m
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let cached = decode_step_by_step(&m, &input, KvCache::sliding(3).unwrap());
        assert!(max_abs_diff(&full, &cached) < 1e-5);
        // And the window really limits what is seen.
        let plain = mha(MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(32)));
        let unwindowed = plain
            .forward(AttentionInput::self_attn(input).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&full, &unwindowed) > 1e-4);
    }

    #[test]
    fn full_cache_is_a_clear_error() {
        let m = mha(MultiHeadAttentionConfig::new(8, 2));
        let mut cache = KvCache::new(4);
        m.forward_cached(AttentionInput::self_attn(x(1, 4, 8, 1)), &mut cache)
            .unwrap();
        let e = m
            .forward_cached(AttentionInput::self_attn(x(1, 1, 8, 1)), &mut cache)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "kv cache: position 4 is past the maximum length 4"
        );
    }

    #[test]
    fn chunked_kernel_equals_fused() {
        let cfg = MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(32));
        let fused = mha(cfg);
        let chunked = fused.clone().with_kernel(AttentionKernel::Chunked {
            block_q: 3,
            block_k: 4,
        });
        let input = x(2, 10, 16, 16);
        let a = fused
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let b = chunked
            .forward(AttentionInput::self_attn(input).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&a, &b) < 1e-5, "{}", max_abs_diff(&a, &b));
    }
}
