//! An RNN against attention, measured: Burn's LSTM walks the sequence one step at a time
//! (each step needs the previous hidden state), while one self-attention layer handles
//! every position in a few large matrix products, at a cost that grows with T². Both are
//! timed over T on the chosen backend, width 128, batch 8, inference.

use std::path::Path;
use std::time::Instant;

use burn::nn::LstmConfig;
use burn::tensor::{Device, Distribution, Tensor};
use zoo_attention::{AttentionInput, MultiHeadAttentionConfig};
use zoo_examples::Error;
use zoo_train::plot::{LineChart, line_chart};

const D: usize = 128;
const BATCH: usize = 8;

/// Median wall time in ms of `runs` calls after one warm-up.
fn time(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

pub fn run(max_len: usize, device: &Device, out: &Path) -> Result<(), Error> {
    if max_len < 16 {
        return Err(format!("--max-len must be at least 16, got {max_len}").into());
    }
    device.seed(0);
    let lstm = LstmConfig::new(D, D, true).init(device);
    let attn = MultiHeadAttentionConfig::new(D, 4).init(device)?;
    let lengths: Vec<usize> = std::iter::successors(Some(16usize), |t| Some(t * 4))
        .take_while(|&t| t <= max_len)
        .collect();
    println!(
        "LSTM (width {D}) against one self-attention layer (width {D}, 4 heads), batch {BATCH}:"
    );
    println!(
        "| T | LSTM, step by step (ms) | attention, all positions at once (ms) | LSTM / attention |"
    );
    println!("|---|---|---|---|");
    let (mut rnn_pts, mut attn_pts) = (Vec::new(), Vec::new());
    let mut crossover = None;
    for &t in &lengths {
        let x = Tensor::<3>::random([BATCH, t, D], Distribution::Normal(0.0, 1.0), device);
        let runs = if t >= 1024 { 3 } else { 5 };
        let rnn_ms = time(runs, || {
            let (h, _) = lstm.forward(x.clone(), None);
            let _ = h.slice([0..1, 0..1, 0..1]).into_data();
        });
        let attn_ms = time(runs, || {
            let o = attn
                .forward(AttentionInput::new(x.clone()))
                .expect("a valid input");
            let _ = o.context.slice([0..1, 0..1, 0..1]).into_data();
        });
        println!(
            "| {t} | {rnn_ms:.2} | {attn_ms:.2} | {:.2} |",
            rnn_ms / attn_ms
        );
        if crossover.is_none() && attn_ms > rnn_ms {
            crossover = Some(t);
        }
        rnn_pts.push((t as f64, rnn_ms));
        attn_pts.push((t as f64, attn_ms));
    }
    match crossover {
        Some(t) => println!(
            "crossover: from T = {t} on (of those timed), the attention layer took longer than the LSTM"
        ),
        None => println!(
            "no crossover up to T = {}: the attention layer was faster at every length timed",
            lengths.last().copied().unwrap_or(16)
        ),
    }
    let png = line_chart(
        &out.join("rnn-vs-attention.png"),
        &LineChart {
            title: format!("LSTM steps vs one attention layer (d {D}, batch {BATCH})"),
            x_desc: "sequence length T".into(),
            y_desc: "ms per forward pass".into(),
            series: vec![
                ("LSTM (sequential)".into(), rnn_pts),
                ("self-attention (parallel)".into(), attn_pts),
            ],
            log_x: true,
            log_y: true,
        },
    )?;
    println!("log-log plot: {}", png.display());
    Ok(())
}
