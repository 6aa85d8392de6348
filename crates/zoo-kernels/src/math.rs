//! The element-wise loops of the kernels, written so that the compiler vectorises them:
//! no library calls, no branches on values, no float-to-integer conversions (Rust's `as`
//! saturates, which the compiler does one lane at a time). `exp` is `2^n · 2^f` with `n`
//! the nearest integer to `x log2(e)` and `e^f`, `f = x - n ln 2` (ln 2 in two parts, so
//! that `f` is exact) a degree-7 Taylor polynomial (relative error under 2e-8 before
//! rounding). On x86-64 each loop is compiled three times, for the baseline, AVX2 and
//! AVX-512, chosen once at run time ([`multiversion!`]); none uses fused multiply-adds,
//! so all give the same bits.

/// Defines `pub(crate) fn $name(args)` that runs `$body(args)` compiled for AVX-512 or
/// AVX2 where the CPU has it, and for the baseline elsewhere.
macro_rules! multiversion {
    ($name:ident => $body:ident ($($arg:ident : $ty:ty),*)) => {
        #[allow(unsafe_code)]
        pub(crate) fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) {
                    $body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

/// `exp(x)`: the polynomial over [-87, 88] (the f32 range, without denormals), 0 below
/// and infinity above, where f32 rounds the true value to 0 and infinity (below -103.3
/// and above 88.72; in between, the denormals and the last 0.72 are given up). So
/// `x · sigmoid(z)` is `-0`, as Burn's, and not `-6e-35`, when `z` is very negative.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts (Cody and Waite): `n · LN2_HI` is exact for |n| < 2^15.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2^23: adding it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let arg = x;
    let x = x.clamp(-87.0, 88.0);
    // `t`'s low mantissa bits hold `n + 2^22`, as an integer: `n` is read from them
    // with integer ops, which vectorise, where `n as i32` (a saturating conversion)
    // is done one lane at a time.
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let f = (x - n * LN2_HI) - n * LN2_LO; // |f| ≤ ln(2) / 2
    // e^f, Taylor to degree 7.
    let p = 1.0
        + f * (1.0
            + f * (1.0 / 2.0
                + f * (1.0 / 6.0
                    + f * (1.0 / 24.0
                        + f * (1.0 / 120.0 + f * (1.0 / 720.0 + f * (1.0 / 5040.0)))))));
    // 2^n, with n in [-126, 127] after the clamp: its exponent field is `n + 127`.
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    let value = p * scale;
    if arg > 88.0 {
        f32::INFINITY
    } else if arg < -87.0 {
        0.0
    } else {
        value
    }
}

/// `erf(x)`, Abramowitz and Stegun 7.1.26 (absolute error at most 1.5e-7 in exact
/// arithmetic, 5.3e-7 in f32).
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152_1,
        1.061_405_4,
    ];
    let ax = x.abs();
    let t = 1.0 / (1.0 + P * ax);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let y = 1.0 - poly * exp(-ax * ax);
    y.copysign(x)
}

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// `1 / √(2π)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
const TANH_A: f32 = super::act::TANH_A as f32;
const TANH_B: f32 = super::act::TANH_B as f32;

#[inline(always)]
fn gelu_exact_body(x: &[f32], out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(x) {
        *o = 0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2));
    }
}

#[inline(always)]
fn gelu_exact_backward_body(x: &[f32], grad: &[f32], out: &mut [f32]) {
    for ((o, &x), &g) in out.iter_mut().zip(x).zip(grad) {
        let cdf = 0.5 * (1.0 + erf(x * FRAC_1_SQRT_2));
        let pdf = FRAC_1_SQRT_2PI * exp(-0.5 * x * x);
        *o = g * (cdf + x * pdf);
    }
}

#[inline(always)]
fn gelu_tanh_body(x: &[f32], out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(x) {
        let z = (x * x * TANH_B + TANH_A) * x;
        *o = x / (1.0 + exp(-z));
    }
}

