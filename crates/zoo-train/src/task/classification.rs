//! Sequence or image classification, with label smoothing and knowledge distillation.

use std::sync::Arc;

use burn::module::Module;
use burn::tensor::Tensor;
use burn::tensor::activation::log_softmax;
use burn::train::ClassificationOutput;

use super::{ClassLogits, ClassificationBatch, ModelError, NanGuard};

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
    pub(crate) guard: Arc<NanGuard>,
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
            guard: Arc::default(),
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
        let loss =
            zoo_kernels::loss::cross_entropy(output.clone(), batch.targets.clone(), smoothing);
        Ok(ClassificationOutput {
            loss,
            output,
            targets: batch.targets,
        })
    }
}
