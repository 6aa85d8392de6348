//! Self-attention: queries, keys and values from one sequence, through separate Q, K, V
//! projections or one fused QKV matrix, with RoPE, ALiBi or T5 biases, a sliding window
//! with global tokens, and the KV cache for decoding.

use burn::module::Module;
use burn::nn::Linear;
use std::ops::Range;

use burn::tensor::{Device, Tensor};

use super::heads::{Heads, rotate_qk};
use super::{AttentionInput, AttentionKernel, AttentionOutput, QkvLayout};
use crate::block::{Norm, linear_rows};
use crate::cache::KvCache;
use crate::error::{AttentionError, Result, check_shape};
use crate::mask::Mask;
use crate::position::{RelativePositionBias, RotaryEncoding, alibi_bias_at};
use crate::sdpa::{attention_linear, repeat_kv};

/// The positional rules of a self-attention layer that hold no parameters: rotary
/// tables, ALiBi, and a sliding window with its global tokens.
#[derive(Module, Debug)]
pub struct SelfPositions {
    /// Rotary tables, when RoPE is on.
    pub rope: Option<RotaryEncoding>,
    pub(crate) window: Option<usize>,
    #[module(skip)]
    pub(crate) global_tokens: Vec<usize>,
    pub(crate) alibi: bool,
}

/// The norms of [`super::QkNorm::PerHead`], over one head's features and shared by the
/// heads.
#[derive(Module, Debug)]
pub struct QkNorms {
    /// On the queries, `[head_dim]`.
    pub q_norm: Norm,
    /// On the keys, `[head_dim]`.
    pub k_norm: Norm,
}

/// Self-attention with separate query, key and value projections (HF Llama's
/// `q_proj`, `k_proj`, `v_proj`, BERT's `query`, `key`, `value`).
#[derive(Module, Debug)]
pub struct SeparateQkv {
    /// Query projection `[d_model, H Dh]`.
    pub q_proj: Linear,
    /// Key projection `[d_model, Hkv Dh]`.
    pub k_proj: Linear,
    /// Value projection `[d_model, Hkv Dh]`.
    pub v_proj: Linear,
    /// Output projection `[H Dh, d_model]`.
    pub o_proj: Linear,
    /// QK-norm, when configured.
    pub qk_norm: Option<QkNorms>,
    /// T5's relative bias table, when configured.
    pub relative_bias: Option<RelativePositionBias>,
    /// Head layout, kernel and attention dropout.
    pub heads: Heads,
    /// RoPE, ALiBi, window.
    pub positions: SelfPositions,
}

/// Self-attention with one fused projection, Q, K and V side by side (GPT-2's `c_attn`,
/// Phi-3's `qkv_proj`).
#[derive(Module, Debug)]
pub struct FusedQkv {
    /// Fused Q, K, V projection `[d_model, (H + 2 Hkv) Dh]`.
    pub qkv_proj: Linear,
    /// The order of its outputs.
    #[module(skip)]
    pub layout: QkvLayout,
    /// Output projection `[H Dh, d_model]`.
    pub o_proj: Linear,
    /// QK-norm, when configured.
    pub qk_norm: Option<QkNorms>,
    /// T5's relative bias table, when configured.
    pub relative_bias: Option<RelativePositionBias>,
    /// Head layout, kernel and attention dropout.
    pub heads: Heads,
    /// RoPE, ALiBi, window.
    pub positions: SelfPositions,
}

/// Multi-head self-attention (Vaswani et al., 2017, section 3.2.2), with grouped KV
/// heads (Ainslie et al., 2023) and rotary positions. Built by
/// [`super::MultiHeadAttentionConfig::init`].
///
/// The variant names do not appear in module paths: a layer's parameters are
/// `q_proj`, `k_proj`, `v_proj`, `o_proj` or `qkv_proj`, `o_proj`.
// A layer is built once and lives in its model; the few hundred bytes the separate
// variant holds beyond the fused one are not worth a box on every access.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum SelfAttention {
    /// Separate Q, K, V projections.
    Separate(SeparateQkv),
    /// One fused QKV projection.
    Fused(FusedQkv),
}

struct Parts<'a> {
    o_proj: &'a Linear,
    qk_norm: Option<&'a QkNorms>,
    relative_bias: Option<&'a RelativePositionBias>,
    heads: &'a Heads,
    positions: &'a SelfPositions,
}

