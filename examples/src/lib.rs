//! Shared parts of the zoo's example programs: the `--device` flag, the names pipeline
//! (used by the `names` example and its learning test) and small language-model helpers.

pub mod digits;

/// The first of the tutorials' debugging labs, settled by the type system: token ids
/// (`Tensor<2, Int>`) given where embeddings (`Tensor<3>`, `[B, T, d_model]`) belong do
/// not compile, so the mistake never reaches a kernel. The other labs are runtime errors,
/// tested in `tests/debugging_labs.rs`.
///
/// ```compile_fail
/// use burn::tensor::{Int, Tensor, TensorData};
/// use zoo_attention::AttentionInput;
/// let device = zoo_device::test_device();
/// let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![3i64, 4, 5], [1, 3]), &device);
/// let _ = AttentionInput::new(ids); // expected `Tensor<3>`, found `Tensor<2, Int>`
/// ```
///
/// The same call with embeddings compiles (so the failure above is the type's):
///
/// ```
/// use burn::tensor::Tensor;
/// use zoo_attention::AttentionInput;
/// let device = zoo_device::test_device();
/// let x = Tensor::<3>::zeros([1, 3, 16], &device);
/// let _ = AttentionInput::new(x);
/// ```
pub mod labs {}
pub mod g2p;
pub mod globe;
pub mod precision;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use zoo_core::{GenerationConfig, generate};
use zoo_data::{CausalLmBatcher, CausalLmItem, CharVocab};
use zoo_decoder::bigram::BigramModel;
use zoo_decoder::model::masked_cross_entropy;
use zoo_decoder::{DecoderConfig, DecoderInput, DecoderLm};

/// Every example (and test) linking this crate allocates through mimalloc, which keeps
/// freed tensor buffers for reuse; glibc's allocator hands large ones back to the OS and
/// pays page faults to get them again on the next step.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Boxed error for the example programs.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Passes `result` on, except when training refused to start because the artifact folder
/// holds an earlier run: then it prints the error with the flags that settle it (`flags`,
/// e.g. "--resume continues it, --overwrite replaces it") and exits with status 2.
pub fn or_exit_on_earlier_run<T>(result: Result<T, Error>, flags: &str) -> Result<T, Error> {
    match result {
        Err(e)
            if matches!(
                e.downcast_ref::<zoo_train::TrainError>(),
                Some(zoo_train::TrainError::EarlierRun { .. })
            ) =>
        {
            eprintln!("error: {e}\n({flags})");
            std::process::exit(2);
        }
        other => other,
    }
}

/// The learner's options of the examples: each split's report printed on standard
/// output, one line each.
pub fn printing() -> zoo_train::FitOptions {
    zoo_train::FitOptions {
        report: Some(Box::new(|r| println!("{r}"))),
        ..zoo_train::FitOptions::default()
    }
}

/// Ends an example: on an error, prints it as `error: <message>` and exits with status 1.
pub fn exit_on_error(result: Result<(), Error>) {
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// `Err("--<name> must be > 0, got 0")` for the first count that is zero.
///
/// # Errors
/// That first zero.
pub fn require_positive(counts: &[(&str, usize)]) -> Result<(), Error> {
    match counts.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(format!("--{name} must be > 0, got 0").into()),
        None => Ok(()),
    }
}

