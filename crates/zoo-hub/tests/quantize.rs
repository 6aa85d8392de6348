//! Quantized weights through `AutoModel::quantize` (Burn's `Tensor::quantize`), on one
//! fixture of each family: the linear weights of the layer stacks become 8-bit values with
//! one scale per tensor, or 4-bit values in blocks of 8, and every output stays near the
//! f32 model's: within 20% of the output's largest magnitude at 8 bits on these random
//! tiny models (t5-tiny drifts most, 14%; the real MiniLM's bar is in zoo-encoder's
//! `minilm` test), and further at 4 bits (the negative control: fewer bits, larger
//! error). Embeddings and heads keep f32. Backends that cannot run quantized weights
//! (libtorch; ndarray at 4 bits) refuse in one sentence.

mod common;

use common::{dir, input, relative_error};
use serde_json::Value;
use zoo_core::{QuantBits, QuantOptions};
use zoo_device::testing::test_backend;
use zoo_device::{BackendName, test_device};
use zoo_hub::AutoModel;

const FIXTURES: [(&str, &str); 10] = [
    ("zoo-decoder", "gpt2-tiny"),
    ("zoo-decoder", "llama-tiny"),
    ("zoo-decoder", "mixtral-tiny"),
    ("zoo-encoder", "bert-tiny"),
    ("zoo-encoder", "modernbert-tiny"),
    ("zoo-seq2seq", "t5-tiny"),
    ("zoo-seq2seq", "bart-tiny"),
    ("zoo-seq2seq", "marian-tiny"),
    ("zoo-vision", "vit-tiny"),
    ("zoo-vision", "clip-tiny"),
];

/// The largest difference of each output from the f32 model's, over that output's
/// largest magnitude.
fn relative_errors(
    want: &[(&str, Vec<f32>, Vec<usize>)],
    got: &[(&str, Vec<f32>, Vec<usize>)],
) -> Vec<f32> {
    want.iter()
        .zip(got)
        .map(|((name, w, _), (other, g, _))| {
            assert_eq!(name, other);
            relative_error(w, g)
        })
        .collect()
}

/// The schemes the equivalence tests run on `backend`: 8 bits per tensor, and 4 bits in
/// blocks of 8 where the backend takes them (not ndarray).
fn schemes(backend: BackendName) -> Vec<QuantOptions> {
    let mut options = vec![QuantOptions::per_tensor(QuantBits::Q8)];
    if backend != BackendName::NdArray {
        options.push(QuantOptions::per_block(QuantBits::Q4, 8));
    }
    options
}

#[test]
fn quantized_models_stay_near_f32_and_fewer_bits_drift_further() {
    let device = test_device();
    let backend = test_backend();
    let q8 = QuantOptions::per_tensor(QuantBits::Q8);
    let q4 = QuantOptions::per_block(QuantBits::Q4, 8);
    for (family, name) in FIXTURES {
        let dir = dir(family, name);
        let input = input(&zoo_fixtures::expected::<Value>(&dir));
        let model = AutoModel::from_pretrained(&dir, &device).unwrap();
        let want = model.forward(&input, &device).unwrap();
        let params = model.num_params();
        let quantized = AutoModel::from_pretrained(&dir, &device)
            .unwrap()
            .quantize(&q8, &device);
        if matches!(backend, BackendName::Tch | BackendName::TchCuda) {
            let e = quantized.unwrap_err().to_string();
            assert!(e.contains("not supported on tch"), "{e}");
            continue;
        }
        let (model8, report) = quantized.unwrap();
        assert!(report.tensors >= 2, "{name}: {report:?}");
        assert_eq!(report.kept, 0, "{name}");
        assert!(report.values < params, "{name}: embeddings stay f32");
        assert!(
            report.bytes_after * 3 < report.bytes_before,
            "{name}: {report:?}"
        );
        let err8 = relative_errors(&want, &model8.forward(&input, &device).unwrap());
        assert!(
            err8.iter().all(|e| *e < 0.2) && err8.iter().any(|e| *e > 0.0),
            "{name} q8: {err8:?}"
        );
        let quantized = AutoModel::from_pretrained(&dir, &device)
            .unwrap()
            .quantize(&q4, &device);
        if backend == BackendName::NdArray {
            let e = quantized.unwrap_err().to_string();
            assert!(
                e.contains("4-bit weights are not supported on ndarray"),
                "{e}"
            );
            continue;
        }
        let (model4, report4) = quantized.unwrap();
        assert_eq!(report4.tensors + report4.kept, report.tensors, "{name}");
        let err4 = relative_errors(&want, &model4.forward(&input, &device).unwrap());
        let (max8, max4) = (
            err8.iter().copied().fold(0f32, f32::max),
            err4.iter().copied().fold(0f32, f32::max),
        );
        assert!(
            max4 > max8 && max4 < 1.0,
            "{name}: q4 {err4:?}, q8 {err8:?}"
        );
        eprintln!("{name}: q8 {max8:.4}, q4/8 {max4:.4}, {report:?}");
    }
}

