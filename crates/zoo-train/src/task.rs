//! Task adapters: wrapper modules that implement burn-train's `TrainStep` and
//! `InferenceStep` for the families' models (the orphan rule keeps those impls out of
//! the family crates).

use std::sync::{Arc, Mutex};

use burn::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Bool, Int, Tensor};
use burn::train::{
    ClassificationOutput, InferenceStep, Interrupter, SequenceOutput, TrainOutput, TrainStep,
};
use zoo_data::{CausalLmBatch, Seq2SeqBatch};

/// A model that maps token ids `[B, T]` to logits `[B, T, V]`: causal or masked LM.
pub trait TokenLogits: Module + burn::module::ModuleDisplay + 'static {
    /// # Shapes
    /// - `tokens`: `[B, T]` -> `[B, T, V]`
    fn token_logits(&self, tokens: Tensor<2, Int>) -> Tensor<3>;
}

impl TokenLogits for zoo_decoder::DecoderLm {
    fn token_logits(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.forward(zoo_decoder::DecoderInput::new(tokens))
            .expect("batches are built from the model's own vocabulary and block size")
            .logits
    }
}

/// An encoder-decoder that maps a source and the decoder's input (teacher forcing) to
/// next-token logits.
pub trait Seq2SeqLogits: Module + burn::module::ModuleDisplay + 'static {
    /// # Shapes
    /// - `src`: `[B, S]`, `src_padding`: `[B, S]` (`true` at padding), `tgt_in`: `[B, T]`
    /// - returns `[B, T, V]`
    fn seq2seq_logits(
        &self,
        src: Tensor<2, Int>,
        src_padding: Tensor<2, Bool>,
        tgt_in: Tensor<2, Int>,
    ) -> Tensor<3>;
}

/// A model that maps a batch of inputs to class logits `[B, C]`.
pub trait ClassLogits: Module + burn::module::ModuleDisplay + 'static {
    /// The model's input (token ids, features, images).
    type Input: Clone + Send + 'static;
    /// # Shapes
    /// - returns `[B, C]`
    fn class_logits(&self, input: Self::Input) -> Tensor<2>;
}

/// Stops training on the first NaN or infinite loss and remembers where.
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

    /// The step (1-based) and value of the first non-finite loss, if any.
    pub fn tripped(&self) -> Option<(usize, f32)> {
        self.state.lock().expect("guard lock").tripped
    }

    /// Steps seen so far.
    pub fn steps(&self) -> usize {
        self.state.lock().expect("guard lock").steps
    }
}

/// Causal (or masked) language modelling over [`CausalLmBatch`]es: cross-entropy on the
/// positions the batch's target mask marks, so padding never counts. Its output feeds
/// loss, perplexity and accuracy over those positions only.
#[derive(Module, Debug)]
pub struct CausalLmTask<M: TokenLogits> {
    /// The model.
    pub model: M,
    #[module(skip)]
    guard: Option<Arc<NanGuard>>,
}

/// Cross-entropy over the positions `mask` marks, with their logits `[1, N, V]` and
/// targets `[1, N]`, so padding never enters the loss or the metrics.
fn counted_positions(
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
    let targets = targets.reshape([b * t]).select(0, idx); // [N]
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits.clone(), targets.clone());
    SequenceOutput {
        loss,
        logits: logits.reshape([1, n, v]),
        predictions: None,
        targets: targets.reshape([1, n]),
    }
}

impl<M: TokenLogits> CausalLmTask<M> {
    /// Wraps a model.
    pub fn new(model: M) -> Self {
        Self { model, guard: None }
    }

    /// Loss and the counted positions' logits and targets.
    pub fn forward(&self, batch: CausalLmBatch) -> SequenceOutput {
        let logits = self.model.token_logits(batch.inputs);
        counted_positions(logits, batch.targets, batch.target_mask)
    }
}

fn guarded_optimize<T: Module>(
    task: T,
    guard: Option<&Arc<NanGuard>>,
    optim: &mut ModuleOptimizer,
    lr: ModuleLearningRate,
    grads: GradientsParams,
) -> T {
    // After a non-finite loss the weights stay as they were: the last good ones.
    if guard.is_some_and(|g| g.tripped().is_some()) {
        return task;
    }
    optim.step(lr, task, grads)
}

/// A batch for classification: the model's input and one class per example.
#[derive(Debug, Clone)]
pub struct ClassificationBatch<X> {
    /// The model's input.
    pub inputs: X,
    /// `[B]` class ids.
    pub targets: Tensor<1, Int>,
}

/// Sequence or image classification with cross-entropy and accuracy.
#[derive(Module, Debug)]
pub struct ClassificationTask<M: ClassLogits> {
    /// The model.
    pub model: M,
    #[module(skip)]
    guard: Option<Arc<NanGuard>>,
}

impl<M: ClassLogits> ClassificationTask<M> {
    /// Wraps a model.
    pub fn new(model: M) -> Self {
        Self { model, guard: None }
    }

    /// Loss, logits and targets.
    pub fn forward(&self, batch: ClassificationBatch<M::Input>) -> ClassificationOutput {
        let output = self.model.class_logits(batch.inputs);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput {
            loss,
            output,
            targets: batch.targets,
        }
    }
}

/// Sequence-to-sequence training with teacher forcing: cross-entropy, token accuracy and
/// perplexity over the real target tokens (EOS included, padding excluded).
#[derive(Module, Debug)]
pub struct Seq2SeqTask<M: Seq2SeqLogits> {
    /// The model.
    pub model: M,
    #[module(skip)]
    guard: Option<Arc<NanGuard>>,
}

impl<M: Seq2SeqLogits> Seq2SeqTask<M> {
    /// Wraps a model.
    pub fn new(model: M) -> Self {
        Self { model, guard: None }
    }

    /// Loss and the counted positions' logits and targets.
    pub fn forward(&self, batch: Seq2SeqBatch) -> SequenceOutput {
        let logits = self
            .model
            .seq2seq_logits(batch.src, batch.src_padding, batch.tgt_in);
        counted_positions(logits, batch.tgt_out, batch.tgt_mask)
    }
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
    ($task:ident, $bound:path, $input:ty, $output:ty) => {
        impl<M: $bound> TrainStep for $task<M> {
            type Input = $input;
            type Output = $output;

            fn step(&self, batch: $input) -> TrainOutput<$output> {
                let out = self.forward(batch);
                if let Some(g) = &self.guard {
                    g.observe(out.loss.clone().into_scalar::<f32>());
                }
                TrainOutput::new(self, out.loss.backward(), out)
            }

            fn optimize(
                self,
                optim: &mut ModuleOptimizer,
                lr: ModuleLearningRate,
                grads: GradientsParams,
            ) -> Self {
                let guard = self.guard.clone();
                guarded_optimize(self, guard.as_ref(), optim, lr, grads)
            }
        }

        impl<M: $bound> InferenceStep for $task<M> {
            type Input = $input;
            type Output = $output;

            fn step(&self, batch: $input) -> $output {
                self.forward(batch)
            }
        }

        impl<M: $bound> Guarded for $task<M> {
            fn guarded(mut self, guard: Arc<NanGuard>) -> Self {
                self.guard = Some(guard);
                self
            }
        }
    };
}

supervised_steps!(CausalLmTask, TokenLogits, CausalLmBatch, SequenceOutput);
supervised_steps!(Seq2SeqTask, Seq2SeqLogits, Seq2SeqBatch, SequenceOutput);
supervised_steps!(
    ClassificationTask,
    ClassLogits,
    ClassificationBatch<M::Input>,
    ClassificationOutput
);
