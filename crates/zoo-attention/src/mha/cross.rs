//! Cross-attention: queries from the decoder, keys and values from an encoder's output,
//! projected once per source into a [`CrossKvCache`] when decoding step by step.

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::Tensor;

use super::heads::Heads;
use super::{AttentionInput, AttentionKernel, AttentionOutput};
use crate::cache::CrossKvCache;
use crate::error::{Result, check_shape};
use crate::sdpa::{attention_linear, repeat_kv};

/// Multi-head cross-attention from `x` `[B, Tq, d_model]` to a context
/// `[B, Tk, d_context]`. Built by [`super::MultiHeadAttentionConfig::init_cross`]; it has
/// separate projections (a fused one cannot take two inputs) and no positions of its own.
#[derive(Module, Debug)]
pub struct CrossAttention {
    /// Query projection `[d_model, H Dh]`.
    pub q_proj: Linear,
    /// Key projection `[d_context, Hkv Dh]`.
    pub k_proj: Linear,
    /// Value projection `[d_context, Hkv Dh]`.
    pub v_proj: Linear,
    /// Output projection `[H Dh, d_model]`.
    pub o_proj: Linear,
    /// Head layout, kernel and attention dropout.
    pub heads: Heads,
}

impl CrossAttention {
    /// Number of query heads.
    pub fn n_heads(&self) -> usize {
        self.heads.n_heads
    }

    /// Number of key/value heads.
    pub fn n_kv_heads(&self) -> usize {
        self.heads.n_kv_heads
    }

    /// Size of one head.
    pub fn head_dim(&self) -> usize {
        self.heads.head_dim
    }

    fn d_model(&self) -> usize {
        self.o_proj.weight.dims()[1]
    }

    fn d_context(&self) -> usize {
        self.k_proj.weight.dims()[0]
    }

    fn check_queries(&self, x: &Tensor<3>, batch: Option<usize>) -> Result<()> {
        check_shape(
            "attention input",
            &x.dims(),
            &[batch, None, Some(self.d_model())],
        )
    }

    fn finish(&self, out: Tensor<4>, weights: Option<Tensor<4>>) -> AttentionOutput {
        AttentionOutput {
            context: self.heads.merge(&self.o_proj, out),
            weights,
        }
    }

    /// Attention from `input`'s queries to `context`.
    ///
    /// # Shapes
    /// - input `x`: `[B, Tq, d_model]`, `context`: `[B, Tk, d_context]`
    /// - output `context`: `[B, Tq, d_model]`; `weights`: `[B, H, Tq, Tk]`
    ///
    /// # Errors
    /// Wrong widths or batch sizes, or a mask that does not fit `Tk` keys.
    pub fn forward(&self, input: AttentionInput, context: Tensor<3>) -> Result<AttentionOutput> {
        self.check_queries(&input.x, None)?;
        let b = input.x.dims()[0];
        check_shape(
            "attention context",
            &context.dims(),
            &[Some(b), None, Some(self.d_context())],
        )?;
        let cache = self.cross_kv(context)?;
        if let AttentionKernel::Linear { chunk } = self.heads.kernel {
            return self.forward_linear(input, &cache, chunk);
        }
        self.forward_cached(input, &cache)
    }

    /// The linear kernel over the context: a causal flag and key padding, nothing else.
    fn forward_linear(
        &self,
        input: AttentionInput,
        cache: &CrossKvCache,
        chunk: usize,
    ) -> Result<AttentionOutput> {
        let causal = input.linear_kernel_causal()?;
        if let Some(pad) = &input.key_padding {
            check_shape(
                "key padding",
                &pad.dims(),
                &[Some(cache.batch()), Some(cache.len())],
            )?;
        }
        let n_rep = self.heads.n_heads / self.heads.n_kv_heads;
        let q = self.heads.queries(&self.q_proj, input.x);
        let out = attention_linear(
            q,
            repeat_kv(cache.k.clone(), n_rep),
            repeat_kv(cache.v.clone(), n_rep),
            causal,
            input.key_padding,
            chunk,
        )?;
        Ok(self.finish(out, None))
    }

    /// Projects the encoder's output once into the keys and values every decoding step
    /// of cross-attention reads.
    ///
    /// # Shapes
    /// - `context`: `[B, S, d_context]`
    ///
    /// # Errors
    /// A context of the wrong width.
    pub fn cross_kv(&self, context: Tensor<3>) -> Result<CrossKvCache> {
        check_shape(
            "attention context",
            &context.dims(),
            &[None, None, Some(self.d_context())],
        )?;
        Ok(CrossKvCache {
            k: self.heads.kv(&self.k_proj, context.clone()),
            v: self.heads.kv(&self.v_proj, context),
        })
    }

    /// Cross-attention from new decoder positions to keys and values projected once by
    /// [`Self::cross_kv`]; equals [`Self::forward`] with the same context.
    ///
    /// # Shapes
    /// - input `x`: `[B, Tq, d_model]`, the cache `[B, Hkv, S, Dh]` -> `[B, Tq, d_model]`
    ///
    /// # Errors
    /// A batch size or width that does not match, or a mask that does not fit `S` keys.
    pub fn forward_cached(
        &self,
        input: AttentionInput,
        cache: &CrossKvCache,
    ) -> Result<AttentionOutput> {
        self.check_queries(&input.x, Some(cache.batch()))?;
        let b = input.x.dims()[0];
        let mut mask = input.mask;
        if let Some(pad) = input.key_padding {
            check_shape("key padding", &pad.dims(), &[Some(b), Some(cache.len())])?;
            mask = mask.with_key_padding(pad);
        }
        let q = self.heads.queries(&self.q_proj, input.x);
        let (out, weights) = self.heads.attend(
            q,
            cache.k.clone(),
            cache.v.clone(),
            &mask,
            input.need_weights,
        )?;
        Ok(self.finish(out, weights))
    }
}
