//! `zoo`: one command line over the HF checkpoints of every family.
//!
//! ```text
//! zoo info     --model DIR
//! zoo forward  --model DIR --input IN.json --output OUT.json
//! zoo generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T] ...
//! zoo chat     --model DIR [--messages FILE.json [--render]] [--system TEXT] ...
//! zoo translate --model DIR --text TEXT [--num-beams N] ...
//! zoo tokenize --model DIR --text TEXT [--target]
//! zoo fill-mask --model DIR --text TEXT [--top-k K]
//! zoo ner      --model DIR --text TEXT [--aggregation none|simple|first]
//! zoo qa       --model DIR --question TEXT (--context TEXT | --context-file FILE) [--top-k K]
//! zoo classify --model DIR (--image FILE | --text TEXT) [--top K]
//! zoo embed    --model DIR --input IN.json --output OUT.json
//! zoo train    --model DIR --task TASK --train FILE [--valid FILE] --output DIR ...
//! zoo merge    --model DIR --adapter DIR --output DIR
//! zoo quantize --model DIR --scheme q8|q4 [--block N] --output DIR
//! ```
//!
//! Every command takes `--device` (flex, ndarray, wgpu, tch, tch-cuda, cuda) and picks the
//! model from `config.json`'s `model_type` and `architectures`. `--model` is a folder or a
//! hub id (`org/name`), found in the HF cache or downloaded into it. A failure is one line on
//! stderr, `error: ...`, and exit status 1.

/// Writes to stdout; when the reader has gone (`zoo info ... | head`), the program ends
/// quietly instead of failing on every later line.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

pub(crate) fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: cannot write to stdout: {e}");
    std::process::exit(1);
}

mod text;
mod train;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use burn::tensor::{Device, activation::softmax};
use clap::{Parser, Subcommand};
use zoo_core::registry::{Classes, ClassifyInput, Modality, Task, Translator, floats};
use zoo_core::{BeamConfig, GenerationConfig, QuantBits, QuantOptions, WeightsFile};
use zoo_data::{BertTokenizer, LmTokenizer};
use zoo_device::FloatType;
use zoo_encoder::SentenceEncoder;
use zoo_hub::hub::{self, HubOptions};
use zoo_hub::pipelines;
use zoo_hub::{AutoModel, Detected, architecture_names, model_types};

use zoo_cli::error::{CliError, Result};
use zoo_cli::{error, json};

