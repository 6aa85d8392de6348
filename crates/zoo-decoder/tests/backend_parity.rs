//! Backend parity for whole models: the same decoder weights and inputs give the same
//! logits, the same cached decoding and the same attention kernels on every compiled
//! backend, within `atol 1e-4 + rtol 1e-3` (f32, after several layers).
//!
//! Under the default run (flex) every other compiled CPU backend is compared with flex, and
//! a skip is recorded when there is none; in the backend matrix
//! (`ZOO_TEST_DEVICE=<backend>`) that backend is.

use burn::module::Module;
use burn::tensor::{Device, Distribution, Tensor};
use zoo_attention::Mask;
use zoo_attention::sdpa::{attention_chunked, attention_reference, attention_sliding_window};
use zoo_core::{CausalLm, DecodeStep, GenerationConfig, generate};
use zoo_decoder::{DecoderConfig, DecoderInput, DecoderLm};
use zoo_device::{BackendName, DeviceError, record_skip, select};

/// `max |want - got| / (1e-4 + 1e-3 |want|)`; NaN (which fails every `<=`) when either
/// side holds one, and a panic on a length mismatch.
fn worst(what: &str, want: &[f32], got: &[f32]) -> f32 {
    assert!(!want.is_empty(), "{what}: nothing to compare");
    zoo_device::testing::max_scaled_diff(want, got, 1e-4, 1e-3)
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn models(device: &Device) -> Vec<(&'static str, DecoderLm)> {
    device.seed(3);
    // Weights of std 0.3: attention is far from uniform, so a wrong mask shows.
    [
        ("gpt2-style", DecoderConfig::new(23, 32, 2, 4, 32)),
        ("llama-style", DecoderConfig::tiny_llama(23, 32)),
        (
            "mistral-style",
            DecoderConfig::tiny_llama(23, 32).with_sliding_window(Some(4)),
        ),
        (
            "phi3-style",
            DecoderConfig::tiny_llama(23, 32)
                .with_fused_qkv(true)
                .with_gate_layout(zoo_attention::GateLayout::Fused),
        ),
    ]
    .into_iter()
    .map(|(name, cfg)| (name, cfg.with_init_std(0.3).init(device).unwrap()))
    .collect()
}

fn compare(target: BackendName) {
    let reference = select(BackendName::Flex).unwrap();
    let device = match select(target) {
        Ok(d) => d,
        Err(e @ DeviceError::NoDevice { .. }) => {
            record_skip(&format!("decoder_backend_parity[{target}]"), &e.to_string());
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let rows = vec![
        vec![1, 5, 9, 2, 7, 3, 3, 8, 11, 4],
        vec![6, 2, 0, 9, 13, 1, 5, 22, 17, 2],
    ];
    for (name, model) in models(&reference) {
        let moved = model.clone().to_device(&device);
        // The whole model, every position.
        let logits = |m: &DecoderLm, d: &Device| {
            values(
                m.forward(DecoderInput::from_ids(&rows, d).unwrap())
                    .unwrap()
                    .logits,
            )
        };
        let w = worst(name, &logits(&model, &reference), &logits(&moved, &device));
        assert!(w <= 1.0, "{target} vs flex, {name} logits: {w}");
        // Cached decoding: a prompt then single tokens, through the cache.
        let cached = |m: &DecoderLm| {
            let mut cache = DecoderLm::new_cache(m);
            let mut out = Vec::new();
            for (from, to) in [(0, 6), (6, 7), (7, 8), (8, 10)] {
                let step = DecodeStep {
                    tokens: rows.iter().map(|r| r[from..to].to_vec()).collect(),
                    positions: vec![(from..to).collect(); 2],
                    key_padding: vec![vec![false; to]; 2],
                };
                out.extend(values(m.next_logits(step, Some(&mut cache)).unwrap()));
            }
            out
        };
        let w = worst(name, &cached(&model), &cached(&moved));
        assert!(w <= 1.0, "{target} vs flex, {name} cached decoding: {w}");
        // Greedy generation from left-padded prompts picks the same tokens.
        let prompts = [vec![1, 5, 9], vec![7]];
        let cfg = GenerationConfig::greedy(8);
        let a = generate(&model, &prompts, &cfg, |_, _| {}).unwrap();
        let b = generate(&moved, &prompts, &cfg, |_, _| {}).unwrap();
        assert_eq!(a.tokens, b.tokens, "{target} vs flex, {name} generation");
    }
    // The chunked and sliding kernels against flex's reference path.
    reference.seed(4);
    let n = Distribution::Normal(0.0, 1.0);
    let [q, k, v] = [0, 1, 2].map(|_| Tensor::<4>::random([2, 3, 19, 8], n, &reference));
    let on = |t: &Tensor<4>| t.clone().to_device(&device);
    let (want, _) =
        attention_reference(q.clone(), k.clone(), v.clone(), &Mask::causal(), None, None).unwrap();
    let got = attention_chunked(on(&q), on(&k), on(&v), &Mask::causal(), None, 5, 4).unwrap();
    let w = worst("chunked", &values(want), &values(got));
    assert!(w <= 1.0, "{target} vs flex, chunked kernel: {w}");
    let want = attention_sliding_window(q.clone(), k.clone(), v.clone(), 4, true, &[0, 9], None, 6)
        .unwrap();
    let got = attention_sliding_window(on(&q), on(&k), on(&v), 4, true, &[0, 9], None, 6).unwrap();
    let w = worst("sliding", &values(want), &values(got));
    assert!(w <= 1.0, "{target} vs flex, sliding-window kernel: {w}");
}

#[test]
fn decoder_backend_parity() {
    for b in zoo_device::testing::parity_backends("decoder_backend_parity") {
        compare(b);
    }
}

#[test]
fn the_comparison_fails_on_nan_and_on_length() {
    assert!(worst("t", &[1.0, f32::NAN], &[1.0, 1.0]).is_nan());
    assert!(std::panic::catch_unwind(|| worst("t", &[1.0], &[1.0, 2.0])).is_err());
    assert!(worst("t", &[1.0, 2.0], &[1.0, 2.0]) == 0.0);
    assert!(worst("t", &[1.0], &[1.1]) > 1.0);
}
