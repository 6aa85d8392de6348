//! Scaled dot-product attention as one op forward and one op backward, in tiles, with
//! an online softmax: the `Tq × Tk` matrix of scores or weights is never held, in
//! inference or in training (FlashAttention, Dao et al., 2022; the backward's order of
//! loops as in FlashAttention-2, Dao, 2023).
//!
//! Burn 0.22.1 has a fused attention op, but its autodiff backend records it as its
//! composition (product, scale, mask, softmax, product), and that keeps the `[B, H, Tq,
//! Tk]` weights alive until the backward: attention memory in training is quadratic in
//! the length on every backend. Here, on flex in f32:
//!
//! - the forward walks each block of queries over the tiles of keys it can see, keeping
//!   per row the running maximum `m` and sum `l` of `exp(s - m)`, and saves only the
//!   output and each row's `lse = m + ln l`;
//! - the backward recomputes each tile's weights `P = exp(S - lse)` from the saved
//!   `lse`, and with `δ = rowsum(dO ∘ O)`:
//!   `dV = Pᵀ dO`, `dP = dO Vᵀ`, `dS = P ∘ (dP - δ)`, `dQ = c dS K`, `dK = c dSᵀ Q`
//!   (`c` the score factor; with a soft cap, `dS` is multiplied by `1 - tanh²` first);
//!   the bias's gradient, when it has one, is `dS` summed over its broadcast axes;
//! - which keys a query sees by position (causal, a window, offsets for a cache) is
//!   computed per row, and tiles that no query of a block sees are skipped: a causal
//!   attention does half the products.
//!
//! The products are `gemm`'s (flex's own matrix-product crate), read in place through
//! the inputs' strides; the output and the gradients are written as `[B, T, H, D]` in
//! memory (a `[B, H, T, D]` tensor with permuted strides), the layout the heads are
//! merged from, so the merge costs no copy.
//!
//! Dropout on the weights, when asked for, comes inside the op: the mask is a hash of
//! each weight's index and a seed ([`dropout_keeps`]), so the backward draws it again
//! tile by tile; the normaliser `l` sums the weights before the dropout, as
//! `dropout(softmax(s)) V` does.
//!
//! Rows that see no key at all give zeros, and no gradient.
//!
//! Elsewhere, in other float types, or with [`crate::enabled`] off, [`attention`] is
//! [`reference_attention`]: Burn's ops, the scores and weights materialised.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, backend_extension};
use burn::tensor::{Bool, DType, Tensor, TensorData};

/// What turns `Q Kᵀ` into scores and which keys each query sees by position.
///
/// Query `i` (absolute position `query_offset + i`) sees key `j` (absolute position
/// `key_offset + j`) when, with `p = query_offset + i` and `q = key_offset + j`:
/// `q <= p` if `causal`, and `|p - q| < window` if there is a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    /// The factor on `Q Kᵀ`.
    pub scale: f32,
    /// A soft cap `cap · tanh(s / cap)` on the scaled products, before the bias.
    pub softcap: Option<f32>,
    /// Queries never see later keys.
    pub causal: bool,
    /// Keys closer than this many positions are visible (itself included).
    pub window: Option<usize>,
    /// Absolute position of the first query.
    pub query_offset: usize,
    /// Absolute position of the first key.
    pub key_offset: usize,
    /// Dropout on the attention weights: each weight is zeroed with this probability
    /// and the rest scaled by `1 / (1 - dropout)` ([`dropout_keeps`]); 0 for none.
    pub dropout: f32,
    /// The seed of the dropout's mask.
    pub seed: u64,
}

impl Spec {
    /// Scores scaled by `scale`, every key visible.
    pub fn new(scale: f32) -> Self {
        Self {
            scale,
            softcap: None,
            causal: false,
            window: None,
            query_offset: 0,
            key_offset: 0,
            dropout: 0.0,
            seed: 0,
        }
    }

    /// The keys `lo..hi` (of `tk`) that query `i` sees.
    pub fn visible(&self, i: usize, tk: usize) -> (usize, usize) {
        let p = self.query_offset + i;
        let mut hi = if self.causal {
            (p + 1).saturating_sub(self.key_offset).min(tk)
        } else {
            tk
        };
        let mut lo = 0;
        if let Some(w) = self.window {
            lo = (p + 1).saturating_sub(w + self.key_offset);
            if !self.causal {
                hi = hi.min((p + w).saturating_sub(self.key_offset));
            }
        }
        (lo.min(hi), hi)
    }
}

/// Whether the dropout on the attention weights keeps weight `index` (the weight's index
/// in the row-major `[B, H, Tq, Tk]` weights) for the mask of `seed`: the element
/// `index` of a SplitMix64 stream started at `seed` (Steele, Lea and Flood, 2014), 32 of
/// its bits below `(1 - prob) · 2³²`. A function of the index, so the backward draws the
/// forward's mask again instead of keeping it.
#[inline]
pub fn dropout_keeps(seed: u64, index: u64, prob: f32) -> bool {
    let threshold = ((1.0 - f64::from(prob)) * 4_294_967_296.0).min(4_294_967_295.0) as u64;
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) & 0xFFFF_FFFF) < threshold
}

