//! `cargo xtask bench [--quick]`: the zoo against PyTorch, side by side, in one run.
//!
//! Each row names a `zoo-bench` program and its PyTorch script (`xtask/bench/*.py`),
//! with the same shapes. For every round, the zoo program runs once on each backend,
//! then the script once, in turn, all with the same thread count. Each process warms up
//! and takes the median of its own timed runs, and prints a `bench-result` line. A
//! ratio is zoo / PyTorch within one round, so a drift in the machine's speed between
//! rounds does not enter it; the table gives the median over the rounds.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{CargoEnv, Result, ensure_reference_packages, setup, workspace_root};

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The row number and a short name.
    pub id: &'static str,
    /// What is measured, for the table.
    pub title: &'static str,
    /// `zoo-bench` program and its arguments (the backend and threads are added).
    pub zoo: (&'static str, Vec<&'static str>),
    /// PyTorch script in `xtask/bench` and its arguments, when the row has one.
    pub torch: Option<(&'static str, Vec<&'static str>)>,
    /// Unit of the figures.
    pub unit: &'static str,
    /// The figure compared: `median` (time) or `peak_extra_mib` (memory).
    pub figure: &'static str,
    /// Backends this row runs on (`None`: all that were asked for).
    pub backends: Option<&'static [&'static str]>,
}

fn row(
    id: &'static str,
    title: &'static str,
    zoo: (&'static str, &[&'static str]),
    torch: Option<(&'static str, &[&'static str])>,
) -> Row {
    Row {
        id,
        title,
        zoo: (zoo.0, zoo.1.to_vec()),
        torch: torch.map(|(s, a)| (s, a.to_vec())),
        unit: "ms",
        figure: "median",
        backends: None,
    }
}

/// Every row of the full run, in the order.
pub fn rows() -> Vec<Row> {
    let fwd1 = ["--mode", "forward", "--batch", "1", "--len", "128"];
    let fwd8 = ["--mode", "forward", "--batch", "8", "--len", "128"];
    let generate = ["--mode", "generate", "--prompt", "16", "--new", "64"];
    let mut rows = vec![
        row(
            "1a",
            "GPT-2 small forward, 1 × 128",
            ("gpt2", &fwd1),
            Some(("gpt2.py", &fwd1)),
        ),
        row(
            "1b",
            "GPT-2 small forward, 8 × 128",
            ("gpt2", &fwd8),
            Some(("gpt2.py", &fwd8)),
        ),
        // ndarray decodes at about 0.6 s a token here, 4 minutes a process: left out.
        Row {
            unit: "ms/token",
            backends: Some(&["flex", "tch", "wgpu"]),
            ..row(
                "2",
                "GPT-2 small greedy generation, KV cache, prompt 16 + 64 new",
                ("gpt2", &generate),
                Some(("gpt2.py", &generate)),
            )
        },
        row(
            "3",
            "BERT-base forward, 8 × 128",
            ("bert", &["--batch", "8", "--len", "128"]),
            Some(("bert.py", &["--batch", "8", "--len", "128"])),
        ),
        row(
            "4",
            "ViT-B/16 forward, 1 × 224²",
            ("vit", &["--batch", "1"]),
            Some(("vit.py", &["--batch", "1"])),
        ),
        row(
            "5",
            "AdamW step, character GPT (d 64, 4 × 4, block 16, batch 64)",
            ("train", &["--preset", "char"]),
            Some(("train.py", &["--preset", "char"])),
        ),
        row(
            "6a",
            "AdamW step, Shakespeare GPT-2 (d 128, 4 × 4, block 64, batch 12)",
            ("train", &["--preset", "gpt2"]),
            Some(("train.py", &["--preset", "gpt2"])),
        ),
        row(
            "6b",
            "AdamW step, Shakespeare Llama (d 128, 4 × 4, block 64, batch 12)",
            ("train", &["--preset", "llama"]),
            Some(("train.py", &["--preset", "llama"])),
        ),
    ];
    for (id, len) in [("7 T=512", "512"), ("7 T=2048", "2048")] {
        for (path, title) in [
            ("fused", "fused"),
            ("reference", "reference"),
            ("chunked", "chunked (128 × 128)"),
        ] {
            rows.push(Row {
                title: leak(format!(
                    "causal attention, 8 × 64, T = {len}: {title} vs SDPA"
                )),
                ..row(
                    id,
                    "",
                    ("sdpa", &["--path", path, "--len", len]),
                    Some(("sdpa.py", &["--len", len])),
                )
            });
        }
    }
    // The counting allocator sees host memory only: flex and ndarray.
    for (path, title) in [
        ("chunked", "chunked (128 × 128)"),
        ("reference", "reference"),
    ] {
        rows.push(Row {
            title: leak(format!(
                "attention memory beyond the inputs, T = 8192: {title}"
            )),
            unit: "MiB",
            figure: "peak_extra_mib",
            backends: Some(&["flex", "ndarray"]),
            ..row(
                "8",
                "",
                ("sdpa", &["--path", path, "--len", "8192", "--runs", "1"]),
                None,
            )
        });
    }
    // A training step of the attention alone (forward, and backward to q, k and v): the
    // peak beyond the inputs, fused (zoo-kernels' tiles on flex; Burn's op, recorded as
    // its composition, on ndarray) against the reference path.
    for (path, title) in [("fused", "fused"), ("reference", "reference")] {
        rows.push(Row {
            title: leak(format!(
                "attention training-step memory beyond the inputs, T = 4096: {title}"
            )),
            unit: "MiB",
            figure: "peak_extra_mib",
            backends: Some(&["flex", "ndarray"]),
            ..row(
                "9",
                "",
                (
                    "sdpa",
                    &["--path", path, "--len", "4096", "--train", "--runs", "1"],
                ),
                None,
            )
        });
    }
    rows
}

