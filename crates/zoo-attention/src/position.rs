//! Positional encodings: sinusoidal, learned absolute, rotary (RoPE), ALiBi and the T5
//! relative position bias.

use std::ops::Range;
use zoo_core::ConfigError;

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::error::{AttentionError, Result};

/// The sinusoidal table of Vaswani et al. (2017), section 3.5:
/// `PE[pos, 2i] = sin(pos / 10000^(2i/d))`, `PE[pos, 2i+1] = cos(pos / 10000^(2i/d))`.
///
/// Returned as a `[max_len, d_model]` tensor, ready to add to embeddings or to plot.
///
/// # Errors
/// When `max_len` or `d_model` is zero.
pub fn sinusoidal_table(max_len: usize, d_model: usize, device: &Device) -> Result<Tensor<2>> {
    if max_len == 0 {
        return Err(ConfigError::zero("max_len").into());
    }
    if d_model == 0 {
        return Err(ConfigError::zero("d_model").into());
    }
    let mut values = vec![0f32; max_len * d_model];
    for pos in 0..max_len {
        for c in 0..d_model {
            let i2 = (c / 2 * 2) as f64;
            let angle = pos as f64 / 10000f64.powf(i2 / d_model as f64);
            values[pos * d_model + c] = if c % 2 == 0 { angle.sin() } else { angle.cos() } as f32;
        }
    }
    Ok(Tensor::from_data(
        TensorData::new(values, [max_len, d_model]),
        device,
    ))
}

/// The sinusoidal table in Marian's layout (HF `MarianSinusoidalPositionalEmbedding`):
/// the same frequencies as [`sinusoidal_table`], with every sine in the first half of the
/// features and every cosine in the second: column `i < d/2` is `sin(pos / 10000^(2i/d))`
/// and column `d/2 + i` is `cos(pos / 10000^(2i/d))`.
///
/// # Errors
/// When `max_len` or `d_model` is zero.
pub fn sinusoidal_table_split(
    max_len: usize,
    d_model: usize,
    device: &Device,
) -> Result<Tensor<2>> {
    if max_len == 0 {
        return Err(ConfigError::zero("max_len").into());
    }
    if d_model == 0 {
        return Err(ConfigError::zero("d_model").into());
    }
    let half = d_model / 2 + d_model % 2;
    let mut values = vec![0f32; max_len * d_model];
    for pos in 0..max_len {
        for c in 0..d_model {
            // Column c of the interleaved table, read as HF does: even ones to the sine
            // half, odd ones to the cosine half.
            let (j, sine) = if c < half {
                (2 * c, true)
            } else {
                (2 * (c - half) + 1, false)
            };
            let i2 = (j / 2 * 2) as f64;
            let angle = pos as f64 / 10000f64.powf(i2 / d_model as f64);
            values[pos * d_model + c] = if sine { angle.sin() } else { angle.cos() } as f32;
        }
    }
    Ok(Tensor::from_data(
        TensorData::new(values, [max_len, d_model]),
        device,
    ))
}

/// Fixed sinusoidal position encoding added to `[B, T, d_model]` inputs.
#[derive(Config, Debug)]
pub struct SinusoidalEncodingConfig {
    /// Longest sequence the table covers.
    pub max_len: usize,
    /// Model width.
    pub d_model: usize,
}

/// Fixed sinusoidal positions; see [`sinusoidal_table`].
#[derive(Module, Debug)]
pub struct SinusoidalEncoding {
    /// `[max_len, d_model]`, not trained.
    pub table: Tensor<2>,
}

impl SinusoidalEncodingConfig {
    /// Builds the table.
    ///
    /// # Errors
    /// When a size is zero.
    pub fn init(&self, device: &Device) -> Result<SinusoidalEncoding> {
        Ok(SinusoidalEncoding {
            table: sinusoidal_table(self.max_len, self.d_model, device)?,
        })
    }
}

impl SinusoidalEncoding {
    /// Adds the encodings of positions `offset..offset + T` to `x`.
    ///
    /// # Shapes
    /// - `x`: `[B, T, d_model]` -> `[B, T, d_model]`
    ///
    /// # Errors
    /// When `offset + T` passes `max_len`.
    pub fn forward(&self, x: Tensor<3>, offset: usize) -> Result<Tensor<3>> {
        let [_, t, d] = x.dims();
        let [max_len, _] = self.table.dims();
        if offset + t > max_len {
            return Err(AttentionError::TooLong {
                what: "sinusoidal encoding",
                position: offset + t - 1,
                max_len,
            });
        }
        let pe = self.table.clone().slice([offset..offset + t, 0..d]); // [T, D]
        Ok(x + pe.unsqueeze::<3>())
    }
}

