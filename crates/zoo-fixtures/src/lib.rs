//! # zoo-fixtures
//!
//! What every family's tests read the committed `transformers` fixtures with, written
//! once: the fixture folder of a crate, a tensor as the fixture scripts store it
//! (`{"shape", "values"}`), a folder's `expected.json`, and fresh temporary folders.
//! A dev-dependency only: nothing in a library or a program uses it.
#![warn(missing_docs)]

pub mod hub_server;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// `tests/fixtures/NAME` of the crate whose manifest folder is `manifest_dir`
/// (`env!("CARGO_MANIFEST_DIR")`).
pub fn fixture(manifest_dir: &str, name: &str) -> PathBuf {
    Path::new(manifest_dir).join("tests/fixtures").join(name)
}

/// The causal-LM fixtures of `zoo-decoder/tests/fixtures`, one per architecture or
/// setting that `xtask/fixtures/decoder.py` writes, each with the same `expected.json`
/// layout (logits, greedy and beam tokens, tokenizer samples).
pub const DECODER_FIXTURES: [&str; 12] = [
    "gpt2-tiny",
    "llama-tiny",
    "mistral-tiny",
    "qwen2-tiny",
    "phi3-tiny",
    "gpt-neox-tiny",
    "llama3-tiny",
    "qwen3-tiny",
    "gemma-tiny",
    "gemma2-tiny",
    "gemma3-tiny",
    "mixtral-tiny",
];

/// A tensor as `xtask/fixtures/common.py` writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Output {
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub values: Vec<f32>,
}

/// `dir/expected.json`, read into the test's own type.
///
/// # Panics
/// A file that is missing or does not fit `T`, naming the file: a broken fixture.
pub fn expected<T: DeserializeOwned>(dir: &Path) -> T {
    let path = dir.join("expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fresh, empty folder `zoo-{family}-{pid}-{backend}-{name}` under the system's
/// temporary folder: test processes and backends that run at once never share one.
///
/// # Panics
/// A folder that cannot be made.
pub fn tempdir(family: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zoo-{family}-{}-{}-{name}",
        std::process::id(),
        zoo_device::test_backend()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A fresh folder (as [`tempdir`]) holding a copy of the fixture folder `dir`, with the
/// keys `edits` set in its `config.json` (dropout turned off, say).
///
/// # Panics
/// A file that cannot be copied, read or written.
pub fn edited_copy(
    family: &str,
    name: &str,
    dir: &Path,
    edits: &[(&str, serde_json::Value)],
) -> PathBuf {
    let out = tempdir(family, name);
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let from = entry.expect("a folder entry").path();
        if from.is_file() {
            std::fs::copy(&from, out.join(from.file_name().expect("a file name")))
                .unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        }
    }
    let path = out.join("config.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("a JSON config");
    for (key, value) in edits {
        config[*key] = value.clone();
    }
    std::fs::write(&path, config.to_string()).expect("config.json written");
    out
}

/// A fresh folder (as [`tempdir`]) holding `weights` as `model.safetensors` and `config`
/// as `config.json`: a checkpoint whose config may disagree with its weights.
///
/// # Panics
/// A file that cannot be copied or written.
pub fn checkpoint_folder(family: &str, name: &str, weights: &Path, config: &str) -> PathBuf {
    let dir = tempdir(family, name);
    std::fs::copy(weights, dir.join("model.safetensors"))
        .unwrap_or_else(|e| panic!("{}: {e}", weights.display()));
    std::fs::write(dir.join("config.json"), config).unwrap_or_else(|e| panic!("{e}"));
    dir
}

/// The all-MiniLM-L6-v2 folder `cargo xtask fetch minilm` unpacks: `$ZOO_MINILM_DIR`,
/// else `<cache>/models/all-MiniLM-L6-v2`.
///
/// # Panics
/// When it has no `model.safetensors`, with the command that fetches it.
pub fn minilm_dir() -> PathBuf {
    let dir = std::env::var_os("ZOO_MINILM_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| zoo_core::checkpoint::cache_dir().join("models/all-MiniLM-L6-v2"));
    assert!(
        dir.join("model.safetensors").is_file(),
        "all-MiniLM-L6-v2 is not in {}: run `cargo xtask fetch minilm` first",
        dir.display()
    );
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_fresh_and_expected_files_are_read() {
        let dir = tempdir("fixtures", "read");
        std::fs::write(dir.join("left-over"), "x").unwrap();
        let dir = tempdir("fixtures", "read");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::write(
            dir.join("expected.json"),
            r#"{"shape": [2], "values": [1.5, -2]}"#,
        )
        .unwrap();
        let out: Output = expected(&dir);
        assert_eq!((out.shape, out.values), (vec![2], vec![1.5, -2.0]));
        assert!(fixture("/a/crate", "x").ends_with("tests/fixtures/x"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
