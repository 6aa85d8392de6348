//! HF checkpoints against `transformers`: tiny random-weight T5 (gated-gelu, `d_kv` 8 with
//! `d_model` 20 and 3 heads, untied head; and relu with the tied, scaled head) and Marian
//! (swish, scaled embeddings, forced EOS), written by `cargo xtask fixtures`. Logits,
//! the encoder's output and cross-attention weights agree within 1e-4 on the backend under
//! test; greedy and 4-beam generation give HF's token ids; cached decoding projects the
//! cross-attention keys and values once and equals uncached decoding; T5's buckets equal
//! HF's in both directions, near and far.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::Deserialize;
use zoo_core::{
    BeamConfig, CausalLm, DecodeStep, GenerationConfig, WeightsFile, beam_search, generate,
};
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices};
use zoo_fixtures::Output;
use zoo_seq2seq::{
    DecodeInput, Encoded, EncoderDecoder, Frame, MarianMtModel, MarianVariant, Memory, Source,
    T5ForConditionalGeneration, beam_from, generate_from,
};

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

#[derive(Deserialize)]
struct Expected {
    sources: Vec<Vec<usize>>,
    decoder_input_ids: Vec<Vec<i64>>,
    logits: Output,
    encoder_last_hidden_state: Output,
    cross_attentions_last: Output,
    greedy: Vec<Vec<usize>>,
    beam: Vec<Vec<usize>>,
    beam_scores: Vec<f32>,
}

fn expected(name: &str) -> Expected {
    zoo_fixtures::expected(&fixture(name))
}

const MODELS: [&str; 5] = [
    "t5-tiny",
    "t5-tiny-tied",
    "marian-tiny",
    "bart-tiny",
    "mbart-tiny",
];

fn ids(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), rows[0].len()]), device)
}

fn close<const D: usize>(what: &str, got: Tensor<D>, want: &Output) {
    assert_eq!(got.dims().to_vec(), want.shape, "{what} shape");
    let diff = max_abs_diff_slices(&floats(got), &want.values);
    assert!(
        diff <= 1e-4,
        "{what}: max abs diff {diff} against transformers"
    );
}

/// HF pads an early-ended hypothesis with the pad id, 0 here.
fn padded(rows: &[Vec<usize>], len: usize) -> Vec<Vec<usize>> {
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            r.resize(len, 0);
            r
        })
        .collect()
}

fn check_model<M: EncoderDecoder>(name: &str, model: &M, e: &Expected, device: &Device) {
    let source = Source::from_ids(&e.sources, model.pad_id(), device).unwrap();
    close(
        &format!("{name} encoder output"),
        model.encode(&source).unwrap(),
        &e.encoder_last_hidden_state,
    );
    let memory = Memory::States(model.encode(&source).unwrap());
    let out = model
        .decode(
            DecodeInput::new(ids(&e.decoder_input_ids, device), &memory, &source.padding)
                .with_weights(),
        )
        .unwrap();
    close(&format!("{name} logits"), out.logits, &e.logits);
    close(
        &format!("{name} last layer's cross-attention"),
        out.cross_attentions.last().unwrap().clone(),
        &e.cross_attentions_last,
    );
    // Greedy (as one beam, which applies Marian's forced EOS as HF does) and 4 beams.
    let greedy = beam_from(model, &e.sources, &BeamConfig::new(1, 10)).unwrap();
    assert_eq!(
        padded(&greedy.tokens, e.greedy[0].len()),
        e.greedy,
        "{name} greedy"
    );
    let beam = beam_from(model, &e.sources, &BeamConfig::new(4, 10)).unwrap();
    assert_eq!(padded(&beam.tokens, e.beam[0].len()), e.beam, "{name} beam");
    let diff = max_abs_diff_slices(&beam.scores, &e.beam_scores);
    assert!(diff < 1e-4, "{name}: beam scores differ by {diff}");
}

