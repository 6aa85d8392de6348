//! The shared blocks: the norm choice, the encoder and decoder layer
//! ([`TransformerBlock`]) and the decoder layer of encoder-decoder models
//! ([`CrossAttentionBlock`]), in post-norm (the original paper, BERT) and pre-norm (GPT,
//! ViT, Llama) form.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{
    Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, RmsNorm, RmsNormConfig,
};
use burn::tensor::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use zoo_core::ConfigError;

use crate::cache::{CrossKvCache, KvCache};
use crate::error::Result;
use crate::ffn::{FeedForward, FeedForwardConfig};
use crate::mask::Mask;
use crate::mha::{
    AttentionInput, AttentionOutput, CrossAttention, MultiHeadAttentionConfig, SelfAttention,
};

/// `layer` applied to the last dimension with every leading dimension folded into the
/// rows: one `[N, D_in] x [D_in, D_out]` product, `N` the product of the leading sizes.
///
/// Burn's `Linear` keeps a `[B, T, D_in]` input batched when `T` fills its tiles, and
/// libtorch then runs a batched product and a separate bias pass. For GPT-2 small's
/// `[8, 128, 768] x [768, 2304]` that is 22 ms against 15 ms folded (torch 2.9, 2 threads).
///
/// A weight that Burn quantized takes the zoo's product on flex
/// ([`zoo_kernels::quant::linear`]) rather than a dequantized copy per call, and one
/// packed two 4-bit values to a byte ([`zoo_kernels::quant::PackedQ4`]) its product on
/// the packed values ([`zoo_kernels::quant::linear_q4`]).
///
/// # Shapes
/// - `x`: `[..., D_in]` -> `[..., D_out]`
pub fn linear_rows<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    if D < 2 {
        return layer.forward(x);
    }
    let dims = x.dims();
    let rows = dims[..D - 1].iter().product();
    let x = x.reshape([rows, dims[D - 1]]);
    let bias = layer.bias.as_ref().map(|b| b.val());
    let out = match layer
        .weight
        .reparameterization::<zoo_kernels::quant::PackedQ4>()
    {
        Some(packed) => zoo_kernels::quant::linear_q4(x, packed, bias),
        None => zoo_kernels::quant::linear(x, layer.weight.val(), bias),
    };
    let mut out_dims = dims;
    out_dims[D - 1] = out.dims()[1];
    out.reshape(out_dims)
}

/// `h · weightᵀ` for an output layer tied to an embedding table `weight` `[V, D]`:
/// `[B, T, D]` -> `[B, T, V]`.
///
/// The product runs as one 2-D matmul over `B·T` rows against the table's transposed
/// view. Adding a batch dimension to that view instead (`transpose().unsqueeze()`) makes
/// the CPU backends copy the whole table, element by element, into a new layout at every
/// call: for GPT-2's 50257 × 768 table that copy was most of a decoding step.
pub fn tied_logits(h: Tensor<3>, weight: Tensor<2>) -> Tensor<3> {
    let [b, t, d] = h.dims();
    let v = weight.dims()[0];
    h.reshape([b * t, d])
        .matmul(weight.transpose())
        .reshape([b, t, v])
}

pub(crate) fn check_prob(name: &'static str, value: f64) -> Result<()> {
    if (0.0..1.0).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::probability(name, value).into())
    }
}

/// Which normalisation a block uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NormKind {
    /// LayerNorm with a bias (GPT-2, BERT, ViT).
    LayerNorm,
    /// RMSNorm (Zhang & Sennrich, 2019; Llama, T5).
    RmsNorm,
    /// RMSNorm scaled by `1 + weight`, the weight starting at 0 (Gemma).
    OffsetRmsNorm,
    /// LayerNorm without a bias (ModernBERT's `norm_bias: false`).
    BiasFreeLayerNorm,
    /// No norm: the identity (ModernBERT's first attention, whose input the embeddings'
    /// norm has normed already).
    Identity,
}

/// The identity, where a layer has no norm.
#[derive(Module, Debug, Default)]
pub struct NoNorm;

/// A LayerNorm or an RMSNorm, chosen by [`NormKind`].
#[derive(Module, Debug)]
pub enum Norm {
    /// LayerNorm (`gamma`, `beta`).
    LayerNorm(LayerNorm),
    /// RMSNorm (`gamma`).
    RmsNorm(RmsNorm),
    /// RMSNorm scaled by `1 + weight` (Gemma).
    OffsetRmsNorm(OffsetRmsNorm),
    /// No norm.
    Identity(NoNorm),
}

/// RMSNorm as Gemma computes it: `x / sqrt(mean(x²) + eps) · (1 + weight)`, in f32,
/// with `weight` starting at 0. The stored weight is `weight` itself, under HF's name, so
/// a checkpoint loads and saves unchanged.
#[derive(Module, Debug)]
pub struct OffsetRmsNorm {
    /// The scale less one, `[d_model]`.
    pub weight: Param<Tensor<1>>,
    /// Added to the mean square.
    pub epsilon: f64,
}

impl OffsetRmsNorm {
    /// A norm of width `d_model` whose scale starts at 1.
    pub fn new(d_model: usize, epsilon: f64, device: &Device) -> Self {
        Self {
            weight: burn::nn::Initializer::Zeros.init([d_model], device),
            epsilon,
        }
    }

    /// # Shapes
    /// - `x`: `[..., d_model]` -> same
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let dtype = x.dtype();
        let scale = self.weight.val().cast(DType::F32) + 1.0;
        zoo_kernels::norm::rms_norm(x.cast(DType::F32), scale, self.epsilon).cast(dtype)
    }
}

