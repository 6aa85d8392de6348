//! LoRA adapters that Python `peft` wrote over the decoder fixtures (`cargo xtask
//! fixtures`, `xtask/fixtures/lora.py`): GPT-2's Conv1D `c_attn` and both `c_proj`s at
//! rank 4, and Llama's `q_proj`, `v_proj` and `down_proj` at rank 3, with random factors.
//! Read through zoo-core's PEFT reader onto Burn's LoRA, the adapted logits equal peft's
//! within 1e-4 and the merged ones `merge_and_unload`'s; written back, the adapter file
//! holds what peft wrote, bit for bit.

use std::path::PathBuf;

use burn::module::Module;
use serde::Deserialize;
use zoo_core::WeightsFile;
use zoo_core::checkpoint::peft;
use zoo_decoder::{DecoderInput, DecoderLm, HfDecoderConfig};
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices};
use zoo_fixtures::Output;

fn fixture(name: &str) -> PathBuf {
    zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name)
}

#[derive(Deserialize)]
struct Expected {
    input_ids: Vec<Vec<usize>>,
    logits: Output,
    merged_logits: Output,
}

fn logits(model: &DecoderLm, rows: &[Vec<usize>]) -> Vec<f32> {
    let input = DecoderInput::from_ids(rows, &test_device()).unwrap();
    floats(model.forward(input).unwrap().logits)
}

#[test]
fn peft_adapters_give_peft_s_logits_and_save_as_peft_wrote_them() {
    let device = test_device();
    for (base, adapter) in [
        ("gpt2-tiny", "gpt2-tiny-lora"),
        ("llama-tiny", "llama-tiny-lora"),
    ] {
        let (dir, adapter_dir) = (fixture(base), fixture(adapter));
        let e: Expected = zoo_fixtures::expected(&adapter_dir);
        let config = HfDecoderConfig::from_pretrained(&dir).unwrap();
        let map = config.key_map();
        let plain = DecoderLm::from_pretrained(&dir, &device).unwrap();
        // The negative control: without the adapter the logits are far from peft's.
        let far = max_abs_diff_slices(&logits(&plain, &e.input_ids), &e.logits.values);
        assert!(
            far > 1e-2,
            "{adapter}: the adapter changes the logits by only {far}"
        );

        let adapted = peft::load_adapter(plain, &map, &adapter_dir).unwrap();
        let diff = max_abs_diff_slices(&logits(&adapted, &e.input_ids), &e.logits.values);
        assert!(
            diff < 1e-4,
            "{adapter}: adapted logits differ from peft's by {diff}"
        );

        // Written back: the same names, shapes and values as peft's file.
        let out = zoo_fixtures::tempdir("decoder", adapter);
        let cfg = peft::read_adapter_config(&adapter_dir).unwrap();
        peft::save_adapter(&adapted, &map, &cfg, &out).unwrap();
        let contents = |d: &std::path::Path| {
            WeightsFile::Safetensors(d.join(peft::WEIGHTS_FILE))
                .contents()
                .unwrap()
        };
        assert!(
            contents(&out) == contents(&adapter_dir),
            "{adapter}: the saved adapter differs"
        );
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(peft::CONFIG_FILE)).unwrap())
                .unwrap();
        assert_eq!(saved["r"], serde_json::to_value(cfg.r).unwrap());
        assert_eq!(saved["target_modules"], cfg.target_modules);

        // Folded in, as merge_and_unload folds it.
        let merged = adapted.materialize();
        let diff = max_abs_diff_slices(&logits(&merged, &e.input_ids), &e.merged_logits.values);
        assert!(
            diff < 1e-4,
            "{adapter}: merged logits differ from peft's by {diff}"
        );
        std::fs::remove_dir_all(out).unwrap();
    }
}

#[test]
fn lora_trains_only_the_adapters_of_the_named_modules() {
    let device = test_device().autodiff();
    let dir = fixture("gpt2-tiny");
    let map = HfDecoderConfig::from_pretrained(&dir).unwrap().key_map();
    let model = DecoderLm::from_pretrained(&dir, &device).unwrap();
    let (_, all) = peft::parameter_counts(&model);
    let (model, modules) = peft::apply_lora(model, &map, 4, 8.0, &["c_attn".to_string()]).unwrap();
    assert_eq!(
        modules,
        ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]
    );
    // Two c_attn of [24, 72]: (24 + 72) x 4 factors each.
    let (trainable, with_adapters) = peft::parameter_counts(&model);
    assert_eq!(trainable, 2 * (24 + 72) * 4);
    assert_eq!(with_adapters, all + trainable);

    let model = DecoderLm::from_pretrained(&dir, &device).unwrap();
    let err = peft::apply_lora(model, &map, 4, 8.0, &["q_proj".to_string()]).unwrap_err();
    assert_eq!(
        err,
        "no module of this model is named \"q_proj\"; its weight matrices are in c_attn, \
         c_fc, c_proj, wpe, wte"
    );
}

#[test]
fn unsupported_adapters_are_refused_by_name() {
    let dir = zoo_fixtures::tempdir("decoder", "lora-dora");
    let adapter = fixture("gpt2-tiny-lora");
    for f in [peft::CONFIG_FILE, peft::WEIGHTS_FILE] {
        std::fs::copy(adapter.join(f), dir.join(f)).unwrap();
    }
    let edit = |key: &str, value: serde_json::Value| {
        let path = dir.join(peft::CONFIG_FILE);
        let mut cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(adapter.join(peft::CONFIG_FILE)).unwrap(),
        )
        .unwrap();
        cfg[key] = value;
        std::fs::write(&path, cfg.to_string()).unwrap();
        let base = fixture("gpt2-tiny");
        let map = HfDecoderConfig::from_pretrained(&base).unwrap().key_map();
        let model = DecoderLm::from_pretrained(&base, &test_device()).unwrap();
        peft::load_adapter(model, &map, &dir)
            .unwrap_err()
            .to_string()
    };
    let config = dir.join(peft::CONFIG_FILE).display().to_string();
    assert_eq!(
        edit("use_dora", true.into()),
        format!("{config}: use_dora is not supported")
    );
    assert_eq!(
        edit("lora_bias", true.into()),
        format!("{config}: lora_bias is not supported")
    );
    assert_eq!(
        edit("r", 5.into()),
        format!(
            "{}: not a readable checkpoint: base_model.model.transformer.h.0.attn.c_attn.\
             lora_A.weight has shape [4, 24]; rank 5 over this module needs [5, 24]",
            dir.join(peft::WEIGHTS_FILE).display()
        )
    );
    std::fs::remove_dir_all(dir).unwrap();
}