impl SelfAttention {
    fn parts(&self) -> Parts<'_> {
        match self {
            Self::Separate(s) => Parts {
                o_proj: &s.o_proj,
                qk_norm: s.qk_norm.as_ref(),
                relative_bias: s.relative_bias.as_ref(),
                heads: &s.heads,
                positions: &s.positions,
            },
            Self::Fused(f) => Parts {
                o_proj: &f.o_proj,
                qk_norm: f.qk_norm.as_ref(),
                relative_bias: f.relative_bias.as_ref(),
                heads: &f.heads,
                positions: &f.positions,
            },
        }
    }

    /// Number of query heads.
    pub fn n_heads(&self) -> usize {
        self.parts().heads.n_heads
    }

    /// Number of key/value heads.
    pub fn n_kv_heads(&self) -> usize {
        self.parts().heads.n_kv_heads
    }

    /// Size of one head.
    pub fn head_dim(&self) -> usize {
        self.parts().heads.head_dim
    }

    /// The output projection `[H Dh, d_model]`.
    pub fn o_proj(&self) -> &Linear {
        self.parts().o_proj
    }

    /// T5's relative bias table, if the layer has one.
    pub fn relative_bias(&self) -> Option<&RelativePositionBias> {
        self.parts().relative_bias
    }

    /// The same layer computing attention with another kernel.
    pub fn with_kernel(mut self, kernel: AttentionKernel) -> Self {
        match &mut self {
            Self::Separate(s) => s.heads.kernel = kernel,
            Self::Fused(f) => f.heads.kernel = kernel,
        }
        self
    }

    fn d_model(&self) -> usize {
        self.o_proj().weight.dims()[1]
    }

    /// Projects queries, keys and values from `x`, each split into heads, with the
    /// queries and keys normed when the layer has QK-norm.
    pub(crate) fn project(&self, x: Tensor<3>) -> [Tensor<4>; 3] {
        let [q, k, v] = self.project_heads(x);
        match self.parts().qk_norm {
            Some(n) => [n.q_norm.forward(q), n.k_norm.forward(k), v],
            None => [q, k, v],
        }
    }

    fn project_heads(&self, x: Tensor<3>) -> [Tensor<4>; 3] {
        match self {
            Self::Separate(s) => [
                s.heads.queries(&s.q_proj, x.clone()),
                s.heads.kv(&s.k_proj, x.clone()),
                s.heads.kv(&s.v_proj, x),
            ],
            Self::Fused(f) => {
                let (h, kv, hd) = (f.heads.n_heads, f.heads.n_kv_heads, f.heads.head_dim);
                let [b, t, _] = x.dims();
                let all = linear_rows(&f.qkv_proj, x); // [B, T, (H + 2 Hkv) Dh]
                if f.layout == QkvLayout::PerHead {
                    // [B, T, H, 3 Dh] -> each of q, k, v as [B, H, T, Dh]
                    let per_head = all.reshape([b, t, h, 3 * hd]);
                    let part = |i: usize| {
                        per_head
                            .clone()
                            .slice([0..b, 0..t, 0..h, i * hd..(i + 1) * hd])
                            .swap_dims(1, 2)
                    };
                    return [part(0), part(1), part(2)];
                }
                let q = all.clone().slice([0..b, 0..t, 0..h * hd]);
                let k = all.clone().slice([0..b, 0..t, h * hd..(h + kv) * hd]);
                let v = all.slice([0..b, 0..t, (h + kv) * hd..(h + 2 * kv) * hd]);
                [
                    f.heads.split(q, h),
                    f.heads.split(k, kv),
                    f.heads.split(v, kv),
                ]
            }
        }
    }

    /// The output of heads `[B, H, T, Dh]`, merged and projected.
    pub(crate) fn finish(&self, out: Tensor<4>, weights: Option<Tensor<4>>) -> AttentionOutput {
        let p = self.parts();
        AttentionOutput {
            context: p.heads.merge(p.o_proj, out),
            weights,
        }
    }

    fn check_input(&self, input: &AttentionInput) -> Result<()> {
        let [b, t, _] = input.x.dims();
        check_shape(
            "attention input",
            &input.x.dims(),
            &[None, None, Some(self.d_model())],
        )?;
        if let Some(p) = &input.positions {
            check_shape("rope positions", &p.dims(), &[Some(b), Some(t)])?;
        }
        if self.parts().heads.kernel_is_linear()
            && let Some(pad) = &input.key_padding
        {
            // The linear kernel has no cache: key padding spans this call's keys.
            check_shape("key padding", &pad.dims(), &[Some(b), Some(t)])?;
        }
        Ok(())
    }

    /// The relative-position bias for queries at absolute positions `queries` and keys
    /// at `keys`, `[1, H, Tq, Tk]`, if the layer has one. T5 computes it in its
    /// first layer and passes it to the others through [`Mask::with_bias`].
    pub fn position_bias(
        &self,
        queries: Range<usize>,
        keys: Range<usize>,
        device: &Device,
    ) -> Option<Tensor<4>> {
        let p = self.parts();
        if let Some(rel) = p.relative_bias {
            return Some(rel.forward_offsets(queries, keys, device));
        }
        p.positions
            .alibi
            .then(|| alibi_bias_at(p.heads.n_heads, queries, keys, device))
    }

    /// The linear kernel: causal or not, with key padding, nothing else.
    fn forward_linear(&self, input: AttentionInput, chunk: usize) -> Result<AttentionOutput> {
        let causal = input.linear_kernel_causal()?;
        let p = self.parts();
        let [q, k, v] = self.project(input.x);
        let (q, k) = match &p.positions.rope {
            Some(rope) => rotate_qk(rope, q, k, input.positions.as_ref(), input.position)?,
            None => (q, k),
        };
        let n_rep = p.heads.n_heads / p.heads.n_kv_heads;
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
    /// - input `x`: `[B, T, d_model]`
    /// - output `context`: `[B, T, d_model]`; `weights`: `[B, H, T, T]`
    ///
    /// # Errors
    /// A wrong input width, a mask that does not fit, or positions past the RoPE table.
    pub fn forward(&self, input: AttentionInput) -> Result<AttentionOutput> {
        self.check_input(&input)?;
        let p = self.parts();
        if let AttentionKernel::Linear { chunk } = p.heads.kernel {
            return self.forward_linear(input, chunk);
        }
        let t = input.x.dims()[1];
        let device = input.x.device();
        let [q, k, v] = self.project(input.x);
        let (q, k) = match &p.positions.rope {
            Some(rope) => rotate_qk(rope, q, k, input.positions.as_ref(), input.position)?,
            None => (q, k),
        };
        let mut mask = input.mask;
        if let Some(pad) = input.key_padding {
            mask = mask.with_key_padding(pad);
        }
        if let Some(w) = p.positions.window {
            mask = mask.with_window(w, &p.positions.global_tokens);
        }
        let p0 = input.position;
        if let Some(bias) = self.position_bias(p0..p0 + t, p0..p0 + t, &device) {
            mask = mask.with_bias(bias);
        }
        let (out, weights) = p.heads.attend(q, k, v, &mask, input.need_weights)?;
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
    /// A full cache, a linear kernel, or a wrong input width.
    pub fn forward_cached(
        &self,
        input: AttentionInput,
        cache: &mut KvCache,
    ) -> Result<AttentionOutput> {
        self.check_input(&input)?;
        let p = self.parts();
        if p.heads.kernel_is_linear() {
            return Err(AttentionError::Unsupported(
                "the linear kernel has no KV cache".into(),
            ));
        }
        let [b, t, _] = input.x.dims();
        let kv_dims = [b, p.heads.n_kv_heads, t, p.heads.head_dim];
        cache.check_append(kv_dims, kv_dims)?;
        if let Some(pad) = &input.key_padding {
            check_shape(
                "key padding",
                &pad.dims(),
                &[Some(b), Some(cache.len() + t)],
            )?;
        }
        if let (Some(rope), None) = (&p.positions.rope, &input.positions)
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
        let [q, k, v] = self.project(input.x);
        let (q, k) = match &p.positions.rope {
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
        if let Some(w) = p.positions.window.or(cache.window()) {
            mask = mask.with_window(w, &p.positions.global_tokens);
        }
        if let Some(bias) = self.position_bias(offset..offset + t, first..first + tk, &device) {
            mask = mask.with_bias(bias);
        }
        let (out, weights) = p.heads.attend(q, k, v, &mask, input.need_weights)?;
        Ok(self.finish(out, weights))
    }
}