/// Learned absolute position embeddings (BERT, GPT-2).
#[derive(Config, Debug)]
pub struct LearnedPositionConfig {
    /// Longest sequence.
    pub max_len: usize,
    /// Model width.
    pub d_model: usize,
    /// Initial weights. Default: N(0, 0.02), as GPT-2 and BERT.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

/// A learned `[max_len, d_model]` table.
#[derive(Module, Debug)]
pub struct LearnedPosition {
    /// The table; named like HF's `wpe` / `position_embeddings`.
    pub embedding: Embedding,
}

impl LearnedPositionConfig {
    /// Builds the table.
    pub fn init(&self, device: &Device) -> LearnedPosition {
        LearnedPosition {
            embedding: EmbeddingConfig::new(self.max_len, self.d_model)
                .with_initializer(self.initializer.clone())
                .init(device),
        }
    }
}

impl LearnedPosition {
    /// The embeddings of positions `offset..offset + t`, `[1, t, d_model]`.
    ///
    /// # Errors
    /// When `offset + t` passes `max_len`.
    pub fn forward(&self, t: usize, offset: usize, device: &Device) -> Result<Tensor<3>> {
        let [max_len, _] = self.embedding.weight.dims();
        if offset + t > max_len {
            return Err(AttentionError::TooLong {
                what: "learned position embedding",
                position: offset + t - 1,
                max_len,
            });
        }
        let pos =
            Tensor::<1, Int>::arange(offset as i64..(offset + t) as i64, device).reshape([1, t]);
        Ok(self.embedding.forward(pos))
    }
}

/// The position of every token of a batch, `[B, T]`, with the largest one known on the
/// host, so that range checks never read the device back (a GPU would stall on each).
///
/// Built from host rows ([`Positions::from_rows`]), which cannot hold a negative value, or
/// from a tensor ([`Positions::from_tensor`]), which reads it back once and rejects
/// negative values.
#[derive(Debug, Clone)]
pub struct Positions {
    ids: Tensor<2, Int>,
    max: usize,
}

impl Positions {
    /// Positions from one row per sequence.
    ///
    /// # Errors
    /// No rows, or rows of different lengths.
    pub fn from_rows(rows: &[Vec<usize>], device: &Device) -> Result<Self> {
        let t = rows.first().map_or(0, Vec::len);
        if rows.is_empty() || t == 0 {
            return Err(ConfigError::zero("positions per row").into());
        }
        if let Some(row) = rows.iter().find(|r| r.len() != t) {
            return Err(AttentionError::Shape {
                what: "positions",
                expected: format!("[{}, {t}] (rows of equal length)", rows.len()),
                got: vec![rows.len(), row.len()],
            });
        }
        let flat: Vec<i64> = rows.iter().flatten().map(|&p| p as i64).collect();
        let max = rows.iter().flatten().copied().max().unwrap_or(0);
        Ok(Self {
            ids: Tensor::from_data(TensorData::new(flat, [rows.len(), t]), device),
            max,
        })
    }

    /// Positions from a tensor, read back once to find the largest.
    ///
    /// # Errors
    /// A negative position, or a tensor that cannot be read.
    pub fn from_tensor(ids: Tensor<2, Int>) -> Result<Self> {
        let values = ids
            .to_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .map_err(|e| AttentionError::Unsupported(format!("cannot read positions: {e:?}")))?;
        if let Some(&p) = values.iter().find(|p| **p < 0) {
            return Err(AttentionError::NegativePosition {
                what: "positions",
                position: p,
            });
        }
        let max = values.iter().copied().max().unwrap_or(0) as usize;
        Ok(Self { ids, max })
    }

    /// The positions, `[B, T]`.
    pub fn tensor(&self) -> &Tensor<2, Int> {
        &self.ids
    }

    /// The largest position.
    pub fn max(&self) -> usize {
        self.max
    }

    /// `[B, T]`
    pub fn dims(&self) -> [usize; 2] {
        self.ids.dims()
    }
}

/// How RoPE pairs the features of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RopeLayout {
    /// Feature `i` pairs with `i + D/2` (HF Llama's `rotate_half`).
    HalfSplit,
    /// Feature `2i` pairs with `2i + 1` (the RoFormer paper, Meta's original Llama code).
    Interleaved,
}

/// How RoPE's frequencies are stretched for a context longer than the one trained on:
/// the types of `transformers`' `rope_type` (`modeling_rope_utils.py`), each computing the
/// frequencies and the factor on the cosines and sines that its function there computes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub enum RopeScaling {
    /// The frequencies as they are.
    #[default]
    None,
    /// Every frequency divided by `factor` (position interpolation, Chen et al., 2023;
    /// HF's `linear`).
    Linear {
        /// The stretch.
        factor: f64,
    },
    /// Dynamic NTK scaling (HF's `dynamic`): the base grows with the sequence once it
    /// passes `max_position_embeddings`, so within the model's positions (the only ones
    /// the zoo runs) the frequencies are the default ones, as in `transformers`.
    Dynamic {
        /// The stretch that the base's growth is computed from.
        factor: f64,
    },
    /// Llama 3.1's rule (HF's `llama3`): frequencies whose wavelength is longer than
    /// `original_max_position_embeddings / low_freq_factor` are divided by `factor`, those
    /// shorter than `original / high_freq_factor` kept, and those between blended
    /// smoothly from one to the other.
    Llama3 {
        /// The stretch of the low frequencies.
        factor: f64,
        /// Wavelengths beyond `original / low_freq_factor` are stretched in full.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context the model was first trained on.
        original_max_position_embeddings: usize,
    },
    /// YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large
    /// Language Models"; HF's `yarn`): pairs that turn fewer than `beta_slow` times over
    /// the original context are divided by `factor`, those that turn more than
    /// `beta_fast` times are kept, a linear ramp over the pair index blends between, and
    /// the cosines and sines are multiplied by `attention_factor`.
    Yarn {
        /// The stretch.
        factor: f64,
        /// The context the model was first trained on.
        original_max_position_embeddings: usize,
        /// Turns above which a pair is kept (HF's default 32).
        beta_fast: f64,
        /// Turns below which a pair is stretched in full (HF's default 1).
        beta_slow: f64,
        /// The ramp's ends rounded outwards to whole pairs (HF's default true).
        truncate: bool,
        /// The factor on the cosines and sines (by default `0.1 ln(factor) + 1`).
        attention_factor: f64,
    },
    /// LongRoPE (Ding et al., 2024; HF's `longrope`, Phi-3's 128k models): frequency `i`
    /// divided by `short_factor[i]` while the sequence is within
    /// `original_max_position_embeddings`, by `long_factor[i]` once it is longer, and the
    /// cosines and sines multiplied by `attention_factor`.
    LongRope {
        /// The divisors within the original context, one per rotated pair.
        short_factor: Vec<f64>,
        /// The divisors past it, one per rotated pair.
        long_factor: Vec<f64>,
        /// The length at which the long divisors take over (a sequence longer than it).
        original_max_position_embeddings: usize,
        /// The factor on the cosines and sines (by default
        /// `sqrt(1 + ln(factor) / ln(original))`).
        attention_factor: f64,
    },
}