#[inline(always)]
fn gelu_tanh_backward_body(x: &[f32], grad: &[f32], out: &mut [f32]) {
    for ((o, &x), &g) in out.iter_mut().zip(x).zip(grad) {
        let z = (x * x * TANH_B + TANH_A) * x;
        let s = 1.0 / (1.0 + exp(-z));
        let dz = x * x * (3.0 * TANH_B) + TANH_A;
        *o = g * (s + x * s * (1.0 - s) * dz);
    }
}

multiversion!(gelu_exact => gelu_exact_body(x: &[f32], out: &mut [f32]));
multiversion!(gelu_exact_backward => gelu_exact_backward_body(x: &[f32], grad: &[f32], out: &mut [f32]));
multiversion!(gelu_tanh => gelu_tanh_body(x: &[f32], out: &mut [f32]));
multiversion!(gelu_tanh_backward => gelu_tanh_backward_body(x: &[f32], grad: &[f32], out: &mut [f32]));

/// `out[j·bn + i] += x · scales[j] · q[j·bn + i]`: a row of a quantized weight, scaled
/// by one input value, added in.
#[inline(always)]
fn axpy_blocks_body(out: &mut [f32], q: &[i8], scales: &[f32], x: f32, bn: usize) {
    for ((o, qb), &s) in out.chunks_exact_mut(bn).zip(q.chunks_exact(bn)).zip(scales) {
        let c = x * s;
        for (o, &v) in o.iter_mut().zip(qb) {
            *o += c * f32::from(v);
        }
    }
}

/// `out[j·bn + i] = scales[j] · q[j·bn + i]`: a row of a quantized weight in f32.
#[inline(always)]
fn scale_blocks_body(out: &mut [f32], q: &[i8], scales: &[f32], bn: usize) {
    for ((o, qb), &s) in out.chunks_exact_mut(bn).zip(q.chunks_exact(bn)).zip(scales) {
        for (o, &v) in o.iter_mut().zip(qb) {
            *o = s * f32::from(v);
        }
    }
}

/// `out[2j] = low nibble of bytes[j]`, `out[2j + 1] = its high nibble`, each a signed
/// 4-bit value in two's complement (`-8..=7`): a row of a packed 4-bit weight as `i8`.
#[inline(always)]
fn unpack_q4_body(out: &mut [i8], bytes: &[u8]) {
    for (o, &b) in out.chunks_exact_mut(2).zip(bytes) {
        o[0] = ((b << 4) as i8) >> 4;
        o[1] = (b as i8) >> 4;
    }
}

/// `out[j] = q[2j]` in the low nibble and `q[2j + 1]` in the high one, each value's low
/// four bits (a signed 4-bit value in two's complement): the inverse of [`unpack_q4`].
#[inline(always)]
fn pack_q4_body(out: &mut [u8], q: &[i8]) {
    for (o, pair) in out.iter_mut().zip(q.chunks_exact(2)) {
        *o = (pair[0] as u8 & 0x0F) | ((pair[1] as u8) << 4);
    }
}

multiversion!(axpy_blocks => axpy_blocks_body(out: &mut [f32], q: &[i8], scales: &[f32], x: f32, bn: usize));
multiversion!(scale_blocks => scale_blocks_body(out: &mut [f32], q: &[i8], scales: &[f32], bn: usize));
multiversion!(unpack_q4 => unpack_q4_body(out: &mut [i8], bytes: &[u8]));
multiversion!(pack_q4 => pack_q4_body(out: &mut [u8], q: &[i8]));

/// Lanes of the reductions: eight partial sums, added at the end, so that the compiler
/// keeps them in one vector register.
const LANES: usize = 8;

