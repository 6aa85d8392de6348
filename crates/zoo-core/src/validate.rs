//! The one configuration error of the zoo, and the checks every family's config runs on
//! its fields, with one wording for the same mistake: `hidden_size must be > 0, got 0`,
//! `hidden_dropout_prob must be in [0, 1), got 1`. Every `validate()` in the workspace
//! (the attention core's layers, each family's config, the training config) returns a
//! [`ConfigError`]; each family wraps it in its own error, which says which config it was.

use std::fmt::Display;

/// A configuration value that cannot build a model, named, with the value given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A size or count that must be positive was zero.
    #[error("{name} must be > 0, got 0")]
    Zero {
        /// Which setting.
        name: String,
    },
    /// A value outside the range where it means something.
    #[error("{name} must be {bound}, got {value}")]
    OutOfRange {
        /// Which setting.
        name: String,
        /// The range, in words (`in [0, 1)`, `>= 4`, `even`).
        bound: String,
        /// The value given.
        value: String,
    },
    /// A width that does not split into equal parts.
    #[error("{width} {width_value} is not divisible by {parts} {parts_value}")]
    NotDivisible {
        /// The setting split.
        width: String,
        /// Its value.
        width_value: usize,
        /// The setting it is split by.
        parts: String,
        /// Its value.
        parts_value: usize,
    },
    /// A value the zoo does not implement.
    #[error("{name} {value} is not supported ({supported})")]
    Unsupported {
        /// Which setting.
        name: String,
        /// The value given, as the config spells it.
        value: String,
        /// What is supported, in words.
        supported: String,
    },
    /// HF's `model_type` names another family.
    #[error("model_type {kind:?} is not a {family} model")]
    ModelType {
        /// The `model_type` found.
        kind: String,
        /// The family that was asked for.
        family: String,
    },
    /// Settings that cannot be used together.
    #[error("{0}")]
    Conflict(String),
    /// A config file that does not parse, or a field of the wrong type.
    #[error("{0}")]
    Malformed(String),
}

impl ConfigError {
    /// `"<name> must be > 0, got 0"`.
    pub fn zero(name: impl Into<String>) -> Self {
        Self::Zero { name: name.into() }
    }

    /// `"<name> must be <bound>, got <value>"`.
    pub fn range(name: impl Into<String>, bound: impl Into<String>, value: impl Display) -> Self {
        Self::OutOfRange {
            name: name.into(),
            bound: bound.into(),
            value: value.to_string(),
        }
    }

    /// A dropout-like probability outside `[0, 1)`.
    pub fn probability(name: impl Into<String>, value: f64) -> Self {
        Self::range(name, "in [0, 1)", value)
    }

    /// `"<width> <w> is not divisible by <parts> <p>"`.
    pub fn not_divisible(width: (&str, usize), parts: (&str, usize)) -> Self {
        Self::NotDivisible {
            width: width.0.into(),
            width_value: width.1,
            parts: parts.0.into(),
            parts_value: parts.1,
        }
    }

    /// `"<name> <value> is not supported (<supported>)"`.
    pub fn unsupported(
        name: impl Into<String>,
        value: impl Display,
        supported: impl Into<String>,
    ) -> Self {
        Self::Unsupported {
            name: name.into(),
            value: value.to_string(),
            supported: supported.into(),
        }
    }

    /// Settings that cannot be used together, in a sentence.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict(message.into())
    }

    /// A config that does not parse.
    pub fn malformed(message: impl Display) -> Self {
        Self::Malformed(message.to_string())
    }
}

/// Shorthand for the checks' results.
pub type Result<T = (), E = ConfigError> = std::result::Result<T, E>;

/// The first of `fields` (name, value) that is zero.
///
/// # Errors
/// `"<name> must be > 0, got 0"`.
pub fn positive(fields: &[(&str, usize)]) -> Result {
    match fields.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(ConfigError::zero(*name)),
        None => Ok(()),
    }
}

/// The first of `fields` (name, probability) outside `[0, 1)`, NaN included.
///
/// # Errors
/// `"<name> must be in [0, 1), got <p>"`.
pub fn probabilities(fields: &[(&str, f64)]) -> Result {
    match fields.iter().find(|(_, p)| !(0.0..1.0).contains(p)) {
        Some((name, p)) => Err(ConfigError::probability(*name, *p)),
        None => Ok(()),
    }
}

