//! `cargo xtask soak`: the learner under SIGKILL, many times over.
//!
//! It trains `zoo-train-toy` once without interruption, then trains it again and again in
//! other folders, killing each process at random moments and resuming it, until the
//! asked number of kills is reached and the last run has finished. Every other kill waits
//! for a checkpoint file to be in the middle of its write (its `.partial` file present)
//! and kills then. After every kill each checkpoint left under its final name must match
//! the checksum beside it, and the resumed process must start from the last complete one.
//! Each run that reaches its end must hold the same final weights, byte for byte, as the
//! uninterrupted run, and the same `metrics.csv`. Not part of CI: it takes minutes.

use super::*;

/// The toy's training: 80 rounds of 25 steps, a checkpoint after each (a few seconds).
const TOY_ARGS: [&str; 6] = ["--steps", "2000", "--eval-every", "25", "--items", "2000"];
const ROUNDS: usize = 80;

/// Settings of a soak.
struct Soak {
    kills: usize,
    seed: u64,
    device: String,
}

impl Soak {
    fn parse(args: &[String]) -> Result<Self> {
        let mut soak = Soak {
            kills: 50,
            seed: 1,
            device: "flex".to_string(),
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| format!("soak: {flag} needs a value"))
            };
            match flag.as_str() {
                "--kills" => {
                    let v = value()?;
                    soak.kills =
                        v.parse().ok().filter(|k| *k > 0).ok_or_else(|| {
                            format!("soak: --kills must be a number > 0, got {v}")
                        })?;
                }
                "--seed" => {
                    let v = value()?;
                    soak.seed = v
                        .parse()
                        .map_err(|_| format!("soak: --seed must be a number, got {v}"))?;
                }
                "--device" => soak.device = value()?.clone(),
                other => return Err(format!("soak: unknown option {other}")),
            }
        }
        Ok(soak)
    }
}

/// A small deterministic generator (SplitMix64) for the kill times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A duration between `lo` and `hi` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo + 1))
    }
}

