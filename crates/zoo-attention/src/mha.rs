//! Multi-head attention: self and cross, MHA / GQA / MQA, separate or fused QKV, RoPE,
//! ALiBi or T5 position biases, sliding windows with global tokens, a self-attention KV
//! cache and a cross-attention cache, a free head size and score scale (T5), and optional
//! per-head weights.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::block::linear_rows;
use crate::cache::{CrossKvCache, KvCache};
use crate::error::{AttentionError, Result, check_shape};
use crate::mask::Mask;
use crate::position::{
    Positions, RelativePositionBias, RelativePositionBiasConfig, RopeLayout, RotaryEncoding,
    RotaryEncodingConfig, alibi_bias_at,
};
use crate::sdpa::{
    attention_chunked, attention_fused, attention_linear, attention_reference, repeat_kv,
};

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
    /// Linear attention (Katharopoulos et al., 2020), an approximation of softmax
    /// attention; takes a causal flag and key padding only, and no cache.
    Linear {
        /// Positions per chunk of the causal scan.
        chunk: usize,
    },
    /// The readable reference path, always.
    Reference,
}

/// A bias on the scores that encodes relative positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PositionBias {
    /// No bias.
    None,
    /// ALiBi (Press et al., 2022): `-slope_h · |i - j|`, fixed slopes per head.
    Alibi,
    /// T5's learned bucketed relative bias (Raffel et al., 2020).
    T5 {
        /// Buckets (T5: 32).
        num_buckets: usize,
        /// Distance where the last bucket starts (T5: 128).
        max_distance: usize,
        /// Both directions (encoder) or the past only (decoder).
        bidirectional: bool,
    },
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
    /// Size of one head. Default: `d_model / n_heads`; T5 sets its own (`d_kv`), so the
    /// projections are `d_model -> n_heads · head_dim` and back.
    #[config(default = "None")]
    pub head_dim: Option<usize>,
    /// Factor on the scores `Q Kᵀ`. Default: `1 / sqrt(head_dim)` (Vaswani et al.); T5
    /// uses 1 (its initialisation absorbs the scale).
    #[config(default = "None")]
    pub scale: Option<f64>,
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
    /// A relative-position bias on the scores (self-attention). Default: none.
    #[config(default = "PositionBias::None")]
    pub position_bias: PositionBias,
    /// Self-attention sees only keys closer than `window` positions (itself included),
    /// as Mistral and Longformer. Default: none.
    #[config(default = "None")]
    pub window: Option<usize>,
    /// With a window: positions that see and are seen by every position (Longformer's
    /// global tokens, e.g. a CLS token). Causality still applies. Default: none.
    #[config(default = "Vec::new()")]
    pub global_tokens: Vec<usize>,
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
        self.head_dim.unwrap_or(self.d_model / self.n_heads.max(1))
    }

    /// Trainable parameters of the layer [`Self::init`] builds, counted from the
    /// configuration alone: the Q, K, V (or fused QKV) and output projections with their
    /// biases, and T5's relative bias table. RoPE's tables are not parameters.
    pub fn num_params(&self) -> usize {
        let (hd, kv) = (self.head_dim(), self.kv_heads());
        let d_ctx = self.d_context.unwrap_or(self.d_model);
        let linear =
            |d_in: usize, d_out: usize, bias: bool| d_in * d_out + usize::from(bias) * d_out;
        let qkv = if self.fused_qkv {
            linear(self.d_model, (self.n_heads + 2 * kv) * hd, self.qkv_bias)
        } else {
            linear(self.d_model, self.n_heads * hd, self.qkv_bias)
                + 2 * linear(d_ctx, kv * hd, self.qkv_bias)
        };
        let bias_table = match self.position_bias {
            PositionBias::T5 { num_buckets, .. } => num_buckets * self.n_heads,
            _ => 0,
        };
        qkv + linear(self.n_heads * hd, self.d_model, self.out_bias) + bias_table
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// Zero sizes, `d_model % n_heads != 0` without an explicit head size,
    /// `n_heads % n_kv_heads != 0`, an odd head size with RoPE, a zero window, global
    /// tokens without a window, a dropout outside `[0, 1)`, a scale that is not positive
    /// and finite, bad T5 bucket settings, fused QKV with a context, or a linear kernel
    /// with a window or a bias.
    pub fn validate(&self) -> Result<()> {
        if self.d_model == 0 {
            return Err(AttentionError::Zero { name: "d_model" });
        }
        if self.n_heads == 0 {
            return Err(AttentionError::Zero { name: "n_heads" });
        }
        match self.head_dim {
            Some(0) => return Err(AttentionError::Zero { name: "head_dim" }),
            Some(_) => {}
            None if !self.d_model.is_multiple_of(self.n_heads) => {
                return Err(AttentionError::HeadsDoNotDivideModel {
                    d_model: self.d_model,
                    n_heads: self.n_heads,
                });
            }
            None => {}
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
        if self.window.is_none() && !self.global_tokens.is_empty() {
            return Err(AttentionError::Unsupported(
                "global_tokens only mean something with a window".into(),
            ));
        }
        if let Some(scale) = self.scale
            && !(scale.is_finite() && scale > 0.0)
        {
            return Err(AttentionError::OutOfRange {
                name: "scale",
                bound: "finite and > 0",
                value: scale.to_string(),
            });
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
        if let PositionBias::T5 {
            num_buckets,
            max_distance,
            bidirectional,
        } = self.position_bias
        {
            crate::position::check_bucket_settings(num_buckets, max_distance, bidirectional)?;
        }
        match self.kernel {
            AttentionKernel::Chunked { block_q, block_k } if block_q == 0 || block_k == 0 => {
                return Err(AttentionError::Zero {
                    name: "kernel block size",
                });
            }
            AttentionKernel::Linear { chunk: 0 } => {
                return Err(AttentionError::Zero {
                    name: "linear kernel chunk",
                });
            }
            AttentionKernel::Linear { .. }
                if self.window.is_some() || self.position_bias != PositionBias::None =>
            {
                return Err(AttentionError::Unsupported(
                    "the linear kernel takes no window and no position bias".into(),
                ));
            }
            _ => {}
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
        let relative_bias = match self.position_bias {
            PositionBias::T5 {
                num_buckets,
                max_distance,
                bidirectional,
            } => Some(
                RelativePositionBiasConfig::new(self.n_heads)
                    .with_num_buckets(num_buckets)
                    .with_max_distance(max_distance)
                    .with_bidirectional(bidirectional)
                    .init(device)?,
            ),
            _ => None,
        };
        Ok(MultiHeadAttention {
            q_proj,
            k_proj,
            v_proj,
            qkv_proj,
            o_proj: linear(self.n_heads * hd, self.d_model, self.out_bias),
            dropout: DropoutConfig::new(self.dropout).init(),
            rope,
            relative_bias,
            n_heads: self.n_heads,
            n_kv_heads: kv,
            head_dim: hd,
            window: self.window,
            global_tokens: self.global_tokens.clone(),
            scale: self.scale,
            alibi: self.position_bias == PositionBias::Alibi,
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
    /// T5's relative bias table, when configured.
    pub relative_bias: Option<RelativePositionBias>,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
    #[module(skip)]
    global_tokens: Vec<usize>,
    #[module(skip)]
    scale: Option<f64>,
    alibi: bool,
    #[module(skip)]
    kernel: AttentionKernel,
}

/// The input of one attention call.
#[derive(Debug, Clone)]
pub struct AttentionInput {
    x: Tensor<3>,
    context: Option<Tensor<3>>,
    mask: Mask,
    key_padding: Option<Tensor<2, Bool>>,
    need_weights: bool,
    position: usize,
    positions: Option<Positions>,
}

impl AttentionInput {
    /// Self-attention over `x`, `[B, T, d_model]`.
    pub fn self_attn(x: Tensor<3>) -> Self {
        Self {
            x,
            context: None,
            mask: Mask::none(),
            key_padding: None,
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
        self.key_padding = Some(match self.key_padding.take() {
            Some(old) => old.bool_or(pad),
            None => pad,
        });
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
        if mask.rule.causal {
            self.mask = self.mask.with_causal_offset(mask.query_offset);
        }
        if let Some(w) = mask.rule.window {
            self.mask = self.mask.with_window(w, &mask.rule.global);
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
    pub fn with_positions(mut self, positions: Positions) -> Self {
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

    fn d_context(&self) -> Option<usize> {
        self.k_proj.as_ref().map(|k| k.weight.dims()[0])
    }

    /// `[B, T, H Dh]` -> `[B, H, T, Dh]`
    fn split_heads(x: Tensor<3>, heads: usize, hd: usize) -> Tensor<4> {
        let [b, t, _] = x.dims();
        x.reshape([b, t, heads, hd]).swap_dims(1, 2)
    }

    /// Projects queries from `x` and keys and values from `context` (or `x`).
    fn project(&self, x: Tensor<3>, context: Option<Tensor<3>>) -> Result<[Tensor<4>; 3]> {
        let (h, kv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let (q, k, v) = match (&self.qkv_proj, &self.q_proj, &self.k_proj, &self.v_proj) {
            (Some(qkv), ..) if context.is_none() => {
                let [b, t, _] = x.dims();
                let all = linear_rows(qkv, x); // [B, T, (H + 2 Hkv) Dh]
                let q = all.clone().slice([0..b, 0..t, 0..h * hd]);
                let k = all.clone().slice([0..b, 0..t, h * hd..(h + kv) * hd]);
                let v = all.slice([0..b, 0..t, (h + kv) * hd..(h + 2 * kv) * hd]);
                (q, k, v)
            }
            (None, Some(qp), Some(kp), Some(vp)) => {
                let src = context.unwrap_or_else(|| x.clone());
                (
                    linear_rows(qp, x),
                    linear_rows(kp, src.clone()),
                    linear_rows(vp, src),
                )
            }
            _ => {
                return Err(AttentionError::Unsupported(
                    "this layer has neither a fused QKV projection (self-attention only) \
                     nor all three of q_proj, k_proj and v_proj"
                        .into(),
                ));
            }
        };
        Ok([
            Self::split_heads(q, h, hd),
            Self::split_heads(k, kv, hd),
            Self::split_heads(v, kv, hd),
        ])
    }

    fn check_input(&self, input: &AttentionInput) -> Result<()> {
        let [b, t, _] = input.x.dims();
        check_shape(
            "attention input",
            &input.x.dims(),
            &[None, None, Some(self.d_model())],
        )?;
        let mut tk = t;
        if let Some(ctx) = &input.context {
            if self.qkv_proj.is_some() {
                return Err(AttentionError::Unsupported(
                    "a fused-QKV layer cannot do cross-attention".into(),
                ));
            }
            check_shape(
                "attention context",
                &ctx.dims(),
                &[Some(b), None, self.d_context()],
            )?;
            tk = ctx.dims()[1];
        }
        if let Some(p) = &input.positions {
            check_shape("rope positions", &p.dims(), &[Some(b), Some(t)])?;
        }
        if input.context.is_some() || self.kernel_is_linear() {
            // Key padding spans exactly the keys of this call (no cache).
            if let Some(pad) = &input.key_padding {
                check_shape("key padding", &pad.dims(), &[Some(b), Some(tk)])?;
            }
        }
        Ok(())
    }

    fn kernel_is_linear(&self) -> bool {
        matches!(self.kernel, AttentionKernel::Linear { .. })
    }

    /// The relative-position bias for queries at absolute positions `q0..q0 + tq` and keys
    /// at `k0..k0 + tk`, `[1, H, Tq, Tk]`, if the layer has one. T5 computes it in its
    /// first layer and passes it to the others through [`Mask::with_bias`].
    pub fn position_bias(
        &self,
        q0: usize,
        tq: usize,
        k0: usize,
        tk: usize,
        device: &Device,
    ) -> Option<Tensor<4>> {
        if let Some(rel) = &self.relative_bias {
            return Some(rel.forward_offsets(q0, tq, k0, tk, device));
        }
        self.alibi
            .then(|| alibi_bias_at(self.n_heads, q0, tq, k0, tk, device))
    }

    fn attend(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        mask: &Mask,
        need_weights: bool,
    ) -> Result<(Tensor<4>, Option<Tensor<4>>)> {
        let n_rep = self.n_heads / self.n_kv_heads;
        let k = repeat_kv(k, n_rep);
        let v = repeat_kv(v, n_rep);
        let dropout_on = self.dropout.prob > 0.0
            && self.dropout.training.is_enabled()
            && q.device().is_autodiff();
        if need_weights || dropout_on || self.kernel == AttentionKernel::Reference {
            let (out, w) = attention_reference(q, k, v, mask, self.scale, Some(&self.dropout))?;
            return Ok((out, need_weights.then_some(w)));
        }
        Ok(match self.kernel {
            AttentionKernel::Chunked { block_q, block_k } => (
                attention_chunked(q, k, v, mask, self.scale, block_q, block_k)?,
                None,
            ),
            _ => (attention_fused(q, k, v, mask, self.scale)?, None),
        })
    }

    fn finish(&self, out: Tensor<4>, weights: Option<Tensor<4>>) -> AttentionOutput {
        let [b, h, t, hd] = out.dims();
        // [B, H, T, Dh] -> [B, T, H, Dh] -> [B, T, H Dh]
        let merged = out.swap_dims(1, 2).reshape([b, t, h * hd]);
        AttentionOutput {
            context: linear_rows(&self.o_proj, merged),
            weights,
        }
    }

    /// The linear kernel: causal or not, with key padding, nothing else.
    fn forward_linear(&self, input: AttentionInput, chunk: usize) -> Result<AttentionOutput> {
        if input.need_weights {
            return Err(AttentionError::Unsupported(
                "linear attention has no attention weights to return".into(),
            ));
        }
        let mask = &input.mask;
        if mask.masked.is_some() || mask.bias.is_some() || mask.rule.window.is_some() {
            return Err(AttentionError::Unsupported(
                "the linear kernel takes only a causal flag and key padding".into(),
            ));
        }
        let causal = mask.is_causal();
        let is_self = input.context.is_none();
        let [q, k, v] = self.project(input.x, input.context)?;
        let (q, k) = match (&self.rope, is_self) {
            (Some(rope), true) => rotate_qk(rope, q, k, input.positions.as_ref(), input.position)?,
            _ => (q, k),
        };
        let n_rep = self.n_heads / self.n_kv_heads;
        let out = attention_linear(
            q,
            repeat_kv(k, n_rep),
            repeat_kv(v, n_rep),
            causal,
            input.key_padding,
            chunk,
        )?;
        Ok(self.finish(out, None))
    }

    /// Attention over a whole sequence, without a cache.
    ///
    /// # Shapes
    /// - input `x`: `[B, Tq, d_model]`; cross-attention `context`: `[B, Tk, d_context]`
    /// - output `context`: `[B, Tq, d_model]`; `weights`: `[B, H, Tq, Tk]`
    ///
    /// # Errors
    /// Wrong input widths, batch sizes or mask shapes, or positions past the RoPE table.
    pub fn forward(&self, input: AttentionInput) -> Result<AttentionOutput> {
        self.check_input(&input)?;
        if let AttentionKernel::Linear { chunk } = self.kernel {
            return self.forward_linear(input, chunk);
        }
        let is_self = input.context.is_none();
        let t = input.x.dims()[1];
        let device = input.x.device();
        let [q, k, v] = self.project(input.x, input.context)?;
        let tk = k.dims()[2];
        let (q, k) = match (&self.rope, is_self) {
            (Some(rope), true) => rotate_qk(rope, q, k, input.positions.as_ref(), input.position)?,
            _ => (q, k),
        };
        let mut mask = input.mask;
        if let Some(pad) = input.key_padding {
            mask = mask.with_key_padding(pad);
        }
        if is_self {
            if let Some(w) = self.window {
                mask = mask.with_window(w, &self.global_tokens);
            }
            let p0 = input.position;
            if let Some(bias) = self.position_bias(p0, t, p0, tk, &device) {
                mask = mask.with_bias(bias);
            }
        }
        let (out, weights) = self.attend(q, k, v, &mask, input.need_weights)?;
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
    /// A cross-attention input, a full cache, a linear kernel, or a wrong input width.
    pub fn forward_cached(
        &self,
        input: AttentionInput,
        cache: &mut KvCache,
    ) -> Result<AttentionOutput> {
        self.check_input(&input)?;
        if input.context.is_some() {
            return Err(AttentionError::Unsupported(
                "the KV cache is for self-attention; use cross_kv and forward_cross_cached \
                 for cross-attention"
                    .into(),
            ));
        }
        if self.kernel_is_linear() {
            return Err(AttentionError::Unsupported(
                "the linear kernel has no KV cache".into(),
            ));
        }
        let [b, t, _] = input.x.dims();
        let kv_dims = [b, self.n_kv_heads, t, self.head_dim];
        cache.check_append(kv_dims, kv_dims)?;
        if let Some(pad) = &input.key_padding {
            check_shape(
                "key padding",
                &pad.dims(),
                &[Some(b), Some(cache.len() + t)],
            )?;
        }
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
        let [q, k, v] = self.project(input.x, None)?;
        let (q, k) = match &self.rope {
            Some(rope) => rotate_qk(rope, q, k, input.positions.as_ref(), offset)?,
            None => (q, k),
        };
        let (k, v) = cache.append(k, v)?;
        let tk = k.dims()[2];
        // The caller's extra masks (padding); the positional rule comes from positions.
        let mut mask = Mask {
            masked: input.mask.masked,
            bias: input.mask.bias,
            ..Mask::none()
        };
        if let Some(pad) = input.key_padding {
            mask = mask.with_key_padding(pad);
        }
        // Keys of a sliding cache start at `first`, after the positions it dropped.
        mask = mask.with_causal().with_offsets(offset, first);
        if let Some(w) = self.window.or(cache.window()) {
            mask = mask.with_window(w, &self.global_tokens);
        }
        if let Some(bias) = self.position_bias(offset, t, first, tk, &device) {
            mask = mask.with_bias(bias);
        }
        let (out, weights) = self.attend(q, k, v, &mask, input.need_weights)?;
        Ok(self.finish(out, weights))
    }

    /// Projects the encoder's output once into the keys and values every decoding step
    /// of cross-attention reads.
    ///
    /// # Shapes
    /// - `context`: `[B, S, d_context]`
    ///
    /// # Errors
    /// A fused-QKV layer, or a context of the wrong width.
    pub fn cross_kv(&self, context: Tensor<3>) -> Result<CrossKvCache> {
        if self.qkv_proj.is_some() {
            return Err(AttentionError::Unsupported(
                "a fused-QKV layer cannot do cross-attention".into(),
            ));
        }
        check_shape(
            "attention context",
            &context.dims(),
            &[None, None, self.d_context()],
        )?;
        let (Some(kp), Some(vp)) = (&self.k_proj, &self.v_proj) else {
            return Err(AttentionError::Unsupported(
                "cross-attention needs k_proj and v_proj".into(),
            ));
        };
        let (kv, hd) = (self.n_kv_heads, self.head_dim);
        Ok(CrossKvCache {
            k: Self::split_heads(linear_rows(kp, context.clone()), kv, hd),
            v: Self::split_heads(linear_rows(vp, context), kv, hd),
        })
    }

    /// Cross-attention from new decoder positions `x` to keys and values projected once
    /// by [`Self::cross_kv`]; equals [`Self::forward`] with the same context.
    ///
    /// # Shapes
    /// - input `x`: `[B, Tq, d_model]`, the cache `[B, Hkv, S, Dh]` -> `[B, Tq, d_model]`
    ///
    /// # Errors
    /// A batch size or width that does not match, or a mask that does not fit `S` keys.
    pub fn forward_cross_cached(
        &self,
        input: AttentionInput,
        cache: &CrossKvCache,
    ) -> Result<AttentionOutput> {
        let [b, _, _] = input.x.dims();
        check_shape(
            "attention input",
            &input.x.dims(),
            &[Some(cache.batch()), None, Some(self.d_model())],
        )?;
        if input.context.is_some() {
            return Err(AttentionError::Unsupported(
                "the cross-attention cache replaces the context; do not pass one".into(),
            ));
        }
        let s = cache.len();
        let mut mask = input.mask;
        if let Some(pad) = input.key_padding {
            check_shape("key padding", &pad.dims(), &[Some(b), Some(s)])?;
            mask = mask.with_key_padding(pad);
        }
        let q = match (&self.q_proj, &self.qkv_proj) {
            (Some(qp), None) => {
                Self::split_heads(linear_rows(qp, input.x), self.n_heads, self.head_dim)
            }
            _ => {
                return Err(AttentionError::Unsupported(
                    "a fused-QKV layer cannot do cross-attention".into(),
                ));
            }
        };
        let (out, weights) = self.attend(
            q,
            cache.k.clone(),
            cache.v.clone(),
            &mask,
            input.need_weights,
        )?;
        Ok(self.finish(out, weights))
    }
}

fn rotate_qk(
    rope: &RotaryEncoding,
    q: Tensor<4>,
    k: Tensor<4>,
    positions: Option<&Positions>,
    offset: usize,
) -> Result<(Tensor<4>, Tensor<4>)> {
    Ok(match positions {
        Some(p) => (rope.forward_at(q, p)?, rope.forward_at(k, p)?),
        None => (rope.forward(q, offset)?, rope.forward(k, offset)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::padding_mask_from_lengths;
    use crate::position::sinusoidal_table;
    use crate::sdpa::attention_linear;
    use burn::tensor::{Distribution, Int};
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

    /// Attention computed head by head from the layer's weights, without split_heads,
    /// repeat_kv or any kernel of this crate: query head `h` reads KV head
    /// `h / (H / Hkv)`, scores are `q·k · scale`, masked (causal) before a plain softmax.
    fn independent(
        m: &MultiHeadAttention,
        x: &Tensor<3>,
        ctx: Option<&Tensor<3>>,
        causal: bool,
        scale: f64,
    ) -> Tensor<3> {
        let src = ctx.unwrap_or(x);
        let [b, tq, _] = x.dims();
        let tk = src.dims()[1];
        let (h, kv, hd) = (m.n_heads(), m.n_kv_heads(), m.head_dim());
        let q = m.q_proj.as_ref().unwrap().forward(x.clone()); // [B, Tq, H Dh]
        let k = m.k_proj.as_ref().unwrap().forward(src.clone()); // [B, Tk, Hkv Dh]
        let v = m.v_proj.as_ref().unwrap().forward(src.clone());
        let mut heads = Vec::new();
        for head in 0..h {
            let g = head / (h / kv);
            let qh = q.clone().slice([0..b, 0..tq, head * hd..(head + 1) * hd]);
            let kh = k.clone().slice([0..b, 0..tk, g * hd..(g + 1) * hd]);
            let vh = v.clone().slice([0..b, 0..tk, g * hd..(g + 1) * hd]);
            let mut scores = qh.matmul(kh.swap_dims(1, 2)) * scale; // [B, Tq, Tk]
            if causal {
                let future: Vec<f32> = (0..tq)
                    .flat_map(|i| (0..tk).map(move |j| if j > i { -1e9 } else { 0.0 }))
                    .collect();
                scores = scores
                    + Tensor::<1>::from_floats(future.as_slice(), &x.device()).reshape([1, tq, tk]);
            }
            let w = burn::tensor::activation::softmax(scores, 2);
            heads.push(w.matmul(vh)); // [B, Tq, Dh]
        }
        m.o_proj.forward(Tensor::cat(heads, 2))
    }

    #[test]
    fn gqa_mqa_and_cross_attention_equal_an_independent_computation() {
        let input = x(2, 6, 16, 8);
        let ctx = x(2, 5, 8, 9);
        for kv in [4, 2, 1] {
            let m = mha(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(kv)));
            let s = 1.0 / (m.head_dim() as f64).sqrt();
            let got = m
                .forward(AttentionInput::self_attn(input.clone()).causal())
                .unwrap()
                .context;
            let want = independent(&m, &input, None, true, s);
            assert!(
                max_abs_diff(&got, &want) < 1e-4,
                "kv {kv}: {}",
                max_abs_diff(&got, &want)
            );
            let c = mha(MultiHeadAttentionConfig::new(16, 4)
                .with_n_kv_heads(Some(kv))
                .with_d_context(Some(8)));
            let got = c
                .forward(AttentionInput::cross_attn(input.clone(), ctx.clone()))
                .unwrap()
                .context;
            let want = independent(&c, &input, Some(&ctx), false, s);
            assert!(max_abs_diff(&got, &want) < 1e-4, "cross kv {kv}");
        }
        // Negative control: the same layer read as MHA (each query head on its own KV
        // slice) is far from its GQA result.
        let m = mha(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(2)));
        let got = m
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let wrong = mha(MultiHeadAttentionConfig::new(16, 4));
        assert!(max_abs_diff(&got, &independent(&wrong, &input, None, true, 0.5)) > 1e-2);
    }

    #[test]
    fn t5_head_size_and_scale_are_free() {
        // T5 style: 4 heads of 6 (not 16 / 4 = 4), no score scaling.
        let m = mha(MultiHeadAttentionConfig::new(16, 4)
            .with_head_dim(Some(6))
            .with_scale(Some(1.0))
            .with_qkv_bias(false)
            .with_out_bias(false));
        assert_eq!(m.q_proj.as_ref().unwrap().weight.dims(), [16, 24]);
        assert_eq!(m.o_proj.weight.dims(), [24, 16]);
        let input = x(2, 5, 16, 21);
        for kernel in [
            AttentionKernel::Fused,
            AttentionKernel::Reference,
            AttentionKernel::Chunked {
                block_q: 2,
                block_k: 3,
            },
        ] {
            let got = m
                .clone()
                .with_kernel(kernel)
                .forward(AttentionInput::self_attn(input.clone()).causal())
                .unwrap()
                .context;
            let want = independent(&m, &input, None, true, 1.0);
            assert!(
                max_abs_diff(&got, &want) < 1e-4,
                "{kernel:?}: {}",
                max_abs_diff(&got, &want)
            );
            let default_scale = independent(&m, &input, None, true, 1.0 / 6f64.sqrt());
            assert!(
                max_abs_diff(&got, &default_scale) > 1e-3,
                "the scale must matter"
            );
        }
        let e = MultiHeadAttentionConfig::new(16, 4)
            .with_scale(Some(0.0))
            .init(&test_device())
            .unwrap_err();
        assert_eq!(e.to_string(), "scale must be finite and > 0, got 0");
    }

    #[test]
    fn cross_attention_cache_equals_the_full_forward() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(2))
            .with_d_context(Some(8)));
        let ctx = x(2, 5, 8, 31);
        let pad = padding_mask_from_lengths(&[5, 3], 5, &ctx.device());
        let cache = m.cross_kv(ctx.clone()).unwrap();
        assert_eq!((cache.len(), cache.batch()), (5, 2));
        // Step by step, the decoder's queries read the same projected keys.
        for t in 0..3 {
            let q = x(2, 1, 16, 40 + t);
            let full = m
                .forward(
                    AttentionInput::cross_attn(q.clone(), ctx.clone()).key_padding(pad.clone()),
                )
                .unwrap()
                .context;
            let cached = m
                .forward_cross_cached(
                    AttentionInput::self_attn(q).key_padding(pad.clone()),
                    &cache,
                )
                .unwrap()
                .context;
            assert!(max_abs_diff(&full, &cached) < 1e-5);
            // Negative control: a cache of another source gives another result.
            let other = m.cross_kv(ctx.clone() * -1.0).unwrap();
            let moved = m
                .forward_cross_cached(
                    AttentionInput::self_attn(x(2, 1, 16, 40 + t)).key_padding(pad.clone()),
                    &other,
                )
                .unwrap()
                .context;
            assert!(max_abs_diff(&full, &moved) > 1e-3);
        }
        let e = m
            .forward_cross_cached(AttentionInput::self_attn(x(3, 1, 16, 1)), &cache)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "attention input: expected shape [2, _, 16], got [3, 1, 16]"
        );
    }

    #[test]
    fn alibi_linear_and_global_windows_are_reachable_from_the_config() {
        let dev = test_device();
        let input = x(1, 9, 16, 50);
        // ALiBi: the layer equals the reference path with the crate's ALiBi bias added.
        let m = mha(MultiHeadAttentionConfig::new(16, 4).with_position_bias(PositionBias::Alibi));
        let got = m
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let plain = mha_with_bias_off(m.clone());
        let bias = crate::position::alibi_bias(4, 9, 9, 0, &dev);
        let want = plain
            .forward(
                AttentionInput::self_attn(input.clone())
                    .causal()
                    .mask(Mask::none().with_bias(bias)),
            )
            .unwrap()
            .context;
        assert!(max_abs_diff(&got, &want) < 1e-5);
        // Negative control: without the bias the layer computes something else.
        let unbiased = plain
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&got, &unbiased) > 1e-3);
        // Linear attention through the config equals the kernel on the projections.
        let lin =
            mha(MultiHeadAttentionConfig::new(16, 4)
                .with_kernel(AttentionKernel::Linear { chunk: 4 }));
        let got = lin
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let [q, k, v] = lin.project(input.clone(), None).unwrap();
        let want = lin
            .finish(attention_linear(q, k, v, true, None, 9).unwrap(), None)
            .context;
        assert!(max_abs_diff(&got, &want) < 1e-4);
        // Negative control: the same weights with softmax attention differ.
        let softmax = lin
            .clone()
            .with_kernel(AttentionKernel::Reference)
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&got, &softmax) > 1e-3);
        assert!(
            lin.forward_cached(
                AttentionInput::self_attn(input.clone()),
                &mut KvCache::new(16)
            )
            .is_err()
        );
        // A window with a global token through the config equals the sliding kernel.
        let win = mha(MultiHeadAttentionConfig::new(16, 4)
            .with_window(Some(3))
            .with_global_tokens(vec![0]));
        let got = win
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        let [q, k, v] = win.project(input.clone(), None).unwrap();
        let out = crate::sdpa::attention_sliding_window(q, k, v, 3, true, &[0], None, 4).unwrap();
        assert!(max_abs_diff(&got, &win.finish(out, None).context) < 1e-5);
        // Negative control: the same weights without the window differ.
        let mut unwindowed = win.clone();
        unwindowed.window = None;
        unwindowed.global_tokens.clear();
        let full = unwindowed
            .forward(AttentionInput::self_attn(input.clone()).causal())
            .unwrap()
            .context;
        assert!(max_abs_diff(&got, &full) > 1e-3);
        let e = MultiHeadAttentionConfig::new(16, 4)
            .with_global_tokens(vec![0])
            .init(&dev)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "global_tokens only mean something with a window"
        );
    }

    /// The same layer without its ALiBi bias.
    fn mha_with_bias_off(mut m: MultiHeadAttention) -> MultiHeadAttention {
        m.alibi = false;
        m
    }

    #[test]
    fn a_mask_of_the_wrong_shape_is_an_error() {
        let m = mha(MultiHeadAttentionConfig::new(16, 4));
        let pad = padding_mask_from_lengths(&[3], 4, &test_device());
        let e = m
            .forward(AttentionInput::self_attn(x(1, 5, 16, 1)).key_padding(pad))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "attention mask: expected shape broadcastable to [1, 4, 5, 5], got [1, 1, 1, 4]"
        );
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
        // Negative control: changing token 6 leaves positions 0..6 within the tolerance
        // and moves positions 6.. by far more.
        let bumped = input
            .clone()
            .slice_assign([0..2, 6..7, 0..16], x(2, 1, 16, 99));
        let other = decode_step_by_step(&m, &bumped, KvCache::new(32));
        let part = |t: &Tensor<3>, r: std::ops::Range<usize>| t.clone().slice([0..2, r, 0..16]);
        assert!(max_abs_diff(&part(&cached, 0..6), &part(&other, 0..6)) < 1e-5);
        assert!(max_abs_diff(&part(&cached, 6..9), &part(&other, 6..9)) > 1e-2);
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
