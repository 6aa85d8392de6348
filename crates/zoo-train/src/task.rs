//! Task adapters: wrapper modules that implement burn-train's `TrainStep` and
//! `InferenceStep` over `zoo-core`'s model traits, so any model that implements one of
//! them trains here, whatever its family (the orphan rule keeps these impls out of the
//! family crates, and this crate depends on no family).

use std::sync::{Arc, Mutex};

use burn::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, Int, Tensor};
use burn::train::{
    ClassificationOutput, InferenceStep, Interrupter, SequenceOutput, TrainOutput, TrainStep,
};
pub use zoo_core::{
    CausalLmBatch, ClassLogits, ClassificationBatch, ModelError, Seq2SeqBatch, Seq2SeqLogits,
    TokenLogits,
};

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

    /// Records a failed forward pass and stops the training.
    fn fail(&self, error: &ModelError) {
        let mut s = self.state.lock().expect("guard lock");
        s.steps += 1;
        if s.failed.is_none() {
            s.failed = Some((s.steps, error.to_string()));
            if let Some(i) = &s.interrupter {
                i.stop(Some("the model's forward pass failed"));
            }
        }
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
    counted_logits(logits, targets, idx)
}

/// The loss of logits `[N, V]` already kept at the flattened positions `idx` `[N]` of
/// `targets` `[B, T]`.
fn counted_logits(
    logits: Tensor<2>,
    targets: Tensor<2, Int>,
    idx: Tensor<1, Int>,
) -> SequenceOutput {
    let [b, t] = targets.dims();
    let [n, v] = logits.dims();
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
    ///
    /// # Errors
    /// The model's own.
    pub fn forward(&self, batch: CausalLmBatch) -> Result<SequenceOutput, ModelError> {
        // Only the counted positions reach the output layer (all of them for a causal LM
        // but the padding; the chosen 15% for a masked LM).
        let idx = zoo_core::kept_rows(&batch.targets, &batch.target_mask)?;
        let logits =
            self.model
                .token_logits_at(batch.inputs, Some(batch.padding), batch.target_mask)?;
        Ok(counted_logits(logits, batch.targets, idx))
    }

    /// The training step's forward: the same as [`Self::forward`].
    ///
    /// # Errors
    /// The model's own.
    pub fn train_forward(&self, batch: CausalLmBatch) -> Result<SequenceOutput, ModelError> {
        self.forward(batch)
    }
}

fn guarded_optimize<T: Module>(
    task: T,
    guard: Option<&Arc<NanGuard>>,
    optim: &mut ModuleOptimizer,
    lr: ModuleLearningRate,
    grads: GradientsParams,
) -> T {
    // After a non-finite loss or a failed step the weights stay as they were: the last
    // good ones.
    if guard.is_some_and(|g| g.tripped().is_some() || g.failed().is_some()) {
        return task;
    }
    optim.step(lr, task, grads)
}

/// The mean over the batch of `KL(softmax(teacher / τ) ‖ softmax(student / τ))`, for
/// logits `[B, K]`; the teacher's side carries no gradient. `[1]`.
fn distillation_kl(student: Tensor<2>, teacher: Tensor<2>, temperature: f32) -> Tensor<1> {
    let [b, _] = student.dims();
    let t = f64::from(temperature);
    let log_q = log_softmax(student / t, 1);
    let log_p = log_softmax(teacher.detach() / t, 1);
    let p = log_p.clone().exp();
    (p * (log_p - log_q)).sum().reshape([1]) / b as f64
}

/// Sequence or image classification with cross-entropy and accuracy.
#[derive(Module, Debug)]
pub struct ClassificationTask<M: ClassLogits> {
    /// The model.
    pub model: M,
    #[module(skip)]
    guard: Option<Arc<NanGuard>>,
    #[module(skip)]
    label_smoothing: Option<f32>,
    #[module(skip)]
    distillation: Option<Distillation>,
}

/// Knowledge distillation's settings (Hinton et al., 2015): the share of the loss that
/// matches the teacher, and the temperature that softens both distributions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distillation {
    /// Share of the training loss given to the teacher term, in `(0, 1]`.
    pub weight: f32,
    /// Temperature `τ > 0` of both softmaxes in the teacher term.
    pub temperature: f32,
}

