//! Times one AdamW masked-LM training step of the `bert-mlm` example's model (BERT, 4
//! layers, width 128, 4 heads, a 4,000-token vocabulary, dropout 0.1) with random
//! weights, on 32 passages of 64 ids of which 15% are chosen, in a fixed pattern:
//!
//! - `--head chosen`: the output layer runs over the chosen positions only
//!   (`TokenLogits::token_logits_at`), as `zoo-train`'s task does;
//! - `--head all`: the output layer runs over every position and the chosen rows are
//!   kept afterwards, as the task did before.
//!
//! Both compute the same loss. Three warm-up steps, then the median of `--runs` steps.
//! There is no PyTorch counterpart: this compares the zoo with itself.
//!
//! `cargo xtask bench mlm [--head chosen|all] [--runs 5] [--threads 2] [--device flex]`

use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use clap::{Parser, ValueEnum};
use zoo_core::TokenLogits;
use zoo_encoder::{BertConfig, BertForMaskedLm};
use zoo_kernels::loss::cross_entropy;

mod cli;
use cli::{or_exit, parse_and_start, time_training};

const VOCAB: usize = 4000;
const BATCH: usize = 32;
const LEN: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Head {
    /// The output layer over the chosen positions only.
    Chosen,
    /// The output layer over every position, then the chosen rows.
    All,
}

/// Times one masked-LM training step.
#[derive(Debug, Parser)]
struct Args {
    /// Where the output layer runs.
    #[arg(long, value_enum, default_value_t = Head::Chosen)]
    head: Head,
    #[command(flatten)]
    common: zoo_bench::Common,
}

fn main() {
    let (args, device) = parse_and_start(|a: &Args| &a.common);
    let mut cfg = BertConfig::new(VOCAB, 128, 4, 4, 512);
    cfg.max_position_embeddings = LEN;
    let ad = device.clone().autodiff();
    ad.seed(0);
    let mut model = or_exit(BertForMaskedLm::new(&cfg, &ad)).train();
    let mut optim = AdamWConfig::new().with_weight_decay(0.01).init();
    let n = BATCH * LEN;
    let ids: Vec<i64> = (0..n).map(|i| ((i * 7919 + 13) % VOCAB) as i64).collect();
    // 15% of the positions, spread over every row.
    let chosen: Vec<bool> = (0..n).map(|i| (i * 37 + 11) % 100 < 15).collect();
    let rows: Vec<i64> = (0..n as i64).filter(|&i| chosen[i as usize]).collect();
    let targets: Vec<i64> = rows.iter().map(|&i| ids[i as usize]).collect();
    let m = rows.len();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [BATCH, LEN]), &ad);
    let padding = Tensor::<2, Bool>::from_data(TensorData::new(vec![false; n], [BATCH, LEN]), &ad);
    let keep = Tensor::<2, Bool>::from_data(TensorData::new(chosen, [BATCH, LEN]), &ad);
    let rows = Tensor::<1, Int>::from_data(TensorData::new(rows, [m]), &ad);
    let targets = Tensor::<1, Int>::from_data(TensorData::new(targets, [m]), &ad);
    let step = || {
        let logits = match args.head {
            Head::Chosen => {
                model.token_logits_at(tokens.clone(), Some(padding.clone()), keep.clone())
            }
            Head::All => model
                .token_logits(tokens.clone(), Some(padding.clone()))
                .map(|l| l.reshape([n, VOCAB]).select(0, rows.clone())),
        }
        .expect("a valid input");
        let loss = cross_entropy(logits, targets.clone(), None);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model.clone(), grads);
        loss.into_scalar::<f32>()
    };
    let what = format!(
        "masked-LM training step, head over {:?} positions ({m} of {n} chosen)",
        args.head
    );
    time_training(&args.common, &what, step);
}
