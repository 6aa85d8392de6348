//! The names learning test: a bounded training run on the shipped names must beat the
//! Laplace bigram on validation NLL by a clear margin, and sample mostly new names.

use zoo_examples::names::{NamesSettings, novelty, sample, train};

#[test]
fn learning_names_beats_the_bigram() {
    let device = zoo_device::test_device();
    let dir = std::env::temp_dir().join(format!("zoo-learning-names-{}", std::process::id()));
    let mut settings = NamesSettings::seeds(8, &dir);
    settings.device = zoo_device::test_backend().to_string();
    let out = train(&settings, &device, None).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    eprintln!(
        "val_nll {:.4} bigram_nll {:.4}",
        out.val_nll, out.bigram_nll
    );
    // The Laplace bigram sits near 2.35 nats on this split.
    assert!(
        (2.2..2.5).contains(&out.bigram_nll),
        "bigram {}",
        out.bigram_nll
    );
    assert!(
        out.val_nll < out.bigram_nll - 0.3,
        "transformer {:.4} does not beat the bigram {:.4} by 0.3 nats",
        out.val_nll,
        out.bigram_nll
    );
    let names = sample(&out.model, "", 50, 0.8, 10, 1).unwrap();
    let novel = novelty(&names, &out.train_names);
    assert!(novel > 50.0, "only {novel}% of samples are new: {names:?}");
}