/// Turns zoo-kernels back on when dropped, even after a failed assertion. The other tests
/// of this file hold with either product.
struct KernelsBackOn;

impl Drop for KernelsBackOn {
    fn drop(&mut self) {
        zoo_kernels::set_enabled(true);
    }
}

/// The zoo's quantized product (zoo-kernels, on flex) against Burn's dequantize-then-
/// multiply, through every family's forward pass: the same outputs within 1e-5 of each
/// output's largest magnitude, at 8 bits per tensor and 4 bits in blocks of 8. On flex the
/// kernel must have run; elsewhere both runs take Burn's product and agree (within 1e-6: an autotuned GPU kernel may differ between runs).
#[test]
fn the_quantized_product_equals_burns_through_every_family() {
    let device = test_device();
    let backend = test_backend();
    if matches!(backend, BackendName::Tch | BackendName::TchCuda) {
        return; // refused above, in `quantized_models_stay_near_f32...`
    }
    let _guard = KernelsBackOn;
    let options = schemes(backend);
    for (family, name) in FIXTURES {
        let dir = dir(family, name);
        let input = input(&zoo_fixtures::expected::<Value>(&dir));
        for q in &options {
            let (model, _) = AutoModel::from_pretrained(&dir, &device)
                .unwrap()
                .quantize(q, &device)
                .unwrap();
            zoo_kernels::set_enabled(false);
            let burns = model.forward(&input, &device).unwrap();
            zoo_kernels::set_enabled(true);
            let before = zoo_kernels::quant::kernel_calls();
            let ours = model.forward(&input, &device).unwrap();
            let calls = zoo_kernels::quant::kernel_calls() - before;
            let errs = relative_errors(&burns, &ours);
            if backend == BackendName::Flex {
                assert!(calls > 0, "{name} {q}: the kernel did not run");
                assert!(errs.iter().all(|e| *e < 1e-5), "{name} {q}: {errs:?}");
            } else {
                assert!(errs.iter().all(|e| *e < 1e-6), "{name} {q}: {errs:?}");
            }
        }
    }
}

/// Quantizing as the weights are read (`AutoModel::from_pretrained_quantized`, what every
/// `zoo` command does with `--quantize`) gives the model that quantizing after loading
/// gives, on every family: the same report, the same stored bytes and the same outputs
/// (within 1e-5 of each output's largest magnitude: the same values and scales; the
/// bound is the kernel's against Burn's product, since the test beside it turns the
/// kernel off for the whole process while it runs); control: the f32 model's outputs are
/// further from it than 1e-3. On libtorch it is refused as quantizing after loading is.
#[test]
fn quantizing_while_loading_gives_the_model_quantized_after_loading() {
    let device = test_device();
    let backend = test_backend();
    let options = schemes(backend);
    for (family, name) in FIXTURES {
        let dir = dir(family, name);
        let input = input(&zoo_fixtures::expected::<Value>(&dir));
        for q in &options {
            let loaded = AutoModel::from_pretrained_quantized(&dir, q, &device);
            if matches!(backend, BackendName::Tch | BackendName::TchCuda) {
                let e = loaded.unwrap_err().to_string();
                assert!(e.contains("not supported on tch"), "{name}: {e}");
                break;
            }
            let (model, report) = loaded.unwrap();
            let float = AutoModel::from_pretrained(&dir, &device).unwrap();
            let f32_out = float.forward(&input, &device).unwrap();
            let params = float.num_params();
            let (after, report_after) = float.quantize(q, &device).unwrap();
            assert_eq!(report, report_after, "{name} {q}");
            assert!(report.tensors >= 2, "{name} {q}: {report:?}");
            assert_eq!(model.weight_bytes(), after.weight_bytes(), "{name} {q}");
            let w = model.weight_bytes();
            assert!(w.quantized > 0, "{name} {q}");
            assert_eq!(w.quantized, report.bytes_after, "{name} {q}: {report:?}");
            assert_eq!(model.num_params(), params, "{name} {q}");
            if q.bits == QuantBits::Q4 {
                // Two values to a byte and a 4-byte scale per block of 8: packed on flex
                // by the zoo, into words on wgpu by Burn.
                let values = w.quantized_values;
                assert_eq!(w.quantized, values / 2 + values / 8 * 4, "{name} {q}");
            }
            let want = after.forward(&input, &device).unwrap();
            let got = model.forward(&input, &device).unwrap();
            let errs = relative_errors(&want, &got);
            assert!(errs.iter().all(|e| *e < 1e-5), "{name} {q}: {errs:?}");
            let control = relative_errors(&f32_out, &got);
            assert!(
                control.iter().any(|e| *e > 1e-3),
                "{name} {q}: as near the f32 model: {control:?}"
            );
        }
    }
}

