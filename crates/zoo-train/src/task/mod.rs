//! Task adapters: wrapper modules that implement burn-train's `TrainStep` and
//! `InferenceStep` over `zoo-core`'s model traits, so any model that implements one of
//! them trains here, whatever its family (the orphan rule keeps these impls out of the
//! family crates, and this crate depends on no family). One task per module:
//! [`CausalLmTask`], [`ClassificationTask`] and [`Seq2SeqTask`]; the NaN guard and the
//! steps they share are here.

use std::sync::{Arc, Mutex};

use burn::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Bool, Int, Tensor};
use burn::train::{
    ClassificationOutput, InferenceStep, Interrupter, SequenceOutput, TrainOutput, TrainStep,
};
pub use zoo_core::{
    CausalLmBatch, ClassLogits, ClassificationBatch, ModelError, Seq2SeqBatch, Seq2SeqLogits,
    TokenLogits,
};

mod causal_lm;
mod classification;
mod seq2seq;
#[cfg(test)]
mod tests;

pub use causal_lm::CausalLmTask;
pub use classification::{ClassificationTask, Distillation};
pub use seq2seq::Seq2SeqTask;

/// Stops training on the first NaN or infinite loss, or the first error of the model's
/// forward pass, and remembers where.
#[derive(Default)]
pub struct NanGuard {
    state: Mutex<GuardState>,
}

impl core::fmt::Debug for NanGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NanGuard")
            .field("steps", &self.steps())
            .field("tripped", &self.tripped())
            .finish()
    }
}

#[derive(Default)]
struct GuardState {
    steps: usize,
    tripped: Option<(usize, f32)>,
    failed: Option<(usize, String)>,
    interrupter: Option<Interrupter>,
}

impl NanGuard {
    /// A guard that stops the given training when it trips.
    pub fn new(interrupter: Interrupter) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(GuardState {
                interrupter: Some(interrupter),
                ..GuardState::default()
            }),
        })
    }

    /// Counts a step and checks its loss.
    fn observe(&self, loss: f32) {
        let mut s = self.state.lock().expect("guard lock");
        s.steps += 1;
        if !loss.is_finite() && s.tripped.is_none() {
            s.tripped = Some((s.steps, loss));
            if let Some(i) = &s.interrupter {
                i.stop(Some("non-finite loss"));
            }
        }
    }

    /// Records a failed forward pass and stops the training; whether a training watches
    /// this guard (it has one to stop).
    fn fail(&self, error: &ModelError) -> bool {
        let mut s = self.state.lock().expect("guard lock");
        s.steps += 1;
        if s.failed.is_none() {
            s.failed = Some((s.steps, error.to_string()));
            if let Some(i) = &s.interrupter {
                i.stop(Some("the model's forward pass failed"));
            }
        }
        s.interrupter.is_some()
    }

    /// The step (1-based) and message of the first failed forward pass, if any.
    pub fn failed(&self) -> Option<(usize, String)> {
        self.state.lock().expect("guard lock").failed.clone()
    }

    /// The step (1-based) and value of the first non-finite loss, if any.
    pub fn tripped(&self) -> Option<(usize, f32)> {
        self.state.lock().expect("guard lock").tripped
    }

    /// Steps seen so far.
    pub fn steps(&self) -> usize {
        self.state.lock().expect("guard lock").steps
    }
}

/// Cross-entropy over the positions `mask` marks, with their logits `[1, N, V]` and
/// targets `[1, N]`, so padding never enters the loss or the metrics.
pub(crate) fn counted_positions(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    mask: Tensor<2, Bool>,
) -> SequenceOutput {
    let [b, t, v] = logits.dims();
    // Keep only the positions whose target counts: [N]
    let idx = mask.reshape([b * t]).argwhere();
    let n = idx.dims()[0];
    let idx = idx.reshape([n]);
    let logits = logits.reshape([b * t, v]).select(0, idx.clone()); // [N, V]
    counted_logits(logits, targets, idx)
}

/// The loss of logits `[N, V]` already kept at the flattened positions `idx` `[N]` of
/// `targets` `[B, T]`.
pub(crate) fn counted_logits(
    logits: Tensor<2>,
    targets: Tensor<2, Int>,
    idx: Tensor<1, Int>,
) -> SequenceOutput {
    let [b, t] = targets.dims();
    let [n, v] = logits.dims();
    let targets = targets.reshape([b * t]).select(0, idx); // [N]
    let loss = zoo_kernels::loss::cross_entropy(logits.clone(), targets.clone(), None);
    SequenceOutput {
        loss,
        logits: logits.reshape([1, n, v]),
        predictions: None,
        targets: targets.reshape([1, n]),
    }
}