/// The rows of `cargo xtask bench precision`: GPT-2 small, a Llama of 100M parameters,
/// BERT-base and ViT-B/16 at f32, f16, bf16, and with q8 and q4 weights (blocks of 32;
/// q8 also through Burn's own product), each beside PyTorch in f32. Half
/// precision runs where the backend has it (flex, tch); quantized weights on flex only
/// (burn-tch has no quantized ops).
pub fn precision_rows() -> Vec<Row> {
    let workloads: [(&str, &str, &str, Vec<&'static str>); 6] = [
        (
            "1a",
            "GPT-2 small forward, 1 × 128",
            "gpt2.py",
            vec!["--mode", "forward", "--batch", "1", "--len", "128"],
        ),
        (
            "2",
            "GPT-2 small greedy generation, KV cache, prompt 16 + 8 new",
            "gpt2.py",
            vec![
                "--mode", "generate", "--prompt", "16", "--new", "8", "--runs", "3",
            ],
        ),
        (
            "3",
            "BERT-base forward, 8 × 128",
            "bert.py",
            vec!["--batch", "8", "--len", "128"],
        ),
        (
            "5",
            "Llama 100M (from a config) forward, 1 × 128",
            "gpt2.py",
            vec![
                "--model",
                "llama-100m",
                "--mode",
                "forward",
                "--batch",
                "1",
                "--len",
                "128",
            ],
        ),
        (
            "6",
            "Llama 100M greedy generation, KV cache, prompt 16 + 8 new",
            "gpt2.py",
            vec![
                "--model",
                "llama-100m",
                "--mode",
                "generate",
                "--prompt",
                "16",
                "--new",
                "8",
                "--runs",
                "3",
            ],
        ),
        (
            "7",
            "ViT-B/16 forward, 1 × 3 × 224 × 224",
            "vit.py",
            vec!["--batch", "1"],
        ),
    ];
    let variants: [(&str, &[&'static str], &'static [&'static str]); 6] = [
        ("f32", &[], &["flex", "tch"]),
        ("f16", &["--dtype", "f16"], &["flex"]),
        ("bf16", &["--dtype", "bf16"], &["flex"]),
        ("q8", &["--quantize", "q8"], &["flex"]),
        ("q4", &["--quantize", "q4"], &["flex"]),
        // The same weights through Burn's own product (zoo-kernels off): dequantized
        // value by value at every call.
        ("q8-burn", &["--quantize", "q8", "--no-kernels"], &["flex"]),
    ];
    let mut rows = loading_rows();
    for (id, title, script, args) in &workloads {
        let program = match *script {
            "bert.py" => "bert",
            "vit.py" => "vit",
            _ => "gpt2",
        };
        let torch_args: Vec<&'static str> = args.clone();
        for (variant, extra, backends) in variants {
            let mut zoo_args = args.clone();
            zoo_args.extend_from_slice(extra);
            rows.push(Row {
                id: leak(format!("{id} {variant}")),
                title: leak(format!("{title}, {variant}")),
                zoo: (program, zoo_args),
                torch: Some((script, torch_args.clone())),
                unit: if matches!(*id, "2" | "6") {
                    "ms/token"
                } else {
                    "ms"
                },
                figure: "median",
                backends: Some(backends),
            });
        }
    }
    rows
}

/// The checkpoints the loading rows read, `{CHECKPOINTS}/{kind}-{dtype}`, written by
/// `xtask/bench/write_checkpoint.py` (random weights, seed 0) when missing.
const CHECKPOINTS: &str = "{checkpoints}";

/// The loading rows of `cargo xtask bench precision`: the resident memory that loading
/// adds, at its peak, over the weights' bytes, from a file stored in f32 or f16 into a
/// model computing in f32 or f16, beside PyTorch's `from_pretrained` of the same file in
/// the same type.
fn loading_rows() -> Vec<Row> {
    let loads = [
        ("4a", "GPT-2 small", "gpt2", "f32", "f32"),
        ("4b", "GPT-2 small", "gpt2", "f16", "f16"),
        ("4c", "GPT-2 small", "gpt2", "f32", "f16"),
        ("4d", "BERT-base", "bert", "f32", "f32"),
        ("4e", "BERT-base", "bert", "f16", "f16"),
        // Quantized as read (`--quantize`), against the weights as held: f32 embeddings
        // and 8- or 4-bit layers. transformers has no counterpart to load beside it.
        ("4f", "GPT-2 small", "gpt2", "f32", "q8"),
        ("4g", "GPT-2 small", "gpt2", "f32", "q4"),
    ];
    let mut rows = Vec::new();
    for (id, name, kind, stored, float) in loads {
        let dir = leak(format!("{CHECKPOINTS}/{kind}-{stored}"));
        let quantized = float.starts_with('q');
        let (what, zoo) = if quantized {
            (
                leak(format!("f32 with {float} layers quantized as read")),
                (
                    "load",
                    vec!["--model", dir, "--quantize", float, "--runs", "1"],
                ),
            )
        } else {
            (
                float,
                (
                    "load",
                    vec!["--model", dir, "--dtype", float, "--runs", "1"],
                ),
            )
        };
        rows.push(Row {
            id,
            title: leak(format!(
                "{name} loaded from a file in {stored}, as {what}: resident memory added \
                 at the peak over the weights' bytes"
            )),
            zoo: zoo.clone(),
            torch: (!quantized).then(|| ("load.py", vec!["--model", dir, "--dtype", float])),
            unit: "×",
            figure: "rss_added_over_weights",
            // libtorch has no quantized weights in Burn 0.22.1.
            backends: Some(if quantized {
                &["flex"]
            } else {
                &["flex", "tch"]
            }),
        });
        // The program's allocator sees flex's tensors, not libtorch's.
        rows.push(Row {
            id: leak(format!("{id}'")),
            title: leak(format!(
                "{name} loaded from a file in {stored}, as {what}: bytes allocated at the \
                 peak over the weights' bytes"
            )),
            zoo,
            torch: None,
            unit: "×",
            figure: "allocated_over_weights",
            backends: Some(&["flex"]),
        });
    }
    rows
}

/// Writes the checkpoints that the loading rows read, into `dir`, when missing.
fn write_checkpoints(python: &Path, scripts: &Path, dir: &Path) -> Result<()> {
    for kind in ["gpt2", "bert"] {
        for dtype in ["f32", "f16"] {
            let out = dir.join(format!("{kind}-{dtype}"));
            if out.join("model.safetensors").is_file() {
                continue;
            }
            let mut command = Command::new(python);
            command
                .arg(scripts.join("write_checkpoint.py"))
                .args(["--kind", kind, "--dtype", dtype, "--out"])
                .arg(&out)
                .current_dir(scripts);
            run_process(command, &format!("write_checkpoint.py {kind} {dtype}"))?;
        }
    }
    Ok(())
}

/// The `--quick` subset: one small row of each kind.
pub fn quick_rows() -> Vec<Row> {
    rows()
        .into_iter()
        .filter(|r| {
            r.id == "1a" || r.id == "5" || (r.id == "7 T=512" && r.zoo.1.contains(&"fused"))
        })
        .collect()
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Options of the suite.
#[derive(Debug, Clone)]
pub struct Options {
    /// `precision`: the rows of [`precision_rows`], written to `docs/precision.md`.
    pub precision: bool,
    pub quick: bool,
    pub rounds: usize,
    pub threads: usize,
    pub backends: Vec<String>,
    pub only: Vec<String>,
    pub output: Option<PathBuf>,
}

impl Options {
    /// Parses `[--quick] [--rounds N] [--threads N] [--backends a,b] [--rows 1a,5] [--output PATH|--no-write]`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = Self {
            precision: false,
            quick: false,
            rounds: 3,
            threads: 2,
            backends: vec!["flex".into(), "ndarray".into(), "tch".into()],
            only: Vec::new(),
            output: Some(workspace_root().join("docs/benchmarks.md")),
        };
        let mut rounds_given = false;
        let mut write_given = false;
        let mut backends_given = false;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("bench: {name} needs a value"))
            };
            match a.as_str() {
                "precision" => o.precision = true,
                "--quick" => o.quick = true,
                "--rounds" => {
                    o.rounds = positive("--rounds", &value("--rounds")?)?;
                    rounds_given = true;
                }
                "--threads" => o.threads = positive("--threads", &value("--threads")?)?,
                "--backends" => {
                    o.backends = list(&value("--backends")?);
                    backends_given = true;
                }
                "--rows" => o.only = list(&value("--rows")?),
                "--output" => {
                    o.output = Some(PathBuf::from(value("--output")?));
                    write_given = true;
                }
                "--no-write" => {
                    o.output = None;
                    write_given = true;
                }
                other => {
                    return Err(format!(
                        "bench: unknown option `{other}` (known: --quick, --rounds N, --threads N, \
                         --backends flex,ndarray,tch, --rows IDS, --output PATH, --no-write)"
                    ));
                }
            }
        }
        for b in &o.backends {
            if !["flex", "ndarray", "tch", "wgpu"].contains(&b.as_str()) {
                return Err(format!(
                    "bench: unknown backend `{b}` (known: flex, ndarray, tch, wgpu)"
                ));
            }
        }
        if o.backends.is_empty() {
            return Err("bench: --backends is empty".into());
        }
        if o.precision {
            if !write_given {
                o.output = Some(workspace_root().join("docs/precision.md"));
            }
            if !backends_given {
                o.backends = vec!["flex".into(), "tch".into()];
            }
            if !rounds_given {
                o.rounds = 1;
            }
        }
        if o.quick {
            if !rounds_given {
                o.rounds = 1;
            }
            // A subset does not replace the table of the full run unless asked to.
            if !write_given {
                o.output = None;
            }
        }
        Ok(o)
    }
}