impl RopeScaling {
    /// The frequencies (radians per position) of the `dim / 2` pairs of `dim` rotated
    /// features with base `theta`, within the original context (LongRoPE's short ones).
    pub fn frequencies(&self, theta: f64, dim: usize) -> Vec<f64> {
        let half = dim / 2;
        let plain: Vec<f64> = (0..half)
            .map(|i| theta.powf(-((2 * i) as f64) / dim as f64))
            .collect();
        match self {
            Self::None | Self::Dynamic { .. } => plain,
            Self::Linear { factor } => plain.iter().map(|f| f / factor).collect(),
            Self::Llama3 { .. } => plain.iter().map(|&f| self.llama3(f)).collect(),
            Self::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                truncate,
                ..
            } => {
                let d = dim as f64;
                let original = *original_max_position_embeddings as f64;
                // The pair index at which a frequency turns `turns` times over the
                // original context.
                let pair = |turns: f64| {
                    d * (original / (turns * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
                };
                let (mut low, mut high) = (pair(*beta_fast), pair(*beta_slow));
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                plain
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let kept = 1.0 - ramp;
                        f / factor * (1.0 - kept) + f * kept
                    })
                    .collect()
            }
            Self::LongRope { short_factor, .. } => divided(&plain, short_factor),
        }
    }

    /// LongRoPE's frequencies past the original context, and the length past which they
    /// apply; `None` for every other type.
    pub fn long_frequencies(&self, theta: f64, dim: usize) -> Option<(Vec<f64>, usize)> {
        match self {
            Self::LongRope {
                long_factor,
                original_max_position_embeddings,
                ..
            } => {
                let plain = Self::None.frequencies(theta, dim);
                Some((
                    divided(&plain, long_factor),
                    *original_max_position_embeddings,
                ))
            }
            _ => None,
        }
    }

    /// The factor on the cosines and sines: YaRN's and LongRoPE's, 1 for the others.
    pub fn attention_factor(&self) -> f64 {
        match self {
            Self::Yarn {
                attention_factor, ..
            }
            | Self::LongRope {
                attention_factor, ..
            } => *attention_factor,
            _ => 1.0,
        }
    }

    /// Llama 3.1's rule applied to one frequency.
    fn llama3(&self, inv_freq: f64) -> f64 {
        let Self::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } = *self
        else {
            return inv_freq;
        };
        let old = original_max_position_embeddings as f64;
        let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
        if wavelen < old / high_freq_factor {
            inv_freq
        } else if wavelen > old / low_freq_factor {
            inv_freq / factor
        } else {
            let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// A factor that is not a positive number, Llama 3's `high_freq_factor` not above
    /// its `low_freq_factor`, or a zero original context.
    pub fn validate(&self) -> Result<()> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ConfigError::range(name, "finite and > 0", v))
            }
        };
        let original = |n: usize| {
            if n == 0 {
                Err(ConfigError::zero(
                    "rope_scaling.original_max_position_embeddings",
                ))
            } else {
                Ok(())
            }
        };
        match self {
            Self::None => {}
            Self::Linear { factor } | Self::Dynamic { factor } => {
                positive("rope_scaling.factor", *factor)?;
            }
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                positive("rope_scaling.factor", *factor)?;
                positive("rope_scaling.low_freq_factor", *low_freq_factor)?;
                if high_freq_factor.partial_cmp(low_freq_factor)
                    != Some(std::cmp::Ordering::Greater)
                {
                    return Err(ConfigError::range(
                        "rope_scaling.high_freq_factor",
                        format!("> low_freq_factor {low_freq_factor}"),
                        high_freq_factor,
                    )
                    .into());
                }
                original(*original_max_position_embeddings)?;
            }
            Self::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                ..
            } => {
                positive("rope_scaling.factor", *factor)?;
                positive("rope_scaling.beta_fast", *beta_fast)?;
                positive("rope_scaling.beta_slow", *beta_slow)?;
                positive("rope_scaling.attention_factor", *attention_factor)?;
                original(*original_max_position_embeddings)?;
            }
            Self::LongRope {
                short_factor,
                long_factor,
                original_max_position_embeddings,
                attention_factor,
            } => {
                for (name, list) in [
                    ("rope_scaling.short_factor", short_factor),
                    ("rope_scaling.long_factor", long_factor),
                ] {
                    for &f in list {
                        positive(name, f)?;
                    }
                }
                positive("rope_scaling.attention_factor", *attention_factor)?;
                original(*original_max_position_embeddings)?;
            }
        }
        Ok(())
    }

    /// [`Self::validate`], and LongRoPE's lists against the `dim` rotated features:
    /// one divisor per pair.
    ///
    /// # Errors
    /// As [`Self::validate`], and a list of another length.
    pub fn validate_for(&self, dim: usize) -> Result<()> {
        self.validate()?;
        if let Self::LongRope {
            short_factor,
            long_factor,
            ..
        } = self
        {
            for (name, list) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if list.len() != dim / 2 {
                    return Err(ConfigError::conflict(format!(
                        "rope_scaling.{name} has {} numbers; {dim} rotated features need {}, \
                         one per pair",
                        list.len(),
                        dim / 2
                    ))
                    .into());
                }
            }
        }
        Ok(())
    }
}

/// `plain[i] / by[i]`.
fn divided(plain: &[f64], by: &[f64]) -> Vec<f64> {
    plain.iter().zip(by).map(|(f, d)| f / d).collect()
}

/// Rotary position embedding (Su et al., 2021, "RoFormer").
#[derive(Config, Debug)]
pub struct RotaryEncodingConfig {
    /// Features rotated in each head; must be even. The whole head, or its first
    /// features (partial rotary: the rest of a wider head passes through).
    pub head_dim: usize,
    /// Longest sequence (cache included).
    pub max_len: usize,
    /// Base of the frequencies. Default: 10000, as the paper and Llama 2.
    #[config(default = 10000.0)]
    pub theta: f64,
    /// Pairing of features. Default: half-split, as HF Llama checkpoints.
    #[config(default = "RopeLayout::HalfSplit")]
    pub layout: RopeLayout,
    /// Stretching of the frequencies for long contexts. Default: none.
    #[config(default = "RopeScaling::None")]
    pub scaling: RopeScaling,
}

/// The cosines and sines of the rotation angles, `[max_len, rotated / 2]` each.
#[derive(Module, Debug)]
pub struct RopeTable {
    cos: Tensor<2>,
    sin: Tensor<2>,
}

