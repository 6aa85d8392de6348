//! What LoRA saves in the optimiser: GPT-2 small (`DecoderConfig::gpt2_small()`, random
//! weights, no dropout) trained with AdamW on `--batch 4` rows of `--len 128` ids, fully
//! and with LoRA of rank `--rank 8` (alpha 16) on `c_attn`, as `zoo train --lora-rank 8`
//! adapts it (Burn's `apply_lora`).
//!
//! For each: the trained parameters; the optimiser's state, measured as the bytes live
//! after the first step beyond those live before it (the step replaces the model's
//! tensors by ones of the same size, and drops its gradients), counted by the bench
//! programs' allocator; and the median time of `--runs` later steps. Run it on flex, the
//! backend whose memory the allocator sees.
//!
//! `cargo xtask bench adapters [--rank 8] [--batch 4] [--len 128] [--runs 3]`

use std::time::Instant;

use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use zoo_bench::{ALLOC, lm_loss};
use zoo_core::checkpoint::peft;
use zoo_decoder::{DecoderConfig, DecoderLm, HfDecoderConfig};

mod cli;
use cli::{or_exit, parse_and_start};

/// AdamW's state and step time, full fine-tuning against LoRA.
#[derive(Debug, Parser)]
struct Args {
    /// LoRA's rank.
    #[arg(long, default_value_t = 8, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    rank: usize,
    /// Rows per batch.
    #[arg(long, default_value_t = 4, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    /// Tokens per row.
    #[arg(long, default_value_t = 128, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    len: usize,
    #[command(flatten)]
    common: zoo_bench::Common,
}

const MIB: f64 = 1024.0 * 1024.0;

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    // GPT-2's checkpoint names, for LoRA's `c_attn`: the key map of a GPT-2 config.
    let dir = std::env::temp_dir().join(format!("zoo-bench-adapters-{}", std::process::id()));
    or_exit(std::fs::create_dir_all(&dir));
    let config = r#"{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
        "n_head": 12, "n_positions": 1024}"#;
    or_exit(std::fs::write(dir.join("config.json"), config));
    let map = or_exit(HfDecoderConfig::from_pretrained(&dir)).key_map();
    let _ = std::fs::remove_dir_all(&dir);

    let cfg = DecoderConfig::gpt2_small().with_dropout(0.0);
    let (b, t, v) = (args.batch, args.len, cfg.vocab_size);
    let ad = device.autodiff();
    let ids: Vec<i64> = (0..b * (t + 1))
        .map(|i| ((i * 7919 + 13) % (v - 1000) + 1000) as i64)
        .collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t + 1]), &ad);
    let inputs = tokens.clone().slice([0..b, 0..t]);
    let targets = tokens.slice([0..b, 1..t + 1]).reshape([b * t]);

    let mut rows = Vec::new();
    for lora in [false, true] {
        ad.seed(0);
        let mut model: DecoderLm = or_exit(cfg.init(&ad)).train();
        if lora {
            model = or_exit(peft::apply_lora(
                model,
                &map,
                args.rank,
                2.0 * args.rank as f64,
                &["c_attn".to_string()],
            ))
            .0;
        }
        let (trained, all) = peft::parameter_counts(&model);
        let mut optim = AdamWConfig::new().with_weight_decay(0.01).init();
        let mut step = |model: DecoderLm| -> (DecoderLm, f32) {
            let loss = lm_loss(&model, inputs.clone(), targets.clone());
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let model = optim.step(1e-4, model, grads);
            (model, loss.into_scalar::<f32>())
        };
        let before = ALLOC.live();
        let (mut model, _) = step(model);
        let state = ALLOC.live().saturating_sub(before) as f64 / MIB;
        let mut times = Vec::new();
        let mut loss = f32::NAN;
        for _ in 0..args.common.runs {
            let t0 = Instant::now();
            (model, loss) = step(model);
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        rows.push((lora, trained, all, state, times[times.len() / 2], loss));
    }
    let (_, _, _, full_state, full_ms, _) = rows[0];
    println!(
        "gpt2-small, AdamW, batch {b}x{t} on {} (median of {} steps):",
        args.common.device, args.common.runs
    );
    for (lora, trained, all, state, ms, loss) in rows {
        println!(
            "  {}: {trained} of {all} parameters trained ({:.2}%), optimiser state {state:.1} MiB ({:.2}% of full), step {ms:.0} ms ({:.2}x), loss {loss:.3}",
            if lora {
                format!("LoRA rank {} on c_attn", args.rank)
            } else {
                "full fine-tuning".to_string()
            },
            100.0 * trained as f64 / all as f64,
            100.0 * state / full_state,
            ms / full_ms,
        );
    }
}
