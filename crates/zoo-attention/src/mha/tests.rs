//! Tests of self- and cross-attention.

use super::*;
use crate::cache::KvCache;
use crate::error::AttentionError;
use crate::mask::padding_mask_from_lengths;
use crate::position::sinusoidal_table;
use crate::sdpa::attention_linear;
use burn::tensor::{Distribution, Int};
use zoo_device::test_device;
use zoo_device::testing::max_abs_diff;

fn x(b: usize, t: usize, d: usize, seed: u64) -> Tensor<3> {
    let dev = test_device();
    dev.seed(seed);
    Tensor::random([b, t, d], Distribution::Normal(0.0, 1.0), &dev)
}

/// Weights large enough that positional effects are far above rounding.
fn large(cfg: MultiHeadAttentionConfig) -> MultiHeadAttentionConfig {
    cfg.with_initializer(Initializer::Normal {
        mean: 0.0,
        std: 0.3,
    })
}

fn mha(cfg: MultiHeadAttentionConfig) -> SelfAttention {
    large(cfg).init(&test_device()).unwrap()
}

fn cross(cfg: MultiHeadAttentionConfig) -> CrossAttention {
    large(cfg).init_cross(&test_device()).unwrap()
}

/// The separate projections of a self-attention layer.
fn separate(m: &SelfAttention) -> &SeparateQkv {
    match m {
        SelfAttention::Separate(s) => s,
        SelfAttention::Fused(_) => panic!("a fused layer"),
    }
}

/// The positional rules of a self-attention layer, to switch one off.
fn positions_mut(m: &mut SelfAttention) -> &mut SelfPositions {
    match m {
        SelfAttention::Separate(s) => &mut s.positions,
        SelfAttention::Fused(f) => &mut f.positions,
    }
}

#[test]
fn config_errors_name_the_values() {
    let dev = test_device();
    let e = MultiHeadAttentionConfig::new(10, 3).init(&dev).unwrap_err();
    assert_eq!(e.to_string(), "d_model 10 is not divisible by n_heads 3");
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_n_kv_heads(Some(3))
        .init(&dev)
        .unwrap_err();
    assert_eq!(e.to_string(), "n_heads 4 is not divisible by n_kv_heads 3");
    let e = MultiHeadAttentionConfig::new(12, 4)
        .with_rope_max_len(Some(8))
        .init(&dev)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "head_dim must be even for rotary embeddings, got 3"
    );
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_window(Some(0))
        .init(&dev)
        .unwrap_err();
    assert_eq!(e.to_string(), "window must be > 0, got 0");
    // Each kind of layer refuses the settings only the other can use.
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_d_context(Some(8))
        .init(&dev)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "d_context 8 is the width of a cross-attention's context; self-attention reads \
         d_model 16 (use init_cross)"
    );
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_fused_qkv(true)
        .init_cross(&dev)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "fused_qkv is a self-attention setting; cross-attention cannot use it"
    );
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_rope_max_len(Some(8))
        .init_cross(&dev)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "rope_max_len is a self-attention setting; cross-attention cannot use it"
    );
    assert!(matches!(
        MultiHeadAttentionConfig::new(16, 4)
            .with_fused_qkv(true)
            .init(&dev),
        Ok(SelfAttention::Fused(_))
    ));
}

#[test]
fn wrong_input_width_is_an_error() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4));
    let e = m.forward(AttentionInput::new(x(1, 3, 8, 0))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "attention input: expected shape [_, _, 16], got [1, 3, 8]"
    );
}

#[test]
fn causality() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(32)));
    let a = x(2, 8, 16, 1);
    // Change everything after position 4.
    let b = Tensor::cat(
        vec![a.clone().slice([0..2, 0..5, 0..16]), x(2, 3, 16, 2)],
        1,
    );
    let oa = m.forward(AttentionInput::new(a).causal()).unwrap().context;
    let ob = m.forward(AttentionInput::new(b).causal()).unwrap().context;
    let head = |t: Tensor<3>| t.slice([0..2, 0..5, 0..16]);
    assert!(max_abs_diff(&head(oa.clone()), &head(ob.clone())) < 1e-6);
    let tail = |t: Tensor<3>| t.slice([0..2, 5..8, 0..16]);
    assert!(
        max_abs_diff(&tail(oa), &tail(ob)) > 1e-3,
        "the future must matter after it"
    );
}