impl RopeTable {
    /// The tables of `freqs` over positions `0..max_len`, times `factor`.
    fn new(freqs: &[f64], max_len: usize, factor: f64, device: &Device) -> Self {
        let half = freqs.len();
        let mut cos = Vec::with_capacity(max_len * half);
        let mut sin = Vec::with_capacity(max_len * half);
        for pos in 0..max_len {
            for freq in freqs {
                let angle = pos as f64 * freq;
                cos.push((angle.cos() * factor) as f32);
                sin.push((angle.sin() * factor) as f32);
            }
        }
        Self {
            cos: Tensor::from_data(TensorData::new(cos, [max_len, half]), device),
            sin: Tensor::from_data(TensorData::new(sin, [max_len, half]), device),
        }
    }
}

/// Precomputed cosines and sines of the rotation angles.
#[derive(Module, Debug)]
pub struct RotaryEncoding {
    /// The tables within the original context (the only ones but for LongRoPE).
    table: RopeTable,
    /// LongRoPE's tables, used when a call reaches past `long_after` positions.
    long: Option<RopeTable>,
    long_after: usize,
    interleaved: bool,
}

impl RotaryEncodingConfig {
    /// Precomputes the tables: angle `pos · theta^(-2i/D)` for pair `i`, stretched by the
    /// scaling, the cosines and sines times its attention factor.
    ///
    /// # Errors
    /// An odd or zero head dimension, a zero `max_len`, or scaling settings that
    /// [`RopeScaling::validate_for`] refuses.
    pub fn init(&self, device: &Device) -> Result<RotaryEncoding> {
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(ConfigError::range(
                "head_dim",
                "even for rotary embeddings",
                self.head_dim,
            )
            .into());
        }
        if self.max_len == 0 {
            return Err(ConfigError::zero("max_len").into());
        }
        self.scaling.validate_for(self.head_dim)?;
        let factor = self.scaling.attention_factor();
        let freqs = self.scaling.frequencies(self.theta, self.head_dim);
        let (long, long_after) = match self.scaling.long_frequencies(self.theta, self.head_dim) {
            Some((freqs, after)) if after < self.max_len => (
                Some(RopeTable::new(&freqs, self.max_len, factor, device)),
                after,
            ),
            _ => (None, self.max_len),
        };
        Ok(RotaryEncoding {
            table: RopeTable::new(&freqs, self.max_len, factor, device),
            long,
            long_after,
            interleaved: self.layout == RopeLayout::Interleaved,
        })
    }
}

impl RotaryEncoding {
    /// The longest sequence the tables cover.
    pub fn max_len(&self) -> usize {
        self.table.cos.dims()[0]
    }

    /// The tables for a call whose furthest position is `last`: LongRoPE's long ones
    /// once the sequence is longer than the original context, as `transformers` picks
    /// them at each call.
    fn table_for(&self, last: usize) -> &RopeTable {
        match &self.long {
            Some(long) if last + 1 > self.long_after => long,
            _ => &self.table,
        }
    }

    /// Rotates `x` as if its first position were `offset` (for cached decoding).
    ///
    /// # Shapes
    /// - `x`: `[B, H, T, D]` -> `[B, H, T, D]`
    ///
    /// # Errors
    /// When `offset + T` passes `max_len`.
    pub fn forward(&self, x: Tensor<4>, offset: usize) -> Result<Tensor<4>> {
        let [_, _, t, _] = x.dims();
        let max_len = self.max_len();
        if offset + t > max_len {
            return Err(AttentionError::TooLong {
                what: "rotary encoding",
                position: offset + t - 1,
                max_len,
            });
        }
        let table = self.table_for((offset + t).saturating_sub(1));
        let half = table.cos.dims()[1];
        // [T, D/2] -> [1, 1, T, D/2]
        let cos = table
            .cos
            .clone()
            .slice([offset..offset + t, 0..half])
            .reshape([1, 1, t, half]);
        let sin = table
            .sin
            .clone()
            .slice([offset..offset + t, 0..half])
            .reshape([1, 1, t, half]);
        Ok(self.rotate(x, cos, sin))
    }

    /// Rotates `x` with a position per batch row and token (left-padded batches, where
    /// each row's first real token is position 0).
    ///
    /// # Shapes
    /// - `x`: `[B, H, T, D]`, `positions`: `[B, T]` -> `[B, H, T, D]`
    ///
    /// # Errors
    /// A position past `max_len`, or a positions tensor of the wrong shape.
    pub fn forward_at(&self, x: Tensor<4>, positions: &Positions) -> Result<Tensor<4>> {
        let [b, _, t, _] = x.dims();
        crate::error::check_shape("rope positions", &positions.dims(), &[Some(b), Some(t)])?;
        let max_len = self.max_len();
        if positions.max() >= max_len {
            return Err(AttentionError::TooLong {
                what: "rotary encoding",
                position: positions.max(),
                max_len,
            });
        }
        let table = self.table_for(positions.max());
        let half = table.cos.dims()[1];
        let flat = positions.tensor().clone().reshape([b * t]);
        // [B T, D/2] -> [B, 1, T, D/2]
        let cos = table
            .cos
            .clone()
            .select(0, flat.clone())
            .reshape([b, 1, t, half]);
        let sin = table.sin.clone().select(0, flat).reshape([b, 1, t, half]);
        Ok(self.rotate(x, cos, sin))
    }

    /// The features the tables cover: the whole head, or its first `rotary_dim` features
    /// (partial rotary, as GPT-NeoX and Phi-2), the rest passed through unrotated.
    pub fn rotary_dim(&self) -> usize {
        2 * self.table.cos.dims()[1]
    }

