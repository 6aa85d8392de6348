//! The decoder configuration and its presets.

use burn::config::Config;
use serde::{Deserialize, Serialize};
use zoo_attention::{
    FeedForwardConfig, FfnActivation, GateLayout, MultiHeadAttentionConfig, NormKind,
    NormPlacement, QkNorm, QkvLayout, RopeLayout, RopeScaling, Routing, TransformerBlockConfig,
};

use zoo_core::validate;

use crate::error::Result;
use crate::layer::LayerKind;

/// How the model knows where a token is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum PositionKind {
    /// A learned table added to the token embeddings (GPT-2 `wpe`).
    Learned,
    /// Rotary embeddings inside attention (Llama).
    Rope {
        /// Frequency base.
        theta: f64,
        /// Feature pairing.
        layout: RopeLayout,
    },
}

/// Configuration of a decoder-only language model.
#[derive(Config, Debug)]
pub struct DecoderConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// Number of blocks.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Longest sequence (GPT-2's `n_positions`, Llama's `max_position_embeddings`).
    pub max_len: usize,
    /// Key/value heads (GQA / MQA). Default: `n_heads`.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// Feed-forward width. Default: 4 × d_model, as GPT-2.
    #[config(default = "None")]
    pub d_ff: Option<usize>,
    /// Positions. Default: learned, as GPT-2.
    #[config(default = "PositionKind::Learned")]
    pub positions: PositionKind,
    /// Norm. Default: LayerNorm.
    #[config(default = "NormKind::LayerNorm")]
    pub norm: NormKind,
    /// Norm epsilon. Default: 1e-5 (GPT-2's `layer_norm_epsilon`).
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    /// MLP non-linearity. Default: GELU-tanh (GPT-2's `gelu_new`).
    #[config(default = "FfnActivation::GeluTanh")]
    pub activation: FfnActivation,
    /// Where a gated MLP keeps its gate and up projections (Phi-3 fuses them). Default:
    /// separate.
    #[config(default = "GateLayout::Separate")]
    pub gate_layout: GateLayout,
    /// Biases in attention and MLP. Default: true.
    #[config(default = true)]
    pub bias: bool,
    /// Biases on the Q, K and V projections alone (Qwen2 has them and no other).
    /// Default: `bias`.
    #[config(default = "None")]
    pub qkv_bias: Option<bool>,
    /// A bias on the attention's output projection. Default: `bias`.
    #[config(default = "None")]
    pub out_bias: Option<bool>,
    /// Biases in the MLP. Default: `bias`.
    #[config(default = "None")]
    pub mlp_bias: Option<bool>,
    /// Width of one head. Default: `d_model / n_heads`.
    #[config(default = "None")]
    pub head_dim: Option<usize>,
    /// Factor on the attention scores. Default: `1 / sqrt(head_dim)`.
    #[config(default = "None")]
    pub attn_scale: Option<f64>,
    /// One fused QKV projection (GPT-2). Default: true.
    #[config(default = true)]
    pub fused_qkv: bool,
    /// LM head shares the token embedding. Default: true.
    #[config(default = true)]
    pub tie_embeddings: bool,
    /// Dropout on embeddings, residuals and attention weights while training. Default: 0.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Initial weight std, N(0, std). Default: 0.02, as GPT-2.
    #[config(default = 0.02)]
    pub init_std: f64,
    /// Each position attends only to the last `sliding_window` positions (itself
    /// included), as Mistral; generation then keeps a rolling cache of that many
    /// positions per layer. Default: none.
    #[config(default = "None")]
    pub sliding_window: Option<usize>,
    /// Features of each head that RoPE rotates (partial rotary, GPT-NeoX's
    /// `rotary_pct`). Default: the whole head.
    #[config(default = "None")]
    pub rope_dim: Option<usize>,
    /// Stretching of RoPE's frequencies (Llama 3.1's `llama3`, `linear`). Default: none.
    #[config(default = "RopeScaling::None")]
    pub rope_scaling: RopeScaling,
    /// The order of a fused QKV projection's outputs. Default: blocked (GPT-2, Phi-3).
    #[config(default = "QkvLayout::Blocked")]
    pub qkv_layout: QkvLayout,
    /// The layer stacked: sequential (attention, then the MLP) or parallel (GPT-NeoX).
    /// Default: sequential.
    #[config(default = "LayerKind::Sequential")]
    pub layer: LayerKind,
    /// Each head's queries and keys normed (the model's `norm` and `norm_eps`) before
    /// RoPE, as Qwen3 and Gemma 3. Default: false.
    #[config(default = false)]
    pub qk_norm: bool,
    /// Token embeddings multiplied by `sqrt(d_model)` (Gemma). Default: false.
    #[config(default = false)]
    pub scale_embeddings: bool,
    /// Which layers use `sliding_window`, one flag per layer (Gemma 2 and 3 alternate
    /// local and global layers, HF's `layer_types`). Empty: every layer, as Mistral.
    /// Default: empty.
    #[config(default = "Vec::new()")]
    pub sliding_layers: Vec<bool>,
    /// The RoPE base of the sliding layers, which then take no RoPE scaling (Gemma 3's
    /// local base, 10000 under a global 1000000). Default: the model's.
    #[config(default = "None")]
    pub local_rope_theta: Option<f64>,
    /// A soft cap on the attention scores, `cap · tanh(s / cap)` (Gemma 2's
    /// `attn_logit_softcapping`). Default: none.
    #[config(default = "None")]
    pub attn_softcap: Option<f64>,
    /// A soft cap on the logits (Gemma 2's `final_logit_softcapping`). Default: none.
    #[config(default = "None")]
    pub final_softcap: Option<f64>,
    /// One MLP per layer, or a sparse mixture of experts (Mixtral's eight, two per
    /// token). Default: one.
    #[config(default = "Routing::Dense")]
    pub experts: Routing,
}

