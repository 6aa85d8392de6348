//! Activation checkpointing by block (`zoo_attention::recompute`): on a device with Burn's
//! balanced strategy, every layer of a decoder keeps only its input and runs again in the
//! backward pass. The gradients of every parameter, LoRA's factors included, equal those
//! of a plain autodiff device, on the backend under test.

use burn::tensor::{Device, Distribution, Tensor};
use zoo_attention::recompute;
use zoo_core::checkpoint::peft;
use zoo_decoder::{DecoderInput, DecoderLm, HfDecoderConfig};
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices, param_grads};

/// The loss `sum(logits · w)` of two rows, and every trained parameter's gradient.
fn gradients(dir: &std::path::Path, device: &Device, lora: Option<&str>) -> (f32, Vec<Vec<f32>>) {
    let mut model = DecoderLm::from_pretrained(dir, device).unwrap();
    if let Some(target) = lora {
        let map = HfDecoderConfig::from_pretrained(dir).unwrap().key_map();
        // The same random factors on both devices.
        device.seed(1);
        model = peft::apply_lora(model, &map, 4, 8.0, &[target.to_string()])
            .unwrap()
            .0;
    }
    let rows = vec![vec![3, 17, 5, 9, 30, 2, 11], vec![8, 1, 4, 22, 6, 13, 7]];
    let input = DecoderInput::from_ids(&rows, device).unwrap();
    let logits = model.forward(input).unwrap().logits;
    // The same weights on every run: drawn on the host device from one seed.
    let host = Device::flex();
    host.seed(7);
    let w = Tensor::<3>::random(logits.dims(), Distribution::Normal(0.0, 1.0), &host);
    let w = Tensor::from_data(w.into_data(), device);
    let loss = (logits * w).sum();
    let grads = loss.backward();
    (floats(loss)[0], param_grads(&model, &grads))
}

#[test]
fn recomputed_layers_give_the_plain_gradients() {
    let device = test_device().autodiff();
    let off = serde_json::Value::from(0.0);
    for (name, lora) in [
        ("gpt2-tiny", None),
        ("gpt2-tiny", Some("c_attn")),
        ("llama-tiny", Some("q_proj")),
    ] {
        // Dropout off: the recomputation draws its masks from seeds of its own.
        let dir = zoo_fixtures::edited_copy(
            "decoder",
            &format!("recompute-{name}-{}", lora.is_some()),
            &zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), name),
            &[
                ("attn_pdrop", off.clone()),
                ("embd_pdrop", off.clone()),
                ("resid_pdrop", off.clone()),
                ("attention_dropout", off.clone()),
            ],
        );
        let (loss, plain) = gradients(&dir, &device, lora);
        let before = recompute::reruns();
        let (loss_r, recomputed) = gradients(&dir, &device.clone().gradient_checkpointing(), lora);
        // Both layers ran again, once each.
        assert_eq!(recompute::reruns() - before, 2, "{name}");
        assert!(
            (loss - loss_r).abs() <= 1e-5 * loss.abs().max(1.0),
            "{name}: {loss} vs {loss_r}"
        );
        assert_eq!(plain.len(), recomputed.len());
        assert!(!plain.is_empty());
        for (i, (a, b)) in plain.iter().zip(&recomputed).enumerate() {
            assert!(!a.is_empty() && a.len() == b.len(), "{name}: parameter {i}");
            let scale = a.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
            let diff = max_abs_diff_slices(a, b);
            assert!(
                diff <= 1e-4 * scale,
                "{name} (lora {lora:?}): parameter {i}: {diff} of {scale}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
