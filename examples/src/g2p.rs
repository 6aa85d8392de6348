//! Grapheme-to-phoneme on CMUdict: the original Transformer (post-norm, interleaved
//! sinusoids, ReLU, one embedding shared by letters, phonemes and output) trained through
//! `zoo-train`'s sequence-to-sequence task, decoded greedily with the KV cache, and scored
//! as the published figures are: a word is right when its output equals any of its
//! reference pronunciations (word error rate), and the phoneme error rate is the edit
//! distance to the closest reference over the references' length.
//!
//! One vocabulary serves both sides: `<pad>` 0, `<s>` 1, `</s>` 2, the letters `a`-`z`,
//! then the 39 phonemes of `cmudict.phones`.

use std::path::{Path, PathBuf};

use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use zoo_core::BeamConfig;
use zoo_data::cmudict::{self, Entry};
use zoo_data::{Seq2SeqBatcher, Seq2SeqItem};
use zoo_seq2seq::{
    DecodeInput, EncoderDecoder, MarianConfig, MarianMtModel, Memory, Source, beam_from,
};
use zoo_train::{FitOptions, RoundMetrics, Seq2SeqTask, TrainConfig, fit_datasets};

use crate::Error;

/// Padding.
pub const PAD: usize = 0;
/// The decoder's first token.
pub const BOS: usize = 1;
/// The end of a pronunciation.
pub const EOS: usize = 2;
const LETTERS: usize = 3;

/// Letters and phonemes as ids.
#[derive(Debug, Clone)]
pub struct G2pVocab {
    /// The phoneme inventory.
    pub phones: Vec<String>,
}

impl G2pVocab {
    /// Ids in all.
    pub fn size(&self) -> usize {
        LETTERS + 26 + self.phones.len()
    }

    /// The ids of a word's letters.
    ///
    /// # Errors
    /// A character other than `a`-`z`.
    pub fn letters(&self, word: &str) -> Result<Vec<usize>, Error> {
        word.chars()
            .map(|c| {
                if c.is_ascii_lowercase() {
                    Ok(LETTERS + (c as u8 - b'a') as usize)
                } else {
                    Err(format!("{word:?}: only the letters a-z are spelled, not {c:?}").into())
                }
            })
            .collect()
    }

    /// The ids of a pronunciation.
    pub fn phone_ids(&self, phones: &[String]) -> Vec<usize> {
        phones
            .iter()
            .map(|p| LETTERS + 26 + self.phones.iter().position(|q| q == p).unwrap_or(0))
            .collect()
    }

    /// The phonemes of generated ids, up to `</s>`; other ids are skipped.
    pub fn phonemes(&self, ids: &[usize]) -> Vec<String> {
        ids.iter()
            .take_while(|&&id| id != EOS)
            .filter_map(|&id| id.checked_sub(LETTERS + 26))
            .filter_map(|i| self.phones.get(i).cloned())
            .collect()
    }
}

/// The dictionary split by word, and the vocabulary.
#[derive(Debug, Clone)]
pub struct G2pData {
    /// Letters and phonemes as ids.
    pub vocab: G2pVocab,
    /// 90% of the words.
    pub train: Vec<Entry>,
    /// 5% of the words.
    pub valid: Vec<Entry>,
    /// 5% of the words.
    pub test: Vec<Entry>,
}

/// The dictionary split by word (90 / 5 / 5) with `seed`, and the vocabulary.
///
/// # Errors
/// Missing or malformed data files.
pub fn data(seed: u64) -> Result<G2pData, Error> {
    let dir = zoo_data::dataset_file("cmudict")?;
    let phones = cmudict::load_phones(&dir.join("cmudict.phones"))?;
    let entries = cmudict::load(&dir.join("cmudict.dict"), &phones)?;
    let (train, valid, test) = cmudict::split(&entries, seed);
    Ok(G2pData {
        vocab: G2pVocab { phones },
        train,
        valid,
        test,
    })
}