#[test]
fn logits_generation_and_cross_attention_match_transformers() {
    let device = test_device();
    for name in MODELS {
        let e = expected(name);
        if name.starts_with("t5") {
            let m = T5ForConditionalGeneration::from_pretrained(fixture(name), &device).unwrap();
            check_model(name, &m, &e, &device);
        } else {
            let m = MarianMtModel::from_pretrained(fixture(name), &device).unwrap();
            check_model(name, &m, &e, &device);
        }
    }
}

#[test]
fn the_fixtures_exercise_what_they_claim() {
    let device = test_device();
    let t5 = T5ForConditionalGeneration::from_pretrained(fixture("t5-tiny"), &device).unwrap();
    let attn = &t5.encoder[0].self_attn;
    assert_eq!((attn.n_heads(), attn.head_dim()), (3, 8));
    assert_eq!(t5.config().d_model, 20);
    assert!(!t5.config().scales_decoder_outputs());
    assert!(t5.encoder[0].self_attn.relative_bias().is_some());
    assert!(t5.encoder[1].self_attn.relative_bias().is_none());
    assert_eq!((t5.encoder.len(), t5.decoder.len()), (3, 2));
    let tied =
        T5ForConditionalGeneration::from_pretrained(fixture("t5-tiny-tied"), &device).unwrap();
    assert!(tied.lm_head.is_tied() && tied.config().scales_decoder_outputs());
    let marian = MarianMtModel::from_pretrained(fixture("marian-tiny"), &device).unwrap();
    assert!(marian.config().scale_embedding);
    assert_eq!(marian.config().forced_eos_token_id, Some(1));
    // Beam search finds other sequences than greedy on T5, so the beam check is not greedy.
    assert_ne!(expected("t5-tiny").beam, expected("t5-tiny").greedy);
    // BART: learned positions (42 rows for 40 positions) and embedding norms, post-norm;
    // mBART: the same, pre-norm, with both final norms and a forced first token read
    // from generation_config.json.
    for (name, variant, final_norms) in [
        ("bart-tiny", MarianVariant::Bart, 0),
        ("mbart-tiny", MarianVariant::MBart, 2),
    ] {
        let m = MarianMtModel::from_pretrained(fixture(name), &device).unwrap();
        assert_eq!(m.config().variant(), variant);
        let Frame::Learned(frame) = &m.frame else {
            panic!("{name} has no learned positions");
        };
        assert_eq!(frame.encoder_positions.weight.dims(), [42, 16]);
        assert_eq!(frame.final_norms.len(), final_norms, "{name}");
    }
    let mbart = MarianMtModel::from_pretrained(fixture("mbart-tiny"), &device).unwrap();
    assert_eq!(mbart.config().forced_bos_token_id, Some(5));
    assert!(expected("mbart-tiny").greedy.iter().all(|row| row[0] == 5));
}