#[test]
fn padding_does_not_change_real_positions() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4));
    let real = x(1, 5, 16, 3);
    let plain = m
        .forward(AttentionInput::new(real.clone()))
        .unwrap()
        .context;
    for seed in [4, 5] {
        let padded = Tensor::cat(vec![real.clone(), x(1, 3, 16, seed)], 1);
        let pad = padding_mask_from_lengths(&[5], 8, &padded.device());
        let out = m
            .forward(AttentionInput::new(padded).key_padding(pad))
            .unwrap()
            .context
            .slice([0..1, 0..5, 0..16]);
        assert!(max_abs_diff(&out, &plain) < 1e-5);
    }
}

#[test]
fn permutation_equivariant_without_positions_only() {
    let dev = test_device();
    let perm = Tensor::<1, Int>::from_ints([3, 0, 4, 1, 2], &dev);
    let input = x(1, 5, 16, 6);
    let m = mha(MultiHeadAttentionConfig::new(16, 4));
    let out = m
        .forward(AttentionInput::new(input.clone()))
        .unwrap()
        .context;
    let out_p = m
        .forward(AttentionInput::new(input.clone().select(1, perm.clone())))
        .unwrap()
        .context;
    assert!(max_abs_diff(&out.clone().select(1, perm.clone()), &out_p) < 1e-5);
    // With sinusoidal positions added, permuting the tokens changes the result.
    let pe = sinusoidal_table(5, 16, &dev).unwrap().unsqueeze::<3>();
    let with_pe = m
        .forward(AttentionInput::new(input.clone() + pe.clone()))
        .unwrap()
        .context;
    let with_pe_p = m
        .forward(AttentionInput::new(input.select(1, perm.clone()) + pe))
        .unwrap()
        .context;
    assert!(max_abs_diff(&with_pe.select(1, perm.clone()), &with_pe_p) > 1e-3);
    // So does RoPE.
    let r = mha(MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(8)));
    let a = r
        .forward(AttentionInput::new(x(1, 5, 16, 6)))
        .unwrap()
        .context;
    let b = r
        .forward(AttentionInput::new(x(1, 5, 16, 6).select(1, perm.clone())))
        .unwrap()
        .context;
    assert!(max_abs_diff(&a.select(1, perm), &b) > 1e-3);
}

/// Attention computed head by head from the layer's weights, without split_heads,
/// repeat_kv or any kernel of this crate: query head `h` reads KV head
/// `h / (H / Hkv)`, scores are `q·k · scale`, masked (causal) before a plain softmax.
fn independent(
    [q_proj, k_proj, v_proj, o_proj]: [&Linear; 4],
    (h, kv, hd): (usize, usize, usize),
    x: &Tensor<3>,
    ctx: Option<&Tensor<3>>,
    causal: bool,
    scale: f64,
) -> Tensor<3> {
    let src = ctx.unwrap_or(x);
    let [b, tq, _] = x.dims();
    let tk = src.dims()[1];
    let q = q_proj.forward(x.clone()); // [B, Tq, H Dh]
    let k = k_proj.forward(src.clone()); // [B, Tk, Hkv Dh]
    let v = v_proj.forward(src.clone());
    let mut heads = Vec::new();
    for head in 0..h {
        let g = head / (h / kv);
        let qh = q.clone().slice([0..b, 0..tq, head * hd..(head + 1) * hd]);
        let kh = k.clone().slice([0..b, 0..tk, g * hd..(g + 1) * hd]);
        let vh = v.clone().slice([0..b, 0..tk, g * hd..(g + 1) * hd]);
        let mut scores = qh.matmul(kh.swap_dims(1, 2)) * scale; // [B, Tq, Tk]
        if causal {
            let future: Vec<f32> = (0..tq)
                .flat_map(|i| (0..tk).map(move |j| if j > i { -1e9 } else { 0.0 }))
                .collect();
            scores = scores
                + Tensor::<1>::from_floats(future.as_slice(), &x.device()).reshape([1, tq, tk]);
        }
        let w = burn::tensor::activation::softmax(scores, 2);
        heads.push(w.matmul(vh)); // [B, Tq, Dh]
    }
    o_proj.forward(Tensor::cat(heads, 2))
}

