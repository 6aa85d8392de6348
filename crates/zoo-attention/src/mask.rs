//! Attention masks: causal, key padding, both together, and any boolean or additive mask.
//!
//! Every mask here is broadcastable to the score shape `[B, H, Tq, Tk]`. Boolean masks use
//! Burn's convention: `true` means "this key may not be attended to". Additive masks are
//! added to the scores before the softmax (ALiBi, T5 relative bias, `-inf` style masks).
//!
//! A query row whose keys are all masked has no distribution to take; every path in this
//! crate returns zeros for such a row instead of NaN.

use std::ops::Range;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

use crate::error::{AttentionError, Result};

/// Which keys a query may see, by position: the one definition that every kernel and
/// mask builder of this crate uses (causal, sliding window, global tokens). Padding and
/// other data-dependent masks come on top, through [`Mask`].
///
/// Query `i` sees key `j` (absolute positions) when
/// - causal: `j <= i`, and then
/// - with a window `w`: `|i - j| < w`, or `i` or `j` is a global token (Longformer);
/// - without a window: always.
///
/// Causality binds global tokens too: a global query never sees a future key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Visibility {
    /// Queries never see later keys.
    pub causal: bool,
    /// Keys closer than this many positions are visible (itself included).
    pub window: Option<usize>,
    /// Positions that see, and are seen by, every position the window would hide.
    pub global: Vec<usize>,
}

impl Visibility {
    /// Every key is visible.
    pub fn full() -> Self {
        Self::default()
    }

    /// Causal visibility.
    pub fn causal() -> Self {
        Self {
            causal: true,
            ..Self::default()
        }
    }

    /// Whether query position `i` may see key position `j`.
    pub fn sees(&self, i: usize, j: usize) -> bool {
        if self.causal && j > i {
            return false;
        }
        match self.window {
            Some(w) => i.abs_diff(j) < w || self.global.contains(&i) || self.global.contains(&j),
            None => true,
        }
    }

    /// Whether the rule masks anything at all.
    pub fn is_full(&self) -> bool {
        !self.causal && self.window.is_none()
    }

    /// The boolean mask `[Tq, Tk]` (`true` = masked) for queries at absolute positions
    /// `queries` and keys at `keys`, built on the host.
    pub fn mask(
        &self,
        queries: Range<usize>,
        keys: Range<usize>,
        device: &Device,
    ) -> Tensor<2, Bool> {
        let (q0, tq, k0, tk) = (queries.start, queries.len(), keys.start, keys.len());
        let values: Vec<bool> = (q0..q0 + tq)
            .flat_map(|i| (k0..k0 + tk).map(move |j| (i, j)))
            .map(|(i, j)| !self.sees(i, j))
            .collect();
        Tensor::from_data(TensorData::new(values, [tq, tk]), device)
    }
}

/// The masks and biases to apply to one attention call.
///
/// Built with [`Mask::none`] and the `with_*` / constructor helpers; combined masks are
/// the union of their masked positions and the sum of their biases. The positional part
/// (causal, window, global tokens) follows [`Visibility`], with the first query at
/// absolute position `query_offset` and the first key at `key_offset`.
#[derive(Debug, Clone, Default)]
pub struct Mask {
    /// `[B|1, H|1, Tq, Tk]`, `true` = masked.
    pub masked: Option<Tensor<4, Bool>>,
    /// `[B|1, H|1, Tq, Tk]`, added to the scores.
    pub bias: Option<Tensor<4>>,
    /// Which keys each query may see by position.
    pub rule: Visibility,
    /// Absolute position of the first query (decoding over a KV cache).
    pub query_offset: usize,
    /// Absolute position of the first key (a sliding cache that dropped old keys).
    pub key_offset: usize,
}

impl Mask {
    /// No masking.
    pub fn none() -> Self {
        Self::default()
    }

    /// Causal masking where query `i` and key `i` are the same position.
    pub fn causal() -> Self {
        Self::none().with_causal()
    }

    /// Adds causal masking with the first query at absolute position `offset` (decoding
    /// with a cache, where the keys cover positions `0..offset + Tq`).
    pub fn with_causal_offset(mut self, offset: usize) -> Self {
        self.rule.causal = true;
        self.query_offset = offset;
        self
    }

    /// Adds causal masking.
    pub fn with_causal(mut self) -> Self {
        self.rule.causal = true;
        self
    }

    /// Limits each query to keys closer than `window` positions, except global tokens.
    pub fn with_window(mut self, window: usize, global: &[usize]) -> Self {
        self.rule.window = Some(window);
        self.rule.global = global.to_vec();
        self
    }

