//! Gaussian blobs around class centres and an MLP to separate them: the task of the
//! `zoo-train-toy` program and of most learner tests. Test support, not library API: the
//! program includes this file by path, so it needs only zoo-train's normal dependencies.

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use zoo_train::{ClassLogits, ClassificationBatch, ModelError};

/// One example: features and a class.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobItem {
    /// Features.
    pub x: Vec<f32>,
    /// Class id.
    pub y: usize,
}

/// `n` examples of `classes` blobs in `dim` dimensions: centre `c` has a 3 in coordinate
/// `c % dim` (and a -3 in the next), noise N(0, 1) per coordinate. Items whose index is
/// in `nan_at` get NaN features (for the NaN guard test).
pub fn blobs(n: usize, classes: usize, dim: usize, seed: u64, nan_at: &[usize]) -> Vec<BlobItem> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let y = rng.random_range(0..classes);
            let x = (0..dim)
                .map(|d| {
                    // Box-Muller for a standard normal draw.
                    let u1: f32 = rng.random::<f32>().max(1e-7);
                    let u2: f32 = rng.random();
                    let noise = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
                    let centre = if d == y % dim {
                        3.0
                    } else if d == (y + 1) % dim {
                        -3.0
                    } else {
                        0.0
                    };
                    if nan_at.contains(&i) {
                        f32::NAN
                    } else {
                        centre + noise
                    }
                })
                .collect();
            BlobItem { x, y }
        })
        .collect()
}

/// Stacks blob items.
#[derive(Debug, Clone, Default)]
pub struct BlobBatcher;

impl Batcher<BlobItem, ClassificationBatch<Tensor<2>>> for BlobBatcher {
    fn batch(&self, items: Vec<BlobItem>, device: &Device) -> ClassificationBatch<Tensor<2>> {
        let dim = items.first().map_or(0, |i| i.x.len());
        let x: Vec<f32> = items.iter().flat_map(|i| i.x.iter().copied()).collect();
        let y: Vec<i64> = items.iter().map(|i| i.y as i64).collect();
        ClassificationBatch::new(
            Tensor::from_data(TensorData::new(x, [items.len(), dim]), device),
            Tensor::<1, Int>::from_data(TensorData::new(y, [items.len()]), device),
        )
    }
}

/// A two-layer perceptron.
#[derive(Module, Debug)]
pub struct Mlp {
    /// Hidden layer.
    pub fc1: Linear,
    /// Output layer.
    pub fc2: Linear,
}

impl Mlp {
    /// An MLP `dim -> hidden -> classes`.
    pub fn new(dim: usize, hidden: usize, classes: usize, device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(dim, hidden).init(device),
            fc2: LinearConfig::new(hidden, classes).init(device),
        }
    }
}

impl ClassLogits for Mlp {
    type Input = Tensor<2>;

    fn class_logits(&self, x: Tensor<2>) -> Result<Tensor<2>, ModelError> {
        Ok(self.fc2.forward(relu(self.fc1.forward(x))))
    }
}