impl Norm {
    /// Builds a norm of width `d_model`.
    pub fn new(kind: NormKind, d_model: usize, epsilon: f64, device: &Device) -> Self {
        match kind {
            NormKind::LayerNorm => Self::LayerNorm(
                LayerNormConfig::new(d_model)
                    .with_epsilon(epsilon)
                    .init(device),
            ),
            NormKind::RmsNorm => Self::RmsNorm(
                RmsNormConfig::new(d_model)
                    .with_epsilon(epsilon)
                    .init(device),
            ),
            NormKind::OffsetRmsNorm => {
                Self::OffsetRmsNorm(OffsetRmsNorm::new(d_model, epsilon, device))
            }
            NormKind::BiasFreeLayerNorm => Self::LayerNorm(
                LayerNormConfig::new(d_model)
                    .with_epsilon(epsilon)
                    .with_bias(false)
                    .init(device),
            ),
            NormKind::Identity => Self::Identity(NoNorm),
        }
    }

    /// In half precision (f16, bf16) the statistics are accumulated in f32, as
    /// `transformers` does: LayerNorm computes in f32 and narrows its result once (torch's
    /// `layer_norm` accumulates half inputs in f32); RMSNorm (Llama, T5, Qwen) normalises
    /// in f32, narrows, then scales in the model's type; Gemma's norm computes wholly in
    /// f32. A bf16 sum of squares keeps 8 bits, so a row whose mean is large against its
    /// spread would otherwise lose the spread altogether.
    ///
    /// # Shapes
    /// - `x`: `[..., d_model]` -> same
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let dtype = x.dtype();
        let half = matches!(dtype, DType::F16 | DType::BF16);
        match self {
            Self::RmsNorm(n) if half => {
                let x = x.cast(DType::F32);
                let rms = (x.clone().square().mean_dim(D - 1) + n.epsilon).sqrt();
                (x / rms).cast(dtype) * n.gamma.val().unsqueeze()
            }
            Self::LayerNorm(n) => layer_norm(n, x),
            Self::RmsNorm(n) => zoo_kernels::norm::rms_norm(x, n.gamma.val(), n.epsilon),
            Self::OffsetRmsNorm(n) => n.forward(x),
            Self::Identity(_) => x,
        }
    }
}

/// Burn's [`LayerNorm`], with its statistics and affine map computed in f32 when the
/// input is half precision (f16 or bf16), and the result narrowed once, as torch's
/// `layer_norm` does for half inputs. (Burn's own widens f16 only.) In f32 it is
/// [`zoo_kernels::norm::layer_norm`]: one op forward and one backward on flex in
/// training, Burn's op elsewhere. Every LayerNorm of the zoo runs through it.
///
/// # Shapes
/// - `x`: `[..., d_model]` -> same
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    let dtype = x.dtype();
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return match layer_norm_epsilon(norm) {
            Some(epsilon) => zoo_kernels::norm::layer_norm(
                x,
                norm.gamma.val(),
                norm.beta.as_ref().map(|b| b.val()),
                epsilon,
            ),
            None => norm.forward(x),
        };
    }
    let mut wide = norm.clone();
    wide.gamma = wide.gamma.map(|g| g.cast(DType::F32));
    wide.beta = wide.beta.map(|b| b.map(|b| b.cast(DType::F32)));
    wide.forward(x.cast(DType::F32)).cast(dtype)
}

/// The epsilon of Burn's [`LayerNorm`]. Burn 0.22.1 keeps the field private and shows
/// it only among the module's display attributes, written with f64's `Display`, which
/// reads back to the same bits.
fn layer_norm_epsilon(norm: &LayerNorm) -> Option<f64> {
    use burn::module::{Content, DisplaySettings, ModuleDisplay};
    let content = norm.custom_content(Content::new(DisplaySettings::new()))?;
    let attribute = content.attributes.iter().find(|a| a.name == "epsilon")?;
    attribute.value.parse().ok()
}

/// Where the norm sits around each sub-layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NormPlacement {
    /// `x = norm(x + f(x))`: the original paper and BERT.
    Post,
    /// `x = x + f(norm(x))`: GPT-2, ViT, Llama. Stacks add a final norm.
    Pre,
}

/// Configuration of [`TransformerBlock`]: one encoder or decoder layer.
#[derive(Config, Debug)]
pub struct TransformerBlockConfig {
    /// Self-attention (set `window`, RoPE, GQA there).
    pub attention: MultiHeadAttentionConfig,
    /// Feed-forward network.
    pub ffn: FeedForwardConfig,
    /// Norm kind. Default: LayerNorm.
    #[config(default = "NormKind::LayerNorm")]
    pub norm: NormKind,
    /// Norm epsilon. Default: 1e-5 (GPT-2; BERT uses 1e-12, Llama 1e-6).
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    /// Norm placement. Default: pre-norm.
    #[config(default = "NormPlacement::Pre")]
    pub placement: NormPlacement,
    /// Dropout on each sub-layer's output before the residual add. Default: 0.
    #[config(default = 0.0)]
    pub dropout: f64,
}

