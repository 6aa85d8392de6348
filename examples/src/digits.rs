//! The digits pipeline of the `digits-vit` example and its learning test: a stratified
//! split of the shipped 8×8 digits, a small ViT trained through `zoo-train` with shift
//! augmentation, the small CNN of `zoo-train`'s tests on the same split for comparison,
//! and a picture of where the ViT looks.

use std::path::{Path, PathBuf};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::tensor::Device;
use burn::tensor::Tensor;
use zoo_data::digits::{DigitBatcher, DigitImage, SIDE, ShiftedDigits};
use zoo_train::{
    ClassificationBatch, ClassificationTask, Distillation, FitOptions, TrainConfig, fit_datasets,
};
use zoo_vision::{ImageInput, Pooling, ViTConfig, ViTForImageClassification, attention_rollout};

use crate::Error;

/// The small CNN that `zoo-train`'s learning test trains on the same digits.
#[path = "../../crates/zoo-train/tests/support/digits.rs"]
pub mod cnn;

/// What to train, and where.
#[derive(Debug, Clone)]
pub struct DigitsSettings {
    /// Epochs (passes over the training split).
    pub epochs: usize,
    /// Images per batch.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Patch side in pixels (8 must be a multiple).
    pub patch: usize,
    /// Model width.
    pub width: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Largest random shift of a training image, in pixels.
    pub max_shift: usize,
    /// Share of training reads that are shifted.
    pub shift_probability: f64,
    /// Dropout on the embeddings and sub-layer outputs.
    pub dropout: f64,
    /// Label smoothing of the ViT's training loss (0: none).
    pub label_smoothing: f32,
    /// Distil the ViT from the trained CNN (Hinton et al., 2015): the teacher term's
    /// weight and temperature. `None` trains on the labels alone.
    pub distillation: Option<Distillation>,
    /// What the classifier reads: the CLS token or the mean patch token.
    pub pooling: Pooling,
    /// Seed of the split, the weights and the augmentation.
    pub seed: u64,
    /// Learner artifacts (`vit/` and `cnn/` inside).
    pub artifacts: PathBuf,
    /// Backend name, for the learner's records.
    pub device: String,
    /// Replace an earlier run in the artifact folder.
    pub overwrite: bool,
}

impl DigitsSettings {
    /// The example's defaults, for `epochs` epochs, writing under `artifacts`.
    pub fn new(epochs: usize, artifacts: impl Into<PathBuf>) -> Self {
        Self {
            epochs,
            batch: 32,
            lr: 2e-3,
            patch: 4,
            width: 128,
            layers: 4,
            heads: 4,
            max_shift: 1,
            shift_probability: 0.25,
            dropout: 0.2,
            label_smoothing: 0.0,
            distillation: None,
            pooling: Pooling::Mean,
            seed: 5,
            artifacts: artifacts.into(),
            device: "flex".into(),
            overwrite: true,
        }
    }

    /// The ViT these settings describe: 1-channel 8×8 images, the feed-forward twice the
    /// width.
    pub fn vit_config(&self) -> ViTConfig {
        let mut cfg = ViTConfig::new(
            SIDE,
            self.patch,
            1,
            self.width,
            self.layers,
            self.heads,
            2 * self.width,
        );
        cfg.hidden_dropout_prob = self.dropout;
        cfg.pooling = self.pooling;
        cfg
    }

    fn train_config(&self, dir: &str) -> TrainConfig {
        let mut cfg = TrainConfig::new(self.epochs, self.artifacts.join(dir));
        cfg.batch_size = self.batch;
        cfg.lr = self.lr;
        cfg.min_lr = self.lr / 50.0;
        cfg.warmup_steps = 100;
        cfg.weight_decay = 0.05;
        cfg.seed = self.seed;
        cfg.devices = vec![self.device.clone()];
        cfg.overwrite = self.overwrite;
        cfg
    }
}

/// The shipped digits, split 80 / 20 by class with `seed`.
///
/// # Errors
/// A missing or malformed data file.
pub fn split(seed: u64) -> Result<(Vec<DigitImage>, Vec<DigitImage>), Error> {
    let images = zoo_data::digits::load_digits(&zoo_data::dataset_file("digits/digits.csv.gz")?)?;
    Ok(zoo_data::digits::stratified_split(&images, 0.2, seed)?)
}