/// mimalloc keeps freed tensor buffers for reuse (see the workspace's Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "zoo",
    version,
    about = "Run HuggingFace checkpoints of every Burn Model Zoo family: causal LMs, \
             encoders (and sentence-transformers), vision models and encoder-decoders. \
             `zoo info` names a folder's architecture; an unknown one is refused with the \
             list of supported model types."
)]
struct Cli {
    /// Backend to run on: flex, ndarray, wgpu, tch, tch-cuda or cuda (`cuda:1` for another GPU).
    #[arg(long, global = true, default_value = "flex")]
    device: String,
    /// Float type the model computes in: f32, or half precision, f16 or bf16 (flex, wgpu,
    /// tch, cuda; ndarray has f32 only). Stored weights are cast to it as they load.
    /// Default: the type the checkpoint stores its weights in, or f32 where the backend
    /// lacks it (a note says so); zoo train and zoo merge compute in f32.
    #[arg(long, global = true, value_name = "f32|f16|bf16")]
    dtype: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Architecture, parameter count, dtype and tensors of a checkpoint folder, read from
    /// its headers: every tensor's name and shape is checked against the architecture,
    /// and no weight is read or allocated.
    Info {
        /// The checkpoint folder (config.json and its weights), or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// Also read every weight and fail, naming the tensors, when any holds NaN or an
        /// infinity.
        #[arg(long)]
        check: bool,
    },
    /// The raw outputs for HF forward arguments read from JSON, for checking against
    /// other implementations.
    Forward {
        /// The checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// A JSON object of HF forward arguments: input_ids, attention_mask,
        /// token_type_ids (`[batch][length]` integers), pixel_values
        /// (`[batch][channels][height][width]` floats), interpolate_pos_encoding.
        #[arg(long)]
        input: PathBuf,
        /// Where to write the outputs as a JSON object of nested float lists (logits, or
        /// last_hidden_state and pooler_output).
        #[arg(long)]
        output: PathBuf,
        /// A PEFT LoRA adapter folder to fold into the model's weights.
        #[arg(long)]
        adapter: Option<PathBuf>,
        #[command(flatten)]
        quant: QuantArgs,
    },
    /// Continues a prompt with a causal LM, streaming the text.
    Generate(text::GenerateArgs),
    /// Talks with an instruct model through its chat template: each line of standard
    /// input is a user turn and the answer streams out; or answers (or, with --render,
    /// prints the prompt of) the messages of a JSON file.
    Chat(text::ChatArgs),
    /// Translates a text (or does what the model was trained for) with an encoder-decoder
    /// model, reading the folder's tokenizer (tokenizer.json, or its SentencePiece files).
    Translate(TranslateArgs),
    /// The most probable tokens for each mask (`[MASK]` or `<mask>`) of a text, from a
    /// masked LM, as transformers' fill-mask pipeline gives them (JSON).
    FillMask {
        /// The checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// The text, with one mask or more.
        #[arg(long)]
        text: String,
        /// How many tokens for each mask.
        #[arg(long, default_value_t = 5)]
        top_k: usize,
    },
    /// The best spans of a context that answer a question, from a model with a span
    /// head, as transformers' question-answering pipeline gives them (JSON: one answer,
    /// or a list of them best first for --top-k above 1).
    Qa(QaArgs),
    /// The probabilities of an image over candidate labels from CLIP, as transformers'
    /// zero-shot-image-classification pipeline gives them (JSON, most probable first).
    ZeroShotImage {
        /// The checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// The image file (PNG or JPEG).
        #[arg(long)]
        image: PathBuf,
        /// The candidate labels, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        labels: Vec<String>,
        /// The prompt each label goes into, at its `{}`.
        #[arg(long, default_value = pipelines::DEFAULT_TEMPLATE)]
        template: String,
    },
    /// Named entities of a text from a token classifier, as transformers'
    /// token-classification pipeline gives them (JSON, with character offsets).
    Ner {
        /// The checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// The text.
        #[arg(long)]
        text: String,
        /// none (a label per token), simple (adjacent tokens of one type grouped) or
        /// first (each word labelled by its first token, then grouped).
        #[arg(long, default_value = "simple")]
        aggregation: String,
    },
    /// Prints the token ids of a text as one JSON list, special tokens included, as
    /// `transformers`' tokenizer gives them: from tokenizer.json, a SentencePiece model
    /// (spiece.model, tokenizer.model), Marian's source.spm / target.spm with vocab.json,
    /// or a WordPiece vocab.txt.
    Tokenize {
        /// The checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// The text.
        #[arg(long)]
        text: String,
        /// Tokenize as a target: through Marian's target.spm (the same as the source
        /// for every other tokenizer).
        #[arg(long)]
        target: bool,
    },
    /// The top labels of an image or a text, with probabilities, from a model with a
    /// classification head.
    Classify {
        /// The checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// An image file (PNG or JPEG).
        #[arg(long, conflicts_with = "text", required_unless_present = "text")]
        image: Option<PathBuf>,
        /// A text.
        #[arg(long)]
        text: Option<String>,
        /// How many labels to show.
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// A PEFT LoRA adapter folder to fold into the model's weights.
        #[arg(long)]
        adapter: Option<PathBuf>,
        #[command(flatten)]
        quant: QuantArgs,
    },
    /// Fine-tunes a checkpoint on your own data (plain text, JSON Lines, CSV or TSV) and
    /// writes the result as a checkpoint folder that zoo and transformers load.
    Train(Box<train::TrainCmdArgs>),
    /// Folds a PEFT LoRA adapter (from zoo train or Python peft) into a causal LM's
    /// weights, or an encoder sequence classifier's, and writes the merged checkpoint
    /// folder.
    Merge {
        /// The base checkpoint folder, or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// The adapter folder (adapter_config.json, adapter_model.safetensors).
        #[arg(long)]
        adapter: PathBuf,
        /// Where to write the merged checkpoint.
        #[arg(long)]
        output: PathBuf,
        /// Replace a checkpoint already in --output.
        #[arg(long)]
        overwrite: bool,
    },
    /// Writes a copy of a checkpoint folder with the linear weights of its layer stacks
    /// quantized (model.bpk, Burn's format, under HF's names; embeddings, heads, norms
    /// and biases keep their precision), which every zoo command loads as it loads the
    /// original.
    Quantize {
        /// The checkpoint folder (a sentence-transformers folder too), or a hub id
        /// (org/name).
        #[arg(long)]
        model: PathBuf,
        /// q8 or q4: 8- or 4-bit symmetric values.
        #[arg(long, value_name = "q8|q4")]
        scheme: String,
        /// Values per scale along each weight's output dimension; 0 for one scale per
        /// tensor.
        #[arg(long, default_value_t = 32)]
        block: usize,
        /// Where to write the quantized checkpoint.
        #[arg(long)]
        output: PathBuf,
        /// Replace a checkpoint already in --output.
        #[arg(long)]
        overwrite: bool,
    },
    /// Sentence embeddings from a sentence-transformers folder.
    Embed {
        /// The sentence-transformers folder (modules.json, 1_Pooling/config.json, the
        /// BERT checkpoint and its tokenizer), or a hub id (org/name).
        #[arg(long)]
        model: PathBuf,
        /// A JSON file {"sentences": ["...", ...]}.
        #[arg(long)]
        input: PathBuf,
        /// Where to write {"embeddings": [[...], ...]}.
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        quant: QuantArgs,
    },
}

