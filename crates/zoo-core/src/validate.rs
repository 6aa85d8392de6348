//! Checks that every family's config runs on its fields, with one wording for the same
//! mistake: `hidden_size must be > 0, got 0`, `hidden_dropout_prob must be in [0, 1), got 1`.
//! Each returns the first problem as a message; the family wraps it in its error type.

/// The first of `fields` (name, value) that is zero.
///
/// # Errors
/// `"<name> must be > 0, got 0"`.
pub fn positive(fields: &[(&str, usize)]) -> Result<(), String> {
    match fields.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(format!("{name} must be > 0, got 0")),
        None => Ok(()),
    }
}

/// The first of `fields` (name, probability) outside `[0, 1)`, NaN included.
///
/// # Errors
/// `"<name> must be in [0, 1), got <p>"`.
pub fn probabilities(fields: &[(&str, f64)]) -> Result<(), String> {
    match fields.iter().find(|(_, p)| !(0.0..1.0).contains(p)) {
        Some((name, p)) => Err(format!("{name} must be in [0, 1), got {p}")),
        None => Ok(()),
    }
}

/// A norm's epsilon, which must be a positive number.
///
/// # Errors
/// `"<name> must be > 0, got <value>"`.
pub fn epsilon(name: &str, value: f64) -> Result<(), String> {
    if value.is_nan() || value <= 0.0 {
        Err(format!("{name} must be > 0, got {value}"))
    } else {
        Ok(())
    }
}

/// `width` split over `heads`.
///
/// # Errors
/// `"<width_name> <w> is not divisible by <heads_name> <h>"`.
pub fn divisible(width: (&str, usize), heads: (&str, usize)) -> Result<(), String> {
    if heads.1 == 0 || !width.1.is_multiple_of(heads.1) {
        Err(format!(
            "{} {} is not divisible by {} {}",
            width.0, width.1, heads.0, heads.1
        ))
    } else {
        Ok(())
    }
}

/// HF's `model_type`, when the config has one, must be `expected`.
///
/// # Errors
/// `"model_type \"<kind>\" is not a <family> model"`.
pub fn model_type(kind: Option<&str>, expected: &str, family: &str) -> Result<(), String> {
    match kind {
        Some(kind) if kind != expected => {
            Err(format!("model_type {kind:?} is not a {family} model"))
        }
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
) -> Result<(), String> {
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
            positive(&[("a", 1), ("b", 0), ("c", 0)]).unwrap_err(),
            "b must be > 0, got 0"
        );
        assert!(positive(&[("a", 1)]).is_ok());
        assert_eq!(
            probabilities(&[("p", 0.0), ("q", 1.0)]).unwrap_err(),
            "q must be in [0, 1), got 1"
        );
        assert!(probabilities(&[("p", f64::NAN)]).is_err());
        assert_eq!(
            epsilon("eps", -1e-5).unwrap_err(),
            "eps must be > 0, got -0.00001"
        );
        assert!(epsilon("eps", f64::NAN).is_err() && epsilon("eps", 1e-12).is_ok());
        assert_eq!(
            divisible(("hidden_size", 380), ("num_attention_heads", 12)).unwrap_err(),
            "hidden_size 380 is not divisible by num_attention_heads 12"
        );
        assert!(divisible(("w", 8), ("h", 0)).is_err());
        assert_eq!(
            model_type(Some("gpt2"), "bert", "BERT").unwrap_err(),
            "model_type \"gpt2\" is not a BERT model"
        );
        assert!(model_type(None, "bert", "BERT").is_ok());
    }
}