/// One training item per pronunciation.
///
/// # Errors
/// A word with a character outside `a`-`z`.
pub fn items(vocab: &G2pVocab, entries: &[Entry]) -> Result<Vec<Seq2SeqItem>, Error> {
    let mut out = Vec::new();
    for e in entries {
        let src = vocab.letters(&e.word)?;
        for p in &e.pronunciations {
            out.push(Seq2SeqItem {
                src: src.clone(),
                tgt: vocab.phone_ids(p),
            });
        }
    }
    Ok(out)
}

/// Writes the split as TSV files for `zoo train --task seq2seq` (`train.tsv`,
/// `valid.tsv`, `test.tsv`: a row per pronunciation, `source` the word's letters and
/// `target` its phonemes, space-separated) and, in `model/`, a starting folder for
/// `zoo train --from-scratch`: the model's `config.json` at `s`'s sizes and a word-level
/// `tokenizer.json` over the letters and phonemes with this vocabulary's ids (and
/// `<unk>` after them), which ends each source with `</s>`. Returns the files written.
///
/// # Errors
/// A folder or file that cannot be written, or a word outside `a`-`z`.
pub fn write_tsv(data: &G2pData, s: &G2pSettings, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
    use tokenizers::processors::template::TemplateProcessing;
    use tokenizers::{AddedToken, Tokenizer};

    let mut written = Vec::new();
    for (name, entries) in [
        ("train", &data.train),
        ("valid", &data.valid),
        ("test", &data.test),
    ] {
        let mut tsv = String::from("source\ttarget\n");
        for e in entries.iter() {
            data.vocab.letters(&e.word)?;
            let letters: Vec<String> = e.word.chars().map(String::from).collect();
            for p in &e.pronunciations {
                tsv.push_str(&format!("{}\t{}\n", letters.join(" "), p.join(" ")));
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(format!("{name}.tsv"));
        zoo_train::write_atomic(&path, tsv.as_bytes())?;
        written.push(path);
    }

    let model_dir = dir.join("model");
    std::fs::create_dir_all(&model_dir).map_err(|e| format!("{}: {e}", model_dir.display()))?;
    let specials = ["<pad>", "<s>", "</s>"];
    let mut vocab: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut add = |token: String| {
        let id = vocab.len() as u32;
        vocab.insert(token, id);
    };
    specials.iter().for_each(|t| add((*t).to_string()));
    (b'a'..=b'z').for_each(|c| add((c as char).to_string()));
    data.vocab.phones.iter().for_each(|p| add(p.clone()));
    add("<unk>".into());
    let size = vocab.len();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("<unk>".into())
        .build()
        .map_err(|e| format!("the word-level tokenizer: {e}"))?;
    let mut tok = Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(WhitespaceSplit));
    let post = TemplateProcessing::builder()
        .try_single("$A </s>")
        .and_then(|b| b.try_pair("$A </s> $B </s>"))
        .map_err(|e| format!("the tokenizer's template: {e}"))?
        .special_tokens(vec![("</s>", EOS as u32)])
        .build()
        .map_err(|e| format!("the tokenizer's template: {e}"))?;
    tok.with_post_processor(Some(post));
    let added: Vec<AddedToken> = specials
        .iter()
        .chain(["<unk>"].iter())
        .map(|t| AddedToken::from(*t, true))
        .collect();
    tok.add_special_tokens(&added);
    let path = model_dir.join("tokenizer.json");
    let json = tok
        .to_string(true)
        .map_err(|e| format!("the word-level tokenizer: {e}"))?;
    zoo_train::write_atomic(&path, json.as_bytes())?;
    written.push(path);

    let mut cfg = s.model_config(&data.vocab);
    cfg.vocab_size = size;
    let text = zoo_core::checkpoint::config_text(&cfg, "marian", "MarianMTModel")?;
    let path = model_dir.join("config.json");
    zoo_train::write_atomic(&path, text.as_bytes())?;
    written.push(path);
    Ok(written)
}

/// The example's settings.
#[derive(Debug, Clone)]
pub struct G2pSettings {
    /// Passes over the training words.
    pub epochs: usize,
    /// Pronunciations per batch.
    pub batch: usize,
    /// Peak learning rate (AdamW, warm-up then cosine).
    pub lr: f64,
    /// Model width.
    pub d_model: usize,
    /// Encoder layers, and as many decoder layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Dropout while training.
    pub dropout: f64,
    /// Seed of the split, the model and the batch order.
    pub seed: u64,
    /// Train on only this many words (all when `None`).
    pub train_words: Option<usize>,
    /// Validation words whose teacher-forced loss is reported each epoch.
    pub valid_words: usize,
    /// Learner artifacts.
    pub artifacts: PathBuf,
    /// Backend name.
    pub device: String,
    /// Replace an earlier run in the artifact folder.
    pub overwrite: bool,
}

impl G2pSettings {
    /// The example's defaults, writing under `artifacts`.
    pub fn new(epochs: usize, artifacts: impl Into<PathBuf>) -> Self {
        Self {
            epochs,
            batch: 128,
            lr: 2e-3,
            d_model: 128,
            layers: 3,
            heads: 4,
            d_ff: 512,
            dropout: 0.1,
            seed: 7,
            train_words: None,
            valid_words: 1000,
            artifacts: artifacts.into(),
            device: "flex".into(),
            overwrite: true,
        }
    }

    /// The model: the original Transformer at these sizes, 48 positions.
    pub fn model_config(&self, vocab: &G2pVocab) -> MarianConfig {
        let mut cfg = MarianConfig::transformer(
            vocab.size(),
            self.d_model,
            self.layers,
            self.heads,
            self.d_ff,
            48,
            PAD,
            EOS,
        );
        cfg.decoder_start_token_id = Some(BOS);
        cfg.dropout = self.dropout;
        cfg
    }

    /// The learner's settings for `n` training items: warm-up over 400 steps, or a tenth
    /// of a shorter run.
    fn train_config(&self, n: usize) -> TrainConfig {
        let mut cfg = TrainConfig::new(self.epochs, &self.artifacts);
        cfg.batch_size = self.batch;
        cfg.lr = self.lr;
        cfg.min_lr = self.lr / 20.0;
        let steps = n.div_ceil(self.batch.max(1)) * self.epochs;
        cfg.warmup_steps = 400.min(steps / 10);
        cfg.weight_decay = 0.01;
        cfg.grad_clip = Some(1.0);
        cfg.seed = self.seed;
        cfg.devices = vec![self.device.clone()];
        cfg.overwrite = self.overwrite;
        cfg
    }
}

/// Trains the model on the data's training words, with the teacher-forced loss on the
/// first `valid_words` of its validation words after each epoch.
///
/// # Errors
/// A configuration the model or the learner rejects.
pub fn train(
    s: &G2pSettings,
    data: &G2pData,
    device: &Device,
    options: FitOptions,
) -> Result<(MarianMtModel, Vec<RoundMetrics>), Error> {
    let (vocab, train, valid) = (&data.vocab, &data.train[..], &data.valid[..]);
    let train = match s.train_words {
        Some(n) => &train[..n.min(train.len())],
        None => train,
    };
    let valid = &valid[..s.valid_words.clamp(1, valid.len().max(1)).min(valid.len())];
    let ad = device.clone().autodiff();
    device.seed(s.seed);
    let model = s.model_config(vocab).init(&ad)?;
    let train_items = items(vocab, train)?;
    let cfg = s.train_config(train_items.len());
    let fitted = fit_datasets(
        Seq2SeqTask::new(model),
        InMemDataset::new(train_items),
        InMemDataset::new(items(vocab, valid)?),
        Seq2SeqBatcher {
            pad_id: PAD,
            bos_id: BOS,
            eos_id: EOS,
        },
        &cfg,
        std::slice::from_ref(device),
        options,
    )?;
    Ok((fitted.task.model.valid(), fitted.epochs))
}

/// Greedy pronunciations of `words`, `batch` words at a time.
///
/// # Errors
/// A word the vocabulary cannot spell, or the model's own errors.
pub fn predict(
    model: &MarianMtModel,
    vocab: &G2pVocab,
    words: &[String],
    batch: usize,
) -> Result<Vec<Vec<String>>, Error> {
    let mut out = Vec::with_capacity(words.len());
    for chunk in words.chunks(batch.max(1)) {
        let sources = chunk
            .iter()
            .map(|w| vocab.letters(w))
            .collect::<Result<Vec<_>, _>>()?;
        let decoded = beam_from(model, &sources, &BeamConfig::new(1, 32))?;
        out.extend(decoded.tokens.iter().map(|t| vocab.phonemes(t)));
    }
    Ok(out)
}

/// Levenshtein distance between two phoneme sequences.
pub fn edit_distance(a: &[String], b: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut row = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            row[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(row[j] + 1);
        }
        prev = row;
    }
    prev[b.len()]
}