/// Weights quantized at load time, through Burn.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct QuantArgs {
    /// Quantize the linear weights of the layer stacks as the model loads: q8 or q4
    /// (embeddings and heads keep their precision; flex and wgpu take both, ndarray q8,
    /// tch neither).
    #[arg(long, value_name = "q8|q4")]
    pub(crate) quantize: Option<String>,
    /// Values per quantization scale along each weight's output dimension; 0 for one
    /// scale per tensor.
    #[arg(long, default_value_t = 32)]
    pub(crate) quant_block: usize,
}

impl QuantArgs {
    /// The options asked for, if any.
    pub(crate) fn options(&self) -> Result<Option<QuantOptions>> {
        let Some(bits) = &self.quantize else {
            return Ok(None);
        };
        let bits: QuantBits = bits.parse()?;
        let options = match self.quant_block {
            0 => QuantOptions::per_tensor(bits),
            block => QuantOptions::per_block(bits, block),
        };
        options.check()?;
        Ok(Some(options))
    }

    /// The model that `load` loads, with the linear weights of its layer stacks quantized
    /// as they are read when asked (so that loading never holds them in float), and a line
    /// on stderr that says what was done.
    pub(crate) fn load(
        &self,
        device: &Device,
        load: impl FnOnce() -> Result<AutoModel>,
    ) -> Result<AutoModel> {
        let Some(options) = self.options()? else {
            return load();
        };
        zoo_core::quant::check_device(&options, device)?;
        let model = zoo_core::checkpoint::quantized_while_loading(&options, load)?;
        let (model, report) = model.quantize(&options, device)?;
        report_quantized(&options, &report, device);
        Ok(model)
    }

    /// The model of `dir` with the adapter of `adapter` folded in, when one is given,
    /// quantized when asked: as it loads without an adapter ([`Self::load`]), after the
    /// adapter is folded into the float weights with one.
    pub(crate) fn load_adapted(
        &self,
        dir: &Path,
        adapter: Option<&Path>,
        device: &Device,
    ) -> Result<AutoModel> {
        match adapter {
            Some(_) => self.apply(
                AutoModel::from_pretrained_adapted(dir, adapter, device)?,
                device,
            ),
            None => self.load(device, || Ok(AutoModel::from_pretrained(dir, device)?)),
        }
    }

    /// `model`, quantized when asked, with a line on stderr that says what was done.
    pub(crate) fn apply(&self, model: AutoModel, device: &Device) -> Result<AutoModel> {
        let Some(options) = self.options()? else {
            return Ok(model);
        };
        let (model, report) = model.quantize(&options, device)?;
        report_quantized(&options, &report, device);
        Ok(model)
    }
}

pub(crate) fn report_quantized(
    options: &QuantOptions,
    report: &zoo_core::QuantReport,
    device: &Device,
) {
    let float = FloatType::of(device).unwrap_or_default();
    let mb = |b: usize| b as f64 / 1e6;
    let kept = match report.kept {
        0 => String::new(),
        n => format!(
            "; {n} kept whole, their widths not multiples of the block or of the values \
             the backend packs into one word"
        ),
    };
    eprintln!(
        "quantized {} weight tensors ({options}): {:.2} MB as {float}, {:.2} MB quantized{kept}",
        report.tensors,
        mb(report.bytes_before),
        mb(report.bytes_after)
    );
}