impl<M: ClassLogits> ClassificationTask<M> {
    /// Wraps a model.
    pub fn new(model: M) -> Self {
        Self {
            model,
            guard: None,
            label_smoothing: None,
            distillation: None,
        }
    }

    /// Trains against a teacher as well as the labels (Hinton et al., 2015): the training
    /// loss becomes `(1 - weight) · CE(student, labels) + weight · τ² · KL(softmax(teacher
    /// / τ) ‖ softmax(student / τ))`, with the teacher's logits from each training batch
    /// ([`ClassificationBatch::with_teacher_logits`]). The `τ²` keeps the teacher term's
    /// gradients on the scale of the label term's. Validation reports the plain
    /// cross-entropy against the labels.
    ///
    /// # Errors
    /// A `weight` outside `(0, 1]` or a temperature that is not a positive number.
    pub fn with_distillation(mut self, weight: f32, temperature: f32) -> Result<Self, ModelError> {
        if !(weight > 0.0 && weight <= 1.0) {
            return Err(ModelError::msg(format!(
                "the distillation weight must be in (0, 1], got {weight}"
            )));
        }
        if !(temperature > 0.0 && temperature.is_finite()) {
            return Err(ModelError::msg(format!(
                "the distillation temperature must be a positive number, got {temperature}"
            )));
        }
        self.distillation = Some(Distillation {
            weight,
            temperature,
        });
        Ok(self)
    }

    /// Trains against smoothed labels (Szegedy et al., 2016): the target class gets
    /// `1 - alpha + alpha / K` and every other class `alpha / K`, for `K` classes. Only
    /// the training loss is smoothed; validation reports the plain cross-entropy.
    ///
    /// # Errors
    /// An `alpha` outside `[0, 1)`.
    pub fn with_label_smoothing(mut self, alpha: f32) -> Result<Self, ModelError> {
        if !(0.0..1.0).contains(&alpha) {
            return Err(ModelError::msg(format!(
                "label smoothing must be in [0, 1), got {alpha}"
            )));
        }
        self.label_smoothing = (alpha > 0.0).then_some(alpha);
        Ok(self)
    }

    /// Loss (the plain cross-entropy), logits and targets.
    ///
    /// # Errors
    /// The model's own.
    pub fn forward(
        &self,
        batch: ClassificationBatch<M::Input>,
    ) -> Result<ClassificationOutput, ModelError> {
        self.forward_with(batch, None)
    }

    /// As [`Self::forward`], with the training loss: smoothed when the task was built
    /// [`Self::with_label_smoothing`].
    ///
    /// # Errors
    /// The model's own.
    pub fn train_forward(
        &self,
        batch: ClassificationBatch<M::Input>,
    ) -> Result<ClassificationOutput, ModelError> {
        let teacher = batch.teacher_logits.clone();
        let mut out = self.forward_with(batch, self.label_smoothing)?;
        let Some(d) = self.distillation else {
            return Ok(out);
        };
        let teacher = teacher.ok_or_else(|| {
            ModelError::msg(
                "distillation needs the teacher's logits in every training batch, and this one has none",
            )
        })?;
        if teacher.dims() != out.output.dims() {
            return Err(ModelError::msg(format!(
                "the teacher's logits have shape {:?}, but the student's have {:?}",
                teacher.dims(),
                out.output.dims()
            )));
        }
        let kd = distillation_kl(out.output.clone(), teacher, d.temperature);
        let (w, t) = (f64::from(d.weight), f64::from(d.temperature));
        out.loss = out.loss * (1.0 - w) + kd * (w * t * t);
        Ok(out)
    }