/// One transformer layer: self-attention and a feed-forward network, each with a
/// residual connection and a norm. Encoder blocks call it with a padding mask, decoder
/// blocks with a causal one.
///
/// Names: `self_attn`, `mlp`, and `norm_1` (before/after self-attention), `norm_2`
/// (around the MLP), mapping to GPT-2's `ln_1`/`ln_2` and Llama's
/// `input_layernorm`/`post_attention_layernorm`.
#[derive(Module, Debug)]
pub struct TransformerBlock {
    /// Self-attention.
    pub self_attn: SelfAttention,
    /// Norm around self-attention.
    pub norm_1: Norm,
    /// Feed-forward network.
    pub mlp: FeedForward,
    /// Norm around the feed-forward network.
    pub norm_2: Norm,
    /// Residual dropout.
    pub dropout: Dropout,
    #[module(skip)]
    placement: NormPlacement,
}

/// Configuration of [`CrossAttentionBlock`]: a decoder layer of an encoder-decoder
/// model.
#[derive(Config, Debug)]
pub struct CrossAttentionBlockConfig {
    /// The self-attention, feed-forward network, norms and dropout.
    pub block: TransformerBlockConfig,
    /// Cross-attention to the encoder's output.
    pub cross_attention: MultiHeadAttentionConfig,
}

/// A decoder layer of an encoder-decoder model: self-attention, cross-attention to the
/// encoder's output, and a feed-forward network, each with a residual connection and a
/// norm. Names as [`TransformerBlock`], with `cross_attn` and `norm_cross` between.
#[derive(Module, Debug)]
pub struct CrossAttentionBlock {
    /// Self-attention.
    pub self_attn: SelfAttention,
    /// Norm around self-attention.
    pub norm_1: Norm,
    /// Cross-attention to the encoder's output.
    pub cross_attn: CrossAttention,
    /// Norm around cross-attention.
    pub norm_cross: Norm,
    /// Feed-forward network.
    pub mlp: FeedForward,
    /// Norm around the feed-forward network.
    pub norm_2: Norm,
    /// Residual dropout.
    pub dropout: Dropout,
    #[module(skip)]
    placement: NormPlacement,
}

/// Configuration of [`ParallelBlock`]: attention and the MLP side by side.
#[derive(Config, Debug)]
pub struct ParallelBlockConfig {
    /// The self-attention, feed-forward network, norm kind and dropout. Its placement
    /// must be pre-norm: both branches read a norm of the block's input.
    pub block: TransformerBlockConfig,
}

/// A layer whose attention and MLP read the same input, each through its own norm, and
/// add to one residual: `x + attn(norm_1(x)) + mlp(norm_2(x))` (GPT-NeoX's
/// `use_parallel_residual`, Wang & Komatsuzaki's GPT-J). Names as [`TransformerBlock`].
#[derive(Module, Debug)]
pub struct ParallelBlock {
    /// Self-attention.
    pub self_attn: SelfAttention,
    /// Norm before self-attention.
    pub norm_1: Norm,
    /// Feed-forward network.
    pub mlp: FeedForward,
    /// Norm before the feed-forward network.
    pub norm_2: Norm,
    /// Residual dropout, on each branch.
    pub dropout: Dropout,
}

/// Configuration of [`SandwichBlock`]: a norm before and after each sub-layer.
#[derive(Config, Debug)]
pub struct SandwichBlockConfig {
    /// The self-attention, feed-forward network, norm kind and dropout. Its placement
    /// must be pre-norm: the sub-layers read a norm of their input.
    pub block: TransformerBlockConfig,
}

/// A layer that norms each sub-layer's input and its output before the residual add:
/// `x + post_attn_norm(attn(norm_1(x)))`, then `x + post_mlp_norm(mlp(norm_2(x)))`
/// (Gemma 2 and 3, four norms per layer). Names as [`TransformerBlock`], with
/// `post_attn_norm` and `post_mlp_norm`.
#[derive(Module, Debug)]
pub struct SandwichBlock {
    /// Self-attention.
    pub self_attn: SelfAttention,
    /// Norm before self-attention.
    pub norm_1: Norm,
    /// Norm of self-attention's output.
    pub post_attn_norm: Norm,
    /// Feed-forward network.
    pub mlp: FeedForward,
    /// Norm before the feed-forward network.
    pub norm_2: Norm,
    /// Norm of the feed-forward network's output.
    pub post_mlp_norm: Norm,
    /// Residual dropout, on each sub-layer's normed output.
    pub dropout: Dropout,
}

impl NormKind {
    /// Trainable parameters of one norm over `d` features: scale and shift for
    /// LayerNorm, the scale alone for RMSNorm.
    pub fn num_params(self, d: usize) -> usize {
        match self {
            Self::LayerNorm => 2 * d,
            Self::RmsNorm | Self::OffsetRmsNorm | Self::BiasFreeLayerNorm => d,
            Self::Identity => 0,
        }
    }
}

impl TransformerBlockConfig {
    /// Trainable parameters of the block [`Self::init`] builds: attention, the
    /// feed-forward network and a norm before (or after) each.
    pub fn num_params(&self) -> usize {
        let d = self.attention.d_model;
        self.attention.num_params() + self.ffn.num_params() + 2 * self.norm.num_params(d)
    }

    /// The same layer with cross-attention to an encoder's output.
    pub fn with_cross(
        self,
        cross_attention: MultiHeadAttentionConfig,
    ) -> CrossAttentionBlockConfig {
        CrossAttentionBlockConfig::new(self, cross_attention)
    }

    /// A norm of the block's kind, width and epsilon (what each of its sub-layers has).
    pub fn norm(&self, device: &Device) -> Norm {
        Norm::new(self.norm, self.attention.d_model, self.norm_eps, device)
    }

