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
    if value.is_nan() || value <= 0.0 {
        Err(ConfigError::range(name, "> 0", value))
    } else {
        Ok(())
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