fn positive(name: &str, v: &str) -> Result<usize> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "bench: {name} must be a whole number > 0, got {v:?}"
        )),
    }
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The figures of one process, read from its `bench-result` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub value: f64,
    pub peak_rss_mib: Option<f64>,
    /// What the model's weights take in memory, and the bytes per value of its quantized
    /// ones (0 when none is), where the program reports them.
    pub weights: Option<(f64, f64)>,
}

/// Reads `figure` and `peak_rss_mib` from the last `bench-result {...}` line of `stdout`.
pub fn parse_result(stdout: &str, figure: &str) -> Option<Measured> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("bench-result "))?;
    let number = |key: &str| -> Option<f64> {
        let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = line[at..].trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    Some(Measured {
        value: number(figure)?,
        peak_rss_mib: number("peak_rss_mib"),
        weights: number("weights_mib").zip(number("quantized_bytes_per_value")),
    })
}

/// Median of a non-empty list (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    })
}

/// One cell's rounds: the zoo's figure, PyTorch's (same round) and their peaks.
#[derive(Debug, Default, Clone)]
struct Cell {
    zoo: Vec<f64>,
    torch: Vec<f64>,
    ratios: Vec<f64>,
    zoo_rss: Vec<f64>,
    torch_rss: Vec<f64>,
    /// The zoo's weights in MiB and bytes per quantized value, from its last round.
    weights: Option<(f64, f64)>,
    errors: Vec<String>,
}

