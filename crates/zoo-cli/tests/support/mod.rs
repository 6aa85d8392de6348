//! What the command-line tests share: the fixtures' folders, and the built `zoo` binary
//! run on the backend under test.
#![allow(dead_code)] // each test file uses its own share

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use zoo_device::test_backend;

pub fn crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn fixture(family: &str, name: &str) -> PathBuf {
    crates().join(family).join("tests/fixtures").join(name)
}

pub fn gpt2() -> PathBuf {
    fixture("zoo-decoder", "gpt2-tiny")
}

pub struct Run {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `zoo ARGS --device <backend under test>`.
pub fn zoo(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_zoo"))
        .args(args)
        .args(["--device", test_backend().as_str()])
        .output()
        .expect("the zoo binary runs");
    Run::of(out)
}

impl Run {
    /// The run's status and output. On a machine without a display, the Vulkan loader
    /// under wgpu prints a line about `XDG_RUNTIME_DIR` to stderr itself; it is not the
    /// zoo's, and is left out.
    pub fn of(out: std::process::Output) -> Self {
        let stderr = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
            .map(|l| format!("{l}\n"))
            .collect();
        Self {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        }
    }
}

pub fn ok(args: &[&str]) -> Run {
    let run = zoo(args);
    assert_eq!(run.status, Some(0), "{args:?} failed:\n{}", run.stderr);
    run
}

/// Runs `zoo COMMAND --model DIR ARGS` and checks that it succeeded.
pub fn ok_on(command: &str, dir: &Path, args: &[&str]) -> Run {
    let mut all = vec![command, "--model", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    ok(&all)
}

/// A fresh folder for one test.
pub fn tempdir(name: &str) -> PathBuf {
    zoo_fixtures::tempdir("cli", name)
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