/// The CRC-32 (IEEE) of `bytes`, as the learner writes it beside each checkpoint.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The rounds whose model checkpoint exists under its final name.
fn rounds(dir: &Path) -> Vec<usize> {
    let mut out: Vec<usize> = fs::read_dir(dir.join("checkpoint"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_prefix("model-")?.strip_suffix(".bpk")?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

/// Checks every checkpoint file under its final name against its checksum. Returns the
/// last round whose three files are all there and sound.
fn verify(dir: &Path) -> Result<Option<usize>> {
    let ckpt = dir.join("checkpoint");
    let mut last = None;
    for round in rounds(dir) {
        let mut whole = true;
        for part in ["model", "optim", "scheduler"] {
            let path = ckpt.join(format!("{part}-{round}.bpk"));
            if !path.exists() {
                whole = false;
                continue;
            }
            let sum = ckpt.join(format!("{part}-{round}.bpk.crc32"));
            let want = fs::read_to_string(&sum)
                .map_err(|e| format!("{} has no checksum: {e}", path.display()))?;
            let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let got = format!("{:08x}", crc32(&bytes));
            if got != want.trim() {
                return Err(format!(
                    "{} is damaged: CRC-32 {got}, written as {}",
                    path.display(),
                    want.trim()
                ));
            }
        }
        if whole {
            last = Some(round);
        }
    }
    Ok(last)
}

/// The `.partial` files of the checkpoint folder (a checkpoint file being written, or
/// one a kill cut short), with their length and modification time.
fn partials(dir: &Path) -> Vec<(String, u64, Option<SystemTime>)> {
    let mut out: Vec<_> = fs::read_dir(dir.join("checkpoint"))
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let meta = e.metadata().ok()?;
            name.ends_with(".partial")
                .then(|| (name, meta.len(), meta.modified().ok()))
        })
        .collect();
    out.sort();
    out
}

/// Whether a checkpoint file is being written: a `.partial` file that was not in
/// `before` (a kill's leftover), or has changed since.
fn writing(dir: &Path, before: &[(String, u64, Option<SystemTime>)]) -> bool {
    partials(dir).iter().any(|p| !before.contains(p))
}

/// A burnpack file with the random parameter ids blanked: two runs that computed the
/// same weights then give the same bytes.
fn weights_of(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let key = b"param_id\x1b"; // the key, then CBOR's tag for an 8-byte integer
    let mut i = 0;
    while let Some(at) = bytes[i..].windows(key.len()).position(|w| w == key) {
        let start = i + at + key.len();
        let end = (start + 8).min(bytes.len());
        bytes[start..end].fill(0);
        i = end;
    }
    Ok(bytes)
}

/// What the soak saw.
#[derive(Default)]
struct Tally {
    kills: usize,
    mid_write: usize,
    runs: usize,
    resumes: usize,
}

pub(crate) fn soak(args: &[String]) -> Result<bool> {
    let soak = Soak::parse(args)?;
    let venv = setup()?;
    let cargo_env = CargoEnv::new(&venv)?;
    // The workspace's programs, built as the tests build them.
    let toy = build_bench_programs(&cargo_env)?.join("zoo-train-toy");
    let root = env::temp_dir().join(format!("zoo-soak-{}", std::process::id()));
    fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let command = |dir: &Path| {
        let mut c = cargo_env.run(&toy);
        c.arg(dir)
            .args(["--device", soak.device.as_str()])
            .args(TOY_ARGS)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };

    let started = Instant::now();
    let whole = root.join("whole");
    let timed = Instant::now();
    let out = command(&whole)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", toy.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the uninterrupted run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let reference = weights_of(&whole.join(format!("checkpoint/model-{ROUNDS}.bpk")))?;
    let reference_csv = fs::read_to_string(whole.join("metrics.csv")).map_err(|e| e.to_string())?;
    // Kills land anywhere in a run's length, start-up included.
    let run_ms = (timed.elapsed().as_millis() as u64).max(200);
    println!(
        "soak: the uninterrupted run took {}",
        format_duration(timed.elapsed())
    );

    let mut rng = Rng(soak.seed);
    let mut tally = Tally::default();
    while tally.kills < soak.kills {
        tally.runs += 1;
        let dir = root.join(format!("run-{}", tally.runs));
        let mut resume = false;
        loop {
            let mut c = command(&dir);
            if resume {
                c.arg("--resume");
            }
            let expected = verify(&dir)?;
            let before = partials(&dir);
            let mut child = c.spawn().map_err(|e| e.to_string())?;
            let wait_for_write = tally.kills % 2 == 0;
            let deadline = Instant::now() + rng.millis(20, run_ms);
            let mut mid_write = false;
            let finished = loop {
                if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                    break Some(status);
                }
                if tally.kills >= soak.kills {
                    // Enough kills: let this run finish.
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                if wait_for_write && writing(&dir, &before) || Instant::now() >= deadline {
                    child.kill().map_err(|e| e.to_string())?;
                    child.wait().map_err(|e| e.to_string())?;
                    mid_write = writing(&dir, &before);
                    break None;
                }
                std::thread::sleep(Duration::from_micros(if wait_for_write {
                    200
                } else {
                    5000
                }));
            };
            let mut output = String::new();
            if let Some(mut err) = child.stderr.take() {
                std::io::Read::read_to_string(&mut err, &mut output).ok();
            }
            let mut stdout = String::new();
            if let Some(mut out) = child.stdout.take() {
                std::io::Read::read_to_string(&mut out, &mut stdout).ok();
            }
            // The process started from the last complete checkpoint before it (unless it
            // was killed before it said where it started).
            let said = stdout
                .lines()
                .find(|l| l.starts_with("starting after checkpoint"));
            if resume && (said.is_some() || finished.is_some()) {
                let want = format!("starting after checkpoint {expected:?}");
                if said != Some(want.as_str()) {
                    return Err(format!(
                        "{}: expected the resumed run to print `{want}`, it printed:\n{stdout}{output}",
                        dir.display()
                    ));
                }
            }
            match finished {
                Some(status) if status.success() => break,
                Some(_) => {
                    return Err(format!("{}: the run failed:\n{output}", dir.display()));
                }
                None => {
                    tally.kills += 1;
                    tally.mid_write += usize::from(mid_write);
                    let last = verify(&dir)?;
                    println!(
                        "soak: kill {:>3} in run {} at checkpoint {last:?}{}",
                        tally.kills,
                        tally.runs,
                        if mid_write {
                            ", during a checkpoint write"
                        } else {
                            ""
                        }
                    );
                    resume = true;
                    tally.resumes += 1;
                }
            }
        }
        let last = verify(&dir)?;
        if last != Some(ROUNDS) {
            return Err(format!(
                "{}: the run ended at checkpoint {last:?}, not {ROUNDS}",
                dir.display()
            ));
        }
        let weights = weights_of(&dir.join(format!("checkpoint/model-{ROUNDS}.bpk")))?;
        if weights != reference {
            return Err(format!(
                "{}: the final weights differ from the uninterrupted run's",
                dir.display()
            ));
        }
        let csv = fs::read_to_string(dir.join("metrics.csv")).map_err(|e| e.to_string())?;
        if csv != reference_csv {
            return Err(format!(
                "{}: metrics.csv differs from the uninterrupted run's",
                dir.display()
            ));
        }
        println!(
            "soak: run {} finished with the uninterrupted run's weights and metrics",
            tally.runs
        );
        fs::remove_dir_all(&dir).ok();
    }
    fs::remove_dir_all(&root).ok();
    println!(
        "soak: {} kills ({} during a checkpoint write), {} resumes, {} runs on {}: every \
         checkpoint matched its checksum, every resume started from the last complete one, \
         and every run ended with the uninterrupted run's weights, byte for byte, in {}",
        tally.kills,
        tally.mid_write,
        tally.resumes,
        tally.runs,
        soak.device,
        format_duration(started.elapsed())
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_ieee_checksum() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn weights_of_blanks_only_the_parameter_ids() {
        let dir = env::temp_dir().join(format!("zoo-soak-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.bpk");
        let mut file = b"xxparam_id\x1b12345678yyparam_id\x1b87654321zz".to_vec();
        fs::write(&path, &file).unwrap();
        let blank = weights_of(&path).unwrap();
        file[11..19].fill(0);
        file[30..38].fill(0);
        assert_eq!(blank, file);
        fs::remove_dir_all(dir).ok();
    }
}