#[derive(clap::Args, Debug)]
struct TranslateArgs {
    /// The checkpoint folder, with its tokenizer.json, or a hub id (org/name).
    #[arg(long)]
    model: PathBuf,
    #[command(flatten)]
    quant: QuantArgs,
    /// The source text.
    #[arg(long)]
    text: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Beams of beam search; 1 is greedy.
    #[arg(long, default_value_t = 1)]
    num_beams: usize,
    /// Exponent of the length that divides a hypothesis's log-probability.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    length_penalty: f64,
    /// No n-gram of this size is generated twice (0 is off).
    #[arg(long, default_value_t = 0)]
    no_repeat_ngram_size: usize,
    /// Sampling temperature; 0 (the default) searches for the most likely output.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    temperature: f64,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A token forced as the first of the translation, by its text: mBART-50's target
    /// language code (`fr_XX`). The checkpoint's `forced_bos_token_id` otherwise.
    #[arg(long)]
    forced_bos: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Whatever was streamed ends its line before the error.
            let _ = std::io::stdout().flush();
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Turns the command's `--model` into a folder: a name that is no file or folder but is
/// written as a hub id becomes its snapshot in the HF cache, downloaded into it if need
/// be, with a progress bar per file (see `zoo_hub::hub`). Anything else is left for the
/// command, which reports a missing folder.
fn locate_model(command: &mut Command) -> Result<()> {
    let model = command.model_mut();
    if let Some(id) = model.to_str().filter(|id| hub::is_repo_id(id))
        && !model.exists()
    {
        *model = hub::snapshot(id, &HubOptions::from_env().with_progress(true))?;
    }
    Ok(())
}

impl Command {
    /// The `--model` of the command.
    fn model_mut(&mut self) -> &mut PathBuf {
        match self {
            Command::Info { model, .. }
            | Command::Forward { model, .. }
            | Command::Classify { model, .. }
            | Command::Merge { model, .. }
            | Command::Quantize { model, .. }
            | Command::Embed { model, .. }
            | Command::Tokenize { model, .. }
            | Command::FillMask { model, .. }
            | Command::ZeroShotImage { model, .. }
            | Command::Ner { model, .. } => model,
            Command::Qa(args) => &mut args.model,
            Command::Generate(args) => &mut args.model,
            Command::Chat(args) => &mut args.model,
            Command::Translate(args) => &mut args.model,
            Command::Train(args) => &mut args.model,
        }
    }
}

/// The float type to compute in when `--dtype` is not given: the type the checkpoint
/// stores (`WeightsFile::stored_float`), when `backend` computes in it; f32 otherwise,
/// with a note. zoo train and zoo merge compute in f32, and a folder whose weights cannot
/// be read gets f32 here and its error from the command.
fn stored_float(command: &mut Command, backend: &str) -> FloatType {
    if matches!(
        command,
        Command::Train(_) | Command::Merge { .. } | Command::Tokenize { .. }
    ) {
        return FloatType::F32;
    }
    let Ok(stored) = WeightsFile::find(command.model_mut()).and_then(|f| f.stored_float()) else {
        return FloatType::F32;
    };
    if stored == FloatType::F32 {
        return stored;
    }
    match zoo_device::select_by_name_as(backend, stored) {
        Ok(_) => stored,
        Err(zoo_device::DeviceError::Float { backend, .. }) => {
            eprintln!(
                "note: the checkpoint stores {stored} weights, which backend '{backend}' cannot \
                 compute in here; computing in f32 (--dtype sets the type)"
            );
            FloatType::F32
        }
        // An unknown or missing backend: the command reports it.
        Err(_) => FloatType::F32,
    }
}

fn run(mut cli: Cli) -> Result<()> {
    let asked: Option<FloatType> = cli
        .dtype
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(|e: zoo_device::UnknownFloatType| CliError::Input(e.to_string()))?;
    if let Some(float) = asked.filter(|f| *f != FloatType::F32)
        && matches!(cli.command, Command::Train(_) | Command::Merge { .. })
    {
        return Err(CliError::Input(format!(
            "--dtype {float} is for running a model; zoo train and zoo merge compute in f32"
        )));
    }
    locate_model(&mut cli.command)?;
    let float = match asked {
        Some(float) => float,
        None => stored_float(&mut cli.command, &cli.device),
    };
    let device = || -> Result<Device> { Ok(zoo_device::select_by_name_as(&cli.device, float)?) };
    match cli.command {
        Command::Info { model, check } => info(&model, check, &device()?),
        Command::Forward {
            model,
            input,
            output,
            adapter,
            quant,
        } => forward(
            &model,
            &input,
            &output,
            adapter.as_deref(),
            &quant,
            &device()?,
        ),
        Command::Generate(args) => text::generate_text(&args, &device()?),
        Command::Chat(args) => text::chat(&args, &device()?),
        Command::Translate(args) => translate(&args, &device()?),
        Command::Tokenize {
            model,
            text,
            target,
        } => tokenize(&model, &text, target),
        Command::FillMask { model, text, top_k } => fill_mask(&model, &text, top_k, &device()?),
        Command::Qa(args) => qa(&args, &device()?),
        Command::ZeroShotImage {
            model,
            image,
            labels,
            template,
        } => zero_shot_image(&model, &image, &labels, &template, &device()?),
        Command::Ner {
            model,
            text,
            aggregation,
        } => ner(&model, &text, &aggregation, &device()?),
        Command::Classify {
            model,
            image,
            text,
            top,
            adapter,
            quant,
        } => classify(
            &model,
            image.as_deref(),
            text.as_deref(),
            top,
            adapter.as_deref(),
            &quant,
            &device()?,
        ),
        Command::Embed {
            model,
            input,
            output,
            quant,
        } => embed(&model, &input, &output, &quant, &device()?),
        Command::Train(args) => train::train(&args, &cli.device, &device()?),
        Command::Quantize {
            model,
            scheme,
            block,
            output,
            overwrite,
        } => {
            let quant = QuantArgs {
                quantize: Some(scheme),
                quant_block: block,
            };
            train::quantize(&model, &quant, &output, overwrite, &device()?)
        }
        Command::Merge {
            model,
            adapter,
            output,
            overwrite,
        } => train::merge(&model, &adapter, &output, overwrite, &device()?),
    }
}

/// `a`, `a or b`, `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

fn dtype_name(dtype: burn::tensor::DType) -> String {
    use burn::tensor::DType;
    match dtype {
        DType::F64 => "float64".into(),
        DType::F32 => "float32".into(),
        DType::F16 => "float16".into(),
        DType::BF16 => "bfloat16".into(),
        DType::I64 => "int64".into(),
        DType::I32 => "int32".into(),
        DType::QFloat(scheme) => match scheme.block_size() {
            Some(block) => format!(
                "q{} in blocks of {}",
                scheme.size_bits_value(),
                block
                    .as_slice()
                    .iter()
                    .map(|b| *b as usize)
                    .product::<usize>()
            ),
            None => format!("q{} per tensor", scheme.size_bits_value()),
        },
        other => format!("{other:?}").to_lowercase(),
    }
}

fn info(dir: &Path, check: bool, device: &Device) -> Result<()> {
    // From the headers: the weights are checked against the architecture, not read.
    let detected = Detected::new(dir)?;
    let params = detected.inspect(device)?;
    let arch = detected.architecture;
    let file = WeightsFile::find(dir)?;
    let tensors = file.tensors()?;
    let dtypes: BTreeSet<String> = tensors.values().map(|t| dtype_name(t.dtype)).collect();
    let shown = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    outln!("model:        {}", dir.display());
    outln!("model_type:   {}", arch.model_type);
    outln!("architecture: {}", arch.name);
    outln!("parameters:   {}", zoo_core::thousands(params));
    let dtypes = dtypes.into_iter().collect::<Vec<_>>().join(", ");
    let computed = match FloatType::of(device) {
        Some(FloatType::F16) => "float16",
        Some(FloatType::BF16) => "bfloat16",
        _ => "float32",
    };
    if dtypes == computed {
        outln!("dtype:        {dtypes}");
    } else {
        let which = if dtypes.contains(" in blocks of ") || dtypes.contains(" per tensor") {
            "float tensors "
        } else {
            ""
        };
        outln!("dtype:        {dtypes} ({which}loaded as {computed})");
    }
    outln!(
        "weights:      {} ({} tensors)",
        shown(file.path()),
        tensors.len()
    );
    let width = tensors.keys().map(String::len).max().unwrap_or(0);
    for (name, t) in &tensors {
        outln!(
            "  {name:<width$}  {:<14} {}",
            format!("{:?}", t.shape.to_vec()),
            dtype_name(t.dtype)
        );
    }
    if check {
        let bad = file.non_finite()?;
        if !bad.is_empty() {
            let list: Vec<String> = bad.iter().map(ToString::to_string).collect();
            return Err(CliError::Input(format!(
                "{}: {} of {} tensors hold non-finite values: {}",
                shown(file.path()),
                bad.len(),
                tensors.len(),
                list.join("; ")
            )));
        }
        outln!(
            "check:        every value of the {} tensors is finite",
            tensors.len()
        );
    }
    Ok(())
}

fn forward(
    dir: &Path,
    input: &Path,
    output: &Path,
    adapter: Option<&Path>,
    quant: &QuantArgs,
    device: &Device,
) -> Result<()> {
    let parsed = json::forward_input(&json::read(input)?).map_err(|e| match e {
        CliError::Input(m) => CliError::File {
            path: input.to_path_buf(),
            message: m,
        },
        other => other,
    })?;
    let detected = Detected::new(dir)?;
    detected.check_input(&parsed)?;
    let model = match adapter {
        Some(a) => quant.apply(detected.load_adapted(a, device)?, device)?,
        None => quant.load(device, || Ok(detected.load(device)?))?,
    };
    let outputs = model.forward(&parsed, device)?;
    json::write_outputs(output, &outputs)?;
    let names: Vec<String> = outputs
        .iter()
        .map(|(name, _, shape)| format!("{name} {shape:?}"))
        .collect();
    eprintln!("wrote {}: {}", output.display(), names.join(", "));
    Ok(())
}

/// The error for a folder whose architecture cannot run `command` (`task`), which needs
/// `kind`: the model types that can, and what the folder holds.
pub(crate) fn not_for(
    command: &str,
    task: Task,
    kind: &str,
    dir: &Path,
    model: &AutoModel,
) -> CliError {
    let arch = model.architecture();
    CliError::Unsupported(format!(
        "{command} needs {kind} ({}); {} is {} ({})",
        model_types(Some(task)).join(", "),
        dir.display(),
        arch.model_type,
        arch.name
    ))
}

/// `zoo tokenize`: the folder's tokenizer.json or SentencePiece files through
/// [`LmTokenizer`], else its WordPiece `vocab.txt` through [`BertTokenizer`] (lowercased
/// as `tokenizer_config.json`'s `do_lower_case` says, true by default as in BERT).
fn tokenize(dir: &Path, text: &str, target: bool) -> Result<()> {
    if !dir.is_dir() {
        return Err(CliError::Input(format!(
            "{} is not a checkpoint folder",
            dir.display()
        )));
    }
    let ids: Vec<usize> = if !dir.join("tokenizer.json").is_file()
        && dir.join("vocab.txt").is_file()
    {
        let config = std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap_or_default();
        let lowercase = serde_json::from_str::<serde_json::Value>(&config)
            .ok()
            .and_then(|c| c["do_lower_case"].as_bool())
            .unwrap_or(true);
        let tok = BertTokenizer::from_vocab(dir.join("vocab.txt"), lowercase, usize::MAX)?;
        tok.encode(text)?
            .ids
            .iter()
            .map(|&id| id as usize)
            .collect()
    } else {
        let tok = LmTokenizer::from_pretrained(dir)?;
        if target {
            tok.encode_target(text)?
        } else {
            tok.encode(text)?
        }
    };
    outln!(
        "{}",
        serde_json::to_string(&ids).map_err(|e| CliError::Input(e.to_string()))?
    );
    Ok(())
}

/// `zoo fill-mask`: [`pipelines::fill_mask`], printed as HF's pipeline returns it: a
/// list of candidates for one mask, a list of such lists for several.
fn fill_mask(dir: &Path, text: &str, top_k: usize, device: &Device) -> Result<()> {
    let model = AutoModel::from_pretrained(dir, device)?;
    let tokenizer = LmTokenizer::from_pretrained(dir)?;
    let fills = pipelines::fill_mask(&model, &tokenizer, text, top_k, device)?;
    let rows: Vec<serde_json::Value> = fills
        .iter()
        .map(|row| {
            row.iter()
                .map(|f| {
                    serde_json::json!({
                        "score": f.score, "token": f.token,
                        "token_str": f.token_str, "sequence": f.sequence,
                    })
                })
                .collect()
        })
        .collect();
    print_one_or_list(rows)
}

/// The arguments of `zoo qa`: the pipeline's, with its defaults.
#[derive(clap::Args, Debug)]
struct QaArgs {
    /// The checkpoint folder, or a hub id (org/name).
    #[arg(long)]
    model: PathBuf,
    /// The question.
    #[arg(long)]
    question: String,
    /// The context to find the answer in.
    #[arg(
        long,
        required_unless_present = "context_file",
        conflicts_with = "context_file"
    )]
    context: Option<String>,
    /// A UTF-8 file that holds the context.
    #[arg(long)]
    context_file: Option<PathBuf>,
    /// How many answers, best first.
    #[arg(long, default_value_t = 1)]
    top_k: usize,
    /// The longest answer, in tokens.
    #[arg(long, default_value_t = 15)]
    max_answer_len: usize,
    /// Tokens per window, the question's included [default: the tokenizer's
    /// model_max_length, at most 384].
    #[arg(long)]
    max_seq_len: Option<usize>,
    /// Context tokens each window repeats from the one before [default: half the
    /// window, at most 128].
    #[arg(long)]
    doc_stride: Option<usize>,
    /// Let the empty answer compete.
    #[arg(long)]
    handle_impossible_answer: bool,
    /// Keep answers to token boundaries instead of widening them to whole words.
    #[arg(long)]
    no_align_to_words: bool,
}