impl DecoderConfig {
    /// GPT-2 small (124M parameters): 12 layers, 12 heads, width 768, 1024 positions,
    /// vocabulary 50257 (Radford et al., 2019; HF `gpt2`).
    pub fn gpt2_small() -> Self {
        Self::new(50257, 768, 12, 12, 1024)
    }

    /// The seeds' character model: width 64, 4 heads, 4 layers, block 16, GPT style with
    /// dropout 0.1.
    pub fn char_gpt(vocab_size: usize) -> Self {
        Self::new(vocab_size, 64, 4, 4, 16)
            .with_activation(FfnActivation::Gelu)
            .with_dropout(0.1)
    }

    /// A tiny Llama: RoPE (theta 10000, half-split), RMSNorm (eps 1e-6), SwiGLU of width
    /// 172, 4 heads over 2 KV heads, no biases, untied head.
    pub fn tiny_llama(vocab_size: usize, max_len: usize) -> Self {
        Self::new(vocab_size, 64, 2, 4, max_len)
            .llama_style()
            .with_d_ff(Some(172))
    }

    /// Switches to the Llama family's blocks, keeping the sizes: RoPE, RMSNorm, SwiGLU
    /// (width `8/3 · d_model` unless set), GQA with half the heads (when even), no
    /// biases, separate projections, untied head.
    pub fn llama_style(self) -> Self {
        let kv = if self.n_heads.is_multiple_of(2) {
            self.n_heads / 2
        } else {
            self.n_heads
        };
        let d_ff = self.d_ff.unwrap_or(self.d_model.saturating_mul(8) / 3);
        // Every expert's weights are held: as one MLP that many times wider.
        let d_ff = match self.experts {
            Routing::Dense => d_ff,
            Routing::TopK { n_experts, .. } => d_ff.saturating_mul(n_experts),
        };
        self.with_positions(PositionKind::Rope {
            theta: 10000.0,
            layout: RopeLayout::HalfSplit,
        })
        .with_norm(NormKind::RmsNorm)
        .with_norm_eps(1e-6)
        .with_activation(FfnActivation::SwiGlu)
        .with_d_ff(Some(d_ff))
        .with_n_kv_heads(Some(kv))
        .with_bias(false)
        .with_fused_qkv(false)
        .with_tie_embeddings(false)
    }

