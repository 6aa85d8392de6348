//! Batching for causal language modelling.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

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

/// A batch of causal-LM examples, right-padded to the longest.
#[derive(Debug, Clone)]
pub struct CausalLmBatch {
    /// `[B, T]` input ids (padding holds `pad_id`).
    pub inputs: Tensor<2, Int>,
    /// `[B, T]` target ids (0 where not predicted).
    pub targets: Tensor<2, Int>,
    /// `[B, T]`, `true` where a target counts in the loss.
    pub target_mask: Tensor<2, Bool>,
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
        for (r, item) in items.iter().enumerate() {
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
            targets: Tensor::from_data(TensorData::new(targets, [b, t]), device),
            target_mask: Tensor::from_data(TensorData::new(mask, [b, t]), device),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zoo_device::test_device;

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
    }
}