/// A norm's epsilon, which must be a positive number.
///
/// # Errors
/// `"<name> must be > 0, got <value>"`.
pub fn epsilon(name: &str, value: f64) -> Result {
    positive_number(name, value)
}

/// A float setting (an epsilon, RoPE's base) that must be a positive, finite number.
///
/// # Errors
/// `"<name> must be > 0, got <value>"`, for zero, a negative number, NaN or infinity.
pub fn positive_number(name: &str, value: f64) -> Result {
    if value > 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(ConfigError::range(name, "> 0", value))
    }
}

/// `width` split over `heads`.
///
/// # Errors
/// `"<width_name> <w> is not divisible by <heads_name> <h>"`.
pub fn divisible(width: (&str, usize), heads: (&str, usize)) -> Result {
    if heads.1 == 0 || !width.1.is_multiple_of(heads.1) {
        Err(ConfigError::not_divisible(width, heads))
    } else {
        Ok(())
    }
}

/// HF's `model_type`, when the config has one, must be `expected`.
///
/// # Errors
/// `"model_type \"<kind>\" is not a <family> model"`.
pub fn model_type(kind: Option<&str>, expected: &str, family: &str) -> Result {
    match kind {
        Some(kind) if kind != expected => Err(ConfigError::ModelType {
            kind: kind.into(),
            family: family.into(),
        }),
        _ => Ok(()),
    }
}

/// What BERT-style configs (BERT, RoBERTa, ViT) check alike: the LayerNorm epsilon, the
/// hidden and attention dropouts, and the class names of `id2label` when present.
///
/// # Errors
/// The first value out of range, named.
pub fn bert_style(
    layer_norm_eps: f64,
    hidden_dropout_prob: f64,
    attention_probs_dropout_prob: f64,
    id2label: Option<&std::collections::BTreeMap<String, String>>,
) -> Result {
    epsilon("layer_norm_eps", layer_norm_eps)?;
    probabilities(&[
        ("hidden_dropout_prob", hidden_dropout_prob),
        ("attention_probs_dropout_prob", attention_probs_dropout_prob),
    ])?;
    if let Some(labels) = id2label {
        crate::checkpoint::class_names(labels)?;
    }
    Ok(())
}

/// The bytes of memory a model may take on this machine: its memory and swap, as
/// Linux's `/proc/meminfo` gives them (`MemTotal` + `SwapTotal`); unknown elsewhere.
pub fn memory_limit() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)) * 1024)
}

/// Checks, before anything is allocated, that `values` numbers of `bytes_each` bytes
/// (`what`: the weights of a model, a cache) can fit in this machine's memory and swap
/// ([`memory_limit`]). The count is a float, so a product of config values can be
/// formed without overflowing; a refused size never reaches an allocator, whose
/// failure would abort the process.
///
/// # Errors
/// A size that exceeds the memory, or is not a finite number, with both in GiB.
pub fn fits_in_memory(what: &str, values: f64, bytes_each: f64) -> Result {
    let need = values * bytes_each;
    let gib = |b: f64| b / f64::from(1u32 << 30);
    match memory_limit() {
        _ if !need.is_finite() => Err(ConfigError::conflict(format!(
            "{what} would need more memory than can be counted"
        ))),
        Some(limit) if need > limit as f64 => Err(ConfigError::conflict(format!(
            "{what} would need {:.1} GiB, more than the {:.1} GiB of memory and swap of \
             this machine",
            gib(need),
            gib(limit as f64)
        ))),
        _ => Ok(()),
    }
}