/// Turns `--device NAME` into a device, or prints one line naming the problem (and the
/// feature to enable) and exits with status 2.
pub fn device_or_exit(name: &str) -> Device {
    match zoo_device::select_by_name(name) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

/// Mean negative log-likelihood per predicted token (nats) of `items` under `model`,
/// weighting every counted token equally.
///
/// # Errors
/// Items the model rejects (ids or lengths).
pub fn mean_nll(
    model: &DecoderLm,
    items: &[CausalLmItem],
    batch_size: usize,
    device: &Device,
) -> Result<f64, Error> {
    use burn::data::dataloader::batcher::Batcher;
    let batcher = CausalLmBatcher::new(0);
    let (mut total, mut count) = (0.0f64, 0usize);
    for chunk in items.chunks(batch_size.max(1)) {
        let n: usize = chunk.iter().map(CausalLmItem::n_targets).sum();
        let batch = batcher.batch(chunk.to_vec(), device);
        let logits = model.forward(DecoderInput::new(batch.inputs))?.logits;
        let loss =
            masked_cross_entropy(logits, batch.targets, batch.target_mask).into_scalar::<f32>();
        total += loss as f64 * n as f64;
        count += n;
    }
    Ok(total / count.max(1) as f64)
}

/// Writes the model's weights and config to `dir` (`model.bpk`, `model.json`) through
/// temporary files and renames.
///
/// # Errors
/// An unwritable folder.
pub fn save_model(model: &DecoderLm, config: &DecoderConfig, dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(".model.bpk.tmp");
    model.clone().save_file(&tmp)?;
    std::fs::rename(&tmp, dir.join("model.bpk"))?;
    let json = burn::config::config_to_json(config);
    zoo_train::write_atomic(&dir.join("model.json"), json.as_bytes())?;
    Ok(())
}

/// Loads a model written by [`save_model`].
///
/// # Errors
/// Missing or malformed files, or weights that do not fit the config.
pub fn load_model(dir: &Path, device: &Device) -> Result<(DecoderLm, DecoderConfig), Error> {
    use burn::config::Config;
    let cfg_path = dir.join("model.json");
    let config =
        DecoderConfig::load(&cfg_path).map_err(|e| format!("{}: {e}", cfg_path.display()))?;
    let weights = dir.join("model.bpk");
    let model = config
        .init(device)?
        .try_load_file(&weights)
        .map_err(|e| format!("{}: {e:?}", weights.display()))?;
    Ok((model, config))
}

/// The names task of the seeds: data, baseline, training and sampling.
pub mod names {
    use super::*;
    use zoo_train::{CausalLmTask, FitOptions, TrainConfig, fit};

    /// Settings of one names run.
    #[derive(Debug, Clone)]
    pub struct NamesSettings {
        /// Training epochs.
        pub epochs: usize,
        /// Batch size.
        pub batch_size: usize,
        /// Peak learning rate.
        pub lr: f64,
        /// Seed of the split, init, shuffling and sampling.
        pub seed: u64,
        /// Fraction of names held out.
        pub val_fraction: f64,
        /// Bigram smoothing.
        pub alpha: f64,
        /// Artifact folder of the learner.
        pub artifact_dir: PathBuf,
        /// Replace an earlier run in the artifact folder (otherwise training refuses to
        /// start there).
        pub overwrite: bool,
        /// The `--device` name of the device `train` is given, for `config.json`.
        pub device: String,
        /// Model config (vocabulary 27).
        pub model: DecoderConfig,
    }

    impl NamesSettings {
        /// The seeds' model and optimiser: width 64, 4 heads, 4 layers, block 16, dropout
        /// 0.1, AdamW 3e-3, batch 64; a 90/10 split.
        pub fn seeds(epochs: usize, artifact_dir: impl Into<PathBuf>) -> Self {
            Self {
                epochs,
                batch_size: 64,
                lr: 3e-3,
                seed: 42,
                val_fraction: 0.1,
                alpha: 1.0,
                artifact_dir: artifact_dir.into(),
                overwrite: false,
                device: "flex".into(),
                model: DecoderConfig::char_gpt(CharVocab::names().len()),
            }
        }
    }

    /// What a names run produced.
    pub struct NamesOutcome {
        /// The trained model (inference mode).
        pub model: DecoderLm,
        /// Validation NLL per character, end token included (nats).
        pub val_nll: f64,
        /// The bigram baseline's validation NLL on the same split.
        pub bigram_nll: f64,
        /// The training names, to measure novelty.
        pub train_names: HashSet<String>,
        /// Per-epoch means from the learner's logs.
        pub epochs: Vec<std::collections::BTreeMap<String, f64>>,
    }

    /// Trains the character model on `datasets/names/first_names.txt` through the shared
    /// learner and measures it against the bigram baseline.
    ///
    /// # Errors
    /// Unreadable data, a bad config, or a failed training.
    pub fn train(
        settings: &NamesSettings,
        device: &Device,
        report: Option<zoo_train::fit::ReportSink>,
    ) -> Result<NamesOutcome, Error> {
        let vocab = CharVocab::names();
        let all = zoo_data::names::load_names(&zoo_data::dataset_file("names/first_names.txt")?)?;
        let (train_names, val_names) =
            zoo_data::names::split(all, settings.val_fraction, settings.seed);
        let train_items = zoo_data::names::sequence_items(&vocab, &train_names)?;
        let val_items = zoo_data::names::sequence_items(&vocab, &val_names)?;

        let encode = |names: &[String]| -> Result<Vec<Vec<usize>>, Error> {
            names
                .iter()
                .map(|n| Ok(zoo_data::names::encode_name(&vocab, n)?))
                .collect()
        };
        let bigram = BigramModel::fit(&encode(&train_names)?, vocab.len(), settings.alpha)?;
        let bigram_nll = bigram.nll(&encode(&val_names)?);

        device.seed(settings.seed);
        let model = settings.model.init(&device.clone().autodiff())?;
        let mut cfg = TrainConfig::new(settings.epochs, &settings.artifact_dir);
        cfg.batch_size = settings.batch_size;
        cfg.lr = settings.lr;
        cfg.min_lr = settings.lr / 10.0;
        cfg.warmup_steps = 50;
        cfg.betas = (0.9, 0.99);
        cfg.weight_decay = 0.01;
        cfg.seed = settings.seed;
        cfg.devices = vec![settings.device.clone()];
        cfg.overwrite = settings.overwrite;
        let options = FitOptions {
            report,
            ..FitOptions::default()
        };
        let fitted = fit(
            CausalLmTask::new(model),
            train_items,
            val_items.clone(),
            CausalLmBatcher::new(0),
            &cfg,
            std::slice::from_ref(device),
            options,
        )?;
        let model = fitted.task.model.valid().to_device(device);
        let val_nll = mean_nll(&model, &val_items, 256, device)?;
        Ok(NamesOutcome {
            model,
            val_nll,
            bigram_nll,
            train_names: train_names.into_iter().collect(),
            epochs: fitted.epochs,
        })
    }

    /// Samples `n` names that begin with `prefix` (empty for any) at `temperature` and
    /// `top_k`, in one batch; the web page samples the same way.
    ///
    /// # Errors
    /// Invalid settings, or a prefix with a character other than `a`..`z`.
    pub fn sample(
        model: &DecoderLm,
        prefix: &str,
        n: usize,
        temperature: f64,
        top_k: usize,
        seed: u64,
    ) -> Result<Vec<String>, Error> {
        use zoo_data::names::{name_prompt, sampled_name};
        let vocab = CharVocab::names();
        let prompt = name_prompt(&vocab, prefix)?;
        let end = vocab.id('$').expect("'$' is in the names vocabulary");
        if prompt.len() >= model.max_len() {
            return Err(format!(
                "prefix {prefix:?} leaves no room: the model reads at most {} symbols, the \
                 start symbol included",
                model.max_len()
            )
            .into());
        }
        let cfg = GenerationConfig::sampling(model.max_len() - prompt.len(), temperature, seed)
            .with_top_k(top_k)
            .with_stop_tokens(vec![end]);
        let out = generate(model, &vec![prompt; n], &cfg, |_, _| {})?;
        out.tokens
            .iter()
            .map(|t| Ok(sampled_name(&vocab, prefix, t)?))
            .collect()
    }

    /// Percentage of `samples` that are not training names (empty samples count as not
    /// novel).
    pub fn novelty(samples: &[String], train: &HashSet<String>) -> f64 {
        let novel = samples
            .iter()
            .filter(|s| !s.is_empty() && !train.contains(*s))
            .count();
        100.0 * novel as f64 / samples.len().max(1) as f64
    }
}
