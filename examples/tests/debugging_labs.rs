//! The tutorials' debugging labs: each common mistake gets a clear error from the zoo
//! that names the shapes or values involved, never a panic inside a kernel. The explore
//! README lists each mistake beside the message these tests check. (Integer ids where
//! embeddings are expected do not compile at all: see the `compile_fail` example in
//! `zoo_examples::labs`.)

use burn::tensor::{Bool, Int, Tensor, TensorData};
use zoo_attention::{AttentionInput, MultiHeadAttentionConfig};
use zoo_decoder::{DecoderConfig, DecoderInput};
use zoo_encoder::{BertConfig, EncoderInput};

/// Waits, as a test ends, for the work it queued on the device. These tests build models
/// and stop at an error before anything is read back; a wgpu process on lavapipe that
/// exits while kernels are still being compiled can die in LLVM's teardown (seen as
/// SIGSEGV or SIGABRT after the last test passed).
struct FinishQueuedWork;

impl Drop for FinishQueuedWork {
    fn drop(&mut self) {
        let _ = zoo_device::test_device().sync();
    }
}

fn ids(rows: &[&[i64]]) -> Tensor<2, Int> {
    let t = rows[0].len();
    let flat: Vec<i64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_data(
        TensorData::new(flat, [rows.len(), t]),
        &zoo_device::test_device(),
    )
}

fn tiny_bert() -> zoo_encoder::BertModel {
    let mut c = BertConfig::new(40, 16, 1, 4, 32);
    c.max_position_embeddings = 8;
    c.init(false, &zoo_device::test_device()).unwrap()
}

#[test]
fn ids_given_as_features_are_a_shape_error_naming_d_model() {
    let _finish = FinishQueuedWork;
    // The ids, cast to float and given one feature each, where [B, T, d_model] embeddings
    // belong.
    let attn = MultiHeadAttentionConfig::new(16, 4)
        .init(&zoo_device::test_device())
        .unwrap();
    let x = ids(&[&[3, 4, 5]]).float().unsqueeze_dim::<3>(2); // [1, 3, 1]
    let e = attn.forward(AttentionInput::new(x)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "attention input: expected shape [_, _, 16], got [1, 3, 1]"
    );
}

#[test]
fn heads_that_do_not_divide_d_model_are_named() {
    let _finish = FinishQueuedWork;
    let e = MultiHeadAttentionConfig::new(100, 3)
        .init(&zoo_device::test_device())
        .unwrap_err();
    assert_eq!(e.to_string(), "d_model 100 is not divisible by n_heads 3");
    let e = BertConfig::new(30, 100, 1, 3, 64).validate().unwrap_err();
    assert!(
        e.to_string().contains("100") && e.to_string().contains('3'),
        "{e}"
    );
}

#[test]
fn a_mask_of_the_wrong_shape_is_named_with_both_shapes() {
    let _finish = FinishQueuedWork;
    let bert = tiny_bert();
    let pad = Tensor::<2, Bool>::from_data(
        TensorData::new(vec![false; 4], [1, 4]),
        &zoo_device::test_device(),
    );
    let e = bert
        .forward(EncoderInput::new(ids(&[&[3, 4, 5]])).padding(pad))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "padding mask has shape [1, 4], the tokens [1, 3]"
    );
}

#[test]
fn a_mask_of_the_wrong_polarity_is_caught() {
    let _finish = FinishQueuedWork;
    // HF's attention_mask (1 at real tokens) passed where the zoo wants true at padding:
    // the unpadded row comes out all "padding".
    let bert = tiny_bert();
    let hf_style = Tensor::<2, Bool>::from_data(
        TensorData::new(vec![true, true, false, true, true, true], [2, 3]),
        &zoo_device::test_device(),
    );
    let e = bert
        .forward(EncoderInput::new(ids(&[&[3, 4, 0], &[3, 4, 5]])).padding(hf_style))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("padding mask row 1 marks all 3 positions as padding"),
        "{e}"
    );
    assert!(e.to_string().contains("pass its negation"), "{e}");
    // The right polarity runs.
    let right = Tensor::<2, Bool>::from_data(
        TensorData::new(vec![false, false, true, false, false, false], [2, 3]),
        &zoo_device::test_device(),
    );
    bert.forward(EncoderInput::new(ids(&[&[3, 4, 0], &[3, 4, 5]])).padding(right))
        .unwrap();
}

#[test]
fn a_sequence_longer_than_the_positions_is_named() {
    let _finish = FinishQueuedWork;
    let bert = tiny_bert();
    let e = bert
        .forward(EncoderInput::new(ids(&[&[1; 9]])))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "sequence of 9 tokens is longer than max_position_embeddings 8"
    );
    let gpt = DecoderConfig::new(20, 16, 1, 4, 8)
        .init(&zoo_device::test_device())
        .unwrap();
    let e = gpt.forward(DecoderInput::new(ids(&[&[1; 9]]))).unwrap_err();
    assert!(
        e.to_string().contains('9') && e.to_string().contains('8'),
        "{e}"
    );
}

#[test]
fn a_padding_id_outside_the_vocabulary_is_named() {
    let _finish = FinishQueuedWork;
    let mut c = BertConfig::new(30, 16, 1, 4, 32);
    c.pad_token_id = 30;
    let e = c.validate().unwrap_err();
    assert!(
        e.to_string()
            .contains("pad_token_id must be < vocab_size 30, got 30"),
        "{e}"
    );
    // An id past the vocabulary in the input itself.
    let e = tiny_bert()
        .forward(EncoderInput::new(ids(&[&[3, 40]])))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "token id 40 at batch row 0, position 1 is out of range for vocab_size 40"
    );
}

#[test]
fn rows_of_unequal_length_without_padding_are_named() {
    let _finish = FinishQueuedWork;
    let e = DecoderInput::from_ids(&[vec![1, 2, 3], vec![4, 5]], &zoo_device::test_device())
        .unwrap_err();
    assert!(e.to_string().contains("got lengths [3, 2]"), "{e}");
}