/// [`independent`] with a self-attention layer's weights.
fn independent_self(m: &SelfAttention, x: &Tensor<3>, causal: bool, scale: f64) -> Tensor<3> {
    let s = separate(m);
    let layers = [&s.q_proj, &s.k_proj, &s.v_proj, &s.o_proj];
    let heads = (m.n_heads(), m.n_kv_heads(), m.head_dim());
    independent(layers, heads, x, None, causal, scale)
}

#[test]
fn gqa_mqa_and_cross_attention_equal_an_independent_computation() {
    let input = x(2, 6, 16, 8);
    let ctx = x(2, 5, 8, 9);
    for kv in [4, 2, 1] {
        let m = mha(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(kv)));
        let s = 1.0 / (m.head_dim() as f64).sqrt();
        let got = m
            .forward(AttentionInput::new(input.clone()).causal())
            .unwrap()
            .context;
        let want = independent_self(&m, &input, true, s);
        assert!(
            max_abs_diff(&got, &want) < 1e-4,
            "kv {kv}: {}",
            max_abs_diff(&got, &want)
        );
        let c = cross(
            MultiHeadAttentionConfig::new(16, 4)
                .with_n_kv_heads(Some(kv))
                .with_d_context(Some(8)),
        );
        let got = c
            .forward(AttentionInput::new(input.clone()), ctx.clone())
            .unwrap()
            .context;
        let layers = [&c.q_proj, &c.k_proj, &c.v_proj, &c.o_proj];
        let heads = (c.n_heads(), c.n_kv_heads(), c.head_dim());
        let want = independent(layers, heads, &input, Some(&ctx), false, s);
        assert!(max_abs_diff(&got, &want) < 1e-4, "cross kv {kv}");
    }
    // Negative control: the same layer read as MHA (each query head on its own KV
    // slice) is far from its GQA result.
    let m = mha(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(2)));
    let got = m
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let wrong = mha(MultiHeadAttentionConfig::new(16, 4));
    assert!(max_abs_diff(&got, &independent_self(&wrong, &input, true, 0.5)) > 1e-2);
}

#[test]
fn t5_head_size_and_scale_are_free() {
    // T5 style: 4 heads of 6 (not 16 / 4 = 4), no score scaling.
    let m = mha(MultiHeadAttentionConfig::new(16, 4)
        .with_head_dim(Some(6))
        .with_scale(Some(1.0))
        .with_qkv_bias(false)
        .with_out_bias(false));
    assert_eq!(separate(&m).q_proj.weight.dims(), [16, 24]);
    assert_eq!(m.o_proj().weight.dims(), [24, 16]);
    let input = x(2, 5, 16, 21);
    for kernel in [
        AttentionKernel::Fused,
        AttentionKernel::Reference,
        AttentionKernel::Chunked {
            block_q: 2,
            block_k: 3,
        },
    ] {
        let got = m
            .clone()
            .with_kernel(kernel)
            .forward(AttentionInput::new(input.clone()).causal())
            .unwrap()
            .context;
        let want = independent_self(&m, &input, true, 1.0);
        assert!(
            max_abs_diff(&got, &want) < 1e-4,
            "{kernel:?}: {}",
            max_abs_diff(&got, &want)
        );
        let default_scale = independent_self(&m, &input, true, 1.0 / 6f64.sqrt());
        assert!(
            max_abs_diff(&got, &default_scale) > 1e-3,
            "the scale must matter"
        );
    }
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_scale(Some(0.0))
        .init(&test_device())
        .unwrap_err();
    assert_eq!(e.to_string(), "scale must be finite and > 0, got 0");
}

