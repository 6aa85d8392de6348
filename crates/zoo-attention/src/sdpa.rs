//! Scaled dot-product attention, `softmax(Q Kᵀ / sqrt(d_k) + bias, masked) V`
//! (Vaswani et al., 2017, eq. 1), in five forms:
//!
//! | path | extra memory | exact | use |
//! |---|---|---|---|
//! | [`attention_reference`] | `O(Tq·Tk)` | yes | readable; returns the weights; dropout |
//! | [`attention_fused`] | backend's | yes | zoo-kernels' tiles on flex (training too), Burn's fused op elsewhere: flash kernels on CubeCL, SDPA on tch |
//! | [`attention_chunked`] | `O(Tq·Dv + Bq·Bk)` | yes | blocks of keys, online softmax (FlashAttention idea) |
//! | [`attention_sliding_window`] | `O(T·W)` | yes, for its mask | local window plus global tokens (Longformer) |
//! | [`attention_linear`] | `O(T·D·Dv)` | **no** | kernelised approximation, `φ(x) = elu(x) + 1` |
//!
//! All take `[B, H, T, D]` tensors with the same number of heads in Q, K and V; grouped
//! KV heads are expanded with [`repeat_kv`] first. Which key a query may see by position
//! (causal, window, global tokens) is decided by [`Visibility`] alone, for every path.
//! Inputs are checked before any kernel runs: shapes that do not fit are errors, not
//! panics deep inside a backend.

use burn::nn::Dropout;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};
use zoo_core::ConfigError;

use crate::error::{AttentionError, Result};
use crate::mask::{Mask, Visibility};

fn default_scale(head_dim: usize, scale: Option<f64>) -> f64 {
    scale.unwrap_or_else(|| 1.0 / (head_dim as f64).sqrt())
}

/// What turns the products `Q Kᵀ` into scores, before any mask or bias: a factor
/// (default `1 / sqrt(D)`) and, when set, a soft cap `cap · tanh(s / cap)` that bounds
/// every score to `(-cap, cap)` (Gemma 2's `attn_logit_softcapping`). The cap comes after
/// the factor and before the mask and the bias, the order of `transformers` and of Burn's
/// fused op. Every path takes it; `None` (or `Some(factor)`) converts to it without a cap.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScoreScale {
    /// The factor on `Q Kᵀ`. Default: `1 / sqrt(D)`.
    pub factor: Option<f64>,
    /// The soft cap, positive. Default: none.
    pub softcap: Option<f64>,
}

impl From<Option<f64>> for ScoreScale {
    fn from(factor: Option<f64>) -> Self {
        Self {
            factor,
            softcap: None,
        }
    }
}

impl ScoreScale {
    /// The same factor with a soft cap.
    pub fn with_softcap(self, softcap: Option<f64>) -> Self {
        Self { softcap, ..self }
    }

    /// The factor for heads of width `head_dim`.
    fn factor_for(&self, head_dim: usize) -> f64 {
        default_scale(head_dim, self.factor)
    }

    /// `s` capped, when there is a cap.
    fn cap(&self, s: Tensor<4>) -> Tensor<4> {
        match self.softcap {
            Some(cap) => (s / cap).tanh() * cap,
            None => s,
        }
    }
}

/// Checks Q, K, V and the mask against each other, returning `[B, H, Tq, Tk]`.
fn check_qkv(q: &Tensor<4>, k: &Tensor<4>, v: &Tensor<4>, mask: &Mask) -> Result<[usize; 4]> {
    let [b, h, tq, d] = q.dims();
    let [kb, kh, tk, kd] = k.dims();
    if (kb, kh, kd) != (b, h, d) {
        return Err(AttentionError::Shape {
            what: "attention keys",
            expected: format!("[{b}, {h}, _, {d}] (as the queries)"),
            got: k.dims().to_vec(),
        });
    }
    let [vb, vh, vt, _] = v.dims();
    if (vb, vh, vt) != (b, h, tk) {
        return Err(AttentionError::Shape {
            what: "attention values",
            expected: format!("[{b}, {h}, {tk}, _] (as the keys)"),
            got: v.dims().to_vec(),
        });
    }
    mask.check([b, h, tq, tk])?;
    Ok([b, h, tq, tk])
}

/// Softmax over the last dimension that gives zeros, not NaN, for a row that is all `-inf`.
///
/// The max is clamped to the most negative finite value so that `-inf - max` stays `-inf`,
/// and the sum is clamped away from zero so that an all-zero row divides to zero.
///
/// Half-precision scores (f16, bf16) are exponentiated and summed in f32 and the weights
/// narrowed once at the end, as `transformers` computes its softmax
/// (`softmax(.., dtype=torch.float32)`) and as the fused kernels do.
pub fn safe_softmax(scores: Tensor<4>) -> Tensor<4> {
    let dtype = scores.dtype();
    let scores = scores.cast(accumulation(dtype));
    let max = scores.clone().max_dim(3).clamp_min(f32::MIN);
    let e = (scores - max).exp();
    let sum = e.clone().sum_dim(3).clamp_min(f32::MIN_POSITIVE);
    (e / sum).cast(dtype)
}