/// `Σ f(a_i, b_i)` over two slices of one length, in [`LANES`] partial sums.
#[inline(always)]
fn sum_lanes(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() / LANES * LANES);
    let (b_body, b_tail) = b.split_at(a_body.len());
    for (a, b) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] += f(a[l], b[l]);
        }
    }
    let mut total = acc.iter().sum::<f32>();
    for (&a, &b) in a_tail.iter().zip(b_tail) {
        total += f(a, b);
    }
    total
}

/// The backward of LayerNorm over rows of `gamma.len()` values: for each row of `x` and
/// of the output's gradient `grad`, with `x̂ = (x - mean) r`, `r = 1 / √(var + eps)` (the
/// biased variance, as the forward), `dx = r (g γ - mean(g γ) - x̂ mean(g γ x̂))`; and,
/// summed over the rows, `dgamma += g x̂`, `dbeta += g`.
#[inline(always)]
fn layer_norm_backward_body(
    x: &[f32],
    grad: &[f32],
    gamma: &[f32],
    eps: f32,
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let d = gamma.len();
    let n = d as f32;
    for ((x, g), dx) in x
        .chunks_exact(d)
        .zip(grad.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let mean = sum_lanes(x, x, |a, _| a) / n;
        let var = sum_lanes(x, x, |a, _| (a - mean) * (a - mean)) / n;
        let r = 1.0 / (var + eps).sqrt();
        // dx holds g γ for now.
        for ((o, &g), &w) in dx.iter_mut().zip(g).zip(gamma) {
            *o = g * w;
        }
        let m1 = sum_lanes(dx, x, |gw, _| gw) / n;
        let m2 = sum_lanes(dx, x, |gw, x| gw * ((x - mean) * r)) / n;
        for (((o, &x), &g), (dg, db)) in dx
            .iter_mut()
            .zip(x)
            .zip(g)
            .zip(dgamma.iter_mut().zip(dbeta.iter_mut()))
        {
            let xh = (x - mean) * r;
            *dg += g * xh;
            *db += g;
            *o = r * (*o - m1 - xh * m2);
        }
    }
}

multiversion!(layer_norm_backward => layer_norm_backward_body(x: &[f32], grad: &[f32], gamma: &[f32], eps: f32, dx: &mut [f32], dgamma: &mut [f32], dbeta: &mut [f32]));

/// RMSNorm over rows of `gamma.len()` values: `y = x r γ`, `r = 1 / √(mean(x²) + eps)`.
#[inline(always)]
fn rms_norm_body(x: &[f32], gamma: &[f32], eps: f32, out: &mut [f32]) {
    let d = gamma.len();
    let n = d as f32;
    for (x, o) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let r = 1.0 / (sum_lanes(x, x, |a, _| a * a) / n + eps).sqrt();
        for ((o, &x), &w) in o.iter_mut().zip(x).zip(gamma) {
            *o = x * r * w;
        }
    }
}

/// The backward of RMSNorm: with `x̂ = x r`, `dx = r (g γ - x̂ mean(g γ x̂))`, and, summed
/// over the rows, `dgamma += g x̂`.
#[inline(always)]
fn rms_norm_backward_body(
    x: &[f32],
    grad: &[f32],
    gamma: &[f32],
    eps: f32,
    dx: &mut [f32],
    dgamma: &mut [f32],
) {
    let d = gamma.len();
    let n = d as f32;
    for ((x, g), dx) in x
        .chunks_exact(d)
        .zip(grad.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let r = 1.0 / (sum_lanes(x, x, |a, _| a * a) / n + eps).sqrt();
        for ((o, &g), &w) in dx.iter_mut().zip(g).zip(gamma) {
            *o = g * w;
        }
        let m = sum_lanes(dx, x, |gw, x| gw * (x * r)) / n;
        for (((o, &x), &g), dg) in dx.iter_mut().zip(x).zip(g).zip(dgamma.iter_mut()) {
            let xh = x * r;
            *dg += g * xh;
            *o = r * (*o - xh * m);
        }
    }
}