/// [`fits_in_memory`] for a transformer of `layers` layers of width `width` over
/// `rows` rows of that width (the vocabulary, position and token-type tables, a patch
/// projection): a lower bound of its parameters, the `rows × width` tables and, per
/// layer, the query and output projections between `width` and the heads' total width
/// `attn_width`, and two feed-forward matrices of `d_ff`, at the fewest bytes each that a
/// model loads in: two for the tables (half precision), half a byte for the layers'
/// weights (4-bit values, `--quantize q4`). A lower bound, so that no model that fits in
/// some float type or quantization is refused here; the loader checks the exact bytes in
/// the chosen type and quantization ([`model_fits`]) before it allocates. Formed in
/// floats, so that no product of config values overflows.
///
/// # Errors
/// As [`fits_in_memory`].
pub fn transformer_fits(
    what: &str,
    rows: usize,
    width: usize,
    layers: usize,
    d_ff: usize,
    attn_width: usize,
) -> Result {
    let (r, d, l, f) = (rows as f64, width as f64, layers as f64, d_ff as f64);
    let a = attn_width as f64;
    let (tables, layers) = (r * d, l * (2.0 * d * a + 2.0 * d * f));
    fits_in_memory(
        &format!(
            "{what}, at least {} parameters, the tables in half precision and the layers in \
             4 bits,",
            count(tables + layers)
        ),
        2.0 * tables + 0.5 * layers,
        1.0,
    )
}

/// [`fits_in_memory`] for a built model's `params` parameters of `bytes_each` bytes (its
/// float type, named `float`), checked before its weights are allocated: a model is
/// built without initialising its parameters, so its count is known first.
///
/// # Errors
/// As [`fits_in_memory`], naming the count and the type.
pub fn model_fits(params: usize, float: &str, bytes_each: usize) -> Result {
    fits_in_memory(
        &format!(
            "the model's {} parameters in {float}",
            crate::thousands(params)
        ),
        params as f64,
        bytes_each as f64,
    )
}

/// A count formed in floats, with thousands separators while it is an integer that
/// `usize` holds.
fn count(n: f64) -> String {
    if n.is_finite() && n >= 0.0 && n < usize::MAX as f64 {
        crate::thousands(n as usize)
    } else {
        format!("{n:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_names_the_first_bad_value() {
        assert_eq!(
            positive(&[("a", 1), ("b", 0), ("c", 0)])
                .unwrap_err()
                .to_string(),
            "b must be > 0, got 0"
        );
        assert!(positive(&[("a", 1)]).is_ok());
        assert_eq!(
            probabilities(&[("p", 0.0), ("q", 1.0)])
                .unwrap_err()
                .to_string(),
            "q must be in [0, 1), got 1"
        );
        assert!(probabilities(&[("p", f64::NAN)]).is_err());
        assert_eq!(
            epsilon("eps", -1e-5).unwrap_err().to_string(),
            "eps must be > 0, got -0.00001"
        );
        assert!(epsilon("eps", f64::NAN).is_err() && epsilon("eps", 1e-12).is_ok());
        if let Some(limit) = memory_limit() {
            assert!(limit > 1 << 20, "{limit} bytes");
            assert!(fits_in_memory("a table", 1e3, 4.0).is_ok());
            let e = fits_in_memory("the weights", 1e12 * 64.0, 4.0).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("the weights would need 238418.6 GiB, more than the "),
                "{e}"
            );
        }
        assert!(fits_in_memory("x", f64::INFINITY, 4.0).is_err());
        if memory_limit().is_some() {
            let e = model_fits(usize::MAX / 8, "f32", 4)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(
                    "the model's 2,305,843,009,213,693,951 parameters in f32 would need \
                     8589934592.0 GiB, more than the "
                ),
                "{e}"
            );
            assert!(model_fits(1_000, "bf16", 2).is_ok());
        }
        let e = transformer_fits("w", usize::MAX, usize::MAX, 1, 1, 1).unwrap_err();
        assert!(e.to_string().starts_with("w, at least "), "{e}");
        assert_eq!(
            divisible(("hidden_size", 380), ("num_attention_heads", 12))
                .unwrap_err()
                .to_string(),
            "hidden_size 380 is not divisible by num_attention_heads 12"
        );
        assert!(divisible(("w", 8), ("h", 0)).is_err());
        assert_eq!(
            model_type(Some("gpt2"), "bert", "BERT")
                .unwrap_err()
                .to_string(),
            "model_type \"gpt2\" is not a BERT model"
        );
        assert!(model_type(None, "bert", "BERT").is_ok());
    }
}