fn run_process(mut command: Command, what: &str) -> std::result::Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!("{what}: {} ({last})", output.status));
    }
    Ok(stdout)
}

fn capture(command: &mut Command) -> String {
    command
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The machine, for the table's header: CPU model, cores and memory.
fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map_or_else(|| "?".into(), |k| format!("{:.0}", k / 1024.0 / 1024.0));
    format!("{cpu}, {cores} cores, {mem} GiB")
}

/// Runs the suite; prints the table and writes it when an output is set.
pub fn run(args: &[String]) -> Result<bool> {
    let options = Options::parse(args)?;
    let venv = setup()?;
    ensure_reference_packages(&venv)?;
    let cargo_env = CargoEnv::new(&venv)?;
    let target = crate::build_bench_programs(&cargo_env)?;
    let python = venv.join("bin").join("python");
    let scripts = workspace_root().join("xtask/bench");
    let threads = options.threads.to_string();
    let mut rows = if options.precision {
        precision_rows()
    } else if options.quick {
        quick_rows()
    } else {
        rows()
    };
    if !options.only.is_empty() {
        rows.retain(|r| options.only.iter().any(|o| r.id.starts_with(o.as_str())));
        if rows.is_empty() {
            return Err(format!(
                "bench: no row matches --rows {}",
                options.only.join(",")
            ));
        }
    }
    let checkpoints = crate::environment::cache_root()?.join("bench-checkpoints");
    let uses_checkpoints = |args: &[&str]| args.iter().any(|a| a.contains(CHECKPOINTS));
    if rows.iter().any(|r| uses_checkpoints(&r.zoo.1)) {
        write_checkpoints(&python, &scripts, &checkpoints)?;
    }
    let checkpoints = checkpoints.to_string_lossy().into_owned();
    let expand = |args: &[&str]| -> Vec<String> {
        args.iter()
            .map(|a| a.replace(CHECKPOINTS, &checkpoints))
            .collect()
    };
    let started = Instant::now();
    let mut table: Vec<(Row, Vec<(String, Cell)>)> = Vec::new();
    for row in rows {
        let backends: Vec<String> = options
            .backends
            .iter()
            .filter(|b| row.backends.is_none_or(|only| only.contains(&b.as_str())))
            .cloned()
            .collect();
        let mut cells: Vec<(String, Cell)> = backends
            .iter()
            .map(|b| (b.clone(), Cell::default()))
            .collect();
        for round in 0..options.rounds {
            let mut zoo_this_round = Vec::new();
            for (backend, cell) in &mut cells {
                let mut command = Command::new(target.join(row.zoo.0));
                command
                    .args(expand(&row.zoo.1))
                    .args(["--device", backend, "--threads", &threads])
                    .envs(cargo_env.vars.iter().map(|(k, v)| (k, v)))
                    // libtorch sizes its pool from these when the tch backend starts.
                    .env("OMP_NUM_THREADS", &threads)
                    .env("MKL_NUM_THREADS", &threads);
                let what = format!(
                    "{} {} on {backend}",
                    row.zoo.0,
                    expand(&row.zoo.1).join(" ")
                );
                println!("bench [{}] round {}: zoo {what}", row.id, round + 1);
                match run_process(command, &what).and_then(|out| {
                    parse_result(&out, row.figure).ok_or(format!("{what}: no bench-result line"))
                }) {
                    Ok(m) => {
                        cell.zoo.push(m.value);
                        cell.zoo_rss.extend(m.peak_rss_mib);
                        cell.weights = m.weights.or(cell.weights);
                        zoo_this_round.push(Some(m.value));
                    }
                    Err(e) => {
                        println!("  {e}");
                        cell.errors.push(e);
                        zoo_this_round.push(None);
                    }
                }
            }
            if let Some((script, script_args)) = &row.torch {
                let mut command = Command::new(&python);
                command
                    .arg(scripts.join(script))
                    .args(expand(script_args))
                    .args(["--threads", &threads])
                    .current_dir(&scripts)
                    .env("OMP_NUM_THREADS", &threads)
                    .env("MKL_NUM_THREADS", &threads);
                let what = format!("{script} {}", expand(script_args).join(" "));
                println!("bench [{}] round {}: torch {what}", row.id, round + 1);
                match run_process(command, &what).and_then(|out| {
                    parse_result(&out, row.figure).ok_or(format!("{what}: no bench-result line"))
                }) {
                    Ok(m) => {
                        for ((_, cell), zoo) in cells.iter_mut().zip(&zoo_this_round) {
                            cell.torch.push(m.value);
                            cell.torch_rss.extend(m.peak_rss_mib);
                            if let Some(z) = zoo {
                                cell.ratios.push(z / m.value);
                            }
                        }
                    }
                    Err(e) => {
                        println!("  {e}");
                        for (_, cell) in &mut cells {
                            cell.errors.push(e.clone());
                        }
                    }
                }
            }
        }
        table.push((row, cells));
    }
    let mut quality = String::new();
    if options.precision {
        let minilm = crate::fetch::fetch_minilm()?;
        let mut command = Command::new(&python);
        command
            .arg(scripts.join("quality.py"))
            .arg("--zoo")
            .arg(target.join("zoo"))
            .arg("--minilm")
            .arg(&minilm)
            .arg("--root")
            .arg(workspace_root())
            .args(["--threads", &threads])
            .current_dir(&scripts)
            .envs(cargo_env.vars.iter().map(|(k, v)| (k, v)));
        println!("bench: quality, quality.py");
        quality = run_process(command, "quality.py")?;
        quality.push_str(&shakespeare_precisions(&cargo_env, &target, &threads)?);
    }
    let mut report = render(&table, &options, &python, started.elapsed().as_secs_f64());
    report.push_str(&quality);
    println!("\n{report}");
    if let Some(path) = &options.output {
        write_atomic(path, &report)?;
        println!("bench: wrote {}", path.display());
    }
    let failed = table
        .iter()
        .any(|(_, cells)| cells.iter().any(|(_, c)| !c.errors.is_empty()));
    Ok(!failed)
}

