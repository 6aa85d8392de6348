//! `zoo train`: fine-tunes a checkpoint folder on the user's files with zoo-train's
//! learner, and writes an HF checkpoint folder that `zoo` and `transformers` load.
//!
//! The output folder holds the checkpoint (`config.json`, `model.safetensors`, the
//! source folder's tokenizer and generation files) and `training/`: the learner's
//! checkpoints, its `config.json`, `metrics.csv` and `metrics.png`. `--resume` continues
//! the run in `training/` from its last complete round.

use std::path::{Path, PathBuf};

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use zoo_core::KeyMap;
use zoo_core::checkpoint::peft::{self, AdapterConfig};
use zoo_core::registry::Task;
use zoo_core::{ClassificationBatch, QuantBits, QuantOptions, Seq2SeqLogits};
use zoo_data::{CausalLmBatcher, CausalLmItem, Labels, LmTokenizer, Records, Row, Seq2SeqBatcher};
use zoo_data::{Seq2SeqItem, TokenizerError};
use zoo_decoder::{DecoderLm, HfDecoderConfig};
use zoo_encoder::{
    BertForMaskedLm, BertForSequenceClassification, BertForTokenClassification, BertModel,
    BertTokenizer, EncoderInput, Encoding, MaskingConfig, masked_items,
};
use zoo_hub::{AutoModel, Detected, model_types};
use zoo_seq2seq::{EncoderDecoder, MarianMtModel, T5ForConditionalGeneration};
use zoo_train::{
    CausalLmTask, ClassificationTask, FitOptions, RoundMetrics, Seq2SeqTask, TrainArgs,
    TrainConfig, TrainError,
};

use zoo_cli::error::{CliError, Result};

/// What the model learns.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrainTask {
    /// Next-token prediction over blocks of the packed texts (decoders).
    CausalLm,
    /// BERT's masked-LM recipe over the texts (encoders).
    MaskedLm,
    /// A label per text (encoders).
    Classification,
    /// A tag per word (encoders), from JSON Lines rows of `tokens` and `tags`.
    TokenClassification,
    /// A target text per source text (encoder-decoders).
    Seq2seq,
}

/// What happens to an example longer than `--max-len`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TooLong {
    /// Cut it to the length, and count how many were cut.
    Truncate,
    /// Stop with an error that names the row.
    Refuse,
}

#[derive(clap::Args, Debug)]
pub(crate) struct TrainCmdArgs {
    /// The checkpoint folder to start from, or a hub id (org/name).
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// What to learn.
    #[arg(long, value_enum)]
    task: TrainTask,
    /// The training data: .txt (documents between blank lines), .jsonl, .csv or .tsv.
    #[arg(long = "train", value_name = "FILE")]
    train_file: PathBuf,
    /// The validation data, in the same layout; without it, --valid-fraction of the
    /// training examples are held out.
    #[arg(long = "valid", value_name = "FILE")]
    valid_file: Option<PathBuf>,
    /// Examples to score the trained classifier on (classification), in the same
    /// layout: the accuracy is printed with the summary.
    #[arg(long = "test", value_name = "FILE")]
    test_file: Option<PathBuf>,
    /// The share of the training examples held out for validation when there is no
    /// --valid file, drawn with the seed.
    #[arg(long, default_value_t = 0.1)]
    valid_fraction: f64,
    /// The folder to write the fine-tuned checkpoint to (and the run, under training/).
    #[arg(long)]
    output: PathBuf,
    /// Tokens per example (per block for causal-lm); default 128, or the model's limit
    /// when that is lower.
    #[arg(long)]
    max_len: Option<usize>,
    /// What to do with an example longer than --max-len.
    #[arg(long, value_enum, default_value = "truncate")]
    too_long: TooLong,
    /// The field (JSON Lines) or column (CSV, TSV) of the text.
    #[arg(long, default_value = "text")]
    text_column: String,
    /// The field or column of the label (classification).
    #[arg(long, default_value = "label")]
    label_column: String,
    /// The field or column of the source text (seq2seq).
    #[arg(long, default_value = "source")]
    source_column: String,
    /// The field or column of the target text (seq2seq).
    #[arg(long, default_value = "target")]
    target_column: String,
    /// The field of a row's words (token-classification).
    #[arg(long, default_value = "tokens")]
    tokens_column: String,
    /// The field of a row's tags, one per word (token-classification).
    #[arg(long, default_value = "tags")]
    tags_column: String,
    /// Continue the run in --output/training from its last complete round.
    #[arg(long)]
    resume: bool,
    /// Train from scratch (--task causal-lm, seq2seq): the weights are drawn at random (seeded by
    /// --seed) for the architecture of --model's config.json, and its weights file, if
    /// any, is not read; the folder needs config.json and the tokenizer.
    #[arg(long, conflicts_with = "lora_rank")]
    from_scratch: bool,
    /// Train a LoRA adapter of this rank (Burn's LoRA; --task causal-lm and
    /// classification) and freeze the model's weights, but for a classifier's head,
    /// which trains whole beside it; the output is the adapter alone, in PEFT's format.
    #[arg(long)]
    lora_rank: Option<usize>,
    /// LoRA's alpha: the adapter's delta is scaled by alpha / rank (default 2 × rank).
    #[arg(long, requires = "lora_rank")]
    lora_alpha: Option<f64>,
    /// The HF module names to adapt, comma-separated, as PEFT's target_modules (default:
    /// PEFT's for the model type, such as q_proj,v_proj for Llama and c_attn for GPT-2).
    #[arg(long, requires = "lora_rank", value_delimiter = ',')]
    lora_targets: Vec<String>,
    /// QLoRA: quantize the adapted weights to q8 or q4 (Burn's apply_qlora) and train the
    /// adapters beside them in f32 (flex and wgpu; ndarray q8 only; not tch).
    #[arg(long, requires = "lora_rank", value_name = "q8|q4")]
    qlora: Option<String>,
    /// Values per quantization scale along each adapted weight's output dimension, for
    /// --qlora; 0 for one scale per tensor.
    #[arg(long, requires = "qlora", default_value_t = 32)]
    qlora_block: usize,
    #[command(flatten)]
    run: TrainArgs,
}

/// The longest example when neither --max-len nor a lower model limit says otherwise.
const DEFAULT_MAX_LEN: usize = 128;