multiversion!(rms_norm => rms_norm_body(x: &[f32], gamma: &[f32], eps: f32, out: &mut [f32]));
multiversion!(rms_norm_backward => rms_norm_backward_body(x: &[f32], grad: &[f32], gamma: &[f32], eps: f32, dx: &mut [f32], dgamma: &mut [f32]));

/// The largest value of a row, in [`LANES`] partial maxima.
#[inline(always)]
fn max_lanes(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let body = x.len() / LANES * LANES;
    for c in x[..body].chunks_exact(LANES) {
        for l in 0..LANES {
            acc[l] = acc[l].max(c[l]);
        }
    }
    let m = acc.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    x[body..].iter().fold(m, |m, &v| m.max(v))
}

/// A row's maximum `m` and `Σ exp(x - m)`.
#[inline(always)]
fn softmax_stats(x: &[f32]) -> (f32, f32) {
    let m = max_lanes(x);
    (m, sum_lanes(x, x, |a, _| exp(a - m)))
}

/// Cross-entropy of rows of `v` logits against their targets, with label smoothing
/// `alpha` (the target distribution `(1 - alpha) onehot + alpha / v`, as Burn's):
/// `loss = lse - (1 - alpha) x_t - (alpha / v) Σ x`, `lse = m + ln Σ exp(x - m)`.
#[inline(always)]
fn cross_entropy_body(logits: &[f32], v: usize, targets: &[usize], alpha: f32, losses: &mut [f32]) {
    for ((x, &t), loss) in logits.chunks_exact(v).zip(targets).zip(losses.iter_mut()) {
        let (m, s) = softmax_stats(x);
        let mut l = m + s.ln() - (1.0 - alpha) * x[t];
        if alpha != 0.0 {
            l -= alpha / v as f32 * sum_lanes(x, x, |a, _| a);
        }
        *loss = l;
    }
}

/// The gradient of [`cross_entropy_body`]'s losses, each weighted by `scale`:
/// `scale (softmax(x) - (1 - alpha) onehot - alpha / v)`.
#[inline(always)]
fn cross_entropy_backward_body(
    logits: &[f32],
    v: usize,
    targets: &[usize],
    alpha: f32,
    scale: f32,
    out: &mut [f32],
) {
    let floor = alpha / v as f32;
    for ((x, &t), o) in logits
        .chunks_exact(v)
        .zip(targets)
        .zip(out.chunks_exact_mut(v))
    {
        let (m, s) = softmax_stats(x);
        let c = scale / s;
        for (o, &x) in o.iter_mut().zip(x) {
            *o = c * exp(x - m) - scale * floor;
        }
        o[t] -= scale * (1.0 - alpha);
    }
}

multiversion!(cross_entropy => cross_entropy_body(logits: &[f32], v: usize, targets: &[usize], alpha: f32, losses: &mut [f32]));
multiversion!(cross_entropy_backward => cross_entropy_backward_body(logits: &[f32], v: usize, targets: &[usize], alpha: f32, scale: f32, out: &mut [f32]));

#[inline(always)]
fn silu_body(x: &[f32], out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(x) {
        *o = x / (1.0 + exp(-x));
    }
}

/// `grad · silu'(x)`, `silu'(x) = s (1 + x (1 - s))`, `s = sigmoid(x)`.
#[inline(always)]
fn silu_backward_body(x: &[f32], grad: &[f32], out: &mut [f32]) {
    for ((o, &x), &g) in out.iter_mut().zip(x).zip(grad) {
        let s = 1.0 / (1.0 + exp(-x));
        *o = g * s * (1.0 + x * (1.0 - s));
    }
}

multiversion!(silu => silu_body(x: &[f32], out: &mut [f32]));
multiversion!(silu_backward => silu_backward_body(x: &[f32], grad: &[f32], out: &mut [f32]));

