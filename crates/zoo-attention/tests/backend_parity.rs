//! Backend parity: the same transformer blocks, with the same weights and inputs, give
//! the same outputs on every compiled backend, within `atol 1e-5 + rtol 1e-4` (f32).
//!
//! Under the default run (flex) every other compiled backend is compared with flex; in
//! the backend matrix (`ZOO_TEST_DEVICE=<backend>`) that backend is.

use burn::module::Module;
use burn::tensor::{Device, Distribution, Tensor};
use zoo_attention::mask::padding_mask_from_lengths;
use zoo_attention::{
    BlockInput, FeedForwardConfig, FfnActivation, Mask, MultiHeadAttentionConfig, NormKind,
    NormPlacement, TransformerBlock, TransformerBlockConfig,
};
use zoo_device::{BackendName, DeviceError, record_skip, select};

fn blocks(device: &Device) -> Vec<(&'static str, TransformerBlock)> {
    device.seed(1);
    let gpt = TransformerBlockConfig::new(
        MultiHeadAttentionConfig::new(32, 4).with_fused_qkv(true),
        FeedForwardConfig::new(32, 128).with_activation(FfnActivation::GeluTanh),
    )
    .init(device)
    .unwrap();
    let llama = TransformerBlockConfig::new(
        MultiHeadAttentionConfig::new(32, 4)
            .with_n_kv_heads(Some(2))
            .with_qkv_bias(false)
            .with_out_bias(false)
            .with_rope_max_len(Some(64)),
        FeedForwardConfig::new(32, 96)
            .with_activation(FfnActivation::SwiGlu)
            .with_bias(false),
    )
    .with_norm(NormKind::RmsNorm)
    .init(device)
    .unwrap();
    let bert = TransformerBlockConfig::new(
        MultiHeadAttentionConfig::new(32, 4),
        FeedForwardConfig::new(32, 64),
    )
    .with_placement(NormPlacement::Post)
    .init(device)
    .unwrap();
    vec![
        ("gpt2-style", gpt),
        ("llama-style", llama),
        ("bert-style", bert),
    ]
}

fn run(block: &TransformerBlock, x: Tensor<3>, device: &Device, causal: bool) -> Vec<f32> {
    let pad = padding_mask_from_lengths(&[9, 6], 9, device);
    let mask = if causal {
        Mask::causal().with_key_padding(pad)
    } else {
        Mask::none().with_key_padding(pad)
    };
    let out = block.forward(BlockInput::new(x).mask(mask)).unwrap().hidden;
    out.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap()
}

fn compare(target: BackendName) {
    let reference = select(BackendName::Flex).unwrap();
    let device = match select(target) {
        Ok(d) => d,
        Err(e @ DeviceError::NoDevice { .. }) => {
            record_skip(&format!("backend_parity[{target}]"), &e.to_string());
            return;
        }
        Err(e) => panic!("{e}"),
    };
    reference.seed(2);
    let x = Tensor::<3>::random([2, 9, 32], Distribution::Normal(0.0, 1.0), &reference);
    for (name, block) in blocks(&reference) {
        let moved = block.clone().to_device(&device);
        for causal in [false, true] {
            let want = run(&block, x.clone(), &reference, causal);
            let got = run(&moved, x.clone().to_device(&device), &device, causal);
            assert_eq!(want.len(), got.len(), "{name}: lengths differ");
            let mut worst = 0.0f32;
            for (w, g) in want.iter().zip(&got) {
                assert!(
                    w.is_finite() && g.is_finite(),
                    "{target} vs flex, {name}: {w} vs {g}"
                );
                worst = worst.max((w - g).abs() / (1e-5 + 1e-4 * w.abs()));
            }
            assert!(
                worst <= 1.0,
                "{target} vs flex, {name} block (causal {causal}): worst |diff| / (1e-5 + 1e-4 |ref|) = {worst}"
            );
        }
    }
}

#[test]
fn backend_parity_transformer_blocks() {
    for b in zoo_device::testing::parity_backends("backend_parity_transformer_blocks") {
        compare(b);
    }
}