/// The data files read, with the examples cut to --max-len counted.
struct Data {
    train: Records,
    valid: Option<Records>,
    test: Option<Records>,
    max_len: usize,
    too_long: TooLong,
    truncated: std::cell::Cell<usize>,
}

impl Data {
    /// Each file's examples through `encode`; without a validation file, a seeded share
    /// of the training examples is held out.
    fn items<I: Clone>(
        &self,
        cfg: &TrainConfig,
        fraction: f64,
        mut encode: impl FnMut(&Records) -> Result<Vec<I>>,
    ) -> Result<(Vec<I>, Vec<I>)> {
        let mut train = encode(&self.train)?;
        let valid = match &self.valid {
            Some(v) => encode(v)?,
            None => hold_out(&mut train, fraction, cfg.seed, &self.train.path)?,
        };
        Ok((train, valid))
    }

    /// The length check of an example of `len` tokens (`cut`: the tokenizer already cut
    /// it to `limit`): `Ok(true)` when it is to be cut, an error naming the row when
    /// --too-long refuses it.
    fn too_long(
        &self,
        records: &Records,
        row: &Row,
        len: usize,
        limit: usize,
        cut: bool,
    ) -> Result<bool> {
        if !cut && len <= limit {
            return Ok(false);
        }
        if self.too_long == TooLong::Refuse {
            let len = if cut {
                format!("more than {limit}")
            } else {
                len.to_string()
            };
            return Err(data(records.error(
                row,
                format!(
                    "the example has {len} tokens; --max-len {} leaves room for {limit} \
                     (--too-long truncate cuts it)",
                    self.max_len
                ),
            )));
        }
        self.truncated.set(self.truncated.get() + 1);
        Ok(true)
    }
}

fn data(e: zoo_data::DataError) -> CliError {
    CliError::Input(e.to_string())
}

fn train_err(e: TrainError) -> CliError {
    match e {
        TrainError::EarlierRun { dir } => CliError::Input(format!(
            "{} holds an earlier run; --resume continues it, --overwrite replaces it",
            dir.display()
        )),
        other => CliError::Input(other.to_string()),
    }
}

fn model_err(e: impl std::error::Error + Send + Sync + 'static) -> CliError {
    zoo_core::ModelError::new(e).into()
}

/// A tokenizer failure on a row, named with its file and line.
fn at_row(records: &Records, row: &Row) -> impl Fn(TokenizerError) -> CliError {
    move |e| data(records.error(row, e))
}

/// Moves a seeded `fraction` of `items` (at least one) into the validation set.
fn hold_out<I>(items: &mut Vec<I>, fraction: f64, seed: u64, path: &Path) -> Result<Vec<I>> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(CliError::Input(format!(
            "--valid-fraction must be in (0, 1), got {fraction}"
        )));
    }
    if items.len() < 2 {
        return Err(CliError::File {
            path: path.to_path_buf(),
            message: format!(
                "{} example{} cannot be split into training and validation; give --valid",
                items.len(),
                if items.len() == 1 { "" } else { "s" }
            ),
        });
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    zoo_data::seeded_shuffle(&mut order, seed);
    let n = ((items.len() as f64 * fraction).round() as usize).clamp(1, items.len() - 1);
    let mut held: Vec<usize> = order[..n].to_vec();
    held.sort_unstable();
    let mut valid = Vec::with_capacity(n);
    for &i in held.iter().rev() {
        valid.push(items.remove(i));
    }
    valid.reverse();
    Ok(valid)
}

/// Refuses ids the model has no embedding for, naming the row.
fn check_ids(records: &Records, row: &Row, ids: &[usize], vocab: usize) -> Result<()> {
    match ids.iter().find(|&&id| id >= vocab) {
        Some(id) => Err(data(records.error(
            row,
            format!(
                "the tokenizer gives id {id}, past the model's vocabulary of {vocab}: the \
                 tokenizer does not belong to this checkpoint"
            ),
        ))),
        None => Ok(()),
    }
}

/// The field the text is in: `text` for plain text files, else `--text-column`.
fn text_field<'a>(records: &Records, column: &'a str) -> &'a str {
    if records.format.has_fields() {
        column
    } else {
        "text"
    }
}

/// Checks that every row of both files has `fields` before anything is encoded.
fn require(data_files: &Data, fields: &[&str]) -> Result<()> {
    let files = [&data_files.valid, &data_files.test];
    for records in std::iter::once(&data_files.train).chain(files.into_iter().flatten()) {
        let fields: Vec<&str> = fields
            .iter()
            .map(|&f| {
                if records.format.has_fields() {
                    f
                } else {
                    "text"
                }
            })
            .collect();
        records.require(&fields).map_err(data)?;
    }
    Ok(())
}

/// Refuses an output folder that would lose something: the model's own folder, or a
/// checkpoint that neither --overwrite nor --resume lets go.
fn check_output(args: &TrainCmdArgs, overwrite: bool) -> Result<()> {
    if same_folder(&args.model, &args.output) {
        return Err(CliError::Input(format!(
            "--output {} is the model folder; write the fine-tuned checkpoint elsewhere",
            args.output.display()
        )));
    }
    let held = ["config.json", peft::CONFIG_FILE]
        .iter()
        .any(|f| args.output.join(f).exists());
    if held && !overwrite && !args.resume {
        return Err(CliError::Input(format!(
            "{} holds a checkpoint; --overwrite replaces it, --resume continues its run",
            args.output.display()
        )));
    }
    Ok(())
}

/// The files of a checkpoint folder that describe its tokenizer, its generation
/// defaults and its image processor: HF's names.
const COMPANIONS: [&str; 16] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
];

/// The [`COMPANIONS`] of the source folder, copied beside the new weights so the output
/// is a whole checkpoint.
fn copy_companions(from: &Path, to: &Path) -> Result<Vec<String>> {
    let mut copied = Vec::new();
    for name in COMPANIONS {
        let source = from.join(name);
        if !source.is_file() {
            continue;
        }
        let bytes = std::fs::read(&source).map_err(|e| CliError::File {
            path: source.clone(),
            message: e.to_string(),
        })?;
        zoo_train::write_atomic(&to.join(name), &bytes).map_err(train_err)?;
        copied.push(name.to_string());
    }
    Ok(copied)
}

