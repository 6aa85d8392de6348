//! Activation checkpointing by block (`zoo_attention::recompute`): on a device with Burn's
//! balanced strategy, every layer of a BERT encoder keeps only its input and runs again in
//! the backward pass. The gradients of every parameter, LoRA's factors included, equal
//! those of a plain autodiff device, on the backend under test.

use burn::tensor::{Device, Int, Tensor, TensorData};
use zoo_attention::recompute;
use zoo_core::checkpoint::peft;
use zoo_device::test_device;
use zoo_device::testing::{floats, max_abs_diff_slices, param_grads};
use zoo_encoder::BertForSequenceClassification;
use zoo_encoder::model::EncoderInput;

/// The loss `sum(logits · w)` over two rows, the second padded, and every trained
/// parameter's gradient.
fn gradients(dir: &std::path::Path, device: &Device, lora: bool) -> (f32, Vec<Vec<f32>>) {
    let mut model = BertForSequenceClassification::from_pretrained(dir, device).unwrap();
    if lora {
        let map = model.key_map();
        // The same random factors on both devices.
        device.seed(1);
        model = peft::apply_lora(model, &map, 4, 8.0, &["query".to_string()])
            .unwrap()
            .0;
    }
    let tokens = Tensor::<2, Int>::from_data(
        TensorData::new(vec![2i64, 17, 5, 9, 30, 3, 2, 8, 41, 3, 0, 0], [2, 6]),
        device,
    );
    let padding = tokens.clone().equal_elem(0);
    let mut input = EncoderInput::new(tokens);
    input.padding = Some(padding);
    let logits = model.forward(input).unwrap();
    let [b, c] = logits.dims();
    let w: Vec<f32> = (0..b * c)
        .map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.5)
        .collect();
    let loss = (logits * Tensor::<2>::from_data(TensorData::new(w, [b, c]), device)).sum();
    let grads = loss.backward();
    (floats(loss)[0], param_grads(&model, &grads))
}

#[test]
fn recomputed_layers_give_the_plain_gradients() {
    let device = test_device().autodiff();
    let off = serde_json::Value::from(0.0);
    for lora in [false, true] {
        // Dropout off: the recomputation draws its masks from seeds of its own.
        let dir = zoo_fixtures::edited_copy(
            "encoder",
            &format!("recompute-{lora}"),
            &zoo_fixtures::fixture(env!("CARGO_MANIFEST_DIR"), "bert-tiny-cls"),
            &[
                ("attention_probs_dropout_prob", off.clone()),
                ("hidden_dropout_prob", off.clone()),
            ],
        );
        let (loss, plain) = gradients(&dir, &device, lora);
        let before = recompute::reruns();
        let (loss_r, recomputed) = gradients(&dir, &device.clone().gradient_checkpointing(), lora);
        // Both layers ran again, once each.
        assert_eq!(recompute::reruns() - before, 2);
        assert!(
            (loss - loss_r).abs() <= 1e-5 * loss.abs().max(1.0),
            "{loss} vs {loss_r}"
        );
        assert_eq!(plain.len(), recomputed.len());
        assert!(!plain.is_empty());
        for (i, (a, b)) in plain.iter().zip(&recomputed).enumerate() {
            assert!(!a.is_empty() && a.len() == b.len(), "parameter {i}");
            let scale = a.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
            let diff = max_abs_diff_slices(a, b);
            assert!(
                diff <= 1e-4 * scale,
                "lora {lora}: parameter {i}: {diff} of {scale}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
