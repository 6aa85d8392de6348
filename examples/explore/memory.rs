//! The memory wall: the attention matrix of one head holds T² scores, so its memory grows
//! with the square of the length. First the arithmetic (f32, one head, one layer), then
//! measurements: causal attention of one head of 64 over T positions, through the
//! reference path (scores, mask and softmax as whole T × T tensors) and the
//! memory-efficient path (blocks of 128 × 128 with an online softmax), each in a fresh
//! process whose peak resident memory beyond its inputs is read from the kernel.

use std::process::Command;
use std::time::Instant;

use burn::tensor::{Device, Distribution, Tensor};
use zoo_attention::Mask;
use zoo_attention::sdpa::{attention_chunked, attention_reference};
use zoo_examples::Error;

/// The tutorials' lengths; the last (128,000) is computed only.
const LENGTHS: [usize; 5] = [512, 2048, 8192, 32768, 128_000];

/// `VmRSS` or `VmHWM` of this process, in bytes.
fn status_bytes(field: &str) -> Result<u64, Error> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| format!("no {field} in /proc/self/status"))?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("cannot read {line:?}"))?;
    Ok(kib * 1024)
}

/// Measures one path at one length in this process and prints `peak_mib time_ms`.
pub fn run_one(args: &[String], device: &Device) -> Result<(), Error> {
    let [path, t] = args else {
        return Err("--one takes a path and a length".into());
    };
    let t: usize = t.parse().map_err(|_| format!("bad length {t:?}"))?;
    device.seed(0);
    let qkv = || Tensor::<4>::random([1, 1, t, 64], Distribution::Normal(0.0, 1.0), device);
    let (q, k, v) = (qkv(), qkv(), qkv());
    let _ = q.clone().slice([0..1, 0..1, 0..1, 0..1]).into_data();
    let baseline = status_bytes("VmRSS:")?;
    // Writing 5 to clear_refs resets the high-water mark to the current RSS (Linux).
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| format!("cannot reset the peak RSS: {e}"))?;
    let started = Instant::now();
    let out = match path.as_str() {
        "reference" => attention_reference(q, k, v, &Mask::causal(), None, None)?.0,
        "chunked" => attention_chunked(q, k, v, &Mask::causal(), None, 128, 128)?,
        other => return Err(format!("unknown path {other:?}").into()),
    };
    let _ = out.slice([0..1, 0..1, 0..1, 0..1]).into_data();
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let peak = status_bytes("VmHWM:")?.saturating_sub(baseline);
    println!("{:.1} {ms:.1}", peak as f64 / (1024.0 * 1024.0));
    Ok(())
}

fn measure(path: &str, t: usize, device_name: &str) -> Option<(f64, f64)> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe)
        .args([
            "memory",
            "--one",
            path,
            &t.to_string(),
            "--device",
            device_name,
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

pub fn run(max_len: usize, device_name: &str, _device: &Device) -> Result<(), Error> {
    println!("the attention matrix of one head, one layer, f32 (computed):");
    println!("| T | scores T² | MB per head | × the memory at 512 | a 12-head layer |");
    println!("|---|---|---|---|---|");
    for t in LENGTHS {
        let n2 = (t as f64) * (t as f64);
        let mb = n2 * 4.0 / 1e6;
        println!(
            "| {t} | {} | {mb:.2} | {:.0} | {:.2} GB |",
            n2 as u64,
            n2 / (512.0 * 512.0),
            12.0 * mb / 1e3
        );
    }
    println!(
        "\nmeasured on {device_name}: causal attention, one head of 64, peak resident memory beyond q, k and v:"
    );
    println!(
        "| T | reference: peak MiB | reference: time | memory-efficient: peak MiB | memory-efficient: time |"
    );
    println!("|---|---|---|---|---|");
    for t in LENGTHS.into_iter().filter(|&t| t <= max_len) {
        let cell = |path| match measure(path, t, device_name) {
            Some((mib, ms)) => (format!("{mib:.1}"), format!("{:.2} s", ms / 1e3)),
            None => ("did not fit".into(), "-".into()),
        };
        let (rm, rt) = cell("reference");
        let (cm, ct) = cell("chunked");
        println!("| {t} | {rm} | {rt} | {cm} | {ct} |");
    }
    Ok(())
}
