//! `Precision::apply` in one process on the device under test: a decoder's loss with its
//! layers' linear weights as 8- and 4-bit values, against f32 on the same weights, and
//! what each backend refuses. (f16 and bf16 set the device's float type, so the example's
//! `--precisions` runs them each in a process of its own.)

use zoo_data::CharVocab;
use zoo_decoder::DecoderConfig;
use zoo_device::{BackendName, test_backend};
use zoo_examples::mean_nll;
use zoo_examples::precision::Precision;

#[test]
fn quantized_weights_move_the_loss_a_little() {
    let device = zoo_device::test_device();
    let text = "the cat sat on the mat, and the dog sat by the door. ".repeat(20);
    let vocab = CharVocab::from_text(&text);
    let ids = vocab.encode(&text).unwrap();
    let items = zoo_data::text::random_windows(&ids, 32, 24, 7).unwrap();
    device.seed(5);
    let model = DecoderConfig::new(vocab.len(), 64, 2, 4, 32)
        .init(&device)
        .unwrap();
    let f32_loss = mean_nll(&model, &items, 8, &device).unwrap();
    let same = Precision::F32.apply(model.clone(), &device).unwrap();
    assert_eq!(mean_nll(&same, &items, 8, &device).unwrap(), f32_loss);
    for (precision, tolerance) in [(Precision::Q8, 0.03), (Precision::Q4, 0.3)] {
        let refused = match test_backend() {
            BackendName::Tch | BackendName::TchCuda => true,
            BackendName::NdArray => precision == Precision::Q4,
            _ => false,
        };
        match precision.apply(model.clone(), &device) {
            Ok(quantized) => {
                assert!(!refused, "{precision} ran on {}", test_backend());
                let loss = mean_nll(&quantized, &items, 8, &device).unwrap();
                let moved = (loss - f32_loss).abs();
                eprintln!("{precision}: {loss:.6} against f32 {f32_loss:.6}");
                // Moved (the weights are not f32's), but within the bar.
                assert!(
                    moved > 0.0 && moved < tolerance,
                    "{precision}: moved by {moved}"
                );
            }
            Err(e) => {
                assert!(refused, "{precision}: {e}");
                assert!(e.to_string().contains("not supported"), "{e}");
            }
        }
    }
    if !matches!(test_backend(), BackendName::Tch | BackendName::TchCuda) {
        // Widths of 20, 60 and 80: no row that blocks of 32 divide, nothing to quantize.
        let narrow = DecoderConfig::new(vocab.len(), 20, 1, 2, 32)
            .init(&device)
            .unwrap();
        let err = Precision::Q8.apply(narrow, &device).unwrap_err();
        assert!(err.to_string().contains("blocks of 32"), "{err}");
    }
}