#[test]
fn cross_attention_cache_equals_the_full_forward() {
    let m = cross(
        MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(2))
            .with_d_context(Some(8)),
    );
    let ctx = x(2, 5, 8, 31);
    let pad = padding_mask_from_lengths(&[5, 3], 5, &ctx.device());
    let cache = m.cross_kv(ctx.clone()).unwrap();
    assert_eq!((cache.len(), cache.batch()), (5, 2));
    // Step by step, the decoder's queries read the same projected keys.
    for t in 0..3 {
        let q = x(2, 1, 16, 40 + t);
        let full = m
            .forward(
                AttentionInput::new(q.clone()).key_padding(pad.clone()),
                ctx.clone(),
            )
            .unwrap()
            .context;
        let cached = m
            .forward_cached(AttentionInput::new(q).key_padding(pad.clone()), &cache)
            .unwrap()
            .context;
        assert!(max_abs_diff(&full, &cached) < 1e-5);
        // Negative control: a cache of another source gives another result.
        let other = m.cross_kv(ctx.clone() * -1.0).unwrap();
        let moved = m
            .forward_cached(
                AttentionInput::new(x(2, 1, 16, 40 + t)).key_padding(pad.clone()),
                &other,
            )
            .unwrap()
            .context;
        assert!(max_abs_diff(&full, &moved) > 1e-3);
    }
    let e = m
        .forward_cached(AttentionInput::new(x(3, 1, 16, 1)), &cache)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "attention input: expected shape [2, _, 16], got [3, 1, 16]"
    );
}

#[test]
fn alibi_linear_and_global_windows_are_reachable_from_the_config() {
    let dev = test_device();
    let input = x(1, 9, 16, 50);
    // ALiBi: the layer equals the reference path with the crate's ALiBi bias added.
    let m = mha(MultiHeadAttentionConfig::new(16, 4).with_position_bias(PositionBias::Alibi));
    let got = m
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let plain = mha_with_bias_off(m.clone());
    let bias = crate::position::alibi_bias(4, 9, 9, 0, &dev);
    let want = plain
        .forward(
            AttentionInput::new(input.clone())
                .causal()
                .mask(Mask::none().with_bias(bias)),
        )
        .unwrap()
        .context;
    assert!(max_abs_diff(&got, &want) < 1e-5);
    // Negative control: without the bias the layer computes something else.
    let unbiased = plain
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    assert!(max_abs_diff(&got, &unbiased) > 1e-3);
    // Linear attention through the config equals the kernel on the projections.
    let lin =
        mha(MultiHeadAttentionConfig::new(16, 4).with_kernel(AttentionKernel::Linear { chunk: 4 }));
    let got = lin
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let [q, k, v] = lin.project(input.clone());
    let want = lin
        .finish(attention_linear(q, k, v, true, None, 9).unwrap(), None)
        .context;
    assert!(max_abs_diff(&got, &want) < 1e-4);
    // Negative control: the same weights with softmax attention differ.
    let softmax = lin
        .clone()
        .with_kernel(AttentionKernel::Reference)
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    assert!(max_abs_diff(&got, &softmax) > 1e-3);
    assert!(
        lin.forward_cached(AttentionInput::new(input.clone()), &mut KvCache::new(16))
            .is_err()
    );
    // A window with a global token through the config equals the sliding kernel.
    let win = mha(MultiHeadAttentionConfig::new(16, 4)
        .with_window(Some(3))
        .with_global_tokens(vec![0]));
    let got = win
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let [q, k, v] = win.project(input.clone());
    let out = crate::sdpa::attention_sliding_window(q, k, v, 3, true, &[0], None, 4).unwrap();
    assert!(max_abs_diff(&got, &win.finish(out, None).context) < 1e-5);
    // Negative control: the same weights without the window differ.
    let mut unwindowed = win.clone();
    positions_mut(&mut unwindowed).window = None;
    positions_mut(&mut unwindowed).global_tokens.clear();
    let full = unwindowed
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    assert!(max_abs_diff(&got, &full) > 1e-3);
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_global_tokens(vec![0])
        .init(&dev)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "global_tokens only mean something with a window"
    );
}

/// The same layer without its ALiBi bias.
fn mha_with_bias_off(mut m: SelfAttention) -> SelfAttention {
    positions_mut(&mut m).alibi = false;
    m
}

#[test]
fn a_mask_of_the_wrong_shape_is_an_error() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4));
    let pad = padding_mask_from_lengths(&[3], 4, &test_device());
    let e = m
        .forward(AttentionInput::new(x(1, 5, 16, 1)).key_padding(pad))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "attention mask: expected shape broadcastable to [1, 4, 5, 5], got [1, 1, 1, 4]"
    );
}