/// Runs `zoo merge`: the causal LM or sequence classifier of `model` with the adapter of
/// `adapter` folded in, written to `output` with the model's tokenizer and generation
/// files. A classifier adapter over a base checkpoint puts the head it saves on the
/// base's encoder.
pub(crate) fn merge(
    model: &Path,
    adapter: &Path,
    output: &Path,
    overwrite: bool,
    device: &Device,
) -> Result<()> {
    let detected = Detected::new(model)?;
    let arch = detected.architecture;
    // Causal LMs, and the encoders whose sequence classifiers read adapters.
    let lm = arch.serves(Task::Generate) && arch.load_adapted.is_some();
    let classifier = zoo_hub::architectures().any(|a| {
        a.model_type == arch.model_type && a.serves(Task::Classify) && a.load_adapted.is_some()
    });
    if !(lm || classifier) {
        return Err(CliError::Unsupported(format!(
            "merge reads the adapters of causal LMs ({}) and of the sequence classifiers of \
             bert, roberta, xlm-roberta and distilbert; {} is {} ({})",
            model_types(Some(Task::Generate)).join(", "),
            model.display(),
            arch.model_type,
            arch.name
        )));
    }
    check_written_output(model, output, overwrite, "merged")?;
    if !adapter.is_dir() {
        return Err(CliError::File {
            path: adapter.to_path_buf(),
            message: "no such adapter folder".into(),
        });
    }
    if lm {
        let config = HfDecoderConfig::from_pretrained(model).map_err(model_err)?;
        let lm = DecoderLm::from_pretrained(model, device)
            .map_err(model_err)?
            .with_adapter(adapter, &config)?;
        lm.save_pretrained(output, &config).map_err(model_err)?;
    } else {
        BertForSequenceClassification::from_pretrained_adapted(model, adapter, device)?
            .save_pretrained(output)
            .map_err(model_err)?;
    }
    let copied = copy_companions(model, output)?;
    outln!(
        "merged {} into {}: {} (config.json, model.safetensors{}{})",
        adapter.display(),
        model.display(),
        output.display(),
        if copied.is_empty() { "" } else { ", " },
        copied.join(", ")
    );
    Ok(())
}

/// Runs `zoo quantize`: the checkpoint of `model` with its layer stacks' linear weights
/// quantized, written to `output` as `config.json` and `model.bpk`, with the folder's
/// tokenizer, generation and processor files, and a sentence-transformers folder's
/// module files.
pub(crate) fn quantize(
    model: &Path,
    quant: &crate::QuantArgs,
    output: &Path,
    overwrite: bool,
    device: &Device,
) -> Result<()> {
    let options = quant
        .options()?
        .expect("zoo quantize always names a scheme");
    check_written_output(model, output, overwrite, "quantized")?;
    let (quantized, report) = AutoModel::from_pretrained_quantized(model, &options, device)?;
    crate::report_quantized(&options, &report, device);
    quantized.save_pretrained(output)?;
    let mut copied = copy_companions(model, output)?;
    copied.extend(copy_sentence_modules(model, output)?);
    outln!(
        "wrote {}: config.json, model.bpk{}{}",
        output.display(),
        if copied.is_empty() { "" } else { ", " },
        copied.join(", ")
    );
    Ok(())
}

/// A sentence-transformers folder's own files (`modules.json`, its config files, and the
/// files of each module's folder, such as `1_Pooling/config.json`), copied beside a
/// checkpoint written from its transformer.
fn copy_sentence_modules(from: &Path, to: &Path) -> Result<Vec<String>> {
    let modules = from.join("modules.json");
    if !modules.is_file() {
        return Ok(Vec::new());
    }
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| CliError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    };
    let entries: Vec<serde_json::Value> =
        serde_json::from_slice(&read(&modules)?).map_err(|e| CliError::File {
            path: modules.clone(),
            message: e.to_string(),
        })?;
    let mut names: Vec<String> = [
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ]
    .into_iter()
    .filter(|n| from.join(n).is_file())
    .map(String::from)
    .collect();
    for entry in entries {
        let path = entry["path"].as_str().unwrap_or_default();
        let folder = Path::new(path);
        let plain = folder
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if path.is_empty() || !plain || !from.join(folder).is_dir() {
            continue;
        }
        let listing = std::fs::read_dir(from.join(folder)).map_err(|e| CliError::File {
            path: from.join(folder),
            message: e.to_string(),
        })?;
        for file in listing.flatten().filter(|f| f.path().is_file()) {
            names.push(folder.join(file.file_name()).to_string_lossy().into_owned());
        }
    }
    for name in &names {
        let target = to.join(name);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| CliError::File {
                path: parent.to_path_buf(),
                message: e.to_string(),
            })?;
        }
        zoo_train::write_atomic(&target, &read(&from.join(name))?).map_err(train_err)?;
    }
    Ok(names)
}

/// Refuses an `output` folder that is the `model` folder, or that holds a checkpoint
/// without `overwrite`, before anything is read or written; `what` names the checkpoint
/// (merged, quantized).
fn check_written_output(model: &Path, output: &Path, overwrite: bool, what: &str) -> Result<()> {
    if same_folder(model, output) {
        return Err(CliError::Input(format!(
            "--output {} is the model folder; write the {what} checkpoint elsewhere",
            output.display()
        )));
    }
    if output.join("config.json").exists() && !overwrite {
        return Err(CliError::Input(format!(
            "{} holds a checkpoint; --overwrite replaces it",
            output.display()
        )));
    }
    Ok(())
}

