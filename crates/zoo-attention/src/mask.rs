//! Attention masks: causal, key padding, both together, and any boolean or additive mask.
//!
//! Every mask here is broadcastable to the score shape `[B, H, Tq, Tk]`. Boolean masks use
//! Burn's convention: `true` means "this key may not be attended to". Additive masks are
//! added to the scores before the softmax (ALiBi, T5 relative bias, `-inf` style masks).
//!
//! A query row whose keys are all masked has no distribution to take; every path in this
//! crate returns zeros for such a row instead of NaN.

use burn::tensor::{Bool, Device, Int, Tensor};

/// The masks and biases to apply to one attention call.
///
/// Built with [`Mask::none`] and the `with_*` / constructor helpers; combined masks are
/// the union of their masked positions and the sum of their biases.
#[derive(Debug, Clone, Default)]
pub struct Mask {
    /// `[B|1, H|1, Tq, Tk]`, `true` = masked.
    pub masked: Option<Tensor<4, Bool>>,
    /// `[B|1, H|1, Tq, Tk]`, added to the scores.
    pub bias: Option<Tensor<4>>,
    /// Causal masking, applied on top of `masked`. Query `i` sits at absolute position
    /// `causal_offset + i` and sees keys `0..=causal_offset + i`.
    pub causal: bool,
    /// Absolute position of the first query, for causal masking over a KV cache.
    pub causal_offset: usize,
}

impl Mask {
    /// No masking.
    pub fn none() -> Self {
        Self::default()
    }

    /// Causal masking where query `i` and key `i` are the same position.
    pub fn causal() -> Self {
        Self {
            causal: true,
            ..Self::default()
        }
    }

    /// Adds causal masking with the first query at absolute position `offset` (decoding
    /// with a cache, where the keys cover positions `0..offset + Tq`).
    pub fn with_causal_offset(mut self, offset: usize) -> Self {
        self.causal = true;
        self.causal_offset = offset;
        self
    }

    /// Adds causal masking.
    pub fn with_causal(mut self) -> Self {
        self.causal = true;
        self
    }

    /// Adds a key padding mask.
    ///
    /// # Shapes
    /// - `pad`: `[B, Tk]`, `true` at padding keys.
    pub fn with_key_padding(self, pad: Tensor<2, Bool>) -> Self {
        let [b, tk] = pad.dims();
        // [B, Tk] -> [B, 1, 1, Tk]
        self.with_bool(pad.reshape([b, 1, 1, tk]))
    }

    /// Adds any boolean mask broadcastable to `[B, H, Tq, Tk]` (`true` = masked).
    pub fn with_bool(mut self, mask: Tensor<4, Bool>) -> Self {
        self.masked = Some(match self.masked.take() {
            Some(m) => union(m, mask),
            None => mask,
        });
        self
    }

    /// Adds any additive mask or bias broadcastable to `[B, H, Tq, Tk]`.
    pub fn with_bias(mut self, bias: Tensor<4>) -> Self {
        self.bias = Some(match self.bias.take() {
            Some(b) => add_broadcast(b, bias),
            None => bias,
        });
        self
    }

    /// Whether nothing is masked or biased.
    pub fn is_empty(&self) -> bool {
        self.masked.is_none() && self.bias.is_none() && !self.causal
    }

    /// The full boolean mask `[B, H, Tq, Tk]` (causal part included), or `None` when
    /// nothing is masked.
    pub fn materialize(&self, shape: [usize; 4], device: &Device) -> Option<Tensor<4, Bool>> {
        let [b, h, tq, tk] = shape;
        let causal = self
            .causal
            .then(|| causal_mask(tq, tk, self.causal_offset, device).reshape([1, 1, tq, tk]));
        let mask = match (self.masked.clone(), causal) {
            (Some(m), Some(c)) => Some(union(m, c)),
            (m, c) => m.or(c),
        }?;
        Some(mask.expand([b, h, tq, tk]))
    }

    /// The bias expanded to `[B, H, Tq, Tk]`, if any.
    pub fn materialize_bias(&self, shape: [usize; 4]) -> Option<Tensor<4>> {
        self.bias.clone().map(|b| b.expand(shape))
    }
}