#[test]
fn fused_qkv_equals_separate_projections_with_the_same_weights() {
    let sep = mha(MultiHeadAttentionConfig::new(8, 2).with_n_kv_heads(Some(1)));
    let mut fused = mha(MultiHeadAttentionConfig::new(8, 2)
        .with_n_kv_heads(Some(1))
        .with_fused_qkv(true));
    let w = Tensor::cat(
        vec![
            separate(&sep).q_proj.weight.val(),
            separate(&sep).k_proj.weight.val(),
            separate(&sep).v_proj.weight.val(),
        ],
        1,
    );
    let bias = Tensor::cat(
        vec![
            separate(&sep).q_proj.bias.as_ref().unwrap().val(),
            separate(&sep).k_proj.bias.as_ref().unwrap().val(),
            separate(&sep).v_proj.bias.as_ref().unwrap().val(),
        ],
        0,
    );
    let SelfAttention::Fused(f) = &mut fused else {
        panic!("fused_qkv builds a fused layer");
    };
    f.qkv_proj.weight = burn::module::Param::from_tensor(w);
    f.qkv_proj.bias = Some(burn::module::Param::from_tensor(bias));
    f.o_proj = sep.o_proj().clone();
    let input = x(1, 4, 8, 9);
    let a = sep
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let b = fused
        .forward(AttentionInput::new(input).causal())
        .unwrap()
        .context;
    assert!(max_abs_diff(&a, &b) < 1e-6);
}

#[test]
fn weights_path_equals_fast_path() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4)
        .with_n_kv_heads(Some(2))
        .with_rope_max_len(Some(16)));
    let input = x(2, 7, 16, 10);
    let fast = m
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap();
    let slow = m
        .forward(AttentionInput::new(input).causal().with_weights())
        .unwrap();
    assert!(fast.weights.is_none());
    assert!(max_abs_diff(&fast.context, &slow.context) < 1e-5);
    let w = slow.weights.unwrap();
    assert_eq!(w.dims(), [2, 4, 7, 7]);
    // Causal: weight on the future is exactly zero.
    let upper = w
        .slice([0..2, 0..4, 0..1, 1..7])
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert!(upper.iter().all(|v| *v == 0.0));
}

#[test]
fn cross_attention_reads_the_context() {
    let m = cross(MultiHeadAttentionConfig::new(16, 4).with_d_context(Some(8)));
    let q = x(2, 3, 16, 12);
    let ctx = x(2, 5, 8, 13);
    let out = m
        .forward(AttentionInput::new(q.clone()).with_weights(), ctx.clone())
        .unwrap();
    assert_eq!(out.weights.unwrap().dims(), [2, 4, 3, 5]);
    let other = m.forward(AttentionInput::new(q), ctx * 2.0).unwrap();
    assert!(max_abs_diff(&out.context, &other.context) > 1e-3);
    let bad = m.forward(AttentionInput::new(x(2, 3, 16, 1)), x(3, 5, 8, 1));
    assert!(matches!(
        bad,
        Err(AttentionError::Shape {
            what: "attention context",
            ..
        })
    ));
}

fn decode_step_by_step(m: &SelfAttention, input: &Tensor<3>, mut cache: KvCache) -> Tensor<3> {
    let [b, t, d] = input.dims();
    let mut outs = Vec::new();
    // A prompt of 3, then one token at a time.
    let prompt = input.clone().slice([0..b, 0..3, 0..d]);
    outs.push(
        m.forward_cached(AttentionInput::new(prompt), &mut cache)
            .unwrap()
            .context,
    );
    for i in 3..t {
        let step = input.clone().slice([0..b, i..i + 1, 0..d]);
        outs.push(
            m.forward_cached(AttentionInput::new(step), &mut cache)
                .unwrap()
                .context,
        );
    }
    Tensor::cat(outs, 1)
}

#[test]
fn cache_equals_full_forward() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4)
        .with_n_kv_heads(Some(2))
        .with_rope_max_len(Some(32)));
    let input = x(2, 9, 16, 14);
    let full = m
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let cached = decode_step_by_step(&m, &input, KvCache::new(32));
    assert!(
        max_abs_diff(&full, &cached) < 1e-5,
        "{}",
        max_abs_diff(&full, &cached)
    );
    // Negative control: changing token 6 leaves positions 0..6 within the tolerance
    // and moves positions 6.. by far more.
    let bumped = input
        .clone()
        .slice_assign([0..2, 6..7, 0..16], x(2, 1, 16, 99));
    let other = decode_step_by_step(&m, &bumped, KvCache::new(32));
    let part = |t: &Tensor<3>, r: std::ops::Range<usize>| t.clone().slice([0..2, r, 0..16]);
    assert!(max_abs_diff(&part(&cached, 0..6), &part(&other, 0..6)) < 1e-5);
    assert!(max_abs_diff(&part(&cached, 6..9), &part(&other, 6..9)) > 1e-2);
}