/// Whether two paths name the same existing folder.
fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Runs `zoo train`.
pub(crate) fn train(args: &TrainCmdArgs, device_name: &str, device: &Device) -> Result<()> {
    let detected = Detected::new(&args.model)?;
    let arch = detected.architecture;
    let encoder = matches!(arch.model_type, "bert" | "roberta");
    let fits = match args.task {
        TrainTask::CausalLm => arch.serves(Task::Generate),
        TrainTask::Seq2seq => arch.serves(Task::Translate),
        TrainTask::MaskedLm | TrainTask::Classification | TrainTask::TokenClassification => encoder,
    };
    if !fits {
        let (kind, types) = match args.task {
            TrainTask::CausalLm => ("a causal LM", model_types(Some(Task::Generate))),
            TrainTask::Seq2seq => ("an encoder-decoder", model_types(Some(Task::Translate))),
            _ => ("an encoder", vec!["bert", "roberta"]),
        };
        return Err(CliError::Unsupported(format!(
            "--task {} needs {kind} ({}); {} is {} ({})",
            task_name(args.task),
            types.join(", "),
            args.model.display(),
            arch.model_type,
            arch.name
        )));
    }
    if args.from_scratch && !matches!(args.task, TrainTask::CausalLm | TrainTask::Seq2seq) {
        return Err(CliError::Unsupported(format!(
            "--from-scratch trains --task causal-lm and seq2seq; --task {} starts from a \
             checkpoint's weights",
            task_name(args.task)
        )));
    }
    if args.test_file.is_some() && args.task != TrainTask::Classification {
        return Err(CliError::Unsupported(format!(
            "--test scores --task classification; --task {} reports its validation loss",
            task_name(args.task)
        )));
    }
    if args.lora_rank.is_some()
        && !matches!(args.task, TrainTask::CausalLm | TrainTask::Classification)
    {
        return Err(CliError::Unsupported(format!(
            "--lora-rank trains adapters for --task causal-lm and classification; --task {} \
             trains every weight",
            task_name(args.task)
        )));
    }
    let mut defaults = TrainConfig::fine_tuning(args.output.join("training"));
    defaults.devices = vec![device_name.to_string()];
    let cfg = args.run.apply(defaults).map_err(train_err)?;
    // The settings that do not depend on the data's size, checked before anything is
    // loaded; fit checks them all again against the data.
    cfg.validate(1 << 40).map_err(train_err)?;
    if args.valid_file.is_none() && !(args.valid_fraction > 0.0 && args.valid_fraction < 1.0) {
        return Err(CliError::Input(format!(
            "--valid-fraction must be in (0, 1), got {}",
            args.valid_fraction
        )));
    }
    check_output(args, cfg.overwrite)?;
    if args.max_len == Some(0) {
        return Err(CliError::Input("--max-len must be > 0, got 0".into()));
    }
    let read = |p: &Path| Records::read(p).map_err(data);
    let files = Data {
        train: read(&args.train_file)?,
        valid: args.valid_file.as_deref().map(read).transpose()?,
        test: args.test_file.as_deref().map(read).transpose()?,
        max_len: args.max_len.unwrap_or(DEFAULT_MAX_LEN),
        too_long: args.too_long,
        truncated: std::cell::Cell::new(0),
    };
    device.seed(cfg.seed);
    let run = Run {
        args,
        cfg: &cfg,
        device,
        files,
    };
    let summary = match args.task {
        TrainTask::CausalLm => run.causal_lm()?,
        TrainTask::MaskedLm => run.masked_lm()?,
        TrainTask::Classification => run.classification()?,
        TrainTask::TokenClassification => run.token_classification()?,
        TrainTask::Seq2seq => match (arch.model_type, args.from_scratch) {
            ("t5", false) => run.seq2seq(
                |d, dev| T5ForConditionalGeneration::from_pretrained(d, dev),
                |m: &T5ForConditionalGeneration, d| m.save_pretrained(d),
            )?,
            ("t5", true) => run.seq2seq(
                |d, dev| T5ForConditionalGeneration::from_config(d, dev),
                |m: &T5ForConditionalGeneration, d| m.save_pretrained(d),
            )?,
            (_, false) => run.seq2seq(
                |d, dev| MarianMtModel::from_pretrained(d, dev),
                |m: &MarianMtModel, d| m.save_pretrained(d),
            )?,
            (_, true) => run.seq2seq(
                |d, dev| MarianMtModel::from_config(d, dev),
                |m: &MarianMtModel, d| m.save_pretrained(d),
            )?,
        },
    };
    let copied = copy_companions(&args.model, &args.output)?;
    summary.print(&args.output, &copied);
    Ok(())
}

fn task_name(task: TrainTask) -> &'static str {
    match task {
        TrainTask::CausalLm => "causal-lm",
        TrainTask::MaskedLm => "masked-lm",
        TrainTask::Classification => "classification",
        TrainTask::TokenClassification => "token-classification",
        TrainTask::Seq2seq => "seq2seq",
    }
}

/// What a finished run reports.
struct Summary {
    examples: (usize, usize),
    truncated: usize,
    max_len: usize,
    /// Trainable and all parameters.
    params: (usize, usize),
    /// Whether the output is a LoRA adapter alone.
    adapter: bool,
    last: Option<RoundMetrics>,
    metrics_csv: PathBuf,
    plot: Option<PathBuf>,
    /// The class names, for the tasks that have them.
    labels: Option<String>,
    /// The score on the --test examples.
    test: Option<String>,
    /// Where the starting weights came from, when not from the checkpoint.
    weights: Option<String>,
}

impl Summary {
    fn print(&self, output: &Path, copied: &[String]) {
        outln!(
            "examples:     {} train, {} valid, at most {} tokens ({} cut to fit)",
            self.examples.0,
            self.examples.1,
            self.max_len,
            self.truncated
        );
        let (trainable, all) = self.params;
        outln!(
            "parameters:   {} trained of {} ({:.2}%)",
            zoo_core::thousands(trainable),
            zoo_core::thousands(all),
            100.0 * trainable as f64 / all.max(1) as f64
        );
        if let Some(weights) = &self.weights {
            outln!("weights:      {weights}");
        }
        if let Some(labels) = &self.labels {
            outln!("labels:       {labels}");
        }
        if let Some(last) = &self.last {
            let mut keys: Vec<&String> = last.keys().filter(|k| *k != "step").collect();
            keys.sort();
            let shown: Vec<String> = keys
                .iter()
                .map(|k| format!("{k} {:.4}", last[*k]))
                .collect();
            outln!("last round:   {}", shown.join(", "));
        }
        if let Some(test) = &self.test {
            outln!("test:         {test}");
        }
        let written = if !self.adapter {
            "config.json, model.safetensors"
        } else if output.join(peft::LABELS_FILE).is_file() {
            "the LoRA adapter: adapter_config.json, adapter_model.safetensors, id2label.json"
        } else {
            "the LoRA adapter: adapter_config.json, adapter_model.safetensors"
        };
        outln!(
            "checkpoint:   {} ({written}{}{})",
            output.display(),
            if copied.is_empty() { "" } else { ", " },
            copied.join(", ")
        );
        outln!("metrics:      {}", self.metrics_csv.display());
        if let Some(plot) = &self.plot {
            outln!("plot:         {}", plot.display());
        }
    }
}