/// One tile of attention scores (rows of `cols` values at stride `ld`) folded into the
/// running softmax of its rows: with the running maximum `m` and sum `l` of each row,
/// `m' = max(m, max s)`, the scores replaced by `p = exp(s - m')`, `corr = exp(m - m')`
/// (the factor on what was summed before) and `l' = l · corr + Σ p`. `m` starts at
/// `f32::MIN`, so that a row of `-inf` scores gives `p = 0` and no NaN.
#[inline(always)]
fn online_softmax_body(
    s: &mut [f32],
    ld: usize,
    cols: usize,
    m: &mut [f32],
    l: &mut [f32],
    corr: &mut [f32],
) {
    for r in 0..m.len() {
        let row = &mut s[r * ld..r * ld + cols];
        let m_new = m[r].max(max_lanes(row));
        for x in row.iter_mut() {
            *x = exp(*x - m_new);
        }
        let sum = sum_lanes(row, row, |a, _| a);
        corr[r] = exp(m[r] - m_new);
        l[r] = l[r] * corr[r] + sum;
        m[r] = m_new;
    }
}

/// The weights of a tile recomputed from the scores: `p = exp(s - lse)` per row (0 for
/// `-inf` scores, and for rows whose `lse` is `+inf`, that see no key).
#[inline(always)]
fn exp_shift_rows_body(s: &mut [f32], ld: usize, cols: usize, lse: &[f32]) {
    for (r, &shift) in lse.iter().enumerate() {
        for x in s[r * ld..r * ld + cols].iter_mut() {
            *x = exp(*x - shift);
        }
    }
}

/// The softmax's backward over a tile: `dp` becomes `ds = p (dp - δ)`, per row.
#[inline(always)]
fn softmax_grad_rows_body(p: &[f32], dp: &mut [f32], ld: usize, cols: usize, delta: &[f32]) {
    for (r, &dl) in delta.iter().enumerate() {
        let (p, dp) = (&p[r * ld..r * ld + cols], &mut dp[r * ld..r * ld + cols]);
        for (g, &w) in dp.iter_mut().zip(p) {
            *g = w * (*g - dl);
        }
    }
}

multiversion!(online_softmax => online_softmax_body(s: &mut [f32], ld: usize, cols: usize, m: &mut [f32], l: &mut [f32], corr: &mut [f32]));
multiversion!(exp_shift_rows => exp_shift_rows_body(s: &mut [f32], ld: usize, cols: usize, lse: &[f32]));
multiversion!(softmax_grad_rows => softmax_grad_rows_body(p: &[f32], dp: &mut [f32], ld: usize, cols: usize, delta: &[f32]));

#[cfg(test)]
mod tests {
    /// The polynomial `exp` and `erf` against the standard library's, over their range.
    #[test]
    fn exp_and_erf_are_within_their_stated_error() {
        let mut worst_exp = 0f64;
        let mut worst_erf = 0f64;
        // Inside the clamp: -87 and 88 round to -87.00001 and 88.00001 as i · 1e-3.
        for i in -86_999..=87_999 {
            let x = i as f32 * 1e-3;
            let want = f64::from(x).exp();
            let rel = ((f64::from(super::exp(x)) - want) / want).abs();
            worst_exp = worst_exp.max(rel);
            if (-6_000..=6_000).contains(&i) {
                let want = libm_erf(f64::from(x));
                worst_erf = worst_erf.max((f64::from(super::erf(x)) - want).abs());
            }
        }
        assert!(worst_exp < 3e-7, "exp: relative error {worst_exp:e}");
        // 1.5e-7 in exact arithmetic; f32 rounding of `1 - poly · exp` adds to it (5.3e-7 seen).
        assert!(worst_erf < 1e-6, "erf: absolute error {worst_erf:e}");
        // The tails are what f32 rounds the true values to, and NaN stays NaN.
        assert_eq!(super::exp(1000.0), f32::INFINITY);
        assert_eq!(super::exp(89.0), f32::INFINITY);
        assert_eq!(super::exp(-1000.0), 0.0);
        assert!(super::exp(f32::NAN).is_nan());
    }