/// The forced first token is what puts mBART's 5 first: without it, greedy search
/// starts elsewhere (a negative control of the forced-BOS check above).
#[test]
fn without_its_forced_bos_mbart_starts_elsewhere() {
    let device = test_device();
    let e = expected("mbart-tiny");
    let dir = std::env::temp_dir().join(format!("zoo-seq2seq-mbart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("mbart-tiny").join(f), dir.join(f)).unwrap();
    }
    let free = MarianMtModel::from_pretrained(&dir, &device).unwrap();
    assert_eq!(free.config().forced_bos_token_id, None);
    let greedy = beam_from(&free, &e.sources, &BeamConfig::new(1, 10)).unwrap();
    assert!(
        greedy.tokens.iter().all(|row| row[0] != 5),
        "{:?}",
        greedy.tokens
    );
    let forced = beam_from(
        &free,
        &e.sources,
        &BeamConfig::new(1, 10).with_forced_bos(5),
    )
    .unwrap();
    assert_eq!(padded(&forced.tokens, e.greedy[0].len()), e.greedy);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cached_decoding_projects_the_source_once_and_equals_uncached() {
    let device = test_device();
    let model = T5ForConditionalGeneration::from_pretrained(fixture("t5-tiny"), &device).unwrap();
    let e = expected("t5-tiny");
    let source = Source::from_ids(&e.sources, 0, &device).unwrap();
    // Step by step through the cache against the whole sequence at once.
    let encoded = Encoded::new(&model, &source).unwrap();
    let tgt: Vec<Vec<usize>> = e
        .decoder_input_ids
        .iter()
        .map(|r| r.iter().map(|&x| x as usize).collect())
        .collect();
    let mut cache = encoded.new_cache(2).unwrap();
    let mut stepped = Vec::new();
    for i in 0..tgt[0].len() {
        let step = DecodeStep {
            tokens: tgt.iter().map(|r| vec![r[i]]).collect(),
            positions: vec![vec![i]; 2],
            key_padding: vec![vec![false; i + 1]; 2],
        };
        stepped.push(encoded.next_logits(step, Some(&mut cache)).unwrap());
    }
    assert_eq!(encoded.cross_projections(), 1, "projected once for 7 steps");
    let v = model.config().vocab_size;
    let want = floats(
        model
            .forward(&source, ids(&e.decoder_input_ids, &device))
            .unwrap()
            .logits,
    );
    let at = |all: &[f32], i: usize| -> Vec<f32> {
        (0..2)
            .flat_map(|b| all[(b * 7 + i) * v..(b * 7 + i + 1) * v].to_vec())
            .collect()
    };
    for (i, got) in stepped.into_iter().enumerate() {
        let diff = max_abs_diff_slices(&floats(got), &at(&want, i));
        assert!(diff < 1e-4, "position {i}: {diff}");
    }
    // Negative control: with the two sources swapped, the same decoder inputs give
    // logits that differ by far more than the tolerance, so the check above sees the
    // source through the cached keys and values.
    let swapped =
        Source::from_ids(&[e.sources[1].clone(), e.sources[0].clone()], 0, &device).unwrap();
    let other = floats(
        model
            .forward(&swapped, ids(&e.decoder_input_ids, &device))
            .unwrap()
            .logits,
    );
    assert!(max_abs_diff_slices(&at(&other, 3), &at(&want, 3)) > 1e-2);
    // Generation with and without the cache: the same tokens; without it, the keys and
    // values are projected again at every step.
    let cfg = GenerationConfig::greedy(10).with_stop_tokens(vec![1]);
    let prompts = vec![vec![0]; 2];
    let a = Encoded::new(&model, &source).unwrap();
    let cached = generate(&a, &prompts, &cfg, |_, _| {}).unwrap();
    assert_eq!(a.cross_projections(), 1);
    let b = Encoded::new(&model, &source).unwrap();
    let uncached = generate(&b, &prompts, &cfg.clone().with_cache(false), |_, _| {}).unwrap();
    assert_eq!(cached.tokens, uncached.tokens);
    assert_eq!(b.cross_projections(), 1 + 10);
    assert_eq!(
        generate_from(&model, &e.sources, &GenerationConfig::greedy(10))
            .unwrap()
            .tokens,
        cached.tokens
    );
    // Beam search reorders the cached keys and values with the beams: with and without
    // the cache, the same hypotheses.
    let beam = BeamConfig::new(4, 10).with_stop_tokens(vec![1]);
    let c = Encoded::new(&model, &source).unwrap();
    let with = beam_search(&c, &prompts, &beam).unwrap();
    let without = beam_search(&c, &prompts, &beam.with_cache(false)).unwrap();
    assert_eq!(with.tokens, without.tokens);
}

#[derive(Deserialize)]
struct Buckets {
    relative: Vec<i64>,
    bidirectional: Vec<usize>,
    causal: Vec<usize>,
}

#[test]
fn relative_position_buckets_match_transformers() {
    let text = std::fs::read_to_string(fixture("buckets.json")).unwrap();
    let all: std::collections::BTreeMap<String, Buckets> = serde_json::from_str(&text).unwrap();
    assert_eq!(all.len(), 2);
    for (settings, b) in all {
        let (n, d) = settings.split_once('-').unwrap();
        let (n, d): (usize, usize) = (n.parse().unwrap(), d.parse().unwrap());
        for (i, &rel) in b.relative.iter().enumerate() {
            for (bidirectional, want) in [(true, b.bidirectional[i]), (false, b.causal[i])] {
                let got =
                    zoo_attention::position::relative_position_bucket(rel, bidirectional, n, d)
                        .unwrap();
                assert_eq!(
                    got, want,
                    "{settings}, relative {rel}, both ways {bidirectional}"
                );
            }
        }
        // The range reaches past max_distance both ways, where the last buckets saturate.
        assert!(b.relative[0] < -(d as i64) && *b.relative.last().unwrap() > d as i64);
    }
}

#[test]
fn saving_round_trips_and_bad_inputs_are_named() {
    let device = test_device();
    for name in MODELS {
        let dir = fixture(name);
        let out = std::env::temp_dir().join(format!("zoo-seq2seq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        if name.starts_with("t5") {
            T5ForConditionalGeneration::from_pretrained(&dir, &device)
                .unwrap()
                .save_pretrained(&out)
                .unwrap();
        } else {
            MarianMtModel::from_pretrained(&dir, &device)
                .unwrap()
                .save_pretrained(&out)
                .unwrap();
        }
        let contents = |d: &Path| WeightsFile::find(d).unwrap().contents().unwrap();
        assert_eq!(contents(&out), contents(&dir), "{name}");
        std::fs::remove_dir_all(&out).unwrap();
    }
    let model = MarianMtModel::from_pretrained(fixture("marian-tiny"), &device).unwrap();
    let v = model.config().vocab_size;
    let cases: [(Vec<Vec<usize>>, BeamConfig, String); 4] = [
        (
            vec![],
            BeamConfig::new(2, 5),
            "the source batch is empty".into(),
        ),
        (
            vec![vec![3], vec![]],
            BeamConfig::new(2, 5),
            "source 1 is empty".into(),
        ),
        (
            vec![vec![3, v]],
            BeamConfig::new(2, 5),
            format!(
                "source token id {v} at batch row 0, position 1 is out of range for vocab_size {v}"
            ),
        ),
        (
            vec![vec![3, 4]],
            BeamConfig::new(0, 5),
            "generation: num_beams must be >= 1, got 0".into(),
        ),
    ];
    for (sources, cfg, want) in cases {
        let e = beam_from(&model, &sources, &cfg).unwrap_err().to_string();
        assert_eq!(e, want);
    }
    let long = vec![vec![3; 65]];
    let e = beam_from(&model, &long, &BeamConfig::new(1, 5))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "source of 65 tokens is longer than max_len 64");
    // A config whose heads do not divide the width is named.
    let dir = std::env::temp_dir().join(format!("zoo-seq2seq-heads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("marian-tiny").join("config.json")).unwrap(),
    )
    .unwrap();
    cfg["decoder_attention_heads"] = 3.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = MarianMtModel::from_pretrained(&dir, &device)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("config.json: invalid encoder-decoder config: d_model 16 is not divisible by decoder_attention_heads 3"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configurations_count_the_parameters_their_models_have() {
    let device = zoo_device::test_device();
    for name in ["t5-tiny", "t5-tiny-tied"] {
        let m = T5ForConditionalGeneration::from_pretrained(fixture(name), &device).unwrap();
        assert_eq!(m.config().num_params().unwrap(), m.num_params(), "{name}");
    }
    for name in ["marian-tiny", "bart-tiny", "mbart-tiny"] {
        let m = MarianMtModel::from_pretrained(fixture(name), &device).unwrap();
        assert_eq!(m.config().num_params(), m.num_params(), "{name}");
    }
    // The original Transformer by configuration (the G2P example's sizes).
    let cfg = zoo_seq2seq::MarianConfig::transformer(60, 128, 3, 4, 512, 64, 0, 1);
    assert_eq!(cfg.num_params(), cfg.init(&device).unwrap().num_params());
}