fn options(resume: bool) -> FitOptions {
    FitOptions {
        resume,
        report: Some(Box::new(|r| eprintln!("{r}"))),
        ..FitOptions::default()
    }
}

/// One `zoo train` run: its arguments, config, device and data.
struct Run<'a> {
    args: &'a TrainCmdArgs,
    cfg: &'a TrainConfig,
    device: &'a Device,
    files: Data,
}

impl Run<'_> {
    /// The summary's line on the weights of a run --from-scratch.
    fn scratch_note(&self) -> Option<String> {
        self.args.from_scratch.then(|| {
            format!(
                "drawn at random (--from-scratch, seed {}), not read from {}",
                self.cfg.seed,
                self.args.model.display()
            )
        })
    }

    fn max_len(&mut self, model_limit: usize) -> usize {
        let max = self
            .args
            .max_len
            .unwrap_or(DEFAULT_MAX_LEN.min(model_limit));
        self.files.max_len = max;
        max
    }

    /// Trains `task` on the examples with zoo-train's learner; returns the trained task
    /// and the run's summary.
    fn fit<T, I, B>(
        &self,
        task: T,
        (train, valid): (Vec<I>, Vec<I>),
        batcher: B,
    ) -> Result<(T, Summary)>
    where
        T: zoo_train::Task,
        I: Clone + Send + Sync + std::fmt::Debug + 'static,
        B: Batcher<I, <T as burn::train::TrainStep>::Input> + Clone + 'static,
        T: burn::train::InferenceStep<Input = <T as burn::train::TrainStep>::Input>,
        <T as burn::train::TrainStep>::Input: Clone + std::fmt::Debug + Send + Sync,
    {
        let params = peft::parameter_counts(&task);
        let examples = (train.len(), valid.len());
        let fitted = zoo_train::fit(
            task,
            train,
            valid,
            batcher,
            self.cfg,
            std::slice::from_ref(self.device),
            options(self.args.resume),
        )
        .map_err(train_err)?;
        let summary = Summary {
            examples,
            truncated: self.files.truncated.get(),
            max_len: self.files.max_len,
            params,
            adapter: false,
            last: fitted.epochs.last().cloned(),
            metrics_csv: fitted.metrics_csv,
            plot: fitted.plot,
            labels: None,
            test: None,
            weights: None,
        };
        Ok((fitted.task, summary))
    }

    fn causal_lm(mut self) -> Result<Summary> {
        let dir = &self.args.model;
        let ad = self.cfg.autodiff(self.device);
        let config = HfDecoderConfig::from_pretrained(dir).map_err(model_err)?;
        let model = if self.args.from_scratch {
            // Drawn here, before fit, so that --seed decides them.
            ad.seed(self.cfg.seed);
            config
                .decoder()
                .map_err(model_err)?
                .init(&ad)
                .map_err(model_err)?
        } else {
            DecoderLm::from_pretrained(dir, &ad).map_err(model_err)?
        };
        let map = config.key_map();
        let (model, adapter) = self.lora(model, &map, config.model_type(), "CAUSAL_LM", &ad)?;
        let tok = LmTokenizer::from_pretrained(dir)?;
        let block = self.max_len(model.max_len());
        if block > model.max_len() {
            return Err(CliError::Input(format!(
                "--max-len {block} is longer than the model's {} positions",
                model.max_len()
            )));
        }
        require(&self.files, &[self.args.text_column.as_str()])?;
        let eos = config.eos_token_ids().first().copied();
        let vocab = model.vocab_size();
        let column = self.args.text_column.clone();
        let (train, valid) = self
            .files
            .items(self.cfg, self.args.valid_fraction, |records| {
                let field = text_field(records, &column);
                let mut stream = Vec::new();
                for row in &records.rows {
                    let text = records.text(row, field).map_err(data)?;
                    let ids = tok.encode(text).map_err(at_row(records, row))?;
                    check_ids(records, row, &ids, vocab)?;
                    stream.extend(ids);
                    if let Some(e) = eos.filter(|e| stream.last() != Some(e)) {
                        stream.push(e);
                    }
                }
                Ok(blocks(&stream, block))
            })?;
        let (task, mut summary) = self.fit(
            CausalLmTask::new(model),
            (train, valid),
            CausalLmBatcher::new(eos.unwrap_or(0)),
        )?;
        summary.weights = self.scratch_note();
        let model: DecoderLm = task.model.valid();
        match adapter {
            Some(adapter) => {
                summary.adapter = true;
                peft::save_adapter(&model, &map, &adapter, &self.args.output)?;
            }
            None => model
                .save_pretrained(&self.args.output, &config)
                .map_err(model_err)?,
        }
        Ok(summary)
    }

    /// The model with LoRA adapters on the modules --lora-targets names (or PEFT's
    /// default ones for the model type), and the adapter's config, when --lora-rank asks
    /// for them; else the model as it is.
    fn lora<M: Module>(
        &self,
        model: M,
        map: &KeyMap,
        model_type: &str,
        task_type: &str,
        device: &Device,
    ) -> Result<(M, Option<AdapterConfig>)> {
        let Some(rank) = self.args.lora_rank else {
            return Ok((model, None));
        };
        let alpha = self.args.lora_alpha.unwrap_or(2.0 * rank as f64);
        if !alpha.is_finite() || alpha <= 0.0 {
            return Err(CliError::Input(format!(
                "--lora-alpha must be finite and > 0, got {alpha}"
            )));
        }
        let targets: Vec<String> = if self.args.lora_targets.is_empty() {
            default_lora_targets(model_type)
                .iter()
                .map(|t| (*t).to_string())
                .collect()
        } else {
            self.args.lora_targets.clone()
        };
        if targets.is_empty() {
            return Err(CliError::Input(format!(
                "no default LoRA targets for model type {model_type}: give --lora-targets"
            )));
        }
        let (model, _) = match &self.args.qlora {
            None => peft::apply_lora(model, map, rank, alpha, &targets)
                .map_err(|m| CliError::Input(format!("--lora-targets: {m}")))?,
            Some(bits) => {
                let bits: QuantBits = bits.parse()?;
                let quant = match self.args.qlora_block {
                    0 => QuantOptions::per_tensor(bits),
                    block => QuantOptions::per_block(bits, block),
                };
                peft::apply_qlora(model, map, rank, alpha, &targets, &quant, device)
                    .map_err(|m| CliError::Input(format!("--qlora {quant}: {m}")))?
            }
        };
        let mut config = AdapterConfig::lora(rank, alpha, &targets, task_type);
        config.base_model_name_or_path = Some(self.args.model.display().to_string());
        // GPT-2's attention and MLP are `Conv1D`, whose weights are stored `[in, out]`.
        config.fan_in_fan_out = model_type == "gpt2";
        Ok((model, Some(config)))
    }

    fn bert_tokenizer(&mut self, model_limit: usize) -> Result<BertTokenizer> {
        let max = self.max_len(model_limit);
        if max > model_limit {
            return Err(CliError::Input(format!(
                "--max-len {max} is longer than the model's {model_limit} positions"
            )));
        }
        Ok(BertTokenizer::from_pretrained(&self.args.model, max)?)
    }

    fn classification(mut self) -> Result<Summary> {
        let dir = self.args.model.clone();
        let ad = self.cfg.autodiff(self.device);
        let (text, label) = (
            self.args.text_column.clone(),
            self.args.label_column.clone(),
        );
        if !self.files.train.format.has_fields() {
            return Err(CliError::File {
                path: self.files.train.path.clone(),
                message: "a classification file needs a label beside each text: use \
                          .jsonl, .csv or .tsv"
                    .into(),
            });
        }
        require(&self.files, &[text.as_str(), label.as_str()])?;
        let labels = Labels::from_records(&self.files.train, &label).map_err(data)?;
        let (mut model, labels, kept, fresh_pooler) = classifier(&dir, &labels, &ad)?;
        model.bert.set_labels(labels.names());
        let map = model.key_map();
        let model_type = model.bert.config().model_type.clone();
        let model_type = model_type.as_deref().unwrap_or("bert");
        let (model, adapter) = self.lora(model, &map, model_type, "SEQ_CLS", &ad)?;
        // With an adapter, the head trains whole beside it and is saved with it (PEFT's
        // modules_to_save), and so is a pooler that the base lacked.
        let (model, adapter) = match adapter {
            None => (model, None),
            Some(mut config) => {
                let head = head_modules(model_type, fresh_pooler);
                let model = peft::train_saved_modules(model, &map, &head)
                    .map_err(|m| CliError::Input(format!("--lora-targets: {m}")))?;
                config.modules_to_save = Some(serde_json::Value::from(head));
                config.labels = Some(labels.names().to_vec());
                (model, Some(config))
            }
        };
        let tok = self.bert_tokenizer(model.bert.max_len())?;
        let vocab = model.bert.vocab_size();
        let files = &self.files;
        let encode = |records: &Records| -> Result<Vec<(Encoding, usize)>> {
            let mut out = Vec::with_capacity(records.rows.len());
            for row in &records.rows {
                let (encoding, cut) = tok
                    .encode_counted(records.text(row, &text).map_err(data)?)
                    .map_err(at_row(records, row))?;
                files.too_long(records, row, encoding.ids.len(), files.max_len, cut)?;
                check_ids(records, row, &widen(&encoding.ids), vocab)?;
                let name = records.text(row, &label).map_err(data)?;
                let class = labels.id(records, row, &label, name).map_err(data)?;
                out.push((encoding, class));
            }
            Ok(out)
        };
        let (train, valid) = files.items(self.cfg, self.args.valid_fraction, &encode)?;
        let test = files.test.as_ref().map(&encode).transpose()?;
        let batcher = TextClasses { tok: tok.clone() };
        let (task, mut summary) = self.fit(
            ClassificationTask::new(model),
            (train, valid),
            batcher.clone(),
        )?;
        let model: BertForSequenceClassification = task.model.valid();
        summary.labels = Some(format!(
            "{} ({})",
            labels.names().join(", "),
            if kept {
                "the checkpoint's head and label ids"
            } else {
                "a new classification head"
            }
        ));
        if let Some(test) = test {
            summary.test = Some(test_accuracy(&model, &test, &batcher, self.device)?);
        }
        match adapter {
            Some(adapter) => {
                summary.adapter = true;
                peft::save_adapter(&model, &map, &adapter, &self.args.output)?;
            }
            None => model.save_pretrained(&self.args.output)?,
        }
        Ok(summary)
    }

    fn masked_lm(mut self) -> Result<Summary> {
        let dir = self.args.model.clone();
        let ad = self.cfg.autodiff(self.device);
        let model = match BertForMaskedLm::from_pretrained(&dir, &ad) {
            Ok(m) => m,
            // A base checkpoint: the encoder's weights under a new head (its decoder is
            // tied to the word embeddings, so only the transform is new).
            Err(_) => {
                let base = BertModel::from_pretrained(&dir, &ad)?;
                let mut mlm = BertForMaskedLm::new(base.config(), &ad)?;
                mlm.bert = base;
                mlm
            }
        };
        let tok = self.bert_tokenizer(model.bert.max_len())?;
        require(&self.files, &[self.args.text_column.as_str()])?;
        let words = replacement_words(&tok);
        let column = self.args.text_column.clone();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(self.cfg.seed);
        let vocab = model.bert.vocab_size();
        let files = &self.files;
        let (train, valid) = files.items(self.cfg, self.args.valid_fraction, |records| {
            let field = text_field(records, &column);
            let mut encodings = Vec::with_capacity(records.rows.len());
            for row in &records.rows {
                let (encoding, cut) = tok
                    .encode_counted(records.text(row, field).map_err(data)?)
                    .map_err(at_row(records, row))?;
                files.too_long(records, row, encoding.ids.len(), files.max_len, cut)?;
                check_ids(records, row, &widen(&encoding.ids), vocab)?;
                encodings.push(encoding);
            }
            Ok(masked_items(
                &tok,
                &encodings,
                &words,
                &MaskingConfig::default(),
                &mut rng,
            )?)
        })?;
        let (task, summary) = self.fit(
            CausalLmTask::new(model),
            (train, valid),
            CausalLmBatcher::new(tok.pad_id() as usize),
        )?;
        let model: BertForMaskedLm = task.model.valid();
        model.save_pretrained(&self.args.output)?;
        Ok(summary)
    }

    fn token_classification(mut self) -> Result<Summary> {
        let dir = self.args.model.clone();
        let ad = self.cfg.autodiff(self.device);
        let (words_field, tags_field) = (
            self.args.tokens_column.clone(),
            self.args.tags_column.clone(),
        );
        if self.files.train.format != zoo_data::Format::JsonLines {
            return Err(CliError::File {
                path: self.files.train.path.clone(),
                message: "token classification reads JSON Lines rows of tokens and tags \
                          (.jsonl)"
                    .into(),
            });
        }
        require(&self.files, &[words_field.as_str(), tags_field.as_str()])?;
        let labels = Labels::from_records(&self.files.train, &tags_field).map_err(data)?;
        let base = BertModel::from_pretrained(&dir, &ad)?;
        let mut model = BertForTokenClassification::new(base.config(), labels.len(), &ad)?;
        model.bert = base;
        model.bert.pooler = None;
        let tok = self.bert_tokenizer(model.bert.max_len())?;
        let vocab = model.bert.vocab_size();
        let files = &self.files;
        let (train, valid) = files.items(self.cfg, self.args.valid_fraction, |records| {
            let mut out = Vec::with_capacity(records.rows.len());
            for row in &records.rows {
                let words = records.list(row, &words_field).map_err(data)?;
                let tags = records.list(row, &tags_field).map_err(data)?;
                if words.len() != tags.len() {
                    return Err(data(records.error(
                        row,
                        format!(
                            "{} {words_field} but {} {tags_field}: one tag per word",
                            words.len(),
                            tags.len()
                        ),
                    )));
                }
                let (encoding, word_of, cut) =
                    tok.encode_words(words).map_err(at_row(records, row))?;
                files.too_long(records, row, encoding.ids.len(), files.max_len, cut)?;
                let ids = widen(&encoding.ids);
                check_ids(records, row, &ids, vocab)?;
                // HF's recipe: each word's tag on its first token, nothing on the rest.
                let mut target = Vec::with_capacity(ids.len());
                let mut previous = None;
                for w in &word_of {
                    target.push(match *w {
                        Some(w) if Some(w) != previous => Some(
                            labels
                                .id(records, row, &tags_field, &tags[w])
                                .map_err(data)?,
                        ),
                        _ => None,
                    });
                    previous = *w;
                }
                out.push(CausalLmItem { input: ids, target });
            }
            Ok(out)
        })?;
        model.bert.set_labels(labels.names());
        let (task, mut summary) = self.fit(
            CausalLmTask::new(model),
            (train, valid),
            CausalLmBatcher::new(tok.pad_id() as usize),
        )?;
        summary.labels = Some(labels.names().join(", "));
        let model: BertForTokenClassification = task.model.valid();
        model.save_pretrained(&self.args.output)?;
        Ok(summary)
    }

    fn seq2seq<M, L, S>(mut self, load: L, save: S) -> Result<Summary>
    where
        M: Seq2SeqLogits + EncoderDecoder,
        L: Fn(&Path, &Device) -> zoo_seq2seq::Result<M>,
        S: Fn(&M, &Path) -> zoo_seq2seq::Result<()>,
    {
        let dir = self.args.model.clone();
        let ad = self.cfg.autodiff(self.device);
        if self.args.from_scratch {
            // Drawn in `load`, before fit, so that --seed decides them.
            ad.seed(self.cfg.seed);
        }
        let model = load(&dir, &ad).map_err(model_err)?;
        let tok = LmTokenizer::from_pretrained(&dir)?;
        let max = self.max_len(model.max_source_len().min(model.max_target_len()));
        if !self.files.train.format.has_fields() {
            return Err(CliError::File {
                path: self.files.train.path.clone(),
                message: "a seq2seq file needs a source and a target per row: use .jsonl, \
                          .csv or .tsv"
                    .into(),
            });
        }
        let (source, target) = (
            self.args.source_column.clone(),
            self.args.target_column.clone(),
        );
        require(&self.files, &[source.as_str(), target.as_str()])?;
        let (vocab, eos) = (model.vocab_size(), model.eos_ids());
        let files = &self.files;
        let (train, valid) = files.items(self.cfg, self.args.valid_fraction, |records| {
            let mut out = Vec::with_capacity(records.rows.len());
            for row in &records.rows {
                let err = at_row(records, row);
                let mut src = tok
                    .encode(records.text(row, &source).map_err(data)?)
                    .map_err(&err)?;
                let mut tgt = tok
                    .encode_plain(records.text(row, &target).map_err(data)?)
                    .map_err(&err)?;
                // The batcher ends the target with the end token; max_len counts it.
                for (ids, room) in [(&mut src, max), (&mut tgt, max - 1)] {
                    if files.too_long(records, row, ids.len(), room, false)? {
                        // A source that ends in the end token keeps it, as HF cuts.
                        let last = ids.last().copied();
                        ids.truncate(room);
                        if let (Some(l), Some(end)) = (last, ids.last_mut())
                            && eos.contains(&l)
                        {
                            *end = l;
                        }
                    }
                }
                check_ids(records, row, &src, vocab)?;
                check_ids(records, row, &tgt, vocab)?;
                out.push(Seq2SeqItem { src, tgt });
            }
            Ok(out)
        })?;
        let batcher = Seq2SeqBatcher {
            pad_id: model.pad_id(),
            bos_id: model.start_id(),
            eos_id: eos.first().copied().unwrap_or(1),
        };
        let (task, mut summary) = self.fit(Seq2SeqTask::new(model), (train, valid), batcher)?;
        summary.weights = self.scratch_note();
        let model = task.model.valid();
        save(&model, &self.args.output).map_err(model_err)?;
        Ok(summary)
    }
}

