//! Reseeding the device repeats the dropout masks. Alone in its own test binary: on
//! libtorch the generator is global to the process, so any test drawing random numbers
//! in parallel, between the seed and the draw, would move the mask.

use burn::nn::DropoutConfig;
use burn::tensor::Tensor;
use zoo_attention::dropout;
use zoo_device::test_device;
use zoo_device::testing::floats;

#[test]
fn reseeding_the_device_repeats_the_masks() {
    let ad = test_device().autodiff();
    let d = DropoutConfig::new(0.25).init();
    let x = Tensor::<2>::ones([64, 64], &ad) * 3.0;
    ad.seed(7);
    let a = floats(dropout(&d, x.clone()));
    let b = floats(dropout(&d, x.clone()));
    // Negative control: the second draw is another mask.
    assert_ne!(a, b);
    ad.seed(7);
    assert_eq!(floats(dropout(&d, x.clone())), a);
    assert_eq!(floats(dropout(&d, x)), b);
}