/// `zoo qa`: [`pipelines::question_answering`], printed as HF's pipeline returns it:
/// `{"score", "start", "end", "answer"}`, or a list of them when there are several.
fn qa(args: &QaArgs, device: &Device) -> Result<()> {
    let context = match (&args.context, &args.context_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?,
        (None, None) => return Err(CliError::Input("give --context or --context-file".into())),
    };
    let options = pipelines::QaOptions {
        top_k: args.top_k,
        max_answer_len: args.max_answer_len,
        max_seq_len: args.max_seq_len,
        doc_stride: args.doc_stride,
        handle_impossible_answer: args.handle_impossible_answer,
        align_to_words: !args.no_align_to_words,
    };
    let model = AutoModel::from_pretrained(&args.model, device)?;
    let tokenizer = LmTokenizer::from_pretrained(&args.model)?;
    let answers = pipelines::question_answering(
        &model,
        &tokenizer,
        &args.question,
        &context,
        &options,
        device,
    )?;
    let rows: Vec<serde_json::Value> = answers
        .iter()
        .map(|a| {
            serde_json::json!({
                "score": a.score, "start": a.start, "end": a.end, "answer": a.answer,
            })
        })
        .collect();
    print_one_or_list(rows)
}

/// `zoo zero-shot-image`: [`pipelines::zero_shot_image`], printed as HF's pipeline
/// returns it: `{"score", "label"}` for each label, most probable first.
fn zero_shot_image(
    dir: &Path,
    image: &Path,
    labels: &[String],
    template: &str,
    device: &Device,
) -> Result<()> {
    let model = AutoModel::from_pretrained(dir, device)?;
    pipelines::check_zero_shot(&model, labels, template)?;
    let tokenizer = LmTokenizer::from_pretrained(dir)?;
    let scores = pipelines::zero_shot_image(&model, &tokenizer, image, labels, template, device)?;
    let out: Vec<serde_json::Value> = scores
        .iter()
        .map(|s| serde_json::json!({"score": s.score, "label": s.label}))
        .collect();
    outln!("{}", json_text(&serde_json::Value::Array(out))?);
    Ok(())
}

