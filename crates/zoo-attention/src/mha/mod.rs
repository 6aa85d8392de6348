//! Multi-head attention, MHA / GQA / MQA: [`SelfAttention`] (separate or fused QKV,
//! RoPE, ALiBi or T5 position biases, sliding windows with global tokens, the KV cache)
//! and [`CrossAttention`] (an encoder's output as keys and values, projected once per
//! source), both with a free head size and score scale (T5) and optional per-head
//! weights. One configuration describes both; [`MultiHeadAttentionConfig::init`] builds
//! the first, [`MultiHeadAttentionConfig::init_cross`] the second, and each refuses the
//! settings the other alone can use, so that neither exists in a state it cannot run.

mod cross;
mod heads;
mod self_attn;
#[cfg(test)]
mod tests;

pub use cross::CrossAttention;
pub use heads::Heads;
pub use self_attn::{FusedQkv, QkNorms, SelfAttention, SelfPositions, SeparateQkv};

use burn::config::Config;
use burn::nn::{DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Tensor};
use serde::{Deserialize, Serialize};
use zoo_core::ConfigError;

use crate::block::{Norm, NormKind};
use crate::error::{AttentionError, Result};
use crate::mask::Mask;
use crate::position::{
    Positions, RelativePositionBiasConfig, RopeLayout, RopeScaling, RotaryEncodingConfig,
};

/// Which kernel computes attention when no weights are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttentionKernel {
    /// The fused path ([`crate::sdpa::attention_fused`]): zoo-kernels' attention on flex
    /// in f32, with its own backward and the dropout on the weights inside it (`O(T)`
    /// memory in training); Burn's fused op elsewhere (flash kernels where the backend
    /// has them), with a dropout on the weights through the reference path.
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

/// The order of a fused QKV projection's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum QkvLayout {
    /// `[Q heads | K heads | V heads]` (GPT-2's `c_attn`, Phi-3's `qkv_proj`).
    #[default]
    Blocked,
    /// `[q, k, v]` of head 0, then of head 1, ... (GPT-NeoX's and BLOOM's
    /// `query_key_value`). Needs as many KV heads as query heads.
    PerHead,
}

/// A norm over each head's queries and keys after their projection and before RoPE
/// (QK-norm: Qwen3, Gemma 3, OLMo 2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum QkNorm {
    /// No norm (most models).
    None,
    /// One norm of `kind` for the queries and one for the keys, each over a head's
    /// `head_dim` features and shared by the heads.
    PerHead {
        /// RMSNorm (Qwen3) or Gemma's offset RMSNorm (Gemma 3).
        kind: NormKind,
        /// Its epsilon.
        eps: f64,
    },
}