/// The Shakespeare rows of `docs/precision.md`'s quality section: the `shakespeare`
/// example's gpt2 preset trained by its reference recipe on flex, then its validation loss
/// with the weights at each precision (`--precisions`, each in a process of its own).
fn shakespeare_precisions(cargo_env: &CargoEnv, target: &Path, threads: &str) -> Result<String> {
    let mut build = cargo_env.cargo([
        "build",
        "--release",
        "--workspace",
        "--example",
        "shakespeare",
        "--features",
        crate::ci::MATRIX_FEATURES,
    ]);
    crate::environment::run_checked(&mut build, "shakespeare build")?;
    let artifacts = std::env::temp_dir().join("zoo-bench-shakespeare");
    let mut command = Command::new(target.join("examples/shakespeare"));
    command
        .args([
            "--device",
            "flex",
            "--precisions",
            "--overwrite",
            "--generate",
            "0",
        ])
        .arg("--artifacts")
        .arg(&artifacts)
        .env("RAYON_NUM_THREADS", threads)
        .envs(cargo_env.vars.iter().map(|(k, v)| (k, v)));
    println!("bench: quality, shakespeare --precisions");
    let out = run_process(command, "shakespeare --precisions")?;
    let _ = fs::remove_dir_all(&artifacts);
    let losses: Vec<(&str, &str)> = out
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (name, loss) = (words.next()?, words.next()?);
            let known = ["f32", "f16", "bf16", "q8", "q4"].contains(&name);
            (known && loss.parse::<f64>().is_ok()).then_some((name, loss))
        })
        .collect();
    if losses.len() != 5 {
        return Err(format!(
            "shakespeare --precisions: expected five validation losses, read {}:\n{out}",
            losses.len()
        ));
    }
    let mut section = String::from(
        "\nThe `shakespeare` example's character model (gpt2 preset, 811,520 parameters), \
         trained by its reference recipe on flex, then its validation loss (600 windows of 64 \
         characters) with the same weights at each precision, each in its own process \
         (`cargo run --release --example shakespeare -- --precisions`; q8 and q4 quantize \
         the layers' linear weights in blocks of 32):\n\n| output |",
    );
    for (name, _) in &losses {
        section.push_str(&format!(" {name} |"));
    }
    section.push_str(
        "\n|---|---|---|---|---|---|\n| Shakespeare validation loss (nats per character) |",
    );
    for (_, loss) in &losses {
        section.push_str(&format!(" {loss} |"));
    }
    section.push_str("\n| difference from f32 |");
    let f32_loss: f64 = losses[0].1.parse().unwrap_or(f64::NAN);
    for (_, loss) in &losses {
        let d = loss.parse::<f64>().unwrap_or(f64::NAN) - f32_loss;
        section.push_str(&format!(" {d:+.4} |"));
    }
    section.push('\n');
    Ok(section)
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("md.tmp");
    fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn fmt(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// The markdown report: header (machine, date, versions, method), then one table line
/// per row and backend, the best zoo backend of each row in bold.
fn render(
    table: &[(Row, Vec<(String, Cell)>)],
    options: &Options,
    python: &Path,
    seconds: f64,
) -> String {
    let date = capture(Command::new("date").args(["-u", "+%Y-%m-%d"]));
    let versions = capture(Command::new(python).args([
        "-c",
        "import torch, transformers; print(f'torch {torch.__version__}, transformers {transformers.__version__}')",
    ]));
    let burn = burn_version().unwrap_or_else(|| "?".into());
    let mut out = String::new();
    if options.precision {
        out.push_str(&precision_header(options, &date, &burn, &versions, seconds));
    } else {
        out.push_str("# Benchmarks against PyTorch\n\n");
        out.push_str(&format!(
            "Written by `cargo xtask bench{}` on {date}, in {:.0} min.\n\n",
            if options.quick { " --quick" } else { "" },
            seconds / 60.0
        ));
        out.push_str(&format!(
            "- Machine: {}.\n- Versions: Burn {burn}; {versions}.\n- Threads: {} on both sides \
         (flex's pool, libtorch's and PyTorch's).\n- Method: for each row, {} round(s); in \
         a round the zoo's program runs once on each backend, then the PyTorch script once. \
         Each process warms up, then times 5 calls and reports their median (the training \
         rows warm up for 3 steps). A figure below is the median over the rounds; a ratio \
         is zoo / PyTorch within a round, then the median over the rounds. Peak RSS is each \
         process's high-water mark (`VmHWM`, `ru_maxrss`), the median over the rounds.\n\
         - Bold: the fastest zoo backend of the row (for the memory rows, the smallest).\n\
         - Row 2 leaves ndarray out: it decodes at about 0.6 s a token here, 4 minutes a \
         process. Rows 8 and 9 run on flex and ndarray only: the figure is counted by the \
         program's allocator, which does not see libtorch's memory.\n\n",
            machine(),
            options.threads,
            options.rounds
        ));
    }
    out.push_str(
        "| row | workload | backend | zoo | PyTorch | zoo / PyTorch | zoo peak RSS (MiB) | PyTorch peak RSS (MiB) |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for (row, cells) in table {
        let best = cells
            .iter()
            .filter_map(|(b, c)| median(&c.zoo).map(|m| (b, m)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(b, _)| b.clone());
        for (backend, cell) in cells {
            let name = if Some(backend) == best.as_ref() && cells.len() > 1 {
                format!("**{backend}**")
            } else {
                backend.clone()
            };
            let zoo = if cell.zoo.is_empty() {
                format!("failed: {}", cell.errors.first().map_or("", String::as_str))
            } else {
                format!("{} {}", fmt(median(&cell.zoo)), row.unit)
            };
            let torch = if row.torch.is_some() {
                median(&cell.torch).map_or("-".into(), |t| format!("{} {}", fmt(Some(t)), row.unit))
            } else {
                "-".into()
            };
            out.push_str(&format!(
                "| {} | {} | {name} | {zoo} | {torch} | {} | {} | {} |\n",
                row.id,
                row.title,
                fmt(median(&cell.ratios)),
                fmt(median(&cell.zoo_rss)),
                if row.torch.is_some() {
                    fmt(median(&cell.torch_rss))
                } else {
                    "-".into()
                },
            ));
        }
    }
    if options.precision {
        out.push_str(&against_f32(table));
        out.push_str(&weights_in_memory(table));
    }
    out
}

/// The table of what each model's weights take in memory at each precision, read from
/// the forward rows of [`precision_rows`] (each program counts its parameters as the
/// backend stores them: `zoo_core::quant::weight_bytes`).
fn weights_in_memory(table: &[(Row, Vec<(String, Cell)>)]) -> String {
    let variants = ["f32", "f16", "bf16", "q8", "q4"];
    let mut out = String::from(
        "\n## Weights in memory\n\nWhat each model's parameters take as the backend holds \
         them, from the forward rows' processes (`zoo_core::quant::weight_bytes`: a float \
         tensor at its type's width, a quantized one at its store's, scales included), in \
         MiB and over f32's; then the quantized linear weights alone, in bytes per value \
         and over f32's 4 bytes. q8 and q4 quantize the layer stacks' linear weights only \
         (embeddings, heads, norms and biases keep f32, as by default in every `zoo` \
         command), so the whole model's ratio keeps the embeddings' share.\n\n\
         | model | backend | precision | weights (MiB) | over f32 | quantized weights: bytes per value | over f32 |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let find = |workload: &str, variant: &str, backend: &str| {
        let (_, cells) = table
            .iter()
            .find(|(row, _)| row.id == format!("{workload} {variant}"))?;
        let (_, cell) = cells.iter().find(|(b, _)| b == backend)?;
        cell.weights
    };
    for (workload, model) in [
        ("1a", "GPT-2 small"),
        ("5", "Llama 100M"),
        ("3", "BERT-base"),
        ("7", "ViT-B/16"),
    ] {
        for backend in ["flex", "ndarray", "wgpu", "tch"] {
            let Some((base, _)) = find(workload, "f32", backend) else {
                continue;
            };
            for variant in variants {
                let Some((mib, per_value)) = find(workload, variant, backend) else {
                    continue;
                };
                let (per_value, over) = if per_value > 0.0 {
                    (format!("{per_value:.3}"), format!("{:.3}", per_value / 4.0))
                } else {
                    ("-".into(), "-".into())
                };
                out.push_str(&format!(
                    "| {model} | {backend} | {variant} | {mib:.1} | {:.3} | {per_value} | {over} |\n",
                    mib / base
                ));
            }
        }
    }
    out
}

/// The header of `docs/precision.md`.
fn precision_header(
    options: &Options,
    date: &str,
    burn: &str,
    versions: &str,
    seconds: f64,
) -> String {
    format!(
        "# Precision: half precision and quantized weights\n\n\
         Written by `cargo xtask bench precision` on {date}, in {:.0} min.\n\n\
         - Machine: {}.\n- Versions: Burn {burn}; {versions}.\n- Threads: {} on both \
         sides (flex's pool, libtorch's and PyTorch's).\n- What runs: the zoo's `gpt2` (GPT-2 \
         small, and with `--model llama-100m` a Llama of 100,092,672 parameters built from \
         a config: width 768, 12 layers, 12 heads over 4 KV heads, SwiGLU 2048, vocabulary \
         32000, tied head), `bert` (BERT-base) and `vit` (ViT-B/16) bench programs (random \
         weights from seed 0) with `--dtype f16|bf16` (the \
         device's float type, set before its first tensor) or `--quantize q8|q4` (the linear \
         weights of the layer stacks as Burn's 8- or 4-bit symmetric values, one f32 scale \
         per 32 values; embeddings, heads and norms in f32). PyTorch (`transformers`) runs \
         in f32, its default, in every row, so zoo / PyTorch is against PyTorch f32 in the \
         same round.\n- Half-precision and quantized rows run on flex only: libtorch's CPU f16 \
         products took minutes a GPT-2 8 × 128 pass here (one process ran 5 minutes before \
         it was stopped), and burn-tch has no quantized ops; tch runs f32 for reference. \
         Quantized weights on flex take the zoo's product (`zoo-kernels`, through Burn's \
         backend extension): for up to 8 rows (a decoding step) it multiplies by the 8-bit \
         values and their scales directly, reading one byte per weight and making no f32 \
         copy; for more rows it dequantizes the weight in one vectorised pass, then runs \
         flex's f32 product. The `q8-burn` rows turn it off (`--no-kernels`): Burn 0.22.1's \
         own path, which dequantizes the whole weight value by value (a block lookup with a \
         division per value) at every call. Burn's flex keeps 4-bit values one per byte; the \
         zoo packs them two to a byte (`zoo_kernels::quant::PackedQ4`) and its product \
         unpacks one row of a panel at a time, so q4 weighs half of q8 there. wgpu has no \
         rows: this machine has no GPU, and wgpu runs on Mesa's software Vulkan \
         (lavapipe), whose times would measure that emulation rather than a GPU.\n- Rows 4a \
         to 4e: loading a \
         checkpoint folder (random weights from seed 0, saved by `transformers`' \
         `save_pretrained` in f32 or f16 by `xtask/bench/write_checkpoint.py`) with \
         `AutoModel::from_pretrained`, as every `zoo` command loads (the `load` program), \
         beside `transformers`' `AutoModel.from_pretrained(dtype=...)` (`load.py`). The \
         figure is the resident memory that loading adds at its peak (high-water mark after, \
         less the resident memory before) over the weights' bytes in the type loaded. The zoo \
         reads each tensor of the safetensors file with a positioned read into memory of \
         its own, so the file's pages stay in the kernel's page cache and out of the \
         process (until 2026-12-04 it memory-mapped the file, and the mapped pages read \
         stayed resident until it closed: 2.1 to 2.7 ×). Each buffer read is allocated as Burn \
         keeps it (16-byte aligned), so it becomes the tensor's storage without a copy \
         (until 2026-12-06 each tensor was copied once on the way, briefly held twice). \
         While it reads, mimalloc's pages over 64 KiB (every object over 512 KiB, and the \
         pages that smaller ones share) are mapped from the OS apart from its arenas and \
         unmapped once empty, so the buffers that libtorch copies from, and the partial \
         huge pages at the ends of tensors in the arenas, do not stay resident \
         (`zoo-core`'s `mimalloc` feature, `checkpoint/memory.rs`; until 2026-12-06 these \
         rows read 1.13 to 1.27 × on flex and 1.50 to 1.75 × on tch, with 1.02 to 1.04 × \
         allocated); the rest of its figure above the weights is the program's own (code \
         paged in). `transformers` memory-maps the \
         file and leaves tensors of the stored type as views of the map, read when first \
         used, so its loading adds almost nothing until the first forward pass; it \
         converts (4c) as the zoo does. Rows 4f and 4g load the f32 file with `--quantize q8` \
         and `q4` (`AutoModel::from_pretrained_quantized`): each linear weight of the layer \
         stacks is quantized as it is read (on flex, read 1 MiB of f32 at a time, turned in \
         memory where the file stores it `[out, in]`, and quantized on the host to flex's \
         own values and scales, so that its f32 values are never held whole), and applied \
         one at a time, each held at its length and, at 4 bits, packed two values to a byte \
         from flex's own store before the next is read; while it reads, the allocator gives \
         freed memory back at once. The figure is over the weights as they are then held \
         (f32 embeddings, 8- or 4-bit layers with their scales). Until 2026-12-06 the model \
         was applied whole and packed after (4f 1.28 ×, 4g 1.54 ×, and 1.22 × and 1.47 × \
         allocated), and in the run before this one each weight was read whole and given \
         back after the allocator's delay (4f 1.10 ×, 4g 1.18 ×, 1.06 × allocated at both). \
         `transformers` has no such load to run beside it. Rows 4a' to 4g' count what the zoo's \
         program allocates (its counting allocator: the tensors and any copy on the way, \
         not the mapped file), on flex.\n- Method: {} round(s); in a round \
         the zoo's program runs once on each backend, then the PyTorch script once; each \
         process warms up, then times its calls (5, or 3 for generation) and reports their \
         median. Peak RSS is each process's high-water mark.\n\n",
        seconds / 60.0,
        machine(),
        options.threads,
        options.rounds
    )
}

/// The table of each variant's time over f32's, per workload and backend: the rows of
/// [`precision_rows`] are `"{workload} {variant}"`.
fn against_f32(table: &[(Row, Vec<(String, Cell)>)]) -> String {
    let variants = ["f16", "bf16", "q8", "q4", "q8-burn"];
    let mut out = String::from(
        "\n## Against f32 on the same backend\n\nThe zoo's median at each precision over \
         its median at f32, on the same backend (below 1: faster). `q8-burn` is q8 through \
         Burn's own product, the zoo's kernel turned off.\n\n\
         | workload | backend | f16 | bf16 | q8 | q4 | q8-burn |\n|---|---|---|---|---|---|---|\n",
    );
    let find = |workload: &str, variant: &str, backend: &str| -> Option<f64> {
        let (_, cells) = table
            .iter()
            .find(|(row, _)| row.id == format!("{workload} {variant}"))?;
        let (_, cell) = cells.iter().find(|(b, _)| b == backend)?;
        median(&cell.zoo)
    };
    let mut seen = Vec::new();
    for (row, cells) in table {
        let Some((workload, _)) = row.id.rsplit_once(' ') else {
            continue;
        };
        for (backend, _) in cells {
            if seen.contains(&(workload, backend)) {
                continue;
            }
            seen.push((workload, backend));
            let Some(base) = find(workload, "f32", backend) else {
                continue;
            };
            let title = row.title.rsplit_once(", ").map_or(row.title, |(t, _)| t);
            let ratios: Vec<Option<f64>> = variants
                .iter()
                .map(|v| find(workload, v, backend).map(|m| m / base))
                .collect();
            if ratios.iter().all(Option::is_none) {
                continue;
            }
            let ratios: Vec<String> = ratios.into_iter().map(fmt).collect();
            out.push_str(&format!(
                "| {title} | {backend} | {} |\n",
                ratios.join(" | ")
            ));
        }
    }
    out
}

/// Burn's version from `Cargo.lock`.
fn burn_version() -> Option<String> {
    let lock = fs::read_to_string(workspace_root().join("Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == "name = \"burn\"" {
            return lines
                .next()?
                .trim()
                .strip_prefix("version = \"")?
                .strip_suffix('"')
                .map(String::from);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_read_from_both_sides() {
        let zoo = "gpt2-small forward 1x128 on flex: 455.0 ms\nbench-result {\"unit\": \"ms\", \"median\": 455.125, \"runs\": [450.0, 455.125, 470.5], \"peak_rss_mib\": 812.5}\n";
        let m = parse_result(zoo, "median").unwrap();
        assert_eq!(m.value, 455.125);
        assert_eq!(m.peak_rss_mib, Some(812.5));
        // Python's json.dumps writes the same fields; extra figures are found by name.
        let py = "bench-result {\"unit\": \"ms\", \"median\": 3.5, \"runs\": [3.5], \"peak_rss_mib\": 1e3, \"peak_extra_mib\": 2.25}";
        assert_eq!(parse_result(py, "peak_extra_mib").unwrap().value, 2.25);
        assert_eq!(
            parse_result(py, "median").unwrap().peak_rss_mib,
            Some(1000.0)
        );
        assert_eq!(parse_result("no result here", "median"), None);
        assert_eq!(parse_result(py, "no_such_figure"), None);
        assert_eq!(m.weights, None);
        // The model programs' weight figures come together.
        let weights = "bench-result {\"median\": 2.0, \"weights_mib\": 253.5, \"quantized_bytes_per_value\": 1.125}";
        assert_eq!(
            parse_result(weights, "median").unwrap().weights,
            Some((253.5, 1.125))
        );
        let null_peak = "bench-result {\"median\": 1.0, \"peak_rss_mib\": null}";
        assert_eq!(
            parse_result(null_peak, "median").unwrap().peak_rss_mib,
            None
        );
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn options_are_checked() {
        let parse =
            |a: &[&str]| Options::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let o = parse(&[]).unwrap();
        assert_eq!((o.quick, o.rounds, o.threads), (false, 3, 2));
        assert!(o.output.is_some());
        let q = parse(&["--quick"]).unwrap();
        assert_eq!(q.rounds, 1);
        assert!(
            q.output.is_none(),
            "a quick run does not replace the full table"
        );
        let o = parse(&["--backends", "flex,tch", "--rows", "1a,5", "--rounds", "2"]).unwrap();
        assert_eq!(o.backends, ["flex", "tch"]);
        assert_eq!(o.only, ["1a", "5"]);
        assert_eq!(o.rounds, 2);
        for (bad, says) in [
            (
                &["--rounds", "0"][..],
                "--rounds must be a whole number > 0, got \"0\"",
            ),
            (
                &["--threads", "two"][..],
                "--threads must be a whole number > 0, got \"two\"",
            ),
            (&["--backends", "cpu"][..], "unknown backend `cpu`"),
            (&["--round", "2"][..], "unknown option `--round`"),
            (&["--rounds"][..], "--rounds needs a value"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn every_row_has_a_program_and_a_script_that_exist() {
        let root = workspace_root();
        for r in rows() {
            let bin = root.join(format!("crates/zoo-bench/src/bin/{}.rs", r.zoo.0));
            assert!(bin.is_file(), "{}: {}", r.id, bin.display());
            if let Some((script, _)) = &r.torch {
                let py = root.join("xtask/bench").join(script);
                assert!(py.is_file(), "{}: {}", r.id, py.display());
            }
        }
        let quick: Vec<&str> = quick_rows().iter().map(|r| r.id).collect();
        assert_eq!(quick, ["1a", "5", "7 T=512"]);
    }
}