    /// The block configuration every layer uses.
    pub fn block(&self) -> TransformerBlockConfig {
        let init = burn::nn::Initializer::Normal {
            mean: 0.0,
            std: self.init_std,
        };
        let mut attn = MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
            .with_n_kv_heads(self.n_kv_heads)
            .with_head_dim(self.head_dim)
            .with_scale(self.attn_scale)
            .with_fused_qkv(self.fused_qkv)
            .with_qkv_bias(self.qkv_bias.unwrap_or(self.bias))
            .with_out_bias(self.out_bias.unwrap_or(self.bias))
            .with_dropout(self.dropout)
            .with_window(self.sliding_window)
            .with_softcap(self.attn_softcap)
            .with_initializer(init.clone());
        if let PositionKind::Rope { theta, layout } = self.positions {
            attn = attn
                .with_rope_max_len(Some(self.max_len))
                .with_rope_theta(theta)
                .with_rope_layout(layout)
                .with_rope_dim(self.rope_dim)
                .with_rope_scaling(self.rope_scaling.clone());
        }
        attn = attn.with_qkv_layout(self.qkv_layout);
        if self.qk_norm {
            attn = attn.with_qk_norm(QkNorm::PerHead {
                kind: self.norm,
                eps: self.norm_eps,
            });
        }
        let ffn = FeedForwardConfig::new(
            self.d_model,
            self.d_ff.unwrap_or(self.d_model.saturating_mul(4)),
        )
        .with_activation(self.activation)
        .with_gate_layout(self.gate_layout)
        .with_bias(self.mlp_bias.unwrap_or(self.bias))
        .with_routing(self.experts)
        .with_initializer(init);
        TransformerBlockConfig::new(attn, ffn)
            .with_norm(self.norm)
            .with_norm_eps(self.norm_eps)
            .with_placement(NormPlacement::Pre)
            .with_dropout(self.dropout)
    }

    /// Whether layer `layer` attends through the sliding window.
    pub fn slides(&self, layer: usize) -> bool {
        self.sliding_window.is_some() && self.sliding_layers.get(layer).copied().unwrap_or(true)
    }

    /// The block configuration of layer `layer`: [`Self::block`], without the window on a
    /// global layer, and with the local RoPE base on a sliding one.
    pub fn block_for(&self, layer: usize) -> TransformerBlockConfig {
        let mut block = self.block();
        if !self.slides(layer) {
            block.attention.window = None;
        } else if let Some(theta) = self.local_rope_theta
            && block.attention.rope_max_len.is_some()
        {
            block.attention.rope_theta = theta;
            block.attention.rope_scaling = RopeScaling::None;
        }
        block
    }

    /// Trainable parameters of one layer.
    fn layer_params(&self) -> usize {
        let block = self.block();
        match self.layer {
            LayerKind::Sandwich => block.sandwich().num_params(),
            LayerKind::Sequential | LayerKind::Parallel => block.num_params(),
        }
    }

    /// Trainable parameters of the model [`Self::init`] builds, counted from the
    /// configuration alone (no weights are allocated, so it works for any size):
    /// token embeddings, the learned position table, the blocks, the final norm and an
    /// untied head.
    pub fn num_params(&self) -> usize {
        let d = self.d_model;
        let positions = match self.positions {
            PositionKind::Learned => self.max_len * d,
            PositionKind::Rope { .. } => 0,
        };
        let head = if self.tie_embeddings {
            0
        } else {
            self.vocab_size * d
        };
        self.vocab_size * d
            + positions
            + self.n_layers * self.layer_params()
            + self.norm.num_params(d)
            + head
    }