    /// Places the queries at `query_offset..` and the keys at `key_offset..` (absolute
    /// positions, for the positional rule).
    pub fn with_offsets(mut self, query_offset: usize, key_offset: usize) -> Self {
        self.query_offset = query_offset;
        self.key_offset = key_offset;
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

    /// Whether the mask is causal.
    pub fn is_causal(&self) -> bool {
        self.rule.causal
    }

    /// Whether nothing is masked or biased.
    pub fn is_empty(&self) -> bool {
        self.masked.is_none() && self.bias.is_none() && self.rule.is_full()
    }

    /// Checks that the boolean mask and the bias broadcast to the score shape
    /// `[B, H, Tq, Tk]`, before any kernel sees them.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] naming the part and its shape.
    pub fn check(&self, shape: [usize; 4]) -> Result<()> {
        let part = |what: &'static str, dims: Option<[usize; 4]>| match dims {
            Some(dims) if !dims.iter().zip(shape).all(|(&d, s)| d == s || d == 1) => {
                Err(AttentionError::Shape {
                    what,
                    expected: format!("broadcastable to {shape:?}"),
                    got: dims.to_vec(),
                })
            }
            _ => Ok(()),
        };
        part("attention mask", self.masked.as_ref().map(Tensor::dims))?;
        part("attention bias", self.bias.as_ref().map(Tensor::dims))?;
        Ok(())
    }

    /// The positional part alone for a tile of queries `queries` and keys
    /// `keys` (indices into this call's queries and keys), `[1, 1, tq, tk]`, or
    /// `None` when the rule masks nothing.
    pub fn rule_tile(
        &self,
        queries: Range<usize>,
        keys: Range<usize>,
        device: &Device,
    ) -> Option<Tensor<4, Bool>> {
        let (q0, tq, k0, tk) = (queries.start, queries.len(), keys.start, keys.len());
        if self.rule.is_full() {
            return None;
        }
        Some(
            self.rule
                .mask(
                    self.query_offset + q0..self.query_offset + q0 + tq,
                    self.key_offset + k0..self.key_offset + k0 + tk,
                    device,
                )
                .reshape([1, 1, tq, tk]),
        )
    }

    /// The full boolean mask `[B, H, Tq, Tk]` (positional part included), or `None` when
    /// nothing is masked.
    pub fn materialize(&self, shape: [usize; 4], device: &Device) -> Option<Tensor<4, Bool>> {
        let [b, h, tq, tk] = shape;
        Some(
            self.materialize_compact(tq, tk, device)?
                .expand([b, h, tq, tk]),
        )
    }

    /// The boolean mask (positional part included) at its own broadcast shape,
    /// `[B|1, H|1, Tq, Tk]`, or `None` when nothing is masked: [`Mask::materialize`]
    /// before it is expanded to every batch row and head.
    pub fn materialize_compact(
        &self,
        tq: usize,
        tk: usize,
        device: &Device,
    ) -> Option<Tensor<4, Bool>> {
        let rule = self.rule_tile(0..tq, 0..tk, device);
        match (self.masked.clone(), rule) {
            (Some(m), Some(c)) => Some(union(m, c)),
            (m, c) => m.or(c),
        }
    }

    /// The bias expanded to `[B, H, Tq, Tk]`, if any.
    pub fn materialize_bias(&self, shape: [usize; 4]) -> Option<Tensor<4>> {
        self.bias.clone().map(|b| b.expand(shape))
    }
}

/// The causal mask `[Tq, Tk]`: query `i` (absolute position `offset + i`) may not see keys
/// after it. `true` = masked.
pub fn causal_mask(tq: usize, tk: usize, offset: usize, device: &Device) -> Tensor<2, Bool> {
    Visibility::causal().mask(offset..offset + tq, 0..tk, device)
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

pub(crate) fn union(a: Tensor<4, Bool>, b: Tensor<4, Bool>) -> Tensor<4, Bool> {
    let dims = broadcast_dims(a.dims(), b.dims());
    a.expand(dims).bool_or(b.expand(dims))
}

pub(crate) fn add_broadcast(a: Tensor<4>, b: Tensor<4>) -> Tensor<4> {
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
    fn global_tokens_do_not_see_the_future() {
        // Causal, window 4, global [5]: query 0 must not see key 5, and the global query
        // 5 sees every earlier key but no later one.
        let rule = Visibility {
            causal: true,
            window: Some(4),
            global: vec![5],
        };
        assert!(!rule.sees(0, 5));
        assert!((0..=5).all(|j| rule.sees(5, j)));
        assert!(!rule.sees(5, 6));
        assert!(rule.sees(9, 5), "later queries see the global key");
        assert!(!rule.sees(9, 4), "outside the window");
        assert!(rule.sees(9, 6) && !rule.sees(9, 10));
        let bidirectional = Visibility {
            causal: false,
            ..rule
        };
        assert!(bidirectional.sees(0, 5) && bidirectional.sees(5, 9) && !bidirectional.sees(0, 4));
    }

    #[test]
    fn mask_shapes_are_checked() {
        let d = test_device();
        let pad = padding_mask_from_lengths(&[2, 3], 3, &d);
        let ok = Mask::causal().with_key_padding(pad.clone());
        assert!(ok.check([2, 4, 3, 3]).is_ok());
        assert_eq!(
            ok.check([2, 4, 3, 5]).unwrap_err().to_string(),
            "attention mask: expected shape broadcastable to [2, 4, 3, 5], got [2, 1, 1, 3]"
        );
        let bias = Mask::none().with_bias(Tensor::<4>::zeros([1, 3, 3, 3], &d));
        assert_eq!(
            bias.check([2, 4, 3, 3]).unwrap_err().to_string(),
            "attention bias: expected shape broadcastable to [2, 4, 3, 3], got [1, 3, 3, 3]"
        );
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