    fn forward_with(
        &self,
        batch: ClassificationBatch<M::Input>,
        smoothing: Option<f32>,
    ) -> Result<ClassificationOutput, ModelError> {
        let output = self.model.class_logits(batch.inputs)?;
        let loss = CrossEntropyLossConfig::new()
            .with_smoothing(smoothing)
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        Ok(ClassificationOutput {
            loss,
            output,
            targets: batch.targets,
        })
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
    ///
    /// # Errors
    /// The model's own.
    pub fn forward(&self, batch: Seq2SeqBatch) -> Result<SequenceOutput, ModelError> {
        let logits = self
            .model
            .seq2seq_logits(batch.src, batch.src_padding, batch.tgt_in)?;
        Ok(counted_positions(logits, batch.tgt_out, batch.tgt_mask))
    }

    /// The training step's forward: the same as [`Self::forward`].
    ///
    /// # Errors
    /// The model's own.
    pub fn train_forward(&self, batch: Seq2SeqBatch) -> Result<SequenceOutput, ModelError> {
        self.forward(batch)
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
                        let item = failed_step(
                            self.guard.as_ref(),
                            &e,
                            $placeholder(&self.model.devices()[0]),
                        );
                        return TrainOutput {
                            grads: GradientsParams::new(),
                            item,
                        };
                    }
                };
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
                match self.forward(batch) {
                    Ok(out) => out,
                    Err(e) => failed_step(
                        self.guard.as_ref(),
                        &e,
                        $placeholder(&self.model.devices()[0]),
                    ),
                }
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

/// A step whose forward pass failed: the guard records the error and stops the run (the
/// learner needs an output to carry on to its stop, so it gets `placeholder`, whose zero
/// loss moves no weight). Without a guard nothing can report the error later, so it
/// panics with the error's message.
fn failed_step<O>(guard: Option<&Arc<NanGuard>>, error: &ModelError, placeholder: O) -> O {
    match guard {
        Some(g) => {
            g.fail(error);
            placeholder
        }
        None => panic!("the model's forward pass failed: {error}"),
    }
}

/// An empty sequence output: zero loss over one position of one class.
fn empty_sequence_output(device: &burn::tensor::Device) -> SequenceOutput {
    SequenceOutput {
        loss: Tensor::zeros([1], device),
        logits: Tensor::zeros([1, 1, 1], device),
        predictions: None,
        targets: Tensor::zeros([1, 1], device),
    }
}

/// An empty classification output: zero loss over one example of one class.
fn empty_classification_output(device: &burn::tensor::Device) -> ClassificationOutput {
    ClassificationOutput {
        loss: Tensor::zeros([1], device),
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Param;
    use burn::nn::{Embedding, EmbeddingConfig};
    use burn::tensor::TensorData;
    use zoo_device::test_device;

    /// Logits looked up from a table: token `i` -> row `i`, so losses are known by hand.
    #[derive(Module, Debug)]
    struct TableLogits {
        table: Embedding,
    }

    const TABLE: [[f32; 3]; 3] = [[2.0, 0.0, -1.0], [0.5, 0.5, 0.0], [-1.0, 1.0, 3.0]];

    impl TableLogits {
        fn new() -> Self {
            let mut table = EmbeddingConfig::new(3, 3).init(&test_device());
            let rows: Vec<f32> = TABLE.iter().flatten().copied().collect();
            table.weight = Param::from_tensor(Tensor::from_data(
                TensorData::new(rows, [3, 3]),
                &test_device(),
            ));
            Self { table }
        }
    }

    impl TokenLogits for TableLogits {
        fn token_logits(
            &self,
            tokens: Tensor<2, Int>,
            _padding: Option<Tensor<2, Bool>>,
        ) -> Result<Tensor<3>, ModelError> {
            Ok(self.table.forward(tokens))
        }
    }

    impl ClassLogits for TableLogits {
        type Input = Tensor<1, Int>;
        fn class_logits(&self, ids: Tensor<1, Int>) -> Result<Tensor<2>, ModelError> {
            let n = ids.dims()[0];
            if ids.clone().max().into_scalar::<i64>() >= 3 {
                return Err(ModelError::msg("class id out of range"));
            }
            Ok(self.table.forward(ids.reshape([1, n])).reshape([n, 3]))
        }
    }

    /// The loss of a classification forward that must succeed, in f64.
    fn loss_of(out: Result<ClassificationOutput, ModelError>) -> f64 {
        let Ok(out) = out else {
            panic!("the forward failed");
        };
        f64::from(out.loss.into_scalar::<f32>())
    }

    /// -log softmax(TABLE[input])[target], in f64.
    fn nll(input: usize, target: usize) -> f64 {
        let row = TABLE[input].map(f64::from);
        let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
        lse - row[target]
    }

    fn ints(v: &[i64], shape: [usize; 2]) -> Tensor<2, Int> {
        Tensor::from_data(TensorData::new(v.to_vec(), shape), &test_device())
    }

    fn mask(v: &[bool], shape: [usize; 2]) -> Tensor<2, Bool> {
        Tensor::from_data(TensorData::new(v.to_vec(), shape), &test_device())
    }

    #[test]
    fn lm_loss_is_the_mean_over_marked_positions_only() {
        let task = CausalLmTask::new(TableLogits::new());
        // Two rows of three; a masked-LM style mask marks three positions.
        let inputs = [0, 1, 2, 2, 0, 1];
        let targets = [1, 0, 2, 0, 2, 1];
        let marked = [true, false, true, false, false, true];
        let batch = |targets: &[i64]| CausalLmBatch {
            inputs: ints(&inputs, [2, 3]),
            padding: mask(&[false; 6], [2, 3]),
            targets: ints(targets, [2, 3]),
            target_mask: mask(&marked, [2, 3]),
        };
        let out = task.forward(batch(&targets)).unwrap();
        let expected = (nll(0, 1) + nll(2, 2) + nll(1, 1)) / 3.0;
        let loss = out.loss.into_scalar::<f32>();
        assert!(
            (f64::from(loss) - expected).abs() < 1e-5,
            "{loss} vs {expected}"
        );
        assert_eq!(zoo_device::testing::ints(out.targets), [1, 2, 1]);
        // Targets at unmarked positions do not matter.
        let other = task.forward(batch(&[1, 2, 2, 1, 0, 1])).unwrap();
        assert_eq!(other.loss.into_scalar::<f32>(), loss);
    }

    #[test]
    fn classification_loss_is_the_mean_cross_entropy() {
        let task = ClassificationTask::new(TableLogits::new());
        let ids =
            Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 2, 1], [3]), &test_device());
        let targets =
            Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2], [3]), &test_device());
        let out = task
            .forward(ClassificationBatch::new(ids, targets.clone()))
            .unwrap();
        let expected = (nll(0, 0) + nll(2, 1) + nll(1, 2)) / 3.0;
        let loss = f64::from(out.loss.into_scalar::<f32>());
        assert!((loss - expected).abs() < 1e-5, "{loss} vs {expected}");
    }

    #[test]
    fn label_smoothing_changes_the_training_loss_only() {
        let ids =
            || Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 2, 1], [3]), &test_device());
        let targets =
            || Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2], [3]), &test_device());
        let batch = || ClassificationBatch::new(ids(), targets());
        let alpha = 0.1f32;
        let task = ClassificationTask::new(TableLogits::new())
            .with_label_smoothing(alpha)
            .unwrap();
        // (1 - alpha) * NLL(target) + alpha * mean over the K classes of NLL(class).
        let smoothed = |input: usize, target: usize| {
            let a = f64::from(alpha);
            (1.0 - a) * nll(input, target) + a * (0..3).map(|c| nll(input, c)).sum::<f64>() / 3.0
        };
        let expected = (smoothed(0, 0) + smoothed(2, 1) + smoothed(1, 2)) / 3.0;
        let train = loss_of(task.train_forward(batch()));
        assert!((train - expected).abs() < 1e-5, "{train} vs {expected}");
        let plain = (nll(0, 0) + nll(2, 1) + nll(1, 2)) / 3.0;
        assert!((train - plain).abs() > 1e-2, "smoothing moved nothing");
        let valid = loss_of(task.forward(batch()));
        assert!((valid - plain).abs() < 1e-5, "{valid} vs {plain}");
        for bad in [-0.1f32, 1.0, f32::NAN] {
            let err = ClassificationTask::new(TableLogits::new())
                .with_label_smoothing(bad)
                .unwrap_err();
            assert!(err.to_string().contains(&format!("{bad}")), "{err}");
        }
    }

    #[test]
    fn distillation_mixes_the_labels_and_the_teachers_softened_distribution() {
        let ids =
            || Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 2, 1], [3]), &test_device());
        let targets =
            || Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2], [3]), &test_device());
        let teacher_rows = [[2.0f32, -1.0, 0.5], [0.0, 1.5, -0.5], [-1.0, 0.0, 3.0]];
        let teacher = || {
            Tensor::<2>::from_data(
                TensorData::new(teacher_rows.concat(), [3, 3]),
                &test_device(),
            )
        };
        let batch = || ClassificationBatch::new(ids(), targets()).with_teacher_logits(teacher());
        let (w, tau) = (0.7f32, 2.0f32);
        let task = ClassificationTask::new(TableLogits::new())
            .with_distillation(w, tau)
            .unwrap();
        // Hand-computed: softmax at temperature tau of the student's row (the table's) and
        // of the teacher's, then KL(teacher || student).
        let softmax = |row: &[f64]| {
            let m = row.iter().copied().fold(f64::MIN, f64::max);
            let e: Vec<f64> = row
                .iter()
                .map(|x| ((x - m) / f64::from(tau)).exp())
                .collect();
            let z: f64 = e.iter().sum();
            e.into_iter().map(|x| x / z).collect::<Vec<f64>>()
        };
        let table = TABLE.map(|r| r.map(f64::from));
        let kl = |input: usize, t: usize| {
            let p = softmax(&teacher_rows[t].map(f64::from));
            let q = softmax(&table[input]);
            p.iter().zip(&q).map(|(p, q)| p * (p / q).ln()).sum::<f64>()
        };
        let ce = (nll(0, 0) + nll(2, 1) + nll(1, 2)) / 3.0;
        let kd = (kl(0, 0) + kl(2, 1) + kl(1, 2)) / 3.0;
        let (wf, tf) = (f64::from(w), f64::from(tau));
        let expected = (1.0 - wf) * ce + wf * tf * tf * kd;
        let train = loss_of(task.train_forward(batch()));
        assert!((train - expected).abs() < 1e-5, "{train} vs {expected}");
        assert!(
            kd > 1e-2,
            "the teacher must disagree with the student for the test to mean anything"
        );
        // Validation is the plain cross-entropy against the labels.
        let valid = loss_of(task.forward(batch()));
        assert!((valid - ce).abs() < 1e-5, "{valid} vs {ce}");
        // A teacher that agrees with the student adds nothing.
        let agreeing =
            ClassificationBatch::new(ids(), targets()).with_teacher_logits(Tensor::<2>::from_data(
                TensorData::new(
                    [0usize, 2, 1]
                        .iter()
                        .flat_map(|&i| table[i].iter().map(|&x| x as f32))
                        .collect::<Vec<f32>>(),
                    [3, 3],
                ),
                &test_device(),
            ));
        let same = loss_of(task.train_forward(agreeing));
        assert!((same - (1.0 - wf) * ce).abs() < 1e-5, "{same}");
        // Errors: a training batch without a teacher, a teacher of another shape, bad settings.
        let Err(err) = task.train_forward(ClassificationBatch::new(ids(), targets())) else {
            panic!("a training batch without a teacher was accepted");
        };
        assert!(err.to_string().contains("teacher's logits"), "{err}");
        let narrow = ClassificationBatch::new(ids(), targets())
            .with_teacher_logits(teacher().narrow(1, 0, 2));
        let Err(err) = task.train_forward(narrow) else {
            panic!("a teacher of another shape was accepted");
        };
        let err = err.to_string();
        assert!(err.contains("[3, 2]") && err.contains("[3, 3]"), "{err}");
        for (w, t, named) in [
            (0.0f32, 2.0f32, "0"),
            (1.5, 2.0, "1.5"),
            (0.5, 0.0, "temperature must be a positive number, got 0"),
            (0.5, f32::NAN, "NaN"),
        ] {
            let err = ClassificationTask::new(TableLogits::new())
                .with_distillation(w, t)
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{err}");
        }
    }

    #[test]
    fn a_failed_forward_stops_the_guarded_step_without_panicking() {
        let guard = NanGuard::new(Interrupter::new());
        let task = ClassificationTask::new(TableLogits::new()).guarded(guard.clone());
        let bad = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 5], [2]), &test_device());
        let targets =
            Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1], [2]), &test_device());
        let out = InferenceStep::step(&task, ClassificationBatch::new(bad, targets));
        assert_eq!(out.loss.into_scalar::<f32>(), 0.0);
        assert_eq!(
            guard.failed(),
            Some((1, "class id out of range".to_string()))
        );
    }
}
