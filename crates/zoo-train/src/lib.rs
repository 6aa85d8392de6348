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
//! - [`fit()`]: atomic checkpoints, `resume` (the run continues with the same batches it
//!   would have seen), no silent replacing of an earlier run, a NaN guard that stops with
//!   the step named, per-round `metrics.csv` (from the learner's event stream) and
//!   `metrics.png`.
//!
//! ```no_run
//! use burn::data::dataloader::batcher::Batcher;
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::tensor::{Device, Tensor, TensorData};
//! use zoo_train::{
//!     ClassLogits, ClassificationBatch, ClassificationTask, FitOptions, ModelError, TrainConfig, fit,
//! };
//!
//! /// Which side of the diagonal a point lies on, learned by one linear layer.
//! #[derive(Module, Debug)]
//! struct Side {
//!     fc: Linear,
//! }
//!
//! impl ClassLogits for Side {
//!     type Input = Tensor<2>;
//!     fn class_logits(&self, points: Tensor<2>) -> Result<Tensor<2>, ModelError> {
//!         Ok(self.fc.forward(points)) // [B, 2] -> [B, 2]
//!     }
//! }
//!
//! /// Stacks `(point, class)` items into a batch.
//! #[derive(Clone)]
//! struct Points;
//!
//! impl Batcher<([f32; 2], usize), ClassificationBatch<Tensor<2>>> for Points {
//!     fn batch(&self, items: Vec<([f32; 2], usize)>, device: &Device) -> ClassificationBatch<Tensor<2>> {
//!         let n = items.len();
//!         let xy: Vec<f32> = items.iter().flat_map(|(p, _)| *p).collect();
//!         let class: Vec<i64> = items.iter().map(|(_, c)| *c as i64).collect();
//!         ClassificationBatch::new(
//!             Tensor::from_data(TensorData::new(xy, [n, 2]), device),
//!             Tensor::from_data(TensorData::new(class, [n]), device),
//!         )
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let points = |n: usize, seed: usize| -> Vec<([f32; 2], usize)> {
//!     (0..n)
//!         .map(|i| {
//!             let p = [((i * 37 + seed) % 101) as f32 / 101.0, ((i * 59 + seed) % 103) as f32 / 103.0];
//!             (p, usize::from(p[0] > p[1]))
//!         })
//!         .collect()
//! };
//! let device = zoo_device::select(zoo_device::BackendName::Flex)?;
//! let mut cfg = TrainConfig::steps(300, 100, "artifacts/side");
//! cfg.devices = vec!["flex".into()]; // the --device name of `device`, recorded in config.json
//! cfg.batch_size = 16;
//! cfg.lr = 1e-2;
//! device.seed(1); // the weights are drawn here, before fit
//! let model = Side { fc: LinearConfig::new(2, 2).init(&device.clone().autodiff()) };
//! let out = fit(
//!     ClassificationTask::new(model),
//!     points(2000, 1), // training items
//!     points(400, 2),  // validation items
//!     Points,
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

pub mod args;
mod checkpoint;
pub mod config;
mod error;
pub mod fit;
pub mod loader;
mod lock;
pub mod plot;
pub mod render;
pub mod schedule;
pub mod task;

pub use args::TrainArgs;
pub use checkpoint::{AtomicFileCheckpointer, last_complete_checkpoint};
pub use config::{RunLength, RunPlan, Strategy, TrainConfig};
pub use error::{Result, TrainError, write_atomic};
pub use fit::{FitOptions, FitResult, Task, fit, fit_datasets, read_metrics_table};
pub use render::{Progress, RoundMetrics, SplitReport};
pub use schedule::WarmupCosine;
pub use task::{
    CausalLmBatch, CausalLmTask, ClassLogits, ClassificationBatch, ClassificationTask,
    Distillation, ModelError, NanGuard, Seq2SeqBatch, Seq2SeqLogits, Seq2SeqTask, TokenLogits,
};