fn guarded_optimize<T: Module>(
    task: T,
    guard: &NanGuard,
    optim: &mut ModuleOptimizer,
    lr: ModuleLearningRate,
    grads: GradientsParams,
) -> T {
    // After a non-finite loss or a failed step the weights stay as they were: the last
    // good ones.
    if guard.tripped().is_some() || guard.failed().is_some() {
        return task;
    }
    optim.step(lr, task, grads)
}

/// Attaches the guard to a task before training.
pub trait Guarded {
    /// Returns the task watched by `guard`.
    fn guarded(self, guard: Arc<NanGuard>) -> Self;
}

/// Implements `TrainStep`, `InferenceStep` and [`Guarded`] for a task wrapper with a
/// `forward(batch) -> output` method and a `guard` field: the loss is checked by the
/// guard, and a tripped guard skips the optimiser step.
macro_rules! supervised_steps {
    ($task:ident, $bound:path, $input:ty, $output:ty, $placeholder:path) => {
        impl<M: $bound> TrainStep for $task<M> {
            type Input = $input;
            type Output = $output;

            fn step(&self, batch: $input) -> TrainOutput<$output> {
                let out = match self.train_forward(batch) {
                    Ok(out) => out,
                    Err(e) => {
                        // Stop the run and hand the learner an empty step; `fit` reports
                        // the error once the learner has stopped.
                        // No gradients: the guard skips the optimiser step anyway.
                        let item =
                            failed_step(&self.guard, &e, $placeholder, &self.model.devices()[0]);
                        return TrainOutput {
                            grads: GradientsParams::new(),
                            item,
                        };
                    }
                };
                self.guard.observe(out.loss.clone().into_scalar::<f32>());
                TrainOutput::new(self, out.loss.backward(), out)
            }

            fn optimize(
                self,
                optim: &mut ModuleOptimizer,
                lr: ModuleLearningRate,
                grads: GradientsParams,
            ) -> Self {
                let guard = self.guard.clone();
                guarded_optimize(self, &guard, optim, lr, grads)
            }
        }

        impl<M: $bound> InferenceStep for $task<M> {
            type Input = $input;
            type Output = $output;

            fn step(&self, batch: $input) -> $output {
                match self.forward(batch) {
                    Ok(out) => out,
                    Err(e) => failed_step(&self.guard, &e, $placeholder, &self.model.devices()[0]),
                }
            }
        }

        impl<M: $bound> Guarded for $task<M> {
            fn guarded(mut self, guard: Arc<NanGuard>) -> Self {
                self.guard = guard;
                self
            }
        }

        impl<M: $bound> $task<M> {
            /// The step (1-based, counted by this task's guard) and message of the first
            /// forward pass that failed in a step of burn-train's traits. `TrainStep` and
            /// `InferenceStep` cannot return an error: outside [`crate::fit()`] such a step
            /// logs the error, records it here and returns an output whose loss is NaN.
            /// Inside `fit` the run stops and `fit` returns the error.
            pub fn failure(&self) -> Option<(usize, String)> {
                self.guard.failed()
            }
        }
    };
}

/// A step whose forward pass failed: the guard records the error. In a training the guard
/// stops the run (the learner needs an output to carry on to its stop, so it gets the
/// placeholder, whose zero loss moves no weight) and `fit` reports the error. Outside one
/// nothing watches the guard: the error is logged, and the placeholder's loss is NaN, so
/// no metric reads the failure as a perfect score.
fn failed_step<O>(
    guard: &NanGuard,
    error: &ModelError,
    placeholder: fn(&burn::tensor::Device, f32) -> O,
    device: &burn::tensor::Device,
) -> O {
    if guard.fail(error) {
        placeholder(device, 0.0)
    } else {
        log::error!("the model's forward pass failed: {error}");
        placeholder(device, f32::NAN)
    }
}

/// An empty sequence output: `loss` over one position of one class.
fn empty_sequence_output(device: &burn::tensor::Device, loss: f32) -> SequenceOutput {
    SequenceOutput {
        loss: Tensor::full([1], loss, device),
        logits: Tensor::zeros([1, 1, 1], device),
        predictions: None,
        targets: Tensor::zeros([1, 1], device),
    }
}

/// An empty classification output: `loss` over one example of one class.
fn empty_classification_output(device: &burn::tensor::Device, loss: f32) -> ClassificationOutput {
    ClassificationOutput {
        loss: Tensor::full([1], loss, device),
        output: Tensor::zeros([1, 1], device),
        targets: Tensor::zeros([1], device),
    }
}

supervised_steps!(
    CausalLmTask,
    TokenLogits,
    CausalLmBatch,
    SequenceOutput,
    empty_sequence_output
);
supervised_steps!(
    Seq2SeqTask,
    Seq2SeqLogits,
    Seq2SeqBatch,
    SequenceOutput,
    empty_sequence_output
);
supervised_steps!(
    ClassificationTask,
    ClassLogits,
    ClassificationBatch<M::Input>,
    ClassificationOutput,
    empty_classification_output
);