    /// The loops as dispatched (AVX-512 or AVX2 where the CPU has them) give the bits of
    /// the baseline build, over inputs that cover the clamps, the tails and NaN, at
    /// lengths that leave a remainder after the vector lanes.
    #[test]
    fn the_dispatched_loops_give_the_baseline_bits() {
        let mut x: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.0275).collect();
        x.extend([-1000.0, -103.0, -87.5, 88.5, 1000.0, f32::NAN, -0.0, 1e-30]);
        x.push(0.5); // 8,009 values: not a multiple of 8 or 16
        let g: Vec<f32> = x.iter().map(|v| 1.0 - v * 0.01).collect();
        // NaN as one value: its payload is not what the loops promise.
        let bits = |v: &[f32]| {
            v.iter()
                .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
                .collect::<Vec<_>>()
        };
        type Unary = (fn(&[f32], &mut [f32]), fn(&[f32], &mut [f32]));
        let unary: [Unary; 3] = [
            (super::gelu_exact, super::gelu_exact_body),
            (super::gelu_tanh, super::gelu_tanh_body),
            (super::silu, super::silu_body),
        ];
        for (i, (dispatched, baseline)) in unary.into_iter().enumerate() {
            let (mut a, mut b) = (vec![0.0; x.len()], vec![0.0; x.len()]);
            dispatched(&x, &mut a);
            baseline(&x, &mut b);
            assert_eq!(bits(&a), bits(&b), "forward loop {i}");
        }
        type Binary = (
            fn(&[f32], &[f32], &mut [f32]),
            fn(&[f32], &[f32], &mut [f32]),
        );
        let binary: [Binary; 3] = [
            (super::gelu_exact_backward, super::gelu_exact_backward_body),
            (super::gelu_tanh_backward, super::gelu_tanh_backward_body),
            (super::silu_backward, super::silu_backward_body),
        ];
        for (i, (dispatched, baseline)) in binary.into_iter().enumerate() {
            let (mut a, mut b) = (vec![0.0; x.len()], vec![0.0; x.len()]);
            dispatched(&x, &g, &mut a);
            baseline(&x, &g, &mut b);
            assert_eq!(bits(&a), bits(&b), "backward loop {i}");
        }
        // The online softmax over 3 rows of 2,669 scores.
        let (rows, cols) = (3, 2669);
        type Softmax = fn(&mut [f32], usize, usize, &mut [f32], &mut [f32], &mut [f32]);
        let run = |f: Softmax| {
            let mut s = x[..rows * cols].to_vec();
            s[7] = f32::NEG_INFINITY;
            let (mut m, mut l, mut c) = (vec![0.5f32; rows], vec![2.0f32; rows], vec![0.0; rows]);
            f(&mut s, cols, cols, &mut m, &mut l, &mut c);
            [s, m, l, c].map(|v| bits(&v))
        };
        assert_eq!(
            run(super::online_softmax),
            run(super::online_softmax_body),
            "online softmax"
        );
        // A control: the comparison sees a difference of one bit.
        let mut a = vec![0.0; x.len()];
        super::gelu_exact(&x, &mut a);
        let mut b = a.clone();
        b[100] = f32::from_bits(b[100].to_bits() ^ 1);
        assert_ne!(bits(&a), bits(&b));
    }

    /// `erf` by its series (|x| < 3) and its continued fraction beyond, in f64: a reference
    /// far more accurate than the f32 approximation under test.
    fn libm_erf(x: f64) -> f64 {
        let ax = x.abs();
        let v = if ax < 3.0 {
            // erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
            let mut sum = 0.0;
            let mut term = ax;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -ax * ax / n;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc(x) = exp(-x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
            let mut f = ax;
            for k in (1..60).rev() {
                f = ax + (k as f64 / 2.0) / f;
            }
            1.0 - (-ax * ax).exp() / std::f64::consts::PI.sqrt() / f
        };
        v.copysign(x)
    }
}
