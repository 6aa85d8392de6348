//! # zoo-train
//!
//! The one learner every family trains with, built on burn-train 0.22's
//! `SupervisedTraining`:
//!
//! - task adapters ([`CausalLmTask`] for causal and masked LM, [`Seq2SeqTask`] with teacher
//!   forcing, [`ClassificationTask`] for sequences and images) that implement `TrainStep`
//!   and `InferenceStep` for a family's model, with the right loss and metrics;
//! - [`TrainConfig`]: epochs, batch size, AdamW, warmup then cosine decay, clipping,
//!   accumulation, seed, artifact folder, checkpoint retention, early stopping and the
//!   device strategy; saved as `config.json`;
//! - [`fit`]: atomic checkpoints, `resume`, a NaN guard that stops with the step named,
//!   and per-epoch `metrics.csv`.
#![warn(missing_docs)]

pub mod config;
mod error;
pub mod fit;
pub mod render;
pub mod schedule;
pub mod task;
pub mod toy;

pub use config::{Strategy, TrainConfig};
pub use error::{Result, TrainError, write_atomic};
pub use fit::{FitOptions, FitResult, Task, fit, last_complete_checkpoint};
pub use render::SplitReport;
pub use schedule::WarmupCosine;
pub use task::{
    CausalLmTask, ClassLogits, ClassificationBatch, ClassificationTask, NanGuard, Seq2SeqLogits,
    Seq2SeqTask, TokenLogits,
};
