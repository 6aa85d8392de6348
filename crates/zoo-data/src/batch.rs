//! Batching for causal language modelling.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::Device;
use burn::tensor::{Tensor, TensorData};
pub use zoo_core::batch::{CausalLmBatch, Seq2SeqBatch};

/// One causal-LM example: input ids and, per position, the id to predict next (`None`
/// where nothing is predicted: left context in the prefix form, padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CausalLmItem {
    /// Input ids.
    pub input: Vec<usize>,
    /// Targets, one per input position.
    pub target: Vec<Option<usize>>,
}

impl CausalLmItem {
    /// The full-sequence form: predict every next token of `ids` (`ids[1..]` from
    /// `ids[..n-1]`).
    pub fn full(ids: &[usize]) -> Self {
        let n = ids.len().saturating_sub(1);
        Self {
            input: ids[..n].to_vec(),
            target: ids[1..].iter().map(|&t| Some(t)).collect(),
        }
    }

    /// Number of predicted tokens.
    pub fn n_targets(&self) -> usize {
        self.target.iter().flatten().count()
    }
}

/// Pads and stacks [`CausalLmItem`]s.
#[derive(Debug, Clone)]
pub struct CausalLmBatcher {
    /// Input id used for padding positions (never predicted).
    pub pad_id: usize,
}

impl CausalLmBatcher {
    /// A batcher that pads inputs with `pad_id`.
    pub fn new(pad_id: usize) -> Self {
        Self { pad_id }
    }
}

impl Batcher<CausalLmItem, CausalLmBatch> for CausalLmBatcher {
    fn batch(&self, items: Vec<CausalLmItem>, device: &Device) -> CausalLmBatch {
        let b = items.len();
        let t = items
            .iter()
            .map(|i| i.input.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut inputs = vec![self.pad_id as i64; b * t];
        let mut targets = vec![0i64; b * t];
        let mut mask = vec![false; b * t];
        let mut padding = vec![true; b * t];
        for (r, item) in items.iter().enumerate() {
            for c in 0..item.input.len() {
                padding[r * t + c] = false;
            }
            for (c, (&x, y)) in item.input.iter().zip(&item.target).enumerate() {
                inputs[r * t + c] = x as i64;
                if let Some(y) = y {
                    targets[r * t + c] = *y as i64;
                    mask[r * t + c] = true;
                }
            }
        }
        CausalLmBatch {
            inputs: Tensor::from_data(TensorData::new(inputs, [b, t]), device),
            padding: Tensor::from_data(TensorData::new(padding, [b, t]), device),
            targets: Tensor::from_data(TensorData::new(targets, [b, t]), device),
            target_mask: Tensor::from_data(TensorData::new(mask, [b, t]), device),
        }
    }
}

/// One sequence-to-sequence example: source ids and target ids (no BOS/EOS; the
/// batcher adds them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seq2SeqItem {
    /// Source ids.
    pub src: Vec<usize>,
    /// Target ids.
    pub tgt: Vec<usize>,
}

/// Pads and stacks [`Seq2SeqItem`]s.
#[derive(Debug, Clone)]
pub struct Seq2SeqBatcher {
    /// Padding id (inputs only; padded targets are masked).
    pub pad_id: usize,
    /// Begin-of-sequence id, the decoder's first input.
    pub bos_id: usize,
    /// End-of-sequence id, the decoder's last target.
    pub eos_id: usize,
}

impl Batcher<Seq2SeqItem, Seq2SeqBatch> for Seq2SeqBatcher {
    fn batch(&self, items: Vec<Seq2SeqItem>, device: &Device) -> Seq2SeqBatch {
        let b = items.len();
        let s = items.iter().map(|i| i.src.len()).max().unwrap_or(0).max(1);
        let t = items.iter().map(|i| i.tgt.len() + 1).max().unwrap_or(1);
        let mut src = vec![self.pad_id as i64; b * s];
        let mut src_padding = vec![true; b * s];
        let mut tgt_in = vec![self.pad_id as i64; b * t];
        let mut tgt_out = vec![0i64; b * t];
        let mut tgt_mask = vec![false; b * t];
        for (r, item) in items.iter().enumerate() {
            for (c, &x) in item.src.iter().enumerate() {
                src[r * s + c] = x as i64;
                src_padding[r * s + c] = false;
            }
            let inputs = std::iter::once(self.bos_id).chain(item.tgt.iter().copied());
            let outputs = item.tgt.iter().copied().chain(std::iter::once(self.eos_id));
            for (c, (x, y)) in inputs.zip(outputs).enumerate() {
                tgt_in[r * t + c] = x as i64;
                tgt_out[r * t + c] = y as i64;
                tgt_mask[r * t + c] = true;
            }
        }
        Seq2SeqBatch {
            src: Tensor::from_data(TensorData::new(src, [b, s]), device),
            src_padding: Tensor::from_data(TensorData::new(src_padding, [b, s]), device),
            tgt_in: Tensor::from_data(TensorData::new(tgt_in, [b, t]), device),
            tgt_out: Tensor::from_data(TensorData::new(tgt_out, [b, t]), device),
            tgt_mask: Tensor::from_data(TensorData::new(tgt_mask, [b, t]), device),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zoo_device::test_device;

    #[test]
    fn seq2seq_shifts_targets_for_teacher_forcing() {
        let items = vec![
            Seq2SeqItem {
                src: vec![5, 6, 7],
                tgt: vec![8, 9],
            },
            Seq2SeqItem {
                src: vec![5],
                tgt: vec![8],
            },
        ];
        let batcher = Seq2SeqBatcher {
            pad_id: 0,
            bos_id: 1,
            eos_id: 2,
        };
        let b = batcher.batch(items, &test_device());
        use zoo_device::testing::{bools, ints};
        assert_eq!(ints(b.src), vec![5, 6, 7, 5, 0, 0]);
        assert_eq!(
            bools(b.src_padding),
            vec![false, false, false, false, true, true]
        );
        assert_eq!(ints(b.tgt_in), vec![1, 8, 9, 1, 8, 0]);
        assert_eq!(ints(b.tgt_out), vec![8, 9, 2, 8, 2, 0]);
        assert_eq!(bools(b.tgt_mask), vec![true, true, true, true, true, false]);
    }

    #[test]
    fn pads_inputs_and_masks_targets() {
        let items = vec![
            CausalLmItem::full(&[0, 1, 2, 0]),
            CausalLmItem::full(&[0, 3, 0]),
        ];
        let batch = CausalLmBatcher::new(0).batch(items, &test_device());
        assert_eq!(
            zoo_device::testing::ints(batch.inputs),
            vec![0, 1, 2, 0, 3, 0]
        );
        assert_eq!(
            zoo_device::testing::ints(batch.targets),
            vec![1, 2, 0, 3, 0, 0]
        );
        assert_eq!(
            zoo_device::testing::bools(batch.target_mask),
            vec![true, true, true, true, true, false]
        );
        assert_eq!(
            zoo_device::testing::bools(batch.padding),
            vec![false, false, false, false, false, true]
        );
    }
}