#[test]
fn sliding_window_cache_equals_windowed_forward() {
    let m = mha(MultiHeadAttentionConfig::new(16, 4)
        .with_rope_max_len(Some(32))
        .with_window(Some(3)));
    let input = x(1, 9, 16, 15);
    let full = m
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let cached = decode_step_by_step(&m, &input, KvCache::sliding(3).unwrap());
    assert!(max_abs_diff(&full, &cached) < 1e-5);
    // And the window really limits what is seen.
    let plain = mha(MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(32)));
    let unwindowed = plain
        .forward(AttentionInput::new(input).causal())
        .unwrap()
        .context;
    assert!(max_abs_diff(&full, &unwindowed) > 1e-4);
}

#[test]
fn full_cache_is_a_clear_error() {
    let m = mha(MultiHeadAttentionConfig::new(8, 2));
    let mut cache = KvCache::new(4);
    m.forward_cached(AttentionInput::new(x(1, 4, 8, 1)), &mut cache)
        .unwrap();
    let e = m
        .forward_cached(AttentionInput::new(x(1, 1, 8, 1)), &mut cache)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "kv cache: position 4 is past the maximum length 4"
    );
}

#[test]
fn chunked_kernel_equals_fused() {
    let cfg = MultiHeadAttentionConfig::new(16, 4).with_rope_max_len(Some(32));
    let fused = mha(cfg);
    let chunked = fused.clone().with_kernel(AttentionKernel::Chunked {
        block_q: 3,
        block_k: 4,
    });
    let input = x(2, 10, 16, 16);
    let a = fused
        .forward(AttentionInput::new(input.clone()).causal())
        .unwrap()
        .context;
    let b = chunked
        .forward(AttentionInput::new(input).causal())
        .unwrap()
        .context;
    assert!(max_abs_diff(&a, &b) < 1e-5, "{}", max_abs_diff(&a, &b));
}

#[test]
fn a_per_head_qkv_equals_separate_projections_of_its_deinterleaved_columns() {
    // GPT-NeoX's order: for each head h, its q, k and v columns side by side.
    let (d, h) = (8, 2);
    let hd = d / h;
    let sep = mha(MultiHeadAttentionConfig::new(d, h).with_rope_max_len(Some(8)));
    let mut fused = mha(MultiHeadAttentionConfig::new(d, h)
        .with_fused_qkv(true)
        .with_qkv_layout(QkvLayout::PerHead)
        .with_rope_max_len(Some(8)));
    let s = separate(&sep);
    let cols = |w: Tensor<2>, head: usize| w.slice([0..d, head * hd..(head + 1) * hd]);
    let bias = |b: Tensor<1>, head: usize| b.narrow(0, head * hd, hd);
    let (mut ws, mut bs) = (Vec::new(), Vec::new());
    for head in 0..h {
        for p in [&s.q_proj, &s.k_proj, &s.v_proj] {
            ws.push(cols(p.weight.val(), head));
            bs.push(bias(p.bias.as_ref().unwrap().val(), head));
        }
    }
    let SelfAttention::Fused(f) = &mut fused else {
        panic!("fused_qkv builds a fused layer");
    };
    f.qkv_proj.weight = burn::module::Param::from_tensor(Tensor::cat(ws, 1));
    f.qkv_proj.bias = Some(burn::module::Param::from_tensor(Tensor::cat(bs, 0)));
    f.o_proj = sep.o_proj().clone();
    let input = x(2, 5, d, 21);
    let run = |m: &SelfAttention| {
        m.forward(AttentionInput::new(input.clone()).causal())
            .unwrap()
            .context
    };
    let (a, b) = (run(&sep), run(&fused));
    assert!(max_abs_diff(&a, &b) < 1e-5, "{}", max_abs_diff(&a, &b));
    // Negative control: the same matrix read as blocked [Q | K | V] is another layer.
    let SelfAttention::Fused(f) = &mut fused else {
        unreachable!()
    };
    f.layout = QkvLayout::Blocked;
    assert!(max_abs_diff(&a, &run(&fused)) > 1e-3);
}