/// Test accuracy (%) per epoch, from the learner's validation pass over the test split
/// (reported only: nothing is chosen by it).
fn accuracies<T>(fitted: &zoo_train::FitResult<T>) -> Vec<f64> {
    fitted
        .epochs
        .iter()
        .map(|e| e.get("valid_accuracy").copied().unwrap_or(f64::NAN))
        .collect()
}

/// Batches digits with a teacher's logits on them, for distillation. The teacher (an
/// inference copy) runs on its own device, on the same shifted images the student sees,
/// and its logits are copied to the batch's device.
#[derive(Clone, Debug)]
pub struct TeacherBatcher {
    teacher: cnn::DigitCnn,
    device: Device,
}

impl TeacherBatcher {
    /// `teacher` (in inference mode) on `device`, the one its weights are on.
    pub fn new(teacher: cnn::DigitCnn, device: &Device) -> Self {
        Self {
            teacher,
            device: device.clone(),
        }
    }
}

impl Batcher<DigitImage, ClassificationBatch<Tensor<4>>> for TeacherBatcher {
    fn batch(&self, items: Vec<DigitImage>, device: &Device) -> ClassificationBatch<Tensor<4>> {
        let images = DigitBatcher.batch(items.clone(), &self.device).inputs;
        let logits = self.teacher.forward(images).into_data();
        DigitBatcher
            .batch(items, device)
            .with_teacher_logits(Tensor::from_data(logits, device))
    }
}

/// Trains the ViT on `train` (shifted at random), reporting accuracy on `test` after
/// every epoch. With [`DigitsSettings::distillation`], `teacher` (the trained CNN, in
/// inference mode on `device`) supplies the soft targets. Returns the model and those
/// accuracies.
///
/// # Errors
/// A configuration the model or the learner rejects, distillation without a teacher, or
/// an earlier run in the folder (unless overwriting).
pub fn train_vit(
    s: &DigitsSettings,
    train: &[DigitImage],
    test: &[DigitImage],
    teacher: Option<&cnn::DigitCnn>,
    device: &Device,
    options: FitOptions,
) -> Result<(ViTForImageClassification, Vec<f64>), Error> {
    let ad = device.clone().autodiff();
    device.seed(s.seed);
    let model = ViTForImageClassification::new(&s.vit_config(), 10, &ad)?;
    let task = ClassificationTask::new(model).with_label_smoothing(s.label_smoothing)?;
    let reads = ShiftedDigits::new(train.to_vec(), s.max_shift, s.shift_probability, s.seed);
    let cfg = s.train_config("vit");
    let devices = std::slice::from_ref(device);
    let fitted = match (s.distillation, teacher) {
        (None, _) => fit_datasets(
            task,
            reads,
            InMemDataset::new(test.to_vec()),
            DigitBatcher,
            &cfg,
            devices,
            options,
        )?,
        (Some(d), Some(teacher)) => fit_datasets(
            task.with_distillation(d.weight, d.temperature)?,
            reads,
            InMemDataset::new(test.to_vec()),
            TeacherBatcher::new(teacher.clone(), device),
            &cfg,
            devices,
            options,
        )?,
        (Some(_), None) => return Err("distillation needs the trained CNN as its teacher".into()),
    };
    let acc = accuracies(&fitted);
    Ok((fitted.task.model.valid(), acc))
}

/// Trains the small CNN the same way (same split, shifts, schedule and epochs). Returns
/// it in inference mode, and its test accuracy (%) per epoch.
///
/// # Errors
/// As [`train_vit`].
pub fn train_cnn(
    s: &DigitsSettings,
    train: &[DigitImage],
    test: &[DigitImage],
    device: &Device,
) -> Result<(cnn::DigitCnn, Vec<f64>), Error> {
    let ad = device.clone().autodiff();
    device.seed(s.seed);
    let fitted = fit_datasets(
        ClassificationTask::new(cnn::DigitCnn::new(&ad)),
        ShiftedDigits::new(train.to_vec(), s.max_shift, s.shift_probability, s.seed),
        InMemDataset::new(test.to_vec()),
        DigitBatcher,
        &s.train_config("cnn"),
        std::slice::from_ref(device),
        FitOptions::default(),
    )?;
    let acc = accuracies(&fitted);
    Ok((fitted.task.model.valid(), acc))
}

