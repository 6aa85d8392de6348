//! A small convolutional network for the 8×8 handwritten digits (`[B, 1, 8, 8]` images,
//! batched by `zoo_data::digits::DigitBatcher`).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use zoo_data::digits::CLASSES;
use zoo_train::{ClassLogits, ModelError};

/// Two 3×3 convolutions (8 and 16 channels, ReLU), a 2×2 max-pool, a linear classifier.
#[derive(Module, Debug)]
pub struct DigitCnn {
    /// `1 -> 8` channels, 8×8.
    pub conv1: Conv2d,
    /// `8 -> 16` channels, 8×8.
    pub conv2: Conv2d,
    /// 8×8 -> 4×4.
    pub pool: MaxPool2d,
    /// `16·4·4 -> 10`.
    pub head: Linear,
}

impl DigitCnn {
    /// A freshly initialised network.
    pub fn new(device: &Device) -> Self {
        let conv = |c_in, c_out| {
            Conv2dConfig::new([c_in, c_out], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .init(device)
        };
        Self {
            conv1: conv(1, 8),
            conv2: conv(8, 16),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            head: LinearConfig::new(16 * 4 * 4, CLASSES).init(device),
        }
    }

    /// `[B, 1, 8, 8]` images -> `[B, 10]` logits.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let x = relu(self.conv1.forward(x));
        let x = self.pool.forward(relu(self.conv2.forward(x)));
        self.head.forward(x.flatten(1, 3))
    }
}

impl ClassLogits for DigitCnn {
    type Input = Tensor<4>;

    fn class_logits(&self, x: Tensor<4>) -> Result<Tensor<2>, ModelError> {
        Ok(self.forward(x))
    }
}
