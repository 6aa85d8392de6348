//! What every attention layer holds besides its projections: the head layout, the
//! score scale, the kernel and the dropout on the weights. None of it is a parameter,
//! so it adds nothing to the module paths of a checkpoint.

use burn::module::Module;
use burn::nn::{Dropout, Linear};
use burn::tensor::Tensor;

use super::AttentionKernel;
use crate::block::linear_rows;
use crate::error::Result;
use crate::mask::Mask;
use crate::position::{Positions, RotaryEncoding};
use crate::sdpa::{ScoreScale, attention_chunked, attention_fused, attention_reference, repeat_kv};

/// The head layout of an attention layer and how it turns projected heads into an
/// output: `softmax(cap(Q Kᵀ · scale) + mask) V` by the configured kernel (the soft cap
/// only when one is set), with grouped KV heads repeated to the query heads.
#[derive(Module, Debug)]
pub struct Heads {
    /// Dropout on the attention weights.
    pub dropout: Dropout,
    pub(crate) n_heads: usize,
    pub(crate) n_kv_heads: usize,
    pub(crate) head_dim: usize,
    #[module(skip)]
    pub(crate) scale: Option<f64>,
    #[module(skip)]
    pub(crate) softcap: Option<f64>,
    #[module(skip)]
    pub(crate) kernel: AttentionKernel,
}

impl Heads {
    /// `[B, T, n Dh]` -> `[B, n, T, Dh]`
    pub(crate) fn split(&self, x: Tensor<3>, n: usize) -> Tensor<4> {
        let [b, t, _] = x.dims();
        x.reshape([b, t, n, self.head_dim]).swap_dims(1, 2)
    }

    /// Keys or values projected by `layer` from `src`, `[B, Hkv, T, Dh]`.
    pub(crate) fn kv(&self, layer: &Linear, src: Tensor<3>) -> Tensor<4> {
        self.split(linear_rows(layer, src), self.n_kv_heads)
    }

    /// Queries projected by `layer` from `x`, `[B, H, T, Dh]`.
    pub(crate) fn queries(&self, layer: &Linear, x: Tensor<3>) -> Tensor<4> {
        self.split(linear_rows(layer, x), self.n_heads)
    }

    pub(crate) fn kernel_is_linear(&self) -> bool {
        matches!(self.kernel, AttentionKernel::Linear { .. })
    }

    /// Attention of `q` `[B, H, Tq, Dh]` over `k`, `v` `[B, Hkv, Tk, Dh]`, and the
    /// weights `[B, H, Tq, Tk]` when asked for (the reference path).
    pub(crate) fn attend(
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
        let scale = ScoreScale::from(self.scale).with_softcap(self.softcap);
        let dropout_on = self.dropout.prob > 0.0
            && self.dropout.training.is_enabled()
            && q.device().is_autodiff();
        // Dropout inside zoo-kernels' attention, where it applies (flex, f32): the
        // weights are never held, in training either.
        if dropout_on
            && !need_weights
            && self.kernel == AttentionKernel::Fused
            && crate::sdpa::kernel_applies(&q, &k, &v, mask)
        {
            let out =
                crate::sdpa::attention_fused_dropout(q, k, v, mask, scale, self.dropout.prob)?;
            return Ok((out, None));
        }
        if need_weights || dropout_on || self.kernel == AttentionKernel::Reference {
            let (out, w) = attention_reference(q, k, v, mask, scale, Some(&self.dropout))?;
            return Ok((out, need_weights.then_some(w)));
        }
        Ok(match self.kernel {
            AttentionKernel::Chunked { block_q, block_k } => (
                attention_chunked(q, k, v, mask, scale, block_q, block_k)?,
                None,
            ),
            _ => (attention_fused(q, k, v, mask, scale)?, None),
        })
    }

    /// `[B, H, T, Dh]` -> `[B, T, H Dh]` -> the output projection `o_proj`.
    pub(crate) fn merge(&self, o_proj: &Linear, out: Tensor<4>) -> Tensor<3> {
        let [b, h, t, hd] = out.dims();
        linear_rows(o_proj, out.swap_dims(1, 2).reshape([b, t, h * hd]))
    }
}

/// Rotates queries and keys by their positions: one per row and query when given,
/// else `offset..offset + T`.
pub(crate) fn rotate_qk(
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
