//! The `config.json` files of released checkpoints (TinyLlama-1.1B, SmolLM2-1.7B and
//! Llama-3.2-1B, their published values in `tests/fixtures/configs`) load as Llama
//! configs, and the models they describe have the parameter counts `transformers` gives
//! them (`LlamaForCausalLM` built on the meta device: 1,100,048,384, 1,711,376,384 and
//! 1,235,814,400, tied embeddings counted once).

use std::path::Path;

use zoo_attention::RopeScaling;
use zoo_decoder::{HfDecoderConfig, PositionKind};

fn config(name: &str) -> HfDecoderConfig {
    let dir = std::env::temp_dir().join(format!("zoo-real-config-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/configs")
        .join(format!("{name}.json"));
    std::fs::copy(src, dir.join("config.json")).unwrap();
    let cfg = HfDecoderConfig::from_pretrained(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    cfg
}

fn theta(positions: PositionKind) -> f64 {
    match positions {
        PositionKind::Rope { theta, .. } => theta,
        PositionKind::Learned => panic!("learned positions"),
    }
}

#[test]
fn tinyllama_smollm2_and_llama_3_2_load_with_their_sizes() {
    let tiny = config("tinyllama-1.1b");
    let d = tiny.decoder().unwrap();
    assert_eq!(tiny.architecture(), "LlamaForCausalLM");
    assert_eq!((d.n_layers, d.n_heads, d.n_kv_heads), (22, 32, Some(4)));
    assert!(!d.tie_embeddings);
    assert_eq!(theta(d.positions), 10000.0);
    assert_eq!(d.num_params(), 1_100_048_384);
    assert_eq!(tiny.eos_token_ids(), [2]);

    let smol = config("smollm2-1.7b");
    let d = smol.decoder().unwrap();
    assert_eq!((d.n_layers, d.n_kv_heads, d.max_len), (24, Some(32), 8192));
    assert!(d.tie_embeddings);
    assert_eq!(theta(d.positions), 130000.0);
    assert_eq!(d.num_params(), 1_711_376_384);

    let llama = config("llama-3.2-1b");
    let d = llama.decoder().unwrap();
    assert_eq!(
        (d.n_layers, d.n_kv_heads, d.head_dim),
        (16, Some(8), Some(64))
    );
    assert!(d.tie_embeddings);
    assert_eq!(theta(d.positions), 500000.0);
    assert_eq!(
        d.rope_scaling,
        RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        }
    );
    assert_eq!(d.num_params(), 1_235_814_400);
    assert_eq!(llama.eos_token_ids(), [128009]);
}

/// Every RoPE type the zoo reads gives the inverse frequencies and the attention factor
/// that `transformers`' RoPE initialisation functions give for the same `config.json`
/// fields (`tests/fixtures/rope/frequencies.json`, written by `xtask/fixtures/rope.py`):
/// default, linear, dynamic, Llama 3.1's, YaRN in three forms, and LongRoPE below and past
/// its original context. transformers computes in f32: within 2e-6 of each value,
/// relatively.
#[test]
fn rope_frequencies_and_factors_match_transformers() {
    #[derive(serde::Deserialize)]
    struct Case {
        name: String,
        config: serde_json::Value,
        seq_len: Option<usize>,
        inv_freq: Vec<f64>,
        attention_factor: f64,
    }
    #[derive(serde::Deserialize)]
    struct File {
        cases: Vec<Case>,
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rope/frequencies.json");
    let file: File = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(file.cases.len(), 9);
    let mut seen = Vec::new();
    for case in file.cases {
        let fields: zoo_decoder::hf::RopeFields =
            serde_json::from_value(case.config.clone()).unwrap();
        let max = case.config["max_position_embeddings"].as_u64().unwrap() as usize;
        let dim = case.config["head_dim"].as_u64().unwrap() as usize;
        let (theta, scaling) = fields.resolve(None, max).unwrap();
        let got = match scaling.long_frequencies(theta, dim) {
            Some((long, after)) if case.seq_len.is_some_and(|n| n > after) => long,
            _ => scaling.frequencies(theta, dim),
        };
        assert_eq!(got.len(), case.inv_freq.len(), "{}", case.name);
        for (i, (g, w)) in got.iter().zip(&case.inv_freq).enumerate() {
            assert!(
                (g - w).abs() <= 2e-6 * w.abs(),
                "{} pair {i}: {g} against transformers' {w}",
                case.name
            );
        }
        let (g, w) = (scaling.attention_factor(), case.attention_factor);
        assert!(
            (g - w).abs() <= 1e-12,
            "{}: factor {g} against {w}",
            case.name
        );
        seen.push((case.name, got));
    }
    // Negative controls: the scalings move the frequencies away from the default ones
    // (the short and long LongRoPE sets from each other), all but dynamic, which leaves
    // them within the model's positions.
    let of = |name: &str| &seen.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(of("dynamic"), of("default"));
    assert!(
        of("linear")
            .iter()
            .zip(of("default"))
            .any(|(a, b)| (a - b).abs() > 1e-3)
    );
    assert_ne!(of("longrope-short"), of("longrope-long"));
}