/// PEFT's default LoRA targets for a model type (its
/// `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`).
fn default_lora_targets(model_type: &str) -> &'static [&'static str] {
    match model_type {
        "gpt2" => &["c_attn"],
        "gpt_neox" => &["query_key_value"],
        "phi3" => &["qkv_proj"],
        "llama" | "mistral" | "qwen2" | "qwen3" | "gemma" | "marian" | "bart" | "mbart" => {
            &["q_proj", "v_proj"]
        }
        "bert" | "roberta" | "xlm-roberta" => &["query", "value"],
        "distilbert" => &["q_lin", "v_lin"],
        "t5" => &["q", "v"],
        _ => &[],
    }
}

fn widen(ids: &[u32]) -> Vec<usize> {
    ids.iter().map(|&i| i as usize).collect()
}

/// Consecutive blocks of `len + 1` tokens of `stream`, overlapping by one so that every
/// token after the first is a target once: inputs of `len` tokens, the last one shorter.
fn blocks(stream: &[usize], len: usize) -> Vec<CausalLmItem> {
    let mut out = Vec::new();
    let mut start = 0;
    while start + 1 < stream.len() {
        let end = (start + len + 1).min(stream.len());
        out.push(CausalLmItem::full(&stream[start..end]));
        start += len;
    }
    out
}