/// Burn's backend extension for attention with a backward of its own. Implemented for
/// flex, and for autodiff over it.
#[backend_extension(Flex: cfg(feature = "flex"), Autodiff: cfg(feature = "flex"))]
pub trait AttentionOps: Backend {
    /// `softmax(Q Kᵀ · scale (capped) + bias, by position) V`: `q` `[B, H, Tq, D]`,
    /// `k` `[B, H, Tk, D]`, `v` `[B, H, Tk, Dv]`, `bias` broadcastable to `[B, H, Tq, Tk]`
    /// (`[1, 1, 1, 1]` zero for none: Burn's extensions take no optional tensor).
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        spec: Spec,
    ) -> FloatTensor<Self>;
    /// The output and each query row's log-sum-exp `[B, H, Tq]` (`+inf` for a row that
    /// sees no key).
    fn flash_attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        spec: Spec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// The gradients of `q`, `k`, `v` and of the bias (zeros `[1, 1, 1, 1]` unless
    /// `bias_grad`), from the output `out`, its rows' `lse` and its gradient `grad`.
    #[allow(clippy::too_many_arguments)]
    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: Spec,
        bias_grad: bool,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    );
}

/// Whether [`attention`] runs the fused op for these inputs (flex, f32, kernels on):
/// the caller may prefer another path of its own where it does not.
pub fn fused_applies(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    bias: Option<&Tensor<4>>,
) -> bool {
    [q, k, v].iter().all(|t| t.dtype() == DType::F32)
        && bias.is_none_or(|b| b.dtype() == DType::F32)
        && crate::enabled()
        && crate::on_flex(q)
}

/// Checks the shapes of the inputs against each other.
fn check(q: &Tensor<4>, k: &Tensor<4>, v: &Tensor<4>, bias: Option<&Tensor<4>>) {
    let [b, h, tq, d] = q.dims();
    let [kb, kh, tk, kd] = k.dims();
    let [vb, vh, vt, _] = v.dims();
    assert!(
        (kb, kh, kd) == (b, h, d) && (vb, vh, vt) == (b, h, tk),
        "attention: q {:?}, k {:?} and v {:?} do not fit together",
        q.dims(),
        k.dims(),
        v.dims()
    );
    if let Some(bias) = bias {
        let full = [b, h, tq, tk];
        assert!(
            bias.dims().iter().zip(full).all(|(&n, f)| n == f || n == 1),
            "attention: a bias of shape {:?} does not broadcast to {full:?}",
            bias.dims()
        );
    }
}

/// `softmax(cap(Q Kᵀ · scale) + bias, by position) V`, `[B, H, Tq, Dv]`: one op forward
/// and one op backward on flex in f32 (`O(T)` memory beyond the inputs in training as in
/// inference), [`reference_attention`] elsewhere. Rows that see no key are zero.
///
/// # Panics
/// When the shapes do not fit together (`q` `[B, H, Tq, D]`, `k` `[B, H, Tk, D]`, `v`
/// `[B, H, Tk, Dv]`, `bias` broadcastable to `[B, H, Tq, Tk]`).
pub fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    bias: Option<Tensor<4>>,
    spec: Spec,
) -> Tensor<4> {
    check(&q, &k, &v, bias.as_ref());
    if fused_applies(&q, &k, &v, bias.as_ref()) {
        use burn::backend::Dispatch;
        let bias = bias.unwrap_or_else(|| Tensor::zeros([1, 1, 1, 1], &q.device()));
        return Tensor::from_dispatch(Dispatch::flash_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            bias.into_dispatch(),
            spec,
        ));
    }
    reference_attention(q, k, v, bias, spec)
}