    /// Validates and builds the block.
    ///
    /// # Errors
    /// Any sub-layer's configuration error, or widths that disagree.
    pub fn init(&self, device: &Device) -> Result<TransformerBlock> {
        let d = self.attention.d_model;
        if self.ffn.d_model != d {
            return Err(ConfigError::conflict(format!(
                "ffn d_model {} differs from attention d_model {d}",
                self.ffn.d_model
            ))
            .into());
        }
        check_prob("block dropout", self.dropout)?;
        Ok(TransformerBlock {
            self_attn: self.attention.init(device)?,
            norm_1: self.norm(device),
            mlp: self.ffn.init(device)?,
            norm_2: self.norm(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            placement: self.placement,
        })
    }
}

impl TransformerBlockConfig {
    /// The same parts side by side in a [`ParallelBlock`].
    pub fn parallel(self) -> ParallelBlockConfig {
        ParallelBlockConfig::new(self)
    }

    /// The same parts with a norm after each sub-layer too, in a [`SandwichBlock`].
    pub fn sandwich(self) -> SandwichBlockConfig {
        SandwichBlockConfig::new(self)
    }

    /// Refuses a post-norm placement for a block whose sub-layers read a norm of their
    /// input (`kind` names the block).
    fn require_pre_norm(&self, kind: &str) -> Result<()> {
        if self.placement == NormPlacement::Pre {
            return Ok(());
        }
        Err(ConfigError::conflict(format!(
            "a {kind} block normalises the input of its sub-layers: its placement must be Pre"
        ))
        .into())
    }
}

impl SandwichBlockConfig {
    /// Trainable parameters of the block [`Self::init`] builds: those of the sequential
    /// block of the same parts, and the two norms after the sub-layers.
    pub fn num_params(&self) -> usize {
        let d = self.block.attention.d_model;
        self.block.num_params() + 2 * self.block.norm.num_params(d)
    }

    /// Validates and builds the block.
    ///
    /// # Errors
    /// As [`TransformerBlockConfig::init`], and a post-norm placement.
    pub fn init(&self, device: &Device) -> Result<SandwichBlock> {
        self.block.require_pre_norm("sandwich")?;
        let TransformerBlock {
            self_attn,
            norm_1,
            mlp,
            norm_2,
            dropout,
            ..
        } = self.block.init(device)?;
        Ok(SandwichBlock {
            self_attn,
            norm_1,
            post_attn_norm: self.block.norm(device),
            mlp,
            norm_2,
            post_mlp_norm: self.block.norm(device),
            dropout,
        })
    }
}

impl ParallelBlockConfig {
    /// Trainable parameters of the block [`Self::init`] builds: those of the sequential
    /// block of the same parts.
    pub fn num_params(&self) -> usize {
        self.block.num_params()
    }

    /// Validates and builds the block.
    ///
    /// # Errors
    /// As [`TransformerBlockConfig::init`], and a post-norm placement.
    pub fn init(&self, device: &Device) -> Result<ParallelBlock> {
        self.block.require_pre_norm("parallel")?;
        let TransformerBlock {
            self_attn,
            norm_1,
            mlp,
            norm_2,
            dropout,
            ..
        } = self.block.init(device)?;
        Ok(ParallelBlock {
            self_attn,
            norm_1,
            mlp,
            norm_2,
            dropout,
        })
    }
}

impl CrossAttentionBlockConfig {
    /// Trainable parameters of the block [`Self::init`] builds.
    pub fn num_params(&self) -> usize {
        let d = self.block.attention.d_model;
        self.block.num_params() + self.cross_attention.num_params() + self.block.norm.num_params(d)
    }