/// The causal mask `[Tq, Tk]`: query `i` (absolute position `offset + i`) may not see keys
/// after it. `true` = masked.
pub fn causal_mask(tq: usize, tk: usize, offset: usize, device: &Device) -> Tensor<2, Bool> {
    // key j is masked for query i when j > offset + i
    let q = Tensor::<1, Int>::arange(offset as i64..(offset + tq) as i64, device).reshape([tq, 1]);
    let k = Tensor::<1, Int>::arange(0..tk as i64, device).reshape([1, tk]);
    k.expand([tq, tk]).greater(q.expand([tq, tk]))
}

/// A key padding mask `[B, T]` from sequence lengths: position `t` of row `b` is masked when
/// `t >= lengths[b]` (right padding).
pub fn padding_mask_from_lengths(lengths: &[usize], t: usize, device: &Device) -> Tensor<2, Bool> {
    let b = lengths.len();
    let pos = Tensor::<1, Int>::arange(0..t as i64, device)
        .reshape([1, t])
        .expand([b, t]);
    let lens = Tensor::<1, Int>::from_ints(
        lengths
            .iter()
            .map(|&l| l as i64)
            .collect::<Vec<_>>()
            .as_slice(),
        device,
    )
    .reshape([b, 1])
    .expand([b, t]);
    pos.greater_equal(lens)
}

/// The additive form of a boolean mask: 0 where visible, `-inf` where masked.
pub fn to_additive(mask: Tensor<4, Bool>) -> Tensor<4> {
    let zeros = Tensor::<4>::zeros(mask.dims(), &mask.device());
    zeros.mask_fill(mask, f32::NEG_INFINITY)
}

fn broadcast_dims(a: [usize; 4], b: [usize; 4]) -> [usize; 4] {
    let mut out = [0; 4];
    for i in 0..4 {
        out[i] = a[i].max(b[i]);
    }
    out
}

fn union(a: Tensor<4, Bool>, b: Tensor<4, Bool>) -> Tensor<4, Bool> {
    let dims = broadcast_dims(a.dims(), b.dims());
    a.expand(dims).bool_or(b.expand(dims))
}

fn add_broadcast(a: Tensor<4>, b: Tensor<4>) -> Tensor<4> {
    let dims = broadcast_dims(a.dims(), b.dims());
    a.expand(dims) + b.expand(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zoo_device::test_device;

    fn bools(t: Tensor<2, Bool>) -> Vec<bool> {
        zoo_device::testing::bools(t)
    }

    #[test]
    fn causal_mask_values() {
        let d = test_device();
        assert_eq!(
            bools(causal_mask(3, 3, 0, &d)),
            vec![false, true, true, false, false, true, false, false, false]
        );
        // Two new queries at positions 2 and 3 over four cached keys.
        assert_eq!(
            bools(causal_mask(2, 4, 2, &d)),
            vec![false, false, false, true, false, false, false, false]
        );
    }

    #[test]
    fn padding_from_lengths() {
        let d = test_device();
        assert_eq!(
            bools(padding_mask_from_lengths(&[3, 1], 3, &d)),
            vec![false, false, false, false, true, true]
        );
    }

    #[test]
    fn causal_and_padding_combine() {
        let d = test_device();
        let pad = padding_mask_from_lengths(&[2], 3, &d);
        let m = Mask::causal()
            .with_key_padding(pad)
            .materialize([1, 2, 3, 3], &d)
            .unwrap();
        assert_eq!(m.dims(), [1, 2, 3, 3]);
        let v = zoo_device::testing::bools(m);
        // head 0: row 0 sees key 0; rows 1, 2 see keys 0, 1 (key 2 is padding)
        assert_eq!(
            &v[..9],
            &[false, true, true, false, false, true, false, false, true]
        );
        assert_eq!(&v[..9], &v[9..]);
    }

    #[test]
    fn additive_is_zero_or_neg_inf() {
        let d = test_device();
        let m = causal_mask(2, 2, 0, &d).reshape([1, 1, 2, 2]);
        let v = to_additive(m).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(v, vec![0.0, f32::NEG_INFINITY, 0.0, 0.0]);
    }
}
