//! What the zoo-hub tests share: the fixtures' folders and their inputs.
#![allow(dead_code)] // each test crate uses a part

use std::path::{Path, PathBuf};

use serde_json::Value;
use zoo_core::registry::{ForwardInput, IntMatrix, Pixels};

pub fn dir(family: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(family)
        .join("tests/fixtures")
        .join(name)
}

/// The first row of a list of id rows, as a one-row matrix.
fn first_row(name: &'static str, v: &Value) -> Option<IntMatrix> {
    let rows: Vec<Vec<i64>> = serde_json::from_value(v.clone()).ok()?;
    Some(IntMatrix {
        name,
        rows: vec![rows.first()?.clone()],
    })
}

/// The fixture's inputs: its first row of ids (and mask, token types, decoder ids), or
/// its first image.
pub fn input(e: &Value) -> ForwardInput {
    let ids = if e["input_ids"].is_array() {
        &e["input_ids"]
    } else {
        &e["sources"]
    };
    let pixel_values = e["pixel_values"]["shape"].as_array().map(|shape| {
        let shape: Vec<usize> = shape.iter().map(|d| d.as_u64().unwrap() as usize).collect();
        let one: usize = shape[1..].iter().product();
        let values: Vec<f32> = e["pixel_values"]["values"].as_array().unwrap()[..one]
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        Pixels {
            shape: [1, shape[1], shape[2], shape[3]],
            values,
        }
    });
    ForwardInput {
        input_ids: first_row("input_ids", ids),
        attention_mask: first_row("attention_mask", &e["attention_mask"]),
        token_type_ids: first_row("token_type_ids", &e["token_type_ids"]),
        decoder_input_ids: first_row("decoder_input_ids", &e["decoder_input_ids"]),
        pixel_values,
        ..ForwardInput::default()
    }
}

/// The largest difference between two outputs over the first's largest magnitude.
///
/// # Panics
/// When the difference is not finite.
pub mod half;

pub fn relative_error(want: &[f32], got: &[f32]) -> f32 {
    assert_eq!(want.len(), got.len(), "output lengths");
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = want
        .iter()
        .zip(got)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff.is_finite(), "a non-finite difference");
    diff / scale
}