/// Configuration of a [`SelfAttention`] or a [`CrossAttention`] layer.
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
    /// A soft cap on the scores, `cap · tanh(s / cap)` after the scale and before the
    /// mask (Gemma 2's `attn_logit_softcapping`). Default: none.
    #[config(default = "None")]
    pub softcap: Option<f64>,
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
    /// Features of each head that RoPE rotates: the first `rope_dim`, the rest passed
    /// through (partial rotary: GPT-NeoX's `rotary_pct`, Phi-2's `partial_rotary_factor`).
    /// Even, at most `head_dim`. Default: the whole head.
    #[config(default = "None")]
    pub rope_dim: Option<usize>,
    /// Stretching of RoPE's frequencies for long contexts (Llama 3.1's rule, linear).
    /// Default: none.
    #[config(default = "RopeScaling::None")]
    pub rope_scaling: RopeScaling,
    /// How a fused QKV projection's outputs are ordered. Default: all queries, then all
    /// keys, then all values (GPT-2, Phi-3).
    #[config(default = "QkvLayout::Blocked")]
    pub qkv_layout: QkvLayout,
    /// A norm on each head's queries and keys before RoPE (self-attention). Default:
    /// none.
    #[config(default = "QkNorm::None")]
    pub qk_norm: QkNorm,
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
        let qk_norm = match self.qk_norm {
            QkNorm::None => 0,
            QkNorm::PerHead { kind, .. } => 2 * kind.num_params(hd),
        };
        qkv + linear(self.n_heads * hd, self.d_model, self.out_bias) + bias_table + qk_norm
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
            return Err(ConfigError::zero("d_model").into());
        }
        if self.n_heads == 0 {
            return Err(ConfigError::zero("n_heads").into());
        }
        match self.head_dim {
            Some(0) => return Err(ConfigError::zero("head_dim").into()),
            Some(_) => {}
            None if !self.d_model.is_multiple_of(self.n_heads) => {
                return Err(ConfigError::not_divisible(
                    ("d_model", self.d_model),
                    ("n_heads", self.n_heads),
                )
                .into());
            }
            None => {}
        }
        let kv = self.kv_heads();
        if kv == 0 {
            return Err(ConfigError::zero("n_kv_heads").into());
        }
        if !self.n_heads.is_multiple_of(kv) {
            return Err(
                ConfigError::not_divisible(("n_heads", self.n_heads), ("n_kv_heads", kv)).into(),
            );
        }
        if self.rope_max_len.is_some() {
            self.rope_scaling
                .validate_for(self.rope_dim.unwrap_or(self.head_dim()))?;
        }
        if self.rope_max_len.is_some() && !self.head_dim().is_multiple_of(2) {
            return Err(ConfigError::range(
                "head_dim",
                "even for rotary embeddings",
                self.head_dim(),
            )
            .into());
        }
        if let Some(r) = self.rope_dim
            && (r == 0 || !r.is_multiple_of(2) || r > self.head_dim())
        {
            return Err(ConfigError::range(
                "rope_dim",
                format!("even, > 0 and at most head_dim {}", self.head_dim()),
                r,
            )
            .into());
        }
        if self.rope_dim.is_some() && self.rope_max_len.is_none() {
            return Err(ConfigError::conflict("rope_dim only means something with RoPE").into());
        }
        if self.qkv_layout == QkvLayout::PerHead && (!self.fused_qkv || kv != self.n_heads) {
            return Err(ConfigError::conflict(format!(
                "a per-head QKV layout needs fused_qkv and n_kv_heads = n_heads, got \
                 fused_qkv {} and {kv} KV heads for {} heads",
                self.fused_qkv, self.n_heads
            ))
            .into());
        }
        if let QkNorm::PerHead { eps, .. } = self.qk_norm {
            zoo_core::validate::epsilon("qk_norm eps", eps)?;
        }
        if self.rope_max_len == Some(0) {
            return Err(ConfigError::zero("rope_max_len").into());
        }
        if self.window == Some(0) {
            return Err(ConfigError::zero("window").into());
        }
        if self.window.is_none() && !self.global_tokens.is_empty() {
            return Err(
                ConfigError::conflict("global_tokens only mean something with a window").into(),
            );
        }
        if let Some(scale) = self.scale
            && !(scale.is_finite() && scale > 0.0)
        {
            return Err(ConfigError::range("scale", "finite and > 0", scale.to_string()).into());
        }
        if let Some(cap) = self.softcap
            && !(cap.is_finite() && cap > 0.0)
        {
            return Err(ConfigError::range("softcap", "finite and > 0", cap.to_string()).into());
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(ConfigError::probability("dropout", self.dropout).into());
        }
        if self.fused_qkv && self.d_context.is_some() {
            return Err(ConfigError::conflict(
                "fused_qkv projects one input and cannot take a separate d_context",
            )
            .into());
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
                return Err(ConfigError::zero("kernel block size").into());
            }
            AttentionKernel::Linear { chunk: 0 } => {
                return Err(ConfigError::zero("linear kernel chunk").into());
            }
            AttentionKernel::Linear { .. }
                if self.window.is_some()
                    || self.position_bias != PositionBias::None
                    || self.softcap.is_some() =>
            {
                return Err(ConfigError::conflict(
                    "the linear kernel takes no window, no position bias and no soft cap",
                )
                .into());
            }
            _ => {}
        }
        Ok(())
    }

    fn linear(&self, d_in: usize, d_out: usize, bias: bool, device: &Device) -> Linear {
        LinearConfig::new(d_in, d_out)
            .with_bias(bias)
            .with_initializer(self.initializer.clone())
            .init(device)
    }

    fn heads(&self) -> Heads {
        Heads {
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            n_kv_heads: self.kv_heads(),
            head_dim: self.head_dim(),
            scale: self.scale,
            softcap: self.softcap,
            kernel: self.kernel,
        }
    }

    /// Validates and builds a self-attention layer: fused or separate projections as
    /// `fused_qkv` says.
    ///
    /// # Errors
    /// See [`MultiHeadAttentionConfig::validate`], and a `d_context`, which only
    /// cross-attention reads.
    pub fn init(&self, device: &Device) -> Result<SelfAttention> {
        self.validate()?;
        if let Some(d_context) = self.d_context {
            return Err(ConfigError::conflict(format!(
                "d_context {d_context} is the width of a cross-attention's context; \
                 self-attention reads d_model {} (use init_cross)",
                self.d_model
            ))
            .into());
        }
        let (d, h, kv, hd) = (self.d_model, self.n_heads, self.kv_heads(), self.head_dim());
        let rope = match self.rope_max_len {
            Some(max_len) => Some(
                RotaryEncodingConfig::new(self.rope_dim.unwrap_or(hd), max_len)
                    .with_theta(self.rope_theta)
                    .with_layout(self.rope_layout)
                    .with_scaling(self.rope_scaling.clone())
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
                RelativePositionBiasConfig::new(h)
                    .with_num_buckets(num_buckets)
                    .with_max_distance(max_distance)
                    .with_bidirectional(bidirectional)
                    .init(device)?,
            ),
            _ => None,
        };
        let positions = SelfPositions {
            rope,
            window: self.window,
            global_tokens: self.global_tokens.clone(),
            alibi: self.position_bias == PositionBias::Alibi,
        };
        let o_proj = self.linear(h * hd, d, self.out_bias, device);
        let qk_norm = match self.qk_norm {
            QkNorm::None => None,
            QkNorm::PerHead { kind, eps } => Some(QkNorms {
                q_norm: Norm::new(kind, hd, eps, device),
                k_norm: Norm::new(kind, hd, eps, device),
            }),
        };
        Ok(if self.fused_qkv {
            SelfAttention::Fused(FusedQkv {
                qkv_proj: self.linear(d, (h + 2 * kv) * hd, self.qkv_bias, device),
                layout: self.qkv_layout,
                o_proj,
                qk_norm,
                relative_bias,
                heads: self.heads(),
                positions,
            })
        } else {
            SelfAttention::Separate(SeparateQkv {
                q_proj: self.linear(d, h * hd, self.qkv_bias, device),
                k_proj: self.linear(d, kv * hd, self.qkv_bias, device),
                v_proj: self.linear(d, kv * hd, self.qkv_bias, device),
                o_proj,
                qk_norm,
                relative_bias,
                heads: self.heads(),
                positions,
            })
        })
    }

    /// Validates and builds a cross-attention layer, whose keys and values come from a
    /// context `d_context` wide (default `d_model`).
    ///
    /// # Errors
    /// See [`MultiHeadAttentionConfig::validate`], and any setting only self-attention
    /// uses: `fused_qkv`, RoPE, a position bias, a window.
    pub fn init_cross(&self, device: &Device) -> Result<CrossAttention> {
        self.validate()?;
        let self_only = [
            ("fused_qkv", self.fused_qkv),
            ("rope_max_len", self.rope_max_len.is_some()),
            ("rope_dim", self.rope_dim.is_some()),
            ("rope_scaling", self.rope_scaling != RopeScaling::None),
            ("qkv_layout", self.qkv_layout != QkvLayout::Blocked),
            ("position_bias", self.position_bias != PositionBias::None),
            ("qk_norm", self.qk_norm != QkNorm::None),
            ("window", self.window.is_some()),
        ];
        if let Some((name, _)) = self_only.iter().find(|(_, set)| *set) {
            return Err(ConfigError::conflict(format!(
                "{name} is a self-attention setting; cross-attention cannot use it"
            ))
            .into());
        }
        let (d, h, kv, hd) = (self.d_model, self.n_heads, self.kv_heads(), self.head_dim());
        let d_ctx = self.d_context.unwrap_or(d);
        Ok(CrossAttention {
            q_proj: self.linear(d, h * hd, self.qkv_bias, device),
            k_proj: self.linear(d_ctx, kv * hd, self.qkv_bias, device),
            v_proj: self.linear(d_ctx, kv * hd, self.qkv_bias, device),
            o_proj: self.linear(h * hd, d, self.out_bias, device),
            heads: self.heads(),
        })
    }
}