    fn rotate(&self, x: Tensor<4>, cos: Tensor<4>, sin: Tensor<4>) -> Tensor<4> {
        let [b, h, t, d] = x.dims();
        let rot = self.rotary_dim();
        if rot < d {
            let pass = x.clone().slice([0..b, 0..h, 0..t, rot..d]);
            let turned = self.rotate(x.slice([0..b, 0..h, 0..t, 0..rot]), cos, sin);
            return Tensor::cat(vec![turned, pass], 3);
        }
        let half = d / 2;
        if self.interleaved {
            // [B, H, T, D] -> [B, H, T, D/2, 2]: pairs (2i, 2i+1)
            let pairs = x.reshape([b, h, t, half, 2]);
            let x1 = pairs
                .clone()
                .slice([0..b, 0..h, 0..t, 0..half, 0..1])
                .reshape([b, h, t, half]);
            let x2 = pairs
                .slice([0..b, 0..h, 0..t, 0..half, 1..2])
                .reshape([b, h, t, half]);
            let r1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
            let r2 = x2 * cos + x1 * sin;
            // [B, H, T, D/2] x2 -> [B, H, T, D/2, 2] -> [B, H, T, D]
            Tensor::stack::<5>(vec![r1, r2], 4).reshape([b, h, t, d])
        } else {
            let x1 = x.clone().slice([0..b, 0..h, 0..t, 0..half]);
            let x2 = x.slice([0..b, 0..h, 0..t, half..d]);
            let r1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
            let r2 = x2 * cos + x1 * sin;
            Tensor::cat(vec![r1, r2], 3)
        }
    }
}

/// The ALiBi head slopes of Press et al. (2022): for `n` a power of two, the geometric
/// sequence starting at `2^(-8/n)` with that ratio; otherwise the slopes of the nearest
/// lower power of two, followed by every other slope of the next power of two.
pub fn alibi_slopes(n_heads: usize) -> Vec<f64> {
    fn pow2(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-8.0 / n as f64);
        (1..=n).map(|i| start.powi(i as i32)).collect()
    }
    if n_heads == 0 {
        return Vec::new();
    }
    if n_heads.is_power_of_two() {
        return pow2(n_heads);
    }
    let lower = 1 << (usize::BITS - 1 - n_heads.leading_zeros());
    let mut slopes = pow2(lower);
    slopes.extend(pow2(2 * lower).into_iter().step_by(2).take(n_heads - lower));
    slopes
}

/// The ALiBi bias `[1, H, Tq, Tk]`: `-slope_h · |i - j|` between query `i` (at absolute
/// position `offset + i`) and key `j`. Add it through [`crate::Mask::with_bias`]; with a
/// causal mask only the `j <= i` half is used.
pub fn alibi_bias(
    n_heads: usize,
    tq: usize,
    tk: usize,
    offset: usize,
    device: &Device,
) -> Tensor<4> {
    alibi_bias_at(n_heads, offset..offset + tq, 0..tk, device)
}

/// The ALiBi bias `[1, H, Tq, Tk]` for queries at absolute positions `queries` and keys
/// at `keys` (a sliding cache's keys start after the positions it dropped).
pub fn alibi_bias_at(
    n_heads: usize,
    queries: Range<usize>,
    keys: Range<usize>,
    device: &Device,
) -> Tensor<4> {
    let (q0, tq, k0, tk) = (queries.start, queries.len(), keys.start, keys.len());
    let slopes = alibi_slopes(n_heads);
    let mut values = Vec::with_capacity(n_heads * tq * tk);
    for s in &slopes {
        for i in q0..q0 + tq {
            for j in k0..k0 + tk {
                values.push((-s * i.abs_diff(j) as f64) as f32);
            }
        }
    }
    Tensor::from_data(TensorData::new(values, [1, n_heads, tq, tk]), device)
}

