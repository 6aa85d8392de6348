//! # zoo-train
//!
//! The one learner every family trains with, built on burn-train 0.22's
//! `SupervisedTraining`:
//!
//! - task adapters ([`CausalLmTask`] for causal and masked LM, [`Seq2SeqTask`] with teacher
//!   forcing, [`ClassificationTask`] for sequences and images) that implement `TrainStep`
//!   and `InferenceStep` for a family's model, with the right loss and metrics;
//! - [`TrainConfig`]: epochs or steps, batch size, AdamW, warmup then cosine decay,
//!   clipping, accumulation, seed, artifact folder, checkpoint retention, early stopping
//!   and the device strategy (single, multi-device or DDP); saved as `config.json`;
//! - [`fit`]: atomic checkpoints, `resume` (the run continues with the same batches it
//!   would have seen), a NaN guard that stops with the step named, per-round
//!   `metrics.csv` and `metrics.png`.
//!
//! ```no_run
//! use zoo_train::toy::{BlobBatcher, Mlp, blobs};
//! use zoo_train::{ClassificationTask, FitOptions, TrainConfig, fit};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = zoo_device::select(zoo_device::BackendName::Flex)?;
//! let mut cfg = TrainConfig::steps(300, 100, "artifacts/blobs");
//! cfg.batch_size = 16;
//! cfg.lr = 1e-2;
//! let model = Mlp::new(16, 64, 4, &device.clone().autodiff());
//! let out = fit(
//!     ClassificationTask::new(model),
//!     blobs(2000, 4, 16, 1, &[]),
//!     blobs(400, 4, 16, 2, &[]),
//!     BlobBatcher,
//!     &cfg,
//!     &[device],
//!     FitOptions::default(),
//! )?;
//! assert_eq!(out.epochs.len(), 3);
//! assert!(out.metrics_csv.ends_with("metrics.csv"));
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod config;
mod error;
pub mod fit;
pub mod loader;
pub mod plot;
pub mod render;
pub mod schedule;
pub mod task;
pub mod toy;

pub use config::{RunLength, RunPlan, Strategy, TrainConfig};
pub use error::{Result, TrainError, write_atomic};
pub use fit::{FitOptions, FitResult, Task, fit, fit_datasets, last_complete_checkpoint};
pub use render::{Progress, SplitReport};
pub use schedule::WarmupCosine;
pub use task::{
    CausalLmTask, ClassLogits, ClassificationBatch, ClassificationTask, NanGuard, Seq2SeqLogits,
    Seq2SeqTask, TokenLogits,
};
