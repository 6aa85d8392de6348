//! The zoo's own kernels, added to Burn's backends through its backend extensions
//! (`#[backend_extension]`, behind Burn's `extension` feature), each with Burn's own
//! composition of ops kept as the reference and as the path on every other backend.
//!
//! - [`attn::attention`]: scaled dot-product attention in tiles with an online softmax,
//!   forward and backward (registered with Burn's autodiff), which never holds the
//!   `Tq × Tk` weights: `O(T)` memory in training, where Burn's autodiff keeps them.
//!
//! - [`quant::linear`]: a linear layer whose weight Burn quantized (`Tensor::quantize`,
//!   8- or 4-bit symmetric values with f32 scales). On flex, Burn 0.22.1 dequantizes
//!   the whole weight before each product, one value at a time through a block lookup;
//!   the kernel here multiplies by the packed values directly for a few rows (decoding a
//!   token reads one byte per weight instead of four), and for more rows dequantizes in a
//!   vectorised pass before flex's matrix product.
//!
//! - [`act::gelu`], [`act::gelu_tanh`] and [`act::silu`]: GELU, exact and tanh, and SiLU,
//!   as one vectorised pass forward and one backward (registered with Burn's autodiff),
//!   where Burn composes scalar `erff` / `expf` calls and up to five element-wise passes.
//!
//! - [`norm::layer_norm`] and [`norm::rms_norm`]: LayerNorm with a backward of its own
//!   (Burn's autodiff decomposes it into eight ops), RMSNorm as one pass each way (Burn
//!   composes six ops, in inference as well).
//!
//! - [`loss::cross_entropy`]: softmax cross-entropy over the vocabulary, with label
//!   smoothing, one pass over the logits forward and one backward, where Burn's loss
//!   makes a pass per op of its `log_softmax`, gather and mean, each way.
//!
//! - [`recompute::checkpointed`]: activation checkpointing by transformer block while the
//!   device runs Burn's balanced gradient-checkpointing strategy: a block keeps only its
//!   input, and its backward runs it again (on every backend).
//!
//! Every kernel can be turned off, for comparison: [`set_enabled`], or `ZOO_KERNELS=off`
//! in the environment.
#![warn(missing_docs)]

pub mod act;
pub mod attn;
pub mod loss;
// The loops serve the flex kernels alone.
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
mod math;
pub mod norm;
pub mod quant;
// The op is registered for ndarray and tch too, which Burn 0.22.1 marks deprecated.
#[allow(deprecated)]
pub mod recompute;
#[cfg(all(test, feature = "flex"))]
mod testing;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not decided yet (read the environment); 1: on; 2: off.
static STATE: AtomicU8 = AtomicU8::new(0);
static FROM_ENV: OnceLock<bool> = OnceLock::new();

/// Whether the zoo's kernels run where they apply: on unless [`set_enabled`] turned them
/// off, or `ZOO_KERNELS` is `off` (or `0`, `false`) in the environment.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => *FROM_ENV.get_or_init(|| {
            !matches!(
                std::env::var("ZOO_KERNELS").as_deref(),
                Ok("off" | "0" | "false")
            )
        }),
    }
}

/// Turns the zoo's kernels on or off for the whole process, over the environment: with
/// them off every op takes Burn's own path.
pub fn set_enabled(on: bool) {
    STATE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// `t` itself when its f32 values lie in order in memory, else a copy that holds them so.
#[cfg(feature = "flex")]
pub(crate) fn flex_contiguous(
    t: burn::backend::flex::FlexTensor,
) -> burn::backend::flex::FlexTensor {
    if t.as_slice::<f32>().is_some() {
        t
    } else {
        t.to_contiguous()
    }
}

/// Whether `t` is a flex tensor, tracked by autodiff or not.
#[cfg(feature = "flex")]
pub(crate) fn on_flex<const D: usize>(t: &burn::tensor::Tensor<D>) -> bool {
    use burn::backend::DispatchTensorKind;
    // The other variants exist as the other backends are compiled in.
    #[allow(unreachable_patterns)]
    match t.clone().into_dispatch().kind {
        DispatchTensorKind::Flex(_) => true,
        DispatchTensorKind::Autodiff(inner) => matches!(*inner, DispatchTensorKind::Flex(_)),
        _ => false,
    }
}

#[cfg(not(feature = "flex"))]
pub(crate) fn on_flex<const D: usize>(_: &burn::tensor::Tensor<D>) -> bool {
    false
}