/// The same attention from Burn's ops, the `[B, H, Tq, Tk]` scores and weights
/// materialised (and the dropout's mask, drawn on the host): the reference.
pub fn reference_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    bias: Option<Tensor<4>>,
    spec: Spec,
) -> Tensor<4> {
    check(&q, &k, &v, bias.as_ref());
    let [_, _, tq, _] = q.dims();
    let tk = k.dims()[2];
    let device = q.device();
    let mut s = q.matmul(k.swap_dims(2, 3)) * spec.scale;
    if let Some(cap) = spec.softcap {
        s = (s / cap).tanh() * cap;
    }
    if let Some(bias) = bias {
        s = s + bias;
    }
    let hidden: Vec<bool> = (0..tq)
        .flat_map(|i| {
            let (lo, hi) = spec.visible(i, tk);
            (0..tk).map(move |j| j < lo || j >= hi)
        })
        .collect();
    let hidden = Tensor::<2, Bool>::from_data(TensorData::new(hidden, [tq, tk]), &device);
    let dims = s.dims();
    let s = s.mask_fill(hidden.unsqueeze::<4>().expand(dims), f32::NEG_INFINITY);
    let max = s.clone().max_dim(3).clamp_min(f32::MIN);
    let e = (s - max).exp();
    let sum = e.clone().sum_dim(3).clamp_min(f32::MIN_POSITIVE);
    let weights = e / sum;
    if spec.dropout > 0.0 {
        let [b, h, _, _] = dims;
        let scale = 1.0 / (1.0 - spec.dropout);
        let mask: Vec<f32> = (0..(b * h * tq * tk) as u64)
            .map(|i| {
                if dropout_keeps(spec.seed, i, spec.dropout) {
                    scale
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::<4>::from_data(TensorData::new(mask, dims), &device);
        return (weights * mask).matmul(v);
    }
    weights.matmul(v)
}

// The tiles are products through raw pointers and strides (`gemm`'s interface), and
// the tasks write disjoint rows of shared outputs: the one module of the kernel that
// needs `unsafe`, each block with its reason.
#[allow(unsafe_code)]
#[cfg(feature = "flex")]
mod flex {
    use burn::backend::TensorMetadata;
    use burn::backend::flex::{Flex, FlexTensor, Layout};
    use burn::tensor::{Bytes, DType, Shape};
    use rayon::prelude::*;

    use super::{AttentionOps, Spec};
    use crate::math;

    /// Query rows per block.
    const BQ: usize = 64;
    /// Keys per tile.
    const BK: usize = 128;

    /// A read-only f32 tensor of four axes, read through its strides.
    #[derive(Clone, Copy)]
    struct View {
        ptr: *const f32,
        shape: [usize; 4],
        strides: [isize; 4],
    }

    // SAFETY: the views read tensors that outlive every task, and nothing writes them.
    unsafe impl Send for View {}
    unsafe impl Sync for View {}

    impl View {
        /// The view of `t`, an f32 tensor of four axes with no negative stride.
        fn of(t: &FlexTensor) -> Self {
            let layout = t.layout();
            let storage = t.storage::<f32>();
            let dims = layout.shape();
            let strides = layout.strides();
            // Broadcast axes (extent 1) read with stride 0: the same value at every index.
            let shape = [dims[0], dims[1], dims[2], dims[3]];
            let mut st = [0isize; 4];
            for a in 0..4 {
                st[a] = if shape[a] == 1 { 0 } else { strides[a] };
            }
            Self {
                // SAFETY: the start offset lies inside the storage.
                ptr: unsafe { storage.as_ptr().add(layout.start_offset()) },
                shape,
                strides: st,
            }
        }

        /// The address of `[b, h, i, 0]`, with axes of extent 1 broadcast.
        fn at(&self, b: usize, h: usize, i: usize) -> *const f32 {
            let off = b as isize * self.strides[0]
                + h as isize * self.strides[1]
                + i as isize * self.strides[2];
            // SAFETY: in bounds for the indices of the tensor's shape (or broadcast).
            unsafe { self.ptr.offset(off) }
        }
    }

    /// A tensor with no negative stride: `t`, or a contiguous copy.
    fn readable(t: FlexTensor) -> FlexTensor {
        assert_eq!(t.dtype(), DType::F32, "the attention kernel takes f32");
        assert_eq!(t.layout().num_dims(), 4, "attention tensors have four axes");
        if t.layout().strides().iter().all(|&s| s >= 0) {
            t
        } else {
            t.to_contiguous()
        }
    }

    /// A raw pointer to write disjoint parts of one buffer from several tasks.
    #[derive(Clone, Copy)]
    struct Out(*mut f32);
    // SAFETY: every task writes elements no other task writes.
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}

    impl Out {
        /// The pointer (a method, so that closures capture the `Send` wrapper).
        fn at(&self, i: usize) -> *mut f32 {
            // SAFETY: callers index inside the buffer.
            unsafe { self.0.add(i) }
        }
    }

    /// `dst = read_dst · dst + beta · lhs · rhs`, `m × n` from `m × k` and `k × n`, through
    /// (column, row) strides.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn gemm(
        (m, n, k): (usize, usize, usize),
        dst: *mut f32,
        (dst_cs, dst_rs): (isize, isize),
        read_dst: bool,
        lhs: *const f32,
        (lhs_cs, lhs_rs): (isize, isize),
        rhs: *const f32,
        (rhs_cs, rhs_rs): (isize, isize),
        beta: f32,
    ) {
        if m == 0 || n == 0 {
            return;
        }
        // SAFETY: the callers pass pointers valid for these sizes and strides.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst,
                dst_cs,
                dst_rs,
                read_dst,
                lhs,
                lhs_cs,
                lhs_rs,
                rhs,
                rhs_cs,
                rhs_rs,
                1.0,
                beta,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }

    /// The layout of a `[B, H, T, D]` tensor held as `[B, T, H, D]` in memory.
    fn heads_layout(b: usize, h: usize, t: usize, d: usize) -> Layout {
        let (h_, t_, d_) = (h as isize, t as isize, d as isize);
        Layout::new(
            Shape::from(vec![b, h, t, d]),
            vec![t_ * h_ * d_, d_, h_ * d_, 1],
            0,
        )
    }

    fn tensor(values: Vec<f32>, layout: Layout) -> FlexTensor {
        FlexTensor::new(Bytes::from_elems(values), layout, DType::F32)
    }

    /// The shapes of one call: `[B, H, Tq, Tk, D, Dv]`.
    fn dims(q: &View, k: &View, v: &View) -> [usize; 6] {
        let [b, h, tq, d] = q.shape;
        let [_, _, tk, _] = k.shape;
        [b, h, tq, tk, d, v.shape[3]]
    }

    /// One tile of scores, `rows × cols` at row stride `BK`: the products of queries
    /// `i0..` with keys `k0..` scaled and capped, the bias added and the keys each row
    /// may not see set to `-inf`. With a cap, `tanh` of each capped score is kept in
    /// `tanh_out` (for the backward).
    #[allow(clippy::too_many_arguments)]
    fn scores(
        s: &mut [f32],
        (q, k, bias): (&View, &View, Option<&View>),
        (b, h): (usize, usize),
        (i0, rows): (usize, usize),
        (k0, cols): (usize, usize),
        spec: &Spec,
        tk: usize,
        mut tanh_out: Option<&mut [f32]>,
    ) {
        let d = q.shape[3];
        gemm(
            (rows, cols, d),
            s.as_mut_ptr(),
            (1, BK as isize),
            false,
            q.at(b, h, i0),
            (q.strides[3], q.strides[2]),
            k.at(b, h, k0),
            (k.strides[2], k.strides[3]),
            spec.scale,
        );
        for r in 0..rows {
            let row = &mut s[r * BK..r * BK + cols];
            if let Some(cap) = spec.softcap {
                let t_row = tanh_out
                    .as_deref_mut()
                    .map(|t| &mut t[r * BK..r * BK + cols]);
                match t_row {
                    Some(t_row) => {
                        for (x, t) in row.iter_mut().zip(t_row) {
                            *t = (*x / cap).tanh();
                            *x = cap * *t;
                        }
                    }
                    None => {
                        for x in row.iter_mut() {
                            *x = cap * (*x / cap).tanh();
                        }
                    }
                }
            }
            if let Some(bias) = bias {
                let p = bias.at(b, h, i0 + r);
                let sj = bias.strides[3];
                for (j, x) in row.iter_mut().enumerate() {
                    // SAFETY: key k0 + j is inside the bias's last axis (or it broadcasts).
                    *x += unsafe { *p.offset((k0 + j) as isize * sj) };
                }
            }
            let (lo, hi) = spec.visible(i0 + r, tk);
            let lo = lo.clamp(k0, k0 + cols) - k0;
            let hi = hi.clamp(k0, k0 + cols) - k0;
            row[..lo].fill(f32::NEG_INFINITY);
            row[hi.max(lo)..].fill(f32::NEG_INFINITY);
        }
    }

    /// The tiles of keys that query rows `i0..i1` may see: `(k0, cols)` pairs.
    fn key_tiles(
        spec: &Spec,
        i0: usize,
        i1: usize,
        tk: usize,
    ) -> impl Iterator<Item = (usize, usize)> {
        let lo = spec.visible(i0, tk).0;
        let hi = spec.visible(i1 - 1, tk).1;
        (lo..hi).step_by(BK).map(move |k0| (k0, BK.min(hi - k0)))
    }

    /// Multiplies a tile (`rows × cols` at row stride `BK`, queries `i0..`, keys `k0..`
    /// of head `head` of batch row `bi`) by the dropout's mask and scale.
    fn dropout_tile(
        t: &mut [f32],
        (rows, cols): (usize, usize),
        (bi, head, i0, k0): (usize, usize, usize, usize),
        (h, tq, tk): (usize, usize, usize),
        spec: &Spec,
    ) {
        let scale = 1.0 / (1.0 - spec.dropout);
        for r in 0..rows {
            let base = (((bi * h + head) * tq + i0 + r) * tk + k0) as u64;
            for (j, x) in t[r * BK..r * BK + cols].iter_mut().enumerate() {
                *x = if super::dropout_keeps(spec.seed, base + j as u64, spec.dropout) {
                    *x * scale
                } else {
                    0.0
                };
            }
        }
    }

    /// The forward: the output as `[B, T, H, Dv]` in memory, and `lse` `[B, H, Tq]`.
    fn forward(
        q: &FlexTensor,
        k: &FlexTensor,
        v: &FlexTensor,
        bias: Option<&FlexTensor>,
        spec: &Spec,
    ) -> (FlexTensor, FlexTensor) {
        let (qv, kv, vv) = (View::of(q), View::of(k), View::of(v));
        let bv = bias.map(View::of);
        let [b, h, tq, tk, _, dv] = dims(&qv, &kv, &vv);
        let mut out = vec![0.0f32; b * tq * h * dv];
        let mut lse = vec![f32::INFINITY; b * h * tq];
        let blocks = tq.div_ceil(BQ);
        let (out_ptr, lse_ptr) = (Out(out.as_mut_ptr()), Out(lse.as_mut_ptr()));
        (0..b * h * blocks).into_par_iter().for_each_init(
            || (vec![0.0f32; BQ * BK], vec![0.0f32; BQ * dv]),
            |(s, acc), task| {
                let (bh, blk) = (task / blocks, task % blocks);
                let (bi, head) = (bh / h, bh % h);
                let i0 = blk * BQ;
                let rows = BQ.min(tq - i0);
                let (mut m, mut l, mut corr) = ([f32::MIN; BQ], [0.0f32; BQ], [0.0f32; BQ]);
                acc[..rows * dv].fill(0.0);
                for (k0, cols) in key_tiles(spec, i0, i0 + rows, tk) {
                    scores(
                        s,
                        (&qv, &kv, bv.as_ref()),
                        (bi, head),
                        (i0, rows),
                        (k0, cols),
                        spec,
                        tk,
                        None,
                    );
                    math::online_softmax(
                        s,
                        BK,
                        cols,
                        &mut m[..rows],
                        &mut l[..rows],
                        &mut corr[..rows],
                    );
                    for (r, c) in corr[..rows].iter().enumerate() {
                        if *c != 1.0 {
                            acc[r * dv..(r + 1) * dv].iter_mut().for_each(|a| *a *= c);
                        }
                    }
                    if spec.dropout > 0.0 {
                        dropout_tile(s, (rows, cols), (bi, head, i0, k0), (h, tq, tk), spec);
                    }
                    gemm(
                        (rows, dv, cols),
                        acc.as_mut_ptr(),
                        (1, dv as isize),
                        true,
                        s.as_ptr(),
                        (1, BK as isize),
                        vv.at(bi, head, k0),
                        (vv.strides[3], vv.strides[2]),
                        1.0,
                    );
                }
                for r in 0..rows {
                    let i = i0 + r;
                    let inv = if l[r] > 0.0 { 1.0 / l[r] } else { 0.0 };
                    // SAFETY: row i of this head of batch row bi belongs to this task alone.
                    unsafe {
                        let o = out_ptr.at(((bi * tq + i) * h + head) * dv);
                        for c in 0..dv {
                            *o.add(c) = acc[r * dv + c] * inv;
                        }
                        *lse_ptr.at(bh * tq + i) = if l[r] > 0.0 {
                            m[r] + l[r].ln()
                        } else {
                            f32::INFINITY
                        };
                    }
                }
            },
        );
        (
            tensor(out, heads_layout(b, h, tq, dv)),
            tensor(lse, Layout::contiguous(Shape::from(vec![b, h, tq]))),
        )
    }

    /// The backward, one task per batch row and head.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        q: &FlexTensor,
        k: &FlexTensor,
        v: &FlexTensor,
        bias: Option<&FlexTensor>,
        out: &FlexTensor,
        lse: &FlexTensor,
        grad: &FlexTensor,
        spec: &Spec,
        bias_grad: bool,
    ) -> (FlexTensor, FlexTensor, FlexTensor, Option<FlexTensor>) {
        let (qv, kv, vv) = (View::of(q), View::of(k), View::of(v));
        let (ov, gv) = (View::of(out), View::of(grad));
        let bv = bias.map(View::of);
        let [b, h, tq, tk, d, dv] = dims(&qv, &kv, &vv);
        let lse = lse.to_contiguous();
        let lse = lse.as_slice::<f32>().expect("a contiguous f32 tensor");
        let mut dq = vec![0.0f32; b * tq * h * d];
        let mut dk = vec![0.0f32; b * tk * h * d];
        let mut dv_ = vec![0.0f32; b * tk * h * dv];
        let (dq_ptr, dk_ptr, dv_ptr) = (
            Out(dq.as_mut_ptr()),
            Out(dk.as_mut_ptr()),
            Out(dv_.as_mut_ptr()),
        );
        // The bias's gradient: one partial `[Tq|1, Tk|1]` per task where it broadcasts.
        let bshape = bv.map(|bv| bv.shape);
        let want_bias = bias_grad && bv.is_some();
        let tile_bias = bshape.map_or(0, |s| s[2] * s[3]);
        let partials: Vec<Vec<f32>> = (0..b * h)
            .into_par_iter()
            .map(|bh| {
                let (bi, head) = (bh / h, bh % h);
                let lse = &lse[bh * tq..(bh + 1) * tq];
                // δ_i = Σ dO_i O_i
                let delta: Vec<f32> = (0..tq)
                    .map(|i| {
                        let (o, g) = (ov.at(bi, head, i), gv.at(bi, head, i));
                        (0..dv)
                            .map(|c| {
                                // SAFETY: inside row i of the output and its gradient.
                                unsafe {
                                    *o.offset(c as isize * ov.strides[3])
                                        * *g.offset(c as isize * gv.strides[3])
                                }
                            })
                            .sum()
                    })
                    .collect();
                let mut dbias = vec![0.0f32; if want_bias { tile_bias } else { 0 }];
                let mut dq_acc = vec![0.0f32; tq * d];
                let mut dk_acc = vec![0.0f32; BK * d];
                let mut dv_acc = vec![0.0f32; BK * dv];
                let mut p = vec![0.0f32; BQ * BK];
                let mut dp = vec![0.0f32; BQ * BK];
                let mut pd = vec![0.0f32; if spec.dropout > 0.0 { BQ * BK } else { 0 }];
                let mut th = vec![0.0f32; if spec.softcap.is_some() { BQ * BK } else { 0 }];
                for k0 in (0..tk).step_by(BK) {
                    let cols = BK.min(tk - k0);
                    dk_acc.fill(0.0);
                    dv_acc.fill(0.0);
                    for i0 in (0..tq).step_by(BQ) {
                        let rows = BQ.min(tq - i0);
                        let klo = spec.visible(i0, tk).0;
                        let khi = spec.visible(i0 + rows - 1, tk).1;
                        if khi <= k0 || klo >= k0 + cols {
                            continue;
                        }
                        scores(
                            &mut p,
                            (&qv, &kv, bv.as_ref()),
                            (bi, head),
                            (i0, rows),
                            (k0, cols),
                            spec,
                            tk,
                            spec.softcap.map(|_| th.as_mut_slice()),
                        );
                        math::exp_shift_rows(&mut p, BK, cols, &lse[i0..i0 + rows]);
                        // The weights the values were multiplied by: P, or P with the
                        // dropout's mask (drawn again) and scale.
                        let dropped = if spec.dropout > 0.0 {
                            pd[..rows * BK].copy_from_slice(&p[..rows * BK]);
                            dropout_tile(
                                &mut pd,
                                (rows, cols),
                                (bi, head, i0, k0),
                                (h, tq, tk),
                                spec,
                            );
                            &pd
                        } else {
                            &p
                        };
                        // dV += Pᵀ dO
                        gemm(
                            (cols, dv, rows),
                            dv_acc.as_mut_ptr(),
                            (1, dv as isize),
                            true,
                            dropped.as_ptr(),
                            (BK as isize, 1),
                            gv.at(bi, head, i0),
                            (gv.strides[3], gv.strides[2]),
                            1.0,
                        );
                        // dP = dO Vᵀ
                        gemm(
                            (rows, cols, dv),
                            dp.as_mut_ptr(),
                            (1, BK as isize),
                            false,
                            gv.at(bi, head, i0),
                            (gv.strides[3], gv.strides[2]),
                            vv.at(bi, head, k0),
                            (vv.strides[2], vv.strides[3]),
                            1.0,
                        );
                        if spec.dropout > 0.0 {
                            // The gradient of the undropped weights.
                            dropout_tile(
                                &mut dp,
                                (rows, cols),
                                (bi, head, i0, k0),
                                (h, tq, tk),
                                spec,
                            );
                        }
                        math::softmax_grad_rows(&p, &mut dp, BK, cols, &delta[i0..i0 + rows]);
                        if want_bias {
                            let [_, _, bq_, bk_] = bshape.expect("a bias");
                            for r in 0..rows {
                                let bi_ = if bq_ == 1 { 0 } else { i0 + r };
                                for j in 0..cols {
                                    let bj = if bk_ == 1 { 0 } else { k0 + j };
                                    dbias[bi_ * bk_ + bj] += dp[r * BK + j];
                                }
                            }
                        }
                        if spec.softcap.is_some() {
                            for r in 0..rows {
                                for j in 0..cols {
                                    let t = th[r * BK + j];
                                    dp[r * BK + j] *= 1.0 - t * t;
                                }
                            }
                        }
                        // dQ += c dS K
                        gemm(
                            (rows, d, cols),
                            dq_acc[i0 * d..].as_mut_ptr(),
                            (1, d as isize),
                            true,
                            dp.as_ptr(),
                            (1, BK as isize),
                            kv.at(bi, head, k0),
                            (kv.strides[3], kv.strides[2]),
                            spec.scale,
                        );
                        // dK += c dSᵀ Q
                        gemm(
                            (cols, d, rows),
                            dk_acc.as_mut_ptr(),
                            (1, d as isize),
                            true,
                            dp.as_ptr(),
                            (BK as isize, 1),
                            qv.at(bi, head, i0),
                            (qv.strides[3], qv.strides[2]),
                            spec.scale,
                        );
                    }
                    // SAFETY: keys k0.. of head `head` of batch row bi belong to this task.
                    unsafe {
                        for j in 0..cols {
                            let at = ((bi * tk + k0 + j) * h + head) * d;
                            std::ptr::copy_nonoverlapping(
                                dk_acc[j * d..].as_ptr(),
                                dk_ptr.at(at),
                                d,
                            );
                            let at = ((bi * tk + k0 + j) * h + head) * dv;
                            std::ptr::copy_nonoverlapping(
                                dv_acc[j * dv..].as_ptr(),
                                dv_ptr.at(at),
                                dv,
                            );
                        }
                    }
                }
                // SAFETY: the queries of this head of batch row bi belong to this task.
                unsafe {
                    for i in 0..tq {
                        let at = ((bi * tq + i) * h + head) * d;
                        std::ptr::copy_nonoverlapping(dq_acc[i * d..].as_ptr(), dq_ptr.at(at), d);
                    }
                }
                dbias
            })
            .collect();
        let dbias = want_bias.then(|| {
            let [bb, bh_, bq_, bk_] = bshape.expect("a bias");
            let mut sum = vec![0.0f32; bb * bh_ * bq_ * bk_];
            for (task, part) in partials.iter().enumerate() {
                let (bi, hi) = (task / h, task % h);
                let at = ((if bb == 1 { 0 } else { bi }) * bh_ + if bh_ == 1 { 0 } else { hi })
                    * bq_
                    * bk_;
                for (a, p) in sum[at..at + bq_ * bk_].iter_mut().zip(part) {
                    *a += p;
                }
            }
            tensor(
                sum,
                Layout::contiguous(Shape::from(vec![bb, bh_, bq_, bk_])),
            )
        });
        (
            tensor(dq, heads_layout(b, h, tq, d)),
            tensor(dk, heads_layout(b, h, tk, d)),
            tensor(dv_, heads_layout(b, h, tk, dv)),
            dbias,
        )
    }

    /// The bias, or `None` for the single zero that stands for no bias.
    fn real_bias(bias: FlexTensor) -> Option<FlexTensor> {
        let bias = readable(bias);
        let dummy = bias.layout().num_elements() == 1
            && bias
                .to_contiguous()
                .as_slice::<f32>()
                .is_some_and(|v| v[0] == 0.0);
        (!dummy).then_some(bias)
    }

    impl AttentionOps for Flex {
        fn flash_attention(
            q: FlexTensor,
            k: FlexTensor,
            v: FlexTensor,
            bias: FlexTensor,
            spec: Spec,
        ) -> FlexTensor {
            Self::flash_attention_forward(q, k, v, bias, spec).0
        }

        fn flash_attention_forward(
            q: FlexTensor,
            k: FlexTensor,
            v: FlexTensor,
            bias: FlexTensor,
            spec: Spec,
        ) -> (FlexTensor, FlexTensor) {
            let (q, k, v) = (readable(q), readable(k), readable(v));
            forward(&q, &k, &v, real_bias(bias).as_ref(), &spec)
        }

        fn flash_attention_backward(
            q: FlexTensor,
            k: FlexTensor,
            v: FlexTensor,
            bias: FlexTensor,
            out: FlexTensor,
            lse: FlexTensor,
            grad: FlexTensor,
            spec: Spec,
            bias_grad: bool,
        ) -> (FlexTensor, FlexTensor, FlexTensor, FlexTensor) {
            let (q, k, v) = (readable(q), readable(k), readable(v));
            let (out, grad) = (readable(out), readable(grad));
            assert_eq!(
                grad.shape(),
                out.shape(),
                "attention's gradient has the output's shape"
            );
            let (dq, dk, dv, dbias) = backward(
                &q,
                &k,
                &v,
                real_bias(bias).as_ref(),
                &out,
                &lse,
                &grad,
                &spec,
                bias_grad,
            );
            let dbias = dbias.unwrap_or_else(|| {
                // No gradient asked for, or the zero that stands for no bias.
                tensor(vec![0.0], Layout::contiguous(Shape::from(vec![1, 1, 1, 1])))
            });
            (dq, dk, dv, dbias)
        }
    }

    mod autodiff {
        use burn::backend::Backend;
        use burn::backend::autodiff::Autodiff;
        use burn::backend::autodiff::checkpoint::base::Checkpointer;
        use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
        use burn::backend::autodiff::grads::Gradients;
        use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
        use burn::backend::tensor::FloatTensor;

        use super::super::{AttentionOps, Spec};

        #[derive(Debug)]
        struct AttentionBackward {
            spec: Spec,
        }

        /// What the backward keeps: the inputs, the output and its rows' `lse`.
        type Saved<B> = (
            FloatTensor<B>,
            FloatTensor<B>,
            FloatTensor<B>,
            FloatTensor<B>,
            FloatTensor<B>,
            FloatTensor<B>,
        );

        /// Four parents: the queries, keys, values and the bias.
        impl<B: Backend + AttentionOps> Backward<B, 4> for AttentionBackward {
            type State = Saved<B>;

            fn backward(
                self,
                ops: Ops<Self::State, 4>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let (q, k, v, bias, out, lse) = ops.state;
                let grad = grads.consume::<B>(&ops.node);
                let [nq, nk, nv, nb] = ops.parents;
                let (dq, dk, dv, dbias) = B::flash_attention_backward(
                    q,
                    k,
                    v,
                    bias,
                    out,
                    lse,
                    grad,
                    self.spec,
                    nb.is_some(),
                );
                for (node, g) in [(nq, dq), (nk, dk), (nv, dv), (nb, dbias)] {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }

        impl<B: Backend + AttentionOps, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
            fn flash_attention(
                q: FloatTensor<Self>,
                k: FloatTensor<Self>,
                v: FloatTensor<Self>,
                bias: FloatTensor<Self>,
                spec: Spec,
            ) -> FloatTensor<Self> {
                match (AttentionBackward { spec })
                    .prepare::<C>([q.node(), k.node(), v.node(), bias.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => {
                        let (qp, kp, vp, bp) = (
                            q.primitive().clone(),
                            k.primitive().clone(),
                            v.primitive().clone(),
                            bias.primitive().clone(),
                        );
                        let (out, lse) = B::flash_attention_forward(
                            qp.clone(),
                            kp.clone(),
                            vp.clone(),
                            bp.clone(),
                            spec,
                        );
                        prep.finish((qp, kp, vp, bp, out.clone(), lse), out)
                    }
                    OpsKind::UnTracked(prep) => prep.finish(B::flash_attention(
                        q.into_primitive(),
                        k.into_primitive(),
                        v.into_primitive(),
                        bias.into_primitive(),
                        spec,
                    )),
                }
            }

            fn flash_attention_forward(
                _q: FloatTensor<Self>,
                _k: FloatTensor<Self>,
                _v: FloatTensor<Self>,
                _bias: FloatTensor<Self>,
                _spec: Spec,
            ) -> (FloatTensor<Self>, FloatTensor<Self>) {
                unreachable!("the forward that keeps lse runs on the inner backend")
            }

            fn flash_attention_backward(
                _q: FloatTensor<Self>,
                _k: FloatTensor<Self>,
                _v: FloatTensor<Self>,
                _bias: FloatTensor<Self>,
                _out: FloatTensor<Self>,
                _lse: FloatTensor<Self>,
                _grad: FloatTensor<Self>,
                _spec: Spec,
                _bias_grad: bool,
            ) -> (
                FloatTensor<Self>,
                FloatTensor<Self>,
                FloatTensor<Self>,
                FloatTensor<Self>,
            ) {
                unreachable!("the backward runs on the inner backend, inside autodiff's backward")
            }
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use crate::testing::{host, max_rel};
    use burn::tensor::{Device, Tensor, TensorData};

    use super::{Spec, attention, reference_attention};

    /// Values in [-amp, amp) from a hash of the index and `seed`: the same inputs at every
    /// run, whatever other tests draw from the device's generator at the same time.
    fn hashed(n: usize, seed: u64, amp: f32) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let mut x = (i ^ (seed << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                x ^= x >> 29;
                x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                x ^= x >> 32;
                ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
            })
            .collect()
    }

    /// A `[B, H, T, D]` tensor read through the strides of a `[B, T, H, D]` buffer, as
    /// the heads are split in the models.
    fn heads(shape: [usize; 4], seed: u64, device: &Device) -> Tensor<4> {
        let [b, h, t, d] = shape;
        let data = TensorData::new(hashed(b * h * t * d, seed, 2.0), [b, t, h, d]);
        Tensor::<4>::from_data(data, device).swap_dims(1, 2)
    }

    struct Case {
        b: usize,
        h: usize,
        tq: usize,
        tk: usize,
        d: usize,
        dv: usize,
        spec: Spec,
        bias: Option<[usize; 4]>,
    }

    /// Output and the gradients of q, k, v (and the bias), fused or reference, for
    /// `sum(out ∘ w)`.
    fn run(case: &Case, fused: bool, spec: Spec) -> Vec<Vec<f32>> {
        let ad = Device::flex().autodiff();
        let Case {
            b,
            h,
            tq,
            tk,
            d,
            dv,
            ..
        } = *case;
        let q = heads([b, h, tq, d], 1, &ad).require_grad();
        let k = heads([b, h, tk, d], 2, &ad).require_grad();
        let v = heads([b, h, tk, dv], 3, &ad).require_grad();
        let bias = case.bias.map(|shape| {
            let n = shape.iter().product();
            // Some keys hidden by an infinite bias (padding), the rest a spread of ±3.
            let values: Vec<f32> = hashed(n, 4, 3.0)
                .into_iter()
                .enumerate()
                .map(|(i, x)| if i % 7 == 3 { f32::NEG_INFINITY } else { x })
                .collect();
            Tensor::<4>::from_data(TensorData::new(values, shape), &ad).require_grad()
        });
        let w = Tensor::<4>::from_data(
            TensorData::new(hashed(b * h * tq * dv, 5, 1.0), [b, h, tq, dv]),
            &ad,
        );
        let out = if fused {
            attention(q.clone(), k.clone(), v.clone(), bias.clone(), spec)
        } else {
            reference_attention(q.clone(), k.clone(), v.clone(), bias.clone(), spec)
        };
        let grads = (out.clone() * w).sum().backward();
        let mut all = vec![
            host(out),
            host(q.grad(&grads).unwrap()),
            host(k.grad(&grads).unwrap()),
            host(v.grad(&grads).unwrap()),
        ];
        if let Some(bias) = bias {
            // The gradient at hidden keys is 0 on both paths.
            all.push(host(bias.grad(&grads).unwrap()));
        }
        all
    }

    fn assert_close(case: &Case, tol: f32) -> Vec<Vec<f32>> {
        let ours = run(case, true, case.spec);
        let reference = run(case, false, case.spec);
        for (name, (a, b)) in ["out", "dq", "dk", "dv", "dbias"]
            .iter()
            .zip(ours.iter().zip(&reference))
        {
            let err = max_rel(a, b);
            assert!(err < tol, "{name}: {err:e}");
        }
        reference
    }

    /// Causal attention over lengths that cross the blocks of queries (64) and the tiles
    /// of keys (128), heads of 24 and values of 40, the inputs strided as the models'
    /// split heads: the output and the gradients of q, k and v as Burn's composition
    /// within 5e-6 of the largest value (f32 sums in another order; 4e-7 seen). Negative control:
    /// a score factor 2% larger moves the gradients by more than 1e-3.
    #[test]
    fn causal_attention_equals_the_reference_forward_and_backward() {
        let spec = Spec {
            causal: true,
            ..Spec::new(1.0 / 24f32.sqrt())
        };
        let case = Case {
            b: 2,
            h: 3,
            tq: 150,
            tk: 150,
            d: 24,
            dv: 40,
            spec,
            bias: None,
        };
        let reference = assert_close(&case, 5e-6);
        let off = run(
            &case,
            true,
            Spec {
                scale: spec.scale * 1.02,
                ..spec
            },
        );
        assert!(max_rel(&off[1], &reference[1]) > 1e-3);
    }

    /// A window of 37 in both directions, queries at 20.. and keys at 5.., a soft cap of
    /// 5, and a bias per head and key row, some keys hidden by `-inf`: the gradient of
    /// the bias too, summed over the batch rows it broadcasts across. Negative control: a
    /// window one wider moves the output.
    #[test]
    fn windowed_capped_biased_attention_equals_the_reference() {
        let spec = Spec {
            window: Some(37),
            softcap: Some(5.0),
            query_offset: 20,
            key_offset: 5,
            ..Spec::new(0.3)
        };
        let case = Case {
            b: 2,
            h: 2,
            tq: 70,
            tk: 133,
            d: 16,
            dv: 8,
            spec,
            bias: Some([1, 2, 70, 133]),
        };
        let reference = assert_close(&case, 5e-6);
        let wider = run(
            &case,
            true,
            Spec {
                window: Some(38),
                ..spec
            },
        );
        assert!(max_rel(&wider[0], &reference[0]) > 1e-3);
    }

    /// Causal, with the keys starting three positions after the queries: the first three
    /// queries see no key, and their output and gradient are zero on both paths; a key
    /// padding bias `[B, 1, 1, Tk]` besides.
    #[test]
    fn rows_that_see_no_key_are_zero() {
        let spec = Spec {
            causal: true,
            key_offset: 3,
            ..Spec::new(0.25)
        };
        let case = Case {
            b: 2,
            h: 2,
            tq: 9,
            tk: 9,
            d: 4,
            dv: 4,
            spec,
            bias: Some([2, 1, 1, 9]),
        };
        let reference = assert_close(&case, 5e-6);
        let ours = run(&case, true, spec);
        // Head 0 of batch row 0: rows 0, 1 and 2 of `[B, H, Tq, Dv]`.
        assert!(
            ours[0][..12].iter().all(|&x| x == 0.0),
            "{:?}",
            &ours[0][..12]
        );
        assert!(reference[0][..12].iter().all(|&x| x == 0.0));
    }

    /// Dropout 0.3 on the weights, causal, over two blocks of queries: the output and
    /// the gradients as the reference with the same mask (drawn from the same hash).
    /// Negative control: another seed moves the output. And the mask keeps its share.
    #[test]
    fn attention_with_dropout_equals_the_reference_with_its_mask() {
        let spec = Spec {
            causal: true,
            dropout: 0.3,
            seed: 7,
            ..Spec::new(0.2)
        };
        let case = Case {
            b: 2,
            h: 2,
            tq: 80,
            tk: 80,
            d: 16,
            dv: 16,
            spec,
            bias: None,
        };
        let reference = assert_close(&case, 5e-6);
        let other = run(&case, true, Spec { seed: 8, ..spec });
        assert!(max_rel(&other[0], &reference[0]) > 1e-2);
        let n = 1_000_000u64;
        let dropped = (0..n)
            .filter(|&i| !super::dropout_keeps(42, i, 0.3))
            .count() as f64;
        // Within 4 standard deviations of the binomial's mean.
        let sd = (n as f64 * 0.3 * 0.7).sqrt();
        assert!((dropped - 0.3 * n as f64).abs() < 4.0 * sd, "{dropped}");
    }

    /// Without autodiff the same op: the values as the reference.
    #[test]
    fn plain_flex_values() {
        let d = Device::flex();
        let spec = Spec {
            causal: true,
            ..Spec::new(0.125)
        };
        let (q, k, v) = (
            heads([1, 8, 300, 64], 1, &d),
            heads([1, 8, 300, 64], 2, &d),
            heads([1, 8, 300, 64], 3, &d),
        );
        let ours = host(attention(q.clone(), k.clone(), v.clone(), None, spec));
        let want = host(reference_attention(q, k, v, None, spec));
        let err = max_rel(&ours, &want);
        assert!(err < 5e-6, "{err:e}");
    }
}
