//! Unit tests of the checkpoint code.

use super::*;

/// A family's names with a member's dialect on top: every name maps to its module
/// path and back to itself, and the dialect's pairs that share a prefix
/// (`classifier.` inside `classifier.dense.`) do not capture each other's names.
#[test]
fn a_dialect_round_trips_through_the_family_names() {
    let names = [
        ("bert.pooler.dense.", "bert.pooler."),
        ("bert.embeddings.LayerNorm.", "bert.embeddings.norm."),
    ];
    let map = KeyMap::new().names(&names).dialect(&[
        ("roberta.", "bert."),
        ("classifier.dense.", "bert.pooler.dense."),
        ("classifier.out_proj.", "classifier."),
    ]);
    for (name, path) in [
        (
            "roberta.embeddings.LayerNorm.weight",
            "bert.embeddings.norm.weight",
        ),
        ("classifier.dense.weight", "bert.pooler.weight"),
        ("classifier.out_proj.bias", "classifier.bias"),
    ] {
        assert_eq!(map.module_path(name), path);
        assert_eq!(map.checkpoint_name(path), name);
    }
    assert_eq!(
        map.family_name("classifier.dense.bias"),
        "bert.pooler.dense.bias"
    );
    // Without the dialect the family's own names pass through unchanged.
    let plain = KeyMap::new().names(&names);
    assert_eq!(plain.family_name("roberta.x"), "roberta.x");
    assert_eq!(
        plain.module_path("bert.embeddings.LayerNorm.w"),
        "bert.embeddings.norm.w"
    );
}

/// A base model reads a head checkpoint's base, a head model a bare checkpoint, and
/// each saves its own layout.
#[test]
fn either_layout_loads_into_either_model() {
    let names = [(
        "encoder.layer.{n}.output.dense.",
        "layers.{n}.mlp.down_proj.",
    )];
    let roots = ["embeddings", "encoder", "pooler"];
    let (base, under) = KeyMap::new().base_model("bert.", false, &roots);
    let base = base.names_under(&under, &names);
    let (head, under) = KeyMap::new().base_model("bert.", true, &roots);
    let head = head.names_under(&under, &names);
    for name in [
        "encoder.layer.2.output.dense.weight",
        "bert.encoder.layer.2.output.dense.weight",
    ] {
        assert_eq!(base.module_path(name), "layers.2.mlp.down_proj.weight");
        assert_eq!(head.module_path(name), "bert.layers.2.mlp.down_proj.weight");
    }
    assert_eq!(
        base.checkpoint_name("layers.2.mlp.down_proj.weight"),
        "encoder.layer.2.output.dense.weight"
    );
    assert_eq!(
        head.checkpoint_name("bert.layers.2.mlp.down_proj.weight"),
        "bert.encoder.layer.2.output.dense.weight"
    );
    // A head's own names are not the base model's: `cls.` is left alone.
    assert_eq!(
        head.module_path("cls.predictions.bias"),
        "cls.predictions.bias"
    );
}

/// Name templates: each name maps by the first pair that starts it, placeholders
/// carry over, and saving gives back the checkpoint's name, norm parameters included.
#[test]
fn name_templates_round_trip_and_the_first_match_wins() {
    let map = KeyMap::new().names(&[
        ("model.layers.{n}.input_layernorm.", "layers.{n}.norm_1."),
        (
            "{encoder|decoder}.block.{n}.layer.0.SelfAttention.{q|k|v|o}.",
            "{encoder|decoder}.{n}.self_attn.{q|k|v|o}_proj.",
        ),
        ("model.layers.", "layers."),
        ("model.norm.", "norm_f."),
    ]);
    for (name, path, saved) in [
        (
            "model.layers.12.input_layernorm.weight",
            "layers.12.norm_1.weight",
            "model.layers.12.input_layernorm.weight",
        ),
        (
            "model.layers.3.self_attn.q_proj.weight",
            "layers.3.self_attn.q_proj.weight",
            "model.layers.3.self_attn.q_proj.weight",
        ),
        (
            "decoder.block.1.layer.0.SelfAttention.v.weight",
            "decoder.1.self_attn.v_proj.weight",
            "decoder.block.1.layer.0.SelfAttention.v.weight",
        ),
        ("model.norm.weight", "norm_f.weight", "model.norm.weight"),
        ("lm_head.weight", "lm_head.weight", "lm_head.weight"),
    ] {
        assert_eq!(map.module_path(name), path, "{name}");
        assert_eq!(map.checkpoint_name(path), saved, "{path}");
    }
    // Burn's norm parameters are saved under PyTorch's names.
    assert_eq!(
        map.checkpoint_name("layers.0.norm_1.gamma"),
        "model.layers.0.input_layernorm.weight"
    );
    assert_eq!(map.checkpoint_name("norm_f.beta"), "model.norm.bias");
    // A name the placeholders do not fit is left alone.
    assert_eq!(
        map.module_path("middle.block.1.layer.0.SelfAttention.v.weight"),
        "middle.block.1.layer.0.SelfAttention.v.weight"
    );
}