#[test]
fn bad_quantization_options_are_refused_in_one_sentence() {
    let device = test_device();
    if matches!(test_backend(), BackendName::Tch | BackendName::TchCuda) {
        return;
    }
    let gpt2 = dir("zoo-decoder", "gpt2-tiny");
    let load = || AutoModel::from_pretrained(&gpt2, &device).unwrap();
    let e = load()
        .quantize(&QuantOptions::per_block(QuantBits::Q8, 0), &device)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "the quantization block must be 1 to 255 values, got 0");
    // gpt2-tiny's widths are 24, 40 and 72: no block of 7 fits one.
    let e = load()
        .quantize(&QuantOptions::per_block(QuantBits::Q8, 7), &device)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no linear weight of GPT2LMHeadModel can be quantized q8 in blocks of 7"),
        "{e}"
    );
    assert!(
        "q3".parse::<QuantBits>()
            .unwrap_err()
            .to_string()
            .contains("q8 and q4")
    );
}

/// `AutoModel::save_pretrained` of a quantized model (what `zoo quantize` writes):
/// `config.json` and `model.bpk`, written on flex, load back on the test backend into the
/// same quantized model: its outputs equal those of the model flex quantized and wrote,
/// run on flex (within 1e-5 of each output's largest magnitude: the values and scales
/// are the same, and only the backends' float rounding differs; wgpu's packing differs
/// from flex's and is rebuilt as the file loads), and stay away from
/// the f32 model's (the control that the weights are the quantized ones). The file is
/// smaller than the f32 safetensors. libtorch refuses the folder in one sentence.
#[test]
fn quantized_checkpoints_load_back_as_the_model_that_wrote_them() {
    let device = test_device();
    let backend = test_backend();
    let flex = zoo_device::select(BackendName::Flex).unwrap();
    let options = match backend {
        BackendName::NdArray => QuantOptions::per_block(QuantBits::Q8, 8),
        _ => QuantOptions::per_block(QuantBits::Q4, 8),
    };
    for (family, name) in FIXTURES {
        let dir = dir(family, name);
        let out = zoo_fixtures::tempdir("hub", &format!("quantized-{name}"));
        let (written, _) = AutoModel::from_pretrained(&dir, &flex)
            .unwrap()
            .quantize(&options, &flex)
            .unwrap();
        written.save_pretrained(&out).unwrap();
        let bpk = std::fs::metadata(out.join("model.bpk")).unwrap().len();
        let f32_file = std::fs::metadata(dir.join("model.safetensors"))
            .unwrap()
            .len();
        assert!(bpk < f32_file, "{name}: {bpk} bytes, f32 {f32_file}");
        assert!(!out.join("model.safetensors").exists());
        let loaded = AutoModel::from_pretrained(&out, &device);
        if matches!(backend, BackendName::Tch | BackendName::TchCuda) {
            let Err(e) = loaded else {
                panic!("{name}: tch loaded quantized weights")
            };
            let e = e.to_string();
            assert!(
                e.contains("quantized weights are not supported on tch"),
                "{e}"
            );
            continue;
        }
        let loaded = loaded.unwrap();
        assert_eq!(
            loaded.weight_bytes(),
            written.weight_bytes(),
            "{name}: as written"
        );
        if options.bits == QuantBits::Q4 {
            // Packed again as it loads: two values to a byte, a 4-byte scale per 8.
            let w = loaded.weight_bytes();
            let values = w.quantized_values;
            assert_eq!(w.quantized, values / 2 + values / 8 * 4, "{name}");
        }
        let input = input(&zoo_fixtures::expected::<Value>(&dir));
        let got = loaded.forward(&input, &device).unwrap();
        let want = written.forward(&input, &flex).unwrap();
        let f32_out = AutoModel::from_pretrained(&dir, &device)
            .unwrap()
            .forward(&input, &device)
            .unwrap();
        for (((output, w, _), (_, g, _)), (_, f, _)) in want.iter().zip(&got).zip(&f32_out) {
            let same = relative_error(w, g);
            assert!(
                same <= 1e-5,
                "{name} {output}: {same} from flex's {options}"
            );
            let moved = relative_error(f, g);
            assert!(moved > 1e-3, "{name} {output}: {moved} from f32");
        }
        std::fs::remove_dir_all(&out).unwrap();
    }
}