/// `zoo ner`: [`pipelines::token_classification`], printed with HF's keys (`entity`
/// and `index` per token, `entity_group` when aggregated).
fn ner(dir: &Path, text: &str, aggregation: &str, device: &Device) -> Result<()> {
    let aggregation: pipelines::Aggregation = aggregation.parse().map_err(CliError::Input)?;
    let model = AutoModel::from_pretrained(dir, device)?;
    let tokenizer = LmTokenizer::from_pretrained(dir)?;
    let entities = pipelines::token_classification(&model, &tokenizer, text, aggregation, device)?;
    let out: Vec<serde_json::Value> = entities
        .iter()
        .map(|e| match e.index {
            Some(index) => serde_json::json!({
                "entity": e.label, "score": e.score, "index": index,
                "word": e.word, "start": e.start, "end": e.end,
            }),
            None => serde_json::json!({
                "entity_group": e.label, "score": e.score,
                "word": e.word, "start": e.start, "end": e.end,
            }),
        })
        .collect();
    outln!("{}", json_text(&serde_json::Value::Array(out))?);
    Ok(())
}

/// Prints one value as itself and several as a list, as HF's pipelines return them.
fn print_one_or_list(mut rows: Vec<serde_json::Value>) -> Result<()> {
    let out = match rows.len() {
        1 => rows.remove(0),
        _ => serde_json::Value::Array(rows),
    };
    outln!("{}", json_text(&out)?);
    Ok(())
}