/// Accuracy (%) of `model` on `images`, and the wrongly classified ones with their
/// predictions.
///
/// # Errors
/// Images the model rejects.
pub fn evaluate(
    model: &ViTForImageClassification,
    images: &[DigitImage],
    device: &Device,
) -> Result<(f64, Vec<(DigitImage, usize)>), Error> {
    let mut wrong = Vec::new();
    for chunk in images.chunks(128) {
        let batch = DigitBatcher.batch(chunk.to_vec(), device);
        let (logits, _) = model.forward(ImageInput::new(batch.inputs))?;
        let predicted = logits
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .map_err(|e| format!("{e:?}"))?;
        for (image, p) in chunk.iter().zip(predicted) {
            if p as usize != image.label {
                wrong.push((image.clone(), p as usize));
            }
        }
    }
    let acc = 100.0 * (images.len() - wrong.len()) as f64 / images.len().max(1) as f64;
    Ok((acc, wrong))
}

/// Draws `images` in a row, each above its attention rollout (how much the state the
/// classifier reads draws on each patch, white to red: the CLS token's row, or the mean
/// of the patch tokens' rows under mean pooling), 16 screen pixels per image pixel.
/// Written through a temporary file, so `path` appears whole.
///
/// # Errors
/// Images the model rejects, or a file that cannot be written.
pub fn attention_png(
    model: &ViTForImageClassification,
    images: &[DigitImage],
    device: &Device,
    path: &Path,
) -> Result<(), Error> {
    const SCALE: u32 = 16;
    const GAP: u32 = 8;
    let batch = DigitBatcher.batch(images.to_vec(), device);
    let out = model
        .vit
        .forward(ImageInput::new(batch.inputs).with_weights())?;
    let rollout = attention_rollout(&out.attentions)?; // [B, T, T]
    let [b, t, _] = rollout.dims();
    // The rows the classifier reads: the CLS token's, or the mean of the patch tokens'.
    let read = match model.vit.config().pooling {
        Pooling::Cls => rollout.narrow(1, 0, 1),
        Pooling::Mean => rollout.narrow(1, 1, t - 1).mean_dim(1),
    }; // [B, 1, T]
    let from_cls: Vec<f32> = read
        .narrow(2, 1, t - 1)
        .reshape([b, t - 1])
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let grid = (t - 1).isqrt();
    let cell = SIDE as u32 * SCALE;
    let width = b as u32 * (cell + GAP) + GAP;
    let height = 2 * cell + 3 * GAP;
    let mut canvas = image::RgbImage::from_pixel(width, height, image::Rgb([255, 255, 255]));
    for (i, im) in images.iter().enumerate() {
        let x0 = GAP + i as u32 * (cell + GAP);
        let map = &from_cls[i * (t - 1)..(i + 1) * (t - 1)];
        let (lo, hi) = map
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), v| {
                (l.min(*v), h.max(*v))
            });
        let span = (hi - lo).max(1e-12);
        for y in 0..cell {
            for x in 0..cell {
                let (py, px) = ((y / SCALE) as usize, (x / SCALE) as usize);
                let ink = (255.0 * (1.0 - im.pixels[py * SIDE + px])) as u8;
                canvas.put_pixel(x0 + x, GAP + y, image::Rgb([ink, ink, ink]));
                let patch = (py * grid / SIDE) * grid + px * grid / SIDE;
                let heat = (map[patch] - lo) / span;
                let fade = (255.0 * (1.0 - heat)) as u8;
                canvas.put_pixel(x0 + x, 2 * GAP + cell + y, image::Rgb([255, fade, fade]));
            }
        }
    }
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file}.tmp.png"));
    canvas
        .save_with_format(&tmp, image::ImageFormat::Png)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}