/// A pair's output is never read by a later pair: `layers.` maps to `model.layers.`
/// once, though the general pair `layers.` would match it again.
#[test]
fn a_mapped_name_is_not_mapped_twice() {
    let map = KeyMap::new().names(&[("layers.", "layers.layers.")]);
    assert_eq!(map.module_path("layers.0.w"), "layers.layers.0.w");
    assert_eq!(map.checkpoint_name("layers.layers.0.w"), "layers.0.w");
}

#[test]
#[should_panic(expected = "must have the same placeholders in the same order")]
fn templates_with_other_placeholders_are_refused() {
    let _ = KeyMap::new().names(&[("h.{n}.ln_1.", "layers.norm_1.")]);
}

/// A fresh folder under the system's temporary one.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("zoo-core-checkpoint-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A safetensors file by hand: the header's length, the JSON header, the data.
fn write_safetensors(path: &std::path::Path, tensors: &[(&str, &str, &[usize], Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({
                "dtype": dtype,
                "shape": shape,
                "data_offsets": [data.len(), data.len() + bytes.len()],
            }),
        );
        data.extend_from_slice(bytes);
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    std::fs::write(path, file).unwrap();
}

/// Half-precision checkpoints are read as f32 with their values, and as each other's
/// half type: 1.5 and -2 are exact in f16 (`0x3E00`, `0xC000`) and bf16 (`0x3FC0`,
/// `0xC000`); 1/3 in bf16 (`0x3EAB`, 0.333984375) becomes f16's nearest (`0x3558`).
#[test]
fn f16_and_bf16_tensors_are_cast_to_the_module_float_type() {
    let dir = scratch("widen");
    let path = dir.join("model.safetensors");
    let le = |words: [u16; 2]| words.iter().flat_map(|w| w.to_le_bytes()).collect();
    write_safetensors(
        &path,
        &[
            ("half", "F16", &[2], le([0x3E00, 0xC000])),
            ("brain", "BF16", &[2], le([0x3FC0, 0xC000])),
            ("third", "BF16", &[1], vec![0xAB, 0x3E]),
        ],
    );
    let tensors = WeightsFile::find(&dir).unwrap().tensors().unwrap();
    let f16 = super::weights::cast_float(tensors["third"].clone(), burn::tensor::DType::F16);
    assert_eq!(f16.dtype, burn::tensor::DType::F16);
    let data = burn::store::bridge::to_data(&f16).unwrap();
    assert_eq!(data.as_bytes(), &[0x58, 0x35]);
    for name in ["half", "brain"] {
        let wide = super::weights::cast_float(tensors[name].clone(), burn::tensor::DType::F32);
        assert_eq!(wide.dtype, burn::tensor::DType::F32, "{name}");
        let values = burn::store::bridge::to_data(&wide)
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(values, vec![1.5, -2.0], "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Linear weights of a layer stack quantized as they are read from an f32 safetensors
/// file are read a part at a time (not whole, then quantized), stored
/// `[out, in]` as PyTorch's `nn.Linear` stores them or `[in, out]`, and hold the bytes
/// that quantizing the loaded f32 weight gives, at 8 and 4 bits, per block and per tensor.
#[test]
fn weights_quantized_as_read_by_parts_equal_weights_quantized_after() {
    use crate::{QuantBits, QuantOptions};
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};

    #[derive(Module, Debug)]
    struct Stack {
        layers: Vec<Linear>,
    }
    let device = burn::tensor::Device::flex();
    let init = || Stack {
        layers: vec![
            LinearConfig::new(48, 64).with_bias(false).init(&device),
            LinearConfig::new(64, 96).with_bias(false).init(&device),
        ],
    };
    // Weights in Burn's layout `[in, out]`, values spread over two magnitudes.
    let weight = |k: usize, n: usize, seed: usize| -> Vec<f32> {
        (0..k * n)
            .map(|i| {
                (((i + seed) * 7919 % 1013) as f32 - 506.0) / if i % 5 == 0 { 9.0 } else { 97.0 }
            })
            .collect()
    };
    let (w0, w1) = (weight(48, 64, 1), weight(64, 96, 2));
    // Layer 0 stored `[out, in]` (turned as it loads), layer 1 `[in, out]` as it is.
    let turned: Vec<f32> = (0..64 * 48).map(|i| w0[(i % 48) * 64 + i / 48]).collect();
    let le = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let dir = scratch("by-parts");
    write_safetensors(
        &dir.join("model.safetensors"),
        &[
            ("layers.0.weight", "F32", &[64, 48], le(&turned)),
            ("layers.1.weight", "F32", &[64, 96], le(&w1)),
        ],
    );
    let map = KeyMap::new().untransposed(r"^layers\.1\.");
    for options in [
        QuantOptions::per_block(QuantBits::Q8, 32),
        QuantOptions::per_block(QuantBits::Q4, 32),
        QuantOptions::per_tensor(QuantBits::Q8),
    ] {
        let scheme = crate::quant::scheme(&options, &device).unwrap();
        let mut model = init();
        let before = super::load::quantized_by_parts();
        quantized_while_loading(&options, || load_into(&mut model, &dir, &map)).unwrap();
        assert_eq!(
            super::load::quantized_by_parts() - before,
            2,
            "{options}: both weights read by parts"
        );
        for (layer, (w, k, n)) in model.layers.iter().zip([(&w0, 48, 64), (&w1, 64, 96)]) {
            let f32_weight = burn::tensor::Tensor::<2>::from_data(
                burn::tensor::TensorData::new(w.clone(), [k, n]),
                &device,
            );
            let want = crate::quant::quantize_tensor(f32_weight, &scheme).into_data();
            let got = layer.weight.val().into_data();
            assert_eq!(got.dtype(), want.dtype(), "{options}");
            assert_eq!(got.shape(), want.shape(), "{options}");
            assert_eq!(got.as_bytes(), want.as_bytes(), "{options} [{k}, {n}]");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An index whose shard climbs out of the folder is refused before anything is read.
#[test]
fn a_shard_outside_the_folder_is_refused() {
    let dir = scratch("shards");
    for shard in [
        "../model-00001.safetensors",
        "sub/model.safetensors",
        ".hidden",
    ] {
        let index = serde_json::json!({ "weight_map": { "w": shard } });
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
        let e = WeightsFile::find(&dir).unwrap().tensors().unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("shard {shard:?} is not a file of this folder")),
            "{e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The misfit report names every tensor with its shapes, one line each.
#[test]
fn the_misfit_report_lists_every_tensor() {
    let report = TensorReport {
        missing: vec![("lm_head.weight".into(), vec![32, 16])],
        unexpected: vec![("extra.bias".into(), vec![4])],
        mismatched: vec![("wte.weight".into(), vec![32, 16], vec![30, 16])],
        other: vec![],
    };
    assert!(!report.is_empty() && TensorReport::default().is_empty());
    assert_eq!(
        report.to_string(),
        "the checkpoint does not fit the model (1 missing, 1 unexpected, 1 mis-shaped)\n  \
         missing:    lm_head.weight [32, 16]\n  \
         unexpected: extra.bias [4]\n  \
         mis-shaped: wte.weight: the model has [32, 16], the file [30, 16]"
    );
}

/// A full disk while `config.json` is written (its temporary name points at `/dev/full`,
/// whose every write fails with ENOSPC): the error names the file, the old weights and
/// config are both left as they were (the weights are renamed into place only once both
/// files are written), and no temporary file remains.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_during_save_pretrained_leaves_the_old_checkpoint_whole() {
    use burn::nn::{Linear, LinearConfig};
    let device = zoo_device::test_device();
    let dir = scratch("full-disk");
    let map = KeyMap::new();
    let config = |version: u32| serde_json::json!({ "version": version });
    let old: Linear = LinearConfig::new(3, 2).init(&device);
    save_pretrained(&old, &dir, &map, &config(1), "toy", "Toy").unwrap();
    let files = ["model.safetensors", "config.json"].map(|f| dir.join(f));
    let before = files.clone().map(|f| std::fs::read(f).unwrap());

    let config_partial = crate::durable::partial_path(&files[1]);
    std::os::unix::fs::symlink("/dev/full", &config_partial).unwrap();
    let new: Linear = LinearConfig::new(3, 2).init(&device);
    let err = save_pretrained(&new, &dir, &map, &config(2), "toy", "Toy").unwrap_err();
    assert!(
        err.to_string().contains(".config.json.partial") && err.to_string().contains("space"),
        "{err}"
    );
    for (file, bytes) in files.iter().zip(&before) {
        assert_eq!(&std::fs::read(file).unwrap(), bytes, "{}", file.display());
    }
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["config.json", "model.safetensors"]);

    // With room on the disk, the same save replaces both files.
    save_pretrained(&new, &dir, &map, &config(2), "toy", "Toy").unwrap();
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[1]).unwrap()).unwrap();
    assert_eq!(written["version"], 2);
    assert_ne!(std::fs::read(&files[0]).unwrap(), before[0]);
    let _ = std::fs::remove_dir_all(&dir);
}