#[test]
fn partial_rotary_turns_the_first_features_and_passes_the_rest() {
    use crate::position::RotaryEncodingConfig;
    let dev = test_device();
    let partial = RotaryEncodingConfig::new(4, 16).init(&dev).unwrap();
    assert_eq!(partial.rotary_dim(), 4);
    let q = Tensor::<4>::random([1, 2, 3, 8], Distribution::Normal(0.0, 1.0), &dev);
    let out = partial.forward(q.clone(), 5).unwrap();
    let head = |t: Tensor<4>, r: std::ops::Range<usize>| t.slice([0..1, 0..2, 0..3, r]);
    // The last 4 features pass through; the first 4 are what a 4-wide RoPE makes of them.
    assert_eq!(
        max_abs_diff(&head(out.clone(), 4..8), &head(q.clone(), 4..8)),
        0.0
    );
    let full = partial.forward(head(q.clone(), 0..4), 5).unwrap();
    assert!(max_abs_diff(&head(out.clone(), 0..4), &full) < 1e-6);
    assert!(
        max_abs_diff(&head(out, 0..4), &head(q, 0..4)) > 1e-2,
        "nothing turned"
    );
    // The setting is checked: even, and within the head.
    for (dim, want) in [
        (
            3,
            "rope_dim must be even, > 0 and at most head_dim 4, got 3",
        ),
        (
            6,
            "rope_dim must be even, > 0 and at most head_dim 4, got 6",
        ),
    ] {
        let e = MultiHeadAttentionConfig::new(8, 2)
            .with_rope_max_len(Some(8))
            .with_rope_dim(Some(dim))
            .init(&dev)
            .unwrap_err();
        assert_eq!(e.to_string(), want);
    }
    let e = MultiHeadAttentionConfig::new(8, 2)
        .with_qkv_layout(QkvLayout::PerHead)
        .init(&dev)
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("a per-head QKV layout needs fused_qkv"),
        "{e}"
    );
}

#[test]
fn qk_norm_makes_the_scores_blind_to_the_scale_of_queries_and_keys() {
    let cfg = MultiHeadAttentionConfig::new(16, 4)
        .with_n_kv_heads(Some(2))
        .with_head_dim(Some(6))
        .with_qkv_bias(false)
        .with_rope_max_len(Some(8))
        .with_qk_norm(QkNorm::PerHead {
            kind: NormKind::RmsNorm,
            eps: 1e-9,
        });
    let normed = mha(cfg.clone());
    // Two norms of head_dim 6 beyond the projections.
    let plain_cfg = cfg.clone().with_qk_norm(QkNorm::None);
    assert_eq!(cfg.num_params(), plain_cfg.num_params() + 12);
    let input = x(2, 5, 16, 3);
    let out = |m: &SelfAttention| {
        m.forward(AttentionInput::new(input.clone()).causal())
            .unwrap()
            .context
    };
    // Queries 4x and keys 0.5x as large: each head's RMS norm undoes it (up to its
    // tiny epsilon).
    let scale = |m: &SelfAttention| {
        let mut m = m.clone();
        if let SelfAttention::Separate(s) = &mut m {
            s.q_proj.weight = s.q_proj.weight.clone().map(|w| w * 4.0);
            s.k_proj.weight = s.k_proj.weight.clone().map(|w| w * 0.5);
        }
        m
    };
    let want = out(&normed);
    let d = max_abs_diff(&out(&scale(&normed)), &want);
    assert!(d < 1e-4, "{d}");
    // Without the norms the same scaling changes the output.
    let mut plain = normed.clone();
    if let SelfAttention::Separate(s) = &mut plain {
        s.qk_norm = None;
    }
    assert!(max_abs_diff(&out(&scale(&plain)), &out(&plain)) > 1e-2);
    assert!(max_abs_diff(&out(&plain), &want) > 1e-3, "the norms act");
    // Cross-attention has no QK-norm.
    let e = MultiHeadAttentionConfig::new(16, 4)
        .with_qk_norm(cfg.qk_norm)
        .init_cross(&test_device())
        .unwrap_err()
        .to_string();
    assert!(e.contains("qk_norm is a self-attention setting"), "{e}");
}
