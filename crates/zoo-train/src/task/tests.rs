//! Tests of the task adapters.

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
    let ids = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 2, 1], [3]), &test_device());
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
    let narrow =
        ClassificationBatch::new(ids(), targets()).with_teacher_logits(teacher().narrow(1, 0, 2));
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
    let targets = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1], [2]), &test_device());
    let out = InferenceStep::step(&task, ClassificationBatch::new(bad, targets));
    assert_eq!(out.loss.into_scalar::<f32>(), 0.0);
    assert_eq!(
        guard.failed(),
        Some((1, "class id out of range".to_string()))
    );
}

/// Outside `fit` nothing watches the task's guard: a failed step neither panics nor
/// passes for a perfect score. Its loss is NaN, and the task names the error.
#[test]
fn a_failed_forward_outside_fit_is_recorded_with_a_nan_loss() {
    let task = ClassificationTask::new(TableLogits::new());
    let ids = |v: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(v, [2]), &test_device());
    let good = InferenceStep::step(
        &task,
        ClassificationBatch::new(ids(vec![0, 1]), ids(vec![0, 1])),
    );
    assert!(good.loss.into_scalar::<f32>().is_finite());
    assert_eq!(task.failure(), None);
    let out = InferenceStep::step(
        &task,
        ClassificationBatch::new(ids(vec![0, 5]), ids(vec![0, 1])),
    );
    assert!(out.loss.into_scalar::<f32>().is_nan());
    assert_eq!(
        task.failure(),
        Some((1, "class id out of range".to_string()))
    );
    let out = TrainStep::step(
        &task,
        ClassificationBatch::new(ids(vec![0, 5]), ids(vec![0, 1])),
    );
    assert!(out.item.loss.into_scalar::<f32>().is_nan());
    // The first failure stays the one named.
    assert_eq!(
        task.failure(),
        Some((1, "class id out of range".to_string()))
    );
}
