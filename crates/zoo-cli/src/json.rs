//! The JSON files of `forward` and `embed`: HF's forward arguments in, nested float lists
//! out. Every check names the key and, for a bad value, where it is.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{CliError, Result};

pub use zoo_core::registry::{ForwardInput, INPUT_KEYS, IntMatrix, Pixels};

/// Reads a JSON file, naming it in every error.
pub fn read(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| CliError::File {
        path: path.to_path_buf(),
        message: format!("not valid JSON: {e}"),
    })
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| CliError::Input(format!("{what} must be a JSON object")))
}

/// Parses `forward`'s input.
///
/// # Errors
/// A value that is not an object, an unknown key, or a malformed argument.
pub fn forward_input(value: &Value) -> Result<ForwardInput> {
    let obj = object(value, "the input")?;
    let mut input = ForwardInput::default();
    for (key, v) in obj {
        match key.as_str() {
            "input_ids" => input.input_ids = Some(int_matrix("input_ids", v)?),
            "attention_mask" => {
                let m = int_matrix("attention_mask", v)?;
                if let Some((r, c, x)) = find(&m.rows, |x| x != 0 && x != 1) {
                    return Err(CliError::Input(format!(
                        "attention_mask[{r}][{c}] must be 0 or 1, got {x}"
                    )));
                }
                input.attention_mask = Some(m);
            }
            "token_type_ids" => input.token_type_ids = Some(int_matrix("token_type_ids", v)?),
            "decoder_input_ids" => {
                input.decoder_input_ids = Some(int_matrix("decoder_input_ids", v)?)
            }
            "pixel_values" => input.pixel_values = Some(pixels(v)?),
            "interpolate_pos_encoding" => {
                input.interpolate_pos_encoding = v.as_bool().ok_or_else(|| {
                    CliError::Input(format!(
                        "interpolate_pos_encoding must be true or false, got {v}"
                    ))
                })?;
            }
            other => {
                return Err(CliError::Input(format!(
                    "unknown input {other:?}: the inputs are {}",
                    INPUT_KEYS.join(", ")
                )));
            }
        }
    }
    for ids in [&input.input_ids, &input.decoder_input_ids]
        .into_iter()
        .flatten()
    {
        // The check every family makes, made before any model is loaded.
        ids.to_ids().map_err(|e| CliError::Input(e.to_string()))?;
    }
    Ok(input)
}

fn find(rows: &[Vec<i64>], bad: impl Fn(i64) -> bool) -> Option<(usize, usize, i64)> {
    rows.iter().enumerate().find_map(|(r, row)| {
        row.iter()
            .enumerate()
            .find(|(_, x)| bad(**x))
            .map(|(c, x)| (r, c, *x))
    })
}

/// `[batch][length]` integers: not empty, not ragged.
fn int_matrix(name: &'static str, v: &Value) -> Result<IntMatrix> {
    let bad = |m: String| CliError::Input(format!("{name}{m}"));
    let rows = v
        .as_array()
        .ok_or_else(|| bad(" must be a list of lists of integers, [batch][length]".into()))?;
    if rows.is_empty() {
        return Err(bad(": the batch is empty".into()));
    }
    let mut out = Vec::with_capacity(rows.len());
    for (r, row) in rows.iter().enumerate() {
        let row = row
            .as_array()
            .ok_or_else(|| bad(format!("[{r}] must be a list of integers, got {row}")))?;
        let ints = row
            .iter()
            .enumerate()
            .map(|(c, x)| {
                x.as_i64()
                    .ok_or_else(|| bad(format!("[{r}][{c}] must be an integer, got {x}")))
            })
            .collect::<Result<Vec<_>>>()?;
        out.push(ints);
    }
    let len = out[0].len();
    if len == 0 {
        return Err(bad(": row 0 is empty".into()));
    }
    if let Some((r, row)) = out.iter().enumerate().find(|(_, row)| row.len() != len) {
        return Err(bad(format!(
            ": ragged rows: row {r} has {} values, row 0 has {len}",
            row.len()
        )));
    }
    Ok(IntMatrix { name, rows: out })
}

/// `[batch][channels][height][width]` numbers, not ragged at any level.
fn pixels(v: &Value) -> Result<Pixels> {
    fn walk(
        v: &Value,
        depth: usize,
        at: &mut Vec<usize>,
        shape: &mut [usize; 4],
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let here = || at.iter().map(|i| format!("[{i}]")).collect::<String>();
        if depth == 4 {
            let x = v.as_f64().ok_or_else(|| {
                CliError::Input(format!("pixel_values{} must be a number, got {v}", here()))
            })?;
            out.push(x as f32);
            return Ok(());
        }
        let list = v.as_array().ok_or_else(|| {
            CliError::Input(format!(
                "pixel_values{} must be a list: pixel_values is [batch][channels][height][width]",
                here()
            ))
        })?;
        if list.is_empty() {
            return Err(CliError::Input(format!("pixel_values{} is empty", here())));
        }
        if shape[depth] == 0 {
            shape[depth] = list.len();
        } else if shape[depth] != list.len() {
            return Err(CliError::Input(format!(
                "pixel_values{}: ragged: {} values where the first has {}",
                here(),
                list.len(),
                shape[depth]
            )));
        }
        for (i, item) in list.iter().enumerate() {
            at.push(i);
            walk(item, depth + 1, at, shape, out)?;
            at.pop();
        }
        Ok(())
    }
    let mut shape = [0; 4];
    let mut values = Vec::new();
    walk(v, 0, &mut Vec::new(), &mut shape, &mut values)?;
    Ok(Pixels { shape, values })
}

