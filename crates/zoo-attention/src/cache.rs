//! The key/value cache for incremental decoding: one per layer.

use burn::tensor::{Int, Tensor, TensorData};
use zoo_core::ConfigError;

use crate::error::{AttentionError, Result};

/// Keys and values of the positions decoded so far, for one attention layer.
///
/// Keys are stored after RoPE, so each step only rotates its new positions. A bounded
/// cache writes new positions in place into a buffer that doubles when full (up to
/// `max_len`), so a step costs the new positions, not a copy of everything cached. With a
/// sliding window only the last `window` positions are kept (Mistral-style rolling cache);
/// [`KvCache::seen`] still counts every position, so positions stay absolute.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// `[B, Hkv, capacity, D]`; positions `0..len` are filled.
    k: Option<Tensor<4>>,
    /// `[B, Hkv, capacity, Dv]`
    v: Option<Tensor<4>>,
    len: usize,
    max_len: usize,
    window: Option<usize>,
    seen: usize,
}

/// The first buffer of a bounded cache holds at least this many positions.
const MIN_CAPACITY: usize = 64;

impl KvCache {
    /// An empty cache that holds up to `max_len` positions.
    pub fn new(max_len: usize) -> Self {
        Self {
            k: None,
            v: None,
            len: 0,
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
            return Err(ConfigError::zero("window").into());
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
        self.len
    }

    /// Positions the buffer can hold before it grows.
    pub fn capacity(&self) -> usize {
        self.k.as_ref().map_or(0, |k| k.dims()[2])
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sliding window, if any.
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    /// Absolute position of the first key held.
    pub fn first_position(&self) -> usize {
        self.seen - self.len
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

    /// Checks that keys and values of this shape can be appended, changing nothing.
    ///
    /// # Errors
    /// A full cache, or batch, head or feature sizes that differ from the cached ones or
    /// between `k` and `v`.
    pub fn check_append(&self, k_dims: [usize; 4], v_dims: [usize; 4]) -> Result<()> {
        let [b, h, t, _] = k_dims;
        if v_dims[..3] != k_dims[..3] {
            return Err(AttentionError::Shape {
                what: "kv cache values",
                expected: format!("[{b}, {h}, {t}, _] (as the keys)"),
                got: v_dims.to_vec(),
            });
        }
        if let (Some(ck), Some(cv)) = (&self.k, &self.v) {
            let [cb, ch, _, cd] = ck.dims();
            let cdv = cv.dims()[3];
            if (cb, ch, cd, cdv) != (b, h, k_dims[3], v_dims[3]) {
                return Err(AttentionError::Shape {
                    what: "kv cache append",
                    expected: format!(
                        "[{cb}, {ch}, _, {cd}] keys and [{cb}, {ch}, _, {cdv}] values"
                    ),
                    got: k_dims.to_vec(),
                });
            }
        }
        self.check_room(t)
    }

    /// Appends the keys and values of `T` new positions and returns everything the new
    /// queries may attend to: the cached positions (at most `window` of them, plus the
    /// new ones) and the new ones. A refused append leaves the cache as it was.
    ///
    /// # Shapes
    /// - `k`, `v`: `[B, Hkv, T, D]` -> `([B, Hkv, L, D], [B, Hkv, L, D])`
    ///
    /// # Errors
    /// When the cache would pass `max_len`, or the batch, head or feature sizes change.
    pub fn append(&mut self, k: Tensor<4>, v: Tensor<4>) -> Result<(Tensor<4>, Tensor<4>)> {
        self.check_append(k.dims(), v.dims())?;
        match self.window {
            Some(w) => Ok(self.append_sliding(k, v, w)),
            None => Ok(self.append_in_place(k, v)),
        }
    }

    fn append_in_place(&mut self, k: Tensor<4>, v: Tensor<4>) -> (Tensor<4>, Tensor<4>) {
        let [b, h, t, d] = k.dims();
        let dv = v.dims()[3];
        let needed = self.len + t;
        if needed > self.capacity() {
            // Grow by doubling, never past max_len: amortised O(1) copies per position.
            let capacity = needed
                .max(2 * self.capacity())
                .max(MIN_CAPACITY)
                .min(self.max_len);
            let device = k.device();
            let mut nk = Tensor::<4>::zeros([b, h, capacity, d], &device);
            let mut nv = Tensor::<4>::zeros([b, h, capacity, dv], &device);
            if let (Some(ck), Some(cv)) = (self.k.take(), self.v.take()) {
                let len = self.len;
                nk = nk.slice_assign(
                    [0..b, 0..h, 0..len, 0..d],
                    ck.slice([0..b, 0..h, 0..len, 0..d]),
                );
                nv = nv.slice_assign(
                    [0..b, 0..h, 0..len, 0..dv],
                    cv.slice([0..b, 0..h, 0..len, 0..dv]),
                );
            }
            self.k = Some(nk);
            self.v = Some(nv);
        }
        let (Some(ck), Some(cv)) = (self.k.take(), self.v.take()) else {
            unreachable!("the buffers exist after growing")
        };
        let range = self.len..needed;
        let ck = ck.slice_assign([0..b, 0..h, range.clone(), 0..d], k);
        let cv = cv.slice_assign([0..b, 0..h, range, 0..dv], v);
        self.len = needed;
        self.seen += t;
        let out = (
            ck.clone().slice([0..b, 0..h, 0..needed, 0..d]),
            cv.clone().slice([0..b, 0..h, 0..needed, 0..dv]),
        );
        self.k = Some(ck);
        self.v = Some(cv);
        out
    }

    fn append_sliding(&mut self, k: Tensor<4>, v: Tensor<4>, w: usize) -> (Tensor<4>, Tensor<4>) {
        // The window bounds what is kept, so joining costs O(window) per step.
        let t = k.dims()[2];
        let (all_k, all_v) = match (self.k.take(), self.v.take()) {
            (Some(ck), Some(cv)) => (Tensor::cat(vec![ck, k], 2), Tensor::cat(vec![cv, v], 2)),
            _ => (k, v),
        };
        self.seen += t;
        let len = all_k.dims()[2];
        let [b, h, _, d] = all_k.dims();
        let dv = all_v.dims()[3];
        let keep = len.min(w);
        self.k = Some(all_k.clone().slice([0..b, 0..h, len - keep..len, 0..d]));
        self.v = Some(all_v.clone().slice([0..b, 0..h, len - keep..len, 0..dv]));
        self.len = keep;
        (all_k, all_v)
    }

    /// Keeps, as row `i`, what row `rows[i]` held (beam search moves beams between rows);
    /// `rows` may repeat a row or leave one out.
    ///
    /// # Errors
    /// A row outside the cached batch.
    pub fn select_rows(&mut self, rows: &[usize]) -> Result<()> {
        if let (Some(k), Some(v)) = (self.k.take(), self.v.take()) {
            let index = row_index(rows, k.dims()[0])?;
            let device = k.device();
            let index = Tensor::<1, Int>::from_data(index, &device);
            self.k = Some(k.select(0, index.clone()));
            self.v = Some(v.select(0, index));
        }
        Ok(())
    }

    /// Empties the cache.
    pub fn reset(&mut self) {
        self.k = None;
        self.v = None;
        self.len = 0;
        self.seen = 0;
    }
}

/// The keys and values of a cross-attention layer, projected once from the encoder's
/// output and reused at every decoding step (they do not change while decoding).
#[derive(Debug, Clone)]
pub struct CrossKvCache {
    /// `[B, Hkv, S, D]`
    pub(crate) k: Tensor<4>,
    /// `[B, Hkv, S, Dv]`
    pub(crate) v: Tensor<4>,
}

impl CrossKvCache {
    /// Source positions held.
    pub fn len(&self) -> usize {
        self.k.dims()[2]
    }

    /// Whether the source is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Batch rows.
    pub fn batch(&self) -> usize {
        self.k.dims()[0]
    }

    /// The cache of a batch whose row `i` is row `rows[i]` of this one (each source
    /// repeated for its beams, or beams moved between rows).
    ///
    /// # Errors
    /// A row outside the batch.
    pub fn select_rows(&self, rows: &[usize]) -> Result<Self> {
        let index = row_index(rows, self.batch())?;
        let index = Tensor::<1, Int>::from_data(index, &self.k.device());
        Ok(Self {
            k: self.k.clone().select(0, index.clone()),
            v: self.v.clone().select(0, index),
        })
    }
}

fn row_index(rows: &[usize], batch: usize) -> Result<TensorData> {
    if rows.is_empty() {
        return Err(ConfigError::zero("rows").into());
    }
    if let Some(&r) = rows.iter().find(|&&r| r >= batch) {
        return Err(AttentionError::Unsupported(format!(
            "cache row {r} is outside the batch of {batch} rows"
        )));
    }
    let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    Ok(TensorData::new(ids, [rows.len()]))
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
    fn a_mismatched_append_keeps_what_was_cached() {
        let d = test_device();
        let mut c = KvCache::new(8);
        c.append(pos(&[0.0, 1.0]), pos(&[0.0, 1.0])).unwrap();
        // Two heads instead of one: refused, and the cache is untouched.
        let wrong = Tensor::<4>::zeros([1, 2, 1, 1], &d);
        let e = c.append(wrong.clone(), wrong).unwrap_err();
        assert!(
            matches!(
                e,
                AttentionError::Shape {
                    what: "kv cache append",
                    ..
                }
            ),
            "{e}"
        );
        // Values whose length differs from the keys' are refused too.
        let e = c.append(pos(&[2.0]), pos(&[2.0, 3.0])).unwrap_err();
        assert!(
            matches!(
                e,
                AttentionError::Shape {
                    what: "kv cache values",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!((c.len(), c.seen()), (2, 2));
        let (k, v) = c.append(pos(&[2.0]), pos(&[20.0])).unwrap();
        assert_eq!(
            k.into_data().try_to_vec::<f32>().unwrap(),
            vec![0.0, 1.0, 2.0]
        );
        assert_eq!(
            v.into_data().try_to_vec::<f32>().unwrap(),
            vec![0.0, 1.0, 20.0]
        );
    }

    #[test]
    fn the_buffer_grows_by_doubling_and_keeps_values() {
        let mut c = KvCache::new(200);
        let mut expected = Vec::new();
        for step in 0..150 {
            let x = step as f32;
            expected.push(x);
            let (k, _) = c.append(pos(&[x]), pos(&[-x])).unwrap();
            if step == 63 || step == 64 || step == 149 {
                assert_eq!(k.into_data().try_to_vec::<f32>().unwrap(), expected);
            }
            // Capacity 64, then 128, then the max_len cap of 200: few copies in all.
            let cap = c.capacity();
            assert_eq!(
                cap,
                if step < 64 {
                    64
                } else if step < 128 {
                    128
                } else {
                    200
                }
            );
        }
        assert_eq!(c.len(), 150);
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
            ConfigError::zero("window").into()
        );
    }
}
