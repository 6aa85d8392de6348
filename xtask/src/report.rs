//! Reading cargo's test output: the counts, the failures and crashes, one report per
//! backend.

use super::*;

/// Counts from the libtest lines `test result: ok. 12 passed; 0 failed; 1 ignored; ...`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TestCounts {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
}

impl TestCounts {
    pub(crate) fn add(&mut self, other: Self) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

/// Parses one libtest summary line; `None` for any other line. Doctest runs print the
/// same line, so they are counted too.
pub(crate) fn parse_test_result(line: &str) -> Option<TestCounts> {
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
pub(crate) const FAILURE_LINES: usize = 30;

/// Collects, from libtest's output, the names of failed tests and what each printed (the
/// `---- name stdout ----` sections), so the summary at the very end of a long run says
/// which tests failed and why, where a log cut to its tail still shows it.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    /// Each failed test's name with the first lines of its output.
    pub(crate) failures: Vec<(String, Vec<String>)>,
    /// The test whose output section is being read, by index into `failures`.
    pub(crate) reading: Option<usize>,
}

impl FailureLog {
    pub(crate) fn entry(&mut self, name: &str) -> usize {
        match self.failures.iter().position(|(known, _)| known == name) {
            Some(index) => index,
            None => {
                self.failures.push((name.to_string(), Vec::new()));
                self.failures.len() - 1
            }
        }
    }

    /// Reads one line of libtest's stdout.
    pub(crate) fn read(&mut self, line: &str) {
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
pub(crate) struct CrashLog {
    /// The target of the last `error: test failed, to rerun pass `...`` line.
    pub(crate) target: Option<String>,
    /// Each such process: the target, and cargo's reason.
    pub(crate) crashes: Vec<(String, Vec<String>)>,
}

impl CrashLog {
    pub(crate) fn read(&mut self, line: &str) {
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
pub(crate) struct BackendReport {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
    /// Test names from the skip log (`name<TAB>reason` lines).
    pub(crate) skipped_names: Vec<String>,
    /// Failed tests with the start of their output.
    pub(crate) failures: Vec<(String, Vec<String>)>,
}

/// Turns libtest counts, the cargo exit status and the skip log into a report. Tests
/// that skip themselves still pass in libtest's eyes, so they move from passed to skipped.
pub(crate) fn make_report(counts: TestCounts, cargo_ok: bool, skip_log: &str) -> BackendReport {
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
pub(crate) fn fresh_skip_log(backend: &str) -> Result<PathBuf> {
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
pub(crate) fn run_tests(
    cargo_env: &CargoEnv,
    backend: &str,
    args: &[&str],
) -> Result<BackendReport> {
    run_test_command(cargo_env.cargo(args), backend, true)
}

/// [`run_tests`] for any command that prints as `cargo test` does; `echo` passes its
/// output on to ours.
pub(crate) fn run_test_command(
    mut command: Command,
    backend: &str,
    echo: bool,
) -> Result<BackendReport> {
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