    /// Validates and builds the block.
    ///
    /// # Errors
    /// Any sub-layer's configuration error, or widths that disagree.
    pub fn init(&self, device: &Device) -> Result<CrossAttentionBlock> {
        let d = self.block.attention.d_model;
        if self.cross_attention.d_model != d {
            return Err(ConfigError::conflict(format!(
                "cross-attention d_model {} differs from attention d_model {d}",
                self.cross_attention.d_model
            ))
            .into());
        }
        let TransformerBlock {
            self_attn,
            norm_1,
            mlp,
            norm_2,
            dropout,
            placement,
        } = self.block.init(device)?;
        Ok(CrossAttentionBlock {
            self_attn,
            norm_1,
            cross_attn: self.cross_attention.init_cross(device)?,
            norm_cross: self.block.norm(device),
            mlp,
            norm_2,
            dropout,
            placement,
        })
    }
}

/// The input of a [`TransformerBlock`] or a [`CrossAttentionBlock`]: what its
/// self-attention takes, the block's input `[B, T, d_model]` with its mask, positions and
/// whether to return the weights.
pub type BlockInput = AttentionInput;

/// Self-attention of the block's `input`, over `h` (the input itself, or its norm),
/// through `cache` when there is one.
fn self_attention(
    attn: &SelfAttention,
    input: &BlockInput,
    h: Tensor<3>,
    cache: Option<&mut KvCache>,
) -> Result<AttentionOutput> {
    let inp = input.over(h);
    match cache {
        Some(c) => attn.forward_cached(inp, c),
        None => attn.forward(inp),
    }
}

/// What a [`CrossAttentionBlock`]'s cross-attention reads.
#[derive(Debug, Clone, Copy)]
pub enum Memory<'a> {
    /// The encoder's output, `[B, Tm, d_model]`.
    States(&'a Tensor<3>),
    /// The encoder's output as keys and values, projected once by this block's
    /// [`CrossAttention::cross_kv`] for every decoding step.
    Cached(&'a CrossKvCache),
}

/// The output of a [`TransformerBlock`] or a [`CrossAttentionBlock`].
#[derive(Debug, Clone)]
pub struct BlockOutput {
    /// `[B, T, d_model]`
    pub hidden: Tensor<3>,
    /// Self-attention weights `[B, H, T, Tk]`, when asked for.
    pub self_weights: Option<Tensor<4>>,
    /// Cross-attention weights `[B, H, T, Tm]`, when asked for and present.
    pub cross_weights: Option<Tensor<4>>,
    /// The router's logits `[B T, n_experts]`, when the block's MLP is a mixture of
    /// experts: what the load-balancing loss takes.
    pub router_logits: Option<Tensor<2>>,
}

impl BlockOutput {
    /// A block's output of `hidden` states alone: no weights, no router.
    pub fn of(hidden: Tensor<3>) -> Self {
        Self {
            hidden,
            self_weights: None,
            cross_weights: None,
            router_logits: None,
        }
    }
}

/// One sub-layer `f` with its residual connection, its norm where `placement` puts it,
/// and residual dropout: `x + f(norm(x))` (pre-norm) or `norm(x + f(x))` (post-norm).
fn residual<W>(
    placement: NormPlacement,
    norm: &Norm,
    dropout: &Dropout,
    x: Tensor<3>,
    f: impl FnOnce(Tensor<3>) -> Result<(Tensor<3>, W)>,
) -> Result<(Tensor<3>, W)> {
    Ok(match placement {
        NormPlacement::Pre => {
            let (out, w) = f(norm.forward(x.clone()))?;
            (x + crate::dropout(dropout, out), w)
        }
        NormPlacement::Post => {
            let (out, w) = f(x.clone())?;
            (norm.forward(x + crate::dropout(dropout, out)), w)
        }
    })
}

/// The [`Sublayers`] of a block, which both block types name alike.
macro_rules! sublayers {
    ($block:expr) => {
        Sublayers {
            placement: $block.placement,
            dropout: &$block.dropout,
            self_attn: &$block.self_attn,
            norm_1: &$block.norm_1,
            mlp: &$block.mlp,
            norm_2: &$block.norm_2,
        }
    };
}

/// `forward` and `forward_cached` of a block without cross-attention, over its own
/// `run(input, cache)`.
macro_rules! self_attention_block {
    ($block:ty) => {
        impl $block {
            /// Runs the block over a whole sequence.
            ///
            /// # Shapes
            /// - `x`: `[B, T, d_model]` -> hidden `[B, T, d_model]`
            ///
            /// # Errors
            /// Input shapes the attention layer rejects.
            pub fn forward(&self, input: BlockInput) -> Result<BlockOutput> {
                self.run(input, None)
            }

            /// Runs the block over new positions, extending the self-attention `cache`.
            ///
            /// # Errors
            /// As [`Self::forward`], and a full cache.
            pub fn forward_cached(
                &self,
                input: BlockInput,
                cache: &mut KvCache,
            ) -> Result<BlockOutput> {
                self.run(input, Some(cache))
            }
        }
    };
}

self_attention_block!(TransformerBlock);

impl TransformerBlock {
    fn run(&self, input: BlockInput, cache: Option<&mut KvCache>) -> Result<BlockOutput> {
        let layer = sublayers!(self);
        layer.run(&input, cache, |x| Ok((x, None)))
    }
}

impl CrossAttentionBlock {
    /// Runs the block over a whole target sequence, reading `memory` under
    /// `memory_mask` (source padding).
    ///
    /// # Shapes
    /// - `x`: `[B, T, d_model]`, memory `[B, Tm, d_model]` -> hidden `[B, T, d_model]`
    ///
    /// # Errors
    /// Input shapes the attention layers reject.
    pub fn forward(
        &self,
        input: BlockInput,
        memory: Memory<'_>,
        memory_mask: Mask,
    ) -> Result<BlockOutput> {
        self.run(input, None, memory, memory_mask)
    }

    /// Runs the block over new target positions, extending the self-attention `cache`.
    ///
    /// # Errors
    /// As [`Self::forward`], and a full cache.
    pub fn forward_cached(
        &self,
        input: BlockInput,
        cache: &mut KvCache,
        memory: Memory<'_>,
        memory_mask: Mask,
    ) -> Result<BlockOutput> {
        self.run(input, Some(cache), memory, memory_mask)
    }

    fn run(
        &self,
        input: BlockInput,
        cache: Option<&mut KvCache>,
        memory: Memory<'_>,
        memory_mask: Mask,
    ) -> Result<BlockOutput> {
        let layer = sublayers!(self);
        let cross = |x| {
            residual(self.placement, &self.norm_cross, &self.dropout, x, |h| {
                let mut inp = AttentionInput::new(h).mask(memory_mask);
                if input.need_weights {
                    inp = inp.with_weights();
                }
                let out = match memory {
                    Memory::States(mem) => self.cross_attn.forward(inp, mem.clone())?,
                    Memory::Cached(kv) => self.cross_attn.forward_cached(inp, kv)?,
                };
                Ok((out.context, out.weights))
            })
        };
        layer.run(&input, cache, cross)
    }
}

self_attention_block!(ParallelBlock);

impl ParallelBlock {
    fn run(&self, input: BlockInput, cache: Option<&mut KvCache>) -> Result<BlockOutput> {
        let x = input.x.clone();
        let attn = self_attention(
            &self.self_attn,
            &input,
            self.norm_1.forward(x.clone()),
            cache,
        )?;
        let (mlp, router_logits) = self.mlp.forward_routed(self.norm_2.forward(x.clone()));
        Ok(BlockOutput {
            hidden: x
                + crate::dropout(&self.dropout, attn.context)
                + crate::dropout(&self.dropout, mlp),
            self_weights: attn.weights,
            cross_weights: None,
            router_logits,
        })
    }
}

self_attention_block!(SandwichBlock);

impl SandwichBlock {
    fn run(&self, input: BlockInput, cache: Option<&mut KvCache>) -> Result<BlockOutput> {
        let x = input.x.clone();
        let attn = self_attention(
            &self.self_attn,
            &input,
            self.norm_1.forward(x.clone()),
            cache,
        )?;
        let x = x + crate::dropout(&self.dropout, self.post_attn_norm.forward(attn.context));
        let (mlp, router_logits) = self.mlp.forward_routed(self.norm_2.forward(x.clone()));
        Ok(BlockOutput {
            hidden: x + crate::dropout(&self.dropout, self.post_mlp_norm.forward(mlp)),
            self_weights: attn.weights,
            cross_weights: None,
            router_logits,
        })
    }
}

/// The parts every block has: self-attention and the MLP, each with its norm, and the
/// residual dropout.
struct Sublayers<'a> {
    placement: NormPlacement,
    dropout: &'a Dropout,
    self_attn: &'a SelfAttention,
    norm_1: &'a Norm,
    mlp: &'a FeedForward,
    norm_2: &'a Norm,
}

impl Sublayers<'_> {
    /// Self-attention, then `middle` (cross-attention, or nothing) with the weights it
    /// returns, then the MLP.
    fn run(
        &self,
        input: &BlockInput,
        cache: Option<&mut KvCache>,
        middle: impl FnOnce(Tensor<3>) -> Result<(Tensor<3>, Option<Tensor<4>>)>,
    ) -> Result<BlockOutput> {
        let (p, drop) = (self.placement, self.dropout);
        let (x, self_weights) = residual(p, self.norm_1, drop, input.x.clone(), |h| {
            let out = self_attention(self.self_attn, input, h, cache)?;
            Ok((out.context, out.weights))
        })?;
        let (x, cross_weights) = middle(x)?;
        let (hidden, router_logits) =
            residual(p, self.norm_2, drop, x, |h| Ok(self.mlp.forward_routed(h)))?;
        Ok(BlockOutput {
            hidden,
            self_weights,
            cross_weights,
            router_logits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffn::FfnActivation;
    use burn::nn::Initializer;
    use burn::tensor::Distribution;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    /// The epsilon read back from Burn's LayerNorm is the configured one, bit for bit,
    /// for the values the zoo's models use.
    #[test]
    fn layer_norm_epsilon_reads_back_exactly() {
        let dev = test_device();
        for eps in [1e-5, 1e-12, 1e-6, 1e-7, 0.1, 3.3e-9] {
            let norm = LayerNormConfig::new(4).with_epsilon(eps).init(&dev);
            assert_eq!(layer_norm_epsilon(&norm), Some(eps));
        }
    }

    fn x(b: usize, t: usize, d: usize) -> Tensor<3> {
        Tensor::random([b, t, d], Distribution::Normal(0.0, 1.0), &test_device())
    }

    #[test]
    fn tied_logits_are_the_product_with_the_tables_transpose() {
        let dev = test_device();
        let h = Tensor::<3>::random([2, 3, 4], Distribution::Normal(0.0, 1.0), &dev);
        let w = Tensor::<2>::random([5, 4], Distribution::Normal(0.0, 1.0), &dev);
        let got = tied_logits(h.clone(), w.clone());
        assert_eq!(got.dims(), [2, 3, 5]);
        // Entry by entry: logits[b, t, v] = sum_d h[b, t, d] w[v, d].
        let (hv, wv, gv) = (
            h.into_data().try_to_vec::<f32>().unwrap(),
            w.into_data().try_to_vec::<f32>().unwrap(),
            got.into_data().try_to_vec::<f32>().unwrap(),
        );
        for bt in 0..6 {
            for v in 0..5 {
                let want: f32 = (0..4).map(|d| hv[bt * 4 + d] * wv[v * 4 + d]).sum();
                assert!((gv[bt * 5 + v] - want).abs() < 1e-5, "{bt} {v}");
            }
        }
    }

    #[test]
    fn rms_norm_differs_from_layer_norm_on_inputs_with_a_mean() {
        let dev = test_device();
        let rms = Norm::new(NormKind::RmsNorm, 4, 1e-6, &dev);
        let ln = Norm::new(NormKind::LayerNorm, 4, 1e-6, &dev);
        // Mean 2.5, mean of squares 7.5: RMSNorm divides by sqrt(7.5) and keeps the mean;
        // LayerNorm subtracts 2.5 and divides by the standard deviation sqrt(1.25).
        let input = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], &dev).reshape([1, 1, 4]);
        let r = rms
            .forward(input.clone())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let l = ln.forward(input).into_data().try_to_vec::<f32>().unwrap();
        let s = 7.5f32.sqrt();
        let sd = 1.25f32.sqrt();
        for i in 0..4 {
            let v = (i + 1) as f32;
            assert!((r[i] - v / s).abs() < 1e-5, "rms {r:?}");
            assert!((l[i] - (v - 2.5) / sd).abs() < 1e-4, "ln {l:?}");
        }
    }

    #[test]
    fn the_offset_rms_norm_scales_by_one_plus_its_weight() {
        let dev = test_device();
        let mut n = OffsetRmsNorm::new(4, 1e-6, &dev);
        let input = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], &dev).reshape([1, 1, 4]);
        let plain = Norm::new(NormKind::RmsNorm, 4, 1e-6, &dev).forward(input.clone());
        // A zero weight is the plain RMSNorm.
        let diff = (n.forward(input.clone()) - plain.clone())
            .abs()
            .max()
            .into_scalar::<f32>();
        assert!(diff < 1e-6, "{diff}");
        n.weight =
            burn::module::Param::from_tensor(Tensor::from_floats([0.5, -1.0, 0.0, 2.0], &dev));
        let got = n.forward(input).into_data().try_to_vec::<f32>().unwrap();
        let p = plain.into_data().try_to_vec::<f32>().unwrap();
        for (i, s) in [1.5f32, 0.0, 1.0, 3.0].iter().enumerate() {
            assert!((got[i] - p[i] * s).abs() < 1e-5, "{got:?}");
        }
    }

    #[test]
    fn rms_norm_normalises_to_unit_rms() {
        let dev = test_device();
        let n = Norm::new(NormKind::RmsNorm, 8, 1e-6, &dev);
        let y = n.forward(x(2, 3, 8) * 5.0);
        let rms = y
            .powi_scalar(2)
            .mean_dim(2)
            .sqrt()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert!(rms.iter().all(|r| (r - 1.0).abs() < 1e-3), "{rms:?}");
    }

    fn config(placement: NormPlacement) -> TransformerBlockConfig {
        let attn = MultiHeadAttentionConfig::new(16, 4);
        TransformerBlockConfig::new(attn, FeedForwardConfig::new(16, 32)).with_placement(placement)
    }

    fn block(placement: NormPlacement) -> TransformerBlock {
        config(placement).init(&test_device()).unwrap()
    }

    #[test]
    fn pre_and_post_norm_compute_their_formulas() {
        let input = x(1, 4, 16);
        for placement in [NormPlacement::Pre, NormPlacement::Post] {
            let b = block(placement);
            let got = b
                .forward(BlockInput::new(input.clone()).mask(Mask::causal()))
                .unwrap()
                .hidden;
            let attn = |h: Tensor<3>| {
                b.self_attn
                    .forward(AttentionInput::new(h).causal())
                    .unwrap()
                    .context
            };
            let expected = match placement {
                NormPlacement::Pre => {
                    let h = input.clone() + attn(b.norm_1.forward(input.clone()));
                    h.clone() + b.mlp.forward(b.norm_2.forward(h))
                }
                NormPlacement::Post => {
                    let h = b.norm_1.forward(input.clone() + attn(input.clone()));
                    b.norm_2.forward(h.clone() + b.mlp.forward(h))
                }
            };
            assert!(max_abs_diff(&got, &expected) < 1e-5, "{placement:?}");
        }
    }

    #[test]
    fn a_parallel_block_adds_both_branches_of_one_input() {
        let dev = test_device();
        let input = x(2, 4, 16);
        // Weights large enough that attention moves the MLP's input far above rounding.
        let wide = Initializer::Normal {
            mean: 0.0,
            std: 0.5,
        };
        let p = TransformerBlockConfig::new(
            MultiHeadAttentionConfig::new(16, 4).with_initializer(wide.clone()),
            FeedForwardConfig::new(16, 32).with_initializer(wide),
        )
        .parallel()
        .init(&dev)
        .unwrap();
        let got = p
            .forward(BlockInput::new(input.clone()).mask(Mask::causal()))
            .unwrap()
            .hidden;
        let attn = p
            .self_attn
            .forward(AttentionInput::new(p.norm_1.forward(input.clone())).causal())
            .unwrap()
            .context;
        let mlp = p.mlp.forward(p.norm_2.forward(input.clone()));
        let want = input.clone() + attn + mlp;
        assert!(max_abs_diff(&got, &want) < 1e-5);
        // Negative control: the same parts run one after the other give another output.
        let seq = TransformerBlock {
            self_attn: p.self_attn.clone(),
            norm_1: p.norm_1.clone(),
            mlp: p.mlp.clone(),
            norm_2: p.norm_2.clone(),
            dropout: p.dropout.clone(),
            placement: NormPlacement::Pre,
        };
        let other = seq
            .forward(BlockInput::new(input.clone()).mask(Mask::causal()))
            .unwrap()
            .hidden;
        assert!(max_abs_diff(&got, &other) > 1e-3);
        // The cache gives the full forward's output, step by step.
        let mut cache = KvCache::new(8);
        let steps: Vec<_> = (0..4)
            .map(|i| {
                let step = input.clone().slice([0..2, i..i + 1, 0..16]);
                p.forward_cached(BlockInput::new(step), &mut cache)
                    .unwrap()
                    .hidden
            })
            .collect();
        assert!(max_abs_diff(&got, &Tensor::cat(steps, 1)) < 1e-5);
        let e = config(NormPlacement::Post)
            .parallel()
            .init(&dev)
            .unwrap_err();
        assert!(e.to_string().contains("its placement must be Pre"), "{e}");
    }

    #[test]
    fn a_sandwich_block_norms_each_sub_layer_s_input_and_output() {
        let dev = test_device();
        let input = x(2, 5, 16);
        let wide = Initializer::Normal {
            mean: 0.0,
            std: 0.5,
        };
        let cfg = TransformerBlockConfig::new(
            MultiHeadAttentionConfig::new(16, 4).with_initializer(wide.clone()),
            FeedForwardConfig::new(16, 32).with_initializer(wide),
        )
        .with_norm(NormKind::RmsNorm)
        .sandwich();
        let p = cfg.init(&dev).unwrap();
        let got = p
            .forward(BlockInput::new(input.clone()).mask(Mask::causal()))
            .unwrap()
            .hidden;
        let attn = p
            .self_attn
            .forward(AttentionInput::new(p.norm_1.forward(input.clone())).causal())
            .unwrap()
            .context;
        let mid = input.clone() + p.post_attn_norm.forward(attn);
        let mlp = p.mlp.forward(p.norm_2.forward(mid.clone()));
        let want = mid + p.post_mlp_norm.forward(mlp);
        assert!(max_abs_diff(&got, &want) < 1e-5);
        // Four norms of 16: two more than the sequential block of the same parts.
        assert_eq!(cfg.num_params(), cfg.block.num_params() + 2 * 16);
        assert_eq!(p.num_params(), cfg.num_params());
        // Negative control: without the norms after the sub-layers, another output.
        let seq = TransformerBlock {
            self_attn: p.self_attn.clone(),
            norm_1: p.norm_1.clone(),
            mlp: p.mlp.clone(),
            norm_2: p.norm_2.clone(),
            dropout: p.dropout.clone(),
            placement: NormPlacement::Pre,
        };
        let other = seq
            .forward(BlockInput::new(input.clone()).mask(Mask::causal()))
            .unwrap()
            .hidden;
        assert!(max_abs_diff(&got, &other) > 1e-3);
        // The cache gives the full forward's output, step by step.
        let mut cache = KvCache::new(8);
        let steps: Vec<_> = (0..5)
            .map(|i| {
                let step = input.clone().slice([0..2, i..i + 1, 0..16]);
                p.forward_cached(BlockInput::new(step), &mut cache)
                    .unwrap()
                    .hidden
            })
            .collect();
        assert!(max_abs_diff(&got, &Tensor::cat(steps, 1)) < 1e-5);
        let e = config(NormPlacement::Post)
            .sandwich()
            .init(&dev)
            .unwrap_err();
        assert!(e.to_string().contains("its placement must be Pre"), "{e}");
    }

    #[test]
    fn cross_attention_block_computes_its_formula_and_returns_weights() {
        let dev = test_device();
        let (input, memory) = (x(2, 3, 16), x(2, 5, 16));
        for placement in [NormPlacement::Pre, NormPlacement::Post] {
            let b = config(placement)
                .with_cross(MultiHeadAttentionConfig::new(16, 4))
                .init(&dev)
                .unwrap();
            let out = b
                .forward(
                    BlockInput::new(input.clone())
                        .mask(Mask::causal())
                        .with_weights(),
                    Memory::States(&memory),
                    Mask::none(),
                )
                .unwrap();
            assert_eq!(out.self_weights.unwrap().dims(), [2, 4, 3, 3]);
            assert_eq!(out.cross_weights.unwrap().dims(), [2, 4, 3, 5]);
            let attn = |h: Tensor<3>| {
                b.self_attn
                    .forward(AttentionInput::new(h).causal())
                    .unwrap()
                    .context
            };
            let cross = |h: Tensor<3>| {
                b.cross_attn
                    .forward(AttentionInput::new(h), memory.clone())
                    .unwrap()
                    .context
            };
            let expected = match placement {
                NormPlacement::Pre => {
                    let h = input.clone() + attn(b.norm_1.forward(input.clone()));
                    let h = h.clone() + cross(b.norm_cross.forward(h));
                    h.clone() + b.mlp.forward(b.norm_2.forward(h))
                }
                NormPlacement::Post => {
                    let h = b.norm_1.forward(input.clone() + attn(input.clone()));
                    let h = b.norm_cross.forward(h.clone() + cross(h));
                    b.norm_2.forward(h.clone() + b.mlp.forward(h))
                }
            };
            assert!(max_abs_diff(&out.hidden, &expected) < 1e-5, "{placement:?}");
            // The memory projected once gives the same layer output.
            let kv = b.cross_attn.cross_kv(memory.clone()).unwrap();
            let cached = b
                .forward(
                    BlockInput::new(input.clone()).mask(Mask::causal()),
                    Memory::Cached(&kv),
                    Mask::none(),
                )
                .unwrap();
            assert!(max_abs_diff(&cached.hidden, &expected) < 1e-5);
            // Negative control: another memory moves the output.
            let other = b
                .forward(
                    BlockInput::new(input.clone()).mask(Mask::causal()),
                    Memory::States(&(memory.clone() * -1.0)),
                    Mask::none(),
                )
                .unwrap();
            assert!(max_abs_diff(&other.hidden, &expected) > 1e-3);
        }
    }

    #[test]
    fn block_cache_equals_full_forward() {
        let attn = MultiHeadAttentionConfig::new(16, 4)
            .with_rope_max_len(Some(16))
            .with_n_kv_heads(Some(2));
        let b = TransformerBlockConfig::new(
            attn,
            FeedForwardConfig::new(16, 32).with_activation(FfnActivation::SwiGlu),
        )
        .with_norm(NormKind::RmsNorm)
        .init(&test_device())
        .unwrap();
        let input = x(1, 6, 16);
        let full = b
            .forward(BlockInput::new(input.clone()).mask(Mask::causal()))
            .unwrap()
            .hidden;
        let mut cache = KvCache::new(16);
        let mut outs = vec![];
        for i in 0..6 {
            let step = input.clone().slice([0..1, i..i + 1, 0..16]);
            outs.push(
                b.forward_cached(BlockInput::new(step), &mut cache)
                    .unwrap()
                    .hidden,
            );
        }
        assert!(max_abs_diff(&full, &Tensor::cat(outs, 1)) < 1e-5);
    }
}
