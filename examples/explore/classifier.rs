//! The tutorials' tiny attention classifier: token embeddings (plus learned positions),
//! Q, K and V projections without bias, scaled dot-product attention (the zoo's
//! reference path), global average pooling and a 2-way linear head. It is trained through
//! zoo-train on a task that needs attention: in a random sequence over a 100-token
//! vocabulary holding token A once and token B once, does A come before B? The baseline
//! averages the same embeddings without attention, so it sees which tokens occur but not
//! how they relate; the answer needs a token to look at another one.

use std::path::Path;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zoo_attention::Mask;
use zoo_attention::sdpa::attention_reference;
use zoo_examples::Error;
use zoo_train::plot::heatmap;
use zoo_train::{
    ClassLogits, ClassificationBatch, ClassificationTask, FitOptions, ModelError, TrainConfig,
    fit_datasets,
};

const VOCAB: usize = 100;
const LEN: usize = 12;
const D: usize = 32;
const A: usize = 1;
const B: usize = 2;

/// One sequence and whether A comes before B.
#[derive(Debug, Clone)]
struct Item {
    tokens: Vec<usize>,
    label: usize,
}

fn items(n: usize, seed: u64) -> Vec<Item> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let mut tokens: Vec<usize> = (0..LEN).map(|_| rng.random_range(3..VOCAB)).collect();
            let a = rng.random_range(0..LEN);
            let mut b = rng.random_range(0..LEN - 1);
            if b >= a {
                b += 1;
            }
            tokens[a] = A;
            tokens[b] = B;
            Item {
                tokens,
                label: usize::from(a < b),
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
struct SeqBatcher;

impl Batcher<Item, ClassificationBatch<Tensor<2, Int>>> for SeqBatcher {
    fn batch(&self, items: Vec<Item>, device: &Device) -> ClassificationBatch<Tensor<2, Int>> {
        let n = items.len();
        let x: Vec<i64> = items
            .iter()
            .flat_map(|i| i.tokens.iter().map(|&t| t as i64))
            .collect();
        let y: Vec<i64> = items.iter().map(|i| i.label as i64).collect();
        ClassificationBatch::new(
            Tensor::from_data(TensorData::new(x, [n, LEN]), device),
            Tensor::from_data(TensorData::new(y, [n]), device),
        )
    }
}

/// Embedding + learned positions, one bias-free attention head, mean pooling, a head.
#[derive(Module, Debug)]
pub struct TinyAttentionClassifier {
    embed: Embedding,
    positions: Embedding,
    q: Linear,
    k: Linear,
    v: Linear,
    head: Linear,
}

impl TinyAttentionClassifier {
    fn new(device: &Device) -> Self {
        let proj = || LinearConfig::new(D, D).with_bias(false).init(device);
        Self {
            embed: EmbeddingConfig::new(VOCAB, D).init(device),
            positions: EmbeddingConfig::new(LEN, D).init(device),
            q: proj(),
            k: proj(),
            v: proj(),
            head: LinearConfig::new(D, 2).init(device),
        }
    }

    /// Logits `[B, 2]` and the attention weights `[B, T, T]`.
    fn forward(&self, ids: Tensor<2, Int>) -> Result<(Tensor<2>, Tensor<3>), ModelError> {
        let [b, t] = ids.dims();
        let pos = Tensor::<1, Int>::arange(0..t as i64, &ids.device()).reshape([1, t]);
        let x = self.embed.forward(ids) + self.positions.forward(pos); // [B, T, D]
        let heads = |p: &Linear| p.forward(x.clone()).reshape([b, 1, t, D]);
        let (out, weights) = attention_reference(
            heads(&self.q),
            heads(&self.k),
            heads(&self.v),
            &Mask::none(),
            None,
            None,
        )
        .map_err(|e| ModelError::msg(e.to_string()))?;
        let pooled = out.reshape([b, t, D]).mean_dim(1).reshape([b, D]);
        Ok((self.head.forward(pooled), weights.reshape([b, t, t])))
    }
}

impl ClassLogits for TinyAttentionClassifier {
    type Input = Tensor<2, Int>;
    fn class_logits(&self, ids: Tensor<2, Int>) -> Result<Tensor<2>, ModelError> {
        Ok(self.forward(ids)?.0)
    }
}

/// The baseline: the same embeddings and positions, averaged, then the head.
#[derive(Module, Debug)]
pub struct MeanPoolClassifier {
    embed: Embedding,
    positions: Embedding,
    head: Linear,
}

impl ClassLogits for MeanPoolClassifier {
    type Input = Tensor<2, Int>;
    fn class_logits(&self, ids: Tensor<2, Int>) -> Result<Tensor<2>, ModelError> {
        let [b, t] = ids.dims();
        let pos = Tensor::<1, Int>::arange(0..t as i64, &ids.device()).reshape([1, t]);
        let x = self.embed.forward(ids) + self.positions.forward(pos);
        Ok(self.head.forward(x.mean_dim(1).reshape([b, D])))
    }
}

fn config(epochs: usize, dir: &Path, device_name: &str) -> TrainConfig {
    let mut cfg = TrainConfig::new(epochs, dir);
    cfg.batch_size = 64;
    cfg.lr = 3e-3;
    cfg.min_lr = 3e-4;
    cfg.warmup_steps = 50;
    cfg.weight_decay = 0.01;
    cfg.seed = 11;
    cfg.devices = vec![device_name.to_string()];
    cfg.overwrite = true;
    cfg
}

fn last_accuracy(epochs: &[std::collections::BTreeMap<String, f64>]) -> f64 {
    epochs
        .last()
        .and_then(|e| e.get("valid_accuracy").copied())
        .unwrap_or(f64::NAN)
}

pub fn run(epochs: usize, device_name: &str, device: &Device, out: &Path) -> Result<(), Error> {
    if epochs == 0 {
        return Err("--epochs must be > 0, got 0".into());
    }
    let (train, valid) = (items(8000, 1), items(2000, 2));
    let before = valid.iter().filter(|i| i.label == 1).count();
    println!(
        "task: does token {A} come before token {B}? {LEN} tokens from a vocabulary of {VOCAB}; \
         8000 training and 2000 held-out sequences ({before} of them 'before')"
    );
    let ad = device.clone().autodiff();
    ad.seed(11);
    let fitted = fit_datasets(
        ClassificationTask::new(TinyAttentionClassifier::new(&ad)),
        InMemDataset::new(train.clone()),
        InMemDataset::new(valid.clone()),
        SeqBatcher,
        &config(epochs, &out.join("classifier-attention"), device_name),
        std::slice::from_ref(device),
        FitOptions::default(),
    )?;
    let attention_acc = last_accuracy(&fitted.epochs);
    let model = fitted.task.model.valid();
    ad.seed(11);
    let baseline = MeanPoolClassifier {
        embed: EmbeddingConfig::new(VOCAB, D).init(&ad),
        positions: EmbeddingConfig::new(LEN, D).init(&ad),
        head: LinearConfig::new(D, 2).init(&ad),
    };
    let fitted = fit_datasets(
        ClassificationTask::new(baseline),
        InMemDataset::new(train),
        InMemDataset::new(valid.clone()),
        SeqBatcher,
        &config(epochs, &out.join("classifier-mean"), device_name),
        std::slice::from_ref(device),
        FitOptions::default(),
    )?;
    let mean_acc = last_accuracy(&fitted.epochs);
    println!(
        "held-out accuracy after {epochs} epochs: attention {attention_acc:.1}%, mean-pooled embeddings {mean_acc:.1}% (chance 50%)"
    );

    // The attention weights of the first held-out example.
    let example = &valid[0];
    let batch = SeqBatcher.batch(vec![example.clone()], device);
    let (logits, weights) = model.forward(batch.inputs)?;
    let p = burn::tensor::activation::softmax(logits, 1)
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let w = weights
        .reshape([LEN, LEN])
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let rows: Vec<Vec<f32>> = (0..LEN)
        .map(|i| w[i * LEN..(i + 1) * LEN].to_vec())
        .collect();
    let labels: Vec<String> = example
        .tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| match t {
            A => format!("{i}: A"),
            B => format!("{i}: B"),
            t => format!("{i}: {t}"),
        })
        .collect();
    let png = heatmap(
        &out.join("classifier-attention.png"),
        &rows,
        &labels,
        &labels,
        &format!(
            "A {} B: P(before) = {:.2}; rows attend to columns",
            if example.label == 1 {
                "before"
            } else {
                "after"
            },
            p[1]
        ),
    )?;
    let a = example.tokens.iter().position(|&t| t == A).unwrap_or(0);
    let b = example.tokens.iter().position(|&t| t == B).unwrap_or(0);
    println!(
        "example {:?}: A at {a}, B at {b}; A's row puts {:.2} on B, B's row puts {:.2} on A: {}",
        example.tokens,
        rows[a][b],
        rows[b][a],
        png.display()
    );
    Ok(())
}