fn json_text(value: &serde_json::Value) -> Result<String> {
    serde_json::to_string(value).map_err(|e| CliError::Input(e.to_string()))
}

fn translate(args: &TranslateArgs, device: &Device) -> Result<()> {
    let loaded = args.quant.load(device, || {
        Ok(AutoModel::from_pretrained(&args.model, device)?)
    })?;
    let Some(model) = loaded.translator() else {
        let kind = "an encoder-decoder model";
        return Err(not_for(
            "translate",
            Task::Translate,
            kind,
            &args.model,
            &loaded,
        ));
    };
    run_translate(model, args)
}

fn run_translate(model: &dyn Translator, args: &TranslateArgs) -> Result<()> {
    let (tokenizer, source) = text::tokenize(&args.model, &args.text, "text")?;
    let (tokens, elapsed) = if args.temperature != 0.0 {
        if args.forced_bos.is_some() {
            return Err(CliError::Input(
                "--forced-bos applies to greedy and beam search, not to sampling (--temperature)"
                    .into(),
            ));
        }
        if args.temperature < 0.0 {
            return Err(CliError::Input(format!(
                "--temperature must be >= 0, got {}",
                args.temperature
            )));
        }
        let cfg = GenerationConfig::sampling(args.max_new_tokens, args.temperature, args.seed);
        let out = model.sample(&[source], &cfg)?;
        (out.tokens[0].clone(), out.elapsed)
    } else {
        let mut cfg = BeamConfig::new(args.num_beams, args.max_new_tokens)
            .with_length_penalty(args.length_penalty)
            .with_no_repeat_ngram_size(args.no_repeat_ngram_size);
        if let Some(token) = &args.forced_bos {
            let id = tokenizer.token_id(token).ok_or_else(|| {
                CliError::Input(format!(
                    "--forced-bos {token:?} is not a token of {}'s tokenizer",
                    args.model.display()
                ))
            })?;
            cfg = cfg.with_forced_bos(id);
        }
        let out = model.beam_search(&[source], &cfg)?;
        (out.tokens[0].clone(), out.elapsed)
    };
    outln!("{}", tokenizer.decode(&tokens)?);
    eprintln!(
        "[{} tokens in {:.2} s, {} beam{}]",
        tokens.len(),
        elapsed.as_secs_f64(),
        args.num_beams,
        if args.num_beams == 1 { "" } else { "s" }
    );
    Ok(())
}