/// The float type attention sums in for inputs of type `dtype`: f32 for f16 and bf16,
/// the input's own otherwise.
pub fn accumulation(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// The readable reference path: matmul, scale, bias, mask, softmax, dropout, matmul.
///
/// Returns the context and the attention weights (after the softmax, before dropout).
///
/// # Shapes
/// - `q`: `[B, H, Tq, D]`, `k`: `[B, H, Tk, D]`, `v`: `[B, H, Tk, Dv]`
/// - returns `([B, H, Tq, Dv], [B, H, Tq, Tk])`
///
/// # Errors
/// Shapes that do not fit together, or a mask that does not broadcast to the scores.
pub fn attention_reference(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: &Mask,
    scale: impl Into<ScoreScale>,
    dropout: Option<&Dropout>,
) -> Result<(Tensor<4>, Tensor<4>)> {
    let shape = check_qkv(&q, &k, &v, mask)?;
    let d = q.dims()[3];
    let device = q.device();
    let scale = scale.into();
    // [B, H, Tq, D] x [B, H, D, Tk] -> [B, H, Tq, Tk]
    let mut scores = scale.cap(q.matmul(k.swap_dims(2, 3)) * scale.factor_for(d));
    if let Some(bias) = mask.materialize_bias(shape) {
        scores = scores + bias;
    }
    if let Some(m) = mask.materialize(shape, &device) {
        scores = scores.mask_fill(m, f32::NEG_INFINITY);
    }
    let weights = safe_softmax(scores);
    let dropped = match dropout {
        Some(dropout) => crate::dropout(dropout, weights.clone()),
        None => weights.clone(),
    };
    Ok((dropped.matmul(v), weights))
}

/// The fast path, with no weights and no dropout: on flex in f32, zoo-kernels' attention
/// in tiles (its own backward, `O(T)` memory in training as in inference; global tokens
/// excepted), elsewhere Burn's fused `attention` op.
///
/// Rows whose keys are all masked (by the boolean mask, the positional rule, or a bias
/// of `-inf`) come back as zeros on every backend.
///
/// # Shapes
/// - `q`: `[B, H, Tq, D]`, `k`: `[B, H, Tk, D]`, `v`: `[B, H, Tk, Dv]`
/// - returns `[B, H, Tq, Dv]`
///
/// # Errors
/// Shapes that do not fit together, or a mask that does not broadcast to the scores.
pub fn attention_fused(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: &Mask,
    scale: impl Into<ScoreScale>,
) -> Result<Tensor<4>> {
    let shape = check_qkv(&q, &k, &v, mask)?;
    let [b, h, tq, tk] = shape;
    let scale = scale.into();
    // libtorch's SDPA has no soft cap, and burn-tch 0.22.1 drops the option when it calls
    // it (it keeps it only on its decomposed path, taken with a bias or under autodiff):
    // there the reference path computes a capped attention instead.
    if scale.softcap.is_some() && zoo_device::is_libtorch(&q.device()) {
        return Ok(attention_reference(q, k, v, mask, scale, None)?.0);
    }
    let d = q.dims()[3];
    if let Some(out) = zoo_attention_kernel(&q, &k, &v, mask, scale, d, None) {
        return Ok(out(q, k, v));
    }
    let dv = v.dims()[3];
    let device = q.device();
    // The kernels' own causal flag assumes query i is key i and knows no window; any
    // other rule goes in as an explicit mask.
    let plain_causal = mask.rule == Visibility::causal()
        && mask.query_offset == 0
        && mask.key_offset == 0
        && tq == tk;
    // Under the plain causal rule alone every query sees its own key: no row can be empty,
    // and no mask needs building at all.
    let rows_all_see_a_key = plain_causal && mask.masked.is_none() && mask.bias.is_none();
    // The mask at its own broadcast shape (`[B|1, H|1, Tq, Tk]`), positional part included.
    let compact = if rows_all_see_a_key {
        None
    } else {
        mask.materialize_compact(tq, tk, &device)
    };
    let bias = mask.materialize_bias(shape);
    // Burn's boolean mask (true = masked) and, under the plain causal rule, the kernels' flag.
    let (burn_mask, is_causal) = if plain_causal {
        (mask.masked.clone().map(|m| m.expand(shape)), true)
    } else {
        (compact.clone().map(|m| m.expand(shape)), false)
    };
    let (kernel_mask, bias, is_causal) =
        kernel_masks(&device, burn_mask, compact.as_ref(), bias, is_causal, shape);
    let options = AttentionModuleOptions {
        scale: Some(scale.factor_for(d)),
        softcap: scale.softcap,
        is_causal,
    };
    let out = attention(q, k, v, kernel_mask, bias, options);
    // A row with no visible key is zero by definition here; kernels may leave NaN there,
    // whether the boolean mask or a `-inf` bias hid its keys.
    if rows_all_see_a_key {
        return Ok(out);
    }
    let bias_hidden = mask.bias.clone().map(|b| b.equal_elem(f32::NEG_INFINITY));
    let hidden = match (compact, bias_hidden) {
        (Some(m), Some(b)) => Some(crate::mask::union(m, b)),
        (m, b) => m.or(b),
    };
    Ok(match hidden {
        Some(hidden) => {
            // [B|1, H|1, Tq, 1]: reduced before it is broadcast to every head and batch row.
            let dead = hidden.all_dim(3);
            out.mask_fill(dead.expand([b, h, tq, dv]), 0.0)
        }
        None => out,
    })
}

/// zoo-kernels' attention ([`zoo_kernels::attn::attention`]), where it applies: on flex
/// in f32 with the kernels on, and a positional rule without global tokens (its rule is
/// one visible interval of keys per query). It computes the positional rule per row and
/// takes the boolean mask as `-inf` in the bias; it holds `O(T)` memory in training,
/// where Burn's autodiff keeps the weights.
#[allow(clippy::type_complexity)]
fn zoo_attention_kernel(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    mask: &Mask,
    scale: ScoreScale,
    d: usize,
    dropout: Option<(f32, u64)>,
) -> Option<impl FnOnce(Tensor<4>, Tensor<4>, Tensor<4>) -> Tensor<4> + use<>> {
    if !kernel_applies(q, k, v, mask) {
        return None;
    }
    let bias = match (mask.bias.clone(), mask.masked.clone()) {
        (Some(b), Some(m)) => Some(crate::mask::add_broadcast(b, crate::mask::to_additive(m))),
        (b, m) => b.or(m.map(crate::mask::to_additive)),
    };
    let spec = zoo_kernels::attn::Spec {
        scale: scale.factor_for(d) as f32,
        softcap: scale.softcap.map(|c| c as f32),
        causal: mask.rule.causal,
        window: mask.rule.window,
        query_offset: mask.query_offset,
        key_offset: mask.key_offset,
        dropout: dropout.map_or(0.0, |(p, _)| p),
        seed: dropout.map_or(0, |(_, seed)| seed),
    };
    Some(move |q, k, v| zoo_kernels::attn::attention(q, k, v, bias, spec))
}

/// Whether zoo-kernels' attention takes these inputs ([`zoo_attention_kernel`]).
pub(crate) fn kernel_applies(q: &Tensor<4>, k: &Tensor<4>, v: &Tensor<4>, mask: &Mask) -> bool {
    mask.rule.global.is_empty() && zoo_kernels::attn::fused_applies(q, k, v, mask.bias.as_ref())
}

/// The fused path with dropout `prob` on the weights, inside zoo-kernels' attention (the
/// mask a hash of each weight's index and a seed drawn from the device's generator, so
/// `device.seed(..)` fixes it), where [`kernel_applies`]; the caller takes the reference
/// path elsewhere.
///
/// # Errors
/// As [`attention_fused`].
pub(crate) fn attention_fused_dropout(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: &Mask,
    scale: ScoreScale,
    prob: f64,
) -> Result<Tensor<4>> {
    check_qkv(&q, &k, &v, mask)?;
    let d = q.dims()[3];
    let seed = crate::dropout::seed_from(&q.device());
    let kernel = zoo_attention_kernel(&q, &k, &v, mask, scale, d, Some((prob as f32, seed)))
        .expect("the caller checked that the kernel applies");
    Ok(kernel(q, k, v))
}

/// The masks Burn's `attention` op is handed, on the device it runs on. On every backend
/// but libtorch, Burn's boolean mask (true = hidden) and the bias as they are.
///
/// libtorch is the one exception, and this is the one place that knows it: burn-tch 0.22.1
/// hands Burn's boolean mask straight to torch's SDPA, where true means "may attend"
/// (burn-tch `ops/module.rs`, `attention`). So on the plain device the compact mask goes
/// in inverted, with the positional rule inside it (torch refuses a mask together with its
/// causal flag). Given a bias, or under autodiff, Burn decomposes the op instead, and an
/// additive mask means the same to every path. `fused_equals_reference` (below) checks all
/// three paths against the reference kernel.
fn kernel_masks(
    device: &Device,
    burn_mask: Option<Tensor<4, Bool>>,
    compact: Option<&Tensor<4, Bool>>,
    bias: Option<Tensor<4>>,
    is_causal: bool,
    shape: [usize; 4],
) -> (Option<Tensor<4, Bool>>, Option<Tensor<4>>, bool) {
    if !zoo_device::is_libtorch(device) {
        (burn_mask, bias, is_causal)
    } else if !device.is_autodiff() && bias.is_none() {
        match compact {
            Some(m) => (Some(m.clone().expand(shape).bool_not()), None, false),
            None => (None, None, is_causal),
        }
    } else {
        let bias = match (bias, burn_mask.map(crate::mask::to_additive)) {
            (Some(b), Some(a)) => Some(b + a),
            (b, a) => b.or(a),
        };
        (None, bias, is_causal)
    }
}

/// Expands grouped KV heads to one per query head: head `h` of the output is KV head
/// `h / n_rep`, as in HF Llama's `repeat_kv`.
///
/// # Shapes
/// - `x`: `[B, Hkv, T, D]` -> `[B, Hkv * n_rep, T, D]`
pub fn repeat_kv(x: Tensor<4>, n_rep: usize) -> Tensor<4> {
    if n_rep == 1 {
        return x;
    }
    let [b, hkv, t, d] = x.dims();
    // [B, Hkv, T, D] -> [B, Hkv, 1, T, D] -> [B, Hkv, n_rep, T, D] -> [B, Hkv * n_rep, T, D]
    x.unsqueeze_dim::<5>(2)
        .expand([b, hkv, n_rep, t, d])
        .reshape([b, hkv * n_rep, t, d])
}

/// Slices dims 2 and 3 of a broadcastable `[_, _, Tq|1, Tk|1]` tensor to a tile.
fn tile<K: burn::tensor::kind::Basic>(
    t: Tensor<4, K>,
    q: std::ops::Range<usize>,
    k: std::ops::Range<usize>,
) -> Tensor<4, K> {
    let [a, b, tq, tk] = t.dims();
    let q = if tq == 1 { 0..1 } else { q };
    let k = if tk == 1 { 0..1 } else { k };
    t.slice([0..a, 0..b, q, k])
}

/// Memory-efficient exact attention: the keys are read in blocks and the softmax is
/// accumulated online (running max `m`, running sum `l`), as in FlashAttention (Dao et al.,
/// 2022, Algorithm 1), so the `Tq × Tk` matrix is never built. Query blocks of `block_q`
/// rows bound the live score tile to `block_q × block_k`. Causal tiles wholly in the future
/// are skipped.
///
/// Equals [`attention_reference`] up to rounding; fully masked rows give zeros.
///
/// # Shapes
/// - `q`: `[B, H, Tq, D]`, `k`: `[B, H, Tk, D]`, `v`: `[B, H, Tk, Dv]`
/// - the mask's boolean part and bias broadcastable to `[B, H, Tq, Tk]`
/// - returns `[B, H, Tq, Dv]`
///
/// # Errors
/// Shapes that do not fit together, or a mask that does not broadcast to the scores.
pub fn attention_chunked(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: &Mask,
    scale: impl Into<ScoreScale>,
    block_q: usize,
    block_k: usize,
) -> Result<Tensor<4>> {
    let [b, h, tq, tk] = check_qkv(&q, &k, &v, mask)?;
    let d = q.dims()[3];
    let dv = v.dims()[3];
    let device = q.device();
    // The running max, sums and products are kept in f32 for half-precision inputs (the
    // running max starts at f32::MIN, which f16 cannot hold), the result narrowed once.
    let dtype = q.dtype();
    let wide = accumulation(dtype);
    let (q, k, v) = (q.cast(wide), k.cast(wide), v.cast(wide));
    let scores = scale.into();
    let scale = scores.factor_for(d);
    let block_q = block_q.max(1);
    let block_k = block_k.max(1);
    let mut outputs = Vec::with_capacity(tq.div_ceil(block_q));
    for q0 in (0..tq).step_by(block_q) {
        let q1 = (q0 + block_q).min(tq);
        let bq = q1 - q0;
        let qb = q.clone().slice([0..b, 0..h, q0..q1, 0..d]) * scale;
        let mut m = Tensor::<4>::full([b, h, bq, 1], f32::MIN, (&device, wide));
        let mut l = Tensor::<4>::zeros([b, h, bq, 1], (&device, wide));
        let mut acc = Tensor::<4>::zeros([b, h, bq, dv], (&device, wide));
        for k0 in (0..tk).step_by(block_k) {
            let k1 = (k0 + block_k).min(tk);
            if mask.is_causal() && mask.key_offset + k0 > mask.query_offset + q1 - 1 {
                break; // every later key is in the future of every query of this block
            }
            let kb = k.clone().slice([0..b, 0..h, k0..k1, 0..d]);
            let vb = v.clone().slice([0..b, 0..h, k0..k1, 0..dv]);
            // [B, H, bq, D] x [B, H, D, bk] -> [B, H, bq, bk]
            let mut s = scores.cap(qb.clone().matmul(kb.swap_dims(2, 3)));
            if let Some(bias) = &mask.bias {
                s = s + tile(bias.clone(), q0..q1, k0..k1).cast(wide);
            }
            if let Some(mb) = &mask.masked {
                s = s.mask_fill(tile(mb.clone(), q0..q1, k0..k1), f32::NEG_INFINITY);
            }
            if let Some(rule) = mask.rule_tile(q0..q0 + bq, k0..k1, &device) {
                s = s.mask_fill(rule, f32::NEG_INFINITY);
            }
            let m_new = m.clone().max_pair(s.clone().max_dim(3));
            let p = (s - m_new.clone()).exp();
            let correction = (m - m_new.clone()).exp();
            l = l * correction.clone() + p.clone().sum_dim(3);
            acc = acc * correction + p.matmul(vb);
            m = m_new;
        }
        outputs.push(acc / l.clamp_min(f32::MIN_POSITIVE));
    }
    Ok(Tensor::cat(outputs, 2).cast(dtype))
}

/// The full `[T, T]` sliding-window mask (`true` = masked), for the reference path: the
/// [`Visibility`] rule with a window and global tokens.
pub fn sliding_window_mask(
    t: usize,
    window: usize,
    causal: bool,
    global: &[usize],
    device: &Device,
) -> Tensor<2, Bool> {
    Visibility {
        causal,
        window: Some(window),
        global: global.to_vec(),
    }
    .mask(0..t, 0..t, device)
}

/// Sliding-window (local) self-attention with optional global tokens (Beltagy et al.,
/// 2020, "Longformer"). Each block of `block` queries reads only the keys its window can
/// reach plus the global keys, so memory is `O(T·(W + G))`; global query rows attend to
/// every key they may see and are computed on their own.
///
/// Exact for its mask: equals [`attention_reference`] with [`sliding_window_mask`]. With
/// `window >= T` it is full attention.
///
/// # Shapes
/// - `q`, `k`: `[B, H, T, D]`, `v`: `[B, H, T, Dv]` -> `[B, H, T, Dv]`
///
/// # Errors
/// A zero window, shapes that do not fit, or queries and keys of different lengths.
pub fn attention_sliding_window(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    window: usize,
    causal: bool,
    global: &[usize],
    scale: impl Into<ScoreScale>,
    block: usize,
) -> Result<Tensor<4>> {
    let [b, h, t, tk] = check_qkv(&q, &k, &v, &Mask::none())?;
    if window == 0 {
        return Err(ConfigError::zero("window").into());
    }
    if t != tk {
        return Err(AttentionError::Unsupported(format!(
            "sliding-window self-attention needs as many keys as queries, got {t} and {tk}"
        )));
    }
    let d = q.dims()[3];
    let dv = v.dims()[3];
    let device = q.device();
    let scores = scale.into();
    let scale = scores.factor_for(d);
    let block = block.max(1);
    let mut global: Vec<usize> = global.iter().copied().filter(|&g| g < t).collect();
    global.sort_unstable();
    global.dedup();
    let rule = Visibility {
        causal,
        window: Some(window),
        global: global.clone(),
    };
    let mut outputs = Vec::with_capacity(t.div_ceil(block));
    for q0 in (0..t).step_by(block) {
        let q1 = (q0 + block).min(t);
        let lo = q0.saturating_sub(window.saturating_sub(1));
        let hi = if causal {
            q1
        } else {
            (q1 + window.saturating_sub(1)).min(t)
        };
        // Key positions read by this block: the local range plus global keys outside it.
        let mut keys: Vec<usize> = (lo..hi).collect();
        keys.extend(global.iter().copied().filter(|&g| g < lo || g >= hi));
        let idx = Tensor::<1, Int>::from_ints(
            keys.iter()
                .map(|&j| j as i64)
                .collect::<Vec<_>>()
                .as_slice(),
            &device,
        );
        let kb = k.clone().select(2, idx.clone()); // [B, H, nk, D]
        let vb = v.clone().select(2, idx); // [B, H, nk, Dv]
        let masked: Vec<bool> = (q0..q1)
            .flat_map(|i| keys.iter().map(move |&j| (i, j)))
            .map(|(i, j)| !rule.sees(i, j))
            .collect();
        let m =
            Tensor::<2, Bool>::from_data(TensorData::new(masked, [q1 - q0, keys.len()]), &device)
                .reshape([1, 1, q1 - q0, keys.len()]);
        let qb = q.clone().slice([0..b, 0..h, q0..q1, 0..d]);
        let s = scores.cap(qb.matmul(kb.swap_dims(2, 3)) * scale);
        let w = safe_softmax(s.mask_fill(m, f32::NEG_INFINITY));
        outputs.push(w.matmul(vb));
    }
    let mut out = Tensor::cat(outputs, 2);
    // Global queries see every key the rule allows: one full row each.
    for &g in &global {
        let qg = q.clone().slice([0..b, 0..h, g..g + 1, 0..d]);
        let mask = if causal {
            Mask::none().with_causal_offset(g)
        } else {
            Mask::none()
        };
        let row = attention_reference(qg, k.clone(), v.clone(), &mask, scores, None)?.0;
        out = out.slice_assign([0..b, 0..h, g..g + 1, 0..dv], row);
    }
    Ok(out)
}

/// The positive feature map of linear attention, `φ(x) = elu(x) + 1`.
fn feature_map(x: Tensor<4>) -> Tensor<4> {
    burn::tensor::activation::elu(x, 1.0) + 1.0
}

/// Linear attention (Katharopoulos et al., 2020): `softmax(q·k)` is replaced by the kernel
/// `φ(q)·φ(k)`, so `Σⱼ φ(kⱼ) vⱼᵀ` can be summed once and the cost is linear in length.
///
/// **An approximation**: it does not equal softmax attention and is not tested against it
/// for equality, only for its own definition. The causal form walks the sequence in chunks
/// of `chunk` positions, carrying the running sums between chunks; query `i` and key `i`
/// are the same position, so it needs as many queries as keys.
///
/// # Shapes
/// - `q`: `[B, H, Tq, D]`, `k`: `[B, H, Tk, D]`, `v`: `[B, H, Tk, Dv]` -> `[B, H, Tq, Dv]`
/// - `key_padding`: `[B, Tk]`, `true` at keys to ignore.
///
/// # Errors
/// Shapes that do not fit, a padding mask of the wrong shape, or causal attention with
/// `Tq != Tk`.
pub fn attention_linear(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: bool,
    key_padding: Option<Tensor<2, Bool>>,
    chunk: usize,
) -> Result<Tensor<4>> {
    let [b, h, tq, tk] = check_qkv(&q, &k, &v, &Mask::none())?;
    if causal && tq != tk {
        return Err(AttentionError::Unsupported(format!(
            "causal linear attention needs as many queries as keys, got {tq} and {tk}"
        )));
    }
    let d = q.dims()[3];
    let dv = v.dims()[3];
    let device = q.device();
    let fq = feature_map(q);
    let mut fk = feature_map(k);
    if let Some(pad) = key_padding {
        crate::error::check_shape(
            "linear attention padding",
            &pad.dims(),
            &[Some(b), Some(tk)],
        )?;
        // [B, Tk] -> [B, 1, Tk, 1]: padded keys contribute nothing to either sum.
        let keep = pad.bool_not().float().reshape([b, 1, tk, 1]);
        fk = fk * keep;
    }
    if !causal {
        // [B, H, D, Tk] x [B, H, Tk, Dv] -> [B, H, D, Dv]
        let kv = fk.clone().swap_dims(2, 3).matmul(v);
        let z = fk.sum_dim(2); // [B, H, 1, D]
        let num = fq.clone().matmul(kv); // [B, H, Tq, Dv]
        let den = fq.matmul(z.swap_dims(2, 3)); // [B, H, Tq, 1]
        return Ok(num / den.clamp_min(f32::MIN_POSITIVE));
    }
    let chunk = chunk.max(1);
    let rule = Visibility::causal();
    let mut state = Tensor::<4>::zeros([b, h, d, dv], &device);
    let mut zsum = Tensor::<4>::zeros([b, h, 1, d], &device);
    let mut outputs = Vec::new();
    for c0 in (0..tq).step_by(chunk) {
        let c1 = (c0 + chunk).min(tq);
        let n = c1 - c0;
        let qc = fq.clone().slice([0..b, 0..h, c0..c1, 0..d]);
        let kc = fk.clone().slice([0..b, 0..h, c0..c1, 0..d]);
        let vc = v.clone().slice([0..b, 0..h, c0..c1, 0..dv]);
        // Within the chunk: φ(q) φ(k)ᵀ with future keys zeroed. [B, H, n, n]
        let future = rule
            .mask(c0..c0 + n, c0..c0 + n, &device)
            .reshape([1, 1, n, n]);
        let a = qc
            .clone()
            .matmul(kc.clone().swap_dims(2, 3))
            .mask_fill(future, 0.0);
        let num = a.clone().matmul(vc.clone()) + qc.clone().matmul(state.clone());
        let den = a.sum_dim(3) + qc.matmul(zsum.clone().swap_dims(2, 3));
        outputs.push(num / den.clamp_min(f32::MIN_POSITIVE));
        state = state + kc.clone().swap_dims(2, 3).matmul(vc);
        zsum = zsum + kc.sum_dim(2);
    }
    Ok(Tensor::cat(outputs, 2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::padding_mask_from_lengths;
    use burn::tensor::Distribution;
    use zoo_device::test_device;
    use zoo_device::testing::{assert_close, max_abs_diff};

    fn qkv(
        b: usize,
        h: usize,
        tq: usize,
        tk: usize,
        d: usize,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        qkv_on(b, h, tq, tk, d, &test_device())
    }

    fn qkv_on(
        b: usize,
        h: usize,
        tq: usize,
        tk: usize,
        d: usize,
        dev: &Device,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let dev = dev.clone();
        dev.seed(7);
        let n = Distribution::Normal(0.0, 1.0);
        (
            Tensor::random([b, h, tq, d], n, &dev),
            Tensor::random([b, h, tk, d], n, &dev),
            Tensor::random([b, h, tk, d], n, &dev),
        )
    }

    #[test]
    fn reference_matches_hand_computation() {
        let dev = test_device();
        // One head, one query, two keys: scores [1, 0] / sqrt(1) -> weights [e/(e+1), 1/(e+1)].
        let q = Tensor::<4>::from_floats([[[[1.0]]]], &dev);
        let k = Tensor::<4>::from_floats([[[[1.0], [0.0]]]], &dev);
        let v = Tensor::<4>::from_floats([[[[10.0], [20.0]]]], &dev);
        let (out, w) = attention_reference(q, k, v, &Mask::none(), None, None).unwrap();
        let e = std::f32::consts::E;
        let w0 = e / (e + 1.0);
        let w = w.into_data().try_to_vec::<f32>().unwrap();
        assert!((w[0] - w0).abs() < 1e-6 && (w[1] - (1.0 - w0)).abs() < 1e-6);
        let out = out.into_data().try_to_vec::<f32>().unwrap()[0];
        assert!((out - (10.0 * w0 + 20.0 * (1.0 - w0))).abs() < 1e-4);
    }

    #[test]
    fn fused_equals_reference() {
        // On the plain device and under autodiff, which reach different kernels on libtorch.
        let plain = test_device();
        for dev in [plain.clone(), plain.autodiff()] {
            let (q, k, v) = qkv_on(2, 3, 7, 7, 8, &dev);
            assert_eq!(q.device().is_autodiff(), dev.is_autodiff());
            let pad = padding_mask_from_lengths(&[7, 4], 7, &dev);
            // Row 1 left-padded: under the causal rule its first three queries see no key.
            let left = padding_mask_from_lengths(&[7, 7], 7, &dev)
                .slice_assign([1..2, 0..3], Tensor::<2, Bool>::full([1, 3], true, &dev));
            for mask in [
                Mask::none(),
                Mask::causal(),
                Mask::none().with_key_padding(pad.clone()),
                Mask::causal().with_key_padding(pad.clone()),
                Mask::causal().with_key_padding(left),
            ] {
                let (r, _) =
                    attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None)
                        .unwrap();
                let f = attention_fused(q.clone(), k.clone(), v.clone(), &mask, None).unwrap();
                assert_close(&f, &r, 1e-5);
            }
            // Negative control: the causal output is not the unmasked one.
            let causal = attention_fused(q.clone(), k.clone(), v.clone(), &Mask::causal(), None);
            let full = attention_fused(q.clone(), k.clone(), v.clone(), &Mask::none(), None);
            assert!(max_abs_diff(&causal.unwrap(), &full.unwrap()) > 1e-2);
        }
    }

    /// A soft cap bounds the scores the same way on every path: the reference path
    /// computes `softmax(cap · tanh(s / cap))` by its formula, and the fused, chunked and
    /// sliding-window paths equal it, on the plain device and under autodiff.
    #[test]
    fn a_soft_cap_is_applied_alike_by_every_path() {
        let plain = test_device();
        for dev in [plain.clone(), plain.autodiff()] {
            let (q, k, v) = qkv_on(2, 3, 7, 7, 8, &dev);
            // Scores of several units, so a cap of 1.5 changes them a lot.
            let q = q * 4.0;
            let capped = ScoreScale::from(None).with_softcap(Some(1.5));
            let pad = padding_mask_from_lengths(&[7, 4], 7, &dev);
            for mask in [
                Mask::none(),
                Mask::causal(),
                Mask::causal().with_key_padding(pad.clone()),
                Mask::causal().with_window(3, &[]),
            ] {
                let (r, w) =
                    attention_reference(q.clone(), k.clone(), v.clone(), &mask, capped, None)
                        .unwrap();
                let s = q.clone().matmul(k.clone().swap_dims(2, 3)) / 8f32.sqrt();
                let s = (s / 1.5).tanh() * 1.5;
                let s = match mask.materialize([2, 3, 7, 7], &dev) {
                    Some(m) => s.mask_fill(m, f32::NEG_INFINITY),
                    None => s,
                };
                let want = safe_softmax(s);
                assert_close(&w, &want, 1e-5);
                let f = attention_fused(q.clone(), k.clone(), v.clone(), &mask, capped).unwrap();
                assert_close(&f, &r, 1e-5);
                let c = attention_chunked(q.clone(), k.clone(), v.clone(), &mask, capped, 3, 2)
                    .unwrap();
                assert_close(&c, &r, 1e-5);
                // Negative control: the uncapped output is another.
                let (u, _) =
                    attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None)
                        .unwrap();
                assert!(max_abs_diff(&u, &r) > 1e-2);
            }
            let window = Mask::causal().with_window(3, &[]);
            let (r, _) =
                attention_reference(q.clone(), k.clone(), v.clone(), &window, capped, None)
                    .unwrap();
            let sw =
                attention_sliding_window(q.clone(), k.clone(), v.clone(), 3, true, &[], capped, 2)
                    .unwrap();
            assert_close(&sw, &r, 1e-5);
        }
    }

    #[test]
    fn libtorch_gets_the_mask_inverted_and_the_rest_as_burn_defines_it() {
        let plain = test_device();
        let hidden = [false, true, false];
        for dev in [plain.clone(), plain.autodiff()] {
            let m =
                Tensor::<4, Bool>::from_data(TensorData::new(hidden.to_vec(), [1, 1, 1, 3]), &dev);
            let (mask, bias, causal) =
                kernel_masks(&dev, Some(m.clone()), Some(&m), None, false, [1, 1, 1, 3]);
            assert!(!causal);
            match (zoo_device::is_libtorch(&dev), dev.is_autodiff()) {
                (true, false) => {
                    assert!(bias.is_none());
                    // torch's "may attend": the negation of Burn's "hidden".
                    assert_eq!(
                        zoo_device::testing::bools(mask.unwrap()),
                        [true, false, true]
                    );
                }
                (true, true) => {
                    assert!(mask.is_none());
                    let b = zoo_device::testing::floats(bias.unwrap());
                    assert!(b[0] == 0.0 && b[2] == 0.0 && b[1] < -1e30, "{b:?}");
                }
                (false, _) => {
                    assert!(bias.is_none());
                    assert_eq!(zoo_device::testing::bools(mask.unwrap()), hidden);
                }
            }
        }
    }

    #[test]
    fn fully_masked_row_is_zero_not_nan() {
        let (q, k, v) = qkv(1, 2, 3, 4, 4);
        let dev = q.device();
        let pad = padding_mask_from_lengths(&[0], 4, &dev); // every key is padding
        let mask = Mask::none().with_key_padding(pad);
        let (r, w) =
            attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None).unwrap();
        let f = attention_fused(q.clone(), k.clone(), v.clone(), &mask, None).unwrap();
        let c = attention_chunked(q, k, v, &mask, None, 2, 2).unwrap();
        for t in [r, w, f, c] {
            let vals = t.into_data().try_to_vec::<f32>().unwrap();
            assert!(vals.iter().all(|x| *x == 0.0), "{vals:?}");
        }
    }

    #[test]
    fn chunked_equals_reference_for_any_block_size() {
        let (q, k, v) = qkv(2, 2, 13, 13, 8);
        let dev = q.device();
        let bias = Tensor::<4>::random([1, 2, 13, 13], Distribution::Normal(0.0, 1.0), &dev);
        let pad = padding_mask_from_lengths(&[13, 9], 13, &dev);
        for mask in [
            Mask::none(),
            Mask::causal(),
            Mask::causal().with_key_padding(pad).with_bias(bias),
        ] {
            let (r, _) =
                attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None).unwrap();
            // 13 is not a multiple of 4 or 5; 13 and 16 cover one block and a block past the end.
            for (bq, bk) in [(4, 4), (5, 3), (13, 13), (16, 16), (1, 7)] {
                let c = attention_chunked(q.clone(), k.clone(), v.clone(), &mask, None, bq, bk)
                    .unwrap();
                assert!(
                    max_abs_diff(&c, &r) < 1e-5,
                    "blocks {bq}x{bk}: {}",
                    max_abs_diff(&c, &r)
                );
            }
        }
    }

    #[test]
    fn chunked_with_cache_offset() {
        // Three new queries after five cached positions: keys cover 0..8.
        let (q, k, v) = qkv(1, 2, 3, 8, 4);
        let mask = Mask::none().with_causal_offset(5);
        let (r, _) =
            attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None).unwrap();
        let c = attention_chunked(q.clone(), k.clone(), v.clone(), &mask, None, 2, 3).unwrap();
        let f = attention_fused(q, k, v, &mask, None).unwrap();
        assert!(max_abs_diff(&c, &r) < 1e-5);
        assert!(max_abs_diff(&f, &r) < 1e-5);
    }

    #[test]
    fn sliding_window_equals_masked_reference() {
        let (q, k, v) = qkv(1, 2, 11, 11, 4);
        let dev = q.device();
        for (window, causal, global) in [
            (3, true, vec![]),
            (3, false, vec![]),
            (2, false, vec![0, 5]),
            (4, true, vec![0]),
        ] {
            let m = sliding_window_mask(11, window, causal, &global, &dev).reshape([1, 1, 11, 11]);
            let (r, _) = attention_reference(
                q.clone(),
                k.clone(),
                v.clone(),
                &Mask::none().with_bool(m),
                None,
                None,
            )
            .unwrap();
            let s = attention_sliding_window(
                q.clone(),
                k.clone(),
                v.clone(),
                window,
                causal,
                &global,
                None,
                4,
            )
            .unwrap();
            assert!(
                max_abs_diff(&s, &r) < 1e-5,
                "window {window} causal {causal} global {global:?}: {}",
                max_abs_diff(&s, &r)
            );
        }
    }

    #[test]
    fn window_as_long_as_sequence_is_full_attention() {
        let (q, k, v) = qkv(1, 2, 9, 9, 4);
        for causal in [false, true] {
            let mask = if causal { Mask::causal() } else { Mask::none() };
            let (r, _) =
                attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None).unwrap();
            let s =
                attention_sliding_window(q.clone(), k.clone(), v.clone(), 9, causal, &[], None, 4)
                    .unwrap();
            assert!(max_abs_diff(&s, &r) < 1e-5);
        }
    }

    #[test]
    fn linear_attention_matches_its_definition() {
        let (q, k, v) = qkv(1, 1, 6, 6, 3);
        let fq = feature_map(q.clone());
        let fk = feature_map(k.clone());
        // Direct O(T²) evaluation of sum_j φ(q_i)·φ(k_j) v_j / sum_j φ(q_i)·φ(k_j).
        let a = fq.matmul(fk.swap_dims(2, 3)); // [1, 1, 6, 6]
        for causal in [false, true] {
            let a = if causal {
                a.clone().mask_fill(
                    Visibility::causal()
                        .mask(0..6, 0..6, &q.device())
                        .reshape([1, 1, 6, 6]),
                    0.0,
                )
            } else {
                a.clone()
            };
            let expected = a.clone().matmul(v.clone()) / a.sum_dim(3);
            for chunk in [1, 4, 6] {
                let got =
                    attention_linear(q.clone(), k.clone(), v.clone(), causal, None, chunk).unwrap();
                assert!(
                    max_abs_diff(&got, &expected) < 1e-4,
                    "causal {causal} chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn a_row_hidden_by_a_bias_is_zero_on_every_path() {
        let (q, k, v) = qkv(1, 2, 3, 4, 4);
        let dev = q.device();
        // Row 1 of every head: all keys at -inf through the additive bias alone.
        let mut bias = vec![0.0f32; 3 * 4];
        bias[4..8].fill(f32::NEG_INFINITY);
        let bias = Tensor::<1>::from_floats(bias.as_slice(), &dev).reshape([1, 1, 3, 4]);
        for mask in [
            Mask::none().with_bias(bias.clone()),
            Mask::causal().with_bias(bias),
        ] {
            let (r, _) =
                attention_reference(q.clone(), k.clone(), v.clone(), &mask, None, None).unwrap();
            let f = attention_fused(q.clone(), k.clone(), v.clone(), &mask, None).unwrap();
            let c = attention_chunked(q.clone(), k.clone(), v.clone(), &mask, None, 2, 2).unwrap();
            for out in [&r, &f, &c] {
                let row = out.clone().slice([0..1, 0..2, 1..2, 0..4]);
                let vals = row.into_data().try_to_vec::<f32>().unwrap();
                assert!(vals.iter().all(|x| *x == 0.0), "{vals:?}");
            }
            assert_close(&f, &r, 1e-5);
            assert_close(&c, &r, 1e-5);
        }
    }

    #[test]
    fn causal_global_tokens_do_not_leak_the_future() {
        // Causal, window 4, global [5]: query 0 must not see key 5. Changing key 5 and
        // value 5 must leave queries 0..5 unchanged.
        let (q, k, v) = qkv(1, 1, 9, 9, 4);
        let dev = q.device();
        let bump = Tensor::<4>::ones([1, 1, 1, 4], &dev) * 5.0;
        let k2 = k
            .clone()
            .slice_assign([0..1, 0..1, 5..6, 0..4], bump.clone());
        let v2 = v.clone().slice_assign([0..1, 0..1, 5..6, 0..4], bump);
        let a = attention_sliding_window(q.clone(), k, v, 4, true, &[5], None, 3).unwrap();
        let b = attention_sliding_window(q, k2, v2, 4, true, &[5], None, 3).unwrap();
        let early = |t: &Tensor<4>| t.clone().slice([0..1, 0..1, 0..5, 0..4]);
        let late = |t: &Tensor<4>| t.clone().slice([0..1, 0..1, 5..9, 0..4]);
        assert!(
            max_abs_diff(&early(&a), &early(&b)) < 1e-6,
            "the future leaked"
        );
        assert!(
            max_abs_diff(&late(&a), &late(&b)) > 1e-2,
            "key 5 must matter from 5 on"
        );
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let (q, k, v) = qkv(2, 2, 5, 7, 4);
        let dev = q.device();
        let e = attention_linear(q.clone(), k.clone(), v.clone(), true, None, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "causal linear attention needs as many queries as keys, got 5 and 7"
        );
        assert!(attention_linear(q.clone(), k.clone(), v.clone(), false, None, 4).is_ok());
        let wrong = Mask::none().with_key_padding(padding_mask_from_lengths(&[3, 3], 5, &dev));
        for e in [
            attention_reference(q.clone(), k.clone(), v.clone(), &wrong, None, None)
                .map(|_| ())
                .unwrap_err(),
            attention_fused(q.clone(), k.clone(), v.clone(), &wrong, None)
                .map(|_| ())
                .unwrap_err(),
            attention_chunked(q.clone(), k.clone(), v.clone(), &wrong, None, 2, 2)
                .map(|_| ())
                .unwrap_err(),
        ] {
            assert_eq!(
                e.to_string(),
                "attention mask: expected shape broadcastable to [2, 2, 5, 7], got [2, 1, 1, 5]"
            );
        }
        let e = attention_fused(
            q.clone(),
            k.clone().slice([0..1, 0..2, 0..7, 0..4]),
            v,
            &Mask::none(),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "attention keys: expected shape [2, 2, _, 4] (as the queries), got [1, 2, 7, 4]"
        );
        let e =
            attention_sliding_window(q.clone(), k.clone(), k, 3, true, &[], None, 2).unwrap_err();
        assert!(e.to_string().contains("as many keys as queries"), "{e}");
    }

    #[test]
    fn repeat_kv_maps_heads_in_groups() {
        let dev = test_device();
        let x = Tensor::<1>::from_floats([1.0, 2.0], &dev).reshape([1, 2, 1, 1]);
        let r = repeat_kv(x, 3).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(r, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    }
}