/// The bucket of a relative position `key - query` in T5's scheme (Raffel et al., 2020):
/// half the buckets hold exact small distances, the rest grow logarithmically up to
/// `max_distance`; bidirectional buckets split the range between the two signs.
///
/// # Errors
/// See [`check_bucket_settings`].
pub fn relative_position_bucket(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> Result<usize> {
    check_bucket_settings(num_buckets, max_distance, bidirectional)?;
    Ok(bucket_unchecked(
        relative_position,
        bidirectional,
        num_buckets,
        max_distance,
    ))
}

/// Checks T5 bucket settings: at least 4 buckets (two per sign when bidirectional, each
/// split between exact and logarithmic buckets), and a `max_distance` beyond the exact
/// range, or the logarithm's base is not above 1.
///
/// # Errors
/// [`ConfigError::OutOfRange`] naming the setting.
pub fn check_bucket_settings(
    num_buckets: usize,
    max_distance: usize,
    bidirectional: bool,
) -> Result<()> {
    if num_buckets < 4 {
        return Err(ConfigError::range("num_buckets", ">= 4", num_buckets.to_string()).into());
    }
    let max_exact = if bidirectional {
        num_buckets / 4
    } else {
        num_buckets / 2
    };
    if max_distance <= max_exact {
        return Err(ConfigError::range(
            "max_distance",
            "larger than the exact buckets (num_buckets / 2, or / 4 bidirectional)",
            max_distance.to_string(),
        )
        .into());
    }
    Ok(())
}

fn bucket_unchecked(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let mut num_buckets = num_buckets as i64;
    let mut bucket = 0i64;
    let n = if bidirectional {
        num_buckets /= 2;
        if relative_position > 0 {
            bucket += num_buckets;
        }
        relative_position.abs()
    } else {
        (-relative_position).max(0)
    };
    let max_exact = num_buckets / 2;
    if n < max_exact {
        bucket += n;
    } else {
        let large = max_exact
            + ((n as f64 / max_exact as f64).ln() / (max_distance as f64 / max_exact as f64).ln()
                * (num_buckets - max_exact) as f64) as i64;
        bucket += large.min(num_buckets - 1);
    }
    bucket as usize
}

/// T5's learned relative position bias: one scalar per head and bucket.
#[derive(Config, Debug)]
pub struct RelativePositionBiasConfig {
    /// Number of heads.
    pub n_heads: usize,
    /// Buckets. Default: 32, as T5.
    #[config(default = 32)]
    pub num_buckets: usize,
    /// Distance at which the largest bucket starts. Default: 128, as T5.
    #[config(default = 128)]
    pub max_distance: usize,
    /// Encoder (both directions) or decoder (past only). Default: true.
    #[config(default = true)]
    pub bidirectional: bool,
}

/// The bias table, named like HF T5's `relative_attention_bias`.
#[derive(Module, Debug)]
pub struct RelativePositionBias {
    /// `[num_buckets, n_heads]`
    pub relative_attention_bias: Embedding,
    num_buckets: usize,
    max_distance: usize,
    bidirectional: bool,
}

impl RelativePositionBiasConfig {
    /// Builds the table.
    ///
    /// # Errors
    /// When a size is zero.
    pub fn init(&self, device: &Device) -> Result<RelativePositionBias> {
        for (name, v) in [
            ("n_heads", self.n_heads),
            ("num_buckets", self.num_buckets),
            ("max_distance", self.max_distance),
        ] {
            if v == 0 {
                return Err(ConfigError::zero(name).into());
            }
        }
        check_bucket_settings(self.num_buckets, self.max_distance, self.bidirectional)?;
        Ok(RelativePositionBias {
            relative_attention_bias: EmbeddingConfig::new(self.num_buckets, self.n_heads)
                .init(device),
            num_buckets: self.num_buckets,
            max_distance: self.max_distance,
            bidirectional: self.bidirectional,
        })
    }
}

impl RelativePositionBias {
    /// The bias `[1, H, Tq, Tk]` for queries at positions `offset..offset + tq` and keys at
    /// `0..tk`.
    pub fn forward(&self, tq: usize, tk: usize, offset: usize, device: &Device) -> Tensor<4> {
        self.forward_offsets(offset..offset + tq, 0..tk, device)
    }

    /// The bias `[1, H, Tq, Tk]` for queries at positions `queries` and keys at `keys`.
    pub fn forward_offsets(
        &self,
        queries: Range<usize>,
        keys: Range<usize>,
        device: &Device,
    ) -> Tensor<4> {
        let (q0, tq, k0, tk) = (queries.start, queries.len(), keys.start, keys.len());
        let buckets: Vec<i64> = (0..tq)
            .flat_map(|i| (0..tk).map(move |j| (k0 + j) as i64 - (q0 + i) as i64))
            .map(|rel| {
                bucket_unchecked(rel, self.bidirectional, self.num_buckets, self.max_distance)
                    as i64
            })
            .collect();
        let idx = Tensor::<2, Int>::from_data(TensorData::new(buckets, [tq, tk]), device);
        // [Tq, Tk] -> [1, Tq * Tk] -> embed [1, Tq * Tk, H] -> [1, Tq, Tk, H] -> [1, H, Tq, Tk]
        let n_heads = self.relative_attention_bias.weight.dims()[1];
        self.relative_attention_bias
            .forward(idx.reshape([1, tq * tk]))
            .reshape([1, tq, tk, n_heads])
            .permute([0, 3, 1, 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    #[test]
    fn sinusoidal_values_equal_the_formula() {
        let d = test_device();
        let t = sinusoidal_table(50, 16, &d)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (pos, i) in [(0usize, 0usize), (1, 0), (7, 3), (49, 7)] {
            let angle = pos as f64 / 10000f64.powf(2.0 * i as f64 / 16.0);
            assert!((t[pos * 16 + 2 * i] as f64 - angle.sin()).abs() < 1e-6);
            assert!((t[pos * 16 + 2 * i + 1] as f64 - angle.cos()).abs() < 1e-6);
        }
        // Position 0 is [0, 1, 0, 1, ...].
        assert_eq!(&t[..4], &[0.0, 1.0, 0.0, 1.0]);
    }

    #[test]
    fn sinusoidal_rows_are_unique_and_nearby_rows_are_similar() {
        let d = test_device();
        let n = 100;
        let dm = 32;
        let t = sinusoidal_table(n, dm, &d)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let row = |p: usize| &t[p * dm..(p + 1) * dm];
        let cos = |a: &[f32], b: &[f32]| {
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
            let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
            dot / (na * nb)
        };
        for p in 0..n {
            for q in p + 1..n {
                let diff: f32 = row(p).iter().zip(row(q)).map(|(a, b)| (a - b).abs()).sum();
                assert!(diff > 1e-3, "rows {p} and {q} coincide");
            }
        }
        // The seed's check: position 10 is more like 11 than like 50.
        assert!(cos(row(10), row(11)) > cos(row(10), row(50)));
        assert!(cos(row(10), row(11)) > 0.9);
    }

    #[test]
    fn sinusoidal_rejects_too_long() {
        let d = test_device();
        let enc = SinusoidalEncodingConfig::new(4, 8).init(&d).unwrap();
        let x = Tensor::<3>::zeros([1, 5, 8], &d);
        assert_eq!(
            enc.forward(x, 0).unwrap_err(),
            AttentionError::TooLong {
                what: "sinusoidal encoding",
                position: 4,
                max_len: 4
            }
        );
    }

    fn dot_at(rope: &RotaryEncoding, q: &Tensor<4>, k: &Tensor<4>, pq: usize, pk: usize) -> f32 {
        let rq = rope.forward(q.clone(), pq).unwrap();
        let rk = rope.forward(k.clone(), pk).unwrap();
        (rq * rk).sum().into_scalar::<f32>()
    }

    #[test]
    fn rope_dot_depends_only_on_relative_offset() {
        let d = test_device();
        d.seed(3);
        for layout in [RopeLayout::HalfSplit, RopeLayout::Interleaved] {
            let rope = RotaryEncodingConfig::new(8, 64)
                .with_layout(layout)
                .init(&d)
                .unwrap();
            let q = Tensor::<4>::random([1, 1, 1, 8], Distribution::Normal(0.0, 1.0), &d);
            let k = Tensor::<4>::random([1, 1, 1, 8], Distribution::Normal(0.0, 1.0), &d);
            let a = dot_at(&rope, &q, &k, 5, 2);
            let b = dot_at(&rope, &q, &k, 40, 37);
            let c = dot_at(&rope, &q, &k, 5, 4);
            assert!((a - b).abs() < 1e-4, "{layout:?}: {a} vs {b}");
            assert!((a - c).abs() > 1e-3, "{layout:?}: offset must matter");
        }
    }

    #[test]
    fn rope_layouts_agree_up_to_a_feature_permutation() {
        let d = test_device();
        d.seed(4);
        let half = RotaryEncodingConfig::new(4, 16).init(&d).unwrap();
        let inter = RotaryEncodingConfig::new(4, 16)
            .with_layout(RopeLayout::Interleaved)
            .init(&d)
            .unwrap();
        let x = Tensor::<4>::random([1, 1, 3, 4], Distribution::Normal(0.0, 1.0), &d);
        // Interleaved order (a0, b0, a1, b1) is half-split order (a0, a1, b0, b1) permuted.
        let perm = Tensor::<1, Int>::from_ints([0, 2, 1, 3], &d);
        let via_half = half.forward(x.clone().select(3, perm.clone()), 2).unwrap();
        let via_inter = inter.forward(x, 2).unwrap().select(3, perm);
        assert!(max_abs_diff(&via_half, &via_inter) < 1e-6);
        // Position 0 is the identity.
        let y = Tensor::<4>::random([1, 1, 1, 4], Distribution::Normal(0.0, 1.0), &d);
        assert!(max_abs_diff(&half.forward(y.clone(), 0).unwrap(), &y) < 1e-7);
    }

    #[test]
    fn rope_per_row_positions_equal_offsets() {
        let d = test_device();
        let rope = RotaryEncodingConfig::new(4, 16).init(&d).unwrap();
        let x = Tensor::<4>::random([2, 1, 3, 4], Distribution::Normal(0.0, 1.0), &d);
        let pos = Positions::from_rows(&[vec![0, 1, 2], vec![5, 6, 7]], &d).unwrap();
        let at = rope.forward_at(x.clone(), &pos).unwrap();
        let row0 = rope
            .forward(x.clone().slice([0..1, 0..1, 0..3, 0..4]), 0)
            .unwrap();
        let row1 = rope.forward(x.slice([1..2, 0..1, 0..3, 0..4]), 5).unwrap();
        assert!(max_abs_diff(&at, &Tensor::cat(vec![row0, row1], 0)) < 1e-6);
    }

    #[test]
    fn rope_frequencies_are_theta_to_the_minus_2i_over_d() {
        // cos and sin of pos * theta^(-2i/8), computed by hand for two bases (10000 as in
        // the paper, 500000 as in Llama 3).
        let cases = [
            (10000.0, 3, 1, 0.955_336_5, 0.295_520_2),
            (10000.0, 10, 1, 0.540_302_3, 0.841_471),
            (10000.0, 7, 3, 0.999_975_5, 0.006_999_943),
            (500000.0, 3, 1, 0.993_642_8, 0.112_578_92),
            (500000.0, 10, 1, 0.930_118_7, 0.367_258_95),
            (500000.0, 7, 3, 0.999_999_9, 0.000_372_280_7),
        ];
        let d = test_device();
        for (theta, pos, i, cos, sin) in cases {
            let rope = RotaryEncodingConfig::new(8, 16)
                .with_theta(theta)
                .init(&d)
                .unwrap();
            let at = |t: &Tensor<2>| {
                t.clone()
                    .slice([pos..pos + 1, i..i + 1])
                    .into_scalar::<f32>()
            };
            assert!(
                (at(&rope.table.cos) - cos).abs() < 1e-6,
                "theta {theta} pos {pos} pair {i}"
            );
            assert!(
                (at(&rope.table.sin) - sin).abs() < 1e-6,
                "theta {theta} pos {pos} pair {i}"
            );
        }
    }

    #[test]
    fn positions_are_checked_on_the_host() {
        let d = test_device();
        let rope = RotaryEncodingConfig::new(4, 8).init(&d).unwrap();
        let x = Tensor::<4>::zeros([1, 1, 2, 4], &d);
        let far = Positions::from_rows(&[vec![3, 8]], &d).unwrap();
        assert_eq!(
            rope.forward_at(x.clone(), &far).unwrap_err().to_string(),
            "rotary encoding: position 8 is past the maximum length 8"
        );
        let negative = Tensor::<2, Int>::from_ints([[0, -2]], &d);
        assert_eq!(
            Positions::from_tensor(negative).unwrap_err().to_string(),
            "positions: position -2 is negative"
        );
        let ragged = Positions::from_rows(&[vec![0, 1], vec![0]], &d).unwrap_err();
        assert!(matches!(ragged, AttentionError::Shape { .. }), "{ragged}");
        let wrong_len = Positions::from_rows(&[vec![0, 1, 2]], &d).unwrap();
        assert!(matches!(
            rope.forward_at(x, &wrong_len),
            Err(AttentionError::Shape {
                what: "rope positions",
                ..
            })
        ));
    }

    #[test]
    fn rope_rejects_odd_dims_and_long_inputs() {
        let d = test_device();
        assert_eq!(
            RotaryEncodingConfig::new(7, 8).init(&d).unwrap_err(),
            ConfigError::range("head_dim", "even for rotary embeddings", 7).into()
        );
        let rope = RotaryEncodingConfig::new(4, 8).init(&d).unwrap();
        let x = Tensor::<4>::zeros([1, 1, 2, 4], &d);
        assert!(matches!(
            rope.forward(x, 7),
            Err(AttentionError::TooLong { position: 8, .. })
        ));
    }

    #[test]
    fn alibi_slopes_follow_the_paper() {
        let s8 = alibi_slopes(8);
        assert_eq!(s8.len(), 8);
        assert!((s8[0] - 0.5).abs() < 1e-12 && (s8[7] - 1.0 / 256.0).abs() < 1e-12);
        // 6 heads: the 4 slopes of n=4, then slopes 1 and 3 of n=8.
        let s6 = alibi_slopes(6);
        let expect = [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125];
        for (a, b) in s6.iter().zip(expect) {
            assert!((a - b).abs() < 1e-12, "{s6:?}");
        }
        let d = test_device();
        let bias = alibi_bias(2, 2, 3, 1, &d)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        // head 0 slope 2^-4 = 1/16; query at position 1 vs keys 0..3 -> distances 1, 0, 1
        assert_eq!(&bias[..3], &[-0.0625, 0.0, -0.0625]);
    }

    #[test]
    fn too_few_buckets_are_an_error() {
        for n in [0, 1, 2, 3] {
            assert_eq!(
                relative_position_bucket(-5, true, n, 128)
                    .unwrap_err()
                    .to_string(),
                format!("num_buckets must be >= 4, got {n}")
            );
        }
        let e = RelativePositionBiasConfig::new(2)
            .with_num_buckets(3)
            .init(&test_device())
            .unwrap_err();
        assert_eq!(e.to_string(), "num_buckets must be >= 4, got 3");
        let e = RelativePositionBiasConfig::new(2)
            .with_num_buckets(32)
            .with_max_distance(8)
            .init(&test_device())
            .unwrap_err();
        assert!(
            e.to_string().starts_with("max_distance must be larger"),
            "{e}"
        );
        // The smallest valid setting works in both directions.
        assert_eq!(relative_position_bucket(-3, true, 4, 2).unwrap(), 1);
        assert_eq!(relative_position_bucket(3, true, 4, 2).unwrap(), 3);
    }

    #[test]
    fn t5_buckets() {
        // Bidirectional, 32 buckets, max distance 128 (values as HF T5's bucket function).
        let b = |r| relative_position_bucket(r, true, 32, 128).unwrap();
        assert_eq!(b(0), 0);
        assert_eq!(b(-1), 1);
        assert_eq!(b(1), 17);
        assert_eq!(b(-7), 7);
        assert_eq!(b(-8), 8);
        assert_eq!(b(-20), 10); // 8 + floor(ln(2.5)/ln(16) * 8) = 8 + 2
        assert_eq!(b(-1000), 15);
        assert_eq!(b(1000), 31);
        // Causal: future keys share bucket 0.
        let c = |r| relative_position_bucket(r, false, 32, 128).unwrap();
        assert_eq!(c(5), 0);
        assert_eq!(c(-5), 5);
        assert_eq!(c(-1000), 31);
    }

    #[test]
    fn relative_bias_reads_the_table() {
        let d = test_device();
        let rpb = RelativePositionBiasConfig::new(2)
            .with_num_buckets(8)
            .with_max_distance(16)
            .init(&d)
            .unwrap();
        let table = rpb
            .relative_attention_bias
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let bias = rpb
            .forward(2, 3, 0, &d)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        // head 1, query 1, key 0: relative -1 -> bucket 1
        let bucket = relative_position_bucket(-1, true, 8, 16).unwrap();
        assert_eq!(bias[6 + 3], table[bucket * 2 + 1]);
    }

    /// LongRoPE rotates with its short divisors while a call stays within the original
    /// context and with its long ones once it reaches past it (whole sequences, cached
    /// steps and per-row positions alike), and scales the cosines and sines by its
    /// attention factor.
    #[test]
    fn longrope_switches_to_its_long_divisors_past_the_original_context() {
        let dev = test_device();
        let scaling = RopeScaling::LongRope {
            short_factor: vec![1.0, 2.0],
            long_factor: vec![3.0, 4.0],
            original_max_position_embeddings: 4,
            attention_factor: 1.5,
        };
        let rope = RotaryEncodingConfig::new(4, 8)
            .with_theta(100.0)
            .with_scaling(scaling)
            .init(&dev)
            .unwrap();
        // Feature 0 is 1 and its partner 0: the output's feature 0 is 1.5 cos(p f0),
        // f0 = 100^0 divided by the first divisor.
        let unit = |t: usize| {
            let mut v = vec![0f32; t * 4];
            for p in 0..t {
                v[p * 4] = 1.0;
            }
            Tensor::<4>::from_data(TensorData::new(v, [1, 1, t, 4]), &dev)
        };
        let first = |x: Tensor<4>| -> Vec<f32> {
            let t = x.dims()[2];
            zoo_device::testing::floats(x.slice([0..1, 0..1, 0..t, 0..1]))
        };
        let want = |t: usize, divisor: f64| -> Vec<f32> {
            (0..t)
                .map(|p| (1.5 * (p as f64 / divisor).cos()) as f32)
                .collect()
        };
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
        assert!(close(
            &first(rope.forward(unit(4), 0).unwrap()),
            &want(4, 1.0)
        ));
        assert!(close(
            &first(rope.forward(unit(6), 0).unwrap()),
            &want(6, 3.0)
        ));
        // A cached step at position 4: the sequence is 5 long.
        let step = first(rope.forward(unit(1), 4).unwrap());
        assert!((step[0] - (1.5 * (4.0f64 / 3.0).cos()) as f32).abs() < 1e-5);
        let at = Positions::from_rows(&[vec![0, 1, 2, 3, 4]], &dev).unwrap();
        assert!(close(
            &first(rope.forward_at(unit(5), &at).unwrap()),
            &want(5, 3.0)
        ));
        // Negative control: within the context the long divisors give other values.
        assert!(!close(&want(4, 1.0), &want(4, 3.0)));
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_stretches_low_ones_and_blends_between() {
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        // Wavelength 2π / f against 8192 / 4 = 2048 and 8192 / 1 = 8192.
        let high = 2.0 * std::f64::consts::PI / 1000.0;
        assert_eq!(s.llama3(high), high);
        let low = 2.0 * std::f64::consts::PI / 10000.0;
        assert!((s.llama3(low) - low / 8.0).abs() < 1e-15);
        // Wavelength 4096: smooth = (8192 / 4096 - 1) / (4 - 1) = 1/3.
        let mid = 2.0 * std::f64::consts::PI / 4096.0;
        let want = (2.0 / 3.0) * mid / 8.0 + (1.0 / 3.0) * mid;
        assert!((s.llama3(mid) - want).abs() < 1e-15);
        assert_eq!(
            RopeScaling::Linear { factor: 4.0 }.frequencies(1.0, 4),
            [0.25, 0.25]
        );
        let bad = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 4.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "rope_scaling.high_freq_factor must be > low_freq_factor 4, got 4"
        );
        let e = RopeScaling::Linear { factor: 0.0 }.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "rope_scaling.factor must be finite and > 0, got 0"
        );
    }
}