/// Word and phoneme error rates (%) of `predictions` against `entries`: a word is right
/// when it equals any reference; phoneme errors are the edit distance to the closest
/// reference, over that reference's length, summed over words.
pub fn score(entries: &[Entry], predictions: &[Vec<String>]) -> (f64, f64) {
    let (mut wrong, mut edits, mut length) = (0usize, 0usize, 0usize);
    for (e, p) in entries.iter().zip(predictions) {
        let (d, r) = e
            .pronunciations
            .iter()
            .map(|r| (edit_distance(p, r), r.len()))
            .min()
            .unwrap_or((p.len(), 0));
        wrong += usize::from(d > 0);
        edits += d;
        length += r;
    }
    (
        100.0 * wrong as f64 / entries.len().max(1) as f64,
        100.0 * edits as f64 / length.max(1) as f64,
    )
}

/// The last decoder layer's cross-attention over `word`'s letters while it reads its own
/// greedy output, heads averaged, drawn as a heatmap PNG (phonemes down, letters across).
///
/// # Errors
/// A word the vocabulary cannot spell, the model's errors, or a file that cannot be written.
pub fn alignment_png(
    model: &MarianMtModel,
    vocab: &G2pVocab,
    word: &str,
    path: &Path,
) -> Result<PathBuf, Error> {
    let device = model.device();
    let letters = vocab.letters(word)?;
    let out = beam_from(
        model,
        std::slice::from_ref(&letters),
        &BeamConfig::new(1, 32),
    )?;
    let generated = &out.tokens[0];
    let phones = vocab.phonemes(generated);
    let source = Source::from_ids(std::slice::from_ref(&letters), PAD, &device)?;
    // The decoder reads <s> and the phonemes; each row attends while predicting the next.
    let tgt: Vec<i64> = std::iter::once(BOS)
        .chain(vocab.phone_ids(&phones))
        .map(|x| x as i64)
        .collect();
    let t = tgt.len();
    let tgt = Tensor::<2, Int>::from_data(TensorData::new(tgt, [1, t]), &device);
    let memory = Memory::States(model.encode(&source)?);
    let dec = model.decode(DecodeInput::new(tgt, &memory, &source.padding).with_weights())?;
    let w = dec
        .cross_attentions
        .last()
        .ok_or("the model returned no cross-attention")?
        .clone()
        .mean_dim(1); // [1, 1, T, S]
    let s = letters.len();
    let values = w
        .reshape([t, s])
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| format!("cannot read the attention: {e:?}"))?;
    let rows: Vec<Vec<f32>> = values.chunks(s).map(<[f32]>::to_vec).collect();
    let mut row_labels: Vec<String> = phones.clone();
    row_labels.push("</s>".into());
    let cols: Vec<String> = word.chars().map(String::from).collect();
    Ok(zoo_train::plot::heatmap(
        path,
        &rows,
        &row_labels,
        &cols,
        &format!("{word} -> {}", phones.join(" ")),
    )?)
}