/// The sequence classifier to train: the checkpoint's own when it is one whose labels
/// hold every label of the data (their ids kept), else a new head on its encoder (the
/// summary says which); and whether its pooler is new too (a base without one).
fn classifier(
    dir: &Path,
    labels: &Labels,
    device: &Device,
) -> Result<(BertForSequenceClassification, Labels, bool, bool)> {
    if let Ok(model) = BertForSequenceClassification::from_pretrained(dir, device) {
        let names = Labels::in_order(model.bert.config().labels());
        if names.covers(labels) {
            return Ok((model, names, true, false));
        }
    }
    let base = BertModel::from_pretrained(dir, device)?;
    let fresh_pooler = base.pooler.is_none();
    let model = BertForSequenceClassification::from_encoder(base, labels.len(), device)?;
    Ok((model, labels.clone(), false, fresh_pooler))
}

/// The HF modules of a sequence classifier that train whole beside a LoRA adapter and
/// are saved with it (PEFT's `modules_to_save`): the head, as PEFT's default names it;
/// DistilBERT's `pre_classifier` when the base has none (PEFT's default leaves a new one
/// untrained); BERT's pooler when the base has none. RoBERTa's pooler is its head's
/// `classifier.dense`.
fn head_modules(model_type: &str, fresh_pooler: bool) -> Vec<String> {
    let mut out = vec!["classifier".to_string()];
    if fresh_pooler {
        match model_type {
            "distilbert" => out.push("pre_classifier".into()),
            "roberta" | "xlm-roberta" => {}
            _ => out.push("pooler".into()),
        }
    }
    out
}