fn classify(
    dir: &Path,
    image: Option<&Path>,
    text: Option<&str>,
    top: usize,
    adapter: Option<&Path>,
    quant: &QuantArgs,
    device: &Device,
) -> Result<()> {
    if top == 0 {
        return Err(CliError::Input("--top must be > 0, got 0".into()));
    }
    let model = quant.load_adapted(dir, adapter, device)?;
    let arch = model.architecture();
    let Some(classifier) = model.classifier() else {
        return Err(CliError::Unsupported(format!(
            "classify needs {}; {} is {}",
            one_of(&architecture_names(Task::Classify)),
            dir.display(),
            arch.name
        )));
    };
    let input = match (classifier.modality(), image, text) {
        (Modality::Image, Some(path), None) => ClassifyInput::Image(path),
        (Modality::Text, None, Some("")) => {
            return Err(CliError::Input("the text is empty".into()));
        }
        (Modality::Text, None, Some(text)) => ClassifyInput::Text(text),
        (Modality::Image, ..) => {
            return Err(CliError::Input(format!(
                "{} classifies images: use --image",
                arch.name
            )));
        }
        (Modality::Text, ..) => {
            return Err(CliError::Input(format!(
                "{} classifies text: use --text",
                arch.name
            )));
        }
    };
    let Classes { logits, labels } = classifier.classify(input, device)?;
    // A NaN would make every probability NaN, sorted to the top and printed as the answer.
    if let Some(class) = floats(logits.clone())?.iter().position(|p| p.is_nan()) {
        return Err(CliError::Input(format!(
            "the model's score for class {class} is NaN: its weights or inputs hold \
             non-finite values"
        )));
    }
    let probs = floats(softmax(logits, 1))?;
    let mut ranked: Vec<(usize, f32)> = probs.into_iter().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (class, p) in ranked.into_iter().take(top) {
        let label = labels
            .get(class)
            .cloned()
            .unwrap_or_else(|| format!("LABEL_{class}"));
        outln!("{p:.4}  {label}");
    }
    Ok(())
}

fn embed(
    dir: &Path,
    input: &Path,
    output: &Path,
    quant: &QuantArgs,
    device: &Device,
) -> Result<()> {
    let sentences = json::sentences(&json::read(input)?).map_err(|e| match e {
        CliError::Input(m) => CliError::File {
            path: input.to_path_buf(),
            message: m,
        },
        other => other,
    })?;
    if !dir.is_dir() {
        return Err(CliError::File {
            path: dir.to_path_buf(),
            message: "no such model folder".into(),
        });
    }
    let encoder = match quant.options()? {
        None => SentenceEncoder::from_pretrained(dir, device)?,
        Some(options) => {
            zoo_core::quant::check_device(&options, device)?;
            // Quantized as the weights are read, then counted.
            let (encoder, report) =
                zoo_core::checkpoint::quantized_while_loading(&options, || {
                    SentenceEncoder::from_pretrained(dir, device)
                })?
                .quantize(&options, device)?;
            report_quantized(&options, &report, device);
            encoder
        }
    };
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let embeddings = encoder.encode(&refs, 32, device)?;
    let shape = embeddings.dims().to_vec();
    let values = floats(embeddings)?;
    json::write_outputs(output, &[("embeddings", values, shape.clone())])?;
    eprintln!(
        "wrote {}: {} embeddings of {} values",
        output.display(),
        shape[0],
        shape[1]
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_lists_the_choices() {
        assert_eq!(one_of(&[]), "");
        assert_eq!(one_of(&["a"]), "a");
        assert_eq!(one_of(&["a", "b"]), "a or b");
        assert_eq!(one_of(&["a", "b", "c"]), "a, b or c");
    }
}