/// The input of one attention call.
#[derive(Debug, Clone)]
pub struct AttentionInput {
    pub(crate) x: Tensor<3>,
    mask: Mask,
    key_padding: Option<Tensor<2, Bool>>,
    pub(crate) need_weights: bool,
    position: usize,
    positions: Option<Positions>,
}

impl AttentionInput {
    /// Attention from `x`, `[B, T, d_model]`: the queries, and in self-attention the
    /// keys and values too.
    pub fn new(x: Tensor<3>) -> Self {
        Self {
            x,
            mask: Mask::none(),
            key_padding: None,
            need_weights: false,
            position: 0,
            positions: None,
        }
    }

    /// The input, `[B, T, d_model]`.
    pub fn hidden(&self) -> &Tensor<3> {
        &self.x
    }

    /// Whether the caller asked for the attention weights.
    pub fn needs_weights(&self) -> bool {
        self.need_weights
    }

    /// The same settings (mask, padding, positions, weights) over another input `x`: what
    /// a block hands its attention after the norm.
    pub fn over(&self, x: Tensor<3>) -> Self {
        Self {
            x,
            mask: self.mask.clone(),
            key_padding: self.key_padding.clone(),
            need_weights: self.need_weights,
            position: self.position,
            positions: self.positions.clone(),
        }
    }

    /// Whether the linear kernel, which takes a causal flag and key padding and nothing
    /// else, runs this input causally.
    ///
    /// # Errors
    /// Weights asked for, or any other mask.
    pub(crate) fn linear_kernel_causal(&self) -> Result<bool> {
        if self.need_weights {
            return Err(AttentionError::Unsupported(
                "linear attention has no attention weights to return".into(),
            ));
        }
        let mask = &self.mask;
        if mask.masked.is_some() || mask.bias.is_some() || mask.rule.window.is_some() {
            return Err(AttentionError::Unsupported(
                "the linear kernel takes only a causal flag and key padding".into(),
            ));
        }
        Ok(mask.is_causal())
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