/// The ids a masked token may be replaced by: the vocabulary without the special
/// tokens.
fn replacement_words(tok: &BertTokenizer) -> Vec<u32> {
    let mut special = vec![tok.pad_id(), tok.mask_id()];
    for name in ["[UNK]", "<unk>", "[CLS]", "[SEP]", "<s>", "</s>"] {
        special.extend(tok.token_id(name));
    }
    (0..tok.vocab_size() as u32)
        .filter(|id| !special.contains(id))
        .collect()
}

/// The accuracy of `model` on the `--test` examples, with the majority class's share
/// beside it, as the summary prints it.
fn test_accuracy(
    model: &BertForSequenceClassification,
    items: &[(Encoding, usize)],
    batcher: &TextClasses,
    device: &Device,
) -> Result<String> {
    let mut right = 0;
    let mut counts = std::collections::BTreeMap::<usize, usize>::new();
    for chunk in items.chunks(64) {
        let batch = batcher.batch(chunk.to_vec(), device);
        for ((_, class), p) in chunk.iter().zip(model.predict(batch.inputs)?) {
            right += usize::from(p == *class);
            *counts.entry(*class).or_default() += 1;
        }
    }
    let n = items.len().max(1) as f64;
    let majority = counts.values().max().copied().unwrap_or(0);
    Ok(format!(
        "accuracy {:.1}% over {} examples (the most frequent label alone: {:.1}%)",
        100.0 * right as f64 / n,
        items.len(),
        100.0 * majority as f64 / n
    ))
}

/// Pads `(encoding, class)` pairs into a classification batch.
#[derive(Clone)]
struct TextClasses {
    tok: BertTokenizer,
}

impl Batcher<(Encoding, usize), ClassificationBatch<EncoderInput>> for TextClasses {
    fn batch(
        &self,
        items: Vec<(Encoding, usize)>,
        device: &Device,
    ) -> ClassificationBatch<EncoderInput> {
        let classes: Vec<i64> = items.iter().map(|(_, c)| *c as i64).collect();
        let n = classes.len();
        let batch = self
            .tok
            .pad(items.into_iter().map(|(e, _)| e).collect())
            .expect("the loader never makes an empty batch");
        ClassificationBatch::new(
            EncoderInput::from_batch(&batch, device),
            Tensor::from_data(TensorData::new(classes, [n]), device),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_every_target_once() {
        let stream: Vec<usize> = (0..10).collect();
        let b = blocks(&stream, 4);
        let inputs: Vec<&[usize]> = b.iter().map(|i| i.input.as_slice()).collect();
        assert_eq!(inputs, [&[0, 1, 2, 3][..], &[4, 5, 6, 7], &[8]]);
        let targets: Vec<usize> = b
            .iter()
            .flat_map(|i| i.target.iter().flatten())
            .copied()
            .collect();
        assert_eq!(targets, (1..10).collect::<Vec<_>>());
        assert!(blocks(&[7], 4).is_empty());
    }

    #[test]
    fn hold_out_takes_a_seeded_share() {
        let mut items: Vec<usize> = (0..20).collect();
        let valid = hold_out(&mut items, 0.25, 3, Path::new("x")).unwrap();
        assert_eq!(valid.len(), 5);
        assert_eq!(items.len(), 15);
        let mut all: Vec<usize> = items.iter().chain(&valid).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..20).collect::<Vec<_>>());
        let mut again: Vec<usize> = (0..20).collect();
        assert_eq!(
            hold_out(&mut again, 0.25, 3, Path::new("x")).unwrap(),
            valid
        );
        let mut one = vec![1];
        assert!(hold_out(&mut one, 0.1, 0, Path::new("x")).is_err());
        assert!(hold_out(&mut items, 1.0, 0, Path::new("x")).is_err());
    }
}