    /// Checks the sizes the blocks do not check themselves.
    ///
    /// # Errors
    /// A zero size, with its name.
    pub fn validate(&self) -> Result<()> {
        validate::positive(&[
            ("vocab_size", self.vocab_size),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("max_len", self.max_len),
        ])?;
        validate::probabilities(&[("dropout", self.dropout)])?;
        validate::epsilon("norm_eps", self.norm_eps)?;
        if let PositionKind::Rope { theta, .. } = self.positions {
            validate::positive_number("rope_theta", theta)?;
        }
        if let Some(theta) = self.local_rope_theta {
            validate::positive_number("local_rope_theta", theta)?;
        }
        if let Some(cap) = self.final_softcap {
            validate::positive_number("final_softcap", cap)?;
        }
        if !self.sliding_layers.is_empty() && self.sliding_layers.len() != self.n_layers {
            return Err(zoo_core::ConfigError::conflict(format!(
                "sliding_layers has {} flags for {} layers",
                self.sliding_layers.len(),
                self.n_layers
            ))
            .into());
        }
        // Before any size is derived from the config.
        let d_ff = self.d_ff.unwrap_or(self.d_model.saturating_mul(8) / 3);
        // Every expert's weights are held: as one MLP that many times wider.
        let d_ff = match self.experts {
            Routing::Dense => d_ff,
            Routing::TopK { n_experts, .. } => d_ff.saturating_mul(n_experts),
        };
        let (v, d, l) = (self.vocab_size, self.d_model, self.n_layers);
        let head_dim = self.head_dim.unwrap_or(d / self.n_heads.max(1));
        // The position table is allocated too: learned rows of d_model, or RoPE's cosines
        // and sines of head_dim per position (two tables with LongRoPE's long factors),
        // counted as rows of d_model.
        let table_rows = match self.positions {
            PositionKind::Learned => self.max_len,
            PositionKind::Rope { .. } => {
                let tables = if matches!(self.rope_scaling, RopeScaling::LongRope { .. }) {
                    2
                } else {
                    1
                };
                self.max_len
                    .saturating_mul(head_dim.saturating_mul(tables))
                    .div_ceil(d)
            }
        };
        validate::transformer_fits(
            "the decoder's weights",
            v.saturating_add(table_rows),
            d,
            l,
            d_ff,
            self.n_heads.saturating_mul(head_dim),
        )?;
        self.experts.validate()?;
        self.block().attention.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes past the machine's memory are refused before anything is allocated or
    /// derived from them: a vocabulary of 10^12 names the need, and a width whose
    /// default feed-forward width (4 × or 8/3 × d_model) would overflow `usize` is an
    /// error too, not a wrapped size or a panic.
    #[test]
    fn sizes_past_memory_are_refused_before_allocation() {
        if validate::memory_limit().is_none() {
            return; // no /proc/meminfo: nothing to compare with
        }
        let e = DecoderConfig::new(1_000_000_000_000, 64, 2, 4, 128)
            .validate()
            .unwrap_err();
        // At least 64 × 10^12 table values, at two bytes each.
        let e = e.to_string();
        assert!(
            e.starts_with("invalid decoder config: the decoder's weights, at least 64,000,000,0")
                && e.contains(
                    " parameters, the tables in half precision and the layers in 4 bits, \
                     would need 119209.3 GiB"
                ),
            "{e}"
        );
        for cfg in [
            DecoderConfig::new(300, usize::MAX / 2, 2, 1, 128),
            DecoderConfig::new(300, usize::MAX / 2, 2, 1, 128).llama_style(),
        ] {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains("the decoder's weights, at least "), "{e}");
        }
        assert!(DecoderConfig::new(300, 64, 2, 4, 128).validate().is_ok());
        // A position table past memory, learned or RoPE's, is refused as well (it was
        // once allocated first, and the process was killed).
        for cfg in [
            DecoderConfig::new(300, 64, 2, 4, 1_000_000_000_000),
            DecoderConfig::new(300, 64, 2, 4, 1_000_000_000_000).llama_style(),
        ] {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains("the decoder's weights, at least "), "{e}");
        }
    }

    /// A norm epsilon or a RoPE base of zero, below, or not a finite number is refused
    /// by name (a zero epsilon divides by zero in a norm of zeros; a zero base gives NaN
    /// angles).
    #[test]
    fn norm_eps_and_rope_theta_must_be_positive_numbers() {
        for eps in [0.0, -1e-5, f64::NAN, f64::INFINITY] {
            let e = DecoderConfig::new(300, 64, 2, 4, 128)
                .with_norm_eps(eps)
                .validate()
                .unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid decoder config: norm_eps must be > 0, got {eps}")
            );
        }
        for theta in [0.0, -10000.0, f64::NAN] {
            let cfg = DecoderConfig::tiny_llama(300, 64).with_positions(PositionKind::Rope {
                theta,
                layout: RopeLayout::HalfSplit,
            });
            let e = cfg.validate().unwrap_err().to_string();
            assert_eq!(
                e,
                format!("invalid decoder config: rope_theta must be > 0, got {theta}")
            );
        }
        assert!(DecoderConfig::tiny_llama(300, 64).validate().is_ok());
    }
}
