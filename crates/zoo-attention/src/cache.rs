//! The key/value cache for incremental decoding: one per layer.

use burn::tensor::Tensor;

use crate::error::{AttentionError, Result};

/// Keys and values of the positions decoded so far, for one attention layer.
///
/// Keys are stored after RoPE, so each step only rotates its new positions. With a
/// sliding window only the last `window` positions are kept (Mistral-style rolling cache);
/// [`KvCache::seen`] still counts every position, so positions stay absolute.
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Option<Tensor<4>>,
    v: Option<Tensor<4>>,
    max_len: usize,
    window: Option<usize>,
    seen: usize,
}

impl KvCache {
    /// An empty cache that holds up to `max_len` positions.
    pub fn new(max_len: usize) -> Self {
        Self {
            k: None,
            v: None,
            max_len,
            window: None,
            seen: 0,
        }
    }

    /// An empty rolling cache that keeps the last `window` positions and never fills up.
    ///
    /// # Errors
    /// When `window` is zero.
    pub fn sliding(window: usize) -> Result<Self> {
        if window == 0 {
            return Err(AttentionError::Zero { name: "window" });
        }
        Ok(Self {
            window: Some(window),
            max_len: usize::MAX,
            ..Self::new(0)
        })
    }

    /// Positions seen so far (the absolute position of the next token).
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Positions currently held.
    pub fn len(&self) -> usize {
        self.k.as_ref().map_or(0, |k| k.dims()[2])
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.k.is_none()
    }

    /// The sliding window, if any.
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    /// Absolute position of the first key held.
    pub fn first_position(&self) -> usize {
        self.seen - self.len()
    }

    /// Checks that `t` more positions fit, before any work is done on them.
    ///
    /// # Errors
    /// [`AttentionError::TooLong`] past `max_len`.
    pub fn check_room(&self, t: usize) -> Result<()> {
        if self.window.is_none() && self.seen + t > self.max_len {
            return Err(AttentionError::TooLong {
                what: "kv cache",
                position: self.seen + t - 1,
                max_len: self.max_len,
            });
        }
        Ok(())
    }

    /// Appends the keys and values of `T` new positions and returns everything the new
    /// queries may attend to: the cached positions (at most `window` of them, plus the
    /// new ones) and the new ones.
    ///
    /// # Shapes
    /// - `k`, `v`: `[B, Hkv, T, D]` -> `([B, Hkv, L, D], [B, Hkv, L, D])`
    ///
    /// # Errors
    /// When the cache would pass `max_len`, or the batch or head sizes change.
    pub fn append(&mut self, k: Tensor<4>, v: Tensor<4>) -> Result<(Tensor<4>, Tensor<4>)> {
        let t = k.dims()[2];
        self.check_room(t)?;
        let (all_k, all_v) = match (self.k.take(), self.v.take()) {
            (Some(ck), Some(cv)) => {
                let [b, h, _, d] = ck.dims();
                let [nb, nh, _, nd] = k.dims();
                if (b, h, d) != (nb, nh, nd) {
                    return Err(AttentionError::Shape {
                        what: "kv cache append",
                        expected: format!("[{b}, {h}, _, {d}]"),
                        got: k.dims().to_vec(),
                    });
                }
                (Tensor::cat(vec![ck, k], 2), Tensor::cat(vec![cv, v], 2))
            }
            _ => (k, v),
        };
        self.seen += t;
        let len = all_k.dims()[2];
        let (kept_k, kept_v) = match self.window {
            Some(w) if len > w => {
                let [b, h, _, d] = all_k.dims();
                let dv = all_v.dims()[3];
                (
                    all_k.clone().slice([0..b, 0..h, len - w..len, 0..d]),
                    all_v.clone().slice([0..b, 0..h, len - w..len, 0..dv]),
                )
            }
            _ => (all_k.clone(), all_v.clone()),
        };
        self.k = Some(kept_k);
        self.v = Some(kept_v);
        Ok((all_k, all_v))
    }

    /// Empties the cache.
    pub fn reset(&mut self) {
        self.k = None;
        self.v = None;
        self.seen = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zoo_device::test_device;

    fn pos(values: &[f32]) -> Tensor<4> {
        let d = test_device();
        Tensor::<1>::from_floats(values, &d).reshape([1, 1, values.len(), 1])
    }

    #[test]
    fn appends_and_limits() {
        let mut c = KvCache::new(4);
        let (k, _) = c.append(pos(&[0.0, 1.0]), pos(&[0.0, 1.0])).unwrap();
        assert_eq!(k.dims(), [1, 1, 2, 1]);
        let (k, _) = c.append(pos(&[2.0]), pos(&[2.0])).unwrap();
        assert_eq!(
            k.into_data().try_to_vec::<f32>().unwrap(),
            vec![0.0, 1.0, 2.0]
        );
        assert_eq!(c.seen(), 3);
        let err = c.append(pos(&[3.0, 4.0]), pos(&[3.0, 4.0])).unwrap_err();
        assert_eq!(
            err,
            AttentionError::TooLong {
                what: "kv cache",
                position: 4,
                max_len: 4
            }
        );
        assert_eq!(c.seen(), 3, "a refused append leaves the cache as it was");
    }

    #[test]
    fn sliding_keeps_the_last_positions() {
        let mut c = KvCache::sliding(2).unwrap();
        c.append(pos(&[0.0, 1.0, 2.0]), pos(&[0.0, 1.0, 2.0]))
            .unwrap();
        assert_eq!(c.len(), 2);
        let (k, _) = c.append(pos(&[3.0]), pos(&[3.0])).unwrap();
        // The new query sees the two kept positions and itself.
        assert_eq!(
            k.into_data().try_to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0]
        );
        assert_eq!((c.len(), c.seen(), c.first_position()), (2, 4, 2));
        assert_eq!(
            KvCache::sliding(0).unwrap_err(),
            AttentionError::Zero { name: "window" }
        );
    }
}