/// The sentences of `embed`'s input, `{"sentences": ["...", ...]}`.
///
/// # Errors
/// Another shape, or no sentences.
pub fn sentences(value: &Value) -> Result<Vec<String>> {
    let obj = object(value, "the input")?;
    if let Some(other) = obj.keys().find(|k| *k != "sentences") {
        return Err(CliError::Input(format!(
            "unknown input {other:?}: embed reads {{\"sentences\": [...]}}"
        )));
    }
    let list = obj
        .get("sentences")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            CliError::Input("the input needs \"sentences\", a list of strings".into())
        })?;
    if list.is_empty() {
        return Err(CliError::Input("sentences: the batch is empty".into()));
    }
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(String::from)
                .ok_or_else(|| CliError::Input(format!("sentences[{i}] must be a string, got {s}")))
        })
        .collect()
}

/// A float as JSON, the shortest text that reads back as the same `f32`.
fn number(x: f32, name: &str, index: usize) -> Result<String> {
    if !x.is_finite() {
        return Err(CliError::Input(format!(
            "{name} has a non-finite value, {x}, at flat index {index}"
        )));
    }
    let a = x.abs();
    Ok(if a != 0.0 && !(1e-5..1e16).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    })
}

fn nested(
    out: &mut String,
    values: &[f32],
    shape: &[usize],
    name: &str,
    offset: usize,
) -> Result<()> {
    out.push('[');
    if shape.len() == 1 {
        for (i, x) in values.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&number(*x, name, offset + i)?);
        }
    } else {
        let step = values.len() / shape[0].max(1);
        for i in 0..shape[0] {
            if i > 0 {
                out.push(',');
            }
            nested(
                out,
                &values[i * step..(i + 1) * step],
                &shape[1..],
                name,
                offset + i * step,
            )?;
        }
    }
    out.push(']');
    Ok(())
}

/// A named output tensor: its values and shape.
pub use zoo_core::registry::NamedOutput as Named;

/// Writes `{"name": nested list, ...}` to `path`: beside it first, then renamed, so the
/// file appears whole or not at all.
///
/// # Errors
/// A non-finite value, or a file that cannot be written.
pub fn write_outputs(path: &Path, outputs: &[Named]) -> Result<()> {
    let mut text = String::from("{");
    for (i, (name, values, shape)) in outputs.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!("\n  {name:?}: "));
        nested(&mut text, values, shape, name, 0)?;
    }
    text.push_str("\n}\n");
    write_atomic(path, &text)
}

/// Writes `text` to `path` through a temporary file beside it.
///
/// # Errors
/// A file that cannot be written.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    // Named by the file the user asked for, not its temporary name.
    zoo_core::durable::write_atomic(path, text.as_bytes()).map_err(|e| CliError::File {
        path: path.to_path_buf(),
        message: e.source.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_parse_and_bad_ones_are_named() {
        let ok = forward_input(
            &json!({"input_ids": [[1, 2], [3, 4]], "attention_mask": [[1, 1], [0, 1]]}),
        )
        .unwrap();
        assert_eq!(ok.input_ids.unwrap().shape(), [2, 2]);
        assert_eq!(ok.attention_mask.unwrap().flat(), vec![1, 1, 0, 1]);
        let p = forward_input(&json!({"pixel_values": [[[[0.5, 1], [2, 3]]]]})).unwrap();
        assert_eq!(
            p.pixel_values.unwrap(),
            Pixels {
                shape: [1, 1, 2, 2],
                values: vec![0.5, 1.0, 2.0, 3.0]
            }
        );
        for (input, want) in [
            (json!([1, 2]), "the input must be a JSON object"),
            (json!({"input_ids": []}), "input_ids: the batch is empty"),
            (json!({"input_ids": [[]]}), "input_ids: row 0 is empty"),
            (
                json!({"input_ids": [[1, 2], [3]]}),
                "input_ids: ragged rows: row 1 has 1 values, row 0 has 2",
            ),
            (
                json!({"input_ids": [[1, 2.5]]}),
                "input_ids[0][1] must be an integer, got 2.5",
            ),
            (
                json!({"input_ids": [[1, -2]]}),
                "input_ids[0][1] is a negative token id, -2",
            ),
            (
                json!({"attention_mask": [[1, 2]]}),
                "attention_mask[0][1] must be 0 or 1, got 2",
            ),
            (
                json!({"pixel_values": [[[[1, 2], [3]]]]}),
                "pixel_values[0][0][1]: ragged: 1 values where the first has 2",
            ),
            (
                json!({"pixel_values": [[1]]}),
                "pixel_values[0][0] must be a list",
            ),
            (json!({"input_idz": [[1]]}), "unknown input \"input_idz\""),
        ] {
            let e = forward_input(&input).unwrap_err().to_string();
            assert!(e.starts_with(want), "{input}: {e}");
        }
    }

    #[test]
    fn outputs_round_trip_through_json() {
        let dir = std::env::temp_dir().join(format!("zoo-cli-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.json");
        let values = vec![0.1f32, -1.5e-7, 3.0e20, 1.0 / 3.0, 0.0, 65504.0];
        write_outputs(&path, &[("logits", values.clone(), vec![1, 2, 3])]).unwrap();
        let back = read(&path).unwrap();
        let flat: Vec<f32> = back["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().clone())
            .flat_map(|r| r.as_array().unwrap().clone())
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(flat, values);
        // A non-finite value is an error, and nothing is written.
        let e = write_outputs(
            &dir.join("bad.json"),
            &[("logits", vec![1.0, f32::NAN], vec![2])],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "logits has a non-finite value, NaN, at flat index 1"
        );
        assert!(!dir.join("bad.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
